//! The server's hands in one client's memory: every one-sided copy of a same-host connection
//! (`process_vm_readv`/`process_vm_writev`, [`super::rma`]) goes through the connection's
//! [`Mover`], which makes it with the client's own rights and only while the process that
//! connected is still the one it was.
//!
//! - **The client's rights, not the server's.** The kernel checks each `process_vm_*` call
//!   against the caller's *real* uid and gid (`PTRACE_MODE_ATTACH_REALCREDS`: they must be the
//!   target's real, effective and saved ones, and the target dumpable) unless the caller has
//!   `CAP_SYS_PTRACE` in its effective set. A copy for a client of another user than the
//!   server's runs in a **task** the mover keeps for it (`helper.rs`): made with `clone(CLONE_VM
//!   | CLONE_FILES | CLONE_FS)`, so it shares the server's memory, but not one of the server's
//!   threads; it takes the uid and gid the kernel reports for the client's socket
//!   (`SO_PEERCRED`) as all its ids, which drops every capability, and is woken for each copy
//!   while the serving thread waits. So a copy reaches exactly what the client could reach
//!   with its own `process_vm_*` calls: not a setuid program, not a process that made itself
//!   non-dumpable, not another user's process. (Never a *thread* of the server with the
//!   client's ids: the kernel lets a user signal any task whose real uid is its own, and a
//!   `SIGKILL` to one thread ends the whole server. The task is the client's to kill, which
//!   fails the copy under way alone; the next copy starts a new one.) A root client's copies,
//!   and those of a server's own user, run on the calling thread: its rights are then the
//!   client's. A server that is not root serves one-sidedly only its own user's programs.
//! - **The process that connected, and only while it lives.** The client is pinned by a pidfd
//!   (`SO_PEERPIDFD`, taken by the kernel when the client connected) and by its
//!   `/proc/PID/mem`, opened at start with the client's credentials (the kernel's ptrace check
//!   again): that file stays bound to the address space the process had then and reads nothing
//!   once the process exits or executes another program. The pidfd is checked before every
//!   copy and both after it; a copy after which either changed is an error and the mover is
//!   retired (its connection is closed), so a recycled pid or a program the client exec'd is
//!   never reached again.
//! - **A copy that waits holds nothing others need.** The client's memory may be a mapping of
//!   a FUSE file (Tessera's own mount, whose daemon asks this very server), of a slow disk, or
//!   userfaultfd memory: a copy can wait for long. Copies run on the connection's own thread
//!   (the server gives each same-host connection that may lend memory one) or on a blocking
//!   thread, never on an async worker, and a watchdog ([`watch`]; for a blocking thread also
//!   the connection's task, [`Mover::retired_wait`]) looks at them: a copy still running after
//!   [`REMOTE_COPY_TIMEOUT_MS`] is declared stalled, the hook its caller
//!   registered runs at once (it gives back the extent the copy's request holds), the mover is
//!   retired and the connection closed; a copy in a client's task ends there (the task is
//!   killed), one on the calling thread (a root client's) holds that thread until it ends. The copies
//!   of one uid stuck at once are capped ([`STALLED_COPIES_PER_UID_MAX`]): a uid at the cap gets
//!   no new mover, so its data moves in messages until its copies end.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tessera_proto::limits::{REMOTE_COPY_TIMEOUT_MS, STALLED_COPIES_PER_UID_MAX};
use tessera_proto::RemoteSegment;
use tokio::sync::Notify;

use super::rma::{self, Direction, RmaCounts, RmaError};

/// Most supplementary groups read for a client (the kernel's `NGROUPS_MAX`).
const PEER_GROUPS_MAX: usize = 65_536;

/// How often the connection's task, and the watchdog, look for a stalled copy.
const STALL_CHECK_EVERY: Duration = Duration::from_millis(100);

/// The process at the other end of a same-host socket, by the kernel's word.
#[derive(Debug)]
pub struct PeerProcess {
    /// Its pid, in this pid namespace.
    pub pid: u32,
    /// Its effective uid and gid when it connected.
    pub uid: u32,
    /// Its effective gid when it connected.
    pub gid: u32,
    /// Its supplementary groups when it connected.
    pub groups: Vec<u32>,
    /// A pidfd of the process that connected (`None` where the kernel gives none).
    pidfd: Option<OwnedFd>,
}

/// `getsockopt` of `option` into `value`; returns the bytes written.
fn socket_option<T>(
    socket: BorrowedFd<'_>,
    option: libc::c_int,
    value: &mut [T],
) -> io::Result<usize> {
    let mut length = libc::socklen_t::try_from(std::mem::size_of_val(value))
        .map_err(|_| io::Error::from_raw_os_error(libc::ERANGE))?;
    // SAFETY: `value` is writable memory of `length` bytes that we own; the kernel writes at
    // most that many and says how many it wrote.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            value.as_mut_ptr().cast(),
            &raw mut length,
        )
    };
    if rc == 0 {
        Ok(length as usize)
    } else {
        Err(io::Error::last_os_error())
    }
}

impl PeerProcess {
    /// The process that connected `socket` (a Unix stream socket): its pid, uid, gid and
    /// groups as the kernel recorded them at connect, and a pidfd of it (`SO_PEERPIDFD`;
    /// `pidfd_open` of the pid on kernels without it, which a pid recycled between connect
    /// and accept could fool: the mover's memory pin still binds it to one address space).
    pub fn of_socket(socket: BorrowedFd<'_>) -> io::Result<Self> {
        let mut credentials = [libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        }];
        socket_option(socket, libc::SO_PEERCRED, &mut credentials)?;
        let [credentials] = credentials;
        let pid = u32::try_from(credentials.pid)
            .ok()
            .filter(|&pid| pid != 0)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    "the peer's pid is not visible here",
                )
            })?;
        let mut groups = vec![0 as libc::gid_t; 64];
        let written = match socket_option(socket, libc::SO_PEERGROUPS, &mut groups) {
            Err(err) if err.raw_os_error() == Some(libc::ERANGE) => {
                groups = vec![0; PEER_GROUPS_MAX];
                socket_option(socket, libc::SO_PEERGROUPS, &mut groups)?
            }
            other => other?,
        };
        groups.truncate(written / std::mem::size_of::<libc::gid_t>());
        let mut pidfd = [-1 as libc::c_int];
        let pidfd = match socket_option(socket, libc::SO_PEERPIDFD, &mut pidfd) {
            // SAFETY: the kernel just made this descriptor for us; nothing else owns it.
            Ok(_) if pidfd[0] >= 0 => Some(unsafe { OwnedFd::from_raw_fd(pidfd[0]) }),
            _ => pidfd_open(pid),
        };
        Ok(Self {
            pid,
            uid: credentials.uid,
            gid: credentials.gid,
            groups,
            pidfd,
        })
    }
}

/// A pidfd of `pid`, if the kernel gives one.
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = libc::c_int::try_from(fd).ok().filter(|&fd| fd >= 0)?;
    // SAFETY: the kernel just made this descriptor for us; nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One-sided copies of each uid stuck past their deadline now.
static STALLED: LazyLock<Mutex<HashMap<u32, usize>>> = LazyLock::new(Mutex::default);

fn stalled() -> std::sync::MutexGuard<'static, HashMap<u32, usize>> {
    STALLED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Copies of `uid` stuck past their deadline now.
pub fn stalled_copies(uid: u32) -> usize {
    stalled().get(&uid).copied().unwrap_or(0)
}

fn stall_begins(uid: u32) {
    *stalled().entry(uid).or_insert(0) += 1;
}

fn stall_ends(uid: u32) {
    let mut table = stalled();
    if let Some(count) = table.get_mut(&uid) {
        *count -= 1;
        if *count == 0 {
            table.remove(&uid);
        }
    }
}

/// The movers the watchdog looks at, and whether its thread runs.
#[derive(Default)]
struct Watched {
    movers: Vec<std::sync::Weak<Mover>>,
    running: bool,
}

static WATCHED: LazyLock<Mutex<Watched>> = LazyLock::new(Mutex::default);

fn watched() -> std::sync::MutexGuard<'static, Watched> {
    WATCHED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Has the watchdog look at `mover` every [`STALL_CHECK_EVERY`] while it lives, as the
/// connection's task does beside a copy on a blocking thread: a copy that runs in line on a
/// connection's own thread has no task beside it, and its stall must still be declared (and
/// its hook run) at the deadline. One watchdog thread per process, running while any mover
/// lives; at most one entry per mover (one per connection).
pub fn watch(mover: &std::sync::Arc<Mover>) {
    let mut watched = watched();
    watched.movers.push(std::sync::Arc::downgrade(mover));
    if !watched.running {
        let started = std::thread::Builder::new()
            .name("tessera-watchdog".to_owned())
            .spawn(watchdog);
        match started {
            Ok(_) => watched.running = true,
            Err(err) => tracing::warn!("no watchdog for one-sided copies: {err}"),
        }
    }
}

/// The watchdog thread: declares overdue copies stalled until no mover is left.
fn watchdog() {
    loop {
        std::thread::sleep(STALL_CHECK_EVERY);
        let movers: Vec<std::sync::Arc<Mover>> = {
            let mut watched = watched();
            watched.movers.retain(|mover| mover.strong_count() > 0);
            if watched.movers.is_empty() {
                watched.running = false;
                return;
            }
            watched
                .movers
                .iter()
                .filter_map(std::sync::Weak::upgrade)
                .collect()
        };
        for mover in movers {
            mover.stall_if_overdue();
        }
    }
}

/// What runs when a copy stalls: gives back what the copy's request holds.
pub type OnStall = Box<dyn FnOnce() + Send>;

/// The copy in progress on a connection, for its watcher.
#[derive(Default)]
struct Watch {
    /// When the copy in progress began.
    since: Option<Instant>,
    /// Its hook.
    on_stall: Option<OnStall>,
    /// It was declared stalled (its uid's stall is counted until it ends).
    stalled: bool,
}

/// The client process, pinned, and the copy in progress.
pub struct Mover {
    pid: u32,
    uid: u32,
    gid: u32,
    /// Copies run on the calling thread, whose rights are the client's (a root client of a
    /// root server, or the server's own user); otherwise in a task with the client's ids.
    on_caller: bool,
    /// That task, kept between copies (`helper.rs`; started at the first copy, again if its
    /// user ended it).
    #[cfg(target_arch = "x86_64")]
    helper: Mutex<Option<helper::Helper>>,
    /// Its pid while it lives (0 otherwise): the watchdog ends it when its copy stalls.
    #[cfg(target_arch = "x86_64")]
    helper_task: std::sync::atomic::AtomicI32,
    pidfd: Option<OwnedFd>,
    /// `/proc/PID/mem`, opened with the client's credentials: bound to the address space the
    /// process had then.
    memory: File,
    copy_timeout: Duration,
    watch: Mutex<Watch>,
    retired: AtomicBool,
    reason: Mutex<Option<String>>,
    /// Tells [`Mover::retired_wait`] of a retirement.
    notify: Notify,
}

impl std::fmt::Debug for Mover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mover")
            .field("pid", &self.pid)
            .field("uid", &self.uid)
            .field("retired", &self.retired())
            .finish_non_exhaustive()
    }
}

impl Mover {
    /// Pins `peer`: opens its memory with its own credentials on this thread (a blocking call;
    /// not on an async worker). Refused when the kernel refuses that (another user's process
    /// from a server that cannot take the client's ids, a non-dumpable client), when the
    /// process is gone, and when the uid has [`STALLED_COPIES_PER_UID_MAX`] copies stuck
    /// already.
    pub fn start(peer: PeerProcess) -> Result<Self, RmaError> {
        Self::start_with(peer, Duration::from_millis(REMOTE_COPY_TIMEOUT_MS))
    }

    /// [`Mover::start`] whose copies stall after `copy_timeout`.
    fn start_with(peer: PeerProcess, copy_timeout: Duration) -> Result<Self, RmaError> {
        let (pid, uid, gid) = (peer.pid, peer.uid, peer.gid);
        let refused = |detail: String| RmaError::Refused {
            pid,
            source: io::Error::new(io::ErrorKind::PermissionDenied, detail),
        };
        let stuck = stalled_copies(uid);
        if stuck >= STALLED_COPIES_PER_UID_MAX {
            return Err(refused(format!(
                "uid {uid} has {stuck} one-sided copies stuck past remote_copy_timeout_ms \
                 ({REMOTE_COPY_TIMEOUT_MS} ms); stalled_copies_per_uid_max is \
                 {STALLED_COPIES_PER_UID_MAX}"
            )));
        }
        // The kernel's ptrace check, with the client's credentials: refused for a process the
        // client could not reach itself.
        let memory = open_memory_as(pid, uid, gid).map_err(|err| {
            refused(format!(
                "the kernel refuses uid {uid} access to the memory of pid {pid}: {err}"
            ))
        })?;
        let on_caller = copies_on_caller(uid, gid);
        let mover = Self {
            pid,
            uid,
            gid,
            on_caller,
            #[cfg(target_arch = "x86_64")]
            helper: Mutex::new(None),
            #[cfg(target_arch = "x86_64")]
            helper_task: std::sync::atomic::AtomicI32::new(0),
            pidfd: peer.pidfd,
            memory,
            copy_timeout,
            watch: Mutex::default(),
            retired: AtomicBool::new(false),
            reason: Mutex::new(None),
            notify: Notify::new(),
        };
        // Alive now, so the pid was not recycled between connect and this open.
        mover.check()?;
        // The copying task starts now, from the thread that starts the mover (a connection's
        // own thread, which lives as long as the connection: the task ends with the thread
        // that made it).
        #[cfg(target_arch = "x86_64")]
        if !on_caller {
            let mut slot = mover.helper.lock().unwrap_or_else(PoisonError::into_inner);
            mover.kept_task(&mut slot).map_err(|err| {
                refused(format!("cannot start a copying task as uid {uid}: {err}"))
            })?;
        }
        Ok(mover)
    }

    /// The client's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The uid the mover copies as.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// Why the mover copies no more (the process is gone, or a copy stalled), if so: its
    /// connection must be closed.
    pub fn retired(&self) -> Option<String> {
        if !self.retired.load(Ordering::Acquire) {
            return None;
        }
        self.reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn retire(&self, reason: String) {
        let mut held = self.reason.lock().unwrap_or_else(PoisonError::into_inner);
        if held.is_none() {
            *held = Some(reason);
        }
        drop(held);
        self.retired.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Resolves once the mover is retired: when its process is gone, or when a copy has run
    /// past its deadline, which this watch declares stalled (it runs the copy's hook and
    /// counts the stall for the uid until the copy ends). The connection's task awaits it
    /// beside the blocking work that copies.
    pub async fn retired_wait(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.retired.load(Ordering::Acquire) || self.stall_if_overdue() {
                return;
            }
            let _ = tokio::time::timeout(STALL_CHECK_EVERY, notified).await;
        }
    }

    /// Declares the copy in progress stalled if it is past its deadline; returns whether the
    /// mover is retired for it.
    fn stall_if_overdue(&self) -> bool {
        let mut watch = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
        let overdue = !watch.stalled
            && watch
                .since
                .is_some_and(|since| since.elapsed() >= self.copy_timeout);
        if !overdue {
            return false;
        }
        watch.stalled = true;
        let hook = watch.on_stall.take();
        drop(watch);
        stall_begins(self.uid);
        self.retire(self.stalled_error().to_string());
        if let Some(hook) = hook {
            hook();
        }
        self.end_stalled_task();
        true
    }

    fn stalled_error(&self) -> RmaError {
        RmaError::Stalled {
            pid: self.pid,
            timeout_ms: u64::try_from(self.copy_timeout.as_millis()).unwrap_or(u64::MAX),
        }
    }

    fn gone(&self) -> RmaError {
        RmaError::Gone {
            pid: self.pid,
            reason: self
                .retired()
                .unwrap_or_else(|| "its mover has stopped".to_owned()),
        }
    }

    /// Whether the process is still the one that connected, with the address space it had.
    fn check(&self) -> Result<(), RmaError> {
        self.check_exit()?;
        // Address 0 is never mapped: a live address space answers EIO, one that has gone
        // (exit or exec) reads nothing.
        let mut byte = [0u8; 1];
        match self.memory.read_at(&mut byte, 0) {
            Err(err) if err.raw_os_error() == Some(libc::EIO) => Ok(()),
            Ok(1) => Ok(()),
            Ok(_) => Err(self.gone_because("it exited or executed another program")),
            Err(err) => {
                Err(self.gone_because(&format!("its memory can no longer be checked: {err}")))
            }
        }
    }

    /// Whether the process that connected has exited (its pidfd is readable).
    fn check_exit(&self) -> Result<(), RmaError> {
        if let Some(pidfd) = &self.pidfd {
            let mut poll = libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd we own; a zero timeout never blocks.
            if unsafe { libc::poll(&raw mut poll, 1, 0) } > 0 {
                return Err(self.gone_because("it exited"));
            }
        }
        Ok(())
    }

    fn gone_because(&self, reason: &str) -> RmaError {
        let error = RmaError::Gone {
            pid: self.pid,
            reason: reason.to_owned(),
        };
        self.retire(error.to_string());
        error
    }

    /// One copy, on this thread, as the client; watched for a stall.
    fn copy(
        &self,
        direction: Direction,
        remote: &[RemoteSegment],
        per_call: u16,
        local: &[libc::iovec],
        on_stall: Option<OnStall>,
    ) -> Result<RmaCounts, RmaError> {
        if self.retired.load(Ordering::Acquire) {
            return Err(self.gone());
        }
        self.check_exit()?;
        {
            let mut watch = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
            watch.since = Some(Instant::now());
            watch.on_stall = on_stall;
        }
        let result = match rma::plan(self.pid, remote, per_call, local, direction) {
            Err(err) => Err(err),
            Ok(mut plan) if self.on_caller => plan.run(),
            // The task allocates nothing: its user may kill it at any instruction.
            Ok(mut plan) => self.in_task(&mut plan).unwrap_or_else(|err| {
                Err(RmaError::Refused {
                    pid: self.pid,
                    source: io::Error::new(
                        err.kind(),
                        format!("cannot copy as uid {} gid {}: {err}", self.uid, self.gid),
                    ),
                })
            }),
        };
        let stalled = {
            let mut watch = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
            watch.since = None;
            watch.on_stall = None;
            watch.stalled
        };
        if stalled {
            stall_ends(self.uid);
            return Err(self.stalled_error());
        }
        // Even a copy that worked may have reached another process: then it counts for none.
        self.check()?;
        result
    }

    /// Makes the copy `plan` in the task with the client's ids: the mover's kept task.
    #[cfg(target_arch = "x86_64")]
    fn in_task(&self, plan: &mut rma::Plan<'_>) -> io::Result<Result<RmaCounts, RmaError>> {
        let mut slot = self.helper.lock().unwrap_or_else(PoisonError::into_inner);
        let mut tries = 0;
        loop {
            tries += 1;
            let task = self.kept_task(&mut slot)?;
            match task.run(plan) {
                // The task ended under the copy, not at a stall: its user's signal, or the
                // thread that made it ended (it ends with that thread). Once more with a new
                // task (the copy is the same bytes again); a user that kills that one too gets
                // the error.
                Err(_) if tries == 1 && !task.alive() && !self.stalled_now() => {}
                outcome => return outcome,
            }
        }
    }

    /// The kept task, started again if it ended (reaped first) or never started.
    #[cfg(target_arch = "x86_64")]
    fn kept_task<'a>(
        &self,
        slot: &'a mut Option<helper::Helper>,
    ) -> io::Result<&'a mut helper::Helper> {
        if !slot.as_ref().is_some_and(helper::Helper::alive) {
            self.helper_task.store(0, Ordering::Release);
            *slot = None;
            let started = helper::Helper::start(self.uid, self.gid)?;
            self.helper_task.store(started.task(), Ordering::Release);
            *slot = Some(started);
        }
        slot.as_mut()
            .ok_or_else(|| io::Error::other("no copying task"))
    }

    /// Whether the copy under way was declared stalled.
    fn stalled_now(&self) -> bool {
        self.watch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stalled
    }

    /// Where the kept task is not built (its raw system calls are x86-64's), a client of
    /// another user has no one-sided path: its data moves in messages.
    #[cfg(not(target_arch = "x86_64"))]
    fn in_task(&self, _plan: &mut rma::Plan<'_>) -> io::Result<Result<RmaCounts, RmaError>> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "copies for a client of another user run in a task built for x86-64 only",
        ))
    }

    /// Ends the kept task of a stalled copy (the copy then fails at once, and its thread is
    /// free); nothing for a copy on the calling thread.
    fn end_stalled_task(&self) {
        #[cfg(target_arch = "x86_64")]
        {
            let task = self.helper_task.load(Ordering::Acquire);
            if task > 0 {
                // SAFETY: a signal to this mover's task, a child of this process not reaped
                // while its copy runs (so its pid is still its own).
                unsafe { libc::kill(task, libc::SIGKILL) };
            }
        }
    }

    /// Pulls the client's `remote` segments into `local` (which they must fill).
    pub fn pull(
        &self,
        remote: &[RemoteSegment],
        per_call: u16,
        local: &mut [u8],
    ) -> Result<RmaCounts, RmaError> {
        self.pull_slices(remote, per_call, &mut [IoSliceMut::new(local)])
    }

    /// Pushes `local` into the client's `remote` segments (which it must fill).
    pub fn push(
        &self,
        local: &[u8],
        remote: &[RemoteSegment],
        per_call: u16,
    ) -> Result<RmaCounts, RmaError> {
        self.push_slices(&[IoSlice::new(local)], remote, per_call, None)
    }

    /// Pulls the client's `remote` segments into `local`, in order (they must hold the same
    /// bytes).
    pub fn pull_slices(
        &self,
        remote: &[RemoteSegment],
        per_call: u16,
        local: &mut [IoSliceMut<'_>],
    ) -> Result<RmaCounts, RmaError> {
        let iovecs: Vec<libc::iovec> = local
            .iter_mut()
            .map(|slice| libc::iovec {
                iov_base: slice.as_mut_ptr().cast(),
                iov_len: slice.len(),
            })
            .collect();
        self.copy(Direction::Pull, remote, per_call, &iovecs, None)
    }

    /// Pushes `local`, in order, into the client's `remote` segments (they must hold the same
    /// bytes). Should the copy stall, `on_stall` runs on the connection's task at once (to give
    /// back an extent the caller holds while the copy still reads `local`).
    pub fn push_slices(
        &self,
        local: &[IoSlice<'_>],
        remote: &[RemoteSegment],
        per_call: u16,
        on_stall: Option<OnStall>,
    ) -> Result<RmaCounts, RmaError> {
        let iovecs: Vec<libc::iovec> = local
            .iter()
            .map(|slice| libc::iovec {
                // process_vm_writev only reads through the local iovecs.
                iov_base: slice.as_ptr().cast_mut().cast(),
                iov_len: slice.len(),
            })
            .collect();
        self.copy(Direction::Push, remote, per_call, &iovecs, on_stall)
    }
}

fn syscall_result(rc: libc::c_long) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// This process's real uid and gid.
fn real_ids() -> (u32, u32) {
    // SAFETY: getuid and getgid cannot fail.
    unsafe { (libc::getuid(), libc::getgid()) }
}

/// Whether a copy for a client of `uid` and `gid` may run on the calling thread: its rights
/// are the client's when both are root (the server keeps `CAP_SYS_PTRACE`, as root's programs
/// have it) or when the client is the server's own user.
fn copies_on_caller(uid: u32, gid: u32) -> bool {
    // SAFETY: geteuid cannot fail.
    let root_server = unsafe { libc::geteuid() } == 0;
    (uid == 0 && root_server) || real_ids() == (uid, gid)
}

/// Opens `/proc/PID/mem` with the client's ids as this thread's file-system ids (the kernel's
/// ptrace check for the open uses them) and, unless the client is root, without
/// `CAP_SYS_PTRACE` in its effective set; both are the server's again after. (File-system ids
/// are not the ones the kernel checks a signal against: this thread is never the client's to
/// signal.)
fn open_memory_as(pid: u32, uid: u32, gid: u32) -> io::Result<File> {
    let ptrace = ptrace_effective()?;
    let drop_ptrace = ptrace && uid != 0;
    if drop_ptrace {
        set_ptrace_effective(false)?;
    }
    let opened = open_memory_with_fs_ids(pid, uid, gid);
    if drop_ptrace {
        set_ptrace_effective(true)?;
    }
    opened
}

/// Opens `/proc/PID/mem` with `uid` and `gid` as this thread's file-system ids.
fn open_memory_with_fs_ids(pid: u32, uid: u32, gid: u32) -> io::Result<File> {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    // SAFETY: getegid cannot fail.
    let egid = unsafe { libc::getegid() };
    let switch = (uid, gid) != (euid, egid);
    if switch {
        // SAFETY: thread-local file-system ids; set back below whatever the open does.
        unsafe {
            libc::syscall(libc::SYS_setfsgid, gid);
            libc::syscall(libc::SYS_setfsuid, uid);
        }
    }
    let opened = File::open(format!("/proc/{pid}/mem"));
    if switch {
        // SAFETY: as above.
        unsafe {
            libc::syscall(libc::SYS_setfsuid, euid);
            libc::syscall(libc::SYS_setfsgid, egid);
        }
    }
    opened
}

/// The capability `CAP_SYS_PTRACE` (linux/capability.h).
const CAP_SYS_PTRACE: u32 = 19;

/// `capget`/`capset` of this thread (linux/capability.h, version 3).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

fn capabilities() -> io::Result<[CapData; 2]> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget writes two data structs we own (pid 0: this thread).
    syscall_result(unsafe { libc::syscall(libc::SYS_capget, &raw mut header, data.as_mut_ptr()) })?;
    Ok(data)
}

/// Whether `CAP_SYS_PTRACE` is in this thread's effective set.
fn ptrace_effective() -> io::Result<bool> {
    Ok(capabilities()?[0].effective & (1 << CAP_SYS_PTRACE) != 0)
}

/// Puts `CAP_SYS_PTRACE` in this thread's effective set, or takes it out (it stays
/// permitted, so it can be put back).
fn set_ptrace_effective(on: bool) -> io::Result<()> {
    let mut data = capabilities()?;
    if on {
        data[0].effective |= 1 << CAP_SYS_PTRACE;
    } else {
        data[0].effective &= !(1 << CAP_SYS_PTRACE);
    }
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: capset reads the header and two data structs we own.
    syscall_result(unsafe { libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) })
}

#[cfg(target_arch = "x86_64")]
mod helper;
#[cfg(test)]
mod tests;
