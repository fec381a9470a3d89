//! The `ofi` registrar: `tessera-reg`'s [`Registrar`] over `fi_mr_reg`.
//!
//! The registration module (`tessera-reg`: pin-down cache, FMRD batches, OGR grouping, arenas,
//! invalidation) decides what to register and when; this registrar only performs each
//! registration on a [`Domain`] and undoes it. Each live registration's [`MemoryRegion`] sits in
//! a table under a token the handle carries, bounded by [`OFI_REGISTRATIONS_MAX`]; the handle's
//! `key` is `fi_mr_key` (what a peer names the region by) and its `descriptor` is `fi_mr_desc`
//! when the provider has one. [`OfiRegistrar::remote_region`] and
//! [`OfiRegistrar::descriptor`] turn a handle back into what transfers take.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tessera_reg::{CostModel, Cover, RegError, RegHandle, Registrar, Segment};

use crate::fabric::Domain;
use crate::mem::{Access, Descriptor, MemoryRegion, RemoteRegion};

/// Registrations one [`OfiRegistrar`] holds at once.
pub const OFI_REGISTRATIONS_MAX: usize = 1 << 16;

/// `fi_mr_reg`/`fi_close` cost as measured with `tessera_reg::calibrate` on the development
/// machine for `tcp;ofi_rxm` and `shm` (neither pins: a registration is a table entry, about a
/// microsecond a call whatever the size). Real RDMA providers pin and cost far more per page;
/// [`OfiRegistrar::calibrated`] measures the provider at hand.
pub const OFI_COST_DEFAULT: CostModel = CostModel {
    register_page_us: 0.0,
    register_call_us: 1.0,
    deregister_page_us: 0.0,
    deregister_call_us: 1.0,
};

/// Registers memory on one libfabric domain for `tessera-reg`.
#[derive(Debug)]
pub struct OfiRegistrar {
    domain: Domain,
    access: Access,
    cost: CostModel,
    next_token: AtomicU64,
    regions: Mutex<HashMap<u64, MemoryRegion>>,
}

impl OfiRegistrar {
    /// A registrar giving `access` to every registration, with [`OFI_COST_DEFAULT`].
    pub fn new(domain: Domain, access: Access) -> OfiRegistrar {
        OfiRegistrar {
            domain,
            access,
            cost: OFI_COST_DEFAULT,
            next_token: AtomicU64::new(1),
            regions: Mutex::new(HashMap::new()),
        }
    }

    /// A registrar whose cost model is measured now with `tessera_reg::calibrate`.
    pub fn calibrated(domain: Domain, access: Access) -> Result<OfiRegistrar, RegError> {
        let mut registrar = OfiRegistrar::new(domain, access);
        registrar.cost = tessera_reg::calibrate(&registrar)?;
        Ok(registrar)
    }

    /// The domain registrations are made on.
    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    /// Registrations held now.
    pub fn live(&self) -> usize {
        self.regions.lock().map_or(0, |regions| regions.len())
    }

    /// What to send a peer so it can reach the memory of `handle`.
    pub fn remote_region(handle: &RegHandle) -> RemoteRegion {
        RemoteRegion {
            address: handle.segment.address as u64,
            length: handle.segment.length as u64,
            key: handle.key,
        }
    }

    /// What to send a peer so it can reach the region covering one segment of a
    /// `tessera_reg::Registry::acquire`.
    pub fn cover_region(cover: &Cover) -> RemoteRegion {
        RemoteRegion {
            address: cover.region.address as u64,
            length: cover.region.length as u64,
            key: cover.key,
        }
    }

    /// The descriptor local pieces inside `handle`'s segment carry, if `handle` is one of this
    /// registrar's live registrations ([`Descriptor::NONE`] when the provider has none).
    pub fn descriptor(&self, handle: &RegHandle) -> Option<Descriptor> {
        let regions = self.regions.lock().ok()?;
        regions.get(&handle.token).map(MemoryRegion::descriptor)
    }

    fn failure(&self, operation: &'static str, segment: Segment, message: String) -> RegError {
        RegError::Registrar {
            registrar: format!("ofi ({})", self.domain.provider()),
            operation,
            segment,
            message,
        }
    }
}

impl Registrar for OfiRegistrar {
    fn name(&self) -> &'static str {
        "ofi"
    }

    fn register(&self, segment: Segment) -> Result<RegHandle, RegError> {
        if segment.checked_end().is_none() {
            return Err(RegError::AddressOverflow {
                address: segment.address,
                length: segment.length,
            });
        }
        let mut regions = self
            .regions
            .lock()
            .map_err(|_| self.failure("register", segment, "table lock poisoned".to_owned()))?;
        if regions.len() >= OFI_REGISTRATIONS_MAX {
            return Err(self.failure(
                "register",
                segment,
                format!(
                    "{} registrations held, OFI_REGISTRATIONS_MAX = {OFI_REGISTRATIONS_MAX}",
                    regions.len()
                ),
            ));
        }
        // SAFETY: the Registrar contract: the registry's callers keep a segment mapped until it
        // is deregistered and invalidate before unmapping; peers reach the memory only through
        // transfers the owner asks for by sending them the key.
        let region = unsafe {
            self.domain
                .register(segment.address, segment.length, self.access)
        }
        .map_err(|error| self.failure("register", segment, error.to_string()))?;
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let descriptor = region.descriptor();
        let handle = RegHandle {
            segment,
            key: region.key(),
            descriptor: (!descriptor.is_none()).then_some(descriptor.0 as usize),
            token,
        };
        regions.insert(token, region);
        Ok(handle)
    }

    fn deregister(&self, handle: RegHandle) -> Result<(), RegError> {
        let region = self
            .regions
            .lock()
            .map_err(|_| {
                self.failure(
                    "deregister",
                    handle.segment,
                    "table lock poisoned".to_owned(),
                )
            })?
            .remove(&handle.token);
        match region {
            // Dropping the region closes its fid (fi_close).
            Some(region) => {
                drop(region);
                Ok(())
            }
            None => Err(self.failure(
                "deregister",
                handle.segment,
                format!("token {} is not a live registration", handle.token),
            )),
        }
    }

    fn cost(&self) -> CostModel {
        self.cost
    }
}
