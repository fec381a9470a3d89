//! Standard output that ends the command quietly when its reader goes away.
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe (`tessera ls | head -1`) returns
//! `EPIPE`, and std's `println!` panics on it. Every line this binary prints goes through
//! [`print_stdout`] (each binary shadows `print!` and `println!` with this crate's, through
//! `#[macro_use] extern crate tessera_cluster;` in its `main.rs`), and
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

/// `print!` through [`print_stdout`]; a binary that says `#[macro_use] extern crate
/// tessera_cluster;` uses it in place of std's in every module.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => { $crate::output::print_stdout(format_args!($($arg)*)) };
}

/// `println!` through [`print_stdout`], as [`print!`](crate::print).
#[macro_export]
macro_rules! println {
    () => { $crate::output::print_stdout(format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::output::print_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}
