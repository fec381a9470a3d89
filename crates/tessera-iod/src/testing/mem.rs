//! Objects in memory: a map from handle to a byte vector, with a capacity over all objects
//! past which writes fail with `ENOSPC`, as a full disk does.

use std::collections::HashMap;
use std::io::{self, ErrorKind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::storage::{Listed, Listing, ObjectMetadata, ObjectStorage, StorageObject, Usage};

/// Bytes a [`MemStorage::new`] holds over all its objects.
pub const MEM_STORAGE_BYTES_DEFAULT: u64 = 256 << 20;

/// Storage in memory.
#[derive(Debug)]
pub struct MemStorage {
    objects: Mutex<HashMap<u64, MemObject>>,
    /// Cache units recorded by `set_cache_unit` (one per object at most).
    cache_units: Mutex<HashMap<u64, u32>>,
    space: Arc<Space>,
}

/// The capacity and what the objects use of it (a removed object still open keeps its
/// bytes until dropped, as an unlinked file does).
#[derive(Debug)]
struct Space {
    capacity_bytes: u64,
    used_bytes: AtomicU64,
}

impl Space {
    /// Takes `bytes` more, or `ENOSPC` if they do not fit.
    fn take(&self, bytes: u64) -> io::Result<()> {
        self.used_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes)
                    .filter(|&total| total <= self.capacity_bytes)
            })
            .map(drop)
            .map_err(|_| io::Error::from_raw_os_error(libc::ENOSPC))
    }

    fn give_back(&self, bytes: u64) {
        self.used_bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    fn free_bytes(&self) -> u64 {
        self.capacity_bytes
            .saturating_sub(self.used_bytes.load(Ordering::Relaxed))
    }
}

impl Default for MemStorage {
    fn default() -> Self {
        Self::new()
    }
}

impl MemStorage {
    /// Empty storage of [`MEM_STORAGE_BYTES_DEFAULT`] bytes.
    pub fn new() -> Self {
        Self::with_capacity(MEM_STORAGE_BYTES_DEFAULT)
    }

    /// Empty storage of `capacity_bytes` bytes over all objects.
    pub fn with_capacity(capacity_bytes: u64) -> Self {
        Self {
            objects: Mutex::default(),
            cache_units: Mutex::default(),
            space: Arc::new(Space {
                capacity_bytes,
                used_bytes: AtomicU64::new(0),
            }),
        }
    }

    /// Bytes the objects hold now.
    pub fn used_bytes(&self) -> u64 {
        self.space.used_bytes.load(Ordering::Relaxed)
    }

    /// A copy of the bytes of the object of `handle`, if there is one.
    pub fn contents(&self, handle: u64) -> Option<Vec<u8>> {
        let objects = self.objects.lock().expect("object map lock");
        objects.get(&handle).map(|object| object.bytes().clone())
    }

    /// The handles of the objects, in ascending order.
    pub fn handles(&self) -> Vec<u64> {
        let mut handles: Vec<u64> = self
            .objects
            .lock()
            .expect("object map lock")
            .keys()
            .copied()
            .collect();
        handles.sort_unstable();
        handles
    }
}

impl ObjectStorage for MemStorage {
    type Object = MemObject;

    fn location(&self) -> &'static str {
        "memory"
    }

    fn open(&self, handle: u64) -> io::Result<MemObject> {
        let objects = self.objects.lock().expect("object map lock");
        objects
            .get(&handle)
            .cloned()
            .ok_or_else(|| io::Error::new(ErrorKind::NotFound, format!("no object {handle:#x}")))
    }

    fn create(&self, handle: u64) -> io::Result<()> {
        let mut objects = self.objects.lock().expect("object map lock");
        if objects.contains_key(&handle) {
            return Err(ErrorKind::AlreadyExists.into());
        }
        let object = MemObject(Arc::new(Inner {
            bytes: RwLock::default(),
            mtime_ns: AtomicU64::new(now_ns()),
            space: Arc::clone(&self.space),
        }));
        objects.insert(handle, object);
        Ok(())
    }

    fn remove(&self, handle: u64) -> io::Result<()> {
        let mut objects = self.objects.lock().expect("object map lock");
        self.cache_units
            .lock()
            .expect("cache unit map lock")
            .remove(&handle);
        objects
            .remove(&handle)
            .map(drop)
            .ok_or_else(|| ErrorKind::NotFound.into())
    }

    fn cache_unit(&self, handle: u64) -> io::Result<u32> {
        let units = self.cache_units.lock().expect("cache unit map lock");
        Ok(units.get(&handle).copied().unwrap_or(0))
    }

    fn set_cache_unit(&self, handle: u64, unit_bytes: u32) -> io::Result<()> {
        let objects = self.objects.lock().expect("object map lock");
        if !objects.contains_key(&handle) {
            return Err(io::Error::new(
                ErrorKind::NotFound,
                format!("no object {handle:#x}"),
            ));
        }
        let mut units = self.cache_units.lock().expect("cache unit map lock");
        if unit_bytes == 0 {
            units.remove(&handle);
        } else {
            units.insert(handle, unit_bytes);
        }
        Ok(())
    }

    fn list(&self) -> io::Result<Listing<'_>> {
        Ok(Box::new(
            self.handles()
                .into_iter()
                .map(|handle| Ok(Listed::Object(handle))),
        ))
    }

    fn usage(&self) -> io::Result<Usage> {
        let objects = self.objects.lock().expect("object map lock");
        let object_bytes = objects
            .values()
            .map(|object| object.0.bytes.read().expect("object lock").len() as u64)
            .sum();
        Ok(Usage {
            total_bytes: self.space.capacity_bytes,
            free_bytes: self.space.free_bytes(),
            available_bytes: self.space.free_bytes(),
            objects: objects.len() as u64,
            object_bytes,
            object_allocated_bytes: object_bytes,
        })
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}

/// One object in memory (clones share it).
#[derive(Debug, Clone)]
pub struct MemObject(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    bytes: RwLock<Vec<u8>>,
    mtime_ns: AtomicU64,
    space: Arc<Space>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let length = self.bytes.get_mut().map_or(0, |bytes| bytes.len());
        self.space.give_back(length as u64);
    }
}

impl MemObject {
    fn bytes(&self) -> std::sync::RwLockReadGuard<'_, Vec<u8>> {
        self.0.bytes.read().expect("object bytes lock")
    }

    /// Grows or shrinks `bytes` to `size`, within the capacity.
    fn resize(&self, bytes: &mut Vec<u8>, size: u64) -> io::Result<()> {
        let length = bytes.len() as u64;
        if size > length {
            self.0.space.take(size - length)?;
        } else {
            self.0.space.give_back(length - size);
        }
        bytes.resize(
            usize::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?,
            0,
        );
        Ok(())
    }
}

impl StorageObject for MemObject {
    fn read_at(&self, target: &mut [u8], offset: u64) -> io::Result<usize> {
        let bytes = self.bytes();
        let Ok(start) = usize::try_from(offset) else {
            return Ok(0);
        };
        if start >= bytes.len() {
            return Ok(0);
        }
        let count = target.len().min(bytes.len() - start);
        target[..count].copy_from_slice(&bytes[start..start + count]);
        Ok(count)
    }

    /// Writes what fits: as a file system does, a write that reaches past the free space is
    /// short, and one that can place nothing fails with `ENOSPC`.
    fn write_at(&self, source: &[u8], offset: u64) -> io::Result<usize> {
        if source.is_empty() {
            return Ok(0);
        }
        let mut bytes = self.0.bytes.write().expect("object bytes lock");
        let end = offset
            .checked_add(source.len() as u64)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))?;
        let length = bytes.len() as u64;
        let mut count = source.len();
        if end > length {
            let grow = (end - length).min(self.0.space.free_bytes());
            if offset + 1 > length + grow {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            self.resize(&mut bytes, length + grow)?;
            count = usize::try_from((length + grow).min(end) - offset).expect("within source");
        }
        let start = usize::try_from(offset).expect("inside the object");
        bytes[start..start + count].copy_from_slice(&source[..count]);
        self.0.mtime_ns.store(now_ns(), Ordering::Relaxed);
        Ok(count)
    }

    fn metadata(&self) -> io::Result<ObjectMetadata> {
        Ok(ObjectMetadata {
            size: self.bytes().len() as u64,
            mtime_ns: self.0.mtime_ns.load(Ordering::Relaxed),
        })
    }

    fn set_size(&self, size: u64) -> io::Result<()> {
        let mut bytes = self.0.bytes.write().expect("object bytes lock");
        self.resize(&mut bytes, size)?;
        self.0.mtime_ns.store(now_ns(), Ordering::Relaxed);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{read_full, write_full};

    #[test]
    fn objects_round_trip_and_a_full_store_refuses_more() {
        let storage = MemStorage::with_capacity(10);
        storage.create(1).unwrap();
        assert_eq!(
            storage.create(1).unwrap_err().kind(),
            ErrorKind::AlreadyExists
        );
        let object = storage.open(1).unwrap();
        write_full(&object, b"abc", 2).unwrap();
        let mut back = [9u8; 7];
        read_full(&object, &mut back, 0).unwrap();
        assert_eq!(&back, b"\0\0abc\0\0");
        assert_eq!(storage.used_bytes(), 5);
        // Six more bytes wanted, five free: a short write, then ENOSPC.
        assert_eq!(object.write_at(b"123456", 5).unwrap(), 5);
        let full = write_full(&object, b"x", 10).unwrap_err();
        assert_eq!(full.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(storage.contents(1).unwrap(), b"\0\0abc12345");
        // Removed but open: the bytes stay taken until the object is dropped.
        storage.remove(1).unwrap();
        assert_eq!(storage.open(1).unwrap_err().kind(), ErrorKind::NotFound);
        assert_eq!(storage.used_bytes(), 10);
        drop(object);
        assert_eq!(storage.used_bytes(), 0);
    }
}
