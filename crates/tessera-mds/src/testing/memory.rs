//! The store's bytes in memory: one buffer that every handle opened on a [`MemoryStore`] (or
//! a clone of it) reads and writes, so a reopen after a storage error, or a namespace opened
//! again after the first was dropped (a restart), finds what the last handle left there, as a
//! reopened file would.

use std::fmt;
use std::io;
use std::sync::Arc;

use redb::backends::InMemoryBackend;
use redb::StorageBackend;

use crate::store::StoreBackend;

/// A store in memory. Clones share the bytes. It takes no lock: open one namespace on it at a
/// time (the mds's reopen drops the old handle first).
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    bytes: Arc<InMemoryBackend>,
}

impl MemoryStore {
    /// An empty store (the first open makes a new database).
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes the store holds (redb's file length).
    pub fn len_bytes(&self) -> u64 {
        self.bytes.len().unwrap_or(0)
    }
}

impl fmt::Display for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("memory store")
    }
}

impl StoreBackend for MemoryStore {
    fn storage(&self, _create: bool) -> io::Result<Box<dyn StorageBackend>> {
        Ok(Box::new(Shared(Arc::clone(&self.bytes))))
    }
}

/// One handle's view of the shared bytes.
#[derive(Debug)]
struct Shared(Arc<InMemoryBackend>);

impl StorageBackend for Shared {
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        StorageBackend::read(&*self.0, offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        StorageBackend::write(&*self.0, offset, data)
    }
}
