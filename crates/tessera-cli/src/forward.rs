//! `tessera demo` and `tessera bench NAME`: handed to `tessera-bench`, the binary of the
//! experiments (crate `tessera-bench`), found beside this one.
//!
//! The experiments, their worker processes and their output libraries live in their own crate
//! so that the user's tool stays small; these two commands keep working from `tessera` by
//! replacing this process with `tessera-bench` and the same arguments.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use thiserror::Error;

/// Why `tessera-bench` could not be run.
#[derive(Debug, Error)]
pub enum ForwardError {
    /// This executable's own path is unknown.
    #[error("cannot find tessera: {0}")]
    NoExe(std::io::Error),
    /// `tessera-bench` is not beside this executable.
    #[error(
        "{} not found beside {}: build it with `cargo build --release -p tessera-bench` \
         (make builds it) or install it next to tessera",
        bench.display(),
        exe.display()
    )]
    NotBeside {
        /// Where it was looked for.
        bench: PathBuf,
        /// This executable.
        exe: PathBuf,
    },
    /// It is there but could not be executed.
    #[error("cannot run {}: {source}", bench.display())]
    Exec {
        /// The binary.
        bench: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Everything after `demo` or `bench`, passed on unread (`--help` included).
#[derive(Debug, clap::Args)]
pub struct Forwarded {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// Name of the experiments' binary.
pub const BENCH_BINARY: &str = "tessera-bench";

/// `tessera-bench` beside this executable.
fn bench_binary() -> Result<PathBuf, ForwardError> {
    let exe = std::env::current_exe().map_err(ForwardError::NoExe)?;
    let bench = exe.with_file_name(BENCH_BINARY);
    if bench.is_file() {
        Ok(bench)
    } else {
        Err(ForwardError::NotBeside { bench, exe })
    }
}

/// Replaces this process with `tessera-bench [FIRST] ARGS...`; returns only on failure.
pub fn run(first: &str, forwarded: &Forwarded) -> Result<(), ForwardError> {
    let bench = bench_binary()?;
    let mut command = std::process::Command::new(&bench);
    if !first.is_empty() {
        command.arg(first);
    }
    let source = command.args(&forwarded.args).exec();
    Err(ForwardError::Exec { bench, source })
}
