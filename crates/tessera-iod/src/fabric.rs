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
//! Without the `ofi` feature the types here have no values: a fabric cannot be opened and
//! fabric requests are refused.

#[cfg(not(feature = "ofi"))]
use std::io::{IoSlice, IoSliceMut};
#[cfg(not(feature = "ofi"))]
use tessera_proto::{RemoteError, RemoteSegment};

#[cfg(feature = "ofi")]
pub use ofi::{FabricServer, Link};

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
}

#[cfg(feature = "ofi")]
mod ofi {
    use std::sync::Arc;

    use tessera_ofi::{Access, Domain, Endpoint, MemoryRegion, OfiError, Peer, RemoteIov};
    use tessera_proto::{ErrorCode, RemoteError, RemoteSegment};

    /// The iod's libfabric domain and endpoint, shared by every connection.
    #[derive(Debug)]
    pub struct FabricServer {
        domain: Domain,
        endpoint: Endpoint,
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
        /// Opens `provider` (bound to `node` when given) and one endpoint on it.
        pub fn open(provider: &str, node: Option<&str>) -> Result<Arc<FabricServer>, OfiError> {
            let domain = Domain::open(provider, node)?;
            let endpoint = domain.endpoint()?;
            Ok(Arc::new(FabricServer { domain, endpoint }))
        }

        /// The provider's name.
        pub fn provider(&self) -> &str {
            self.domain.provider()
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

        /// The local unit buffer's registration, when the provider requires one.
        fn local_region(&self, data: &[u8]) -> Result<Option<MemoryRegion>, RemoteError> {
            if !self.domain.requires_local_registration() {
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
            check_moved(counts.bytes, segments)
        }

        /// Writes `slices`, back to back, into the client's `segments` with no local
        /// registration: only for providers that need none
        /// ([`Link::needs_local_registration`] false), as the unified cache's units are not
        /// registered with the fabric.
        pub fn push_slices(
            &self,
            slices: &[std::io::IoSlice<'_>],
            segments: &[RemoteSegment],
        ) -> Result<(), RemoteError> {
            let remote = remote_iovs(segments);
            let local: Vec<&[u8]> = slices.iter().map(|slice| &**slice).collect();
            let counts = self
                .server
                .endpoint
                .write_from(&self.peer, &local, None, &remote)
                .map_err(|err| fabric_error(&err))?;
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

        /// Whether the provider wants local memory registered (`FI_MR_LOCAL`).
        pub fn needs_local_registration(&self) -> bool {
            self.server.domain.requires_local_registration()
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
