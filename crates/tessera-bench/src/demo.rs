//! `tessera demo`: the main job of `make demo`.
//!
//! Four client processes in a 2 x 2 grid each own one block of a 2-D array of doubles
//! (block-block distribution). Each writes its block with one list-I/O call: memory pieces
//! are the block's rows inside a local array with a one-element halo, file pieces are the same
//! rows in the global row-major file, so both sides are noncontiguous. Then every process
//! reads its block back into a cleared buffer and checks every byte.

use std::path::PathBuf;

use tessera_client::{Client, ClientOptions, ClusterConfig, CreateOptions, ErrorCode};
use tessera_cluster::outln;

use crate::workers::{Pattern, StepResult, Task, Workers};

/// Arguments of `tessera demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Rows (and columns) of the global array.
    #[arg(long, default_value_t = 2048)]
    size: usize,
    /// Client processes per grid side (the grid is square).
    #[arg(long, default_value_t = 2)]
    grid: usize,
    /// Transfer mechanism: auto (the cost model picks per request), gather, pack, multiple
    /// or inline.
    #[arg(long, default_value = "auto")]
    method: String,
    #[command(flatten)]
    cluster: tessera_cluster::ClusterArg,
}

/// Bytes per array element (a double).
const ELEMENT_BYTES: usize = 8;
const DEMO_PATH: &str = "/demo/array";

fn cluster_file(arg: &tessera_cluster::ClusterArg) -> Result<PathBuf, String> {
    arg.cluster
        .clone()
        .or_else(|| std::env::var_os(tessera_client::config::CLUSTER_ENV).map(PathBuf::from))
        .ok_or_else(|| "no cluster: pass --cluster FILE or set TESSERA_CLUSTER".to_owned())
}

fn summary(results: &[StepResult], wall_seconds: f64) -> (u64, u64, u64, u64, u64, f64) {
    let requests = results.iter().map(|r| r.requests).sum();
    let memory = results.iter().map(|r| r.memory_pieces).sum();
    let file = results.iter().map(|r| r.file_pieces).sum();
    let storage = results.iter().map(|r| r.storage_pieces).sum();
    let bytes = results.iter().map(|r| r.bytes).sum::<u64>();
    let seconds = results
        .iter()
        .map(|r| r.seconds)
        .fold(0.0, f64::max)
        .max(wall_seconds.min(f64::MAX));
    (requests, memory, file, storage, bytes, seconds)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// Runs the demo against the cluster.
pub fn run(args: &DemoArgs) -> Result<(), String> {
    let cluster = cluster_file(&args.cluster)?;
    let config = ClusterConfig::load(&cluster).map_err(|err| err.to_string())?;
    let processes = args.grid * args.grid;
    if args.grid == 0 || !args.size.is_multiple_of(args.grid) || args.size < 2 * args.grid {
        return Err(format!(
            "--size {} must be a multiple of --grid {} (and at least twice it)",
            args.size, args.grid
        ));
    }
    let client = Client::new(&config, &ClientOptions::default());
    match client.mkdir("/demo", 0o755) {
        Ok(_) => {}
        Err(err) if err.code() == Some(ErrorCode::Exists) => {}
        Err(err) => return Err(format!("mkdir /demo: {err}")),
    }
    match client.unlink(DEMO_PATH) {
        Ok(()) => {}
        Err(err) if err.code() == Some(ErrorCode::NotFound) => {}
        Err(err) => return Err(format!("rm {DEMO_PATH}: {err}")),
    }
    client
        .create(DEMO_PATH, &CreateOptions::default())
        .map_err(|err| format!("create {DEMO_PATH}: {err}"))?;

    let block = args.size / args.grid;
    let total_bytes = (args.size * args.size * ELEMENT_BYTES) as u64;
    outln!(
        "tessera demo: {n} x {n} array of doubles ({:.1} MiB) in {DEMO_PATH}, striped over {} I/O servers (64 KiB units)",
        mib(total_bytes),
        config.iods.len(),
        n = args.size
    );
    outln!(
        "  {processes} client processes in a {g} x {g} grid; each owns a {block} x {block} block = {block} rows of {} KiB",
        block * ELEMENT_BYTES / 1024,
        g = args.grid
    );
    outln!("  memory: each block sits in a ({b2} x {b2}) local array with a halo, so memory and file are both noncontiguous", b2 = block + 2);

    let mut workers = Workers::spawn(processes)?;
    let tasks = |write: bool| {
        (0..processes)
            .map(|rank| Task {
                cluster: cluster.clone(),
                path: DEMO_PATH.to_owned(),
                write,
                method: args.method.clone(),
                iterations: 1,
                generation: 2024,
                sync: false,
                cache: None,
                pattern: Pattern::Block2d {
                    rank,
                    rows: args.size,
                    columns: args.size,
                    element_bytes: ELEMENT_BYTES,
                    grid_rows: args.grid,
                    grid_columns: args.grid,
                },
            })
            .collect::<Vec<_>>()
    };
    let mut all_verified = true;
    for (name, write) in [("write", true), ("read", false)] {
        let (results, wall) = workers.step(tasks(write))?;
        let (requests, memory, file, storage, bytes, seconds) = summary(&results, wall);
        let one_sided: u64 = results.iter().map(|result| result.one_sided).sum();
        let transport = if one_sided == requests {
            "local: servers moved the data one-sidedly"
        } else if one_sided == 0 {
            "tcp: data in messages"
        } else {
            "local and tcp"
        };
        outln!(
            "  {name:<5} {processes} processes x 1 list call: {requests} requests ({:.1} per process), {memory} memory pieces -> {file} file pieces -> {storage} storage pieces, {:.1} MiB in {:.3} s = {:.0} MiB/s ({}; {transport})",
            requests as f64 / processes as f64,
            mib(bytes),
            seconds,
            mib(bytes) / seconds.max(1e-9),
            args.method,
        );
        if !write {
            all_verified = results.iter().all(|result| result.verified);
        }
    }
    let size = client
        .stat(DEMO_PATH)
        .map_err(|err| format!("stat {DEMO_PATH}: {err}"))?
        .size;
    if size != total_bytes {
        return Err(format!(
            "{DEMO_PATH} is {size} bytes, expected {total_bytes}"
        ));
    }
    if !all_verified {
        return Err("read-back did not match what was written".to_owned());
    }
    outln!("  verified: every byte read back matches; stat reports {size} bytes");
    Ok(())
}
