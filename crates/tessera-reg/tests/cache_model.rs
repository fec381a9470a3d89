//! The registration cache against a model cache.
//!
//! Random sequences of acquires (held or released at once), releases, invalidations and
//! flushes run against a `Registry` over the `none` registrar (pin-down and FMRD, small
//! capacities) and against `Model`, a deliberately naive cache: a flat list of entries scanned
//! linearly, LRU by a release clock, a segment served by the entry that served the previous
//! segment of its acquire if that covers it, else by the covering entry of highest (address,
//! id). After every step the hits, misses, evictions, revivals, registrations, cache size and
//! queue length must match, and so must the key returned for every segment (the key names
//! which registration served it); deregistrations must match after every flush.

use std::sync::Arc;

use proptest::prelude::*;
use tessera_reg::{Caching, Grouping, NoneRegistrar, Policy, Registry, Segment, FMRD_BATCH};

const PAGE: usize = 4096;
const BASE: usize = 1 << 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Cached,
    Queued,
    Doomed,
}

#[derive(Debug, Clone)]
struct ModelEntry {
    id: u64,
    region: Segment,
    key: u64,
    holders: u32,
    place: Place,
    stamp: u64,
}

#[derive(Debug, Default, PartialEq)]
struct Counts {
    hits: u64,
    misses: u64,
    evictions: u64,
    revivals: u64,
    registrations: u64,
    deregistrations: u64,
    invalidated: u64,
}

#[derive(Debug)]
struct Model {
    fmrd: bool,
    entries_max: usize,
    bytes_max: usize,
    entries: Vec<ModelEntry>,
    queue: Vec<u64>,
    clock: u64,
    next_id: u64,
    counts: Counts,
}

impl Model {
    fn entry(&mut self, id: u64) -> &mut ModelEntry {
        self.entries.iter_mut().find(|e| e.id == id).unwrap()
    }

    fn cached(&self) -> impl Iterator<Item = &ModelEntry> {
        self.entries.iter().filter(|e| e.place == Place::Cached)
    }

    fn cached_len(&self) -> usize {
        self.cached().count()
    }

    fn cached_bytes(&self) -> usize {
        self.cached().map(|e| e.region.length).sum()
    }

    fn find(&self, segment: Segment) -> Option<u64> {
        self.entries
            .iter()
            .filter(|e| e.place != Place::Doomed && e.region.covers(&segment))
            .max_by_key(|e| (e.region.address, e.id))
            .map(|e| e.id)
    }

    fn make_room(&mut self, entries: usize, bytes: usize) -> bool {
        let in_use: Vec<&ModelEntry> = self.cached().filter(|e| e.holders > 0).collect();
        if in_use.len() + entries > self.entries_max
            || in_use.iter().map(|e| e.region.length).sum::<usize>() + bytes > self.bytes_max
        {
            return false;
        }
        while self.cached_len() + entries > self.entries_max
            || self.cached_bytes() + bytes > self.bytes_max
        {
            let victim = self
                .cached()
                .filter(|e| e.holders == 0)
                .min_by_key(|e| e.stamp)
                .unwrap()
                .id;
            self.counts.evictions += 1;
            if self.fmrd {
                self.entry(victim).place = Place::Queued;
                self.queue.push(victim);
                if self.queue.len() >= FMRD_BATCH {
                    self.flush();
                }
            } else {
                self.entries.retain(|e| e.id != victim);
                self.counts.deregistrations += 1;
            }
        }
        true
    }

    fn flush(&mut self) {
        let queue = std::mem::take(&mut self.queue);
        self.counts.deregistrations += queue.len() as u64;
        self.entries.retain(|e| !queue.contains(&e.id));
    }

    fn release(&mut self, held: &[u64]) {
        for &id in held {
            let entry = self.entry(id);
            entry.holders -= 1;
            if entry.holders > 0 {
                continue;
            }
            match entry.place {
                Place::Cached => {
                    self.clock += 1;
                    let stamp = self.clock;
                    self.entry(id).stamp = stamp;
                }
                Place::Doomed => {
                    self.entries.retain(|e| e.id != id);
                    self.counts.deregistrations += 1;
                }
                Place::Queued => unreachable!("a queued entry is never held"),
            }
        }
    }

    /// The held entries and the key per segment, or `None` when the cache is full.
    fn acquire(&mut self, segments: &[Segment]) -> Option<(Vec<u64>, Vec<u64>)> {
        let mut held = Vec::new();
        let mut keys = vec![0; segments.len()];
        let mut misses = Vec::new();
        let (mut hits, mut revivals) = (0, 0);
        let mut previous: Option<u64> = None;
        for (index, &segment) in segments.iter().enumerate() {
            // The entry that served the previous segment is asked first.
            let again = previous.filter(|&id| self.entry(id).region.covers(&segment));
            let Some(id) = again.or_else(|| self.find(segment)) else {
                misses.push(index);
                continue;
            };
            hits += 1;
            if self.entry(id).place == Place::Queued {
                revivals += 1;
                self.queue.retain(|&queued| queued != id);
                let length = self.entry(id).region.length;
                if !self.make_room(1, length) {
                    self.queue.push(id);
                    self.release(&held);
                    return None;
                }
                self.entry(id).place = Place::Cached;
            }
            if !held.contains(&id) {
                self.entry(id).holders += 1;
                held.push(id);
            }
            keys[index] = self.entry(id).key;
            previous = Some(id);
        }
        if !misses.is_empty() {
            let mut distinct: Vec<Segment> = misses.iter().map(|&i| segments[i]).collect();
            distinct.sort();
            distinct.dedup();
            let in_use = self.cached().filter(|e| e.holders > 0).count();
            if in_use + distinct.len() > self.entries_max {
                self.release(&held);
                return None;
            }
            let first_key = self.counts.registrations + 1;
            self.counts.registrations += distinct.len() as u64;
            let bytes = distinct.iter().map(|s| s.length).sum();
            if !self.make_room(distinct.len(), bytes) {
                self.counts.deregistrations += distinct.len() as u64;
                self.release(&held);
                return None;
            }
            for (offset, &region) in distinct.iter().enumerate() {
                let id = self.next_id;
                self.next_id += 1;
                let key = first_key + offset as u64;
                self.entries.push(ModelEntry {
                    id,
                    region,
                    key,
                    holders: 1,
                    place: Place::Cached,
                    stamp: 0,
                });
                held.push(id);
                for &index in &misses {
                    if segments[index] == region {
                        keys[index] = key;
                    }
                }
            }
        }
        self.counts.hits += hits;
        self.counts.revivals += revivals;
        self.counts.misses += misses.len() as u64;
        Some((held, keys))
    }

    fn invalidate(&mut self, range: Segment) {
        let ids: Vec<u64> = self
            .entries
            .iter()
            .filter(|e| e.place != Place::Doomed && e.region.overlaps(&range))
            .map(|e| e.id)
            .collect();
        self.counts.invalidated += ids.len() as u64;
        for id in ids {
            self.queue.retain(|&queued| queued != id);
            if self.entry(id).holders == 0 {
                self.entries.retain(|e| e.id != id);
                self.counts.deregistrations += 1;
            } else {
                self.entry(id).place = Place::Doomed;
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Acquire { segments: Vec<Segment>, hold: bool },
    Release(usize),
    Invalidate(Segment),
    Flush,
}

fn segment() -> impl Strategy<Value = Segment> {
    (
        0usize..8,
        prop::sample::select(vec![0usize, 64, 1000]),
        prop::sample::select(vec![64usize, 200, PAGE, 2 * PAGE]),
    )
        .prop_map(|(page, offset, length)| Segment::new(BASE + page * PAGE + offset, length))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (prop::collection::vec(segment(), 1..4), any::<bool>())
            .prop_map(|(segments, hold)| Op::Acquire { segments, hold }),
        2 => (0usize..8).prop_map(Op::Release),
        1 => (0usize..9, 1usize..3).prop_map(|(page, pages)| {
            Op::Invalidate(Segment::new(BASE + page * PAGE + 500, pages * PAGE))
        }),
        1 => Just(Op::Flush),
    ]
}

fn check(registry: &Registry, model: &Model, step: usize) -> Result<(), TestCaseError> {
    let stats = registry.stats();
    let counts = &model.counts;
    prop_assert_eq!(stats.cache_hits, counts.hits, "hits after step {}", step);
    prop_assert_eq!(
        stats.cache_misses,
        counts.misses,
        "misses after step {}",
        step
    );
    prop_assert_eq!(
        stats.evictions,
        counts.evictions,
        "evictions after step {}",
        step
    );
    prop_assert_eq!(
        stats.revivals,
        counts.revivals,
        "revivals after step {}",
        step
    );
    prop_assert_eq!(
        stats.registrations,
        counts.registrations,
        "registrations after step {}",
        step
    );
    prop_assert_eq!(
        stats.invalidated,
        counts.invalidated,
        "invalidated after step {}",
        step
    );
    prop_assert_eq!(
        stats.cached_entries,
        model.cached_len(),
        "entries after step {}",
        step
    );
    prop_assert_eq!(
        stats.cached_bytes,
        model.cached_bytes(),
        "bytes after step {}",
        step
    );
    prop_assert_eq!(stats.queued, model.queue.len(), "queue after step {}", step);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn cache_matches_the_model(
        fmrd in any::<bool>(),
        fmrd_thread in any::<bool>(),
        entries_max in 1usize..6,
        bytes_max in prop::sample::select(vec![usize::MAX, 3 * PAGE, 6 * PAGE]),
        ops in prop::collection::vec(op(), 1..150),
    ) {
        let caching = if fmrd { Caching::Fmrd } else { Caching::PinDown };
        let registrar = Arc::new(NoneRegistrar::new());
        let registry = Registry::new(
            registrar.clone(),
            Policy::new(Grouping::Individual, caching)
                .with_entries_max(entries_max)
                .with_bytes_max(bytes_max)
                .with_fmrd_thread(fmrd_thread)
                // Made-up addresses, invalidated explicitly: nothing there to watch.
                .with_watch_unmaps(false),
        )
        .unwrap();
        let mut model = Model {
            fmrd,
            entries_max,
            bytes_max,
            entries: Vec::new(),
            queue: Vec::new(),
            clock: 0,
            next_id: 0,
            counts: Counts::default(),
        };
        let mut guards = Vec::new();
        let mut model_guards: Vec<Vec<u64>> = Vec::new();
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Acquire { segments, hold } => {
                    let real = registry.acquire(&segments);
                    let expected = model.acquire(&segments);
                    match (real, expected) {
                        (Ok(guard), Some((held, keys))) => {
                            let real_keys: Vec<u64> =
                                guard.covers().iter().map(|cover| cover.key).collect();
                            prop_assert_eq!(real_keys, keys, "keys at step {}", step);
                            for (cover, segment) in guard.covers().iter().zip(&segments) {
                                prop_assert!(cover.region.covers(segment));
                            }
                            if hold {
                                guards.push(guard);
                                model_guards.push(held);
                            } else {
                                drop(guard);
                                model.release(&held);
                            }
                        }
                        (Err(err), None) => {
                            let message = err.to_string();
                            prop_assert!(message.contains("CacheCapacity::"), "{}", message);
                        }
                        (real, expected) => prop_assert!(
                            false,
                            "step {}: registry {:?}, model {:?}",
                            step,
                            real.map(|guard| guard.len()),
                            expected
                        ),
                    }
                }
                Op::Release(index) => {
                    if !guards.is_empty() {
                        let index = index % guards.len();
                        drop(guards.remove(index));
                        model.release(&model_guards.remove(index));
                    }
                }
                Op::Invalidate(range) => {
                    registry.invalidate(range).unwrap();
                    model.invalidate(range);
                }
                Op::Flush => {
                    registry.flush().unwrap();
                    model.flush();
                    prop_assert_eq!(
                        registry.stats().deregistrations,
                        model.counts.deregistrations,
                        "deregistrations after flush at step {}",
                        step
                    );
                }
            }
            check(&registry, &model, step)?;
        }
        drop(guards);
        for held in model_guards {
            model.release(&held);
        }
        registry.flush().unwrap();
        model.flush();
        prop_assert_eq!(registry.stats().deregistrations, model.counts.deregistrations);
        prop_assert_eq!(registrar.deregisters(), model.counts.deregistrations);
    }
}
