//! The seam between the iod's request paths and the bytes underneath them.
//!
//! [`ObjectStore`](crate::ObjectStore) does everything a request needs above storage — the
//! open-object table, extent locks, planning, counters, the orphan sweep's bookkeeping — and
//! reaches storage only through [`ObjectStorage`] (create, open, remove and list objects) and
//! the [`StorageObject`] it opens (positioned reads and writes, size, sync). The real storage
//! is a directory of files (`files.rs`); the `testing` feature adds one in memory and a
//! fault-injecting wrapper (`testing/`).
//!
//! Two fast paths need a kernel file, not just positioned calls: io_uring batches and reads
//! served from a mapping of the object. An object offers its file through
//! [`StorageObject::as_file`]; where it has none, a batched plan runs one call per run and a
//! mapped read falls back to a buffered one, so every request kind works on any storage.
//! The calls are generic, not dynamic: the file-backed store compiles to direct `File` calls.

use std::fmt::Debug;
use std::fs::File;
use std::io::{self, ErrorKind, IoSlice};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::time::UNIX_EPOCH;

/// What a listing of the objects found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    /// The object of this handle.
    Object(u64),
    /// Something that is not an object (a file whose name is not a handle): left alone.
    Foreign,
}

/// The entries of a listing, read lazily (a directory may hold millions).
pub type Listing<'a> = Box<dyn Iterator<Item = io::Result<Listed>> + Send + 'a>;

/// Size and modification time of one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ObjectMetadata {
    /// Bytes.
    pub size: u64,
    /// Last modification, ns since the Unix epoch (0 where unknown).
    pub mtime_ns: u64,
}

/// Capacity and use of a storage, for `Statfs` (`tessera df`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Size of the storage, bytes.
    pub total_bytes: u64,
    /// Free bytes.
    pub free_bytes: u64,
    /// Free bytes the server may use (what its writes run out of).
    pub available_bytes: u64,
    /// Objects stored.
    pub objects: u64,
    /// Their sizes added up (holes included), bytes.
    pub object_bytes: u64,
    /// The space they take (holes excluded), bytes.
    pub object_allocated_bytes: u64,
}

/// Where an iod's objects live.
///
/// Errors are plain `io::Error`s; the store names the object and the [`location`] in the
/// reply and maps `ENOSPC`/`EDQUOT` to `NoSpace`, everything else to `Io`.
///
/// [`location`]: ObjectStorage::location
pub trait ObjectStorage: Send + Sync + Debug + 'static {
    /// An open object.
    type Object: StorageObject + 'static;

    /// Whether opened objects offer their file ([`StorageObject::as_file`]): the store plans
    /// io_uring batches only then.
    const FILE_BACKED: bool = false;

    /// Where the objects are, for messages (a directory's path, or `memory`).
    fn location(&self) -> &str;

    /// Opens the object of `handle`; `ErrorKind::NotFound` if there is none.
    fn open(&self, handle: u64) -> io::Result<Self::Object>;

    /// Creates the empty object of `handle`; `ErrorKind::AlreadyExists` if there is one
    /// (left as it is).
    fn create(&self, handle: u64) -> io::Result<()>;

    /// Removes the object of `handle` (objects still open stay usable until dropped, as an
    /// unlinked file does); `ErrorKind::NotFound` if there is none.
    fn remove(&self, handle: u64) -> io::Result<()>;

    /// Every entry where the objects are, in no particular order.
    fn list(&self) -> io::Result<Listing<'_>>;

    /// The unified cache unit recorded with the object of `handle` at its create
    /// ([`ObjectStorage::set_cache_unit`]); 0 where none was (the iod's default).
    fn cache_unit(&self, handle: u64) -> io::Result<u32>;

    /// Records `unit_bytes` as the object's cache unit, so a restarted iod uses it again;
    /// 0 clears the record. [`ObjectStorage::remove`] removes the record with the object.
    fn set_cache_unit(&self, handle: u64, unit_bytes: u32) -> io::Result<()>;

    /// Capacity and use: one look at every object.
    fn usage(&self) -> io::Result<Usage>;
}

/// One open object: positioned calls on its bytes.
pub trait StorageObject: Send + Sync + Debug {
    /// Reads at most `target.len()` bytes at `offset`; 0 at or past the end.
    fn read_at(&self, target: &mut [u8], offset: u64) -> io::Result<usize>;

    /// Writes at most `source.len()` bytes at `offset` (a short count is not an error).
    fn write_at(&self, source: &[u8], offset: u64) -> io::Result<usize>;

    /// Writes the bytes of `parts`, back to back, at `offset`, in one call where the storage
    /// can (`pwritev`); returns the bytes written, which may be fewer. By default: the first
    /// non-empty part.
    fn write_vectored_at(&self, parts: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        match parts.iter().find(|part| !part.is_empty()) {
            Some(part) => self.write_at(part, offset),
            None => Ok(0),
        }
    }

    /// Size and modification time.
    fn metadata(&self) -> io::Result<ObjectMetadata>;

    /// Sets the size: zeros when it grows.
    fn set_size(&self, size: u64) -> io::Result<()>;

    /// Flushes the object to stable storage.
    fn sync(&self) -> io::Result<()>;

    /// The kernel file behind the object, for the paths that need one (io_uring, mappings,
    /// `mincore`); `None` where there is none, and those paths fall back to positioned calls.
    fn as_file(&self) -> Option<&File> {
        None
    }
}

/// Reads `target.len()` bytes at `offset`; bytes past the end of the object read as zeros.
pub fn read_full(object: &impl StorageObject, target: &mut [u8], offset: u64) -> io::Result<()> {
    let mut filled = 0;
    while filled < target.len() {
        match object.read_at(&mut target[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    target[filled..].fill(0);
    Ok(())
}

/// Writes all of `source` at `offset`: a short write is continued where it stopped, a write
/// of nothing is `ErrorKind::WriteZero`.
pub fn write_full(
    object: &impl StorageObject,
    mut source: &[u8],
    mut offset: u64,
) -> io::Result<()> {
    while !source.is_empty() {
        match object.write_at(source, offset) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(written) => {
                source = &source[written..];
                offset += written as u64;
            }
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

impl StorageObject for File {
    fn read_at(&self, target: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(self, target, offset)
    }

    fn write_at(&self, source: &[u8], offset: u64) -> io::Result<usize> {
        FileExt::write_at(self, source, offset)
    }

    fn write_vectored_at(&self, parts: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        let count = parts.len().min(tessera_proto::limits::IOV_PIECES_MAX);
        let position =
            libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        // SAFETY: `parts` are live slices (IoSlice is ABI-compatible with iovec); `count` of
        // them are passed; the kernel only reads them.
        let written = unsafe {
            libc::pwritev(
                self.as_raw_fd(),
                parts.as_ptr().cast(),
                i32::try_from(count).expect("at most IOV_PIECES_MAX"),
                position,
            )
        };
        usize::try_from(written).map_err(|_| io::Error::last_os_error())
    }

    fn metadata(&self) -> io::Result<ObjectMetadata> {
        let metadata = File::metadata(self)?;
        let mtime_ns = metadata
            .modified()
            .ok()
            .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |since| {
                u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
            });
        Ok(ObjectMetadata {
            size: metadata.len(),
            mtime_ns,
        })
    }

    fn set_size(&self, size: u64) -> io::Result<()> {
        self.set_len(size)
    }

    fn sync(&self) -> io::Result<()> {
        self.sync_all()
    }

    fn as_file(&self) -> Option<&File> {
        Some(self)
    }
}

/// Whether `err` says the storage is full (`ENOSPC`, or a quota: `EDQUOT`).
pub fn is_no_space(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        || err.kind() == ErrorKind::StorageFull
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_objects_round_trip_and_read_zeros_past_the_end() {
        let file = tempfile::tempfile().unwrap();
        write_full(&file, b"hello", 3).unwrap();
        let mut target = [0xffu8; 10];
        read_full(&file, &mut target, 0).unwrap();
        assert_eq!(&target, b"\0\0\0hello\0\0");
        let written = StorageObject::write_vectored_at(
            &file,
            &[IoSlice::new(b"ab"), IoSlice::new(b""), IoSlice::new(b"cd")],
            0,
        )
        .unwrap();
        assert_eq!(written, 4);
        assert_eq!(StorageObject::metadata(&file).unwrap().size, 8);
        file.set_size(2).unwrap();
        assert_eq!(StorageObject::metadata(&file).unwrap().size, 2);
        assert!(is_no_space(&io::Error::from_raw_os_error(libc::ENOSPC)));
        assert!(!is_no_space(&io::Error::from_raw_os_error(libc::EIO)));
    }
}
