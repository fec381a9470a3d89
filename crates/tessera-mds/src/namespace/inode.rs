//! What the namespace stores per handle: [`Inode`], its attributes and layout, postcard-encoded
//! in the `inodes` table (records of the format before `times_set_ns` read through
//! `InodeBeforeSetTimes`).

use crate::access::{Caller, Owner};

use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};

use tessera_proto::{Attr, ErrorCode, FileKind, Layout, PatternLayout, RemoteError, StripeLayout};

/// Handle of the root directory.
pub const ROOT_HANDLE: u64 = 1;
pub(super) const KIND_FILE: u8 = 1;
pub(super) const KIND_DIRECTORY: u8 = 2;

/// Attributes and layout of one file or directory, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    /// `KIND_FILE` or `KIND_DIRECTORY`.
    pub kind: u8,
    /// Permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Times, ns since the epoch.
    pub atime_ns: u64,
    /// Last modification.
    pub mtime_ns: u64,
    /// Last attribute change.
    pub ctime_ns: u64,
    /// Link count.
    pub nlink: u32,
    /// Parent directory (the root is its own parent).
    pub parent: u64,
    /// Stripe unit of a file (0 for a directory).
    pub stripe_unit_bytes: u64,
    /// Servers of a file, in stripe order (empty for a directory).
    pub servers: Vec<u16>,
    /// Encoded datatypes of a pattern layout, one per server (empty for stripes).
    pub pattern: Vec<Vec<u8>>,
    /// When its times were last set by `SetTimes` (ns; 0: never): a file's mtime is the data's
    /// only when the data changed after that ([`Inode::mtime_with_data`]).
    pub times_set_ns: u64,
}

/// An [`Inode`] as stores made before `SetTimes` hold it (no `times_set_ns`): read, never
/// written, so those stores need no migration (the tests write one).
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
pub(super) struct InodeBeforeSetTimes {
    pub(super) kind: u8,
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) atime_ns: u64,
    pub(super) mtime_ns: u64,
    pub(super) ctime_ns: u64,
    pub(super) nlink: u32,
    pub(super) parent: u64,
    pub(super) stripe_unit_bytes: u64,
    pub(super) servers: Vec<u16>,
    pub(super) pattern: Vec<Vec<u8>>,
}

impl From<InodeBeforeSetTimes> for Inode {
    fn from(old: InodeBeforeSetTimes) -> Self {
        Self {
            kind: old.kind,
            mode: old.mode,
            uid: old.uid,
            gid: old.gid,
            atime_ns: old.atime_ns,
            mtime_ns: old.mtime_ns,
            ctime_ns: old.ctime_ns,
            nlink: old.nlink,
            parent: old.parent,
            stripe_unit_bytes: old.stripe_unit_bytes,
            servers: old.servers,
            pattern: old.pattern,
            times_set_ns: 0,
        }
    }
}

impl Inode {
    /// The file's mtime given its data's latest (`data_mtime_ns`, from the iods): the data's
    /// when it changed since the times were last set, else the stored one, so a time set by
    /// `touch -d` or `tar x` shows until the next write.
    pub fn mtime_with_data(&self, data_mtime_ns: u64) -> u64 {
        if data_mtime_ns > self.times_set_ns {
            self.mtime_ns.max(data_mtime_ns)
        } else {
            self.mtime_ns
        }
    }

    /// A new, empty directory in `parent`, owned by `owner`, with times set to now.
    pub(super) fn directory(mode: u32, owner: &Caller, parent: u64) -> Self {
        let now = now_ns();
        Self {
            kind: KIND_DIRECTORY,
            mode,
            uid: owner.uid,
            gid: owner.gid,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            nlink: 2,
            parent,
            stripe_unit_bytes: 0,
            servers: Vec::new(),
            pattern: Vec::new(),
            times_set_ns: 0,
        }
    }

    /// True for directories.
    pub fn is_directory(&self) -> bool {
        self.kind == KIND_DIRECTORY
    }

    /// What a permission check reads.
    pub fn owner(&self) -> Owner {
        Owner {
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
            directory: self.is_directory(),
        }
    }

    /// The layout of a file (`None` for a directory).
    pub fn layout(&self) -> Result<Option<Layout>, RemoteError> {
        if self.kind != KIND_FILE {
            return Ok(None);
        }
        if self.pattern.is_empty() {
            return Ok(Some(Layout::Stripe(StripeLayout {
                stripe_unit_bytes: self.stripe_unit_bytes,
                servers: self.servers.clone(),
            })));
        }
        let types = self
            .pattern
            .iter()
            .map(|bytes| tessera_proto::dtype::wire::decode(bytes))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| record_error(format!("stored pattern layout: {err}")))?;
        let pattern = PatternLayout::new(self.servers.clone(), types)
            .map_err(|why| record_error(format!("stored pattern layout: {why}")))?;
        Ok(Some(Layout::Pattern(std::sync::Arc::new(pattern))))
    }

    /// The attributes sent to clients (size filled in by the caller).
    pub fn attr(&self, handle: u64, size: u64) -> Result<Attr, RemoteError> {
        Ok(Attr {
            handle,
            kind: if self.is_directory() {
                FileKind::Directory
            } else {
                FileKind::File
            },
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
            size,
            atime_ns: self.atime_ns,
            mtime_ns: self.mtime_ns,
            ctime_ns: self.ctime_ns,
            nlink: self.nlink,
            layout: self.layout()?,
        })
    }
}

pub(super) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}

/// A stored record that does not decode (or a record that does not encode): a broken
/// invariant of the store, not an I/O failure, so it does not reopen the store.
pub(super) fn record_error(err: impl std::fmt::Display) -> RemoteError {
    RemoteError::new(ErrorCode::Internal, format!("metadata store record: {err}"))
}
