//! Online correction of the transfer policy (seed 001 ch. 5's adaptive step): where the model
//! cannot tell two mechanisms apart (its margin rule decided), the client's own measurements
//! of whole requests do, per size class.
//!
//! A size class is ⌊log₂⌋ of a request's bytes and of its memory segments. For each class the
//! process keeps, per mechanism, its last [`LEARN_WINDOW`] measured requests (send to reply).
//! When the model's margin rule applies, each contender is first measured [`LEARN_SAMPLES`]
//! times, in turns (the model's preference first), so that a change in the machine's load
//! while they are measured falls on all of them alike; then the contender of the lowest
//! median is chosen, and every [`LEARN_REEXPLORE`]th decision of the
//! class measures the runner-up once more, so a change of the machine is followed. When that
//! re-check is faster than the leader's median, both are measured afresh, in turns again: the
//! runner-up's kept requests are up to hundreds of decisions old, and a few measured while the
//! machine was busy would otherwise keep it the runner-up for the rest of the run (`bench
//! subarray` kept gather at 0.79x of pack for a whole run at n=2048). A median,
//! not a mean: on a shared machine one request in a few is preempted and takes several times
//! as long, and with means of 3 such a request made the slower mechanism look faster for good
//! (`bench subarray` chose gather at 0.70x of pack). Only the model's own decisions are learned from (a forced mechanism, or memory in
//! a shared arena, moves data otherwise). The table holds at most [`LEARNED_CLASSES_MAX`]
//! classes; a class beyond it is left to the model.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use super::Mechanism;

/// A request's size class: ⌊log₂ bytes⌋ and ⌊log₂ segments⌋.
pub type SizeClass = (u8, u8);

/// Measured requests per contender before the measurements decide.
pub const LEARN_SAMPLES: u32 = 5;

/// Measured requests kept per mechanism and class: the median of these decides.
pub const LEARN_WINDOW: usize = 8;

/// Every this many decisions of a class, the runner-up is measured once more (about 3 % of
/// the requests go to the slower mechanism, to follow a change of the machine).
pub const LEARN_REEXPLORE: u64 = 32;

/// Most size classes learned (at most 64 × 64 exist).
pub const LEARNED_CLASSES_MAX: usize = 1024;

/// The size class of a request of `bytes` in `segments` slices.
pub fn size_class(bytes: u64, segments: usize) -> SizeClass {
    let log2 = |value: u64| u8::try_from(value.max(1).ilog2()).expect("below 64");
    (log2(bytes), log2(segments as u64))
}

/// Measured requests of one mechanism in one class: the last [`LEARN_WINDOW`], in a ring.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Measured {
    count: u32,
    recent_us: [f64; LEARN_WINDOW],
}

impl Measured {
    fn add(&mut self, us: f64) {
        self.recent_us[self.count as usize % LEARN_WINDOW] = us;
        self.count = self.count.saturating_add(1);
    }

    /// The median of the kept requests (the upper one of an even count); infinite for none.
    fn median_us(&self) -> f64 {
        let kept = (self.count as usize).min(LEARN_WINDOW);
        let mut recent = self.recent_us;
        let recent = &mut recent[..kept];
        recent.sort_by(f64::total_cmp);
        recent.get(kept / 2).copied().unwrap_or(f64::INFINITY)
    }
}

#[derive(Debug, Clone, Default)]
struct Class {
    measured: [Measured; Mechanism::ALL.len()],
    decisions: u64,
    /// The runner-up being re-checked and the leader it challenges.
    rechecking: Option<(Mechanism, Mechanism)>,
}

/// What a process learned of its requests' times, per size class and mechanism.
#[derive(Debug, Default)]
pub struct Learner {
    classes: BTreeMap<SizeClass, Class>,
}

fn index(mechanism: Mechanism) -> usize {
    Mechanism::ALL
        .iter()
        .position(|&m| m == mechanism)
        .expect("every mechanism is in ALL")
}

impl Learner {
    /// An empty table.
    pub const fn new() -> Self {
        Self {
            classes: BTreeMap::new(),
        }
    }

    /// Chooses among `contenders` (at least two, the model's preference first) by what was
    /// measured in `class`: a contender not yet measured [`LEARN_SAMPLES`] times, else the
    /// lowest median (the runner-up at every [`LEARN_REEXPLORE`]th decision). `None` when the
    /// table is full and `class` is new: the model decides.
    pub fn pick(&mut self, class: SizeClass, contenders: &[Mechanism]) -> Option<Mechanism> {
        let full = self.classes.len() >= LEARNED_CLASSES_MAX;
        let record = match self.classes.entry(class) {
            std::collections::btree_map::Entry::Occupied(kept) => kept.into_mut(),
            std::collections::btree_map::Entry::Vacant(_) if full => return None,
            std::collections::btree_map::Entry::Vacant(slot) => slot.insert(Class::default()),
        };
        record.decisions += 1;
        // The least measured contender first (the earliest of equals): they take turns.
        if let Some(&unmeasured) = contenders
            .iter()
            .filter(|&&mechanism| record.measured[index(mechanism)].count < LEARN_SAMPLES)
            .min_by_key(|&&mechanism| record.measured[index(mechanism)].count)
        {
            return Some(unmeasured);
        }
        let mut ranked = contenders.to_vec();
        ranked.sort_by(|&a, &b| {
            record.measured[index(a)]
                .median_us()
                .total_cmp(&record.measured[index(b)].median_us())
        });
        if record.decisions.is_multiple_of(LEARN_REEXPLORE) && ranked.len() > 1 {
            record.rechecking = Some((ranked[1], ranked[0]));
            return Some(ranked[1]);
        }
        ranked.first().copied()
    }

    /// Adds a request of `class` moved by `mechanism` that took `us` from send to reply.
    pub fn record(&mut self, class: SizeClass, mechanism: Mechanism, us: f64) {
        if !us.is_finite() || us < 0.0 {
            return;
        }
        let Some(record) = self.classes.get_mut(&class) else {
            return;
        };
        if let Some((runner_up, leader)) = record.rechecking {
            if mechanism == runner_up {
                record.rechecking = None;
                if us < record.measured[index(leader)].median_us() {
                    // The challenge holds: both are measured afresh, in turns.
                    record.measured[index(runner_up)] = Measured::default();
                    record.measured[index(leader)] = Measured::default();
                }
            }
        }
        record.measured[index(mechanism)].add(us);
    }

    /// The median of the kept requests of `mechanism` in `class`, and how many requests were
    /// measured since its last round of turns began.
    pub fn measured(&self, class: SizeClass, mechanism: Mechanism) -> Option<(f64, u32)> {
        let measured = self.classes.get(&class)?.measured[index(mechanism)];
        (measured.count > 0).then_some((measured.median_us(), measured.count))
    }
}

/// The process's learner.
static LEARNER: Mutex<Learner> = Mutex::new(Learner::new());

/// Runs `work` on the process's learner.
pub(super) fn with<T>(work: impl FnOnce(&mut Learner) -> T) -> T {
    work(&mut LEARNER.lock().unwrap_or_else(PoisonError::into_inner))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_are_powers_of_two_of_bytes_and_segments() {
        assert_eq!(size_class(0, 0), (0, 0));
        assert_eq!(size_class(1 << 20, 256), (20, 8));
        assert_eq!(size_class((1 << 20) + 1, 257), (20, 8));
        assert_eq!(size_class(u64::MAX, usize::MAX), (63, 63));
    }

    #[test]
    fn contenders_are_measured_then_the_fastest_wins_and_the_runner_up_is_rechecked() {
        let mut learner = Learner::new();
        let class = (20, 8);
        let contenders = [Mechanism::Gather, Mechanism::Pack];
        // The contenders take turns, the model's preference first.
        for _ in 0..LEARN_SAMPLES {
            assert_eq!(learner.pick(class, &contenders), Some(Mechanism::Gather));
            learner.record(class, Mechanism::Gather, 1600.0);
            assert_eq!(learner.pick(class, &contenders), Some(Mechanism::Pack));
            learner.record(class, Mechanism::Pack, 1000.0);
        }
        assert_eq!(
            learner.measured(class, Mechanism::Pack),
            Some((1000.0, LEARN_SAMPLES))
        );
        let mut runner_up = 0;
        for _ in 0..LEARN_REEXPLORE {
            match learner.pick(class, &contenders) {
                Some(Mechanism::Pack) => {}
                Some(Mechanism::Gather) => runner_up += 1,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(runner_up, 1, "the runner-up is measured once per period");
        // The machine changed: pack became slow; its mean follows and gather wins again.
        for _ in 0..40 {
            learner.record(class, Mechanism::Pack, 3000.0);
        }
        assert_eq!(learner.pick(class, &contenders), Some(Mechanism::Gather));
        // Another class learns on its own.
        assert_eq!(learner.pick((10, 2), &contenders), Some(Mechanism::Gather));
    }

    #[test]
    fn a_preempted_request_does_not_decide() {
        let mut learner = Learner::new();
        let class = (22, 11);
        let contenders = [Mechanism::Gather, Mechanism::Pack];
        // Gather is steadily 1.3x pack, but one pack request was preempted for 9 ms.
        let pack = [1200.0, 1250.0, 9000.0, 1180.0, 1220.0];
        for us in pack {
            assert_eq!(learner.pick(class, &contenders), Some(Mechanism::Gather));
            learner.record(class, Mechanism::Gather, 1600.0);
            assert_eq!(learner.pick(class, &contenders), Some(Mechanism::Pack));
            learner.record(class, Mechanism::Pack, us);
        }
        assert_eq!(learner.pick(class, &contenders), Some(Mechanism::Pack));
        assert_eq!(
            learner.measured(class, Mechanism::Pack),
            Some((1220.0, LEARN_SAMPLES))
        );
        // Only the last LEARN_WINDOW requests count.
        for _ in 0..LEARN_WINDOW {
            learner.record(class, Mechanism::Pack, 2000.0);
        }
        assert_eq!(
            learner.measured(class, Mechanism::Pack),
            Some((2000.0, LEARN_SAMPLES + u32::try_from(LEARN_WINDOW).unwrap()))
        );
        assert_eq!(learner.pick(class, &contenders), Some(Mechanism::Gather));
    }

    #[test]
    fn a_re_check_faster_than_the_leader_starts_new_turns() {
        let mut learner = Learner::new();
        let class = (22, 10);
        let contenders = [Mechanism::Pack, Mechanism::Gather];
        // The machine was busy while pack was measured: gather leads.
        for _ in 0..LEARN_SAMPLES {
            assert_eq!(learner.pick(class, &contenders), Some(Mechanism::Pack));
            learner.record(class, Mechanism::Pack, 3000.0);
            assert_eq!(learner.pick(class, &contenders), Some(Mechanism::Gather));
            learner.record(class, Mechanism::Gather, 2500.0);
        }
        // A re-check slower than the leader changes nothing.
        let mut rechecked = false;
        for _ in 0..LEARN_REEXPLORE {
            let picked = learner.pick(class, &contenders).unwrap();
            rechecked |= picked == Mechanism::Pack;
            learner.record(
                class,
                picked,
                if picked == Mechanism::Pack {
                    2600.0
                } else {
                    2500.0
                },
            );
        }
        assert!(rechecked);
        assert_eq!(learner.pick(class, &contenders), Some(Mechanism::Gather));
        learner.record(class, Mechanism::Gather, 2500.0);
        // The machine is quiet now: the next re-check of pack beats gather's median, and both
        // are measured afresh, in turns.
        let picked: Vec<Mechanism> = (0..LEARN_REEXPLORE)
            .map(|_| {
                let picked = learner.pick(class, &contenders).unwrap();
                learner.record(
                    class,
                    picked,
                    if picked == Mechanism::Pack {
                        1800.0
                    } else {
                        2500.0
                    },
                );
                picked
            })
            .collect();
        let challenge = picked.iter().position(|&m| m == Mechanism::Pack).unwrap();
        let turns = &picked[challenge + 1..challenge + 1 + 2 * LEARN_SAMPLES as usize - 1];
        assert!(
            turns.iter().filter(|&&m| m == Mechanism::Gather).count() == LEARN_SAMPLES as usize,
            "{turns:?}"
        );
        assert!(picked[challenge + 2 * LEARN_SAMPLES as usize..]
            .iter()
            .all(|&m| m == Mechanism::Pack));
        assert_eq!(
            learner
                .measured(class, Mechanism::Pack)
                .map(|(us, _)| us.to_bits()),
            Some(1800.0f64.to_bits())
        );
    }

    #[test]
    fn a_full_table_leaves_new_classes_to_the_model() {
        let mut learner = Learner::new();
        let contenders = [Mechanism::Pack, Mechanism::Gather];
        for bytes in 0..64u8 {
            for segments in 0..16u8 {
                assert!(learner.pick((bytes, segments), &contenders).is_some());
            }
        }
        assert_eq!(learner.classes.len(), LEARNED_CLASSES_MAX);
        assert!(learner.pick((0, 40), &contenders).is_none());
        assert!(
            learner.pick((0, 0), &contenders).is_some(),
            "a known class still learns"
        );
        // A time that is no time is not learned.
        learner.record((0, 0), Mechanism::Pack, f64::NAN);
        assert_eq!(learner.measured((0, 0), Mechanism::Pack), None);
    }
}
