//! POSIX permission checks: who the caller is, and what the mode bits of an inode let them do.
//!
//! Every namespace call arrives with a [`Caller`] (uid, primary gid, supplementary groups) and
//! resolves paths through directories whose owner, group and mode decide each step. The rules
//! are the POSIX ones, applied with the owner, group and other classes in that order: the
//! first class the caller belongs to decides, so an owner with fewer bits than "other" is
//! refused. uid 0 bypasses read and write checks and search on directories; a file is
//! executable by root only if some x bit is set. With root squash, uid 0 is mapped to the
//! unprivileged `nobody` ([`NOBODY`]) before any check. The checks are pure functions of the
//! caller and the stored attributes, so a refusal changes nothing: the namespace code calls
//! them inside its transaction before it writes.

use tessera_proto::{ErrorCode, RemoteError};

/// uid and gid a squashed root caller becomes (NFS's `nobody`).
pub const NOBODY: u32 = 65534;
/// The sticky bit: in such a directory only an entry's owner, the directory's owner or root
/// may remove or rename the entry.
pub const MODE_STICKY: u32 = 0o1000;
/// Set-group-id.
pub const MODE_SETGID: u32 = 0o2000;
/// Set-user-id.
pub const MODE_SETUID: u32 = 0o4000;
/// The group execute bit (with setgid, it marks an executable whose setgid a chown clears).
const MODE_GROUP_EXECUTE: u32 = 0o010;
/// Any execute bit.
const MODE_ANY_EXECUTE: u32 = 0o111;

/// Who is asking, as the mds will trust it. The handler builds it from the request (see
/// `handler::caller_of`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary group ids.
    pub groups: Vec<u32>,
}

impl Caller {
    /// A caller with no supplementary groups.
    pub fn new(uid: u32, gid: u32) -> Self {
        Self {
            uid,
            gid,
            groups: Vec::new(),
        }
    }

    /// The superuser.
    pub fn root() -> Self {
        Self::new(0, 0)
    }

    /// True for uid 0 (after any squashing).
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// True if `gid` is the caller's primary group or one of its supplementary groups.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// The caller as root squash sees it: uid 0 becomes `nobody` with no groups.
    #[must_use]
    pub fn squashed(&self) -> Self {
        if self.is_root() {
            Self::new(NOBODY, NOBODY)
        } else {
            self.clone()
        }
    }
}

/// A set of rights, as the three bits of one class: read 4, write 2, search or execute 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rights(u32);

impl Rights {
    /// Read a file, list a directory.
    pub const READ: Self = Self(4);
    /// Write a file, add or remove entries of a directory.
    pub const WRITE: Self = Self(2);
    /// Search (pass through) a directory, execute a file.
    pub const SEARCH: Self = Self(1);
    /// Write and search: what changing a directory's entries needs.
    pub const WRITE_SEARCH: Self = Self(3);
    /// Nothing.
    pub const NONE: Self = Self(0);

    /// Read and/or write, as an open asks.
    pub fn open(read: bool, write: bool) -> Self {
        Self(if read { 4 } else { 0 } | if write { 2 } else { 0 })
    }

    /// The bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// The rights in `self` that `granted` lacks.
    fn missing(self, granted: u32) -> Self {
        Self(self.0 & !granted)
    }

    /// "read", "write and search", ... for error messages.
    pub fn describe(self) -> String {
        let names: Vec<&str> = [(4, "read"), (2, "write"), (1, "search")]
            .iter()
            .filter(|(bit, _)| self.0 & bit != 0)
            .map(|(_, name)| *name)
            .collect();
        if names.is_empty() {
            "nothing".to_owned()
        } else {
            names.join(" and ")
        }
    }
}

/// The stored attributes a check reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// Permission bits (`0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// A directory (root may always search it) or a file (root may execute it only if some
    /// x bit is set).
    pub directory: bool,
}

/// The rights of `wanted` that `caller` lacks on an inode with attributes `owner` (empty if
/// granted).
pub fn missing(caller: &Caller, owner: Owner, wanted: Rights) -> Rights {
    if caller.is_root() {
        let execute_ok = owner.directory || owner.mode & MODE_ANY_EXECUTE != 0;
        let granted = 0o6 | u32::from(execute_ok);
        return wanted.missing(granted);
    }
    let class_bits = if caller.uid == owner.uid {
        owner.mode >> 6
    } else if caller.in_group(owner.gid) {
        owner.mode >> 3
    } else {
        owner.mode
    } & 0o7;
    wanted.missing(class_bits)
}

/// `PermissionDenied` for `path` because `on` lacks `rights`.
pub fn denied(path: &str, rights: Rights, on: &str) -> RemoteError {
    RemoteError::new(
        ErrorCode::PermissionDenied,
        format!(
            "permission denied: {path} (needs {} on {on})",
            rights.describe()
        ),
    )
}

/// Refuses unless `caller` has `wanted` on the inode `on` (named in the error), reached by
/// the operation on `path`.
pub fn require(
    caller: &Caller,
    owner: Owner,
    wanted: Rights,
    path: &str,
    on: &str,
) -> Result<(), RemoteError> {
    let lacking = missing(caller, owner, wanted);
    if lacking == Rights::NONE {
        Ok(())
    } else {
        Err(denied(path, lacking, on))
    }
}

/// The sticky-bit rule: in a sticky `directory` only the entry's owner, the directory's owner
/// or root may remove, rename or replace the entry `entry_uid` (the operation is on `path`).
pub fn require_sticky(
    caller: &Caller,
    directory: Owner,
    entry_uid: u32,
    path: &str,
    directory_path: &str,
) -> Result<(), RemoteError> {
    if directory.mode & MODE_STICKY == 0
        || caller.is_root()
        || caller.uid == entry_uid
        || caller.uid == directory.uid
    {
        return Ok(());
    }
    Err(RemoteError::new(
        ErrorCode::PermissionDenied,
        format!(
            "permission denied: {path} ({directory_path} is sticky: only the owner of the entry or of the directory may remove or replace it)"
        ),
    ))
}

/// Who may set the times of `path` (`utimensat(2)`): both to now (or neither changed) needs
/// the owner, root, or write permission on the file; any other value, the owner or root.
pub fn set_times(
    caller: &Caller,
    owner: Owner,
    (atime_ns, mtime_ns): (u64, u64),
    path: &str,
) -> Result<(), RemoteError> {
    use tessera_proto::{TIME_NOW, TIME_OMIT};
    if caller.is_root() || caller.uid == owner.uid {
        return Ok(());
    }
    let only_now = [atime_ns, mtime_ns]
        .iter()
        .all(|&time| time == TIME_NOW || time == TIME_OMIT);
    if only_now {
        return require(caller, owner, Rights::WRITE, path, path);
    }
    Err(RemoteError::new(
        ErrorCode::PermissionDenied,
        format!(
            "permission denied: {path} (only its owner, uid {}, or root may set its times to a given value)",
            owner.uid
        ),
    ))
}

/// The mode a chmod by `caller` of an inode with attributes `owner` stores, or why it is
/// refused: only the owner or root may chmod; a non-root caller outside the file's group loses
/// the setgid bit (as Linux does).
pub fn chmod(caller: &Caller, owner: Owner, mode: u32, path: &str) -> Result<u32, RemoteError> {
    if !caller.is_root() && caller.uid != owner.uid {
        return Err(RemoteError::new(
            ErrorCode::PermissionDenied,
            format!(
                "permission denied: {path} (only its owner, uid {}, or root may chmod it)",
                owner.uid
            ),
        ));
    }
    if !caller.is_root() && !caller.in_group(owner.gid) {
        return Ok(mode & !MODE_SETGID);
    }
    Ok(mode)
}

/// The `(mode, uid, gid)` a chown by `caller` stores, or why it is refused. `uid`/`gid` `None`
/// leave that id as it is. Root may set any ids. Anyone else must own the file, may name only
/// its current owner as `uid`, and may set the group to its current group or one of their own
/// groups (POSIX's restricted chown). A change of owner or group of a file clears setuid, and
/// setgid on a group-executable file (as Linux does, for root too).
pub fn chown(
    caller: &Caller,
    owner: Owner,
    uid: Option<u32>,
    gid: Option<u32>,
    path: &str,
) -> Result<(u32, u32, u32), RemoteError> {
    let new_uid = uid.unwrap_or(owner.uid);
    let new_gid = gid.unwrap_or(owner.gid);
    if !caller.is_root() {
        let refuse = |why: String| {
            Err(RemoteError::new(
                ErrorCode::PermissionDenied,
                format!("permission denied: {path} ({why})"),
            ))
        };
        if caller.uid != owner.uid {
            return refuse(format!(
                "only its owner, uid {}, or root may chown it",
                owner.uid
            ));
        }
        if new_uid != owner.uid {
            return refuse(format!("only root may change the owner to uid {new_uid}"));
        }
        if new_gid != owner.gid && !caller.in_group(new_gid) {
            return refuse(format!("uid {} is not in group {new_gid}", caller.uid));
        }
    }
    let mut mode = owner.mode;
    let changed = new_uid != owner.uid || new_gid != owner.gid;
    if changed && !owner.directory {
        mode &= !MODE_SETUID;
        if mode & MODE_GROUP_EXECUTE != 0 {
            mode &= !MODE_SETGID;
        }
    }
    Ok((mode, new_uid, new_gid))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The POSIX rule written the long way, bit by bit: the reference the checks must match.
    pub(crate) fn reference(caller: &Caller, owner: Owner, wanted: u32) -> bool {
        (0..3).all(|bit| {
            let right = 1 << bit;
            if wanted & right == 0 {
                return true;
            }
            if caller.uid == 0 {
                return right != 1 || owner.directory || owner.mode & 0o111 != 0;
            }
            let shift = if caller.uid == owner.uid {
                6
            } else if caller.gid == owner.gid || caller.groups.contains(&owner.gid) {
                3
            } else {
                0
            };
            owner.mode & (right << shift) != 0
        })
    }

    proptest! {
        #[test]
        fn missing_matches_the_reference(
            uid in 0u32..4, gid in 0u32..4, groups in proptest::collection::vec(0u32..4, 0..3),
            mode in 0u32..0o10000, owner_uid in 0u32..4, owner_gid in 0u32..4,
            directory: bool, wanted in 0u32..8,
        ) {
            let caller = Caller { uid, gid, groups };
            let owner = Owner { mode, uid: owner_uid, gid: owner_gid, directory };
            let granted = missing(&caller, owner, Rights(wanted)) == Rights::NONE;
            prop_assert_eq!(granted, reference(&caller, owner, wanted));
        }
    }

    #[test]
    fn classes_decide_in_order() {
        let owner = Owner {
            mode: 0o047,
            uid: 10,
            gid: 20,
            directory: false,
        };
        // The owner class has no bits: the owner is refused though group and other may read.
        assert_eq!(
            missing(&Caller::new(10, 20), owner, Rights::READ),
            Rights::READ
        );
        assert_eq!(
            missing(&Caller::new(11, 20), owner, Rights::READ),
            Rights::NONE
        );
        let supplementary = Caller {
            uid: 11,
            gid: 99,
            groups: vec![20],
        };
        assert_eq!(missing(&supplementary, owner, Rights::WRITE), Rights::WRITE);
        assert_eq!(
            missing(&Caller::new(12, 99), owner, Rights::WRITE),
            Rights::NONE
        );
        // Root reads and writes anything, executes a file only with some x bit.
        let no_x = Owner { mode: 0, ..owner };
        assert_eq!(
            missing(&Caller::root(), no_x, Rights::open(true, true)),
            Rights::NONE
        );
        assert_eq!(
            missing(&Caller::root(), no_x, Rights::SEARCH),
            Rights::SEARCH
        );
        assert_eq!(
            missing(
                &Caller::root(),
                Owner {
                    directory: true,
                    ..no_x
                },
                Rights::SEARCH
            ),
            Rights::NONE
        );
    }

    #[test]
    fn describe_names_each_right() {
        assert_eq!(Rights::WRITE_SEARCH.describe(), "write and search");
        assert_eq!(Rights::READ.describe(), "read");
        assert_eq!(
            denied("/a/b", Rights::WRITE, "/a").message,
            "permission denied: /a/b (needs write on /a)"
        );
    }

    #[test]
    fn squash_maps_only_root() {
        assert_eq!(Caller::root().squashed(), Caller::new(NOBODY, NOBODY));
        let user = Caller {
            uid: 5,
            gid: 6,
            groups: vec![7],
        };
        assert_eq!(user.squashed(), user);
    }
}
