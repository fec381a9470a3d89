//! Types more than one protocol carries: principals and credentials, pieces, capabilities,
//! transfer modes and remote memory descriptors, storage plans, errors.

use crate::codec::{Decoder, Encoder, Wire};
use crate::error::{ErrorCode, RemoteError, WireError};
use crate::layout::Layout;
use crate::limits::{
    CAPABILITY_BYTES_MAX, CREDENTIAL_GROUPS_MAX, ERROR_MESSAGE_BYTES_MAX, HOST_NAME_BYTES_MAX,
    MAC_BYTES, NONCE_BYTES, REMOTE_ENDPOINT_BYTES_MAX, REMOTE_SEGMENTS_MAX, REQUEST_PIECES_MAX,
};

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
