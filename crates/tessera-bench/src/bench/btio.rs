//! `tessera bench btio` (seed 000 Table 4, seed 001 §3.4.4 and Table 3.2).
//!
//! An emulation of the output of NAS BT-IO, class A: the solution is a 64^3 grid of 5
//! doubles per point (10 MiB), and every output step appends the whole array, in Fortran
//! order, to one file at `step` times its size (class A runs 200 iterations and writes every
//! 5th: 40 steps). BT deals the grid over 4 processes by its multi-partition: 2 x 2 x 2
//! cells of 32^3 points, each process owning 2 of them, one per z layer, diagonally placed
//! (NPB `make_set`). A process's file type is BT-IO's: a struct of one subarray per cell
//! ([`ArrayShare::Btio`]), so one step is 2048 file pieces of 1280 bytes (one x row of a
//! cell) per process; its memory is its cells back to back. Each method writes the whole
//! run into its own file, and the methods take turns step by step (in an order rotated from
//! step to step); each step is a barrier for the 4 processes, as BT-IO's collective write
//! is. Afterwards every file is read back whole and compared with the array every step
//! should have left in it.

use std::time::Instant;

use serde::Serialize;
use serde_json::json;
use tessera_client::{Client, OpenMode};

use super::blockcol::{create, open_cluster, Figures};
use super::CommonArgs;
use crate::report::{
    self, Figure, Line, Measure, Meta, Outcome, Panel, Point, Progress, Report, Scale, Spread,
};
use crate::workers::{expected_byte, ArrayMethod, ArrayShare, Pattern, Task, Workers};

const SERVERS: u16 = 4;
const PROCESSES: u64 = 4;
/// Class A: 64^3 points.
const POINTS: u64 = 64;
const STEPS_QUICK: u64 = 2;
/// Class A: 200 iterations, output every 5.
const STEPS_FULL: u64 = 40;
/// Bytes the read-back check asks for at once.
const VERIFY_CHUNK_BYTES: u64 = 4 << 20;

/// Seed 001 Table 3.2 and §3.4.4 (class A, 4 clients, 40 steps): I/O overhead in seconds,
/// request messages, and file access call pairs on the I/O nodes.
const PAPER: [(ArrayMethod, f64, u64, u64); 4] = [
    (ArrayMethod::Multiple, 14.4, 163_840, 163_840),
    (ArrayMethod::Sieve, 11.7, 82_040, 85_060),
    (ArrayMethod::List, 2.6, 1360, 163_840),
    (ArrayMethod::ListAds, 2.1, 1360, 7680),
];
/// Seed 001 Table 3.2: run time without I/O, and the I/O overhead of collective I/O.
const PAPER_NO_IO_SECONDS: f64 = 165.6;
const PAPER_COLLECTIVE_SECONDS: f64 = 4.0;

fn share(step: u64) -> ArrayShare {
    ArrayShare::Btio {
        points: POINTS,
        processes: PROCESSES,
        step,
    }
}

/// What one method did over the whole run.
#[derive(Debug, Clone, Default)]
struct Totals {
    /// Seconds of the slowest process, per step.
    step_seconds: Vec<f64>,
    figures: Figures,
}

impl Totals {
    fn add(&mut self, seconds: f64, figures: Figures) {
        self.step_seconds.push(seconds);
        let total = &mut self.figures;
        total.requests += figures.requests;
        total.file_pieces += figures.file_pieces;
        total.bytes += figures.bytes;
        total.wire_bytes += figures.wire_bytes;
        total.storage_calls += figures.storage_calls;
        total.storage_bytes += figures.storage_bytes;
        total.sieved += figures.sieved;
        total.locks += figures.locks;
    }
}

fn file_name(method: ArrayMethod) -> &'static str {
    match method {
        ArrayMethod::ListAds => "list-ads",
        other => other.name(),
    }
}

/// Reads `path` back whole and compares every byte with what step `offset / array bytes`
/// wrote (`generations[step]`).
fn verify_file(client: &Client, path: &str, generations: &[u64]) -> Result<bool, String> {
    let array_bytes = share(0).array_bytes();
    let total = array_bytes * generations.len() as u64;
    let file = client
        .open(path, OpenMode::ReadOnly)
        .map_err(|err| format!("open {path}: {err}"))?;
    let size = file
        .stat()
        .map_err(|err| format!("stat {path}: {err}"))?
        .size;
    if size != total {
        eprintln!("bench btio: {path} holds {size} bytes, {total} expected");
        return Ok(false);
    }
    let mut buffer = vec![0u8; usize::try_from(VERIFY_CHUNK_BYTES).expect("4 MiB")];
    let mut offset = 0;
    while offset < total {
        let length = VERIFY_CHUNK_BYTES.min(total - offset);
        let chunk = &mut buffer[..usize::try_from(length).expect("at most 4 MiB")];
        file.read_at(offset, chunk)
            .map_err(|err| format!("read {path} at {offset}: {err}"))?;
        for (at, &byte) in (offset..).zip(chunk.iter()) {
            let generation = generations[usize::try_from(at / array_bytes).expect("a step")];
            if byte != expected_byte(at, generation) {
                eprintln!("bench btio: {path}: byte {at} differs from the expected array");
                return Ok(false);
            }
        }
        offset += length;
    }
    Ok(true)
}

/// Runs the experiment and writes its report.
pub fn run(common: &CommonArgs) -> Result<Outcome, String> {
    let started = Instant::now();
    let (cluster, client) = open_cluster(common)?;
    let steps = if common.quick {
        STEPS_QUICK
    } else {
        STEPS_FULL
    };
    let paths = ArrayMethod::ALL
        .map(|method| format!("/bench/btio-{}-{}", std::process::id(), file_name(method)));
    for path in &paths {
        create(&client, path)?;
    }
    let mut workers = Workers::spawn(usize::try_from(PROCESSES).expect("4"))?;
    let mut totals: [Totals; 4] = Default::default();
    // generations[method][step]
    let mut generations = [(); 4].map(|()| Vec::new());
    let mut generation = 0;
    let methods = ArrayMethod::ALL.len();
    let progress = Progress::new("btio", steps);
    for step in 0..steps {
        for turn in 0..methods {
            let index = (turn + usize::try_from(step).expect("few steps")) % methods;
            let method = ArrayMethod::ALL[index];
            generation += 1;
            generations[index].push(generation);
            let tasks = (0..usize::try_from(PROCESSES).expect("4"))
                .map(|rank| Task {
                    cluster: cluster.file.clone(),
                    path: paths[index].clone(),
                    write: true,
                    method: super::over_tcp(method.name()),
                    iterations: 1,
                    generation,
                    sync: false,
                    cache: None,
                    pattern: Pattern::Array {
                        rank,
                        share: share(step),
                    },
                })
                .collect();
            let (results, _) = workers.step(tasks)?;
            let slowest = results
                .iter()
                .map(|result| result.seconds)
                .fold(0.0, f64::max);
            totals[index].add(slowest, Figures::of(&results, 1));
        }
        progress.step(&format!("step {}", step + 1));
    }
    drop(progress);
    drop(workers);
    let io_done = started.elapsed().as_secs_f64();
    let mut verified = true;
    for (index, path) in paths.iter().enumerate() {
        if !verify_file(&client, path, &generations[index])? {
            verified = false;
        }
        let _ = client.unlink(path);
    }
    eprintln!(
        "bench btio: {steps} steps of {} methods in {io_done:.1} s, read back and checked in {:.1} s",
        methods,
        started.elapsed().as_secs_f64() - io_done
    );
    let rows = ArrayMethod::ALL
        .into_iter()
        .zip(&totals)
        .map(|(method, totals)| row(method, totals, steps))
        .collect::<Result<_, String>>()?;
    let report = Report {
        bench: "btio",
        quick: common.quick,
        meta: Meta::now(usize::try_from(steps).expect("few steps")),
        config: json!({
            "servers": SERVERS,
            "clients": PROCESSES,
            "transport": "tcp",
            "class": "A",
            "grid_points": [POINTS, POINTS, POINTS],
            "point_bytes": crate::workers::BTIO_POINT_BYTES,
            "step_bytes": share(0).array_bytes(),
            "steps": steps,
            "steps_class_a": STEPS_FULL,
            "partition": "BT multi-partition: 2 x 2 x 2 cells of 32^3 points; process r owns cell (r mod 2, r div 2, 0) and the cell moved by (+1, -1, +1) mod 2; file type = struct of one Fortran-order subarray of 5-double elements per cell, displacement step * step_bytes; memory = the process's cells back to back",
            "pieces_per_step_per_process": 2 * 32 * 32,
            "stripe_unit_bytes": tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT,
            "methods": super::blockcol::methods_config(),
            "figures": "totals over all steps, all processes: seconds = sum over steps of the slowest process's write time; seconds_per_step the median step and its range (the steps are the repetitions); requests, pieces (file pieces), bytes, storage_calls, storage_bytes, sieved_requests as in blockcol",
            "verify": "after all steps every method's file is read back whole (read_at, 4 MiB at a time) and every byte compared with expected_byte(offset, generation of the step that wrote offset / step_bytes)",
            "paper": {
                "table": "001 Table 3.2 (000 Table 4 without ADS): I/O overhead s; request messages; file access call pairs on the I/O nodes; class A, 4 clients",
                "no_io_seconds": PAPER_NO_IO_SECONDS,
                "collective_io_seconds": PAPER_COLLECTIVE_SECONDS,
            },
        }),
        verified,
        rows,
    };
    let text = text(&report, steps)?;
    report.finish(common, &text, &[figure(&report, steps)?])
}

/// One method of btio: the whole run's totals.
#[derive(Debug, Clone, Serialize)]
pub struct BtioRow {
    /// The method.
    pub method: &'static str,
    /// Output steps written.
    pub steps: u64,
    /// MiB/s over the whole run (total bytes / total I/O seconds) and its range over the
    /// steps; seconds = the run's I/O seconds, the sum over steps of the slowest process's
    /// write time.
    #[serde(flatten)]
    pub measure: Measure,
    /// Seconds of the median step.
    pub seconds_per_step: f64,
    /// Seconds of the fastest step.
    pub seconds_per_step_min: f64,
    /// Seconds of the slowest step.
    pub seconds_per_step_max: f64,
    /// What the whole run did, all steps and processes.
    #[serde(flatten)]
    pub figures: Figures,
    /// `storage_bytes / bytes`.
    pub storage_bytes_ratio: f64,
    /// Requests per step.
    pub requests_per_step: f64,
    /// Storage calls per step.
    pub storage_calls_per_step: f64,
    /// The paper's I/O seconds for 40 steps (001 Table 3.2).
    pub paper_io_seconds: f64,
    /// The paper's request messages for 40 steps.
    pub paper_requests: u64,
    /// The paper's (lseek, read/write) pairs on the I/O nodes for 40 steps.
    pub paper_storage_call_pairs: u64,
}

impl report::Row for BtioRow {
    fn key(&self) -> (String, &str) {
        (format!("write {} steps", self.steps), self.method)
    }
}

fn paper(method: ArrayMethod) -> (f64, u64, u64) {
    PAPER
        .iter()
        .find(|entry| entry.0 == method)
        .map(|&(_, seconds, requests, calls)| (seconds, requests, calls))
        .expect("every method has a paper figure")
}

fn row(method: ArrayMethod, totals: &Totals, steps: u64) -> Result<BtioRow, String> {
    let figures = totals.figures;
    let seconds: f64 = totals.step_seconds.iter().sum();
    let per_step = Spread::of(&totals.step_seconds).map_err(|err| {
        format!(
            "bench btio: case \"write {steps} steps\", method \"{}\": {err}",
            method.name()
        )
    })?;
    let rate = per_step.rate_of(figures.bytes / steps.max(1));
    let (paper_io_seconds, paper_requests, paper_storage_call_pairs) = paper(method);
    Ok(BtioRow {
        method: method.name(),
        steps,
        measure: Measure {
            mib_s: report::mib_s(figures.bytes, seconds),
            mib_s_min: rate.min,
            mib_s_max: rate.max,
            seconds,
        },
        seconds_per_step: per_step.median,
        seconds_per_step_min: per_step.min,
        seconds_per_step_max: per_step.max,
        figures,
        storage_bytes_ratio: figures.storage_bytes_ratio(),
        requests_per_step: figures.requests as f64 / steps as f64,
        storage_calls_per_step: figures.storage_calls as f64 / steps as f64,
        paper_io_seconds,
        paper_requests,
        paper_storage_call_pairs,
    })
}

fn text(report: &Report<BtioRow>, steps: u64) -> Result<String, String> {
    let case = format!("write {steps} steps");
    let mut table = report::table([
        "method",
        "I/O s",
        "MiB/s",
        "requests",
        "req/step",
        "stor calls",
        "calls/step",
        "s/b",
        "paper s",
        "paper req/step",
        "paper calls/step",
    ]);
    let steps_full = STEPS_FULL as f64;
    for method in ArrayMethod::ALL {
        let row = report.row(&case, method.name())?;
        table.add_row([
            method.name().to_owned(),
            report::cell(row.measure.seconds, 3),
            report::cell(row.measure.mib_s, 1),
            row.figures.requests.to_string(),
            report::cell(row.requests_per_step, 0),
            row.figures.storage_calls.to_string(),
            report::cell(row.storage_calls_per_step, 0),
            report::cell(row.storage_bytes_ratio, 2),
            report::cell(row.paper_io_seconds, 1),
            report::cell(row.paper_requests as f64 / steps_full, 0),
            report::cell(row.paper_storage_call_pairs as f64 / steps_full, 0),
        ]);
    }
    let ads = report.row(&case, ArrayMethod::ListAds.name())?;
    let mut over_ads = Vec::new();
    for method in [ArrayMethod::Multiple, ArrayMethod::Sieve, ArrayMethod::List] {
        let row = report.row(&case, method.name())?;
        over_ads.push(format!(
            "{} {} (paper {})",
            method.name(),
            report::ratio(row.measure.seconds, ads.measure.seconds),
            report::ratio(row.paper_io_seconds, ads.paper_io_seconds)
        ));
    }
    Ok(format!(
        "btio: NAS BT-IO class A output, emulated: {POINTS}^3 points x 5 doubles ({} MiB a step), {PROCESSES} processes in BT's multi-partition (2 cells each), {steps} steps, {SERVERS} I/O servers, 64 KiB stripes, tcp\n{table}\n\
         I/O time over list+ads: {}\n\
         paper (001 Table 3.2, 4 clients, InfiniBand, PVFS): run time without I/O {PAPER_NO_IO_SECONDS} s; collective I/O {PAPER_COLLECTIVE_SECONDS} s of I/O (not emulated here); its counts are for the whole run (40 steps), shown here per step; storage calls are its (lseek, read/write) pairs on the I/O nodes\n\
         ours: one request per server per process and step for list I/O (no 64-piece list limit), one per file piece for multiple; s/b = storage bytes / useful bytes\n\
         verified: {}\n",
        share(0).array_bytes() >> 20,
        over_ads.join("; "),
        report.verified
    ))
}

/// 001 Table 3.2 as a figure: seconds per output step of each method (median, min-max over
/// the steps), on a log axis (the methods differ by up to 10x).
fn figure(report: &Report<BtioRow>, steps: u64) -> Result<Figure, String> {
    let case = format!("write {steps} steps");
    let mut panel = Panel::categorical(
        "one output step, all processes",
        (
            "method",
            ArrayMethod::ALL.iter().map(|method| method.name()),
        ),
        ("I/O seconds per step", Scale::Log10),
    );
    for (index, method) in ArrayMethod::ALL.into_iter().enumerate() {
        let row = report.row(&case, method.name())?;
        panel.lines.push(Line {
            name: method.name().to_owned(),
            points: vec![Point {
                x: index as f64,
                y: Spread {
                    min: row.seconds_per_step_min,
                    median: row.seconds_per_step,
                    max: row.seconds_per_step_max,
                },
            }],
        });
    }
    Ok(Figure {
        stem: "btio".to_owned(),
        title: format!(
            "btio: class A output, {PROCESSES} clients x {SERVERS} servers, tcp (median, min-max of {steps} steps)"
        ),
        panels: vec![panel],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_partition_matches_npb_make_set() {
        // 4 processes: 2 cells each, one per z layer, moved by (+1, -1) in x and y.
        assert_eq!(ArrayShare::btio_cells(2, 0), [[0, 0, 0], [1, 1, 1]]);
        assert_eq!(ArrayShare::btio_cells(2, 1), [[1, 0, 0], [0, 1, 1]]);
        assert_eq!(ArrayShare::btio_cells(2, 2), [[0, 1, 0], [1, 0, 1]]);
        // 9 processes: rank 5 = (2, 1) at the bottom.
        assert_eq!(
            ArrayShare::btio_cells(3, 5),
            [[2, 1, 0], [0, 0, 1], [1, 2, 2]]
        );
    }

    #[test]
    fn one_step_covers_its_slot_of_the_file_once() {
        let step = 3;
        let array_bytes = share(0).array_bytes();
        let mut seen = vec![0u8; usize::try_from(array_bytes).unwrap()];
        let mut pieces = 0;
        for rank in 0..4 {
            let access = Pattern::Array {
                rank,
                share: share(step),
            }
            .access();
            pieces += access.file.len();
            // Rank 3's last row of its z = 0 cell ends where its first row of the z = 1 cell
            // starts: the flattening merges the two.
            let expected = if rank == 3 {
                2 * 32 * 32 - 1
            } else {
                2 * 32 * 32
            };
            assert_eq!(access.file.len(), expected, "rank {rank}");
            assert!(access
                .file
                .iter()
                .all(|piece| piece.length % (32 * 40) == 0));
            assert!(access
                .file
                .windows(2)
                .all(|pair| pair[0].offset < pair[1].offset));
            assert_eq!(access.memory, [(0, 2 * 32 * 32 * 32 * 40)]);
            for piece in access.file {
                let start = piece.offset - step * array_bytes;
                for offset in start..start + piece.length {
                    seen[usize::try_from(offset).unwrap()] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&count| count == 1));
        assert_eq!(pieces, 4 * 2 * 32 * 32 - 1);
    }
}
