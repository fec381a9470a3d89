//! A storage wrapper that injects faults: each call of the wrapped storage or of an object it
//! opened is first held against a [`FaultPlan`] of rules — which call kind ([`Op`]), which
//! object, which of the matching calls — and then fails (`EIO`, `ENOSPC`, any errno), moves
//! fewer bytes than asked (a short read or write), or waits a bounded time before it runs.
//! Objects it opens offer no file, so every request takes the positioned-call path the
//! faults reach.

use std::fmt;
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::storage::{Listing, ObjectMetadata, ObjectStorage, StorageObject, Usage};

/// Rules a [`FaultPlan`] holds at once.
pub const FAULT_RULES_MAX: usize = 64;
/// The longest delay a rule may add to one call.
pub const FAULT_DELAY_MAX: Duration = Duration::from_secs(1);

/// A kind of storage call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `ObjectStorage::open`.
    Open,
    /// `ObjectStorage::create`.
    Create,
    /// `ObjectStorage::remove`.
    Remove,
    /// `ObjectStorage::list` and `ObjectStorage::usage`.
    List,
    /// A positioned read.
    Read,
    /// A positioned write (plain or vectored).
    Write,
    /// Size and mtime.
    Metadata,
    /// A size change (truncate).
    SetSize,
    /// A flush to stable storage.
    Sync,
}

const OPS: usize = 9;

impl Op {
    fn index(self) -> usize {
        self as usize
    }
}

/// What a rule does to a call it hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The call fails with this errno (`libc::EIO`, `libc::ENOSPC`, ...) and does nothing.
    Errno(i32),
    /// A read or write moves at most this many bytes (at least 1); other calls run as usual.
    Short(usize),
    /// The call waits this long (at most [`FAULT_DELAY_MAX`]), then runs.
    Delay(Duration),
}

/// One rule: calls of `op` (on object `handle`, or on any), of which the first `skip` pass
/// and the next `times` are hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The call kind.
    pub op: Op,
    /// Only calls on this object (`None`: any, and calls on no object: `List`).
    pub handle: Option<u64>,
    /// Matching calls let through first.
    pub skip: u64,
    /// Matching calls hit after those (`u64::MAX`: every one).
    pub times: u64,
    /// What the hit calls do.
    pub kind: FaultKind,
}

impl Fault {
    /// Every call of `op` fails with `errno`.
    pub fn errno(op: Op, errno: i32) -> Self {
        Self {
            op,
            handle: None,
            skip: 0,
            times: u64::MAX,
            kind: FaultKind::Errno(errno),
        }
    }

    /// Every call of `op` fails with `EIO`.
    pub fn eio(op: Op) -> Self {
        Self::errno(op, libc::EIO)
    }

    /// Every call of `op` fails with `ENOSPC`.
    pub fn no_space(op: Op) -> Self {
        Self::errno(op, libc::ENOSPC)
    }

    /// Every read or write (`op`) moves at most `bytes` bytes.
    pub fn short(op: Op, bytes: usize) -> Self {
        Self {
            kind: FaultKind::Short(bytes.max(1)),
            ..Self::errno(op, 0)
        }
    }

    /// Every call of `op` waits `delay` first.
    pub fn delay(op: Op, delay: Duration) -> Self {
        Self {
            kind: FaultKind::Delay(delay),
            ..Self::errno(op, 0)
        }
    }

    /// Only calls on the object of `handle`.
    #[must_use]
    pub fn on(mut self, handle: u64) -> Self {
        self.handle = Some(handle);
        self
    }

    /// The first `skip` matching calls pass.
    #[must_use]
    pub fn after(mut self, skip: u64) -> Self {
        self.skip = skip;
        self
    }

    /// Only `times` matching calls are hit (after those skipped).
    #[must_use]
    pub fn times(mut self, times: u64) -> Self {
        self.times = times;
        self
    }
}

#[derive(Debug)]
struct Rule {
    fault: Fault,
    /// Matching calls seen.
    seen: u64,
}

/// The rules of a [`Faulty`] storage and what they did; shared, so a test changes them while
/// a server runs.
#[derive(Debug, Default)]
pub struct FaultPlan {
    rules: Mutex<Vec<Rule>>,
    calls: [AtomicU64; OPS],
    injected: AtomicU64,
}

/// What one call should do.
enum Action {
    Run,
    Fail(io::Error),
    Short(usize),
}

impl FaultPlan {
    /// Adds a rule; refused past [`FAULT_RULES_MAX`] rules or [`FAULT_DELAY_MAX`].
    pub fn add(&self, fault: Fault) -> Result<(), String> {
        if let FaultKind::Delay(delay) = fault.kind {
            if delay > FAULT_DELAY_MAX {
                return Err(format!(
                    "a fault delay of {delay:?} is over fault_delay_max ({FAULT_DELAY_MAX:?})"
                ));
            }
        }
        let mut rules = self.rules.lock().expect("fault rules lock");
        if rules.len() >= FAULT_RULES_MAX {
            return Err(format!(
                "a fault plan holds at most fault_rules_max ({FAULT_RULES_MAX}) rules"
            ));
        }
        rules.push(Rule { fault, seen: 0 });
        Ok(())
    }

    /// Drops every rule (the counts stay).
    pub fn clear(&self) {
        self.rules.lock().expect("fault rules lock").clear();
    }

    /// Calls of `op` made so far, hit or not.
    pub fn calls(&self, op: Op) -> u64 {
        self.calls[op.index()].load(Ordering::Relaxed)
    }

    /// Calls a rule failed or shortened so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// Counts a call of `op` on `handle` and decides what it does: every delay that hits is
    /// served; the first error or short count that hits wins.
    fn check(&self, op: Op, handle: Option<u64>) -> Action {
        self.calls[op.index()].fetch_add(1, Ordering::Relaxed);
        let mut delay = Duration::ZERO;
        let mut action = Action::Run;
        {
            let mut rules = self.rules.lock().expect("fault rules lock");
            for rule in rules.iter_mut() {
                let fault = rule.fault;
                if fault.op != op || (fault.handle.is_some() && fault.handle != handle) {
                    continue;
                }
                let index = rule.seen;
                rule.seen += 1;
                if index < fault.skip || index - fault.skip >= fault.times {
                    continue;
                }
                match fault.kind {
                    FaultKind::Delay(wait) => delay += wait,
                    FaultKind::Errno(errno) if matches!(action, Action::Run) => {
                        action = Action::Fail(io::Error::from_raw_os_error(errno));
                    }
                    FaultKind::Short(bytes) if matches!(action, Action::Run) => {
                        action = Action::Short(bytes);
                    }
                    FaultKind::Errno(_) | FaultKind::Short(_) => {}
                }
            }
        }
        if !matches!(action, Action::Run) {
            self.injected.fetch_add(1, Ordering::Relaxed);
        }
        // Bounded: at most FAULT_RULES_MAX rules of at most FAULT_DELAY_MAX each.
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        action
    }

    /// Runs a call that moves no bytes, unless a rule fails it.
    fn run<T>(
        &self,
        op: Op,
        handle: Option<u64>,
        call: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        match self.check(op, handle) {
            Action::Fail(err) => Err(err),
            Action::Run | Action::Short(_) => call(),
        }
    }
}

/// `S` with faults injected by a [`FaultPlan`].
pub struct Faulty<S> {
    inner: S,
    plan: Arc<FaultPlan>,
}

impl<S: fmt::Debug> fmt::Debug for Faulty<S> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Faulty")
            .field("inner", &self.inner)
            .field("injected", &self.plan.injected())
            .finish_non_exhaustive()
    }
}

impl<S> Faulty<S> {
    /// `inner` with no rule yet.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            plan: Arc::default(),
        }
    }

    /// The rules (add some with [`FaultPlan::add`]).
    pub fn plan(&self) -> &Arc<FaultPlan> {
        &self.plan
    }

    /// The wrapped storage.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: ObjectStorage> ObjectStorage for Faulty<S> {
    type Object = FaultyObject<S::Object>;

    fn location(&self) -> &str {
        self.inner.location()
    }

    fn open(&self, handle: u64) -> io::Result<Self::Object> {
        let inner = self
            .plan
            .run(Op::Open, Some(handle), || self.inner.open(handle))?;
        Ok(FaultyObject {
            inner,
            handle,
            plan: Arc::clone(&self.plan),
        })
    }

    fn create(&self, handle: u64) -> io::Result<()> {
        self.plan
            .run(Op::Create, Some(handle), || self.inner.create(handle))
    }

    fn remove(&self, handle: u64) -> io::Result<()> {
        self.plan
            .run(Op::Remove, Some(handle), || self.inner.remove(handle))
    }

    fn list(&self) -> io::Result<Listing<'_>> {
        self.plan.run(Op::List, None, || self.inner.list())
    }

    fn cache_unit(&self, handle: u64) -> io::Result<u32> {
        self.inner.cache_unit(handle)
    }

    fn set_cache_unit(&self, handle: u64, unit_bytes: u32) -> io::Result<()> {
        self.inner.set_cache_unit(handle, unit_bytes)
    }

    fn usage(&self) -> io::Result<Usage> {
        self.plan.run(Op::List, None, || self.inner.usage())
    }
}

/// An object of a [`Faulty`] storage.
#[derive(Debug)]
pub struct FaultyObject<O> {
    inner: O,
    handle: u64,
    plan: Arc<FaultPlan>,
}

impl<O: StorageObject> StorageObject for FaultyObject<O> {
    fn read_at(&self, target: &mut [u8], offset: u64) -> io::Result<usize> {
        match self.plan.check(Op::Read, Some(self.handle)) {
            Action::Fail(err) => Err(err),
            Action::Short(bytes) => {
                let count = target.len().min(bytes);
                self.inner.read_at(&mut target[..count], offset)
            }
            Action::Run => self.inner.read_at(target, offset),
        }
    }

    fn write_at(&self, source: &[u8], offset: u64) -> io::Result<usize> {
        match self.plan.check(Op::Write, Some(self.handle)) {
            Action::Fail(err) => Err(err),
            Action::Short(bytes) => self
                .inner
                .write_at(&source[..source.len().min(bytes)], offset),
            Action::Run => self.inner.write_at(source, offset),
        }
    }

    fn write_vectored_at(&self, parts: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        match self.plan.check(Op::Write, Some(self.handle)) {
            Action::Fail(err) => Err(err),
            Action::Short(bytes) => match parts.iter().find(|part| !part.is_empty()) {
                Some(part) => self.inner.write_at(&part[..part.len().min(bytes)], offset),
                None => Ok(0),
            },
            Action::Run => self.inner.write_vectored_at(parts, offset),
        }
    }

    fn metadata(&self) -> io::Result<ObjectMetadata> {
        self.plan
            .run(Op::Metadata, Some(self.handle), || self.inner.metadata())
    }

    fn set_size(&self, size: u64) -> io::Result<()> {
        self.plan
            .run(Op::SetSize, Some(self.handle), || self.inner.set_size(size))
    }

    fn sync(&self) -> io::Result<()> {
        self.plan
            .run(Op::Sync, Some(self.handle), || self.inner.sync())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{read_full, write_full};
    use crate::testing::MemStorage;

    #[test]
    fn rules_hit_the_calls_they_name_and_no_others() {
        let storage = Faulty::new(MemStorage::new());
        storage
            .plan()
            .add(Fault::eio(Op::Write).on(2).after(1).times(1))
            .unwrap();
        storage.create(1).unwrap();
        storage.create(2).unwrap();
        let (one, two) = (storage.open(1).unwrap(), storage.open(2).unwrap());
        write_full(&one, b"a", 0).unwrap();
        write_full(&two, b"b", 0).unwrap();
        let err = write_full(&two, b"c", 1).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        write_full(&two, b"d", 1).unwrap();
        assert_eq!(storage.inner().contents(2).unwrap(), b"bd");
        assert_eq!(
            (storage.plan().calls(Op::Write), storage.plan().injected()),
            (4, 1)
        );

        // Short reads and writes are finished by the callers' loops.
        storage.plan().add(Fault::short(Op::Write, 2)).unwrap();
        storage.plan().add(Fault::short(Op::Read, 3)).unwrap();
        write_full(&one, b"0123456789", 0).unwrap();
        let mut back = [0u8; 10];
        read_full(&one, &mut back, 0).unwrap();
        assert_eq!(&back, b"0123456789");
        assert_eq!(storage.plan().calls(Op::Write), 4 + 5);

        let too_long = Fault::delay(Op::Sync, FAULT_DELAY_MAX * 2);
        assert!(storage
            .plan()
            .add(too_long)
            .unwrap_err()
            .contains("fault_delay_max"));
        assert!(
            one.as_file().is_none(),
            "faults need the positioned-call path"
        );
    }
}
