//! The mds's handle on its redb store, and how it survives a failed write (a full disk above
//! all).
//!
//! redb latches the first I/O error of a [`Database`]: every later transaction on that handle
//! fails with `PreviousIo` ("close and re-open the database"), even once the cause is gone.
//! So every namespace call runs through [`Store::read`] or [`Store::change`], which take the
//! current handle (an `Arc`, cloned under a read lock, so a call in flight keeps the handle it
//! started with), run the call, and look at its error. An error from the storage (code `Io`
//! or `NoSpace`) records the store's condition for `Ping` and reopens the file: under the
//! write lock, wait (at most [`STORE_DRAIN_MS`]) until the calls still holding the failed
//! handle are done, drop it (redb then keeps its "needs recovery" mark on disk), and open the
//! same storage again, which recovers to the last committed transaction. So nothing committed
//! is lost, and a transaction that failed was never acknowledged.
//!
//! The storage is the store's [`StoreBackend`] (`backend.rs`): the redb file ([`FileStore`])
//! in a server, memory or a fault-injecting wrapper in tests (`crate::testing`), so this
//! reopen runs in unit tests without a full disk.
//!
//! A reopen can fail too (redb's recovery writes, and the disk may still be full): the slot
//! is then empty, calls answer the recorded condition at once, and the next call at least
//! [`STORE_REOPEN_INTERVAL_MS`] later tries again. While the disk is full, changes fail with
//! `NoSpace` naming the store's path; reads go on whenever a handle is open. The condition
//! clears at the first change that commits, so the first namespace change after space is
//! freed both succeeds and turns `Ping`'s `store_state` back to `STORE_OK`.
//!
//! Changes go through [`Store::change`], which commits them in groups (`group.rs`): each
//! change's transaction commits at once without an `fsync`, and the call returns once a
//! durable commit covers it. A failed durable commit fails every change it was to cover, and
//! the reopen above drops them with the handle, so a change is either acknowledged and
//! durable or refused. (When the fsync itself fails, redb has written the whole commit before
//! it: the reopened store may still hold the refused changes, each whole;
//! `namespace/store_fault_tests.rs` pins this, SEMANTICS.md §7.1 says it.)

mod backend;
mod group;

use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU64, Ordering};

use redb::{Database, Durability, ReadableTable, TableDefinition, WriteTransaction};
use tessera_proto::{ErrorCode, RemoteError, STORE_FAILED, STORE_NO_SPACE, STORE_OK};

pub(crate) use backend::open_database;
pub use backend::{FileStore, StoreBackend, STORE_FILE_MODE};
pub use group::STORE_DURABLE_WAIT_MS;
use group::{Covered, GroupCommit};

/// Longest a reopen waits for calls still holding the failed handle to finish.
pub const STORE_DRAIN_MS: u64 = 2_000;
/// Shortest time between two attempts to open the store while it is closed.
pub const STORE_REOPEN_INTERVAL_MS: u64 = 200;
/// Attempts one reopen makes, [`STORE_REOPEN_BACKOFF_MS`] apart, before it leaves the store
/// closed for a later call to try again.
pub const STORE_REOPEN_ATTEMPTS: u32 = 3;
/// Pause between two attempts of one reopen.
pub const STORE_REOPEN_BACKOFF_MS: u64 = 20;
/// How often a reopen looks whether the calls holding the failed handle are done.
const DRAIN_POLL: Duration = Duration::from_millis(2);

/// The store's own table: `durable_commits` counts the durable commits of group commit (each
/// writes it, so each has something to persist).
const STORE_TABLE: TableDefinition<&str, u64> = TableDefinition::new("store");

/// An open handle of the store and the group commits made on it.
#[derive(Debug)]
struct Handle {
    database: Database,
    group: GroupCommit,
}

/// Counts of group commit since the mds started, for `MdsStats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Changes acknowledged durable.
    pub changes: u64,
    /// Durable commits (one `fsync` each) that made them so.
    pub commits: u64,
}

/// What went wrong with the store, for `Ping` and for calls that find it closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreHealth {
    /// Reads and writes work.
    Ok,
    /// The last change found the disk full.
    NoSpace,
    /// The last call failed with another I/O error.
    Failed,
}

impl StoreHealth {
    /// Shows this state on the `tessera_mds_store_state` gauge (a no-op without a metrics
    /// recorder).
    fn export(self) {
        metrics::gauge!(tessera_proto::metrics::MDS_STORE_STATE).set(f64::from(self.wire()));
    }

    /// The `PingReply::store_state` byte.
    pub fn wire(self) -> u8 {
        match self {
            Self::Ok => STORE_OK,
            Self::NoSpace => STORE_NO_SPACE,
            Self::Failed => STORE_FAILED,
        }
    }
}

#[derive(Debug)]
struct Condition {
    health: StoreHealth,
    /// The error that set `health` (its message), answered while the store is closed.
    last_error: Option<RemoteError>,
    /// When a closed store was last tried.
    last_attempt: Option<Instant>,
}

/// The redb store of the namespace, reopened after an I/O error.
#[derive(Debug)]
pub struct Store {
    /// Where the store's bytes are: what every handle, the reopened ones too, is opened on.
    backend: Box<dyn StoreBackend>,
    /// The open handle; `None` while a reopen failed.
    current: RwLock<Option<Arc<Handle>>>,
    condition: Mutex<Condition>,
    /// Changes made durable, and the durable commits that did it.
    changes: AtomicU64,
    commits: AtomicU64,
}

/// True when `err` says the disk (or the user's quota on it) is full.
fn is_no_space(err: &std::io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        || err.kind() == std::io::ErrorKind::StorageFull
}

/// The reply for any error redb returns: `NoSpace` for a full disk, else `Io` with redb's
/// words.
pub fn store_error(err: impl Into<redb::Error>) -> RemoteError {
    match err.into() {
        redb::Error::Io(io) if is_no_space(&io) => {
            RemoteError::new(ErrorCode::NoSpace, format!("metadata store: {io}"))
        }
        other => RemoteError::new(ErrorCode::Io, format!("metadata store: {other}")),
    }
}

impl Store {
    /// Wraps the handle `database` opened on `backend`.
    pub fn new(backend: Box<dyn StoreBackend>, database: Database) -> Self {
        StoreHealth::Ok.export();
        Self {
            backend,
            current: RwLock::new(Some(Arc::new(Handle::new(database)))),
            condition: Mutex::new(Condition {
                health: StoreHealth::Ok,
                last_error: None,
                last_attempt: None,
            }),
            changes: AtomicU64::new(0),
            commits: AtomicU64::new(0),
        }
    }

    /// Changes made durable and the durable commits that did it, since the mds started.
    pub fn commit_stats(&self) -> CommitStats {
        CommitStats {
            changes: self.changes.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
        }
    }

    /// The store's condition, as the last call left it.
    pub fn health(&self) -> StoreHealth {
        self.condition().health
    }

    /// Runs a call that only reads. It never waits for a change's durable commit: it sees
    /// every change committed before it began, durable or not yet.
    pub fn read<T>(
        &self,
        call: impl FnOnce(&Database) -> Result<T, RemoteError>,
    ) -> Result<T, RemoteError> {
        self.run(false, |handle| call(&handle.database))
    }

    /// Runs `call` in a write transaction and commits it, returning once the change is
    /// durable (group commit, `group.rs`); an error from `call` changes nothing. Its success
    /// clears a recorded condition.
    pub fn change<T>(
        &self,
        call: impl FnOnce(&WriteTransaction) -> Result<T, RemoteError>,
    ) -> Result<T, RemoteError> {
        self.run(true, |handle| {
            let under_way = handle.group.begin();
            let mut txn = handle.database.begin_write().map_err(store_error)?;
            txn.set_durability(Durability::None).map_err(|err| {
                RemoteError::new(ErrorCode::Internal, format!("metadata store: {err}"))
            })?;
            let value = call(&txn)?;
            txn.commit().map_err(store_error)?;
            let ticket = under_way.committed();
            if handle.group.wait_durable(ticket, || handle.flush())? == Covered::Led {
                self.commits.fetch_add(1, Ordering::Relaxed);
            }
            self.changes.fetch_add(1, Ordering::Relaxed);
            Ok(value)
        })
    }

    fn run<T>(
        &self,
        changes: bool,
        call: impl FnOnce(&Handle) -> Result<T, RemoteError>,
    ) -> Result<T, RemoteError> {
        let database = self.handle()?;
        match call(&database) {
            Ok(value) => {
                if changes {
                    let mut condition = self.condition();
                    if condition.health != StoreHealth::Ok {
                        tracing::info!(path = %self.backend, "metadata store writes again");
                        condition.health = StoreHealth::Ok;
                        condition.last_error = None;
                        StoreHealth::Ok.export();
                    }
                }
                Ok(value)
            }
            Err(error) if matches!(error.code, ErrorCode::Io | ErrorCode::NoSpace) => {
                let error = self.explain(error);
                self.record(&error);
                // Only a weak reference is kept while waiting for the lock: the failed calls
                // of one group commit all get here, and each strong one would hold up the
                // first one's reopen until it gave up (`STORE_DRAIN_MS`).
                let failed = Arc::downgrade(&database);
                drop(database);
                self.reopen(&failed);
                Err(error)
            }
            Err(error) => Err(error),
        }
    }

    /// A `NoSpace` error names the store's path; others go out as they are.
    fn explain(&self, error: RemoteError) -> RemoteError {
        if error.code == ErrorCode::NoSpace {
            RemoteError::new(
                ErrorCode::NoSpace,
                format!(
                    "no space left on the metadata server's disk ({}): free space there; the mds writes again without a restart",
                    self.backend
                ),
            )
        } else {
            error
        }
    }

    fn record(&self, error: &RemoteError) {
        let health = if error.code == ErrorCode::NoSpace {
            StoreHealth::NoSpace
        } else {
            StoreHealth::Failed
        };
        let mut condition = self.condition();
        if condition.health != health {
            tracing::warn!(path = %self.backend, "metadata store degraded: {error}");
        }
        condition.health = health;
        condition.last_error = Some(error.clone());
        health.export();
    }

    fn condition(&self) -> std::sync::MutexGuard<'_, Condition> {
        self.condition
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The open handle; if the store is closed, one attempt to open it (at most every
    /// [`STORE_REOPEN_INTERVAL_MS`]), else the recorded error.
    fn handle(&self) -> Result<Arc<Handle>, RemoteError> {
        if let Some(database) = self
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            return Ok(Arc::clone(database));
        }
        let mut slot = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(database) = slot.as_ref() {
            return Ok(Arc::clone(database));
        }
        let due = self
            .condition()
            .last_attempt
            .is_none_or(|at| at.elapsed() >= Duration::from_millis(STORE_REOPEN_INTERVAL_MS));
        if due {
            if let Some(database) = self.open_into(&mut slot) {
                return Ok(database);
            }
        }
        Err(self.condition().last_error.clone().unwrap_or_else(|| {
            RemoteError::new(
                ErrorCode::Io,
                format!("metadata store {} is closed", self.backend),
            )
        }))
    }

    /// Drops the `failed` handle (once no other call holds it) and opens the store again, unless another
    /// call already did. Calls that arrive meanwhile wait on the lock, then get the new handle.
    fn reopen(&self, failed: &Weak<Handle>) {
        let mut slot = self.current.write().unwrap_or_else(PoisonError::into_inner);
        let Some(current) =
            slot.take_if(|current| std::ptr::eq(Arc::as_ptr(current), failed.as_ptr()))
        else {
            return; // Another call reopened it already, or it is closed.
        };
        let deadline = Instant::now() + Duration::from_millis(STORE_DRAIN_MS);
        while Arc::strong_count(&current) > 1 {
            if Instant::now() >= deadline {
                // The next failing call tries again; redb's lock on the file is still held.
                tracing::warn!(
                    path = %self.backend,
                    "metadata store not reopened: calls still hold it after {STORE_DRAIN_MS} ms"
                );
                *slot = Some(current);
                return;
            }
            std::thread::sleep(DRAIN_POLL);
        }
        // The last handle: dropping it closes the storage (redb leaves its "needs recovery" mark
        // on disk after an I/O error), so the open below recovers to the last commit.
        drop(current);
        self.open_into(&mut slot);
    }

    /// Changes under way on the open handle (0 while the store is closed): a test lines
    /// changes up behind a durable commit with it.
    #[cfg(test)]
    pub(crate) fn changes_under_way(&self) -> u64 {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or(0, |handle| handle.group.under_way())
    }

    /// Opens the backend's storage into the empty `slot`, [`STORE_REOPEN_ATTEMPTS`] times at
    /// most.
    fn open_into(&self, slot: &mut Option<Arc<Handle>>) -> Option<Arc<Handle>> {
        debug_assert!(slot.is_none());
        let mut last = None;
        for attempt in 0..STORE_REOPEN_ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(STORE_REOPEN_BACKOFF_MS));
            }
            match open_database(&*self.backend, false) {
                Ok(database) => {
                    let database = Arc::new(Handle::new(database));
                    *slot = Some(Arc::clone(&database));
                    self.condition().last_attempt = None;
                    tracing::info!(path = %self.backend, "metadata store reopened");
                    return Some(database);
                }
                Err(err) => last = Some(err),
            }
        }
        let mut condition = self.condition();
        condition.last_attempt = Some(Instant::now());
        if let Some(err) = last {
            let error = self.explain(store_error(err));
            tracing::warn!(path = %self.backend, "metadata store cannot be reopened: {error}");
            condition.health = if error.code == ErrorCode::NoSpace {
                StoreHealth::NoSpace
            } else {
                StoreHealth::Failed
            };
            condition.health.export();
            condition.last_error = Some(error);
        }
        None
    }
}

impl Handle {
    fn new(database: Database) -> Self {
        Self {
            database,
            group: GroupCommit::default(),
        }
    }

    /// One durable commit: persists every change committed on this handle before it began.
    fn flush(&self) -> Result<(), RemoteError> {
        let txn = self.database.begin_write().map_err(store_error)?;
        {
            let mut table = txn.open_table(STORE_TABLE).map_err(store_error)?;
            let done = table
                .get("durable_commits")
                .map_err(store_error)?
                .map_or(0, |guard| guard.value());
            table
                .insert("durable_commits", done.wrapping_add(1))
                .map_err(store_error)?;
        }
        txn.commit().map_err(store_error)
    }
}
