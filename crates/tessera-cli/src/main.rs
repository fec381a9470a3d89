//! `tessera`: the user's tool: the servers, the cluster and the files.
//!
//! `tessera demo` and `tessera bench` run `tessera-bench`, the experiments' own binary,
//! installed or built beside this one.
//!
//! `tessera mds` and `tessera iod` run one server in the foreground; `tessera up` starts a
//! local cluster of them as background processes and writes the cluster file that every
//! client command reads (`--cluster FILE` or `$TESSERA_CLUSTER`); `tessera down` stops it.

// Stdout only through `tessera_cluster::out!`/`outln!` (a closed stdout ends the command
// quietly); std's `print!` would panic on it.
#![warn(clippy::print_stdout)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tessera_cluster as cluster;
use tessera_cluster::out;

mod df;
mod files;
mod forward;
mod interrupts;
mod mount;
mod servers;
mod status;

/// Tessera: a parallel file system for fast noncontiguous I/O.
#[derive(Debug, Parser)]
#[command(name = "tessera", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
    Status(status::StatusArgs),
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
    /// Run the demo job: a block-block 2-D array written and read back with list I/O
    /// (`tessera-bench demo`).
    #[command(disable_help_flag = true)]
    Demo(forward::Forwarded),
    /// Run an experiment from the papers: the methods compared side by side in one run, the
    /// data verified; a table, CSV and figure, or one JSON report with --json
    /// (`tessera-bench NAME`; `tessera bench --help` lists them).
    #[command(disable_help_flag = true)]
    Bench(forward::Forwarded),
    /// Mount the cluster's namespace on DIR through FUSE (as root, with the cluster key);
    /// every caller acts with their own uid and groups.
    Mount(mount::MountArgs),
    /// Unmount a Tessera mount.
    Umount(mount::UmountArgs),
    /// Trace-driven simulators: `tessera sim demote` (DEMOTE buffering, the paper's Table 6.3).
    #[command(subcommand)]
    Sim(tessera_sim::cli::SimCommand),
}

/// Why a command failed: each command module's own error, or the text `tessera-cluster` and
/// `tessera-sim` report. Printed once, here.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Files(#[from] files::FilesError),
    #[error(transparent)]
    Df(#[from] df::DfError),
    #[error(transparent)]
    Status(#[from] status::StatusError),
    #[error(transparent)]
    Forward(#[from] forward::ForwardError),
    #[error(transparent)]
    Servers(#[from] servers::ServerError),
    #[error(transparent)]
    Mount(#[from] mount::MountError),
    #[error("{0}")]
    Other(String),
}

/// A failure reported as text by a crate beside this one.
fn reported(message: impl std::fmt::Display) -> Failure {
    Failure::Other(message.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let logs_default = match cli.command {
        Command::Mds(_) | Command::Iod(_) | Command::Agent(_) => "info",
        _ => "warn",
    };
    cluster::logs::init(logs_default);
    let result: Result<(), Failure> = match cli.command {
        Command::Up(args) => cluster::up(&args).map_err(reported),
        Command::Down(args) => cluster::down(&args).map_err(reported),
        Command::Restart(args) => cluster::restart(&args).map_err(reported),
        Command::Status(args) => status::status(&args).map_err(Failure::from),
        Command::Mds(args) => servers::run_mds(&args).map_err(Failure::from),
        Command::Iod(args) => servers::run_iod(&args).map_err(Failure::from),
        Command::Agent(args) => servers::run_agent(&args).map_err(Failure::from),
        Command::Keygen(args) => servers::keygen(&args).map_err(Failure::from),
        Command::Ls(args) => files::ls(&args).map_err(Failure::from),
        Command::Stat(args) => files::stat(&args).map_err(Failure::from),
        Command::Create(args) => files::create(&args).map_err(Failure::from),
        Command::Mkdir(args) => files::mkdir(&args).map_err(Failure::from),
        Command::Rm(args) => files::rm(&args).map_err(Failure::from),
        Command::Mv(args) => files::mv(&args).map_err(Failure::from),
        Command::Put(args) => files::put(&args).map_err(Failure::from),
        Command::Get(args) => files::get(&args).map_err(Failure::from),
        Command::Sync(args) => files::sync(&args).map_err(Failure::from),
        Command::Df(args) => df::df(&args).map_err(Failure::from),
        Command::Chmod(args) => files::chmod(&args).map_err(Failure::from),
        Command::Chown(args) => files::chown(&args).map_err(Failure::from),
        Command::Demo(args) => forward::run("demo", &args).map_err(Failure::from),
        Command::Bench(args) => forward::run("", &args).map_err(Failure::from),
        Command::Mount(args) => mount::mount(&args).map_err(Failure::from),
        Command::Umount(args) => mount::umount(&args).map_err(Failure::from),
        Command::Sim(command) => tessera_sim::cli::run(&command)
            .map(|out| out!("{out}"))
            .map_err(reported),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("tessera: {failure}");
            ExitCode::FAILURE
        }
    }
}
