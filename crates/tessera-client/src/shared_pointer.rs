//! Shared file pointers: one 64-bit counter that every process of an MPI open shares.
//!
//! MPI-IO's `_shared` and `_ordered` calls advance one file pointer for all the processes
//! that opened a file together. Tessera keeps it in a small side file, one per open instance,
//! named by the caller (the MPI shim names it after the file handle and a random id that the
//! opening processes agree on) under [`SHARED_POINTER_DIR`]. The counter is 8 little-endian
//! bytes at offset 0; bytes never written read as zeros, so a new side file holds 0.
//!
//! Updates are read-modify-write under an exclusive range lock from the mds on those 8
//! bytes: lock, read, write, unlock, so concurrent `fetch_add`s never lose an increment.
//! A plain [`SharedPointer::load`] takes no lock: the 8 bytes live on one server and one
//! request is atomic there (SEMANTICS.md §2.1), so it sees a whole old or new value.
//!
//! Leftovers. The opener's close removes the side file, but a process that dies first
//! leaves it. So that a dead open's side file can be told from a live one, every process
//! holding a [`SharedPointer`] keeps a *hold*: a shared range lock on bytes
//! [`HOLD_RANGE`] of the side file with a lease of [`SHARED_POINTER_HOLD_LEASE`], renewed
//! by a thread of the pointer every [`SHARED_POINTER_HOLD_RENEW`] (a new lock first, then
//! the old one released, so a live holder is never without one). A holder that dies stops
//! renewing and the mds drops its lock when the lease ends. [`SharedPointer::sweep`] (the
//! shim runs it at every open of a file, on the names of that file's handle) removes a side
//! file only under an exclusive lock on the same bytes, taken without waiting: granted means
//! no process holds it any more. A new holder checks after its hold is granted that the name
//! still leads to the file it locked, so a sweep that removed the file between the holder's
//! create and its lock is noticed and the create made again.
//!
//! Users. The directory is made writable by all and sticky ([`SHARED_POINTER_DIR_MODE`]),
//! so every user's programs keep their side files in it and none can remove another's.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::client::Client;
use crate::error::ClientError;
use crate::file::File;
use crate::methods::{LockOptions, RangeLock};
use crate::options::{CreateOptions, OpenMode};
use tessera_proto::{ErrorCode, Readdir};

/// The directory holding the side files of shared pointers.
pub const SHARED_POINTER_DIR: &str = "/.tessera-shfp";

/// The mode [`SharedPointer::open`] makes [`SHARED_POINTER_DIR`] with: writable by every user
/// and sticky, as `/tmp` is, so that the programs of every user keep their side files there
/// whoever made it first, and none may remove another's.
pub const SHARED_POINTER_DIR_MODE: u32 = 0o1777;

/// Longest side-file name (the namespace's `NAME_BYTES_MAX`).
const SHARED_POINTER_NAME_BYTES_MAX: usize = 255;

/// The bytes of a side file its holders lock shared (the counter is bytes 0..8).
pub const HOLD_RANGE: (u64, u64) = (8, 16);

/// How long a holder's lock lives unless renewed: a dead holder's side file can be swept
/// this long after its death at the latest.
pub const SHARED_POINTER_HOLD_LEASE: Duration = Duration::from_secs(10);

/// How often a holder renews its lock. A holder stalled for longer than the lease minus
/// this (a stopped process) loses its hold; its next operation then fails (see
/// [`SharedPointer::fetch_add`]) rather than use a pointer that a sweep may have removed.
pub const SHARED_POINTER_HOLD_RENEW: Duration = Duration::from_secs(2);

/// How long a holder waits for its lock: only a sweep's short exclusive probe can be in
/// the way.
const SHARED_POINTER_HOLD_WAIT: Duration = Duration::from_secs(5);

/// How long a sweep's exclusive probe may live (it is released right after the unlink).
const SHARED_POINTER_SWEEP_LEASE: Duration = Duration::from_secs(5);

/// Most side files one [`SharedPointer::sweep`] looks at: one file's leftovers beyond this
/// are left for the next sweep.
pub const SHARED_POINTER_SWEEP_MAX: usize = 256;

/// Most times [`SharedPointer::open`] makes the side file again after a sweep removed it
/// between the create and the hold. One sweep looks at each name once, so an open fails
/// only if this many sweeps of its prefix (opens of the same file by other jobs) each hit
/// the moment between its create and its hold.
pub const SHARED_POINTER_OPEN_TRIES_MAX: usize = 16;

const _: () =
    assert!(SHARED_POINTER_HOLD_RENEW.as_millis() * 3 <= SHARED_POINTER_HOLD_LEASE.as_millis());
const _: () = assert!(
    SHARED_POINTER_HOLD_LEASE.as_millis() <= tessera_proto::limits::RANGE_LOCK_LEASE_MS_MAX as u128
);
const _: () = assert!(HOLD_RANGE.0 >= 8 && HOLD_RANGE.0 < HOLD_RANGE.1);

/// A shared file pointer, in whatever unit the caller counts (the MPI shim: etypes).
#[derive(Debug)]
pub struct SharedPointer {
    file: File,
    hold: Hold,
}

/// What the renewing thread and the pointer share.
#[derive(Debug, Default)]
struct HoldState {
    /// Set by the pointer's drop: release the lock and end.
    stop: bool,
    /// Why the hold was lost (the side file went, or renewals failed past the lease).
    lost: Option<String>,
}

/// A holder's renewed lock on [`HOLD_RANGE`] (see the module comment).
#[derive(Debug)]
struct Hold {
    state: Arc<(Mutex<HoldState>, Condvar)>,
    renewer: Option<JoinHandle<()>>,
}

impl Hold {
    fn options() -> LockOptions {
        LockOptions {
            wait: SHARED_POINTER_HOLD_WAIT,
            lease: SHARED_POINTER_HOLD_LEASE,
        }
    }

    /// Starts renewing `lock` on `file` until dropped.
    fn start(file: File, lock: RangeLock) -> Result<Self, ClientError> {
        let state = Arc::new((Mutex::new(HoldState::default()), Condvar::new()));
        let shared = state.clone();
        let renewer = std::thread::Builder::new()
            .name("tessera-shfp-hold".to_owned())
            .spawn(move || Self::renew(&file, lock, &shared))
            .map_err(|error| {
                ClientError::InvalidArgument(format!(
                    "shared pointer: cannot start the thread that renews its hold: {error}"
                ))
            })?;
        Ok(Self {
            state,
            renewer: Some(renewer),
        })
    }

    fn renew(file: &File, mut lock: RangeLock, state: &(Mutex<HoldState>, Condvar)) {
        let (mutex, wake) = state;
        let mut guard = mutex.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            guard = wake
                .wait_timeout_while(guard, SHARED_POINTER_HOLD_RENEW, |state| !state.stop)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            if guard.stop {
                break;
            }
            drop(guard);
            let renewed = file.lock_range_with(HOLD_RANGE.0, HOLD_RANGE.1, false, &Self::options());
            guard = mutex.lock().unwrap_or_else(PoisonError::into_inner);
            match renewed {
                Ok(next) => {
                    // The new lock is granted; the old one can go.
                    let _ = std::mem::replace(&mut lock, next).release();
                }
                Err(error) => {
                    let gone = matches!(
                        error.code(),
                        Some(ErrorCode::NotFound | ErrorCode::UnknownHandle)
                    );
                    if gone || lock.expired() {
                        guard.lost.get_or_insert_with(|| {
                            format!(
                                "shared pointer {}: its hold lapsed ({error}); a sweep may have removed the side file as a leftover",
                                file.path()
                            )
                        });
                    }
                    if gone {
                        break;
                    }
                }
            }
        }
        drop(guard);
        let _ = lock.release();
    }

    fn check(&self) -> Result<(), ClientError> {
        let state = self.state.0.lock().unwrap_or_else(PoisonError::into_inner);
        match &state.lost {
            Some(why) => Err(ClientError::Server {
                code: ErrorCode::UnknownHandle,
                message: why.clone(),
            }),
            None => Ok(()),
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let (mutex, wake) = &*self.state;
        mutex.lock().unwrap_or_else(PoisonError::into_inner).stop = true;
        wake.notify_all();
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
    }
}

impl SharedPointer {
    fn path_of(name: &str) -> Result<String, ClientError> {
        if name.is_empty()
            || name.len() > SHARED_POINTER_NAME_BYTES_MAX
            || name.contains('/')
            || name == "."
            || name == ".."
        {
            return Err(ClientError::InvalidArgument(format!(
                "shared pointer name {name:?}: give 1 to {SHARED_POINTER_NAME_BYTES_MAX} bytes, no '/'"
            )));
        }
        Ok(format!("{SHARED_POINTER_DIR}/{name}"))
    }

    /// The shared pointer `name`, made (holding 0) if no process has made it yet. Any number
    /// of processes may open the same name at once; they all get the same pointer. The
    /// pointer holds the side file (see the module comment) until it is dropped.
    pub fn open(client: &Client, name: &str) -> Result<Self, ClientError> {
        let path = Self::path_of(name)?;
        let options = CreateOptions {
            server_count: 1,
            ..CreateOptions::default()
        };
        for _ in 0..SHARED_POINTER_OPEN_TRIES_MAX {
            match client.mkdir(SHARED_POINTER_DIR, SHARED_POINTER_DIR_MODE) {
                Err(error) if error.code() != Some(ErrorCode::Exists) => return Err(error),
                _ => {}
            }
            let file = match client.create(&path, &options) {
                Ok(file) => file,
                // The directory went with a sweep of its last entry: make it again.
                Err(error) if error.code() == Some(ErrorCode::NotFound) => continue,
                Err(error) => return Err(error),
            };
            let lock =
                match file.lock_range_with(HOLD_RANGE.0, HOLD_RANGE.1, false, &Hold::options()) {
                    Ok(lock) => lock,
                    Err(error)
                        if matches!(
                            error.code(),
                            Some(ErrorCode::NotFound | ErrorCode::UnknownHandle)
                        ) =>
                    {
                        continue
                    }
                    Err(error) => return Err(error),
                };
            // Held; does the name still lead to this file (no sweep removed it between the
            // create and the grant)?
            match client.stat(&path) {
                Ok(attr) if attr.handle == file.handle() => {
                    let hold = Hold::start(file.clone(), lock)?;
                    return Ok(Self { file, hold });
                }
                // Swept in between: make it again.
                Ok(_) => {}
                Err(error) if error.code() == Some(ErrorCode::NotFound) => {}
                Err(error) => return Err(error),
            }
        }
        Err(ClientError::Server {
            code: ErrorCode::Busy,
            message: format!(
                "shared pointer {path}: removed by sweeps {SHARED_POINTER_OPEN_TRIES_MAX} times between its create and its hold"
            ),
        })
    }

    /// Removes the side files whose names start with `prefix` and that no live process
    /// holds (the leftovers of opens whose processes died), looking at
    /// [`SHARED_POINTER_SWEEP_MAX`] of them at most. Returns how many it removed. A side
    /// file some process holds is never removed: the removal happens under an exclusive
    /// lock on the holders' bytes, granted only when no holder's lease is running. Side
    /// files of another user (which this one may not open) are left to that user's sweeps.
    pub fn sweep(client: &Client, prefix: &str) -> Result<usize, ClientError> {
        if prefix.is_empty() || prefix.len() > SHARED_POINTER_NAME_BYTES_MAX || prefix.contains('/')
        {
            return Err(ClientError::InvalidArgument(format!(
                "shared pointer sweep prefix {prefix:?}: give 1 to {SHARED_POINTER_NAME_BYTES_MAX} bytes, no '/'"
            )));
        }
        let mut names = Vec::new();
        // Names sort, and every name with the prefix comes after the prefix itself.
        let mut after = prefix.to_owned();
        'pages: loop {
            let page = match client.mds_call(&Readdir {
                credentials: client.credentials()?,
                path: SHARED_POINTER_DIR.to_owned(),
                after: after.clone(),
            }) {
                Ok(page) => page,
                Err(error) if error.code() == Some(ErrorCode::NotFound) => return Ok(0),
                Err(error) => return Err(error),
            };
            for entry in &page.entries {
                if !entry.name.starts_with(prefix) || names.len() >= SHARED_POINTER_SWEEP_MAX {
                    break 'pages;
                }
                names.push(entry.name.clone());
            }
            match page.entries.last() {
                Some(last) if page.more => after.clone_from(&last.name),
                _ => break,
            }
        }
        let probe = LockOptions {
            wait: Duration::ZERO,
            lease: SHARED_POINTER_SWEEP_LEASE,
        };
        let mut removed = 0;
        for name in names {
            let path = format!("{SHARED_POINTER_DIR}/{name}");
            let file = match client.open(&path, OpenMode::ReadWrite) {
                Ok(file) => file,
                // Gone meanwhile, or another user's (the sweep of its own opens removes it).
                Err(error)
                    if matches!(
                        error.code(),
                        Some(ErrorCode::NotFound | ErrorCode::PermissionDenied)
                    ) =>
                {
                    continue
                }
                Err(error) => return Err(error),
            };
            match file.lock_range_with(HOLD_RANGE.0, HOLD_RANGE.1, true, &probe) {
                Ok(lock) => {
                    // No holder: a leftover. Removed while the probe keeps holders out.
                    match client.unlink(&path) {
                        Ok(()) => removed += 1,
                        Err(error) if error.code() == Some(ErrorCode::NotFound) => {}
                        Err(error) => return Err(error),
                    }
                    let _ = lock.release();
                }
                // Held by a live process (Busy), or gone meanwhile.
                Err(error)
                    if matches!(
                        error.code(),
                        Some(ErrorCode::Busy | ErrorCode::NotFound | ErrorCode::UnknownHandle)
                    ) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(removed)
    }

    /// Removes the side file of `name`. A missing one is not an error.
    pub fn remove(client: &Client, name: &str) -> Result<(), ClientError> {
        match client.unlink(&Self::path_of(name)?) {
            Err(error) if error.code() != Some(ErrorCode::NotFound) => Err(error),
            _ => Ok(()),
        }
    }

    /// The side file's path.
    pub fn path(&self) -> &str {
        self.file.path()
    }

    /// The current value.
    pub fn load(&self) -> Result<u64, ClientError> {
        self.hold.check()?;
        let mut bytes = [0u8; 8];
        self.file.read_at(0, &mut bytes)?;
        Ok(u64::from_le_bytes(bytes))
    }

    /// Runs `update` on the current value under the lock and stores what it returns.
    fn update(
        &self,
        update: impl FnOnce(u64) -> Result<u64, ClientError>,
    ) -> Result<u64, ClientError> {
        self.hold.check()?;
        let lock = self.file.lock_range(0, 8, true)?;
        let current = self.load()?;
        let next = update(current)?;
        if next != current {
            self.file.write_at(0, &next.to_le_bytes())?;
        }
        if lock.expired() {
            return Err(lock.lease_error());
        }
        lock.release()?;
        Ok(current)
    }

    /// Adds `delta` and returns the value before (MPI's shared-pointer reservation).
    pub fn fetch_add(&self, delta: u64) -> Result<u64, ClientError> {
        let path = self.file.path().to_owned();
        self.update(|current| {
            current.checked_add(delta).ok_or_else(|| {
                ClientError::InvalidArgument(format!(
                    "shared pointer {path}: {current} + {delta} overflows"
                ))
            })
        })
    }

    /// Sets the value (MPI_File_seek_shared).
    pub fn store(&self, value: u64) -> Result<(), ClientError> {
        self.update(|_| Ok(value)).map(drop)
    }
}
