//! Serving one-sided requests over a fabric (`RemoteAccess::Fabric`, libfabric RMA).
//!
//! With `--ofi-provider`, the iod opens one libfabric domain and endpoint ([`FabricServer`]).
//! A request whose memory descriptor names fabric access carries the client's endpoint name
//! and its segments, each already in the provider's addressing (the client converted its
//! virtual addresses with its registration's `RemoteRegion`) and with its registration key.
//! The iod inserts the name as a peer ([`FabricServer::link`], once per client endpoint) and,
//! per pipeline unit, pulls the unit's segments into its buffer (`fi_readmsg`, a write
//! request) or pushes its buffer into them (`fi_writemsg`, a read request); storage then runs
//! exactly as for the `local` backend (`remote.rs`). The unit buffer is registered for the
//! call only when the provider requires local registration (`FI_MR_LOCAL`).
//!
//! Under the unified cache a read is written by RMA straight from the cache's units
//! ([`Link::push_slices`]). The cache's Ready region is registered with the domain once, at
//! start, for the server's life ([`FabricOptions::ready`], through `tessera-ofi`'s
//! `OfiRegistrar`), so slices in Ready units carry its descriptor; a slice in a Raw (heap)
//! unit is registered for the call. `FabricOptions::force_local_registration` (the iod's
//! test-only `--ofi-force-local-mr`) makes the server act as if the provider required local
//! registration, so those paths run over `tcp;ofi_rxm` and `shm`, which do not.
//!
//! Without the `ofi` feature the types here have no values: a fabric cannot be opened and
//! fabric requests are refused.

#[cfg(not(feature = "ofi"))]
use std::io::{IoSlice, IoSliceMut};
#[cfg(not(feature = "ofi"))]
use tessera_proto::{RemoteError, RemoteSegment};

#[cfg(feature = "ofi")]
pub use ofi::{FabricOptions, FabricServer, FabricStartError, Link, PUSH_REGISTRATIONS_MAX};

/// No fabric in a build without the `ofi` feature.
#[cfg(not(feature = "ofi"))]
#[derive(Debug)]
pub enum FabricServer {}

/// No fabric peer in a build without the `ofi` feature.
#[cfg(not(feature = "ofi"))]
#[derive(Debug)]
pub enum Link {}

#[cfg(not(feature = "ofi"))]
impl FabricServer {
    /// Never called: there is no fabric server.
    pub fn link(&self, _endpoint: &[u8]) -> Result<Link, RemoteError> {
        match *self {}
    }
}

#[cfg(not(feature = "ofi"))]
impl Link {
    /// Never called: there is no fabric peer.
    pub fn pull(&self, _segments: &[RemoteSegment], _data: &mut [u8]) -> Result<(), RemoteError> {
        match *self {}
    }

    /// Never called: there is no fabric peer.
    pub fn push(&self, _data: &[u8], _segments: &[RemoteSegment]) -> Result<(), RemoteError> {
        match *self {}
    }

    /// Never called: there is no fabric peer.
    pub fn push_slices(
        &self,
        _slices: &[IoSlice<'_>],
        _segments: &[RemoteSegment],
    ) -> Result<(), RemoteError> {
        match *self {}
    }

    /// Never called: there is no fabric peer.
    pub fn pull_slices(
        &self,
        _segments: &[RemoteSegment],
        _slices: &mut [IoSliceMut<'_>],
    ) -> Result<(), RemoteError> {
        match *self {}
    }

    /// Never called: there is no fabric peer.
    pub fn needs_local_registration(&self) -> bool {
        match *self {}
    }

    /// Never called: there is no fabric peer.
    pub fn has_ready_registration(&self) -> bool {
        match *self {}
    }
}

#[cfg(feature = "ofi")]
mod ofi {
    use std::sync::Arc;

    use tessera_ofi::{
        Access, Descriptor, Domain, Endpoint, LocalIov, MemoryRegion, OfiError, OfiRegistrar, Peer,
        RemoteIov,
    };
    use tessera_proto::metrics::FABRIC_PUSHED_BYTES;
    use tessera_proto::{ErrorCode, RemoteError, RemoteSegment};

    use crate::cache::ReadyMemory;

    /// Slices of cache units one [`Link::push_slices`] registers for the call at most (units
    /// outside the Ready region when the provider needs local registration; a read reaches
    /// that path only when every unit was Ready a moment before, so these are the few a
    /// racing write or eviction replaced).
    pub const PUSH_REGISTRATIONS_MAX: usize = 4096;

    /// What the server does with memory besides opening the fabric.
    #[derive(Debug, Clone, Default)]
    pub struct FabricOptions {
        /// The unified cache's Ready region: registered with the domain at start for the
        /// server's life, and pushed from with its descriptor.
        pub ready: Option<ReadyMemory>,
        /// Act as if the provider required local registration (`FI_MR_LOCAL`) though it
        /// does not: test-only, so the registered paths run over `tcp;ofi_rxm` and `shm`.
        pub force_local_registration: bool,
    }

    /// Why the fabric server could not start.
    #[derive(Debug, thiserror::Error)]
    pub enum FabricStartError {
        /// The provider, domain or endpoint would not open.
        #[error("{0}")]
        Open(#[from] OfiError),
        /// `fi_mr_reg` of the cache's Ready region was refused.
        #[error(
            "registering the unified cache's Ready region ({bytes} bytes, \
             --cache-ready-bytes) with {provider} (fi_mr_reg): {reason}"
        )]
        ReadyRefused {
            /// The provider.
            provider: String,
            /// The region's bytes.
            bytes: usize,
            /// The provider's or the cache's reason.
            reason: String,
        },
    }

    /// The Ready region's registration with this server's domain.
    #[derive(Debug)]
    struct ReadyRegistration {
        /// Keeps the region mapped, and so its registration (undone only when the region is
        /// unmapped) and `descriptor` valid.
        memory: ReadyMemory,
        descriptor: Descriptor,
    }

    /// The iod's libfabric domain and endpoint, shared by every connection.
    #[derive(Debug)]
    pub struct FabricServer {
        domain: Domain,
        endpoint: Endpoint,
        ready: Option<ReadyRegistration>,
        force_local_registration: bool,
    }

    /// One client endpoint, inserted as a peer of the iod's endpoint.
    #[derive(Debug)]
    pub struct Link {
        server: Arc<FabricServer>,
        peer: Peer,
    }

    fn fabric_error(err: &OfiError) -> RemoteError {
        RemoteError::new(ErrorCode::Io, format!("fabric transfer: {err}"))
    }

    impl FabricServer {
        /// Opens `provider` (bound to `node` when given) and one endpoint on it, and
        /// registers `options.ready` with its domain.
        pub fn open(
            provider: &str,
            node: Option<&str>,
            options: FabricOptions,
        ) -> Result<Arc<FabricServer>, FabricStartError> {
            let domain = Domain::open(provider, node)?;
            let endpoint = domain.endpoint()?;
            let ready = match options.ready {
                Some(memory) => Some(Self::register_ready(&domain, memory)?),
                None => None,
            };
            Ok(Arc::new(FabricServer {
                domain,
                endpoint,
                ready,
                force_local_registration: options.force_local_registration,
            }))
        }

        /// Registers the whole Ready region once (local access only: the provider reads it
        /// as the source of RMA writes; no peer gets its key).
        fn register_ready(
            domain: &Domain,
            memory: ReadyMemory,
        ) -> Result<ReadyRegistration, FabricStartError> {
            let provider = domain.provider().to_owned();
            let registrar = Arc::new(OfiRegistrar::new(domain.clone(), Access::LOCAL));
            let handle = memory
                .register(registrar, &format!("ofi:{provider}"))
                .map_err(|err| FabricStartError::ReadyRefused {
                    provider,
                    bytes: memory.bytes(),
                    reason: err.to_string(),
                })?;
            // SAFETY: the descriptor is `fi_mr_desc` of the registration just made, which
            // lasts until the region is unmapped; `memory` keeps it mapped for as long as this
            // registration (and so the descriptor) is held.
            let descriptor = unsafe { Descriptor::from_raw(handle.descriptor) };
            Ok(ReadyRegistration { memory, descriptor })
        }

        /// The provider's name.
        pub fn provider(&self) -> &str {
            self.domain.provider()
        }

        /// The Ready region's bytes registered with the domain (0: none).
        pub fn ready_registered_bytes(&self) -> usize {
            self.ready.as_ref().map_or(0, |ready| ready.memory.bytes())
        }

        /// Whether local memory is registered for transfers: the provider wants it
        /// (`FI_MR_LOCAL`), or the server was told to act as if it did.
        fn needs_local_registration(&self) -> bool {
            self.force_local_registration || self.domain.requires_local_registration()
        }

        /// The client whose endpoint is named `endpoint`, as a peer.
        pub fn link(self: &Arc<Self>, endpoint: &[u8]) -> Result<Link, RemoteError> {
            let peer = self.endpoint.insert_peer(endpoint).map_err(|err| {
                RemoteError::new(
                    ErrorCode::RemoteAccessRefused,
                    format!("the client's fabric endpoint: {err}"),
                )
            })?;
            Ok(Link {
                server: Arc::clone(self),
                peer,
            })
        }

        /// The local unit buffer's registration, when local memory is registered.
        fn local_region(&self, data: &[u8]) -> Result<Option<MemoryRegion>, RemoteError> {
            if !self.needs_local_registration() {
                return Ok(None);
            }
            // SAFETY: `data` is the caller's unit buffer, borrowed for the whole transfer the
            // region is used in and dropped with it; it is registered for local access only,
            // so no peer can reach it.
            let region = unsafe {
                self.domain
                    .register(data.as_ptr() as usize, data.len(), Access::LOCAL)
            }
            .map_err(|err| fabric_error(&err))?;
            Ok(Some(region))
        }
    }

    fn remote_iovs(segments: &[RemoteSegment]) -> Vec<RemoteIov> {
        segments
            .iter()
            .filter(|segment| segment.length > 0)
            .map(|segment| RemoteIov {
                address: segment.address,
                length: segment.length,
                key: segment.key,
            })
            .collect()
    }

    impl Link {
        /// Reads the client's `segments` into `data` (as many bytes as they hold).
        pub fn pull(&self, segments: &[RemoteSegment], data: &mut [u8]) -> Result<(), RemoteError> {
            let remote = remote_iovs(segments);
            let region = self.server.local_region(data)?;
            let counts = self
                .server
                .endpoint
                .read_into(&self.peer, &mut [data], region.as_ref(), &remote)
                .map_err(|err| fabric_error(&err))?;
            drop(region);
            check_moved(counts.bytes, segments)
        }

        /// Writes `data` into the client's `segments`.
        pub fn push(&self, data: &[u8], segments: &[RemoteSegment]) -> Result<(), RemoteError> {
            let remote = remote_iovs(segments);
            let region = self.server.local_region(data)?;
            let counts = self
                .server
                .endpoint
                .write_from(&self.peer, &[data], region.as_ref(), &remote)
                .map_err(|err| fabric_error(&err))?;
            drop(region);
            metrics::counter!(FABRIC_PUSHED_BYTES, "memory" => "buffer").increment(counts.bytes);
            check_moved(counts.bytes, segments)
        }

        /// Writes `slices` of the unified cache's units, back to back, into the client's
        /// `segments`. Where local memory is registered, a slice in the Ready region carries
        /// its descriptor and any other is registered for the call (at most
        /// [`PUSH_REGISTRATIONS_MAX`]); elsewhere none is.
        pub fn push_slices(
            &self,
            slices: &[std::io::IoSlice<'_>],
            segments: &[RemoteSegment],
        ) -> Result<(), RemoteError> {
            let remote = remote_iovs(segments);
            let register = self.server.needs_local_registration();
            let mut registered: Vec<MemoryRegion> = Vec::new();
            let (mut ready_bytes, mut raw_bytes) = (0u64, 0u64);
            let mut local = Vec::with_capacity(slices.len());
            for slice in slices {
                let ready = self
                    .server
                    .ready
                    .as_ref()
                    .filter(|ready| ready.memory.contains(slice));
                let descriptor = match ready {
                    _ if !register || slice.is_empty() => Descriptor::NONE,
                    Some(ready) => ready.descriptor,
                    None => {
                        if registered.len() == PUSH_REGISTRATIONS_MAX {
                            return Err(RemoteError::new(
                                ErrorCode::Io,
                                format!(
                                    "a read from the cache needs more than \
                                     {PUSH_REGISTRATIONS_MAX} units outside its Ready region \
                                     registered (PUSH_REGISTRATIONS_MAX)"
                                ),
                            ));
                        }
                        let region = self
                            .server
                            .local_region(slice)?
                            .expect("local memory is registered");
                        let descriptor = region.descriptor();
                        registered.push(region);
                        descriptor
                    }
                };
                if ready.is_some() {
                    ready_bytes += slice.len() as u64;
                } else {
                    raw_bytes += slice.len() as u64;
                }
                local.push(LocalIov {
                    address: slice.as_ptr() as usize,
                    length: slice.len(),
                    descriptor,
                });
            }
            // SAFETY: the slices are borrowed for the whole call, so they stay valid, and they
            // are pinned cache bytes, which nothing writes (a write copies the unit first).
            // Each descriptor is the Ready region's, whose registration `self.server` keeps
            // while the slice lies in it, or that of a region in `registered`, made for that
            // very slice and dropped only after the call.
            let counts = unsafe { self.server.endpoint.write_to(&self.peer, &local, &remote) }
                .map_err(|err| fabric_error(&err))?;
            drop(registered);
            metrics::counter!(FABRIC_PUSHED_BYTES, "memory" => "ready").increment(ready_bytes);
            metrics::counter!(FABRIC_PUSHED_BYTES, "memory" => "raw").increment(raw_bytes);
            check_moved(counts.bytes, segments)
        }

        /// Reads the client's `segments` into `slices`, back to back, with no local
        /// registration: only for providers that need none, as [`Link::push_slices`] (a
        /// write landing in the unified cache's units).
        pub fn pull_slices(
            &self,
            segments: &[RemoteSegment],
            slices: &mut [std::io::IoSliceMut<'_>],
        ) -> Result<(), RemoteError> {
            let remote = remote_iovs(segments);
            let mut local: Vec<&mut [u8]> = slices.iter_mut().map(|slice| &mut **slice).collect();
            let counts = self
                .server
                .endpoint
                .read_into(&self.peer, &mut local, None, &remote)
                .map_err(|err| fabric_error(&err))?;
            check_moved(counts.bytes, segments)
        }

        /// Whether local memory is registered for transfers (`FI_MR_LOCAL`, or the server was
        /// told to act as if).
        pub fn needs_local_registration(&self) -> bool {
            self.server.needs_local_registration()
        }

        /// Whether the cache's Ready region is registered with this fabric.
        pub fn has_ready_registration(&self) -> bool {
            self.server.ready.is_some()
        }
    }

    fn check_moved(moved: u64, segments: &[RemoteSegment]) -> Result<(), RemoteError> {
        let wanted: u64 = segments.iter().map(|segment| segment.length).sum();
        if moved == wanted {
            Ok(())
        } else {
            Err(RemoteError::new(
                ErrorCode::Io,
                format!("the fabric moved {moved} bytes of the client's {wanted}"),
            ))
        }
    }
}
