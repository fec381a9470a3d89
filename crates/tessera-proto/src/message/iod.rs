//! The I/O server's requests and replies: list, datatype, view and collective I/O, leases,
//! DEMOTE, and the object life cycle the mds drives.

use tessera_dtype::Datatype;

use super::{Capability, Empty, Opcode, Piece, Request, StoragePlan, TransferMode};
use crate::codec::{Decoder, Encoder, Wire};
use crate::error::WireError;
use crate::layout::{Layout, StripeLayout};
use crate::limits::DEMOTE_PIECES_MAX;

wire_struct! {
    /// Creates the local object of a handle, empty. An existing object is left as it is and
    /// the request answered `Exists`: a create never empties or replaces an object.
    pub struct ObjectCreate {
        /// File handle.
        pub handle: u64,
        /// The namespace id of the mds asking; an iod of another namespace refuses.
        pub namespace: u64,
        /// Unit of the iod's unified cache for the object, kept with it: a power of two from
        /// `CACHE_UNIT_BYTES_MIN` to `CACHE_UNIT_BYTES_MAX`, or 0 for the iod's default.
        pub cache_unit_bytes: u32,
    }
}
request!(ObjectCreate => ObjectCreate, Empty);

wire_struct! {
    /// Creates the local objects of many handles at once, empty, each as [`ObjectCreate`]
    /// would: the mds's objects made ahead of creates. An existing object is left as it is and
    /// its handle left out of the reply; a storage error ends the request (the objects made
    /// before it stay, orphans for the next sweep).
    pub struct ObjectCreateMany {
        /// The namespace id of the mds asking; an iod of another namespace refuses.
        pub namespace: u64,
        /// Unit of the iod's unified cache for every object, as in [`ObjectCreate`].
        pub cache_unit_bytes: u32,
        /// The handles, at most `handles_live_max`.
        pub handles: Vec<u64>,
    }
}
request!(ObjectCreateMany => ObjectCreateMany, ObjectCreateManyReply);

wire_struct! {
    /// The handles of an [`ObjectCreateMany`] whose objects this request made, in the order
    /// asked.
    pub struct ObjectCreateManyReply {
        /// Handles whose objects were made (not those that were there).
        pub created: Vec<u64>,
    }
}

wire_struct! {
    /// Removes the local object of a handle.
    pub struct ObjectRemove {
        /// File handle.
        pub handle: u64,
        /// The namespace id of the mds asking; an iod of another namespace refuses.
        pub namespace: u64,
    }
}
request!(ObjectRemove => ObjectRemove, Empty);

wire_struct! {
    /// Asks for the size of a local object.
    pub struct ObjectStat {
        /// File handle.
        pub handle: u64,
        /// Access right from a client (read or write); empty from the mds.
        pub capability: Capability,
    }
}

wire_struct! {
    /// Size and modification time of a local object.
    pub struct ObjectStatReply {
        /// Bytes in the local object.
        pub size: u64,
        /// Last modification, ns since the Unix epoch.
        pub mtime_ns: u64,
    }
}
request!(ObjectStat => ObjectStat, ObjectStatReply);

wire_struct! {
    /// Sets the size of a local object.
    pub struct ObjectTruncate {
        /// File handle.
        pub handle: u64,
        /// The namespace id of the mds asking; an iod of another namespace refuses.
        pub namespace: u64,
        /// New local size in bytes.
        pub size: u64,
    }
}
request!(ObjectTruncate => ObjectTruncate, Empty);

wire_struct! {
    /// Flushes a local object to stable storage.
    pub struct ObjectSync {
        /// File handle.
        pub handle: u64,
        /// Access right from a client (write); empty from the mds.
        pub capability: Capability,
    }
}
request!(ObjectSync => ObjectSync, Empty);

wire_struct! {
    /// Writes local pieces. The data follows as bulk (gather, pack) or as one `Data` frame per
    /// piece (multiple), in piece order. Overlapping pieces apply in list order.
    pub struct Write {
        /// File handle.
        pub handle: u64,
        /// Access right, signed by the mds.
        pub capability: Capability,
        /// How the data travels.
        pub mode: TransferMode,
        /// How the server turns the pieces into storage calls.
        pub storage: StoragePlan,
        /// Local pieces, in data order.
        pub pieces: Vec<Piece>,
    }
}

wire_struct! {
    /// The outcome of a write or read on one server.
    pub struct IoReply {
        /// Bytes moved.
        pub bytes: u64,
        /// Storage calls the server made: one per merged piece, per batch entry, or per
        /// sieving chunk (a read-modify-write counts its read and its write).
        pub storage_pieces: u32,
        /// Bytes the server read from and wrote to storage (more than `bytes` when it sieved).
        pub storage_bytes: u64,
        /// The plan the server followed.
        pub plan: StoragePlan,
    }
}
request!(Write => Write, IoReply);

wire_struct! {
    /// Reads local pieces. The data comes back as bulk of the reply (gather, pack) or as one
    /// `Data` frame per piece after it (multiple), in piece order. Bytes past the end of the
    /// object read as zeros.
    pub struct Read {
        /// File handle.
        pub handle: u64,
        /// Access right, signed by the mds.
        pub capability: Capability,
        /// How the data travels.
        pub mode: TransferMode,
        /// How the server turns the pieces into storage calls.
        pub storage: StoragePlan,
        /// Local pieces, in data order.
        pub pieces: Vec<Piece>,
    }
}
request!(Read => Read, IoReply);

/// Where a file type lies: the stream of `filetype` tiled from byte `displacement` of the
/// file, over the file's layout, seen from the server at `position`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileType {
    /// The file's layout.
    pub layout: Layout,
    /// Position of the receiving server in the layout.
    pub position: u16,
    /// The type tiled over the file.
    pub filetype: Datatype,
    /// File offset of the first instance.
    pub displacement: u64,
}

impl Default for FileType {
    fn default() -> Self {
        Self {
            layout: Layout::Stripe(StripeLayout {
                stripe_unit_bytes: crate::limits::STRIPE_UNIT_BYTES_DEFAULT,
                servers: vec![0],
            }),
            position: 0,
            filetype: Datatype::byte(),
            displacement: 0,
        }
    }
}

impl Wire for FileType {
    fn encode(&self, encoder: &mut Encoder) {
        self.layout.encode(encoder);
        encoder.u16(self.position);
        self.filetype.encode(encoder);
        encoder.u64(self.displacement);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let layout = Layout::decode(decoder)?;
        let position = decoder.u16()?;
        if usize::from(position) >= layout.servers().len() {
            return Err(WireError::BadValue {
                field: "server position",
                value: u64::from(position),
            });
        }
        let filetype = Datatype::decode(decoder)?;
        let displacement = decoder.u64()?;
        Ok(Self {
            layout,
            position,
            filetype,
            displacement,
        })
    }
}

wire_struct! {
    /// Writes this server's share of stream bytes `[start, end)` of a file type. The data
    /// follows as for `Write`, in stream order.
    pub struct WriteType {
        /// File handle.
        pub handle: u64,
        /// Access right, signed by the mds.
        pub capability: Capability,
        /// How the data travels.
        pub mode: TransferMode,
        /// How the server turns the pieces into storage calls.
        pub storage: StoragePlan,
        /// The file type.
        pub file: FileType,
        /// First stream byte.
        pub start: u64,
        /// One past the last stream byte.
        pub end: u64,
        /// The stream ranges inside `[start, end)` that hold this server's bytes, in stream
        /// order, as (first stream byte, length); the server walks only these. Empty: the
        /// whole range. At most `stream_ranges_max`.
        pub ranges: Vec<Piece>,
        /// Local pieces the client found in its share (the `Data` frames that follow in the
        /// multiple mode); the server checks its own walk against it.
        pub pieces: u32,
    }
}
request!(WriteType => WriteType, IoReply);

wire_struct! {
    /// Reads this server's share of stream bytes `[start, end)` of a file type; the data
    /// comes back as for `Read`, in stream order.
    pub struct ReadType {
        /// File handle.
        pub handle: u64,
        /// Access right, signed by the mds.
        pub capability: Capability,
        /// How the data travels.
        pub mode: TransferMode,
        /// How the server turns the pieces into storage calls.
        pub storage: StoragePlan,
        /// The file type.
        pub file: FileType,
        /// First stream byte.
        pub start: u64,
        /// One past the last stream byte.
        pub end: u64,
        /// The stream ranges inside `[start, end)` that hold this server's bytes, in stream
        /// order, as (first stream byte, length); the server walks only these. Empty: the
        /// whole range. At most `stream_ranges_max`.
        pub ranges: Vec<Piece>,
    }
}
request!(ReadType => ReadType, IoReply);

wire_struct! {
    /// Declares a view under `view_id`. Declaring an id again with the same file type is
    /// harmless; with another one it is refused.
    pub struct DeclareView {
        /// File handle.
        pub handle: u64,
        /// Access right, signed by the mds (read or write).
        pub capability: Capability,
        /// Chosen by the client, unique per view.
        pub view_id: u64,
        /// The view's file type.
        pub file: FileType,
    }
}
request!(DeclareView => DeclareView, Empty);

wire_struct! {
    /// Writes this server's share of view bytes `[start, end)`; data as for `Write`.
    pub struct WriteView {
        /// File handle.
        pub handle: u64,
        /// Access right, signed by the mds.
        pub capability: Capability,
        /// How the data travels.
        pub mode: TransferMode,
        /// How the server turns the pieces into storage calls.
        pub storage: StoragePlan,
        /// A declared view.
        pub view_id: u64,
        /// First view byte.
        pub start: u64,
        /// One past the last view byte.
        pub end: u64,
        /// The view ranges holding this server's bytes, as in `WriteType`.
        pub ranges: Vec<Piece>,
        /// Local pieces the client found in its share, as in `WriteType`.
        pub pieces: u32,
    }
}
request!(WriteView => WriteView, IoReply);

wire_struct! {
    /// Reads this server's share of view bytes `[start, end)`; data as for `Read`.
    pub struct ReadView {
        /// File handle.
        pub handle: u64,
        /// Access right, signed by the mds.
        pub capability: Capability,
        /// How the data travels.
        pub mode: TransferMode,
        /// How the server turns the pieces into storage calls.
        pub storage: StoragePlan,
        /// A declared view.
        pub view_id: u64,
        /// First view byte.
        pub start: u64,
        /// One past the last view byte.
        pub end: u64,
        /// The view ranges holding this server's bytes, as in `WriteType`.
        pub ranges: Vec<Piece>,
    }
}
request!(ReadView => ReadView, IoReply);

wire_struct! {
    /// Forgets a view (unknown ids are ignored).
    pub struct ReleaseView {
        /// File handle.
        pub handle: u64,
        /// Access right, signed by the mds (read or write).
        pub capability: Capability,
        /// The view.
        pub view_id: u64,
    }
}
request!(ReleaseView => ReleaseView, Empty);

wire_struct! {
    /// Names the server-directed collective a request takes part in (seed 004, ECIO). The
    /// participants of one collective agree on `id` beforehand; an iod gathers the requests of
    /// (`id`, `round`) until `participants` distinct ranks have arrived, then serves them all
    /// at once.
    pub struct CollectiveTag {
        /// Chosen by the participants together, unique per collective call.
        pub id: u64,
        /// Which of the collective's request rounds on this server (0, 1, ...): a participant
        /// whose share does not fit one request sends one request per round.
        pub round: u32,
        /// The sender's rank among the participants of the call.
        pub rank: u32,
        /// How many participants send a request of this round to this server (at most
        /// `collective_participants_max`).
        pub participants: u32,
        /// How long the server waits for the missing participants, in milliseconds (1 to
        /// `collective_wait_ms_max`).
        pub wait_ms: u32,
    }
}

wire_struct! {
    /// One participant's part of a server-directed collective write: this server's share of
    /// stream bytes `[start, end)` of a file type, as in `WriteType`, with the data following
    /// as for `Write`. The server holds it until every participant of the tag has arrived,
    /// then writes all their pieces merged by file offset and answers each.
    pub struct WriteCollective {
        /// File handle.
        pub handle: u64,
        /// Access right, signed by the mds.
        pub capability: Capability,
        /// How the data travels.
        pub mode: TransferMode,
        /// How the server turns the merged runs into storage calls.
        pub storage: StoragePlan,
        /// The sender's file type.
        pub file: FileType,
        /// First stream byte.
        pub start: u64,
        /// One past the last stream byte.
        pub end: u64,
        /// The stream ranges holding this server's bytes, as in `WriteType`.
        pub ranges: Vec<Piece>,
        /// Local pieces the client found in its share, as in `WriteType`.
        pub pieces: u32,
        /// The collective.
        pub collective: CollectiveTag,
    }
}
request!(WriteCollective => WriteCollective, IoReply);

wire_struct! {
    /// One participant's part of a server-directed collective read: as `ReadType`, but the
    /// server reads the union of every participant's pieces once, in sorted runs, and then
    /// answers each with its own data in stream order.
    pub struct ReadCollective {
        /// File handle.
        pub handle: u64,
        /// Access right, signed by the mds.
        pub capability: Capability,
        /// How the data travels.
        pub mode: TransferMode,
        /// How the server turns the merged runs into storage calls.
        pub storage: StoragePlan,
        /// The sender's file type.
        pub file: FileType,
        /// First stream byte.
        pub start: u64,
        /// One past the last stream byte.
        pub end: u64,
        /// The stream ranges holding this server's bytes, as in `WriteType`.
        pub ranges: Vec<Piece>,
        /// The collective.
        pub collective: CollectiveTag,
    }
}
request!(ReadCollective => ReadCollective, IoReply);

wire_struct! {
    /// Asks an iod for its storage counters.
    pub struct ServerStats {}
}

wire_struct! {
    /// What an iod's storage planner did for one direction (reads or writes) since start.
    pub struct StorageCounters {
        /// Requests served.
        pub requests: u64,
        /// Pieces the requests asked for.
        pub pieces: u64,
        /// Storage calls made (see `IoReply::storage_pieces`).
        pub calls: u64,
        /// Bytes the requests asked for.
        pub bytes_wanted: u64,
        /// Bytes moved to or from storage.
        pub bytes_storage: u64,
        /// Requests served one call per merged piece.
        pub per_piece: u64,
        /// Requests served by one batched submission.
        pub batched: u64,
        /// Requests served by sieving.
        pub sieve: u64,
        /// One-sided reads served straight from a mapping of the object (no storage call:
        /// the client's memory is filled from the page cache in one copy).
        pub mapped: u64,
    }
}

wire_struct! {
    /// An iod's unified cache since start (`--serve unified`; all zeros under other modes).
    pub struct CacheCounters {
        /// Units a grant found cached.
        pub hits: u64,
        /// Units a grant had to create.
        pub misses: u64,
        /// Clean units evicted for room.
        pub evictions: u64,
        /// Units a grant waited for.
        pub grant_waits: u64,
        /// Bytes written and not yet written back.
        pub dirty_bytes: u64,
        /// Write-back steps.
        pub flushes: u64,
        /// Bytes write-back wrote.
        pub flushed_bytes: u64,
        /// Units made in the registered Ready region.
        pub ready_units_made: u64,
        /// Units made in heap memory (Raw).
        pub raw_units_made: u64,
        /// Units a write's data was received straight into, then installed.
        pub units_landed: u64,
        /// Units caching clients demoted into the cache (`Demote`).
        pub units_demoted: u64,
        /// Bytes of all units now.
        pub bytes_in_use: u64,
        /// The budget (`--cache-bytes`).
        pub budget_bytes: u64,
    }
}

impl CacheCounters {
    /// Every counter by its stable name, in wire order (for tables and JSON).
    pub fn named(&self) -> [(&'static str, u64); 13] {
        [
            ("hits", self.hits),
            ("misses", self.misses),
            ("evictions", self.evictions),
            ("grant_waits", self.grant_waits),
            ("dirty_bytes", self.dirty_bytes),
            ("flushes", self.flushes),
            ("flushed_bytes", self.flushed_bytes),
            ("ready_units_made", self.ready_units_made),
            ("raw_units_made", self.raw_units_made),
            ("units_landed", self.units_landed),
            ("units_demoted", self.units_demoted),
            ("bytes_in_use", self.bytes_in_use),
            ("budget_bytes", self.budget_bytes),
        ]
    }
}

wire_struct! {
    /// An iod's storage counters and cost model.
    pub struct ServerStatsReply {
        /// Reads.
        pub reads: StorageCounters,
        /// Writes.
        pub writes: StorageCounters,
        /// Whether batched plans go through io_uring (else they fall back to per-piece).
        pub io_uring: bool,
        /// The cost model's parameters, one line of `key=value` pairs (decoded under the
        /// string limit, `path_bytes_max`).
        pub model: String,
        /// The unified cache's counters.
        pub cache: CacheCounters,
    }
}
request!(ServerStats => ServerStats, ServerStatsReply);

wire_struct! {
    /// Asks an iod for the capacity of the file system under its data directory and the
    /// bytes its objects hold (`tessera df`). Read-only and server-wide: any authenticated
    /// connection may ask.
    pub struct Statfs {}
}

wire_struct! {
    /// The file system under an iod's data directory (`statvfs(3)`) and its objects.
    pub struct StatfsReply {
        /// Size of the file system, bytes (`f_blocks × f_frsize`).
        pub total_bytes: u64,
        /// Free bytes (`f_bfree × f_frsize`).
        pub free_bytes: u64,
        /// Free bytes an unprivileged process may use (`f_bavail × f_frsize`); the iod's
        /// writes are refused with `NoSpace` when this runs out.
        pub available_bytes: u64,
        /// Local objects in the data directory.
        pub objects: u64,
        /// Their sizes added up (logical bytes, holes included), bytes.
        pub object_bytes: u64,
        /// The disk space they take (`st_blocks × 512`, holes excluded), bytes.
        pub object_allocated_bytes: u64,
    }
}
request!(Statfs => Statfs, StatfsReply);

wire_struct! {
    /// Makes this connection the callback channel of client process `client_id` on this iod
    /// (one per client and iod; a second replaces the first). After the empty reply the
    /// client sends nothing more on it: the iod sends [`LeaseRevoke`] requests, each answered
    /// with an empty reply, until either side closes it. Leases of the client live only as
    /// long as its channel.
    pub struct LeaseListen {
        /// The client process's random id, the same in its `LeaseAcquire` requests.
        pub client_id: u64,
    }
}
request!(LeaseListen => LeaseListen, Empty);

wire_struct! {
    /// Says that the requests on this connection are those of caching client `client_id`
    /// (as in its `LeaseListen`, under the uid the connection authenticated as): the client
    /// sends what its write-back buffered over connections of their own, and a write of a
    /// client then revokes neither its own write lease nor those of its write group.
    pub struct LeaseClient {
        /// The client process's random id.
        pub client_id: u64,
    }
}
request!(LeaseClient => LeaseClient, Empty);

wire_struct! {
    /// Asks for a read lease on the local object of a file: while the client holds it, no
    /// write, truncate or remove of the object is applied before the iod has revoked it
    /// ([`LeaseRevoke`] on the client's callback channel, answered, or the lease's time run
    /// out). Needs read access, and a callback channel of `client_id` on this iod.
    ///
    /// With `write`, asks for a write lease on the object's bytes `[start, end)` instead: the
    /// client may buffer writes to them until it is revoked, which happens before any other
    /// client's read, write or stat of them is served (the client writes what it buffered,
    /// then answers). Needs write access as well.
    pub struct LeaseAcquire {
        /// File handle.
        pub handle: u64,
        /// Access right from a client (read).
        pub capability: Capability,
        /// The client process's id, as in its `LeaseListen`.
        pub client_id: u64,
        /// Whether the client demotes the blocks it evicts (the iod then puts what it sends
        /// the client at the least recent end of its cache).
        pub demotes: bool,
        /// A write lease (on `start..end`) rather than a read lease.
        pub write: bool,
        /// First byte of the object a write lease is asked for.
        pub start: u64,
        /// End of the bytes a write lease is asked for (exclusive).
        pub end: u64,
        /// A write group (non-zero): write leases of one group do not conflict with each
        /// other — the processes of one MPI job, whose own rules (sync, barrier, sync) order
        /// their overlapping writes — only with everyone else's. 0: none.
        pub group: u64,
    }
}

wire_struct! {
    /// A lease, or none: `lease_ms` 0 means the iod has a write to the object under way (the
    /// client reads without caching and may ask again later).
    pub struct LeaseAcquireReply {
        /// How long the lease lasts from when the iod granted it, in milliseconds; the client
        /// counts it from before it sent the request.
        pub lease_ms: u32,
        /// Names this lease: the same while it is renewed, a new one after it ended (revoked,
        /// run out). `DemoteOffer` and `Demote` name the lease their blocks were cached under.
        pub lease_id: u64,
        /// A write lease's bytes of the object, `[start, end)`: the asked range, grown to the
        /// largest gap no other client's write lease covers (0 and 0 for a read lease).
        pub start: u64,
        /// End of a write lease's bytes (exclusive; `u64::MAX`: to any length).
        pub end: u64,
    }
}
request!(LeaseAcquire => LeaseAcquire, LeaseAcquireReply);

wire_struct! {
    /// Sent by an iod on a callback channel: the client must stop using, and drop, what it
    /// caches of the file before it answers (an empty reply); its lease on the object ends.
    pub struct LeaseRevoke {
        /// File handle.
        pub handle: u64,
    }
}
request!(LeaseRevoke => LeaseRevoke, Empty);

wire_struct! {
    /// Offers an iod clean blocks a caching client is evicting (DEMOTE buffering's metadata
    /// first): the iod answers which it wants, refusing those it caches already, all of them
    /// without a unified cache or while the client holds no lease on the file. Needs write
    /// access (the blocks will be served to other clients).
    pub struct DemoteOffer {
        /// File handle.
        pub handle: u64,
        /// Access right from a client (write).
        pub capability: Capability,
        /// The client process's id, as in its `LeaseListen`.
        pub client_id: u64,
        /// The lease the blocks were cached under (`LeaseAcquireReply::lease_id`): the iod
        /// takes them only while that lease holds, never under a later one.
        pub lease_id: u64,
        /// The blocks, as local pieces of the iod's object (at most `DEMOTE_PIECES_MAX`).
        pub pieces: Vec<Piece>,
    }
}

/// One flag per offered piece of a `DemoteOffer` (at most `DEMOTE_PIECES_MAX`): 1 wanted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WantedFlags(pub Vec<u8>);

impl Wire for WantedFlags {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.bytes(&self.0);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let flags = decoder.bytes("demote_pieces_max", DEMOTE_PIECES_MAX)?;
        if let Some(&bad) = flags.iter().find(|&&flag| flag > 1) {
            return Err(WireError::BadValue {
                field: "wanted flag",
                value: u64::from(bad),
            });
        }
        Ok(Self(flags.to_vec()))
    }
}

wire_struct! {
    /// Which offered pieces the iod wants, in order.
    pub struct DemoteWanted {
        /// One flag per piece.
        pub wanted: WantedFlags,
    }
}
request!(DemoteOffer => DemoteOffer, DemoteWanted);

wire_struct! {
    /// Clean blocks a caching client evicted, their bytes as bulk (the pieces back to back), or
    /// pulled by the iod from the client's memory (`mode` `Remote`):
    /// the iod caches each piece that covers whole units of its unified cache not cached yet,
    /// at the most recent end, if the client still holds the lease it cached them under. Needs write
    /// access.
    pub struct Demote {
        /// File handle.
        pub handle: u64,
        /// Access right from a client (write).
        pub capability: Capability,
        /// The client process's id, as in its `LeaseListen`.
        pub client_id: u64,
        /// The lease the blocks were cached under (`LeaseAcquireReply::lease_id`): the iod
        /// takes them only while that lease holds, never under a later one.
        pub lease_id: u64,
        /// How the bytes travel: `Gather` (the bulk is the bytes) or `Remote` (the bulk is a
        /// [`RemoteMemory`] the iod pulls them from, one-sidedly).
        pub mode: TransferMode,
        /// DEMOTE buffering's metadata first, one-sidedly (`mode` `Remote` only, one memory
        /// segment per piece): the iod decides which pieces it wants, as for a `DemoteOffer`,
        /// before it pulls anything, pulls only those, and names them in the reply. Without
        /// it the iod pulls every piece (eager DEMOTE: the block travels with its demote).
        pub choose: bool,
        /// The blocks, as local pieces of the iod's object (at most `DEMOTE_PIECES_MAX`).
        pub pieces: Vec<Piece>,
    }
}

wire_struct! {
    /// What the iod did with a `Demote`.
    pub struct DemoteReply {
        /// Cache units it inserted.
        pub inserted: u32,
        /// With `choose`: one flag per piece, 1 for those it wanted and pulled; else empty.
        pub taken: WantedFlags,
    }
}
request!(Demote => Demote, DemoteReply);

wire_struct! {
    /// Asks an iod to pull 8 bytes of the client's memory one-sidedly: the request's bulk is a
    /// [`RemoteMemory`] with one 8-byte segment holding a token. A client sends it once per
    /// new same-host connection; a refusal (`RemoteAccessRefused`) makes it move data in
    /// messages on that connection.
    pub struct RemoteProbe {}
}

wire_struct! {
    /// The token the server found in the client's memory.
    pub struct RemoteProbeReply {
        /// The 8 bytes, little-endian.
        pub token: u64,
    }
}
request!(RemoteProbe => RemoteProbe, RemoteProbeReply);

/// The bit of a [`ShareRegion`] key that marks a shared arena (up to `ARENA_BYTES_MAX`
/// bytes); without it the key names the connection's eager buffer (up to
/// `EAGER_BYTES_MAX`).
pub const SHARED_KEY_ARENA: u64 = 1 << 63;

wire_struct! {
    /// Hands a same-host iod a region of the client's shared memory: the frame (header and
    /// body, one `sendmsg`) carries the region's `memfd` as `SCM_RIGHTS` ancillary data, the
    /// only frame that may. The iod maps it only if it is a memfd sealed against shrinking
    /// (`F_SEAL_SHRINK`), open read-write, of exactly `bytes` bytes within the limit of its
    /// kind, else `RemoteAccessRefused` naming the key and the reason. Later requests name
    /// it by `key` (`RemoteAccess::Shared`); sharing a key again replaces its mapping.
    pub struct ShareRegion {
        /// The client's name for the region, unique in the client process for its life
        /// ([`SHARED_KEY_ARENA`] set for an arena).
        pub key: u64,
        /// The region's size in bytes.
        pub bytes: u64,
    }
}
request!(ShareRegion => ShareRegion, Empty);

impl Write {
    /// Bytes of data the request carries (the sum of its piece lengths).
    pub fn data_bytes(&self) -> u64 {
        self.pieces.iter().map(|piece| piece.length).sum()
    }
}

impl Read {
    /// Bytes of data the reply carries (the sum of its piece lengths).
    pub fn data_bytes(&self) -> u64 {
        self.pieces.iter().map(|piece| piece.length).sum()
    }
}
