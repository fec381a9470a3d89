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

use std::path::PathBuf;

use serde::Serialize;
use serde_json::json;
use tessera_client::{Client, CreateOptions, ErrorCode};

use super::{drop_page_cache, BenchCluster, CommonArgs};
use crate::report::{
    self, Figure, Line, Measure, Meta, Outcome, Panel, Progress, Report, Scale, Spread,
};
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Case {
    /// Write, no sync: the servers' page cache absorbs it.
    #[serde(rename = "write")]
    Write,
    /// Write, then `File::sync`, both timed.
    #[serde(rename = "write+sync")]
    WriteSync,
    /// Read what the servers hold in their page cache.
    #[serde(rename = "read cached")]
    Read,
    /// Read after the servers' page cache was dropped.
    #[serde(rename = "read uncached")]
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

/// What one call did, summed over the processes (the same in every repetition); flattened
/// into the rows of blockcol, tile and btio.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Figures {
    /// Client-to-server I/O requests.
    pub requests: u64,
    /// File pieces of the access.
    #[serde(rename = "pieces")]
    pub file_pieces: u64,
    /// Useful bytes: the file pieces' total.
    pub bytes: u64,
    /// Bytes that crossed the network (IoReport.bytes: more than `bytes` for `sieve`).
    pub wire_bytes: u64,
    /// Storage calls the servers made.
    pub storage_calls: u64,
    /// Bytes the servers moved to and from storage.
    pub storage_bytes: u64,
    /// Requests the servers served by sieving.
    #[serde(rename = "sieved_requests")]
    pub sieved: u64,
    /// Range locks taken on the mds (sieve writes).
    pub locks: u64,
}

impl Figures {
    /// `storage_bytes / bytes`.
    pub(super) fn storage_bytes_ratio(&self) -> f64 {
        self.storage_bytes as f64 / self.bytes.max(1) as f64
    }
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
    super::open_cluster(common, SERVERS)
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
                cache: None,
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

/// One (case, n, method) of blockcol, or (case, method) of tile: a row of the sweep both
/// run.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRow {
    /// Write, write+sync, read cached or read uncached.
    pub case: Case,
    /// The array side (blockcol only).
    pub n: Option<u64>,
    /// The method.
    pub method: &'static str,
    /// MiB/s and seconds, median over the repetitions, and the MiB/s range.
    #[serde(flatten)]
    pub measure: Measure,
    /// What one call did, all processes.
    #[serde(flatten)]
    pub figures: Figures,
    /// `storage_bytes / bytes`.
    pub storage_bytes_ratio: f64,
    /// Calls per timed step.
    pub calls: u64,
    /// Repetitions measured.
    pub repetitions: usize,
    /// Why this row was not measured.
    pub skipped: Option<String>,
}

impl report::Row for SweepRow {
    fn key(&self) -> (String, &str) {
        (case_label(self.case, self.n), self.method)
    }
}

/// The case label of a row.
pub(super) fn case_label(case: Case, n: Option<u64>) -> String {
    match n {
        Some(n) => format!("{} n={n}", case.name()),
        None => case.name().to_owned(),
    }
}

/// The rows of one measured share: one per (case, method); `n` is blockcol's array side.
pub(super) fn rows(
    measured: &[[Measured; 4]; 4],
    n: Option<u64>,
    repetitions: usize,
    uncached: bool,
) -> Result<Vec<SweepRow>, String> {
    let mut rows = Vec::new();
    for (case, by_method) in Case::ALL.into_iter().zip(measured) {
        for (method, measured) in ArrayMethod::ALL.into_iter().zip(by_method) {
            let figures = measured.figures;
            let skipped = case == Case::ReadUncached && !uncached;
            let measure = if skipped {
                Measure::none()
            } else {
                let seconds = Spread::of(&measured.seconds).map_err(|err| {
                    format!(
                        "case \"{}\", method \"{}\": {err}",
                        case_label(case, n),
                        method.name()
                    )
                })?;
                Measure::of_seconds(seconds, figures.bytes)
            };
            rows.push(SweepRow {
                case,
                n,
                method: method.name(),
                measure,
                figures,
                storage_bytes_ratio: figures.storage_bytes_ratio(),
                calls: measured.calls,
                repetitions,
                skipped: skipped.then(|| UNCACHED_SKIPPED.to_owned()),
            });
        }
    }
    Ok(rows)
}

/// The measured row of (case, method), `None` where it was skipped.
pub(super) fn measured<'r>(
    report: &'r Report<SweepRow>,
    case: &str,
    method: ArrayMethod,
) -> Result<Option<&'r SweepRow>, String> {
    let row = report.row(case, method.name())?;
    Ok(row.skipped.is_none().then_some(row))
}

/// The lines of `cases` against `x`: one per (case, method) with a measured point, named
/// `METHOD` for the first case and `METHOD, SUFFIX` for others.
pub(super) fn case_lines(
    report: &Report<SweepRow>,
    cases: &[(Case, &str)],
    xs: &[(f64, Option<u64>)],
) -> Result<Vec<Line>, String> {
    let mut lines = Vec::new();
    for &(case, suffix) in cases {
        for method in ArrayMethod::ALL {
            let mut points = Vec::new();
            for &(x, n) in xs {
                if let Some(row) = measured(report, &case_label(case, n), method)? {
                    points.push(row.measure.point(x));
                }
            }
            if !points.is_empty() {
                lines.push(Line {
                    name: if suffix.is_empty() {
                        method.name().to_owned()
                    } else {
                        format!("{}, {suffix}", method.name())
                    },
                    points,
                });
            }
        }
    }
    Ok(lines)
}

/// Runs the experiment and writes its report.
pub fn run(common: &CommonArgs) -> Result<Outcome, String> {
    let (cluster, client) = open_cluster(common)?;
    let path = format!("/bench/blockcol-{}", std::process::id());
    let sizes: &[u64] = if common.quick {
        &SIZES_QUICK
    } else {
        &SIZES_FULL
    };
    let repetitions = REPETITIONS;
    let progress = Progress::new("blockcol", sizes.len() as u64);
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
        rows.extend(
            self::rows(&measured, Some(n), repetitions, sweep.uncached())
                .map_err(|err| format!("bench blockcol: {err}"))?,
        );
        progress.step(&format!("n={n}"));
    }
    let _ = client.unlink(&path);
    drop(progress);
    let uncached = sweep.uncached();
    let verified = sweep.verified;
    drop(sweep);
    let report = Report {
        bench: "blockcol",
        quick: common.quick,
        meta: Meta::now(repetitions),
        config: json!({
            "servers": SERVERS,
            "clients": PROCESSES,
            "transport": "tcp",
            "array": "n x n elements, C order, one file; process r owns columns [r*n/4, (r+1)*n/4): n file pieces of n/4 elements, memory one contiguous buffer",
            "element_bytes": ELEMENT_BYTES,
            "sizes_n": sizes,
            "stripe_unit_bytes": tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT,
            "methods": methods_config(),
            "cases": cases_config(uncached),
            "repetitions": repetitions,
            "step_bytes_min": STEP_BYTES_MIN,
            "timing": "each step: prepare (open; an untimed one-byte-per-server warm-up call), barrier, `calls` timed calls, barrier, then verification; seconds per call = slowest process / calls; mib_s from the median over the repetitions, mib_s_min and mib_s_max their range",
            "figures": "per call, all processes: bytes = useful bytes (the file pieces' total; mib_s counts these); requests = client-to-server I/O requests; pieces = file pieces of the access; wire_bytes = bytes that crossed the network (sieve moves the holes too); storage_calls = storage calls the servers made (IoReport.storage_pieces); storage_bytes = bytes they moved to and from storage; sieved_requests = requests they served by sieving; locks = range locks taken on the mds (sieve writes); storage_bytes_ratio = storage_bytes / bytes",
            "verify": "every byte read back == expected_byte(file offset, generation of the last write)",
        }),
        verified,
        rows,
    };
    let text = text(&report, sizes)?;
    report.finish(common, &text, &[figure(&report, sizes)?])
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

/// The table of a sweep: one line per case label, `lead` cells first, then the four
/// methods' MiB/s, the `ratios` (numerator over denominator), and the storage calls of list
/// and list+ads and list+ads' storage bytes over useful bytes. Returns the table and a note
/// naming the cases skipped.
pub(super) fn sweep_table(
    report: &Report<SweepRow>,
    lead: &[&str],
    cases: &[(String, Vec<String>)],
    ratios: &[(ArrayMethod, ArrayMethod)],
) -> Result<(comfy_table::Table, String), String> {
    let short = |method: ArrayMethod| match method {
        ArrayMethod::Multiple => "mult",
        ArrayMethod::ListAds => "ads",
        other => other.name(),
    };
    let mut header: Vec<String> = lead.iter().map(|&cell| cell.to_owned()).collect();
    header.extend(
        ArrayMethod::ALL
            .iter()
            .map(|method| method.name().to_owned()),
    );
    header.extend(
        ratios
            .iter()
            .map(|&(a, b)| format!("{}/{}", short(a), short(b))),
    );
    header.extend(["calls lst", "calls ads", "ads s/b"].map(str::to_owned));
    let mut table = report::table(header);
    let mut skipped = Vec::new();
    for (label, lead) in cases {
        let mut rows = Vec::new();
        for method in ArrayMethod::ALL {
            rows.extend(measured(report, label, method)?);
        }
        let [_, _, list, ads] = rows[..] else {
            skipped.push(label.clone());
            continue;
        };
        let rate = |method: ArrayMethod| {
            let index = ArrayMethod::ALL.iter().position(|&one| one == method);
            rows[index.expect("every method is in ALL")].measure.mib_s
        };
        let mut cells = lead.clone();
        cells.extend(rows.iter().map(|row| report::cell(row.measure.mib_s, 1)));
        cells.extend(ratios.iter().map(|&(a, b)| report::ratio(rate(a), rate(b))));
        cells.extend([
            list.figures.storage_calls.to_string(),
            ads.figures.storage_calls.to_string(),
            report::cell(ads.storage_bytes_ratio, 2),
        ]);
        table.add_row(cells);
    }
    let note = if skipped.is_empty() {
        String::new()
    } else {
        format!("skipped {}: {UNCACHED_SKIPPED}\n", skipped.join(", "))
    };
    Ok((table, note))
}

fn text(report: &Report<SweepRow>, sizes: &[u64]) -> Result<String, String> {
    let mut cases = Vec::new();
    for case in Case::ALL {
        for &n in sizes {
            let lead = vec![case.name().to_owned(), n.to_string()];
            cases.push((case_label(case, Some(n)), lead));
        }
    }
    let ratios = [
        (ArrayMethod::List, ArrayMethod::Sieve),
        (ArrayMethod::ListAds, ArrayMethod::List),
    ];
    let (table, skipped) = sweep_table(report, &["case", "n"], &cases, &ratios)?;
    let (low, high) = PAPER_LIST_OVER_SIEVE_WRITE;
    Ok(format!(
        "blockcol: {PROCESSES} client processes x {SERVERS} I/O servers, n x n bytes, 1-D block columns, 64 KiB stripes, tcp (MiB/s, all processes, median per call of {} repetitions)\n{table}\n{skipped}\
         paper (001 Fig. 3.6, InfiniBand, PVFS): list over ROMIO sieve writes {low}-{high}x (sync and no sync; ROMIO wrote as multiple I/O, PVFS had no locks); list+ADS ahead of list for small arrays, the curves merging from n = 2048 where the model turns sieving off\n\
         paper (001 Fig. 3.7): reads: list comparable to or above ROMIO sieve, which moves the whole array; ADS ahead for small arrays; uncached, sieve ~ list up to n = 2048, then falls off\n\
         calls lst / calls ads: storage calls of one call, all servers; ads s/b: storage bytes / useful bytes of list+ads (> 1 where the servers sieved)\n\
         verified: {}\n",
        report.meta.repetitions, report.verified
    ))
}

/// 001 Figs. 3.6 (writes) and 3.7 (reads): MiB/s against n, one line per (case, method).
fn figure(report: &Report<SweepRow>, sizes: &[u64]) -> Result<Figure, String> {
    let xs: Vec<(f64, Option<u64>)> = sizes.iter().map(|&n| (n as f64, Some(n))).collect();
    let mut panels = Vec::new();
    for (title, cases) in [
        (
            "Fig. 3.6: writes",
            [(Case::Write, ""), (Case::WriteSync, "sync")],
        ),
        (
            "Fig. 3.7: reads",
            [(Case::Read, ""), (Case::ReadUncached, "uncached")],
        ),
    ] {
        let mut panel = Panel::new(
            title,
            ("array side n (bytes)", Scale::Log2),
            ("MiB/s (all processes)", Scale::Log10),
        );
        panel.lines = case_lines(report, &cases, &xs)?;
        panels.push(panel);
    }
    Ok(Figure {
        stem: "blockcol".to_owned(),
        title: format!(
            "blockcol: {PROCESSES} clients x {SERVERS} servers, 1-D block columns, tcp (median, min-max of {} repetitions)",
            report.meta.repetitions
        ),
        panels,
    })
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
    fn skipped_uncached_rows_say_why_and_unmeasured_rows_are_errors() {
        let mut measured: [[Measured; 4]; 4] = Default::default();
        assert!(rows(&measured, Some(512), 1, false).is_err());
        for by_method in &mut measured[..3] {
            for entry in by_method {
                entry.seconds = vec![0.5, 0.25];
                entry.figures.bytes = 1 << 20;
            }
        }
        let rows = rows(&measured, Some(512), 2, false).unwrap();
        assert_eq!(rows.len(), 16);
        let skipped: Vec<_> = rows.iter().filter(|row| row.skipped.is_some()).collect();
        assert_eq!(skipped.len(), 4);
        assert!(skipped.iter().all(|row| row.case == Case::ReadUncached));
        let json = serde_json::to_value(skipped[0]).unwrap();
        assert_eq!(json["skipped"], UNCACHED_SKIPPED);
        assert_eq!(json["case"], "read uncached");
        let first = serde_json::to_value(&rows[0]).unwrap();
        assert!(first["skipped"].is_null());
        assert_eq!(first["case"], "write");
        // 1 MiB in 0.5 s and 0.25 s: 2 and 4 MiB/s, median 3 (of the seconds' midpoint).
        assert!(
            (rows[0].measure.mib_s_min - 2.0).abs() < 1e-9
                && (rows[0].measure.mib_s_max - 4.0).abs() < 1e-9
        );
    }
}
