//! Paths through the namespace: splitting and checking names, walking from the root with a
//! search check on every directory passed, the parent of a path with the rights a change
//! needs on it, and the small record helpers every call shares.

use super::inode::{record_error, Inode, InodeBeforeSetTimes, ROOT_HANDLE};
use crate::access;
use crate::access::{Caller, Rights};
use crate::store::store_error;
use redb::ReadableTable;
use tessera_proto::limits::{NAME_BYTES_MAX, PATH_DEPTH_MAX};
use tessera_proto::{ErrorCode, RemoteError};

pub(super) fn not_found(path: &str) -> RemoteError {
    RemoteError::new(
        ErrorCode::NotFound,
        format!("no such file or directory: {path}"),
    )
}

/// Splits an absolute path into its names, refusing anything ambiguous.
pub fn components(path: &str) -> Result<Vec<&str>, RemoteError> {
    let invalid = |why: &str| {
        RemoteError::new(
            ErrorCode::InvalidArgument,
            format!("bad path {path:?}: {why}"),
        )
    };
    if !path.starts_with('/') {
        return Err(invalid("paths are absolute and start with '/'"));
    }
    let names: Vec<&str> = path.split('/').filter(|name| !name.is_empty()).collect();
    if names.len() > PATH_DEPTH_MAX {
        return Err(invalid(&format!(
            "more than path_depth_max ({PATH_DEPTH_MAX}) components"
        )));
    }
    for name in &names {
        if *name == "." || *name == ".." {
            return Err(invalid("'.' and '..' are not allowed"));
        }
        if name.len() > NAME_BYTES_MAX {
            return Err(invalid(&format!(
                "a name is longer than name_bytes_max ({NAME_BYTES_MAX})"
            )));
        }
        if name.contains('\0') {
            return Err(invalid("names cannot contain NUL"));
        }
    }
    Ok(names)
}

/// Refuses a new name (the last component of `path`, made by create, mkdir or a rename
/// target) holding a control character: a byte below 0x20 or 0x7f. Such names (a newline, an
/// ESC sequence) break line-oriented listings and can drive a terminal. Names already stored
/// stay reachable: only new links are checked. The error shows the name escaped.
pub(super) fn check_new_name(path: &str, name: &str) -> Result<(), RemoteError> {
    if name.bytes().any(|byte| byte < 0x20 || byte == 0x7f) {
        return Err(RemoteError::new(
            ErrorCode::InvalidArgument,
            format!(
                "bad name \"{}\" in {:?}: names cannot hold control characters (bytes below 0x20, 0x7f)",
                name.escape_debug(),
                path
            ),
        ));
    }
    Ok(())
}

/// Refuses `inode` (named by `path`) unless it is a directory exactly when `directory` is asked.
pub(super) fn expect_kind(path: &str, inode: &Inode, directory: bool) -> Result<(), RemoteError> {
    match (directory, inode.is_directory()) {
        (true, false) => Err(RemoteError::new(
            ErrorCode::NotDirectory,
            format!("{path} is not a directory"),
        )),
        (false, true) => Err(RemoteError::new(
            ErrorCode::IsDirectory,
            format!("{path} is a directory"),
        )),
        _ => Ok(()),
    }
}

pub(super) fn check_mode(mode: u32) -> Result<(), RemoteError> {
    if mode & !0o7777 == 0 {
        Ok(())
    } else {
        Err(RemoteError::new(
            ErrorCode::InvalidArgument,
            format!("mode {mode:#o} has bits outside 0o7777"),
        ))
    }
}

pub(super) fn decode_inode(bytes: &[u8]) -> Result<Inode, RemoteError> {
    postcard::from_bytes(bytes)
        .or_else(|_| postcard::from_bytes::<InodeBeforeSetTimes>(bytes).map(Inode::from))
        .map_err(record_error)
}

pub(super) fn encode_inode(inode: &Inode) -> Result<Vec<u8>, RemoteError> {
    postcard::to_allocvec(inode).map_err(record_error)
}

/// The error for a handle the namespace does not hold.
pub(super) fn unknown_handle(handle: u64) -> RemoteError {
    RemoteError::new(
        ErrorCode::UnknownHandle,
        format!("no file with handle {handle:#x}"),
    )
}

pub(super) fn read_inode(
    table: &impl ReadableTable<u64, &'static [u8]>,
    handle: u64,
) -> Result<Inode, RemoteError> {
    let guard = table.get(handle).map_err(store_error)?.ok_or_else(|| {
        RemoteError::new(ErrorCode::Internal, format!("inode {handle:#x} is missing"))
    })?;
    decode_inode(guard.value())
}

/// The path of the directory reached after the first `depth` names (`/` for depth 0).
pub(super) fn prefix(names: &[&str], depth: usize) -> String {
    format!("/{}", names[..depth].join("/"))
}

/// Follows `names` from the root, checking that `caller` may search each directory it passes
/// through; returns the handle reached.
pub(super) fn walk(
    dirents: &impl ReadableTable<(u64, &'static str), u64>,
    inodes: &impl ReadableTable<u64, &'static [u8]>,
    caller: &Caller,
    path: &str,
    names: &[&str],
) -> Result<u64, RemoteError> {
    let mut handle = ROOT_HANDLE;
    for (depth, name) in names.iter().enumerate() {
        let directory = read_inode(inodes, handle)?;
        if !directory.is_directory() {
            return Err(RemoteError::new(
                ErrorCode::NotDirectory,
                format!("{path}: a component is not a directory"),
            ));
        }
        // The directory's path is spelled out only for an error.
        let lacking = access::missing(caller, directory.owner(), Rights::SEARCH);
        if lacking != Rights::NONE {
            return Err(access::denied(path, lacking, &prefix(names, depth)));
        }
        handle = dirents
            .get((handle, *name))
            .map_err(store_error)?
            .ok_or_else(|| not_found(path))?
            .value();
    }
    Ok(handle)
}

/// Checks that `caller` may search every directory above `inode` (the inode of `handle`), up
/// to the root: what [`walk`] checks on the way down to it. At most [`PATH_DEPTH_MAX`]
/// directories are looked at; a file deeper than that (a rename can move a deep tree under
/// another) is as unreachable by handle as it is by path.
pub(super) fn search_above(
    inodes: &impl ReadableTable<u64, &'static [u8]>,
    caller: &Caller,
    handle: u64,
    inode: &Inode,
) -> Result<(), RemoteError> {
    if handle == ROOT_HANDLE {
        return Ok(());
    }
    let mut above = inode.parent;
    for _ in 0..PATH_DEPTH_MAX {
        let directory = read_inode(inodes, above)?;
        let lacking = access::missing(caller, directory.owner(), Rights::SEARCH);
        if lacking != Rights::NONE {
            return Err(access::denied(
                &format!("handle {handle:#x}"),
                lacking,
                &format!("directory {above:#x} above it"),
            ));
        }
        if above == ROOT_HANDLE {
            return Ok(());
        }
        above = directory.parent;
    }
    Err(RemoteError::new(
        ErrorCode::InvalidArgument,
        format!(
            "handle {handle:#x} lies more than path_depth_max ({PATH_DEPTH_MAX}) directories below the root"
        ),
    ))
}

/// The parent directory of a path, resolved and searchable by the caller.
pub(super) struct Parent<'p> {
    pub(super) handle: u64,
    pub(super) inode: Inode,
    /// The last name of the path.
    pub(super) name: &'p str,
    /// The parent's own path, for error messages.
    pub(super) path: String,
}

impl Parent<'_> {
    /// Refuses unless `caller` may add or remove entries here (write and search) for the
    /// operation on `path`.
    pub(super) fn require_write(&self, caller: &Caller, path: &str) -> Result<(), RemoteError> {
        access::require(
            caller,
            self.inode.owner(),
            Rights::WRITE_SEARCH,
            path,
            &self.path,
        )
    }

    /// The sticky-bit rule for removing or replacing the entry owned by `entry_uid`.
    pub(super) fn require_sticky(
        &self,
        caller: &Caller,
        entry_uid: u32,
        path: &str,
    ) -> Result<(), RemoteError> {
        access::require_sticky(caller, self.inode.owner(), entry_uid, path, &self.path)
    }
}

/// Resolves the parent directory of `path` (search on every directory down to and including
/// it) and returns it with the last name.
pub(super) fn walk_parent<'p>(
    dirents: &impl ReadableTable<(u64, &'static str), u64>,
    inodes: &impl ReadableTable<u64, &'static [u8]>,
    caller: &Caller,
    path: &'p str,
) -> Result<Parent<'p>, RemoteError> {
    let names = components(path)?;
    let Some((&name, parents)) = names.split_last() else {
        return Err(RemoteError::new(
            ErrorCode::InvalidArgument,
            "the root directory cannot be created, moved or removed",
        ));
    };
    let handle = walk(dirents, inodes, caller, path, parents)?;
    let inode = read_inode(inodes, handle)?;
    if !inode.is_directory() {
        return Err(RemoteError::new(
            ErrorCode::NotDirectory,
            format!("{path}: the parent is not a directory"),
        ));
    }
    let parent_path = prefix(&names, parents.len());
    access::require(caller, inode.owner(), Rights::SEARCH, path, &parent_path)?;
    Ok(Parent {
        handle,
        inode,
        name,
        path: parent_path,
    })
}

/// Refuses to open `inode` (at `path`) for `read` and/or `write` unless its bits allow it; a
/// directory opened for write is `IsDirectory`. `caller` is the caller after root squash.
pub(super) fn check_open(
    caller: &Caller,
    path: &str,
    inode: &Inode,
    read: bool,
    write: bool,
) -> Result<(), RemoteError> {
    if write && inode.is_directory() {
        return Err(RemoteError::new(
            ErrorCode::IsDirectory,
            format!("{path} is a directory"),
        ));
    }
    access::require(caller, inode.owner(), Rights::open(read, write), path, path)
}

/// Refuses a file's path that ends in `/`, which names a directory (POSIX: `open(O_CREAT)`
/// of `a/` is `EISDIR`, `rename` of a file to `a/` is `ENOTDIR`): it would otherwise make a
/// file called `a`.
pub(super) fn names_no_directory(
    path: &str,
    doing: &str,
    code: ErrorCode,
) -> Result<(), RemoteError> {
    if path.len() > 1 && path.ends_with('/') {
        return Err(RemoteError::new(
            code,
            format!("cannot {doing} {path}: a path ending in '/' names a directory, not a file"),
        ));
    }
    Ok(())
}
