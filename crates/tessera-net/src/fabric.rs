//! One-sided transfers over a fabric, client side: what a request lends the server.
//!
//! Before a one-sided request goes out, the connection hands the memory segments the server
//! will reach to a [`Fabric`], which registers them and returns a [`Lending`]: the client's
//! endpoint name, the segments as the server must address them (each with the key of its
//! registration, the address in the provider's addressing) and a guard that keeps the
//! registrations until the reply has come. With the `ofi` feature, [`OfiFabric`] is that fabric
//! over libfabric (`tessera-ofi`): its own domain and endpoint, a progress thread (the
//! `tcp;ofi_rxm` and `shm` providers move a peer's RMA only while the target's endpoint is
//! driven), and one `fi_mr_reg` per segment.

use tessera_proto::RemoteSegment;

/// What one one-sided request lends the server over a fabric.
pub struct Lending {
    /// The client's endpoint name, which the server inserts as its peer.
    pub endpoint: Vec<u8>,
    /// The segments in data order, in the provider's addressing, each with its key.
    pub segments: Vec<RemoteSegment>,
    /// Keeps the segments registered; dropped after the reply.
    pub guard: Box<dyn Send>,
}

impl std::fmt::Debug for Lending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lending")
            .field("endpoint", &self.endpoint.len())
            .field("segments", &self.segments.len())
            .finish_non_exhaustive()
    }
}

/// A fabric the client's memory is reachable through (`RemoteAccess::Fabric`).
pub trait Fabric: Send + Sync + std::fmt::Debug {
    /// The provider's name, for errors and logs.
    fn provider(&self) -> &str;
    /// Registers `segments` (address, length) of this process's memory for remote reads and
    /// writes and describes them for the server.
    fn lend(&self, segments: &[(usize, usize)]) -> Result<Lending, String>;
}

#[cfg(feature = "ofi")]
pub use ofi::OfiFabric;

#[cfg(feature = "ofi")]
mod ofi {
    use std::sync::{Arc, Mutex};

    use tessera_ofi::{Access, Domain, Endpoint, MemoryRegion, OfiError, ProgressThread};
    use tessera_proto::limits::REMOTE_SEGMENTS_MAX;
    use tessera_proto::RemoteSegment;

    use super::{Fabric, Lending};

    /// A libfabric domain and endpoint of this process, kept progressing by a thread, whose
    /// memory servers reach with RMA.
    pub struct OfiFabric {
        domain: Domain,
        endpoint: Arc<Endpoint>,
        /// Stopped (and joined) when the fabric is dropped.
        progress: Mutex<Option<ProgressThread>>,
    }

    impl std::fmt::Debug for OfiFabric {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("OfiFabric")
                .field("provider", &self.domain.provider())
                .finish_non_exhaustive()
        }
    }

    impl OfiFabric {
        /// Opens `provider` (e.g. `tcp;ofi_rxm` bound to `node`, or `shm`), an endpoint on it
        /// and the thread that progresses it.
        pub fn open(provider: &str, node: Option<&str>) -> Result<OfiFabric, OfiError> {
            let domain = Domain::open(provider, node)?;
            let endpoint = Arc::new(domain.endpoint()?);
            let progress =
                ProgressThread::spawn(Arc::clone(&endpoint)).map_err(|err| OfiError::Call {
                    provider: provider.to_owned(),
                    call: "spawn progress thread",
                    code: 0,
                    message: err.to_string(),
                })?;
            Ok(OfiFabric {
                domain,
                endpoint,
                progress: Mutex::new(Some(progress)),
            })
        }

        /// The endpoint servers insert as their peer.
        pub fn endpoint(&self) -> &Endpoint {
            &self.endpoint
        }
    }

    impl Drop for OfiFabric {
        fn drop(&mut self) {
            let progress = self
                .progress
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(progress) = progress {
                if let Err(err) = progress.stop() {
                    tracing::warn!("{}: progress thread: {err}", self.domain.provider());
                }
            }
        }
    }

    impl Fabric for OfiFabric {
        fn provider(&self) -> &str {
            self.domain.provider()
        }

        fn lend(&self, segments: &[(usize, usize)]) -> Result<Lending, String> {
            if segments.len() > REMOTE_SEGMENTS_MAX {
                return Err(format!(
                    "{} segments to lend; REMOTE_SEGMENTS_MAX is {REMOTE_SEGMENTS_MAX}",
                    segments.len()
                ));
            }
            let addressing = self.domain.addressing();
            let mut regions: Vec<MemoryRegion> = Vec::with_capacity(segments.len());
            let mut described = Vec::with_capacity(segments.len());
            for (index, &(address, length)) in segments.iter().enumerate() {
                // SAFETY: the connection lends these segments (slices of the caller's request,
                // or its pack buffer) to the server until the reply and keeps this guard until
                // then; the server reaches them only for that request.
                let region = unsafe { self.domain.register(address, length, Access::ALL) }
                    .map_err(|err| err.to_string())?;
                let iov = region
                    .remote_region()
                    .iov(index, address as u64, length as u64, addressing)
                    .map_err(|err| err.to_string())?;
                described.push(RemoteSegment {
                    address: iov.address,
                    length: iov.length,
                    key: iov.key,
                });
                regions.push(region);
            }
            Ok(Lending {
                endpoint: self.endpoint.name().to_vec(),
                segments: described,
                guard: Box::new(regions),
            })
        }
    }
}
