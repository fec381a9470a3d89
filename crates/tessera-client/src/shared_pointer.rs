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

use crate::client::{Client, CreateOptions};
use crate::error::ClientError;
use crate::file::File;
use tessera_proto::ErrorCode;

/// The directory holding the side files of shared pointers.
pub const SHARED_POINTER_DIR: &str = "/.tessera-shfp";

/// Longest side-file name (the namespace's `NAME_BYTES_MAX`).
const SHARED_POINTER_NAME_BYTES_MAX: usize = 255;

/// A shared file pointer, in whatever unit the caller counts (the MPI shim: etypes).
#[derive(Debug)]
pub struct SharedPointer {
    file: File,
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
    /// of processes may open the same name at once; they all get the same pointer.
    pub fn open(client: &Client, name: &str) -> Result<Self, ClientError> {
        let path = Self::path_of(name)?;
        match client.mkdir(SHARED_POINTER_DIR, 0o755) {
            Err(error) if error.code() != Some(ErrorCode::Exists) => return Err(error),
            _ => {}
        }
        let options = CreateOptions {
            server_count: 1,
            ..CreateOptions::default()
        };
        Ok(Self {
            file: client.create(&path, &options)?,
        })
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
        let mut bytes = [0u8; 8];
        self.file.read_at(0, &mut bytes)?;
        Ok(u64::from_le_bytes(bytes))
    }

    /// Runs `update` on the current value under the lock and stores what it returns.
    fn update(
        &self,
        update: impl FnOnce(u64) -> Result<u64, ClientError>,
    ) -> Result<u64, ClientError> {
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
