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
//! turns into rows.

use std::fmt::Write as _;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tessera_client::collective::SOCKET_WAIT_DEFAULT;
use tessera_client::{
    Client, ClientOptions, ClusterConfig, CollectiveMethod, CollectiveOptions, Communicator,
    CreateOptions, Datatype, ErrorCode, IoReport, OpenMode, SocketCommunicator, ViewedFile,
};

use super::{median, mib_s, BenchCluster, CommonArgs, Report, Row};
use crate::plot::{Plot, Series};

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

/// One measurement, as rank 0 reports it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Measured {
    count: u64,
    write: bool,
    method: String,
    seconds: f64,
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
                        seconds: median(&samples[index]),
                        iterations,
                        requests: figures[index].0,
                        storage_calls: figures[index].1,
                        verified: verified[index],
                    };
                    println!(
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
    let exe = std::env::current_exe().map_err(|err| format!("cannot find tessera: {err}"))?;
    let text = serde_json::to_string(plan).map_err(|err| err.to_string())?;
    let mut children = Vec::with_capacity(plan.processes);
    for rank in 0..plan.processes {
        let child = Command::new(&exe)
            .args(["ecio-worker", "--rank", &rank.to_string(), "--plan", &text])
            .stdin(Stdio::null())
            .stdout(if rank == 0 {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|err| format!("cannot start ecio worker {rank}: {err}"))?;
        children.push(child);
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

/// Runs the experiment and returns its report.
pub fn run(args: &EcioArgs) -> Result<Report, String> {
    let common = &args.common;
    if args.counts.len() > COUNTS_MAX {
        return Err(format!(
            "--counts lists {} counts, more than {COUNTS_MAX} (COUNTS_MAX)",
            args.counts.len()
        ));
    }
    let cluster = BenchCluster::open(common.cluster.as_deref(), SERVERS)?;
    let config = ClusterConfig::load(&cluster.file).map_err(|err| err.to_string())?;
    let client = Client::new(&config, &ClientOptions::default());
    match client.mkdir("/bench", 0o755) {
        Ok(_) => {}
        Err(err) if err.code() == Some(ErrorCode::Exists) => {}
        Err(err) => return Err(format!("mkdir /bench: {err}")),
    }
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
            let op = if one.write { "write" } else { "read" };
            let bytes = one.count * INT;
            let two_phase = measured
                .iter()
                .find(|other| {
                    other.count == one.count
                        && other.write == one.write
                        && other.method == CollectiveMethod::TwoPhase.name()
                })
                .map_or(f64::NAN, |other| other.seconds);
            rows.push(Row {
                case: format!("{op} m={processes} count={}", one.count),
                method: one.method.clone(),
                mib_s: mib_s(bytes, one.seconds),
                requests: one.requests,
                pieces: one.storage_calls,
                bytes,
                seconds: one.seconds,
                extra: json!({
                    "processes": processes,
                    "count": one.count,
                    "iterations": one.iterations,
                    "repetitions": repetitions,
                    "speedup_vs_two_phase": two_phase / one.seconds,
                    "improvement_pct": (two_phase - one.seconds) / two_phase * 100.0,
                }),
                skipped: None,
            });
        }
    }
    let _ = std::fs::remove_dir_all(&meeting);
    let report = Report {
        bench: "ecio".to_owned(),
        quick: common.quick,
        config: json!({
            "servers": SERVERS,
            "clients": PROCESS_COUNTS,
            "transport": "local (one-sided where the servers allow, else tcp)",
            "communicator": "unix sockets between client processes",
            "pattern": "interleaved ints, block length 1 (seed 004 Fig. 3)",
            "counts": counts,
            "two_phase_cb_nodes": "all processes",
            "cb_buffer_bytes": tessera_client::collective::CB_BUFFER_BYTES_DEFAULT,
        }),
        verified,
        rows,
    };
    let table = table(&report, &counts);
    if common.json {
        eprint!("{table}");
    } else {
        print!("{table}");
        write_outputs(common, &report, &counts)?;
    }
    Ok(report)
}

fn seconds_of(report: &Report, case: &str, method: CollectiveMethod) -> f64 {
    report
        .rows
        .iter()
        .find(|row| row.case == case && row.method == method.name())
        .map_or(f64::NAN, |row| row.seconds)
}

fn table(report: &Report, counts: &[u64]) -> String {
    let mut out = String::new();
    for (op, processes, paper) in PAPER_IMPROVEMENT {
        let _ = writeln!(
            out,
            "ecio: noncontiguous data {op}: {processes} clients + 1 server (seed 004 Table {}; ms per collective call)",
            match (op, processes) {
                ("write", 2) => 1,
                ("write", _) => 2,
                ("read", 2) => 3,
                _ => 4,
            }
        );
        let _ = writeln!(
            out,
            "{:>9} {:>10} {:>12} {:>12} {:>9} {:>9} {:>10}",
            "count", "file KiB", "two_phase", "server_dir", "speedup", "improve", "paper"
        );
        for &count in counts {
            let paper = COUNTS
                .iter()
                .position(|&c| c == count)
                .map_or_else(|| "-".to_owned(), |index| format!("{:.1}%", paper[index]));
            let case = format!("{op} m={processes} count={count}");
            let two_phase = seconds_of(report, &case, CollectiveMethod::TwoPhase);
            let server = seconds_of(report, &case, CollectiveMethod::ServerDirected);
            let _ = writeln!(
                out,
                "{count:>9} {:>10.1} {:>12.3} {:>12.3} {:>8.2}x {:>8.1}% {paper:>10}",
                (count * INT) as f64 / 1024.0,
                two_phase * 1e3,
                server * 1e3,
                two_phase / server,
                (two_phase - server) / two_phase * 100.0,
            );
        }
    }
    let _ = writeln!(
        out,
        "paper (InfiniBand, PVFS2, 100 calls per point): ECIO 5-24 % faster than MPI collective I/O; the gap grows with the count for 2 clients and shrinks with more clients"
    );
    let _ = writeln!(out, "verified: {}", report.verified);
    out
}

fn write_outputs(common: &CommonArgs, report: &Report, counts: &[u64]) -> Result<(), String> {
    std::fs::create_dir_all(&common.out)
        .map_err(|err| format!("cannot create {}: {err}", common.out.display()))?;
    let mut csv = String::from("case,method,mib_s,requests,pieces,bytes,seconds\n");
    for row in &report.rows {
        let _ = writeln!(
            csv,
            "{},{},{:.3},{},{},{},{:.9}",
            row.case, row.method, row.mib_s, row.requests, row.pieces, row.bytes, row.seconds
        );
    }
    let csv_path = common.out.join("ecio.csv");
    std::fs::write(&csv_path, csv)
        .map_err(|err| format!("cannot write {}: {err}", csv_path.display()))?;
    let mut series = Vec::new();
    for op in ["write", "read"] {
        for processes in PROCESS_COUNTS {
            for method in METHODS {
                let points = counts
                    .iter()
                    .map(|&count| {
                        let case = format!("{op} m={processes} count={count}");
                        let seconds = seconds_of(report, &case, method);
                        (count as f64, mib_s(count * INT, seconds))
                    })
                    .collect();
                // Short names: the legend cuts at 13 characters.
                let short = match method {
                    CollectiveMethod::TwoPhase => "two-phase",
                    _ => "server-dir",
                };
                series.push(Series {
                    name: format!("{}{processes} {short}", &op[..1]),
                    points,
                });
            }
        }
    }
    let plot = Plot {
        title: "ecio: 1 server, interleaved ints (w/r = write/read, 2/4 clients)".to_owned(),
        x_label: "count (ints in the file)".to_owned(),
        y_label: "MiB/s".to_owned(),
        log2_x: true,
        series,
    };
    let png_path = super::write_plot(common, "ecio.png", &plot)?;
    super::report_written(&[csv_path, png_path]);
    Ok(())
}
