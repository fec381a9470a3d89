//! Group commit: many namespace changes, one `fsync`.
//!
//! A change commits its redb transaction with `Durability::None`: at once, in memory, and
//! visible to every read that starts after it, but persisted by nothing yet. Then it waits
//! until a durable commit covers it. A change that finds no durable commit running starts
//! one and leads it: a small `Immediate` commit, which persists every change committed before
//! it began, in one `fsync`. Changes that commit while it runs wait for the next one, which
//! one of them leads. So under load each `fsync` carries every change that arrived during the
//! previous one; a change alone costs one `fsync`, as before. A reply leaves only once its
//! change is durable: "acknowledged means durable" holds at every instant.
//!
//! One [`GroupCommit`] belongs to one open handle of the store. When a durable commit fails,
//! redb latches the error on that handle and the changes it was to persist are lost with the
//! handle (the store reopens to the last durable commit; after a failed fsync, redb may have
//! written them whole before it), so every change still waiting on it gets the error: none of
//! them was acknowledged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tessera_proto::{ErrorCode, RemoteError};

/// Longest a leader waits, before its durable commit, for the changes already under way to
/// commit: while a durable commit runs it holds redb's write lock, so the changes that arrive
/// meanwhile queue for the lock, and one that led at once after it would leave the rest of
/// the queue for the next `fsync`.
pub const GROUP_COMMIT_GATHER_US: u64 = 2_000;

/// Longest a change waits for a durable commit to cover it (a stalled disk): past this the
/// caller gets `Unavailable`, and the change may or may not survive a crash.
pub const STORE_DURABLE_WAIT_MS: u64 = 30_000;

/// The durable commits of one store handle, shared by the changes made on it.
#[derive(Debug)]
pub struct GroupCommit {
    /// How long a leader gathers ([`GROUP_COMMIT_GATHER_US`]).
    gather: Duration,
    /// Changes committed (non-durably) on the handle, counted after each commit returns: a
    /// durable commit that starts after reading `n` here persists the first `n`.
    committed: AtomicU64,
    state: Mutex<State>,
    /// Signalled when a durable commit ends.
    ended: Condvar,
    /// Signalled when a change under way commits or gives up.
    settled: Condvar,
}

/// A change under way, from before it asks for redb's write lock until it commits
/// ([`UnderWay::committed`]) or is dropped: a leader gathers these into its durable commit.
#[derive(Debug)]
pub struct UnderWay<'g> {
    group: &'g GroupCommit,
    settled: bool,
}

impl UnderWay<'_> {
    /// Records that the change's transaction committed (non-durably) and returns its ticket
    /// for [`GroupCommit::wait_durable`]. Call it after the commit returns, never before.
    pub fn committed(mut self) -> u64 {
        let ticket = self.group.committed.fetch_add(1, Ordering::SeqCst) + 1;
        self.settle();
        ticket
    }

    fn settle(&mut self) {
        if !self.settled {
            self.settled = true;
            let mut state = self.group.state();
            state.under_way -= 1;
            if state.under_way == 0 {
                self.group.settled.notify_all();
            }
        }
    }
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        self.settle();
    }
}

#[derive(Debug, Default)]
struct State {
    /// Changes under way: begun ([`GroupCommit::begin`]), not yet committed or dropped.
    under_way: u64,
    /// Changes known durable: the first `durable` committed.
    durable: u64,
    /// A durable commit is running.
    flushing: bool,
    /// The error of a durable commit that failed: the handle is done for.
    failed: Option<RemoteError>,
}

/// What one wait for durability came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Covered {
    /// A durable commit this change led made it durable.
    Led,
    /// Another change's durable commit made it durable.
    Joined,
}

impl Default for GroupCommit {
    fn default() -> Self {
        Self::with_gather(Duration::from_micros(GROUP_COMMIT_GATHER_US))
    }
}

impl GroupCommit {
    /// A group whose leaders gather for at most `gather`.
    pub fn with_gather(gather: Duration) -> Self {
        Self {
            gather,
            committed: AtomicU64::new(0),
            state: Mutex::default(),
            ended: Condvar::new(),
            settled: Condvar::new(),
        }
    }

    /// Marks a change as under way; call it before the change asks for the write lock.
    pub fn begin(&self) -> UnderWay<'_> {
        self.state().under_way += 1;
        UnderWay {
            group: self,
            settled: false,
        }
    }

    /// Waits until the change holding `ticket` is durable, leading a durable commit with
    /// `flush` if none is running: `flush` must persist every change committed so far.
    /// Errors when the durable commit that was to cover it failed (the change is lost with
    /// the handle) or after [`STORE_DURABLE_WAIT_MS`].
    pub fn wait_durable(
        &self,
        ticket: u64,
        flush: impl FnOnce() -> Result<(), RemoteError>,
    ) -> Result<Covered, RemoteError> {
        let deadline = Instant::now() + Duration::from_millis(STORE_DURABLE_WAIT_MS);
        let mut state = self.state();
        loop {
            if state.durable >= ticket {
                return Ok(Covered::Joined);
            }
            if let Some(error) = &state.failed {
                return Err(error.clone());
            }
            if !state.flushing {
                state.flushing = true;
                // Gather: let the changes queued for the write lock commit first, so this
                // durable commit carries them too.
                let gather_until = Instant::now() + self.gather;
                while state.under_way > 0 {
                    let now = Instant::now();
                    if now >= gather_until {
                        break;
                    }
                    state = self
                        .settled
                        .wait_timeout(state, gather_until - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                drop(state);
                // Read after this change committed, so the commit below covers it.
                let target = self.committed.load(Ordering::SeqCst);
                let result = flush();
                let mut state = self.state();
                state.flushing = false;
                match &result {
                    Ok(()) => state.durable = state.durable.max(target),
                    Err(error) => state.failed = Some(error.clone()),
                }
                self.ended.notify_all();
                return result.map(|()| Covered::Led);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(RemoteError::new(
                    ErrorCode::Unavailable,
                    format!(
                        "metadata store: the change was not made durable within {STORE_DURABLE_WAIT_MS} ms (store_durable_wait_ms; a stalled disk?): it may or may not survive a crash of the mds"
                    ),
                ));
            }
            state = self
                .ended
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Changes under way now (begun, not yet committed or given up).
    #[cfg(test)]
    pub fn under_way(&self) -> u64 {
        self.state().under_way
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Barrier};

    use super::*;

    #[test]
    fn a_change_alone_leads_its_own_durable_commit() {
        let group = GroupCommit::default();
        let flushes = AtomicUsize::new(0);
        for _ in 0..3 {
            let ticket = group.begin().committed();
            let covered = group
                .wait_durable(ticket, || {
                    flushes.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .unwrap();
            assert_eq!(covered, Covered::Led);
        }
        assert_eq!(flushes.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn changes_made_during_a_durable_commit_share_the_next() {
        let group = Arc::new(GroupCommit::default());
        let flushes = Arc::new(AtomicUsize::new(0));
        // The first change's durable commit starts, then eight more changes commit, then it
        // ends.
        let in_flush = Arc::new(Barrier::new(9));
        let committed_all = Arc::new(Barrier::new(9));
        let first = {
            let (group, flushes) = (group.clone(), flushes.clone());
            let (in_flush, committed_all) = (in_flush.clone(), committed_all.clone());
            std::thread::spawn(move || {
                let ticket = group.begin().committed();
                group
                    .wait_durable(ticket, || {
                        in_flush.wait();
                        committed_all.wait();
                        flushes.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    })
                    .unwrap()
            })
        };
        let others: Vec<_> = (0..8)
            .map(|_| {
                let (group, flushes) = (group.clone(), flushes.clone());
                let (in_flush, committed_all) = (in_flush.clone(), committed_all.clone());
                std::thread::spawn(move || {
                    in_flush.wait();
                    let ticket = group.begin().committed();
                    committed_all.wait();
                    group
                        .wait_durable(ticket, || {
                            flushes.fetch_add(1, Ordering::SeqCst);
                            Ok(())
                        })
                        .unwrap()
                })
            })
            .collect();
        assert_eq!(first.join().unwrap(), Covered::Led);
        let led = others
            .into_iter()
            .map(|other| other.join().unwrap())
            .filter(|covered| *covered == Covered::Led)
            .count();
        // One of the eight led the second commit, which covered the other seven.
        assert_eq!(led, 1);
        assert_eq!(flushes.load(Ordering::SeqCst), 2);
        assert_eq!(group.state().durable, 9);
    }

    #[test]
    fn a_leader_gathers_the_changes_under_way_into_its_commit() {
        // Long enough that only the change's commit, never the clock, ends the gathering.
        let group = Arc::new(GroupCommit::with_gather(Duration::from_mins(1)));
        let flushes = Arc::new(AtomicUsize::new(0));
        let under_way = group.begin();
        let leader = {
            let (group, flushes) = (group.clone(), flushes.clone());
            std::thread::spawn(move || {
                let ticket = group.begin().committed();
                group.wait_durable(ticket, || {
                    flushes.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
            })
        };
        while !group.state().flushing {
            std::thread::yield_now();
        }
        // The leader is gathering: it has not flushed while this change is under way.
        assert_eq!(flushes.load(Ordering::SeqCst), 0);
        let ticket = under_way.committed();
        let covered = group
            .wait_durable(ticket, || panic!("the leader's commit covers this change"))
            .unwrap();
        assert_eq!(covered, Covered::Joined);
        assert_eq!(leader.join().unwrap().unwrap(), Covered::Led);
        assert_eq!(flushes.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_change_given_up_ends_the_gathering_too() {
        let group = Arc::new(GroupCommit::with_gather(Duration::from_mins(1)));
        let under_way = group.begin();
        let leader = {
            let group = group.clone();
            std::thread::spawn(move || {
                let ticket = group.begin().committed();
                group.wait_durable(ticket, || Ok(()))
            })
        };
        while !group.state().flushing {
            std::thread::yield_now();
        }
        // A change refused (its call failed) is dropped, never committed.
        drop(under_way);
        assert_eq!(leader.join().unwrap().unwrap(), Covered::Led);
        assert_eq!(group.state().durable, 1);
    }

    #[test]
    fn a_failed_durable_commit_fails_every_change_it_was_to_cover() {
        let group = Arc::new(GroupCommit::default());
        let release = Arc::new(Barrier::new(2));
        let leader = {
            let (group, release) = (group.clone(), release.clone());
            std::thread::spawn(move || {
                let ticket = group.begin().committed();
                group.wait_durable(ticket, || {
                    release.wait();
                    Err(RemoteError::new(ErrorCode::Io, "fsync: I/O error"))
                })
            })
        };
        while !group.state().flushing {
            std::thread::yield_now();
        }
        let ticket = group.begin().committed();
        release.wait();
        let error = group
            .wait_durable(ticket, || panic!("a failed handle starts no commit"))
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::Io);
        assert_eq!(leader.join().unwrap().unwrap_err().code, ErrorCode::Io);
        assert_eq!(group.state().durable, 0);
    }
}
