//! `tessera bench ecio` (seed 004 Tables 1–4): two-phase vs server-directed collective I/O.
//!
//! One I/O server; 2 and 4 client processes (separate OS processes, `tessera ecio-worker`,
//! talking through a [`SocketCommunicator`]) share a file of `count` ints interleaved one by
//! one — the paper's `MPI_Type_struct` with block lengths 1 and stride `m`: process `p` owns
//! ints `p, p + m, p + 2m, ...` — and write it, then read it, with `write_all`/`read_all`.
//! Each (count, direction) measures both methods in the same run, alternating their order
//! from one repetition to the next: `two_phase` with every process an aggregator (as in the
//! paper) and `server_directed`. A measurement is a barrier, `iterations` collective calls, a
//! barrier; its time per call is the figure. Outside the timing, every write is checked by
//! reading the whole file back against the model, and every read by each process against
//! what was last written.
//!
//! The workers are started by the parent with their plan on the command line; rank 0 prints
//! one JSON line per (count, direction, method) on its standard output, which the parent
//! turns into one [`EcioRow`] each: the median over the repetitions and its range.

use std::fmt::Write as _;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tessera_client::collective::SOCKET_WAIT_DEFAULT;
use tessera_client::{
    Client, ClientOptions, ClusterConfig, CollectiveMethod, CollectiveOptions, Communicator,
    CreateOptions, Datatype, IoReport, OpenMode, SocketCommunicator, ViewedFile,
};
use tessera_cluster::outln;

use super::CommonArgs;
use crate::report::{
    self, Direction, Figure, Line, Measure, Meta, Outcome, Panel, Report, Scale, SecondsRange,
    Spread,
};

const SERVERS: u16 = 1;
const PROCESS_COUNTS: [usize; 2] = [2, 4];
/// The paper's counts (×10³ ints in the file): 4k .. 1M; `--quick` stops at 64k.
const COUNTS: [u64; 9] = [
    4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 512_000, 1_024_000,
];
const QUICK_COUNTS: usize = 5;
/// The most ints `--counts` may give one file (64 MiB).
const COUNT_MAX: u64 = 16 << 20;
/// The most counts `--counts` may list.
const COUNTS_MAX: usize = 64;
/// The most `--repetitions`.
const REPETITIONS_MAX: u64 = 100;
/// The most `--iterations`.
const ITERATIONS_MAX: i64 = 1000;
const INT: u64 = 4;
const METHODS: [CollectiveMethod; 2] =
    [CollectiveMethod::TwoPhase, CollectiveMethod::ServerDirected];

/// The paper's improvement of ECIO over collective I/O, percent, per count (Tables 1–4).
const PAPER_IMPROVEMENT: [(&str, usize, [f64; 9]); 4] = [
    (
        "write",
        2,
        [10.3, 8.8, 11.3, 11.0, 15.0, 13.3, 14.6, 15.8, 15.7],
    ),
    (
        "write",
        4,
        [11.3, 10.9, 16.2, 12.6, 7.6, 5.3, 5.2, 6.2, 5.9],
    ),
    (
        "read",
        2,
        [9.0, 9.4, 11.5, 16.0, 19.4, 20.9, 22.8, 23.8, 23.9],
    ),
    ("read", 4, [6.6, 7.2, 10.8, 12.4, 11.9, 9.2, 8.7, 7.5, 8.2]),
];

/// Arguments of `tessera-bench ecio`.
#[derive(Debug, Clone, clap::Args)]
pub struct EcioArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Ints in the file, comma-separated, each a multiple of 4 (so that 2 and 4 processes
    /// share it evenly) and at most 16M (default: the paper's 4000..1024000; --quick: up to
    /// 64000). `--counts 4000,64000 --repetitions 1 --iterations 1` checks every row's data
    /// and figures in seconds, without meaningful timings.
    #[arg(long, value_delimiter = ',', value_parser = parse_count)]
    pub counts: Vec<u64>,
    /// Measurements of each (count, direction, method), median reported (default: 5 with
    /// --quick, else 3; at most 100).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=REPETITIONS_MAX))]
    pub repetitions: Option<u64>,
    /// Collective calls per measurement (default: 2,000,000 / count, between 3 and 50; at
    /// most 1000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=ITERATIONS_MAX))]
    pub iterations: Option<u32>,
}

/// One `--counts` entry: a positive multiple of 4 ints, at most [`COUNT_MAX`].
fn parse_count(text: &str) -> Result<u64, String> {
    let count: u64 = text
        .trim()
        .parse()
        .map_err(|err| format!("{text:?} is not a count of ints: {err}"))?;
    if count == 0 || !count.is_multiple_of(4) {
        return Err(format!(
            "{count} ints cannot be shared evenly by 2 and 4 processes: give a positive multiple of 4"
        ));
    }
    if count > COUNT_MAX {
        return Err(format!(
            "{count} ints is more than {COUNT_MAX} (COUNT_MAX, 64 MiB)"
        ));
    }
    Ok(count)
}

/// Arguments of the hidden `tessera ecio-worker` command.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// Rank among the workers.
    #[arg(long)]
    rank: usize,
    /// The plan, as JSON.
    #[arg(long)]
    plan: String,
}

/// What every worker of one group runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Plan {
    /// Calls per measurement (0: by the count, [`iterations`]).
    iterations: u32,
    cluster: PathBuf,
    path: String,
    /// Where the workers' sockets meet.
    meeting: PathBuf,
    processes: usize,
    counts: Vec<u64>,
    repetitions: usize,
}

/// The measurements of one (count, direction, method), as rank 0 reports them.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Measured {
    count: u64,
    write: bool,
    method: String,
    /// Seconds per call, one per repetition.
    samples: Vec<f64>,
    iterations: u32,
    requests: u64,
    storage_calls: u64,
    verified: bool,
}

/// Calls per measurement: enough that the smallest counts are not all noise.
fn iterations(count: u64) -> u32 {
    u32::try_from((2_000_000 / count).clamp(3, 50)).expect("small")
}

fn options(method: CollectiveMethod, processes: usize) -> CollectiveOptions {
    CollectiveOptions {
        method,
        // The paper's two-phase: every client is an aggregator.
        cb_nodes: Some(processes),
        ..CollectiveOptions::default()
    }
}

/// Process `rank`'s file type: one int of every `processes`.
fn filetype(rank: usize, processes: usize) -> Datatype {
    let int = Datatype::bytes(INT).expect("int");
    let mine = Datatype::hindexed(
        &[1],
        &[i64::try_from(rank as u64 * INT).expect("small")],
        &int,
    )
    .expect("hindexed");
    Datatype::resized(
        0,
        i64::try_from(processes as u64 * INT).expect("small"),
        &mine,
    )
    .expect("resized")
}

fn value(rank: usize, index: u64, salt: u32) -> u32 {
    (u32::try_from(rank).expect("small") << 24) ^ u32::try_from(index).expect("small") ^ salt
}

fn data(rank: usize, ints: u64, salt: u32) -> Vec<u8> {
    (0..ints)
        .flat_map(|k| value(rank, k, salt).to_le_bytes())
        .collect()
}

/// Runs one worker: joins the group, then every measurement of the plan.
pub fn run_worker(args: &WorkerArgs) -> Result<(), String> {
    let plan: Plan = serde_json::from_str(&args.plan).map_err(|err| format!("plan: {err}"))?;
    let rank = args.rank;
    let group = SocketCommunicator::join(&plan.meeting, rank, plan.processes, SOCKET_WAIT_DEFAULT)
        .map_err(|err| err.to_string())?;
    let config = ClusterConfig::load(&plan.cluster).map_err(|err| err.to_string())?;
    let client = Client::new(&config, &ClientOptions::default());
    let file = client
        .open(&plan.path, OpenMode::ReadWrite)
        .map_err(|err| format!("open {}: {err}", plan.path))?;
    let mut viewed = ViewedFile::new(file);
    viewed
        .set_view(0, &filetype(rank, plan.processes))
        .map_err(|err| err.to_string())?;
    let int = Datatype::bytes(INT).expect("int");
    let fail = |err: tessera_client::ClientError| err.to_string();
    let mut salt = 0u32;
    for &count in &plan.counts {
        let ints = count / plan.processes as u64;
        let iterations = if plan.iterations > 0 {
            plan.iterations
        } else {
            iterations(count)
        };
        let mut last_salt = 0;
        for write in [true, false] {
            let mut samples = vec![Vec::new(); METHODS.len()];
            let mut figures = vec![(0u64, 0u64); METHODS.len()];
            let mut verified = vec![true; METHODS.len()];
            for repetition in 0..plan.repetitions {
                for turn in 0..METHODS.len() {
                    let index = (turn + repetition) % METHODS.len();
                    let options = options(METHODS[index], plan.processes);
                    salt += 1;
                    let memory = if write {
                        data(rank, ints, salt)
                    } else {
                        Vec::new()
                    };
                    let mut back = vec![0u8; usize::try_from(ints * INT).expect("small")];
                    let mut report = IoReport::default();
                    group.barrier().map_err(fail)?;
                    let started = Instant::now();
                    for _ in 0..iterations {
                        report = if write {
                            viewed.write_all(&group, &options, 0, &memory, &int, ints)
                        } else {
                            viewed.read_all(&group, &options, 0, &mut back, &int, ints)
                        }
                        .map_err(fail)?;
                    }
                    group.barrier().map_err(fail)?;
                    let seconds = started.elapsed().as_secs_f64() / f64::from(iterations);
                    samples[index].push(seconds);
                    // Outside the timing: the figures of one call and the check.
                    let mut mine = Vec::with_capacity(16);
                    mine.extend_from_slice(&report.requests.to_le_bytes());
                    mine.extend_from_slice(&report.storage_pieces.to_le_bytes());
                    let ok = if write {
                        last_salt = salt;
                        rank != 0 || check_file(&viewed, plan.processes, count, salt)?
                    } else {
                        back == data(rank, ints, last_salt)
                    };
                    mine.push(u8::from(ok));
                    let all = group.allgather(&mine).map_err(fail)?;
                    let requests = all
                        .iter()
                        .map(|m| u64::from_le_bytes(m[0..8].try_into().expect("8")))
                        .sum();
                    let calls = all
                        .iter()
                        .map(|m| u64::from_le_bytes(m[8..16].try_into().expect("8")))
                        .sum();
                    figures[index] = (requests, calls);
                    verified[index] &= all.iter().all(|m| m[16] == 1);
                }
            }
            if rank == 0 {
                for (index, method) in METHODS.iter().enumerate() {
                    let measured = Measured {
                        count,
                        write,
                        method: method.name().to_owned(),
                        samples: samples[index].clone(),
                        iterations,
                        requests: figures[index].0,
                        storage_calls: figures[index].1,
                        verified: verified[index],
                    };
                    outln!(
                        "{}",
                        serde_json::to_string(&measured).map_err(|err| err.to_string())?
                    );
                }
            }
        }
    }
    viewed.close().map_err(|err| err.to_string())
}

/// Reads the whole file plainly and checks every process's ints (rank 0, untimed).
fn check_file(
    viewed: &ViewedFile,
    processes: usize,
    count: u64,
    salt: u32,
) -> Result<bool, String> {
    let mut bytes = vec![0u8; usize::try_from(count * INT).expect("small")];
    viewed
        .file()
        .read_at(0, &mut bytes)
        .map_err(|err| err.to_string())?;
    Ok(bytes.chunks(4).enumerate().all(|(slot, int)| {
        let (rank, index) = (slot % processes, (slot / processes) as u64);
        int == value(rank, index, salt).to_le_bytes()
    }))
}

/// Starts `plan.processes` workers and collects rank 0's measurements.
fn run_group(plan: &Plan) -> Result<Vec<Measured>, String> {
    let text = serde_json::to_string(plan).map_err(|err| err.to_string())?;
    let mut children = Vec::with_capacity(plan.processes);
    for rank in 0..plan.processes {
        children.push(super::spawn_worker(
            super::worker_command()?
                .args(["ecio-worker", "--rank", &rank.to_string(), "--plan", &text])
                .stdin(Stdio::null()),
            "ecio",
            rank,
        )?);
    }
    let mut measured = Vec::new();
    let stdout = children[0].stdout.take().expect("piped");
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.map_err(|err| format!("ecio worker 0: {err}"))?;
        measured.push(
            serde_json::from_str(&line)
                .map_err(|err| format!("ecio worker 0 said {line:?}: {err}"))?,
        );
    }
    let mut failures = Vec::new();
    for (rank, mut child) in children.into_iter().enumerate() {
        let status = child.wait().map_err(|err| err.to_string())?;
        if !status.success() {
            failures.push(format!("ecio worker {rank} exited with {status}"));
        }
    }
    if !failures.is_empty() {
        return Err(failures.join("; "));
    }
    Ok(measured)
}

/// Runs the experiment and writes its report.
pub fn run(args: &EcioArgs) -> Result<Outcome, String> {
    let common = &args.common;
    if args.counts.len() > COUNTS_MAX {
        return Err(format!(
            "--counts lists {} counts, more than {COUNTS_MAX} (COUNTS_MAX)",
            args.counts.len()
        ));
    }
    let (cluster, client) = super::open_cluster(common, SERVERS)?;
    let counts: Vec<u64> = if !args.counts.is_empty() {
        args.counts.clone()
    } else if common.quick {
        COUNTS[..QUICK_COUNTS].to_vec()
    } else {
        COUNTS.to_vec()
    };
    let repetitions = match args.repetitions {
        Some(repetitions) => usize::try_from(repetitions).map_err(|err| err.to_string())?,
        None if common.quick => 5,
        None => 3,
    };
    let meeting = std::env::temp_dir().join(format!("tessera-ecio-{}", std::process::id()));
    std::fs::create_dir_all(&meeting)
        .map_err(|err| format!("cannot create {}: {err}", meeting.display()))?;
    let mut rows = Vec::new();
    let mut verified = true;
    for processes in PROCESS_COUNTS {
        let path = format!("/bench/ecio-{}-{processes}", std::process::id());
        client
            .create(
                &path,
                &CreateOptions {
                    server_count: SERVERS,
                    ..CreateOptions::default()
                },
            )
            .map_err(|err| format!("create {path}: {err}"))?;
        let plan = Plan {
            iterations: args.iterations.unwrap_or(0),
            cluster: cluster.file.clone(),
            path: path.clone(),
            meeting: meeting.clone(),
            processes,
            counts: counts.clone(),
            repetitions,
        };
        eprintln!("bench ecio: {processes} processes, counts {counts:?}");
        let measured = run_group(&plan);
        let _ = client.unlink(&path);
        let measured = match measured {
            Ok(measured) => measured,
            Err(err) => {
                let _ = std::fs::remove_dir_all(&meeting);
                return Err(err);
            }
        };
        for one in &measured {
            verified &= one.verified;
            rows.push(row(processes, repetitions, one, &measured)?);
        }
    }
    let _ = std::fs::remove_dir_all(&meeting);
    let report = Report {
        bench: "ecio",
        quick: common.quick,
        meta: Meta::now(repetitions),
        config: json!({
            "servers": SERVERS,
            "clients": PROCESS_COUNTS,
            "transport": "local (one-sided where the servers allow, else tcp)",
            "communicator": "unix sockets between client processes",
            "pattern": "interleaved ints, block length 1 (seed 004 Fig. 3)",
            "counts": counts,
            "repetitions": repetitions,
            "iterations": args.iterations.map_or_else(|| json!("2,000,000 / count, between 3 and 50"), |calls| json!(calls)),
            "two_phase_cb_nodes": "all processes",
            "cb_buffer_bytes": tessera_client::collective::CB_BUFFER_BYTES_DEFAULT,
        }),
        verified,
        rows,
    };
    report.finish(
        common,
        &text(&report, &counts)?,
        &[figure(&report, &counts)?],
    )
}

/// One (direction, processes, count, method) of ecio: seconds per collective call and MiB/s,
/// medians over the repetitions with their ranges, and the figures of one call.
#[derive(Debug, Clone, Serialize)]
pub struct EcioRow {
    /// Writes or reads.
    pub direction: Direction,
    /// Client processes.
    pub processes: usize,
    /// Ints in the file.
    pub count: u64,
    /// The collective method.
    pub method: &'static str,
    /// MiB/s of one call and seconds per collective call, medians over the repetitions.
    #[serde(flatten)]
    pub measure: Measure,
    /// The range of the seconds per call.
    #[serde(flatten)]
    pub range: SecondsRange,
    /// Client requests of one call, all processes.
    pub requests: u64,
    /// Storage calls the server made for one call.
    pub pieces: u64,
    /// Bytes of one call (the whole file).
    pub bytes: u64,
    /// Median two_phase seconds over this method's.
    pub speedup_vs_two_phase: f64,
    /// How much less time than two_phase this method took, percent of two_phase's.
    pub improvement_pct: f64,
    /// The paper's improvement of ECIO over collective I/O at this count (Tables 1-4).
    pub paper_improvement_pct: Option<f64>,
    /// Collective calls per measurement.
    pub iterations: u32,
    /// Measurements.
    pub repetitions: usize,
    /// Every call's data checked right.
    pub verified: bool,
}

impl report::Row for EcioRow {
    fn key(&self) -> (String, &str) {
        (
            case(self.direction, self.processes, self.count),
            self.method,
        )
    }
}

/// The case label of a row.
fn case(direction: Direction, processes: usize, count: u64) -> String {
    format!("{direction}, {processes} clients, {count} ints")
}

/// The row of `one`, compared with the two_phase measurement of the same case in `all`.
fn row(
    processes: usize,
    repetitions: usize,
    one: &Measured,
    all: &[Measured],
) -> Result<EcioRow, String> {
    let direction = if one.write {
        Direction::Write
    } else {
        Direction::Read
    };
    let label = case(direction, processes, one.count);
    let method = METHODS
        .iter()
        .map(|method| method.name())
        .find(|&name| name == one.method)
        .ok_or_else(|| {
            format!(
                "bench ecio: {label}: the workers measured an unknown method {:?}",
                one.method
            )
        })?;
    let seconds = Spread::of(&one.samples)
        .map_err(|err| format!("bench ecio: case \"{label}\", method \"{method}\": {err}"))?;
    let two_phase_name = CollectiveMethod::TwoPhase.name();
    let two_phase = all
        .iter()
        .find(|other| {
            other.count == one.count && other.write == one.write && other.method == two_phase_name
        })
        .ok_or_else(|| {
            format!("bench ecio: no row for case \"{label}\", method \"{two_phase_name}\"")
        })?;
    let two_phase = Spread::of(&two_phase.samples)
        .map_err(|err| format!("bench ecio: case \"{label}\", method \"{two_phase_name}\": {err}"))?
        .median;
    let bytes = one.count * INT;
    let paper = PAPER_IMPROVEMENT
        .iter()
        .find(|(op, clients, _)| *op == direction.to_string() && *clients == processes)
        .and_then(|(_, _, percents)| {
            COUNTS
                .iter()
                .position(|&count| count == one.count)
                .map(|index| percents[index])
        });
    Ok(EcioRow {
        direction,
        processes,
        count: one.count,
        method,
        measure: Measure::of_seconds(seconds, bytes),
        range: SecondsRange::of(seconds),
        requests: one.requests,
        pieces: one.storage_calls,
        bytes,
        speedup_vs_two_phase: two_phase / seconds.median,
        improvement_pct: (two_phase - seconds.median) / two_phase * 100.0,
        paper_improvement_pct: paper,
        iterations: one.iterations,
        repetitions,
        verified: one.verified,
    })
}

/// The paper's four tables, ours beside its improvement, and notes.
fn text(report: &Report<EcioRow>, counts: &[u64]) -> Result<String, String> {
    let mut out = String::new();
    for (table_number, (op, processes, _)) in PAPER_IMPROVEMENT.iter().enumerate() {
        let direction = if *op == "write" {
            Direction::Write
        } else {
            Direction::Read
        };
        let mut table = report::table([
            "count",
            "file KiB",
            "two_phase ms",
            "server_dir ms",
            "speedup",
            "improve",
            "paper",
        ]);
        for &count in counts {
            let label = case(direction, *processes, count);
            let two_phase = report.row(&label, CollectiveMethod::TwoPhase.name())?;
            let server = report.row(&label, CollectiveMethod::ServerDirected.name())?;
            table.add_row([
                count.to_string(),
                report::cell((count * INT) as f64 / 1024.0, 1),
                report::cell(two_phase.measure.seconds * 1e3, 3),
                report::cell(server.measure.seconds * 1e3, 3),
                report::ratio(two_phase.measure.seconds, server.measure.seconds),
                format!("{:.1}%", server.improvement_pct),
                server
                    .paper_improvement_pct
                    .map_or_else(|| "-".to_owned(), |percent| format!("{percent:.1}%")),
            ]);
        }
        let _ = writeln!(out,
            "ecio: noncontiguous data {op}: {processes} clients + 1 server (seed 004 Table {}; ms per collective call, median)\n{table}",
            table_number + 1
        );
    }
    out.push_str("paper (InfiniBand, PVFS2, 100 calls per point): ECIO 5-24 % faster than MPI collective I/O; the gap grows with the count for 2 clients and shrinks with more clients\n");
    let _ = writeln!(out, "verified: {}", report.verified);
    Ok(out)
}

/// MiB/s against the count, writes and reads side by side, one line per (clients, method).
fn figure(report: &Report<EcioRow>, counts: &[u64]) -> Result<Figure, String> {
    let mut panels = Vec::new();
    for direction in Direction::BOTH {
        let mut panel = Panel::new(
            &format!("{direction}s, 1 server, interleaved ints"),
            ("count (ints in the file)", Scale::Log2),
            ("MiB/s", Scale::Linear),
        );
        for processes in PROCESS_COUNTS {
            for method in METHODS {
                let mut points = Vec::new();
                for &count in counts {
                    let row = report.row(&case(direction, processes, count), method.name())?;
                    points.push(row.measure.point(count as f64));
                }
                panel.lines.push(Line {
                    name: format!("{processes} clients, {}", method.name()),
                    points,
                });
            }
        }
        panels.push(panel);
    }
    Ok(Figure {
        stem: "ecio".to_owned(),
        title: "ecio (004 Tables 1-4): two-phase vs server-directed collective I/O".to_owned(),
        panels,
    })
}
