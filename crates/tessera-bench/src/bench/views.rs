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

use serde::Serialize;
use serde_json::json;
use tessera_client::{Client, CreateOptions, Datatype, ErrorCode};

use super::{BenchCluster, CommonArgs};
use crate::report::{
    self, Direction, Figure, Line, Measure, Meta, Outcome, Panel, Progress, Report, Spread,
};
use crate::workers::{
    MatrixDistribution, Pattern, StepResult, Task, Workers, LIST_OFFSET_BYTES_PER_PIECE,
    MATRIX_PROCESSES, VIEW_OFFSET_BYTES_PER_REQUEST,
};

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

/// The bounds of a matched layout over tcp, seconds per call, one per repetition.
#[derive(Debug, Default)]
struct Bounds {
    /// The transport alone (the same both ways).
    tcp: Vec<f64>,
    /// The transport and the storage copy: `[write, read]`.
    tcp_file: [Vec<f64>; 2],
}

impl Bounds {
    /// Measures each bound once for `calls` calls of `share` bytes per process.
    fn measure(&mut self, share: usize, calls: u64) -> Result<(), String> {
        self.tcp.push(tcp_bound(share, calls, None)?);
        for (slot, direction) in Direction::BOTH.into_iter().enumerate() {
            self.tcp_file[slot].push(tcp_bound(share, calls, Some(direction))?);
        }
        Ok(())
    }
}

/// An unlinked file of [`PROCESSES`] regions of `share` bytes, each written once so that
/// every later copy finds its pages cached (owner-only while it has a name).
fn cached_file(share: usize) -> Result<std::fs::File, String> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let failed =
        |what: String, err: std::io::Error| format!("bench views: tcp bound: {what}: {err}");
    let path =
        std::env::temp_dir().join(format!("tessera-bench-views-bound-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|err| failed(format!("create {}", path.display()), err))?;
    // Unlinked at once: the file lives while it is open, and nothing is left behind.
    std::fs::remove_file(&path).map_err(|err| failed(format!("unlink {}", path.display()), err))?;
    let filled = vec![0xA5u8; share];
    for process in 0..PROCESSES {
        file.write_all_at(&filled, (process * share) as u64)
            .map_err(|err| failed("fill".to_owned(), err))?;
    }
    Ok(file)
}

/// Seconds per call of the transport alone, the bound of a matched layout over tcp: one
/// loopback TCP stream per process, all at once, each call a round trip as a call of the
/// protocol is: the receiving thread sends a 1-byte request, the sending thread answers with
/// `share` bytes, `calls` times (no header, storage or protocol; the same for writes and
/// reads). Measured so, not as a stream of `calls` shares back to back: here the stream ran
/// at 0.70-0.80 of the round trips (four senders filling their sockets at once on 2 cores),
/// so it bounded nothing.
///
/// With `storage`, each call also makes the page-cache copy of a server that copies between
/// the socket and the page cache: a write's receiver `pwrite`s what it received to its region
/// of a cached file, a read's sender `pread`s it from there before sending. The iods make
/// that copy for writes; a cached read they send straight from the page cache, as `tcp`.
fn tcp_bound(share: usize, calls: u64, storage: Option<Direction>) -> Result<f64, String> {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::fs::FileExt;
    let failed = |what: &str, err: std::io::Error| format!("bench views: tcp bound: {what}: {err}");
    let file = storage.map(|_| cached_file(share)).transpose()?;
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|err| failed("bind", err))?;
    let address = listener
        .local_addr()
        .map_err(|err| failed("local address", err))?;
    let mut pairs = Vec::with_capacity(PROCESSES);
    for _ in 0..PROCESSES {
        let sender = TcpStream::connect(address).map_err(|err| failed("connect", err))?;
        let (receiver, _) = listener.accept().map_err(|err| failed("accept", err))?;
        for stream in [&sender, &receiver] {
            stream
                .set_read_timeout(Some(std::time::Duration::from_secs(30)))
                .and_then(|()| stream.set_nodelay(true))
                .map_err(|err| failed("socket options", err))?;
        }
        pairs.push((sender, receiver));
    }
    let start = std::sync::Barrier::new(2 * PROCESSES + 1);
    let mut started = None;
    let outcome: Result<(), String> = std::thread::scope(|scope| {
        let mut threads = Vec::with_capacity(2 * PROCESSES);
        for (process, (sender, receiver)) in pairs.iter_mut().enumerate() {
            let (start, file) = (&start, file.as_ref());
            let region = (process * share) as u64;
            threads.push(scope.spawn(move || {
                let mut data = vec![0x5Au8; share];
                start.wait();
                (0..calls).try_for_each(|_| {
                    sender.read_exact(&mut [0u8])?;
                    if let (Some(Direction::Read), Some(file)) = (storage, file) {
                        file.read_exact_at(&mut data, region)?;
                    }
                    sender.write_all(&data)
                })
            }));
            threads.push(scope.spawn(move || {
                let mut data = vec![0u8; share];
                start.wait();
                (0..calls).try_for_each(|_| {
                    receiver.write_all(&[1u8])?;
                    receiver.read_exact(&mut data)?;
                    match (storage, file) {
                        (Some(Direction::Write), Some(file)) => file.write_all_at(&data, region),
                        _ => Ok(()),
                    }
                })
            }));
        }
        start.wait();
        started = Some(std::time::Instant::now());
        threads.into_iter().try_for_each(|thread| {
            thread
                .join()
                .map_err(|_| "bench views: tcp bound: a thread panicked".to_owned())?
                .map_err(|err| failed("transfer", err))
        })
    });
    outcome?;
    let seconds = started.expect("timed").elapsed().as_secs_f64();
    Ok(seconds / calls.max(1) as f64)
}

/// The bounds of the layout match at side `n`, both directions: rows `tcp` and `tcp+file`
/// of the matched part (beside `view-stripe`, `view-pattern` and `contiguous`, already in
/// `rows`).
fn bound_rows(n: u64, rows: &[ViewsRow], bounds: &Bounds) -> Result<Vec<ViewsRow>, String> {
    let mut out = Vec::with_capacity(4);
    for (slot, direction) in Direction::BOTH.into_iter().enumerate() {
        let key = case(Part::LayoutMatch, DISTRIBUTIONS[1].name(), n, direction);
        let found = |method: &str| {
            rows.iter()
                .find(|row| report::Row::key(*row) == (key.clone(), method))
                .ok_or_else(|| format!("bench views: {key}: no {method} row"))
        };
        let (stripe, contiguous) = (found("view-stripe")?, found("contiguous")?);
        for (method, seconds) in [("tcp", &bounds.tcp), ("tcp+file", &bounds.tcp_file[slot])] {
            let spread =
                Spread::of(seconds).map_err(|err| format!("bench views: {method} bound: {err}"))?;
            let measure = Measure::of_seconds(spread, n * n);
            out.push(ViewsRow {
                method: method.to_owned(),
                speedup: Some(measure.mib_s / stripe.measure.mib_s.max(1e-9)),
                speedup_best: Some(measure.mib_s_max / stripe.measure.mib_s_max.max(1e-9)),
                speedup_paired: None,
                measure,
                requests: 0,
                pieces: 0,
                requests_per_process: 0,
                offset_bytes: 0,
                offset_overhead_pct: 0.0,
                storage_calls_per_server: 0.0,
                servers: 0,
                file_pieces: 0,
                send_us: 0.0,
                reply_us: 0.0,
                ..contiguous.clone()
            });
        }
    }
    Ok(out)
}

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

/// Which comparison a row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Part {
    /// List vs view I/O per distribution, on stripes (Fig. 2, Tables 2-3).
    Distributions,
    /// The (*,BLOCK) view on stripes vs on the matching pattern layout (Figs. 3-4).
    LayoutMatch,
}

/// One (part, distribution, n, direction, method) of views.
#[derive(Debug, Clone, Serialize)]
pub struct ViewsRow {
    /// Which comparison.
    pub part: Part,
    /// The HPF distribution of the shares.
    pub distribution: &'static str,
    /// The matrix side in bytes.
    pub n: u64,
    /// Writes or reads.
    pub direction: Direction,
    /// `list`, `view`, `view-stripe` or `view-pattern`.
    pub method: String,
    /// MiB/s and seconds, median over the repetitions, and the MiB/s range.
    #[serde(flatten)]
    pub measure: Measure,
    /// Requests per call, all processes.
    pub requests: u64,
    /// Storage pieces the servers touched per call, all processes.
    pub pieces: u64,
    /// Bytes per call, all processes.
    pub bytes: u64,
    /// The most requests of one process per call.
    pub requests_per_process: u64,
    /// Access description bytes sent per call, all processes.
    pub offset_bytes: u64,
    /// `offset_bytes` over the data bytes, %.
    pub offset_overhead_pct: f64,
    /// Storage pieces per call / servers reached.
    pub storage_calls_per_server: f64,
    /// Servers reached.
    pub servers: u64,
    /// File pieces of one call, all processes.
    pub file_pieces: u64,
    /// Calls per timed step.
    pub calls: u64,
    /// Repetitions measured.
    pub repetitions: usize,
    /// View declaration bytes, sent once (views only).
    pub declare_bytes: Option<u64>,
    /// View declaration seconds, median (views only).
    pub declare_seconds: Option<f64>,
    /// Declaration time over one call's, % (views only).
    pub declare_overhead_pct: Option<f64>,
    /// Views: the client's planning of a first call of the range, µs (measured apart, slowest
    /// process; later calls reuse the view's kept plan).
    pub plan_us: Option<f64>,
    /// Views: the slowest server's type walk of a first request of the range, µs (measured
    /// apart with the iod's code, slowest process; later requests reuse the kept share).
    pub server_walk_us: Option<f64>,
    /// Microseconds one call spent sending its requests (slowest process, median over the
    /// repetitions).
    pub send_us: f64,
    /// Microseconds one call spent receiving replies after its sends (slowest process,
    /// median over the repetitions).
    pub reply_us: f64,
    /// Views on stripes: the median over the repetitions of list seconds / view seconds of
    /// one call, both measured in the same repetition (how much faster view I/O ran, with
    /// the machine's drift between repetitions taken out).
    pub paired_vs_list: Option<f64>,
    /// MiB/s over the stripe view's (layout match only).
    pub speedup: Option<f64>,
    /// The fastest repetitions' speedup (layout match only).
    pub speedup_best: Option<f64>,
    /// The speedup paired within each repetition, as `paired_vs_list` (layout match only).
    pub speedup_paired: Option<f64>,
}

impl report::Row for ViewsRow {
    fn key(&self) -> (String, &str) {
        (
            case(self.part, self.distribution, self.n, self.direction),
            &self.method,
        )
    }
}

/// The case label of a row.
fn case(part: Part, distribution: &str, n: u64, direction: Direction) -> String {
    match part {
        Part::Distributions => format!("{distribution} n={n} {direction}"),
        Part::LayoutMatch => format!("match {distribution} n={n} {direction}"),
    }
}

fn size_rows(
    n: u64,
    turns: &[Turn],
    measured: &[[Measured; 2]],
    repetitions: usize,
) -> Result<Vec<ViewsRow>, String> {
    let mut rows = Vec::new();
    let all = measured;
    let stripe_turn = |distribution: MatrixDistribution, via: &str| {
        turns
            .iter()
            .position(|turn| {
                turn.distribution == distribution
                    && turn.via == via
                    && !turn.pattern_file
                    && !turn.contiguous
            })
            .ok_or_else(|| format!("bench views: no {via} turn on stripes"))
    };
    let star_block_view = stripe_turn(MatrixDistribution::StarBlock, "view")?;
    for (slot, direction) in Direction::BOTH.into_iter().enumerate() {
        let mut stripe_view = None;
        let mut pattern_view = None;
        let mut contiguous = None;
        for (turn, measured) in turns.iter().zip(measured) {
            let measured = &measured[slot];
            let figures = &measured.figures;
            let distribution = turn.distribution.name();
            let unmeasured = |err: String| {
                format!(
                    "bench views: case \"{}\", method \"{}\": {err}",
                    case(Part::Distributions, distribution, n, direction),
                    turn.method()
                )
            };
            let seconds = Spread::of(&measured.seconds).map_err(unmeasured)?;
            let declare_seconds = if turn.via == "view" {
                Some(
                    Spread::of(&measured.declare_seconds)
                        .map_err(unmeasured)?
                        .median,
                )
            } else {
                None
            };
            let paired_vs_list = if turn.via == "view" && !turn.pattern_file {
                let list = &all[stripe_turn(turn.distribution, "list")?][slot].seconds;
                Some(report::paired_ratio(list, &measured.seconds))
            } else {
                None
            };
            let row = ViewsRow {
                part: Part::Distributions,
                distribution,
                n,
                direction,
                method: turn.method().to_owned(),
                measure: Measure::of_seconds(seconds, figures.bytes),
                requests: figures.requests,
                pieces: figures.storage_pieces,
                bytes: figures.bytes,
                requests_per_process: figures.requests_per_process,
                offset_bytes: figures.offset_bytes,
                offset_overhead_pct: figures.offset_bytes as f64 / figures.bytes.max(1) as f64
                    * 100.0,
                storage_calls_per_server: figures.storage_pieces as f64
                    / figures.servers.max(1) as f64,
                servers: figures.servers,
                file_pieces: figures.file_pieces,
                calls: measured.calls,
                repetitions,
                declare_bytes: declare_seconds.map(|_| figures.declare_bytes),
                declare_seconds,
                declare_overhead_pct: declare_seconds
                    .map(|declare| declare / seconds.median * 100.0),
                plan_us: declare_seconds.map(|_| figures.plan_seconds * 1e6),
                server_walk_us: declare_seconds.map(|_| figures.server_walk_seconds * 1e6),
                send_us: median(measured.phases.iter().map(|phase| phase.0)) * 1e6,
                reply_us: median(measured.phases.iter().map(|phase| phase.1)) * 1e6,
                paired_vs_list,
                speedup: None,
                speedup_best: None,
                speedup_paired: None,
            };
            if turn.contiguous {
                contiguous = Some(row);
                continue;
            }
            if turn.distribution == MatrixDistribution::StarBlock && turn.via == "view" {
                if turn.pattern_file {
                    pattern_view = Some(row.clone());
                } else {
                    stripe_view = Some(row.clone());
                }
            }
            if !turn.pattern_file {
                rows.push(row);
            }
        }
        let (Some(stripe), Some(pattern), Some(contiguous)) =
            (stripe_view, pattern_view, contiguous)
        else {
            return Err(format!(
                "bench views: n={n} {direction}: the (*,BLOCK) view was not measured on both layouts"
            ));
        };
        let speedup = pattern.measure.mib_s / stripe.measure.mib_s.max(1e-9);
        let speedup_best = pattern.measure.mib_s_max / stripe.measure.mib_s_max.max(1e-9);
        rows.push(ViewsRow {
            part: Part::LayoutMatch,
            method: "view-stripe".to_owned(),
            speedup: Some(1.0),
            ..stripe
        });
        let stripe_seconds = &all[star_block_view][slot].seconds;
        let paired = |method: &str| {
            turns
                .iter()
                .position(|turn| turn.method() == method)
                .map(|index| report::paired_ratio(stripe_seconds, &all[index][slot].seconds))
        };
        rows.push(ViewsRow {
            part: Part::LayoutMatch,
            speedup: Some(speedup),
            speedup_best: Some(speedup_best),
            speedup_paired: paired("view-pattern"),
            ..pattern
        });
        rows.push(ViewsRow {
            part: Part::LayoutMatch,
            speedup: Some(contiguous.measure.mib_s / stripe.measure.mib_s.max(1e-9)),
            speedup_best: Some(contiguous.measure.mib_s_max / stripe.measure.mib_s_max.max(1e-9)),
            speedup_paired: paired("contiguous"),
            ..contiguous
        });
    }
    Ok(rows)
}

/// The median of `values` (0 for none).
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// The paper's matrix size in MiB for side `n`, if it reports one.
fn paper_mib(n: u64) -> Option<u64> {
    let bytes = n * n;
    bytes
        .is_multiple_of(1 << 20)
        .then_some(bytes >> 20)
        .filter(|mib| PAPER_TABLE_2.iter().any(|&(paper, _, _)| paper == *mib))
}

/// A figure a view row must have, else an error naming it.
fn view_figure<T>(row: &ViewsRow, name: &str, value: Option<T>) -> Result<T, String> {
    value.ok_or_else(|| {
        format!(
            "bench views: case \"{}\", method \"{}\" has no {name}",
            report::Row::key(row).0,
            row.method
        )
    })
}

/// A number for a table cell, with `places` decimals.
fn cell(value: f64, places: usize) -> String {
    report::cell(value, places)
}

fn text(report: &Report<ViewsRow>, sizes: &[u64]) -> Result<String, String> {
    let cyclic = DISTRIBUTIONS[2].name();
    let star_block = DISTRIBUTIONS[1].name();
    let row = |distribution: &str, n: u64, direction: Direction, method: &str| {
        report.row(
            &case(Part::Distributions, distribution, n, direction),
            method,
        )
    };
    let matched = |n: u64, direction: Direction, method: &str| {
        report.row(&case(Part::LayoutMatch, star_block, n, direction), method)
    };

    let mut fig2 = report::table([
        "op", "n", "KiB", "BB list", "BB view", "v/l", "paired", "*B list", "*B view", "v/l",
        "paired", "CC list", "CC view", "v/l", "paired",
    ]);
    for direction in Direction::BOTH {
        for &n in sizes {
            let mut cells = vec![
                direction.to_string(),
                n.to_string(),
                (n * n / 1024).to_string(),
            ];
            for distribution in DISTRIBUTIONS {
                let list = row(distribution.name(), n, direction, "list")?;
                let view = row(distribution.name(), n, direction, "view")?;
                let paired = view_figure(view, "paired_vs_list", view.paired_vs_list)?;
                cells.extend([
                    cell(list.measure.mib_s, 1),
                    cell(view.measure.mib_s, 1),
                    report::ratio(view.measure.mib_s, list.measure.mib_s),
                    format!("{paired:.2}x"),
                ]);
            }
            fig2.add_row(cells);
        }
    }

    let mut table2 = report::table([
        "op",
        "n",
        "list",
        "view",
        "list/proc",
        "view/proc",
        "paper list",
        "paper view",
    ]);
    for direction in Direction::BOTH {
        for &n in sizes {
            let list = row(cyclic, n, direction, "list")?;
            let view = row(cyclic, n, direction, "view")?;
            let paper = paper_mib(n).and_then(|mib| PAPER_TABLE_2.iter().find(|row| row.0 == mib));
            table2.add_row([
                direction.to_string(),
                n.to_string(),
                list.requests.to_string(),
                view.requests.to_string(),
                list.requests_per_process.to_string(),
                view.requests_per_process.to_string(),
                paper.map_or_else(
                    || "-".to_owned(),
                    |&(mib, list, _)| format!("{list} ({mib} MB)"),
                ),
                paper.map_or_else(|| "-".to_owned(), |&(_, _, view)| view.to_string()),
            ]);
        }
    }

    let mut table3 = report::table([
        "n",
        "data",
        "list off",
        "list %",
        "view off",
        "view %",
        "view decl",
        "paper off",
        "paper %",
    ]);
    for &n in sizes {
        let list = row(cyclic, n, Direction::Write, "list")?;
        let view = row(cyclic, n, Direction::Write, "view")?;
        let paper = paper_mib(n).and_then(|mib| PAPER_TABLE_3.iter().find(|row| row.0 == mib));
        table3.add_row([
            n.to_string(),
            (n * n).to_string(),
            list.offset_bytes.to_string(),
            format!("{:.2}%", list.offset_overhead_pct),
            view.offset_bytes.to_string(),
            format!("{:.4}%", view.offset_overhead_pct),
            view_figure(view, "declare_bytes", view.declare_bytes)?.to_string(),
            paper.map_or_else(
                || "-".to_owned(),
                |&(mib, bytes, _)| format!("{bytes} ({mib} MB)"),
            ),
            paper.map_or_else(|| "-".to_owned(), |&(_, _, pct)| format!("{pct:.2}%")),
        ]);
    }

    let mut fig34 = report::table([
        "op",
        "n",
        "stripe",
        "pattern",
        "speedup",
        "best",
        "paired",
        "calls/srv s",
        "calls/srv p",
        "contiguous",
        "pattern/contiguous",
        "tcp",
        "pattern/tcp",
        "tcp/stripe",
        "tcp+file",
        "pattern/(tcp+file)",
        "(tcp+file)/stripe",
    ]);
    for direction in Direction::BOTH {
        for &n in sizes {
            let stripe = matched(n, direction, "view-stripe")?;
            let pattern = matched(n, direction, "view-pattern")?;
            let contiguous = matched(n, direction, "contiguous")?;
            let tcp = matched(n, direction, "tcp")?;
            let tcp_file = matched(n, direction, "tcp+file")?;
            fig34.add_row([
                direction.to_string(),
                n.to_string(),
                cell(stripe.measure.mib_s, 1),
                cell(pattern.measure.mib_s, 1),
                format!("{:.2}x", view_figure(pattern, "speedup", pattern.speedup)?),
                format!(
                    "{:.2}x",
                    view_figure(pattern, "speedup_best", pattern.speedup_best)?
                ),
                format!(
                    "{:.2}x",
                    view_figure(pattern, "speedup_paired", pattern.speedup_paired)?
                ),
                cell(stripe.storage_calls_per_server, 1),
                cell(pattern.storage_calls_per_server, 1),
                cell(contiguous.measure.mib_s, 1),
                report::ratio(pattern.measure.mib_s, contiguous.measure.mib_s),
                cell(tcp.measure.mib_s, 1),
                report::ratio(pattern.measure.mib_s, tcp.measure.mib_s),
                report::ratio(tcp.measure.mib_s, stripe.measure.mib_s),
                cell(tcp_file.measure.mib_s, 1),
                report::ratio(pattern.measure.mib_s, tcp_file.measure.mib_s),
                report::ratio(tcp_file.measure.mib_s, stripe.measure.mib_s),
            ]);
        }
    }

    let mut phases = report::table([
        "op",
        "n",
        "method",
        "call µs",
        "client plan µs",
        "server walk µs",
        "send µs",
        "reply µs",
        "other µs",
        "storage calls/srv",
    ]);
    for direction in Direction::BOTH {
        for &n in sizes.iter().filter(|&&n| n >= 512) {
            for (name, view) in [
                (
                    "BB list",
                    row(DISTRIBUTIONS[0].name(), n, direction, "list")?,
                ),
                (
                    "BB view",
                    row(DISTRIBUTIONS[0].name(), n, direction, "view")?,
                ),
                ("*B list", row(star_block, n, direction, "list")?),
                ("*B view", row(star_block, n, direction, "view")?),
                ("*B view, pattern", matched(n, direction, "view-pattern")?),
            ] {
                let call_us = view.measure.seconds * 1e6;
                let share = |us: f64| format!("{us:.0} ({:.0}%)", us / call_us * 100.0);
                let optional = |us: Option<f64>| us.map_or_else(|| "-".to_owned(), share);
                phases.add_row([
                    direction.to_string(),
                    n.to_string(),
                    name.to_owned(),
                    cell(call_us, 0),
                    optional(view.plan_us),
                    optional(view.server_walk_us),
                    share(view.send_us),
                    share(view.reply_us),
                    share((call_us - view.send_us - view.reply_us).max(0.0)),
                    cell(view.storage_calls_per_server, 1),
                ]);
            }
        }
    }

    let mut declare = report::table(["op", "n", "BB", "*B", "CC", "*B pattern"]);
    for direction in Direction::BOTH {
        for &n in sizes {
            let mut cells = vec![direction.to_string(), n.to_string()];
            for view in [
                row(DISTRIBUTIONS[0].name(), n, direction, "view")?,
                row(star_block, n, direction, "view")?,
                row(cyclic, n, direction, "view")?,
                matched(n, direction, "view-pattern")?,
            ] {
                let pct = view_figure(view, "declare_overhead_pct", view.declare_overhead_pct)?;
                cells.push(format!("{pct:.1}%"));
            }
            declare.add_row(cells);
        }
    }

    Ok(format!(
        "views: {PROCESSES} client processes x {SERVERS} I/O servers, n x n bytes, 64 KiB stripes, CYCLIC k = {CYCLIC_BLOCK_BYTES}, tcp\n\
         \nFig. 2: aggregate MiB/s on stripes (median per call over {} repetitions, all processes; v/l: of the medians; paired: median over the repetitions of view/list speed within one repetition)\n{fig2}\n\
         paper (16 x 16 nodes, Myrinet, ROMIO list I/O over PVFS): view I/O beats list I/O in every case of Fig. 2\n\
         \nTable 2: {cyclic} requests of one call, all processes (and the most of one process)\n{table2}\n\
         paper: ROMIO called PVFS list I/O (at most 64 pieces a call) thousands of times, view I/O once per node; Tessera's list I/O packs up to 65536 pieces in one request per server, so the request counts meet and the difference is in the offsets below\n\
         \nTable 3: {cyclic} access description sent per call, all processes (write)\n{table3}\n\
         list I/O sends 16 bytes per {CYCLIC_BLOCK_BYTES}-byte piece here, so its overhead is a flat {:.0}% that grows in bytes with n^2; the paper's k grew with n, so its percentage fell; view I/O sends 16 bytes per request whatever n\n\
         \nFig. 3-4: (*,BLOCK) view, 64 KiB stripes vs matching (*,BLOCK) pattern layout (MiB/s; speedup of medians, of bests, and paired within each repetition); contiguous: each process's quarter as one list piece to one server (stripe unit = n*n/4); tcp: the transport alone, one loopback TCP stream per process, each call a round trip of a 1-byte request and its quarter back (no header, file or storage), the bound of both directions and of reads sent from the page cache; tcp+file: the same with the page-cache copy of a server that copies between socket and page cache (the receiver pwrites each write to a cached file, the sender preads each read from one), the bound of writes\n{fig34}\n\
         paper (Fig. 4): view I/O speedup grows with the matrix, up to 6x for writes and 4x for reads at 16 MB\n\
         \nWhere a call's time goes (slowest process; client plan and the slowest server's type walk timed apart after the calls, the walk with the iods' code: a view's first call of a range pays them inside send (plan) or reply (walk), the timed calls repeat one range and reuse the view's kept plan and the iods' kept shares; send = sending every request, a write's data as far as the sockets take it; reply = waiting for and reading the replies: the servers' walk and storage, the rest of a write's transfer, a read's data; other = the call's checks, planning and carving before the sends)\n{phases}\n\
         \n§4.3: view declaration time / one call, %\n{declare}\n\
         paper: under 12% (writes) and 10% (reads) for small matrices, about 1% for large ones, near 0 on the matching layout\n\
         verified: {}\n",
        report.meta.repetitions,
        LIST_OFFSET_BYTES_PER_PIECE as f64 / CYCLIC_BLOCK_BYTES as f64 * 100.0,
        report.verified
    ))
}

/// Fig. 2 and Figs. 3-4: MiB/s against n, writes and reads, one line per (distribution,
/// method) and the (*,BLOCK) view on the matching layout.
fn figure(report: &Report<ViewsRow>, sizes: &[u64]) -> Result<Figure, String> {
    let point = |row: &ViewsRow| row.measure.point(row.n as f64);
    let mut panels = Vec::new();
    for direction in Direction::BOTH {
        let mut panel = Panel::of_direction(direction, "matrix side n (bytes)");
        for distribution in DISTRIBUTIONS {
            for method in ["list", "view"] {
                let points = sizes
                    .iter()
                    .map(|&n| {
                        let case = case(Part::Distributions, distribution.name(), n, direction);
                        report.row(&case, method).map(point)
                    })
                    .collect::<Result<_, String>>()?;
                panel.lines.push(Line {
                    name: format!("{} {method}", distribution.name()),
                    points,
                });
            }
        }
        let points = sizes
            .iter()
            .map(|&n| {
                let case = case(Part::LayoutMatch, DISTRIBUTIONS[1].name(), n, direction);
                report.row(&case, "view-pattern").map(point)
            })
            .collect::<Result<_, String>>()?;
        panel.lines.push(Line {
            name: format!("{} view, pattern layout", DISTRIBUTIONS[1].name()),
            points,
        });
        panels.push(panel);
    }
    Ok(Figure {
        stem: "views".to_owned(),
        title: format!(
            "views: {PROCESSES} clients x {SERVERS} servers over tcp (median, min-max of {} repetitions)",
            report.meta.repetitions
        ),
        panels,
    })
}

#[cfg(test)]
mod tests;
