//! `tessera bench ogr` (seed 000 Table 3, seed 001 Table 4.1): what registering the buffers
//! of a list write costs, per registration policy.
//!
//! A 2048 x 2048 array of 4-byte ints is distributed block-block over 4 processes; each
//! process writes its 1024 x 1024 block, 1024 rows of 4 KiB lying 8 KiB apart in memory, as
//! one list call to its own contiguous 4 MiB of the file (stripe unit 4 MiB over 4 servers, so
//! each process's call is one request to one server). The servers pull the rows one-sidedly
//! over the `local` backend; before each request the client registers them through a
//! [`Registry`] over the `--registrar` (default `fixed`: io_uring fixed buffers, the kernel's
//! long-term page pinning that RDMA registration does; `pin`: mlock/munlock), and releases
//! them after the reply. The cases are the seed's:
//!
//! - `ideal`: every row's registration was made earlier and is found in a pin-down cache;
//! - `indiv`: each row registered and deregistered on its own, every call;
//! - `ogr`: Optimistic Group Registration, every call (the rows' hull, one registration);
//! - `ogr+holes`: OGR over 1024 one-page buffers of a region with 10 unmapped holes between
//!   them, so the optimistic registration fails, the holes are found with `mincore` and the
//!   11 mapped runs are registered;
//! - `no reg`: no registration at all, for reference;
//! - `ideal, 2M pages` and `ogr, 2M pages`: the ideal and OGR cases again with the array in
//!   transparent huge pages (`MADV_HUGEPAGE`), where pinning costs per 2 MiB page rather than
//!   per 4 KiB one (the seeds' InfiniBand registration cost ~0.1 µs per 4 KiB page; `mlock`
//!   here ~0.4 µs, which alone caps OGR on 4 KiB pages near 80 % of ideal). Their `of_ideal`
//!   is against `ideal, 2M pages`, which registers nothing (the cost an ideal cache has
//!   during a call; a pin-down cache locking rows one by one would split the huge pages);
//!   `huge_page_bytes` says how much of the array the kernel backs with huge pages after the
//!   run (OGR's lock of the rows' hull splits the huge pages its ends cut through).
//!
//! The four processes' calls run one after another from this process, so the figures are per
//! call without contention between the clients' `mlock`s. Each method has its own registry and
//! its own copy of the memory: the ideal method's cache keeps its rows locked for the whole
//! run, and `mlock` of pages already locked costs almost nothing, so sharing the memory would
//! make every other method look cheap.
//! Each method also has its own client and file. The methods take turns call by call (every
//! process's call of one iteration), so load on the machine falls on all of them alike; after
//! each repetition every method's file is read back by a client without registration and
//! compared with its array, whose contents change every repetition.

use std::io::{IoSlice, IoSliceMut};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::json;
use tessera_client::tessera_reg::mapping::AnonymousMapping;
use tessera_client::tessera_reg::{
    page_bytes, Caching, Grouping, Policy, RegStats, Registrar, Registry,
};
use tessera_client::{
    Client, ClusterConfig, CreateOptions, File, IoReport, Mechanism, Piece, TransferPolicy,
};

use super::CommonArgs;
use crate::report::{
    self, Figure, Line, Measure, Meta, Outcome, Panel, Progress, Report, Scale, Spread,
};

const SERVERS: u16 = 4;
const PROCESSES: usize = 4;
/// Ints per row and rows of the whole array.
const SIDE: usize = 2048;
const INT_BYTES: usize = 4;
/// Rows of one process's block, and ints per row of it.
const BLOCK_SIDE: usize = SIDE / 2;
const ROW_BYTES: usize = BLOCK_SIDE * INT_BYTES;
const CALL_BYTES: usize = BLOCK_SIDE * ROW_BYTES;
/// Unmapped holes between the buffers of the `ogr+holes` case.
const HOLES: usize = 10;

const _: () = assert!(PROCESSES == 4 && SIDE.is_multiple_of(2));

/// How one method registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Ideal,
    Indiv,
    Ogr,
    OgrHoles,
    NoReg,
    IdealHuge,
    OgrHuge,
}

impl Method {
    const ALL: [Self; 7] = [
        Self::Ideal,
        Self::Indiv,
        Self::Ogr,
        Self::OgrHoles,
        Self::NoReg,
        Self::IdealHuge,
        Self::OgrHuge,
    ];

    /// Whether its array lives in transparent huge pages.
    fn huge(self) -> bool {
        matches!(self, Self::IdealHuge | Self::OgrHuge)
    }

    /// The method its `of_ideal` compares with.
    fn ideal(self) -> Self {
        if self.huge() {
            Self::IdealHuge
        } else {
            Self::Ideal
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Ideal => "ideal",
            Self::Indiv => "indiv",
            Self::Ogr => "ogr",
            Self::OgrHoles => "ogr+holes",
            Self::NoReg => "no reg",
            Self::IdealHuge => "ideal, 2M pages",
            Self::OgrHuge => "ogr, 2M pages",
        }
    }

    fn policy(self) -> Option<Policy> {
        match self {
            Self::Ideal => Some(
                Policy::new(Grouping::Individual, Caching::PinDown)
                    .with_entries_max(PROCESSES * BLOCK_SIDE),
            ),
            Self::Indiv => Some(Policy::new(Grouping::Individual, Caching::None)),
            Self::Ogr | Self::OgrHoles | Self::OgrHuge => {
                Some(Policy::new(Grouping::Ogr, Caching::None))
            }
            // On huge pages the ideal case is no registration at all: a pin-down cache
            // locking each row on its own would split every huge page into 4 KiB ones.
            Self::NoReg | Self::IdealHuge => None,
        }
    }

    /// Seed 000 Table 3, write without sync: MB/s, registrations, overhead µs.
    fn paper(self) -> Option<(f64, u64, f64)> {
        match self {
            Self::Ideal => Some((1010.0, 0, 0.0)),
            Self::Indiv => Some((424.0, 1024, 5254.0)),
            Self::Ogr => Some((950.0, 1, 227.0)),
            Self::OgrHoles => Some((879.0, 11, 496.0)),
            Self::NoReg | Self::IdealHuge | Self::OgrHuge => None,
        }
    }
}

/// The int at (`row`, `column`) of the array in round `generation`.
fn element(generation: u64, row: usize, column: usize) -> [u8; INT_BYTES] {
    let index = (row * SIDE + column) as u64;
    let mixed = (index ^ generation.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_mul(0xBF58_476D_1CE4_E5B9);
    u32::try_from(mixed >> 32)
        .expect("the high half fits")
        .to_le_bytes()
}

/// One method's copy of the application's memory: the array, and (for `ogr+holes`) per
/// process the buffers with holes.
struct Memory {
    array: Array,
    holed: Vec<AnonymousMapping>,
}

/// Bytes of a transparent huge page.
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// The array: on the heap, or in a private anonymous mapping aligned to 2 MiB and advised
/// `MADV_HUGEPAGE`.
enum Array {
    Heap(Vec<u8>),
    Huge {
        /// The whole mapping (unmapped on drop) and the aligned array inside it.
        mapping: (usize, usize),
        start: usize,
        len: usize,
    },
}

impl Array {
    fn huge(len: usize) -> Result<Self, String> {
        let mapped = len + HUGE_PAGE_BYTES;
        // SAFETY: a new private anonymous mapping chosen by the kernel; checked below, and
        // unmapped only by Drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(format!(
                "cannot map a {mapped}-byte array: {}",
                std::io::Error::last_os_error()
            ));
        }
        let start = (base as usize).next_multiple_of(HUGE_PAGE_BYTES);
        // SAFETY: advises part of the mapping just made; a refusal only loses huge pages,
        // which `huge_page_bytes` reports.
        unsafe {
            libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
        let mut array = Self::Huge {
            mapping: (base as usize, mapped),
            start,
            len,
        };
        array.fill(0);
        Ok(array)
    }

    /// Bytes of the array the kernel backs with huge pages (`AnonHugePages` of its mapping
    /// in `/proc/self/smaps`); 0 for the heap array.
    fn huge_page_bytes(&self) -> u64 {
        let Self::Huge { start, len, .. } = *self else {
            return 0;
        };
        let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
            return 0;
        };
        // Sum over every mapping overlapping the array (locking parts of it splits it).
        let mut inside = false;
        let mut total = 0;
        for line in smaps.lines() {
            let range = line
                .split_once(' ')
                .and_then(|(range, _)| range.split_once('-'))
                .and_then(|(low, high)| {
                    Some((
                        usize::from_str_radix(low, 16).ok()?,
                        usize::from_str_radix(high, 16).ok()?,
                    ))
                });
            if let Some((low, high)) = range {
                inside = low < start + len && start < high;
                continue;
            }
            if let (true, Some(kib)) = (inside, line.strip_prefix("AnonHugePages:")) {
                let kib: u64 = kib
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .unwrap_or(0);
                total += kib * 1024;
            }
        }
        total
    }
}

impl std::ops::Deref for Array {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Self::Heap(vec) => vec,
            // SAFETY: `start..start + len` lies inside the live mapping this value owns.
            Self::Huge { start, len, .. } => unsafe {
                std::slice::from_raw_parts(*start as *const u8, *len)
            },
        }
    }
}

impl std::ops::DerefMut for Array {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Self::Heap(vec) => vec,
            // SAFETY: as in `deref`, and `&mut self` makes this the only view.
            Self::Huge { start, len, .. } => unsafe {
                std::slice::from_raw_parts_mut(*start as *mut u8, *len)
            },
        }
    }
}

impl Drop for Array {
    fn drop(&mut self) {
        if let Self::Huge {
            mapping: (base, mapped),
            ..
        } = *self
        {
            // SAFETY: the mapping made in `huge`, unmapped only here.
            unsafe {
                libc::munmap(base as *mut libc::c_void, mapped);
            }
        }
    }
}

impl Memory {
    fn new(with_holes: bool, huge: bool) -> Result<Self, String> {
        let page = page_bytes();
        if !ROW_BYTES.is_multiple_of(page) && !page.is_multiple_of(ROW_BYTES) {
            return Err(format!(
                "page size {page} does not divide a {ROW_BYTES}-byte row"
            ));
        }
        // One buffer page then one gap page per row; 10 of the gap pages are unmapped.
        let pages_per_row = ROW_BYTES.div_ceil(page);
        let mut holed = Vec::with_capacity(PROCESSES);
        for _ in 0..if with_holes { PROCESSES } else { 0 } {
            let mut mapping = AnonymousMapping::new(2 * pages_per_row * BLOCK_SIDE)
                .map_err(|err| format!("cannot map the ogr+holes buffers: {err}"))?;
            for hole in 0..HOLES {
                let row = (hole + 1) * BLOCK_SIDE / (HOLES + 1);
                let gap_page = (2 * row + 1) * pages_per_row;
                mapping
                    .punch_hole(gap_page, pages_per_row)
                    .map_err(|err| format!("cannot punch a hole: {err}"))?;
            }
            holed.push(mapping);
        }
        let array = if huge {
            Array::huge(SIDE * SIDE * INT_BYTES)?
        } else {
            Array::Heap(vec![0; SIDE * SIDE * INT_BYTES])
        };
        Ok(Self { array, holed })
    }

    /// Byte offset in the array of row `row` of process `rank`'s block.
    fn row_offset(rank: usize, row: usize) -> usize {
        let (block_row, block_column) = (rank / 2, rank % 2);
        ((block_row * BLOCK_SIDE + row) * SIDE + block_column * BLOCK_SIDE) * INT_BYTES
    }

    /// Byte offset in process `rank`'s holed region of its buffer `row`.
    fn holed_offset(row: usize) -> usize {
        2 * row * ROW_BYTES.div_ceil(page_bytes()) * page_bytes()
    }

    /// New contents for round `generation`, the same in the array and the holed buffers.
    fn fill(&mut self, generation: u64) -> Result<(), String> {
        for row in 0..SIDE {
            for column in 0..SIDE {
                let offset = (row * SIDE + column) * INT_BYTES;
                self.array[offset..offset + INT_BYTES]
                    .copy_from_slice(&element(generation, row, column));
            }
        }
        for rank in 0..self.holed.len() {
            for row in 0..BLOCK_SIDE {
                let source = Self::row_offset(rank, row);
                self.holed[rank]
                    .write(
                        Self::holed_offset(row),
                        &self.array[source..source + ROW_BYTES],
                    )
                    .map_err(|err| err.to_string())?;
            }
        }
        Ok(())
    }

    /// The 1024 memory pieces of process `rank`'s call.
    fn pieces(&self, method: Method, rank: usize) -> Result<Vec<IoSlice<'_>>, String> {
        (0..BLOCK_SIDE)
            .map(|row| {
                Ok(IoSlice::new(if method == Method::OgrHoles {
                    self.holed[rank]
                        .slice(Self::holed_offset(row), ROW_BYTES)
                        .map_err(|err| err.to_string())?
                } else {
                    let offset = Self::row_offset(rank, row);
                    &self.array[offset..offset + ROW_BYTES]
                }))
            })
            .collect()
    }
}

/// The data-transfer step of one process's call: its rows to its 4 MiB of the file, pulled by
/// the server over the transport, registered by the client's registry around the request.
fn write_call(file: &File, memory: &[IoSlice<'_>], rank: usize) -> Result<IoReport, String> {
    let target = [Piece::new((rank * CALL_BYTES) as u64, CALL_BYTES as u64)];
    file.write_list(memory, &target)
        .map_err(|err| format!("write of process {rank}: {err}"))
}

struct Subject {
    method: Method,
    registry: Option<Arc<Registry>>,
    client: Client,
    file: File,
    path: String,
    memory: Memory,
}

/// Per call: registrations, registration + deregistration + hole query µs, failed optimistic
/// attempts, hole queries.
#[derive(Debug, Default, Clone, Copy)]
struct Figures {
    registrations: f64,
    overhead_us: f64,
    registration_us: f64,
    deregistration_us: f64,
    failed_optimistic: f64,
    hole_queries: f64,
    one_sided: u64,
    requests: u64,
}

fn figures(before: &RegStats, after: &RegStats, calls: usize) -> Figures {
    let calls = calls as f64;
    let registration_us = (after.registration_us - before.registration_us) / calls;
    let deregistration_us = (after.deregistration_us - before.deregistration_us) / calls;
    let hole_query_us = (after.hole_query_us - before.hole_query_us) / calls;
    Figures {
        registrations: (after.registrations - before.registrations) as f64 / calls,
        overhead_us: registration_us + deregistration_us + hole_query_us,
        registration_us,
        deregistration_us,
        failed_optimistic: (after.failed_optimistic - before.failed_optimistic) as f64 / calls,
        hole_queries: (after.hole_queries - before.hole_queries) as f64 / calls,
        one_sided: 0,
        requests: 0,
    }
}

/// Repetitions of a case and iterations (calls of every process) per repetition.
#[derive(Debug, Clone, Copy)]
struct Sweep {
    repetitions: usize,
    iterations: usize,
}

/// Runs the experiment and writes its report.
pub fn run(common: &CommonArgs) -> Result<Outcome, String> {
    let (cluster, checker) = super::open_cluster(common, SERVERS)?;
    let config = ClusterConfig::load(&cluster.file).map_err(|err| err.to_string())?;
    let (registrar, registrar_name) = common.registrar(super::RegistrarKind::Fixed)?;
    let mut subjects = open_subjects(&checker, &config, &registrar)?;
    let syncs: &[bool] = if common.quick {
        &[false]
    } else {
        &[false, true]
    };
    let sweep = Sweep {
        repetitions: if common.quick { 7 } else { 11 },
        iterations: if common.quick { 4 } else { 8 },
    };
    let progress = Progress::new("ogr", syncs.len() as u64);
    let mut rows = Vec::new();
    let mut verified = true;
    let mut generation = 0u64;
    for &sync in syncs {
        let (samples, last) = measure_case(
            &mut subjects,
            &checker,
            sync,
            sweep,
            &mut generation,
            &mut verified,
        )?;
        rows.extend(case_rows(&subjects, &samples, &last, sync, sweep)?);
        progress.step(case_label(sync));
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
        bench: "ogr",
        quick: common.quick,
        meta: Meta::now(sweep.repetitions),
        config: json!({
            "servers": SERVERS,
            "clients": 1,
            "processes": PROCESSES,
            "processes_run": "one after another from one client process",
            "transport": "local",
            "mechanism": "gather",
            "array": format!("{SIDE} x {SIDE} ints, block-block over {PROCESSES}"),
            "memory_pieces_per_call": BLOCK_SIDE,
            "call_bytes": CALL_BYTES,
            "stripe_unit_bytes": CALL_BYTES,
            "registrar": registrar_name,
            "cost_model": format!("{:?}", registrar.cost()),
            "holes": HOLES,
            "page_bytes": page_bytes(),
        }),
        verified,
        rows,
    };
    let text = text(&report, registrar_name, syncs)?;
    report.finish(common, &text, &[figure(&report, syncs)?])
}

/// Set-up: per method, its file (one stripe unit per call), its own client (so each keeps
/// its registry, and the ideal one its cache) forced to gather, and its memory.
fn open_subjects(
    checker: &Client,
    config: &ClusterConfig,
    registrar: &Arc<dyn Registrar>,
) -> Result<Vec<Subject>, String> {
    let mut subjects = Vec::new();
    for (index, method) in Method::ALL.into_iter().enumerate() {
        let path = format!("/bench/ogr-{}-{index}", std::process::id());
        checker
            .create(
                &path,
                &CreateOptions {
                    stripe_unit_bytes: CALL_BYTES as u64,
                    server_count: SERVERS,
                    ..CreateOptions::default()
                },
            )
            .map_err(|err| format!("create {path}: {err}"))?;
        // One client per method, so each keeps its registry (and the ideal one its cache).
        let (client, registry) =
            super::registered_client(config, registrar, method.policy(), method.name())?;
        let mut file = client
            .open(&path, tessera_client::OpenMode::ReadWrite)
            .map_err(|err| format!("open {path}: {err}"))?;
        file.set_transfer_policy(TransferPolicy::Force(Mechanism::Gather));
        subjects.push(Subject {
            method,
            registry,
            client,
            file,
            path,
            memory: Memory::new(method == Method::OgrHoles, method.huge())?,
        });
    }
    Ok(subjects)
}

/// One case (writes with or without a sync): every method's memory written once untimed
/// (the ideal case's cache filled before anything is timed), then every repetition, each
/// checked by reading the files back. Per method, its seconds per call in each repetition
/// and the last repetition's figures.
fn measure_case(
    subjects: &mut [Subject],
    checker: &Client,
    sync: bool,
    sweep: Sweep,
    generation: &mut u64,
    verified: &mut bool,
) -> Result<(Vec<Vec<f64>>, Vec<Figures>), String> {
    let mut samples = vec![Vec::new(); subjects.len()];
    let mut last = vec![Figures::default(); subjects.len()];
    // The ideal case's cache is filled once, before anything is timed.
    for subject in subjects.iter_mut() {
        subject.memory.fill(*generation)?;
        for rank in 0..PROCESSES {
            write_call(
                &subject.file,
                &subject.memory.pieces(subject.method, rank)?,
                rank,
            )?;
        }
    }
    let calls = sweep.iterations * PROCESSES;
    for repetition in 0..sweep.repetitions {
        *generation += 1;
        let mut before = Vec::with_capacity(subjects.len());
        for subject in subjects.iter_mut() {
            subject.memory.fill(*generation)?;
            before.push(
                subject
                    .registry
                    .as_ref()
                    .map(|registry| registry.stats())
                    .unwrap_or_default(),
            );
        }
        let (seconds, reports) = timed_repetition(subjects, sync, sweep.iterations, repetition)?;
        for (index, subject) in subjects.iter().enumerate() {
            samples[index].push(seconds[index] / calls as f64);
            let after = subject
                .registry
                .as_ref()
                .map(|registry| registry.stats())
                .unwrap_or_default();
            last[index] = Figures {
                one_sided: reports[index].one_sided / calls as u64,
                requests: reports[index].requests / calls as u64,
                ..figures(&before[index], &after, calls)
            };
            *verified &= verify(checker, &subject.path, &subject.memory, subject.method)?;
        }
    }
    Ok((samples, last))
}

/// The timed calls of one repetition: the methods take turns every iteration (one call of
/// each process), so load on the machine falls on all of them alike. Per method, its
/// seconds and its summed reports.
fn timed_repetition(
    subjects: &[Subject],
    sync: bool,
    iterations: usize,
    repetition: usize,
) -> Result<(Vec<f64>, Vec<IoReport>), String> {
    let pieces: Vec<Vec<Vec<IoSlice<'_>>>> = subjects
        .iter()
        .map(|subject| {
            (0..PROCESSES)
                .map(|rank| subject.memory.pieces(subject.method, rank))
                .collect::<Result<_, _>>()
        })
        .collect::<Result<_, _>>()?;
    let mut seconds = vec![0.0f64; subjects.len()];
    let mut reports = vec![IoReport::default(); subjects.len()];
    for iteration in 0..iterations {
        for turn in 0..subjects.len() {
            let index = (turn + iteration + repetition) % subjects.len();
            let subject = &subjects[index];
            let start = Instant::now();
            for (rank, memory_pieces) in pieces[index].iter().enumerate() {
                reports[index] += write_call(&subject.file, memory_pieces, rank)?;
            }
            if sync {
                subject.file.sync().map_err(|err| err.to_string())?;
            }
            seconds[index] += start.elapsed().as_secs_f64();
        }
    }
    Ok((seconds, reports))
}

/// The rows of one case: per method, its median and range, its figures, its speed against
/// its ideal, and the paper's figures.
fn case_rows(
    subjects: &[Subject],
    samples: &[Vec<f64>],
    last: &[Figures],
    sync: bool,
    sweep: Sweep,
) -> Result<Vec<OgrRow>, String> {
    let mut rows = Vec::with_capacity(subjects.len());
    for (index, subject) in subjects.iter().enumerate() {
        let ideal_index = Method::ALL
            .iter()
            .position(|&method| method == subject.method.ideal())
            .expect("every ideal is a method");
        let spread = |index: usize| {
            Spread::of(&samples[index]).map_err(|err| {
                format!(
                    "bench ogr: case \"{}\", method \"{}\": {err}",
                    case_label(sync),
                    Method::ALL[index].name()
                )
            })
        };
        let ideal_seconds = spread(ideal_index)?.median;
        let seconds = spread(index)?;
        let figures = last[index];
        let paper = subject.method.paper();
        rows.push(OgrRow {
            sync,
            method: subject.method.name(),
            measure: Measure::of_seconds(seconds, CALL_BYTES as u64),
            requests: figures.requests,
            pieces: 1,
            bytes: CALL_BYTES as u64,
            memory_pieces: BLOCK_SIDE,
            registrations: figures.registrations,
            registration_overhead_us: figures.overhead_us,
            registration_us: figures.registration_us,
            deregistration_us: figures.deregistration_us,
            failed_optimistic: figures.failed_optimistic,
            hole_queries: figures.hole_queries,
            one_sided: figures.one_sided > 0,
            of_ideal: ideal_seconds / seconds.median.max(1e-12),
            of_ideal_against: subject.method.ideal().name(),
            huge_page_bytes: subject.memory.array.huge_page_bytes(),
            paper_mb_s: paper.map(|paper| paper.0),
            paper_registrations: paper.map(|paper| paper.1),
            paper_overhead_us: paper.map(|paper| paper.2),
            iterations: sweep.iterations,
            repetitions: sweep.repetitions,
        });
    }
    Ok(rows)
}

/// Reads the four processes' parts of the method's file back and compares them with its
/// array.
fn verify(checker: &Client, path: &str, memory: &Memory, method: Method) -> Result<bool, String> {
    let file = checker
        .open(path, tessera_client::OpenMode::ReadOnly)
        .map_err(|err| format!("open {path}: {err}"))?;
    let mut back = vec![0u8; PROCESSES * CALL_BYTES];
    let whole = [Piece::new(0, back.len() as u64)];
    file.read_list(&mut [IoSliceMut::new(&mut back)], &whole)
        .map_err(|err| format!("read back: {err}"))?;
    for rank in 0..PROCESSES {
        for row in 0..BLOCK_SIDE {
            let source = Memory::row_offset(rank, row);
            let target = rank * CALL_BYTES + row * ROW_BYTES;
            if back[target..target + ROW_BYTES] != memory.array[source..source + ROW_BYTES] {
                eprintln!(
                    "ogr: {}: process {rank} row {row} read back differs from memory",
                    method.name()
                );
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// One (case, method) of ogr: figures per call.
#[derive(Debug, Clone, Serialize)]
pub struct OgrRow {
    /// `File::sync` after each call, inside the timing (case `write+sync`).
    pub sync: bool,
    /// The registration method.
    pub method: &'static str,
    /// MiB/s and seconds, median over the repetitions, and the MiB/s range.
    #[serde(flatten)]
    pub measure: Measure,
    /// Requests per call.
    pub requests: u64,
    /// File pieces per call.
    pub pieces: u64,
    /// Useful bytes per call.
    pub bytes: u64,
    /// Memory pieces (rows) per call.
    pub memory_pieces: usize,
    /// Registrations per call.
    pub registrations: f64,
    /// Registration, deregistration and hole-query time per call, µs.
    pub registration_overhead_us: f64,
    /// Registration time per call, µs.
    pub registration_us: f64,
    /// Deregistration time per call, µs.
    pub deregistration_us: f64,
    /// Optimistic registrations that failed, per call.
    pub failed_optimistic: f64,
    /// `mincore` hole queries per call.
    pub hole_queries: f64,
    /// The server pulled the rows one-sidedly.
    pub one_sided: bool,
    /// The ideal method's seconds over this one's.
    pub of_ideal: f64,
    /// Which ideal `of_ideal` is against.
    pub of_ideal_against: &'static str,
    /// Bytes of the array the kernel backs with huge pages after the run.
    pub huge_page_bytes: u64,
    /// Seed 000 Table 3: MB/s.
    pub paper_mb_s: Option<f64>,
    /// Seed 000 Table 3: registrations.
    pub paper_registrations: Option<u64>,
    /// Seed 000 Table 3: registration overhead, µs.
    pub paper_overhead_us: Option<f64>,
    /// Calls of each process per repetition.
    pub iterations: usize,
    /// Repetitions measured.
    pub repetitions: usize,
}

impl report::Row for OgrRow {
    fn key(&self) -> (String, &str) {
        (case_label(self.sync).to_owned(), self.method)
    }
}

/// The case label of a row.
fn case_label(sync: bool) -> &'static str {
    if sync {
        "write+sync"
    } else {
        "write"
    }
}

fn text(report: &Report<OgrRow>, registrar: &str, syncs: &[bool]) -> Result<String, String> {
    let mut table = report::table([
        "case",
        "method",
        "MiB/s",
        "of ideal",
        "# reg",
        "overhead µs",
        "paper MB/s",
        "paper # reg",
        "paper overhead µs",
    ]);
    for &sync in syncs {
        for method in Method::ALL {
            let row = report.row(case_label(sync), method.name())?;
            let paper = |value: Option<String>| value.unwrap_or_else(|| "-".to_owned());
            table.add_row([
                case_label(sync).to_owned(),
                method.name().to_owned(),
                report::cell(row.measure.mib_s, 1),
                format!("{:.0}%", 100.0 * row.of_ideal),
                report::cell(row.registrations, 1),
                report::cell(row.registration_overhead_us, 1),
                paper(row.paper_mb_s.map(|value| report::cell(value, 0))),
                paper(row.paper_registrations.map(|value| value.to_string())),
                paper(row.paper_overhead_us.map(|value| report::cell(value, 0))),
            ]);
        }
    }
    Ok(format!(
        "ogr: {SIDE} x {SIDE} ints block-block over {PROCESSES}; each call writes {BLOCK_SIDE} rows of {ROW_BYTES} B over local (gather), registrar {registrar}; figures per call, median of {} repetitions\n{table}\n\
         paper (InfiniBand, no sync): Indiv -57 %, OGR -6 %, OGR+Q -13 % against Ideal\n\
         verified: {}\n",
        report.meta.repetitions, report.verified
    ))
}

/// 000 Table 3 as a figure: MiB/s per call of each method (x), one line per case.
fn figure(report: &Report<OgrRow>, syncs: &[bool]) -> Result<Figure, String> {
    let mut panel = Panel::categorical(
        "one list write of 1024 rows",
        (
            "registration method",
            Method::ALL.iter().map(|method| method.name()),
        ),
        ("MiB/s per call", Scale::Linear),
    );
    for &sync in syncs {
        let mut points = Vec::new();
        for (index, method) in Method::ALL.into_iter().enumerate() {
            let row = report.row(case_label(sync), method.name())?;
            points.push(row.measure.point(index as f64));
        }
        panel.lines.push(Line {
            name: case_label(sync).to_owned(),
            points,
        });
    }
    Ok(Figure {
        stem: "ogr".to_owned(),
        title: format!(
            "ogr (000 Table 3): registration per list call over local (median, min-max of {} repetitions)",
            report.meta.repetitions
        ),
        panels: vec![panel],
    })
}
