//! `tessera bench fmrd` (seed 001 §4.5.1, Fig. 4.4): dynamic registration against a pin-down
//! cache against FMRD, at low and high buffer reuse.
//!
//! One client performs 1000 writes of 64 KiB, each from one of a pool of 1000 buffers, to the
//! file (striped over 4 servers); the servers pull each buffer one-sidedly over the `local`
//! backend, and the client registers it first through a [`Registry`] over the `--registrar`
//! (default `pin`, mlock/munlock: registration must cost enough for the caches to differ,
//! and pinning 64 KiB as an io_uring fixed buffer, `fixed`, costs ~1.5 % of a write here). Which buffer each write uses is drawn so that a given share of the writes
//! (20 % or 80 %) reuse one of the 100 most recently used buffers, the others take a buffer
//! outside them; with a cache of 100 entries that share is the hit ratio (the seed controls it
//! the same way). The methods:
//!
//! - `dynamic`: register before and deregister after every write;
//! - `pin-down`: a pin-down cache of 100 entries; an evicted registration is deregistered at
//!   once, on the writing thread;
//! - `fmrd`: the same cache, evicted registrations queued (a write may still revive one) and
//!   deregistered `FMRD_BATCH` at a time by the registry's deregistration thread (the
//!   default);
//! - `fmrd inline`: the same, each full batch deregistered in one call on the writing thread;
//! - `no reg`: no registration, the baseline the seed normalises to.
//!
//! Every method replays the same sequence, starting from an empty cache, with its own client,
//! file and buffer pool (cached registrations keep buffers locked, which would make another
//! method's `mlock` of them cheap). The methods take turns every 250 writes, so load on the
//! machine falls on all of them alike; after a turn of `fmrd` its thread finishes the batches
//! it was given, inside the turn's time. `normalized` is, per repetition, the `no reg` time
//! over the method's time, then the median over the repetitions. After each repetition every method's file is read
//! back by a client without registration and compared with its buffers, whose contents change
//! every repetition.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use tessera_client::tessera_reg::mapping::AnonymousMapping;
use tessera_client::tessera_reg::{
    page_bytes, Caching, Grouping, Policy, RegStats, Registry, FMRD_BATCH,
};
use tessera_client::{
    Client, ClientOptions, ClusterConfig, CreateOptions, ErrorCode, File, Mechanism, OpenMode,
    TransferPolicy,
};

use super::{median, mib_s, BenchCluster, CommonArgs, Report, Row};
use crate::plot::{Plot, Series};

const SERVERS: u16 = 4;
/// Writes per run (the seed's 1000 I/O operations).
const OPERATIONS: usize = 1000;
/// Buffers in the pool (the seed's 1000).
const BUFFERS: usize = 1000;
/// Bytes of each buffer and of each write.
const BUFFER_BYTES: usize = 64 << 10;
/// Registrations the cache holds (the seed's 100).
const CACHE_ENTRIES: usize = 100;
/// File slots the writes cycle through.
const SLOTS: usize = 100;
/// Writes each method makes before the next takes its turn.
const CHUNK_OPERATIONS: usize = 250;
/// Shares of writes that reuse a recently used buffer.
const REUSE_PERCENTS: [u32; 2] = [20, 80];

const _: () = assert!(CACHE_ENTRIES < BUFFERS && SLOTS <= OPERATIONS);
const _: () = assert!(OPERATIONS.is_multiple_of(CHUNK_OPERATIONS));

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    NoReg,
    Dynamic,
    PinDown,
    Fmrd,
    FmrdInline,
}

impl Method {
    const ALL: [Self; 5] = [
        Self::NoReg,
        Self::Dynamic,
        Self::PinDown,
        Self::Fmrd,
        Self::FmrdInline,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::NoReg => "no reg",
            Self::Dynamic => "dynamic",
            Self::PinDown => "pin-down",
            Self::Fmrd => "fmrd",
            Self::FmrdInline => "fmrd inline",
        }
    }

    fn policy(self) -> Option<Policy> {
        let policy =
            |caching| Policy::new(Grouping::Individual, caching).with_entries_max(CACHE_ENTRIES);
        match self {
            Self::NoReg => None,
            Self::Dynamic => Some(policy(Caching::None)),
            Self::PinDown => Some(policy(Caching::PinDown)),
            Self::Fmrd => Some(policy(Caching::Fmrd).with_fmrd_thread(true)),
            Self::FmrdInline => Some(policy(Caching::Fmrd).with_fmrd_thread(false)),
        }
    }
}

/// splitmix64: a fixed, seedable sequence, so every method replays the same writes.
struct Sequence(u64);

impl Sequence {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut value = self.0;
        value = (value ^ (value >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        value = (value ^ (value >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        value ^ (value >> 31)
    }

    fn below(&mut self, bound: usize) -> usize {
        usize::try_from(self.next() % bound as u64).expect("below a usize bound")
    }
}

/// The buffer of each write: `reuse_percent` % of them one of the [`CACHE_ENTRIES`] most
/// recently used buffers, the rest one outside them. Returns the buffers and how many writes
/// were drawn as reuses.
fn buffer_sequence(reuse_percent: u32, seed: u64) -> (Vec<usize>, usize) {
    let mut sequence = Sequence(seed);
    let mut recent: VecDeque<usize> = VecDeque::with_capacity(CACHE_ENTRIES + 1);
    let mut buffers = Vec::with_capacity(OPERATIONS);
    let mut reuses = 0;
    for _ in 0..OPERATIONS {
        let reuse = !recent.is_empty() && sequence.below(100) < reuse_percent as usize;
        let buffer = if reuse {
            reuses += 1;
            recent[sequence.below(recent.len())]
        } else {
            loop {
                let candidate = sequence.below(BUFFERS);
                if !recent.contains(&candidate) {
                    break candidate;
                }
            }
        };
        recent.retain(|&used| used != buffer);
        recent.push_back(buffer);
        if recent.len() > CACHE_ENTRIES {
            recent.pop_front();
        }
        buffers.push(buffer);
    }
    (buffers, reuses)
}

/// The pool: [`BUFFERS`] buffers of [`BUFFER_BYTES`], each followed by one unmapped page, so
/// no two buffers share a page and each is a mapping of its own. With the buffers in one
/// mapping, every `mlock` of one buffer would split the mapping in three and every `munlock`
/// merge it back, and the more buffers a cache held locked the dearer each later lock became
/// (measured: 9 µs a registration with none held, 14.5 µs with 100); RDMA registration pins
/// pages without touching the mappings, so that cost would be an artefact of `mlock`.
struct Pool {
    mapping: AnonymousMapping,
    stride: usize,
}

impl Pool {
    fn new() -> Result<Self, String> {
        let page = page_bytes();
        let stride = BUFFER_BYTES.div_ceil(page) * page + page;
        let mut mapping = AnonymousMapping::new(BUFFERS * stride / page)
            .map_err(|err| format!("cannot map the buffer pool: {err}"))?;
        for index in 0..BUFFERS {
            mapping
                .punch_hole((index + 1) * stride / page - 1, 1)
                .map_err(|err| format!("cannot unmap the page after buffer {index}: {err}"))?;
        }
        Ok(Self { mapping, stride })
    }

    fn buffer(&self, index: usize) -> Result<&[u8], String> {
        self.mapping
            .slice(index * self.stride, BUFFER_BYTES)
            .map_err(|err| err.to_string())
    }

    /// New contents of every buffer for round `generation`.
    fn fill(&mut self, generation: u64) -> Result<(), String> {
        let mut bytes = vec![0u8; BUFFER_BYTES];
        for index in 0..BUFFERS {
            contents(generation, index, &mut bytes);
            self.mapping
                .write(index * self.stride, &bytes)
                .map_err(|err| err.to_string())?;
        }
        Ok(())
    }
}

/// The contents of buffer `index` in round `generation`.
fn contents(generation: u64, index: usize, bytes: &mut [u8]) {
    let mut sequence = Sequence(generation << 20 | index as u64);
    for chunk in bytes.chunks_mut(8) {
        let word = sequence.next().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

/// The data-transfer step of write `operation`: the buffer to its file slot, pulled by the
/// server over the transport, registered by the client's registry around the request.
/// Returns the requests whose data moved one-sidedly.
fn write_operation(file: &File, buffer: &[u8], operation: usize) -> Result<u64, String> {
    let offset = ((operation % SLOTS) * BUFFER_BYTES) as u64;
    file.write_at(offset, buffer)
        .map(|report| report.one_sided)
        .map_err(|err| format!("write {operation}: {err}"))
}

struct Subject {
    method: Method,
    registry: Option<Arc<Registry>>,
    client: Client,
    file: File,
    path: String,
    pool: Pool,
}

fn delta(before: &RegStats, after: &RegStats) -> serde_json::Value {
    json!({
        "registrations": after.registrations - before.registrations,
        "deregistrations": after.deregistrations - before.deregistrations,
        "cache_hits": after.cache_hits - before.cache_hits,
        "cache_misses": after.cache_misses - before.cache_misses,
        "revivals": after.revivals - before.revivals,
        "evictions": after.evictions - before.evictions,
        "deregistration_batches": after.deregistration_batches - before.deregistration_batches,
        "registration_us": after.registration_us - before.registration_us,
        "deregistration_us": after.deregistration_us - before.deregistration_us,
        "background_deregistration_us":
            after.background_deregistration_us - before.background_deregistration_us,
    })
}

/// Runs the experiment and returns its report.
pub fn run(common: &CommonArgs) -> Result<Report, String> {
    let cluster = BenchCluster::open(common.cluster.as_deref(), SERVERS)?;
    let config = ClusterConfig::load(&cluster.file).map_err(|err| err.to_string())?;
    let checker = Client::new(&config, &ClientOptions::default());
    match checker.mkdir("/bench", 0o755) {
        Ok(_) => {}
        Err(err) if err.code() == Some(ErrorCode::Exists) => {}
        Err(err) => return Err(format!("mkdir /bench: {err}")),
    }
    let (registrar, registrar_name) = common.registrar(super::RegistrarKind::Pin)?;
    let mut subjects = Vec::new();
    for (index, method) in Method::ALL.into_iter().enumerate() {
        let registry = match method.policy() {
            Some(policy) => Some(Arc::new(
                Registry::new(registrar.clone(), policy)
                    .map_err(|err| format!("{}: {err}", method.name()))?,
            )),
            None => None,
        };
        // Each method has its own client, file and buffers: one method's cached (locked)
        // buffers must not make another's registrations cheap.
        let client = Client::new(&config, &ClientOptions::default());
        client.set_registration(registry.clone());
        let path = format!("/bench/fmrd-{}-{index}", std::process::id());
        checker
            .create(&path, &CreateOptions::default())
            .map_err(|err| format!("create {path}: {err}"))?;
        let mut file = client
            .open(&path, OpenMode::ReadWrite)
            .map_err(|err| format!("open {path}: {err}"))?;
        file.set_transfer_policy(TransferPolicy::Force(Mechanism::Gather));
        subjects.push(Subject {
            method,
            registry,
            client,
            file,
            path,
            pool: Pool::new()?,
        });
    }
    let repetitions = if common.quick { 9 } else { 11 };
    let mut rows = Vec::new();
    let mut verified = true;
    let mut generation = 0u64;
    for reuse_percent in REUSE_PERCENTS {
        let case = format!("reuse={reuse_percent}%");
        let (sequence, reuses) = buffer_sequence(reuse_percent, u64::from(reuse_percent));
        let mut samples = vec![Vec::new(); subjects.len()];
        let mut last = vec![serde_json::Value::Null; subjects.len()];
        let mut one_sided = vec![0u64; subjects.len()];
        for repetition in 0..repetitions {
            generation += 1;
            let mut before = Vec::with_capacity(subjects.len());
            for subject in &mut subjects {
                subject.pool.fill(generation)?;
                if let Some(registry) = &subject.registry {
                    registry.clear().map_err(|err| err.to_string())?;
                }
                before.push(
                    subject
                        .registry
                        .as_ref()
                        .map(|registry| registry.stats())
                        .unwrap_or_default(),
                );
            }
            // The methods take turns every CHUNK_OPERATIONS writes, so the machine's noise
            // falls on all of them alike.
            let mut seconds = vec![0.0f64; subjects.len()];
            one_sided.fill(0);
            for (chunk, operations) in sequence.chunks(CHUNK_OPERATIONS).enumerate() {
                for turn in 0..subjects.len() {
                    let index = (turn + chunk + repetition) % subjects.len();
                    let subject = &subjects[index];
                    let first = chunk * CHUNK_OPERATIONS;
                    let start = Instant::now();
                    for (offset, &buffer) in operations.iter().enumerate() {
                        one_sided[index] += write_operation(
                            &subject.file,
                            subject.pool.buffer(buffer)?,
                            first + offset,
                        )?;
                    }
                    if let Some(registry) = &subject.registry {
                        // FMRD's thread must not work through the next method's turn.
                        registry.wait_background();
                    }
                    seconds[index] += start.elapsed().as_secs_f64();
                }
            }
            for (index, subject) in subjects.iter().enumerate() {
                samples[index].push(seconds[index]);
                last[index] = match &subject.registry {
                    Some(registry) => {
                        // Counted once the queue is deregistered too; emptied, untimed.
                        registry.flush().map_err(|err| err.to_string())?;
                        let after = registry.stats();
                        registry.clear().map_err(|err| err.to_string())?;
                        delta(&before[index], &after)
                    }
                    None => delta(&before[index], &before[index]),
                };
                verified &= verify(
                    &checker,
                    &subject.path,
                    &subject.pool,
                    &sequence,
                    generation,
                    subject.method,
                )?;
            }
        }
        for (index, subject) in subjects.iter().enumerate() {
            // Paired within each repetition (the methods took turns), then the median: steadier
            // than a ratio of medians on a loaded machine.
            let ratios: Vec<f64> = samples[0]
                .iter()
                .zip(&samples[index])
                .map(|(baseline, seconds)| baseline / seconds.max(1e-12))
                .collect();
            let normalized = median(&ratios);
            let seconds = median(&samples[index]);
            let bytes = (OPERATIONS * BUFFER_BYTES) as u64;
            let mut extra = last[index].clone();
            extra["normalized"] = json!(normalized);
            extra["reuses_drawn"] = json!(reuses);
            extra["one_sided"] = json!(one_sided[index] == OPERATIONS as u64);
            extra["repetitions"] = json!(repetitions);
            extra["seconds_all"] = json!(samples[index]);
            rows.push(Row {
                case: case.clone(),
                method: subject.method.name().to_owned(),
                mib_s: mib_s(bytes, seconds),
                requests: OPERATIONS as u64,
                pieces: OPERATIONS as u64,
                bytes,
                seconds,
                extra,
                skipped: None,
            });
        }
    }
    for subject in &subjects {
        subject.client.set_registration(None);
        let _ = checker.unlink(&subject.path);
    }
    drop(subjects);
    let report = Report {
        bench: "fmrd".to_owned(),
        quick: common.quick,
        config: json!({
            "servers": SERVERS,
            "clients": 1,
            "transport": "local",
            "mechanism": "gather",
            "operations": OPERATIONS,
            "buffers": BUFFERS,
            "buffer_bytes": BUFFER_BYTES,
            "cache_entries": CACHE_ENTRIES,
            "fmrd_batch": FMRD_BATCH,
            "registrar": registrar_name,
            "cost_model": format!("{:?}", registrar.cost()),
            "repetitions": repetitions,
        }),
        verified,
        rows,
    };
    let table = table(&report);
    if common.json {
        eprint!("{table}");
    } else {
        print!("{table}");
        write_outputs(common, &report)?;
    }
    Ok(report)
}

/// Reads every slot of the method's file back and compares it with the buffer last written
/// there.
fn verify(
    checker: &Client,
    path: &str,
    pool: &Pool,
    sequence: &[usize],
    generation: u64,
    method: Method,
) -> Result<bool, String> {
    let file = checker
        .open(path, OpenMode::ReadOnly)
        .map_err(|err| format!("open {path}: {err}"))?;
    let mut back = vec![0u8; SLOTS * BUFFER_BYTES];
    file.read_at(0, &mut back)
        .map_err(|err| format!("read back {path}: {err}"))?;
    let mut expected = vec![0u8; BUFFER_BYTES];
    for slot in 0..SLOTS {
        let last = (slot..OPERATIONS)
            .step_by(SLOTS)
            .next_back()
            .expect("a write");
        let buffer = sequence[last];
        contents(generation, buffer, &mut expected);
        if back[slot * BUFFER_BYTES..(slot + 1) * BUFFER_BYTES] != expected[..]
            || pool.buffer(buffer)? != &expected[..]
        {
            eprintln!(
                "fmrd: {}: slot {slot} read back differs from buffer {buffer}",
                method.name()
            );
            return Ok(false);
        }
    }
    Ok(true)
}

fn table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "fmrd: {OPERATIONS} writes of {} KiB from {BUFFERS} buffers, cache {CACHE_ENTRIES} entries, local (gather), registrar {}",
        BUFFER_BYTES >> 10,
        report.config["registrar"].as_str().unwrap_or("?")
    );
    let _ = writeln!(
        out,
        "{:<10} {:<12} {:>9} {:>10} {:>6} {:>6} {:>6} {:>8} {:>10} {:>10}",
        "case",
        "method",
        "MiB/s",
        "normalized",
        "regs",
        "hits",
        "reviv",
        "dereg",
        "reg µs",
        "dereg µs"
    );
    for row in &report.rows {
        let extra = &row.extra;
        let count = |key: &str| extra[key].as_u64().unwrap_or(0);
        let number = |key: &str| extra[key].as_f64().unwrap_or(0.0);
        let _ = writeln!(
            out,
            "{:<10} {:<12} {:>9.1} {:>10.3} {:>6} {:>6} {:>6} {:>8} {:>10.0} {:>10.0}",
            row.case,
            row.method,
            row.mib_s,
            number("normalized"),
            count("registrations"),
            count("cache_hits"),
            count("revivals"),
            count("deregistrations"),
            number("registration_us"),
            number("deregistration_us"),
        );
    }
    let _ = writeln!(
        out,
        "paper (InfiniBand, 001 Fig. 4.4, normalized to no registration): dynamic down to 0.65; at 80 % reuse pin-down +24 %, FMRD +28 % over dynamic; at 20 % FMRD about 9 % above pin-down"
    );
    let _ = writeln!(out, "verified: {}", report.verified);
    out
}

fn write_outputs(common: &CommonArgs, report: &Report) -> Result<(), String> {
    std::fs::create_dir_all(&common.out)
        .map_err(|err| format!("cannot create {}: {err}", common.out.display()))?;
    let mut csv = String::from(
        "case,method,mib_s,seconds,normalized,registrations,cache_hits,deregistrations,registration_us,deregistration_us\n",
    );
    for row in &report.rows {
        let extra = &row.extra;
        let _ = writeln!(
            csv,
            "{},{},{:.3},{:.9},{:.4},{},{},{},{:.1},{:.1}",
            row.case,
            row.method,
            row.mib_s,
            row.seconds,
            extra["normalized"].as_f64().unwrap_or(0.0),
            extra["registrations"],
            extra["cache_hits"],
            extra["deregistrations"],
            extra["registration_us"].as_f64().unwrap_or(0.0),
            extra["deregistration_us"].as_f64().unwrap_or(0.0),
        );
    }
    let csv_path = common.out.join("fmrd.csv");
    std::fs::write(&csv_path, csv)
        .map_err(|err| format!("cannot write {}: {err}", csv_path.display()))?;
    let series = Method::ALL
        .iter()
        .map(|method| Series {
            name: method.name().to_owned(),
            points: REUSE_PERCENTS
                .iter()
                .filter_map(|&percent| {
                    report
                        .rows
                        .iter()
                        .find(|row| {
                            row.case == format!("reuse={percent}%") && row.method == method.name()
                        })
                        .map(|row| {
                            (
                                f64::from(percent),
                                row.extra["normalized"].as_f64().unwrap_or(0.0),
                            )
                        })
                })
                .collect(),
        })
        .collect();
    let plot = Plot {
        title: "fmrd (001 Fig. 4.4): 64 KiB writes, cache 100".to_owned(),
        x_label: "buffer reuse (%)".to_owned(),
        y_label: "bandwidth / no registration".to_owned(),
        log2_x: false,
        series,
    };
    let png_path = super::write_plot(common, "fmrd.png", &plot)?;
    super::report_written(&[csv_path, png_path]);
    Ok(())
}
