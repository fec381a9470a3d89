//! The `Registrar` interface, its cost figures, the `none` registrar and cost calibration.
//!
//! A registrar turns a [`Segment`] into a [`RegHandle`] (pinned, translated, given a key a
//! peer can name it by) and back. Everything above it — grouping, caching, arenas,
//! invalidation — is policy in [`crate::Registry`], written once for every registrar: `pin`
//! (mlock, [`crate::PinRegistrar`]), `none` ([`NoneRegistrar`]), and `ofi` (`fi_mr_reg`, in
//! another crate implementing this trait). Policies decide with each registrar's
//! [`CostModel`], T = a·pages + b for registering and again for deregistering, which
//! [`calibrate`] measures on this machine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::error::RegError;
use crate::mapping::AnonymousMapping;
use crate::segment::{page_bytes, Segment};

/// One registration a registrar made.
///
/// `key` is what a peer names the region by (`fi_mr_key` for ofi; a sequence number for pin);
/// `descriptor` is the local descriptor a transfer call takes (`fi_mr_desc`), if the
/// registrar has one; `token` is the registrar's own bookkeeping (for example the address of
/// its `fid_mr`), handed back unchanged at deregistration. The registry never interprets
/// `key`, `descriptor` or `token`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegHandle {
    /// The range registered (exactly the one asked for).
    pub segment: Segment,
    /// The key a peer names the region by.
    pub key: u64,
    /// A pointer-sized local descriptor, if the registrar has one.
    pub descriptor: Option<usize>,
    /// Registrar-private data, returned to it at deregistration.
    pub token: u64,
}

/// Cost of (de)registering one region of `p` pages: T = a·p + b, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// a of a registration, µs per page.
    pub register_page_us: f64,
    /// b of a registration, µs per call.
    pub register_call_us: f64,
    /// a of a deregistration, µs per page.
    pub deregister_page_us: f64,
    /// b of a deregistration, µs per call.
    pub deregister_call_us: f64,
}

impl CostModel {
    /// Nothing costs anything (the `none` registrar).
    pub const FREE: CostModel = CostModel {
        register_page_us: 0.0,
        register_call_us: 0.0,
        deregister_page_us: 0.0,
        deregister_call_us: 0.0,
    };

    /// mlock/munlock of present pages as measured on the development machine (kernel 6.18,
    /// 2 cores): mlock about 1.5-1.9 µs a call plus 0.27-0.3 µs a page, munlock about 1.1 µs a
    /// call plus 0.18 µs a page. [`calibrate`] measures the machine at hand.
    pub const PIN_DEFAULT: CostModel = CostModel {
        register_page_us: 0.3,
        register_call_us: 1.5,
        deregister_page_us: 0.18,
        deregister_call_us: 1.1,
    };

    /// Predicted µs to register one region of `pages` pages.
    pub fn register_us(&self, pages: usize) -> f64 {
        self.register_page_us * pages as f64 + self.register_call_us
    }

    /// Predicted µs to deregister one region of `pages` pages.
    pub fn deregister_us(&self, pages: usize) -> f64 {
        self.deregister_page_us * pages as f64 + self.deregister_call_us
    }

    /// Predicted µs to register and later deregister one region of `pages` pages.
    pub fn cycle_us(&self, pages: usize) -> f64 {
        self.register_us(pages) + self.deregister_us(pages)
    }

    /// Whether every figure is finite and not negative.
    pub fn is_valid(&self) -> bool {
        [
            self.register_page_us,
            self.register_call_us,
            self.deregister_page_us,
            self.deregister_call_us,
        ]
        .iter()
        .all(|value| value.is_finite() && *value >= 0.0)
    }
}

/// Registers and deregisters memory with one mechanism.
///
/// Object-safe and `Send + Sync`: the registry holds an `Arc<dyn Registrar>` and calls it from
/// any thread, including the FMRD deregistration thread. A registrar must accept overlapping
/// registrations and keep each valid until its own deregistration (pinning is per page, so
/// two registrations may share pages).
pub trait Registrar: Send + Sync {
    /// Short name: "pin", "none", "ofi".
    fn name(&self) -> &str;

    /// Registers `segment` (at least one byte).
    fn register(&self, segment: Segment) -> Result<RegHandle, RegError>;

    /// Deregisters what `handle` names. The memory may have been unmapped since (callers
    /// invalidate before unmapping, but a registrar must not fail hard on it).
    fn deregister(&self, handle: RegHandle) -> Result<(), RegError>;

    /// Deregisters many at once (FMRD's batches). Attempts every handle even when one fails,
    /// and returns the first failure. Registrars that can do a batch cheaper than one call each
    /// override this.
    fn deregister_batch(&self, handles: Vec<RegHandle>) -> Result<(), RegError> {
        let mut first_failure = None;
        for handle in handles {
            if let Err(err) = self.deregister(handle) {
                first_failure.get_or_insert(err);
            }
        }
        first_failure.map_or(Ok(()), Err)
    }

    /// The figures grouping decides with.
    fn cost(&self) -> CostModel;
}

/// Registers nothing; counts the calls. Keys are a sequence from 1.
#[derive(Debug, Default)]
pub struct NoneRegistrar {
    registers: AtomicU64,
    deregisters: AtomicU64,
    cost: Option<CostModel>,
}

impl NoneRegistrar {
    /// A registrar whose cost model is [`CostModel::FREE`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A registrar that does nothing but claims `cost`, so policies group as they would for a
    /// real one.
    pub fn with_cost(cost: CostModel) -> Self {
        Self {
            cost: Some(cost),
            ..Self::default()
        }
    }

    /// Registrations made so far.
    pub fn registers(&self) -> u64 {
        self.registers.load(Ordering::Relaxed)
    }

    /// Deregistrations made so far.
    pub fn deregisters(&self) -> u64 {
        self.deregisters.load(Ordering::Relaxed)
    }
}

impl Registrar for NoneRegistrar {
    fn name(&self) -> &'static str {
        "none"
    }

    fn register(&self, segment: Segment) -> Result<RegHandle, RegError> {
        let key = self.registers.fetch_add(1, Ordering::Relaxed) + 1;
        Ok(RegHandle {
            segment,
            key,
            descriptor: None,
            token: 0,
        })
    }

    fn deregister(&self, _handle: RegHandle) -> Result<(), RegError> {
        self.deregisters.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn cost(&self) -> CostModel {
        self.cost.unwrap_or(CostModel::FREE)
    }
}

/// Pages of the large region [`calibrate`] registers.
pub const CALIBRATION_PAGES: usize = 256;
/// Timed rounds per size in [`calibrate`] (the median is kept).
pub const CALIBRATION_ROUNDS: usize = 31;

/// Measures `registrar`'s a and b on a fresh region of present pages: the median time to
/// register and to deregister 1 page and [`CALIBRATION_PAGES`] pages over
/// [`CALIBRATION_ROUNDS`] rounds each, interleaved, then the line through the two points.
/// Negative fits (noise) are clamped to 0.
pub fn calibrate(registrar: &dyn Registrar) -> Result<CostModel, RegError> {
    let mapping = AnonymousMapping::new(CALIBRATION_PAGES).map_err(|source| RegError::Os {
        operation: "mmap",
        segment: Segment::new(0, CALIBRATION_PAGES * page_bytes()),
        source,
    })?;
    let small = Segment::new(mapping.address(), page_bytes());
    let large = mapping.segment();
    let mut samples: [Vec<f64>; 4] = Default::default();
    for _ in 0..CALIBRATION_ROUNDS {
        for (slot, segment) in [(0, small), (2, large)] {
            let started = Instant::now();
            let handle = registrar.register(segment)?;
            let registered = Instant::now();
            registrar.deregister(handle)?;
            let done = Instant::now();
            samples[slot].push((registered - started).as_secs_f64() * 1e6);
            samples[slot + 1].push((done - registered).as_secs_f64() * 1e6);
        }
    }
    let mut medians = [0.0f64; 4];
    for (median, values) in medians.iter_mut().zip(samples.iter_mut()) {
        values.sort_by(f64::total_cmp);
        *median = values[CALIBRATION_ROUNDS / 2];
    }
    let [register_small, deregister_small, register_large, deregister_large] = medians;
    let spread = (CALIBRATION_PAGES - 1) as f64;
    let register_page_us = ((register_large - register_small) / spread).max(0.0);
    let deregister_page_us = ((deregister_large - deregister_small) / spread).max(0.0);
    Ok(CostModel {
        register_page_us,
        register_call_us: (register_small - register_page_us).max(0.0),
        deregister_page_us,
        deregister_call_us: (deregister_small - deregister_page_us).max(0.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_counts_calls_and_hands_out_distinct_keys() {
        let registrar = NoneRegistrar::new();
        let first = registrar.register(Segment::new(4096, 10)).unwrap();
        let second = registrar.register(Segment::new(4096, 10)).unwrap();
        assert_ne!(first.key, second.key);
        registrar
            .deregister_batch(vec![first.clone(), second])
            .unwrap();
        registrar.deregister(first).unwrap();
        assert_eq!(registrar.registers(), 2);
        assert_eq!(registrar.deregisters(), 3);
        assert_eq!(registrar.cost(), CostModel::FREE);
    }

    #[test]
    fn cost_model_arithmetic() {
        let cost = CostModel::PIN_DEFAULT;
        assert!((cost.register_us(10) - 4.5).abs() < 1e-9);
        assert!((cost.cycle_us(0) - 2.6).abs() < 1e-9);
        assert!(cost.is_valid());
        let broken = CostModel {
            register_page_us: f64::NAN,
            ..cost
        };
        assert!(!broken.is_valid());
    }

    #[test]
    fn calibration_of_none_is_small_and_valid() {
        let registrar = NoneRegistrar::new();
        let cost = calibrate(&registrar).unwrap();
        assert!(cost.is_valid());
        assert_eq!(
            registrar.registers(),
            2 * CALIBRATION_ROUNDS as u64,
            "two sizes per round"
        );
    }
}
