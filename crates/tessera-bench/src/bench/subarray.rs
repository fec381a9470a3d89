//! `tessera bench subarray` (seed 000 Fig. 3, seed 001 Fig. 3.3).
//!
//! One client sends one 2-D subarray to one server: an N x N array of 4-byte ints is
//! distributed block-block over 4 processes, and the process's (N/2) x (N/2) block goes out as
//! one list call, N/2 rows of memory to one contiguous file piece. The mechanisms are the
//! seed's: `pack` (copy the rows into one buffer, moved as one piece; with a fresh
//! registration per call — `pack, reg` — or from a registered pool, `pack`), `gather` (the
//! server moves the rows themselves: registered per row, `gather, multiple reg`; once for the
//! covering region by OGR, `gather, one reg`; found in a pin-down cache, `gather, cached`; or
//! with no registration, `gather`), `hybrid` (the transfer model picks per request) and
//! `contiguous` (the same bytes from one buffer, the upper bound). Registration is the
//! `--registrar` (default `fixed`, io_uring fixed buffers: the kernel's long-term page pinning
//! that RDMA registration does; `pin`, mlock/munlock). The `arena` rows put the array in a
//! shared arena, the `local` backend's registered memory, which the server reaches with plain
//! copies. All methods run interleaved, in an order shuffled anew in every repetition
//! ([`report::turn_order`]): each a block of calls, except pack, gather and hybrid of the same
//! memory, which take turns call by call so that the policy is judged against the other two
//! at the same moments of the machine. Every method's data is read back and compared.
//!
//! A second case measures the transport alone against the kernel: 64 KiB pieces read from a
//! cached file over `local` (the server pushes from a mapping of the object with
//! `process_vm_writev`) against the raw rate of `process_vm_writev` moving the same pieces in
//! this run, each timed copy starting after a 32 MiB write that leaves no data of either warm.
//!
//! A third measures what the iod's checks of data requests cost the gather rows (`checks.rs`):
//! `gather, checked` and `gather, unchecked` against one iod inside this process.
//!
//! The report has one [`SubarrayRow`] per (part, n, method); a figure is the median over the
//! repetitions of each repetition's median call, with its range.

use std::io::{IoSlice, IoSliceMut};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::json;
use tessera_client::tessera_reg::{Caching, Grouping, Policy, Registrar, Registry, Segment};
use tessera_client::{Arena, Client, CreateOptions, File, Mechanism, Piece, TransferPolicy};
use tessera_net::local::policy::{decision_stats, DecisionStats};

use super::CommonArgs;
use crate::report::{
    self, Figure, Line, Measure, Meta, Outcome, Panel, Progress, Report, Scale, Spread,
};

mod checks;

const SERVERS: u16 = 1;
const ELEMENT_BYTES: usize = 4;

/// One compared method: how the transfer is chosen and how memory is registered.
#[derive(Debug, Clone, Copy)]
struct Method {
    name: &'static str,
    policy: TransferPolicy,
    registration: Option<(Grouping, Caching)>,
    contiguous: bool,
    /// The array lives in a shared arena (`tessera_client::Arena`): the `local` backend's
    /// registered memory, which the server reaches with plain copies.
    arena: bool,
}

const METHODS: [Method; 11] = [
    Method {
        name: "contiguous",
        policy: TransferPolicy::Force(Mechanism::Gather),
        registration: None,
        contiguous: true,
        arena: false,
    },
    Method {
        name: "pack",
        policy: TransferPolicy::Force(Mechanism::Pack),
        registration: None,
        contiguous: false,
        arena: false,
    },
    Method {
        name: "pack, reg",
        policy: TransferPolicy::Force(Mechanism::Pack),
        registration: Some((Grouping::Individual, Caching::None)),
        contiguous: false,
        arena: false,
    },
    Method {
        name: "gather",
        policy: TransferPolicy::Force(Mechanism::Gather),
        registration: None,
        contiguous: false,
        arena: false,
    },
    Method {
        name: "gather, multiple reg",
        policy: TransferPolicy::Force(Mechanism::Gather),
        registration: Some((Grouping::Individual, Caching::None)),
        contiguous: false,
        arena: false,
    },
    Method {
        name: "gather, one reg",
        policy: TransferPolicy::Force(Mechanism::Gather),
        registration: Some((Grouping::Ogr, Caching::None)),
        contiguous: false,
        arena: false,
    },
    Method {
        name: "gather, cached",
        policy: TransferPolicy::Force(Mechanism::Gather),
        registration: Some((Grouping::Individual, Caching::PinDown)),
        contiguous: false,
        arena: false,
    },
    Method {
        name: "hybrid",
        policy: TransferPolicy::Auto,
        registration: None,
        contiguous: false,
        arena: false,
    },
    Method {
        name: "pack, arena",
        policy: TransferPolicy::Force(Mechanism::Pack),
        registration: None,
        contiguous: false,
        arena: true,
    },
    Method {
        name: "gather, arena",
        policy: TransferPolicy::Force(Mechanism::Gather),
        registration: None,
        contiguous: false,
        arena: true,
    },
    Method {
        name: "hybrid, arena",
        policy: TransferPolicy::Auto,
        registration: None,
        contiguous: false,
        arena: true,
    },
];

fn pattern(seed: u64, length: usize) -> Vec<u8> {
    (0..length)
        .map(|i| ((i as u64).wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8)
        .collect()
}

/// The rows of the subarray of rank 0 in an `n` x `n` int array: (offset, length) in memory.
fn rows(n: usize) -> Vec<(usize, usize)> {
    let half = n / 2;
    (0..half)
        .map(|row| (row * n * ELEMENT_BYTES, half * ELEMENT_BYTES))
        .collect()
}

/// Which part of the experiment a row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Part {
    /// One (n/2 x n/2) subarray written as one list call (000 Fig. 3).
    Subarray,
    /// 64 KiB pieces read over `local` vs raw `process_vm_writev`.
    Transport,
    /// The subarray's gather with the iod's checks of data requests on and off.
    Checks,
}

/// Where the client's array lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Memory {
    /// Ordinary process memory.
    Heap,
    /// A shared arena, the `local` backend's registered memory.
    Arena,
}

/// One (part, n, method) of subarray.
#[derive(Debug, Clone, Serialize)]
pub struct SubarrayRow {
    /// Which part.
    pub part: Part,
    /// The array side (subarray part only).
    pub n: Option<usize>,
    /// The method.
    pub method: String,
    /// Where the array lives.
    pub memory: Memory,
    /// MiB/s and seconds, median over the repetitions, and the MiB/s range.
    #[serde(flatten)]
    pub measure: Measure,
    /// Requests per call.
    pub requests: u64,
    /// File pieces per call.
    pub pieces: u64,
    /// Memory pieces per call.
    pub memory_pieces: u64,
    /// Bytes of each memory piece.
    pub piece_bytes: usize,
    /// Bytes per call.
    pub bytes: u64,
    /// The server moved the data one-sidedly.
    pub one_sided: bool,
    /// Registrations per call.
    pub registrations: u64,
    /// Registration and deregistration time per call, microseconds.
    pub registration_us: f64,
    /// The mechanisms the transfer policy used for the timed requests, with their counts
    /// (`hybrid`: the model's choices), e.g. `gather 16`.
    pub chosen: String,
    /// Timed requests where the policy's margin rule decided (near-equal mechanisms).
    pub within_margin: u64,
    /// Of those, the requests the process's own measurements chose (online correction).
    pub learned: u64,
    /// The model's typical cost of a timed request's transfer, µs (mean).
    pub predicted_us: f64,
    /// The model's worst-case cost of a timed request's transfer, µs (mean).
    pub predicted_worst_us: f64,
    /// A timed request's measured time from send to reply, µs (mean; the storage call and
    /// the round trip included).
    pub measured_us: f64,
    /// Pack, gather and hybrid: the median over the repetitions of the method's speed over the
    /// better of pack and gather for the same memory, all three timed in the same repetition
    /// (the machine's drift between repetitions taken out).
    pub paired_vs_best: Option<f64>,
    /// `gather, checked`: the median over the repetitions of its speed over `gather,
    /// unchecked`, the two alternating call by call within each repetition.
    pub paired_vs_unchecked: Option<f64>,
}

/// What the transfer policy decided for the one-sided requests within `spans`, each a pair of
/// snapshots of `decision_stats` taken around one call: (chosen, within margin, learned,
/// predicted µs, worst µs, measured µs).
fn decisions_over(spans: &[(DecisionStats, DecisionStats)]) -> (String, u64, u64, f64, f64, f64) {
    let mut chosen = Vec::new();
    let (mut requests, mut margin, mut learned) = (0, 0, 0);
    let (mut predicted, mut worst, mut measured, mut timed) = (0.0, 0.0, 0.0, 0);
    for (index, mechanism) in Mechanism::ALL.iter().enumerate() {
        let pairs = spans.iter().flat_map(|(before, after)| {
            [
                (&before.automatic[index], &after.automatic[index]),
                (&before.forced[index], &after.forced[index]),
            ]
        });
        let mut count = 0;
        for (b, a) in pairs {
            count += a.requests - b.requests;
            margin += a.within_margin - b.within_margin;
            learned += a.learned - b.learned;
            predicted += a.predicted_us - b.predicted_us;
            worst += a.predicted_worst_us - b.predicted_worst_us;
            measured += a.measured_us - b.measured_us;
            timed += a.measured - b.measured;
        }
        requests += count;
        if count > 0 {
            chosen.push(format!("{} {count}", mechanism.name()));
        }
    }
    let mean = |sum: f64, count: u64| if count == 0 { 0.0 } else { sum / count as f64 };
    (
        chosen.join(", "),
        margin,
        learned,
        mean(predicted, requests),
        mean(worst, requests),
        mean(measured, timed),
    )
}

impl SubarrayRow {
    /// A row of `method` in heap memory with no registration and no policy figures (the
    /// transport and checks cases), one file piece per call; the caller sets the rest.
    fn plain(part: Part, n: Option<usize>, method: &str, measure: Measure, bytes: u64) -> Self {
        Self {
            part,
            n,
            method: method.to_owned(),
            memory: Memory::Heap,
            measure,
            requests: 0,
            pieces: 1,
            memory_pieces: 0,
            piece_bytes: 0,
            bytes,
            one_sided: false,
            registrations: 0,
            registration_us: 0.0,
            chosen: String::new(),
            within_margin: 0,
            learned: 0,
            predicted_us: 0.0,
            predicted_worst_us: 0.0,
            measured_us: 0.0,
            paired_vs_best: None,
            paired_vs_unchecked: None,
        }
    }
}

impl report::Row for SubarrayRow {
    fn key(&self) -> (String, &str) {
        (case(self.part, self.n), &self.method)
    }
}

/// The case label of a row.
fn case(part: Part, n: Option<usize>) -> String {
    match (part, n) {
        (Part::Subarray, Some(n)) => format!("n={n}"),
        (Part::Subarray, None) => "n=?".to_owned(),
        (Part::Transport, _) => "64 KiB pieces".to_owned(),
        (Part::Checks, Some(n)) => format!("checks, n={n}"),
        (Part::Checks, None) => "checks, n=?".to_owned(),
    }
}

/// The pack and gather methods of the same memory as `method`, for a pack, gather or hybrid
/// method without registration.
fn best_of_pack_and_gather(method: Method) -> Option<(&'static str, &'static str)> {
    let base = method.name.strip_suffix(", arena").unwrap_or(method.name);
    if !["pack", "gather", "hybrid"].contains(&base) {
        return None;
    }
    Some(if method.arena {
        ("pack, arena", "gather, arena")
    } else {
        ("pack", "gather")
    })
}

/// The median call of each repetition of one method.
fn repetition_medians(calls: &[Vec<f64>]) -> Result<Vec<f64>, String> {
    calls
        .iter()
        .map(|calls| Spread::of(calls).map(|spread| spread.median))
        .collect()
}

/// The methods' turns within a repetition, as indices into [`METHODS`]: pack, gather and
/// hybrid of the same memory form one group whose calls alternate (the policy is judged
/// against the other two, so they must see the same moments of the machine); every other
/// method is a group of its own, a block of calls.
fn policy_groups() -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (index, &method) in METHODS.iter().enumerate() {
        let memory = best_of_pack_and_gather(method);
        match groups
            .iter_mut()
            .find(|group| memory.is_some() && best_of_pack_and_gather(METHODS[group[0]]) == memory)
        {
            Some(group) => group.push(index),
            None => groups.push(vec![index]),
        }
    }
    groups
}

struct Subject {
    method: Method,
    registry: Option<Arc<Registry>>,
}

/// The methods measured, each with its own registry (if it registers) over `registrar`.
fn subjects(registrar: &Arc<dyn Registrar>) -> Result<Vec<Subject>, String> {
    METHODS
        .iter()
        .map(|&method| {
            let registry = match method.registration {
                Some((grouping, caching)) => Some(Arc::new(
                    Registry::new(registrar.clone(), Policy::new(grouping, caching))
                        .map_err(|err| format!("{}: registry: {err}", method.name))?,
                )),
                None => None,
            };
            Ok(Subject { method, registry })
        })
        .collect()
}

/// What the runs share: the one-server file, the methods and their groups, and the sweep's
/// settings.
struct Bench<'a> {
    client: &'a Client,
    file: &'a mut File,
    subjects: &'a [Subject],
    groups: &'a [Vec<usize>],
    repetitions: usize,
    call_budget: usize,
}

/// One matrix side's data: the n x n array of 4-byte elements (on the heap and in an
/// arena), the pieces of the subarray's rows, and the same bytes contiguous.
struct Subarray {
    n: usize,
    array: Vec<u8>,
    arena: Arena,
    pieces: Vec<(usize, usize)>,
    bytes: usize,
    contiguous: Vec<u8>,
    iterations: usize,
}

impl Subarray {
    fn new(n: usize, call_budget: usize) -> Result<Self, String> {
        let array = pattern(n as u64, n * n * ELEMENT_BYTES);
        let mut arena = Arena::new(array.len()).map_err(|err| format!("arena: {err}"))?;
        arena.as_mut_slice().copy_from_slice(&array);
        let pieces = rows(n);
        let bytes: usize = pieces.iter().map(|&(_, length)| length).sum();
        let contiguous: Vec<u8> = pieces
            .iter()
            .flat_map(|&(offset, length)| array[offset..offset + length].iter().copied())
            .collect();
        let iterations = (call_budget / bytes).clamp(2, 256);
        Ok(Self {
            n,
            array,
            arena,
            pieces,
            bytes,
            contiguous,
            iterations,
        })
    }

    /// The memory `method` writes from: the contiguous copy, or the rows' pieces of the heap
    /// array or of the arena.
    fn memory(&self, method: Method) -> Vec<IoSlice<'_>> {
        if method.contiguous {
            return vec![IoSlice::new(&self.contiguous)];
        }
        let source: &[u8] = if method.arena {
            self.arena.as_slice()
        } else {
            &self.array
        };
        self.pieces
            .iter()
            .map(|&(offset, length)| IoSlice::new(&source[offset..offset + length]))
            .collect()
    }
}

/// What one method's last block counted: requests and one-sided requests over its calls,
/// registrations and registration µs per call, and the transfer policy's decisions.
#[derive(Debug, Clone)]
struct Counted {
    requests: u64,
    one_sided: u64,
    registrations: u64,
    registration_us: f64,
    decided: (String, u64, u64, f64, f64, f64),
}

/// What one side measured: per method, per repetition, the seconds of every timed call, and
/// the method's last block's counts.
struct SideSamples {
    calls: Vec<Vec<Vec<f64>>>,
    last: Vec<Option<Counted>>,
}

/// Runs the experiment and writes its report.
pub fn run(common: &CommonArgs) -> Result<Outcome, String> {
    let (_cluster, client) = super::open_cluster(common, SERVERS)?;
    let path = format!("/bench/subarray-{}", std::process::id());
    let mut file = client
        .create(
            &path,
            &CreateOptions {
                stripe_unit_bytes: 64 << 20,
                server_count: 1,
                ..CreateOptions::default()
            },
        )
        .map_err(|err| format!("create {path}: {err}"))?;
    let (registrar, registrar_name) = common.registrar(super::RegistrarKind::Fixed)?;
    let subjects = subjects(&registrar)?;
    let groups = policy_groups();
    let sizes: &[usize] = if common.quick {
        &[512, 1024, 2048]
    } else {
        &[512, 1024, 2048, 4096]
    };
    // 11 quick repetitions: with 7, two blocks of the same mechanism (hybrid choosing pack,
    // and pack) still differed by up to 15 % in a run.
    let repetitions = if common.quick { 11 } else { 15 };
    let progress = Progress::new("subarray", (sizes.len() * (repetitions + 1) + 1) as u64);
    // A block of 64 MiB (quick) is 16-64 calls, tens of milliseconds: a block of 16 MiB
    // (4 calls at n=2048) was moved by one preemption.
    let call_budget = if common.quick { 64 << 20 } else { 128 << 20 };
    let mut rows_out = Vec::new();
    let mut verified = true;
    let mut bench = Bench {
        client: &client,
        file: &mut file,
        subjects: &subjects,
        groups: &groups,
        repetitions,
        call_budget,
    };
    for &n in sizes {
        rows_out.extend(bench.measure_side(n, &progress, &mut verified)?);
    }
    let raw = raw_case(&client, &mut file, common.quick, &mut verified)?;
    progress.step("transport");
    rows_out.extend(raw);
    let _ = client.unlink(&path);
    rows_out.extend(checks::measure(
        sizes,
        repetitions,
        call_budget,
        &mut verified,
        |n| progress.step(&format!("checks, n={n}")),
    )?);
    drop(progress);
    let report = Report {
        bench: "subarray",
        quick: common.quick,
        meta: Meta::now(repetitions),
        config: json!({
            "servers": SERVERS,
            "clients": 1,
            "transport": "local",
            "element_bytes": ELEMENT_BYTES,
            "registrar": registrar_name,
            "sizes": sizes,
            "repetitions": repetitions,
            "checks": "gather, checked and gather, unchecked: the same gather calls against one iod run inside the bench process, its checks of data requests (capabilities; the one-sided path's credentials, pins and stall watch) on and off (a switch no server option reaches), alternating call by call",
            "timing": "each repetition runs every method in turn (in an order shuffled anew per repetition from a fixed seed; pack, gather and hybrid of the same memory alternate call by call), a block of calls each after one untimed warm-up call; a repetition's figure is its median call, so a call that another tenant of the machine interrupted does not move it; the report gives the median over the repetitions and their range",
        }),
        verified,
        rows: rows_out,
    };
    let text = text(&report, sizes)?;
    report.finish(common, &text, &[figure(&report, sizes)?])
}

impl Bench<'_> {
    /// Every repetition of every group at side `n`, then the side's rows.
    fn measure_side(
        &mut self,
        n: usize,
        progress: &Progress,
        verified: &mut bool,
    ) -> Result<Vec<SubarrayRow>, String> {
        let side = Subarray::new(n, self.call_budget)?;
        let mut samples = SideSamples {
            calls: vec![Vec::new(); self.subjects.len()],
            last: vec![None; self.subjects.len()],
        };
        for repetition in 0..self.repetitions {
            for group in report::turn_order(repetition, self.groups.len()) {
                let members = &self.groups[group];
                self.measure_group(&side, members, repetition, &mut samples, verified)?;
            }
            progress.step(&format!("n={n}"));
        }
        side_rows(self.subjects, &side, &samples)
    }

    /// One block of one group in one repetition: an untimed warm-up call per member, the
    /// members' timed calls taking turns, then each member's counts and a check of what it
    /// wrote.
    fn measure_group(
        &mut self,
        side: &Subarray,
        members: &[usize],
        repetition: usize,
        samples: &mut SideSamples,
        verified: &mut bool,
    ) -> Result<(), String> {
        let memories: Vec<Vec<IoSlice<'_>>> = members
            .iter()
            .map(|&index| side.memory(self.subjects[index].method))
            .collect();
        let target = [Piece::new(0, side.bytes as u64)];
        let mut before = Vec::with_capacity(members.len());
        for (&index, memory) in members.iter().zip(&memories) {
            let subject = &self.subjects[index];
            self.file.set_transfer_policy(subject.method.policy);
            self.client.set_registration(subject.registry.clone());
            // Warm the connection and, for the cached method, the cache.
            self.file
                .write_list(memory, &target)
                .map_err(|err| err.to_string())?;
            before.push(subject.registry.as_ref().map(|registry| registry.stats()));
        }
        let mut timed = self.timed_calls(side, members, &memories, repetition)?;
        self.client.set_registration(None);
        for (member, &index) in members.iter().enumerate() {
            let subject = &self.subjects[index];
            samples.calls[index].push(std::mem::take(&mut timed.calls[member]));
            let decided = decisions_over(&timed.spans[member]);
            let (registrations, registration_us) = match (&subject.registry, before[member].take())
            {
                (Some(registry), Some(before)) => {
                    let after = registry.stats();
                    (
                        (after.registrations - before.registrations) / side.iterations as u64,
                        (after.registration_us + after.deregistration_us
                            - before.registration_us
                            - before.deregistration_us)
                            / side.iterations as f64,
                    )
                }
                _ => (0, 0.0),
            };
            samples.last[index] = Some(Counted {
                requests: timed.requests[member],
                one_sided: timed.one_sided[member],
                registrations,
                registration_us,
                decided,
            });
            // The registrars share one array: a cache left holding its rows locked would
            // make the next method's mlock of them nearly free.
            if let Some(registry) = &subject.registry {
                registry
                    .clear()
                    .map_err(|err| format!("{}: {err}", subject.method.name))?;
            }
            *verified &=
                self.read_back_matches(side, subject, members.len() > 1, &memories[member])?;
        }
        Ok(())
    }

    /// The timed calls of one block: the members of a group take turns call by call (one
    /// member: a block of calls), so a drift of the machine falls on all of them alike; in
    /// an order shuffled per round, since each call leaves the caches to the next one (in a
    /// rotation, hybrid choosing pack mostly followed gather, and pack followed hybrid's
    /// pack, which measured the same mechanism 5 % apart at n=2048).
    fn timed_calls(
        &mut self,
        side: &Subarray,
        members: &[usize],
        memories: &[Vec<IoSlice<'_>>],
        repetition: usize,
    ) -> Result<TimedCalls, String> {
        let iterations = side.iterations;
        let target = [Piece::new(0, side.bytes as u64)];
        let mut timed = TimedCalls {
            requests: vec![0; members.len()],
            one_sided: vec![0; members.len()],
            calls: vec![Vec::with_capacity(iterations); members.len()],
            spans: vec![Vec::with_capacity(iterations); members.len()],
        };
        for iteration in 0..iterations {
            let round = repetition * iterations + iteration;
            for member in report::turn_order(round, members.len()) {
                let subject = &self.subjects[members[member]];
                if members.len() > 1 {
                    self.file.set_transfer_policy(subject.method.policy);
                    self.client.set_registration(subject.registry.clone());
                }
                let decided_before = decision_stats();
                let start = Instant::now();
                let report = self
                    .file
                    .write_list(&memories[member], &target)
                    .map_err(|err| format!("{}: {err}", subject.method.name))?;
                timed.calls[member].push(start.elapsed().as_secs_f64());
                timed.spans[member].push((decided_before, decision_stats()));
                timed.requests[member] += report.requests;
                timed.one_sided[member] += report.one_sided;
            }
        }
        Ok(timed)
    }

    /// Reads the subarray back through a plain gather and compares it with what was written
    /// (in a group, after one more untimed write by this member: the last timed call was
    /// another's).
    fn read_back_matches(
        &mut self,
        side: &Subarray,
        subject: &Subject,
        grouped: bool,
        memory: &[IoSlice<'_>],
    ) -> Result<bool, String> {
        let target = [Piece::new(0, side.bytes as u64)];
        if grouped {
            self.file.set_transfer_policy(subject.method.policy);
            self.file
                .write_list(memory, &target)
                .map_err(|err| format!("{}: {err}", subject.method.name))?;
        }
        self.file.set_transfer_policy(TransferPolicy::Auto);
        let mut back = vec![0u8; side.bytes];
        self.file
            .read_list(&mut [IoSliceMut::new(&mut back)], &target)
            .map_err(|err| err.to_string())?;
        Ok(back == side.contiguous)
    }
}

/// What one block's timed calls counted, per member.
struct TimedCalls {
    requests: Vec<u64>,
    one_sided: Vec<u64>,
    calls: Vec<Vec<f64>>,
    spans: Vec<Vec<(DecisionStats, DecisionStats)>>,
}

/// The rows of one side: per method, the median over the repetitions of its median call,
/// its speed paired with the better of pack and gather, and its last block's counts.
fn side_rows(
    subjects: &[Subject],
    side: &Subarray,
    samples: &SideSamples,
) -> Result<Vec<SubarrayRow>, String> {
    let (n, bytes, iterations) = (side.n, side.bytes, side.iterations);
    let medians = samples
        .calls
        .iter()
        .map(|calls| repetition_medians(calls))
        .collect::<Result<Vec<_>, String>>()
        .map_err(|err| format!("bench subarray: case \"n={n}\": {err}"))?;
    let mut rows_out = Vec::with_capacity(subjects.len());
    for (index, subject) in subjects.iter().enumerate() {
        let name = subject.method.name;
        let unmeasured =
            |err: String| format!("bench subarray: case \"n={n}\", method \"{name}\": {err}");
        let seconds = Spread::of(&medians[index]).map_err(unmeasured)?;
        let paired_vs_best = best_of_pack_and_gather(subject.method)
            .map(|(pack, gather)| {
                let position = |name: &str| {
                    METHODS
                        .iter()
                        .position(|method| method.name == name)
                        .ok_or_else(|| unmeasured(format!("no method {name}")))
                };
                let (pack, gather) = (&medians[position(pack)?], &medians[position(gather)?]);
                let best: Vec<f64> = pack.iter().zip(gather).map(|(p, g)| p.min(*g)).collect();
                Ok::<f64, String>(report::paired_ratio(&best, &medians[index]))
            })
            .transpose()?;
        let counted = samples.last[index]
            .clone()
            .ok_or_else(|| unmeasured("not measured".to_owned()))?;
        let (chosen, within_margin, learned, predicted_us, predicted_worst_us, measured_us) =
            counted.decided;
        rows_out.push(SubarrayRow {
            part: Part::Subarray,
            n: Some(n),
            method: name.to_owned(),
            memory: if subject.method.arena {
                Memory::Arena
            } else {
                Memory::Heap
            },
            measure: Measure::of_seconds(seconds, bytes as u64),
            requests: counted.requests / iterations as u64,
            pieces: 1,
            memory_pieces: if subject.method.contiguous {
                1
            } else {
                side.pieces.len() as u64
            },
            piece_bytes: if subject.method.contiguous {
                bytes
            } else {
                n / 2 * ELEMENT_BYTES
            },
            bytes: bytes as u64,
            one_sided: counted.one_sided > 0,
            registrations: counted.registrations,
            registration_us: counted.registration_us,
            chosen,
            within_margin,
            learned,
            predicted_us,
            predicted_worst_us,
            measured_us,
            paired_vs_best,
            paired_vs_unchecked: None,
        });
    }
    Ok(rows_out)
}

/// 64 KiB pieces read over `local` vs. raw `process_vm_writev` of the same pieces.
fn raw_case(
    client: &Client,
    file: &mut File,
    quick: bool,
    verified: &mut bool,
) -> Result<Vec<SubarrayRow>, String> {
    const PIECE: usize = 64 << 10;
    let count = if quick { 128 } else { 256 };
    let bytes = PIECE * count;
    let data = pattern(99, bytes);
    file.set_transfer_policy(TransferPolicy::Force(Mechanism::Gather));
    client.set_registration(None);
    file.write_list(&[IoSlice::new(&data)], &[Piece::new(0, bytes as u64)])
        .map_err(|err| err.to_string())?;
    // Client memory: 64 KiB pieces with 4 KiB gaps.
    let mut memory = vec![0u8; count * (PIECE + 4096)];
    let repetitions = if quick { 15 } else { 31 };
    let (mut local, mut raw) = (Vec::new(), Vec::new());
    let source = pattern(5, bytes);
    // Both timed copies start with cold caches: the verification between them reads the
    // client's memory and the raw copy's source, which would leave the raw copy (this
    // process, this core) a warm source and target and the server's copy neither.
    let mut scratch = vec![1u8; EVICT_BYTES];
    for _ in 0..repetitions {
        {
            let mut slices: Vec<IoSliceMut<'_>> = memory
                .chunks_mut(PIECE + 4096)
                .map(|chunk| IoSliceMut::new(&mut chunk[..PIECE]))
                .collect();
            evict(&mut scratch);
            let start = Instant::now();
            file.read_list(&mut slices, &[Piece::new(0, bytes as u64)])
                .map_err(|err| err.to_string())?;
            local.push(start.elapsed().as_secs_f64());
        }
        let ok = memory
            .chunks(PIECE + 4096)
            .zip(data.chunks(PIECE))
            .all(|(got, want)| &got[..PIECE] == want);
        *verified &= ok;
        // The kernel alone: the same pieces, this process to itself.
        let targets: Vec<Segment> = memory
            .chunks(PIECE + 4096)
            .map(|chunk| Segment::new(chunk.as_ptr() as usize, PIECE))
            .collect();
        evict(&mut scratch);
        let start = Instant::now();
        raw_writev(&source, &targets)?;
        raw.push(start.elapsed().as_secs_f64());
        let ok = memory
            .chunks(PIECE + 4096)
            .zip(source.chunks(PIECE))
            .all(|(got, want)| &got[..PIECE] == want);
        *verified &= ok;
    }
    let row = |method: &str, samples: &[f64], requests: u64| -> Result<SubarrayRow, String> {
        let seconds = Spread::of(samples).map_err(|err| {
            format!("bench subarray: case \"64 KiB pieces\", method \"{method}\": {err}")
        })?;
        let measure = Measure::of_seconds(seconds, bytes as u64);
        Ok(SubarrayRow {
            requests,
            memory_pieces: count as u64,
            piece_bytes: PIECE,
            one_sided: requests > 0,
            ..SubarrayRow::plain(Part::Transport, None, method, measure, bytes as u64)
        })
    };
    Ok(vec![
        row("local read", &local, 1)?,
        row("raw process_vm_writev", &raw, 0)?,
    ])
}

/// Bytes written between timed copies to push earlier data out of the caches (more than the
/// per-core L2 and the data of one copy together).
const EVICT_BYTES: usize = 32 << 20;

/// Writes all of `scratch`, evicting what the caches held.
fn evict(scratch: &mut [u8]) {
    let next = scratch[0].wrapping_add(1);
    scratch.fill(next);
    std::hint::black_box(&scratch);
}

/// `process_vm_writev` of `source` into `targets` of this process, 1024 pieces a call.
fn raw_writev(source: &[u8], targets: &[Segment]) -> Result<(), String> {
    let segments: Vec<tessera_proto::RemoteSegment> = targets
        .iter()
        .map(|segment| tessera_proto::RemoteSegment {
            address: segment.address as u64,
            length: segment.length as u64,
            key: 0,
        })
        .collect();
    tessera_net::local::rma::push(std::process::id(), source, &segments, 0)
        .map(|_| ())
        .map_err(|err| err.to_string())
}

/// The paper's table: MiB/s per method and n, then the transport case.
fn text(report: &Report<SubarrayRow>, sizes: &[usize]) -> Result<String, String> {
    let mut header = vec!["method".to_owned()];
    header.extend(sizes.iter().map(|n| format!("n={n}")));
    let mut table = report::table(header);
    for method in METHODS {
        let mut cells = vec![method.name.to_owned()];
        for &n in sizes {
            let row = report.row(&case(Part::Subarray, Some(n)), method.name)?;
            cells.push(report::cell(row.measure.mib_s, 0));
        }
        table.add_row(cells);
    }
    let mut decisions = report::table([
        "n",
        "method",
        "chosen (requests of the last repetition)",
        "margin",
        "learned",
        "predicted µs",
        "worst µs",
        "measured µs",
        "/ best of pack, gather",
        "paired",
    ]);
    for &n in sizes {
        for (method, pack, gather) in [
            ("hybrid", "pack", "gather"),
            ("hybrid, arena", "pack, arena", "gather, arena"),
            ("pack", "pack", "gather"),
            ("gather", "pack", "gather"),
        ] {
            let case = case(Part::Subarray, Some(n));
            let row = report.row(&case, method)?;
            let best = report
                .row(&case, pack)?
                .measure
                .mib_s
                .max(report.row(&case, gather)?.measure.mib_s);
            decisions.add_row([
                n.to_string(),
                method.to_owned(),
                row.chosen.clone(),
                row.within_margin.to_string(),
                row.learned.to_string(),
                report::cell(row.predicted_us, 0),
                report::cell(row.predicted_worst_us, 0),
                report::cell(row.measured_us, 0),
                report::ratio(row.measure.mib_s, best),
                row.paired_vs_best
                    .map_or_else(|| "-".to_owned(), |paired| format!("{paired:.2}x")),
            ]);
        }
    }
    let mut transport = report::table(["64 KiB pieces", "MiB/s", "min", "max"]);
    for method in ["local read", "raw process_vm_writev"] {
        let row = report.row(&case(Part::Transport, None), method)?;
        transport.add_row([
            method.to_owned(),
            report::cell(row.measure.mib_s, 0),
            report::cell(row.measure.mib_s_min, 0),
            report::cell(row.measure.mib_s_max, 0),
        ]);
    }
    let mut checks = report::table([
        "n",
        "gather, checked",
        "gather, unchecked",
        "ratio",
        "paired",
    ]);
    for &n in sizes {
        let case = case(Part::Checks, Some(n));
        let checked = report.row(&case, checks::METHODS[0])?;
        let unchecked = report.row(&case, checks::METHODS[1])?;
        checks.add_row([
            n.to_string(),
            report::cell(checked.measure.mib_s, 0),
            report::cell(unchecked.measure.mib_s, 0),
            report::ratio(checked.measure.mib_s, unchecked.measure.mib_s),
            checked
                .paired_vs_unchecked
                .map_or_else(|| "-".to_owned(), |paired| format!("{paired:.3}x")),
        ]);
    }
    Ok(format!(
        "subarray (seed 000 Fig. 3): one (n/2 x n/2)-int subarray client -> server, MiB/s (median of {} repetitions)\n{table}\n\
         transfer policy, per request (model: typical and worst-case transfer; measured: send to reply)\n{decisions}\n{transport}\n\
         checks of data requests (capabilities, one-sided credentials and pins), gather against an iod in the bench process, MiB/s:\n{checks}\n\
         paper: gather/pack grows with size; hybrid follows the better of the two\n\
         arena rows: the array in a shared arena (the local backend's registered memory), which the server reaches with plain copies\n\
         verified: {}\n",
        report.meta.repetitions, report.verified
    ))
}

/// 000 Fig. 3: MiB/s against the array side, one line per method.
fn figure(report: &Report<SubarrayRow>, sizes: &[usize]) -> Result<Figure, String> {
    let mut panel = Panel::new(
        "one subarray, client -> server over local",
        ("array side n (ints)", Scale::Log2),
        ("MiB/s", Scale::Linear),
    );
    for method in METHODS {
        let mut points = Vec::new();
        for &n in sizes {
            let row = report.row(&case(Part::Subarray, Some(n)), method.name)?;
            points.push(row.measure.point(n as f64));
        }
        panel.lines.push(Line {
            name: method.name.to_owned(),
            points,
        });
    }
    Ok(Figure {
        stem: "subarray".to_owned(),
        title: format!(
            "subarray: (n/2 x n/2) ints as one list call (median, min-max of {} repetitions)",
            report.meta.repetitions
        ),
        panels: vec![panel],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_gather_and_hybrid_of_one_memory_share_a_group_and_every_method_runs_once() {
        let names = |group: &Vec<usize>| -> Vec<&str> {
            group.iter().map(|&index| METHODS[index].name).collect()
        };
        let groups = policy_groups();
        let grouped: Vec<Vec<&str>> = groups
            .iter()
            .filter(|group| group.len() > 1)
            .map(names)
            .collect();
        assert_eq!(
            grouped,
            [
                vec!["pack", "gather", "hybrid"],
                vec!["pack, arena", "gather, arena", "hybrid, arena"]
            ]
        );
        let mut all: Vec<usize> = groups.into_iter().flatten().collect();
        all.sort_unstable();
        assert_eq!(all, (0..METHODS.len()).collect::<Vec<_>>());
    }
}
