//! `tessera bench small`: small reads and writes against a local file and the round-trip
//! floor, side by side in one run.
//!
//! - **calls**: 1 and 4 client processes, each on a file of its own held by one iod, time
//!   `read_at` and `write_at` of 512 B, 4 KiB and 64 KiB, at sequential and shuffled slots
//!   (each slot of the file once per pass), with the data cached (a read step first reads the
//!   whole file once, untimed). Methods, in a shuffled order per repetition: `tessera` (no
//!   client cache) and `tessera-cached` (the client cache on), each over `local` and `tcp`,
//!   and `local-file` (pread/pwrite on a file in the cluster directory's file system).
//! - **many-small**: every process writes its share of an array interleaved over the
//!   processes as one write call per piece of 40 B, 320 B and 2 KiB, from open to close —
//!   the pattern of a parallel benchmark writing a 3-D array with many small independent
//!   writes. The same methods.
//! - **many-small-mpi**: the same pattern from an MPI program (`mpiio/bench/many_small.c`,
//!   4 processes) under each MPI `make mpiio` built for: the MPI's own MPI-IO on a local file,
//!   the Tessera MPI-IO library, and the library with `tessera_write_back=enable`, open to
//!   close (`--no-mpi` leaves it out).
//! - **floor**: a null request and reply (`Ping`) to each process's iod over each transport;
//!   **socket**: a bare round trip of each size over loopback TCP and over a Unix socket
//!   pair, in this process (the payload one way, 8 bytes back).
//!
//! Every row gives ops/s (median and range over the repetitions), MiB/s, p50 and p99 latency,
//! and its ratios: ops/s to `local-file`'s, p50 to the floor's and to the bare socket's.
//! Every byte written or read is checked afterwards, untimed.

mod mpi;
mod socket;
mod worker;

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::json;

pub use worker::{run as run_worker, WorkerArgs};
use worker::{Outcome, Step, Target, Transport, Work};

use super::CommonArgs;
use crate::lockstep::{percentile, Lockstep};
use crate::report::{self, Figure, Line, Meta, Panel, Point, Progress, Report, Scale, Spread};

/// Options of `tessera bench small`.
#[derive(Debug, Clone, clap::Args)]
pub struct SmallArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Calls per process per step, every size (default: 4000, 1000 of 64 KiB; with --quick
    /// 1000, 200 of 64 KiB), and pieces per process of many-small (default 10000, 2000 with
    /// --quick).
    #[arg(long)]
    pub ops: Option<usize>,
    /// Repetitions of every case (default 5, 3 with --quick).
    #[arg(long)]
    pub repetitions: Option<usize>,
    /// Leave out the many-small rows through MPI-IO (which need `make mpiio`).
    #[arg(long)]
    pub no_mpi: bool,
}

/// Client processes of the cases.
const PROCESS_COUNTS: [usize; 2] = [1, 4];
/// I/O servers of the private cluster.
const SERVERS: u16 = 4;
/// Call sizes.
const SIZES: [usize; 3] = [512, 4 << 10, 64 << 10];
/// Pieces of many-small.
const PIECES: [usize; 3] = [40, 320, 2 << 10];
/// The client cache of `tessera-cached` (each process's file is at most 64 MiB).
const CACHE_BYTES: u64 = 128 << 20;

/// What a row measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Tessera(Transport),
    Cached(Transport),
    LocalFile,
}

impl Method {
    const ALL: [Self; 5] = [
        Self::Tessera(Transport::Local),
        Self::Cached(Transport::Local),
        Self::Tessera(Transport::Tcp),
        Self::Cached(Transport::Tcp),
        Self::LocalFile,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Tessera(_) => "tessera",
            Self::Cached(_) => "tessera-cached",
            Self::LocalFile => "local-file",
        }
    }

    /// The transport column: `-` for the local file.
    fn transport(self) -> &'static str {
        match self {
            Self::Tessera(transport) | Self::Cached(transport) => transport.name(),
            Self::LocalFile => "-",
        }
    }

    fn target(self, cluster: &std::path::Path) -> Target {
        match self {
            Self::Tessera(transport) | Self::Cached(transport) => Target::Tessera {
                cluster: cluster.to_owned(),
                transport,
                cache_bytes: if matches!(self, Self::Cached(_)) {
                    CACHE_BYTES
                } else {
                    0
                },
            },
            Self::LocalFile => Target::Local,
        }
    }
}

/// One (part, op, order, size, processes, transport, method).
#[derive(Debug, Clone, Serialize)]
pub struct SmallRow {
    /// `calls`, `many-small`, `floor` or `socket`.
    pub part: &'static str,
    /// `read`, `write`, `ping` or `round-trip`.
    pub op: &'static str,
    /// `seq` or `random` (`-` where offsets do not apply).
    pub order: &'static str,
    /// Bytes per call (per piece, for many-small).
    pub size: usize,
    /// Client processes.
    pub processes: usize,
    /// `local`, `tcp`, or `-` for the local file.
    pub transport: &'static str,
    /// What was measured.
    pub method: &'static str,
    /// Calls per second, all processes, median over the repetitions.
    pub ops_s: f64,
    /// The slowest repetition's.
    pub ops_s_min: f64,
    /// The fastest repetition's.
    pub ops_s_max: f64,
    /// MiB/s of the median repetition.
    pub mib_s: f64,
    /// Median latency of one call, microseconds (NaN for many-small).
    pub p50_us: f64,
    /// 99th percentile latency, microseconds.
    pub p99_us: f64,
    /// Calls of one repetition, all processes.
    pub ops: u64,
    /// `ops_s` over `local-file`'s in the same case.
    pub vs_local_file: Option<f64>,
    /// `p50_us` over the floor's (a ping over the same transport, as many processes).
    pub p50_vs_floor: Option<f64>,
    /// `p50_us` over a bare socket round trip of the same size and transport.
    pub p50_vs_socket: Option<f64>,
    /// Repetitions measured.
    pub repetitions: usize,
}

impl report::Row for SmallRow {
    fn key(&self) -> (String, &str) {
        (
            case(
                self.part,
                self.op,
                self.order,
                self.size,
                self.processes,
                self.transport,
            ),
            self.method,
        )
    }
}

fn case(
    part: &str,
    op: &str,
    order: &str,
    size: usize,
    processes: usize,
    transport: &str,
) -> String {
    format!("{part} {op} {order} {size} B {processes}p {transport}")
}

/// The identity of a row while its samples gather.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    part: &'static str,
    op: &'static str,
    order: &'static str,
    size: usize,
    processes: usize,
    transport: &'static str,
    method: &'static str,
}

/// The samples of one row.
#[derive(Default)]
struct Samples {
    ops_s: Vec<f64>,
    mib_s: Vec<f64>,
    latencies_us: Vec<f32>,
    ops: u64,
}

impl Samples {
    fn add(&mut self, outcomes: &[Outcome]) {
        let ops: u64 = outcomes.iter().map(|o| o.ops).sum();
        let bytes: u64 = outcomes.iter().map(|o| o.bytes).sum();
        let seconds = outcomes.iter().map(|o| o.seconds).fold(0.0, f64::max);
        self.ops = ops;
        self.ops_s.push(ops as f64 / seconds.max(1e-9));
        self.mib_s.push(report::mib_s(bytes, seconds.max(1e-9)));
        for outcome in outcomes {
            self.latencies_us.extend(&outcome.latencies_us);
        }
    }
}

fn slots(args: &SmallArgs, size: usize) -> usize {
    args.ops
        .unwrap_or(match (args.common.quick, size >= 64 << 10) {
            (true, true) => 200,
            (true, false) | (false, true) => 1000,
            (false, false) => 4000,
        })
        .clamp(1, (64 << 20) / size)
}

fn pieces(args: &SmallArgs) -> usize {
    args.ops
        .unwrap_or(if args.common.quick { 2000 } else { 10_000 })
        .clamp(1, 1 << 20)
}

fn repetitions(args: &SmallArgs) -> usize {
    args.repetitions
        .unwrap_or(if args.common.quick { 3 } else { 5 })
        .max(1)
}

/// Where the run's local files are, removed on drop.
struct LocalDir(PathBuf);

impl Drop for LocalDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the run needs everywhere.
struct Run<'a> {
    args: &'a SmallArgs,
    cluster: PathBuf,
    local: PathBuf,
    root: String,
    repetitions: usize,
    samples: std::collections::BTreeMap<Key, Samples>,
    verified: bool,
}

impl Run<'_> {
    fn path(&self, method: Method, name: &str) -> String {
        match method {
            Method::LocalFile => self.local.join(name).display().to_string(),
            _ => format!("{}/{name}", self.root),
        }
    }

    /// Runs `steps` and checks their outcomes; `record` gets them when `key` is given.
    fn step(
        &mut self,
        workers: &mut Lockstep,
        steps: &[Step],
        key: Option<Key>,
    ) -> Result<(), String> {
        let outcomes: Vec<Outcome> = workers.step(steps)?;
        for (rank, outcome) in outcomes.iter().enumerate() {
            if !outcome.verified {
                eprintln!(
                    "bench small: {:?} {:?}, process {rank}: {}",
                    steps[rank].target, steps[rank].work, outcome.problem
                );
                self.verified = false;
            }
        }
        if let Some(key) = key {
            self.samples.entry(key).or_default().add(&outcomes);
        }
        Ok(())
    }

    /// The calls part of `processes` processes at `size`.
    fn calls(
        &mut self,
        workers: &mut Lockstep,
        processes: usize,
        size: usize,
    ) -> Result<(), String> {
        let slots = slots(self.args, size);
        let file = |rank: usize| format!("p{rank}-{size}");
        // A generation per file: Tessera methods share one file per process, the local file
        // its own. The first write (untimed) fills it.
        let mut generation = [0u64; 2];
        let methods = Method::ALL;
        for (repetition, turn) in (0..=self.repetitions).flat_map(|r| {
            report::turn_order(r, methods.len())
                .into_iter()
                .map(move |t| (r, t))
        }) {
            let method = methods[turn];
            let which = usize::from(method == Method::LocalFile);
            for (write, random) in [(true, false), (false, false), (true, true), (false, true)] {
                if write {
                    generation[which] += 1;
                }
                let work = if write {
                    Work::Write {
                        size,
                        slots,
                        random,
                    }
                } else {
                    Work::Read {
                        size,
                        slots,
                        random,
                    }
                };
                let steps: Vec<Step> = (0..processes)
                    .map(|rank| Step {
                        target: method.target(&self.cluster),
                        path: self.path(method, &file(rank)),
                        work,
                        generation: generation[which],
                        group: 0,
                    })
                    .collect();
                // Repetition 0 only fills the files and warms up.
                let key = (repetition > 0).then_some(Key {
                    part: "calls",
                    op: if write { "write" } else { "read" },
                    order: if random { "random" } else { "seq" },
                    size,
                    processes,
                    transport: method.transport(),
                    method: method.name(),
                });
                self.step(workers, &steps, key)?;
            }
        }
        Ok(())
    }

    /// The floor of `processes` processes: pings to each one's iod, over each transport.
    fn floor(&mut self, workers: &mut Lockstep, processes: usize) -> Result<(), String> {
        let count = slots(self.args, 4 << 10);
        for repetition in 0..self.repetitions {
            for turn in report::turn_order(repetition, Transport::BOTH.len()) {
                let method = Method::Tessera(Transport::BOTH[turn]);
                let steps: Vec<Step> = (0..processes)
                    .map(|rank| Step {
                        target: method.target(&self.cluster),
                        path: self.path(method, &format!("p{rank}-{}", 4 << 10)),
                        work: Work::Ping { count },
                        generation: 0,
                        group: 0,
                    })
                    .collect();
                let key = Key {
                    part: "floor",
                    op: "ping",
                    order: "-",
                    size: 0,
                    processes,
                    transport: method.transport(),
                    method: "floor",
                };
                self.step(workers, &steps, Some(key))?;
            }
        }
        Ok(())
    }

    /// Many-small of `processes` processes with pieces of `piece` bytes.
    fn many_small(
        &mut self,
        workers: &mut Lockstep,
        processes: usize,
        piece: usize,
    ) -> Result<(), String> {
        let pieces = pieces(self.args);
        let methods = Method::ALL;
        let mut generation = 0;
        for repetition in 0..=self.repetitions {
            for turn in report::turn_order(repetition, methods.len()) {
                let method = methods[turn];
                generation += 1;
                let name = format!("many-{processes}-{piece}");
                let steps: Vec<Step> = (0..processes)
                    .map(|_| Step {
                        target: method.target(&self.cluster),
                        path: self.path(method, &name),
                        work: Work::ManySmall {
                            piece,
                            pieces,
                            processes,
                        },
                        generation,
                        // The processes write one file, as one job: one write group.
                        group: (u64::from(std::process::id()) << 32) | generation,
                    })
                    .collect();
                let key = (repetition > 0).then_some(Key {
                    part: "many-small",
                    op: "write",
                    order: "-",
                    size: piece,
                    processes,
                    transport: method.transport(),
                    method: method.name(),
                });
                self.step(workers, &steps, key)?;
                let checks: Vec<Step> = steps
                    .into_iter()
                    .map(|step| Step {
                        work: Work::CheckMany {
                            piece,
                            pieces,
                            processes,
                        },
                        group: 0,
                        ..step
                    })
                    .collect();
                self.step(workers, &checks, None)?;
            }
        }
        Ok(())
    }

    /// Many-small through MPI-IO, under each MPI `make mpiio` built for: the MPI's own
    /// MPI-IO on a local file against the Tessera library with and without write-back, the
    /// ways in a shuffled order per repetition. Returns why an MPI was left out, if one was.
    fn many_small_mpi(&mut self) -> Result<Vec<String>, String> {
        let (mpis, missing) = mpi::available();
        let pieces = pieces(self.args);
        for &which in &mpis {
            for repetition in 0..self.repetitions {
                for turn in report::turn_order(repetition, mpi::Way::ALL.len()) {
                    let way = mpi::Way::ALL[turn];
                    // Two repeats in one run: the first warms the MPI and the files up.
                    let lines = mpi::run(
                        which,
                        way,
                        (&self.cluster, &self.local),
                        (pieces, 2, &PIECES),
                    )?;
                    for line in lines.iter().filter(|line| line.repeat == 1) {
                        if !line.verified {
                            eprintln!(
                                "bench small: {} {} pieces of {} B read back wrong",
                                which.name(),
                                way.method(),
                                line.piece
                            );
                            self.verified = false;
                        }
                        let key = Key {
                            part: "many-small-mpi",
                            op: "write",
                            order: "-",
                            size: line.piece,
                            processes: mpi::PROCESSES as usize,
                            transport: which.name(),
                            method: way.method(),
                        };
                        let outcome = Outcome {
                            seconds: line.seconds,
                            ops: (pieces * mpi::PROCESSES as usize) as u64,
                            bytes: (pieces * line.piece * mpi::PROCESSES as usize) as u64,
                            latencies_us: Vec::new(),
                            verified: line.verified,
                            problem: String::new(),
                        };
                        self.samples.entry(key).or_default().add(&[outcome]);
                    }
                }
            }
        }
        Ok(missing)
    }

    /// The bare socket round trips, in this process.
    fn sockets(&mut self) -> Result<(), String> {
        for &size in &SIZES {
            let count = slots(self.args, size);
            for repetition in 0..self.repetitions {
                for turn in report::turn_order(repetition, Transport::BOTH.len()) {
                    let transport = Transport::BOTH[turn];
                    let outcome = socket::round_trips(transport, size, count)?;
                    let key = Key {
                        part: "socket",
                        op: "round-trip",
                        order: "-",
                        size,
                        processes: 1,
                        transport: transport.name(),
                        method: "socket",
                    };
                    self.samples.entry(key).or_default().add(&[outcome]);
                }
            }
        }
        Ok(())
    }
}

/// Runs the experiment and writes its report.
pub fn run(args: &SmallArgs) -> Result<report::Outcome, String> {
    let common = &args.common;
    let (cluster, client) = super::open_cluster(common, SERVERS)?;
    let pid = std::process::id();
    // The local files sit on the disk of the cluster's directory.
    let local_parent = cluster
        .file
        .parent()
        .and_then(std::path::Path::parent)
        .filter(|_| common.cluster.is_none())
        .map_or_else(std::env::temp_dir, std::path::Path::to_path_buf);
    let local = LocalDir(local_parent.join(format!("tessera-bench-small-{pid}")));
    std::fs::create_dir_all(&local.0)
        .map_err(|err| format!("cannot make {}: {err}", local.0.display()))?;
    let root = format!("/bench/small-{pid}");
    client
        .mkdir(&root, 0o755)
        .map_err(|err| format!("mkdir {root}: {err}"))?;
    let repetitions = repetitions(args);
    let mut run = Run {
        args,
        cluster: cluster.file.clone(),
        local: local.0.clone(),
        root: root.clone(),
        repetitions,
        samples: std::collections::BTreeMap::new(),
        verified: true,
    };
    let progress = Progress::new(
        "small",
        (PROCESS_COUNTS.len() * (SIZES.len() + PIECES.len() + 1) + 2) as u64,
    );
    for &processes in &PROCESS_COUNTS {
        let mut workers = worker::spawn(processes)?;
        for &size in &SIZES {
            run.calls(&mut workers, processes, size)?;
            progress.step(&format!("calls of {size} B, {processes} process(es)"));
        }
        run.floor(&mut workers, processes)?;
        progress.step(&format!("floor, {processes} process(es)"));
        for &piece in &PIECES {
            run.many_small(&mut workers, processes, piece)?;
            progress.step(&format!("many-small of {piece} B, {processes} process(es)"));
        }
    }
    run.sockets()?;
    progress.step("bare sockets");
    let mpi_note = if args.no_mpi {
        "not measured (--no-mpi)".to_owned()
    } else {
        let missing = run.many_small_mpi()?;
        progress.step("many-small through MPI-IO");
        if missing.is_empty() {
            "measured".to_owned()
        } else {
            missing.join("; ")
        }
    };
    drop(progress);
    let rows = rows(&run.samples, repetitions)?;
    let report = Report {
        bench: "small",
        quick: common.quick,
        meta: Meta::now(repetitions),
        config: json!({
            "servers": SERVERS,
            "processes": PROCESS_COUNTS,
            "sizes": SIZES,
            "pieces": PIECES,
            "calls_per_step": SIZES.iter().map(|&size| slots(args, size)).collect::<Vec<_>>(),
            "many_small_pieces_per_process": pieces(args),
            "client_cache_bytes": CACHE_BYTES,
            "local_file_dir": local.0.display().to_string(),
            "many_small_mpi": mpi_note,
            "many_small_mpi_processes": mpi::PROCESSES,
        }),
        verified: run.verified,
        rows,
    };
    let text = text(&report)?;
    let figure = figure(&report);
    remove_tree(&client, &root);
    report.finish(common, &text, &[figure])
}

/// Removes the run's files and directory (best effort).
fn remove_tree(client: &tessera_client::Client, root: &str) {
    if let Ok(entries) = client.readdir(root) {
        for entry in entries {
            let _ = client.unlink(&format!("{root}/{}", entry.name));
        }
    }
    let _ = client.rmdir(root);
}

fn rows(
    samples: &std::collections::BTreeMap<Key, Samples>,
    repetitions: usize,
) -> Result<Vec<SmallRow>, String> {
    let mut rows = Vec::new();
    for (key, row) in samples {
        let ops_s = Spread::of(&row.ops_s).map_err(|err| format!("bench small: {key:?}: {err}"))?;
        let mib_s = Spread::of(&row.mib_s).map_err(|err| format!("bench small: {key:?}: {err}"))?;
        let mut sorted = row.latencies_us.clone();
        sorted.sort_by(f32::total_cmp);
        rows.push(SmallRow {
            part: key.part,
            op: key.op,
            order: key.order,
            size: key.size,
            processes: key.processes,
            transport: key.transport,
            method: key.method,
            ops_s: ops_s.median,
            ops_s_min: ops_s.min,
            ops_s_max: ops_s.max,
            mib_s: mib_s.median,
            p50_us: percentile(&sorted, 0.5),
            p99_us: percentile(&sorted, 0.99),
            ops: row.ops,
            vs_local_file: None,
            p50_vs_floor: None,
            p50_vs_socket: None,
            repetitions,
        });
    }
    let ratios: Vec<_> = rows
        .iter()
        .map(|row| {
            let find = |part: &str, op: &str, order: &str, size, processes, transport: &str| {
                rows.iter().find(|other| {
                    other.part == part
                        && other.op == op
                        && other.order == order
                        && other.size == size
                        && other.processes == processes
                        && other.transport == transport
                })
            };
            let local = if row.part == "many-small-mpi" {
                rows.iter().find(|other| {
                    other.part == row.part
                        && other.size == row.size
                        && other.transport == row.transport
                        && other.method == mpi::Way::Local.method()
                })
            } else {
                find(row.part, row.op, row.order, row.size, row.processes, "-")
            };
            let floor = find("floor", "ping", "-", 0, row.processes, row.transport);
            let socket = find("socket", "round-trip", "-", row.size, 1, row.transport)
                .filter(|_| row.processes == 1);
            (
                local.map(|local| row.ops_s / local.ops_s),
                floor.map(|floor| row.p50_us / floor.p50_us),
                socket.map(|socket| row.p50_us / socket.p50_us),
            )
        })
        .collect();
    for (row, (local, floor, socket)) in rows.iter_mut().zip(ratios) {
        if row.part == "many-small-mpi" {
            row.vs_local_file = local.filter(|_| row.method != mpi::Way::Local.method());
        }
        if row.part == "calls" || row.part == "many-small" {
            row.vs_local_file = local.filter(|_| row.method != Method::LocalFile.name());
            row.p50_vs_floor = floor.filter(|ratio| ratio.is_finite());
            row.p50_vs_socket = socket.filter(|ratio| ratio.is_finite());
        }
    }
    Ok(rows)
}

fn opt_ratio(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "-".to_owned(), |ratio| format!("{ratio:.2}x"))
}

/// The tables: per process count and transport, each call's ops/s and p50 by method and
/// its ratios; then many-small's times.
fn text(report: &Report<SmallRow>) -> Result<String, String> {
    let mut out = String::new();
    calls_tables(report, &mut out)?;
    many_small_table(report, &mut out)?;
    many_small_mpi_table(report, &mut out);
    let _ = writeln!(out, "verified: {}", report.verified);
    Ok(out)
}

/// Per process count and transport: every call size, operation and order, Tessera (plain
/// and cached) against a local file and the floor.
fn calls_tables(report: &Report<SmallRow>, out: &mut String) -> Result<(), String> {
    for &processes in &PROCESS_COUNTS {
        for transport in Transport::BOTH {
            let floor = report.row(
                &case("floor", "ping", "-", 0, processes, transport.name()),
                "floor",
            )?;
            let mut table = report::table([
                "call",
                "tessera op/s",
                "cached op/s",
                "local op/s",
                "tessera/local",
                "tessera p50 us",
                "p50/floor",
                "p50/socket",
                "cached p50 us",
                "cached p50/floor",
            ]);
            for &size in &SIZES {
                for op in ["read", "write"] {
                    for order in ["seq", "random"] {
                        let key = case("calls", op, order, size, processes, transport.name());
                        let local = case("calls", op, order, size, processes, "-");
                        let tessera = report.row(&key, "tessera")?;
                        let cached = report.row(&key, "tessera-cached")?;
                        let local = report.row(&local, "local-file")?;
                        table.add_row([
                            format!("{op} {size} B {order}"),
                            report::cell(tessera.ops_s, 0),
                            report::cell(cached.ops_s, 0),
                            report::cell(local.ops_s, 0),
                            report::ratio(tessera.ops_s, local.ops_s),
                            report::cell(tessera.p50_us, 1),
                            opt_ratio(tessera.p50_vs_floor),
                            opt_ratio(tessera.p50_vs_socket),
                            report::cell(cached.p50_us, 1),
                            opt_ratio(cached.p50_vs_floor),
                        ]);
                    }
                }
            }
            let _ = write!(
                out,
                "small: {processes} process(es) over {} (median of {} repetitions; floor: ping p50 {:.1} us)\n{table}\n",
                transport.name(),
                report.meta.repetitions,
                floor.p50_us,
            );
        }
    }
    Ok(())
}

/// Many small writes, open to close: the local file against Tessera's four ways.
fn many_small_table(report: &Report<SmallRow>, out: &mut String) -> Result<(), String> {
    let mut table = report::table([
        "pieces",
        "processes",
        "local ms",
        "tessera local ms",
        "cached local ms",
        "tessera tcp ms",
        "cached tcp ms",
        "best/local",
    ]);
    for &processes in &PROCESS_COUNTS {
        for &piece in &PIECES {
            let time = |transport: &str, method: Method| -> Result<f64, String> {
                let row = report.row(
                    &case("many-small", "write", "-", piece, processes, transport),
                    method.name(),
                )?;
                Ok(row.ops as f64 / row.ops_s * 1e3)
            };
            let local = time("-", Method::LocalFile)?;
            let times = [
                time("local", Method::Tessera(Transport::Local))?,
                time("local", Method::Cached(Transport::Local))?,
                time("tcp", Method::Tessera(Transport::Tcp))?,
                time("tcp", Method::Cached(Transport::Tcp))?,
            ];
            let best = times.iter().copied().fold(f64::INFINITY, f64::min);
            table.add_row([
                format!("{piece} B"),
                processes.to_string(),
                report::cell(local, 2),
                report::cell(times[0], 2),
                report::cell(times[1], 2),
                report::cell(times[2], 2),
                report::cell(times[3], 2),
                report::ratio(best, local),
            ]);
        }
    }
    let _ = writeln!(
        out,
        "many-small: each process writes its pieces one call each, open to close (median ms)\n{table}"
    );
    Ok(())
}

/// Many small writes through MPI-IO, per MPI that ran: its own MPI-IO on a local file
/// against the Tessera library, plain and writing back.
fn many_small_mpi_table(report: &Report<SmallRow>, out: &mut String) {
    let mut table = report::table([
        "MPI",
        "pieces",
        "MPI's MPI-IO, local file ms",
        "Tessera MPI-IO ms",
        "Tessera write-back ms",
        "write-back/local",
    ]);
    let mut any = false;
    for mpi in ["mpich", "openmpi"] {
        for &piece in &PIECES {
            let key = case(
                "many-small-mpi",
                "write",
                "-",
                piece,
                mpi::PROCESSES as usize,
                mpi,
            );
            let time = |way: mpi::Way| {
                report
                    .row(&key, way.method())
                    .ok()
                    .map(|row| row.ops as f64 / row.ops_s * 1e3)
            };
            let (Some(local), Some(through), Some(cached)) = (
                time(mpi::Way::Local),
                time(mpi::Way::Tessera),
                time(mpi::Way::WriteBack),
            ) else {
                continue;
            };
            any = true;
            table.add_row([
                mpi.to_owned(),
                format!("{piece} B"),
                report::cell(local, 2),
                report::cell(through, 2),
                report::cell(cached, 2),
                report::ratio(cached, local),
            ]);
        }
    }
    if any {
        let _ = writeln!(
            out,
            "many-small through MPI-IO: {} processes, open to close, the slowest (median ms)\n{table}",
            mpi::PROCESSES
        );
    }
}

/// p50 latency by size, one panel per transport (1 process, sequential).
fn figure(report: &Report<SmallRow>) -> Figure {
    let sizes: Vec<String> = SIZES.iter().map(|size| format!("{size} B")).collect();
    let mut panels = Vec::new();
    for transport in Transport::BOTH {
        let mut panel = Panel::categorical(
            &format!("1 process over {}", transport.name()),
            ("call size", sizes.iter().cloned()),
            ("p50 latency, us", Scale::Log10),
        );
        let mut line = |name: String, rows: Vec<Option<&SmallRow>>| {
            let points: Vec<Point> = rows
                .into_iter()
                .enumerate()
                .filter_map(|(x, row)| {
                    row.map(|row| Point {
                        x: x as f64,
                        y: Spread {
                            min: row.p50_us,
                            median: row.p50_us,
                            max: row.p50_us,
                        },
                    })
                })
                .collect();
            if !points.is_empty() {
                panel.lines.push(Line { name, points });
            }
        };
        for op in ["read", "write"] {
            for (method, column) in [
                ("tessera", transport.name()),
                ("tessera-cached", transport.name()),
                ("local-file", "-"),
            ] {
                let rows = SIZES
                    .iter()
                    .map(|&size| {
                        report
                            .row(&case("calls", op, "seq", size, 1, column), method)
                            .ok()
                    })
                    .collect();
                line(format!("{op} {method}"), rows);
            }
        }
        let floor = report
            .row(&case("floor", "ping", "-", 0, 1, transport.name()), "floor")
            .ok();
        line(
            "floor (ping)".to_owned(),
            SIZES.iter().map(|_| floor).collect(),
        );
        let socket = SIZES
            .iter()
            .map(|&size| {
                report
                    .row(
                        &case("socket", "round-trip", "-", size, 1, transport.name()),
                        "socket",
                    )
                    .ok()
            })
            .collect();
        line("bare socket".to_owned(), socket);
        panels.push(panel);
    }
    Figure {
        stem: "small".to_owned(),
        title: format!(
            "small: p50 latency of one call, Tessera / local file / floor (median of {} runs)",
            report.meta.repetitions
        ),
        panels,
    }
}
