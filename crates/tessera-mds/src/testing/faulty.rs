//! A store that injects faults into the calls redb makes on another one: each write,
//! `set_len` and sync of a handle opened on a [`FaultyStore`] is first held against its
//! [`FaultPlan`], which a test changes while the namespace runs. A rule fails the calls of
//! one kind ([`Op`]) with an errno (`ENOSPC` for a full disk, `EIO`) once a budget of calls,
//! or for writes of bytes, is spent, until [`FaultPlan::heal`]; a failing write writes
//! nothing. A hold stops the next call of one kind until [`FaultPlan::release`], so a test
//! can line up changes behind a durable commit. The plan outlives the handles: a reopen after
//! a failure meets the same rules, as a reopened file meets the same full disk.

use std::fmt;
use std::io;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use redb::{BackendError, StorageBackend};

use crate::store::StoreBackend;

/// Longest a held call waits for [`FaultPlan::release`]; then it runs (a test that forgot to
/// release fails on its own assertions instead of hanging).
pub const FAULT_HOLD_MAX: Duration = Duration::from_secs(10);

/// A kind of call redb makes on its storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `StorageBackend::write`.
    Write,
    /// `StorageBackend::set_len` (redb grows and shrinks its file with it).
    SetLen,
    /// `StorageBackend::sync_data` (the `fsync` of a durable commit).
    Sync,
}

const OPS: usize = 3;

impl Op {
    fn index(self) -> usize {
        self as usize
    }
}

/// What a rule lets through before it fails the calls.
#[derive(Debug, Clone, Copy)]
enum Budget {
    /// This many more calls.
    Calls(u64),
    /// Writes of this many more bytes: a write that does not fit fails whole.
    Bytes(u64),
}

#[derive(Debug, Clone, Copy)]
struct Rule {
    errno: i32,
    budget: Budget,
}

#[derive(Debug, Default)]
struct State {
    /// At most one rule per kind of call: a new one replaces it.
    rules: [Option<Rule>; OPS],
    /// The next call of this kind waits until a release.
    hold: Option<Op>,
    /// Calls waiting at the hold now.
    held: u64,
    /// Releases so far: a held call waits until this moves.
    releases: u64,
}

/// The faults of a [`FaultyStore`] and what they did; shared, so a test changes them while the
/// mds runs.
#[derive(Debug, Default)]
pub struct FaultPlan {
    state: Mutex<State>,
    /// Signalled when a call is held and when the held calls are released.
    changed: Condvar,
    calls: [AtomicU64; OPS],
    injected: AtomicU64,
}

impl FaultPlan {
    /// After `calls` more calls of `op` pass, every later one fails with `errno`, until
    /// [`heal`](Self::heal).
    pub fn fail_after_calls(&self, op: Op, calls: u64, errno: i32) {
        self.state().rules[op.index()] = Some(Rule {
            errno,
            budget: Budget::Calls(calls),
        });
    }

    /// Writes may carry `bytes` more bytes; then every write that does not fit fails with
    /// `errno` and writes nothing (a disk that fills), until [`heal`](Self::heal).
    pub fn fail_writes_after_bytes(&self, bytes: u64, errno: i32) {
        self.state().rules[Op::Write.index()] = Some(Rule {
            errno,
            budget: Budget::Bytes(bytes),
        });
    }

    /// Drops every rule: calls succeed again (space was freed, the disk came back).
    pub fn heal(&self) {
        self.state().rules = [None; OPS];
    }

    /// The next call of `op` waits (at most [`FAULT_HOLD_MAX`]) until [`release`](Self::release).
    pub fn hold_next(&self, op: Op) {
        self.state().hold = Some(op);
    }

    /// Waits until `calls` calls are held, at most `timeout`; false if they were not.
    pub fn wait_held(&self, calls: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.state();
        while state.held < calls {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    /// Lets every held call go on (to the rules, as they are now).
    pub fn release(&self) {
        let mut state = self.state();
        state.hold = None;
        state.releases += 1;
        self.changed.notify_all();
    }

    /// Calls of `op` made so far, failed or not.
    pub fn calls(&self, op: Op) -> u64 {
        self.calls[op.index()].load(Ordering::Relaxed)
    }

    /// Calls a rule failed so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// Counts a call of `op` carrying `bytes`, serves a hold, then applies `op`'s rule.
    fn check(&self, op: Op, bytes: u64) -> io::Result<()> {
        self.calls[op.index()].fetch_add(1, Ordering::Relaxed);
        let mut state = self.state();
        if state.hold == Some(op) {
            state.hold = None;
            state.held += 1;
            self.changed.notify_all();
            let releases = state.releases;
            let deadline = Instant::now() + FAULT_HOLD_MAX;
            while state.releases == releases {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                state = self
                    .changed
                    .wait_timeout(state, deadline - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            state.held -= 1;
        }
        let Some(rule) = state.rules[op.index()].as_mut() else {
            return Ok(());
        };
        let passes = match &mut rule.budget {
            Budget::Calls(left) => left.checked_sub(1).map(|rest| *left = rest).is_some(),
            Budget::Bytes(left) => left.checked_sub(bytes).map(|rest| *left = rest).is_some(),
        };
        if passes {
            Ok(())
        } else {
            self.injected.fetch_add(1, Ordering::Relaxed);
            Err(io::Error::from_raw_os_error(rule.errno))
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Another store whose handles' writes, `set_len`s and syncs go through a [`FaultPlan`].
#[derive(Debug)]
pub struct FaultyStore {
    inner: Box<dyn StoreBackend>,
    plan: Arc<FaultPlan>,
}

impl FaultyStore {
    /// `inner` with no fault yet.
    pub fn new(inner: impl StoreBackend) -> Self {
        Self {
            inner: Box::new(inner),
            plan: Arc::default(),
        }
    }

    /// The plan, to change while the store is open.
    pub fn plan(&self) -> Arc<FaultPlan> {
        Arc::clone(&self.plan)
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl StoreBackend for FaultyStore {
    fn storage(&self, create: bool) -> io::Result<Box<dyn StorageBackend>> {
        Ok(Box::new(Faulty {
            inner: self.inner.storage(create)?,
            plan: Arc::clone(&self.plan),
        }))
    }
}

/// One handle's storage under the plan.
#[derive(Debug)]
struct Faulty {
    inner: Box<dyn StorageBackend>,
    plan: Arc<FaultPlan>,
}

impl StorageBackend for Faulty {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.plan.check(Op::SetLen, 0)?;
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.plan.check(Op::Sync, 0)?;
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.plan
            .check(Op::Write, u64::try_from(data.len()).unwrap_or(u64::MAX))?;
        self.inner.write(offset, data)
    }

    fn close(&self) -> io::Result<()> {
        self.inner.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}
