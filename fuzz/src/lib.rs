//! Shared code of the Tessera fuzz targets.
//!
//! Everything a peer can send is decoded by `tessera-proto`: the 24-byte frame [`Header`] and
//! the body of every message via [`Wire::from_body`]. The targets in `fuzz_targets/` feed
//! arbitrary bytes to those decoders and check that
//!
//! * no decoder panics (bad input must come back as a `WireError`),
//! * whatever decodes re-encodes to the same value, and to the very same bytes (the encoding
//!   is canonical: fixed-width integers, strict bools and tags, exact counts),
//! * every `WireError` formats and converts into a `RemoteError` body that itself round-trips,
//! * a decoded [`StripeLayout`] maps and sizes files consistently inside the file limit.
//!
//! The seed inputs under `seeds/` come from [`frame_seeds`] and [`body_seeds`]
//! (`cargo run --example gen-seeds`), so the fuzzers start from valid messages.

use std::fmt::Debug;

use std::sync::OnceLock;

use tessera_auth::capability::CAPABILITY_BYTES;
use tessera_auth::handshake::{hello_proof, sign_credentials, verify_credentials, welcome_proof};
use tessera_auth::key::KEY_BYTES;
use tessera_auth::{
    now_s, Authenticator, CapabilityCache, ClusterKey, Grant, KeySigner, Rights, ServerAuth,
};
use tessera_proto::header::{FLAG_ERROR, FLAG_REPLY};
use tessera_proto::limits::{
    CREDENTIAL_GROUPS_MAX, FILE_BYTES_MAX, HEADER_BYTES, HOST_NAME_BYTES_MAX, MAC_BYTES,
};
use tessera_proto::{
    AgentSign, AgentSigned, Attr, Binding, CacheCounters, Capability, Challenge, Chmod, Chown,
    CollectiveTag, Create, Credentials, Datatype, DeclareView, Demote, DemoteOffer, DemoteReply,
    DemoteWanted, DirEntry, Empty, ErrorCode, FileKind, FileType, HandlesLive, HandlesLiveReply,
    Header, Hello, IoReply, Layout, LeaseAcquire, LeaseAcquireReply, LeaseClient, LeaseListen,
    LeaseRevoke,
    LockGranted, LockRange, Lookup, Mac, MdsStats, MdsStatsReply, Mkdir, Nonce, ObjectCreate,
    ObjectCreateMany, ObjectCreateManyReply, ObjectLeft, ObjectRemove, ObjectStat, ObjectStatReply,
    ObjectSync, ObjectTruncate, Opcode, Open, Opened, PatternLayout, Piece, Ping, PingReply,
    Principal, Read, ReadCollective, ReadType, ReadView, Readdir, ReaddirReply, ReleaseView,
    RemoteAccess, RemoteEndpoint, RemoteError, RemoteMemory, RemoteProbe, RemoteProbeReply,
    RemoteSegment, Rename, Renew, Request, Rmdir, ServerStats, ServerStatsReply, SetTimes,
    ShareRegion, Stat, StatHandle, Statfs, StatfsReply, StorageCounters, StoragePlan, StripeLayout,
    TransferMode, Truncate, Unlink, UnlinkReply, UnlockRange, WantedFlags, Welcome, Wire,
    WireError, Write, WriteCollective, WriteType, WriteView, CHOWN_UNCHANGED, ROLE_IOD, ROLE_MDS,
};

/// Decodes `body` as a `T`; on success checks the round trip (value and bytes) and returns the
/// value, on failure exercises the error's formatting and conversion.
pub fn check<T: Wire + PartialEq + Debug>(body: &[u8]) -> Option<T> {
    match T::from_body(body) {
        Ok(value) => {
            let again = value.to_body();
            let decoded = T::from_body(&again)
                .unwrap_or_else(|err| panic!("re-encoded {value:?} does not decode: {err}"));
            assert_eq!(decoded, value, "value changed across encode/decode");
            assert_eq!(
                again, body,
                "re-encoding {value:?} gave other bytes than were decoded"
            );
            Some(value)
        }
        Err(err) => {
            exercise_error(err);
            None
        }
    }
}

/// A `WireError` must format, and the error reply built from it must round-trip.
fn exercise_error(err: WireError) {
    let text = err.to_string();
    assert!(!text.is_empty());
    let remote = RemoteError::from(err);
    let decoded = RemoteError::from_body(&remote.to_body()).expect("error reply body decodes");
    assert_eq!(decoded, remote);
}

/// Request and reply of one operation; which one the body is depends on the header flags.
fn operation<R>(body: &[u8], reply: bool) -> bool
where
    R: Request + PartialEq + Debug,
    R::Reply: PartialEq + Debug,
{
    if reply {
        check::<R::Reply>(body).is_some()
    } else {
        check::<R>(body).is_some()
    }
}

/// The `frame` target: a header, then the body it announces.
///
/// The body is the `body_bytes` the header announces, or what is left of the input if that is
/// less (a receiver would wait for more bytes; decoding the part at hand is the stricter test,
/// and it keeps mutated inputs useful). Anything after the body is bulk data, which no decoder
/// reads. Returns whether the header and the body decoded.
pub fn fuzz_frame(data: &[u8]) -> bool {
    let Some(head) = data.get(..HEADER_BYTES) else {
        return false;
    };
    let head: &[u8; HEADER_BYTES] = head.try_into().expect("slice of HEADER_BYTES");
    let header = match Header::decode(head) {
        Ok(header) => header,
        Err(err) => {
            exercise_error(err);
            return false;
        }
    };
    assert_eq!(&header.encode(), head, "header encoding is not canonical");
    assert_eq!(Header::decode(&header.encode()), Ok(header));

    let rest = &data[HEADER_BYTES..];
    let body_len = usize::try_from(header.body_bytes)
        .unwrap_or(usize::MAX)
        .min(rest.len());
    let body = &rest[..body_len];

    let opcode = match Opcode::from_u8(header.opcode) {
        Ok(opcode) => opcode,
        Err(err) => {
            assert_eq!(
                err,
                WireError::UnknownOpcode {
                    opcode: header.opcode
                }
            );
            exercise_error(err);
            return false;
        }
    };
    assert_eq!(opcode as u8, header.opcode);
    if header.is_error() {
        return check::<RemoteError>(body).is_some();
    }
    let reply = header.is_reply();
    match opcode {
        Opcode::Ping => operation::<Ping>(body, reply),
        // A server's first frame is a `Hello` reply carrying the `Challenge`; its answer to the
        // client's `Hello` is the `Welcome`. The two differ in size, so at most one decodes.
        Opcode::Hello if reply => {
            let challenge = check::<Challenge>(body).is_some();
            let welcome = check::<Welcome>(body).is_some();
            assert!(
                !(challenge && welcome),
                "a body decoded as both a challenge and a welcome"
            );
            challenge || welcome
        }
        Opcode::Hello => check::<Hello>(body).is_some(),
        Opcode::AgentSign => operation::<AgentSign>(body, reply),
        Opcode::Lookup => operation::<Lookup>(body, reply),
        Opcode::Create => operation::<Create>(body, reply),
        Opcode::Mkdir => operation::<Mkdir>(body, reply),
        Opcode::Rmdir => operation::<Rmdir>(body, reply),
        Opcode::Unlink => operation::<Unlink>(body, reply),
        Opcode::Rename => operation::<Rename>(body, reply),
        Opcode::Readdir => operation::<Readdir>(body, reply),
        Opcode::Stat => operation::<Stat>(body, reply),
        Opcode::StatHandle => operation::<StatHandle>(body, reply),
        Opcode::Truncate => operation::<Truncate>(body, reply),
        Opcode::Chmod => operation::<Chmod>(body, reply),
        Opcode::Chown => operation::<Chown>(body, reply),
        Opcode::HandlesLive => operation::<HandlesLive>(body, reply),
        Opcode::MdsStats => operation::<MdsStats>(body, reply),
        Opcode::SetTimes => operation::<SetTimes>(body, reply),
        Opcode::Open => operation::<Open>(body, reply),
        Opcode::Renew => operation::<Renew>(body, reply),
        Opcode::ObjectCreate => operation::<ObjectCreate>(body, reply),
        Opcode::ObjectCreateMany => operation::<ObjectCreateMany>(body, reply),
        Opcode::ObjectRemove => operation::<ObjectRemove>(body, reply),
        Opcode::ObjectStat => operation::<ObjectStat>(body, reply),
        Opcode::ObjectTruncate => operation::<ObjectTruncate>(body, reply),
        Opcode::Write => operation::<Write>(body, reply),
        Opcode::Read => operation::<Read>(body, reply),
        Opcode::ObjectSync => operation::<ObjectSync>(body, reply),
        Opcode::WriteType => operation::<WriteType>(body, reply),
        Opcode::ReadType => operation::<ReadType>(body, reply),
        Opcode::DeclareView => operation::<DeclareView>(body, reply),
        Opcode::WriteView => operation::<WriteView>(body, reply),
        Opcode::ReadView => operation::<ReadView>(body, reply),
        Opcode::ReleaseView => operation::<ReleaseView>(body, reply),
        Opcode::LockRange => operation::<LockRange>(body, reply),
        Opcode::UnlockRange => operation::<UnlockRange>(body, reply),
        Opcode::ServerStats => operation::<ServerStats>(body, reply),
        Opcode::RemoteProbe => operation::<RemoteProbe>(body, reply),
        Opcode::WriteCollective => operation::<WriteCollective>(body, reply),
        Opcode::ReadCollective => operation::<ReadCollective>(body, reply),
        Opcode::ShareRegion => operation::<ShareRegion>(body, reply),
        Opcode::Statfs => operation::<Statfs>(body, reply),
        Opcode::LeaseListen => operation::<LeaseListen>(body, reply),
        Opcode::LeaseClient => operation::<LeaseClient>(body, reply),
        Opcode::LeaseAcquire => operation::<LeaseAcquire>(body, reply),
        Opcode::LeaseRevoke => operation::<LeaseRevoke>(body, reply),
        Opcode::DemoteOffer => operation::<DemoteOffer>(body, reply),
        Opcode::Demote => operation::<Demote>(body, reply),
        // Bulk-only frames: the body is empty in both directions.
        Opcode::Data => check::<Empty>(body).is_some(),
    }
}

/// Declares the body kinds of the `bodies` target: selector byte = position in the list.
macro_rules! body_kinds {
    ($($name:literal => $ty:ty,)*) => {
        /// Names of the body kinds, indexed by the selector byte of a `bodies` input.
        pub const BODY_KINDS: &[&str] = &[$($name,)* "layout-math"];

        fn decode_kind(kind: usize, body: &[u8]) -> bool {
            let mut index = 0;
            $(
                if kind == index {
                    return check::<$ty>(body).is_some();
                }
                index += 1;
            )*
            debug_assert_eq!(kind, index, "selector out of range");
            layout_math(body)
        }
    };
}

body_kinds! {
    "ping" => Ping,
    "ping-reply" => PingReply,
    "lookup" => Lookup,
    "create" => Create,
    "mkdir" => Mkdir,
    "rmdir" => Rmdir,
    "unlink" => Unlink,
    "rename" => Rename,
    "readdir" => Readdir,
    "readdir-reply" => ReaddirReply,
    "stat" => Stat,
    "stat-handle" => StatHandle,
    "truncate" => Truncate,
    "attr" => Attr,
    "empty" => Empty,
    "object-create" => ObjectCreate,
    "object-remove" => ObjectRemove,
    "object-stat" => ObjectStat,
    "object-stat-reply" => ObjectStatReply,
    "object-truncate" => ObjectTruncate,
    "object-sync" => ObjectSync,
    "write" => Write,
    "read" => Read,
    "io-reply" => IoReply,
    "remote-error" => RemoteError,
    "stripe-layout" => StripeLayout,
    "optional-layout" => Option<Layout>,
    "layout" => Layout,
    "file-type" => FileType,
    "datatype" => Datatype,
    "write-type" => WriteType,
    "read-type" => ReadType,
    "declare-view" => DeclareView,
    "write-view" => WriteView,
    "read-view" => ReadView,
    "release-view" => ReleaseView,
    "credentials" => Credentials,
    "dir-entry" => DirEntry,
    "dir-entries" => Vec<DirEntry>,
    "piece" => Piece,
    "pieces" => Vec<Piece>,
    "capability" => Capability,
    "file-kind" => FileKind,
    "transfer-mode" => TransferMode,
    "remote-memory" => RemoteMemory,
    "path" => String,
    "collective-tag" => CollectiveTag,
    "write-collective" => WriteCollective,
    "read-collective" => ReadCollective,
    "share-region" => ShareRegion,
    "chmod" => Chmod,
    "chown" => Chown,
    "challenge" => Challenge,
    "hello" => Hello,
    "welcome" => Welcome,
    "agent-sign" => AgentSign,
    "agent-signed" => AgentSigned,
    "open" => Open,
    "opened" => Opened,
    "renew" => Renew,
    "statfs-reply" => StatfsReply,
    "lease-listen" => LeaseListen,
    "lease-acquire" => LeaseAcquire,
    "lease-acquire-reply" => LeaseAcquireReply,
    "lease-revoke" => LeaseRevoke,
    "demote-offer" => DemoteOffer,
    "demote-wanted" => DemoteWanted,
    "demote" => Demote,
    "demote-reply" => DemoteReply,
    "lease-client" => LeaseClient,
}

/// The `bodies` target: the first byte picks a body type, the rest is the body. Returns
/// whether the body decoded.
pub fn fuzz_body(data: &[u8]) -> bool {
    let Some((&selector, body)) = data.split_first() else {
        return false;
    };
    decode_kind(usize::from(selector) % BODY_KINDS.len(), body)
}

/// The last body kind: three `u64`s (offset, length, size), then a `StripeLayout` body. A layout
/// that decodes must split any range inside the file limit into runs that each lie in one
/// stripe unit on the right server, and must size objects and files consistently.
fn layout_math(body: &[u8]) -> bool {
    if body.len() < 24 {
        return false;
    }
    let (numbers, rest) = body.split_at(24);
    let word =
        |i: usize| u64::from_le_bytes(numbers[i * 8..i * 8 + 8].try_into().expect("eight bytes"));
    let Some(layout) = check::<StripeLayout>(rest) else {
        return false;
    };
    let servers = layout.servers.len() as u64;
    let unit = layout.stripe_unit_bytes;

    let size = word(2) % (FILE_BYTES_MAX + 1);
    let mut total = 0u64;
    let mut max_end = 0u64;
    for position in 0..layout.servers.len() {
        let local = layout.local_size(position, size);
        total += local;
        let end = layout.logical_end(position, local);
        assert!(
            end <= size,
            "position {position}: logical end {end} past size {size}"
        );
        max_end = max_end.max(end);
    }
    assert_eq!(total, size, "local sizes do not add up to the file size");
    assert_eq!(max_end, size, "logical ends do not give back the file size");

    let offset = word(0) % (FILE_BYTES_MAX + 1);
    let length = word(1) % (FILE_BYTES_MAX - offset + 1);
    const SEGMENTS: usize = 64;
    let mut cursor = offset;
    let mut seen = 0;
    for segment in layout.map(offset, length).take(SEGMENTS) {
        seen += 1;
        let start = segment.logical_offset;
        assert_eq!(start, cursor, "runs are not contiguous");
        assert!(segment.length > 0 && segment.length <= unit);
        assert_eq!(
            start / unit,
            (start + segment.length - 1) / unit,
            "run crosses a unit"
        );
        assert_eq!(segment.server_position as u64, (start / unit) % servers);
        assert_eq!(
            segment.local_offset,
            (start / (unit * servers)) * unit + start % unit
        );
        cursor += segment.length;
    }
    if seen < SEGMENTS {
        assert_eq!(cursor, offset + length, "runs do not cover the range");
    }
    true
}

// ---------------------------------------------------------------------------------------------
// The `handshake` target: the authentication messages and capabilities.

/// The challenge the `handshake` target's server sent on "its" connection.
pub fn handshake_challenge() -> Challenge {
    Challenge {
        role: ROLE_IOD,
        server_index: 3,
        cluster_id: fuzz_key().cluster_id(),
        nonce: Nonce([0xC4; 32]),
    }
}

/// The server of the `handshake` target: an iod holding [`fuzz_key`].
fn handshake_server() -> &'static ServerAuth {
    static SERVER: OnceLock<ServerAuth> = OnceLock::new();
    SERVER.get_or_init(|| ServerAuth::new(fuzz_key(), ROLE_IOD, 3))
}

/// Another cluster's key: what [`fuzz_key`] accepts, this one must refuse.
fn other_key() -> ClusterKey {
    ClusterKey::from_bytes([0xA7; KEY_BYTES])
}

/// What one `handshake` input did, for the unit tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HandshakeOutcome {
    /// The bodies the input decoded as ("challenge", "hello", ...).
    pub decoded: Vec<&'static str>,
    /// It decoded as a `Hello` (alone or inside an `AgentSigned`) that the server accepted
    /// for [`handshake_challenge`].
    pub accepted: bool,
    /// As a capability, its tag verified with [`fuzz_key`].
    pub verified: bool,
    /// As a capability, an iod let its own uid use it on its handle with its rights now.
    pub allowed: bool,
}

/// The `handshake` target: the whole input is, in turn, the body of each handshake and agent
/// message (`Challenge`, `Hello`, `Welcome`, `AgentSign`, `AgentSigned`), a `Credentials`, and
/// the bytes of a capability. Besides the round trip of every body that decodes:
///
/// * a `Hello` (also the one inside an `AgentSigned`) is accepted by a server holding
///   [`fuzz_key`] for [`handshake_challenge`] exactly when its credential's tag and expiry and
///   its proof are right, and then the welcome is the one the client expects, while the same
///   `Hello` is refused for another nonce and by a server holding another key;
/// * the answer a key holder (`KeySigner`, as the servers use) or the agent (`AgentSign`) makes
///   for a decoded nonce is accepted by the server that sent it;
/// * a credential that decodes is signed over exactly the bytes before its tag;
/// * a capability that verifies parses to the same grant, which signs back to the very same
///   bytes; an iod's `CapabilityCache` allows it exactly when it verified, grants some right
///   and has not expired, gives the same answer from its cache, and refuses another uid or
///   handle.
pub fn fuzz_handshake(data: &[u8]) -> HandshakeOutcome {
    let mut outcome = HandshakeOutcome::default();
    if let Some(challenge) = check::<Challenge>(data) {
        outcome.decoded.push("challenge");
        answer_challenge(&challenge);
    }
    if let Some(hello) = check::<Hello>(data) {
        outcome.decoded.push("hello");
        outcome.accepted |= accept_hello(&hello);
    }
    if check::<Welcome>(data).is_some() {
        outcome.decoded.push("welcome");
    }
    if let Some(sign) = check::<AgentSign>(data) {
        outcome.decoded.push("agent-sign");
        agent_answer(&sign.binding);
    }
    if let Some(signed) = check::<AgentSigned>(data) {
        outcome.decoded.push("agent-signed");
        // An agent's answer is the credential, the proof and the welcome to expect.
        assert_eq!(
            [
                &signed.credentials.to_body()[..],
                &signed.proof.0,
                &signed.welcome.0
            ]
            .concat(),
            data,
            "AgentSigned is not credential | proof | welcome"
        );
        let hello = Hello {
            credentials: signed.credentials,
            client_nonce: fuzz_client_nonce(),
            proof: signed.proof,
        };
        outcome.accepted |= accept_hello(&hello);
    }
    if let Some(credentials) = check::<Credentials>(data) {
        outcome.decoded.push("credentials");
        assert_eq!(
            credentials.signed_bytes(),
            data[..data.len() - MAC_BYTES],
            "the tag covers other bytes"
        );
        match verify_credentials(&fuzz_key(), &credentials) {
            Ok(()) => {
                assert!(credentials.expires_s > now_s());
                let mut again = credentials.clone();
                sign_credentials(&fuzz_key(), &mut again);
                assert_eq!(
                    again, credentials,
                    "re-signing a verified credential changed it"
                );
            }
            Err(err) => assert!(!err.to_string().is_empty()),
        }
    }
    let (verified, allowed) = check_capability(data);
    outcome.verified = verified;
    outcome.allowed = allowed;
    outcome
}

/// The server's side for a decoded `Hello`; returns whether it was accepted.
fn accept_hello(hello: &Hello) -> bool {
    let key = fuzz_key();
    let challenge = handshake_challenge();
    let binding = binding_of(&challenge, hello.client_nonce);
    let genuine = verify_credentials(&key, &hello.credentials).is_ok()
        && hello.proof == hello_proof(&key, &binding, &hello.credentials);
    match handshake_server().accept(&challenge, hello) {
        Ok(welcome) => {
            assert!(
                genuine,
                "accepted a Hello whose credential or proof is wrong: {hello:?}"
            );
            assert_eq!(welcome.proof, welcome_proof(&key, &binding, &hello.proof));
            check::<Welcome>(&welcome.to_body()).expect("a welcome round-trips");
            // Replayed on another connection, or shown to another cluster: refused.
            let mut next = challenge.clone();
            next.nonce.0[0] ^= 1;
            assert!(
                handshake_server().accept(&next, hello).is_err(),
                "a Hello was accepted for another nonce"
            );
            let stranger = ServerAuth::new(other_key(), ROLE_IOD, 3);
            assert!(
                stranger.accept(&challenge, hello).is_err(),
                "a Hello was accepted with another key"
            );
            // Relayed to another server of the same cluster: refused (it was made for iod 3).
            for (role, index) in [(ROLE_IOD, 4), (ROLE_MDS, 0)] {
                let other = ServerAuth::new(key.clone(), role, index);
                assert!(
                    other.accept(&challenge, hello).is_err(),
                    "a Hello made for iod 3 was accepted by role {role} index {index}"
                );
            }
            true
        }
        Err(err) => {
            assert!(!genuine, "refused a genuine Hello: {err}");
            assert!(!err.to_string().is_empty());
            false
        }
    }
}

/// A key holder answers a decoded challenge (as the mds does towards the iods); the server
/// that sent it accepts the answer and sends the welcome the client expects.
fn answer_challenge(challenge: &Challenge) {
    static SIGNER: OnceLock<KeySigner> = OnceLock::new();
    let signer = SIGNER.get_or_init(|| KeySigner::server(fuzz_key()));
    let (hello, expected) = signer
        .hello(challenge)
        .expect("a key holder always answers");
    let server = ServerAuth::new(fuzz_key(), challenge.role, challenge.server_index);
    let accepted = server.accept(challenge, &hello);
    if challenge.cluster_id != fuzz_key().cluster_id() {
        // The answer is bound to the cluster the challenge named, not the server's.
        assert!(
            accepted.is_err(),
            "a proof for another cluster was accepted"
        );
        return;
    }
    let welcome = accepted.expect("the server accepts a key holder's answer");
    assert_eq!(
        welcome.proof, expected,
        "the welcome is not the one the client expects"
    );
}

/// The agent's answer for a decoded binding, made as `tessera agent` makes it (for a fixed
/// caller): the server the binding names accepts it on the connection it names, exactly when
/// that server is of this cluster.
fn agent_answer(binding: &Binding) {
    let key = fuzz_key();
    let credentials = credentials();
    let proof = hello_proof(&key, binding, &credentials);
    let signed = AgentSigned {
        welcome: welcome_proof(&key, binding, &proof),
        credentials,
        proof,
    };
    let reply = check::<AgentSigned>(&signed.to_body()).expect("the agent's answer round-trips");
    let challenge = Challenge {
        role: binding.role,
        server_index: binding.server_index,
        cluster_id: binding.cluster_id,
        nonce: binding.server_nonce,
    };
    let hello = Hello {
        credentials: reply.credentials,
        client_nonce: binding.client_nonce,
        proof: reply.proof,
    };
    let server = ServerAuth::new(key.clone(), binding.role, binding.server_index);
    let accepted = server.accept(&challenge, &hello);
    if binding.cluster_id != key.cluster_id() {
        assert!(
            accepted.is_err(),
            "a proof for another cluster was accepted"
        );
        return;
    }
    let welcome = accepted.expect("the server accepts the agent's answer");
    assert_eq!(welcome.proof, reply.welcome);
}

/// The input as a capability's bytes; returns whether it verified and whether an iod let its
/// owner use it.
fn check_capability(data: &[u8]) -> (bool, bool) {
    let key = fuzz_key();
    let capability = Capability(data.to_vec());
    let parsed = Grant::parse(&capability);
    let verified = Grant::verify(&key, &capability);
    match (&parsed, &verified) {
        (Ok(parsed), Ok(verified)) => {
            assert_eq!(parsed, verified);
            assert_eq!(
                verified.sign(&key),
                capability,
                "a verified capability is not its grant's signature"
            );
            assert!(
                Grant::verify(&other_key(), &capability).is_err(),
                "two keys verified one capability"
            );
        }
        (Err(_), Ok(grant)) => panic!("verified but does not parse: {grant:?}"),
        (_, Err(err)) => assert!(!err.to_string().is_empty()),
    }
    match &parsed {
        Ok(grant) => {
            assert_eq!(data.len(), CAPABILITY_BYTES);
            let word =
                |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().expect("eight bytes"));
            assert_eq!(grant.handle, word(1));
            assert_eq!(
                grant.uid,
                u32::from_le_bytes(data[10..14].try_into().expect("four bytes"))
            );
            assert_eq!(grant.expires_s, word(14));
            assert_eq!(grant.epoch, word(22));
            assert_eq!(
                (grant.rights.read, grant.rights.write),
                (data[9] & 1 != 0, data[9] & 2 != 0)
            );
        }
        Err(err) => assert!(!err.to_string().is_empty()),
    }

    // An iod's check on a user's connection of the grant's own uid, for its handle and rights.
    let (handle, rights, uid) = parsed
        .as_ref()
        .map_or((42, Rights::READ, 1000), |g| (g.handle, g.rights, g.uid));
    let expected = verified
        .as_ref()
        .is_ok_and(|grant| (grant.rights.read || grant.rights.write) && grant.expires_s > now_s());
    let mut cache = CapabilityCache::default();
    let first = cache.check(&key, Principal::User, uid, &capability, handle, rights);
    let second = cache.check(&key, Principal::User, uid, &capability, handle, rights);
    assert_eq!(
        first.is_ok(),
        expected,
        "the iod's answer {first:?} for {parsed:?}"
    );
    assert_eq!(
        second.is_ok(),
        expected,
        "the cached answer differs: {second:?}"
    );
    if let Err(err) = &first {
        assert!(!err.to_string().is_empty());
    }
    // The tag is checked once if it verified (then remembered), every time if it did not.
    assert_eq!(cache.checks, if verified.is_ok() { 1 } else { 2 });
    if expected {
        let other_uid = cache.check(&key, Principal::User, uid ^ 1, &capability, handle, rights);
        assert!(other_uid.is_err(), "another uid used the capability");
        let other_handle = cache.check(&key, Principal::User, uid, &capability, handle ^ 1, rights);
        assert!(
            other_handle.is_err(),
            "the capability opened another handle"
        );
        assert_eq!(cache.checks, 1);
    }
    // On a server's connection the uid does not matter, and no capability is needed.
    let server = CapabilityCache::default().check(
        &key,
        Principal::Server,
        uid ^ 1,
        &capability,
        handle,
        rights,
    );
    assert_eq!(
        server.is_ok(),
        expected || data.is_empty(),
        "a server's connection: {server:?}"
    );
    (verified.is_ok(), first.is_ok())
}

// ---------------------------------------------------------------------------------------------
// Seeds: a few valid inputs per target.

/// The cluster key the seeds are signed with, and the one the `handshake` target's server
/// holds (a fixed test key: seeds must come out byte for byte the same on every run).
pub fn fuzz_key() -> ClusterKey {
    ClusterKey::from_bytes([0x5E; KEY_BYTES])
}

/// Expiry of the seeds' credentials and capabilities: 2100-01-01, so that the valid seeds stay
/// valid (a seed that expired would silently stop reaching the code behind the checks).
pub const SEED_EXPIRES_S: u64 = 4_102_444_800;

/// A user's credential, signed with [`fuzz_key`].
fn credentials() -> Credentials {
    let mut credentials = Credentials {
        principal: Principal::User,
        uid: 1000,
        gid: 100,
        groups: vec![10, 1001],
        host: "node-07".into(),
        expires_s: SEED_EXPIRES_S,
        mac: Mac::default(),
    };
    sign_credentials(&fuzz_key(), &mut credentials);
    credentials
}

/// The grant of the seeds' capabilities: handle 42, read and write, uid 1000.
fn grant() -> Grant {
    Grant {
        handle: 42,
        rights: Rights::READ_WRITE,
        uid: 1000,
        expires_s: SEED_EXPIRES_S,
        epoch: 1,
    }
}

/// A capability signed with [`fuzz_key`] (62 bytes).
/// The namespace id the seeds' mds speaks for.
const FUZZ_NAMESPACE: u64 = 0x5eed_0000_0000_0001;

fn signed_capability() -> Capability {
    grant().sign(&fuzz_key())
}

fn layout() -> StripeLayout {
    StripeLayout::new(64 << 10, vec![2, 0, 1]).expect("valid layout")
}

fn attr() -> Attr {
    Attr {
        handle: 42,
        kind: FileKind::File,
        mode: 0o644,
        uid: 1000,
        gid: 100,
        size: 1 << 20,
        atime_ns: 1_700_000_000_000_000_000,
        mtime_ns: 1_700_000_000_000_000_001,
        ctime_ns: 1_700_000_000_000_000_002,
        nlink: 1,
        layout: Some(layout().into()),
    }
}

/// A (*,BLOCK) pattern layout of 64-byte rows over two servers.
fn pattern_layout() -> Layout {
    let half = |first: i64| {
        Datatype::resized(
            0,
            64,
            &Datatype::hindexed(&[32], &[first], &Datatype::byte()).expect("type"),
        )
        .expect("type")
    };
    Layout::Pattern(std::sync::Arc::new(
        PatternLayout::new(vec![1, 0], vec![half(0), half(32)]).expect("pattern"),
    ))
}

/// A column block of a 16 x 64 byte array.
fn columns() -> Datatype {
    Datatype::subarray(
        &[16, 64],
        &[16, 8],
        &[0, 8],
        tessera_proto::dtype::Order::C,
        &Datatype::byte(),
    )
    .expect("type")
}

fn file_type() -> FileType {
    FileType {
        layout: pattern_layout(),
        position: 1,
        filetype: columns(),
        displacement: 4096,
    }
}

fn frame(opcode: Opcode, flags: u16, body: &[u8], bulk: &[u8]) -> Vec<u8> {
    frame_with_id(opcode, flags, 7, body, bulk)
}

fn frame_with_id(opcode: Opcode, flags: u16, request_id: u64, body: &[u8], bulk: &[u8]) -> Vec<u8> {
    let header = Header {
        opcode: opcode as u8,
        flags,
        request_id,
        body_bytes: u32::try_from(body.len()).expect("small body"),
        bulk_bytes: u32::try_from(bulk.len()).expect("small bulk"),
    };
    let mut out = header.encode().to_vec();
    out.extend_from_slice(body);
    out.extend_from_slice(bulk);
    out
}

fn exchange<R: Request>(
    name: &str,
    opcode: Opcode,
    request: &R,
    reply: &R::Reply,
) -> Vec<(String, Vec<u8>)> {
    vec![
        (
            format!("{name}-request"),
            frame(opcode, 0, &request.to_body(), &[]),
        ),
        (
            format!("{name}-reply"),
            frame(opcode, FLAG_REPLY, &reply.to_body(), &[]),
        ),
    ]
}

/// Valid frames: a request and a reply for every opcode, an error reply, and `Data` frames.
pub fn frame_seeds() -> Vec<(String, Vec<u8>)> {
    let who = credentials();
    let path = "/data/run-1/output.dat".to_owned();
    let mut seeds = Vec::new();
    seeds.extend(exchange(
        "ping",
        Opcode::Ping,
        &Ping {},
        &PingReply {
            role: 2,
            server_index: 3,
            pid: 4242,
            objects: 17,
            store_state: 1,
        },
    ));
    seeds.extend(exchange(
        "lookup",
        Opcode::Lookup,
        &Lookup {
            credentials: who.clone(),
            path: path.clone(),
        },
        &attr(),
    ));
    seeds.extend(exchange(
        "create",
        Opcode::Create,
        &Create {
            credentials: who.clone(),
            path: path.clone(),
            mode: 0o644,
            exclusive: true,
            stripe_unit_bytes: 65536,
            server_count: 3,
            pattern: Vec::new(),
            cache_unit_bytes: 0,
        },
        &Opened {
            attr: attr(),
            capability: signed_capability(),
        },
    ));
    let dir_attr = Attr {
        kind: FileKind::Directory,
        mode: 0o755,
        nlink: 2,
        layout: None,
        size: 0,
        ..attr()
    };
    seeds.extend(exchange(
        "mkdir",
        Opcode::Mkdir,
        &Mkdir {
            credentials: who.clone(),
            path: "/data".into(),
            mode: 0o755,
        },
        &dir_attr,
    ));
    seeds.extend(exchange(
        "rmdir",
        Opcode::Rmdir,
        &Rmdir {
            credentials: who.clone(),
            path: "/data".into(),
        },
        &Empty {},
    ));
    seeds.extend(exchange(
        "unlink",
        Opcode::Unlink,
        &Unlink {
            credentials: who.clone(),
            path: path.clone(),
        },
        &UnlinkReply {
            left: vec![ObjectLeft {
                server: 1,
                error: RemoteError::new(ErrorCode::Unavailable, "iod 1 at 127.0.0.1:7001: down"),
            }],
        },
    ));
    seeds.extend(exchange(
        "handles-live",
        Opcode::HandlesLive,
        &HandlesLive {
            credentials: who.clone(),
            handles: vec![2, 3, 0x1f],
        },
        &HandlesLiveReply {
            namespace: FUZZ_NAMESPACE,
            live: vec![2, 0x1f],
        },
    ));
    seeds.extend(exchange(
        "object-create-many",
        Opcode::ObjectCreateMany,
        &ObjectCreateMany {
            namespace: FUZZ_NAMESPACE,
            cache_unit_bytes: 65536,
            handles: vec![0x100, 0x101, 0x102],
        },
        &ObjectCreateManyReply {
            created: vec![0x100, 0x102],
        },
    ));
    seeds.extend(exchange(
        "mds-stats",
        Opcode::MdsStats,
        &MdsStats {
            credentials: who.clone(),
        },
        &MdsStatsReply {
            changes: 1000,
            commits: 260,
            inodes: 42,
            precreated: 1024,
        },
    ));
    seeds.extend(exchange(
        "set-times",
        Opcode::SetTimes,
        &SetTimes {
            credentials: who.clone(),
            path: path.clone(),
            atime_ns: tessera_proto::TIME_OMIT,
            mtime_ns: 981_173_106_000_000_000,
        },
        &attr(),
    ));
    seeds.extend(exchange(
        "rename",
        Opcode::Rename,
        &Rename {
            credentials: who.clone(),
            source: path.clone(),
            target: "/data/é.dat".into(),
        },
        &Empty {},
    ));
    seeds.extend(exchange(
        "readdir",
        Opcode::Readdir,
        &Readdir {
            credentials: who.clone(),
            path: "/data".into(),
            after: String::new(),
        },
        &ReaddirReply {
            entries: vec![
                DirEntry {
                    name: "output.dat".into(),
                    handle: 42,
                    kind: FileKind::File,
                },
                DirEntry {
                    name: "run-2".into(),
                    handle: 43,
                    kind: FileKind::Directory,
                },
            ],
            more: true,
        },
    ));
    seeds.extend(exchange(
        "stat",
        Opcode::Stat,
        &Stat {
            credentials: who.clone(),
            path: path.clone(),
        },
        &attr(),
    ));
    seeds.extend(exchange(
        "stat-handle",
        Opcode::StatHandle,
        &StatHandle {
            credentials: who.clone(),
            handle: 42,
            capability: signed_capability(),
        },
        &attr(),
    ));
    seeds.extend(exchange(
        "truncate",
        Opcode::Truncate,
        &Truncate {
            credentials: who.clone(),
            path: path.clone(),
            size: 1000,
        },
        &attr(),
    ));
    seeds.extend(exchange(
        "chmod",
        Opcode::Chmod,
        &Chmod {
            credentials: who.clone(),
            path: path.clone(),
            mode: 0o1750,
        },
        &attr(),
    ));
    seeds.extend(exchange(
        "chown",
        Opcode::Chown,
        &Chown {
            credentials: who.clone(),
            path: path.clone(),
            uid: CHOWN_UNCHANGED,
            gid: 100,
        },
        &attr(),
    ));
    seeds.extend(exchange(
        "open",
        Opcode::Open,
        &Open {
            credentials: who.clone(),
            path,
            read: true,
            write: false,
        },
        &Opened {
            attr: attr(),
            capability: Grant {
                rights: Rights::READ,
                ..grant()
            }
            .sign(&fuzz_key()),
        },
    ));
    seeds.extend(exchange(
        "renew",
        Opcode::Renew,
        &Renew {
            credentials: who,
            handle: 42,
            capability: signed_capability(),
            read: true,
            write: true,
        },
        &Opened {
            attr: attr(),
            capability: signed_capability(),
        },
    ));
    // The handshake: the server's challenge (a Hello reply with request id 0), the client's
    // Hello and the server's Welcome, and the agent's signing of the same answer.
    let challenge = handshake_challenge();
    let hello = valid_hello(&challenge);
    let binding = binding_of(&challenge, hello.client_nonce);
    let welcome = Welcome {
        proof: welcome_proof(&fuzz_key(), &binding, &hello.proof),
    };
    seeds.push((
        "challenge".into(),
        frame_with_id(Opcode::Hello, FLAG_REPLY, 0, &challenge.to_body(), &[]),
    ));
    seeds.extend(exchange("hello", Opcode::Hello, &hello, &welcome));
    let signed = AgentSigned {
        credentials: hello.credentials.clone(),
        proof: hello.proof,
        welcome: welcome.proof,
    };
    seeds.extend(exchange(
        "agent-sign",
        Opcode::AgentSign,
        &AgentSign { binding },
        &signed,
    ));
    seeds.extend(exchange(
        "object-create",
        Opcode::ObjectCreate,
        &ObjectCreate {
            handle: 42,
            namespace: FUZZ_NAMESPACE,
            cache_unit_bytes: 16384,
        },
        &Empty {},
    ));
    seeds.extend(exchange(
        "object-remove",
        Opcode::ObjectRemove,
        &ObjectRemove {
            handle: 42,
            namespace: FUZZ_NAMESPACE,
        },
        &Empty {},
    ));
    seeds.extend(exchange(
        "object-stat",
        Opcode::ObjectStat,
        &ObjectStat {
            handle: 42,
            capability: signed_capability(),
        },
        &ObjectStatReply {
            size: 65536,
            mtime_ns: 1_700_000_000_000_000_000,
        },
    ));
    seeds.extend(exchange(
        "object-truncate",
        Opcode::ObjectTruncate,
        &ObjectTruncate {
            handle: 42,
            namespace: FUZZ_NAMESPACE,
            size: 100,
        },
        &Empty {},
    ));
    seeds.extend(exchange(
        "object-sync",
        Opcode::ObjectSync,
        &ObjectSync {
            handle: 42,
            capability: signed_capability(),
        },
        &Empty {},
    ));
    let pieces = vec![Piece::new(0, 4096), Piece::new(65536, 100)];
    let capability = Capability(vec![0xAA, 0xBB]);
    let write = Write {
        handle: 42,
        capability: capability.clone(),
        mode: TransferMode::Gather,
        storage: StoragePlan::Auto,
        pieces: pieces.clone(),
    };
    seeds.extend(exchange(
        "write",
        Opcode::Write,
        &write,
        &IoReply {
            bytes: 4196,
            storage_pieces: 2,
            storage_bytes: 8192,
            plan: StoragePlan::Sieve,
        },
    ));
    let read = Read {
        handle: 42,
        capability,
        mode: TransferMode::Multiple,
        storage: StoragePlan::Auto,
        pieces,
    };
    seeds.extend(exchange(
        "read",
        Opcode::Read,
        &read,
        &IoReply {
            bytes: 4196,
            storage_pieces: 2,
            storage_bytes: 8192,
            plan: StoragePlan::Sieve,
        },
    ));
    // A write whose bulk data follows the body (short, to keep the seed small).
    let small = Write {
        pieces: vec![Piece::new(0, 8)],
        ..write
    };
    seeds.push((
        "write-with-bulk".into(),
        frame(Opcode::Write, 0, &small.to_body(), b"01234567"),
    ));
    let io = IoReply {
        bytes: 128,
        storage_pieces: 1,
        storage_bytes: 128,
        plan: StoragePlan::PerPiece,
    };
    let typed = WriteType {
        handle: 42,
        capability: Capability::default(),
        mode: TransferMode::Gather,
        storage: StoragePlan::Auto,
        file: file_type(),
        start: 0,
        end: 128,
        ranges: vec![Piece::new(0, 64), Piece::new(96, 32)],
        pieces: 1,
    };
    seeds.extend(exchange("write-type", Opcode::WriteType, &typed, &io));
    let read_type = ReadType {
        handle: 42,
        capability: Capability::default(),
        mode: TransferMode::Pack,
        storage: StoragePlan::Auto,
        file: file_type(),
        start: 8,
        end: 64,
        ranges: vec![Piece::new(8, 56)],
    };
    seeds.extend(exchange("read-type", Opcode::ReadType, &read_type, &io));
    seeds.extend(exchange(
        "declare-view",
        Opcode::DeclareView,
        &DeclareView {
            handle: 42,
            capability: signed_capability(),
            view_id: 0x5eed,
            file: file_type(),
        },
        &Empty {},
    ));
    let write_view = WriteView {
        handle: 42,
        capability: Capability::default(),
        mode: TransferMode::Multiple,
        storage: StoragePlan::Auto,
        view_id: 0x5eed,
        start: 0,
        end: 128,
        ranges: Vec::new(),
        pieces: 1,
    };
    seeds.extend(exchange("write-view", Opcode::WriteView, &write_view, &io));
    let read_view = ReadView {
        handle: 42,
        capability: Capability::default(),
        mode: TransferMode::Gather,
        storage: StoragePlan::Auto,
        view_id: 0x5eed,
        start: 0,
        end: 128,
        ranges: vec![Piece::new(16, 16), Piece::new(64, 64)],
    };
    seeds.extend(exchange("read-view", Opcode::ReadView, &read_view, &io));
    let tag = CollectiveTag {
        id: 0xC011_EC71,
        round: 0,
        rank: 1,
        participants: 2,
        wait_ms: 20_000,
    };
    let write_collective = WriteCollective {
        handle: 42,
        capability: Capability::default(),
        mode: TransferMode::Gather,
        storage: StoragePlan::Auto,
        file: file_type(),
        start: 0,
        end: 128,
        ranges: Vec::new(),
        pieces: 1,
        collective: tag.clone(),
    };
    seeds.extend(exchange(
        "write-collective",
        Opcode::WriteCollective,
        &write_collective,
        &io,
    ));
    let read_collective = ReadCollective {
        handle: 42,
        capability: Capability::default(),
        mode: TransferMode::Pack,
        storage: StoragePlan::Auto,
        file: file_type(),
        start: 8,
        end: 64,
        ranges: vec![Piece::new(8, 8)],
        collective: CollectiveTag { round: 1, ..tag },
    };
    seeds.extend(exchange(
        "read-collective",
        Opcode::ReadCollective,
        &read_collective,
        &io,
    ));
    let lock = LockRange {
        handle: 42,
        capability: signed_capability(),
        start: 0,
        end: 4096,
        exclusive: true,
        wait_ms: 1000,
        lease_ms: 5000,
    };
    seeds.extend(exchange(
        "lock-range",
        Opcode::LockRange,
        &lock,
        &LockGranted { lock_id: 7 },
    ));
    seeds.extend(exchange(
        "unlock-range",
        Opcode::UnlockRange,
        &UnlockRange {
            handle: 42,
            capability: signed_capability(),
            lock_id: 7,
        },
        &Empty {},
    ));
    let counters = StorageCounters {
        requests: 3,
        pieces: 300,
        calls: 6,
        bytes_wanted: 4800,
        bytes_storage: 19200,
        per_piece: 1,
        batched: 0,
        sieve: 2,
        mapped: 1,
    };
    let stats = ServerStatsReply {
        reads: counters.clone(),
        writes: counters,
        io_uring: true,
        model: "read_op_us=0.6 write_op_us=1.1".into(),
        cache: CacheCounters {
            hits: 12,
            misses: 4,
            evictions: 1,
            grant_waits: 2,
            dirty_bytes: 65536,
            flushes: 3,
            flushed_bytes: 196_608,
            ready_units_made: 2,
            raw_units_made: 2,
            units_landed: 1,
            units_demoted: 1,
            bytes_in_use: 262_144,
            budget_bytes: 1 << 26,
        },
    };
    seeds.extend(exchange(
        "server-stats",
        Opcode::ServerStats,
        &ServerStats {},
        &stats,
    ));
    seeds.extend(exchange(
        "statfs",
        Opcode::Statfs,
        &Statfs {},
        &StatfsReply {
            total_bytes: 1 << 40,
            free_bytes: 1 << 39,
            available_bytes: (1 << 39) - (1 << 30),
            objects: 3,
            object_bytes: 5 << 20,
            object_allocated_bytes: 5 << 20,
        },
    ));
    seeds.extend(exchange(
        "lease-listen",
        Opcode::LeaseListen,
        &LeaseListen {
            client_id: 0x5eed_c11e,
        },
        &Empty {},
    ));
    seeds.extend(exchange(
        "lease-acquire",
        Opcode::LeaseAcquire,
        &LeaseAcquire {
            handle: 7,
            capability: Capability::default(),
            client_id: 0x5eed_c11e,
            demotes: true,
            write: false,
            start: 0,
            end: 0,
            group: 0,
        },
        &LeaseAcquireReply {
            lease_ms: 10_000,
            lease_id: 3,
            start: 0,
            end: 0,
        },
    ));
    seeds.extend(exchange(
        "lease-acquire-write",
        Opcode::LeaseAcquire,
        &LeaseAcquire {
            handle: 7,
            capability: Capability::default(),
            client_id: 0x5eed_c11e,
            demotes: false,
            write: true,
            start: 4096,
            end: 8192,
            group: 0x9b0b,
        },
        &LeaseAcquireReply {
            lease_ms: 10_000,
            lease_id: 4,
            start: 0,
            end: u64::MAX,
        },
    ));
    seeds.extend(exchange(
        "lease-client",
        Opcode::LeaseClient,
        &LeaseClient {
            client_id: 0x5eed_c11e,
        },
        &Empty {},
    ));
    seeds.extend(exchange(
        "lease-revoke",
        Opcode::LeaseRevoke,
        &LeaseRevoke { handle: 7 },
        &Empty {},
    ));
    seeds.extend(exchange(
        "demote-offer",
        Opcode::DemoteOffer,
        &DemoteOffer {
            handle: 7,
            capability: Capability::default(),
            client_id: 0x5eed_c11e,
            lease_id: 3,
            pieces: vec![Piece::new(0, 65536), Piece::new(131_072, 65536)],
        },
        &DemoteWanted {
            wanted: WantedFlags(vec![1, 0]),
        },
    ));
    seeds.extend(exchange(
        "demote",
        Opcode::Demote,
        &Demote {
            handle: 7,
            capability: Capability::default(),
            client_id: 0x5eed_c11e,
            lease_id: 3,
            mode: TransferMode::Remote,
            choose: true,
            pieces: vec![Piece::new(0, 65536), Piece::new(131_072, 65536)],
        },
        &DemoteReply {
            inserted: 1,
            taken: WantedFlags(vec![1, 0]),
        },
    ));
    seeds.extend(exchange(
        "remote-probe",
        Opcode::RemoteProbe,
        &RemoteProbe {},
        &RemoteProbeReply { token: 0x7e55_e7a0 },
    ));
    seeds.extend(exchange(
        "share-region",
        Opcode::ShareRegion,
        &ShareRegion {
            key: 1 << 63 | 7,
            bytes: 1 << 20,
        },
        &Empty {},
    ));
    seeds.extend(exchange(
        "release-view",
        Opcode::ReleaseView,
        &ReleaseView {
            handle: 42,
            capability: signed_capability(),
            view_id: 0x5eed,
        },
        &Empty {},
    ));
    seeds.push(("data".into(), frame(Opcode::Data, 0, &[], b"01234567")));
    seeds.push((
        "data-reply".into(),
        frame(Opcode::Data, FLAG_REPLY, &[], b"89abcdef"),
    ));
    seeds.push((
        "error-reply".into(),
        frame(
            Opcode::Lookup,
            FLAG_REPLY | FLAG_ERROR,
            &RemoteError::new(ErrorCode::NotFound, "no such path: /x").to_body(),
            &[],
        ),
    ));
    seeds
}

fn remote_memory() -> RemoteMemory {
    RemoteMemory {
        access: RemoteAccess::Fabric,
        endpoint: RemoteEndpoint(vec![0x0a, 0, 0, 1]),
        segments_per_call: 4,
        segments: vec![
            RemoteSegment {
                address: 0x7f00_0000_1000,
                length: 4096,
                key: 9,
            },
            RemoteSegment {
                address: 0x7f00_0000_3000,
                length: 100,
                key: 9,
            },
        ],
    }
}

/// Valid bodies: one per body kind of the `bodies` target, prefixed with its selector.
pub fn body_seeds() -> Vec<(String, Vec<u8>)> {
    let frames = frame_seeds();
    let body_of = |name: &str| -> Vec<u8> {
        let (_, bytes) = frames
            .iter()
            .find(|(n, _)| n == name)
            .expect("seed frame exists");
        let header = Header::decode(bytes[..HEADER_BYTES].try_into().expect("header"))
            .expect("valid header");
        bytes[HEADER_BYTES..HEADER_BYTES + header.body_bytes as usize].to_vec()
    };
    let mut math = Vec::new();
    math.extend_from_slice(&100_000u64.to_le_bytes());
    math.extend_from_slice(&300_000u64.to_le_bytes());
    math.extend_from_slice(&1_000_001u64.to_le_bytes());
    math.extend_from_slice(&layout().to_body());
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("ping", body_of("ping-request")),
        ("ping-reply", body_of("ping-reply")),
        ("lookup", body_of("lookup-request")),
        ("create", body_of("create-request")),
        ("mkdir", body_of("mkdir-request")),
        ("rmdir", body_of("rmdir-request")),
        ("unlink", body_of("unlink-request")),
        ("rename", body_of("rename-request")),
        ("readdir", body_of("readdir-request")),
        ("readdir-reply", body_of("readdir-reply")),
        ("stat", body_of("stat-request")),
        ("stat-handle", body_of("stat-handle-request")),
        ("truncate", body_of("truncate-request")),
        ("attr", attr().to_body()),
        ("empty", Empty {}.to_body()),
        ("object-create", body_of("object-create-request")),
        ("object-remove", body_of("object-remove-request")),
        ("object-stat", body_of("object-stat-request")),
        ("object-stat-reply", body_of("object-stat-reply")),
        ("object-truncate", body_of("object-truncate-request")),
        ("object-sync", body_of("object-sync-request")),
        ("write", body_of("write-request")),
        ("read", body_of("read-request")),
        ("io-reply", body_of("write-reply")),
        ("remote-error", body_of("error-reply")),
        ("stripe-layout", layout().to_body()),
        ("optional-layout", Some(Layout::from(layout())).to_body()),
        ("layout", pattern_layout().to_body()),
        ("file-type", file_type().to_body()),
        ("datatype", columns().to_body()),
        ("write-type", body_of("write-type-request")),
        ("read-type", body_of("read-type-request")),
        ("declare-view", body_of("declare-view-request")),
        ("write-view", body_of("write-view-request")),
        ("read-view", body_of("read-view-request")),
        ("release-view", body_of("release-view-request")),
        ("credentials", credentials().to_body()),
        (
            "dir-entry",
            DirEntry {
                name: "output.dat".into(),
                handle: 42,
                kind: FileKind::File,
            }
            .to_body(),
        ),
        (
            "dir-entries",
            ReaddirReply::from_body(&body_of("readdir-reply"))
                .expect("reply")
                .entries
                .to_body(),
        ),
        ("piece", Piece::new(4096, 512).to_body()),
        (
            "pieces",
            vec![Piece::new(0, 4096), Piece::new(65536, 100)].to_body(),
        ),
        ("capability", Capability(vec![1, 2, 3]).to_body()),
        ("file-kind", FileKind::Directory.to_body()),
        ("transfer-mode", TransferMode::Pack.to_body()),
        ("remote-memory", remote_memory().to_body()),
        ("path", "/data/run-1".to_owned().to_body()),
        (
            "collective-tag",
            CollectiveTag {
                id: 7,
                round: 2,
                rank: 3,
                participants: 4,
                wait_ms: 500,
            }
            .to_body(),
        ),
        ("write-collective", body_of("write-collective-request")),
        ("read-collective", body_of("read-collective-request")),
        ("share-region", body_of("share-region-request")),
        ("chmod", body_of("chmod-request")),
        ("chown", body_of("chown-request")),
        ("challenge", body_of("challenge")),
        ("hello", body_of("hello-request")),
        ("welcome", body_of("hello-reply")),
        ("agent-sign", body_of("agent-sign-request")),
        ("agent-signed", body_of("agent-sign-reply")),
        ("open", body_of("open-request")),
        ("opened", body_of("open-reply")),
        ("renew", body_of("renew-request")),
        ("statfs-reply", body_of("statfs-reply")),
        ("lease-listen", body_of("lease-listen-request")),
        ("lease-acquire", body_of("lease-acquire-request")),
        ("lease-acquire-reply", body_of("lease-acquire-reply")),
        ("lease-revoke", body_of("lease-revoke-request")),
        ("demote-offer", body_of("demote-offer-request")),
        ("demote-wanted", body_of("demote-offer-reply")),
        ("demote", body_of("demote-request")),
        ("demote-reply", body_of("demote-reply")),
        ("lease-client", body_of("lease-client-request")),
        ("layout-math", math),
    ];
    assert_eq!(bodies.len(), BODY_KINDS.len(), "one seed per body kind");
    bodies
        .into_iter()
        .map(|(name, body)| {
            let selector = BODY_KINDS
                .iter()
                .position(|kind| *kind == name)
                .expect("known body kind");
            let mut input = vec![u8::try_from(selector).expect("fewer than 256 kinds")];
            input.extend_from_slice(&body);
            (name.to_owned(), input)
        })
        .collect()
}

/// The client nonce of the seeds' handshakes.
fn fuzz_client_nonce() -> Nonce {
    Nonce([0x3C; 32])
}

/// What a client's proofs for `challenge` are bound to, with its nonce `client_nonce`.
fn binding_of(challenge: &Challenge, client_nonce: Nonce) -> Binding {
    Binding {
        role: challenge.role,
        server_index: challenge.server_index,
        cluster_id: challenge.cluster_id,
        server_nonce: challenge.nonce,
        client_nonce,
    }
}

/// The `Hello` a client holding [`fuzz_key`] sends for `challenge`.
fn valid_hello(challenge: &Challenge) -> Hello {
    let credentials = credentials();
    let binding = binding_of(challenge, fuzz_client_nonce());
    Hello {
        proof: hello_proof(&fuzz_key(), &binding, &credentials),
        client_nonce: binding.client_nonce,
        credentials,
    }
}

/// A credential with every field changed from the seed user's, signed with `key`.
fn signed(key: &ClusterKey, change: impl FnOnce(&mut Credentials)) -> Credentials {
    let mut credentials = credentials();
    change(&mut credentials);
    sign_credentials(key, &mut credentials);
    credentials
}

/// Inputs of the `handshake` target: valid and refused handshakes, agent messages, credentials
/// and capabilities, each a whole body (or a capability's bytes).
pub fn handshake_seeds() -> Vec<(String, Vec<u8>)> {
    let key = fuzz_key();
    let challenge = handshake_challenge();
    let nonce = challenge.nonce;
    let hello = valid_hello(&challenge);
    let binding = binding_of(&challenge, fuzz_client_nonce());
    let with = |credentials: Credentials, key: &ClusterKey, nonce: &Nonce| {
        let binding = Binding {
            server_nonce: *nonce,
            ..binding_of(&challenge, fuzz_client_nonce())
        };
        Hello {
            proof: hello_proof(key, &binding, &credentials),
            client_nonce: binding.client_nonce,
            credentials,
        }
    };
    // Made for iod 4 of this cluster (a squatter relaying iod 3's nonce): iod 3 refuses it.
    let for_other_server = {
        let binding = Binding {
            server_index: 4,
            ..binding.clone()
        };
        let credentials = credentials();
        Hello {
            proof: hello_proof(&key, &binding, &credentials),
            client_nonce: binding.client_nonce,
            credentials,
        }
    };
    let server = signed(&key, |c| {
        c.principal = Principal::Server;
        c.uid = 0;
        c.gid = 0;
        c.groups.clear();
        c.host = "mds-1".into();
    });
    let widest = signed(&key, |c| {
        c.groups = (0..CREDENTIAL_GROUPS_MAX as u32).collect();
        c.host = "h".repeat(HOST_NAME_BYTES_MAX);
    });
    let expired = signed(&key, |c| c.expires_s = 1_600_000_000);
    let mut altered = hello.clone();
    altered.credentials.uid = 0;
    let mut other_nonce = nonce;
    other_nonce.0[31] ^= 0x80;
    let welcome = Welcome {
        proof: welcome_proof(&key, &binding, &hello.proof),
    };
    let agent_signed = AgentSigned {
        credentials: hello.credentials.clone(),
        proof: hello.proof,
        welcome: welcome.proof,
    };
    let sign = |grant: Grant| grant.sign(&key).0;
    let valid = sign(grant());
    let mut altered_rights = valid.clone();
    altered_rights[9] = 1;
    let mut version_2 = valid.clone();
    version_2[0] = 2;
    let truncate = |bytes: &[u8], cut: usize| bytes[..bytes.len() - cut].to_vec();
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        ("challenge", challenge.to_body()),
        ("hello", hello.to_body()),
        ("hello-server", with(server, &key, &nonce).to_body()),
        ("hello-widest", with(widest.clone(), &key, &nonce).to_body()),
        (
            "hello-other-nonce",
            with(credentials(), &key, &other_nonce).to_body(),
        ),
        (
            "hello-other-key",
            with(signed(&other_key(), |_| ()), &other_key(), &nonce).to_body(),
        ),
        ("hello-expired", with(expired, &key, &nonce).to_body()),
        ("hello-altered", altered.to_body()),
        ("hello-truncated", truncate(&hello.to_body(), 5)),
        ("hello-other-server", for_other_server.to_body()),
        ("welcome", welcome.to_body()),
        (
            "agent-sign",
            AgentSign {
                binding: binding.clone(),
            }
            .to_body(),
        ),
        (
            "agent-sign-zero",
            AgentSign {
                binding: Binding::default(),
            }
            .to_body(),
        ),
        ("agent-signed", agent_signed.to_body()),
        ("credentials", credentials().to_body()),
        ("credentials-widest", widest.to_body()),
        (
            "credentials-truncated",
            truncate(&credentials().to_body(), MAC_BYTES + 1),
        ),
        ("capability", valid.clone()),
        (
            "capability-read-other-uid",
            sign(Grant {
                rights: Rights::READ,
                uid: 1001,
                handle: 7,
                ..grant()
            }),
        ),
        (
            "capability-no-rights",
            sign(Grant {
                rights: Rights::ANY,
                ..grant()
            }),
        ),
        (
            "capability-expired",
            sign(Grant {
                expires_s: 1_600_000_000,
                ..grant()
            }),
        ),
        ("capability-other-key", grant().sign(&other_key()).0),
        ("capability-altered", altered_rights),
        ("capability-version-2", version_2),
        ("capability-truncated", truncate(&valid, 1)),
        ("capability-long", [valid.as_slice(), &[0]].concat()),
        ("empty", Vec::new()),
    ];
    seeds
        .into_iter()
        .map(|(name, bytes)| (name.to_owned(), bytes))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_decode_and_pass_the_targets() {
        for (name, input) in frame_seeds() {
            let header = Header::decode(input[..HEADER_BYTES].try_into().unwrap())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                input.len(),
                HEADER_BYTES + (header.body_bytes + header.bulk_bytes) as usize,
                "{name}"
            );
            assert!(fuzz_frame(&input), "seed frame {name} does not decode");
        }
        for (name, input) in body_seeds() {
            assert!(usize::from(input[0]) < BODY_KINDS.len(), "{name}");
            assert!(fuzz_body(&input), "seed body {name} does not decode");
        }
    }

    #[test]
    fn handshake_seeds_are_accepted_or_refused_as_named() {
        let outcomes: std::collections::HashMap<String, HandshakeOutcome> = handshake_seeds()
            .into_iter()
            .map(|(name, input)| (name, fuzz_handshake(&input)))
            .collect();
        let outcome = |name: &str| {
            outcomes
                .get(name)
                .unwrap_or_else(|| panic!("no seed {name}"))
                .clone()
        };
        let decoded = |name: &str| outcome(name).decoded;
        assert_eq!(decoded("challenge"), ["challenge"]);
        assert_eq!(decoded("welcome"), ["welcome"]);
        assert_eq!(decoded("agent-sign"), ["agent-sign"]);
        // A `Hello` and an `AgentSigned` have one shape (a credential, then two 32-byte
        // fields): every body of one decodes as the other.
        assert_eq!(decoded("agent-signed"), ["hello", "agent-signed"]);
        assert_eq!(decoded("credentials"), ["credentials"]);
        assert_eq!(decoded("credentials-widest"), ["credentials"]);
        for accepted in ["hello", "hello-server", "hello-widest", "agent-signed"] {
            assert!(outcome(accepted).accepted, "{accepted} was refused");
        }
        for refused in [
            "hello-other-nonce",
            "hello-other-key",
            "hello-expired",
            "hello-altered",
            "hello-other-server",
        ] {
            let outcome = outcome(refused);
            assert_eq!(outcome.decoded, ["hello", "agent-signed"], "{refused}");
            assert!(!outcome.accepted, "{refused} was accepted");
        }
        for nothing in ["hello-truncated", "credentials-truncated", "empty"] {
            assert_eq!(outcome(nothing), HandshakeOutcome::default(), "{nothing}");
        }
        assert!(outcome("capability").verified && outcome("capability").allowed);
        assert!(
            outcome("capability-read-other-uid").allowed,
            "its own uid, handle and rights"
        );
        for (name, verified) in [
            ("capability-no-rights", true),
            ("capability-expired", true),
            ("capability-other-key", false),
            ("capability-altered", false),
            ("capability-version-2", false),
            ("capability-truncated", false),
            ("capability-long", false),
        ] {
            let outcome = outcome(name);
            assert_eq!(
                (outcome.verified, outcome.allowed),
                (verified, false),
                "{name}"
            );
        }
    }

    #[test]
    fn short_and_garbage_inputs_are_refused_quietly() {
        assert!(!fuzz_frame(&[]));
        assert!(!fuzz_frame(&[0; 100]));
        assert!(!fuzz_body(&[]));
        assert_eq!(fuzz_handshake(&[0xFF; 300]), HandshakeOutcome::default());
        for selector in 0..=255u8 {
            fuzz_body(&[selector]);
            fuzz_body(&[selector, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0]);
        }
    }
}
