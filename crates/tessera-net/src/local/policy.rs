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
//! first use), in about a millisecond: `memcpy`
//! bandwidth, and `process_vm_readv` from this process into itself for the per-call cost, the
//! per-segment cost and the bandwidth.

use std::sync::OnceLock;
use std::time::Instant;

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
}

/// The measured costs the policy compares (microseconds and bytes per microsecond).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TransferModel {
    /// `memcpy` bandwidth, bytes per µs.
    pub copy_bytes_per_us: f64,
    /// One-sided copy bandwidth, bytes per µs.
    pub remote_bytes_per_us: f64,
    /// Fixed cost of one one-sided call, µs.
    pub remote_call_us: f64,
    /// Cost of each segment in a one-sided call, µs.
    pub remote_segment_us: f64,
    /// Fixed cost of the one-sided part of a request (the server's extra work), µs.
    pub remote_request_us: f64,
}

impl Default for TransferModel {
    /// The figures measured on the development machine (2-core VM): about 11 GB/s `memcpy`,
    /// 7.7 GB/s one-sided, 0.22 µs per segment.
    fn default() -> Self {
        Self {
            copy_bytes_per_us: 11_000.0,
            remote_bytes_per_us: 7_700.0,
            remote_call_us: 1.0,
            remote_segment_us: 0.22,
            remote_request_us: 2.0,
        }
    }
}

impl TransferModel {
    /// Predicted µs to move `bytes` in `segments` slices by `mechanism` one-sidedly.
    pub fn cost_us(&self, mechanism: Mechanism, bytes: u64, segments: usize) -> f64 {
        let bytes = bytes as f64;
        let segments = segments.max(1) as f64;
        let copy = bytes / self.copy_bytes_per_us;
        let move_ = bytes / self.remote_bytes_per_us;
        match mechanism {
            // Through the socket: a copy into the kernel and one out, no one-sided step.
            Mechanism::Inline => 2.0 * copy,
            // One copy by the client; the server works on the shared buffer directly.
            Mechanism::Eager => copy,
            Mechanism::Pack => {
                copy + self.remote_request_us + self.remote_call_us + self.remote_segment_us + move_
            }
            Mechanism::Gather => {
                let calls = (segments / IOV_PIECES_MAX as f64).ceil();
                self.remote_request_us
                    + calls * self.remote_call_us
                    + segments * self.remote_segment_us
                    + move_
            }
            Mechanism::Multiple => {
                self.remote_request_us
                    + segments * (self.remote_call_us + self.remote_segment_us)
                    + move_
            }
        }
    }

    /// The cheapest mechanism for a request (inline only up to [`INLINE_BYTES_MAX`], eager
    /// only up to [`EAGER_BYTES_MAX`]).
    pub fn choose(&self, bytes: u64, segments: usize) -> Mechanism {
        let mut candidates = vec![Mechanism::Pack, Mechanism::Gather];
        if bytes <= INLINE_BYTES_MAX {
            candidates.push(Mechanism::Inline);
        }
        if bytes <= EAGER_BYTES_MAX {
            candidates.push(Mechanism::Eager);
        }
        candidates
            .into_iter()
            .min_by(|a, b| {
                self.cost_us(*a, bytes, segments)
                    .total_cmp(&self.cost_us(*b, bytes, segments))
            })
            .expect("two candidates at least")
    }

    /// Measures the model in this process (about a millisecond).
    pub fn measure() -> Self {
        let defaults = Self::default();
        let source = vec![7u8; MEASURE_BYTES];
        let mut target = vec![0u8; MEASURE_BYTES];
        let copy_bytes_per_us = best_rate(source.len(), || target.copy_from_slice(&source))
            .unwrap_or(defaults.copy_bytes_per_us);
        let pid = std::process::id();
        let whole = [segment_of(&source)];
        if super::rma::pull(pid, &whole, 0, &mut target).is_err() {
            // No one-sided copies in this process (a sandbox): nothing to measure; the
            // connections will find the same and fall back to messages.
            return Self {
                copy_bytes_per_us,
                ..defaults
            };
        }
        let remote_bytes_per_us = best_rate(source.len(), || {
            let _ = super::rma::pull(pid, &whole, 0, &mut target);
        })
        .unwrap_or(defaults.remote_bytes_per_us);
        // Many small segments in one call, each on a page of its own as scattered pieces
        // are: the per-segment cost, pinning its page included.
        let small: Vec<RemoteSegment> = source
            .chunks(4096)
            .map(|page| segment_of(&page[..64]))
            .collect();
        let small_bytes = 64 * small.len();
        let gathered_us = best_us(|| {
            let _ = super::rma::pull(pid, &small, 0, &mut target[..small_bytes]);
        });
        // The same segments one call each: the per-call cost on top.
        let single_us = best_us(|| {
            let _ = super::rma::pull(pid, &small, 1, &mut target[..small_bytes]);
        });
        let segments = small.len() as f64;
        let move_us = small_bytes as f64 / remote_bytes_per_us;
        let remote_segment_us = ((gathered_us - move_us) / segments).max(0.01);
        let remote_call_us = ((single_us - gathered_us) / segments).max(0.05);
        Self {
            copy_bytes_per_us,
            remote_bytes_per_us,
            remote_call_us,
            remote_segment_us,
            remote_request_us: defaults.remote_request_us,
        }
    }
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
/// small enough that the whole measurement stays near a millisecond.
const MEASURE_BYTES: usize = 1 << 20;

/// The best of three timings of `work`, in µs.
fn best_us(mut work: impl FnMut()) -> f64 {
    (0..3)
        .map(|_| {
            let start = Instant::now();
            work();
            start.elapsed().as_secs_f64() * 1e6
        })
        .fold(f64::INFINITY, f64::min)
}

/// Bytes per µs of the best of three runs of `work` over `bytes` bytes.
fn best_rate(bytes: usize, work: impl FnMut()) -> Option<f64> {
    let us = best_us(work);
    (us > 0.0).then(|| bytes as f64 / us)
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
        assert!(model.copy_bytes_per_us > 100.0, "{model:?}");
        assert!(model.remote_bytes_per_us > 100.0, "{model:?}");
        assert!(model.remote_segment_us < 50.0, "{model:?}");
    }
}
