//! `tessera bench views` (seed 002 §4: Tables 2-3, Figs. 2-4, §4.3).
//!
//! Four client processes share an n x n matrix of bytes in one file striped over four
//! servers (64 KiB units). Each process's share is an MPI darray of one of three HPF
//! distributions — (BLOCK,BLOCK) and (CYCLIC(k),CYCLIC(k)) over a 2 x 2 grid, (*,BLOCK)
//! over 1 x 4 — and moves between one contiguous buffer and the file by two methods:
//! `list` (the flattened type as one list call, so every request carries 16 bytes per
//! piece) and `view` (the type declared once before timing, then one `write_at`/`read_at`
//! of the whole share, so a request carries only its stream range). A third method runs
//! the (*,BLOCK) view on a second file whose pattern layout matches the distribution
//! (server i holds columns [i*n/4, (i+1)*n/4) of every row), against the same view on
//! stripes, and against its bound, `contiguous`: each process's quarter of the matrix as one
//! list piece on a file whose stripe unit is that quarter (one piece from one slice to one
//! server, no type). Each call of every method is also broken into phases: the client's
//! planning and the slowest server's type walk (timed apart after the calls, the walk with the
//! iods' own `server_share`; what a view's first call of a range costs, since later calls of
//! the same range reuse the view's kept plan and the iods' kept shares), and the call's send
//! and reply times (`IoReport::send_ns`,
//! `reply_ns`). Within a repetition each group of methods writes and then reads back, the
//! groups in an order shuffled anew in each repetition ([`report::turn_order`]). List and view
//! of one distribution on stripes form one group, whose calls take turns one by one within a
//! step ([`groups`]); each method of the layout match is a group of its own. Every read is
//! verified byte by byte against `expected_byte(file offset = row * n + column, generation)`.
//!
//! The parts: the turns and the sweep that measures them are here; [`bound`] measures the
//! tcp bounds, [`rows`] turns the measurements into rows, [`text`] writes the tables and
//! the figure.

mod bound;
mod rows;
mod text;

use serde_json::json;
use tessera_client::{Client, CreateOptions, Datatype, ErrorCode};

use super::{BenchCluster, CommonArgs};
use crate::report::{self, Meta, Outcome, Progress, Report};
use crate::workers::{
    MatrixDistribution, Pattern, StepResult, Task, Workers, LIST_OFFSET_BYTES_PER_PIECE,
    MATRIX_PROCESSES, VIEW_OFFSET_BYTES_PER_REQUEST,
};
use bound::{bound_rows, Bounds};
use rows::size_rows;
use text::{figure, text};

const PROCESSES: usize = MATRIX_PROCESSES;
const SERVERS: u16 = 4;
/// k of (CYCLIC(k),CYCLIC(k)), in bytes: fixed, so the pieces per process grow as n^2.
const CYCLIC_BLOCK_BYTES: u64 = 16;
const SIZES_QUICK: [u64; 5] = [128, 256, 512, 1024, 2048];
const SIZES_FULL: [u64; 6] = [128, 256, 512, 1024, 2048, 4096];
/// Bytes all processes move per timed step at least: smaller matrices repeat the call, so
/// a step lasts 15-30 ms, several scheduler time slices of a shared 2-core machine running 8
/// processes (with 8 MiB steps of 3-8 ms, one preemption decided a step, and the view/list
/// ratio of two equal methods spread over ±15 %).
const STEP_BYTES_MIN: u64 = 32 << 20;
/// The same for (CYCLIC,CYCLIC), whose 16-byte pieces make a byte cost ~20x more: 4 MiB is
/// as long a step.
const STEP_BYTES_MIN_CYCLIC: u64 = 4 << 20;
/// Most calls per timed step.
const STEP_CALLS_MAX: u64 = 256;

const DISTRIBUTIONS: [MatrixDistribution; 3] = [
    MatrixDistribution::BlockBlock,
    MatrixDistribution::StarBlock,
    MatrixDistribution::CyclicCyclic {
        block_bytes: CYCLIC_BLOCK_BYTES,
    },
];

/// Seed 002 Table 2 (16 processes, CYCLIC): matrix MiB, list I/O calls, view I/O calls.
const PAPER_TABLE_2: [(u64, u64, u64); 4] =
    [(1, 1504, 16), (4, 2992, 16), (9, 4480, 16), (16, 5968, 16)];
/// Seed 002 Table 3 (16 processes, CYCLIC): matrix MiB, list offset bytes, overhead %.
const PAPER_TABLE_3: [(u64, u64, f64); 4] = [
    (1, 196_608, 18.75),
    (4, 393_216, 9.38),
    (9, 589_824, 6.25),
    (16, 786_432, 4.69),
];

/// Most repetitions `--repetitions` takes.
const REPETITIONS_MAX: u64 = 100;
/// The matrix sides `--sizes` takes: multiples of [`SIZE_STEP`] (so each of the 4 processes'
/// shares is whole in every distribution) up to [`SIZE_MAX`] (a 64 MiB matrix).
const SIZE_STEP: u64 = 64;
const SIZE_MAX: u64 = 8192;

/// Arguments of `tessera-bench views`.
#[derive(Debug, Clone, clap::Args)]
pub struct ViewsArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Matrix sides n, comma-separated: multiples of 64 up to 8192 (default: 128 to 4096 by
    /// powers of 2, --quick up to 2048).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    pub sizes: Vec<u64>,
    /// Repetitions of every measurement, medians reported (default: 15, --quick 9; at most
    /// 100). `--sizes 64 --repetitions 1` checks every row's data and figures in seconds,
    /// without meaningful timings.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=REPETITIONS_MAX))]
    pub repetitions: Option<u64>,
}

fn parse_size(text: &str) -> Result<u64, String> {
    let n: u64 = text
        .parse()
        .map_err(|err| format!("matrix side {text:?}: {err}"))?;
    if n == 0 || !n.is_multiple_of(SIZE_STEP) || n > SIZE_MAX {
        return Err(format!(
            "matrix side {n}: must be a multiple of {SIZE_STEP} between {SIZE_STEP} and {SIZE_MAX}"
        ));
    }
    Ok(n)
}

/// One (distribution, method) pair measured in every repetition.
#[derive(Debug, Clone, Copy)]
struct Turn {
    distribution: MatrixDistribution,
    /// `list` or `view`, as the worker knows it.
    via: &'static str,
    /// On the file with the matching (*,BLOCK) pattern layout rather than stripes.
    pattern_file: bool,
    /// The bound of the layout match: each process's quarter of the matrix as one
    /// contiguous list piece on a file whose stripe unit is that quarter, so process i
    /// moves one piece to server i (the same bytes, servers and requests as the matched
    /// view, with no type and one storage call).
    contiguous: bool,
}

impl Turn {
    /// Calls per timed step for an n x n matrix.
    fn calls(self, n: u64) -> u64 {
        let step_bytes = match self.distribution {
            MatrixDistribution::CyclicCyclic { .. } => STEP_BYTES_MIN_CYCLIC,
            _ => STEP_BYTES_MIN,
        };
        (step_bytes / (n * n)).clamp(1, STEP_CALLS_MAX)
    }

    fn method(self) -> &'static str {
        if self.contiguous {
            "contiguous"
        } else if self.pattern_file {
            "view-pattern"
        } else {
            self.via
        }
    }
}

/// The (*,BLOCK) turns' step length, for the transport's bound.
const STAR_BLOCK_TURN: Turn = Turn {
    distribution: MatrixDistribution::StarBlock,
    via: "view",
    pattern_file: true,
    contiguous: false,
};

fn turns() -> Vec<Turn> {
    let mut turns = Vec::new();
    for distribution in DISTRIBUTIONS {
        for via in ["list", "view"] {
            turns.push(Turn {
                distribution,
                via,
                pattern_file: false,
                contiguous: false,
            });
        }
        if distribution == MatrixDistribution::StarBlock {
            turns.push(Turn {
                distribution,
                via: "view",
                pattern_file: true,
                contiguous: false,
            });
            turns.push(Turn {
                distribution,
                via: "gather",
                pattern_file: false,
                contiguous: true,
            });
        }
    }
    turns
}

/// The turns measured together: list and view of one distribution on stripes, whose calls
/// take turns one by one in one step ([`Workers::step_grouped`]), so the two are compared at
/// the same moments of the machine. Each turn of the layout match is a step of its own: a
/// matched call reaches one server, and among the striped calls of the other processes it
/// would wait behind them (measured: half its speed), so it is timed with its own kind only.
fn groups(turns: &[Turn]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let striped = |turn: &Turn| !turn.pattern_file && !turn.contiguous;
    for (index, turn) in turns.iter().enumerate() {
        match groups.iter_mut().find(|group| {
            let first = &turns[group[0]];
            striped(turn) && striped(first) && first.distribution == turn.distribution
        }) {
            Some(group) => group.push(index),
            None => groups.push(vec![index]),
        }
    }
    groups
}

/// What one call did, summed over the processes (the same in every repetition).
#[derive(Debug, Clone, Default)]
struct Figures {
    requests: u64,
    requests_per_process: u64,
    storage_pieces: u64,
    bytes: u64,
    file_pieces: u64,
    offset_bytes: u64,
    servers: u64,
    declare_bytes: u64,
    /// Views: the client's planning of one call, seconds (slowest process, last repetition).
    plan_seconds: f64,
    /// Views: the slowest server's type walk of one call, seconds (slowest process, last
    /// repetition).
    server_walk_seconds: f64,
    /// Seconds one call spent sending, the slowest process's.
    send_seconds: f64,
    /// Seconds one call spent waiting for and receiving replies, the slowest process's.
    reply_seconds: f64,
}

impl Figures {
    fn of(results: &[StepResult], calls: u64) -> Self {
        // The phases of the process whose calls took longest, as the call's time is.
        let slowest = results
            .iter()
            .max_by(|a, b| a.seconds.total_cmp(&b.seconds));
        let mut servers: Vec<u16> = results
            .iter()
            .flat_map(|result| result.servers.iter().copied())
            .collect();
        servers.sort_unstable();
        servers.dedup();
        Self {
            requests: results.iter().map(|r| r.requests).sum::<u64>() / calls,
            requests_per_process: results.iter().map(|r| r.requests).max().unwrap_or(0) / calls,
            storage_pieces: results.iter().map(|r| r.storage_pieces).sum::<u64>() / calls,
            bytes: results.iter().map(|r| r.bytes).sum::<u64>() / calls,
            file_pieces: results.iter().map(|r| r.file_pieces).sum(),
            offset_bytes: results.iter().map(|r| r.offset_bytes).sum(),
            servers: servers.len() as u64,
            declare_bytes: results.iter().map(|r| r.declare_bytes).sum(),
            plan_seconds: results.iter().map(|r| r.plan_seconds).fold(0.0, f64::max),
            server_walk_seconds: results
                .iter()
                .map(|r| r.server_walk_seconds)
                .fold(0.0, f64::max),
            send_seconds: slowest.map_or(0.0, |r| r.send_seconds) / calls as f64,
            reply_seconds: slowest.map_or(0.0, |r| r.reply_seconds) / calls as f64,
        }
    }
}

/// Samples of one (n, turn, op).
#[derive(Debug, Clone, Default)]
struct Measured {
    /// Seconds per call of the slowest process, one per repetition.
    seconds: Vec<f64>,
    /// `set_view` seconds of the slowest process, one per repetition (views only).
    declare_seconds: Vec<f64>,
    /// Send and reply seconds per call of the slowest process, one pair per repetition.
    phases: Vec<(f64, f64)>,
    figures: Figures,
    calls: u64,
}

/// (*,BLOCK) as a pattern layout: server i holds columns [i*n/4, (i+1)*n/4) of every row.
fn column_block_pattern(n: u64) -> Result<Vec<Datatype>, String> {
    let columns = n / u64::from(SERVERS);
    let as_i64 = |value: u64| i64::try_from(value).map_err(|err| err.to_string());
    (0..u64::from(SERVERS))
        .map(|server| {
            let block =
                Datatype::hindexed(&[columns], &[as_i64(server * columns)?], &Datatype::byte())
                    .map_err(|err| err.to_string())?;
            Datatype::resized(0, as_i64(n)?, &block).map_err(|err| err.to_string())
        })
        .collect()
}

struct Run<'a> {
    cluster: &'a BenchCluster,
    workers: Workers,
    generation: u64,
    verified: bool,
}

impl Run<'_> {
    /// The task of `rank` for one step of `turn`.
    fn task(&self, rank: usize, n: u64, turn: Turn, paths: &Paths, write: bool) -> Task {
        let path = if turn.contiguous {
            &paths.blocks
        } else if turn.pattern_file {
            &paths.pattern
        } else {
            &paths.stripe
        };
        Task {
            cluster: self.cluster.file.clone(),
            path: path.clone(),
            write,
            method: super::over_tcp(turn.via),
            iterations: u32::try_from(turn.calls(n)).expect("at most step_calls_max"),
            generation: self.generation,
            sync: false,
            cache: None,
            pattern: if turn.contiguous {
                Pattern::Interleaved {
                    rank,
                    processes: PROCESSES,
                    pieces: 1,
                    piece_bytes: usize::try_from(n * n).expect("a quick matrix") / PROCESSES,
                }
            } else {
                Pattern::Matrix {
                    rank,
                    n,
                    distribution: turn.distribution,
                }
            },
        }
    }

    /// Writes then reads the share of every process with each turn of `group`, their calls
    /// taking turns one by one ([`Workers::step_grouped`]); returns each turn's samples of
    /// (write, read).
    fn round_trip(
        &mut self,
        paths: &Paths,
        n: u64,
        group: &[Turn],
    ) -> Result<Vec<[Sample; 2]>, String> {
        self.generation += 1;
        let mut out: Vec<[Sample; 2]> = vec![Default::default(); group.len()];
        for (slot, write) in [true, false].into_iter().enumerate() {
            let tasks = (0..PROCESSES)
                .map(|rank| {
                    group
                        .iter()
                        .map(|&turn| self.task(rank, n, turn, paths, write))
                        .collect()
                })
                .collect();
            let (results, _) = self.workers.step_grouped(tasks)?;
            for (member, &turn) in group.iter().enumerate() {
                let results: Vec<StepResult> =
                    results.iter().map(|group| group[member].clone()).collect();
                if !results.iter().all(|result| result.verified) {
                    eprintln!(
                        "bench views: {} n={n} {}: data read back did not match",
                        turn.distribution.name(),
                        turn.method()
                    );
                    self.verified = false;
                }
                let calls = turn.calls(n);
                let slowest =
                    |value: fn(&StepResult) -> f64| results.iter().map(value).fold(0.0, f64::max);
                out[member][slot] = (
                    slowest(|r| r.seconds) / calls as f64,
                    slowest(|r| r.declare_seconds),
                    Figures::of(&results, calls),
                );
            }
        }
        Ok(out)
    }
}

/// One turn's measurement of one direction: seconds per call, `set_view` seconds, and what
/// a call did.
type Sample = (f64, f64, Figures);

/// The three files of a size.
struct Paths {
    stripe: String,
    pattern: String,
    blocks: String,
}

fn create(client: &Client, path: &str, options: &CreateOptions) -> Result<(), String> {
    match client.unlink(path) {
        Ok(()) => {}
        Err(err) if err.code() == Some(ErrorCode::NotFound) => {}
        Err(err) => return Err(format!("rm {path}: {err}")),
    }
    client
        .create(path, options)
        .map(drop)
        .map_err(|err| format!("create {path}: {err}"))
}

/// Runs the experiment and writes its report.
pub fn run(args: &ViewsArgs) -> Result<Outcome, String> {
    let common = &args.common;
    let (cluster, client) = super::open_cluster(common, SERVERS)?;
    let paths = Paths {
        stripe: format!("/bench/views-{}", std::process::id()),
        pattern: format!("/bench/views-{}-pattern", std::process::id()),
        blocks: format!("/bench/views-{}-blocks", std::process::id()),
    };
    create(&client, &paths.stripe, &CreateOptions::default())?;
    let sizes: &[u64] = match (args.sizes.as_slice(), common.quick) {
        ([], true) => &SIZES_QUICK,
        ([], false) => &SIZES_FULL,
        (sizes, _) => sizes,
    };
    // Quick runs take 9: a median of 5 moved by ±10 % between runs at the smallest sizes.
    let repetitions = match args.repetitions {
        Some(count) => usize::try_from(count).expect("at most REPETITIONS_MAX"),
        None if common.quick => 9,
        None => 15,
    };
    let turns = turns();
    let groups = groups(&turns);
    let mut run = Run {
        cluster: &cluster,
        workers: Workers::spawn(PROCESSES)?,
        generation: 0,
        verified: true,
    };
    let progress = Progress::new("views", (sizes.len() * repetitions) as u64);
    let mut rows = Vec::new();
    for &n in sizes {
        create(
            &client,
            &paths.pattern,
            &CreateOptions {
                pattern: column_block_pattern(n)?,
                ..CreateOptions::default()
            },
        )?;
        create(
            &client,
            &paths.blocks,
            &CreateOptions {
                stripe_unit_bytes: n * n / PROCESSES as u64,
                server_count: SERVERS,
                ..CreateOptions::default()
            },
        )?;
        // [turn][write, read]
        let mut measured = vec![[Measured::default(), Measured::default()]; turns.len()];
        let mut bounds = Bounds::default();
        for repetition in 0..repetitions {
            for group in report::turn_order(repetition, groups.len()) {
                let members = &groups[group];
                let group_turns: Vec<Turn> = members.iter().map(|&index| turns[index]).collect();
                let samples = run.round_trip(&paths, n, &group_turns)?;
                for (&index, member) in members.iter().zip(samples) {
                    for (slot, (seconds, declare_seconds, figures)) in
                        member.into_iter().enumerate()
                    {
                        let entry = &mut measured[index][slot];
                        entry.seconds.push(seconds);
                        entry.declare_seconds.push(declare_seconds);
                        entry
                            .phases
                            .push((figures.send_seconds, figures.reply_seconds));
                        entry.figures = figures;
                        entry.calls = turns[index].calls(n);
                    }
                }
            }
            let share = usize::try_from(n * n).expect("a matrix in memory") / PROCESSES;
            bounds.measure(share, STAR_BLOCK_TURN.calls(n))?;
            progress.step(&format!("n={n}"));
        }
        rows.extend(size_rows(n, &turns, &measured, repetitions)?);
        rows.extend(bound_rows(n, &rows, &bounds)?);
        let _ = client.unlink(&paths.pattern);
        let _ = client.unlink(&paths.blocks);
    }
    let _ = client.unlink(&paths.stripe);
    drop(progress);
    let report = Report {
        bench: "views",
        quick: common.quick,
        meta: Meta::now(repetitions),
        config: json!({
            "transport": "tcp",
            "servers": SERVERS,
            "clients": PROCESSES,
            "grid": "2x2 for (BLOCK,BLOCK) and (CYCLIC,CYCLIC), 1x4 for (*,BLOCK)",
            "matrix": "n x n bytes, row-major, one file; each process's share is an MPI darray",
            "sizes_n": sizes,
            "cyclic_block_bytes": CYCLIC_BLOCK_BYTES,
            "stripe_unit_bytes": tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT,
            "pattern_layout": "view-pattern: server i holds columns [i*n/4,(i+1)*n/4) of every row (resized(0, n, hindexed([n/4], [i*n/4], byte)))",
            "view_stripe": "the (*,BLOCK) view row's own measurement, repeated under the match case",
            "methods": {
                "list": "flattened darray as one write_list/read_list call, memory one contiguous buffer",
                "view": "set_view once before timing, then one write_at(0)/read_at(0) of the whole share",
                "contiguous": "layout-match part only: each process's quarter of the matrix as one list piece (one memory slice) on a file striped over the 4 servers with a unit of n*n/4, so process i moves one piece to server i: the bound of the matched view",
            },
            "timing": "each step: prepare (open; an untimed warm-up list call of one byte per server reached; set_view, timed apart as declare_seconds), barrier, `calls` timed calls, barrier, then verification; list and view of one distribution on stripes share a step, their calls taking turns one by one (in an order shuffled each round, the same in every process), each timed on its own; seconds per call = slowest process's time in its calls / calls; mib_s and speedup from the median over the repetitions, mib_s_min/mib_s_max their range, speedup_best from the fastest; paired_vs_list and speedup_paired: the median over the repetitions of the two methods' ratio within one repetition",
            "repetitions": repetitions,
            "step_bytes_min": STEP_BYTES_MIN,
            "step_bytes_min_cyclic": STEP_BYTES_MIN_CYCLIC,
            "offset_bytes": format!("per call, all processes: list = {LIST_OFFSET_BYTES_PER_PIECE} bytes (offset, length) per server-local piece of every request; view = {VIEW_OFFSET_BYTES_PER_REQUEST} bytes (stream start, end) per request"),
            "declare_bytes": "view only, sent once at set_view: header + body of every DeclareView frame, all processes",
            "storage_calls_per_server": "storage pieces the servers touched in one call, all processes, / servers reached",
            "verify": "every byte read back == expected_byte(row * n + column, generation of the write)",
        }),
        verified: run.verified,
        rows,
    };
    drop(run);
    let text = text(&report, sizes)?;
    report.finish(common, &text, &[figure(&report, sizes)?])
}

#[cfg(test)]
mod tests;
