//! `tessera bench listio` (seed 000 Fig. 4, seed 001 Fig. 3.4).
//!
//! Four client processes share a file striped over four servers. Each writes, then reads back,
//! 128 pieces of one size (128 B .. 8 KiB): file pieces interleaved with the other processes,
//! memory pieces separated by gaps of the same size. The same list call runs with each
//! transfer mode — `multiple` (one message per piece), `pack` (one copy into one buffer) and
//! `gather` (`writev`/`readv` from the pieces) — interleaved within each repetition so the
//! machine's noise falls on all of them alike. Every read is verified byte by byte.

use std::fmt::Write as _;

use serde_json::json;
use tessera_client::{Client, ClientOptions, ClusterConfig, CreateOptions, ErrorCode};

use super::inproc::InProcessCluster;
use super::{median, mib_s, BenchCluster, CommonArgs, Report, Row};
use crate::plot::{Plot, Series};
use crate::workers::{Pattern, Task, Workers};

const PROCESSES: usize = 4;
const SERVERS: u16 = 4;
const PIECES: usize = 128;
const PIECE_SIZES: [usize; 7] = [128, 256, 512, 1024, 2048, 4096, 8192];

/// The compared methods: the mechanisms over the `local` backend (the servers move the data
/// one-sidedly), the transfer model's choice (`hybrid`), and the framed modes over TCP.
/// A worker reads a `tcp:` prefix as "reach the servers by TCP".
/// `eager` goes through each connection's eager buffer while a request fits it (64 KiB: here
/// up to 2 KiB pieces, 32 to a server) and packs above that.
const METHODS: [&str; 8] = [
    "multiple",
    "pack",
    "gather",
    "eager",
    "hybrid",
    "tcp:multiple",
    "tcp:pack",
    "tcp:gather",
];

/// One timed step: every worker makes `iterations` list calls of 128 pieces of
/// `piece_bytes` with `method`.
struct Step<'a> {
    cluster: &'a std::path::Path,
    path: &'a str,
    write: bool,
    method: &'a str,
    iterations: u32,
    generation: u64,
    piece_bytes: usize,
}

/// Per call, over all workers: requests, storage calls, bytes and messages.
type Counts = (u64, u64, u64, u64);

impl Step<'_> {
    /// Seconds per call (the slowest worker's), the per-call requests, storage calls, bytes
    /// and messages of all workers, and whether every read was right.
    fn run(&self, workers: &mut Workers) -> Result<(f64, Counts, bool), String> {
        let tasks = (0..PROCESSES)
            .map(|rank| Task {
                cluster: self.cluster.to_path_buf(),
                path: self.path.to_owned(),
                write: self.write,
                method: self.method.to_owned(),
                iterations: self.iterations,
                generation: self.generation,
                sync: false,
                pattern: Pattern::Interleaved {
                    rank,
                    processes: PROCESSES,
                    pieces: PIECES,
                    piece_bytes: self.piece_bytes,
                },
            })
            .collect();
        let (results, _) = workers.step(tasks)?;
        let verified = results.iter().all(|result| result.verified);
        let seconds = results
            .iter()
            .map(|result| result.seconds)
            .fold(0.0, f64::max);
        let per_call = |total: u64| total / u64::from(self.iterations);
        let counts = (
            per_call(results.iter().map(|r| r.requests).sum()),
            per_call(results.iter().map(|r| r.storage_pieces).sum()),
            per_call(results.iter().map(|r| r.bytes).sum()),
            per_call(results.iter().map(|r| r.messages).sum()),
        );
        Ok((seconds / f64::from(self.iterations), counts, verified))
    }
}

/// Piece sizes of the capability comparison (128 B is the acceptance figure: the smallest
/// pieces make the most requests per byte).
const CAPABILITY_PIECE_SIZES: [usize; 2] = [128, 2048];

/// The same gather list calls on servers with capability checks on and off
/// ([`InProcessCluster`]), the two interleaved within each repetition: the rows
/// `gather, capabilities checked` and `gather, capabilities unchecked`.
fn capability_rows(
    common: &CommonArgs,
    workers: &mut Workers,
    generation: &mut u64,
) -> Result<(Vec<Row>, bool), String> {
    let cluster = InProcessCluster::start(SERVERS)?;
    let config = ClusterConfig::load(&cluster.file).map_err(|err| err.to_string())?;
    let client = Client::new(&config, &ClientOptions::default());
    let path = "/listio-capabilities";
    client
        .create(path, &CreateOptions::default())
        .map_err(|err| format!("create {path}: {err}"))?;
    let repetitions = if common.quick { 9 } else { 15 };
    let mut rows = Vec::new();
    let mut verified = true;
    for piece_bytes in CAPABILITY_PIECE_SIZES {
        let call_bytes = PIECES * piece_bytes;
        let budget = if common.quick { 2 << 20 } else { 16 << 20 };
        let iterations = u32::try_from((budget / call_bytes).clamp(4, 256)).expect("small");
        // seconds per (op, checked), one entry per repetition
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); 4];
        let mut last = [(0u64, 0u64, 0u64, 0u64); 4];
        for repetition in 0..repetitions {
            for turn in 0..2 {
                let checked = (turn + repetition) % 2 == 0;
                cluster.check_capabilities(checked);
                *generation += 1;
                for (op_index, write) in [(0, true), (1, false)] {
                    let step = Step {
                        cluster: &cluster.file,
                        path,
                        write,
                        method: "gather",
                        iterations,
                        generation: *generation,
                        piece_bytes,
                    };
                    let (seconds, counts, ok) = step.run(workers)?;
                    verified &= ok;
                    let slot = op_index * 2 + usize::from(!checked);
                    samples[slot].push(seconds);
                    last[slot] = counts;
                }
            }
        }
        cluster.check_capabilities(true);
        rows.extend(rows_of(
            piece_bytes,
            &CAPABILITY_METHODS,
            (&samples, &last),
            (iterations, repetitions),
            Some("in-process"),
        ));
    }
    let _ = client.unlink(path);
    Ok((rows, verified))
}

/// One row per (op, method) of one piece size: the median seconds per call over the
/// repetitions and the counts of the last one. `samples` and `last` are indexed
/// `op * methods.len() + method`, writes first; `servers` names in-process servers.
fn rows_of(
    piece_bytes: usize,
    methods: &[&str],
    (samples, last): (&[Vec<f64>], &[Counts]),
    (iterations, repetitions): (u32, usize),
    servers: Option<&str>,
) -> Vec<Row> {
    let mut rows = Vec::new();
    for (op_index, op) in ["write", "read"].into_iter().enumerate() {
        for (method_index, method) in methods.iter().enumerate() {
            let slot = op_index * methods.len() + method_index;
            let seconds = median(&samples[slot]);
            let (requests, storage_calls, bytes, messages) = last[slot];
            let mut extra = json!({
                "messages": messages,
                "iterations": iterations,
                "repetitions": repetitions,
                "storage_calls": storage_calls,
            });
            if let Some(servers) = servers {
                extra["servers"] = json!(servers);
            }
            rows.push(Row {
                case: format!("{op} seg={piece_bytes}"),
                method: (*method).to_owned(),
                mib_s: mib_s(bytes, seconds),
                requests,
                // File pieces of the access; how the servers stored them is in `extra`.
                pieces: (PIECES * PROCESSES) as u64,
                bytes,
                seconds,
                extra,
                skipped: None,
            });
        }
    }
    rows
}

/// The methods of the capability comparison.
const CAPABILITY_METHODS: [&str; 2] = [
    "gather, capabilities checked",
    "gather, capabilities unchecked",
];

/// Runs the experiment and returns its report.
pub fn run(common: &CommonArgs) -> Result<Report, String> {
    let cluster = BenchCluster::open(common.cluster.as_deref(), SERVERS)?;
    let config = ClusterConfig::load(&cluster.file).map_err(|err| err.to_string())?;
    let client = Client::new(&config, &ClientOptions::default());
    match client.mkdir("/bench", 0o755) {
        Ok(_) => {}
        Err(err) if err.code() == Some(ErrorCode::Exists) => {}
        Err(err) => return Err(format!("mkdir /bench: {err}")),
    }
    let path = format!("/bench/listio-{}", std::process::id());
    client
        .create(&path, &CreateOptions::default())
        .map_err(|err| format!("create {path}: {err}"))?;
    let repetitions = if common.quick { 5 } else { 7 };
    let mut workers = Workers::spawn(PROCESSES)?;
    let mut rows = Vec::new();
    let mut verified = true;
    let mut generation = 0u64;
    for piece_bytes in PIECE_SIZES {
        let call_bytes = PIECES * piece_bytes;
        let budget = if common.quick { 2 << 20 } else { 16 << 20 };
        let iterations = u32::try_from((budget / call_bytes).clamp(4, 256)).expect("small");
        // seconds per (op, method), one entry per repetition
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); 2 * METHODS.len()];
        let mut last = vec![(0u64, 0u64, 0u64, 0u64); 2 * METHODS.len()];
        for repetition in 0..repetitions {
            for turn in 0..METHODS.len() {
                let method_index = (turn + repetition) % METHODS.len();
                let method = METHODS[method_index];
                generation += 1;
                for (op_index, write) in [(0, true), (1, false)] {
                    let step = Step {
                        cluster: &cluster.file,
                        path: &path,
                        write,
                        method,
                        iterations,
                        generation,
                        piece_bytes,
                    };
                    let (seconds, counts, ok) = step.run(&mut workers)?;
                    verified &= ok;
                    let slot = op_index * METHODS.len() + method_index;
                    samples[slot].push(seconds);
                    last[slot] = counts;
                }
            }
        }
        rows.extend(rows_of(
            piece_bytes,
            &METHODS,
            (&samples, &last),
            (iterations, repetitions),
            None,
        ));
    }
    let _ = client.unlink(&path);
    let (capability_rows, capabilities_verified) =
        capability_rows(common, &mut workers, &mut generation)?;
    rows.extend(capability_rows);
    verified &= capabilities_verified;
    let report = Report {
        bench: "listio".to_owned(),
        quick: common.quick,
        config: json!({
            "servers": SERVERS,
            "clients": PROCESSES,
            "transport": "local (tcp: rows over TCP)",
            "pieces_per_client": PIECES,
            "piece_bytes": PIECE_SIZES,
            "stripe_unit_bytes": tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT,
            "capability_rows": "gather on 4 iods run inside the bench process, capability checks on and off (a switch no server option reaches), interleaved per repetition",
        }),
        verified,
        rows,
    };
    let table = table(&report);
    if common.json {
        eprint!("{table}");
    } else {
        print!("{table}");
        write_outputs(common, &report)?;
    }
    Ok(report)
}

fn rate(report: &Report, case: &str, method: &str) -> f64 {
    report
        .rows
        .iter()
        .find(|row| row.case == case && row.method == method)
        .map_or(0.0, |row| row.mib_s)
}

fn table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "listio: {PROCESSES} client processes x {SERVERS} I/O servers, {PIECES} pieces per process, local backend (MiB/s, all processes; hybrid and tcp: rows of --json)");
    let _ = writeln!(
        out,
        "{:<6} {:>6} {:>10} {:>10} {:>10} {:>12} {:>10}",
        "op", "seg", "multiple", "pack", "gather", "gather/mult", "gather/pack"
    );
    for op in ["write", "read"] {
        for piece_bytes in PIECE_SIZES {
            let case = format!("{op} seg={piece_bytes}");
            let (multiple, pack, gather) = (
                rate(report, &case, "multiple"),
                rate(report, &case, "pack"),
                rate(report, &case, "gather"),
            );
            let _ = writeln!(
                out,
                "{op:<6} {piece_bytes:>6} {multiple:>10.1} {pack:>10.1} {gather:>10.1} {:>11.2}x {:>9.2}x",
                gather / multiple.max(1e-9),
                gather / pack.max(1e-9)
            );
        }
    }
    for piece_bytes in CAPABILITY_PIECE_SIZES {
        for op in ["write", "read"] {
            let case = format!("{op} seg={piece_bytes}");
            let checked = rate(report, &case, CAPABILITY_METHODS[0]);
            let unchecked = rate(report, &case, CAPABILITY_METHODS[1]);
            let _ = writeln!(
                out,
                "capabilities: {op} seg={piece_bytes} gather checked {checked:.1} MiB/s, unchecked {unchecked:.1} MiB/s: {:.3}x",
                checked / unchecked.max(1e-9)
            );
        }
    }
    let _ = writeln!(
        out,
        "paper (InfiniBand, 000 Fig. 4 / 001 Fig. 3.4): pack wins while a request is small (< 64 KiB), gather wins above it, by up to 1.5x; multiple message is the baseline both beat"
    );
    let _ = writeln!(out, "verified: {}", report.verified);
    out
}

fn write_outputs(common: &CommonArgs, report: &Report) -> Result<(), String> {
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
    let csv_path = common.out.join("listio.csv");
    std::fs::write(&csv_path, csv)
        .map_err(|err| format!("cannot write {}: {err}", csv_path.display()))?;
    let mut series = Vec::new();
    for op in ["write", "read"] {
        for method in METHODS {
            let points = PIECE_SIZES
                .iter()
                .map(|&size| {
                    (
                        size as f64,
                        rate(report, &format!("{op} seg={size}"), method),
                    )
                })
                .collect();
            series.push(Series {
                name: format!("{op} {method}"),
                points,
            });
        }
    }
    let plot = Plot {
        title: "listio: 4 clients x 4 servers, 128 pieces (local and tcp)".to_owned(),
        x_label: "piece size (bytes)".to_owned(),
        y_label: "MiB/s".to_owned(),
        log2_x: true,
        series,
    };
    let png_path = super::write_plot(common, "listio.png", &plot)?;
    super::report_written(&[csv_path, png_path]);
    Ok(())
}
