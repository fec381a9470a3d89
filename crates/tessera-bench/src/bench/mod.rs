//! `tessera-bench NAME` (also `tessera bench NAME`): the experiments of the papers, run
//! against a live cluster.
//!
//! Every benchmark measures all the methods it compares in the same run, interleaved, and
//! checks the data it reads back (`verified` in the report). Its output goes through the
//! report harness ([`crate::report`]): the paper's table with our figures, `NAME.csv` and the
//! figure as `NAME.svg` and `NAME.png` in `--out`, and with `--json` exactly one JSON object on
//! standard output (bench, quick, meta, config, verified, and one typed row per case and
//! method). Without `--cluster` (or `$TESSERA_CLUSTER`) it starts a private cluster in a
//! temporary directory and stops it afterwards.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

mod blockcol;
mod btio;
mod btio_mpi;
mod demote;
pub mod ecio;
mod fmrd;
mod inproc;
mod listio;
pub mod meta;
pub mod mpiio;
mod ogr;
pub mod small;
mod subarray;
mod tile;
mod unifier;
mod views;

/// The experiments: `tessera-bench NAME` (also `tessera bench NAME`).
#[derive(Debug, clap::Subcommand)]
pub enum Experiment {
    /// 4 clients x 4 servers, 128 pieces of 128 B to 8 KiB: multiple vs pack vs gather (000 Fig. 4).
    Listio(CommonArgs),
    /// One 2-D subarray client -> server over `local`: contiguous, pack (reg / no reg),
    /// gather (per-row / one / cached registration), hybrid; 64 KiB pieces vs raw
    /// process_vm_writev (000 Fig. 3).
    Subarray(CommonArgs),
    /// 4 clients x 4 servers, n x n byte matrix, 3 distributions: list vs view I/O, and a
    /// view on stripes vs a matching pattern layout (002 Tables 2-3, Figs. 2-4).
    Views(views::ViewsArgs),
    /// 1-D block-column view of n x n ints over 4 clients x 4 servers, n = 512..8192:
    /// multiple, client sieve, list, list+ADS; writes with and without sync, reads cached and
    /// uncached (001 Figs. 3.6-3.7).
    Blockcol(CommonArgs),
    /// mpi-tile-io: 2 x 2 tiles of 1024 x 768 24-bit elements, same methods and cases
    /// (001 Figs. 3.8-3.9).
    Tile(CommonArgs),
    /// 2048 x 2048 ints block-block over 4, each process's 1024 rows as one list write over
    /// `local`: registration ideal (cached) / per row / OGR / OGR with holes (000 Table 3).
    Ogr(CommonArgs),
    /// 1000 writes of 64 KiB from 1000 buffers at 20 % and 80 % reuse: dynamic registration
    /// vs pin-down cache vs FMRD, cache of 100 (001 Fig. 4.4).
    Fmrd(CommonArgs),
    /// NAS BT-IO class A output pattern (64^3 x 5 doubles, 4 processes): I/O time,
    /// requests and storage calls per method (000 Table 4, 001 Table 3.2).
    Btio(CommonArgs),
    /// BT-IO class A output from a real MPI program (mpiio/bench/btio.c) through the MPI-IO
    /// shim, one run per method: 5 independent (`tessera_method`), 2 collective
    /// (`tessera_coll`); `--mpi mpich|openmpi` (needs `make mpiio`).
    BtioMpi(btio_mpi::BtioMpiArgs),
    /// IOR-style MPI-IO from a real MPI program (mpiio/bench/mpiio.c): write_at/read_at and
    /// their collective forms, contiguous and strided (vector view), 1, 2 and 4 processes,
    /// through libtessera_mpiio.so vs tessera-client natively vs the MPI's own MPI-IO on a
    /// local file, in one interleaved run; `--mpi mpich|openmpi|both` (needs `make mpiio`).
    Mpiio(mpiio::MpiioArgs),
    /// 1 server, 2 and 4 client processes, interleaved ints, count 4k-1M: collective
    /// two_phase vs server_directed, writes and reads (004 Tables 1-4); `--counts`,
    /// `--repetitions`, `--iterations` choose a smaller run.
    Ecio(ecio::EcioArgs),
    /// The unified server cache against a copying (`normal`) and a mapping (`mmap`) server,
    /// one private cluster per `tessera iod --serve` mode: cached reads of 4 KiB-1 MiB over
    /// `local` and tcp, a re-read of 0.8x-1.3x the cache budget, and 1-4 clients reading
    /// 2N MiB each from 4 iods (001 Figs. 5.3-5.5).
    Unifier(unifier::UnifierArgs),
    /// mdtest-style metadata phases (create, stat, open-close, readdir, rename, unlink,
    /// mkdir, rmdir, tree create/remove, tar x of a small tree), 1 and 4 processes, own and
    /// shared directories:
    /// native client vs `tessera mount` vs a local directory vs tmpfs vs a null request to
    /// the mds, with the mds's changes per durable commit.
    Meta(meta::MetaArgs),
    /// Small calls: read_at/write_at of 512 B-64 KiB over `local` and tcp, 1 and 4
    /// processes, sequential and shuffled, client cache off and on, and many small writes of
    /// 40 B-2 KiB then close: Tessera vs a local file vs a null request to the iod vs a bare
    /// socket round trip.
    Small(small::SmallArgs),
    /// 4 clients x 4 iods (unified cache), each client looping over more than its client
    /// cache: nocache vs inclusive client cache vs eager DEMOTE vs DEMOTE buffering, with
    /// hit rates per level and demote traffic (001 ch. 6, live).
    Demote(demote::DemoteArgs),
}

pub use crate::args::{CommonArgs, RegistrarKind};

/// The worker method name that reaches the servers by TCP even on their host: the storage
/// benches (blockcol, tile, btio, views) measure the servers' storage plans and request counts
/// across a network, as their seeds did, so they must not take the same-host one-sided path
/// (whose reads skip storage calls altogether, `ObjectStore::read_mapped`).
pub(super) fn over_tcp(method: &str) -> String {
    format!("tcp:{method}")
}

/// A cluster to run against: the caller's, or a private one stopped on drop.
pub struct BenchCluster {
    /// Its cluster file.
    pub file: PathBuf,
    private_dir: Option<PathBuf>,
    servers: u16,
}

impl BenchCluster {
    /// Uses `given`, or starts a private cluster of `servers` iods.
    pub fn open(given: Option<&Path>, servers: u16) -> Result<Self, String> {
        if let Some(file) = given {
            return Ok(Self {
                file: file.to_owned(),
                private_dir: None,
                servers: 0,
            });
        }
        Self::private(servers, "", &[])
    }

    /// Starts a private cluster of `servers` iods, each started with `iod_flags` (`--serve
    /// MODE`, `--cache-bytes N`: [`tessera_cluster::serve_flags`]), in a temporary directory
    /// whose name ends in `name` (so that one bench can run several at once).
    pub fn private(servers: u16, name: &str, iod_flags: &[String]) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("tessera-bench-{}{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!(
            "bench: starting a private cluster of {servers} I/O servers in {}{}",
            dir.display(),
            if iod_flags.is_empty() {
                String::new()
            } else {
                format!(" (iods with {})", iod_flags.join(" "))
            }
        );
        // On failure `start_local` leaves nothing running; the directory goes too.
        if let Err(err) = tessera_cluster::start_local(
            &dir,
            servers,
            tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT,
            None,
            &[],
            &[],
            iod_flags,
        ) {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(err.to_string());
        }
        Ok(Self {
            file: dir.join("cluster.toml"),
            private_dir: Some(dir),
            servers,
        })
    }

    /// The data directories of the iods (`DIR/iod-N`, see `cluster.rs`), known only for a
    /// private cluster.
    pub fn iod_data_dirs(&self) -> Option<Vec<PathBuf>> {
        let dir = self.private_dir.as_ref()?;
        Some(
            (0..self.servers)
                .map(|index| dir.join(format!("iod-{index}")))
                .collect(),
        )
    }
}

/// Opens the cluster of a benchmark (the caller's, or a private one of `servers` iods) and a
/// client that makes the benchmark's files under `/bench`.
pub fn open_cluster(
    common: &CommonArgs,
    servers: u16,
) -> Result<(BenchCluster, tessera_client::Client), String> {
    use tessera_client::{Client, ClientOptions, ClusterConfig, ErrorCode};
    let cluster = BenchCluster::open(common.cluster.as_deref(), servers)?;
    let config = ClusterConfig::load(&cluster.file).map_err(|err| err.to_string())?;
    let client = Client::new(&config, &ClientOptions::default());
    match client.mkdir("/bench", 0o755) {
        Ok(_) => {}
        Err(err) if err.code() == Some(ErrorCode::Exists) => {}
        Err(err) => return Err(format!("mkdir /bench: {err}")),
    }
    Ok((cluster, client))
}

/// A client of its own for a method that registers its buffers by `policy` over `registrar`
/// (`None`: no registration), and that registry; `method` names it in errors. A client per
/// method keeps one method's cached (locked) registrations from making another's cheap.
pub(super) fn registered_client(
    config: &tessera_client::ClusterConfig,
    registrar: &std::sync::Arc<dyn tessera_client::tessera_reg::Registrar>,
    policy: Option<tessera_client::tessera_reg::Policy>,
    method: &str,
) -> Result<
    (
        tessera_client::Client,
        Option<std::sync::Arc<tessera_client::tessera_reg::Registry>>,
    ),
    String,
> {
    let registry = match policy {
        Some(policy) => Some(std::sync::Arc::new(
            tessera_client::tessera_reg::Registry::new(registrar.clone(), policy)
                .map_err(|err| format!("{method}: {err}"))?,
        )),
        None => None,
    };
    let client = tessera_client::Client::new(config, &tessera_client::ClientOptions::default());
    client.set_registration(registry.clone());
    Ok((client, registry))
}

/// Ends what [`registered_client`] began: each (client, file) of `clients` stops registering
/// and `checker` removes the file (best effort: the run is over, an error changes nothing).
pub(super) fn release_clients<'a>(
    checker: &tessera_client::Client,
    clients: impl IntoIterator<Item = (&'a tessera_client::Client, &'a str)>,
) {
    for (client, path) in clients {
        client.set_registration(None);
        let _ = checker.unlink(path);
    }
}

/// A command running this binary, for a group's worker processes ([`spawn_worker`]).
pub(crate) fn worker_command() -> Result<Command, String> {
    let exe = std::env::current_exe().map_err(|err| format!("cannot find tessera-bench: {err}"))?;
    Ok(Command::new(exe))
}

/// Starts worker `rank` of a group of `name` workers with `command` (its arguments and standard
/// input set): rank 0 reports on a piped standard output, the others' is discarded; standard
/// error is the bench's.
pub(super) fn spawn_worker(
    command: &mut Command,
    name: &str,
    rank: usize,
) -> Result<Child, String> {
    command
        .stdout(if rank == 0 {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|err| format!("cannot start {name} worker {rank}: {err}"))
}

/// Drops the page cache of every object file of the iods whose data directories are
/// `data_dirs`, so the next read of them reaches the disk: each file's dirty pages are written
/// first (`fdatasync`), then its cached pages dropped (`POSIX_FADV_DONTNEED`). Returns the
/// files dropped.
pub fn drop_page_cache(data_dirs: &[PathBuf]) -> Result<usize, String> {
    use std::os::fd::AsRawFd;
    let mut dropped = 0;
    for dir in data_dirs {
        let objects = dir.join("objects");
        let entries = std::fs::read_dir(&objects)
            .map_err(|err| format!("cannot list {}: {err}", objects.display()))?;
        for entry in entries {
            let path = entry
                .map_err(|err| format!("cannot list {}: {err}", objects.display()))?
                .path();
            let file = match std::fs::File::open(&path) {
                Ok(file) => file,
                // Removed since it was listed (another benchmark's file).
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => return Err(format!("cannot open {}: {err}", path.display())),
            };
            file.sync_data()
                .map_err(|err| format!("cannot sync {}: {err}", path.display()))?;
            // SAFETY: posix_fadvise only advises the kernel about the open descriptor `file`
            // owns for the whole call; no memory of ours is passed.
            let status =
                unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            if status != 0 {
                return Err(format!(
                    "posix_fadvise(DONTNEED) on {}: {}",
                    path.display(),
                    std::io::Error::from_raw_os_error(status)
                ));
            }
            dropped += 1;
        }
    }
    Ok(dropped)
}

impl Drop for BenchCluster {
    fn drop(&mut self) {
        if let Some(dir) = &self.private_dir {
            tessera_cluster::stop_all(dir);
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Runs the chosen experiment.
pub fn run(experiment: &Experiment) -> Result<(), String> {
    let outcome = match experiment {
        Experiment::Listio(common) => listio::run(common)?,
        Experiment::Meta(args) => meta::run(args)?,
        Experiment::Small(args) => small::run(args)?,
        Experiment::Subarray(common) => subarray::run(common)?,
        Experiment::Views(args) => views::run(args)?,
        Experiment::Blockcol(common) => blockcol::run(common)?,
        Experiment::Tile(common) => tile::run(common)?,
        Experiment::Btio(common) => btio::run(common)?,
        Experiment::BtioMpi(args) => btio_mpi::run(args)?,
        Experiment::Mpiio(args) => mpiio::run(args)?,
        Experiment::Ecio(args) => ecio::run(args)?,
        Experiment::Unifier(args) => unifier::run(args)?,
        Experiment::Demote(args) => demote::run(args)?,
        Experiment::Ogr(common) => ogr::run(common)?,
        Experiment::Fmrd(common) => fmrd::run(common)?,
    };
    if outcome.verified {
        Ok(())
    } else {
        Err(format!(
            "bench {}: data read back did not match what was written",
            outcome.bench
        ))
    }
}
