//! Every limit of the system, named once.
//!
//! Anything that grows — pieces in a list, bytes in a message, entries in a directory reply,
//! connections, buffer memory — is bounded by a constant here. A request over a limit is
//! refused with [`crate::ErrorCode::LimitExceeded`] and a message naming the limit, never
//! with a crash or an allocation of a peer-chosen size. Related limits are tied together with
//! compile-time assertions at the bottom of the file.

/// Version of the frame header and message encodings; a peer with another version is refused.
pub const PROTOCOL_VERSION: u8 = 14;

/// Bytes in the fixed frame header that starts every message.
pub const HEADER_BYTES: usize = 24;

/// Largest encoded message body (the typed part of a frame, before any bulk bytes).
pub const MESSAGE_BODY_BYTES_MAX: u32 = 2 << 20;

/// Largest bulk payload carried by one request or reply (the pipelining unit of large
/// transfers: a client splits a larger share of one server into several requests).
pub const MESSAGE_BULK_BYTES_MAX: u32 = 16 << 20;

/// Most file pieces in one request to one I/O server.
pub const REQUEST_PIECES_MAX: u32 = 65_536;

/// Most pieces in one list given to the client API (memory or file list).
pub const LIST_PIECES_MAX: usize = 1 << 20;

/// Longest single piece (memory or file) accepted by the client API.
pub const PIECE_BYTES_MAX: u64 = 1 << 30;

/// Largest logical file offset + 1; keeps every offset computation far from `u64` overflow.
pub const FILE_BYTES_MAX: u64 = 1 << 62;

/// Smallest and largest stripe unit of a layout.
pub const STRIPE_UNIT_BYTES_MIN: u64 = 64;
/// Largest stripe unit of a layout.
pub const STRIPE_UNIT_BYTES_MAX: u64 = 1 << 30;
/// Default stripe unit (as PVFS: 64 KiB).
pub const STRIPE_UNIT_BYTES_DEFAULT: u64 = 64 << 10;

/// Smallest unit of an iod's unified cache a file may ask for (`Create::cache_unit_bytes`).
pub const CACHE_UNIT_BYTES_MIN: u32 = 4 << 10;
/// Largest unit of an iod's unified cache (and its default).
pub const CACHE_UNIT_BYTES_MAX: u32 = 64 << 10;

/// Checks a file's cache unit hint: 0 (none) or a power of two from [`CACHE_UNIT_BYTES_MIN`]
/// to [`CACHE_UNIT_BYTES_MAX`]; the error names the value and the range.
pub fn check_cache_unit_bytes(unit_bytes: u64) -> Result<(), String> {
    let in_range =
        (u64::from(CACHE_UNIT_BYTES_MIN)..=u64::from(CACHE_UNIT_BYTES_MAX)).contains(&unit_bytes);
    if unit_bytes == 0 || (in_range && unit_bytes.is_power_of_two()) {
        Ok(())
    } else {
        Err(format!(
            "cache unit of {unit_bytes} bytes is not a power of two from {CACHE_UNIT_BYTES_MIN} to {CACHE_UNIT_BYTES_MAX} bytes"
        ))
    }
}

/// The cache unit of a striped file created without a hint: its stripe unit, rounded down to
/// a power of two and clamped to [`CACHE_UNIT_BYTES_MIN`]..; 0 (the iod's default unit) for
/// stripe units of [`CACHE_UNIT_BYTES_MAX`] and more. An object holds its stripe units back
/// to back, and a file striped finely is one read and written in small pieces: units of its
/// stripe unit fill and write back what those accesses touch, not 64 KiB around each.
pub fn cache_unit_for_stripe(stripe_unit_bytes: u64) -> u32 {
    if stripe_unit_bytes >= u64::from(CACHE_UNIT_BYTES_MAX) {
        return 0;
    }
    let floor = 1u64 << stripe_unit_bytes.max(1).ilog2();
    u32::try_from(floor).map_or(0, |floor| floor.max(CACHE_UNIT_BYTES_MIN))
}

/// Most I/O servers in one cluster and in one layout.
pub const SERVERS_MAX: usize = 256;

/// Longest path, in bytes.
pub const PATH_BYTES_MAX: usize = 4096;
/// Longest name of one path component, in bytes.
pub const NAME_BYTES_MAX: usize = 255;
/// Most components in one path.
pub const PATH_DEPTH_MAX: usize = 256;

/// Most directory entries in one readdir reply; a client pages through larger directories.
pub const READDIR_ENTRIES_MAX: u32 = 1024;

/// Longest capability carried by an I/O request.
pub const CAPABILITY_BYTES_MAX: usize = 256;

/// Bytes of an HMAC-SHA-256 tag.
pub const MAC_BYTES: usize = 32;

/// Bytes of a handshake nonce.
pub const NONCE_BYTES: usize = 32;

/// Most supplementary groups in a credential (a caller in more is signed with the first ones;
/// NFS's AUTH_SYS carries 16).
pub const CREDENTIAL_GROUPS_MAX: usize = 64;

/// Longest host name in a credential.
pub const HOST_NAME_BYTES_MAX: usize = 255;

/// Longest error message carried in an error reply.
pub const ERROR_MESSAGE_BYTES_MAX: usize = 4096;

/// Most memory pieces passed to one `writev`/`readv` call (Linux `IOV_MAX`).
pub const IOV_PIECES_MAX: usize = 1024;

/// Most concurrent client connections an I/O server or the metadata server accepts.
pub const CONNECTIONS_MAX: usize = 1024;

/// Bulk-buffer memory an I/O server may hold for requests in flight, over all connections.
pub const IOD_BUFFER_BYTES_MAX: u64 = 256 << 20;

/// Most of the iod's bulk-buffer budget one uid holds at once: a user whose requests stall
/// (data that never comes, replies never read) leaves the rest to the others.
pub const IOD_BUFFER_BYTES_PER_UID_MAX: u64 = IOD_BUFFER_BYTES_MAX / 2;

/// Most local objects an I/O server keeps open at once.
pub const IOD_OPEN_OBJECTS_MAX: usize = 512;

/// Most requests a server works on at once (the rest wait in their connections). A request
/// holds its slot from the end of its frame to its reply: never while its peer sends slowly
/// or reads the reply slowly.
pub const SERVER_REQUESTS_INFLIGHT_MAX: usize = 64;

/// How long a peer may take to finish a frame it has begun (the rest of a header, a body, a
/// request's bulk, a `Data` frame), or to take a reply, beyond its bytes at
/// `PEER_BYTES_PER_S_MIN`; past it the connection is dropped.
pub const FRAME_TIMEOUT_MS: u64 = 10_000;

/// The slowest rate at which a peer must send a frame's bytes or take a reply's.
pub const PEER_BYTES_PER_S_MIN: u64 = 1 << 20;

/// How long a read lease on a file's object lasts (`LeaseAcquire`), unless the iod is
/// started with another `--lease-ms`: an unresponsive client holds up a write at most this
/// long.
pub const LEASE_MS_DEFAULT: u32 = 10_000;
/// The shortest and longest lease an iod may be configured with.
pub const LEASE_MS_MIN: u32 = 100;
/// See [`LEASE_MS_MIN`].
pub const LEASE_MS_MAX: u32 = 60_000;
/// Most clients with a callback channel (`LeaseListen`) on one iod.
pub const LEASE_LISTENERS_MAX: usize = 256;
/// Most read leases one iod holds at once, over all objects and clients.
pub const LEASES_MAX: usize = 65_536;
/// Most blocks one `DemoteOffer` or `Demote` names.
pub const DEMOTE_PIECES_MAX: usize = 256;
/// Most revocations queued on one callback channel.
pub const LEASE_REVOCATIONS_QUEUED_MAX: usize = 1024;

/// How long a connection may stay idle (no request begun) before the server closes it; when
/// `CONNECTIONS_MAX` is reached, the longest idle one is closed at once for a new one.
pub const IDLE_CONNECTION_TIMEOUT_MS: u64 = 15 * 60 * 1000;

/// A request's bulk up to this size is read before the request takes a work slot, so a peer
/// that never sends it holds no slot.
pub const BULK_PREFETCH_BYTES_MAX: u32 = 64 << 10;

/// Request bodies over `BULK_PREFETCH_BYTES_MAX` bytes a server holds at once, over all
/// connections (smaller ones are bounded by `CONNECTIONS_MAX`): a body waits for room before
/// it is read, so peers sending large bodies slowly cannot make a server allocate more.
pub const SERVER_BODY_BYTES_MAX: u64 = 128 << 20;

/// Most runs in one period of a pattern layout (all servers together).
pub const PATTERN_RUNS_MAX: usize = 1 << 16;

/// Most views an I/O server keeps declared; past it the least recently used is dropped and
/// its client declares it again on next use.
pub const IOD_VIEWS_MAX: usize = 4096;
/// Most pieces of the share an iod keeps per view for the view's next request of the same
/// range (16 bytes each: 16 KiB a view, so at most 64 MiB over `IOD_VIEWS_MAX` views). A
/// larger share is walked again each time; its walk is small beside its transfer.
pub const IOD_VIEW_KEPT_PIECES_MAX: usize = 1024;
/// Most bytes of declared views an I/O server keeps, each view counted as its `DeclareView`
/// body (its encoded layout and file type, up to 2 MiB) plus the most its kept share takes;
/// past it the least recently used views are dropped, as past `IOD_VIEWS_MAX`.
pub const IOD_VIEWS_BYTES_MAX: u64 = 256 << 20;

/// Most layout segments (of all servers) one datatype or view request may span: the work a
/// server does to find its share of the request's range. Clients cut requests at half of it.
pub const REQUEST_SEGMENTS_MAX: u64 = 1 << 22;

/// Most stream ranges a datatype or view request may name as the ones holding the receiving
/// server's bytes (16 bytes each on the wire). A client whose request would need more sends
/// none, and the server walks the request's whole range.
pub const STREAM_RANGES_MAX: usize = 4096;

/// Most runs of a view's file type compared with a pattern layout's to find that the view is
/// one server's bytes in order (`access::MatchedView::of`), once per view on each side; a
/// type with more is walked on every request as any other.
pub const MATCH_RUNS_MAX: usize = 1 << 16;

/// Largest buffer an I/O server reads one sieving chunk into (seed 001 §3.3; ROMIO's
/// `ind_rd_buffer_size` is also 4 MiB). Pieces further apart than the model's break-even gap
/// start a new chunk.
pub const SIEVE_CHUNK_BYTES_MAX: u64 = 4 << 20;

/// Most storage operations in one io_uring submission; a larger batch is submitted in
/// several rounds.
pub const URING_BATCH_ENTRIES_MAX: u32 = 256;

/// Most handles one `HandlesLive` request asks about (and its reply lists): an iod's orphan
/// sweep pages through its objects this many at a time.
pub const HANDLES_LIVE_MAX: usize = 4096;

/// Longest reason an `UnlinkReply` gives for one object it could not remove (a longer one is
/// cut at a character boundary).
pub const OBJECT_LEFT_REASON_BYTES_MAX: usize = 512;

/// Most byte-range locks (held and waited for) the mds keeps, over all files.
pub const RANGE_LOCKS_MAX: usize = 65_536;

/// Range locks one uid may hold or wait for at once, over all files: a share of
/// [`RANGE_LOCKS_MAX`], so one user cannot fill the table and lock everyone else out.
pub const RANGE_LOCKS_PER_UID_MAX: usize = RANGE_LOCKS_MAX / 16;

/// Longest a `LockRange` request may wait for its lock, in milliseconds.
pub const RANGE_LOCK_WAIT_MS_MAX: u32 = 60_000;

/// Longest a range lock may be held before the mds drops it, in milliseconds.
pub const RANGE_LOCK_LEASE_MS_MAX: u32 = 600_000;

/// Most memory segments one request may describe for a one-sided transfer
/// ([`crate::TransferMode::Remote`]); a client with more slices packs them instead.
pub const REMOTE_SEGMENTS_MAX: usize = 1 << 18;

/// Most bytes of a remote-memory descriptor (the endpoint name of a fabric peer).
pub const REMOTE_ENDPOINT_BYTES_MAX: usize = 256;

/// Longest one one-sided copy between a same-host client's memory and the server may take, in
/// milliseconds (a pipeline unit, or a read sent from the object's pages). A copy waits when
/// the client's memory must be faulted in from a slow file, a FUSE mount (Tessera's own, whose
/// daemon asks this very server) or userfaultfd; past this the server releases the extent it
/// holds, answers an error and closes the connection, and the copy finishes on its own thread.
pub const REMOTE_COPY_TIMEOUT_MS: u64 = 5_000;

/// Most one-sided copies of one uid that may be stuck past `REMOTE_COPY_TIMEOUT_MS` at once
/// (each holds one server thread and the buffer it copies). A uid at the limit gets no new
/// one-sided connection: its data moves in messages until its copies end.
pub const STALLED_COPIES_PER_UID_MAX: usize = 4;

/// Bytes a server moves per step of a pipelined one-sided transfer: while one unit is copied
/// between the client's memory and the server's buffer, the previous one is in storage
/// (seed 001 Fig. 2.12).
pub const PIPELINE_UNIT_BYTES: u64 = 1 << 20;

/// Most bytes one iod holds for one open server-directed collective (the data of every
/// participant of a write, the union read plus every participant's answer of a read). A
/// participant whose data would pass it fails the whole collective.
pub const COLLECTIVE_BYTES_MAX: u64 = 32 << 20;

/// Most server-directed collectives one iod keeps open (waiting for participants) at once.
pub const IOD_COLLECTIVES_OPEN_MAX: usize = 8;

/// Most participants of one server-directed collective on one iod. Each waiting participant
/// holds one of the server's `SERVER_REQUESTS_INFLIGHT_MAX` permits, so a collective must
/// leave permits for the participants still to come and for other requests.
pub const COLLECTIVE_PARTICIPANTS_MAX: u32 = 32;

/// Longest an iod keeps a server-directed collective open for missing participants, in
/// milliseconds; then every participant that arrived gets an error naming the collective.
pub const COLLECTIVE_WAIT_MS_MAX: u32 = 60_000;

/// Failed collectives an iod remembers, so that a participant arriving after the failure gets
/// the same error at once instead of waiting out its own timeout.
pub const IOD_COLLECTIVES_FAILED_KEPT: usize = 64;

// The collectives an iod may hold at once fit its bulk-buffer budget, and one participant's
// largest request fits a collective.
const _: () =
    assert!(COLLECTIVE_BYTES_MAX * IOD_COLLECTIVES_OPEN_MAX as u64 <= IOD_BUFFER_BYTES_MAX);
const _: () = assert!(COLLECTIVE_BYTES_MAX >= MESSAGE_BULK_BYTES_MAX as u64);
// Waiting participants never take every request permit.
const _: () = assert!((COLLECTIVE_PARTICIPANTS_MAX as usize) * 2 <= SERVER_REQUESTS_INFLIGHT_MAX);

/// Bytes of a connection's eager buffer (`RemoteAccess::Shared`): requests up to this size
/// move with one copy through it (seed 001 §2.5.3: Fast RDMA below 64 KiB).
pub const EAGER_BYTES_MAX: u64 = 64 << 10;

/// Largest shared arena (`local::arena`) a client makes and a server maps: address space of
/// the server, not its memory (the client allocates every page before it shares the arena, so
/// they are charged to the client).
pub const ARENA_BYTES_MAX: u64 = 8 << 30;

/// Shared regions (the eager buffer and arenas) one connection keeps mapped; the least
/// recently used is unmapped past it.
pub const SHARED_REGIONS_PER_CONNECTION_MAX: usize = 8;

/// Bytes of shared regions one uid (as the kernel reports the peer of a same-host socket) may
/// have mapped by one server at once, over all its connections: each mapping counts from its
/// `ShareRegion` until it is unmapped (least recently used, replaced, or its connection
/// closed). Past it a share is refused and the client moves that data another way. It bounds
/// the server's address space, and its page tables, taken by one user's regions.
pub const SHARED_BYTES_PER_UID_MAX: u64 = 16 << 30;

// A descriptor with the most segments (24 bytes each) fits one frame's bulk.
const _: () = assert!(
    REMOTE_SEGMENTS_MAX as u64 * 24 + REMOTE_ENDPOINT_BYTES_MAX as u64 + 64
        <= MESSAGE_BULK_BYTES_MAX as u64
);

// One uid's share holds two of the largest requests (bulk and a sieving chunk each).
const _: () = assert!(
    IOD_BUFFER_BYTES_PER_UID_MAX >= 2 * (MESSAGE_BULK_BYTES_MAX as u64 + SIEVE_CHUNK_BYTES_MAX)
);
const _: () = assert!(IOD_BUFFER_BYTES_PER_UID_MAX < IOD_BUFFER_BYTES_MAX);

/// Most memory a server holds for its peers, attackers included: bodies being read (one of at
/// most `BULK_PREFETCH_BYTES_MAX` per connection, larger ones within `SERVER_BODY_BYTES_MAX`),
/// small bulk read ahead of a work slot (at most `BULK_PREFETCH_BYTES_MAX` per connection), and
/// on an iod the bulk-buffer budget (docs/ARCHITECTURE.md §5.2): 512 MiB.
pub const SERVER_PEER_BYTES_MAX: u64 = 2 * CONNECTIONS_MAX as u64 * BULK_PREFETCH_BYTES_MAX as u64
    + SERVER_BODY_BYTES_MAX
    + IOD_BUFFER_BYTES_MAX;

// A request with the most pieces must fit the body limit (16 bytes a piece, plus the fixed part).
const _: () = assert!(
    REQUEST_PIECES_MAX as u64 * 16 + CAPABILITY_BYTES_MAX as u64 + 64
        <= MESSAGE_BODY_BYTES_MAX as u64
);
// The largest body fits the body budget, several times over.
const _: () = assert!(MESSAGE_BODY_BYTES_MAX as u64 * 16 <= SERVER_BODY_BYTES_MAX);
// One request's bulk must fit the server's buffer budget, several times over.
const _: () = assert!(MESSAGE_BULK_BYTES_MAX as u64 * 4 <= IOD_BUFFER_BYTES_MAX);
// A readdir reply with the most entries of the longest names must fit one body.
const _: () = assert!(
    (READDIR_ENTRIES_MAX as u64) * (NAME_BYTES_MAX as u64 + 16) <= MESSAGE_BODY_BYTES_MAX as u64
);
// A `HandlesLive` request or reply with the most handles fits one body.
const _: () = assert!(HANDLES_LIVE_MAX as u64 * 8 + 1024 <= MESSAGE_BODY_BYTES_MAX as u64);
// An `UnlinkReply` naming every server with the longest reasons fits one body.
const _: () = assert!(
    SERVERS_MAX as u64 * (OBJECT_LEFT_REASON_BYTES_MAX as u64 + 8) <= MESSAGE_BODY_BYTES_MAX as u64
);
const _: () = assert!(STRIPE_UNIT_BYTES_MIN <= STRIPE_UNIT_BYTES_DEFAULT);
const _: () = assert!(STRIPE_UNIT_BYTES_DEFAULT <= STRIPE_UNIT_BYTES_MAX);
const _: () = assert!(
    CACHE_UNIT_BYTES_MIN.is_power_of_two()
        && CACHE_UNIT_BYTES_MAX.is_power_of_two()
        && CACHE_UNIT_BYTES_MIN <= CACHE_UNIT_BYTES_MAX
);
const _: () = assert!(SERVERS_MAX <= u16::MAX as usize + 1);
const _: () = assert!(PIECE_BYTES_MAX < FILE_BYTES_MAX);
// Sixteen users may each hold their whole share of range locks at once.
const _: () =
    assert!(RANGE_LOCKS_PER_UID_MAX >= 1 && RANGE_LOCKS_PER_UID_MAX * 16 <= RANGE_LOCKS_MAX);
// A sieving chunk buffer is a small part of the buffer budget.
const _: () = assert!(SIEVE_CHUNK_BYTES_MAX * 16 <= IOD_BUFFER_BYTES_MAX);
// A uid may share a largest arena next to an eager buffer on every connection a server takes.
const _: () =
    assert!(ARENA_BYTES_MAX + CONNECTIONS_MAX as u64 * EAGER_BYTES_MAX <= SHARED_BYTES_PER_UID_MAX);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_unit_hints_are_powers_of_two_in_range() {
        for good in [0, 4096, 8192, 16384, 32768, 65536] {
            assert_eq!(check_cache_unit_bytes(good), Ok(()), "{good}");
        }
        for bad in [1, 2048, 4095, 12288, 131_072, u64::MAX] {
            let error = check_cache_unit_bytes(bad).unwrap_err();
            assert!(error.contains(&bad.to_string()), "{error}");
            assert!(error.contains("4096 to 65536"), "{error}");
        }
    }

    #[test]
    fn unhinted_striped_files_take_their_stripe_unit_clamped() {
        assert_eq!(cache_unit_for_stripe(64), 4096);
        assert_eq!(cache_unit_for_stripe(4096), 4096);
        assert_eq!(cache_unit_for_stripe(16384), 16384);
        assert_eq!(cache_unit_for_stripe(24576), 16384);
        assert_eq!(cache_unit_for_stripe(65535), 32768);
        assert_eq!(cache_unit_for_stripe(65536), 0);
        assert_eq!(cache_unit_for_stripe(1 << 20), 0);
    }
}

#[cfg(test)]
mod doc_tests {
    use super::PROTOCOL_VERSION;

    /// Every place the docs state the protocol version says the code's.
    #[test]
    fn the_docs_state_the_current_protocol_version() {
        let read = |name: &str| {
            let path = format!("{}/../../docs/{name}", env!("CARGO_MANIFEST_DIR"));
            std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path}: {err}"))
        };
        let protocol = read("PROTOCOL.md");
        let architecture = read("ARCHITECTURE.md");
        let version = PROTOCOL_VERSION;
        for (doc, text, stated) in [
            (
                "PROTOCOL.md",
                &protocol,
                format!("# Tessera wire protocol (version {version})"),
            ),
            (
                "PROTOCOL.md",
                &protocol,
                format!("`PROTOCOL_VERSION` = `{version}`"),
            ),
            (
                "PROTOCOL.md",
                &protocol,
                format!("| `PROTOCOL_VERSION` | {version} |"),
            ),
            (
                "ARCHITECTURE.md",
                &architecture,
                format!("| `PROTOCOL_VERSION` | {version} |"),
            ),
        ] {
            assert!(text.contains(&stated), "{doc} does not say {stated:?}");
        }
        let stale = format!("| `PROTOCOL_VERSION` | {} |", version - 1);
        assert!(!protocol.contains(&stale) && !architecture.contains(&stale));
        assert!(
            protocol.contains(&format!(
                "{version:02x}{}version {version}\n",
                " ".repeat(48)
            )),
            "PROTOCOL.md's example frame is of another version"
        );
    }
}
