//! Memory registration and the piece types a transfer is made of.
//!
//! A [`MemoryRegion`] is one `fi_mr_reg` of a byte range; it yields the key and descriptor and,
//! for the peer, a [`RemoteRegion`] (virtual base, length, key) that the owner sends in its
//! control message. The initiator turns the owner's pieces, given as virtual addresses inside
//! that region, into [`RemoteIov`]s in the provider's [`Addressing`] (virtual address, or offset
//! from the registration's start), checking each lies inside the region. Local pieces are
//! [`LocalIov`]s: address, length and the [`Descriptor`] of the region holding them (needed
//! only by providers with `FI_MR_LOCAL`).

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use tessera_ofi_sys as sys;

use crate::call::check;
use crate::error::OfiError;
use crate::fabric::{Addressing, Domain, DomainShared};

// Registration is a call on the domain; it lives here, beside the region it makes.
impl Domain {
    /// Registers `length` bytes at `address` with `fi_mr_reg` for `access`.
    ///
    /// # Safety
    /// The memory must stay mapped and allocated until the returned region is dropped. While it
    /// is registered with remote access, peers that hold its key may read or write it at any
    /// time: the caller must not hold Rust references to it that such accesses would violate,
    /// and must order its own accesses with the peers' through its control messages.
    pub unsafe fn register(
        &self,
        address: usize,
        length: usize,
        access: Access,
    ) -> Result<MemoryRegion, OfiError> {
        let requested_key = self.key_to_request();
        // SAFETY: the caller keeps the memory valid while registered (this function's contract).
        unsafe {
            MemoryRegion::register(
                Arc::clone(&self.shared),
                address,
                length,
                access,
                requested_key,
            )
        }
    }
}

/// Access rights of a registration (`FI_READ`, `FI_WRITE`, `FI_REMOTE_READ`,
/// `FI_REMOTE_WRITE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access(u64);

impl Access {
    /// The memory is the local side of reads and writes this process initiates.
    pub const LOCAL: Access = Access(sys::FI_READ | sys::FI_WRITE);
    /// Peers may read it.
    pub const REMOTE_READ: Access = Access(sys::FI_REMOTE_READ);
    /// Peers may write it.
    pub const REMOTE_WRITE: Access = Access(sys::FI_REMOTE_WRITE);
    /// Everything: local use and remote reads and writes.
    pub const ALL: Access =
        Access(sys::FI_READ | sys::FI_WRITE | sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE);

    /// Both sets of rights.
    #[must_use]
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }

    /// The libfabric access bits.
    pub const fn bits(self) -> u64 {
        self.0
    }
}

/// A memory descriptor (`fi_mr_desc`) for local pieces, or none. Only meaningful while the
/// region it came from is registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor(pub(crate) *mut c_void);

// SAFETY: a descriptor is an opaque token the provider reads; it is never dereferenced here.
unsafe impl Send for Descriptor {}
// SAFETY: as above.
unsafe impl Sync for Descriptor {}

impl Descriptor {
    /// No descriptor: for providers without `FI_MR_LOCAL`.
    pub const NONE: Descriptor = Descriptor(ptr::null_mut());

    /// The descriptor a registrar handed out as a number (`RegHandle::descriptor`,
    /// `Cover::descriptor` in `tessera-reg`); `None` gives [`Descriptor::NONE`].
    ///
    /// # Safety
    /// `value` must be `fi_mr_desc` of a registration that stays live for as long as the
    /// descriptor is used in a transfer.
    pub unsafe fn from_raw(value: Option<usize>) -> Descriptor {
        Descriptor(value.map_or(ptr::null_mut(), |value| value as *mut c_void))
    }

    /// Whether this is [`Descriptor::NONE`].
    pub fn is_none(self) -> bool {
        self.0.is_null()
    }
}

/// One local piece of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalIov {
    /// Its address in this process.
    pub address: usize,
    /// Its length in bytes.
    pub length: usize,
    /// The descriptor of the registration holding it ([`Descriptor::NONE`] if the provider
    /// does not require local registration).
    pub descriptor: Descriptor,
}

/// One remote piece in the provider's addressing, as `fi_rma_iov` wants it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteIov {
    /// The target address: virtual, or an offset into the registration (see [`Addressing`]).
    pub address: u64,
    /// Length in bytes.
    pub length: u64,
    /// The registration's key.
    pub key: u64,
}

/// What a memory owner tells its peer about one registration: its virtual base address, its
/// length and its key. Plain numbers, to travel in a control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteRegion {
    /// Virtual address of the registration's first byte in the owner's process.
    pub address: u64,
    /// Bytes registered.
    pub length: u64,
    /// The key (`fi_mr_key`).
    pub key: u64,
}

impl RemoteRegion {
    /// The provider-ready remote piece for `length` bytes at the owner's virtual `address`,
    /// which must lie inside this region. `index` names the piece in the error.
    pub fn iov(
        &self,
        index: usize,
        address: u64,
        length: u64,
        addressing: Addressing,
    ) -> Result<RemoteIov, OfiError> {
        let inside = address >= self.address
            && address
                .checked_add(length)
                .is_some_and(|end| end <= self.address.saturating_add(self.length));
        if !inside {
            return Err(OfiError::OutsideRegion {
                side: "remote",
                index,
                address,
                length,
                region_address: self.address,
                region_length: self.length,
            });
        }
        let address = match addressing {
            Addressing::Virtual => address,
            Addressing::Offset => address - self.address,
        };
        Ok(RemoteIov {
            address,
            length,
            key: self.key,
        })
    }

    /// [`RemoteRegion::iov`] for each `(virtual address, length)` piece.
    pub fn iovs(
        &self,
        pieces: &[(u64, u64)],
        addressing: Addressing,
    ) -> Result<Vec<RemoteIov>, OfiError> {
        pieces
            .iter()
            .enumerate()
            .map(|(index, &(address, length))| self.iov(index, address, length, addressing))
            .collect()
    }
}

/// One registration (`fi_mr_reg`), closed on drop. It keeps its domain open.
pub struct MemoryRegion {
    domain: Arc<DomainShared>,
    mr: *mut sys::fid_mr,
    address: usize,
    length: usize,
    key: u64,
    descriptor: Descriptor,
}

// SAFETY: the domain is FI_THREAD_SAFE; the fid is only closed in Drop, which needs ownership.
unsafe impl Send for MemoryRegion {}
// SAFETY: `&self` methods only read plain fields.
unsafe impl Sync for MemoryRegion {}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("provider", &self.domain.provider)
            .field("address", &format_args!("{:#x}", self.address))
            .field("length", &self.length)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: `mr` was opened by fi_mr_reg and is closed exactly once, here; a close error
        // cannot be reported from Drop.
        unsafe {
            sys::tessera_fi_close(ptr::addr_of_mut!((*self.mr).fid));
        }
    }
}

impl MemoryRegion {
    /// # Safety
    /// See [`crate::Domain::register`].
    pub(crate) unsafe fn register(
        domain: Arc<DomainShared>,
        address: usize,
        length: usize,
        access: Access,
        requested_key: u64,
    ) -> Result<MemoryRegion, OfiError> {
        let mut mr: *mut sys::fid_mr = ptr::null_mut();
        // SAFETY: the domain is open; the caller keeps [address, address + length) mapped while
        // registered. Offset 0: without FI_MR_VIRT_ADDR remote addresses count from the start.
        let ret = unsafe {
            sys::tessera_fi_mr_reg(
                domain.domain,
                address as *const c_void,
                length,
                access.bits(),
                0,
                requested_key,
                0,
                &raw mut mr,
                ptr::null_mut(),
            )
        };
        check(&domain.provider, "fi_mr_reg", i64::from(ret))?;
        // SAFETY: `mr` is the region just opened.
        let (key, descriptor) =
            unsafe { (sys::tessera_fi_mr_key(mr), sys::tessera_fi_mr_desc(mr)) };
        Ok(MemoryRegion {
            domain,
            mr,
            address,
            length,
            key,
            descriptor: Descriptor(descriptor),
        })
    }

    /// The key peers use to reach this region (`fi_mr_key`).
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The descriptor local pieces inside this region carry (`fi_mr_desc`).
    pub fn descriptor(&self) -> Descriptor {
        self.descriptor
    }

    /// First byte registered.
    pub fn address(&self) -> usize {
        self.address
    }

    /// Bytes registered.
    pub fn length(&self) -> usize {
        self.length
    }

    /// What to send a peer so that it can reach this region.
    pub fn remote_region(&self) -> RemoteRegion {
        RemoteRegion {
            address: self.address as u64,
            length: self.length as u64,
            key: self.key,
        }
    }

    /// Whether `[address, address + length)` lies inside the region.
    pub fn contains(&self, address: usize, length: usize) -> bool {
        address >= self.address
            && address
                .checked_add(length)
                .is_some_and(|end| end <= self.address + self.length)
    }
}
