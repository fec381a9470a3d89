//! Byte-range locks on files: the table behind `LockRange` and `UnlockRange`.
//!
//! A lock request names a file handle, a byte range `[start, end)`, shared or exclusive, how
//! long it may wait and how long the lock may be held (its lease). Two locks conflict when
//! their ranges overlap and at least one is exclusive. Per handle the table keeps the granted
//! locks, each with its lease expiry, and a FIFO queue of waiting requests.
//!
//! Fairness: a request is granted at once only when it conflicts with no unexpired granted
//! lock **and** no request already waiting. So a writer waiting for readers to finish is not
//! overtaken by later readers of overlapping bytes; requests on disjoint bytes pass freely.
//! When a lock goes (unlock, lease expiry, a waiter giving up), the queue is walked in order
//! and every waiter that conflicts with nothing granted and nothing waiting before it is
//! granted.
//!
//! Expired leases are dropped lazily, whenever the table looks at the file, and a waiter
//! blocked by a granted lock also sleeps only until the earliest lease of that file ends, so
//! a client that died holding a lock delays others by its lease at most.
//!
//! Waiting is asynchronous (a oneshot channel per waiter, a tokio timer for the deadline); it
//! holds no thread. It does hold one of the server's `SERVER_REQUESTS_INFLIGHT_MAX` request
//! permits, so at most [`RANGE_LOCK_WAITERS_MAX`] requests wait at once: a full queue answers
//! `Busy` at once, and permits are always left for the `UnlockRange` that ends a wait.
//!
//! Each lock and waiter belongs to the uid that asked for it (its **holder**): only that uid
//! releases it (a lease that ends frees it whoever held it), and one uid holds or waits for at
//! most [`RANGE_LOCKS_PER_UID_MAX`] locks and [`RANGE_LOCK_WAITERS_PER_UID_MAX`] waits, so one
//! user can fill neither the table nor the queue for the others. The table keeps, per holder,
//! its counts and the files it has locks on, so a holder at its limit has only its own files
//! refreshed.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tessera_proto::limits::{
    FILE_BYTES_MAX, RANGE_LOCKS_MAX, RANGE_LOCKS_PER_UID_MAX, RANGE_LOCK_LEASE_MS_MAX,
    RANGE_LOCK_WAIT_MS_MAX, SERVER_REQUESTS_INFLIGHT_MAX,
};
use tessera_proto::{ErrorCode, LockRange, RemoteError};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Most `LockRange` requests waiting at once, over all files. Each holds a request permit of
/// the server while it waits; half of them stay free for unlocks and namespace calls.
pub const RANGE_LOCK_WAITERS_MAX: usize = SERVER_REQUESTS_INFLIGHT_MAX / 2;

/// Most `LockRange` requests one uid may have waiting at once: a share of the queue, so one
/// user's waits cannot turn every other user's away.
pub const RANGE_LOCK_WAITERS_PER_UID_MAX: usize = RANGE_LOCK_WAITERS_MAX / 4;

const _: () = assert!(RANGE_LOCK_WAITERS_MAX >= 1);
const _: () = assert!(RANGE_LOCK_WAITERS_MAX < SERVER_REQUESTS_INFLIGHT_MAX);
const _: () = assert!(RANGE_LOCK_WAITERS_MAX <= RANGE_LOCKS_MAX);
const _: () = assert!(
    RANGE_LOCK_WAITERS_PER_UID_MAX >= 1
        && RANGE_LOCK_WAITERS_PER_UID_MAX < RANGE_LOCK_WAITERS_MAX
        && RANGE_LOCK_WAITERS_PER_UID_MAX <= RANGE_LOCKS_PER_UID_MAX
);

/// Bytes `[start, end)` of a file, locked shared or exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockedRange {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// A writer's lock.
    pub exclusive: bool,
}

impl LockedRange {
    /// Overlapping bytes, and at least one of the two is exclusive.
    pub fn conflicts(&self, other: &Self) -> bool {
        self.start < other.end && other.start < self.end && (self.exclusive || other.exclusive)
    }
}

impl std::fmt::Display for LockedRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.exclusive {
            "exclusive"
        } else {
            "shared"
        };
        write!(f, "bytes [{}, {}) {kind}", self.start, self.end)
    }
}

/// A checked `LockRange`: what to lock, how long to wait, how long to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRequest {
    /// File handle.
    pub handle: u64,
    /// The uid asking: the lock's holder, the only one that may release it.
    pub holder: u32,
    /// The bytes.
    pub range: LockedRange,
    /// How long the request may wait.
    pub wait: Duration,
    /// How long the lock lives unless released first.
    pub lease: Duration,
}

impl LockRequest {
    /// Checks a `LockRange` body from uid `holder` against the range rules and the limits.
    pub fn new(request: &LockRange, holder: u32) -> Result<Self, RemoteError> {
        let LockRange {
            handle,
            start,
            end,
            exclusive,
            wait_ms,
            lease_ms,
            ..
        } = *request;
        if start >= end {
            return Err(RemoteError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "range lock on handle {handle:#x}: start {start} is not below end {end}; a lock covers at least one byte"
                ),
            ));
        }
        if end > FILE_BYTES_MAX {
            return Err(RemoteError::over_limit(
                "file_bytes_max",
                end,
                FILE_BYTES_MAX,
            ));
        }
        if wait_ms > RANGE_LOCK_WAIT_MS_MAX {
            return Err(RemoteError::over_limit(
                "range_lock_wait_ms_max",
                u64::from(wait_ms),
                u64::from(RANGE_LOCK_WAIT_MS_MAX),
            ));
        }
        if lease_ms > RANGE_LOCK_LEASE_MS_MAX {
            return Err(RemoteError::over_limit(
                "range_lock_lease_ms_max",
                u64::from(lease_ms),
                u64::from(RANGE_LOCK_LEASE_MS_MAX),
            ));
        }
        if lease_ms == 0 {
            return Err(RemoteError::new(
                ErrorCode::InvalidArgument,
                format!("range lock on handle {handle:#x}: a lease of 0 ms would end at once"),
            ));
        }
        Ok(Self {
            handle,
            holder,
            range: LockedRange {
                start,
                end,
                exclusive,
            },
            wait: Duration::from_millis(u64::from(wait_ms)),
            lease: Duration::from_millis(u64::from(lease_ms)),
        })
    }
}

#[derive(Debug)]
struct Granted {
    id: u64,
    holder: u32,
    range: LockedRange,
    expires: Instant,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    holder: u32,
    range: LockedRange,
    lease: Duration,
    /// Signalled after the waiter has been moved to `granted`.
    wake: oneshot::Sender<()>,
}

/// What stands in the way of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Blocker {
    Granted(LockedRange),
    Waiting(LockedRange),
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Granted(range) => write!(f, "a lock holds {range}"),
            Self::Waiting(range) => write!(f, "an earlier request waits for {range}"),
        }
    }
}

#[derive(Debug, Default)]
struct FileLocks {
    granted: Vec<Granted>,
    waiting: VecDeque<Waiter>,
}

impl FileLocks {
    /// The first granted lock, then the first of the first `ahead` waiters, that `range`
    /// conflicts with.
    fn blocker(&self, range: &LockedRange, ahead: usize) -> Option<Blocker> {
        if let Some(lock) = self.granted.iter().find(|lock| lock.range.conflicts(range)) {
            return Some(Blocker::Granted(lock.range));
        }
        self.waiting
            .iter()
            .take(ahead)
            .find(|waiter| waiter.range.conflicts(range))
            .map(|waiter| Blocker::Waiting(waiter.range))
    }

    /// Drops expired leases and grants every waiter, in order, that nothing blocks any more.
    /// Returns the holders of the locks dropped and of the waiters granted.
    fn refresh(&mut self, now: Instant) -> (Vec<u32>, Vec<u32>) {
        let mut dropped = Vec::new();
        self.granted.retain(|lock| {
            let live = lock.expires > now;
            if !live {
                dropped.push(lock.holder);
            }
            live
        });
        let mut granted = Vec::new();
        let mut index = 0;
        while index < self.waiting.len() {
            if self.blocker(&self.waiting[index].range, index).is_some() {
                index += 1;
                continue;
            }
            let waiter = self
                .waiting
                .remove(index)
                .expect("index is below the queue length");
            self.granted.push(Granted {
                id: waiter.id,
                holder: waiter.holder,
                range: waiter.range,
                expires: now + waiter.lease,
            });
            // A waiter that went away leaves its guard to drop the lock (see `WaitGuard`).
            let _ = waiter.wake.send(());
            granted.push(waiter.holder);
        }
        (dropped, granted)
    }

    fn earliest_expiry(&self) -> Option<Instant> {
        self.granted.iter().map(|lock| lock.expires).min()
    }

    fn is_empty(&self) -> bool {
        self.granted.is_empty() && self.waiting.is_empty()
    }
}

/// Up to this many locks in the table, the debug check of every call compares each holder's
/// counts with the table entry by entry (above it, only the totals).
#[cfg(any(test, debug_assertions))]
const HOLDERS_CHECKED_LOCKS_MAX: usize = 256;

/// What one uid holds and waits for, over all files.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Held {
    /// Granted plus waiting (bounded by `RANGE_LOCKS_PER_UID_MAX`).
    locks: usize,
    /// Waiting (bounded by `RANGE_LOCK_WAITERS_PER_UID_MAX`).
    waiting: usize,
    /// Per file, this holder's granted plus waiting locks there (a file appears while the
    /// count is above 0), so the holder's own files can be refreshed alone.
    files: HashMap<u64, usize>,
}

#[derive(Debug, Default)]
struct State {
    files: HashMap<u64, FileLocks>,
    /// Granted plus waiting, over all files (bounded by `RANGE_LOCKS_MAX`).
    locks: usize,
    /// Waiting, over all files (bounded by `RANGE_LOCK_WAITERS_MAX`).
    waiting: usize,
    /// Per uid with at least one lock or waiter: what it holds (so at most `RANGE_LOCKS_MAX`
    /// entries).
    holders: HashMap<u32, Held>,
    next_id: u64,
}

impl State {
    /// Counts a new lock (`waiting`: a waiter) of `holder` on `handle`.
    fn count_in(&mut self, holder: u32, handle: u64, waiting: bool) {
        self.locks += 1;
        let held = self.holders.entry(holder).or_default();
        held.locks += 1;
        *held.files.entry(handle).or_default() += 1;
        if waiting {
            self.waiting += 1;
            held.waiting += 1;
        }
    }

    /// Counts out a lock (`waiting`: a waiter) of `holder` on `handle` that went.
    fn count_out(&mut self, holder: u32, handle: u64, waiting: bool) {
        self.locks -= 1;
        if waiting {
            self.waiting -= 1;
        }
        let Some(held) = self.holders.get_mut(&holder) else {
            debug_assert!(false, "uid {holder} holds no lock");
            return;
        };
        held.locks -= 1;
        if waiting {
            held.waiting -= 1;
        }
        if let Some(count) = held.files.get_mut(&handle) {
            *count -= 1;
            if *count == 0 {
                held.files.remove(&handle);
            }
        }
        if held.locks == 0 {
            self.holders.remove(&holder);
        }
    }

    /// Refreshes one file and keeps the counts in step; forgets a file with no locks.
    fn refresh(&mut self, handle: u64, now: Instant) {
        let Some(file) = self.files.get_mut(&handle) else {
            return;
        };
        let (dropped, granted) = file.refresh(now);
        if file.is_empty() {
            self.files.remove(&handle);
        }
        for holder in dropped {
            self.count_out(holder, handle, false);
        }
        for holder in granted {
            // Still a lock of the holder's, no longer a waiter.
            self.waiting -= 1;
            if let Some(held) = self.holders.get_mut(&holder) {
                held.waiting -= 1;
            }
        }
    }

    /// Refreshes the files `holder` has locks on: it is at a limit and its own expired
    /// leases may be taking the room.
    fn refresh_holder(&mut self, holder: u32, now: Instant) {
        let handles: Vec<u64> = self
            .holders
            .get(&holder)
            .map(|held| held.files.keys().copied().collect())
            .unwrap_or_default();
        for handle in handles {
            self.refresh(handle, now);
        }
    }

    /// What `holder` holds now.
    fn held(&self, holder: u32) -> (usize, usize) {
        self.holders
            .get(&holder)
            .map_or((0, 0), |held| (held.locks, held.waiting))
    }

    /// Refreshes every file: the table is full and expired leases may be taking the room.
    fn refresh_all(&mut self, now: Instant) {
        let handles: Vec<u64> = self.files.keys().copied().collect();
        for handle in handles {
            self.refresh(handle, now);
        }
    }

    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Removes the granted lock `id` of `handle` held by `holder`, if there, and also the
    /// waiter `id` when `waiter_too` (a waiter leaving; a client's unlock names only granted
    /// locks). Then grants what that frees. Returns whether something was removed: a lock of
    /// another holder stays.
    fn remove(
        &mut self,
        handle: u64,
        (id, holder): (u64, u32),
        waiter_too: bool,
        now: Instant,
    ) -> bool {
        let Some(file) = self.files.get_mut(&handle) else {
            return false;
        };
        let mut removed = None;
        if let Some(index) = file
            .granted
            .iter()
            .position(|lock| lock.id == id && lock.holder == holder)
        {
            file.granted.swap_remove(index);
            removed = Some(false);
        } else if let Some(index) = file
            .waiting
            .iter()
            .position(|waiter| waiter_too && waiter.id == id && waiter.holder == holder)
        {
            file.waiting.remove(index);
            removed = Some(true);
        }
        if let Some(waiting) = removed {
            self.count_out(holder, handle, waiting);
        }
        self.refresh(handle, now);
        removed.is_some()
    }

    #[cfg(any(test, debug_assertions))]
    fn check_counts(&self) {
        let locks: usize = self
            .files
            .values()
            .map(|file| file.granted.len() + file.waiting.len())
            .sum();
        let waiting: usize = self.files.values().map(|file| file.waiting.len()).sum();
        assert_eq!((self.locks, self.waiting), (locks, waiting));
        assert!(self.files.values().all(|file| !file.is_empty()));
        // The holders' counts add up; entry by entry only while the table is small, since
        // this runs on every call.
        let held_locks: usize = self.holders.values().map(|held| held.locks).sum();
        let held_waiting: usize = self.holders.values().map(|held| held.waiting).sum();
        assert_eq!((held_locks, held_waiting), (self.locks, self.waiting));
        if self.locks > HOLDERS_CHECKED_LOCKS_MAX {
            return;
        }
        let mut holders: HashMap<u32, Held> = HashMap::new();
        for (&handle, file) in &self.files {
            let entries = file
                .granted
                .iter()
                .map(|lock| (lock.holder, false))
                .chain(file.waiting.iter().map(|waiter| (waiter.holder, true)));
            for (holder, waiting) in entries {
                let held = holders.entry(holder).or_default();
                held.locks += 1;
                held.waiting += usize::from(waiting);
                *held.files.entry(handle).or_default() += 1;
            }
        }
        assert_eq!(self.holders, holders);
    }
}

/// What a request got without waiting.
#[derive(Debug)]
enum Attempt {
    Granted(u64),
    Queued(u64, oneshot::Receiver<()>),
}

/// The range locks of every file.
#[derive(Debug, Default)]
pub struct LockTable {
    state: Mutex<State>,
}

impl LockTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        let state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        #[cfg(debug_assertions)]
        state.check_counts();
        state
    }

    fn busy(request: &LockRequest, blocker: Blocker, detail: &str) -> RemoteError {
        RemoteError::new(
            ErrorCode::Busy,
            format!(
                "range lock on handle {:#x}, {}, {detail}: {blocker}",
                request.handle, request.range
            ),
        )
    }

    /// Grants `request` at once, or queues it, or refuses it (a full table, a full queue, or
    /// a conflict and no time to wait).
    fn attempt(&self, request: &LockRequest, now: Instant) -> Result<Attempt, RemoteError> {
        let mut state = self.state();
        let holder = request.holder;
        if state.held(holder).0 >= RANGE_LOCKS_PER_UID_MAX {
            state.refresh_holder(holder, now);
            let (held, _) = state.held(holder);
            if held >= RANGE_LOCKS_PER_UID_MAX {
                return Err(RemoteError::new(
                    ErrorCode::LimitExceeded,
                    format!(
                        "range lock on handle {:#x}, {}: uid {holder} already holds or waits for {held} range locks, the most one uid may (range_locks_per_uid_max {RANGE_LOCKS_PER_UID_MAX}); release some first",
                        request.handle, request.range
                    ),
                ));
            }
        }
        if state.locks >= RANGE_LOCKS_MAX {
            state.refresh_all(now);
            if state.locks >= RANGE_LOCKS_MAX {
                return Err(RemoteError::over_limit(
                    "range_locks_max",
                    state.locks as u64 + 1,
                    RANGE_LOCKS_MAX as u64,
                ));
            }
        }
        state.refresh(request.handle, now);
        let waiting_total = state.waiting;
        let (_, waiting_own) = state.held(holder);
        let id = state.new_id();
        let file = state.files.entry(request.handle).or_default();
        let attempt = match file.blocker(&request.range, file.waiting.len()) {
            None => {
                file.granted.push(Granted {
                    id,
                    holder,
                    range: request.range,
                    expires: now + request.lease,
                });
                Attempt::Granted(id)
            }
            Some(blocker) if request.wait.is_zero() => {
                // A blocker exists, so the file keeps its entry.
                return Err(Self::busy(
                    request,
                    blocker,
                    "not granted (no wait asked for)",
                ));
            }
            Some(blocker) if waiting_own >= RANGE_LOCK_WAITERS_PER_UID_MAX => {
                let error = Self::busy(
                    request,
                    blocker,
                    &format!(
                        "not queued: uid {holder} already has {waiting_own} requests waiting (range_lock_waiters_per_uid_max {RANGE_LOCK_WAITERS_PER_UID_MAX}), retry later"
                    ),
                );
                return Err(error);
            }
            Some(blocker) if waiting_total >= RANGE_LOCK_WAITERS_MAX => {
                let error = Self::busy(
                    request,
                    blocker,
                    &format!(
                        "not queued: {waiting_total} requests already wait (range_lock_waiters_max {RANGE_LOCK_WAITERS_MAX}), retry later"
                    ),
                );
                return Err(error);
            }
            Some(_) => {
                let (wake, woken) = oneshot::channel();
                file.waiting.push_back(Waiter {
                    id,
                    holder,
                    range: request.range,
                    lease: request.lease,
                    wake,
                });
                Attempt::Queued(id, woken)
            }
        };
        let waiting = matches!(attempt, Attempt::Queued(..));
        state.count_in(holder, request.handle, waiting);
        Ok(attempt)
    }

    /// Takes the lock, waiting at most `request.wait` for conflicting locks to go. Returns the
    /// lock id, or `Busy` naming the file, the range and what still blocks it.
    pub async fn lock(&self, request: &LockRequest) -> Result<u64, RemoteError> {
        let start = Instant::now();
        let (id, mut woken) = match self.attempt(request, start)? {
            Attempt::Granted(id) => return Ok(id),
            Attempt::Queued(id, woken) => (id, woken),
        };
        let mut guard = WaitGuard {
            table: self,
            handle: request.handle,
            lock: (id, request.holder),
            armed: true,
        };
        let deadline = start + request.wait;
        loop {
            let wake_at = {
                let state = self.state();
                state
                    .files
                    .get(&request.handle)
                    .and_then(FileLocks::earliest_expiry)
                    .map_or(deadline, |expiry| expiry.min(deadline))
            };
            if let Ok(signal) = tokio::time::timeout_at(wake_at, &mut woken).await {
                guard.armed = false;
                return match signal {
                    Ok(()) => Ok(id),
                    Err(_) => Err(RemoteError::new(
                        ErrorCode::Internal,
                        format!(
                            "range lock on handle {:#x}: the waiter was dropped from the queue",
                            request.handle
                        ),
                    )),
                };
            }
            // A lease may have ended, or the deadline passed: look again under the lock.
            let now = Instant::now();
            let mut state = self.state();
            state.refresh(request.handle, now);
            if woken.try_recv().is_ok() {
                guard.armed = false;
                return Ok(id);
            }
            if now >= deadline {
                let blocker = state.files.get(&request.handle).and_then(|file| {
                    let position = file.waiting.iter().position(|waiter| waiter.id == id)?;
                    file.blocker(&request.range, position)
                });
                state.remove(request.handle, (id, request.holder), true, now);
                guard.armed = false;
                let detail = format!("not granted within {} ms", request.wait.as_millis());
                return Err(match blocker {
                    Some(blocker) => Self::busy(request, blocker, &detail),
                    None => RemoteError::new(
                        ErrorCode::Busy,
                        format!(
                            "range lock on handle {:#x}, {}, {detail}",
                            request.handle, request.range
                        ),
                    ),
                });
            }
        }
    }

    /// Releases the lock `id` of `handle` if uid `holder` holds it; returns whether it did.
    /// An unknown id (never granted, released, or expired) and another uid's lock release
    /// nothing, alike: the caller learns nothing of other users' locks.
    pub fn unlock(&self, handle: u64, id: u64, holder: u32) -> bool {
        self.state()
            .remove(handle, (id, holder), false, Instant::now())
    }

    /// Granted plus waiting locks over all files (expired leases not yet dropped included).
    pub fn len(&self) -> usize {
        self.state().locks
    }

    /// No locks at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Takes a waiter out of the table when its request goes away before it returned a result
/// (the connection task was cancelled): from the queue, or, if it was granted meanwhile, from
/// the granted locks, since no client will ever learn its id.
struct WaitGuard<'a> {
    table: &'a LockTable,
    handle: u64,
    /// The lock's id and holder.
    lock: (u64, u32),
    armed: bool,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.table
                .state()
                .remove(self.handle, self.lock, true, Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn range(start: u64, end: u64, exclusive: bool) -> LockedRange {
        LockedRange {
            start,
            end,
            exclusive,
        }
    }

    /// The uid most tests lock as.
    const ALICE: u32 = 1000;
    /// Another user.
    const BOB: u32 = 1001;

    fn request(handle: u64, start: u64, end: u64, exclusive: bool, wait_ms: u64) -> LockRequest {
        LockRequest {
            handle,
            holder: ALICE,
            range: range(start, end, exclusive),
            wait: Duration::from_millis(wait_ms),
            lease: Duration::from_secs(30),
        }
    }

    fn granted(table: &LockTable, request: &LockRequest) -> u64 {
        match table.attempt(request, Instant::now()) {
            Ok(Attempt::Granted(id)) => id,
            other => panic!("{request:?} not granted at once: {other:?}"),
        }
    }

    fn refused(table: &LockTable, request: &LockRequest) -> RemoteError {
        match table.attempt(request, Instant::now()) {
            Err(error) => error,
            other => panic!("{request:?} not refused: {other:?}"),
        }
    }

    #[test]
    fn conflict_rules() {
        let shared = |start, end| range(start, end, false);
        let exclusive = |start, end| range(start, end, true);
        assert!(!shared(0, 10).conflicts(&shared(5, 15)));
        assert!(shared(0, 10).conflicts(&exclusive(5, 15)));
        assert!(exclusive(0, 10).conflicts(&shared(9, 10)));
        assert!(exclusive(0, 10).conflicts(&exclusive(0, 10)));
        // Touching ranges do not overlap.
        assert!(!exclusive(0, 10).conflicts(&exclusive(10, 20)));
        assert!(!exclusive(10, 20).conflicts(&exclusive(0, 10)));
        // Containment overlaps.
        assert!(exclusive(0, 100).conflicts(&exclusive(40, 41)));
    }

    #[test]
    fn grants_compatible_and_refuses_conflicting_without_wait() {
        let table = LockTable::new();
        granted(&table, &request(1, 0, 100, false, 0));
        granted(&table, &request(1, 50, 150, false, 0));
        granted(&table, &request(1, 150, 200, true, 0));
        // Another file is another table.
        granted(&table, &request(2, 0, 100, true, 0));
        let error = refused(&table, &request(1, 90, 160, true, 0));
        assert_eq!(error.code, ErrorCode::Busy);
        assert!(error.message.contains("handle 0x1"), "{}", error.message);
        assert!(error.message.contains("[90, 160)"), "{}", error.message);
        assert!(
            error.message.contains("[0, 100) shared"),
            "{}",
            error.message
        );
        assert_eq!(table.len(), 4);
    }

    #[test]
    fn unlock_frees_and_unknown_ids_are_fine() {
        let table = LockTable::new();
        let id = granted(&table, &request(7, 0, 10, true, 0));
        refused(&table, &request(7, 5, 6, false, 0));
        table.unlock(7, id, ALICE);
        table.unlock(7, id, ALICE);
        table.unlock(7, 12_345, ALICE);
        table.unlock(8, id, ALICE);
        assert!(table.is_empty());
        granted(&table, &request(7, 5, 6, false, 0));
    }

    #[test]
    fn expired_leases_are_dropped_lazily() {
        let table = LockTable::new();
        let now = Instant::now();
        let mut short = request(3, 0, 10, true, 0);
        short.lease = Duration::from_millis(5);
        assert!(matches!(
            table.attempt(&short, now),
            Ok(Attempt::Granted(_))
        ));
        assert!(table.attempt(&request(3, 0, 10, true, 0), now).is_err());
        // Still counted until someone looks at the file again.
        assert_eq!(table.len(), 1);
        let later = now + Duration::from_millis(5);
        assert!(matches!(
            table.attempt(&request(3, 0, 10, true, 0), later),
            Ok(Attempt::Granted(_))
        ));
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn a_waiting_writer_is_not_overtaken_by_later_readers() {
        let table = LockTable::new();
        let now = Instant::now();
        let reader = granted(&table, &request(1, 0, 100, false, 0));
        let Ok(Attempt::Queued(writer, mut woken)) =
            table.attempt(&request(1, 50, 60, true, 1000), now)
        else {
            panic!("writer not queued");
        };
        // A later reader of overlapping bytes queues behind the writer...
        let error = refused(&table, &request(1, 0, 100, false, 0));
        assert!(
            error
                .message
                .contains("an earlier request waits for bytes [50, 60) exclusive"),
            "{}",
            error.message
        );
        // ...while one of other bytes passes.
        granted(&table, &request(1, 60, 100, false, 0));
        assert!(woken.try_recv().is_err());
        table.unlock(1, reader, ALICE);
        assert!(woken.try_recv().is_ok(), "the writer is granted on unlock");
        table.unlock(1, writer, ALICE);
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn the_table_limit_counts_held_and_waiting_and_expired_room_is_reused() {
        let table = LockTable::new();
        let now = Instant::now();
        for index in 0..RANGE_LOCKS_MAX as u64 {
            let mut lock = request(index % 64, index, index + 1, true, 0);
            // As many users as it takes, each with its whole share.
            lock.holder = u32::try_from(index / RANGE_LOCKS_PER_UID_MAX as u64).unwrap();
            lock.lease = Duration::from_millis(if index < 10 { 1 } else { 60_000 });
            assert!(matches!(table.attempt(&lock, now), Ok(Attempt::Granted(_))));
        }
        let mut extra = request(100, 0, 1, true, 0);
        extra.holder = 99_999;
        let error = table.attempt(&extra, now).unwrap_err();
        assert_eq!(error.code, ErrorCode::LimitExceeded);
        assert!(
            error.message.contains("range_locks_max"),
            "{}",
            error.message
        );
        // Ten leases end: the full table sweeps them and has room again.
        let later = now + Duration::from_millis(1);
        assert!(matches!(
            table.attempt(&extra, later),
            Ok(Attempt::Granted(_))
        ));
        assert_eq!(table.len(), RANGE_LOCKS_MAX - 9);
    }

    /// Before, any uid's unlock released any lock it named by id (ids count from 1), so a
    /// reader released a writer's exclusive lock and a second writer was granted it.
    #[test]
    fn only_the_holder_releases_a_lock_and_a_lease_end_frees_it() {
        let table = LockTable::new();
        let now = Instant::now();
        let alices = granted(&table, &request(5, 0, 100, true, 0));
        let mut bobs_write = request(5, 10, 20, true, 0);
        bobs_write.holder = BOB;
        assert!(!table.unlock(5, alices, BOB), "bob released alice's lock");
        assert_eq!(table.len(), 1);
        assert_eq!(refused(&table, &bobs_write).code, ErrorCode::Busy);
        // Alice releases it; then bob is granted the bytes.
        assert!(table.unlock(5, alices, ALICE));
        assert!(!table.unlock(5, alices, ALICE), "released once");
        let bobs = granted(&table, &bobs_write);
        // Alice cannot release bob's in turn.
        assert!(!table.unlock(5, bobs, ALICE));
        assert_eq!(
            refused(&table, &request(5, 0, 100, true, 0)).code,
            ErrorCode::Busy
        );
        // A lease that ends frees a lock whoever held it.
        let mut short = request(6, 0, 10, true, 0);
        short.holder = BOB;
        short.lease = Duration::from_millis(5);
        assert!(matches!(
            table.attempt(&short, now),
            Ok(Attempt::Granted(_))
        ));
        let later = now + Duration::from_millis(5);
        assert!(matches!(
            table.attempt(&request(6, 0, 10, true, 0), later),
            Ok(Attempt::Granted(_))
        ));
        assert_eq!(table.len(), 2);
    }

    /// Before, one uid could take all `RANGE_LOCKS_MAX` locks and nobody else could lock.
    #[test]
    fn one_uid_holds_at_most_its_share_of_the_table() {
        let table = LockTable::new();
        let now = Instant::now();
        for index in 0..RANGE_LOCKS_PER_UID_MAX as u64 {
            let mut lock = request(index % 8, index, index + 1, false, 0);
            lock.lease = Duration::from_millis(if index < 3 { 1 } else { 60_000 });
            assert!(matches!(table.attempt(&lock, now), Ok(Attempt::Granted(_))));
        }
        let error = table.attempt(&request(9, 0, 1, false, 0), now).unwrap_err();
        assert_eq!(error.code, ErrorCode::LimitExceeded);
        for part in [
            "uid 1000",
            "range_locks_per_uid_max 4096",
            "handle 0x9",
            &format!("holds or waits for {RANGE_LOCKS_PER_UID_MAX}"),
        ] {
            assert!(error.message.contains(part), "{part}: {}", error.message);
        }
        assert_eq!(table.len(), RANGE_LOCKS_PER_UID_MAX);
        // Bob locks the same bytes and others.
        let mut bobs = request(9, 0, 1, true, 0);
        bobs.holder = BOB;
        granted(&table, &bobs);
        bobs.handle = 0;
        bobs.range = range(1 << 40, (1 << 40) + 1, true);
        granted(&table, &bobs);
        // Alice's own leases that ended make room for her again (her files are refreshed).
        let later = now + Duration::from_millis(1);
        for _ in 0..3 {
            assert!(matches!(
                table.attempt(&request(10, 0, 1, false, 0), later),
                Ok(Attempt::Granted(_))
            ));
        }
        assert_eq!(
            table
                .attempt(&request(10, 0, 1, false, 0), later)
                .unwrap_err()
                .code,
            ErrorCode::LimitExceeded
        );
        assert_eq!(table.len(), RANGE_LOCKS_PER_UID_MAX + 2);
    }

    #[test]
    fn one_uid_waits_for_at_most_its_share_of_the_queue() {
        let table = LockTable::new();
        let now = Instant::now();
        granted(&table, &request(1, 0, 10, true, 0));
        let mut receivers = Vec::new();
        for _ in 0..RANGE_LOCK_WAITERS_PER_UID_MAX {
            match table.attempt(&request(1, 0, 10, true, 1000), now) {
                Ok(Attempt::Queued(_, woken)) => receivers.push(woken),
                other => panic!("not queued: {other:?}"),
            }
        }
        let error = refused(&table, &request(1, 0, 10, true, 1000));
        assert_eq!(error.code, ErrorCode::Busy);
        assert!(
            error.message.contains(
                "uid 1000 already has 8 requests waiting (range_lock_waiters_per_uid_max 8)"
            ),
            "{}",
            error.message
        );
        let mut bobs = request(1, 0, 10, false, 1000);
        bobs.holder = BOB;
        assert!(matches!(table.attempt(&bobs, now), Ok(Attempt::Queued(..))));
    }

    #[test]
    fn the_queue_is_bounded() {
        let table = LockTable::new();
        let now = Instant::now();
        granted(&table, &request(1, 0, 10, true, 0));
        let mut receivers = Vec::new();
        for index in 0..RANGE_LOCK_WAITERS_MAX {
            let mut waiter = request(1, 0, 10, true, 1000);
            waiter.holder = u32::try_from(index / RANGE_LOCK_WAITERS_PER_UID_MAX).unwrap();
            match table.attempt(&waiter, now) {
                Ok(Attempt::Queued(_, woken)) => receivers.push(woken),
                other => panic!("not queued: {other:?}"),
            }
        }
        let mut late = request(1, 0, 10, true, 1000);
        late.holder = BOB;
        let error = refused(&table, &late);
        assert_eq!(error.code, ErrorCode::Busy);
        assert!(
            error.message.contains("range_lock_waiters_max"),
            "{}",
            error.message
        );
    }

    #[test]
    fn requests_are_checked_against_the_limits() {
        let body = |start, end, wait_ms, lease_ms| LockRange {
            capability: tessera_proto::Capability::default(),
            handle: 9,
            start,
            end,
            exclusive: true,
            wait_ms,
            lease_ms,
        };
        let message = |lock: LockRange| LockRequest::new(&lock, ALICE).unwrap_err().message;
        assert!(message(body(5, 5, 0, 1)).contains("start 5 is not below end 5"));
        assert!(message(body(0, FILE_BYTES_MAX + 1, 0, 1)).contains("file_bytes_max"));
        assert!(
            message(body(0, 1, RANGE_LOCK_WAIT_MS_MAX + 1, 1)).contains("range_lock_wait_ms_max")
        );
        assert!(
            message(body(0, 1, 0, RANGE_LOCK_LEASE_MS_MAX + 1)).contains("range_lock_lease_ms_max")
        );
        assert!(message(body(0, 1, 0, 0)).contains("lease of 0 ms"));
        let ok = LockRequest::new(
            &body(
                0,
                FILE_BYTES_MAX,
                RANGE_LOCK_WAIT_MS_MAX,
                RANGE_LOCK_LEASE_MS_MAX,
            ),
            ALICE,
        )
        .unwrap();
        assert_eq!(ok.holder, ALICE);
        assert_eq!(ok.wait.as_millis(), u128::from(RANGE_LOCK_WAIT_MS_MAX));
    }

    #[tokio::test]
    async fn a_wait_times_out_with_busy_naming_the_holder() {
        let table = LockTable::new();
        granted(&table, &request(0xab, 100, 200, true, 0));
        let started = std::time::Instant::now();
        let error = table
            .lock(&request(0xab, 150, 250, false, 50))
            .await
            .unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(error.code, ErrorCode::Busy);
        for part in [
            "handle 0xab",
            "[150, 250) shared",
            "within 50 ms",
            "a lock holds bytes [100, 200) exclusive",
        ] {
            assert!(error.message.contains(part), "{part}: {}", error.message);
        }
        // The timed-out waiter left the queue.
        assert_eq!(table.len(), 1);
    }

    #[tokio::test]
    async fn a_waiter_is_granted_on_unlock_and_on_lease_expiry() {
        let table = Arc::new(LockTable::new());
        let holder = granted(&table, &request(1, 0, 10, true, 0));
        let waiting = {
            let table = table.clone();
            tokio::spawn(async move { table.lock(&request(1, 0, 10, true, 5_000)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(table.len(), 2);
        table.unlock(1, holder, ALICE);
        let second = waiting.await.unwrap().unwrap();
        assert_ne!(second, holder);

        // A lease that ends wakes the waiter with no unlock at all.
        table.unlock(1, second, ALICE);
        let mut short = request(1, 0, 10, true, 0);
        short.lease = Duration::from_millis(30);
        granted(&table, &short);
        let started = std::time::Instant::now();
        table.lock(&request(1, 5, 6, true, 5_000)).await.unwrap();
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(25), "{waited:?}");
        assert!(waited < Duration::from_secs(4), "{waited:?}");
    }

    #[tokio::test]
    async fn a_cancelled_waiter_leaves_no_trace() {
        let table = Arc::new(LockTable::new());
        let holder = granted(&table, &request(1, 0, 10, true, 0));
        let waiting = {
            let table = table.clone();
            tokio::spawn(async move { table.lock(&request(1, 0, 10, true, 5_000)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(table.len(), 2);
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(table.len(), 1);
        table.unlock(1, holder, ALICE);
        assert!(table.is_empty());
    }
}
