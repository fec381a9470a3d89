//! The registry: what the transport calls to have a list of segments registered.
//!
//! Segments come in through [`Registry::acquire`]; a [`Registration`] guard goes out, holding
//! for each segment the key, descriptor and region of a registration that covers it, and
//! releasing them per policy when dropped. Between the two, per segment:
//!
//! 1. an **arena** covering it ([`Registry::register_arena`]) serves it with no registrar call;
//! 2. else, with a cache, a **cached registration** covering it serves it (a hit). With FMRD a
//!    registration already evicted but still waiting in the deregistration queue is revived;
//! 3. the rest are **misses**: grouped per [`Grouping`] (each on its own, or by OGR,
//!    [`crate::ogr`]) and registered outside the cache lock.
//!
//! With a cache, new registrations enter it in use; on release an entry becomes idle and joins
//! the LRU order; room for new entries is made by evicting the least recently released idle
//! entries, never one in use (reference counts). **Pin-down** deregisters an evicted entry at
//! once, on the acquiring thread. **FMRD** (seed 001 §4.2, Fig. 4.3) queues it instead (where a
//! later acquire can still revive it) and deregisters [`FMRD_BATCH`](crate::FMRD_BATCH) at a time when the queue
//! fills: on the acquiring thread in one batch call, or, with [`Policy::fmrd_thread`], on a
//! deregistration thread so that no acquire waits for one. Release never deregisters. Without
//! a cache every registration is deregistered when its guard drops (seed 001's "dynamic").
//!
//! **Invalidation.** A registration is a promise about the memory under it. Cached
//! registrations are watched by the process's unmap [`Monitor`] (userfaultfd; see
//! [`crate::monitor`]): before it looks anything up or caches anything, an acquire forgets
//! every registration whose memory was unmapped, discarded (`MADV_DONTNEED`) or moved since,
//! with no call from the application; a registration whose memory cannot be watched is used
//! once, never cached. [`Registry::invalidate`] does the same explicitly, for a kernel without
//! userfaultfd ([`Policy::watch_unmaps`]): every cached entry, queued entry and arena
//! overlapping the range is removed and deregistered (one still held by a guard is removed at
//! once and deregistered when released), and no acquire returns it afterwards. A registration
//! made while its memory was invalidated or unmapped is used once and never cached.

use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use crate::cache::{Deferred, Place, Rules, Slot, Table};
use crate::error::RegError;
use crate::monitor::{Monitor, Unmapped};
use crate::ogr::{plan_groups, register_group, Group, Made};
use crate::policy::{
    Caching, Grouping, Policy, ACQUIRE_SEGMENTS_MAX, ARENAS_MAX, FMRD_BATCHES_QUEUED_MAX,
};
use crate::registrar::{RegHandle, Registrar};
use crate::segment::{page_bytes, Segment};
use crate::stats::{bump, Counters, RegStats};

/// The registration covering one segment of an acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cover {
    /// The segment asked for.
    pub segment: Segment,
    /// The registered region holding it.
    pub region: Segment,
    /// The region's key.
    pub key: u64,
    /// The region's local descriptor, if the registrar has one.
    pub descriptor: Option<usize>,
}

/// Segments an acquire registered, held until dropped.
#[derive(Debug)]
pub struct Registration<'r> {
    registry: &'r Registry,
    covers: Vec<Cover>,
    held: Vec<Held>,
}

impl Registration<'_> {
    /// One cover per segment, in the order given to `acquire`.
    pub fn covers(&self) -> &[Cover] {
        &self.covers
    }

    /// The key covering segment `index`.
    pub fn key(&self, index: usize) -> u64 {
        self.covers[index].key
    }

    /// Segments.
    pub fn len(&self) -> usize {
        self.covers.len()
    }

    /// Whether no segment was given.
    pub fn is_empty(&self) -> bool {
        self.covers.is_empty()
    }

    /// Distinct registrations this guard holds.
    pub fn registrations(&self) -> usize {
        self.held.len()
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.registry.release(std::mem::take(&mut self.held));
    }
}

/// A [`Registration`] that holds its registry by `Arc`, for holders that keep it past a
/// borrow (a transport keeps one per outstanding request). Released on drop.
#[derive(Debug)]
pub struct OwnedRegistration {
    registry: Arc<Registry>,
    covers: Vec<Cover>,
    held: Vec<Held>,
}

impl OwnedRegistration {
    /// One cover per segment, in the order given to `acquire`.
    pub fn covers(&self) -> &[Cover] {
        &self.covers
    }

    /// Distinct registrations this guard holds.
    pub fn registrations(&self) -> usize {
        self.held.len()
    }
}

impl Drop for OwnedRegistration {
    fn drop(&mut self) {
        self.registry.release(std::mem::take(&mut self.held));
    }
}

#[derive(Debug)]
enum Held {
    /// A cache entry or arena; released by reference count.
    Entry(Slot),
    /// A registration of no cache, deregistered on release.
    Transient(RegHandle),
}

/// The FMRD deregistration thread and the batches in flight to it.
#[derive(Debug)]
struct Fmd {
    sender: Option<SyncSender<Vec<RegHandle>>>,
    in_flight: Arc<(Mutex<usize>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the state consistent before anything that can panic.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Fmd {
    fn start(registrar: Arc<dyn Registrar>, counters: Arc<Counters>) -> Result<Self, RegError> {
        let (sender, receiver) = sync_channel::<Vec<RegHandle>>(FMRD_BATCHES_QUEUED_MAX);
        let in_flight = Arc::new((Mutex::new(0usize), Condvar::new()));
        let worker_in_flight = Arc::clone(&in_flight);
        let thread = std::thread::Builder::new()
            .name("tessera-fmd".to_owned())
            .spawn(move || {
                for batch in receiver {
                    counters.deregister(registrar.as_ref(), batch, true);
                    let (count, done) = &*worker_in_flight;
                    *lock(count) -= 1;
                    done.notify_all();
                }
            })
            .map_err(RegError::Thread)?;
        Ok(Self {
            sender: Some(sender),
            in_flight,
            thread: Some(thread),
        })
    }

    /// Hands `batch` to the thread, or returns it when the thread's queue is full.
    fn submit(&self, batch: Vec<RegHandle>) -> Option<Vec<RegHandle>> {
        let Some(sender) = &self.sender else {
            return Some(batch);
        };
        let (count, _) = &*self.in_flight;
        *lock(count) += 1;
        match sender.try_send(batch) {
            Ok(()) => None,
            Err(TrySendError::Full(batch) | TrySendError::Disconnected(batch)) => {
                *lock(count) -= 1;
                Some(batch)
            }
        }
    }

    /// Waits until every submitted batch is deregistered.
    fn wait_idle(&self) {
        let (count, done) = &*self.in_flight;
        let mut pending = lock(count);
        while *pending > 0 {
            pending = done.wait(pending).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Registers segments for transfers, per a [`Policy`]; see the module documentation.
pub struct Registry {
    registrar: Arc<dyn Registrar>,
    policy: Policy,
    page_bytes: usize,
    state: Mutex<Table>,
    counters: Arc<Counters>,
    fmd: Option<Fmd>,
    monitor: Option<Arc<Monitor>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("registrar", &self.registrar.name())
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// A registry over `registrar` with `policy`; FMRD with [`Policy::fmrd_thread`] starts its
    /// deregistration thread.
    pub fn new(registrar: Arc<dyn Registrar>, policy: Policy) -> Result<Self, RegError> {
        policy.check()?;
        let counters = Arc::new(Counters::default());
        let fmd = if policy.caching == Caching::Fmrd && policy.fmrd_thread {
            Some(Fmd::start(Arc::clone(&registrar), Arc::clone(&counters))?)
        } else {
            None
        };
        let monitor = if policy.watch_unmaps && policy.caching != Caching::None {
            match Monitor::process() {
                Ok(monitor) => Some(monitor),
                Err(why) => {
                    static SAID: std::sync::Once = std::sync::Once::new();
                    SAID.call_once(|| tracing::warn!("{why}"));
                    None
                }
            }
        } else {
            None
        };
        let mut table = Table::default();
        if let Some(monitor) = &monitor {
            // Unmaps before this registry existed concern no registration of it.
            table.monitor_cursor = monitor.position();
        }
        Ok(Self {
            registrar,
            policy,
            page_bytes: page_bytes(),
            state: Mutex::new(table),
            counters,
            fmd,
            monitor,
        })
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The registrar.
    pub fn registrar(&self) -> &Arc<dyn Registrar> {
        &self.registrar
    }

    /// Whether cached registrations are watched for unmaps.
    pub fn watching(&self) -> bool {
        self.monitor.is_some()
    }

    /// Whether the monitor logged, since `position`, an unmap touching one of `made` (or lost
    /// count). Called under the table lock, after [`Self::apply_unmaps`].
    fn unmapped_since(&self, position: u64, made: &[Made]) -> bool {
        let Some(monitor) = &self.monitor else {
            return false;
        };
        match monitor.read_from(position).0 {
            Unmapped::Overrun => true,
            Unmapped::Events(events) => events.iter().any(|event| {
                made.iter()
                    .any(|part| part.handle.segment.overlaps(&event.segment))
            }),
        }
    }

    /// Forgets every registration whose memory the monitor saw unmapped, discarded or moved
    /// since the last look (all of them if the log overran); their deregistrations go to
    /// `deferred`. Called under the table lock before anything is looked up or cached.
    fn apply_unmaps(&self, state: &mut Table, deferred: &mut Deferred) {
        let Some(monitor) = &self.monitor else {
            return;
        };
        monitor.settle();
        let (unmapped, cursor) = monitor.read_from(state.monitor_cursor);
        state.monitor_cursor = cursor;
        let mut slots = match unmapped {
            Unmapped::Events(events) if events.is_empty() => return,
            Unmapped::Events(events) => events
                .iter()
                .flat_map(|event| state.overlapping(event.segment))
                .collect::<Vec<_>>(),
            Unmapped::Overrun => state.overlapping(Segment::new(0, usize::MAX)),
        };
        slots.sort_unstable();
        slots.dedup();
        for &slot in &slots {
            if let Some(handle) = state.unlink(slot) {
                deferred.now.push(handle);
            }
        }
        bump(&self.counters.unmapped, slots.len() as u64);
    }

    fn rules(&self) -> Rules {
        Rules {
            capacity: self.policy.capacity,
            fmrd: self.policy.caching == Caching::Fmrd,
        }
    }

    /// Registers (or finds registrations for) every segment; the guard releases them.
    pub fn acquire(&self, segments: &[Segment]) -> Result<Registration<'_>, RegError> {
        if segments.len() > ACQUIRE_SEGMENTS_MAX {
            return Err(RegError::TooManySegments {
                count: segments.len(),
                max: ACQUIRE_SEGMENTS_MAX,
            });
        }
        for (index, segment) in segments.iter().enumerate() {
            if segment.length == 0 {
                return Err(RegError::EmptySegment { index });
            }
            if segment.checked_end().is_none() {
                return Err(RegError::AddressOverflow {
                    address: segment.address,
                    length: segment.length,
                });
            }
        }
        let mut guard = Registration {
            registry: self,
            covers: Vec::with_capacity(segments.len()),
            held: Vec::new(),
        };
        let mut covers: Vec<Option<Cover>> = vec![None; segments.len()];
        let mut misses = Vec::new();
        let mut deferred = Deferred::default();
        let generation;
        let unmaps_seen;
        // Counted only when the acquire succeeds.
        let (mut hits, mut arena_hits, mut revivals) = (0u64, 0u64, 0u64);
        let mark;
        {
            let mut state = lock(&self.state);
            self.apply_unmaps(&mut state, &mut deferred);
            generation = state.generation;
            unmaps_seen = state.monitor_cursor;
            mark = state.new_mark();
            let rules = self.rules();
            // The registration that served the previous segment: rows of one array usually
            // share one, and checking it first keeps such a hit O(1).
            let mut previous: Option<(Slot, Segment)> = None;
            for (index, &segment) in segments.iter().enumerate() {
                let found = if let Some((slot, _)) =
                    previous.filter(|(_, region)| region.covers(&segment))
                {
                    if state.entry(slot).place == Place::Arena {
                        arena_hits += 1;
                    }
                    Some(slot)
                } else if let Some(slot) = state.find_arena(segment) {
                    arena_hits += 1;
                    Some(slot)
                } else if self.policy.caching == Caching::None {
                    None
                } else {
                    state.find_cached(segment)
                };
                let Some(slot) = found else {
                    misses.push(index);
                    continue;
                };
                hits += 1;
                if state.entry(slot).place == Place::Queued {
                    revivals += 1;
                    if let Err(err) = state.revive(slot, &rules, &self.counters, &mut deferred) {
                        // The guard's drop releases what it holds.
                        drop(state);
                        self.finish(deferred);
                        return Err(err);
                    }
                }
                if state.hold(slot, mark) {
                    guard.held.push(Held::Entry(slot));
                }
                let handle = &state.entry(slot).handle;
                previous = Some((slot, handle.segment));
                covers[index] = Some(Cover {
                    segment,
                    region: handle.segment,
                    key: handle.key,
                    descriptor: handle.descriptor,
                });
            }
        }
        self.finish(std::mem::take(&mut deferred));
        if !misses.is_empty() {
            let made = self.register_misses(segments, &misses)?;
            let since = (generation, unmaps_seen, mark);
            self.adopt(made, segments, since, &mut guard, &mut covers)?;
        }
        bump(&self.counters.cache_hits, hits);
        bump(&self.counters.arena_hits, arena_hits);
        bump(&self.counters.revivals, revivals);
        bump(&self.counters.cache_misses, misses.len() as u64);
        guard.covers = covers
            .into_iter()
            .map(|cover| cover.expect("every segment is covered"))
            .collect();
        Ok(guard)
    }

    /// Registers the segments at `misses` per the grouping; on error nothing stays registered.
    fn register_misses(
        &self,
        segments: &[Segment],
        misses: &[usize],
    ) -> Result<Vec<Made>, RegError> {
        let missed: Vec<Segment> = misses.iter().map(|&index| segments[index]).collect();
        let groups = match self.policy.grouping {
            Grouping::Ogr => plan_groups(&missed, &self.registrar.cost(), self.page_bytes),
            Grouping::Individual => {
                let mut order: Vec<usize> = (0..missed.len()).collect();
                order.sort_by_key(|&index| missed[index]);
                let mut groups: Vec<Group> = Vec::new();
                for index in order {
                    match groups.last_mut() {
                        Some(group) if group.hull == missed[index] => group.members.push(index),
                        _ => groups.push(Group {
                            hull: missed[index],
                            members: vec![index],
                        }),
                    }
                }
                groups
            }
        };
        if self.policy.caching != Caching::None {
            // Refuse before registering when the groups cannot fit beside what is in use.
            let state = lock(&self.state);
            let needed = state.held_entries() + groups.len();
            if needed > self.policy.capacity.entries_max {
                return Err(RegError::CacheFull {
                    limit: "CacheCapacity::entries_max",
                    unit: "entries",
                    max: self.policy.capacity.entries_max,
                    needed,
                });
            }
        }
        let mut made: Vec<Made> = Vec::with_capacity(groups.len());
        for group in &groups {
            let result = match self.policy.grouping {
                Grouping::Ogr => {
                    register_group(self.registrar.as_ref(), &self.counters, group, &missed)
                }
                Grouping::Individual => self
                    .counters
                    .register(self.registrar.as_ref(), group.hull)
                    .map(|handle| {
                        vec![Made {
                            handle,
                            members: group.members.clone(),
                        }]
                    }),
            };
            match result {
                Ok(parts) => made.extend(parts),
                Err(err) => {
                    let handles = made.into_iter().map(|made| made.handle).collect();
                    self.deregister_each(handles);
                    return Err(err);
                }
            }
        }
        // Members index `missed`; map them back to the acquire's segments.
        for part in &mut made {
            for member in &mut part.members {
                *member = misses[*member];
            }
        }
        Ok(made)
    }

    /// Puts new registrations into the guard: cached when there is a cache, no invalidation
    /// ran and no unmap touched them since the acquire began, else transient.
    fn adopt(
        &self,
        made: Vec<Made>,
        segments: &[Segment],
        (generation, unmaps_seen, mark): (u64, u64, u64),
        guard: &mut Registration<'_>,
        covers: &mut [Option<Cover>],
    ) -> Result<(), RegError> {
        let mut deferred = Deferred::default();
        let mut cache = self.policy.caching != Caching::None;
        if let (true, Some(monitor)) = (cache, &self.monitor) {
            // Watched before the table is checked: an unmap after this is in the log.
            if !made.iter().all(|part| monitor.watch(part.handle.segment)) {
                bump(&self.counters.unwatched, made.len() as u64);
                cache = false;
            }
        }
        if cache {
            let mut state = lock(&self.state);
            self.apply_unmaps(&mut state, &mut deferred);
            if state.generation == generation && !self.unmapped_since(unmaps_seen, &made) {
                let bytes = made.iter().map(|part| part.handle.segment.length).sum();
                if let Err(err) = state.make_room(
                    &self.rules(),
                    made.len(),
                    bytes,
                    &self.counters,
                    &mut deferred,
                ) {
                    drop(state);
                    self.finish(deferred);
                    self.deregister_each(made.into_iter().map(|part| part.handle).collect());
                    return Err(err);
                }
                for part in &made {
                    let slot = state.insert_cached(part.handle.clone(), mark);
                    guard.held.push(Held::Entry(slot));
                }
            } else {
                cache = false;
            }
        }
        for part in made {
            let cover_of = |index: usize| Cover {
                segment: segments[index],
                region: part.handle.segment,
                key: part.handle.key,
                descriptor: part.handle.descriptor,
            };
            for &member in &part.members {
                covers[member] = Some(cover_of(member));
            }
            if !cache {
                guard.held.push(Held::Transient(part.handle));
            }
        }
        self.finish(deferred);
        Ok(())
    }

    /// Gives back what a guard held.
    fn release(&self, held: Vec<Held>) {
        let mut deferred = Deferred::default();
        {
            let mut state = lock(&self.state);
            for item in held {
                match item {
                    Held::Transient(handle) => deferred.now.push(handle),
                    Held::Entry(slot) => {
                        if let Some(handle) = state.release(slot) {
                            deferred.now.push(handle);
                        }
                    }
                }
            }
        }
        self.finish(deferred);
    }

    /// Runs deregistrations decided under the lock.
    fn finish(&self, deferred: Deferred) -> Option<RegError> {
        let mut first_failure = self.deregister_each(deferred.now);
        for batch in deferred.batches {
            let inline = match &self.fmd {
                Some(fmd) => fmd.submit(batch),
                None => Some(batch),
            };
            if let Some(batch) = inline {
                let failure = self
                    .counters
                    .deregister(self.registrar.as_ref(), batch, false);
                first_failure = first_failure.or(failure);
            }
        }
        first_failure
    }

    /// Deregisters each handle with its own call.
    fn deregister_each(&self, handles: Vec<RegHandle>) -> Option<RegError> {
        let mut first_failure = None;
        for handle in handles {
            let failure = self
                .counters
                .deregister(self.registrar.as_ref(), vec![handle], false);
            first_failure = first_failure.or(failure);
        }
        first_failure
    }

    /// As [`Registry::acquire`], with a guard that holds the registry by `Arc`.
    pub fn acquire_owned(
        self: &Arc<Self>,
        segments: &[Segment],
    ) -> Result<OwnedRegistration, RegError> {
        let mut borrowed = self.acquire(segments)?;
        let covers = std::mem::take(&mut borrowed.covers);
        let held = std::mem::take(&mut borrowed.held);
        // Releases nothing: the owned guard took what the borrowed one held.
        drop(borrowed);
        Ok(OwnedRegistration {
            registry: self.clone(),
            covers,
            held,
        })
    }

    /// Registers `segment` as an arena: registered once, every acquired segment inside it is a
    /// hit with no registrar call, until [`Self::deregister_arena`] or an invalidation.
    pub fn register_arena(&self, segment: Segment) -> Result<u64, RegError> {
        if segment.length == 0 {
            return Err(RegError::EmptySegment { index: 0 });
        }
        if segment.checked_end().is_none() {
            return Err(RegError::AddressOverflow {
                address: segment.address,
                length: segment.length,
            });
        }
        if lock(&self.state).arenas.len() >= ARENAS_MAX {
            return Err(RegError::TooManyArenas { max: ARENAS_MAX });
        }
        let handle = self.counters.register(self.registrar.as_ref(), segment)?;
        if let Some(monitor) = &self.monitor {
            // An arena is the caller's to deregister; watching it is a safety net, not a
            // condition.
            monitor.watch(handle.segment);
        }
        let mut state = lock(&self.state);
        if state.arenas.len() >= ARENAS_MAX {
            drop(state);
            self.deregister_each(vec![handle]);
            return Err(RegError::TooManyArenas { max: ARENAS_MAX });
        }
        let slot = state.insert_arena(handle);
        Ok(state.entry(slot).sequence)
    }

    /// Deregisters an arena no guard holds.
    pub fn deregister_arena(&self, arena: u64) -> Result<(), RegError> {
        let handle = {
            let mut state = lock(&self.state);
            let Some(slot) = state.arena_by_id(arena) else {
                return Err(RegError::UnknownArena(arena));
            };
            let holders = state.entry(slot).holders;
            if holders > 0 {
                return Err(RegError::ArenaInUse { id: arena, holders });
            }
            state.unlink(slot).expect("an idle arena is removed")
        };
        self.deregister_each(vec![handle]).map_or(Ok(()), Err)
    }

    /// Forgets and deregisters every registration overlapping `segment` — cached, queued or
    /// arena — and returns how many. Call it before freeing or unmapping memory that may have
    /// been registered. One held by a guard is deregistered when that guard drops; none is
    /// returned by an acquire after this call. Returns the first deregistration failure (the
    /// registrations are forgotten regardless).
    pub fn invalidate(&self, segment: Segment) -> Result<usize, RegError> {
        let mut deferred = Deferred::default();
        let removed = {
            let mut state = lock(&self.state);
            state.generation += 1;
            let slots = state.overlapping(segment);
            for &slot in &slots {
                if let Some(handle) = state.unlink(slot) {
                    deferred.now.push(handle);
                }
            }
            slots.len()
        };
        bump(&self.counters.invalidated, removed as u64);
        let failure = self.finish(deferred);
        if let Some(fmd) = &self.fmd {
            // A batch in flight may hold a registration of this range; it is out of every
            // index already, but the caller is about to unmap: let it finish first.
            fmd.wait_idle();
        }
        failure.map_or(Ok(removed), Err)
    }

    /// Deregisters the FMRD queue now (on this thread) and waits for batches in flight.
    pub fn flush(&self) -> Result<(), RegError> {
        let batch = { lock(&self.state).take_queue() };
        let failure = self
            .counters
            .deregister(self.registrar.as_ref(), batch, false);
        if let Some(fmd) = &self.fmd {
            fmd.wait_idle();
        }
        failure.map_or(Ok(()), Err)
    }

    /// Waits until the FMRD thread has deregistered every batch handed to it so far (the queue
    /// not yet full stays queued); returns at once for other policies. For measurements that
    /// must not let one run's deregistrations spill into the next.
    pub fn wait_background(&self) {
        if let Some(fmd) = &self.fmd {
            fmd.wait_idle();
        }
    }

    /// Deregisters every idle cached entry and the FMRD queue (arenas and entries in use
    /// stay); returns how many cached entries were dropped.
    pub fn clear(&self) -> Result<usize, RegError> {
        let handles = {
            let mut state = lock(&self.state);
            let idle = state.idle();
            let mut handles: Vec<RegHandle> = idle
                .into_iter()
                .filter_map(|slot| state.unlink(slot))
                .collect();
            handles.extend(state.take_queue());
            handles
        };
        let dropped = handles.len();
        let failure = self.deregister_each(handles);
        if let Some(fmd) = &self.fmd {
            fmd.wait_idle();
        }
        failure.map_or(Ok(dropped), Err)
    }

    /// Counters since creation, and the cache's size now.
    pub fn stats(&self) -> RegStats {
        let mut stats = self.counters.snapshot();
        let state = lock(&self.state);
        stats.cached_entries = state.cached_entries;
        stats.cached_bytes = state.cached_bytes;
        stats.queued = state.queue.len();
        stats.arenas = state.arenas.len();
        stats
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        // No guard outlives the registry (they borrow it), so everything is idle.
        let handles = self
            .state
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .drain();
        if let Some(fmd) = &mut self.fmd {
            fmd.sender = None;
            if let Some(thread) = fmd.thread.take() {
                let _ = thread.join();
            }
        }
        if !handles.is_empty() {
            self.counters
                .deregister(self.registrar.as_ref(), handles, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{CACHE_ENTRIES_MAX, FMRD_BATCH};
    use crate::registrar::{CostModel, NoneRegistrar};

    const PAGE: usize = 4096;

    fn registry(
        grouping: Grouping,
        caching: Caching,
        entries_max: usize,
    ) -> (Arc<NoneRegistrar>, Registry) {
        let registrar = Arc::new(NoneRegistrar::with_cost(CostModel::PIN_DEFAULT));
        let registry = Registry::new(
            registrar.clone(),
            // The segments are made-up addresses: nothing there to watch.
            Policy::new(grouping, caching)
                .with_entries_max(entries_max)
                .with_watch_unmaps(false),
        )
        .unwrap();
        (registrar, registry)
    }

    fn page_segment(page: usize) -> Segment {
        Segment::new((1 << 30) + page * PAGE, 100)
    }

    #[test]
    fn dynamic_individual_registers_and_deregisters_each_segment() {
        let (registrar, registry) = registry(Grouping::Individual, Caching::None, 16);
        let segments = [
            page_segment(0),
            page_segment(10),
            page_segment(20),
            page_segment(10),
        ];
        {
            let guard = registry.acquire(&segments).unwrap();
            assert_eq!(guard.len(), 4);
            assert_eq!(guard.registrations(), 3, "the repeated segment shares one");
            assert_eq!(guard.key(1), guard.key(3));
            assert_ne!(guard.key(0), guard.key(1));
            for (cover, segment) in guard.covers().iter().zip(segments) {
                assert_eq!(cover.segment, segment);
                assert!(cover.region.covers(&segment));
            }
            assert_eq!(registrar.deregisters(), 0);
        }
        assert_eq!((registrar.registers(), registrar.deregisters()), (3, 3));
        let stats = registry.stats();
        assert_eq!((stats.registrations, stats.deregistrations), (3, 3));
        assert_eq!((stats.cache_hits, stats.cache_misses), (0, 4));
    }

    #[test]
    fn ogr_registers_a_subarray_once() {
        let (registrar, registry) = registry(Grouping::Ogr, Caching::None, 16);
        let rows: Vec<Segment> = (0..1024)
            .map(|row| Segment::new((1 << 30) + 16 + row * 8192, 4096))
            .collect();
        let guard = registry.acquire(&rows).unwrap();
        assert_eq!(guard.registrations(), 1);
        assert_eq!(registrar.registers(), 1);
        let region = guard.covers()[0].region;
        assert_eq!(region, Segment::new(rows[0].address, 1023 * 8192 + 4096));
        assert!(guard.covers().iter().all(|cover| cover.region == region));
        drop(guard);
        assert_eq!(registrar.deregisters(), 1);
    }

    #[test]
    fn pin_down_hits_evicts_lru_at_once_and_never_an_entry_in_use() {
        let (registrar, registry) = registry(Grouping::Individual, Caching::PinDown, 2);
        drop(registry.acquire(&[page_segment(0)]).unwrap());
        drop(registry.acquire(&[page_segment(1)]).unwrap());
        // A sub-range of a cached registration is a hit.
        let inner = Segment::new(page_segment(0).address + 10, 20);
        drop(registry.acquire(&[inner]).unwrap());
        assert_eq!(registrar.registers(), 2);
        // Page 1 is now the least recently released: evicted and deregistered at once.
        drop(registry.acquire(&[page_segment(2)]).unwrap());
        assert_eq!((registrar.registers(), registrar.deregisters()), (3, 1));
        let stats = registry.stats();
        assert_eq!(
            (stats.cache_hits, stats.cache_misses, stats.evictions),
            (1, 3, 1)
        );
        // Both entries in use: a third cannot be added.
        let first = registry.acquire(&[page_segment(0)]).unwrap();
        let second = registry.acquire(&[page_segment(2)]).unwrap();
        let err = registry.acquire(&[page_segment(3)]).unwrap_err();
        assert!(
            matches!(
                err,
                RegError::CacheFull {
                    limit: "CacheCapacity::entries_max",
                    max: 2,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(registrar.registers(), 3, "refused before registering");
        drop((first, second));
        assert_eq!(registry.clear().unwrap(), 2);
        assert_eq!(registrar.deregisters(), 3);
    }

    #[test]
    fn byte_capacity_evicts_too() {
        let registrar = Arc::new(NoneRegistrar::new());
        let registry = Registry::new(
            registrar.clone(),
            Policy::new(Grouping::Individual, Caching::PinDown)
                .with_bytes_max(250)
                .with_watch_unmaps(false),
        )
        .unwrap();
        for page in 0..3 {
            drop(registry.acquire(&[page_segment(page)]).unwrap());
        }
        let stats = registry.stats();
        assert_eq!(
            (stats.cached_entries, stats.cached_bytes, stats.evictions),
            (2, 200, 1)
        );
        let err = registry.acquire(&[Segment::new(1 << 20, 300)]).unwrap_err();
        assert!(
            matches!(err, RegError::CacheFull { unit: "bytes", .. }),
            "{err}"
        );
        // Refused without evicting what could not make room anyway, and the refused
        // registration is not left behind.
        assert_eq!(registry.stats().cached_entries, 2);
        assert_eq!(registrar.registers(), registrar.deregisters() + 2);
    }

    #[test]
    fn fmrd_queues_evictions_deregisters_in_batches_and_revives() {
        for thread in [false, true] {
            fmrd_batches(thread);
        }
    }

    fn fmrd_batches(thread: bool) {
        let registrar = Arc::new(NoneRegistrar::new());
        let registry = Registry::new(
            registrar.clone(),
            Policy::new(Grouping::Individual, Caching::Fmrd)
                .with_entries_max(1)
                .with_fmrd_thread(thread)
                .with_watch_unmaps(false),
        )
        .unwrap();
        drop(registry.acquire(&[page_segment(0)]).unwrap());
        drop(registry.acquire(&[page_segment(1)]).unwrap());
        // Page 0 waits in the queue; asking for it again revives it without a registration.
        drop(registry.acquire(&[page_segment(0)]).unwrap());
        let stats = registry.stats();
        assert_eq!(
            (stats.registrations, stats.revivals, stats.cache_hits),
            (2, 1, 1)
        );
        assert_eq!((stats.queued, stats.deregistrations), (1, 0));
        for page in 2..(2 + FMRD_BATCH) {
            drop(registry.acquire(&[page_segment(page)]).unwrap());
        }
        registry.wait_background();
        assert_eq!(registry.stats().deregistrations, FMRD_BATCH as u64);
        assert_eq!(registry.stats().queued, 1);
        registry.flush().unwrap();
        let stats = registry.stats();
        assert_eq!(stats.evictions, 2 + FMRD_BATCH as u64);
        assert_eq!(stats.deregistrations, 1 + FMRD_BATCH as u64);
        assert_eq!(
            stats.deregistration_batches, 1,
            "one full batch; the flush held one entry"
        );
        assert_eq!(stats.queued, 0);
        assert_eq!(stats.background_deregistration_us > 0.0, thread);
        assert_eq!(registrar.deregisters(), stats.deregistrations);
    }

    #[test]
    fn arenas_serve_every_segment_inside_them_without_a_registrar_call() {
        let (registrar, registry) = registry(Grouping::Individual, Caching::None, 4);
        let arena = registry
            .register_arena(Segment::new(1 << 30, 64 * PAGE))
            .unwrap();
        let segments: Vec<Segment> = (0..32).map(|page| page_segment(page * 2)).collect();
        let guard = registry.acquire(&segments).unwrap();
        assert_eq!(registrar.registers(), 1);
        assert_eq!(guard.registrations(), 1);
        assert!(matches!(
            registry.deregister_arena(arena),
            Err(RegError::ArenaInUse { holders: 1, .. })
        ));
        drop(guard);
        let stats = registry.stats();
        assert_eq!(
            (stats.arena_hits, stats.cache_hits, stats.cache_misses),
            (32, 32, 0)
        );
        registry.deregister_arena(arena).unwrap();
        assert!(matches!(
            registry.deregister_arena(arena),
            Err(RegError::UnknownArena(_))
        ));
        assert_eq!(registrar.deregisters(), 1);
        // Past the arena: a miss.
        drop(registry.acquire(&[page_segment(0)]).unwrap());
        assert_eq!(registrar.registers(), 2);
    }

    #[test]
    fn invalidate_removes_cached_queued_held_and_arena_registrations() {
        let (registrar, registry) = registry(Grouping::Individual, Caching::Fmrd, 2);
        let first = registry.acquire(&[page_segment(0)]).unwrap();
        let old_key = first.key(0);
        drop(first);
        let held = registry.acquire(&[page_segment(1)]).unwrap();
        drop(registry.acquire(&[page_segment(2)]).unwrap()); // page 0 → queue
        registry
            .register_arena(Segment::new(page_segment(1).address, 10))
            .unwrap();
        assert_eq!(registry.stats().queued, 1);
        // Pages 0..=1 hold a queued entry, a held entry and an arena.
        let removed = registry
            .invalidate(Segment::new(page_segment(0).address, 2 * PAGE))
            .unwrap();
        assert_eq!(removed, 3);
        let stats = registry.stats();
        assert_eq!(
            (stats.queued, stats.arenas, stats.cached_entries),
            (0, 0, 1)
        );
        assert_eq!(stats.invalidated, 3);
        // The held one is deregistered when its guard drops, not before.
        let deregistered = registrar.deregisters();
        let again = registry.acquire(&[page_segment(1)]).unwrap();
        assert_ne!(
            again.key(0),
            held.key(0),
            "a stale registration was returned"
        );
        drop(held);
        assert_eq!(registrar.deregisters(), deregistered + 1);
        let fresh = registry.acquire(&[page_segment(0)]).unwrap();
        assert_ne!(fresh.key(0), old_key, "a stale registration was returned");
    }

    #[test]
    fn owned_guards_can_leave_the_thread_and_release_on_drop() {
        let (registrar, registry) = registry(Grouping::Ogr, Caching::None, 4);
        let registry = Arc::new(registry);
        let guard = registry
            .acquire_owned(&[page_segment(0), page_segment(1)])
            .unwrap();
        assert_eq!((guard.covers().len(), guard.registrations()), (2, 1));
        let boxed: Box<dyn Send> = Box::new(guard);
        std::thread::spawn(move || drop(boxed)).join().unwrap();
        assert_eq!((registrar.registers(), registrar.deregisters()), (1, 1));
    }

    #[test]
    fn bad_input_is_refused_with_errors() {
        let (_, registry) = registry(Grouping::Ogr, Caching::PinDown, 4);
        assert!(matches!(
            registry.acquire(&[page_segment(0), Segment::new(1 << 30, 0)]),
            Err(RegError::EmptySegment { index: 1 })
        ));
        assert!(matches!(
            registry.acquire(&[Segment::new(usize::MAX - 1, 5)]),
            Err(RegError::AddressOverflow { .. })
        ));
        let many = vec![page_segment(0); ACQUIRE_SEGMENTS_MAX + 1];
        assert!(matches!(
            registry.acquire(&many),
            Err(RegError::TooManySegments { .. })
        ));
        assert!(registry.acquire(&[]).unwrap().is_empty());
        let registrar: Arc<dyn Registrar> = Arc::new(NoneRegistrar::new());
        for entries in [0, CACHE_ENTRIES_MAX + 1] {
            let policy = Policy::default().with_entries_max(entries);
            assert!(matches!(
                Registry::new(registrar.clone(), policy),
                Err(RegError::Policy(_))
            ));
        }
    }

    /// Refuses every registration that overlaps one of its forbidden ranges.
    struct Refusing {
        inner: NoneRegistrar,
        forbidden: Vec<Segment>,
    }

    impl Registrar for Refusing {
        fn name(&self) -> &'static str {
            "refusing"
        }
        fn register(&self, segment: Segment) -> Result<RegHandle, RegError> {
            if self.forbidden.iter().any(|bad| bad.overlaps(&segment)) {
                return Err(RegError::Registrar {
                    registrar: "refusing".to_owned(),
                    operation: "register",
                    segment,
                    message: "forbidden".to_owned(),
                });
            }
            self.inner.register(segment)
        }
        fn deregister(&self, handle: RegHandle) -> Result<(), RegError> {
            self.inner.deregister(handle)
        }
        fn cost(&self) -> CostModel {
            CostModel::PIN_DEFAULT
        }
    }

    #[test]
    fn ogr_registers_a_small_refused_group_as_given() {
        let registrar = Arc::new(Refusing {
            inner: NoneRegistrar::new(),
            forbidden: vec![Segment::new(page_segment(1).address, 1)],
        });
        let registry =
            Registry::new(registrar.clone(), Policy::new(Grouping::Ogr, Caching::None)).unwrap();
        let segments = [page_segment(0), page_segment(2), page_segment(4)];
        let guard = registry.acquire(&segments).unwrap();
        assert_eq!(guard.registrations(), 3);
        let stats = registry.stats();
        assert_eq!((stats.failed_optimistic, stats.hole_queries), (1, 0));
        assert_eq!(stats.registrations, 3);
        drop(guard);
        // A wanted segment the registrar refuses is an error, and nothing stays registered.
        let err = registry
            .acquire(&[page_segment(0), page_segment(1)])
            .unwrap_err();
        assert!(matches!(err, RegError::Registrar { .. }), "{err}");
        assert_eq!(registrar.inner.registers(), registrar.inner.deregisters());
    }

    #[test]
    fn concurrent_acquires_leave_nothing_registered() {
        let registrar = Arc::new(NoneRegistrar::with_cost(CostModel::PIN_DEFAULT));
        let registry = Arc::new(
            Registry::new(
                registrar.clone(),
                Policy::new(Grouping::Ogr, Caching::Fmrd)
                    .with_entries_max(8)
                    .with_fmrd_thread(true),
            )
            .unwrap(),
        );
        let threads: Vec<_> = (0..4)
            .map(|thread| {
                let registry = Arc::clone(&registry);
                std::thread::spawn(move || {
                    for round in 0..500 {
                        let base = (round * 7 + thread * 13) % 40;
                        let segments = [page_segment(base), page_segment(base + 1)];
                        let guard = registry.acquire(&segments).unwrap();
                        assert_eq!(guard.len(), 2);
                        if round % 50 == 0 {
                            registry.invalidate(page_segment(base + 20)).unwrap();
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        registry.clear().unwrap();
        let stats = registry.stats();
        assert_eq!(stats.cached_entries, 0);
        assert_eq!(stats.registrations, stats.deregistrations);
        assert_eq!(registrar.registers(), registrar.deregisters());
    }
}
