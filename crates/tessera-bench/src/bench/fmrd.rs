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
//! over the method's time, then the median over the repetitions (its range kept). After each
//! repetition every method's file is read back by a client without registration and compared
//! with its buffers, whose contents change every repetition. The report has one [`FmrdRow`]
//! per (reuse, method).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::json;
use tessera_client::tessera_reg::mapping::AnonymousMapping;
use tessera_client::tessera_reg::{
    page_bytes, Caching, Grouping, Policy, RegStats, Registrar, Registry, FMRD_BATCH,
};
use tessera_client::{
    Client, ClusterConfig, CreateOptions, File, Mechanism, OpenMode, TransferPolicy,
};

use super::CommonArgs;
use crate::report::{
    self, Figure, Line, Measure, Meta, Outcome, Panel, Point, Progress, Report, Scale, Spread,
};

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

/// What a method's registry did in one repetition.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    registrations: u64,
    deregistrations: u64,
    cache_hits: u64,
    cache_misses: u64,
    revivals: u64,
    evictions: u64,
    deregistration_batches: u64,
    registration_us: f64,
    deregistration_us: f64,
    background_deregistration_us: f64,
}

impl Counts {
    fn between(before: &RegStats, after: &RegStats) -> Self {
        Self {
            registrations: after.registrations - before.registrations,
            deregistrations: after.deregistrations - before.deregistrations,
            cache_hits: after.cache_hits - before.cache_hits,
            cache_misses: after.cache_misses - before.cache_misses,
            revivals: after.revivals - before.revivals,
            evictions: after.evictions - before.evictions,
            deregistration_batches: after.deregistration_batches - before.deregistration_batches,
            registration_us: after.registration_us - before.registration_us,
            deregistration_us: after.deregistration_us - before.deregistration_us,
            background_deregistration_us: after.background_deregistration_us
                - before.background_deregistration_us,
        }
    }
}

/// One (reuse, method) of fmrd: medians over the repetitions with their ranges, and what the
/// registry did in the last repetition.
#[derive(Debug, Clone, Serialize)]
pub struct FmrdRow {
    /// Percent of the writes that reuse one of the 100 most recently used buffers.
    pub reuse_percent: u32,
    /// The registration method.
    pub method: &'static str,
    /// MiB/s and seconds of the 1000 writes, medians over the repetitions.
    #[serde(flatten)]
    pub measure: Measure,
    /// `no reg` time over this method's time, paired per repetition, median.
    pub normalized: f64,
    /// The smallest of those ratios.
    pub normalized_min: f64,
    /// The largest of those ratios.
    pub normalized_max: f64,
    /// Writes per repetition.
    pub writes: usize,
    /// Bytes per repetition.
    pub bytes: u64,
    /// Writes drawn as reuses of a recent buffer.
    pub reuses_drawn: usize,
    /// Every write moved its data one-sidedly.
    pub one_sided: bool,
    /// Registrations (last repetition).
    pub registrations: u64,
    /// Deregistrations (last repetition).
    pub deregistrations: u64,
    /// Cache hits (last repetition).
    pub cache_hits: u64,
    /// Cache misses (last repetition).
    pub cache_misses: u64,
    /// Hits on a registration revived from the FMRD queue (last repetition).
    pub revivals: u64,
    /// Cache entries evicted (last repetition).
    pub evictions: u64,
    /// FMRD deregistration batches (last repetition).
    pub deregistration_batches: u64,
    /// µs in registrations (last repetition).
    pub registration_us: f64,
    /// µs in deregistrations, on any thread (last repetition).
    pub deregistration_us: f64,
    /// Of those, µs on FMRD's thread (last repetition).
    pub background_deregistration_us: f64,
    /// Repetitions measured.
    pub repetitions: usize,
}

impl report::Row for FmrdRow {
    fn key(&self) -> (String, &str) {
        (case(self.reuse_percent), self.method)
    }
}

/// The case label of a row.
fn case(reuse_percent: u32) -> String {
    format!("reuse {reuse_percent} %")
}

/// Runs the experiment and writes its report.
pub fn run(common: &CommonArgs) -> Result<Outcome, String> {
    let (cluster, checker) = super::open_cluster(common, SERVERS)?;
    let config = ClusterConfig::load(&cluster.file).map_err(|err| err.to_string())?;
    let (registrar, registrar_name) = common.registrar(super::RegistrarKind::Pin)?;
    let mut subjects = open_subjects(&checker, &config, &registrar)?;
    let repetitions = if common.quick { 9 } else { 11 };
    let progress = Progress::new("fmrd", (REUSE_PERCENTS.len() * repetitions) as u64);
    let mut rows = Vec::new();
    let mut verified = true;
    let mut generation = 0u64;
    for reuse_percent in REUSE_PERCENTS {
        let measured = measure_case(
            &mut subjects,
            &checker,
            reuse_percent,
            repetitions,
            &mut generation,
            &mut verified,
            &progress,
        )?;
        rows.extend(case_rows(&subjects, &measured, reuse_percent, repetitions)?);
    }
    drop(progress);
    super::release_clients(
        &checker,
        subjects
            .iter()
            .map(|subject| (&subject.client, subject.path.as_str())),
    );
    drop(subjects);
    let report = Report {
        bench: "fmrd",
        quick: common.quick,
        meta: Meta::now(repetitions),
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
    report.finish(common, &text(&report, registrar_name)?, &[figure(&report)?])
}

/// Set-up: per method, its own client, file and buffers: one method's cached (locked)
/// buffers must not make another's registrations cheap.
fn open_subjects(
    checker: &Client,
    config: &ClusterConfig,
    registrar: &Arc<dyn Registrar>,
) -> Result<Vec<Subject>, String> {
    let mut subjects = Vec::new();
    for (index, method) in Method::ALL.into_iter().enumerate() {
        let (client, registry) =
            super::registered_client(config, registrar, method.policy(), method.name())?;
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
    Ok(subjects)
}

/// What one case measured: per method, the seconds of each repetition, the last
/// repetition's registry counts and one-sided writes, and the reuses the sequence drew.
struct CaseSamples {
    seconds: Vec<Vec<f64>>,
    last: Vec<Counts>,
    one_sided: Vec<u64>,
    reuses: usize,
}

/// One case (a reuse percentage): every repetition from empty registries, each checked by
/// reading the files back.
fn measure_case(
    subjects: &mut [Subject],
    checker: &Client,
    reuse_percent: u32,
    repetitions: usize,
    generation: &mut u64,
    verified: &mut bool,
    progress: &Progress,
) -> Result<CaseSamples, String> {
    let (sequence, reuses) = buffer_sequence(reuse_percent, u64::from(reuse_percent));
    let mut measured = CaseSamples {
        seconds: vec![Vec::new(); subjects.len()],
        last: vec![Counts::default(); subjects.len()],
        one_sided: vec![0u64; subjects.len()],
        reuses,
    };
    for repetition in 0..repetitions {
        *generation += 1;
        let mut before = Vec::with_capacity(subjects.len());
        for subject in subjects.iter_mut() {
            subject.pool.fill(*generation)?;
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
        measured.one_sided.fill(0);
        let seconds = timed_repetition(subjects, &sequence, repetition, &mut measured.one_sided)?;
        for (index, subject) in subjects.iter().enumerate() {
            measured.seconds[index].push(seconds[index]);
            measured.last[index] = match &subject.registry {
                Some(registry) => {
                    // Counted once the queue is deregistered too; emptied, untimed.
                    registry.flush().map_err(|err| err.to_string())?;
                    let after = registry.stats();
                    registry.clear().map_err(|err| err.to_string())?;
                    Counts::between(&before[index], &after)
                }
                None => Counts::default(),
            };
            *verified &= verify(
                checker,
                &subject.path,
                &subject.pool,
                &sequence,
                *generation,
                subject.method,
            )?;
        }
        progress.step(&format!(
            "{}, repetition {}",
            case(reuse_percent),
            repetition + 1
        ));
    }
    Ok(measured)
}

/// The timed writes of one repetition: the methods take turns every CHUNK_OPERATIONS
/// writes, so the machine's noise falls on all of them alike. Per method, its seconds; its
/// one-sided writes are counted into `one_sided`.
fn timed_repetition(
    subjects: &[Subject],
    sequence: &[usize],
    repetition: usize,
    one_sided: &mut [u64],
) -> Result<Vec<f64>, String> {
    let mut seconds = vec![0.0f64; subjects.len()];
    for (chunk, operations) in sequence.chunks(CHUNK_OPERATIONS).enumerate() {
        for turn in 0..subjects.len() {
            let index = (turn + chunk + repetition) % subjects.len();
            let subject = &subjects[index];
            let first = chunk * CHUNK_OPERATIONS;
            let start = Instant::now();
            for (offset, &buffer) in operations.iter().enumerate() {
                one_sided[index] +=
                    write_operation(&subject.file, subject.pool.buffer(buffer)?, first + offset)?;
            }
            if let Some(registry) = &subject.registry {
                // FMRD's thread must not work through the next method's turn.
                registry.wait_background();
            }
            seconds[index] += start.elapsed().as_secs_f64();
        }
    }
    Ok(seconds)
}

/// The rows of one case: per method, its seconds, its speed over the first method's paired
/// within each repetition, and its last repetition's registry counts.
fn case_rows(
    subjects: &[Subject],
    measured: &CaseSamples,
    reuse_percent: u32,
    repetitions: usize,
) -> Result<Vec<FmrdRow>, String> {
    let samples = &measured.seconds;
    let mut rows = Vec::with_capacity(subjects.len());
    for (index, subject) in subjects.iter().enumerate() {
        // Paired within each repetition (the methods took turns), then the median: steadier
        // than a ratio of medians on a loaded machine.
        let ratios: Vec<f64> = samples[0]
            .iter()
            .zip(&samples[index])
            .map(|(baseline, seconds)| baseline / seconds.max(1e-12))
            .collect();
        let missing = |err: String| {
            format!(
                "bench fmrd: case \"{}\", method \"{}\": {err}",
                case(reuse_percent),
                subject.method.name()
            )
        };
        let normalized = Spread::of(&ratios).map_err(missing)?;
        let seconds = Spread::of(&samples[index]).map_err(missing)?;
        let bytes = (OPERATIONS * BUFFER_BYTES) as u64;
        let counts = measured.last[index];
        rows.push(FmrdRow {
            reuse_percent,
            method: subject.method.name(),
            measure: Measure::of_seconds(seconds, bytes),
            normalized: normalized.median,
            normalized_min: normalized.min,
            normalized_max: normalized.max,
            writes: OPERATIONS,
            bytes,
            reuses_drawn: measured.reuses,
            one_sided: measured.one_sided[index] == OPERATIONS as u64,
            registrations: counts.registrations,
            deregistrations: counts.deregistrations,
            cache_hits: counts.cache_hits,
            cache_misses: counts.cache_misses,
            revivals: counts.revivals,
            evictions: counts.evictions,
            deregistration_batches: counts.deregistration_batches,
            registration_us: counts.registration_us,
            deregistration_us: counts.deregistration_us,
            background_deregistration_us: counts.background_deregistration_us,
            repetitions,
        });
    }
    Ok(rows)
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

/// The table and notes for people.
fn text(report: &Report<FmrdRow>, registrar: &str) -> Result<String, String> {
    let mut table = report::table([
        "case",
        "method",
        "MiB/s",
        "normalized",
        "min-max",
        "regs",
        "hits",
        "reviv",
        "dereg",
        "reg µs",
        "dereg µs",
    ]);
    for &percent in &REUSE_PERCENTS {
        for method in Method::ALL {
            let row = report.row(&case(percent), method.name())?;
            table.add_row([
                case(percent),
                row.method.to_owned(),
                report::cell(row.measure.mib_s, 1),
                report::cell(row.normalized, 3),
                format!("{:.3}-{:.3}", row.normalized_min, row.normalized_max),
                row.registrations.to_string(),
                row.cache_hits.to_string(),
                row.revivals.to_string(),
                row.deregistrations.to_string(),
                report::cell(row.registration_us, 0),
                report::cell(row.deregistration_us, 0),
            ]);
        }
    }
    Ok(format!(
        "fmrd: {OPERATIONS} writes of {} KiB from {BUFFERS} buffers, cache {CACHE_ENTRIES} entries, local (gather), registrar {registrar}\n{table}\n\
         paper (InfiniBand, 001 Fig. 4.4, normalized to no registration): dynamic down to 0.65; at 80 % reuse pin-down +24 %, FMRD +28 % over dynamic; at 20 % FMRD about 9 % above pin-down\n\
         verified: {}\n",
        BUFFER_BYTES >> 10,
        report.verified
    ))
}

/// 001 Fig. 4.4: bandwidth normalized to no registration against buffer reuse, one line per
/// method, bars spanning the repetitions.
fn figure(report: &Report<FmrdRow>) -> Result<Figure, String> {
    let mut panel = Panel::new(
        "64 KiB writes, cache of 100 registrations",
        ("buffer reuse (%)", Scale::Linear),
        ("bandwidth / no registration", Scale::Linear),
    );
    for method in Method::ALL {
        let mut points = Vec::new();
        for &percent in &REUSE_PERCENTS {
            let row = report.row(&case(percent), method.name())?;
            points.push(Point {
                x: f64::from(percent),
                y: Spread {
                    min: row.normalized_min,
                    median: row.normalized,
                    max: row.normalized_max,
                },
            });
        }
        panel.lines.push(Line {
            name: method.name().to_owned(),
            points,
        });
    }
    Ok(Figure {
        stem: "fmrd".to_owned(),
        title: "fmrd (001 Fig. 4.4): dynamic registration vs pin-down cache vs FMRD".to_owned(),
        panels: vec![panel],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(reuse_percent: u32, method: Method, normalized: f64) -> FmrdRow {
        FmrdRow {
            reuse_percent,
            method: method.name(),
            measure: Measure {
                mib_s: 100.0,
                mib_s_min: 90.0,
                mib_s_max: 110.0,
                seconds: 0.625,
            },
            normalized,
            normalized_min: normalized - 0.1,
            normalized_max: normalized + 0.1,
            writes: OPERATIONS,
            bytes: (OPERATIONS * BUFFER_BYTES) as u64,
            reuses_drawn: 0,
            one_sided: true,
            registrations: 0,
            deregistrations: 0,
            cache_hits: 0,
            cache_misses: 0,
            revivals: 0,
            evictions: 0,
            deregistration_batches: 0,
            registration_us: 0.0,
            deregistration_us: 0.0,
            background_deregistration_us: 0.0,
            repetitions: 9,
        }
    }

    fn report(rows: Vec<FmrdRow>) -> Report<FmrdRow> {
        Report {
            bench: "fmrd",
            quick: true,
            meta: Meta::now(9),
            config: json!({}),
            verified: true,
            rows,
        }
    }

    #[test]
    fn a_missing_row_fails_the_table_and_the_figure_by_name() {
        let mut rows: Vec<FmrdRow> = REUSE_PERCENTS
            .iter()
            .flat_map(|&percent| Method::ALL.map(|method| row(percent, method, 0.9)))
            .collect();
        let full = report(rows.clone());
        assert!(text(&full, "pin").unwrap().contains("reuse 80 %"));
        let figure = figure(&full).unwrap();
        assert_eq!(figure.panels[0].lines.len(), Method::ALL.len());
        assert!((figure.panels[0].lines[1].points[1].y.median - 0.9).abs() < 1e-12);
        rows.retain(|row| !(row.reuse_percent == 80 && row.method == "fmrd"));
        let partial = report(rows);
        for err in [text(&partial, "pin").unwrap_err(), figure_err(&partial)] {
            assert_eq!(
                err,
                "bench fmrd: no row for case \"reuse 80 %\", method \"fmrd\""
            );
        }
    }

    fn figure_err(report: &Report<FmrdRow>) -> String {
        figure(report).unwrap_err()
    }
}
