//! The cache's Ready memory (seed 001 §5.2): one region of `--cache-ready-bytes`, mapped and
//! registered once with the backend's registrar for the whole life of the server, carved
//! into slots of [`UNIT_BYTES_MAX`] bytes that units take before any heap memory (Raw). A unit
//! of any size takes one whole slot. A slot comes back when its last holder (the unit, or a
//! pinned reply) drops it, and is zeroed before it is handed out again.
//!
//! A fabric backend registers the same region once more, with its own registrar
//! ([`ReadyMemory::register`]: `fi_mr_reg` for `ofi`), so the provider can send straight from
//! the slots; every registration is undone before the region is unmapped.

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
    /// Later registrations of the whole region (a fabric's), each with its label, at most
    /// [`READY_REGISTRATIONS_MAX`].
    more: Mutex<Vec<LaterRegistration>>,
}

/// A registration of the whole region besides the backend's: who made it, its handle, its
/// label.
type LaterRegistration = (Arc<dyn Registrar>, RegHandle, String);

/// Registrations of the Ready region besides the backend's own: one per fabric an iod serves.
pub const READY_REGISTRATIONS_MAX: usize = 4;

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
            more: Mutex::new(Vec::new()),
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

    /// The registrars' names, the backend's first, then each later one's label, joined by
    /// `+` (`pin+ofi:tcp;ofi_rxm`).
    pub(super) fn registrars(&self) -> String {
        let more = self.more.lock().unwrap_or_else(PoisonError::into_inner);
        std::iter::once(self.registrar.name())
            .chain(more.iter().map(|(_, _, label)| label.as_str()))
            .collect::<Vec<_>>()
            .join("+")
    }

    /// Registers the whole region once more with `registrar`, labelled `label` in
    /// [`ReadyArena::registrars`], until the region is dropped.
    pub(super) fn register(
        &self,
        registrar: Arc<dyn Registrar>,
        label: &str,
    ) -> Result<RegHandle, CacheError> {
        let refused = |reason: String| CacheError::ReadyRefused {
            bytes: self.bytes,
            reason,
        };
        let mut more = self.more.lock().unwrap_or_else(PoisonError::into_inner);
        if more.len() >= READY_REGISTRATIONS_MAX {
            return Err(refused(format!(
                "{label} registration: {} registrations held, READY_REGISTRATIONS_MAX = \
                 {READY_REGISTRATIONS_MAX}",
                more.len()
            )));
        }
        let segment = Segment {
            address: self.start,
            length: self.bytes,
        };
        let handle = registrar
            .register(segment)
            .map_err(|err| refused(format!("{label} registration: {err}")))?;
        more.push((registrar, handle.clone(), label.to_owned()));
        Ok(handle)
    }

    /// Whether `bytes` lie inside the region.
    pub(super) fn contains(&self, bytes: &[u8]) -> bool {
        let address = bytes.as_ptr() as usize;
        address >= self.start && address + bytes.len() <= self.start + self.bytes
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
        let more = std::mem::take(self.more.get_mut().unwrap_or_else(PoisonError::into_inner));
        for (registrar, handle, _) in more {
            let _ = registrar.deregister(handle);
        }
        if let Some(handle) = self.registration.take() {
            let _ = self.registrar.deregister(handle);
        }
        // SAFETY: the mapping was made in `new` with exactly these bounds, and every slot's
        // buffer holds an `Arc` to the arena, so none is in use any more.
        unsafe { libc::munmap(self.start as *mut libc::c_void, self.bytes) };
    }
}
