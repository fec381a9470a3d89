//! `tessera bench blockcol` (seed 001 §3.4.2, Figs. 3.6-3.7), and the sweep it shares with
//! `tessera bench tile`.
//!
//! Four client processes share an n x n array of bytes (MPI_BYTE) in one file striped
//! over four servers (64 KiB units), dealt by 1-D block columns: process r owns columns
//! [r*n/4, (r+1)*n/4), so its file view is n pieces of n/4 bytes, one per row, and its memory
//! one contiguous buffer. Each process moves its share by four methods: `multiple` (one
//! request per piece), `sieve` (client-side ROMIO data sieving: large contiguous reads, and
//! locked read-modify-write chunks for writes), `list` (one list call, the servers making one
//! storage call per merged piece) and `list+ads` (one list call, each server's cost model
//! deciding whether to sieve: Active Data Sieving). Four cases: write (no sync), write+sync
//! (`File::sync` after the write, inside the timing), read from the servers' page cache, and
//! read after the page cache of every object file was dropped (private cluster only). Within
//! a repetition the cases run in that order and every method inside each, in an order
//! rotated from one repetition to the next; every write carries a new generation and every
//! read is verified byte by byte against `expected_byte(file offset, last generation)`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use serde_json::json;
use tessera_client::{Client, ClientOptions, ClusterConfig, CreateOptions, ErrorCode};

use super::{drop_page_cache, median, mib_s, BenchCluster, CommonArgs, Report, Row};
use crate::plot::{Plot, Series};
use crate::workers::{ArrayMethod, ArrayShare, Pattern, StepResult, Task, Workers};

const PROCESSES: u64 = 4;
const SERVERS: u16 = 4;
/// Bytes (MPI_BYTE), as in the `views` bench: a process touches n/4 columns = n/4 bytes per
/// row, 128 to 2048 as seed 001 §3.4.2 counts them. With 4-byte ints the pieces are 4x larger,
/// small writes here cost 0.4-0.7 µs each, and the servers' gain from sieving shrinks to about
/// 1.2x at n = 512 (measured on 2026-11-22; see the issue 4 note).
const ELEMENT_BYTES: u64 = 1;
const SIZES_QUICK: [u64; 3] = [512, 1024, 2048];
const SIZES_FULL: [u64; 5] = [512, 1024, 2048, 4096, 8192];
/// Bytes all processes move per timed step at least in the cached cases: a smaller array
/// repeats the call, so a step lasts well above the scheduling noise of a shared machine.
const STEP_BYTES_MIN: u64 = 4 << 20;
/// Most calls per timed step.
const STEP_CALLS_MAX: u64 = 8;
/// Repetitions of every (n, case, method), quick or not (quick has fewer sizes).
const REPETITIONS: usize = 5;
/// Seed 001 §3.4.2: list I/O over ROMIO data sieving for writes, by array size.
const PAPER_LIST_OVER_SIEVE_WRITE: (f64, f64) = (3.5, 12.1);

/// The cases of seed 001 Figs. 3.6-3.9.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Case {
    /// Write, no sync: the servers' page cache absorbs it.
    Write,
    /// Write, then `File::sync`, both timed.
    WriteSync,
    /// Read what the servers hold in their page cache.
    Read,
    /// Read after the servers' page cache was dropped.
    ReadUncached,
}

impl Case {
    /// Every case, in the order a repetition runs them (writes first: reads check the last).
    pub(super) const ALL: [Self; 4] =
        [Self::Write, Self::WriteSync, Self::Read, Self::ReadUncached];

    /// The name in reports.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Write => "write",
            Self::WriteSync => "write+sync",
            Self::Read => "read cached",
            Self::ReadUncached => "read uncached",
        }
    }

    fn write(self) -> bool {
        matches!(self, Self::Write | Self::WriteSync)
    }

    /// Calls per timed step for an array of `array_bytes`: the cached cases repeat small
    /// calls; a synced write and an uncached read make one, which must meet the disk.
    fn calls(self, array_bytes: u64) -> u64 {
        match self {
            Self::Write | Self::Read => (STEP_BYTES_MIN / array_bytes).clamp(1, STEP_CALLS_MAX),
            Self::WriteSync | Self::ReadUncached => 1,
        }
    }
}

/// What one call did, summed over the processes (the same in every repetition).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Figures {
    pub(super) requests: u64,
    pub(super) file_pieces: u64,
    /// Useful bytes: the file pieces' total.
    pub(super) bytes: u64,
    /// Bytes that crossed the network (IoReport.bytes: more than `bytes` for `sieve`).
    pub(super) wire_bytes: u64,
    pub(super) storage_calls: u64,
    pub(super) storage_bytes: u64,
    pub(super) sieved: u64,
    pub(super) locks: u64,
}

impl Figures {
    /// Per call: totals of every process over `calls` timed calls, divided by `calls`.
    pub(super) fn of(results: &[StepResult], calls: u64) -> Self {
        let sum = |value: fn(&StepResult) -> u64| results.iter().map(value).sum::<u64>() / calls;
        Self {
            requests: sum(|r| r.requests),
            file_pieces: results.iter().map(|r| r.file_pieces).sum(),
            bytes: results.iter().map(|r| r.access_bytes).sum(),
            wire_bytes: sum(|r| r.bytes),
            storage_calls: sum(|r| r.storage_pieces),
            storage_bytes: sum(|r| r.storage_bytes),
            sieved: sum(|r| r.sieved),
            locks: sum(|r| r.locks),
        }
    }

    /// The figures every row of these benchmarks carries in `extra`.
    pub(super) fn extra(&self) -> serde_json::Value {
        json!({
            "wire_bytes": self.wire_bytes,
            "storage_calls": self.storage_calls,
            "storage_bytes": self.storage_bytes,
            "sieved_requests": self.sieved,
            "locks": self.locks,
            "storage_bytes_ratio": self.storage_bytes as f64 / self.bytes.max(1) as f64,
        })
    }
}

/// Samples of one (case, method).
#[derive(Debug, Clone, Default)]
pub(super) struct Measured {
    /// Seconds per call of the slowest process, one per repetition.
    seconds: Vec<f64>,
    figures: Figures,
    calls: u64,
}

/// Removes `path` if it exists and creates it empty with the default stripes.
pub(super) fn create(client: &Client, path: &str) -> Result<(), String> {
    match client.unlink(path) {
        Ok(()) => {}
        Err(err) if err.code() == Some(ErrorCode::NotFound) => {}
        Err(err) => return Err(format!("rm {path}: {err}")),
    }
    client
        .create(path, &CreateOptions::default())
        .map(drop)
        .map_err(|err| format!("create {path}: {err}"))
}

/// Opens the cluster of a benchmark and the client that makes its files under `/bench`.
pub(super) fn open_cluster(common: &CommonArgs) -> Result<(BenchCluster, Client), String> {
    let cluster = BenchCluster::open(common.cluster.as_deref(), SERVERS)?;
    let config = ClusterConfig::load(&cluster.file).map_err(|err| err.to_string())?;
    let client = Client::new(&config, &ClientOptions::default());
    match client.mkdir("/bench", 0o755) {
        Ok(_) => {}
        Err(err) if err.code() == Some(ErrorCode::Exists) => {}
        Err(err) => return Err(format!("mkdir /bench: {err}")),
    }
    Ok((cluster, client))
}

/// Why uncached reads are not measured on a cluster whose data directories are unknown.
pub(super) const UNCACHED_SKIPPED: &str = "an external cluster (--cluster): its iods' data directories are unknown, so their page cache cannot be dropped";

/// Runs every (case, method) of array shares on a cluster, interleaved, verifying every
/// read.
pub(super) struct Sweep<'a> {
    cluster: &'a BenchCluster,
    workers: Workers,
    /// The iods' data directories, whose page cache uncached reads drop (none: skipped).
    data_dirs: Option<Vec<PathBuf>>,
    generation: u64,
    /// Every byte read back so far was right.
    pub(super) verified: bool,
    bench: &'static str,
}

impl<'a> Sweep<'a> {
    pub(super) fn new(cluster: &'a BenchCluster, bench: &'static str) -> Result<Self, String> {
        Ok(Self {
            cluster,
            workers: Workers::spawn(usize::try_from(PROCESSES).expect("4"))?,
            data_dirs: cluster.iod_data_dirs(),
            generation: 0,
            verified: true,
            bench,
        })
    }

    /// Whether uncached reads can be measured.
    pub(super) fn uncached(&self) -> bool {
        self.data_dirs.is_some()
    }

    /// One timed step of every process: `case` of `share` on `path` by `method`.
    fn step(
        &mut self,
        path: &str,
        share: ArrayShare,
        case: Case,
        method: ArrayMethod,
        calls: u64,
    ) -> Result<(f64, Figures), String> {
        let processes = usize::try_from(share.processes()).expect("a few processes");
        let tasks = (0..processes)
            .map(|rank| Task {
                cluster: self.cluster.file.clone(),
                path: path.to_owned(),
                write: case.write(),
                method: super::over_tcp(method.name()),
                iterations: u32::try_from(calls).expect("at most step_calls_max"),
                generation: self.generation,
                sync: case == Case::WriteSync,
                pattern: Pattern::Array { rank, share },
            })
            .collect();
        let (results, _) = match (case, &self.data_dirs) {
            (Case::ReadUncached, Some(dirs)) => self
                .workers
                .step_checked_with(tasks, || drop_page_cache(dirs).map(drop))?,
            _ => self.workers.step_checked(tasks)?,
        };
        if !results.iter().all(|result| result.verified) {
            eprintln!(
                "bench {}: {share:?} {} {}: data read back did not match",
                self.bench,
                case.name(),
                method.name()
            );
            self.verified = false;
        }
        let slowest = results
            .iter()
            .map(|result| result.seconds)
            .fold(0.0, f64::max);
        Ok((slowest / calls as f64, Figures::of(&results, calls)))
    }

    /// Measures every case and method of `share` on `path` over `repetitions`; returns
    /// `[case][method]` in the order of [`Case::ALL`] and [`ArrayMethod::ALL`]. Uncached
    /// reads are left empty where they cannot be measured.
    pub(super) fn measure(
        &mut self,
        path: &str,
        share: ArrayShare,
        repetitions: usize,
    ) -> Result<[[Measured; 4]; 4], String> {
        let mut measured: [[Measured; 4]; 4] = Default::default();
        let methods = ArrayMethod::ALL.len();
        for repetition in 0..repetitions {
            for (case_index, case) in Case::ALL.into_iter().enumerate() {
                if case == Case::ReadUncached && !self.uncached() {
                    continue;
                }
                let calls = case.calls(share.array_bytes());
                for turn in 0..methods {
                    let method_index = (turn + repetition) % methods;
                    if case.write() {
                        self.generation += 1;
                    }
                    let (seconds, figures) =
                        self.step(path, share, case, ArrayMethod::ALL[method_index], calls)?;
                    let entry = &mut measured[case_index][method_index];
                    entry.seconds.push(seconds);
                    entry.figures = figures;
                    entry.calls = calls;
                }
            }
        }
        Ok(measured)
    }
}

/// The rows of one measured share: one per (case, method), `case_label` naming the case.
pub(super) fn rows(
    measured: &[[Measured; 4]; 4],
    case_label: impl Fn(Case) -> String,
    repetitions: usize,
    uncached: bool,
) -> Vec<Row> {
    let mut rows = Vec::new();
    for (case, by_method) in Case::ALL.into_iter().zip(measured) {
        for (method, measured) in ArrayMethod::ALL.into_iter().zip(by_method) {
            let figures = measured.figures;
            if case == Case::ReadUncached && !uncached {
                rows.push(Row {
                    case: case_label(case),
                    method: method.name().to_owned(),
                    mib_s: f64::NAN,
                    requests: 0,
                    pieces: 0,
                    bytes: 0,
                    seconds: f64::NAN,
                    extra: json!({}),
                    skipped: Some(UNCACHED_SKIPPED.to_owned()),
                });
                continue;
            }
            let seconds = median(&measured.seconds);
            let seconds_best = measured
                .seconds
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min);
            let mut extra = figures.extra();
            extra["mib_s_best"] = json!(mib_s(figures.bytes, seconds_best));
            extra["calls"] = json!(measured.calls);
            extra["repetitions"] = json!(repetitions);
            rows.push(Row {
                case: case_label(case),
                method: method.name().to_owned(),
                mib_s: mib_s(figures.bytes, seconds),
                requests: figures.requests,
                pieces: figures.file_pieces,
                bytes: figures.bytes,
                seconds,
                extra,
                skipped: None,
            });
        }
    }
    rows
}

/// The row of (case, method) in a report.
pub(super) fn find<'r>(report: &'r Report, case: &str, method: ArrayMethod) -> Option<&'r Row> {
    report
        .rows
        .iter()
        .find(|row| row.case == case && row.method == method.name())
}

/// MiB/s of (case, method), NaN where not measured.
pub(super) fn rate(report: &Report, case: &str, method: ArrayMethod) -> f64 {
    find(report, case, method)
        .filter(|row| row.skipped.is_none())
        .map_or(f64::NAN, |row| row.mib_s)
}

/// A figure of `extra`, NaN where absent.
pub(super) fn extra_f64(row: Option<&Row>, key: &str) -> f64 {
    row.and_then(|row| row.extra.get(key)?.as_f64())
        .unwrap_or(f64::NAN)
}

/// Writes the rows as CSV to `OUT/NAME.csv`; returns its path.
pub(super) fn write_csv(common: &CommonArgs, report: &Report) -> Result<PathBuf, String> {
    std::fs::create_dir_all(&common.out)
        .map_err(|err| format!("cannot create {}: {err}", common.out.display()))?;
    let mut csv = String::from(
        "case,method,mib_s,requests,pieces,bytes,seconds,wire_bytes,storage_calls,storage_bytes,sieved_requests,locks,storage_bytes_ratio,skipped\n",
    );
    for row in &report.rows {
        let number = |key: &str| {
            row.extra
                .get(key)
                .map_or_else(String::new, ToString::to_string)
        };
        let _ = writeln!(
            csv,
            "{},{},{:.3},{},{},{},{:.9},{},{},{},{},{},{},{}",
            row.case,
            row.method,
            row.mib_s,
            row.requests,
            row.pieces,
            row.bytes,
            row.seconds,
            number("wire_bytes"),
            number("storage_calls"),
            number("storage_bytes"),
            number("sieved_requests"),
            number("locks"),
            number("storage_bytes_ratio"),
            row.skipped
                .as_deref()
                .map_or(String::new(), |reason| format!("{reason:?}")),
        );
    }
    let path = common.out.join(format!("{}.csv", report.bench));
    std::fs::write(&path, csv).map_err(|err| format!("cannot write {}: {err}", path.display()))?;
    Ok(path)
}

fn case_label(case: Case, n: u64) -> String {
    format!("{} n={n}", case.name())
}

/// Runs the experiment and returns its report.
pub fn run(common: &CommonArgs) -> Result<Report, String> {
    let started = Instant::now();
    let (cluster, client) = open_cluster(common)?;
    let path = format!("/bench/blockcol-{}", std::process::id());
    let sizes: &[u64] = if common.quick {
        &SIZES_QUICK
    } else {
        &SIZES_FULL
    };
    let repetitions = REPETITIONS;
    let mut sweep = Sweep::new(&cluster, "blockcol")?;
    let mut rows = Vec::new();
    for &n in sizes {
        create(&client, &path)?;
        let share = ArrayShare::BlockColumn {
            n,
            element_bytes: ELEMENT_BYTES,
            processes: PROCESSES,
        };
        let measured = sweep.measure(&path, share, repetitions)?;
        rows.extend(rows_of(&measured, n, repetitions, sweep.uncached()));
        eprintln!(
            "bench blockcol: n={n} done ({:.1} s)",
            started.elapsed().as_secs_f64()
        );
    }
    let _ = client.unlink(&path);
    let report = Report {
        bench: "blockcol".to_owned(),
        quick: common.quick,
        config: json!({
            "servers": SERVERS,
            "clients": PROCESSES,
            "transport": "tcp",
            "array": "n x n elements, C order, one file; process r owns columns [r*n/4, (r+1)*n/4): n file pieces of n/4 elements, memory one contiguous buffer",
            "element_bytes": ELEMENT_BYTES,
            "sizes_n": sizes,
            "stripe_unit_bytes": tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT,
            "methods": methods_config(),
            "cases": cases_config(sweep.uncached()),
            "repetitions": repetitions,
            "step_bytes_min": STEP_BYTES_MIN,
            "timing": "each step: prepare (open; an untimed one-byte-per-server warm-up call), barrier, `calls` timed calls, barrier, then verification; seconds per call = slowest process / calls; mib_s from the median over the repetitions, mib_s_best from the best",
            "figures": "per call, all processes: bytes = useful bytes (the file pieces' total; mib_s counts these); requests = client-to-server I/O requests; pieces = file pieces of the access; extra.wire_bytes = bytes that crossed the network (sieve moves the holes too); extra.storage_calls = storage calls the servers made (IoReport.storage_pieces); extra.storage_bytes = bytes they moved to and from storage; extra.sieved_requests = requests they served by sieving; extra.locks = range locks taken on the mds (sieve writes); extra.storage_bytes_ratio = storage_bytes / bytes",
            "verify": "every byte read back == expected_byte(file offset, generation of the last write)",
        }),
        verified: sweep.verified,
        rows,
    };
    drop(sweep);
    let table = table(&report, sizes);
    eprintln!(
        "bench blockcol: {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
    if common.json {
        eprint!("{table}");
    } else {
        print!("{table}");
        write_outputs(common, &report, sizes)?;
    }
    Ok(report)
}

/// The `methods` entry of the config of blockcol and tile.
pub(super) fn methods_config() -> serde_json::Value {
    json!({
        "multiple": "one request per file piece (File::write_multiple / read_multiple), servers per-piece",
        "sieve": "client-side ROMIO data sieving (File::write_sieve / read_sieve, SieveOptions::default(): 4 MiB read and 512 KiB write buffers, exclusive range locks at the mds around each write chunk), servers per-piece",
        "list": "one list call (write_list / read_list, gather), StoragePlan::PerPiece: one storage call per merged piece",
        "list+ads": "one list call, StoragePlan::Auto: each iod's cost model decides whether to sieve (Active Data Sieving)",
    })
}

/// The `cases` entry of the config of blockcol and tile.
pub(super) fn cases_config(uncached: bool) -> serde_json::Value {
    json!({
        "write": "write, no sync",
        "write+sync": "write, then File::sync by every process, inside the timing; one call per step",
        "read cached": "read what the last write left in the servers' page cache",
        "read uncached": if uncached {
            "read after every iod object file was fdatasync'ed and its page cache dropped (posix_fadvise DONTNEED), between the barrier and the start; one call per step"
        } else {
            UNCACHED_SKIPPED
        },
    })
}

fn rows_of(measured: &[[Measured; 4]; 4], n: u64, repetitions: usize, uncached: bool) -> Vec<Row> {
    rows(measured, |case| case_label(case, n), repetitions, uncached)
}

fn table(report: &Report, sizes: &[u64]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "blockcol: {PROCESSES} client processes x {SERVERS} I/O servers, n x n bytes, 1-D block columns, 64 KiB stripes, tcp (MiB/s, all processes, median per call)"
    );
    let _ = writeln!(
        out,
        "{:<14} {:>5} {:>9} {:>9} {:>9} {:>9} | {:>10} {:>8} | {:>9} {:>9} {:>8}",
        "case",
        "n",
        "multiple",
        "sieve",
        "list",
        "list+ads",
        "list/sieve",
        "ads/list",
        "calls lst",
        "calls ads",
        "ads s/b"
    );
    for case in Case::ALL {
        for &n in sizes {
            let label = case_label(case, n);
            let rates = ArrayMethod::ALL.map(|method| rate(report, &label, method));
            if rates.iter().all(|rate| rate.is_nan()) {
                let _ = writeln!(
                    out,
                    "{:<14} {n:>5}   skipped: {UNCACHED_SKIPPED}",
                    case.name()
                );
                continue;
            }
            let list = find(report, &label, ArrayMethod::List);
            let ads = find(report, &label, ArrayMethod::ListAds);
            let _ = writeln!(
                out,
                "{:<14} {n:>5} {:>9.1} {:>9.1} {:>9.1} {:>9.1} | {:>9.2}x {:>7.2}x | {:>9.0} {:>9.0} {:>8.2}",
                case.name(),
                rates[0],
                rates[1],
                rates[2],
                rates[3],
                rates[2] / rates[1],
                rates[3] / rates[2],
                extra_f64(list, "storage_calls"),
                extra_f64(ads, "storage_calls"),
                extra_f64(ads, "storage_bytes_ratio"),
            );
        }
    }
    let (low, high) = PAPER_LIST_OVER_SIEVE_WRITE;
    let _ = writeln!(
        out,
        "paper (001 Fig. 3.6, InfiniBand, PVFS): list over ROMIO sieve writes {low}-{high}x (sync and no sync; ROMIO wrote as multiple I/O, PVFS had no locks); list+ADS ahead of list for small arrays, the curves merging from n = 2048 where the model turns sieving off"
    );
    let _ = writeln!(
        out,
        "paper (001 Fig. 3.7): reads: list comparable to or above ROMIO sieve, which moves the whole array; ADS ahead for small arrays; uncached, sieve ~ list up to n = 2048, then falls off"
    );
    let _ = writeln!(
        out,
        "calls lst / calls ads: storage calls of one call, all servers; ads s/b: storage bytes / useful bytes of list+ads (> 1 where the servers sieved)"
    );
    let _ = writeln!(out, "verified: {}", report.verified);
    out
}

fn write_outputs(common: &CommonArgs, report: &Report, sizes: &[u64]) -> Result<(), String> {
    let mut written = vec![write_csv(common, report)?];
    for (file_name, figure, cases) in [
        (
            "blockcol.png",
            "Fig. 3.6 writes",
            [Case::Write, Case::WriteSync],
        ),
        (
            "blockcol-read.png",
            "Fig. 3.7 reads",
            [Case::Read, Case::ReadUncached],
        ),
    ] {
        let mut series = Vec::new();
        for case in cases {
            let suffix = match case {
                Case::Write | Case::Read => "",
                Case::WriteSync => " sync",
                Case::ReadUncached => " unc",
            };
            for method in ArrayMethod::ALL {
                series.push(Series {
                    name: format!("{}{suffix}", method.name()),
                    points: sizes
                        .iter()
                        .map(|&n| (n as f64, rate(report, &case_label(case, n), method)))
                        .collect(),
                });
            }
        }
        let plot = Plot {
            title: format!("blockcol ({figure}): 4 clients x 4 servers, tcp"),
            x_label: "array side n (bytes)".to_owned(),
            y_label: "MiB/s".to_owned(),
            log2_x: true,
            series,
        };
        written.push(super::write_plot(common, file_name, &plot)?);
    }
    super::report_written(&written);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_cases_repeat_small_arrays_and_disk_cases_call_once() {
        assert_eq!(Case::Write.calls(1 << 20), 4);
        assert_eq!(Case::Read.calls(256 << 20), 1);
        assert_eq!(Case::Write.calls(1024), STEP_CALLS_MAX);
        assert_eq!(Case::WriteSync.calls(1024), 1);
        assert_eq!(Case::ReadUncached.calls(1024), 1);
    }

    #[test]
    fn skipped_uncached_rows_say_why() {
        let measured: [[Measured; 4]; 4] = Default::default();
        let rows = rows_of(&measured, 512, 1, false);
        assert_eq!(rows.len(), 16);
        let skipped: Vec<_> = rows.iter().filter(|row| row.skipped.is_some()).collect();
        assert_eq!(skipped.len(), 4);
        assert!(skipped.iter().all(|row| row.case == "read uncached n=512"));
        let json = serde_json::to_value(skipped[0]).unwrap();
        assert_eq!(json["skipped"], UNCACHED_SKIPPED);
        assert!(serde_json::to_value(&rows[0])
            .unwrap()
            .get("skipped")
            .is_none());
    }
}
