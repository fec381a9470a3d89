//! `tessera sim demote`: its arguments, and its output as tables for people or one JSON
//! report (`--json`), returned as text for the caller to print.

use std::path::PathBuf;

use crate::cost::{measure_loopback, paper_networks, Costs};
use crate::engine::{Config, Method};
use crate::table::{
    run_synthetic, run_trace, Experiment, Report, SEED_BUFFER_BLOCKS, SEED_CACHE_BLOCKS,
};
use crate::workload::parse_trace;

/// Bytes a trace file may have (a little over `TRACE_LINES_MAX` short lines).
pub const TRACE_BYTES_MAX: u64 = 512 << 20;

/// The simulators.
#[derive(Debug, clap::Subcommand)]
pub enum SimCommand {
    /// Client and server caches with DEMOTE and DEMOTE buffering: the paper's Table 6.3 beside
    /// ours (or a block trace with --trace), under nocache, inclusive, demote and
    /// demote-buffered.
    Demote(DemoteArgs),
}

/// `tessera sim demote`'s options (`docs/SIM.md`).
#[derive(Debug, clap::Args)]
pub struct DemoteArgs {
    /// Replay this block trace (`CLIENT BLOCK [R|W]` per line) instead of the synthetic
    /// workloads.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Accesses of the trace that only warm the caches.
    #[arg(long, default_value_t = 0)]
    pub warmup: usize,
    /// Client cache per client, blocks (trace only; synthetic runs use the seed's).
    #[arg(long, default_value_t = SEED_CACHE_BLOCKS)]
    pub client_blocks: usize,
    /// Server cache, blocks (trace only).
    #[arg(long, default_value_t = SEED_CACHE_BLOCKS)]
    pub server_blocks: usize,
    /// DEMOTE buffer per client, blocks (both halves).
    #[arg(long, default_value_t = SEED_BUFFER_BLOCKS)]
    pub buffer_blocks: usize,
    /// Divide the synthetic sizes by N (quick runs).
    #[arg(long, default_value_t = 1)]
    pub scale: usize,
    /// Timed working sets of reads after the warm-up (synthetic).
    #[arg(long, default_value_t = crate::table::SEED_PASSES)]
    pub passes: u64,
    /// Seed of the synthetic generators.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Zipf exponent.
    #[arg(long, default_value_t = 1.0)]
    pub zipf_alpha: f64,
    /// Time between two accesses of a client, µs.
    #[arg(long, default_value_t = 0.0)]
    pub think_us: f64,
    /// Add a network with parameters measured on this machine, from a JSON file
    /// (`{"latency_us": .., "bandwidth_mib_s": .., "disk_us": .., "hit_us": ..}`).
    #[arg(long, value_name = "FILE")]
    pub measured: Option<PathBuf>,
    /// Add a network measured now over loopback TCP (latency, bandwidth, 4 KiB memcpy).
    #[arg(long)]
    pub measure: bool,
    /// Print one JSON report instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Runs a simulator; returns what to print.
pub fn run(command: &SimCommand) -> Result<String, String> {
    let SimCommand::Demote(args) = command;
    let mut networks = paper_networks();
    if let Some(path) = &args.measured {
        let text = std::fs::read_to_string(path)
            .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        networks.push(Costs::from_json(&text, &path.display().to_string())?);
    }
    if args.measure {
        networks.push(measure_loopback()?);
    }
    let report = if let Some(path) = &args.trace {
        let size = std::fs::metadata(path)
            .map_err(|err| format!("cannot read {}: {err}", path.display()))?
            .len();
        if size > TRACE_BYTES_MAX {
            return Err(format!(
                "{}: {size} bytes, more than {TRACE_BYTES_MAX}",
                path.display()
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        let accesses = parse_trace(&text).map_err(|err| format!("{}: {err}", path.display()))?;
        let config = Config {
            client_blocks: args.client_blocks,
            server_blocks: args.server_blocks,
            buffer_blocks: args.buffer_blocks,
            think_us: args.think_us,
        };
        run_trace(&accesses, args.warmup, config, &networks)?
    } else {
        let experiment = Experiment {
            scale: args.scale,
            passes: args.passes,
            seed: args.seed,
            zipf_alpha: args.zipf_alpha,
            buffer_blocks: args.buffer_blocks,
            think_us: args.think_us,
        };
        run_synthetic(&experiment, &networks)?
    };
    if args.json {
        serde_json::to_string_pretty(&report)
            .map(|json| json + "\n")
            .map_err(|err| format!("cannot encode the report: {err}"))
    } else {
        Ok(render(&report))
    }
}

fn table<const N: usize>(header: [&str; N]) -> comfy_table::Table {
    let mut table = comfy_table::Table::new();
    table
        .load_style(comfy_table::presets::ASCII_MARKDOWN)
        .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
        .set_header(header);
    table
}

fn optional(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |value| format!("{value:.decimals$}"))
}

fn percent(rate: f64) -> String {
    format!("{:.1}%", rate * 100.0)
}

/// The report as tables: latencies beside Table 6.3, then hit rates and demotes.
pub fn render(report: &Report) -> String {
    let mut latencies = table([
        "network",
        "workload",
        "paper DE ms",
        "paper DB ms",
        "paper x",
        "nocache ms",
        "inclusive ms",
        "DE ms",
        "DB ms",
        "x",
        "winner",
        "paper winner",
    ]);
    for row in &report.rows {
        let ms = |method: Method| {
            let at = Method::ALL
                .iter()
                .position(|m| *m == method)
                .expect("every method");
            format!("{:.3}", row.methods[at].mean_read_ms)
        };
        latencies.add_row(vec![
            row.network.clone(),
            row.workload.clone(),
            optional(row.paper_demote_ms, 3),
            optional(row.paper_buffered_ms, 3),
            optional(row.paper_speedup, 2),
            ms(Method::Nocache),
            ms(Method::Inclusive),
            ms(Method::Demote),
            ms(Method::DemoteBuffered),
            format!("{:.2}", row.speedup),
            row.winner.to_owned(),
            match row.same_winner {
                Some(true) => format!("{} (same)", row.paper_winner.unwrap_or("-")),
                Some(false) => format!("{} (DIFFERENT)", row.paper_winner.unwrap_or("-")),
                None => "-".to_owned(),
            },
        ]);
    }
    let mut hits = table([
        "network",
        "workload",
        "method",
        "client",
        "buffer",
        "server",
        "disk",
        "demotes sent",
        "refused",
        "batches",
        "full waits",
    ]);
    for row in &report.rows {
        for result in &row.methods {
            let outcome = &result.outcome;
            hits.add_row(vec![
                row.network.clone(),
                row.workload.clone(),
                outcome.method.to_owned(),
                percent(result.client_hit_rate),
                percent(result.buffer_hit_rate),
                percent(result.server_hit_rate),
                percent(result.disk_rate),
                outcome.demotes_sent.to_string(),
                outcome.demotes_refused.to_string(),
                outcome.batches.to_string(),
                outcome.buffer_full_waits.to_string(),
            ]);
        }
    }
    let networks: Vec<String> = report
        .networks
        .iter()
        .map(|costs| {
            format!(
                "{}: {:.1} µs, {:.0} MiB/s, disk {:.0} µs, hit {:.2} µs",
                costs.name, costs.latency_us, costs.bandwidth_mib_s, costs.disk_us, costs.hit_us
            )
        })
        .collect();
    format!(
        "Mean READ latency (DE: demote, DB: demote-buffered; paper: {}; x = DE/DB)\n{latencies}\n\n\
         Hit rates (fractions of the timed reads) and demotes\n{hits}\n\n\
         caches: client {} blocks, server {} blocks, DEMOTE buffer {} blocks\nnetworks: {}\n\
         winners match the paper: {}\n",
        report.source,
        report.config.client_blocks,
        report.config.server_blocks,
        report.config.buffer_blocks,
        networks.join("; "),
        if report.winners_match { "yes" } else { "NO" },
    )
}
