//! `tessera demo` and `tessera bench NAME`: handed to `tessera-bench`, the binary of the
//! experiments (crate `tessera-bench`), found beside this one.
//!
//! The experiments, their worker processes and their output libraries live in their own crate
//! so that the user's tool stays small; these two commands keep working from `tessera` by
//! replacing this process with `tessera-bench` and the same arguments.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;

/// Everything after `demo` or `bench`, passed on unread (`--help` included).
#[derive(Debug, clap::Args)]
pub struct Forwarded {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// Name of the experiments' binary.
pub const BENCH_BINARY: &str = "tessera-bench";

/// `tessera-bench` beside this executable.
fn bench_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|err| format!("cannot find tessera: {err}"))?;
    let bench = exe.with_file_name(BENCH_BINARY);
    if bench.is_file() {
        Ok(bench)
    } else {
        Err(format!(
            "{} not found beside {}: build it with `cargo build --release -p tessera-bench` \
             (make builds it) or install it next to tessera",
            bench.display(),
            exe.display()
        ))
    }
}

/// Replaces this process with `tessera-bench [FIRST] ARGS...`; returns only on failure.
pub fn run(first: &str, forwarded: &Forwarded) -> Result<(), String> {
    let bench = bench_binary()?;
    let mut command = std::process::Command::new(&bench);
    if !first.is_empty() {
        command.arg(first);
    }
    let err = command.args(&forwarded.args).exec();
    Err(format!("cannot run {}: {err}", bench.display()))
}
