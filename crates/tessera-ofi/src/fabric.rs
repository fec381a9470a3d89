//! Opening a provider: `fi_getinfo` with Tessera's hints, then the fabric and the domain.
//!
//! The hints ask for RDM endpoints with RMA in both directions, a thread-safe domain (a
//! registrar may register on one thread while an endpoint moves data on another), and admit
//! every memory-registration mode bit this crate handles: `FI_MR_LOCAL` (local pieces carry a
//! descriptor), `FI_MR_VIRT_ADDR` (remote addresses are virtual addresses; without it they are
//! offsets into the registration, see [`Addressing`]), `FI_MR_ALLOCATED` (only mapped memory is
//! registered, which is all Tessera registers) and `FI_MR_PROV_KEY` (without it the domain
//! hands out its own keys). The provider's limits (`iov_limit`, `rma_iov_limit`, queue size,
//! message size) are read from the returned `fi_info`, never assumed, and every transfer obeys
//! them.

use std::ffi::CString;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tessera_ofi_sys as sys;

use crate::call::{check, cstr_to_string, strerror};
use crate::error::OfiError;

/// How the provider wants remote addresses in an `fi_rma_iov`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addressing {
    /// `FI_MR_VIRT_ADDR`: the target's virtual address.
    Virtual,
    /// The offset from the start of the target's registration.
    Offset,
}

/// The provider's limits and modes, as `fi_getinfo` returned them.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Local iov entries per `fi_readmsg`/`fi_writemsg` (`tx_attr->iov_limit`).
    pub iov_limit: usize,
    /// Remote rma_iov entries per call (`tx_attr->rma_iov_limit`).
    pub rma_iov_limit: usize,
    /// Transmit queue depth (`tx_attr->size`).
    pub tx_size: usize,
    /// Largest message (`ep_attr->max_msg_size`).
    pub max_msg_size: u64,
    /// `domain_attr->mr_mode` bits the provider requires.
    pub mr_mode: u64,
    /// Bytes of a memory key (`domain_attr->mr_key_size`).
    pub mr_key_size: usize,
    /// The domain's name (for `tcp;ofi_rxm` the interface, e.g. `lo`).
    pub domain_name: String,
}

/// A provider opened for Tessera: fabric, domain and the `fi_info` they came from. Cheap to
/// clone; endpoints and memory regions keep it alive.
#[derive(Clone)]
pub struct Domain {
    pub(crate) shared: Arc<DomainShared>,
}

pub(crate) struct DomainShared {
    pub(crate) provider: String,
    pub(crate) info: *mut sys::fi_info,
    pub(crate) fabric: *mut sys::fid_fabric,
    pub(crate) domain: *mut sys::fid_domain,
    pub(crate) limits: Limits,
    /// Keys this domain hands out when the provider does not (`FI_MR_PROV_KEY` unset).
    next_key: AtomicU64,
}

// SAFETY: the domain is opened with FI_THREAD_SAFE, so its fids may be used from any thread at
// once; `info` is only read after `open` and freed in Drop.
unsafe impl Send for DomainShared {}
// SAFETY: as above; nothing here is mutated through `&self` except the atomic key counter.
unsafe impl Sync for DomainShared {}

impl Drop for DomainShared {
    fn drop(&mut self) {
        // SAFETY: the fids, when not null, were opened in `Domain::open`, and every endpoint
        // and memory region holds an Arc to this value, so they are all closed before this
        // runs; `info` came from fi_getinfo. A close error cannot be reported from Drop and
        // leaves nothing to undo.
        unsafe {
            if !self.domain.is_null() {
                sys::tessera_fi_close(ptr::addr_of_mut!((*self.domain).fid));
            }
            if !self.fabric.is_null() {
                sys::tessera_fi_close(ptr::addr_of_mut!((*self.fabric).fid));
            }
            sys::fi_freeinfo(self.info);
        }
    }
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain")
            .field("provider", &self.shared.provider)
            .field("limits", &self.shared.limits)
            .finish_non_exhaustive()
    }
}

/// Mode bits this crate knows how to meet.
const MR_MODE_SUPPORTED: u64 =
    sys::FI_MR_LOCAL | sys::FI_MR_VIRT_ADDR | sys::FI_MR_ALLOCATED | sys::FI_MR_PROV_KEY;
/// Capabilities asked of every provider.
const CAPS: u64 =
    sys::FI_RMA | sys::FI_READ | sys::FI_WRITE | sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE;

impl Domain {
    /// Opens `provider` (libfabric's name: `"tcp;ofi_rxm"`, `"shm"`, `"verbs;ofi_rxm"`, ...)
    /// with RDM endpoints and RMA. `node`, when given, is the local address to bind to
    /// (`FI_SOURCE`), e.g. `127.0.0.1` to keep `tcp;ofi_rxm` on loopback.
    pub fn open(provider: &str, node: Option<&str>) -> Result<Domain, OfiError> {
        let provider_c = CString::new(provider).map_err(|_| OfiError::Nul {
            what: "provider",
            value: provider.to_owned(),
        })?;
        let node_c = node
            .map(|node| {
                CString::new(node).map_err(|_| OfiError::Nul {
                    what: "node",
                    value: node.to_owned(),
                })
            })
            .transpose()?;
        // SAFETY: fi_allocinfo returns a zeroed fi_info with all attribute structs allocated, or
        // null; it is freed with fi_freeinfo below on every path.
        let hints = unsafe { sys::tessera_fi_allocinfo() };
        if hints.is_null() {
            return Err(OfiError::Call {
                provider: provider.to_owned(),
                call: "fi_allocinfo",
                code: sys::FI_ENOMEM,
                message: strerror(sys::FI_ENOMEM),
            });
        }
        let mut info: *mut sys::fi_info = ptr::null_mut();
        // SAFETY: `hints` and its attribute structs are valid (allocated above); prov_name must
        // be malloc'd because fi_freeinfo frees it; node and service outlive the call.
        let ret = unsafe {
            (*hints).caps = CAPS;
            (*hints).mode = sys::FI_CONTEXT | sys::FI_CONTEXT2;
            (*(*hints).ep_attr).type_ = sys::FI_EP_RDM;
            (*(*hints).domain_attr).mr_mode = i32::try_from(MR_MODE_SUPPORTED).unwrap_or(0);
            (*(*hints).domain_attr).threading = sys::FI_THREAD_SAFE;
            (*(*hints).fabric_attr).prov_name = libc::strdup(provider_c.as_ptr());
            let flags = if node_c.is_some() { sys::FI_SOURCE } else { 0 };
            let ret = sys::fi_getinfo(
                sys::tessera_fi_version(),
                node_c.as_ref().map_or(ptr::null(), |node| node.as_ptr()),
                ptr::null(),
                flags,
                hints,
                &raw mut info,
            );
            sys::fi_freeinfo(hints);
            ret
        };
        if ret != 0 || info.is_null() {
            let code = if ret == 0 { sys::FI_ENODATA } else { -ret };
            return Err(OfiError::NoProvider {
                provider: provider.to_owned(),
                message: strerror(code),
            });
        }
        // SAFETY: `info` is the non-null list fi_getinfo returned; its attribute pointers are
        // filled by the provider. The first entry is the provider's preferred one.
        let (provider_name, limits) = unsafe {
            let tx = &*(*info).tx_attr;
            let ep = &*(*info).ep_attr;
            let domain = &*(*info).domain_attr;
            let fabric = &*(*info).fabric_attr;
            let limits = Limits {
                iov_limit: tx.iov_limit,
                rma_iov_limit: tx.rma_iov_limit,
                tx_size: tx.size,
                max_msg_size: u64::try_from(ep.max_msg_size).unwrap_or(u64::MAX),
                mr_mode: u64::try_from(domain.mr_mode).unwrap_or(0),
                mr_key_size: domain.mr_key_size,
                domain_name: cstr_to_string(domain.name),
            };
            (cstr_to_string(fabric.prov_name), limits)
        };
        let mut shared = DomainShared {
            provider: provider_name,
            info,
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            limits,
            next_key: AtomicU64::new(1),
        };
        if shared.limits.iov_limit == 0
            || shared.limits.rma_iov_limit == 0
            || shared.limits.tx_size == 0
        {
            return Err(OfiError::NoProvider {
                provider: shared.provider.clone(),
                message: "the provider reports an iov limit or queue size of 0".to_owned(),
            });
        }
        // SAFETY: fabric_attr is valid (see above); on failure `fabric` stays null.
        let ret =
            unsafe { sys::fi_fabric((*info).fabric_attr, &raw mut shared.fabric, ptr::null_mut()) };
        check(&shared.provider, "fi_fabric", i64::from(ret))?;
        // SAFETY: `fabric` is open and `info` is the entry it was opened from.
        let ret = unsafe {
            sys::tessera_fi_domain(shared.fabric, info, &raw mut shared.domain, ptr::null_mut())
        };
        check(&shared.provider, "fi_domain", i64::from(ret))?;
        Ok(Domain {
            shared: Arc::new(shared),
        })
    }

    /// The provider's name as libfabric reports it (`tcp;ofi_rxm`, `shm`).
    pub fn provider(&self) -> &str {
        &self.shared.provider
    }

    /// The provider's limits and modes.
    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    /// How remote addresses are given to this provider.
    pub fn addressing(&self) -> Addressing {
        if self.shared.limits.mr_mode & sys::FI_MR_VIRT_ADDR != 0 {
            Addressing::Virtual
        } else {
            Addressing::Offset
        }
    }

    /// Whether local pieces must be registered and carry a descriptor (`FI_MR_LOCAL`).
    pub fn requires_local_registration(&self) -> bool {
        self.shared.limits.mr_mode & sys::FI_MR_LOCAL != 0
    }

    /// The key to ask `fi_mr_reg` for: 0 where the provider hands out its own keys
    /// (`FI_MR_PROV_KEY`), else the next of this domain's own.
    pub(crate) fn key_to_request(&self) -> u64 {
        if self.shared.limits.mr_mode & sys::FI_MR_PROV_KEY != 0 {
            0
        } else {
            self.shared.next_key.fetch_add(1, Ordering::Relaxed)
        }
    }
}
