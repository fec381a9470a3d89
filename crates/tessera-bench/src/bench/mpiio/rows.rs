//! The rows of `bench mpiio` ([`MpiioRow`]: medians over the repetitions of what the sweep
//! measured per MPI, case and column), the text table per MPI with issue 15's acceptance
//! notes, and the figure of the contiguous independent access.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::json;

use super::{
    size_name, Case, CommonArgs, Plan, SampleMap, Sweep, ACCEPTANCE_RATIO, ACCEPTANCE_TRANSFER_MIN,
    METHODS, PROCESS_COUNTS, SERVERS, STRIDED_BLOCK_BYTES_MAX,
};
use crate::report::{self, Direction, Figure, Line, Measure, Meta, Panel, Report, Scale, Spread};

/// One (MPI, direction, access, pattern, transfer, processes, column) of mpiio: the median
/// over the repetitions and its range; a column that could not run has `skipped` and no
/// figures.
#[derive(Debug, Clone, Serialize)]
pub struct MpiioRow {
    /// The MPI of the MPI columns (the native column runs beside them).
    pub mpi: String,
    /// Writes or reads.
    pub direction: Direction,
    /// `independent` (write_at/read_at) or `collective` (write_at_all/read_at_all).
    pub access: &'static str,
    /// `contiguous` (IOR segments) or `strided` (a vector file view).
    pub pattern: &'static str,
    /// Bytes per call.
    pub transfer_bytes: u64,
    /// Processes.
    pub processes: u32,
    /// Calls per process per phase.
    pub segments: u64,
    /// The strided view's block (the transfer when contiguous).
    pub block_bytes: u64,
    /// The column: `tessera-mpiio`, `native` or `local-mpiio`.
    pub method: &'static str,
    /// Bytes all processes moved in one phase.
    pub bytes: u64,
    /// MiB/s and seconds of the phase (the slowest process), medians over the repetitions;
    /// `null` for a column that did not run.
    #[serde(flatten)]
    pub measure: Measure,
    /// GB/s (10^9 bytes), median.
    pub gb_s: Option<f64>,
    /// One barrier alone, median (each timed phase includes one).
    pub barrier_seconds: Option<f64>,
    /// Native's median seconds over this column's: above 1, this column is faster.
    pub ratio_vs_native: Option<f64>,
    /// local-mpiio's median seconds over this column's.
    pub ratio_vs_local_mpiio: Option<f64>,
    /// Client requests, all processes and calls (native only: the MPI columns count none).
    pub requests: Option<u64>,
    /// Server storage pieces (native only).
    pub storage_pieces: Option<u64>,
    /// Requests whose data moved one-sidedly (native only).
    pub one_sided_requests: Option<u64>,
    /// Bytes the client copied (native only).
    pub bytes_copied: Option<u64>,
    /// The library's `tessera_method` in effect (tessera-mpiio).
    pub tessera_method: Option<String>,
    /// The library's `tessera_coll` in effect (tessera-mpiio).
    pub tessera_coll: Option<String>,
    /// ROMIO's `romio_cb_write` in effect (the MPI columns under ROMIO).
    pub romio_cb_write: Option<String>,
    /// ROMIO's `romio_ds_write` in effect.
    pub romio_ds_write: Option<String>,
    /// Every word read back was right in every repetition.
    pub verified: Option<bool>,
    /// Repetitions measured.
    pub repetitions: usize,
    /// Why this column was not measured.
    pub skipped: Option<String>,
}

impl report::Row for MpiioRow {
    fn key(&self) -> (String, &str) {
        (
            case_name(
                self.direction,
                self.access,
                self.pattern,
                self.transfer_bytes,
                self.processes,
                &self.mpi,
            ),
            self.method,
        )
    }
}

/// The case label of a row.
pub(super) fn case_name(
    direction: Direction,
    access: &str,
    pattern: &str,
    transfer: u64,
    processes: u32,
    mpi: &str,
) -> String {
    format!(
        "{direction} {access} {pattern} {} p{processes} {mpi}",
        size_name(transfer)
    )
}

/// An empty hint (the program prints "" for a hint not in effect) is none.
fn hint(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_owned())
}

/// A row of `case` and `method` without figures yet.
fn empty_row(
    plan: &Plan,
    sweep: &Sweep,
    case: Case,
    direction: Direction,
    method: &'static str,
) -> MpiioRow {
    MpiioRow {
        mpi: plan.mpi_name.clone(),
        direction,
        access: case.access(),
        pattern: case.pattern(),
        transfer_bytes: case.transfer,
        processes: case.processes,
        segments: sweep.segments(case.transfer),
        block_bytes: if case.strided {
            case.block()
        } else {
            case.transfer
        },
        method,
        bytes: sweep.segments(case.transfer) * case.transfer * u64::from(case.processes),
        measure: Measure::none(),
        gb_s: None,
        barrier_seconds: None,
        ratio_vs_native: None,
        ratio_vs_local_mpiio: None,
        requests: None,
        storage_pieces: None,
        one_sided_requests: None,
        bytes_copied: None,
        tessera_method: None,
        tessera_coll: None,
        romio_cb_write: None,
        romio_ds_write: None,
        verified: None,
        repetitions: 0,
        skipped: None,
    }
}

pub(super) fn report(
    common: &CommonArgs,
    sweep: &Sweep,
    plans: &[Plan],
    samples: &SampleMap,
    elapsed: f64,
) -> Result<Report<MpiioRow>, String> {
    let mut rows = Vec::new();
    let mut verified = true;
    for plan in plans {
        for processes in PROCESS_COUNTS {
            for case in sweep.cases(processes) {
                for direction in Direction::BOTH {
                    let name = case.name(direction, &plan.mpi_name);
                    let mut medians: BTreeMap<&str, Spread> = BTreeMap::new();
                    for method in METHODS {
                        if let Some(found) = samples.get(&(plan.mpi_name.clone(), case, method)) {
                            let seconds = match direction {
                                Direction::Write => &found.write,
                                Direction::Read => &found.read,
                            };
                            let spread = Spread::of(seconds).map_err(|err| {
                                format!("bench mpiio: case \"{name}\", method \"{method}\": {err}")
                            })?;
                            medians.insert(method, spread);
                        }
                    }
                    for method in METHODS {
                        let mut row = empty_row(plan, sweep, case, direction, method);
                        let skipped = match method {
                            "tessera-mpiio" | "local-mpiio" => plan.skip_mpi.clone(),
                            _ => None,
                        };
                        if let Some(reason) = skipped {
                            row.skipped = Some(reason);
                            rows.push(row);
                            continue;
                        }
                        let (Some(found), Some(seconds)) = (
                            samples.get(&(plan.mpi_name.clone(), case, method)),
                            medians.get(method),
                        ) else {
                            return Err(format!(
                                "bench mpiio: case \"{name}\", method \"{method}\" was not measured"
                            ));
                        };
                        verified &= found.verified;
                        let ratio = |other: &str| {
                            medians
                                .get(other)
                                .map(|theirs| theirs.median / seconds.median)
                        };
                        let last = found.last.as_ref();
                        let figures = last.and_then(|outcome| match direction {
                            Direction::Write => outcome.write_report,
                            Direction::Read => outcome.read_report,
                        });
                        let barrier = Spread::of(&found.barrier).map_err(|err| {
                            format!(
                                "bench mpiio: case \"{name}\", method \"{method}\": barrier: {err}"
                            )
                        })?;
                        row.measure = Measure::of_seconds(*seconds, row.bytes);
                        row.gb_s = Some(row.bytes as f64 / seconds.median / 1e9);
                        row.barrier_seconds = Some(barrier.median);
                        row.ratio_vs_native = ratio("native");
                        row.ratio_vs_local_mpiio = ratio("local-mpiio");
                        row.requests = figures.map(|f| f.requests);
                        row.storage_pieces = figures.map(|f| f.storage_pieces);
                        row.one_sided_requests = figures.map(|f| f.one_sided);
                        row.bytes_copied = figures.map(|f| f.bytes_copied);
                        row.tessera_method = last.and_then(|o| hint(&o.tessera_method));
                        row.tessera_coll = last.and_then(|o| hint(&o.tessera_coll));
                        row.romio_cb_write = last.and_then(|o| hint(&o.romio_cb_write));
                        row.romio_ds_write = last.and_then(|o| hint(&o.romio_ds_write));
                        row.verified = Some(found.verified);
                        row.repetitions = found.write.len();
                        rows.push(row);
                    }
                }
            }
        }
    }
    Ok(Report {
        bench: "mpiio",
        quick: common.quick,
        meta: Meta::now(sweep.repetitions),
        config: json!({
            "servers": SERVERS,
            "clients": PROCESS_COUNTS,
            "transport": "the client's default: the local one-sided backend on the servers' host",
            "mpis": plans.iter().map(|plan| plan.mpi_name.clone()).collect::<Vec<_>>(),
            "programs": plans.iter().map(|plan| plan.program.as_ref().map(|p| p.display().to_string())).collect::<Vec<_>>(),
            "source": "mpiio/bench/mpiio.c",
            "shims": plans.iter().map(|plan| plan.shim.as_ref().map(|s| s.display().to_string())).collect::<Vec<_>>(),
            "transfers": sweep.transfers,
            "process_bytes_per_case": sweep.process_bytes,
            "segments": "max(1, process_bytes_per_case / transfer) calls per process per phase",
            "repetitions": sweep.repetitions,
            "strided_block_bytes_max": STRIDED_BLOCK_BYTES_MAX,
            "patterns": "contiguous: call s of rank r at file offset (s*P + r)*T through the default view (IOR segments, block = transfer); strided: MPI_Type_vector(S*T/B, B, P*B, MPI_BYTE) at displacement r*B, B = min(T, 64 KiB), call s at view offset s*T",
            "methods": {
                "tessera-mpiio": "mpiio.c with libtessera_mpiio.so preloaded, default hints (tessera_method auto, tessera_coll server_directed), on a file of the cluster",
                "native": "tessera mpiio-worker processes: File::write_at/read_at (contiguous independent), ViewedFile::write/read with the same view and MPI_BYTE-like memory (strided independent), ViewedFile::write_all/read_all with CollectiveOptions::default() over a SocketCommunicator (collective), on another file of the cluster",
                "local-mpiio": "mpiio.c without the library on a file in a temporary directory (the MPI's own MPI-IO)",
            },
            "timing": "each phase: truncate to 0 (untimed), barrier, the timed calls, barrier; the slowest process's time. barrier_seconds is one barrier alone: with 4 processes on 2 cores (oversubscribed, ranks polling) an MPICH barrier costs milliseconds, on both MPI columns; the native workers' socket barriers do not poll",
            "order": "one group of processes per column and process count, kept up for the sweep; every case runs on the three columns in turn, the order rotating by case and repetition; rows are medians over the repetitions (min/max kept)",
            "verify": "every 8-byte word read back equals a formula of its file offset, writing rank and a per-run generation; the file size is P*S*T; in the first repetition each process also reads its share of the whole file through the default view and checks whose data lies where",
            "requests_pieces": "client requests and server storage pieces are counted by the native workers only; the MPI columns' are null",
            "elapsed_seconds": elapsed,
        }),
        verified,
        rows,
    })
}

/// A rate for a table cell: "skip" for a column that did not run.
fn rate(row: &MpiioRow) -> String {
    row.measure
        .measured()
        .map_or_else(|| "skip".to_owned(), |mib_s| report::cell(mib_s, 1))
}

/// The table per MPI and the acceptance notes of issue 15.
pub(super) fn text(
    report: &Report<MpiioRow>,
    plans: &[Plan],
    sweep: &Sweep,
) -> Result<String, String> {
    let mut out = format!(
        "mpiio: IOR-style MPI-IO through libtessera_mpiio.so on {SERVERS} servers vs tessera-client natively vs the MPI's own MPI-IO on a local file (MiB/s, median of {}; spread in the CSV/JSON)\n",
        sweep.repetitions
    );
    for plan in plans {
        let _ = writeln!(out, "-- {} --", plan.mpi_name);
        if let Some(reason) = &plan.skip_mpi {
            let _ = writeln!(out, "skipped columns: {reason}");
        }
        let mut table = report::table([
            "op", "access", "pattern", "T", "P", "tessera", "native", "local", "t/native",
            "t/local",
        ]);
        let mut worst: BTreeMap<(&str, &str), f64> = BTreeMap::new();
        for processes in PROCESS_COUNTS {
            for case in sweep.cases(processes) {
                for direction in Direction::BOTH {
                    let name = case.name(direction, &plan.mpi_name);
                    let tessera = report.row(&name, METHODS[0])?;
                    let native = report.row(&name, METHODS[1])?;
                    let local = report.row(&name, METHODS[2])?;
                    let ratio = |other: &MpiioRow| {
                        Some(tessera.measure.measured()? / other.measure.measured()?)
                    };
                    let show = |value: Option<f64>| {
                        value.map_or_else(|| "-".to_owned(), |v| report::cell(v, 2))
                    };
                    if let Some(value) = ratio(native) {
                        if case.transfer >= ACCEPTANCE_TRANSFER_MIN && !case.strided {
                            let op = match direction {
                                Direction::Write => "write",
                                Direction::Read => "read",
                            };
                            let entry = worst.entry((op, case.access())).or_insert(f64::INFINITY);
                            *entry = entry.min(value);
                        }
                    }
                    table.add_row([
                        direction.to_string(),
                        case.access().to_owned(),
                        case.pattern().to_owned(),
                        size_name(case.transfer),
                        processes.to_string(),
                        rate(tessera),
                        rate(native),
                        rate(local),
                        show(ratio(native)),
                        show(ratio(local)),
                    ]);
                }
            }
        }
        let _ = writeln!(out, "{table}");
        let barriers: Vec<String> = METHODS
            .iter()
            .filter_map(|&method| {
                let seconds: Vec<f64> = report
                    .rows
                    .iter()
                    .filter(|row| {
                        row.method == method && row.mpi == plan.mpi_name && row.processes == 4
                    })
                    .filter_map(|row| row.barrier_seconds)
                    .collect();
                let spread = Spread::of(&seconds).ok()?;
                Some(format!("{method} {:.2} ms", spread.median * 1e3))
            })
            .collect();
        if !barriers.is_empty() {
            let _ = writeln!(
                out,
                "one barrier alone, 4 processes (each timed phase includes one): {}",
                barriers.join(", ")
            );
        }
        for ((op, access), ratio) in &worst {
            let _ = writeln!(out,
                "acceptance (issue 15): contiguous {access} {op}, T >= 1 MiB: lowest tessera-mpiio / native = {ratio:.2} ({} {ACCEPTANCE_RATIO})",
                if *ratio >= ACCEPTANCE_RATIO { "meets" } else { "below" }
            );
        }
        let four = Case {
            collective: false,
            strided: false,
            transfer: 4 << 20,
            processes: 4,
        };
        if sweep.transfers.contains(&four.transfer) {
            for direction in Direction::BOTH {
                let name = four.name(direction, &plan.mpi_name);
                let gb_s = |method: &str| -> Result<String, String> {
                    Ok(report
                        .row(&name, method)?
                        .gb_s
                        .map_or_else(|| "-".to_owned(), |gb_s| report::cell(gb_s, 3)))
                };
                let _ = writeln!(out,
                    "4 processes x 4 MiB contiguous independent {direction}: tessera-mpiio {} GB/s, native {} GB/s, local-mpiio {} GB/s (issue 15 asks >= {} GB/s through the library)",
                    gb_s(METHODS[0])?,
                    gb_s(METHODS[1])?,
                    gb_s(METHODS[2])?,
                    match direction {
                        Direction::Write => 1,
                        Direction::Read => 2,
                    }
                );
            }
        }
    }
    let _ = writeln!(out, "verified: {}", report.verified);
    Ok(out)
}

/// The first MPI's 4-process contiguous independent access: MiB/s against the transfer per
/// column, writes and reads side by side, bars spanning the repetitions.
pub(super) fn figure(report: &Report<MpiioRow>, plans: &[Plan]) -> Result<Figure, String> {
    let mpi = plans
        .first()
        .map(|plan| plan.mpi_name.clone())
        .ok_or_else(|| "bench mpiio: no MPI to draw".to_owned())?;
    let mut panels = Vec::new();
    for direction in Direction::BOTH {
        let mut panel = Panel::new(
            &format!("{direction}_at, 4 processes, contiguous"),
            ("transfer (bytes per call)", Scale::Log2),
            ("MiB/s", Scale::Linear),
        );
        for method in METHODS {
            let rows: Vec<&MpiioRow> = report
                .rows
                .iter()
                .filter(|row| {
                    row.method == method
                        && row.mpi == mpi
                        && row.direction == direction
                        && row.access == "independent"
                        && row.pattern == "contiguous"
                        && row.processes == 4
                })
                .collect();
            if rows.is_empty() {
                return Err(format!(
                    "bench mpiio: no rows of {method}, {direction}, 4 processes, contiguous independent under {mpi}"
                ));
            }
            if rows.iter().any(|row| row.skipped.is_some()) {
                continue;
            }
            let mut points = Vec::new();
            for row in rows {
                if row.measure.measured().is_none() {
                    return Err(format!(
                        "bench mpiio: case \"{}\", method \"{method}\" has no rate",
                        report::Row::key(row).0
                    ));
                }
                points.push(row.measure.point(row.transfer_bytes as f64));
            }
            panel.lines.push(Line {
                name: method.to_owned(),
                points,
            });
        }
        panels.push(panel);
    }
    Ok(Figure {
        stem: "mpiio".to_owned(),
        title: format!("mpiio ({mpi}): IOR-style MPI-IO, bars: min-max of the repetitions"),
        panels,
    })
}
