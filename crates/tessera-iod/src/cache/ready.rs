//! The cache's Ready memory (seed 001 §5.2): one region of `--cache-ready-bytes`, mapped and
//! registered once with the backend's registrar for the whole life of the server, carved
//! into slots of [`UNIT_BYTES_MAX`] bytes that units take before any heap memory (Raw). A unit
//! of any size takes one whole slot. A slot comes back when its last holder (the unit, or a
//! pinned reply) drops it, and is zeroed before it is handed out again.

use std::sync::{Arc, Mutex, PoisonError};

use tessera_reg::{RegHandle, Registrar, Segment};

use super::{CacheError, UNIT_BYTES_MAX};

/// The Ready region: mapped, registered, and its free slots.
pub(super) struct ReadyArena {
    start: usize,
    bytes: usize,
    free: Mutex<Vec<u32>>,
    registrar: Arc<dyn Registrar>,
    registration: Option<RegHandle>,
}

impl std::fmt::Debug for ReadyArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadyArena")
            .field("bytes", &self.bytes)
            .field("registrar", &self.registrar.name())
            .finish_non_exhaustive()
    }
}

impl ReadyArena {
    /// Maps `bytes` (a multiple of [`UNIT_BYTES_MAX`], at least one slot) with its pages
    /// populated, and registers it with `registrar`.
    pub(super) fn new(bytes: usize, registrar: Arc<dyn Registrar>) -> Result<Self, CacheError> {
        let slots = bytes / UNIT_BYTES_MAX;
        let refused = |reason: String| CacheError::ReadyRefused { bytes, reason };
        if slots == 0 || !bytes.is_multiple_of(UNIT_BYTES_MAX) || u32::try_from(slots).is_err() {
            return Err(refused(format!(
                "not a whole number of {UNIT_BYTES_MAX}-byte slots"
            )));
        }
        // SAFETY: an anonymous private mapping at an address the kernel picks; the result is
        // checked against MAP_FAILED below.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if start == libc::MAP_FAILED {
            return Err(refused(std::io::Error::last_os_error().to_string()));
        }
        let mut arena = Self {
            start: start as usize,
            bytes,
            free: Mutex::new((0..u32::try_from(slots).expect("checked")).rev().collect()),
            registrar,
            registration: None,
        };
        let segment = Segment {
            address: arena.start,
            length: bytes,
        };
        match arena.registrar.register(segment) {
            Ok(handle) => arena.registration = Some(handle),
            // Dropping `arena` unmaps the region.
            Err(err) => {
                return Err(refused(format!(
                    "{} registration: {err}",
                    arena.registrar.name()
                )))
            }
        }
        Ok(arena)
    }

    /// The region's bytes.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The registrar's name.
    pub(super) fn registrar(&self) -> &str {
        self.registrar.name()
    }

    /// A free slot's start (zeroed if `zeroed`) and its number; `None` when all are taken.
    pub(super) fn take(&self, zeroed: bool) -> Option<(*mut u8, u32)> {
        let slot = self
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()?;
        let start = (self.start + slot as usize * UNIT_BYTES_MAX) as *mut u8;
        if zeroed {
            // SAFETY: the slot lies inside the mapping, and nobody else holds it (it was free).
            unsafe { std::ptr::write_bytes(start, 0, UNIT_BYTES_MAX) };
        }
        Some((start, slot))
    }

    /// Gives slot `slot` back.
    pub(super) fn give(&self, slot: u32) {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(slot);
    }

    /// Slots taken now.
    pub(super) fn taken(&self) -> usize {
        self.bytes / UNIT_BYTES_MAX
            - self
                .free
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .len()
    }
}

impl Drop for ReadyArena {
    fn drop(&mut self) {
        if let Some(handle) = self.registration.take() {
            let _ = self.registrar.deregister(handle);
        }
        // SAFETY: the mapping was made in `new` with exactly these bounds, and every slot's
        // buffer holds an `Arc` to the arena, so none is in use any more.
        unsafe { libc::munmap(self.start as *mut libc::c_void, self.bytes) };
    }
}
