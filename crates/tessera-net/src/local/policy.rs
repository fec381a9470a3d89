//! The transfer policy: per request, which mechanism moves the bulk data, chosen by a cost
//! model whose parameters are measured on this machine (seed 000 §4, seed 001 §2.5 and ch. 3).
//!
//! The mechanisms, for a request of `bytes` data bytes in `segments` memory slices:
//! - **inline**: the data rides in the request or reply frame (copied through the socket);
//! - **eager**: the client copies the data into (or out of) the connection's eager buffer,
//!   which the server has mapped (seed 001's Fast RDMA; requests up to `EAGER_BYTES_MAX`);
//! - **pack**: the client packs the slices into one buffer, the server moves it with one
//!   one-sided call (one extra copy, one segment);
//! - **gather**: the server moves the slices themselves, up to [`IOV_PIECES_MAX`] per call
//!   (no extra copy, a per-segment cost in the kernel);
//! - **multiple**: one one-sided call per slice (the baseline the seeds beat).
//!
//! Over TCP there is no one-sided path; the mechanisms map onto the framed modes (inline and
//! gather = `writev` from the slices, pack = one packed frame, multiple = one frame per piece).
//! The model is measured once per process, when the first same-host connection is made (or on
//! first use), in a few milliseconds: packing bandwidth, and `process_vm_readv` from this
//! process into itself for the per-call cost, the per-segment cost and the bandwidth, each
//! probe repeated and every parameter kept with its spread ([`Band`]). The policy decides with
//! margins ([`TransferModel::decide`]): among mechanisms within the model's error of the
//! cheapest, the lowest worst case wins, so a noisy calibration does not flip the choice
//! between near-equal mechanisms, and there the process's own measurements of whole requests
//! of the same size class correct it online ([`Learner`]). Each one-sided request's
//! [`Decision`] is counted, with its measured time, in [`decision_stats`].

use std::sync::OnceLock;
use std::time::Instant;

mod learn;

pub use learn::{
    size_class, Learner, SizeClass, LEARNED_CLASSES_MAX, LEARN_REEXPLORE, LEARN_SAMPLES,
    LEARN_WINDOW,
};

use tessera_proto::limits::{EAGER_BYTES_MAX, IOV_PIECES_MAX};
use tessera_proto::{RemoteSegment, TransferMode};

/// Largest request whose data may travel inline, in the request or reply frame.
pub const INLINE_BYTES_MAX: u64 = 16 << 10;

/// A way to move one request's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// In the request or reply frame.
    Inline,
    /// Through the connection's pre-allocated shared buffer, one copy.
    Eager,
    /// Packed into one buffer, then moved as one piece.
    Pack,
    /// The slices themselves, many per call.
    Gather,
    /// One transfer per slice.
    Multiple,
}

impl Mechanism {
    /// Every mechanism, in the order benchmarks report them.
    pub const ALL: [Self; 5] = [
        Self::Multiple,
        Self::Pack,
        Self::Gather,
        Self::Inline,
        Self::Eager,
    ];

    /// The name used by options and benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            Self::Inline => "inline",
            Self::Eager => "eager",
            Self::Pack => "pack",
            Self::Gather => "gather",
            Self::Multiple => "multiple",
        }
    }

    /// Parses a name given by [`Mechanism::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|mechanism| mechanism.name() == name)
    }
}

/// How a file's transfers are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum TransferPolicy {
    /// The cost model picks per request (the hybrid scheme).
    #[default]
    Auto,
    /// Always this mechanism (for experiments).
    Force(Mechanism),
}

impl TransferPolicy {
    /// "auto" or a mechanism's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Force(mechanism) => mechanism.name(),
        }
    }

    /// Parses "auto" (also "hybrid") or a mechanism's name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "auto" | "hybrid" => Some(Self::Auto),
            _ => Mechanism::from_name(name).map(Self::Force),
        }
    }
}

/// How one request's bulk data travels, as decided for its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transfer {
    /// In frames over the stream, by this mode.
    Framed(TransferMode),
    /// Through the connection's eager buffer (one copy by this process), one-sided for the
    /// server; a connection without one packs instead.
    Eager,
    /// One-sided by the server, from or into this process's memory.
    Remote {
        /// Pack into (or unpack from) one buffer of this process, moved as one segment.
        pack: bool,
        /// Most segments per one-sided call (1: one call per segment; 0: the backend's most).
        segments_per_call: u16,
    },
}

impl Transfer {
    /// The mode the request message names.
    pub fn wire_mode(self) -> TransferMode {
        match self {
            Self::Framed(mode) => mode,
            Self::Remote { .. } | Self::Eager => TransferMode::Remote,
        }
    }

    /// What it is called in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Framed(TransferMode::Gather) => "inline",
            Self::Framed(TransferMode::Pack) => "pack (framed)",
            Self::Framed(TransferMode::Multiple) => "multiple (framed)",
            Self::Framed(TransferMode::Remote) => "remote",
            Self::Eager => "eager",
            Self::Remote { pack: true, .. } => "pack",
            Self::Remote {
                segments_per_call: 1,
                ..
            } => "multiple",
            Self::Remote { .. } => "gather",
        }
    }

    /// The transfer `mechanism` means over a connection that is (`one_sided`) or is not able
    /// to move data one-sidedly.
    pub fn of(mechanism: Mechanism, one_sided: bool) -> Self {
        match (mechanism, one_sided) {
            (Mechanism::Inline, _) | (Mechanism::Gather | Mechanism::Eager, false) => {
                Self::Framed(TransferMode::Gather)
            }
            (Mechanism::Eager, true) => Self::Eager,
            (Mechanism::Pack, false) => Self::Framed(TransferMode::Pack),
            (Mechanism::Multiple, false) => Self::Framed(TransferMode::Multiple),
            (Mechanism::Pack, true) => Self::Remote {
                pack: true,
                segments_per_call: 0,
            },
            (Mechanism::Gather, true) => Self::Remote {
                pack: false,
                segments_per_call: 0,
            },
            (Mechanism::Multiple, true) => Self::Remote {
                pack: false,
                segments_per_call: 1,
            },
        }
    }

    /// The transfer for a request of `bytes` data bytes in `segments` memory slices under
    /// `policy`. Over TCP `Auto` is gather (`writev`, no copy); one-sidedly the model decides.
    pub fn choose(policy: TransferPolicy, one_sided: bool, bytes: u64, segments: usize) -> Self {
        match policy {
            TransferPolicy::Force(mechanism) => Self::of(mechanism, one_sided),
            TransferPolicy::Auto if !one_sided => Self::Framed(TransferMode::Gather),
            TransferPolicy::Auto => Self::of(model().choose(bytes, segments), true),
        }
    }

    /// As [`Transfer::choose`], with the [`Decision`] of a one-sided request (the model's
    /// prediction for what was chosen or forced), for the caller to [`Decision::record`]
    /// with the request's measured time.
    pub fn decide(
        policy: TransferPolicy,
        one_sided: bool,
        bytes: u64,
        segments: usize,
    ) -> (Self, Option<Decision>) {
        if !one_sided {
            return (Self::choose(policy, false, bytes, segments), None);
        }
        let decision = match policy {
            TransferPolicy::Auto => model().decide_learning(bytes, segments),
            TransferPolicy::Force(mechanism) => Decision {
                mechanism,
                automatic: false,
                within_margin: false,
                cost: model().cost(mechanism, bytes, segments),
                class: None,
                learned: false,
            },
        };
        (Self::of(decision.mechanism, true), Some(decision))
    }
}

/// One calibrated parameter: the median of the calibration's repetitions and the range they
/// spanned, widened to at least [`MODEL_ERROR_MIN`] of the median either way.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Band {
    /// The smallest value the calibration saw (or the widened bound).
    pub low: f64,
    /// The median of the repetitions: the model's typical value.
    pub median: f64,
    /// The largest value the calibration saw (or the widened bound).
    pub high: f64,
}

impl Band {
    /// A parameter known to within [`MODEL_ERROR_MIN`] (the defaults, synthetic models).
    pub fn around(median: f64) -> Self {
        Self {
            low: median,
            median,
            high: median,
        }
        .widened()
    }

    /// A parameter with an explicit range (tests and synthetic models).
    pub fn new(low: f64, median: f64, high: f64) -> Self {
        Self { low, median, high }.widened()
    }

    /// The band of a calibration's samples, `None` if there are none. From
    /// [`BAND_TRIM_SAMPLES_MIN`] samples on, the most extreme sample at each end is left
    /// out: one page-faulting or preempted probe would otherwise set the worst case of every
    /// later decision.
    fn of(samples: &mut [f64]) -> Option<Self> {
        samples.sort_by(f64::total_cmp);
        let median = *samples.get(samples.len() / 2)?;
        let trim = usize::from(samples.len() >= BAND_TRIM_SAMPLES_MIN);
        Some(Self::new(
            samples[trim],
            median,
            samples[samples.len() - 1 - trim],
        ))
    }

    /// The band with its bounds at least [`MODEL_ERROR_MIN`] of the median away from it: a
    /// calibration of a few milliseconds on a quiet moment sees less spread than the load and
    /// cache state of later requests bring.
    fn widened(self) -> Self {
        let margin = self.median.abs() * MODEL_ERROR_MIN;
        Self {
            low: self.low.min(self.median - margin),
            median: self.median,
            high: self.high.max(self.median + margin),
        }
    }

    /// The relative error of the band: its larger distance from the median over the median.
    pub fn relative_error(&self) -> f64 {
        (self.high - self.median).max(self.median - self.low)
            / self.median.abs().max(f64::MIN_POSITIVE)
    }
}

/// Fewest samples of which [`Band::of`] leaves out the extreme one at each end.
pub const BAND_TRIM_SAMPLES_MIN: usize = 5;

const _: () = assert!(CALIBRATION_REPETITIONS >= BAND_TRIM_SAMPLES_MIN);

/// Least relative error the model assumes of every calibrated parameter (10 %).
pub const MODEL_ERROR_MIN: f64 = 0.10;

/// Which end of the model's error a cost is computed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// Every parameter at its favourable bound (fast copies, cheap calls).
    Best,
    /// Every parameter at its median.
    Typical,
    /// Every parameter at its unfavourable bound (slow copies, dear calls).
    Worst,
}

/// A mechanism's predicted cost for one request, µs, at the three cases of the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// The favourable bound.
    pub best_us: f64,
    /// The median prediction.
    pub typical_us: f64,
    /// The unfavourable bound: what the policy minimises among near-equal mechanisms.
    pub worst_us: f64,
}

/// The measured costs the policy compares (microseconds and bytes per microsecond), each
/// with the spread of its calibration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TransferModel {
    /// Packing bandwidth (allocate a buffer and copy scattered slices into it), bytes per µs.
    pub copy_bytes_per_us: Band,
    /// One-sided copy bandwidth, bytes per µs.
    pub remote_bytes_per_us: Band,
    /// Fixed cost of one one-sided call, µs.
    pub remote_call_us: Band,
    /// Cost of each segment in a one-sided call, µs.
    pub remote_segment_us: Band,
    /// Fixed cost of the one-sided part of a request (the server's extra work), µs.
    pub remote_request_us: f64,
}

impl Default for TransferModel {
    /// The figures measured on the development machine (2-core VM): about 11 GB/s `memcpy`,
    /// 7.7 GB/s one-sided, 0.22 µs per segment.
    fn default() -> Self {
        Self {
            copy_bytes_per_us: Band::around(11_000.0),
            remote_bytes_per_us: Band::around(7_700.0),
            remote_call_us: Band::around(1.0),
            remote_segment_us: Band::around(0.22),
            remote_request_us: 2.0,
        }
    }
}

/// One decision of the policy for a one-sided request: what was chosen and what the model
/// predicted for it. [`Decision::record`] adds it, with the request's measured time, to the
/// process's [`decision_stats`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    /// The mechanism that moves the request.
    pub mechanism: Mechanism,
    /// The model chose it (`TransferPolicy::Auto`), rather than the file forcing it.
    pub automatic: bool,
    /// Other mechanisms were within the model's error of the cheapest typical one, so the
    /// lowest worst case decided.
    pub within_margin: bool,
    /// The model's cost of the chosen mechanism.
    pub cost: Cost,
    /// The request's size class, where its measured time is learned from (the model's own
    /// decisions for process memory; `None` otherwise).
    pub class: Option<SizeClass>,
    /// The process's measurements chose among the near-equal mechanisms (or measured one
    /// that had too few), not the model's bounds.
    pub learned: bool,
}

impl TransferModel {
    /// Predicted µs to move `bytes` in `segments` slices by `mechanism` one-sidedly, with
    /// every parameter at its median.
    pub fn cost_us(&self, mechanism: Mechanism, bytes: u64, segments: usize) -> f64 {
        self.cost_at(mechanism, bytes, segments, Case::Typical)
    }

    /// The cost of `mechanism` at the best, typical and worst case of the model.
    pub fn cost(&self, mechanism: Mechanism, bytes: u64, segments: usize) -> Cost {
        Cost {
            best_us: self.cost_at(mechanism, bytes, segments, Case::Best),
            typical_us: self.cost_at(mechanism, bytes, segments, Case::Typical),
            worst_us: self.cost_at(mechanism, bytes, segments, Case::Worst),
        }
    }

    /// Predicted µs with every parameter at `case`: bandwidths at their low bound and
    /// per-call costs at their high bound for [`Case::Worst`], the other way for
    /// [`Case::Best`].
    pub fn cost_at(&self, mechanism: Mechanism, bytes: u64, segments: usize, case: Case) -> f64 {
        let rate = |band: &Band| match case {
            Case::Best => band.high,
            Case::Typical => band.median,
            Case::Worst => band.low,
        };
        let price = |band: &Band| match case {
            Case::Best => band.low,
            Case::Typical => band.median,
            Case::Worst => band.high,
        };
        let bytes = bytes as f64;
        let segments = segments.max(1) as f64;
        let copy = bytes / rate(&self.copy_bytes_per_us).max(f64::MIN_POSITIVE);
        let move_ = bytes / rate(&self.remote_bytes_per_us).max(f64::MIN_POSITIVE);
        let call = price(&self.remote_call_us);
        let segment = price(&self.remote_segment_us);
        match mechanism {
            // Through the socket: a copy into the kernel and one out, no one-sided step.
            Mechanism::Inline => 2.0 * copy,
            // One copy by the client; the server works on the shared buffer directly.
            Mechanism::Eager => copy,
            Mechanism::Pack => copy + self.remote_request_us + call + segment + move_,
            Mechanism::Gather => {
                let calls = (segments / IOV_PIECES_MAX as f64).ceil();
                self.remote_request_us + calls * call + segments * segment + move_
            }
            Mechanism::Multiple => self.remote_request_us + segments * (call + segment) + move_,
        }
    }

    /// The mechanism for a request (inline only up to [`INLINE_BYTES_MAX`], eager only up to
    /// [`EAGER_BYTES_MAX`]).
    pub fn choose(&self, bytes: u64, segments: usize) -> Mechanism {
        self.decide(bytes, segments).mechanism
    }

    /// Decides with margins. The *leader* is the candidate of lowest typical cost; every
    /// candidate whose best case is no dearer than the leader's worst case is within the
    /// model's error of it, and among those the one of lowest worst case is chosen (ties to
    /// the lower typical cost, then to the order of the candidates). A clear winner, whose
    /// worst case is below every other's best case, is chosen whatever the spread; between
    /// near-equal mechanisms the choice depends on the bounds of the error, not on where in
    /// it the medians of one calibration fell.
    pub fn decide(&self, bytes: u64, segments: usize) -> Decision {
        let contenders = self.contenders(bytes, segments);
        let (mechanism, cost) = contenders[0];
        Decision {
            mechanism,
            automatic: true,
            within_margin: contenders.len() > 1,
            cost,
            class: None,
            learned: false,
        }
    }

    /// [`TransferModel::decide`], corrected online: where the margin rule applies, what this
    /// process measured of whole requests of the same size class chooses among the
    /// near-equal mechanisms ([`Learner::pick`]).
    pub fn decide_learning(&self, bytes: u64, segments: usize) -> Decision {
        let contenders = self.contenders(bytes, segments);
        let class = size_class(bytes, segments);
        let (mut mechanism, mut cost) = contenders[0];
        let mut learned = false;
        if contenders.len() > 1 {
            let mechanisms: Vec<Mechanism> = contenders.iter().map(|&(m, _)| m).collect();
            if let Some(picked) = learn::with(|learner| learner.pick(class, &mechanisms)) {
                (mechanism, cost) = *contenders
                    .iter()
                    .find(|&&(m, _)| m == picked)
                    .expect("picked among the contenders");
                learned = true;
            }
        }
        Decision {
            mechanism,
            automatic: true,
            within_margin: contenders.len() > 1,
            cost,
            class: Some(class),
            learned,
        }
    }

    /// The candidates within the model's error of the cheapest (see [`TransferModel::decide`]),
    /// the lowest worst case first; never empty.
    fn contenders(&self, bytes: u64, segments: usize) -> Vec<(Mechanism, Cost)> {
        let mut candidates = vec![Mechanism::Gather, Mechanism::Pack];
        if bytes <= EAGER_BYTES_MAX {
            candidates.push(Mechanism::Eager);
        }
        if bytes <= INLINE_BYTES_MAX {
            candidates.push(Mechanism::Inline);
        }
        let costs: Vec<(Mechanism, Cost)> = candidates
            .into_iter()
            .map(|mechanism| (mechanism, self.cost(mechanism, bytes, segments)))
            .collect();
        let leader = costs
            .iter()
            .min_by(|a, b| a.1.typical_us.total_cmp(&b.1.typical_us))
            .map(|&(_, cost)| cost)
            .expect("two candidates at least");
        let mut contenders: Vec<(Mechanism, Cost)> = costs
            .into_iter()
            .filter(|(_, cost)| cost.best_us <= leader.worst_us)
            .collect();
        // Stable: equal costs keep the candidates' order.
        contenders.sort_by(|a, b| {
            a.1.worst_us
                .total_cmp(&b.1.worst_us)
                .then(a.1.typical_us.total_cmp(&b.1.typical_us))
        });
        contenders
    }

    /// Measures the model in this process (a few milliseconds): [`CALIBRATION_REPETITIONS`]
    /// timings of each probe after [`CALIBRATION_WARMUPS`] untimed rounds, each parameter
    /// kept as a [`Band`].
    pub fn measure() -> Self {
        let defaults = Self::default();
        // The packing probe copies what a pack does: 4 KiB slices 8 KiB apart into a fresh
        // buffer, so the source is not one warm stream and the target is allocated per call.
        let source = vec![7u8; 2 * MEASURE_BYTES];
        let slices: Vec<&[u8]> = source.chunks(8192).map(|chunk| &chunk[..4096]).collect();
        let mut target = vec![0u8; MEASURE_BYTES];
        let pid = std::process::id();
        let whole = [segment_of(&source[..MEASURE_BYTES])];
        let one_sided = super::rma::pull(pid, &whole, 0, &mut target).is_ok();
        // Many small segments in one call, each on a page of its own as scattered pieces
        // are: the per-segment cost, pinning its page included.
        let small: Vec<RemoteSegment> = source[..MEASURE_BYTES]
            .chunks(4096)
            .map(|page| segment_of(&page[..64]))
            .collect();
        let small_bytes = 64 * small.len();
        let mut samples: [Vec<f64>; 4] = Default::default();
        for repetition in 0..CALIBRATION_WARMUPS + CALIBRATION_REPETITIONS {
            let copy_us = time_us(|| {
                let mut packed = Vec::with_capacity(MEASURE_BYTES);
                for slice in &slices {
                    packed.extend_from_slice(slice);
                }
                std::hint::black_box(&packed);
            });
            let mut sample = [MEASURE_BYTES as f64 / copy_us.max(1e-3), 0.0, 0.0, 0.0];
            if one_sided {
                let move_us = time_us(|| {
                    let _ = super::rma::pull(pid, &whole, 0, &mut target);
                });
                let remote_bytes_per_us = MEASURE_BYTES as f64 / move_us.max(1e-3);
                let gathered_us = time_us(|| {
                    let _ = super::rma::pull(pid, &small, 0, &mut target[..small_bytes]);
                });
                // The same segments one call each: the per-call cost on top.
                let single_us = time_us(|| {
                    let _ = super::rma::pull(pid, &small, 1, &mut target[..small_bytes]);
                });
                let segments = small.len() as f64;
                let small_move_us = small_bytes as f64 / remote_bytes_per_us;
                sample[1] = remote_bytes_per_us;
                sample[2] = ((single_us - gathered_us) / segments).max(0.05);
                sample[3] = ((gathered_us - small_move_us) / segments).max(0.01);
            }
            // The first rounds only warm the caches and the allocator (the first packs grow
            // the heap and fault its pages in, once per process).
            if repetition >= CALIBRATION_WARMUPS {
                for (kept, value) in samples.iter_mut().zip(sample) {
                    kept.push(value);
                }
            }
        }
        let [copy, remote, call, segment] = &mut samples;
        let copy_bytes_per_us = Band::of(copy).unwrap_or(defaults.copy_bytes_per_us);
        if !one_sided {
            // No one-sided copies in this process (a sandbox): nothing more to measure; the
            // connections will find the same and fall back to messages.
            return Self {
                copy_bytes_per_us,
                ..defaults
            };
        }
        Self {
            copy_bytes_per_us,
            remote_bytes_per_us: Band::of(remote).unwrap_or(defaults.remote_bytes_per_us),
            remote_call_us: Band::of(call).unwrap_or(defaults.remote_call_us),
            remote_segment_us: Band::of(segment).unwrap_or(defaults.remote_segment_us),
            remote_request_us: defaults.remote_request_us,
        }
    }
}

/// Timed repetitions of each calibration probe.
pub const CALIBRATION_REPETITIONS: usize = 7;

/// Untimed rounds of the probes before the timed ones.
pub const CALIBRATION_WARMUPS: usize = 2;

impl Decision {
    /// Adds this decision to the process's [`decision_stats`], with the request's measured
    /// time from its send to its reply, if it got one.
    pub fn record(self, measured_us: Option<f64>) {
        let mut stats = DECISIONS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let index = Mechanism::ALL
            .iter()
            .position(|&mechanism| mechanism == self.mechanism)
            .expect("every mechanism is in ALL");
        let counts = if self.automatic {
            &mut stats.automatic[index]
        } else {
            &mut stats.forced[index]
        };
        counts.requests += 1;
        counts.within_margin += u64::from(self.within_margin);
        counts.learned += u64::from(self.learned);
        counts.predicted_us += self.cost.typical_us;
        counts.predicted_worst_us += self.cost.worst_us;
        if let Some(measured_us) = measured_us {
            counts.measured += 1;
            counts.measured_us += measured_us;
        }
        drop(stats);
        if let (true, Some(class), Some(measured_us)) = (self.automatic, self.class, measured_us) {
            learn::with(|learner| learner.record(class, self.mechanism, measured_us));
        }
    }
}

/// The one-sided requests of one mechanism, as [`decision_stats`] counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DecisionCounts {
    /// Requests moved by the mechanism.
    pub requests: u64,
    /// Of those, the requests where the margin rule decided (automatic requests only).
    pub within_margin: u64,
    /// Of those, the requests the process's measurements chose ([`Learner`]).
    pub learned: u64,
    /// Sum of the model's typical cost of the requests, µs.
    pub predicted_us: f64,
    /// Sum of the model's worst-case cost of the requests, µs.
    pub predicted_worst_us: f64,
    /// Requests whose time was measured (those that got a reply).
    pub measured: u64,
    /// Sum of their measured times from send to reply, µs (the whole request: the storage
    /// call and the round trip as well as the transfer the model prices).
    pub measured_us: f64,
}

/// The policy's decisions since the process started, per mechanism in the order of
/// [`Mechanism::ALL`]: those the model made and those the file forced. Fixed size; the sums
/// only grow.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DecisionStats {
    /// Requests under [`TransferPolicy::Auto`].
    pub automatic: [DecisionCounts; 5],
    /// Requests under [`TransferPolicy::Force`].
    pub forced: [DecisionCounts; 5],
}

static DECISIONS: std::sync::Mutex<DecisionStats> = std::sync::Mutex::new(DecisionStats {
    automatic: [DecisionCounts::ZERO; 5],
    forced: [DecisionCounts::ZERO; 5],
});

impl DecisionCounts {
    const ZERO: Self = Self {
        requests: 0,
        within_margin: 0,
        learned: 0,
        predicted_us: 0.0,
        predicted_worst_us: 0.0,
        measured: 0,
        measured_us: 0.0,
    };
}

/// The decisions of this process so far (take two and subtract to see one span's).
pub fn decision_stats() -> DecisionStats {
    *DECISIONS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The model of this process, measured on first use.
pub fn model() -> &'static TransferModel {
    static MODEL: OnceLock<TransferModel> = OnceLock::new();
    MODEL.get_or_init(|| {
        let model = TransferModel::measure();
        tracing::debug!("transfer model measured: {model:?}");
        model
    })
}

fn segment_of(bytes: &[u8]) -> RemoteSegment {
    RemoteSegment {
        address: bytes.as_ptr() as u64,
        length: bytes.len() as u64,
        key: 0,
    }
}

/// Bytes each bandwidth probe of [`TransferModel::measure`] moves: large enough to stream,
/// small enough that the whole measurement stays within a few milliseconds.
const MEASURE_BYTES: usize = 1 << 20;

/// One timing of `work`, in µs.
fn time_us(work: impl FnOnce()) -> f64 {
    let start = Instant::now();
    work();
    start.elapsed().as_secs_f64() * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_requests_go_eager_small_pieces_pack_and_large_pieces_gather() {
        let model = TransferModel::default();
        // Up to the eager buffer's size, one copy into it beats every one-sided call and
        // inline's two copies.
        assert_eq!(model.choose(512, 4), Mechanism::Eager);
        assert_eq!(model.choose(EAGER_BYTES_MAX, 1024), Mechanism::Eager);
        assert_eq!(model.choose(EAGER_BYTES_MAX, 1), Mechanism::Eager);
        // 4096 pieces of 256 bytes: copying 1 MiB is cheaper than 4096 segment costs.
        assert_eq!(model.choose(1 << 20, 4096), Mechanism::Pack);
        assert_eq!(model.choose(EAGER_BYTES_MAX + 1, 1024), Mechanism::Pack);
        // 64 pieces of 64 KiB: the copy costs far more than 64 segments.
        assert_eq!(model.choose(4 << 20, 64), Mechanism::Gather);
        assert!(
            model.cost_us(Mechanism::Eager, 4096, 1) < model.cost_us(Mechanism::Inline, 4096, 1)
        );
    }

    #[test]
    fn forced_mechanisms_map_onto_each_backend() {
        for mechanism in Mechanism::ALL {
            let framed = Transfer::choose(TransferPolicy::Force(mechanism), false, 1 << 20, 8);
            assert!(
                matches!(framed, Transfer::Framed(_)),
                "{mechanism:?} over tcp"
            );
            let local = Transfer::choose(TransferPolicy::Force(mechanism), true, 1 << 20, 8);
            assert_eq!(
                matches!(local, Transfer::Remote { .. } | Transfer::Eager),
                mechanism != Mechanism::Inline,
                "{mechanism:?} over local"
            );
        }
        assert_eq!(
            Transfer::of(Mechanism::Multiple, true),
            Transfer::Remote {
                pack: false,
                segments_per_call: 1
            }
        );
        assert_eq!(Transfer::of(Mechanism::Multiple, true).name(), "multiple");
        assert_eq!(
            TransferPolicy::from_name("hybrid"),
            Some(TransferPolicy::Auto)
        );
        assert_eq!(
            TransferPolicy::from_name("gather"),
            Some(TransferPolicy::Force(Mechanism::Gather))
        );
        assert_eq!(
            TransferPolicy::from_name("eager"),
            Some(TransferPolicy::Force(Mechanism::Eager))
        );
        assert_eq!(Transfer::of(Mechanism::Eager, true), Transfer::Eager);
        assert_eq!(TransferPolicy::from_name("fast"), None);
    }

    #[test]
    fn measured_model_is_sane() {
        let model = TransferModel::measure();
        eprintln!("{model:?}");
        assert!(model.copy_bytes_per_us.median > 100.0, "{model:?}");
        assert!(model.remote_bytes_per_us.median > 100.0, "{model:?}");
        assert!(model.remote_segment_us.median < 50.0, "{model:?}");
        for band in [
            model.copy_bytes_per_us,
            model.remote_bytes_per_us,
            model.remote_call_us,
            model.remote_segment_us,
        ] {
            assert!(
                band.low < band.median && band.median < band.high,
                "{band:?}"
            );
            assert!(band.relative_error() >= MODEL_ERROR_MIN * 0.999, "{band:?}");
        }
    }

    #[test]
    fn a_band_keeps_the_spread_of_its_samples_and_at_least_the_least_error() {
        // The extreme sample at each end is left out from five samples on.
        let band = Band::of(&mut [9.0, 5.0, 10.0, 13.0, 30.0]).unwrap();
        assert_eq!((band.low, band.median, band.high), (9.0, 10.0, 13.0));
        assert!((band.relative_error() - 0.3).abs() < 1e-12);
        let few = Band::of(&mut [5.0, 10.0, 30.0]).unwrap();
        assert_eq!((few.low, few.median, few.high), (5.0, 10.0, 30.0));
        // Samples that agree still get the least error either way.
        let tight = Band::of(&mut [100.0, 100.0, 100.0]).unwrap();
        assert!((tight.low - 90.0).abs() < 1e-9 && (tight.high - 110.0).abs() < 1e-9);
        assert_eq!(Band::of(&mut []), None);
    }

    /// A model whose packing bandwidth and per-segment cost have the wide spread of a loaded
    /// machine, with their medians at `copy` and `segment`.
    /// Where the margin rule applies, the process's measurements of whole requests decide:
    /// each near-equal mechanism is measured, then the faster one is kept, whatever the
    /// model preferred. (A size class of its own: the learner is the process's.)
    #[test]
    fn near_equal_mechanisms_are_settled_by_measured_requests() {
        let model = noisy(10_000.0, 0.22);
        // 2^30 bytes in 2^18 segments: a class no other test uses.
        let (bytes, segments) = (1 << 30, 1 << 18);
        let first = model.decide_learning(bytes, segments);
        assert!(first.within_margin && first.learned, "{first:?}");
        assert_eq!(first.class, Some((30, 18)));
        // The contenders take turns, the model's preference first, and it is found slow.
        let preferred = model.decide(bytes, segments).mechanism;
        assert_eq!(first.mechanism, preferred);
        let other = if preferred == Mechanism::Pack {
            Mechanism::Gather
        } else {
            Mechanism::Pack
        };
        for _ in 0..LEARN_SAMPLES {
            let decision = model.decide_learning(bytes, segments);
            assert_eq!(decision.mechanism, preferred);
            decision.record(Some(5_000.0));
            let decision = model.decide_learning(bytes, segments);
            assert_eq!(decision.mechanism, other);
            decision.record(Some(1_000.0));
        }
        let settled = model.decide_learning(bytes, segments);
        assert_eq!(settled.mechanism, other);
        assert!(settled.learned);
        // A clear winner is the model's alone (measured, but not learned from the margin).
        let clear = model.decide_learning(64 << 20, 1);
        assert!(!clear.within_margin && !clear.learned, "{clear:?}");
    }

    fn noisy(copy: f64, segment: f64) -> TransferModel {
        TransferModel {
            copy_bytes_per_us: Band::new(7_000.0, copy, 14_000.0),
            remote_bytes_per_us: Band::new(6_000.0, 7_700.0, 9_000.0),
            remote_call_us: Band::new(0.8, 1.0, 1.3),
            remote_segment_us: Band::new(0.15, segment, 0.35),
            remote_request_us: 2.0,
        }
    }

    #[test]
    fn a_noisy_model_does_not_flip_between_near_equal_methods() {
        // 512 pieces of 2 KiB (subarray n = 1024): pack's copy and gather's segments cost
        // about the same, and calibrations put their medians anywhere in their bands.
        let (bytes, segments) = (1 << 20, 512);
        let mut by_median = std::collections::HashSet::new();
        let mut by_margin = std::collections::HashSet::new();
        for step in 0..=12 {
            let copy = 7_500.0 + 500.0 * f64::from(step);
            for segment in [0.18, 0.22, 0.26, 0.30] {
                let model = noisy(copy, segment);
                let typical = [Mechanism::Pack, Mechanism::Gather]
                    .into_iter()
                    .min_by(|a, b| {
                        model
                            .cost_us(*a, bytes, segments)
                            .total_cmp(&model.cost_us(*b, bytes, segments))
                    })
                    .unwrap();
                by_median.insert(typical);
                let decision = model.decide(bytes, segments);
                assert!(decision.within_margin, "copy {copy}, segment {segment}");
                by_margin.insert(decision.mechanism);
            }
        }
        // The medians alone flip with the calibration; the margin rule does not.
        assert_eq!(by_median.len(), 2, "{by_median:?}");
        assert_eq!(
            by_margin.into_iter().collect::<Vec<_>>(),
            vec![Mechanism::Pack]
        );
    }

    #[test]
    fn a_clear_winner_still_wins_under_noise() {
        for (copy, segment) in [(7_500.0, 0.18), (13_500.0, 0.30), (10_000.0, 0.22)] {
            let model = noisy(copy, segment);
            // 4096 pieces of 256 bytes: 4096 segment costs dwarf one copy of 1 MiB.
            let many = model.decide(1 << 20, 4096);
            assert_eq!(many.mechanism, Mechanism::Pack, "copy {copy}");
            assert!(!many.within_margin);
            // 16 pieces of 256 KiB: copying 4 MiB dwarfs 16 segments.
            let large = model.decide(4 << 20, 16);
            assert_eq!(large.mechanism, Mechanism::Gather, "copy {copy}");
            assert!(!large.within_margin);
            // Small requests still go through the eager buffer.
            assert_eq!(model.decide(4096, 8).mechanism, Mechanism::Eager);
        }
    }

    #[test]
    fn decisions_are_counted_with_their_prediction_and_measured_time() {
        let before = decision_stats();
        let (transfer, decision) = Transfer::decide(TransferPolicy::Auto, true, 4096, 2);
        let decision = decision.expect("a one-sided request has a decision");
        assert_eq!(transfer, Transfer::Eager);
        decision.record(Some(7.5));
        let (_, forced) = Transfer::decide(TransferPolicy::Force(Mechanism::Pack), true, 1, 1);
        forced
            .expect("forced one-sided requests are counted too")
            .record(None);
        assert_eq!(
            Transfer::decide(TransferPolicy::Auto, false, 4096, 2).1,
            None,
            "framed requests have no model decision"
        );
        let after = decision_stats();
        let eager = Mechanism::ALL
            .iter()
            .position(|&m| m == Mechanism::Eager)
            .unwrap();
        let pack = Mechanism::ALL
            .iter()
            .position(|&m| m == Mechanism::Pack)
            .unwrap();
        assert_eq!(
            after.automatic[eager].requests,
            before.automatic[eager].requests + 1
        );
        assert_eq!(
            after.automatic[eager].measured,
            before.automatic[eager].measured + 1
        );
        assert!(
            (after.automatic[eager].measured_us - before.automatic[eager].measured_us - 7.5).abs()
                < 1e-9
        );
        assert!(after.automatic[eager].predicted_us > before.automatic[eager].predicted_us);
        assert_eq!(
            after.forced[pack].requests,
            before.forced[pack].requests + 1
        );
        assert_eq!(after.forced[pack].measured, before.forced[pack].measured);
    }
}
