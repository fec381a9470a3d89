//! `tessera bench unifier` (seed 001 §5.4, Figs. 5.3–5.5): the iod's unified cache against a
//! copying and a mapping server.
//!
//! The bench starts three private clusters of four iods, one per `tessera iod --serve` mode —
//! `normal` (reads copied through a server buffer from the page cache), `mmap` (pushed from a
//! mapping of the object over `local`, sent from it over tcp when all cached and at most
//! 1 MiB) and `unified` (sent straight from the iod's own cache,
//! whose budget `--cache-bytes` every iod of that cluster gets) — and runs the same three
//! experiments on each, the methods interleaved within every repetition:
//!
//! - **cached reads** (Fig. 5.3): one client in this process reads a file held by one iod,
//!   half the cache budget, warmed by one whole read; then, per access size, every
//!   repetition times read calls of that size walking through the file, over `local` and
//!   over tcp. `ofi` rows are reported skipped.
//! - **re-read** (Fig. 5.4): regions of 0.8x to 1.3x the cache budget, the first bytes of one
//!   file of 1.3x held by one iod, read twice sequentially in 128 KiB calls over `local`; the
//!   second pass is the figure, and shows how much of the region each method keeps cached.
//! - **aggregate** (Fig. 5.5): 1–4 client processes ([`Workers`]) each read a cached
//!   contiguous region of 2N MiB (N = 4 iods) striped over the four iods, over `local` and tcp.
//!
//! Every byte read is compared with what was written ([`expected_byte`]), outside the timing.
//! The report has one [`UnifierRow`] per (part, transport, size, clients, method) and gives the
//! machine's memory-copy bandwidth (a 64 MiB copy in this process) to compare with.

use std::fmt;
use std::time::Instant;

use serde::Serialize;
use serde_json::json;
use tessera_client::{Client, ClientOptions, ClusterConfig, CreateOptions, ErrorCode, File};
use tessera_cluster::ServeMode;

use super::{BenchCluster, CommonArgs};
use crate::report::{
    self, Figure, Line, Measure, Meta, Outcome, Panel, Progress, Report, Scale, Spread,
};
use crate::workers::{expected_byte, Pattern, Task, Workers};

/// Iods of each cluster: the aggregate reads from four, as the paper's PVFS test did.
const SERVERS: u16 = 4;
/// The paper's access sizes: 4 KiB .. 1 MiB.
const SIZES: [u64; 9] = [
    4 << 10,
    8 << 10,
    16 << 10,
    32 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
    512 << 10,
    1 << 20,
];
const QUICK_SIZES: [u64; 4] = [4 << 10, 64 << 10, 256 << 10, 1 << 20];
/// Most access sizes `--sizes` may list, and the largest.
const SIZES_MAX: usize = 32;
const SIZE_BYTES_MAX: u64 = 64 << 20;
/// The unified cache budget of each iod (`--cache-bytes`): the default and with `--quick`.
const CACHE_BYTES_DEFAULT: u64 = 256 << 20;
const QUICK_CACHE_BYTES: u64 = 64 << 20;
/// The smallest and largest `--cache-bytes`: the bench holds 1.3x of it in memory to check
/// what it reads.
const CACHE_BYTES_MIN: u64 = 1 << 20;
const CACHE_BYTES_MAX: u64 = 4 << 30;
/// Most `--repetitions`.
const REPETITIONS_MAX: usize = 100;
/// Re-read region sizes, in tenths of the cache budget (Fig. 5.4 spans 300–400 MB around an
/// effective cache of 340–360 MB).
const REREAD_TENTHS: [u64; 5] = [8, 9, 10, 11, 13];
/// The re-read's call size (the paper's 128 KiB blocks).
const REREAD_CALL_BYTES: u64 = 128 << 10;
/// Client processes of the aggregate, and the bytes each reads by default: 2N MiB, N the
/// iods; `--region-bytes` may give at most [`SIZE_BYTES_MAX`].
const AGGREGATE_CLIENTS: [usize; 4] = [1, 2, 3, 4];
const AGGREGATE_REGION_BYTES: u64 = 2 * SERVERS as u64 * (1 << 20);
/// Bytes one walk of the cached reads moves per (size, method, repetition), and the fewest
/// calls it makes.
const WALK_BYTES: u64 = 64 << 20;
const QUICK_WALK_BYTES: u64 = 32 << 20;
const WALK_CALLS_MIN: u64 = 16;
/// Bytes of one write call while the files are made.
const WRITE_CALL_BYTES: usize = 4 << 20;
/// The memory copy measured for the ratio to memory bandwidth (the paper's test copied
/// 20 MB, "much larger than L1 and L2 caches"), and how often.
const MEMCPY_BYTES: usize = 64 << 20;
const MEMCPY_REPETITIONS: usize = 5;
/// The aggregate's client methods: the transfer model's choice, over `local` or TCP
/// (the workers' `tcp:` prefix).
const AGGREGATE_METHOD: &str = "hybrid";
/// Why the `ofi` rows are not measured.
const OFI_SKIPPED: &str = "ofi: no bench starts its servers with --ofi-provider yet, so there \
                           is no fabric to compare the methods over";

/// Arguments of `tessera-bench unifier`.
#[derive(Debug, Clone, clap::Args)]
pub struct UnifierArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The unified cache budget of each iod (4096, 64k, 128m, 1g; between 1m and 4g). The
    /// cached-read file is half of it, the re-read regions 0.8x to 1.3x of it (default:
    /// 256m, --quick 64m).
    #[arg(long, value_parser = tessera_client::layouts::parse_bytes)]
    pub cache_bytes: Option<u64>,
    /// Access sizes of the cached reads, comma-separated (default: 4k to 1m by powers of 2;
    /// --quick 4k,64k,256k,1m; each at most 64m and at most half the cache budget).
    #[arg(long, value_delimiter = ',', value_parser = tessera_client::layouts::parse_bytes)]
    pub sizes: Vec<u64>,
    /// Measurements of each case and method, median reported (default: 7, --quick 5; at
    /// most 100). `--cache-bytes 4m --sizes 64k --repetitions 1` checks every row's data and
    /// figures in seconds, without meaningful timings.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=REPETITIONS_MAX as u64))]
    pub repetitions: Option<u64>,
    /// Bytes each client of the aggregate reads (default: 2N MiB with N = 4 iods, as the
    /// paper's test; at most 64m).
    #[arg(long, value_parser = tessera_client::layouts::parse_bytes)]
    pub region_bytes: Option<u64>,
}

/// Which experiment of the three a row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Part {
    /// Repeated reads of cached data, one client, one iod (Fig. 5.3).
    #[serde(rename = "cached-read")]
    CachedRead,
    /// Repeated overwrites of cached data, one client, one iod (no sync timed).
    #[serde(rename = "cached-write")]
    CachedWrite,
    /// The second of two sequential reads of a region around the cache budget (Fig. 5.4).
    #[serde(rename = "re-read")]
    Reread,
    /// 1–4 client processes reading 2N MiB each from 4 iods (Fig. 5.5).
    #[serde(rename = "aggregate")]
    Aggregate,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::CachedRead => "cached-read",
            Self::CachedWrite => "cached-write",
            Self::Reread => "re-read",
            Self::Aggregate => "aggregate",
        })
    }
}

/// How the client reaches the iods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// The iods' Unix sockets; they move the data one-sidedly into the client.
    Local,
    /// TCP over loopback.
    Tcp,
    /// A libfabric provider.
    Ofi,
}

impl Transport {
    /// The transports measured.
    const MEASURED: [Self; 2] = [Self::Local, Self::Tcp];

    /// A client over this transport.
    fn client(self, config: &ClusterConfig) -> Client {
        let options = ClientOptions {
            local: self == Self::Local,
            ..ClientOptions::default()
        };
        Client::new(config, &options)
    }

    /// The workers' method name over this transport.
    fn worker_method(self) -> String {
        match self {
            Self::Local => AGGREGATE_METHOD.to_owned(),
            Self::Tcp | Self::Ofi => super::over_tcp(AGGREGATE_METHOD),
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Local => "local",
            Self::Tcp => "tcp",
            Self::Ofi => "ofi",
        })
    }
}

/// One (part, transport, sizes, clients, method) of unifier.
#[derive(Debug, Clone, Serialize)]
pub struct UnifierRow {
    /// Which experiment.
    pub part: Part,
    /// How the clients reached the iods.
    pub transport: Transport,
    /// Bytes of each read call.
    pub access_bytes: u64,
    /// Bytes of the file (cached reads) or of the region read (re-read: the first bytes of
    /// one larger file; aggregate: each client's region).
    pub file_bytes: u64,
    /// Client processes (1 but for the aggregate).
    pub clients: usize,
    /// `normal`, `mmap` or `unified`: the `--serve` mode of the iods.
    pub method: &'static str,
    /// MiB/s of all clients and seconds of one repetition, median over the repetitions, and
    /// the MiB/s range.
    #[serde(flatten)]
    pub measure: Measure,
    /// Read calls of one repetition, all clients.
    pub calls: u64,
    /// Client-to-server requests of one repetition, all clients.
    pub requests: u64,
    /// Bytes read in one repetition, all clients.
    pub bytes: u64,
    /// Repetitions measured.
    pub repetitions: usize,
    /// Why the row was not measured.
    pub skipped: Option<String>,
}

impl report::Row for UnifierRow {
    fn key(&self) -> (String, &str) {
        (
            case(
                self.part,
                self.transport,
                (self.access_bytes, self.file_bytes),
                self.clients,
            ),
            self.method,
        )
    }
}

/// The case label of a row.
fn case(
    part: Part,
    transport: Transport,
    (access_bytes, file_bytes): (u64, u64),
    clients: usize,
) -> String {
    format!("{part} {transport} {access_bytes} B of {file_bytes} B, {clients} clients")
}

/// The sizes of one run.
#[derive(Debug, Clone)]
struct Plan {
    cache_bytes: u64,
    sizes: Vec<u64>,
    repetitions: usize,
    walk_bytes: u64,
    region_bytes: u64,
    aggregate_iterations: u32,
}

impl Plan {
    fn of(args: &UnifierArgs) -> Result<Self, String> {
        let quick = args.common.quick;
        let cache_bytes = args.cache_bytes.unwrap_or(if quick {
            QUICK_CACHE_BYTES
        } else {
            CACHE_BYTES_DEFAULT
        });
        if !(CACHE_BYTES_MIN..=CACHE_BYTES_MAX).contains(&cache_bytes) {
            return Err(format!(
                "--cache-bytes {cache_bytes}: give between {CACHE_BYTES_MIN} and {CACHE_BYTES_MAX} bytes"
            ));
        }
        let sizes = if args.sizes.is_empty() {
            if quick {
                QUICK_SIZES.to_vec()
            } else {
                SIZES.to_vec()
            }
        } else {
            args.sizes.clone()
        };
        if sizes.len() > SIZES_MAX {
            return Err(format!(
                "--sizes: {} sizes, at most {SIZES_MAX}",
                sizes.len()
            ));
        }
        let cached_file_bytes = cache_bytes / 2;
        if let Some(size) = sizes
            .iter()
            .find(|&&size| size == 0 || size > SIZE_BYTES_MAX || size > cached_file_bytes)
        {
            return Err(format!(
                "--sizes: {size} bytes: each size must be positive, at most {SIZE_BYTES_MAX} and at most the cached-read file ({cached_file_bytes} bytes, half of --cache-bytes)"
            ));
        }
        let repetitions = args.repetitions.map_or(if quick { 5 } else { 7 }, |count| {
            usize::try_from(count).expect("at most REPETITIONS_MAX")
        });
        let region_bytes = args.region_bytes.unwrap_or(AGGREGATE_REGION_BYTES);
        if region_bytes == 0 || region_bytes > SIZE_BYTES_MAX {
            return Err(format!(
                "--region-bytes {region_bytes}: give a positive size of at most {SIZE_BYTES_MAX} bytes"
            ));
        }
        Ok(Self {
            cache_bytes,
            sizes,
            repetitions,
            region_bytes,
            walk_bytes: if quick { QUICK_WALK_BYTES } else { WALK_BYTES },
            aggregate_iterations: if quick { 2 } else { 8 },
        })
    }

    /// Bytes of the cached-read file: half the cache budget, whole stripe units.
    fn cached_file_bytes(&self) -> u64 {
        self.cache_bytes / 2
    }

    /// The re-read regions, and the file that holds them all.
    fn reread_bytes(&self) -> Vec<u64> {
        REREAD_TENTHS
            .iter()
            .map(|tenths| self.cache_bytes * tenths / 10)
            .collect()
    }
}

/// One cluster per method, with its clients.
struct Method {
    cluster: BenchCluster,
    /// A client over each of [`Transport::MEASURED`].
    clients: Vec<Client>,
}

impl Method {
    fn client(&self, transport: Transport) -> &Client {
        &self.clients[usize::from(transport == Transport::Tcp)]
    }
}

/// The samples of one case: seconds of each repetition, and the calls, requests and bytes of
/// one, per method.
struct Samples {
    seconds: Vec<Vec<f64>>,
    counts: Vec<Option<(u64, u64, u64)>>,
}

impl Samples {
    fn new() -> Self {
        Self {
            seconds: vec![Vec::new(); ServeMode::ALL.len()],
            counts: vec![None; ServeMode::ALL.len()],
        }
    }

    fn add(&mut self, method: usize, seconds: f64, counts: (u64, u64, u64)) {
        self.seconds[method].push(seconds);
        self.counts[method] = Some(counts);
    }

    /// One row per method.
    fn rows(
        &self,
        part: Part,
        transport: Transport,
        sizes: (u64, u64),
        clients: usize,
    ) -> Result<Vec<UnifierRow>, String> {
        ServeMode::ALL
            .iter()
            .enumerate()
            .map(|(index, serve)| {
                let missing = |why: String| {
                    format!(
                        "bench unifier: case \"{}\", method \"{}\" was not measured: {why}",
                        case(part, transport, sizes, clients),
                        serve.name()
                    )
                };
                let seconds = Spread::of(&self.seconds[index]).map_err(missing)?;
                let (calls, requests, bytes) =
                    self.counts[index].ok_or_else(|| missing("no counts".to_owned()))?;
                Ok(UnifierRow {
                    part,
                    transport,
                    access_bytes: sizes.0,
                    file_bytes: sizes.1,
                    clients,
                    method: serve.name(),
                    measure: Measure::of_seconds(seconds, bytes),
                    calls,
                    requests,
                    bytes,
                    repetitions: self.seconds[index].len(),
                    skipped: None,
                })
            })
            .collect()
    }
}

/// The bytes of a file written with generation `generation`.
fn contents(bytes: u64, generation: u64) -> Vec<u8> {
    (0..bytes)
        .map(|offset| expected_byte(offset, generation))
        .collect()
}

/// Creates `path` on one iod (`servers` 1) or all, writes `data` to it and syncs it.
fn write_file(client: &Client, path: &str, servers: u16, data: &[u8]) -> Result<File, String> {
    let options = CreateOptions {
        server_count: servers,
        ..CreateOptions::default()
    };
    let file = client
        .create(path, &options)
        .map_err(|err| format!("create {path}: {err}"))?;
    for (index, chunk) in data.chunks(WRITE_CALL_BYTES).enumerate() {
        let offset = (index * WRITE_CALL_BYTES) as u64;
        file.write_at(offset, chunk)
            .map_err(|err| format!("write {path} at {offset}: {err}"))?;
    }
    // On storage before any timing, so no write-back runs under a measurement.
    file.sync().map_err(|err| format!("sync {path}: {err}"))?;
    Ok(file)
}

/// Reads `buffer.len()` bytes of `file` at `offset`; returns the seconds of the call, its
/// requests, and whether it read what `expected` holds there (checked after the timing).
fn timed_read(
    file: &File,
    offset: u64,
    buffer: &mut [u8],
    expected: &[u8],
) -> Result<(f64, u64, bool), String> {
    buffer.fill(0xA5);
    let started = Instant::now();
    let io = file
        .read_at(offset, buffer)
        .map_err(|err| format!("read {} at {offset}: {err}", file.path()))?;
    let seconds = started.elapsed().as_secs_f64();
    let start = usize::try_from(offset).map_err(|_| format!("offset {offset}"))?;
    let right = io.bytes == buffer.len() as u64 && expected[start..start + buffer.len()] == *buffer;
    Ok((seconds, io.requests, right))
}

/// Writes `data` to `file` at `offset`; returns the seconds of the call, its requests, and
/// whether it wrote every byte.
fn timed_write(file: &File, offset: u64, data: &[u8]) -> Result<(f64, u64, bool), String> {
    let started = Instant::now();
    let io = file
        .write_at(offset, data)
        .map_err(|err| format!("write {} at {offset}: {err}", file.path()))?;
    let seconds = started.elapsed().as_secs_f64();
    Ok((seconds, io.requests, io.bytes == data.len() as u64))
}

/// Reads the first `bytes` of `file` in calls of `call_bytes`; returns the seconds, the calls,
/// the requests, and whether every byte was right.
fn read_through(
    file: &File,
    bytes: u64,
    call_bytes: u64,
    expected: &[u8],
) -> Result<(f64, u64, u64, bool), String> {
    let mut buffer = vec![0u8; usize::try_from(call_bytes).map_err(|_| "call size")?];
    let (mut seconds, mut calls, mut requests, mut right) = (0.0, 0, 0, true);
    let mut offset = 0;
    while offset < bytes {
        let length = usize::try_from(call_bytes.min(bytes - offset)).expect("below call_bytes");
        let (took, sent, ok) = timed_read(file, offset, &mut buffer[..length], expected)?;
        seconds += took;
        calls += 1;
        requests += sent;
        right &= ok;
        offset += length as u64;
    }
    Ok((seconds, calls, requests, right))
}

/// MiB/s of copying [`MEMCPY_BYTES`] in this process, median of [`MEMCPY_REPETITIONS`]
/// copies (both buffers touched first, so no copy pays for page faults).
fn memcpy_mib_s() -> Result<f64, String> {
    let source = vec![0x5Au8; MEMCPY_BYTES];
    let mut target = vec![0u8; MEMCPY_BYTES];
    target.copy_from_slice(&source);
    let mut seconds = Vec::with_capacity(MEMCPY_REPETITIONS);
    for repetition in 0..MEMCPY_REPETITIONS {
        let started = Instant::now();
        target.copy_from_slice(&source);
        seconds.push(started.elapsed().as_secs_f64());
        // Keeps the copy from being elided.
        std::hint::black_box(&mut target);
        assert_eq!(target[repetition], 0x5A);
    }
    Ok(Spread::of(&seconds)?.rate_of(MEMCPY_BYTES as u64).median)
}

/// The Ready part the unified iods get: the whole budget in whole 64 KiB slots where an iod
/// may pin that much (root, whom `RLIMIT_MEMLOCK` does not bind), else what the limit allows.
fn ready_bytes(cache_bytes: u64) -> u64 {
    let slot = tessera_iod::cache::UNIT_BYTES_MAX as u64;
    let whole = cache_bytes / slot * slot;
    // SAFETY: `geteuid` has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return whole;
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` only fills the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &raw mut limit) } != 0 {
        return 0;
    }
    whole.min(limit.rlim_cur / slot * slot)
}

/// Starts the three clusters, one per `--serve` mode; only `unified` is given the budget.
fn start_methods(plan: &Plan) -> Result<Vec<Method>, String> {
    let mut methods = Vec::new();
    for serve in ServeMode::ALL {
        let cache = (serve == ServeMode::Unified).then_some(plan.cache_bytes);
        let mut flags = tessera_cluster::serve_flags(Some(serve), cache);
        if serve == ServeMode::Unified {
            // Replies come out of Ready (registered) memory, as in the paper.
            flags.extend([
                "--cache-ready-bytes".to_owned(),
                ready_bytes(plan.cache_bytes).to_string(),
            ]);
        }
        let cluster = BenchCluster::private(SERVERS, &format!("-{}", serve.name()), &flags)
            .map_err(|err| format!("cluster of --serve {}: {err}", serve.name()))?;
        let config = ClusterConfig::load(&cluster.file).map_err(|err| err.to_string())?;
        // Without its Unix socket an iod is reached by TCP, and the `local` rows would lie.
        if let Some(iod) = config.iods.iter().find(|iod| iod.local.is_none()) {
            return Err(format!(
                "iod {} of {} has no Unix socket (its path is too long for one; set TMPDIR \
                 to a shorter directory): the local rows cannot run",
                iod.index,
                cluster.file.display()
            ));
        }
        let clients = Transport::MEASURED
            .iter()
            .map(|transport| transport.client(&config))
            .collect();
        let method = Method { cluster, clients };
        match method.client(Transport::Local).mkdir("/bench", 0o755) {
            Ok(_) => {}
            Err(err) if err.code() == Some(ErrorCode::Exists) => {}
            Err(err) => return Err(format!("mkdir /bench: {err}")),
        }
        methods.push(method);
    }
    Ok(methods)
}

/// The cached reads (`part` [`Part::CachedRead`]) or overwrites ([`Part::CachedWrite`]): per
/// access size, per repetition, per transport, every method walks its cached file in calls
/// of that size (the order of the methods turning with the repetition). Overwrites write the
/// bytes the file holds, so every read of it, and the whole file read back at the end, can
/// be checked.
fn cached_accesses(
    plan: &Plan,
    methods: &[Method],
    progress: &Progress,
    part: Part,
) -> Result<(Vec<UnifierRow>, bool), String> {
    let write = part == Part::CachedWrite;
    let path = if write {
        "/bench/unifier-cached-write"
    } else {
        "/bench/unifier-cached"
    };
    let generation = 1;
    let file_bytes = plan.cached_file_bytes();
    let expected = contents(file_bytes, generation);
    let mut verified = true;
    // files[method][transport], each warmed by one whole read.
    let mut files = Vec::new();
    for method in methods {
        write_file(method.client(Transport::Local), path, 1, &expected)?;
        let mut per_transport = Vec::new();
        for transport in Transport::MEASURED {
            let mode = if write {
                tessera_client::OpenMode::ReadWrite
            } else {
                tessera_client::OpenMode::ReadOnly
            };
            let file = method
                .client(transport)
                .open(path, mode)
                .map_err(|err| format!("open {path}: {err}"))?;
            let (_, _, _, right) = read_through(&file, file_bytes, 1 << 20, &expected)?;
            verified &= right;
            per_transport.push(file);
        }
        files.push(per_transport);
    }
    let mut rows = Vec::new();
    // Where each (method, transport) walk goes on from.
    let mut cursors = vec![0u64; methods.len() * Transport::MEASURED.len()];
    for &size in &plan.sizes {
        let calls = (plan.walk_bytes / size).max(WALK_CALLS_MIN);
        let mut buffer = vec![0u8; usize::try_from(size).map_err(|_| "size")?];
        let mut samples: Vec<Samples> =
            Transport::MEASURED.iter().map(|_| Samples::new()).collect();
        for repetition in 0..plan.repetitions {
            for (transport_index, _) in Transport::MEASURED.iter().enumerate() {
                for turn in 0..methods.len() {
                    let method = (turn + repetition) % methods.len();
                    let file = &files[method][transport_index];
                    let cursor = &mut cursors[method * Transport::MEASURED.len() + transport_index];
                    let (mut seconds, mut requests) = (0.0, 0);
                    for _ in 0..calls {
                        if *cursor + size > file_bytes {
                            *cursor = 0;
                        }
                        let (took, sent, right) = if write {
                            let start = usize::try_from(*cursor).map_err(|_| "offset")?;
                            timed_write(file, *cursor, &expected[start..start + buffer.len()])?
                        } else {
                            timed_read(file, *cursor, &mut buffer, &expected)?
                        };
                        seconds += took;
                        requests += sent;
                        verified &= right;
                        *cursor += size;
                    }
                    samples[transport_index].add(method, seconds, (calls, requests, calls * size));
                }
            }
            progress.step(&format!("{part}s of {size} B"));
        }
        for (transport, samples) in Transport::MEASURED.iter().zip(&samples) {
            rows.extend(samples.rows(part, *transport, (size, file_bytes), 1)?);
        }
        rows.extend(ServeMode::ALL.iter().map(|serve| UnifierRow {
            part,
            transport: Transport::Ofi,
            access_bytes: size,
            file_bytes,
            clients: 1,
            method: serve.name(),
            measure: Measure::none(),
            calls: 0,
            requests: 0,
            bytes: 0,
            repetitions: 0,
            skipped: Some(OFI_SKIPPED.to_owned()),
        }));
    }
    if write {
        for per_transport in &files {
            let (_, _, _, right) = read_through(&per_transport[0], file_bytes, 1 << 20, &expected)?;
            verified &= right;
        }
    }
    for method in methods {
        let _ = method.client(Transport::Local).unlink(path);
    }
    Ok((rows, verified))
}

/// The re-read over `local`: per region, per repetition, every method reads the region twice
/// in 128 KiB calls; the second pass is timed.
fn reread(
    plan: &Plan,
    methods: &[Method],
    progress: &Progress,
) -> Result<(Vec<UnifierRow>, bool), String> {
    let path = "/bench/unifier-reread";
    let generation = 2;
    let regions = plan.reread_bytes();
    let file_bytes = regions.iter().copied().max().expect("regions");
    let expected = contents(file_bytes, generation);
    let mut files = Vec::new();
    for method in methods {
        write_file(method.client(Transport::Local), path, 1, &expected)?;
        files.push(
            method
                .client(Transport::Local)
                .open(path, tessera_client::OpenMode::ReadOnly)
                .map_err(|err| format!("open {path}: {err}"))?,
        );
    }
    let mut rows = Vec::new();
    let mut verified = true;
    for &region in &regions {
        let mut samples = Samples::new();
        for repetition in 0..plan.repetitions {
            for turn in 0..methods.len() {
                let method = (turn + repetition) % methods.len();
                let (_, _, _, first) =
                    read_through(&files[method], region, REREAD_CALL_BYTES, &expected)?;
                let (seconds, calls, requests, second) =
                    read_through(&files[method], region, REREAD_CALL_BYTES, &expected)?;
                verified &= first && second;
                samples.add(method, seconds, (calls, requests, region));
            }
            progress.step(&format!("re-read of {region} B"));
        }
        rows.extend(samples.rows(
            Part::Reread,
            Transport::Local,
            (REREAD_CALL_BYTES, region),
            1,
        )?);
    }
    for method in methods {
        let _ = method.client(Transport::Local).unlink(path);
    }
    Ok((rows, verified))
}

/// The tasks of `clients` workers reading (or writing) their regions of `path` on the cluster
/// of `method`.
fn region_tasks(
    method: &Method,
    (path, region_bytes): (&str, u64),
    (clients, write, transport): (usize, bool, Transport),
    (iterations, generation): (u32, u64),
) -> Vec<Task> {
    (0..clients)
        .map(|rank| Task {
            cluster: method.cluster.file.clone(),
            path: path.to_owned(),
            write,
            method: transport.worker_method(),
            iterations,
            generation,
            // The written regions are on storage before any timing.
            sync: write,
            cache: None,
            // One piece per process: its region, the regions one after another.
            pattern: Pattern::Interleaved {
                rank,
                processes: clients,
                pieces: 1,
                piece_bytes: usize::try_from(region_bytes).expect("at most SIZE_BYTES_MAX"),
            },
        })
        .collect()
}

/// The aggregate: 1–4 worker processes each read their region, striped over the 4 iods, per
/// transport, per method.
fn aggregate(
    plan: &Plan,
    methods: &[Method],
    progress: &Progress,
) -> Result<(Vec<UnifierRow>, bool), String> {
    let path = "/bench/unifier-aggregate";
    let generation = 3;
    let clients_max = AGGREGATE_CLIENTS[AGGREGATE_CLIENTS.len() - 1];
    let mut verified = true;
    let mut writers = Workers::spawn(clients_max)?;
    for method in methods {
        method
            .client(Transport::Local)
            .create(path, &CreateOptions::default())
            .map_err(|err| format!("create {path}: {err}"))?;
        let write = region_tasks(
            method,
            (path, plan.region_bytes),
            (clients_max, true, Transport::Local),
            (1, generation),
        );
        writers.step(write)?;
        // One untimed read of every region warms every cache.
        let warm = region_tasks(
            method,
            (path, plan.region_bytes),
            (clients_max, false, Transport::Local),
            (1, generation),
        );
        let (results, _) = writers.step(warm)?;
        verified &= results.iter().all(|result| result.verified);
    }
    drop(writers);
    let mut rows = Vec::new();
    for clients in AGGREGATE_CLIENTS {
        let mut workers = Workers::spawn(clients)?;
        let mut samples: Vec<Samples> =
            Transport::MEASURED.iter().map(|_| Samples::new()).collect();
        for repetition in 0..plan.repetitions {
            for (transport_index, &transport) in Transport::MEASURED.iter().enumerate() {
                for turn in 0..methods.len() {
                    let method = (turn + repetition) % methods.len();
                    let tasks = region_tasks(
                        &methods[method],
                        (path, plan.region_bytes),
                        (clients, false, transport),
                        (plan.aggregate_iterations, generation),
                    );
                    let (results, _) = workers.step(tasks)?;
                    verified &= results.iter().all(|result| result.verified);
                    let seconds = results
                        .iter()
                        .map(|result| result.seconds)
                        .fold(0.0, f64::max);
                    let calls = u64::from(plan.aggregate_iterations) * clients as u64;
                    let requests = results.iter().map(|result| result.requests).sum();
                    let bytes = results.iter().map(|result| result.bytes).sum();
                    samples[transport_index].add(method, seconds, (calls, requests, bytes));
                }
            }
            progress.step(&format!("aggregate of {clients} clients"));
        }
        for (transport, samples) in Transport::MEASURED.iter().zip(&samples) {
            rows.extend(samples.rows(
                Part::Aggregate,
                *transport,
                (plan.region_bytes, plan.region_bytes),
                clients,
            )?);
        }
    }
    for method in methods {
        let _ = method.client(Transport::Local).unlink(path);
    }
    Ok((rows, verified))
}

/// Runs the experiment and writes its report.
pub fn run(args: &UnifierArgs) -> Result<Outcome, String> {
    let common = &args.common;
    let plan = Plan::of(args)?;
    if let Some(given) = &common.cluster {
        eprintln!(
            "bench unifier: not using {}: it starts one private cluster per --serve mode",
            given.display()
        );
    }
    let memcpy_mib_s = memcpy_mib_s()?;
    let methods = start_methods(&plan)?;
    let progress = Progress::new(
        "unifier",
        ((plan.sizes.len() + REREAD_TENTHS.len() + AGGREGATE_CLIENTS.len()) * plan.repetitions)
            as u64,
    );
    let (mut rows, cached_verified) =
        cached_accesses(&plan, &methods, &progress, Part::CachedRead)?;
    let (write_rows, write_verified) =
        cached_accesses(&plan, &methods, &progress, Part::CachedWrite)?;
    let (reread_rows, reread_verified) = reread(&plan, &methods, &progress)?;
    let (aggregate_rows, aggregate_verified) = aggregate(&plan, &methods, &progress)?;
    drop(progress);
    drop(methods);
    rows.extend(write_rows);
    rows.extend(reread_rows);
    rows.extend(aggregate_rows);
    let report = Report {
        bench: "unifier",
        quick: common.quick,
        meta: Meta::now(plan.repetitions),
        config: json!({
            "servers": SERVERS,
            "methods": "one private cluster per method, its iods started with --serve METHOD; only unified's get --cache-bytes",
            "cache_bytes": plan.cache_bytes,
            "cache_ready_bytes": ready_bytes(plan.cache_bytes),
            "memcpy_mib_s": memcpy_mib_s,
            "memcpy_bytes": MEMCPY_BYTES,
            "cached_read": {
                "clients": 1,
                "iods": 1,
                "file_bytes": plan.cached_file_bytes(),
                "access_bytes": plan.sizes,
                "bytes_per_repetition": plan.walk_bytes,
                "calls_per_repetition_min": WALK_CALLS_MIN,
                "transports": ["local", "tcp"],
                "ofi": OFI_SKIPPED,
            },
            "cached_write": "as cached_read, each call overwriting the file's bytes with the bytes it holds (a file of its own, in the cache); not synced under the timing, the whole file read back and checked at the end",
            "reread": {
                "transport": "local",
                "iods": 1,
                "region_bytes": plan.reread_bytes(),
                "call_bytes": REREAD_CALL_BYTES,
                "regions": "the first bytes of one file of 1.3x the cache budget, read twice; the second pass is reported",
            },
            "aggregate": {
                "iods": SERVERS,
                "clients": AGGREGATE_CLIENTS,
                "region_bytes_per_client": plan.region_bytes,
                "calls_per_client": plan.aggregate_iterations,
                "client_method": AGGREGATE_METHOD,
                "transports": ["local", "tcp"],
            },
        }),
        verified: cached_verified && write_verified && reread_verified && aggregate_verified,
        rows,
    };
    let text = text(&report, &plan, memcpy_mib_s)?;
    report.finish(common, &text, &[figure(&report, &plan)?])
}

/// The median MiB/s of a measured row.
fn rate(report: &Report<UnifierRow>, label: &str, method: &str) -> Result<f64, String> {
    let row = report.row(label, method)?;
    row.measure.measured().ok_or_else(|| {
        format!("bench unifier: case \"{label}\", method \"{method}\" has no figure")
    })
}

/// The three methods' MiB/s of one case, in [`ServeMode::ALL`] order.
fn rates(report: &Report<UnifierRow>, label: &str) -> Result<[f64; 3], String> {
    Ok([
        rate(report, label, "normal")?,
        rate(report, label, "mmap")?,
        rate(report, label, "unified")?,
    ])
}

/// The columns of [`method_cells`].
const METHOD_COLUMNS: [&str; 5] = [
    "normal",
    "mmap",
    "unified",
    "unified/normal",
    "unified/mmap",
];

/// The cells of the three methods' MiB/s and unified's ratios to the other two.
fn method_cells([normal, mmap, unified]: [f64; 3]) -> [String; 5] {
    [
        report::cell(normal, 1),
        report::cell(mmap, 1),
        report::cell(unified, 1),
        report::ratio(unified, normal),
        report::ratio(unified, mmap),
    ]
}

/// The paper's tables with our figures.
fn text(report: &Report<UnifierRow>, plan: &Plan, memcpy_mib_s: f64) -> Result<String, String> {
    let file_bytes = plan.cached_file_bytes();
    let cached_table = |part| -> Result<_, String> {
        let mut table = report::table(
            ["transport", "access B"]
                .into_iter()
                .chain(METHOD_COLUMNS)
                .chain(["unified/memcpy"]),
        );
        for transport in Transport::MEASURED {
            for &size in &plan.sizes {
                let label = case(part, transport, (size, file_bytes), 1);
                let rates = rates(report, &label)?;
                let mut cells = vec![transport.to_string(), size.to_string()];
                cells.extend(method_cells(rates));
                cells.push(report::ratio(rates[2], memcpy_mib_s));
                table.add_row(cells);
            }
        }
        Ok(table)
    };
    let cached = cached_table(Part::CachedRead)?;
    let written = cached_table(Part::CachedWrite)?;
    let mut reread = report::table(["region MiB", "x budget"].into_iter().chain(METHOD_COLUMNS));
    for region in plan.reread_bytes() {
        let label = case(
            Part::Reread,
            Transport::Local,
            (REREAD_CALL_BYTES, region),
            1,
        );
        let mut cells = vec![
            report::cell(region as f64 / f64::from(1u32 << 20), 1),
            report::cell(region as f64 / plan.cache_bytes as f64, 2),
        ];
        cells.extend(method_cells(rates(report, &label)?));
        reread.add_row(cells);
    }
    let mut aggregate = report::table(["transport", "clients"].into_iter().chain(METHOD_COLUMNS));
    for transport in Transport::MEASURED {
        for clients in AGGREGATE_CLIENTS {
            let label = case(
                Part::Aggregate,
                transport,
                (plan.region_bytes, plan.region_bytes),
                clients,
            );
            let mut cells = vec![transport.to_string(), clients.to_string()];
            cells.extend(method_cells(rates(report, &label)?));
            aggregate.add_row(cells);
        }
    }
    Ok(format!(
        "unifier: iods --serve normal | mmap | unified (cache budget {} B per iod), MiB/s, median of {} repetitions; memory copy {memcpy_mib_s:.0} MiB/s\n\
         cached reads, 1 client, 1 iod, a {file_bytes} B file ({OFI_SKIPPED}):\n{cached}\n\
         paper (Fig. 5.3, InfiniBand): unified 2.1x normal, 1.3x mmap at large accesses and up to 2.7x mmap at small ones\n\
         cached overwrites, the same walk writing (unified receives them straight into its units; not synced under the timing):\n{written}\n\
         re-read over local, 128 KiB calls, second pass:\n{reread}\n\
         paper (Fig. 5.4): mmap and unified keep the whole file cached up to their cache (360 MB), normal falls off at its cache less its buffer pool (340 MB); here normal and mmap read the page cache, which holds every region on this machine\n\
         aggregate, {} B per client from {SERVERS} iods:\n{aggregate}\n\
         paper (Fig. 5.5, PVFS1 reads): unified 1.7x normal, 1.3x mmap\n\
         verified: {}\n",
        plan.cache_bytes,
        report.meta.repetitions,
        plan.region_bytes,
        report.verified
    ))
}

/// A panel with one line per method, its points the rows of `labels` (case label, x).
fn method_panel(
    report: &Report<UnifierRow>,
    panel: Panel,
    labels: &[(String, f64)],
) -> Result<Panel, String> {
    let mut panel = panel;
    for serve in ServeMode::ALL {
        let points = labels
            .iter()
            .map(|(label, x)| Ok(report.row(label, serve.name())?.measure.point(*x)))
            .collect::<Result<Vec<_>, String>>()?;
        panel.lines.push(Line {
            name: serve.name().to_owned(),
            points,
        });
    }
    Ok(panel)
}

/// Figs. 5.3–5.5: cached-read MiB/s against access size per transport, the re-read against
/// the region's size in cache budgets, and the aggregate against client processes per
/// transport.
fn figure(report: &Report<UnifierRow>, plan: &Plan) -> Result<Figure, String> {
    let mut panels = Vec::new();
    for transport in Transport::MEASURED {
        let labels: Vec<(String, f64)> = plan
            .sizes
            .iter()
            .map(|&size| {
                let sizes = (size, plan.cached_file_bytes());
                (case(Part::CachedRead, transport, sizes, 1), size as f64)
            })
            .collect();
        let panel = Panel::new(
            &format!("cached reads, {transport}"),
            ("access size (bytes)", Scale::Log2),
            ("MiB/s", Scale::Linear),
        );
        panels.push(method_panel(report, panel, &labels)?);
    }
    let labels: Vec<(String, f64)> = plan
        .reread_bytes()
        .into_iter()
        .map(|region| {
            let sizes = (REREAD_CALL_BYTES, region);
            let x = region as f64 / plan.cache_bytes as f64;
            (case(Part::Reread, Transport::Local, sizes, 1), x)
        })
        .collect();
    let panel = Panel::new(
        "re-read, local (second pass)",
        ("region / cache budget", Scale::Linear),
        ("MiB/s", Scale::Linear),
    );
    panels.push(method_panel(report, panel, &labels)?);
    for transport in Transport::MEASURED {
        let labels: Vec<(String, f64)> = AGGREGATE_CLIENTS
            .iter()
            .map(|&clients| {
                let sizes = (plan.region_bytes, plan.region_bytes);
                (
                    case(Part::Aggregate, transport, sizes, clients),
                    clients as f64,
                )
            })
            .collect();
        let panel = Panel::new(
            &format!("aggregate reads, 4 iods, {transport}"),
            ("client processes", Scale::Linear),
            ("MiB/s (all processes)", Scale::Linear),
        );
        panels.push(method_panel(report, panel, &labels)?);
    }
    Ok(Figure {
        stem: "unifier".to_owned(),
        title: format!(
            "unifier: normal vs mmap vs unified server (median, min-max of {} runs)",
            report.meta.repetitions
        ),
        panels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> UnifierArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: UnifierArgs,
        }
        let words = std::iter::once("unifier").chain(extra.iter().copied());
        <Cli as clap::Parser>::try_parse_from(words).unwrap().args
    }

    #[test]
    fn plans_follow_quick_and_refuse_sizes_the_file_cannot_hold() {
        let quick = Plan::of(&args(&["--quick"])).unwrap();
        assert_eq!(quick.cache_bytes, QUICK_CACHE_BYTES);
        assert_eq!(quick.sizes, QUICK_SIZES);
        assert_eq!(quick.cached_file_bytes(), 32 << 20);
        let small = Plan::of(&args(&[
            "--cache-bytes",
            "4m",
            "--sizes",
            "4k,1m",
            "--repetitions",
            "1",
        ]))
        .unwrap();
        assert_eq!(small.reread_bytes().len(), REREAD_TENTHS.len());
        assert_eq!(small.reread_bytes()[2], 4 << 20);
        assert_eq!(small.repetitions, 1);
        let err = Plan::of(&args(&["--cache-bytes", "4m", "--sizes", "4m"])).unwrap_err();
        assert!(
            err.contains("4194304 bytes") && err.contains("half of --cache-bytes"),
            "{err}"
        );
        let err = Plan::of(&args(&["--cache-bytes", "1k"])).unwrap_err();
        assert!(err.contains("--cache-bytes 1024"), "{err}");
    }

    #[test]
    fn rows_are_keyed_by_every_field_of_the_case() {
        let mut samples = Samples::new();
        for method in 0..3 {
            samples.add(method, 0.5, (4, 4, 1 << 20));
        }
        let rows = samples
            .rows(Part::Aggregate, Transport::Tcp, (8, 8), 3)
            .unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(
            report::Row::key(&rows[2]),
            ("aggregate tcp 8 B of 8 B, 3 clients".to_owned(), "unified")
        );
        assert!((rows[0].measure.mib_s - 2.0).abs() < 1e-9);
        let json = serde_json::to_value(&rows[1]).unwrap();
        assert_eq!(json["part"], "aggregate");
        assert_eq!(json["transport"], "tcp");
        assert_eq!(json["method"], "mmap");
        assert!(json["skipped"].is_null());
        // A method never measured is an error naming the case, not a 0.
        let err = Samples::new()
            .rows(Part::Reread, Transport::Local, (1, 2), 1)
            .unwrap_err();
        assert!(
            err.contains("re-read local 1 B of 2 B") && err.contains("normal"),
            "{err}"
        );
    }

    #[test]
    fn memcpy_bandwidth_is_positive() {
        assert!(memcpy_mib_s().unwrap() > 0.0);
    }
}
