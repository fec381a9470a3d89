//! What `up`, `restart` and the servers trust in a cluster directory: only what their own
//! user owns and nobody else may change.
//!
//! A cluster directory is often made under a shared directory such as `/tmp`, where another
//! user may have made the name first and put in it a key of their own, a symbolic link as a
//! log, or a `run/` that anyone may write. Before `up` or `restart` reads, writes or starts
//! anything, [`check_cluster_dir`] looks at the directory's parents and at every part of it
//! that exists, and refuses any that another uid owns, that group or others may write, or that
//! is a symbolic link, naming the path and the reason. What is missing is then made by this
//! process, owner first: directories with [`create_dir`] (the private ones with
//! [`private_dir`]), small files under a new temporary name and a rename ([`write_new`]: never
//! through a link, never into a file someone else made), logs opened without following a link
//! ([`open_log`]). The servers started by hand check their own parts the same way: their data
//! directory ([`private_dir`]), their socket's directory ([`crate::bind_local`]) and their key
//! (`ClusterKey::load_owned`).

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A part of a cluster directory that is refused, or that cannot be checked or written, by
/// its path.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// Looking at or opening the part failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The part.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The part is there but not to be trusted (another owner, a link, a mode others may
    /// write, another name), or is missing.
    #[error("{}: {why}", path.display())]
    Refused {
        /// The part.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// Writing a small file by rename failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl DirError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            source,
        }
    }

    fn refused(path: &Path, why: impl Into<String>) -> Self {
        Self::Refused {
            path: path.to_owned(),
            why: why.into(),
        }
    }
}

/// Mode of the servers' data directories (`mds`, `iod-N`) and of `log`: the owner's alone.
pub const PRIVATE_DIRECTORY_MODE: u32 = 0o700;
/// Mode of the logs, the saved commands and the kept hostfile.
pub const PRIVATE_FILE_MODE: u32 = 0o600;
/// Mode of the cluster directory and of `run/` when `up` makes them: every user may reach the
/// cluster file and the sockets, nobody but the owner may add, remove or replace anything.
pub const SHARED_DIRECTORY_MODE: u32 = 0o755;
/// Mode of `cluster.toml`, the pid files and the address files: readable by every user.
pub const SHARED_FILE_MODE: u32 = 0o644;

/// Mode bits that let group or others change a file, or add and remove a directory's names.
const WRITE_BY_OTHERS: u32 = 0o022;
/// The sticky bit: in a directory others may write (`/tmp`), only a name's owner (or the
/// directory's) may remove or rename it.
const STICKY: u32 = 0o1000;
/// Most entries of one directory (`run/`, `log/`, the cluster directory itself) that
/// [`check_cluster_dir`] looks at; a cluster holds a few per server.
pub const CLUSTER_DIR_ENTRIES_MAX: usize = 4096;

/// This process's effective uid: the owner every part of its cluster must have.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

/// What a part of a cluster directory must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Directory,
    File,
    /// A file inside an owner-only directory (`log/`, `mds/`, `iod-K/`): nobody else can
    /// reach it, whatever its mode, so only its kind and owner are checked.
    PrivateFile,
    /// A server's or the agent's socket: connecting needs write permission, so others may
    /// write it; it must still be this user's.
    Socket,
}

/// Why a part of a cluster directory whose `lstat` is `meta` may not be trusted, if it may
/// not (the caller names the path).
fn refusal(meta: &fs::Metadata, kind: Kind) -> Option<String> {
    let file_type = meta.file_type();
    if file_type.is_symlink() {
        return Some(
            "a symbolic link: no part of a cluster directory is reached through one".to_owned(),
        );
    }
    let (right_kind, wanted) = match kind {
        Kind::Directory => (file_type.is_dir(), "a directory"),
        Kind::File | Kind::PrivateFile => (file_type.is_file(), "a regular file"),
        Kind::Socket => (file_type.is_socket(), "a socket"),
    };
    if !right_kind {
        return Some(format!("not {wanted}"));
    }
    let uid = effective_uid();
    if meta.uid() != uid {
        return Some(format!(
            "owned by uid {}, not by uid {uid} who runs the cluster",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if matches!(kind, Kind::Directory | Kind::File) && mode & WRITE_BY_OTHERS != 0 {
        let who = match mode & WRITE_BY_OTHERS {
            0o020 => "group",
            0o002 => "others",
            _ => "group and others",
        };
        return Some(format!(
            "mode {mode:04o} lets {who} write it (`chmod go-w` it)"
        ));
    }
    None
}

/// Checks the part at `path` (not following a link) if it exists; returns whether it does.
fn check_part(path: &Path, kind: Kind) -> Result<bool, DirError> {
    match fs::symlink_metadata(path) {
        Ok(meta) => match refusal(&meta, kind) {
            None => Ok(true),
            Some(why) => Err(DirError::refused(path, why)),
        },
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(DirError::io(path, err)),
    }
}

/// Checks the file at `path` if it exists (a server's store before it opens it): refused if
/// it is a symbolic link or not a regular file, if another uid owns it or if group or others
/// may write it, naming the path. Returns whether it exists.
pub fn check_file(path: &Path) -> Result<bool, DirError> {
    check_part(path, Kind::File)
}

/// Checks the directories above `dir`: each must be root's or this user's, and one that
/// others may write must be sticky (as `/tmp` is), so that nobody else can move `dir` aside
/// and put a directory of their own in its place.
fn check_parents(dir: &Path) -> Result<(), DirError> {
    let real = fs::canonicalize(dir).map_err(|err| DirError::io(dir, err))?;
    let uid = effective_uid();
    // A path has finitely many ancestors (at most PATH_MAX bytes of components).
    for parent in real.ancestors().skip(1) {
        let meta = fs::metadata(parent).map_err(|err| DirError::io(parent, err))?;
        let mode = meta.mode() & 0o7777;
        if meta.uid() != 0 && meta.uid() != uid {
            return Err(DirError::refused(
                parent,
                format!(
                    "owned by uid {}, who could replace the cluster directory {} (its parents \
                     must be root's or uid {uid}'s)",
                    meta.uid(),
                    dir.display()
                ),
            ));
        }
        if mode & WRITE_BY_OTHERS != 0 && mode & STICKY == 0 {
            return Err(DirError::refused(
                parent,
                format!(
                    "mode {mode:04o} lets other users replace the cluster directory {} (a \
                     parent others may write needs the sticky bit, as /tmp has)",
                    dir.display()
                ),
            ));
        }
    }
    Ok(())
}

/// The entries of directory `dir`, at most [`CLUSTER_DIR_ENTRIES_MAX`] of them.
fn entries(dir: &Path) -> Result<Vec<PathBuf>, DirError> {
    let listing = fs::read_dir(dir).map_err(|err| DirError::io(dir, err))?;
    let mut paths = Vec::new();
    for entry in listing {
        let entry = entry.map_err(|err| DirError::io(dir, err))?;
        if paths.len() == CLUSTER_DIR_ENTRIES_MAX {
            return Err(DirError::refused(
                dir,
                format!(
                    "more than {CLUSTER_DIR_ENTRIES_MAX} entries; this is not a cluster directory"
                ),
            ));
        }
        paths.push(entry.path());
    }
    Ok(paths)
}

/// Checks the cluster directory `dir` (which must exist) and every part of it that `up`,
/// `restart` and the servers use: its parents ([`check_parents`]), the directory, `key`,
/// `cluster.toml`, `hosts`, `run/` and each file and socket in it, `log/` and each log,
/// `mds/` and its store, each `iod-K/` with its cost model and `objects/`. The first part that
/// another uid owns, that is a symbolic link, or that group or others may write is refused,
/// by its path and why (the mode is not asked of a socket, which others must be able to
/// connect to, nor of a file inside an owner-only directory, which nobody else reaches).
pub fn check_cluster_dir(dir: &Path) -> Result<(), DirError> {
    check_parents(dir)?;
    if !check_part(dir, Kind::Directory)? {
        return Err(DirError::refused(dir, "no such directory"));
    }
    for name in ["key", "cluster.toml", crate::names::HOSTS_FILE] {
        check_part(&dir.join(name), Kind::File)?;
    }
    let run = dir.join("run");
    if check_part(&run, Kind::Directory)? {
        for entry in entries(&run)? {
            let is_socket =
                fs::symlink_metadata(&entry).is_ok_and(|meta| meta.file_type().is_socket());
            check_part(&entry, if is_socket { Kind::Socket } else { Kind::File })?;
        }
    }
    let log = dir.join("log");
    if check_part(&log, Kind::Directory)? {
        for entry in entries(&log)? {
            check_part(&entry, Kind::PrivateFile)?;
        }
    }
    let mds = dir.join("mds");
    if check_part(&mds, Kind::Directory)? {
        check_part(&mds.join("meta.redb"), Kind::PrivateFile)?;
    }
    for entry in entries(dir)? {
        let is_iod = entry
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| name.strip_prefix("iod-"))
            .is_some_and(|index| index.parse::<u16>().is_ok());
        if is_iod {
            check_part(&entry, Kind::Directory)?;
            check_part(&entry.join("objects"), Kind::Directory)?;
            check_part(
                &entry.join(tessera_policy::cost::COST_MODEL_FILE),
                Kind::PrivateFile,
            )?;
        }
    }
    Ok(())
}

/// Makes directory `path` with `mode` (its parents as `create_dir_all` does) unless it
/// exists; returns whether this call made it. A directory made here gets exactly `mode`,
/// whatever the umask.
pub fn create_dir(path: &Path, mode: u32) -> std::io::Result<bool> {
    if let Some(parent) = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        fs::create_dir_all(parent)?;
    }
    match fs::DirBuilder::new().mode(mode).create(path) {
        Ok(()) => {
            fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
            Ok(true)
        }
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(err) => Err(err),
    }
}

/// Makes `path` if missing and owner-only ([`PRIVATE_DIRECTORY_MODE`], also when an older
/// version left it readable). Refuses a directory another uid owns, one that group or others
/// may write, and a symbolic link (the error says why; the caller names the path).
pub fn private_dir(path: &Path) -> std::io::Result<()> {
    create_dir(path, PRIVATE_DIRECTORY_MODE)?;
    let meta = fs::symlink_metadata(path)?;
    if let Some(why) = refusal(&meta, Kind::Directory) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            why,
        ));
    }
    fs::set_permissions(path, fs::Permissions::from_mode(PRIVATE_DIRECTORY_MODE))
}

/// Opens the log `path` for appending, owner-only ([`PRIVATE_FILE_MODE`]), creating it if
/// missing. Never follows a symbolic link (`O_NOFOLLOW`), and refuses a log that is not a
/// regular file, that another uid owns or that has another name (a hard link).
pub fn open_log(path: &Path) -> Result<fs::File, DirError> {
    let file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(PRIVATE_FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|err| match err.raw_os_error() {
            Some(libc::ELOOP) => {
                DirError::refused(path, "a symbolic link: a log is never written through one")
            }
            _ => DirError::io(path, err),
        })?;
    let meta = file.metadata().map_err(|err| DirError::io(path, err))?;
    if let Some(why) = refusal(&meta, Kind::File) {
        return Err(DirError::refused(path, why));
    }
    if meta.nlink() != 1 {
        return Err(DirError::refused(
            path,
            format!(
                "has {} names (hard links): a log is never written through another name",
                meta.nlink()
            ),
        ));
    }
    file.set_permissions(fs::Permissions::from_mode(PRIVATE_FILE_MODE))
        .map_err(|err| DirError::io(path, err))?;
    Ok(file)
}

/// Writes `text` to `path` with exactly `mode`, by a rename of a new file (`NAME.tmp`, made
/// with `O_EXCL`, so never through a link and never into a file someone else made): a reader
/// sees the old content or the new, and a link at `path` is replaced, not followed.
pub fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), DirError> {
    let failed = |source: std::io::Error| DirError::Write {
        path: path.to_owned(),
        source,
    };
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    match fs::remove_file(&temporary) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(failed(err)),
    }
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&temporary)
        .map_err(failed)?;
    file.set_permissions(fs::Permissions::from_mode(mode))
        .and_then(|()| file.write_all(text.as_bytes()))
        .and_then(|()| fs::rename(&temporary, path))
        .map_err(failed)
}

/// Checks that the directory `parent`, where a socket is about to be bound, cannot be changed
/// by other users: root's or this user's, and sticky if others may write it.
pub fn check_socket_parent(parent: &Path) -> std::io::Result<()> {
    let meta = fs::metadata(parent)?;
    let uid = effective_uid();
    let mode = meta.mode() & 0o7777;
    let why = if meta.uid() != 0 && meta.uid() != uid {
        format!(
            "its directory {} is owned by uid {}, not by root or uid {uid} who runs this server",
            parent.display(),
            meta.uid()
        )
    } else if mode & WRITE_BY_OTHERS != 0 && mode & STICKY == 0 {
        format!(
            "its directory {} has mode {mode:04o}: other users could replace the socket",
            parent.display()
        )
    } else {
        return Ok(());
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        why,
    ))
}

/// What may be at a socket's path before it is bound: nothing, or a stale socket of this
/// user's (removed). A symbolic link, another kind of file or another user's socket is
/// refused, saying which.
pub fn clear_socket_path(path: &Path) -> std::io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    match refusal(&meta, Kind::Socket) {
        None => fs::remove_file(path),
        Some(why) => Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("exists and is refused: {why}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn private_parts_are_made_owner_only_and_open_ones_refused() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("a/b/iod-0");
        private_dir(&data).unwrap();
        let mode = |path: &Path| fs::symlink_metadata(path).unwrap().mode() & 0o7777;
        assert_eq!(mode(&data), 0o700);
        fs::set_permissions(&data, fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&data).unwrap();
        assert_eq!(mode(&data), 0o700, "readable: made private again");
        fs::set_permissions(&data, fs::Permissions::from_mode(0o777)).unwrap();
        let err = private_dir(&data).unwrap_err().to_string();
        assert_eq!(
            err,
            "mode 0777 lets group and others write it (`chmod go-w` it)"
        );
        assert_eq!(mode(&data), 0o777, "left as found");
        fs::set_permissions(&data, fs::Permissions::from_mode(0o720)).unwrap();
        let err = private_dir(&data).unwrap_err().to_string();
        assert!(err.starts_with("mode 0720 lets group write it"), "{err}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&data, &link).unwrap();
        let err = private_dir(&link).unwrap_err().to_string();
        assert!(err.starts_with("a symbolic link"), "{err}");
    }

    #[test]
    fn logs_and_new_files_never_follow_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("precious");
        fs::write(&target, b"keep").unwrap();
        let log = dir.path().join("mds.log");
        std::os::unix::fs::symlink(&target, &log).unwrap();
        let err = open_log(&log).unwrap_err().to_string();
        assert!(err.contains("mds.log: a symbolic link"), "{err}");
        // A link where a file is written is replaced, not followed; a planted temporary
        // name is removed first.
        let pid = dir.path().join("mds.pid");
        std::os::unix::fs::symlink(&target, &pid).unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("mds.pid.tmp")).unwrap();
        write_new(&pid, "42", SHARED_FILE_MODE).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"keep");
        assert_eq!(fs::read_to_string(&pid).unwrap(), "42");
        let meta = fs::symlink_metadata(&pid).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.mode() & 0o7777, 0o644);
        // A second name of a log is refused; its own log opens, owner-only.
        let real = dir.path().join("iod-0.log");
        open_log(&real).unwrap().write_all(b"line\n").unwrap();
        fs::hard_link(&real, dir.path().join("other")).unwrap();
        let err = open_log(&real).unwrap_err().to_string();
        assert!(err.contains("has 2 names"), "{err}");
        fs::remove_file(dir.path().join("other")).unwrap();
        open_log(&real).unwrap().write_all(b"more\n").unwrap();
        assert_eq!(fs::read(&real).unwrap(), b"line\nmore\n");
        assert_eq!(fs::metadata(&real).unwrap().mode() & 0o7777, 0o600);
    }

    #[test]
    fn only_a_stale_socket_of_ours_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s.sock");
        drop(UnixListener::bind(&socket).unwrap());
        clear_socket_path(&socket).unwrap();
        assert!(
            fs::symlink_metadata(&socket).is_err(),
            "stale socket removed"
        );
        fs::write(&socket, b"file").unwrap();
        let err = clear_socket_path(&socket).unwrap_err().to_string();
        assert_eq!(err, "exists and is refused: not a socket");
        fs::remove_file(&socket).unwrap();
        std::os::unix::fs::symlink("/dev/null", &socket).unwrap();
        let err = clear_socket_path(&socket).unwrap_err().to_string();
        assert!(err.contains("a symbolic link"), "{err}");
        assert!(fs::symlink_metadata(&socket)
            .unwrap()
            .file_type()
            .is_symlink());
        check_socket_parent(dir.path()).unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let err = check_socket_parent(dir.path()).unwrap_err().to_string();
        assert!(err.contains("has mode 0777"), "{err}");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o1777)).unwrap();
        check_socket_parent(dir.path()).unwrap();
    }

    #[test]
    fn a_cluster_directory_is_checked_part_by_part() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        check_cluster_dir(root).unwrap();
        create_dir(&root.join("run"), SHARED_DIRECTORY_MODE).unwrap();
        write_new(&root.join("run/mds.pid"), "1", SHARED_FILE_MODE).unwrap();
        private_dir(&root.join("iod-3")).unwrap();
        check_cluster_dir(root).unwrap();
        fs::set_permissions(root.join("run/mds.pid"), fs::Permissions::from_mode(0o666)).unwrap();
        let err = check_cluster_dir(root).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "{}: mode 0666 lets group and others write it (`chmod go-w` it)",
                root.join("run/mds.pid").display()
            )
        );
        fs::remove_file(root.join("run/mds.pid")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("iod-3/cost-model.toml")).unwrap();
        let err = check_cluster_dir(root).unwrap_err().to_string();
        assert!(
            err.contains("iod-3/cost-model.toml: a symbolic link"),
            "{err}"
        );
        fs::remove_file(root.join("iod-3/cost-model.toml")).unwrap();
        fs::set_permissions(root, fs::Permissions::from_mode(0o775)).unwrap();
        let err = check_cluster_dir(root).unwrap_err().to_string();
        assert!(
            err.ends_with("mode 0775 lets group write it (`chmod go-w` it)"),
            "{err}"
        );
        // A parent others may write, without the sticky bit, could swap the directory.
        fs::set_permissions(root, fs::Permissions::from_mode(0o777)).unwrap();
        let inner = root.join("cluster");
        create_dir(&inner, SHARED_DIRECTORY_MODE).unwrap();
        let err = check_cluster_dir(&inner).unwrap_err().to_string();
        assert!(err.contains("needs the sticky bit"), "{err}");
        fs::set_permissions(root, fs::Permissions::from_mode(0o1777)).unwrap();
        check_cluster_dir(&inner).unwrap();
    }
}
