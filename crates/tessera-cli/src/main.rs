//! `tessera`: one binary for the servers, the cluster, the files, the demo and the benchmarks.
//!
//! `tessera mds` and `tessera iod` run one server in the foreground; `tessera up` starts a
//! local cluster of them as background processes and writes the cluster file that every
//! client command reads (`--cluster FILE` or `$TESSERA_CLUSTER`); `tessera down` stops it.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

// Every `print!` and `println!` below (in every module declared after these) goes through
// `output::print_stdout`: a closed stdout (`tessera ls | head -1`) ends the command quietly,
// where std's macros would panic.
macro_rules! print {
    ($($arg:tt)*) => { $crate::output::print_stdout(format_args!($($arg)*)) };
}
macro_rules! println {
    () => { $crate::output::print_stdout(format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::output::print_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod output;

mod bench;
mod cluster;
mod demo;
mod df;
mod files;
mod hosts;
mod human;
mod plot;
mod progress;
mod servers;
mod workers;

/// Tessera: a parallel file system for fast noncontiguous I/O.
#[derive(Debug, Parser)]
#[command(name = "tessera", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where client commands find the cluster.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArg {
    /// Cluster file written by `tessera up` (default: $TESSERA_CLUSTER).
    #[arg(long, env = "TESSERA_CLUSTER")]
    pub cluster: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start a cluster: one mds and N iods as background processes (local, or on the hosts
    /// of a hostfile); only the servers not running are started.
    Up(cluster::UpArgs),
    /// Stop every server `tessera up` started for DIR (local or through a hostfile's launchers).
    Down(cluster::DownArgs),
    /// Stop one server of the cluster in DIR and start it again at the same address.
    Restart(cluster::RestartArgs),
    /// Report the state of every server of a cluster.
    Status(cluster::StatusArgs),
    /// Run a metadata server in the foreground.
    Mds(servers::MdsArgs),
    /// Run an I/O server in the foreground.
    Iod(servers::IodArgs),
    /// Run this host's agent in the foreground: it signs credentials for local processes.
    Agent(servers::AgentArgs),
    /// Write a new cluster key file.
    Keygen(servers::KeygenArgs),
    /// List a directory.
    Ls(files::LsArgs),
    /// Show the attributes of a path.
    Stat(files::StatArgs),
    /// Create an empty file with a stripe or pattern layout.
    Create(files::CreateArgs),
    /// Create a directory.
    Mkdir(files::MkdirArgs),
    /// Remove a file, or an empty directory.
    Rm(files::PathArgs),
    /// Move a file or directory.
    Mv(files::MvArgs),
    /// Copy a local file (or stdin, `-`) into Tessera: atomic by rename, synced unless
    /// --no-sync.
    Put(files::PutArgs),
    /// Copy a Tessera file to a local file (or stdout, `-`).
    Get(files::GetArgs),
    /// Show the capacity and use of every I/O server's storage, and the total.
    Df(df::DfArgs),
    /// Flush a file's data on its I/O servers to stable storage.
    Sync(files::PathArgs),
    /// Set the permission bits of a path (octal MODE).
    Chmod(files::ChmodArgs),
    /// Set the owner and/or group of a path (UID[:GID] or :GID, numbers).
    Chown(files::ChownArgs),
    /// Run the demo job: a block-block 2-D array written and read back with list I/O.
    Demo(demo::DemoArgs),
    /// Run an experiment from the papers: the methods compared side by side in one run, the
    /// data verified; a table, CSV and PNG, or one JSON report with --json.
    Bench(bench::BenchArgs),
    /// Internal: one client process of the demo or a benchmark.
    #[command(hide = true)]
    Worker(workers::WorkerArgs),
    /// Internal: one client process of `bench ecio`.
    #[command(hide = true)]
    EcioWorker(bench::ecio::WorkerArgs),
    /// Internal: one native client process of `bench mpiio`.
    #[command(hide = true)]
    MpiioWorker(bench::mpiio::WorkerArgs),
}

/// The log filter: `$TESSERA_LOG`, else `$RUST_LOG`, else `default` (`info` for servers,
/// `warn` for commands). Both take `tracing_subscriber`'s directives (`debug`,
/// `tessera_net=debug,warn`); `TESSERA_LOG` wins when both are set, and an empty one counts
/// as unset. A filter that does not parse is reported and the default used.
fn log_filter(default: &str) -> tracing_subscriber::EnvFilter {
    for variable in ["TESSERA_LOG", "RUST_LOG"] {
        let Some(directives) = std::env::var(variable)
            .ok()
            .filter(|directives| !directives.trim().is_empty())
        else {
            continue;
        };
        match tracing_subscriber::EnvFilter::try_new(&directives) {
            Ok(filter) => return filter,
            Err(err) => {
                eprintln!("tessera: ignoring {variable}={directives:?}: {err}");
                break;
            }
        }
    }
    tracing_subscriber::EnvFilter::new(default)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let logs_default = match cli.command {
        Command::Mds(_) | Command::Iod(_) | Command::Agent(_) => "info",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal: server logs go to files.
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(log_filter(logs_default))
        .init();
    let result = match cli.command {
        Command::Up(args) => cluster::up(&args),
        Command::Down(args) => cluster::down(&args),
        Command::Restart(args) => cluster::restart(&args),
        Command::Status(args) => cluster::status(&args),
        Command::Mds(args) => servers::run_mds(&args),
        Command::Iod(args) => servers::run_iod(&args),
        Command::Agent(args) => servers::run_agent(&args),
        Command::Keygen(args) => servers::keygen(&args),
        Command::Ls(args) => files::ls(&args),
        Command::Stat(args) => files::stat(&args),
        Command::Create(args) => files::create(&args),
        Command::Mkdir(args) => files::mkdir(&args),
        Command::Rm(args) => files::rm(&args),
        Command::Mv(args) => files::mv(&args),
        Command::Put(args) => files::put(&args),
        Command::Get(args) => files::get(&args),
        Command::Sync(args) => files::sync(&args),
        Command::Df(args) => df::df(&args),
        Command::Chmod(args) => files::chmod(&args),
        Command::Chown(args) => files::chown(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Worker(args) => workers::run(&args),
        Command::EcioWorker(args) => bench::ecio::run_worker(&args),
        Command::MpiioWorker(args) => bench::mpiio::run_worker(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tessera: {message}");
            ExitCode::FAILURE
        }
    }
}
