//! Standard output that ends the command quietly when its reader goes away.
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe (`tessera ls | head -1`) returns
//! `EPIPE`, and std's `println!` panics on it. Every line the binaries print goes through
//! [`print_stdout`], by the macros [`out!`](crate::out) and [`outln!`](crate::outln) in
//! place of `print!` and `println!` (named, never shadowing std's: a `println!` in either
//! binary is std's and a review finds it), and
//! `tessera get PATH -` sends its data through [`closed_stdout`] on a write error. A closed
//! stdout then ends the process the way it ends a C tool: by SIGPIPE, silently, with the
//! shell's status 141. SIGPIPE itself stays ignored for the rest of the process, so a peer
//! that closes a socket is an error the client handles, never a signal that kills it.

use std::io::Write;

/// Writes `args` to stdout; a closed stdout ends the process quietly, any other error ends it
/// with a message.
pub fn print_stdout(args: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    if let Err(err) = stdout.write_fmt(args) {
        closed_stdout(&err);
        eprintln!("tessera: cannot write to stdout: {err}");
        std::process::exit(1);
    }
}

/// Ends the process by SIGPIPE if `err` says its stdout's reader went away; returns otherwise.
pub fn closed_stdout(err: &std::io::Error) {
    if err.kind() == std::io::ErrorKind::BrokenPipe {
        // SAFETY: restoring the default action of SIGPIPE and raising it in this thread touch
        // no memory; the process ends as a C program whose reader closed the pipe would.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::raise(libc::SIGPIPE);
        }
        // Not reached: the default action of SIGPIPE is to terminate.
        std::process::exit(141);
    }
}

/// `print!` through [`print_stdout`], called by name (`tessera_cluster::out!`): what the
/// binaries print to stdout goes through it, so a closed stdout ends them quietly.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::print_stdout(format_args!($($arg)*)) };
}

/// `println!` through [`print_stdout`], as [`out!`](crate::out).
#[macro_export]
macro_rules! outln {
    () => { $crate::output::print_stdout(format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::output::print_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}
