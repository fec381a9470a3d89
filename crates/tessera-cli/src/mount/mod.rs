//! `tessera mount DIR` and `tessera umount DIR`: the cluster's namespace as a POSIX file
//! system, through FUSE (docs/MOUNT.md).
//!
//! `mount` checks the cluster answers, then starts itself again as the mount daemon
//! (`--foreground`, in a process group of its own, its output to `--log` or nowhere) and
//! returns once the kernel lists the mount, or fails naming why within `MOUNT_READY_TIMEOUT`.
//! The daemon runs as root with the cluster key and serves every request as its caller
//! ([`callers`]); the session runs on [`THREADS`] threads, each blocking in client calls
//! that every one end within the client's timeout. `umount` unmounts; the daemon's session
//! then ends and it exits. SIGTERM, SIGINT or SIGHUP to the daemon detaches the mount
//! (`MNT_DETACH`), so a stopped daemon leaves no dead mount.

mod callers;
mod errno;
mod fs;
mod inodes;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tessera_auth::{AuthError, ClusterKey};
use tessera_client::{ClientError, ClientOptions, ClusterConfig};
use tessera_cluster::ClusterArg;
use thiserror::Error;

use self::callers::{Caller, Callers};
use self::fs::TesseraFs;

/// How often `tessera mount` looks whether its daemon's mount is up.
const MOUNT_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Threads serving kernel requests at once (each may wait on a server).
pub const THREADS: usize = 8;

/// How long `tessera mount` waits for its daemon to have the mount in place.
pub const MOUNT_READY_TIMEOUT: Duration = Duration::from_secs(15);

/// The file system type the kernel lists for a Tessera mount.
const FS_TYPE: &str = "fuse.tessera";

/// Arguments of `tessera mount`.
#[derive(Debug, clap::Args)]
pub struct MountArgs {
    /// An existing, empty directory to mount the cluster's namespace on.
    dir: PathBuf,
    /// Serve from this process until unmounted, instead of a background process.
    #[arg(long)]
    foreground: bool,
    /// Where the background mount process writes its log (default: nowhere).
    #[arg(long)]
    log: Option<PathBuf>,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Arguments of `tessera umount`.
#[derive(Debug, clap::Args)]
pub struct UmountArgs {
    /// The directory a Tessera file system is mounted on.
    dir: PathBuf,
}

/// Why `mount` or `umount` failed, or (for the log) why the readahead was left alone.
#[derive(Debug, Error)]
pub enum MountError {
    /// A call on the mount point failed (`hint` adds what a busy mount means).
    #[error("{command}: {}: {source}{hint}", dir.display())]
    Dir {
        /// "mount" or "umount".
        command: &'static str,
        /// The mount point.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
        /// Said after the reason ("" or the meaning of `EBUSY`).
        hint: &'static str,
    },
    /// The mount point cannot be used: `why` says what it is instead.
    #[error("{command}: {} {why}", dir.display())]
    NotUsable {
        /// "mount" or "umount".
        command: &'static str,
        /// The mount point.
        dir: PathBuf,
        /// "is not a directory", "is already a Tessera mount", ...
        why: &'static str,
    },
    /// The cluster file is missing or malformed.
    #[error("mount: {0}")]
    Cluster(ClientError),
    /// The cluster file names no key.
    #[error("mount: the cluster file names no key ([auth] key): the mount daemon signs each caller's credential with it")]
    NoKey,
    /// The cluster key cannot be read.
    #[error("mount: cannot read the cluster key {}: {source} (the mount daemon runs as root, with the key)", path.display())]
    Key {
        /// The key file.
        path: PathBuf,
        /// Why.
        source: AuthError,
    },
    /// The cluster did not answer a `stat` of its root.
    #[error("mount: the cluster does not answer: {0}")]
    NoAnswer(ClientError),
    /// The kernel's mount table cannot be read.
    #[error("cannot read /proc/self/mountinfo: {0}")]
    Mountinfo(std::io::Error),
    /// The daemon could not be started (`doing` says which step).
    #[error("mount: {doing}: {source}")]
    Daemon {
        /// "cannot find this program", "cannot start the mount process", ...
        doing: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The daemon's log cannot be opened.
    #[error("mount: {doing} {}: {source}", log.display())]
    Log {
        /// "cannot open the log" or "the log".
        doing: &'static str,
        /// The log file.
        log: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The daemon exited before the mount was in place.
    #[error("mount: the mount process exited ({status}) before mounting {}{}", dir.display(), log.as_ref().map_or_else(
        || "; run with --foreground or --log FILE to see why".to_owned(),
        |log| format!("; see {}", log.display())
    ))]
    Exited {
        /// How it exited.
        status: ExitStatus,
        /// The mount point.
        dir: PathBuf,
        /// Its log, if it has one.
        log: Option<PathBuf>,
    },
    /// The mount was not in place in time.
    #[error("mount: {} was not mounted within {} s; the mount process was stopped", dir.display(), MOUNT_READY_TIMEOUT.as_secs())]
    NotReady {
        /// The mount point.
        dir: PathBuf,
    },
    /// The mount is not in the kernel's mount table (readahead only).
    #[error("not in /proc/self/mountinfo")]
    NotListed,
    /// The device's readahead setting could not be written.
    #[error("{path}: {source}")]
    Readahead {
        /// The sysfs file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// `tessera mount DIR`.
pub fn mount(args: &MountArgs) -> Result<(), MountError> {
    // Before any thread exists, so that every thread inherits the mask and only the signal
    // thread of `serve` takes these signals.
    let signals = args.foreground.then(block_stop_signals);
    let dir = std::path::absolute(&args.dir).map_err(|source| MountError::Dir {
        command: "mount",
        dir: args.dir.clone(),
        source,
        hint: "",
    })?;
    if is_mounted(&dir)? {
        return Err(MountError::NotUsable {
            command: "mount",
            dir,
            why: "is already a Tessera mount",
        });
    }
    if !dir.is_dir() {
        return Err(MountError::NotUsable {
            command: "mount",
            dir,
            why: "is not a directory",
        });
    }
    let config = match &args.cluster.cluster {
        Some(path) => ClusterConfig::load(path),
        None => ClusterConfig::from_env(),
    }
    .map_err(MountError::Cluster)?;
    let key_path = config.auth.key.clone().ok_or(MountError::NoKey)?;
    let key = ClusterKey::load(&key_path).map_err(|source| MountError::Key {
        path: key_path.clone(),
        source,
    })?;
    let options = ClientOptions {
        cache_bytes: Some(0),
        ..ClientOptions::default()
    };
    let callers = Callers::new(config, options, key);
    // A cluster that does not answer is reported here, not as EIO on the first `ls`.
    let root = callers.client(&Caller::of_request(0, 0, 0));
    root.stat("/").map_err(MountError::NoAnswer)?;
    if let Some(signals) = signals {
        serve(&dir, callers, signals)
    } else {
        drop(root);
        drop(callers);
        start_daemon(args, &dir)
    }
}

/// Blocks SIGTERM, SIGINT and SIGHUP in this thread (and the threads it starts later);
/// returns the set.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: a zeroed sigset_t is valid storage for sigemptyset, which initializes it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is ours and initialized by sigemptyset before sigaddset and the mask call,
    // which only reads it; the old mask is not asked for.
    unsafe {
        libc::sigemptyset(&raw mut set);
        for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&raw mut set, signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut());
    }
    set
}

/// Waits on its own thread for one of `signals`, then detaches the mount at `dir`: the name
/// goes at once, files still open keep being served, and the session ends (and this process
/// with it) when the last is closed. A daemon stopped this way leaves no dead mount behind.
fn unmount_on_signal(dir: &Path, signals: libc::sigset_t) -> Result<(), MountError> {
    use std::os::unix::ffi::OsStrExt;

    let target =
        std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|_| MountError::NotUsable {
            command: "mount",
            dir: dir.to_owned(),
            why: "holds a NUL byte",
        })?;
    std::thread::Builder::new()
        .name("tessera-mount-signals".to_owned())
        .spawn(move || {
            let mut signal = 0;
            // SAFETY: `signals` is an initialized set and `signal` a local the call writes.
            if unsafe { libc::sigwait(&raw const signals, &raw mut signal) } == 0 {
                tracing::info!("signal {signal}: unmounting {}", target.to_string_lossy());
                // SAFETY: `target` is a NUL-terminated path that outlives the call.
                unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            }
        })
        .map(drop)
        .map_err(|source| MountError::Daemon {
            doing: "cannot start the signal thread",
            source,
        })
}

/// Mounts and serves until unmounted (by `tessera umount`, or a stop signal).
fn serve(dir: &Path, callers: Callers, signals: libc::sigset_t) -> Result<(), MountError> {
    let failed = |source| MountError::Dir {
        command: "mount",
        dir: dir.to_owned(),
        source,
        hint: "",
    };
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("tessera".to_owned()),
        fuser::MountOption::Subtype("tessera".to_owned()),
        fuser::MountOption::RW,
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
        // The kernel serves `stat` and path walks from its attribute and entry caches
        // (`fs::ATTR_TTL`) without asking the daemon: without its own permission checks, a
        // user without search permission on a directory would see what another caller
        // cached of the names inside. With them, the kernel checks every caller against the
        // cached mode bits first (fetched again as that caller once stale), and every call
        // that reaches the daemon is checked again by the mds (docs/MOUNT.md).
        fuser::MountOption::DefaultPermissions,
    ];
    // Every user may use the mount: the mds decides what each may do.
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(THREADS);
    config.clone_fd = true;
    let session = fuser::Session::new(TesseraFs::new(callers), dir, &config).map_err(failed)?;
    // The kernel caps a FUSE mount's readahead at its default (128 KiB) whatever the init
    // reply asks; the device's own setting raises it (root only). Not fatal if refused.
    unmount_on_signal(dir, signals)?;
    if let Err(err) = set_readahead(dir) {
        tracing::warn!(
            "mount: {}: readahead left at the kernel's default: {err}",
            dir.display()
        );
    }
    session.run().map_err(failed)
}

/// Sets the readahead of the mount at `dir` to `fs::READAHEAD_BYTES`, through the sysfs file
/// of its device (found in mountinfo: a `stat` of `dir` would wait on this very session).
fn set_readahead(dir: &Path) -> Result<(), MountError> {
    let device = mount_entry(dir)?.ok_or(MountError::NotListed)?.device;
    let path = format!("/sys/class/bdi/{device}/read_ahead_kb");
    std::fs::write(&path, (fs::READAHEAD_BYTES / 1024).to_string())
        .map_err(|source| MountError::Readahead { path, source })
}

/// Starts `tessera mount DIR --foreground` in the background and waits for the mount.
fn start_daemon(args: &MountArgs, dir: &Path) -> Result<(), MountError> {
    use std::os::unix::process::CommandExt;

    let program = std::env::current_exe().map_err(|source| MountError::Daemon {
        doing: "cannot find this program",
        source,
    })?;
    // The log (or nothing) takes both output streams: the caller's pipes must not stay
    // open in a process that outlives this one.
    let (output, errors) = match &args.log {
        Some(log) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .map_err(|source| MountError::Log {
                    doing: "cannot open the log",
                    log: log.clone(),
                    source,
                })?;
            let copy = file.try_clone().map_err(|source| MountError::Log {
                doing: "the log",
                log: log.clone(),
                source,
            })?;
            (Stdio::from(file), Stdio::from(copy))
        }
        None => (Stdio::null(), Stdio::null()),
    };
    let mut command = Command::new(program);
    command.arg("mount").arg(dir).arg("--foreground");
    if let Some(cluster) = &args.cluster.cluster {
        command.arg("--cluster").arg(cluster);
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(output)
        .stderr(errors)
        .process_group(0)
        .spawn()
        .map_err(|source| MountError::Daemon {
            doing: "cannot start the mount process",
            source,
        })?;
    let deadline = Instant::now() + MOUNT_READY_TIMEOUT;
    loop {
        if is_mounted(dir)? {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(MountError::Exited {
                status,
                dir: dir.to_owned(),
                log: args.log.clone(),
            });
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(MountError::NotReady {
                dir: dir.to_owned(),
            });
        }
        std::thread::sleep(MOUNT_POLL_INTERVAL);
    }
}

/// `tessera umount DIR`.
pub fn umount(args: &UmountArgs) -> Result<(), MountError> {
    use std::os::unix::ffi::OsStrExt;

    let dir = std::path::absolute(&args.dir).map_err(|source| MountError::Dir {
        command: "umount",
        dir: args.dir.clone(),
        source,
        hint: "",
    })?;
    if !is_mounted(&dir)? {
        return Err(MountError::NotUsable {
            command: "umount",
            dir,
            why: "is not a Tessera mount",
        });
    }
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return Err(MountError::NotUsable {
            command: "umount",
            dir,
            why: "holds a NUL byte",
        });
    };
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    if unsafe { libc::umount2(path.as_ptr(), 0) } != 0 {
        let source = std::io::Error::last_os_error();
        let hint = if source.raw_os_error() == Some(libc::EBUSY) {
            " (a process has a file or directory open under it)"
        } else {
            ""
        };
        return Err(MountError::Dir {
            command: "umount",
            dir,
            source,
            hint,
        });
    }
    Ok(())
}

/// A Tessera mount as mountinfo lists it.
struct MountEntry {
    /// The mount's device, `MAJOR:MINOR`.
    device: String,
}

/// Whether the kernel lists a Tessera mount at `dir`.
fn is_mounted(dir: &Path) -> Result<bool, MountError> {
    Ok(mount_entry(dir)?.is_some())
}

/// The Tessera mount at `dir`, if the kernel lists one.
fn mount_entry(dir: &Path) -> Result<Option<MountEntry>, MountError> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").map_err(MountError::Mountinfo)?;
    let wanted = dir.to_string_lossy();
    Ok(table.lines().find_map(|line| {
        let (head, tail) = line.split_once(" - ")?;
        let fields: Vec<&str> = head.split(' ').collect();
        let point = unescape(fields.get(4)?);
        let kind = tail.split(' ').next()?;
        let device = fields.get(2)?;
        (point == wanted && kind == FS_TYPE).then(|| MountEntry {
            device: (*device).to_owned(),
        })
    }))
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'\\' {
            if let Some(value) = field
                .get(index + 1..index + 4)
                .and_then(|digits| u8::from_str_radix(digits, 8).ok())
            {
                out.push(value);
                index += 4;
                continue;
            }
        }
        out.push(bytes[index]);
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape(r"/end\"), r"/end\");
    }
}
