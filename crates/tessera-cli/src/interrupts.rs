//! What a command does when SIGINT, SIGTERM or SIGHUP comes (Ctrl-C, a job's time limit, a
//! closed terminal) while it holds something to clean up: [`catch`] turns the signal into a
//! flag ([`interrupted`]) that the command's loop reads, without `SA_RESTART`, so a blocking
//! read returns `EINTR` at once; the command cleans up and returns, and [`die_of`] ends the
//! process by the same signal, as the caller expects.

use std::sync::atomic::{AtomicI32, Ordering};

/// The signals a command cleans up after.
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The signal that came, 0 if none.
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

extern "C" fn note(signal: libc::c_int) {
    // An atomic store is async-signal-safe.
    INTERRUPTED.store(signal, Ordering::SeqCst);
}

/// From now on, SIGINT, SIGTERM and SIGHUP set the flag instead of ending the process.
pub fn catch() {
    for signal in SIGNALS {
        // SAFETY: a zeroed `sigaction` is a valid empty one; the handler only stores into an
        // atomic, which is async-signal-safe; no SA_RESTART, so blocking calls return EINTR.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = note as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&raw mut action.sa_mask);
            libc::sigaction(signal, &raw const action, std::ptr::null_mut());
        }
    }
}

/// The signal that came since [`catch`], if any.
pub fn interrupted() -> Option<i32> {
    match INTERRUPTED.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// Ends the process by `signal`, with its default action (after the command cleaned up).
pub fn die_of(signal: i32) -> ! {
    // SAFETY: restoring the default action and raising a signal touch no memory of ours.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    // Not reached for the signals caught above (their default action ends the process).
    std::process::exit(128 + signal);
}
