//! The RDM endpoint: one `fid_ep` with its address vector (peers) and completion queue.
//!
//! Peers arrive as name bytes (another endpoint's [`Endpoint::name`], carried in a control
//! message) and are inserted once into the address vector; the same name gives back the same
//! [`Peer`], so a server that sees one client in every request does not grow its table. All use
//! of the endpoint's fids goes through one lock: a transfer holds it while its operations are in
//! flight, so every completion read belongs to the transfer that reads it, and a
//! [`crate::ProgressThread`] polling the same endpoint simply waits its turn.

use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tessera_ofi_sys as sys;

use crate::call::{check, cstr_to_string, FI_ETOOSMALL};
use crate::error::OfiError;
use crate::fabric::Domain;
use crate::{COMPLETION_TIMEOUT_DEFAULT, ENDPOINT_NAME_BYTES_MAX, OPS_INFLIGHT_MAX, PEERS_MAX};

// Opening an endpoint is a call on the domain; it lives here, beside the endpoint it makes.
impl Domain {
    /// Opens an RDM endpoint on this domain.
    pub fn endpoint(&self) -> Result<Endpoint, OfiError> {
        Endpoint::open(self)
    }
}

/// Tells endpoints apart so a [`Peer`] is only used with the endpoint that inserted it.
static ENDPOINT_IDS: AtomicU64 = AtomicU64::new(1);

/// A peer in one endpoint's address vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub(crate) endpoint_id: u64,
    pub(crate) address: u64,
    pub(crate) label: Arc<str>,
}

impl Peer {
    /// The peer's printable address (`fi_av_straddr`), as errors name it.
    pub fn label(&self) -> &str {
        &self.label
    }
}

/// An RDM endpoint with its address vector and completion queue.
pub struct Endpoint {
    pub(crate) domain: Domain,
    pub(crate) id: u64,
    pub(crate) name: Vec<u8>,
    pub(crate) state: Mutex<EndpointState>,
}

/// One operation's slot: its `fi_context2` (the completion's `op_context` points here, and
/// providers with `FI_CONTEXT` use it as scratch), the iov arrays it was posted with, and the
/// pieces it covers, to name them if it fails.
pub(crate) struct Slot {
    pub(crate) context: sys::fi_context2,
    pub(crate) local: Vec<libc::iovec>,
    pub(crate) descriptors: Vec<*mut c_void>,
    pub(crate) remote: Vec<sys::fi_rma_iov>,
    pub(crate) busy: bool,
    pub(crate) bytes: u64,
    pub(crate) local_first: usize,
    pub(crate) local_last: usize,
    pub(crate) remote_first: usize,
    pub(crate) remote_last: usize,
}

pub(crate) struct EndpointState {
    pub(crate) ep: *mut sys::fid_ep,
    pub(crate) av: *mut sys::fid_av,
    pub(crate) cq: *mut sys::fid_cq,
    /// Set when a timeout closed `ep`; nothing may be posted afterwards.
    pub(crate) closed: bool,
    pub(crate) peers: HashMap<Vec<u8>, Peer>,
    /// Fixed at open and never reallocated: posted operations point into it.
    pub(crate) slots: Box<[Slot]>,
    pub(crate) completion_timeout: Duration,
}

// SAFETY: the fids belong to a FI_THREAD_SAFE domain and are only used under the Mutex; the raw
// pointers in the slots point into memory owned by the state itself or by callers that wait
// for their operations before returning.
unsafe impl Send for EndpointState {}

impl Drop for EndpointState {
    fn drop(&mut self) {
        // SAFETY: each fid was opened in `Endpoint::open` (or is null after a failed open) and
        // is closed once; the endpoint goes first because the others are bound to it.
        unsafe {
            if !self.ep.is_null() && !self.closed {
                sys::tessera_fi_close(ptr::addr_of_mut!((*self.ep).fid));
            }
            if !self.av.is_null() {
                sys::tessera_fi_close(ptr::addr_of_mut!((*self.av).fid));
            }
            if !self.cq.is_null() {
                sys::tessera_fi_close(ptr::addr_of_mut!((*self.cq).fid));
            }
        }
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &self.domain.provider())
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    pub(crate) fn open(domain: &Domain) -> Result<Endpoint, OfiError> {
        let shared = &domain.shared;
        let provider = shared.provider.as_str();
        let limits = &shared.limits;
        let slot_count = OPS_INFLIGHT_MAX.min(limits.tx_size);
        let slots: Box<[Slot]> = (0..slot_count)
            .map(|_| Slot {
                context: sys::fi_context2::default(),
                local: Vec::with_capacity(limits.iov_limit),
                descriptors: Vec::with_capacity(limits.iov_limit),
                remote: Vec::with_capacity(limits.rma_iov_limit),
                busy: false,
                bytes: 0,
                local_first: 0,
                local_last: 0,
                remote_first: 0,
                remote_last: 0,
            })
            .collect();
        let mut state = EndpointState {
            ep: ptr::null_mut(),
            av: ptr::null_mut(),
            cq: ptr::null_mut(),
            closed: false,
            peers: HashMap::new(),
            slots,
            completion_timeout: COMPLETION_TIMEOUT_DEFAULT,
        };
        let mut cq_attr = sys::fi_cq_attr {
            size: limits.tx_size.max(slot_count),
            format: sys::FI_CQ_FORMAT_CONTEXT,
            wait_obj: sys::FI_WAIT_NONE,
            ..Default::default()
        };
        // SAFETY: the domain is open; the attribute struct outlives the call; on failure the
        // fid stays null and the state's Drop skips it.
        let ret = unsafe {
            sys::tessera_fi_cq_open(
                shared.domain,
                &raw mut cq_attr,
                &raw mut state.cq,
                ptr::null_mut(),
            )
        };
        check(provider, "fi_cq_open", i64::from(ret))?;
        // Count 0 lets the provider size the table (`shm` refuses counts above its own peer
        // limit); PEERS_MAX is enforced in `insert_peer`.
        let mut av_attr = sys::fi_av_attr {
            type_: sys::FI_AV_TABLE,
            count: 0,
            ..Default::default()
        };
        // SAFETY: as above.
        let ret = unsafe {
            sys::tessera_fi_av_open(
                shared.domain,
                &raw mut av_attr,
                &raw mut state.av,
                ptr::null_mut(),
            )
        };
        check(provider, "fi_av_open", i64::from(ret))?;
        // SAFETY: `info` is the entry the domain was opened from.
        let ret = unsafe {
            sys::tessera_fi_endpoint(
                shared.domain,
                shared.info,
                &raw mut state.ep,
                ptr::null_mut(),
            )
        };
        check(provider, "fi_endpoint", i64::from(ret))?;
        // SAFETY: ep, av and cq are open fids of the same domain.
        let ret =
            unsafe { sys::tessera_fi_ep_bind(state.ep, ptr::addr_of_mut!((*state.av).fid), 0) };
        check(provider, "fi_ep_bind(av)", i64::from(ret))?;
        // SAFETY: as above.
        let ret = unsafe {
            sys::tessera_fi_ep_bind(
                state.ep,
                ptr::addr_of_mut!((*state.cq).fid),
                sys::FI_TRANSMIT | sys::FI_RECV,
            )
        };
        check(provider, "fi_ep_bind(cq)", i64::from(ret))?;
        // SAFETY: the endpoint is bound to its av and cq.
        let ret = unsafe { sys::tessera_fi_enable(state.ep) };
        check(provider, "fi_enable", i64::from(ret))?;
        let mut name = vec![0_u8; ENDPOINT_NAME_BYTES_MAX];
        let mut name_length = name.len();
        // SAFETY: `name` has `name_length` writable bytes; the call writes at most that many
        // and stores the real length.
        let ret = unsafe {
            sys::tessera_fi_getname(state.ep, name.as_mut_ptr().cast(), &raw mut name_length)
        };
        if ret == -FI_ETOOSMALL {
            return Err(OfiError::Limit {
                what: "endpoint name bytes",
                value: name_length as u64,
                limit_name: "ENDPOINT_NAME_BYTES_MAX",
                limit: ENDPOINT_NAME_BYTES_MAX as u64,
            });
        }
        check(provider, "fi_getname", i64::from(ret))?;
        name.truncate(name_length);
        Ok(Endpoint {
            domain: domain.clone(),
            id: ENDPOINT_IDS.fetch_add(1, Ordering::Relaxed),
            name,
            state: Mutex::new(state),
        })
    }

    /// The endpoint's address bytes (`fi_getname`), for a peer's [`Endpoint::insert_peer`].
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The domain this endpoint belongs to.
    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    /// The provider's name.
    pub fn provider(&self) -> &str {
        self.domain.provider()
    }

    /// How long a transfer waits for completions before it closes the endpoint and fails.
    pub fn set_completion_timeout(&self, timeout: Duration) -> Result<(), OfiError> {
        self.lock()?.completion_timeout = timeout;
        Ok(())
    }

    /// Inserts a peer by its endpoint name; inserting a name again returns the same peer.
    pub fn insert_peer(&self, name: &[u8]) -> Result<Peer, OfiError> {
        let provider = self.provider();
        if name.len() != self.name.len() {
            return Err(OfiError::PeerName {
                provider: provider.to_owned(),
                length: name.len(),
                expected: self.name.len(),
            });
        }
        let mut state = self.lock()?;
        if let Some(peer) = state.peers.get(name) {
            return Ok(peer.clone());
        }
        if state.peers.len() >= PEERS_MAX {
            return Err(OfiError::Limit {
                what: "peers of one endpoint",
                value: state.peers.len() as u64 + 1,
                limit_name: "PEERS_MAX",
                limit: PEERS_MAX as u64,
            });
        }
        let mut address: sys::fi_addr_t = sys::FI_ADDR_UNSPEC;
        // SAFETY: `name` holds one address of this provider's size (checked above); `address`
        // receives the one fi_addr_t.
        let inserted = unsafe {
            sys::tessera_fi_av_insert(
                state.av,
                name.as_ptr().cast(),
                1,
                &raw mut address,
                0,
                ptr::null_mut(),
            )
        };
        check(provider, "fi_av_insert", i64::from(inserted))?;
        if inserted != 1 || address == sys::FI_ADDR_UNSPEC {
            return Err(OfiError::Call {
                provider: provider.to_owned(),
                call: "fi_av_insert",
                code: sys::FI_EINVAL,
                message: "the provider refused the peer's name".to_owned(),
            });
        }
        let mut text = [0 as std::ffi::c_char; 128];
        // The last byte stays 0, so the text is terminated even if the provider truncates.
        let mut text_length = text.len() - 1;
        // SAFETY: `text` has more than `text_length` bytes; fi_av_straddr writes at most that
        // many and returns `text` (or null).
        let label = unsafe {
            let printed = sys::tessera_fi_av_straddr(
                state.av,
                name.as_ptr().cast(),
                text.as_mut_ptr(),
                &raw mut text_length,
            );
            cstr_to_string(printed)
        };
        let peer = Peer {
            endpoint_id: self.id,
            address,
            label: Arc::from(label),
        };
        state.peers.insert(name.to_vec(), peer.clone());
        Ok(peer)
    }

    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, EndpointState>, OfiError> {
        self.state.lock().map_err(|_| OfiError::Poisoned {
            provider: self.provider().to_owned(),
        })
    }
}
