//! `tessera bench demote` (seed 001 ch. 6, live): exclusive caching with DEMOTE against an
//! inclusive client cache, on real client processes and iods.
//!
//! One private cluster of four iods serving from their unified cache (`--serve unified`, a
//! small `--cache-bytes` each), and four client processes ([`Workers`]). Each client reads its
//! own region of one file striped over the iods, again and again, in 64 KiB `read_at` calls:
//! a loop over more blocks than its client cache holds, and, over all clients, more than the
//! iods' caches hold, but fewer than both levels hold together. The methods:
//!
//! - `nocache`: no client cache; every read goes to the iods;
//! - `inclusive`: a client cache (LRU) without DEMOTE: both levels keep what was read last, so
//!   they hold the same blocks and the loop misses in both;
//! - `demote`: the same cache, each evicted block demoted to its iods before the read returns
//!   (eager DEMOTE); the iods keep demoted blocks most recent and what they sent least
//!   recent, so the levels hold different blocks;
//! - `demote-buffered`: DEMOTE buffering: evicted blocks wait in a double-buffered DEMOTE
//!   buffer, their metadata goes first, the wanted ones travel in one gathered `Demote` per
//!   iod, from a sender thread while the client reads on.
//!
//! Every repetition runs each method (their order turning), after untimed warm walks that
//! bring both levels to their steady state; the figure is the slowest client's time of the
//! timed walks. Reported beside it: the client's hits, misses, DEMOTE-buffer hits, demotes
//! sent and refused (the workers' `ClientCacheStats`), and the iods' cache hits, misses and
//! units demoted in (`ServerStats`), over the timed walks only. Every byte read is checked.

use std::fmt;

use serde::Serialize;
use serde_json::json;
use tessera_client::{Client, ClientOptions, ClusterConfig, CreateOptions, ErrorCode};
use tessera_cluster::ServeMode;
use tessera_proto::CacheCounters;

use super::{BenchCluster, CommonArgs};
use crate::report::{self, Figure, Line, Measure, Meta, Outcome, Panel, Report, Scale, Spread};
use crate::workers::{CacheCounts, CacheTask, Pattern, Task, Workers};

/// Iods and client processes, as the setup.
const SERVERS: u16 = 4;
const CLIENTS: usize = 4;
/// Bytes of each `read_at`: one client cache block.
const CALL_BYTES: u64 = tessera_client::CLIENT_CACHE_BLOCK_BYTES;
/// Each client's region, its client cache, and each iod's unified cache: the loop over a
/// region (256 blocks with --quick) misses an LRU client cache of 3/4 of it, the four
/// regions together are twice the iods' caches, and client cache plus the client's quarter
/// of the iods' caches (1 + 1/4 of the region) holds the whole loop.
const REGION_BYTES: u64 = 64 << 20;
const QUICK_REGION_BYTES: u64 = 16 << 20;
/// The client cache, in quarters of the region.
const CLIENT_CACHE_QUARTERS: u64 = 3;
/// Each iod's cache, in quarters of one region (four iods: the regions' sum over 2).
const IOD_CACHE_QUARTERS: u64 = 2;
/// Untimed walks before the timed ones, and timed walks.
const WARM_PASSES: u32 = 2;
const TIMED_PASSES: u32 = 3;
const QUICK_TIMED_PASSES: u32 = 4;
/// Repetitions of each method (median reported), and the most `--repetitions`.
const REPETITIONS: usize = 7;
const QUICK_REPETITIONS: usize = 5;
const REPETITIONS_MAX: u64 = 100;
/// The smallest and largest `--region-bytes` (the bench holds all regions in memory once, to
/// write the file).
const REGION_BYTES_MIN: u64 = 4 << 20;
const REGION_BYTES_MAX: u64 = 1 << 30;

/// Arguments of `tessera-bench demote`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoteArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Bytes each client loops over (default 64m, --quick 16m; 4m to 1g); the client cache
    /// is 3/4 of it, each iod's cache 1/2 of it.
    #[arg(long, value_parser = tessera_client::layouts::parse_bytes)]
    pub region_bytes: Option<u64>,
    /// Measurements of each method, median reported (default 7, --quick 5; at most 100).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=REPETITIONS_MAX))]
    pub repetitions: Option<u64>,
}
/// The generation of the file's bytes ([`crate::workers::expected_byte`]).
const GENERATION: u64 = 11;

/// The methods compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Method {
    /// No client cache.
    #[serde(rename = "nocache")]
    NoCache,
    /// A client cache, no DEMOTE.
    #[serde(rename = "inclusive")]
    Inclusive,
    /// Eager DEMOTE.
    #[serde(rename = "demote")]
    Demote,
    /// DEMOTE buffering.
    #[serde(rename = "demote-buffered")]
    DemoteBuffered,
}

impl Method {
    const ALL: [Self; 4] = [
        Self::NoCache,
        Self::Inclusive,
        Self::Demote,
        Self::DemoteBuffered,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::NoCache => "nocache",
            Self::Inclusive => "inclusive",
            Self::Demote => "demote",
            Self::DemoteBuffered => "demote-buffered",
        }
    }

    /// The workers' cache task of this method.
    fn cache_task(self, plan: &Plan) -> CacheTask {
        let (cache_bytes, demote) = match self {
            Self::NoCache => (0, "off"),
            Self::Inclusive => (plan.client_cache_bytes, "off"),
            Self::Demote => (plan.client_cache_bytes, "eager"),
            Self::DemoteBuffered => (plan.client_cache_bytes, "buffered"),
        };
        CacheTask {
            cache_bytes,
            demote: demote.to_owned(),
            warm_passes: WARM_PASSES,
            call_bytes: CALL_BYTES,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One method of the run.
#[derive(Debug, Clone, Serialize)]
pub struct DemoteRow {
    /// Client processes.
    pub clients: usize,
    /// Iods.
    pub iods: u16,
    /// Bytes each client reads per walk (its region).
    pub region_bytes: u64,
    /// Each client's cache budget (0 for `nocache`).
    pub client_cache_bytes: u64,
    /// Each iod's unified cache budget.
    pub iod_cache_bytes: u64,
    /// `nocache`, `inclusive`, `demote` or `demote-buffered`.
    pub method: &'static str,
    /// MiB/s of all clients, median over the repetitions, and its range.
    #[serde(flatten)]
    pub measure: Measure,
    /// Bytes read in one repetition's timed walks, all clients.
    pub bytes: u64,
    /// The client caches' counts over the last repetition's timed walks, all clients:
    /// blocks found in the cache, read from the iods, found in the DEMOTE buffer, demoted,
    /// and evicted but not demoted.
    pub client_hits: u64,
    /// See `client_hits`.
    pub client_misses: u64,
    /// See `client_hits`.
    pub buffer_hits: u64,
    /// See `client_hits`.
    pub demotes_sent: u64,
    /// See `client_hits`.
    pub demotes_refused: u64,
    /// Evictions that waited for room in a full DEMOTE buffer (the sender fell behind).
    pub buffer_full_waits: u64,
    /// Client cache hit rate of the timed walks (blocks found / blocks read; the DEMOTE
    /// buffer's hits count as hits).
    pub client_hit_rate: f64,
    /// The iods' cache units found cached and created over the same walks, all iods.
    pub iod_hits: u64,
    /// See `iod_hits`.
    pub iod_misses: u64,
    /// Units found cached over units asked for, at the iods.
    pub iod_hit_rate: f64,
    /// Units the iods took in from demotes over the same walks.
    pub iod_units_demoted: u64,
    /// Repetitions measured.
    pub repetitions: usize,
    /// This method's MiB/s over that of the method before it in the table (`inclusive` over
    /// `nocache`, `demote` over `inclusive`, `demote-buffered` over `demote`) within each
    /// repetition, where the two ran one after the other: the median of those ratios. A
    /// machine whose speed drifts over a run moves both sides of each ratio alike, so this
    /// is steadier than the ratio of the medians. `None` for the first method.
    pub paired_ratio: Option<f64>,
}

impl report::Row for DemoteRow {
    fn key(&self) -> (String, &str) {
        (case(self.region_bytes), self.method)
    }
}

/// The case label of the run.
fn case(region_bytes: u64) -> String {
    format!("{CLIENTS} clients x {region_bytes} B loops")
}

/// The sizes of one run.
#[derive(Debug, Clone)]
struct Plan {
    region_bytes: u64,
    client_cache_bytes: u64,
    iod_cache_bytes: u64,
    timed_passes: u32,
    repetitions: usize,
}

impl Plan {
    fn of(args: &DemoteArgs) -> Result<Self, String> {
        let quick = args.common.quick;
        let region_bytes = args.region_bytes.unwrap_or(if quick {
            QUICK_REGION_BYTES
        } else {
            REGION_BYTES
        });
        if !(REGION_BYTES_MIN..=REGION_BYTES_MAX).contains(&region_bytes)
            || !region_bytes.is_multiple_of(CALL_BYTES)
        {
            return Err(format!(
                "--region-bytes {region_bytes}: give a multiple of {CALL_BYTES} between \
                 {REGION_BYTES_MIN} and {REGION_BYTES_MAX}"
            ));
        }
        let repetitions = args.repetitions.map_or(
            if quick {
                QUICK_REPETITIONS
            } else {
                REPETITIONS
            },
            |count| usize::try_from(count).expect("at most REPETITIONS_MAX"),
        );
        Ok(Self {
            region_bytes,
            client_cache_bytes: region_bytes / 4 * CLIENT_CACHE_QUARTERS,
            iod_cache_bytes: region_bytes / 4 * IOD_CACHE_QUARTERS,
            timed_passes: if quick {
                QUICK_TIMED_PASSES
            } else {
                TIMED_PASSES
            },
            repetitions,
        })
    }

    /// The workers' tasks of `method`: client `rank` walks region `rank` of `path`.
    fn tasks(&self, cluster: &BenchCluster, path: &str, method: Method) -> Vec<Task> {
        (0..CLIENTS)
            .map(|rank| Task {
                cluster: cluster.file.clone(),
                path: path.to_owned(),
                write: false,
                method: "hybrid".to_owned(),
                iterations: self.timed_passes,
                generation: GENERATION,
                sync: false,
                cache: Some(method.cache_task(self)),
                pattern: Pattern::Interleaved {
                    rank,
                    processes: CLIENTS,
                    pieces: 1,
                    piece_bytes: usize::try_from(self.region_bytes).expect("at most 1 GiB"),
                },
            })
            .collect()
    }
}

/// The iods' cache counters summed.
fn iod_counters(client: &Client) -> Result<CacheCounters, String> {
    let mut sum = CacheCounters::default();
    for index in 0..usize::from(SERVERS) {
        let cache = client
            .server_stats(index)
            .map_err(|err| format!("ServerStats of iod {index}: {err}"))?
            .cache;
        sum.hits += cache.hits;
        sum.misses += cache.misses;
        sum.units_demoted += cache.units_demoted;
    }
    Ok(sum)
}

/// What one method measured over the repetitions.
#[derive(Default)]
struct Samples {
    seconds: Vec<f64>,
    bytes: u64,
    client: CacheCounts,
    iod: CacheCounters,
}

/// A rate of `part` in `whole`, 0 for none.
fn rate_of(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Runs the experiment and writes its report.
pub fn run(args: &DemoteArgs) -> Result<Outcome, String> {
    let common = &args.common;
    let plan = Plan::of(args)?;
    let (cluster, client) = start_cluster(common, &plan)?;
    let path = "/bench/demote";
    write_region(&client, path, &plan)?;
    let (samples, verified) = measure(&plan, &cluster, &client, path)?;
    let _ = client.unlink(path);
    let rows = rows(&plan, &samples)?;
    let report = Report {
        bench: "demote",
        quick: common.quick,
        meta: Meta::now(plan.repetitions),
        config: json!({
            "clients": CLIENTS,
            "iods": SERVERS,
            "iod_serve": "unified",
            "iod_cache_bytes": plan.iod_cache_bytes,
            "client_cache_bytes": plan.client_cache_bytes,
            "region_bytes_per_client": plan.region_bytes,
            "call_bytes": CALL_BYTES,
            "warm_passes": WARM_PASSES,
            "timed_passes": plan.timed_passes,
            "transport": "local (the client cache's blocks in a shared arena: the iods copy reads into it and pull demoted blocks out of it; eager sends a Demote per block, buffered one choosing Demote per iod and batch)",
            "demote_buffer_blocks": tessera_client::CLIENT_DEMOTE_BUFFER_BLOCKS,
            "working_set": "each client loops over its region: more than its client cache, the regions together more than the iods' caches, less than both levels together",
        }),
        verified,
        rows,
    };
    let text = text(&report, &plan)?;
    report.finish(common, &text, &[figure(&report)?])
}

/// Set-up: a private cluster (a given one is not used) whose iods serve from a small
/// unified cache, a client of it, and `/bench`.
fn start_cluster(common: &CommonArgs, plan: &Plan) -> Result<(BenchCluster, Client), String> {
    if let Some(given) = &common.cluster {
        eprintln!(
            "bench demote: not using {}: it starts a private cluster whose iods serve from a \
             small unified cache",
            given.display()
        );
    }
    let flags = tessera_cluster::serve_flags(Some(ServeMode::Unified), Some(plan.iod_cache_bytes));
    let cluster = BenchCluster::private(SERVERS, "-demote", &flags)?;
    let config = ClusterConfig::load(&cluster.file).map_err(|err| err.to_string())?;
    let client = Client::new(&config, &ClientOptions::default());
    match client.mkdir("/bench", 0o755) {
        Ok(_) => {}
        Err(err) if err.code() == Some(ErrorCode::Exists) => {}
        Err(err) => return Err(format!("mkdir /bench: {err}")),
    }
    Ok((cluster, client))
}

/// Creates `path` and writes every client's region of it with the expected bytes, synced.
fn write_region(client: &Client, path: &str, plan: &Plan) -> Result<(), String> {
    let file = client
        .create(path, &CreateOptions::default())
        .map_err(|err| format!("create {path}: {err}"))?;
    let bytes = plan.region_bytes * CLIENTS as u64;
    let data: Vec<u8> = (0..bytes)
        .map(|offset| crate::workers::expected_byte(offset, GENERATION))
        .collect();
    for (index, chunk) in data.chunks(4 << 20).enumerate() {
        let offset = (index * (4 << 20)) as u64;
        file.write_at(offset, chunk)
            .map_err(|err| format!("write {path} at {offset}: {err}"))?;
    }
    file.sync().map_err(|err| format!("sync {path}: {err}"))
}

/// Every repetition of every method, the methods taking turns in an order rotating with
/// the repetition; the iods' counters read around each step. Per method, its samples; and
/// whether every read was verified.
fn measure(
    plan: &Plan,
    cluster: &BenchCluster,
    client: &Client,
    path: &str,
) -> Result<(Vec<Samples>, bool), String> {
    let progress = report::Progress::new("demote", (plan.repetitions * Method::ALL.len()) as u64);
    let mut workers = Workers::spawn(CLIENTS)?;
    let mut samples: Vec<Samples> = Method::ALL.iter().map(|_| Samples::default()).collect();
    let mut verified = true;
    for repetition in 0..plan.repetitions {
        for turn in 0..Method::ALL.len() {
            let index = (turn + repetition) % Method::ALL.len();
            let method = Method::ALL[index];
            let mut before = CacheCounters::default();
            let (results, _) =
                workers.step_checked_with(plan.tasks(cluster, path, method), || {
                    before = iod_counters(client)?;
                    Ok(())
                })?;
            let after = iod_counters(client)?;
            verified &= results.iter().all(|result| result.verified);
            let sample = &mut samples[index];
            sample.seconds.push(
                results
                    .iter()
                    .map(|result| result.seconds)
                    .fold(0.0, f64::max),
            );
            sample.bytes = results.iter().map(|result| result.bytes).sum();
            sample.client = CacheCounts::default();
            for result in &results {
                sample.client.add(&result.cache.unwrap_or_default());
            }
            sample.iod = CacheCounters {
                hits: after.hits - before.hits,
                misses: after.misses - before.misses,
                units_demoted: after.units_demoted - before.units_demoted,
                ..CacheCounters::default()
            };
            progress.step(&format!("{method}, repetition {}", repetition + 1));
        }
    }
    drop(progress);
    drop(workers);
    Ok((samples, verified))
}

/// One row per method: its median and range, the client cache's and the iods' counts and
/// hit rates, and its speed paired with the method before it.
fn rows(plan: &Plan, samples: &[Samples]) -> Result<Vec<DemoteRow>, String> {
    Method::ALL
        .iter()
        .zip(samples)
        .enumerate()
        .map(|(index, (method, sample))| {
            let seconds = Spread::of(&sample.seconds)
                .map_err(|why| format!("bench demote: {method} was not measured: {why}"))?;
            let client_counts = sample.client;
            let blocks = client_counts.hits + client_counts.misses;
            Ok(DemoteRow {
                clients: CLIENTS,
                iods: SERVERS,
                region_bytes: plan.region_bytes,
                client_cache_bytes: method.cache_task(plan).cache_bytes,
                iod_cache_bytes: plan.iod_cache_bytes,
                method: method.name(),
                measure: Measure::of_seconds(seconds, sample.bytes),
                bytes: sample.bytes,
                client_hits: client_counts.hits,
                client_misses: client_counts.misses,
                buffer_hits: client_counts.buffer_hits,
                demotes_sent: client_counts.demotes_sent,
                demotes_refused: client_counts.demotes_refused,
                buffer_full_waits: client_counts.buffer_full_waits,
                client_hit_rate: rate_of(client_counts.hits, blocks),
                iod_hits: sample.iod.hits,
                iod_misses: sample.iod.misses,
                iod_hit_rate: rate_of(sample.iod.hits, sample.iod.hits + sample.iod.misses),
                iod_units_demoted: sample.iod.units_demoted,
                repetitions: sample.seconds.len(),
                paired_ratio: index
                    .checked_sub(1)
                    .map(|before| report::paired_ratio(&samples[before].seconds, &sample.seconds)),
            })
        })
        .collect::<Result<Vec<_>, String>>()
}

/// The median MiB/s of `method`.
fn rate(report: &Report<DemoteRow>, plan: &Plan, method: Method) -> Result<f64, String> {
    report
        .row(&case(plan.region_bytes), method.name())?
        .measure
        .measured()
        .ok_or_else(|| format!("bench demote: {method} has no figure"))
}

fn text(report: &Report<DemoteRow>, plan: &Plan) -> Result<String, String> {
    let mut table = report::table([
        "method",
        "MiB/s",
        "x inclusive",
        "client hits %",
        "buffer hits",
        "iod hits %",
        "demotes sent",
        "demotes refused",
        "iod units demoted",
    ]);
    let inclusive = rate(report, plan, Method::Inclusive)?;
    for method in Method::ALL {
        let row = report.row(&case(plan.region_bytes), method.name())?;
        let mib_s = rate(report, plan, method)?;
        table.add_row([
            method.name().to_owned(),
            report::cell(mib_s, 1),
            report::ratio(mib_s, inclusive),
            report::cell(row.client_hit_rate * 100.0, 1),
            row.buffer_hits.to_string(),
            report::cell(row.iod_hit_rate * 100.0, 1),
            row.demotes_sent.to_string(),
            row.demotes_refused.to_string(),
            row.iod_units_demoted.to_string(),
        ]);
    }
    let demote = rate(report, plan, Method::Demote)?;
    let buffered = rate(report, plan, Method::DemoteBuffered)?;
    let paired = |method: Method| -> Result<String, String> {
        let row = report.row(&case(plan.region_bytes), method.name())?;
        Ok(row
            .paired_ratio
            .map_or_else(|| "-".to_owned(), |ratio| format!("{ratio:.2}x")))
    };
    Ok(format!(
        "demote: {CLIENTS} clients x {SERVERS} iods (--serve unified, {} B cache each), each client looping over {} B in {CALL_BYTES} B reads with a {} B client cache; MiB/s of all clients, median of {} repetitions\n{table}\n\
         demote / inclusive {}, demote-buffered / demote {} (medians); paired within each repetition, median: {} and {}\n\
         paper (001 Table 6.3, simulated): DEMOTE buffering 1.11-1.44x eager DEMOTE on sequential loops, 1.08-1.13x on random\n\
         verified: {}\n",
        plan.iod_cache_bytes,
        plan.region_bytes,
        plan.client_cache_bytes,
        report.meta.repetitions,
        report::ratio(demote, inclusive),
        report::ratio(buffered, demote),
        paired(Method::Demote)?,
        paired(Method::DemoteBuffered)?,
        report.verified
    ))
}

/// MiB/s per method, one bar-like point each.
fn figure(report: &Report<DemoteRow>) -> Result<Figure, String> {
    let mut panel = Panel::categorical(
        "live DEMOTE",
        ("method", Method::ALL.iter().map(|method| method.name())),
        ("MiB/s (all clients)", Scale::Linear),
    );
    for (index, method) in Method::ALL.into_iter().enumerate() {
        let row = report
            .rows
            .iter()
            .find(|row| row.method == method.name())
            .ok_or_else(|| format!("bench demote: no row of {method}"))?;
        panel.lines.push(Line {
            name: method.name().to_owned(),
            points: vec![row.measure.point(index as f64)],
        });
    }
    Ok(Figure {
        stem: "demote".to_owned(),
        title: format!(
            "demote: {CLIENTS} clients x {SERVERS} iods, exclusive vs inclusive caching (median, min-max of {} repetitions)",
            report.meta.repetitions
        ),
        panels: vec![panel],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> DemoteArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: DemoteArgs,
        }
        <Cli as clap::Parser>::try_parse_from(
            std::iter::once("demote").chain(extra.iter().copied()),
        )
        .unwrap()
        .args
    }

    #[test]
    fn the_working_set_fits_only_in_both_levels_together() {
        for extra in [&["--quick"][..], &[], &["--region-bytes", "4m"]] {
            let plan = Plan::of(&args(extra)).unwrap();
            let iods = plan.iod_cache_bytes * u64::from(SERVERS);
            let regions = plan.region_bytes * CLIENTS as u64;
            assert!(
                plan.client_cache_bytes < plan.region_bytes,
                "a loop misses the client cache"
            );
            assert!(iods < regions, "the loops miss the iods' caches");
            assert!(
                plan.client_cache_bytes * CLIENTS as u64 + iods >= regions,
                "both levels hold them"
            );
        }
    }

    #[test]
    fn bad_region_sizes_are_refused_by_name() {
        for bad in ["1m", "2g", "5000000"] {
            let refused = Plan::of(&args(&["--region-bytes", bad])).unwrap_err();
            assert!(refused.contains("--region-bytes"), "{refused}");
        }
    }
}
