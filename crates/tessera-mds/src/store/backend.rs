//! Where the store keeps its bytes: the seam between the mds's [`Store`](super::Store) and
//! the medium under redb.
//!
//! A [`StoreBackend`] hands redb a fresh [`redb::StorageBackend`] for each handle of the
//! store: one at the mds's start (`create`: an empty or missing store becomes a new
//! database) and one at every reopen after a storage error (the same bytes again, which must
//! already hold a database). In a server it is [`FileStore`], the redb file on disk, opened as
//! it always was. Tests choose another through [`Namespace::open_on`](crate::Namespace::open_on):
//! the in-memory and fault-injecting backends of `crate::testing` (feature `testing`), so the
//! reopen and full-disk paths run without root or a tmpfs.

use std::fmt;
use std::io;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use redb::{BackendError, Database, StorageBackend};

/// Mode of the namespace store: every name, owner and layout of the cluster, for the mds
/// alone.
pub const STORE_FILE_MODE: u32 = 0o600;

/// The medium of the mds's store. `Display` names it in messages and logs (a file's path).
pub trait StoreBackend: fmt::Debug + fmt::Display + Send + Sync + 'static {
    /// The storage for a new handle of the store. `create` at the mds's start: a missing or
    /// empty store may become a new database. Otherwise (a reopen after a storage error) the
    /// bytes the failed handle left, which must hold a database.
    fn storage(&self, create: bool) -> io::Result<Box<dyn StorageBackend>>;
}

/// The store as a redb file on disk: the production backend.
#[derive(Debug, Clone)]
pub struct FileStore {
    path: PathBuf,
}

impl FileStore {
    /// The store in the file at `path` (created owner-only at the first open if missing).
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl fmt::Display for FileStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.path.display().fmt(f)
    }
}

impl StoreBackend for FileStore {
    /// At the start: creates the file owner-only if it is missing (an empty file is a new
    /// redb database) and makes an existing one owner-only, then opens it read-write as
    /// `Database::create` does. At a reopen: opens the existing file read-write, as
    /// `Database::open` does.
    fn storage(&self, create: bool) -> io::Result<Box<dyn StorageBackend>> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        if create {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(STORE_FILE_MODE)
                .open(&self.path)?;
            std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(STORE_FILE_MODE))?;
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(&self.path)?;
        // `new` cannot fail in redb 4's API (it wraps the file); an error would say so.
        let backend = redb::backends::FileBackend::new(file).map_err(io::Error::other)?;
        Ok(Box::new(backend))
    }
}

/// Opens a handle of the store on `backend`'s storage: a new database in empty storage only
/// when `create` (at a reopen, empty storage is refused as `Database::open` refuses an empty
/// file).
pub(crate) fn open_database(
    backend: &dyn StoreBackend,
    create: bool,
) -> Result<Database, redb::Error> {
    let storage = Boxed(backend.storage(create)?);
    if !create && storage.len()? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "Database file is empty and creating a new database was not requested",
        )
        .into());
    }
    Ok(Database::builder().create_with_backend(storage)?)
}

/// A boxed storage handed to redb, which takes an `impl StorageBackend`: every call goes to
/// the box, the lock calls too (a [`FileStore`]'s file lock keeps a second mds off the file).
#[derive(Debug)]
pub(crate) struct Boxed(pub(crate) Box<dyn StorageBackend>);

impl StorageBackend for Boxed {
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.0.read(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write(offset, data)
    }

    fn close(&self) -> io::Result<()> {
        self.0.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.0.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.query_lock_range(start, end)
    }
}
