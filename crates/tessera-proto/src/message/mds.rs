//! The metadata server's requests and replies.

use tessera_dtype::Datatype;

use super::{Attr, Capability, Credentials, Empty, FileKind, Opcode, Request};
use crate::codec::{Decoder, Encoder, Wire};
use crate::error::{ErrorCode, RemoteError, WireError};
use crate::limits::{
    HANDLES_LIVE_MAX, NAME_BYTES_MAX, OBJECT_LEFT_REASON_BYTES_MAX, READDIR_ENTRIES_MAX,
    SERVERS_MAX,
};

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
