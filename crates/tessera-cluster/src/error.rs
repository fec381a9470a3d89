//! What can go wrong starting, restarting and stopping a cluster: [`ClusterError`], each
//! variant naming the server, file or limit involved. The binaries print it; nothing acts on
//! the difference yet, so this crate has one enum for its commands, beside the cluster
//! directory's checks ([`DirError`](crate::owned::DirError)) and the hostfile's
//! ([`HostfileError`](crate::hosts::HostfileError)).

use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

use crate::hosts::HostfileError;
use crate::owned::DirError;

/// A cluster command that failed, and why.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A part of the cluster directory is refused or cannot be checked or written.
    #[error(transparent)]
    Directory(#[from] DirError),
    /// The hostfile cannot be read or does not parse.
    #[error(transparent)]
    Hostfile(#[from] HostfileError),
    /// The cluster key cannot be made or loaded.
    #[error(transparent)]
    Key(#[from] tessera_auth::AuthError),
    /// The cluster file cannot be read.
    #[error(transparent)]
    Config(#[from] tessera_client::ClientError),
    /// A directory of the cluster cannot be made.
    #[error("cannot create {}: {source}", path.display())]
    Create {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A file of the cluster cannot be read, written or changed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The cluster file cannot be encoded.
    #[error("cannot write {}: {detail}", path.display())]
    Encode {
        /// The cluster file.
        path: PathBuf,
        /// What the encoder said.
        detail: String,
    },
    /// The measured cost model cannot be copied to another iod's data directory.
    #[error("cannot copy the cost model to {}: {source}", path.display())]
    CopyCostModel {
        /// The copy that was to be made.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// An iod's kept cost model is unusable.
    #[error("iod {index}: cost model: {source}")]
    CostModel {
        /// The iod.
        index: u16,
        /// What is wrong with the file.
        source: tessera_policy::cost::CostModelError,
    },
    /// `tessera iod --calibrate` could not be run.
    #[error("iod {index}: cost model: cannot run {program}: {source}")]
    CalibrateRun {
        /// The iod.
        index: u16,
        /// The tessera binary.
        program: String,
        /// Why.
        source: io::Error,
    },
    /// `tessera iod --calibrate` failed.
    #[error("iod {index}: cost model: `{program} iod --calibrate` failed ({status}): {stderr}")]
    Calibrate {
        /// The iod.
        index: u16,
        /// The tessera binary.
        program: String,
        /// How it ended.
        status: ExitStatus,
        /// What it said.
        stderr: String,
    },
    /// The running binary's path is unknown.
    #[error("cannot find the tessera binary: {0}")]
    CurrentExe(io::Error),
    /// No `tessera` binary beside this one.
    #[error(
        "cannot start servers: {} not found beside {} (build it with `cargo build -p tessera-cli`)",
        sibling.display(),
        exe.display()
    )]
    NoProgram {
        /// Where it was looked for.
        sibling: PathBuf,
        /// This binary.
        exe: PathBuf,
    },
    /// A server process could not be started.
    #[error("cannot start {name} ({program}): {source}")]
    Spawn {
        /// The server (`mds`, `iod-N`, `agent`).
        name: String,
        /// The program or launcher run.
        program: String,
        /// Why.
        source: io::Error,
    },
    /// A server exited while it was starting.
    #[error("{name} exited ({status}) while starting; its log {} ends:\n{tail}", log.display())]
    Exited {
        /// The server.
        name: String,
        /// How it ended.
        status: ExitStatus,
        /// Its log.
        log: PathBuf,
        /// The log's last lines.
        tail: String,
    },
    /// A server did not write its address in time.
    #[error("{name} did not start within {timeout:?}; see {}", log.display())]
    NotStarted {
        /// The server.
        name: String,
        /// How long it was given.
        timeout: Duration,
        /// Its log.
        log: PathBuf,
    },
    /// Servers did not answer a ping in time.
    #[error("servers did not answer: {}", failures.join("; "))]
    NotAnswering {
        /// Each server that did not, with why.
        failures: Vec<String>,
    },
    /// `--servers` is out of range.
    #[error("--servers {servers} is outside 1..={max}")]
    ServersOutOfRange {
        /// What was asked.
        servers: u16,
        /// The limit.
        max: usize,
    },
    /// The metrics ports of `--metrics-base-port` do not fit.
    #[error(
        "--metrics-base-port {base}: the mds and {servers} iods need ports {base} to {last}, \
         within 1 to 65535"
    )]
    MetricsPorts {
        /// The base port.
        base: u16,
        /// The iods.
        servers: u16,
        /// The last port needed.
        last: u32,
    },
    /// `--servers` was given for a cluster started from a hostfile.
    #[error(
        "{} was started from a hostfile (kept in {}); run `tessera up --dir {}` without --servers",
        dir.display(),
        kept.display(),
        dir.display()
    )]
    StartedFromHostfile {
        /// The cluster directory.
        dir: PathBuf,
        /// The kept hostfile.
        kept: PathBuf,
    },
    /// Flags of a local cluster were given with a hostfile.
    #[error(
        "--ofi-provider, --metrics-base-port, --serve and --cache-bytes are for local \
         clusters; they do not go with a hostfile (give each server --metrics, \
         --serve or --cache-bytes in the hostfile's flags)"
    )]
    LocalFlagsWithHostfile,
    /// A running cluster has another number of iods than asked.
    #[error(
        "a cluster of {running} iods is running in {} ({}); `up --servers {servers}` cannot change that while it runs: run `tessera down --dir {}` first",
        dir.display(),
        names.join(", "),
        dir.display()
    )]
    RunningOtherSize {
        /// The cluster directory.
        dir: PathBuf,
        /// Iods of the running cluster.
        running: usize,
        /// The servers running.
        names: Vec<String>,
        /// Iods asked for.
        servers: u16,
    },
    /// An iod to start has no earlier address, but the running mds knows only those.
    #[error(
        "iod {index} has no earlier address in {} but the mds runs with a fixed list; run `tessera down --dir {}` first",
        run.display(),
        dir.display()
    )]
    NoEarlierAddress {
        /// The iod.
        index: u16,
        /// The cluster directory.
        dir: PathBuf,
        /// Its `run/`.
        run: PathBuf,
    },
    /// A running server's address is not recorded.
    #[error("{name} runs but its address is not in {}", run.display())]
    AddressUnknown {
        /// The server, as said in the message (`iod-2`, `the mds`).
        name: String,
        /// The cluster directory's `run/`.
        run: PathBuf,
    },
    /// Servers of the directory run from another hostfile or a local `up`.
    #[error(
        "servers of {} run from another hostfile or a local `up` (kept hostfile: {}); run `tessera down --dir {}` first",
        dir.display(),
        kept.display(),
        dir.display()
    )]
    OtherServersRun {
        /// The cluster directory.
        dir: PathBuf,
        /// The kept hostfile.
        kept: PathBuf,
    },
    /// `restart iod` without an index.
    #[error("restart iod: give its index (`tessera restart iod 1`)")]
    RestartWithoutIndex,
    /// `restart` of an unknown role.
    #[error("restart {role}: expected `mds`, `iod N` or `agent [N]`")]
    RestartRole {
        /// What was given.
        role: String,
    },
    /// No saved command to restart a server with.
    #[error(
        "no saved command for {name} in {} (was this cluster started by `tessera up`?)",
        run.display()
    )]
    NoSavedCommand {
        /// The server.
        name: String,
        /// The cluster directory's `run/`.
        run: PathBuf,
    },
    /// `down` found no cluster.
    #[error("no cluster in {} (no cluster.toml, no pid files)", dir.display())]
    NoCluster {
        /// The directory given.
        dir: PathBuf,
    },
}
