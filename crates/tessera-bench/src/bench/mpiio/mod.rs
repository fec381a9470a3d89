//! `tessera bench mpiio`: plain MPI-IO bandwidth, IOR-style, through the MPI-IO library on
//! Tessera, beside the same accesses through `tessera-client` natively and beside the MPI's
//! own MPI-IO on a local file (issue 15).
//!
//! The cases are independent `write_at`/`read_at` and collective `write_at_all`/`read_at_all`,
//! contiguous (IOR's segments: call `s` of rank `r` moves `T` bytes at `(s * P + r) * T`) and
//! strided (a vector file view whose blocks of `B` bytes interleave the ranks; call `s` moves
//! `T` bytes at view offset `s * T`), for each transfer size `T` and 1, 2 and 4 processes. Each
//! case is run by three columns, each a group of processes kept up for the whole sweep of one
//! process count and driven one case at a time:
//!
//! - `tessera-mpiio`: `mpiio/bench/mpiio.c` (built by `make mpiio` with the MPI's `mpicc` as
//!   `target/mpiio/<mpi>/mpiio-bench`, beside the shim), launched with `libtessera_mpiio.so`
//!   preloaded, on a file of a private 4-server cluster (or `--cluster`);
//! - `native`: `tessera mpiio-worker` processes making the same calls with `tessera-client`
//!   (`File::write_at`/`read_at` for contiguous independent, `ViewedFile` with the same view
//!   for strided, `ViewedFile::write_all`/`read_all` over a [`SocketCommunicator`](tessera_client::SocketCommunicator) for the
//!   collective forms) on another file of the same cluster;
//! - `local-mpiio`: the same MPI program without the library, on a file in a temporary
//!   directory (the MPI's own MPI-IO, ROMIO or OMPIO).
//!
//! Each group reads one command line per case (the MPI ranks from FIFOs, so an idle group
//! waits in the kernel and takes no CPU from the group being measured; the workers from their
//! standard input), runs it (truncate, barrier, timed writes, barrier, barrier, timed reads,
//! barrier, then every word read checked against a formula of file offset, writing rank and
//! generation), and its rank 0 answers one JSON line. The columns take turns on every case,
//! in an order that rotates from case to case and repetition to repetition; a row
//! ([`MpiioRow`](rows::MpiioRow)) is the median over the repetitions, with the minimum and
//! maximum kept.
//!
//! The parts: [`command`] (the line each process is told and the line rank 0 answers),
//! [`group`] (one column's processes), [`worker`] (the native column's process), [`rows`]
//! (the report); the sweep that drives them is here.

mod command;
mod group;
mod rows;
#[cfg(test)]
mod tests;
mod worker;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use tessera_client::CreateOptions;

use super::blockcol::open_cluster;
use super::btio_mpi::{on_path, Mpi, SHIM};
use super::CommonArgs;
use crate::report::{Direction, Outcome as Finished};
use command::{Outcome, Step};
use group::Group;
use rows::{case_name, figure, report, text};
pub use worker::run_worker;

/// The program `make mpiio` builds beside the shim (from `mpiio/bench/mpiio.c`).
const PROGRAM: &str = "mpiio-bench";
/// I/O servers of a private cluster (`open_cluster`).
const SERVERS: u16 = 4;
const PROCESS_COUNTS: [u32; 3] = [1, 2, 4];
/// `--quick` transfer sizes. 16 MiB is left to the full run: the MPI-IO library moves
/// 20-100 MB/s before issue 15's fix, and 16 MiB x 4 processes x 4 cases x 3 columns x 3
/// repetitions x 2 MPIs alone would take minutes.
const QUICK_TRANSFERS: [u64; 3] = [64 << 10, 1 << 20, 4 << 20];
/// Full transfer sizes: 4 KiB to 16 MiB by powers of 4.
const FULL_TRANSFERS: [u64; 7] = [
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
];
/// Each process moves at least this much per case (more calls of small transfers).
const QUICK_PROCESS_BYTES: u64 = 4 << 20;
const FULL_PROCESS_BYTES: u64 = 16 << 20;
const QUICK_REPETITIONS: usize = 3;
const FULL_REPETITIONS: usize = 5;
/// The strided view's block: the transfer, or this if the transfer is larger.
const STRIDED_BLOCK_BYTES_MAX: u64 = 64 << 10;
/// The longest one case of one column may take (startup of the group included).
const CASE_SECONDS_MAX: u64 = 600;
/// The longest a group may take to quit.
const QUIT_SECONDS_MAX: u64 = 60;
/// The most lines of a group's standard output kept waiting to be read.
const OUTPUT_LINES_MAX: usize = 1 << 16;
/// The longest command or result line read.
const LINE_BYTES_MAX: usize = 4096;
/// The most cases one worker runs (as the program's `CASES_MAX`).
const CASES_MAX: usize = 100_000;
/// Generations are mixed into the data in 16 bits (the program's limit).
const GENERATIONS: u64 = 1 << 16;
/// The most bytes one worker process moves in one case (the program's `PROCESS_BYTES_MAX`).
const PROCESS_BYTES_MAX: u64 = 256 << 20;
/// A layout check reads the file in chunks of this many bytes.
const CHECK_CHUNK_BYTES: u64 = 4 << 20;
/// The acceptance of issue 15: tessera-mpiio / native at transfers of at least 1 MiB.
const ACCEPTANCE_RATIO: f64 = 0.8;
const ACCEPTANCE_TRANSFER_MIN: u64 = 1 << 20;

/// The three columns, in the order of the table.
const METHODS: [&str; 3] = ["tessera-mpiio", "native", "local-mpiio"];

/// Which MPIs to run under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MpiChoice {
    /// MPICH only.
    Mpich,
    /// Open MPI only.
    Openmpi,
    /// Both (the default when both are installed).
    Both,
}

/// Arguments of `tessera bench mpiio`.
#[derive(Debug, Clone, clap::Args)]
pub struct MpiioArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The MPIs to run under (default: both if both are installed, else the one that is).
    #[arg(long, value_enum)]
    pub mpi: Option<MpiChoice>,
}

/// Arguments of the hidden `tessera mpiio-worker` command.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// Rank among the workers.
    #[arg(long)]
    rank: usize,
    /// Workers in the group.
    #[arg(long)]
    processes: usize,
    /// The cluster file.
    #[arg(long)]
    cluster: PathBuf,
    /// The Tessera file (made by the parent).
    #[arg(long)]
    path: String,
    /// Where the workers' sockets meet.
    #[arg(long)]
    meeting: PathBuf,
}

/// One case: what every process of a column is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Case {
    collective: bool,
    strided: bool,
    transfer: u64,
    processes: u32,
}

impl Case {
    fn access(self) -> &'static str {
        if self.collective {
            "collective"
        } else {
            "independent"
        }
    }

    fn pattern(self) -> &'static str {
        if self.strided {
            "strided"
        } else {
            "contiguous"
        }
    }

    fn block(self) -> u64 {
        self.transfer.min(STRIDED_BLOCK_BYTES_MAX)
    }

    /// The case label of its rows of `direction` under `mpi`.
    fn name(self, direction: Direction, mpi: &str) -> String {
        case_name(
            direction,
            self.access(),
            self.pattern(),
            self.transfer,
            self.processes,
            mpi,
        )
    }
}

fn size_name(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{}MiB", bytes >> 20)
    } else if bytes.is_multiple_of(1024) {
        format!("{}KiB", bytes >> 10)
    } else {
        format!("{bytes}B")
    }
}

// ---------------------------------------------------------------------------------------
// The parent.

/// What the bench measured of one (mpi, case, column).
#[derive(Debug, Default)]
struct Samples {
    write: Vec<f64>,
    read: Vec<f64>,
    barrier: Vec<f64>,
    last: Option<Outcome>,
    verified: bool,
}

/// Why a column of one MPI is not run, if it is not.
#[derive(Debug, Clone, Default)]
struct Plan {
    mpi: Option<Mpi>,
    mpi_name: String,
    program: Option<PathBuf>,
    shim: Option<PathBuf>,
    skip_mpi: Option<String>,
}

fn mpis(choice: Option<MpiChoice>) -> Vec<Mpi> {
    let installed = |mpi: Mpi| on_path(mpi.launcher());
    match choice {
        Some(MpiChoice::Mpich) => vec![Mpi::Mpich],
        Some(MpiChoice::Openmpi) => vec![Mpi::Openmpi],
        Some(MpiChoice::Both) => vec![Mpi::Mpich, Mpi::Openmpi],
        None => {
            let found: Vec<Mpi> = [Mpi::Mpich, Mpi::Openmpi]
                .into_iter()
                .filter(|&mpi| installed(mpi))
                .collect();
            if found.is_empty() {
                vec![Mpi::Mpich, Mpi::Openmpi]
            } else {
                found
            }
        }
    }
}

/// The plan of `mpi`: its columns skipped if its launcher is not installed, else its program
/// and shim, which `make mpiio` must have built (an error otherwise).
fn plan_of(mpi: Mpi) -> Result<Plan, String> {
    let mut plan = Plan {
        mpi: Some(mpi),
        mpi_name: mpi.name().to_owned(),
        ..Plan::default()
    };
    if !on_path(mpi.launcher()) {
        plan.skip_mpi = Some(format!(
            "{} is not installed: install {} (make deps)",
            mpi.launcher(),
            mpi.package()
        ));
        return Ok(plan);
    }
    plan.program = Some(mpi.built("mpiio", PROGRAM)?);
    plan.shim = Some(mpi.built("mpiio", SHIM)?);
    Ok(plan)
}

/// Settings of one run.
struct Sweep {
    transfers: Vec<u64>,
    process_bytes: u64,
    repetitions: usize,
}

impl Sweep {
    fn cases(&self, processes: u32) -> Vec<Case> {
        let mut cases = Vec::new();
        for collective in [false, true] {
            for strided in [false, true] {
                for &transfer in &self.transfers {
                    cases.push(Case {
                        collective,
                        strided,
                        transfer,
                        processes,
                    });
                }
            }
        }
        cases
    }

    fn segments(&self, transfer: u64) -> u64 {
        (self.process_bytes / transfer).max(1)
    }
}

/// Runs the experiment and writes its report.
pub fn run(args: &MpiioArgs) -> Result<Finished, String> {
    let common = &args.common;
    let sweep = if common.quick {
        Sweep {
            transfers: QUICK_TRANSFERS.to_vec(),
            process_bytes: QUICK_PROCESS_BYTES,
            repetitions: QUICK_REPETITIONS,
        }
    } else {
        Sweep {
            transfers: FULL_TRANSFERS.to_vec(),
            process_bytes: FULL_PROCESS_BYTES,
            repetitions: FULL_REPETITIONS,
        }
    };
    let work = std::env::temp_dir().join(format!("tessera-mpiio-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)
        .map_err(|err| format!("cannot create {}: {err}", work.display()))?;
    let started = Instant::now();
    let result = measure(args, &sweep, &work);
    let _ = std::fs::remove_dir_all(&work);
    let (plans, samples) = result?;
    let report = report(
        common,
        &sweep,
        &plans,
        &samples,
        started.elapsed().as_secs_f64(),
    )?;
    report.finish(
        common,
        &text(&report, &plans, &sweep)?,
        &[figure(&report, &plans)?],
    )
}

type SampleMap = BTreeMap<(String, Case, &'static str), Samples>;

fn measure(args: &MpiioArgs, sweep: &Sweep, work: &Path) -> Result<(Vec<Plan>, SampleMap), String> {
    let mut plans = Vec::new();
    for mpi in mpis(args.mpi) {
        plans.push(plan_of(mpi)?);
    }
    let (cluster, client) = open_cluster(&args.common)?;
    let cluster_file = std::fs::canonicalize(&cluster.file)
        .map_err(|err| format!("{}: {err}", cluster.file.display()))?;
    let mut samples = SampleMap::new();
    let mut generation = 0u64;
    let pid = std::process::id();
    for plan in &plans {
        for processes in PROCESS_COUNTS {
            let tag = format!("{}-p{processes}", plan.mpi_name);
            let mut groups: Vec<(&'static str, Group)> = Vec::new();
            let native_path = format!("/bench/mpiio-{pid}-native-{tag}");
            client
                .create(&native_path, &CreateOptions::default())
                .map_err(|err| format!("create {native_path}: {err}"))?;
            let tessera_path = format!("tessera:/bench/mpiio-{pid}-{tag}");
            let started = (|| -> Result<(), String> {
                if let (Some(mpi), Some(program)) = (plan.mpi, &plan.program) {
                    if let Some(shim) = &plan.shim {
                        groups.push((
                            METHODS[0],
                            Group::mpi(
                                mpi,
                                processes,
                                program,
                                &tessera_path,
                                &work.join(format!("control-tessera-{tag}")),
                                Some((shim, &cluster_file)),
                            )?,
                        ));
                    }
                    groups.push((
                        METHODS[2],
                        Group::mpi(
                            mpi,
                            processes,
                            program,
                            &work.join(format!("local-{tag}")).display().to_string(),
                            &work.join(format!("control-local-{tag}")),
                            None,
                        )?,
                    ));
                }
                groups.push((
                    METHODS[1],
                    Group::native(
                        processes,
                        &cluster_file,
                        &native_path,
                        &work.join(format!("meeting-{tag}")),
                        &plan.mpi_name,
                    )?,
                ));
                Ok(())
            })();
            let result = started.and_then(|()| {
                sweep_groups(
                    &mut groups,
                    sweep,
                    processes,
                    &plan.mpi_name,
                    &mut generation,
                    &mut samples,
                )
            });
            let finished: Vec<Result<(), String>> = groups
                .into_iter()
                .map(|(_, group)| group.finish())
                .collect();
            let _ = client.unlink(&native_path);
            let _ = client.unlink(tessera_path.trim_start_matches("tessera:"));
            result?;
            for outcome in finished {
                outcome?;
            }
        }
    }
    drop(cluster);
    Ok((plans, samples))
}

/// Every case of one process count on every group, interleaved, `repetitions` times.
fn sweep_groups(
    groups: &mut [(&'static str, Group)],
    sweep: &Sweep,
    processes: u32,
    mpi: &str,
    generation: &mut u64,
    samples: &mut SampleMap,
) -> Result<(), String> {
    let cases = sweep.cases(processes);
    for repetition in 0..sweep.repetitions {
        eprintln!(
            "bench mpiio: {mpi}, {processes} process(es), repetition {} of {}",
            repetition + 1,
            sweep.repetitions
        );
        for (index, &case) in cases.iter().enumerate() {
            for turn in 0..groups.len() {
                let (method, group) = &mut groups[(turn + index + repetition) % groups.len()];
                *generation = *generation % (GENERATIONS - 1) + 1;
                let command = Step {
                    collective: case.collective,
                    strided: case.strided,
                    transfer: case.transfer,
                    segments: sweep.segments(case.transfer),
                    block: case.block(),
                    generation: *generation,
                    check: repetition == 0,
                };
                let outcome = group.run(&command, processes)?;
                let entry = samples
                    .entry((mpi.to_owned(), case, *method))
                    .or_insert_with(|| Samples {
                        verified: true,
                        ..Samples::default()
                    });
                entry.write.push(outcome.write_seconds);
                entry.read.push(outcome.read_seconds);
                entry.barrier.push(outcome.barrier_seconds);
                entry.verified &= outcome.verified && outcome.errors == 0;
                entry.last = Some(outcome);
            }
        }
    }
    Ok(())
}
