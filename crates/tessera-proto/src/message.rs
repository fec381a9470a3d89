//! The catalogue of wire operations: opcode, request type, reply type.
//!
//! Every request a client, the metadata server (mds) or an I/O server (iod) can receive is
//! listed once in [`Opcode`] and bound to its body types by a [`Request`] impl. The server
//! handlers are in `tessera-mds/src/handler.rs` and `tessera-iod/src/handler.rs`; the byte
//! layout of every body is in `docs/PROTOCOL.md`, which the encode tests below keep honest.

use crate::codec::{Decoder, Encoder, Wire};
use crate::error::{ErrorCode, RemoteError, WireError};
use crate::layout::Layout;
use crate::layout::StripeLayout;
use crate::limits::{
    CAPABILITY_BYTES_MAX, CREDENTIAL_GROUPS_MAX, DEMOTE_PIECES_MAX, ERROR_MESSAGE_BYTES_MAX,
    HANDLES_LIVE_MAX, HOST_NAME_BYTES_MAX, MAC_BYTES, NAME_BYTES_MAX, NONCE_BYTES,
    OBJECT_LEFT_REASON_BYTES_MAX, PATH_BYTES_MAX, READDIR_ENTRIES_MAX, REMOTE_ENDPOINT_BYTES_MAX,
    REMOTE_SEGMENTS_MAX, REQUEST_PIECES_MAX, SERVERS_MAX,
};
use tessera_dtype::Datatype;

/// Every operation on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// Liveness and identity of any server.
    Ping = 0x01,
    /// The connection handshake: the server's [`Challenge`] (sent first, as a reply frame
    /// with request id 0), the client's [`Hello`] and the server's [`Welcome`].
    Hello = 0x02,
    /// Agent: sign a credential for the calling process and answer a server's challenge.
    AgentSign = 0x03,
    /// mds: resolve a path to its attributes and layout.
    Lookup = 0x10,
    /// mds: create a file (and its objects on the iods).
    Create = 0x11,
    /// mds: create a directory.
    Mkdir = 0x12,
    /// mds: remove an empty directory.
    Rmdir = 0x13,
    /// mds: remove a file and its objects.
    Unlink = 0x14,
    /// mds: move a name.
    Rename = 0x15,
    /// mds: list a directory, one page at a time.
    Readdir = 0x16,
    /// mds: attributes of a path, with the file size computed from the iods.
    Stat = 0x17,
    /// mds: attributes of an open file by handle, size computed.
    StatHandle = 0x18,
    /// mds: set the size of a file.
    Truncate = 0x19,
    /// mds: take a byte-range lock on a file (waits until it is free).
    LockRange = 0x1A,
    /// mds: release a byte-range lock.
    UnlockRange = 0x1B,
    /// mds: open a file: permission check, attributes and a capability.
    Open = 0x1E,
    /// mds: a fresh capability for a file already open (by handle).
    Renew = 0x1F,
    /// mds: set the permission bits of a path.
    Chmod = 0x1C,
    /// mds: set the owner and/or group of a path.
    Chown = 0x1D,
    /// mds, from a server only: which of a batch of handles name live files (an iod's orphan
    /// sweep).
    HandlesLive = 0x20,
    /// mds: its group commit counters (changes made durable, durable commits) and inodes.
    MdsStats = 0x21,
    /// mds: set the access and modification times of a path (`utimensat`).
    SetTimes = 0x22,
    /// iod, from the mds only: create the local object of a handle (never over an existing
    /// one).
    ObjectCreate = 0x30,
    /// iod: remove the local object of a handle.
    ObjectRemove = 0x31,
    /// iod: size and mtime of a local object.
    ObjectStat = 0x32,
    /// iod: set the size of a local object.
    ObjectTruncate = 0x33,
    /// iod: write a list of local pieces.
    Write = 0x34,
    /// iod: read a list of local pieces.
    Read = 0x35,
    /// iod: flush a local object to stable storage.
    ObjectSync = 0x36,
    /// iod: write this server's share of a range of a datatype's stream.
    WriteType = 0x37,
    /// iod: read this server's share of a range of a datatype's stream.
    ReadType = 0x38,
    /// iod: declare a view (a file type, displacement and layout) under an id.
    DeclareView = 0x39,
    /// iod: write this server's share of a range of a declared view.
    WriteView = 0x3A,
    /// iod: read this server's share of a range of a declared view.
    ReadView = 0x3B,
    /// iod: forget a view.
    ReleaseView = 0x3C,
    /// iod: storage counters and the cost model in use.
    ServerStats = 0x3D,
    /// iod: check that one-sided access to the client's memory works.
    RemoteProbe = 0x3E,
    /// A bulk-only frame of the `multiple` transfer mode: one piece of data.
    Data = 0x3F,
    /// iod: one participant's share of a server-directed collective write.
    WriteCollective = 0x40,
    /// iod: one participant's share of a server-directed collective read.
    ReadCollective = 0x41,
    /// iod: map a shared-memory region of a same-host client, whose descriptor travels
    /// with the frame (`SCM_RIGHTS`), under a key the client chose.
    ShareRegion = 0x42,
    /// iod: capacity and use of the file system under its data directory (`tessera df`).
    Statfs = 0x43,
    /// iod: turn this connection into the client's callback channel for lease revocations.
    LeaseListen = 0x44,
    /// iod: a read lease on a file's object, for a client that caches its blocks.
    LeaseAcquire = 0x45,
    /// iod → client, on a callback channel: drop what you cache of a file, then answer.
    LeaseRevoke = 0x46,
    /// iod: which of these clean blocks a caching client evicted the iod wants (DEMOTE).
    DemoteOffer = 0x47,
    /// iod: clean blocks a caching client evicted, for the iod's unified cache (DEMOTE).
    Demote = 0x48,
    /// iod: create the local objects of many handles (the mds's objects made ahead).
    ObjectCreateMany = 0x49,
    /// iod: the requests on this connection are those of caching client `client_id` (the
    /// writes its write-back flushes).
    LeaseClient = 0x4A,
}

impl Opcode {
    /// Decodes an opcode byte.
    pub fn from_u8(value: u8) -> Result<Self, WireError> {
        Ok(match value {
            0x01 => Self::Ping,
            0x02 => Self::Hello,
            0x03 => Self::AgentSign,
            0x10 => Self::Lookup,
            0x11 => Self::Create,
            0x12 => Self::Mkdir,
            0x13 => Self::Rmdir,
            0x14 => Self::Unlink,
            0x15 => Self::Rename,
            0x16 => Self::Readdir,
            0x17 => Self::Stat,
            0x18 => Self::StatHandle,
            0x19 => Self::Truncate,
            0x1A => Self::LockRange,
            0x1B => Self::UnlockRange,
            0x1E => Self::Open,
            0x1F => Self::Renew,
            0x1C => Self::Chmod,
            0x1D => Self::Chown,
            0x20 => Self::HandlesLive,
            0x21 => Self::MdsStats,
            0x22 => Self::SetTimes,
            0x30 => Self::ObjectCreate,
            0x31 => Self::ObjectRemove,
            0x32 => Self::ObjectStat,
            0x33 => Self::ObjectTruncate,
            0x34 => Self::Write,
            0x35 => Self::Read,
            0x36 => Self::ObjectSync,
            0x37 => Self::WriteType,
            0x38 => Self::ReadType,
            0x39 => Self::DeclareView,
            0x3A => Self::WriteView,
            0x3B => Self::ReadView,
            0x3C => Self::ReleaseView,
            0x3D => Self::ServerStats,
            0x3E => Self::RemoteProbe,
            0x3F => Self::Data,
            0x40 => Self::WriteCollective,
            0x41 => Self::ReadCollective,
            0x42 => Self::ShareRegion,
            0x43 => Self::Statfs,
            0x44 => Self::LeaseListen,
            0x45 => Self::LeaseAcquire,
            0x46 => Self::LeaseRevoke,
            0x47 => Self::DemoteOffer,
            0x48 => Self::Demote,
            0x49 => Self::ObjectCreateMany,
            0x4A => Self::LeaseClient,
            opcode => return Err(WireError::UnknownOpcode { opcode }),
        })
    }

    /// Every opcode, in byte order.
    pub const ALL: [Self; 49] = [
        Self::Ping,
        Self::Hello,
        Self::AgentSign,
        Self::Lookup,
        Self::Create,
        Self::Mkdir,
        Self::Rmdir,
        Self::Unlink,
        Self::Rename,
        Self::Readdir,
        Self::Stat,
        Self::StatHandle,
        Self::Truncate,
        Self::LockRange,
        Self::UnlockRange,
        Self::Chmod,
        Self::Chown,
        Self::Open,
        Self::Renew,
        Self::HandlesLive,
        Self::MdsStats,
        Self::SetTimes,
        Self::ObjectCreate,
        Self::ObjectRemove,
        Self::ObjectStat,
        Self::ObjectTruncate,
        Self::Write,
        Self::Read,
        Self::ObjectSync,
        Self::WriteType,
        Self::ReadType,
        Self::DeclareView,
        Self::WriteView,
        Self::ReadView,
        Self::ReleaseView,
        Self::ServerStats,
        Self::RemoteProbe,
        Self::Data,
        Self::WriteCollective,
        Self::ReadCollective,
        Self::ShareRegion,
        Self::Statfs,
        Self::LeaseListen,
        Self::LeaseAcquire,
        Self::LeaseRevoke,
        Self::DemoteOffer,
        Self::Demote,
        Self::ObjectCreateMany,
        Self::LeaseClient,
    ];

    /// A short, stable snake_case name: the `kind` label of the servers' request metrics.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Ping => "ping",
            Self::Hello => "hello",
            Self::AgentSign => "agent_sign",
            Self::Lookup => "lookup",
            Self::Create => "create",
            Self::Mkdir => "mkdir",
            Self::Rmdir => "rmdir",
            Self::Unlink => "unlink",
            Self::Rename => "rename",
            Self::Readdir => "readdir",
            Self::Stat => "stat",
            Self::StatHandle => "stat_handle",
            Self::Truncate => "truncate",
            Self::LockRange => "lock_range",
            Self::UnlockRange => "unlock_range",
            Self::Open => "open",
            Self::Renew => "renew",
            Self::Chmod => "chmod",
            Self::Chown => "chown",
            Self::HandlesLive => "handles_live",
            Self::MdsStats => "mds_stats",
            Self::SetTimes => "set_times",
            Self::ObjectCreate => "object_create",
            Self::ObjectRemove => "object_remove",
            Self::ObjectStat => "object_stat",
            Self::ObjectTruncate => "object_truncate",
            Self::Write => "write",
            Self::Read => "read",
            Self::ObjectSync => "object_sync",
            Self::WriteType => "write_type",
            Self::ReadType => "read_type",
            Self::DeclareView => "declare_view",
            Self::WriteView => "write_view",
            Self::ReadView => "read_view",
            Self::ReleaseView => "release_view",
            Self::ServerStats => "server_stats",
            Self::RemoteProbe => "remote_probe",
            Self::Data => "data",
            Self::WriteCollective => "write_collective",
            Self::ReadCollective => "read_collective",
            Self::ShareRegion => "share_region",
            Self::Statfs => "statfs",
            Self::LeaseListen => "lease_listen",
            Self::LeaseAcquire => "lease_acquire",
            Self::LeaseRevoke => "lease_revoke",
            Self::DemoteOffer => "demote_offer",
            Self::Demote => "demote",
            Self::ObjectCreateMany => "object_create_many",
            Self::LeaseClient => "lease_client",
        }
    }
}

/// A request body bound to its opcode and reply body.
pub trait Request: Wire {
    /// The opcode in the frame header.
    const OPCODE: Opcode;
    /// The body of a successful reply.
    type Reply: Wire;
}

// ---------------------------------------------------------------------------------------------
// Field codecs. Strings are paths unless a type says otherwise; lists carry their own limits.

impl Wire for u16 {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u16(*self);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        decoder.u16()
    }
}

impl Wire for u32 {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u32(*self);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        decoder.u32()
    }
}

impl Wire for u64 {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u64(*self);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        decoder.u64()
    }
}

impl Wire for bool {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.bool(*self);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        decoder.bool()
    }
}

impl Wire for String {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.str(self);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        decoder.str("path_bytes_max", PATH_BYTES_MAX)
    }
}

impl Wire for Datatype {
    fn encode(&self, encoder: &mut Encoder) {
        let bytes = tessera_dtype::wire::encode(self)
            .expect("types sent on the wire were checked against the limits when built");
        encoder.bytes(&bytes);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let bytes = decoder.bytes(
            "datatype_encoded_bytes_max",
            tessera_dtype::DATATYPE_ENCODED_BYTES_MAX,
        )?;
        tessera_dtype::wire::decode(bytes).map_err(|err| WireError::Datatype(err.to_string()))
    }
}

impl Wire for Vec<Datatype> {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.count(self.len());
        for datatype in self {
            datatype.encode(encoder);
        }
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let count = decoder.count("servers_max", SERVERS_MAX, 14)?;
        (0..count).map(|_| Datatype::decode(decoder)).collect()
    }
}

impl Wire for Option<Layout> {
    fn encode(&self, encoder: &mut Encoder) {
        match self {
            None => encoder.u8(0),
            Some(layout) => {
                encoder.u8(1);
                layout.encode(encoder);
            }
        }
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        match decoder.u8()? {
            0 => Ok(None),
            1 => Ok(Some(Layout::decode(decoder)?)),
            other => Err(WireError::BadValue {
                field: "layout tag",
                value: u64::from(other),
            }),
        }
    }
}

/// Declares a message struct and its field-by-field encoding, in declaration order.
macro_rules! wire_struct {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$field_meta:meta])* pub $field:ident : $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name { $($(#[$field_meta])* pub $field: $ty,)* }

        impl Wire for $name {
            #[allow(unused_variables)]
            fn encode(&self, encoder: &mut Encoder) {
                $(self.$field.encode(encoder);)*
            }
            #[allow(unused_variables)]
            fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
                Ok(Self { $($field: <$ty as Wire>::decode(decoder)?,)* })
            }
        }
    };
}

/// Binds a request type to its opcode and reply type.
macro_rules! request {
    ($request:ident => $opcode:ident, $reply:ty) => {
        impl Request for $request {
            const OPCODE: Opcode = Opcode::$opcode;
            type Reply = $reply;
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Shared types.

/// Who a credential speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[repr(u8)]
pub enum Principal {
    /// A user's process, signed for by the agent of its host (or by itself, holding the key).
    #[default]
    User = 1,
    /// A server of the cluster (the mds calling the iods), signed with the cluster key.
    Server = 2,
}

impl Wire for Principal {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u8(*self as u8);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        match decoder.u8()? {
            1 => Ok(Self::User),
            2 => Ok(Self::Server),
            other => Err(WireError::BadValue {
                field: "principal",
                value: u64::from(other),
            }),
        }
    }
}

/// An HMAC-SHA-256 tag (credentials, capabilities, handshake proofs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Mac(pub [u8; MAC_BYTES]);

impl Wire for Mac {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.raw(&self.0);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let mut mac = [0u8; MAC_BYTES];
        mac.copy_from_slice(decoder.take(MAC_BYTES)?);
        Ok(Self(mac))
    }
}

/// A server's random challenge for one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Nonce(pub [u8; NONCE_BYTES]);

impl Wire for Nonce {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.raw(&self.0);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let mut nonce = [0u8; NONCE_BYTES];
        nonce.copy_from_slice(decoder.take(NONCE_BYTES)?);
        Ok(Self(nonce))
    }
}

impl Wire for Vec<u32> {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.count(self.len());
        for value in self {
            encoder.u32(*value);
        }
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let count = decoder.count("credential_groups_max", CREDENTIAL_GROUPS_MAX, 4)?;
        (0..count).map(|_| decoder.u32()).collect()
    }
}

/// Who is asking: a credential signed with the cluster key (by the agent of the caller's host,
/// or by a process holding the key). Servers check the tag before they believe any field; the
/// signed bytes are the encoding of every field before `mac`, after the domain string
/// `tessera-credential-v1` (see `docs/PROTOCOL.md`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Credentials {
    /// A user's process or a server.
    pub principal: Principal,
    /// User id (from `SO_PEERCRED`, never from the caller's word).
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups (at most `credential_groups_max`).
    pub groups: Vec<u32>,
    /// The host the credential was signed on.
    pub host: String,
    /// When it stops being accepted, in seconds since the Unix epoch.
    pub expires_s: u64,
    /// HMAC-SHA-256 with the cluster key over the fields above.
    pub mac: Mac,
}

impl Credentials {
    /// The bytes the tag covers: every field but the tag.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut encoder = Encoder::new();
        self.principal.encode(&mut encoder);
        encoder.u32(self.uid);
        encoder.u32(self.gid);
        self.groups.encode(&mut encoder);
        encoder.str(&self.host);
        encoder.u64(self.expires_s);
        encoder.finish()
    }
}

impl Wire for Credentials {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.raw(&self.signed_bytes());
        self.mac.encode(encoder);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        Ok(Self {
            principal: Principal::decode(decoder)?,
            uid: decoder.u32()?,
            gid: decoder.u32()?,
            groups: Vec::<u32>::decode(decoder)?,
            host: decoder.str("host_name_bytes_max", HOST_NAME_BYTES_MAX)?,
            expires_s: decoder.u64()?,
            mac: Mac::decode(decoder)?,
        })
    }
}

/// What a namespace entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum FileKind {
    /// A regular file with a layout.
    #[default]
    File = 1,
    /// A directory.
    Directory = 2,
}

impl Wire for FileKind {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u8(*self as u8);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        match decoder.u8()? {
            1 => Ok(Self::File),
            2 => Ok(Self::Directory),
            other => Err(WireError::BadValue {
                field: "file kind",
                value: u64::from(other),
            }),
        }
    }
}

wire_struct! {
    /// Attributes of a file or directory.
    pub struct Attr {
        /// The file handle: names the file's objects on every iod.
        pub handle: u64,
        /// File or directory.
        pub kind: FileKind,
        /// Permission bits (`0o7777` at most).
        pub mode: u32,
        /// Owner.
        pub uid: u32,
        /// Group.
        pub gid: u32,
        /// Logical size in bytes (computed from the iods by `Stat`; 0 in `Lookup` replies).
        pub size: u64,
        /// Last access, ns since the Unix epoch.
        pub atime_ns: u64,
        /// Last data or name change, ns since the Unix epoch.
        pub mtime_ns: u64,
        /// Last attribute change, ns since the Unix epoch.
        pub ctime_ns: u64,
        /// Links (2 + subdirectories for a directory, 1 for a file).
        pub nlink: u32,
        /// Layout of a file; `None` for a directory.
        pub layout: Option<Layout>,
    }
}

/// One contiguous range of a file (or of a local object): offset and length in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Piece {
    /// Offset in bytes.
    pub offset: u64,
    /// Length in bytes.
    pub length: u64,
}

impl Piece {
    /// A piece.
    pub fn new(offset: u64, length: u64) -> Self {
        Self { offset, length }
    }
}

impl Wire for Piece {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u64(self.offset);
        encoder.u64(self.length);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        Ok(Self {
            offset: decoder.u64()?,
            length: decoder.u64()?,
        })
    }
}

impl Wire for Vec<Piece> {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.count(self.len());
        for piece in self {
            piece.encode(encoder);
        }
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let count = decoder.count("request_pieces_max", REQUEST_PIECES_MAX as usize, 16)?;
        (0..count).map(|_| Piece::decode(decoder)).collect()
    }
}

/// A capability granting access to a handle, signed by the mds (layout in `docs/PROTOCOL.md`;
/// made and checked by `tessera-auth`). Empty on requests between servers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capability(pub Vec<u8>);

impl Wire for Capability {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.bytes(&self.0);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        Ok(Self(
            decoder
                .bytes("capability_bytes_max", CAPABILITY_BYTES_MAX)?
                .to_vec(),
        ))
    }
}

/// How the bulk bytes of a `Write` request or `Read` reply travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[repr(u8)]
pub enum TransferMode {
    /// One frame; bulk gathered from / scattered into the caller's pieces (`writev`/`readv`).
    #[default]
    Gather = 1,
    /// One frame; bulk packed into / unpacked from one contiguous buffer (one extra copy).
    Pack = 2,
    /// One `Data` frame per file piece after the request or reply frame.
    Multiple = 3,
    /// One-sided, server-initiated: the request's bulk is a [`RemoteMemory`] describing the
    /// client's memory, and the server pulls (writes) or pushes (reads) the data itself with
    /// no data in any frame (same host: `process_vm_readv`/`process_vm_writev`).
    Remote = 4,
}

impl TransferMode {
    /// The modes whose data travels in frames (every transport has them), in the order
    /// benchmarks report them.
    pub const FRAMED: [Self; 3] = [Self::Multiple, Self::Pack, Self::Gather];

    /// Every mode.
    pub const ALL: [Self; 4] = [Self::Multiple, Self::Pack, Self::Gather, Self::Remote];

    /// The name used by the CLI and benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            Self::Gather => "gather",
            Self::Pack => "pack",
            Self::Multiple => "multiple",
            Self::Remote => "remote",
        }
    }

    /// Parses a name given by [`TransferMode::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|mode| mode.name() == name)
    }
}

impl Wire for TransferMode {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u8(*self as u8);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        match decoder.u8()? {
            1 => Ok(Self::Gather),
            2 => Ok(Self::Pack),
            3 => Ok(Self::Multiple),
            4 => Ok(Self::Remote),
            other => Err(WireError::BadValue {
                field: "transfer mode",
                value: u64::from(other),
            }),
        }
    }
}

/// How the server reaches the client's memory in a [`TransferMode::Remote`] transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[repr(u8)]
pub enum RemoteAccess {
    /// Same host: `process_vm_readv`/`process_vm_writev` on the process at the other end of
    /// the Unix socket (the server takes the pid from the socket's credentials, never from the
    /// message). Addresses are virtual addresses in that process; keys are unused.
    #[default]
    Process = 1,
    /// A fabric (libfabric RMA): `endpoint` names the client's endpoint, each segment carries
    /// the key of its registration.
    Fabric = 2,
    /// Same host, a region of shared memory the client handed to the server on this
    /// connection with [`ShareRegion`] (its descriptor passed with `SCM_RIGHTS`): the
    /// connection's eager buffer (seed 001's Fast RDMA buffers), at most `EAGER_BYTES_MAX`
    /// bytes that the client fills (writes) or empties (reads) with one copy, or a shared
    /// arena (`key` with [`SHARED_KEY_ARENA`] set). `address` is the offset in the region,
    /// `key` the key it was shared under; a key not shared on this connection (or unmapped
    /// since, least recently used first) is `UnknownRegion`.
    Shared = 3,
}

impl Wire for RemoteAccess {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u8(*self as u8);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        match decoder.u8()? {
            1 => Ok(Self::Process),
            2 => Ok(Self::Fabric),
            3 => Ok(Self::Shared),
            other => Err(WireError::BadValue {
                field: "remote access",
                value: u64::from(other),
            }),
        }
    }
}

/// One contiguous range of the client's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct RemoteSegment {
    /// Address in the client's address space (or fabric address for the key).
    pub address: u64,
    /// Length in bytes.
    pub length: u64,
    /// Registration key (fabric access); 0 otherwise.
    pub key: u64,
}

impl Wire for RemoteSegment {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u64(self.address);
        encoder.u64(self.length);
        encoder.u64(self.key);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        Ok(Self {
            address: decoder.u64()?,
            length: decoder.u64()?,
            key: decoder.u64()?,
        })
    }
}

impl Wire for Vec<RemoteSegment> {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.count(self.len());
        for segment in self {
            segment.encode(encoder);
        }
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let count = decoder.count("remote_segments_max", REMOTE_SEGMENTS_MAX, 24)?;
        (0..count).map(|_| RemoteSegment::decode(decoder)).collect()
    }
}

wire_struct! {
    /// The client's memory for a [`TransferMode::Remote`] request: travels as the bulk of
    /// the request frame. The segments hold the request's data bytes in data order.
    pub struct RemoteMemory {
        /// How the server reaches the memory.
        pub access: RemoteAccess,
        /// The client's fabric endpoint name (fabric access); empty otherwise.
        pub endpoint: RemoteEndpoint,
        /// Most segments per one-sided call: 1 moves each segment by a call of its own (the
        /// multiple-message mechanism); 0 means as many as the backend allows.
        pub segments_per_call: u16,
        /// The memory, in data order.
        pub segments: Vec<RemoteSegment>,
    }
}

/// A fabric endpoint name, at most [`REMOTE_ENDPOINT_BYTES_MAX`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct RemoteEndpoint(pub Vec<u8>);

impl Wire for RemoteEndpoint {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.bytes(&self.0);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        Ok(Self(
            decoder
                .bytes("remote_endpoint_bytes_max", REMOTE_ENDPOINT_BYTES_MAX)?
                .to_vec(),
        ))
    }
}

/// How an I/O server turns the pieces of one request into storage calls (seed 001 §3.3,
/// with a batched plan added).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[repr(u8)]
pub enum StoragePlan {
    /// The server's cost model chooses (Active Data Sieving).
    #[default]
    Auto = 0,
    /// One `pread`/`pwrite` per merged piece.
    PerPiece = 1,
    /// All pieces in one io_uring submission (per-piece where io_uring is unavailable).
    Batched = 2,
    /// Read covering chunks and scatter out (reads) or read-modify-write them (writes).
    Sieve = 3,
}

impl StoragePlan {
    /// Every plan, in the order reports list them.
    pub const ALL: [Self; 4] = [Self::Auto, Self::PerPiece, Self::Batched, Self::Sieve];

    /// The name used by the CLI, configs and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::PerPiece => "per-piece",
            Self::Batched => "batched",
            Self::Sieve => "sieve",
        }
    }

    /// Parses a name given by [`StoragePlan::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|plan| plan.name() == name)
    }
}

impl Wire for StoragePlan {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u8(*self as u8);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        match decoder.u8()? {
            0 => Ok(Self::Auto),
            1 => Ok(Self::PerPiece),
            2 => Ok(Self::Batched),
            3 => Ok(Self::Sieve),
            other => Err(WireError::BadValue {
                field: "storage plan",
                value: u64::from(other),
            }),
        }
    }
}

wire_struct! {
    /// A reply with no fields.
    pub struct Empty {}
}

/// The body of an error reply.
impl Wire for RemoteError {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u16(self.code as u16);
        let mut end = self.message.len().min(ERROR_MESSAGE_BYTES_MAX);
        while !self.message.is_char_boundary(end) {
            end -= 1;
        }
        encoder.str(&self.message[..end]);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let code = ErrorCode::from_u16(decoder.u16()?)?;
        let message = decoder.str("error_message_bytes_max", ERROR_MESSAGE_BYTES_MAX)?;
        Ok(Self { code, message })
    }
}

// ---------------------------------------------------------------------------------------------
// Any server.

/// Which kind of server answered a ping.
pub const ROLE_MDS: u8 = 1;
/// Which kind of server answered a ping.
pub const ROLE_IOD: u8 = 2;

/// `PingReply::store_state`: the server's store serves reads and writes.
pub const STORE_OK: u8 = 0;
/// `PingReply::store_state`: the last change failed because the store's disk is full; reads
/// are served, changes fail with `NoSpace` until space is freed.
pub const STORE_NO_SPACE: u8 = 1;
/// `PingReply::store_state`: the store failed with another I/O error; the server reopens it
/// and retries, changes fail with `Io` meanwhile.
pub const STORE_FAILED: u8 = 2;

wire_struct! {
    /// Asks a server who it is.
    pub struct Ping {}
}

wire_struct! {
    /// Who a server is.
    pub struct PingReply {
        /// `ROLE_MDS` or `ROLE_IOD`.
        pub role: u8,
        /// The iod's index in the cluster (0 for the mds).
        pub server_index: u16,
        /// The server's process id.
        pub pid: u32,
        /// Files (mds) or objects (iod) the server holds.
        pub objects: u64,
        /// `STORE_OK`, `STORE_NO_SPACE` or `STORE_FAILED` (the iod always sends `STORE_OK`).
        pub store_state: u8,
    }
}
request!(Ping => Ping, PingReply);

wire_struct! {
    /// The first frame on every connection, from the server: who it is and a fresh random
    /// nonce the client's proof must cover (so a recorded handshake cannot be replayed).
    pub struct Challenge {
        /// `ROLE_MDS` or `ROLE_IOD`.
        pub role: u8,
        /// The iod's index (0 for the mds).
        pub server_index: u16,
        /// The cluster the server belongs to (derived from its key): a client compares it,
        /// and the role and index, with what it expects before any request.
        pub cluster_id: u64,
        /// Random, new for each connection.
        pub nonce: Nonce,
    }
}

wire_struct! {
    /// What both handshake proofs are bound to: the server the client means to reach (its
    /// role, index and cluster, as the client expects them and the server knows itself) and
    /// the two nonces of the connection. A proof made for one server, or on one connection,
    /// verifies nowhere else, so a squatter cannot relay a key holder's proof to another
    /// server.
    pub struct Binding {
        /// `ROLE_MDS` or `ROLE_IOD`.
        pub role: u8,
        /// The iod's index (0 for the mds).
        pub server_index: u16,
        /// The server's cluster.
        pub cluster_id: u64,
        /// The server's challenge nonce.
        pub server_nonce: Nonce,
        /// The client's challenge nonce (in its `Hello`).
        pub client_nonce: Nonce,
    }
}

wire_struct! {
    /// The client's answer to a [`Challenge`]: its credential, its own challenge to the
    /// server, and a proof that a holder of the cluster key vouches for this connection to
    /// this server: HMAC(key, `tessera-hello-v2` | [`Binding`] | credential tag).
    pub struct Hello {
        /// Who the connection speaks for.
        pub credentials: Credentials,
        /// Random, new for each connection: the server's proof must cover it.
        pub client_nonce: Nonce,
        /// The proof.
        pub proof: Mac,
    }
}

wire_struct! {
    /// The server's acceptance, proving it holds the key too: HMAC(key, `tessera-welcome-v2`
    /// | [`Binding`] | the client's proof).
    pub struct Welcome {
        /// The server's proof.
        pub proof: Mac,
    }
}
request!(Hello => Hello, Welcome);

wire_struct! {
    /// To the agent of this host: sign a credential for the calling process (whom the agent
    /// learns from the kernel) and answer a server's challenge with it, for the server and
    /// nonces `binding` names.
    pub struct AgentSign {
        /// What the proofs are bound to (all zeros when only a fresh credential is wanted).
        pub binding: Binding,
    }
}

wire_struct! {
    /// The agent's answer: everything a [`Hello`] needs, and the [`Welcome`] proof a genuine
    /// server will send back.
    pub struct AgentSigned {
        /// The caller's credential.
        pub credentials: Credentials,
        /// The proof for the binding.
        pub proof: Mac,
        /// The welcome proof to expect.
        pub welcome: Mac,
    }
}
request!(AgentSign => AgentSign, AgentSigned);

impl Wire for u8 {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u8(*self);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        decoder.u8()
    }
}

// ---------------------------------------------------------------------------------------------
// Metadata server.

wire_struct! {
    /// Resolves a path.
    pub struct Lookup {
        /// Caller.
        pub credentials: Credentials,
        /// Absolute path.
        pub path: String,
    }
}
request!(Lookup => Lookup, Attr);

wire_struct! {
    /// Creates a file and its objects.
    pub struct Create {
        /// Caller.
        pub credentials: Credentials,
        /// Absolute path of the new file.
        pub path: String,
        /// Permission bits.
        pub mode: u32,
        /// Fail with `Exists` if the name exists (otherwise an existing file is returned).
        pub exclusive: bool,
        /// Stripe unit; 0 takes the cluster default.
        pub stripe_unit_bytes: u64,
        /// Servers to stripe over; 0 takes all of them.
        pub server_count: u16,
        /// A pattern layout instead of stripes: one type per server (see `PatternLayout`);
        /// empty for stripes.
        pub pattern: Vec<Datatype>,
        /// Unit of the iods' unified caches for this file's objects: a power of two from
        /// `CACHE_UNIT_BYTES_MIN` to `CACHE_UNIT_BYTES_MAX`; 0 lets the mds choose
        /// (`limits::cache_unit_for_stripe`). Ignored when the file exists.
        pub cache_unit_bytes: u32,
    }
}
request!(Create => Create, Opened);

wire_struct! {
    /// Creates a directory.
    pub struct Mkdir {
        /// Caller.
        pub credentials: Credentials,
        /// Absolute path of the new directory.
        pub path: String,
        /// Permission bits.
        pub mode: u32,
    }
}
request!(Mkdir => Mkdir, Attr);

wire_struct! {
    /// Removes an empty directory.
    pub struct Rmdir {
        /// Caller.
        pub credentials: Credentials,
        /// Absolute path.
        pub path: String,
    }
}
request!(Rmdir => Rmdir, Empty);

wire_struct! {
    /// Removes a file.
    pub struct Unlink {
        /// Caller.
        pub credentials: Credentials,
        /// Absolute path.
        pub path: String,
    }
}
request!(Unlink => Unlink, UnlinkReply);

/// One object an unlink could not remove: the name is gone, the object may be left behind
/// on its iod (an orphan, removed by that iod's next sweep) or was already missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectLeft {
    /// Index of the iod that holds (or held) the object.
    pub server: u16,
    /// Why the removal failed: `Unavailable` when the iod did not answer, `UnknownHandle`
    /// when it had no such object, or the iod's own error.
    pub error: RemoteError,
}

impl Wire for ObjectLeft {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.u16(self.server);
        encoder.u16(self.error.code as u16);
        let mut end = self.error.message.len().min(OBJECT_LEFT_REASON_BYTES_MAX);
        while !self.error.message.is_char_boundary(end) {
            end -= 1;
        }
        encoder.str(&self.error.message[..end]);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let server = decoder.u16()?;
        let code = ErrorCode::from_u16(decoder.u16()?)?;
        let message = decoder.str("object_left_reason_bytes_max", OBJECT_LEFT_REASON_BYTES_MAX)?;
        Ok(Self {
            server,
            error: RemoteError { code, message },
        })
    }
}

impl Wire for Vec<ObjectLeft> {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.count(self.len());
        for left in self {
            left.encode(encoder);
        }
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let count = decoder.count("servers_max", SERVERS_MAX, 8)?;
        (0..count).map(|_| ObjectLeft::decode(decoder)).collect()
    }
}

wire_struct! {
    /// The outcome of an unlink: the name is gone; `left` lists the iods whose object could
    /// not be removed (empty when every object went).
    pub struct UnlinkReply {
        /// One entry per object not removed, in layout order.
        pub left: Vec<ObjectLeft>,
    }
}

wire_struct! {
    /// Moves a name; an existing target file (or empty directory) is replaced.
    pub struct Rename {
        /// Caller.
        pub credentials: Credentials,
        /// Existing path.
        pub source: String,
        /// New path.
        pub target: String,
    }
}
request!(Rename => Rename, Empty);

wire_struct! {
    /// Lists a directory: entries with names after `after`, in name order.
    pub struct Readdir {
        /// Caller.
        pub credentials: Credentials,
        /// Absolute path of the directory.
        pub path: String,
        /// Resume after this name ("" for the first page).
        pub after: String,
    }
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DirEntry {
    /// Name within the directory.
    pub name: String,
    /// Handle of the entry.
    pub handle: u64,
    /// File or directory.
    pub kind: FileKind,
}

impl Wire for DirEntry {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.str(&self.name);
        encoder.u64(self.handle);
        self.kind.encode(encoder);
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        Ok(Self {
            name: decoder.str("name_bytes_max", NAME_BYTES_MAX)?,
            handle: decoder.u64()?,
            kind: FileKind::decode(decoder)?,
        })
    }
}

impl Wire for Vec<DirEntry> {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.count(self.len());
        for entry in self {
            entry.encode(encoder);
        }
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let count = decoder.count("readdir_entries_max", READDIR_ENTRIES_MAX as usize, 13)?;
        (0..count).map(|_| DirEntry::decode(decoder)).collect()
    }
}

wire_struct! {
    /// One page of a directory listing.
    pub struct ReaddirReply {
        /// Entries in name order.
        pub entries: Vec<DirEntry>,
        /// More entries follow the last one.
        pub more: bool,
    }
}
request!(Readdir => Readdir, ReaddirReply);

wire_struct! {
    /// Attributes of a path with the size computed from the iods.
    pub struct Stat {
        /// Caller.
        pub credentials: Credentials,
        /// Absolute path.
        pub path: String,
    }
}
request!(Stat => Stat, Attr);

wire_struct! {
    /// Attributes of a handle with the size computed from the iods.
    pub struct StatHandle {
        /// Caller.
        pub credentials: Credentials,
        /// File handle.
        pub handle: u64,
        /// Any right on the handle, signed by the mds at open.
        pub capability: Capability,
    }
}
request!(StatHandle => StatHandle, Attr);

wire_struct! {
    /// Sets the size of a file: shrinking drops bytes, growing reads as zeros.
    pub struct Truncate {
        /// Caller.
        pub credentials: Credentials,
        /// Absolute path.
        pub path: String,
        /// New size in bytes.
        pub size: u64,
    }
}
request!(Truncate => Truncate, Attr);

wire_struct! {
    /// Sets the permission bits of a path (only its owner or root may).
    pub struct Chmod {
        /// Caller.
        pub credentials: Credentials,
        /// Absolute path.
        pub path: String,
        /// New permission bits; bits outside `0o7777` are refused.
        pub mode: u32,
    }
}
request!(Chmod => Chmod, Attr);

/// A time of [`SetTimes`] that leaves the time as it is (`UTIME_OMIT`).
pub const TIME_OMIT: u64 = u64::MAX;
/// A time of [`SetTimes`] that the mds sets to its clock's now (`UTIME_NOW`).
pub const TIME_NOW: u64 = u64::MAX - 1;

wire_struct! {
    /// Sets the access and modification times of a path, as `utimensat(2)`: each is ns since
    /// the epoch, [`TIME_NOW`] or [`TIME_OMIT`]. Setting a time to a value needs the owner (or
    /// root); setting both to now needs write permission on the file, or the owner, or root.
    pub struct SetTimes {
        /// Caller.
        pub credentials: Credentials,
        /// Absolute path.
        pub path: String,
        /// New access time.
        pub atime_ns: u64,
        /// New modification time.
        pub mtime_ns: u64,
    }
}
request!(SetTimes => SetTimes, Attr);

/// The `uid` or `gid` of a [`Chown`] that leaves the id as it is (chown(2)'s -1).
pub const CHOWN_UNCHANGED: u32 = u32::MAX;

wire_struct! {
    /// Sets the owner and/or group of a path: only root may change the owner; the owner may
    /// change the group to one of their own groups.
    pub struct Chown {
        /// Caller.
        pub credentials: Credentials,
        /// Absolute path.
        pub path: String,
        /// New owner, or [`CHOWN_UNCHANGED`].
        pub uid: u32,
        /// New group, or [`CHOWN_UNCHANGED`].
        pub gid: u32,
    }
}
request!(Chown => Chown, Attr);

wire_struct! {
    /// Takes a lock on bytes `[start, end)` of a file: shared (`exclusive` false) or exclusive
    /// (true). The mds answers when the lock is granted, or with `Busy` after `wait_ms`
    /// (at most `RANGE_LOCK_WAIT_MS_MAX`). A lock not released within `lease_ms` (at most
    /// `RANGE_LOCK_LEASE_MS_MAX`) is dropped, so a client that died cannot block others.
    pub struct LockRange {
        /// File handle.
        pub handle: u64,
        /// Rights on the handle, signed by the mds at open: write for an exclusive lock,
        /// any for a shared one.
        pub capability: Capability,
        /// First byte.
        pub start: u64,
        /// One past the last byte.
        pub end: u64,
        /// A writer's lock (true) or a reader's.
        pub exclusive: bool,
        /// How long to wait for the lock.
        pub wait_ms: u32,
        /// How long the lock may be held.
        pub lease_ms: u32,
    }
}

wire_struct! {
    /// A granted range lock.
    pub struct LockGranted {
        /// Names the lock in `UnlockRange`.
        pub lock_id: u64,
    }
}
request!(LockRange => LockRange, LockGranted);

wire_struct! {
    /// Releases a range lock (an expired or unknown id is not an error).
    pub struct UnlockRange {
        /// File handle.
        pub handle: u64,
        /// Any right on the handle, signed by the mds at open.
        pub capability: Capability,
        /// The lock.
        pub lock_id: u64,
    }
}
request!(UnlockRange => UnlockRange, Empty);

wire_struct! {
    /// Opens a file: the mds checks the rights asked for against the file's mode for the
    /// caller and answers with the attributes and a capability for those rights.
    pub struct Open {
        /// Caller.
        pub credentials: Credentials,
        /// Absolute path.
        pub path: String,
        /// Read access wanted.
        pub read: bool,
        /// Write access wanted.
        pub write: bool,
    }
}

wire_struct! {
    /// An open file: its attributes (size 0, as `Lookup`) and the capability every data
    /// request to its iods carries.
    pub struct Opened {
        /// Attributes and layout.
        pub attr: Attr,
        /// Signed rights on the handle.
        pub capability: Capability,
    }
}
request!(Open => Open, Opened);

wire_struct! {
    /// A fresh capability for a file the caller has open (by handle: the name may have
    /// moved). The request carries the capability it renews, which must be the caller's, for
    /// this handle, with at least the rights asked for, and signed by this cluster; it may
    /// have expired. The mds then checks, as of now, search on every directory above the file
    /// and the rights against the file's mode, as an open by path would.
    pub struct Renew {
        /// Caller.
        pub credentials: Credentials,
        /// File handle.
        pub handle: u64,
        /// The capability being renewed (an open, a create or an earlier renewal made it).
        pub capability: Capability,
        /// Read access wanted.
        pub read: bool,
        /// Write access wanted.
        pub write: bool,
    }
}
request!(Renew => Renew, Opened);

/// A list of file handles, at most [`HANDLES_LIVE_MAX`].
impl Wire for Vec<u64> {
    fn encode(&self, encoder: &mut Encoder) {
        encoder.count(self.len());
        for handle in self {
            encoder.u64(*handle);
        }
    }
    fn decode(decoder: &mut Decoder<'_>) -> Result<Self, WireError> {
        let count = decoder.count("handles_live_max", HANDLES_LIVE_MAX, 8)?;
        (0..count).map(|_| decoder.u64()).collect()
    }
}

wire_struct! {
    /// Asks the mds which of `handles` name live files. Served only on a connection that
    /// authenticated as a server (an iod sweeping its orphans).
    pub struct HandlesLive {
        /// The asking server's credential.
        pub credentials: Credentials,
        /// Handles of local objects, at most `handles_live_max`.
        pub handles: Vec<u64>,
    }
}
request!(HandlesLive => HandlesLive, HandlesLiveReply);

wire_struct! {
    /// The handles of a [`HandlesLive`] request whose objects must stay: a file of the
    /// namespace, or a create in flight. Every other handle asked about is an orphan.
    pub struct HandlesLiveReply {
        /// The answering mds's namespace id: the sweeping iod removes nothing on the word of
        /// an mds of another namespace.
        pub namespace: u64,
        /// Live handles, a subset of those asked about, in the order asked.
        pub live: Vec<u64>,
    }
}

wire_struct! {
    /// Asks the mds for its counters (`tessera bench meta`). Read-only and server-wide: any
    /// authenticated caller may ask; the credential is checked like every namespace request's.
    pub struct MdsStats {
        /// The caller's credential.
        pub credentials: Credentials,
    }
}
request!(MdsStats => MdsStats, MdsStatsReply);

wire_struct! {
    /// The mds's counters since it started.
    pub struct MdsStatsReply {
        /// Namespace changes acknowledged, each durable when answered.
        pub changes: u64,
        /// Durable commits (one `fsync` each) that made them durable: `changes / commits` is
        /// how many changes one group commit carried.
        pub commits: u64,
        /// Inodes in the namespace (files and directories, the root included).
        pub inodes: u64,
        /// Handles whose objects the mds holds made ahead on every iod, for the next creates.
        pub precreated: u64,
    }
}

// ---------------------------------------------------------------------------------------------
// I/O server.

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

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Wire + PartialEq + std::fmt::Debug>(value: &T) -> Vec<u8> {
        let body = value.to_body();
        assert_eq!(&T::from_body(&body).unwrap(), value);
        body
    }

    #[test]
    fn write_body_layout_matches_protocol_doc() {
        let write = Write {
            handle: 0x0102,
            capability: Capability(vec![0xAA]),
            mode: TransferMode::Multiple,
            storage: StoragePlan::Sieve,
            pieces: vec![Piece::new(8, 16)],
        };
        let body = round_trip(&write);
        // handle u64 | capability u32 len + bytes | mode u8 | storage u8 | count u32 |
        // (offset u64, length u64)*
        assert_eq!(body.len(), 8 + 4 + 1 + 1 + 1 + 4 + 16);
        assert_eq!(&body[0..8], &0x0102u64.to_le_bytes());
        assert_eq!(&body[8..13], &[1, 0, 0, 0, 0xAA]);
        assert_eq!(body[13], 3);
        assert_eq!(body[14], 3);
        assert_eq!(&body[15..19], &1u32.to_le_bytes());
        assert_eq!(&body[19..27], &8u64.to_le_bytes());
    }

    #[test]
    fn collective_bodies_are_the_type_bodies_plus_a_tag() {
        let tag = CollectiveTag {
            id: 0x0102_0304_0506_0708,
            round: 2,
            rank: 3,
            participants: 4,
            wait_ms: 500,
        };
        let tag_body = round_trip(&tag);
        // id u64 | round u32 | rank u32 | participants u32 | wait_ms u32
        assert_eq!(tag_body.len(), 24);
        assert_eq!(&tag_body[0..8], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&tag_body[20..24], &500u32.to_le_bytes());
        let typed = WriteType {
            handle: 9,
            end: 64,
            pieces: 1,
            ..WriteType::default()
        };
        let collective = WriteCollective {
            handle: 9,
            capability: Capability::default(),
            mode: typed.mode,
            storage: typed.storage,
            file: typed.file.clone(),
            start: 0,
            end: 64,
            ranges: Vec::new(),
            pieces: 1,
            collective: tag.clone(),
        };
        let body = round_trip(&collective);
        assert_eq!(body, [typed.to_body(), tag_body.clone()].concat());
        let read = ReadCollective {
            handle: 9,
            capability: Capability::default(),
            mode: TransferMode::Gather,
            storage: StoragePlan::Auto,
            file: FileType::default(),
            start: 0,
            end: 64,
            ranges: Vec::new(),
            collective: tag,
        };
        let read_type = ReadType {
            handle: 9,
            end: 64,
            ..ReadType::default()
        };
        assert_eq!(round_trip(&read), [read_type.to_body(), tag_body].concat());
    }

    #[test]
    fn attr_and_readdir_round_trip() {
        let attr = Attr {
            handle: 7,
            kind: FileKind::File,
            mode: 0o644,
            uid: 1,
            gid: 2,
            size: 3,
            atime_ns: 4,
            mtime_ns: 5,
            ctime_ns: 6,
            nlink: 1,
            layout: Some(StripeLayout::new(65536, vec![2, 0, 1]).unwrap().into()),
        };
        round_trip(&attr);
        round_trip(&ReaddirReply {
            entries: vec![DirEntry {
                name: "a".into(),
                handle: 3,
                kind: FileKind::Directory,
            }],
            more: true,
        });
        round_trip(&RemoteError::new(ErrorCode::NotFound, "no such path: /x"));
    }

    #[test]
    fn credentials_layout_matches_protocol_doc() {
        let credentials = Credentials {
            principal: Principal::User,
            uid: 7,
            gid: 8,
            groups: vec![9, 10],
            host: "h1".into(),
            expires_s: 0x0102,
            mac: Mac([0xEE; MAC_BYTES]),
        };
        let body = round_trip(&credentials);
        // principal u8 | uid u32 | gid u32 | count u32 + groups | host u32 len + bytes |
        // expires_s u64 | mac [32]: C = 57 + 4g + h
        assert_eq!(body.len(), 57 + 4 * 2 + 2);
        assert_eq!(body[0], 1);
        assert_eq!(&body[1..5], &7u32.to_le_bytes());
        assert_eq!(&body[9..13], &2u32.to_le_bytes());
        assert_eq!(&body[21..27], &[2, 0, 0, 0, b'h', b'1']);
        assert_eq!(&body[27..35], &0x0102u64.to_le_bytes());
        assert_eq!(&body[35..], &[0xEE; MAC_BYTES]);
        assert_eq!(credentials.signed_bytes(), body[..35].to_vec());
    }

    #[test]
    fn chmod_and_chown_layouts_match_protocol_doc() {
        let credentials = Credentials {
            uid: 7,
            gid: 8,
            ..Credentials::default()
        };
        let c = credentials.to_body().len();
        assert_eq!(c, 57);
        let chmod = Chmod {
            credentials: credentials.clone(),
            path: "/a".into(),
            mode: 0o1777,
        };
        let body = round_trip(&chmod);
        // credentials C | path u32 len + bytes | mode u32
        assert_eq!(body.len(), c + 4 + 2 + 4);
        assert_eq!(&body[c..c + 6], &[2, 0, 0, 0, b'/', b'a']);
        assert_eq!(&body[c + 6..c + 10], &0o1777u32.to_le_bytes());
        assert_eq!(Opcode::from_u8(0x1C), Ok(Opcode::Chmod));
        let chown = Chown {
            credentials,
            path: "/a".into(),
            uid: CHOWN_UNCHANGED,
            gid: 100,
        };
        let body = round_trip(&chown);
        // credentials C | path u32 len + bytes | new uid u32 | new gid u32
        assert_eq!(body.len(), c + 4 + 2 + 8);
        assert_eq!(&body[c + 6..c + 10], &u32::MAX.to_le_bytes());
        assert_eq!(&body[c + 10..c + 14], &100u32.to_le_bytes());
        assert_eq!(Opcode::from_u8(0x1D), Ok(Opcode::Chown));
    }

    #[test]
    fn renew_layout_matches_protocol_doc() {
        let credentials = Credentials::default();
        let c = credentials.to_body().len();
        let renew = Renew {
            credentials,
            handle: 0x0A0B,
            capability: Capability(vec![0xCC; 62]),
            read: true,
            write: false,
        };
        let body = round_trip(&renew);
        // credentials C | handle u64 | capability u32 len + bytes | read u8 | write u8
        assert_eq!(body.len(), c + 14 + 62);
        assert_eq!(&body[c..c + 8], &0x0A0Bu64.to_le_bytes());
        assert_eq!(&body[c + 8..c + 12], &62u32.to_le_bytes());
        assert_eq!(&body[c + 12..c + 74], &[0xCC; 62]);
        assert_eq!(&body[c + 74..], &[1, 0]);
        assert_eq!(Opcode::from_u8(0x1F), Ok(Opcode::Renew));
    }

    #[test]
    fn object_life_cycle_layouts_match_protocol_doc() {
        // handle u64 | namespace u64 | cache_unit_bytes u32
        let body = round_trip(&ObjectCreate {
            handle: 5,
            namespace: 0xA1,
            cache_unit_bytes: 4096,
        });
        assert_eq!(body.len(), 20);
        assert_eq!(&body[8..16], &0xA1u64.to_le_bytes());
        assert_eq!(&body[16..], &4096u32.to_le_bytes());
        // handle u64 | namespace u64
        let body = round_trip(&ObjectRemove {
            handle: 5,
            namespace: 0xA1,
        });
        assert_eq!(body.len(), 16);
        assert_eq!(&body[8..], &0xA1u64.to_le_bytes());
        // handle u64 | namespace u64 | size u64
        let body = round_trip(&ObjectTruncate {
            handle: 5,
            namespace: 0xA1,
            size: 7,
        });
        assert_eq!(body.len(), 24);
        assert_eq!(&body[8..16], &0xA1u64.to_le_bytes());
        assert_eq!(&body[16..], &7u64.to_le_bytes());
        // namespace u64 | live count u32 | live u64 × l
        let body = round_trip(&HandlesLiveReply {
            namespace: 0xA1,
            live: vec![2, 3],
        });
        assert_eq!(body.len(), 12 + 16);
        assert_eq!(&body[..8], &0xA1u64.to_le_bytes());
        assert_eq!(&body[8..12], &2u32.to_le_bytes());
    }

    #[test]
    fn ping_reply_and_no_space_match_protocol_doc() {
        // PROTOCOL.md §5.2 PingReply: role u8, server_index u16, pid u32, objects u64,
        // store_state u8: 16 bytes.
        let ping = PingReply {
            role: ROLE_MDS,
            server_index: 0,
            pid: 42,
            objects: 7,
            store_state: STORE_NO_SPACE,
        };
        let body = round_trip(&ping);
        assert_eq!(body.len(), 16);
        assert_eq!(body[15], 1);
        // PROTOCOL.md §4 error codes: NoSpace is 19.
        let error = RemoteError::new(
            ErrorCode::NoSpace,
            "no space left on the metadata server's disk (/m)",
        );
        assert_eq!(error.to_body()[..2], 19u16.to_le_bytes());
        assert_eq!(ErrorCode::from_u16(19), Ok(ErrorCode::NoSpace));
        assert_eq!(
            error.to_string(),
            "no space left on the metadata server's disk (/m)"
        );
    }

    #[test]
    fn share_region_body_matches_protocol_doc() {
        // PROTOCOL.md §5.2 ShareRegion: key u64, bytes u64, 16 bytes; opcode 0x42.
        let share = ShareRegion {
            key: SHARED_KEY_ARENA | 5,
            bytes: 1 << 20,
        };
        let body = round_trip(&share);
        assert_eq!(body.len(), 16);
        assert_eq!(&body[..8], &(SHARED_KEY_ARENA | 5).to_le_bytes());
        assert_eq!(&body[8..], &(1u64 << 20).to_le_bytes());
        assert_eq!(Opcode::from_u8(0x42).unwrap(), Opcode::ShareRegion);
        assert_eq!(ShareRegion::OPCODE as u8, 0x42);
        let error = RemoteError::new(ErrorCode::UnknownRegion, "shared region 0x5");
        assert_eq!(error.to_body()[..2], 18u16.to_le_bytes());
        round_trip(&error);
    }

    #[test]
    fn every_opcode_has_one_byte_and_one_name() {
        let mut names = std::collections::HashSet::new();
        for opcode in Opcode::ALL {
            assert_eq!(Opcode::from_u8(opcode as u8), Ok(opcode));
            assert!(names.insert(opcode.name()), "{opcode:?}");
        }
        let known = (0..=u8::MAX)
            .filter(|&byte| Opcode::from_u8(byte).is_ok())
            .count();
        assert_eq!(known, Opcode::ALL.len());
    }

    #[test]
    fn statfs_bodies_match_protocol_doc() {
        // PROTOCOL.md §5.2 Statfs: an empty body; the reply is six u64, 48 bytes.
        assert!(round_trip(&Statfs {}).is_empty());
        let reply = StatfsReply {
            total_bytes: 1 << 40,
            free_bytes: 3,
            available_bytes: 2,
            objects: 7,
            object_bytes: 5,
            object_allocated_bytes: 4096,
        };
        let body = round_trip(&reply);
        assert_eq!(body.len(), 48);
        assert_eq!(&body[..8], &(1u64 << 40).to_le_bytes());
        assert_eq!(&body[40..], &4096u64.to_le_bytes());
        assert_eq!(Statfs::OPCODE as u8, 0x43);
    }

    #[test]
    fn refuses_trailing_bytes_and_unknown_opcodes() {
        let mut body = Ping {}.to_body();
        body.push(0);
        assert!(matches!(
            Ping::from_body(&body),
            Err(WireError::TrailingBytes { count: 1 })
        ));
        assert!(matches!(
            Opcode::from_u8(0xEE),
            Err(WireError::UnknownOpcode { opcode: 0xEE })
        ));
    }

    #[test]
    fn long_error_messages_are_cut_at_the_limit() {
        let error = RemoteError::new(ErrorCode::Io, "é".repeat(ERROR_MESSAGE_BYTES_MAX));
        let decoded = RemoteError::from_body(&error.to_body()).unwrap();
        assert!(decoded.message.len() <= ERROR_MESSAGE_BYTES_MAX);
    }
}
