//! `tessera-bench`: the experiments of the papers and the demo, with their worker processes.
//!
//! `tessera-bench NAME` runs one experiment (`tessera bench NAME` runs this binary);
//! `tessera-bench demo` is the main job of `make demo` (also `tessera demo`). Without
//! `--cluster` (or `$TESSERA_CLUSTER`) an experiment starts a private cluster of `tessera`
//! servers, found beside this binary, and stops it afterwards. The hidden `worker`,
//! `ecio-worker`, `mpiio-worker`, `meta-worker` and `small-worker` commands are the client processes the experiments start.

// Stdout only through `tessera_cluster::out!`/`outln!` (a closed stdout ends the command
// quietly); std's `print!` would panic on it.
#![warn(clippy::print_stdout)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod args;
mod bench;
mod demo;
mod lockstep;
mod report;
mod workers;

/// Tessera's experiments: each compares its methods side by side in one run and verifies the
/// data; a table, CSV and figure, or one JSON report with --json.
#[derive(Debug, Parser)]
#[command(name = "tessera-bench", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    #[command(flatten)]
    Experiment(bench::Experiment),
    /// Run the demo job: a block-block 2-D array written and read back with list I/O.
    Demo(demo::DemoArgs),
    /// Internal: one client process of the demo or a benchmark.
    #[command(hide = true)]
    Worker(workers::WorkerArgs),
    /// Internal: one client process of `ecio`.
    #[command(hide = true)]
    EcioWorker(bench::ecio::WorkerArgs),
    /// Internal: one native client process of `mpiio`.
    #[command(hide = true)]
    MpiioWorker(bench::mpiio::WorkerArgs),
    /// Internal: one client process of `meta`.
    #[command(hide = true)]
    MetaWorker(bench::meta::WorkerArgs),
    /// Internal: one client process of `small`.
    #[command(hide = true)]
    SmallWorker(bench::small::WorkerArgs),
}

fn main() -> ExitCode {
    tessera_cluster::logs::init("warn");
    let result = match Cli::parse().command {
        Command::Experiment(experiment) => bench::run(&experiment),
        Command::Demo(args) => demo::run(&args),
        Command::Worker(args) => workers::run(&args),
        Command::EcioWorker(args) => bench::ecio::run_worker(&args),
        Command::MpiioWorker(args) => bench::mpiio::run_worker(&args),
        Command::MetaWorker(args) => bench::meta::run_worker(&args),
        Command::SmallWorker(args) => bench::small::run_worker(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tessera-bench: {message}");
            ExitCode::FAILURE
        }
    }
}
