//! The server's hands in one client's memory: a thread per same-host connection that has taken
//! the client's own credentials, through which every one-sided copy of that connection goes
//! (`process_vm_readv`/`process_vm_writev`, [`super::rma`]).
//!
//! Why a thread of its own, and what it guarantees:
//! - **The client's rights, not the server's.** The kernel checks each `process_vm_*` call
//!   against the caller's credentials (`PTRACE_MODE_ATTACH_REALCREDS`: the caller's real uid
//!   and gid must be the target's real, effective and saved ones, the target must be dumpable,
//!   or the caller must have `CAP_SYS_PTRACE`). A [`Mover`] takes the uid, gid and groups the
//!   kernel reports for the client's socket (`SO_PEERCRED`, `SO_PEERGROUPS`) for its whole
//!   life, with no capability left, before it touches anything. So it reaches exactly what the
//!   client could reach with its own `process_vm_*` calls: not a setuid program, not a process
//!   that made itself non-dumpable, not another user's process. A server run as root never
//!   lends its rights to a copy. (A server that cannot change its uid drops its capabilities
//!   in the mover, so the kernel refuses every client but its own user.)
//! - **The process that connected, and only while it lives.** The client is pinned by a pidfd
//!   (`SO_PEERPIDFD`, taken by the kernel when the client connected) and by its
//!   `/proc/PID/mem`, opened at start with the client's credentials: that file stays bound to
//!   the address space the process had then and reads nothing once the process exits or
//!   executes another program. Both are checked before and after every copy; a copy after
//!   which either changed is an error and the mover is retired (its connection is closed), so
//!   a recycled pid or a program the client exec'd is never reached again.
//! - **A copy that waits holds nothing others need.** The client's memory may be a mapping of
//!   a FUSE file (Tessera's own mount, whose daemon asks this very server), of a slow disk, or
//!   userfaultfd memory: a copy can wait for a long time. It waits on this thread, never on an
//!   async worker. A caller waits at most [`REMOTE_COPY_TIMEOUT_MS`]; then the mover is
//!   retired and the caller answers an error. A copy of an owned buffer ([`Mover::pull`],
//!   [`Mover::push`]) returns at once and the mover keeps the buffer until it is done; a copy
//!   of borrowed memory ([`Mover::pull_slices`], [`Mover::push_slices`]) first lets the caller
//!   release what others wait for (the extent it holds), then waits for the copy to end,
//!   since the memory must outlive it. The copies of one uid stuck past their deadline at once
//!   are capped ([`STALLED_COPIES_PER_UID_MAX`]): a uid at the cap gets no new mover, so its
//!   data moves in messages until its copies end.

use std::any::Any;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut};
use std::ops::DerefMut;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tessera_proto::limits::{REMOTE_COPY_TIMEOUT_MS, STALLED_COPIES_PER_UID_MAX};
use tessera_proto::RemoteSegment;
use tokio::sync::Notify;

use super::rma::{self, Direction, RmaCounts, RmaError};

/// Copies queued for one mover (a pipelined transfer has at most one in flight per side).
const MOVER_QUEUE_DEPTH: usize = 2;

/// Stack of a mover thread: it only loops over copies.
const MOVER_STACK_BYTES: usize = 256 << 10;

/// Longest a mover may take to start (take the client's credentials, open its memory).
const MOVER_START_TIMEOUT: Duration = Duration::from_secs(5);

/// Most supplementary groups read for a client (the kernel's `NGROUPS_MAX`).
const PEER_GROUPS_MAX: usize = 65_536;

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

/// What a copy's waiter and the mover share.
#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
    /// Tells a blocking waiter.
    done: Condvar,
    /// Tells an async waiter.
    notify: Notify,
}

#[derive(Default)]
enum SlotState {
    /// The mover has not finished.
    #[default]
    Pending,
    /// Finished; the waiter takes the result.
    Done(Finished),
    /// The waiter gave up (and counted a stall): the mover drops the result and ends the
    /// stall.
    Abandoned,
    /// The stall of an abandoned copy ended.
    Closed,
}

/// A finished copy: its result, and what kept its memory alive.
struct Finished {
    result: Result<RmaCounts, RmaError>,
    keep: Option<Box<dyn Any + Send>>,
}

/// Local memory of a copy: address and length of each piece (memory of this process that the
/// job's `keep`, or its waiter, keeps valid until the copy ends).
struct Local(Vec<(usize, usize)>);

/// One copy for the mover.
struct Job {
    /// The client process and the uid its stalls count for.
    pid: u32,
    uid: u32,
    direction: Direction,
    remote: Vec<RemoteSegment>,
    per_call: u16,
    local: Local,
    keep: Option<Box<dyn Any + Send>>,
    slot: Arc<Slot>,
}

/// Why a mover no longer copies.
#[derive(Debug, Default)]
struct State {
    retired: AtomicBool,
    reason: Mutex<Option<String>>,
    /// Tells [`Mover::retired_wait`].
    notify: Notify,
}

impl State {
    fn retire(&self, reason: String) {
        let mut held = self.reason.lock().unwrap_or_else(PoisonError::into_inner);
        if held.is_none() {
            *held = Some(reason);
        }
        self.retired.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    fn reason(&self) -> Option<String> {
        if !self.retired.load(Ordering::Acquire) {
            return None;
        }
        self.reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The thread that makes one connection's one-sided copies, as the client (module docs).
#[derive(Debug)]
pub struct Mover {
    pid: u32,
    uid: u32,
    /// How long a caller waits for one copy (`REMOTE_COPY_TIMEOUT_MS`).
    copy_timeout: Duration,
    jobs: mpsc::SyncSender<Job>,
    state: Arc<State>,
}

impl Mover {
    /// Starts the mover of `peer`: a thread that takes the client's credentials and opens its
    /// memory with them. Refused when the kernel refuses that (another user's process from a
    /// server that cannot change its uid, a non-dumpable client), when the process is gone,
    /// and when the uid has [`STALLED_COPIES_PER_UID_MAX`] copies stuck already.
    pub async fn start(peer: PeerProcess) -> Result<Self, RmaError> {
        Self::start_with(peer, Duration::from_millis(REMOTE_COPY_TIMEOUT_MS)).await
    }

    /// [`Mover::start`] whose callers wait `copy_timeout` for each copy.
    async fn start_with(peer: PeerProcess, copy_timeout: Duration) -> Result<Self, RmaError> {
        let (pid, uid) = (peer.pid, peer.uid);
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
        let (jobs, queue) = mpsc::sync_channel(MOVER_QUEUE_DEPTH);
        let (ready, started) = tokio::sync::oneshot::channel();
        let state = Arc::new(State::default());
        let thread_state = Arc::clone(&state);
        std::thread::Builder::new()
            .name(format!("mover-{pid}"))
            .stack_size(MOVER_STACK_BYTES)
            .spawn(move || run(peer, ready, &queue, &thread_state))
            .map_err(|err| refused(format!("cannot start a mover thread: {err}")))?;
        match tokio::time::timeout(MOVER_START_TIMEOUT, started).await {
            Ok(Ok(Ok(()))) => Ok(Self {
                pid,
                uid,
                copy_timeout,
                jobs,
                state,
            }),
            Ok(Ok(Err(err))) => Err(err),
            Ok(Err(_)) => Err(refused("the mover thread ended at start".to_owned())),
            Err(_) => Err(refused(format!(
                "the mover did not start within {MOVER_START_TIMEOUT:?}"
            ))),
        }
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
        self.state.reason()
    }

    /// Resolves once the mover is retired.
    pub async fn retired_wait(&self) {
        loop {
            let notified = self.state.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.state.retired.load(Ordering::Acquire) {
                return;
            }
            notified.await;
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

    fn submit(
        &self,
        direction: Direction,
        remote: &[RemoteSegment],
        per_call: u16,
        local: Local,
        keep: Option<Box<dyn Any + Send>>,
    ) -> Result<Arc<Slot>, RmaError> {
        if self.state.retired.load(Ordering::Acquire) {
            return Err(self.gone());
        }
        let slot = Arc::new(Slot::default());
        let job = Job {
            pid: self.pid,
            uid: self.uid,
            direction,
            remote: remote.to_vec(),
            per_call,
            local,
            keep,
            slot: Arc::clone(&slot),
        };
        self.jobs.send(job).map_err(|_| self.gone())?;
        Ok(slot)
    }

    /// Counts a stall of the copy in `slot` and retires the mover, unless it finished; then
    /// returns its result.
    fn give_up(&self, slot: &Slot, bytes: u64) -> Result<Finished, RmaError> {
        let mut state = slot.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let SlotState::Done(_) = &*state {
            let SlotState::Done(finished) = std::mem::take(&mut *state) else {
                unreachable!("just matched");
            };
            return Ok(finished);
        }
        *state = SlotState::Abandoned;
        drop(state);
        stall_begins(self.uid);
        let stalled = self.stalled(bytes);
        self.state.retire(stalled.to_string());
        Err(stalled)
    }

    fn stalled(&self, bytes: u64) -> RmaError {
        RmaError::Stalled {
            pid: self.pid,
            bytes,
            timeout_ms: u64::try_from(self.copy_timeout.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// Waits for the copy in `slot` until the deadline (blocking).
    fn wait(&self, slot: &Slot, bytes: u64) -> Result<Finished, RmaError> {
        let deadline = Instant::now() + self.copy_timeout;
        let mut state = slot.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let SlotState::Done(_) = &*state {
                let SlotState::Done(finished) = std::mem::take(&mut *state) else {
                    unreachable!("just matched");
                };
                return Ok(finished);
            }
            let now = Instant::now();
            if now >= deadline {
                drop(state);
                return self.give_up(slot, bytes);
            }
            state = slot
                .done
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Waits for the copy in `slot` as long as it takes (its memory is borrowed); past the
    /// deadline it calls `on_stall` once, retires the mover and counts a stall until the end.
    fn wait_borrowed(
        &self,
        slot: &Slot,
        bytes: u64,
        on_stall: &mut dyn FnMut(),
    ) -> Result<RmaCounts, RmaError> {
        let deadline = Instant::now() + self.copy_timeout;
        let mut stalled = false;
        let mut state = slot.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let SlotState::Done(_) = &*state {
                let SlotState::Done(finished) = std::mem::take(&mut *state) else {
                    unreachable!("just matched");
                };
                drop(state);
                if stalled {
                    stall_ends(self.uid);
                    return Err(self.stalled(bytes));
                }
                return finished.result;
            }
            let now = Instant::now();
            if !stalled && now >= deadline {
                stalled = true;
                drop(state);
                stall_begins(self.uid);
                self.state.retire(self.stalled(bytes).to_string());
                on_stall();
                state = slot.state.lock().unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            state = if stalled {
                slot.done
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner)
            } else {
                slot.done
                    .wait_timeout(state, deadline - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            };
        }
    }

    /// Pulls the client's `remote` segments into `buffer` (which they must fill), blocking
    /// for at most [`REMOTE_COPY_TIMEOUT_MS`]; gives the buffer back. Past the deadline the
    /// mover keeps the buffer until its copy ends.
    pub fn pull<B>(&self, remote: &[RemoteSegment], per_call: u16, buffer: B) -> Result<B, RmaError>
    where
        B: DerefMut<Target = [u8]> + Send + 'static,
    {
        let (local, keep, bytes) = owned(buffer);
        let slot = self.submit(Direction::Pull, remote, per_call, local, Some(keep))?;
        let finished = self.wait(&slot, bytes)?;
        finished.result?;
        Ok(given_back(finished.keep))
    }

    /// Pushes `buffer` into the client's `remote` segments (which it must fill), blocking for
    /// at most [`REMOTE_COPY_TIMEOUT_MS`]; gives the buffer back.
    pub fn push<B>(&self, buffer: B, remote: &[RemoteSegment], per_call: u16) -> Result<B, RmaError>
    where
        B: DerefMut<Target = [u8]> + Send + 'static,
    {
        let (local, keep, bytes) = owned(buffer);
        let slot = self.submit(Direction::Push, remote, per_call, local, Some(keep))?;
        let finished = self.wait(&slot, bytes)?;
        finished.result?;
        Ok(given_back(finished.keep))
    }

    /// [`Mover::pull`] awaited on an async worker, which it never blocks.
    pub async fn pull_async<B>(
        &self,
        remote: &[RemoteSegment],
        per_call: u16,
        buffer: B,
    ) -> Result<B, RmaError>
    where
        B: DerefMut<Target = [u8]> + Send + 'static,
    {
        let (local, keep, bytes) = owned(buffer);
        let slot = self.submit(Direction::Pull, remote, per_call, local, Some(keep))?;
        let deadline = tokio::time::Instant::now() + self.copy_timeout;
        loop {
            {
                let mut state = slot.state.lock().unwrap_or_else(PoisonError::into_inner);
                if let SlotState::Done(_) = &*state {
                    let SlotState::Done(finished) = std::mem::take(&mut *state) else {
                        unreachable!("just matched");
                    };
                    finished.result?;
                    return Ok(given_back(finished.keep));
                }
            }
            if tokio::time::timeout_at(deadline, slot.notify.notified())
                .await
                .is_err()
            {
                let finished = self.give_up(&slot, bytes)?;
                finished.result?;
                return Ok(given_back(finished.keep));
            }
        }
    }

    /// Pulls the client's `remote` segments into `local`, in order (they must hold the same
    /// bytes). Past [`REMOTE_COPY_TIMEOUT_MS`] it calls `on_stall` (which releases what others
    /// wait for), retires the mover, and still waits for the copy to end: `local` is borrowed.
    pub fn pull_slices(
        &self,
        remote: &[RemoteSegment],
        per_call: u16,
        local: &mut [IoSliceMut<'_>],
        on_stall: &mut dyn FnMut(),
    ) -> Result<RmaCounts, RmaError> {
        let pieces = local
            .iter_mut()
            .map(|slice| (slice.as_mut_ptr() as usize, slice.len()))
            .collect();
        let bytes = local.iter().map(|slice| slice.len() as u64).sum();
        let slot = self.submit(Direction::Pull, remote, per_call, Local(pieces), None)?;
        self.wait_borrowed(&slot, bytes, on_stall)
    }

    /// Pushes `local`, in order, into the client's `remote` segments (they must hold the same
    /// bytes); past the deadline as [`Mover::pull_slices`].
    pub fn push_slices(
        &self,
        local: &[IoSlice<'_>],
        remote: &[RemoteSegment],
        per_call: u16,
        on_stall: &mut dyn FnMut(),
    ) -> Result<RmaCounts, RmaError> {
        let pieces = local
            .iter()
            .map(|slice| (slice.as_ptr() as usize, slice.len()))
            .collect();
        let bytes = local.iter().map(|slice| slice.len() as u64).sum();
        let slot = self.submit(Direction::Push, remote, per_call, Local(pieces), None)?;
        self.wait_borrowed(&slot, bytes, on_stall)
    }
}

/// The local side of a copy of an owned buffer: its one piece, the buffer boxed (its bytes
/// stay where they are while the box moves), and its length.
fn owned<B>(buffer: B) -> (Local, Box<dyn Any + Send>, u64)
where
    B: DerefMut<Target = [u8]> + Send + 'static,
{
    let mut boxed = Box::new(buffer);
    let bytes: &mut [u8] = &mut boxed;
    let piece = (bytes.as_mut_ptr() as usize, bytes.len());
    (Local(vec![piece]), boxed, piece.1 as u64)
}

/// The buffer a copy of an owned buffer kept.
fn given_back<B: 'static>(keep: Option<Box<dyn Any + Send>>) -> B {
    *keep
        .expect("a copy of an owned buffer keeps it")
        .downcast::<B>()
        .expect("a copy keeps the buffer it was given")
}

/// The mover thread: takes the client's credentials, pins its process, then copies until
/// its connection drops the mover or it is retired.
fn run(
    peer: PeerProcess,
    ready: tokio::sync::oneshot::Sender<Result<(), RmaError>>,
    queue: &mpsc::Receiver<Job>,
    state: &State,
) {
    let pinned = match Pinned::take(peer) {
        Ok(pinned) => pinned,
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    if ready.send(Ok(())).is_err() {
        return; // the connection stopped waiting for the start
    }
    while let Ok(job) = queue.recv() {
        let result = pinned.copy(&job);
        if let Err(err @ RmaError::Gone { .. }) = &result {
            state.retire(err.to_string());
        }
        job.finish(result);
        if state.retired.load(Ordering::Acquire) {
            break; // the jobs still queued end as `Gone` when they drop
        }
    }
}

impl Job {
    /// Hands the result to the waiter, or ends the stall of a waiter that gave up.
    fn finish(mut self, result: Result<RmaCounts, RmaError>) {
        let keep = self.keep.take();
        self.slot.finish(self.uid, Finished { result, keep });
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if !self.slot.unfinished() {
            return;
        }
        // A job dropped unfinished (its mover stopped): its waiter learns at once.
        let gone = RmaError::Gone {
            pid: self.pid,
            reason: "its mover stopped before the copy".to_owned(),
        };
        let keep = self.keep.take();
        self.slot.finish(
            self.uid,
            Finished {
                result: Err(gone),
                keep,
            },
        );
    }
}

impl Slot {
    /// Records `finished` for the waiter (once; later calls are ignored), or drops it and
    /// ends the stall of `uid` when the waiter gave up.
    fn finish(&self, uid: u32, finished: Finished) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match &*state {
            SlotState::Pending => {
                *state = SlotState::Done(finished);
                drop(state);
                self.done.notify_all();
                self.notify.notify_one();
            }
            SlotState::Abandoned => {
                *state = SlotState::Closed;
                drop(state);
                drop(finished);
                stall_ends(uid);
            }
            SlotState::Done(_) | SlotState::Closed => {}
        }
    }

    /// Whether the copy has not been finished yet.
    fn unfinished(&self) -> bool {
        matches!(
            &*self.state.lock().unwrap_or_else(PoisonError::into_inner),
            SlotState::Pending | SlotState::Abandoned
        )
    }
}

/// The client process, pinned: the copies' target, checked before and after each.
struct Pinned {
    pid: u32,
    pidfd: Option<OwnedFd>,
    /// `/proc/PID/mem`, opened with the client's credentials: bound to the address space the
    /// process had then.
    memory: File,
}

impl Pinned {
    /// Takes the client's credentials on this thread and pins its process.
    fn take(peer: PeerProcess) -> Result<Self, RmaError> {
        let (pid, uid, gid) = (peer.pid, peer.uid, peer.gid);
        let refused = |detail: String| RmaError::Refused {
            pid,
            source: io::Error::new(io::ErrorKind::PermissionDenied, detail),
        };
        assume(&peer)
            .map_err(|err| refused(format!("cannot act as uid {uid} gid {gid}: {err}")))?;
        // The kernel's ptrace check, with the client's credentials: refused for a process the
        // client could not reach itself.
        let memory = File::open(format!("/proc/{pid}/mem")).map_err(|err| {
            refused(format!(
                "the kernel refuses uid {uid} access to the memory of pid {pid}: {err}"
            ))
        })?;
        let pinned = Self {
            pid,
            pidfd: peer.pidfd,
            memory,
        };
        // Alive now, so the pid was not recycled between connect and this open.
        pinned.check()?;
        Ok(pinned)
    }

    /// Whether the process is still the one that connected, with the address space it had.
    fn check(&self) -> Result<(), RmaError> {
        let gone = |reason: &str| RmaError::Gone {
            pid: self.pid,
            reason: reason.to_owned(),
        };
        if let Some(pidfd) = &self.pidfd {
            let mut poll = libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd we own; a zero timeout never blocks.
            let ready = unsafe { libc::poll(&raw mut poll, 1, 0) };
            if ready > 0 {
                return Err(gone("it exited"));
            }
        }
        // Address 0 is never mapped: a live address space answers EIO, one that has gone
        // (exit or exec) reads nothing.
        let mut byte = [0u8; 1];
        match self.memory.read_at(&mut byte, 0) {
            Err(err) if err.raw_os_error() == Some(libc::EIO) => Ok(()),
            Ok(1) => Ok(()),
            Ok(_) => Err(gone("it exited or executed another program")),
            Err(err) => Err(gone(&format!("its memory can no longer be checked: {err}"))),
        }
    }

    fn copy(&self, job: &Job) -> Result<RmaCounts, RmaError> {
        self.check()?;
        let local: Vec<libc::iovec> = job
            .local
            .0
            .iter()
            .map(|&(address, length)| libc::iovec {
                iov_base: address as *mut libc::c_void,
                iov_len: length,
            })
            .collect();
        let result = rma::copy(self.pid, &job.remote, job.per_call, &local, job.direction);
        // Even a copy that worked may have reached another process: then it counts for none.
        self.check()?;
        result
    }
}

/// Takes the client's credentials on this thread (only), so that the kernel checks every copy
/// with them; where the server cannot change its uid, it drops its capabilities instead.
fn assume(peer: &PeerProcess) -> io::Result<()> {
    // SAFETY: geteuid cannot fail and touches no memory.
    let euid = unsafe { libc::geteuid() };
    if peer.uid == euid && euid == 0 {
        return Ok(()); // root serving root: the same rights
    }
    if peer.uid != euid {
        match become_peer(peer) {
            Ok(()) => return Ok(()),
            Err(err) if err.raw_os_error() == Some(libc::EPERM) => {}
            Err(err) => return Err(err),
        }
    }
    drop_capabilities()
}

/// `setgroups`, `setresgid` and `setresuid` of this thread alone: the raw system calls (the C
/// library's wrappers change every thread of the process). From root this also clears every
/// capability of the thread.
fn become_peer(peer: &PeerProcess) -> io::Result<()> {
    let check = |rc: libc::c_long| {
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    let (uid, gid) = (peer.uid, peer.gid);
    // SAFETY: setgroups reads `groups.len()` ids from memory we own.
    check(unsafe { libc::syscall(libc::SYS_setgroups, peer.groups.len(), peer.groups.as_ptr()) })?;
    // SAFETY: plain system calls on this thread's credentials.
    check(unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) })?;
    // SAFETY: as above.
    check(unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) })?;
    let (mut real, mut effective, mut saved) = (0, 0, 0);
    // SAFETY: getresuid writes three ids into memory we own.
    check(unsafe {
        libc::syscall(
            libc::SYS_getresuid,
            &raw mut real,
            &raw mut effective,
            &raw mut saved,
        )
    })?;
    if (real, effective, saved) == (uid, uid, uid) {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "the thread's uids are {real}/{effective}/{saved} after setresuid({uid})"
        )))
    }
}

/// Clears every capability of this thread (effective, permitted, inheritable; the ambient set
/// follows).
fn drop_capabilities() -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset reads one header and two data structs that we own (pid 0: this thread).
    let rc = unsafe { libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests;
