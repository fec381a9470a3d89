//! Local objects: one file per handle in `DATA_DIR/objects/`, holding the server's share of
//! the file in logical order.
//!
//! Each request is applied under the object's lock — shared for reads, exclusive for writes
//! and truncates — so a request is atomic on this server: a reader sees all of a concurrent
//! write to this object or none of it. Pieces that are adjacent in the object and consecutive
//! in the request become one storage call; overlapping pieces of one write apply in list
//! order (the later piece wins).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::UNIX_EPOCH;

use tessera_proto::limits::IOD_OPEN_OBJECTS_MAX;
use tessera_proto::{ErrorCode, Piece, RemoteError};

/// An open local object.
#[derive(Debug)]
struct Object {
    file: File,
    /// Serialises writers against readers of this object (see the module comment).
    lock: RwLock<()>,
}

/// The objects of one I/O server.
#[derive(Debug)]
pub struct ObjectStore {
    directory: PathBuf,
    /// Open objects, at most `IOD_OPEN_OBJECTS_MAX`.
    open: Mutex<HashMap<u64, Arc<Object>>>,
    object_count: AtomicU64,
}

/// Groups consecutive pieces that are adjacent in the object: yields (object offset, length,
/// data offset) per storage call.
fn storage_runs(pieces: &[Piece]) -> impl Iterator<Item = (u64, u64, usize)> + '_ {
    let mut index = 0;
    let mut data_offset = 0usize;
    std::iter::from_fn(move || {
        let first = pieces.get(index)?;
        let (offset, mut length) = (first.offset, first.length);
        index += 1;
        while let Some(next) = pieces.get(index) {
            if next.offset != offset + length {
                break;
            }
            length += next.length;
            index += 1;
        }
        let run = (offset, length, data_offset);
        data_offset += usize::try_from(length).expect("runs lie within one bulk buffer");
        Some(run)
    })
    .filter(|&(_, length, _)| length > 0)
}

impl ObjectStore {
    /// Opens (creating if needed) the object directory under `data_directory`.
    pub fn open(data_directory: &Path) -> io::Result<Self> {
        let directory = data_directory.join("objects");
        fs::create_dir_all(&directory)?;
        let count = fs::read_dir(&directory)?.count() as u64;
        Ok(Self {
            directory,
            open: Mutex::new(HashMap::new()),
            object_count: AtomicU64::new(count),
        })
    }

    /// Objects stored.
    pub fn object_count(&self) -> u64 {
        self.object_count.load(Ordering::Relaxed)
    }

    fn path(&self, handle: u64) -> PathBuf {
        self.directory.join(format!("{handle:016x}"))
    }

    fn io_error(&self, handle: u64, what: &str, err: &io::Error) -> RemoteError {
        RemoteError::new(
            ErrorCode::Io,
            format!(
                "{what} of object {handle:#x} in {} failed: {err}",
                self.directory.display()
            ),
        )
    }

    fn unknown(handle: u64) -> RemoteError {
        RemoteError::new(
            ErrorCode::UnknownHandle,
            format!("no object for file handle {handle:#x} on this server"),
        )
    }

    fn object(&self, handle: u64) -> Result<Arc<Object>, RemoteError> {
        let mut open = self.open.lock().expect("object table lock");
        if let Some(object) = open.get(&handle) {
            return Ok(object.clone());
        }
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.path(handle))
        {
            Ok(file) => file,
            Err(err) if err.kind() == ErrorKind::NotFound => return Err(Self::unknown(handle)),
            Err(err) => return Err(self.io_error(handle, "open", &err)),
        };
        if open.len() >= IOD_OPEN_OBJECTS_MAX {
            // Evict an object no request holds, so every request on one object shares one
            // lock; if all are in use the table grows past the limit by at most the requests in
            // flight (`SERVER_REQUESTS_INFLIGHT_MAX`).
            let idle = open
                .iter()
                .find(|(_, object)| Arc::strong_count(object) == 1)
                .map(|(handle, _)| *handle);
            if let Some(victim) = idle {
                open.remove(&victim);
            }
        }
        let object = Arc::new(Object {
            file,
            lock: RwLock::new(()),
        });
        open.insert(handle, object.clone());
        Ok(object)
    }

    /// Creates the empty object of `handle`. An existing object is emptied: the mds hands out
    /// each handle once, so one can only be an orphan of a create the mds never committed
    /// (it crashed in between and reissued the handle), whose bytes must not show through.
    pub fn create(&self, handle: u64) -> Result<(), RemoteError> {
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.path(handle))
        {
            Ok(_) => {
                self.object_count.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(err) if err.kind() == ErrorKind::AlreadyExists => self.truncate(handle, 0),
            Err(err) => Err(self.io_error(handle, "create", &err)),
        }
    }

    /// Removes the object of `handle`.
    pub fn remove(&self, handle: u64) -> Result<(), RemoteError> {
        self.open.lock().expect("object table lock").remove(&handle);
        match fs::remove_file(self.path(handle)) {
            Ok(()) => {
                self.object_count.fetch_sub(1, Ordering::Relaxed);
                Ok(())
            }
            Err(err) if err.kind() == ErrorKind::NotFound => Err(Self::unknown(handle)),
            Err(err) => Err(self.io_error(handle, "remove", &err)),
        }
    }

    /// Size and mtime (ns since the epoch) of the object of `handle`.
    pub fn stat(&self, handle: u64) -> Result<(u64, u64), RemoteError> {
        let object = self.object(handle)?;
        let metadata = object
            .file
            .metadata()
            .map_err(|err| self.io_error(handle, "stat", &err))?;
        let mtime_ns = metadata
            .modified()
            .ok()
            .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |since| {
                u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
            });
        Ok((metadata.len(), mtime_ns))
    }

    /// Sets the size of the object of `handle`.
    pub fn truncate(&self, handle: u64, size: u64) -> Result<(), RemoteError> {
        let object = self.object(handle)?;
        let _guard = object.lock.write().expect("object lock");
        object
            .file
            .set_len(size)
            .map_err(|err| self.io_error(handle, "truncate", &err))
    }

    /// Flushes the object of `handle` to stable storage.
    pub fn sync(&self, handle: u64) -> Result<(), RemoteError> {
        let object = self.object(handle)?;
        object
            .file
            .sync_all()
            .map_err(|err| self.io_error(handle, "sync", &err))
    }

    /// Writes `data` to `pieces` (back to back in `data`). Returns the storage calls made.
    pub fn write(&self, handle: u64, pieces: &[Piece], data: &[u8]) -> Result<u32, RemoteError> {
        debug_assert_eq!(
            pieces.iter().map(|p| p.length).sum::<u64>(),
            data.len() as u64
        );
        let object = self.object(handle)?;
        let _guard = object.lock.write().expect("object lock");
        let mut calls = 0u32;
        for (offset, length, start) in storage_runs(pieces) {
            let end = start + usize::try_from(length).expect("run within buffer");
            object
                .file
                .write_all_at(&data[start..end], offset)
                .map_err(|err| self.io_error(handle, "write", &err))?;
            calls += 1;
        }
        Ok(calls)
    }

    /// Reads `pieces` into `buffer`, back to back; bytes past the end of the object are zeros.
    /// Returns the storage calls made.
    pub fn read(
        &self,
        handle: u64,
        pieces: &[Piece],
        buffer: &mut [u8],
    ) -> Result<u32, RemoteError> {
        debug_assert_eq!(
            pieces.iter().map(|p| p.length).sum::<u64>(),
            buffer.len() as u64
        );
        let object = self.object(handle)?;
        let _guard = object.lock.read().expect("object lock");
        let mut calls = 0u32;
        for (offset, length, start) in storage_runs(pieces) {
            let target =
                &mut buffer[start..start + usize::try_from(length).expect("run within buffer")];
            let mut filled = 0;
            while filled < target.len() {
                match object
                    .file
                    .read_at(&mut target[filled..], offset + filled as u64)
                {
                    Ok(0) => break,
                    Ok(read) => filled += read,
                    Err(err) if err.kind() == ErrorKind::Interrupted => {}
                    Err(err) => return Err(self.io_error(handle, "read", &err)),
                }
            }
            target[filled..].fill(0);
            calls += 1;
        }
        Ok(calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_adjacent_pieces_and_applies_overlaps_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(dir.path()).unwrap();
        store.create(5).unwrap();
        let pieces = [
            Piece::new(0, 4),
            Piece::new(4, 4),
            Piece::new(2, 2),
            Piece::new(100, 0),
        ];
        let calls = store.write(5, &pieces, b"aaaabbbbcc").unwrap();
        assert_eq!(
            calls, 2,
            "the first two pieces are one storage call; the empty one is none"
        );
        let mut buffer = [0u8; 10];
        let reads = store
            .read(5, &[Piece::new(0, 8), Piece::new(8, 2)], &mut buffer)
            .unwrap();
        assert_eq!(reads, 1);
        assert_eq!(
            &buffer, b"aaccbbbb\0\0",
            "later piece wins; past the end reads zeros"
        );
        assert_eq!(store.stat(5).unwrap().0, 8);
        assert_eq!(store.object_count(), 1);
    }

    #[test]
    fn unknown_handles_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(dir.path()).unwrap();
        let err = store
            .read(0xabc, &[Piece::new(0, 1)], &mut [0])
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::UnknownHandle);
        assert!(err.message.contains("0xabc"), "{}", err.message);
        assert_eq!(
            store.remove(0xabc).unwrap_err().code,
            ErrorCode::UnknownHandle
        );
    }
}
