//! The `fixed` registrar: pages pinned by the kernel as io_uring fixed buffers.
//!
//! Registering a buffer with io_uring pins its pages with `pin_user_pages(FOLL_LONGTERM)` and
//! records them in a table, exactly the pinning an RDMA NIC driver does for `ibv_reg_mr` (and
//! a libfabric provider for `fi_mr_reg` on verbs). It touches no flag of the address space —
//! no VMA split, no move to the unevictable list as `mlock` makes — so it costs what pinning
//! costs: measured here, about 0.07 µs a page to register and 0.02 µs a page to release,
//! against 0.4-0.6 µs a page for `mlock` plus `munlock`. That makes it the stand-in for real
//! registration on a machine without a fabric; `pin` (mlock) remains for comparison.
//!
//! One ring holds a sparse table of [`FIXED_SLOTS_MAX`] slots; a registration fills a free
//! slot (`IORING_REGISTER_BUFFERS_UPDATE`), a deregistration empties it, which unpins the
//! pages. Registrations may overlap (each pins its own references). The kernel refuses a
//! range with an unmapped page (`EFAULT`), a file-backed range that cannot be pinned long
//! term, a range over 1 GiB, and pages past RLIMIT_MEMLOCK without CAP_IPC_LOCK.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use io_uring::IoUring;

use crate::error::RegError;
use crate::holes::first_unmapped_page;
use crate::pin::refusal;
use crate::registrar::{CostModel, RegHandle, Registrar};
use crate::segment::Segment;

/// Slots in the ring's table of fixed buffers (the kernel's `IORING_MAX_REG_BUFFERS`): at most
/// this many registrations are alive at once.
pub const FIXED_SLOTS_MAX: u32 = 1 << 14;

/// Largest range one registration pins (the kernel's limit per fixed buffer).
pub const FIXED_BYTES_MAX: usize = 1 << 30;

/// Pins pages as io_uring fixed buffers.
pub struct FixedRegistrar {
    ring: IoUring,
    /// Free slots (a stack).
    free: Mutex<Vec<u32>>,
    next_key: AtomicU64,
    cost: CostModel,
}

impl std::fmt::Debug for FixedRegistrar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixedRegistrar")
            .field("cost", &self.cost)
            .finish_non_exhaustive()
    }
}

impl CostModel {
    /// io_uring fixed-buffer pinning as measured on the development machine (kernel 6.18,
    /// 2 cores): about 0.07 µs a page plus 2 µs a call to register, 0.02 µs a page plus 1 µs
    /// a call to release.
    pub const FIXED_DEFAULT: CostModel = CostModel {
        register_page_us: 0.07,
        register_call_us: 2.0,
        deregister_page_us: 0.02,
        deregister_call_us: 1.0,
    };
}

impl FixedRegistrar {
    /// A registrar with its own ring, claiming [`CostModel::FIXED_DEFAULT`]. Fails where the
    /// kernel has no io_uring (or refuses it to this process), naming the call.
    pub fn new() -> Result<Self, RegError> {
        Self::with_cost(CostModel::FIXED_DEFAULT)
    }

    /// A registrar claiming `cost` (from [`crate::calibrate`] on this machine).
    pub fn with_cost(cost: CostModel) -> Result<Self, RegError> {
        let os = |operation, source| RegError::Os {
            operation,
            segment: Segment::new(0, 0),
            source,
        };
        let ring = IoUring::new(2).map_err(|source| os("io_uring_setup", source))?;
        ring.submitter()
            .register_buffers_sparse(FIXED_SLOTS_MAX)
            .map_err(|source| os("io_uring_register(BUFFERS2, sparse)", source))?;
        Ok(Self {
            ring,
            free: Mutex::new((0..FIXED_SLOTS_MAX).rev().collect()),
            next_key: AtomicU64::new(1),
            cost,
        })
    }

    /// Fills (or, with an empty `segment`, empties) table slot `slot`.
    fn update(&self, slot: u32, segment: Segment) -> std::io::Result<()> {
        let iovec = libc::iovec {
            iov_base: segment.address as *mut libc::c_void,
            iov_len: segment.length,
        };
        // SAFETY: the kernel pins the pages of `iovec` (or releases the slot for an empty
        // one); the ring never reads or writes through the buffer, since no request naming a
        // fixed buffer is ever submitted on it, so the memory's lifetime is the caller's
        // business as with any registration.
        unsafe {
            self.ring
                .submitter()
                .register_buffers_update(slot, &[iovec], None)
        }
    }
}

impl Registrar for FixedRegistrar {
    fn name(&self) -> &'static str {
        "fixed"
    }

    fn register(&self, segment: Segment) -> Result<RegHandle, RegError> {
        if segment.checked_end().is_none() {
            return Err(RegError::AddressOverflow {
                address: segment.address,
                length: segment.length,
            });
        }
        if segment.length == 0 {
            return Err(RegError::EmptySegment { index: 0 });
        }
        let refused = |message: String| RegError::Registrar {
            registrar: "fixed".to_owned(),
            operation: "register",
            segment,
            message,
        };
        if segment.length > FIXED_BYTES_MAX {
            return Err(refused(format!(
                "{} bytes in one registration; at most FIXED_BYTES_MAX = {FIXED_BYTES_MAX}",
                segment.length
            )));
        }
        let Some(slot) = self.free.lock().expect("fixed slot lock").pop() else {
            return Err(refused(format!(
                "all FIXED_SLOTS_MAX = {FIXED_SLOTS_MAX} registrations are in use"
            )));
        };
        match self.update(slot, segment) {
            Ok(()) => Ok(RegHandle {
                segment,
                key: self.next_key.fetch_add(1, Ordering::Relaxed),
                descriptor: None,
                token: u64::from(slot),
            }),
            Err(source) => {
                self.free.lock().expect("fixed slot lock").push(slot);
                let hole = first_unmapped_page(segment)?;
                Err(refusal(
                    segment,
                    hole,
                    "io_uring_register(BUFFERS_UPDATE)",
                    source,
                ))
            }
        }
    }

    fn deregister(&self, handle: RegHandle) -> Result<(), RegError> {
        let slot = u32::try_from(handle.token)
            .ok()
            .filter(|&slot| slot < FIXED_SLOTS_MAX)
            .ok_or_else(|| RegError::Registrar {
                registrar: "fixed".to_owned(),
                operation: "deregister",
                segment: handle.segment,
                message: format!("slot {} is not one of this registrar's", handle.token),
            })?;
        self.update(slot, Segment::new(0, 0))
            .map_err(|source| RegError::Os {
                operation: "io_uring_register(BUFFERS_UPDATE, release)",
                segment: handle.segment,
                source,
            })?;
        self.free.lock().expect("fixed slot lock").push(slot);
        Ok(())
    }

    fn cost(&self) -> CostModel {
        self.cost
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::AnonymousMapping;
    use crate::segment::page_bytes;

    /// KiB of this process's memory pinned now (`VmPin` in `/proc/self/status`, where io_uring
    /// accounts the pages of fixed buffers).
    fn pinned_kib() -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmPin:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
    }

    #[test]
    fn registers_overlapping_ranges_releases_slots_and_refuses_holes() {
        let registrar = FixedRegistrar::new().unwrap();
        let mapping = AnonymousMapping::new(64).unwrap();
        let whole = mapping.segment();
        let first = registrar.register(whole).unwrap();
        let inner = registrar
            .register(Segment::new(whole.address + 100, 3 * page_bytes()))
            .unwrap();
        assert_ne!(first.token, inner.token, "two slots");
        if let Some(kib) = pinned_kib() {
            assert!(kib >= 64 * page_bytes() as u64 / 1024, "{kib} KiB pinned");
        }
        assert_ne!(first.key, inner.key);
        registrar.deregister(inner).unwrap();
        registrar.deregister(first).unwrap();
        // Released slots are reused: many more cycles than the table holds.
        for _ in 0..(FIXED_SLOTS_MAX + 10) / 1000 {
            let handles: Vec<RegHandle> = (0..1000)
                .map(|_| registrar.register(whole).unwrap())
                .collect();
            for handle in handles {
                registrar.deregister(handle).unwrap();
            }
        }
        assert_eq!(
            registrar.free.lock().unwrap().len(),
            FIXED_SLOTS_MAX as usize
        );
        // A range reaching into an unmapped page is refused, naming the hole.
        let hole = AnonymousMapping::new(4).unwrap();
        let address = hole.address();
        drop(hole);
        let err = registrar
            .register(Segment::new(address, 2 * page_bytes()))
            .unwrap_err();
        assert!(matches!(err, RegError::Unmapped { .. }), "{err}");
        let err = registrar
            .register(Segment::new(whole.address, FIXED_BYTES_MAX + 1))
            .unwrap_err();
        assert!(err.to_string().contains("FIXED_BYTES_MAX"), "{err}");
        assert!(registrar
            .deregister(RegHandle {
                segment: whole,
                key: 0,
                descriptor: None,
                token: u64::from(FIXED_SLOTS_MAX),
            })
            .is_err());
        // Where the kernel reports pinned memory, nothing stays pinned.
        if let Some(kib) = pinned_kib() {
            assert_eq!(kib, 0, "pages left pinned");
        }
    }
}
