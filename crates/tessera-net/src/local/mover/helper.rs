//! The copying task a mover keeps for a client of another user: made once, with the client's
//! ids, and woken for each copy, where a task per copy costs its creation, exit and reaping
//! (~55 µs on a 2-core VM against ~4 µs for a wake-up and an answer).
//!
//! The task shares the server's memory, descriptor table and file-system context
//! (`CLONE_VM | CLONE_FILES | CLONE_FS`) but is not one of its threads: its user may signal it
//! (a `SIGKILL` ends it, failing the copy under way alone), never the server. It starts with
//! every signal blocked, so no handler of the server ever runs there. It has no thread-local
//! storage of its own (its thread pointer is that of the thread that made it, which may be
//! gone), so everything it runs touches none: raw system calls ([`raw`]), no allocation, no
//! lock, no panic machinery ([`Plan::run_with`]). It may be killed at any instruction, and
//! holds nothing anyone else waits on.
//!
//! One word, `state`, carries the hand-offs (a futex): the serving thread sets [`JOB`] and
//! wakes the task; the task runs the plan, sets [`DONE`] and wakes the thread. The kernel sets
//! it to 0 and wakes its waiters when the task ends (`CLONE_CHILD_CLEARTID`), so a thread
//! waiting on a killed task wakes too.

use std::cell::UnsafeCell;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::local::rma::{Direction, Plan, RmaCounts, RmaError};

/// The task has ended (the kernel's `CLONE_CHILD_CLEARTID`).
const ENDED: u32 = 0;
/// The task is taking the client's ids.
const STARTING: u32 = 1;
/// It could not: `failure` says why, and it ends.
const FAILED: u32 = 2;
/// It waits for a copy.
const IDLE: u32 = 3;
/// A copy for it: `job`.
const JOB: u32 = 4;
/// Its copy is done: `result`.
const DONE: u32 = 5;

/// Bytes of the task's stack: it runs a planned copy (a few hundred bytes of frames).
const STACK_BYTES: usize = 256 << 10;

/// What the serving thread and the task share, at a fixed address for the task's life.
#[repr(C)]
struct Shared {
    /// The futex word (and the word the kernel clears when the task ends).
    state: AtomicU32,
    uid: u32,
    gid: u32,
    /// The plan of the copy to make (set with [`JOB`]).
    job: UnsafeCell<*mut Plan<'static>>,
    /// Its outcome (set with [`DONE`]).
    result: UnsafeCell<Option<Result<RmaCounts, RmaError>>>,
    /// The step that failed and its errno (set with [`FAILED`]).
    failure: UnsafeCell<(&'static str, i32)>,
}

/// A copying task with the ids of one client.
pub(super) struct Helper {
    shared: Box<Shared>,
    /// Its stack; freed only after the task has ended.
    _stack: Box<[u8]>,
    task: libc::pid_t,
}

// SAFETY: the shared cells are written by the task only while `state` is JOB (or STARTING),
// and by the owning thread otherwise; `Helper` is used by one thread at a time (`&mut self`).
unsafe impl Send for Helper {}

impl Helper {
    /// Starts a task with `uid` and `gid` as all its ids (and so no capability).
    pub(super) fn start(uid: u32, gid: u32) -> io::Result<Self> {
        let mut shared = Box::new(Shared {
            state: AtomicU32::new(STARTING),
            uid,
            gid,
            job: UnsafeCell::new(std::ptr::null_mut()),
            result: UnsafeCell::new(None),
            failure: UnsafeCell::new(("", 0)),
        });
        let mut stack = vec![0u8; STACK_BYTES].into_boxed_slice();
        let top = (stack.as_mut_ptr() as usize + STACK_BYTES) & !15;
        let shared_pointer: *mut Shared = &raw mut *shared;
        let state_pointer = shared.state.as_ptr();
        // Its user may ptrace a dumpable process of its own, and the task shares this
        // process's memory: this process is not dumpable (the task says so again once it has
        // taken its ids, which resets it).
        // SAFETY: a flag of this process's memory; no pointer involved.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let task = with_signals_blocked(|| {
            // SAFETY: the task runs `task_main` on `stack` with `shared`, both owned by the
            // `Helper`, which frees them only after the task has ended (`Drop`). No exit
            // signal: reaped with __WCLONE. The kernel clears `state` when it ends.
            unsafe {
                libc::clone(
                    task_main,
                    top as *mut libc::c_void,
                    libc::CLONE_VM
                        | libc::CLONE_FILES
                        | libc::CLONE_FS
                        | libc::CLONE_CHILD_CLEARTID,
                    shared_pointer.cast(),
                    std::ptr::null_mut::<libc::pid_t>(),
                    std::ptr::null_mut::<libc::c_void>(),
                    state_pointer.cast::<libc::pid_t>(),
                )
            }
        });
        if task < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut helper = Self {
            shared,
            _stack: stack,
            task,
        };
        match helper.wait_while(STARTING) {
            IDLE => Ok(helper),
            FAILED => {
                // SAFETY: the task wrote it before FAILED and writes nothing more.
                let (step, errno) = unsafe { *helper.shared.failure.get() };
                helper.reap();
                let err = io::Error::from_raw_os_error(errno);
                Err(io::Error::new(err.kind(), format!("{step}: {err}")))
            }
            _ => {
                helper.reap();
                Err(io::Error::other("the copying task ended as it started"))
            }
        }
    }

    /// Whether the task is there to copy (its user may have ended it).
    pub(super) fn alive(&self) -> bool {
        self.shared.state.load(Ordering::Acquire) != ENDED
    }

    /// The task's pid (for the watchdog to end a stalled copy).
    pub(super) fn task(&self) -> libc::pid_t {
        self.task
    }

    /// Makes the copy `plan` in the task; waits until it is done, or the task has ended.
    pub(super) fn run(&mut self, plan: &mut Plan<'_>) -> io::Result<Result<RmaCounts, RmaError>> {
        if self.shared.state.load(Ordering::Acquire) != IDLE {
            return Err(io::Error::other("the copying task is not waiting"));
        }
        // SAFETY: the task reads `job` only after seeing JOB, and the plan outlives the copy:
        // this call returns only once the task is DONE with it, or has ended.
        unsafe { *self.shared.job.get() = std::ptr::from_mut(plan).cast::<Plan<'static>>() };
        self.shared.state.store(JOB, Ordering::Release);
        futex_wake(&self.shared.state);
        match self.wait_while(JOB) {
            DONE => {
                // SAFETY: the task wrote it before DONE and writes nothing until the next JOB.
                let result = unsafe { (*self.shared.result.get()).take() };
                self.shared.state.store(IDLE, Ordering::Release);
                result.ok_or_else(|| io::Error::other("the copying task left no result"))
            }
            _ => Err(io::Error::other(
                "the copying task was ended by a signal of its user",
            )),
        }
    }

    /// Waits until `state` is no longer `from`; returns the new state.
    fn wait_while(&self, from: u32) -> u32 {
        loop {
            let now = self.shared.state.load(Ordering::Acquire);
            if now != from {
                return now;
            }
            // Not a private futex: the kernel's wake at the task's end is a shared one.
            // SAFETY: waits on a word we own while it holds `from`.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.shared.state.as_ptr(),
                    libc::FUTEX_WAIT,
                    from,
                    std::ptr::null::<libc::timespec>(),
                )
            };
        }
    }

    /// Reaps the ended task.
    fn reap(&mut self) {
        loop {
            let mut status = 0;
            // SAFETY: waits for the task started by `start`; `status` is ours.
            let reaped = unsafe { libc::waitpid(self.task, &raw mut status, libc::__WCLONE) };
            if reaped == self.task || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR)
            {
                self.task = 0;
                return;
            }
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        if self.task > 0 {
            // Whatever it does (waits, copies, is stopped by its user), it ends now.
            // SAFETY: a signal to the task this helper started and has not reaped.
            unsafe { libc::kill(self.task, libc::SIGKILL) };
            self.reap();
        }
    }
}

/// Runs `start` with every signal blocked on this thread (a task it makes inherits the mask).
fn with_signals_blocked<T>(start: impl FnOnce() -> T) -> T {
    // SAFETY: zeroed sigsets are valid values, filled and read by the calls below.
    let (mut all, mut before): (libc::sigset_t, libc::sigset_t) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: sigfillset and pthread_sigmask write the sets we own, on this thread.
    unsafe {
        libc::sigfillset(&raw mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &raw const all, &raw mut before);
    }
    let out = start();
    // SAFETY: restores this thread's mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &raw const before, std::ptr::null_mut()) };
    out
}

fn futex_wake(state: &AtomicU32) {
    // SAFETY: wakes the waiters on a word we own.
    unsafe { libc::syscall(libc::SYS_futex, state.as_ptr(), libc::FUTEX_WAKE, 1) };
}

/// The task: takes the ids, then makes each copy it is given, until it is killed. Raw system
/// calls only (it has no thread-local storage of its own).
extern "C" fn task_main(shared: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `Helper::start` passes its `Shared`, which outlives this task.
    let shared = unsafe { &*shared.cast::<Shared>() };
    let (uid, gid) = (shared.uid as usize, shared.gid as usize);
    // The last step: the memory this task shares is the server's, and this task is now the
    // client's user's, who may ptrace a dumpable process of its own. Changing ids made the
    // memory as dumpable as `fs.suid_dumpable` says (0 by default, 1 on a host set up for
    // debugging): not dumpable at all, whatever the host says.
    let not_dumpable = [libc::PR_SET_DUMPABLE as usize, 0, 0];
    // Should the thread that made it end (and so the server), the task ends too: it must
    // not outlive the server holding its memory. Set after the ids, since changing them
    // clears it.
    let end_with_parent = [libc::PR_SET_PDEATHSIG as usize, libc::SIGKILL as usize, 0];
    for (step, number, arguments) in [
        ("setgroups", libc::SYS_setgroups, [0, 0, 0]),
        ("setresgid", libc::SYS_setresgid, [gid, gid, gid]),
        ("setresuid", libc::SYS_setresuid, [uid, uid, uid]),
        ("prctl(PR_SET_DUMPABLE, 0)", libc::SYS_prctl, not_dumpable),
        ("prctl(PR_SET_PDEATHSIG)", libc::SYS_prctl, end_with_parent),
    ] {
        // SAFETY: a system call on this task's own credentials.
        let rc = unsafe { raw::syscall3(number, arguments) };
        if rc < 0 {
            // SAFETY: the thread reads it only after seeing FAILED.
            unsafe { *shared.failure.get() = (step, i32::try_from(-rc).unwrap_or(libc::EIO)) };
            shared.state.store(FAILED, Ordering::Release);
            raw::wake(&shared.state);
            raw::exit();
        }
    }
    shared.state.store(IDLE, Ordering::Release);
    raw::wake(&shared.state);
    loop {
        let now = shared.state.load(Ordering::Acquire);
        if now != JOB {
            raw::wait(&shared.state, now);
            continue;
        }
        // SAFETY: the thread set `job` to a live plan before JOB and waits until DONE.
        let plan = unsafe { &mut **shared.job.get() };
        let result = plan.run_with(|direction, pid, local, remote| {
            let number = match direction {
                Direction::Pull => libc::SYS_process_vm_readv,
                Direction::Push => libc::SYS_process_vm_writev,
            };
            // SAFETY: as `Plan::run`: the local iovecs cover the caller's lent slices; the
            // kernel checks the remote ones against this task's (the client's) ids.
            let rc = unsafe {
                raw::syscall6(
                    number,
                    [
                        usize::try_from(pid).unwrap_or(0),
                        local.as_ptr() as usize,
                        local.len(),
                        remote.as_ptr() as usize,
                        remote.len(),
                        0,
                    ],
                )
            };
            usize::try_from(rc).map_err(|_| i32::try_from(-rc).unwrap_or(libc::EIO))
        });
        // SAFETY: the thread reads it only after seeing DONE; it took the last one.
        unsafe { *shared.result.get() = Some(result) };
        shared.state.store(DONE, Ordering::Release);
        raw::wake(&shared.state);
    }
}

/// System calls without the C library (which keeps `errno` in thread-local storage).
mod raw {
    use std::sync::atomic::AtomicU32;

    /// `syscall` with six arguments; the result, or `-errno`.
    ///
    /// # Safety
    /// As the system call `number` with these arguments.
    #[cfg(target_arch = "x86_64")]
    pub(super) unsafe fn syscall6(number: libc::c_long, arguments: [usize; 6]) -> i64 {
        let result: i64;
        // SAFETY: the x86-64 system call convention; rcx and r11 are clobbered.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") number => result,
                in("rdi") arguments[0],
                in("rsi") arguments[1],
                in("rdx") arguments[2],
                in("r10") arguments[3],
                in("r8") arguments[4],
                in("r9") arguments[5],
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        result
    }

    /// `syscall` with three arguments.
    ///
    /// # Safety
    /// As [`syscall6`].
    pub(super) unsafe fn syscall3(number: libc::c_long, arguments: [usize; 3]) -> i64 {
        // SAFETY: as the caller's.
        unsafe { syscall6(number, [arguments[0], arguments[1], arguments[2], 0, 0, 0]) }
    }

    /// Waits on `word` while it holds `value` (a shared futex).
    pub(super) fn wait(word: &AtomicU32, value: u32) {
        // SAFETY: waits on a word of the shared state.
        unsafe {
            syscall6(
                libc::SYS_futex,
                [
                    word.as_ptr() as usize,
                    libc::FUTEX_WAIT as usize,
                    value as usize,
                    0,
                    0,
                    0,
                ],
            )
        };
    }

    /// Wakes one waiter on `word`.
    pub(super) fn wake(word: &AtomicU32) {
        // SAFETY: wakes the waiters on a word of the shared state.
        unsafe {
            syscall6(
                libc::SYS_futex,
                [
                    word.as_ptr() as usize,
                    libc::FUTEX_WAKE as usize,
                    1,
                    0,
                    0,
                    0,
                ],
            )
        };
    }

    /// Ends this task (not the process).
    pub(super) fn exit() -> ! {
        loop {
            // SAFETY: `exit` ends the calling task only.
            unsafe { syscall6(libc::SYS_exit, [0; 6]) };
        }
    }
}
