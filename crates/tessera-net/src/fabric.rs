//! One-sided transfers over a fabric, client side: what a request lends the server.
//!
//! Before a one-sided request goes out, the connection hands the memory segments the server
//! will reach to a [`Fabric`], which registers them and returns a [`Lending`]: the client's
//! endpoint name, the segments as the server must address them (each with the key of the
//! registration covering it, the address in the provider's addressing) and a guard that keeps
//! the registrations until the reply has come. With the `ofi` feature, [`OfiFabric`] is that
//! fabric over libfabric (`tessera-ofi`): its own domain and endpoint, a progress thread (the
//! `tcp;ofi_rxm` and `shm` providers move a peer's RMA only while the target's endpoint is
//! driven), and a `tessera_reg::Registry` over an `OfiRegistrar`, so `fi_mr_reg` goes through
//! the registration cache: by default OGR groups each request's segments and FMRD keeps the
//! registrations, so requests over the same buffers find theirs cached and reuse the keys.
//!
//! Memory the connection allocates for one request (a pack buffer, the probe's token) is lent
//! *transiently*: its registrations are invalidated when the guard drops, before that memory
//! is freed, so no later request is served by a registration over memory that has gone. Memory
//! the application lends stays cached until it is invalidated ([`Fabric::invalidate`],
//! `Client::forget_memory`), which the application must do before it frees or unmaps memory it
//! has written or read.

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

/// How a fabric registers lent memory (`$TESSERA_OFI_REGISTRATION`, for experiments).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FabricRegistration {
    /// One registration per segment, deregistered after the reply (no cache).
    Individual,
    /// One registration per segment, cached; an evicted one is deregistered at once.
    PinDown,
    /// One registration per segment, cached; evicted ones deregistered in batches (FMRD).
    Fmrd,
    /// OGR groups per request, cached with FMRD (the default).
    #[default]
    OgrFmrd,
}

impl FabricRegistration {
    /// Every choice, in the order the names are listed in errors.
    pub const ALL: [FabricRegistration; 4] = [
        FabricRegistration::Individual,
        FabricRegistration::PinDown,
        FabricRegistration::Fmrd,
        FabricRegistration::OgrFmrd,
    ];

    /// `individual`, `pin-down`, `fmrd` or `ogr-fmrd`.
    pub fn name(self) -> &'static str {
        match self {
            FabricRegistration::Individual => "individual",
            FabricRegistration::PinDown => "pin-down",
            FabricRegistration::Fmrd => "fmrd",
            FabricRegistration::OgrFmrd => "ogr-fmrd",
        }
    }

    /// The choice named `name`, or an error listing the names.
    pub fn parse(name: &str) -> Result<FabricRegistration, String> {
        Self::ALL
            .into_iter()
            .find(|choice| choice.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|choice| choice.name()).collect();
                format!(
                    "unknown fabric registration {name:?}; one of {}",
                    names.join(", ")
                )
            })
    }
}

/// What a fabric's registrations have done since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LendStats {
    /// Lendings (one-sided requests and probes).
    pub lendings: u64,
    /// Segments lent.
    pub segments: u64,
    /// `fi_mr_reg` calls made.
    pub registrations: u64,
    /// Registrations closed.
    pub deregistrations: u64,
    /// Segments served by a registration already made (cached, or an earlier segment's).
    pub cache_hits: u64,
    /// Segments that needed a new registration.
    pub cache_misses: u64,
    /// Registrations dropped by invalidation.
    pub invalidated: u64,
    /// Registrations dropped because their memory was unmapped, discarded or moved (seen by
    /// the registry's unmap monitor, with no call from the application).
    pub unmapped: u64,
    /// Registrations cached now.
    pub cached_entries: usize,
    /// Whether cached registrations are watched for unmaps (`tessera_reg::Monitor`); when
    /// not, call `Client::forget_memory` before unmapping lent memory.
    pub watching: bool,
}

/// A fabric the client's memory is reachable through (`RemoteAccess::Fabric`).
pub trait Fabric: Send + Sync + std::fmt::Debug {
    /// The provider's name, for errors and logs.
    fn provider(&self) -> &str;
    /// Registers `segments` (address, length) of this process's memory for remote reads and
    /// writes and describes them for the server. With `transient`, the memory is the caller's
    /// own for this one lending (freed after it): its registrations are invalidated when the
    /// guard drops, never kept for later lendings.
    fn lend(&self, segments: &[(usize, usize)], transient: bool) -> Result<Lending, String>;
    /// Forgets every registration overlapping `length` bytes at `address`, before that memory
    /// is freed or unmapped; returns how many were dropped.
    fn invalidate(&self, address: usize, length: usize) -> Result<usize, String>;
    /// What the fabric's registrations have done.
    fn stats(&self) -> LendStats;
}

#[cfg(feature = "ofi")]
pub use ofi::OfiFabric;

#[cfg(feature = "ofi")]
mod ofi {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use tessera_ofi::{Access, Domain, Endpoint, OfiError, OfiRegistrar, ProgressThread};
    use tessera_proto::limits::REMOTE_SEGMENTS_MAX;
    use tessera_proto::RemoteSegment;
    use tessera_reg::{
        Caching, Grouping, OwnedRegistration, Policy, Registry, Segment, ACQUIRE_SEGMENTS_MAX,
    };

    use super::{Fabric, FabricRegistration, LendStats, Lending};

    impl FabricRegistration {
        /// The registry policy of this choice, with the registry's default limits
        /// (`CACHE_ENTRIES_DEFAULT` registrations, `CACHE_BYTES_DEFAULT` bytes).
        pub fn policy(self) -> Policy {
            let (grouping, caching) = match self {
                FabricRegistration::Individual => (Grouping::Individual, Caching::None),
                FabricRegistration::PinDown => (Grouping::Individual, Caching::PinDown),
                FabricRegistration::Fmrd => (Grouping::Individual, Caching::Fmrd),
                FabricRegistration::OgrFmrd => (Grouping::Ogr, Caching::Fmrd),
            };
            Policy::new(grouping, caching)
        }
    }

    /// A libfabric domain and endpoint of this process, kept progressing by a thread, whose
    /// memory servers reach with RMA; lent memory is registered through a registry.
    pub struct OfiFabric {
        domain: Domain,
        endpoint: Arc<Endpoint>,
        registry: Arc<Registry>,
        choice: FabricRegistration,
        lendings: AtomicU64,
        segments: AtomicU64,
        /// Stopped (and joined) when the fabric is dropped.
        progress: Mutex<Option<ProgressThread>>,
    }

    impl std::fmt::Debug for OfiFabric {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("OfiFabric")
                .field("provider", &self.domain.provider())
                .field("registration", &self.choice.name())
                .finish_non_exhaustive()
        }
    }

    /// Keeps one lending's registrations; a transient lending's are invalidated on drop,
    /// after they are released and before the caller frees the memory.
    struct LendGuard {
        registry: Arc<Registry>,
        held: Vec<OwnedRegistration>,
        transient: Vec<Segment>,
    }

    impl Drop for LendGuard {
        fn drop(&mut self) {
            self.held.clear();
            for &segment in &self.transient {
                if let Err(err) = self.registry.invalidate(segment) {
                    tracing::warn!("invalidating a lent buffer {segment}: {err}");
                }
            }
        }
    }

    impl OfiFabric {
        /// Opens `provider` (e.g. `tcp;ofi_rxm` bound to `node`, or `shm`), an endpoint on it
        /// and the thread that progresses it; lent memory is registered per `registration`.
        pub fn open(
            provider: &str,
            node: Option<&str>,
            registration: FabricRegistration,
        ) -> Result<OfiFabric, OfiError> {
            let domain = Domain::open(provider, node)?;
            let endpoint = Arc::new(domain.endpoint()?);
            let thread_error = |call: &'static str, message: String| OfiError::Call {
                provider: provider.to_owned(),
                call,
                code: 0,
                message,
            };
            let registrar = Arc::new(OfiRegistrar::new(domain.clone(), Access::ALL));
            let registry = Registry::new(registrar, registration.policy())
                .map_err(|err| thread_error("open the registration cache", err.to_string()))?;
            let progress = ProgressThread::spawn(Arc::clone(&endpoint))
                .map_err(|err| thread_error("spawn progress thread", err.to_string()))?;
            Ok(OfiFabric {
                domain,
                endpoint,
                registry: Arc::new(registry),
                choice: registration,
                lendings: AtomicU64::new(0),
                segments: AtomicU64::new(0),
                progress: Mutex::new(Some(progress)),
            })
        }

        /// The endpoint servers insert as their peer.
        pub fn endpoint(&self) -> &Endpoint {
            &self.endpoint
        }

        /// How lent memory is registered.
        pub fn registration(&self) -> FabricRegistration {
            self.choice
        }

        /// The registry lent memory is registered through.
        pub fn registry(&self) -> &Arc<Registry> {
            &self.registry
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

        fn lend(&self, segments: &[(usize, usize)], transient: bool) -> Result<Lending, String> {
            if segments.len() > REMOTE_SEGMENTS_MAX {
                return Err(format!(
                    "{} segments to lend; REMOTE_SEGMENTS_MAX is {REMOTE_SEGMENTS_MAX}",
                    segments.len()
                ));
            }
            let wanted: Vec<Segment> = segments
                .iter()
                .map(|&(address, length)| Segment::new(address, length))
                .collect();
            let addressing = self.domain.addressing();
            let mut guard = LendGuard {
                registry: Arc::clone(&self.registry),
                held: Vec::new(),
                transient: if transient {
                    wanted.clone()
                } else {
                    Vec::new()
                },
            };
            let mut described = Vec::with_capacity(segments.len());
            // The registry takes at most ACQUIRE_SEGMENTS_MAX segments an acquire.
            for chunk in wanted.chunks(ACQUIRE_SEGMENTS_MAX) {
                let registration = self
                    .registry
                    .acquire_owned(chunk)
                    .map_err(|err| err.to_string())?;
                for cover in registration.covers() {
                    let index = described.len();
                    // The server addresses the segment inside the registration covering it:
                    // by virtual address (FI_MR_VIRT_ADDR) or by offset from the region's start.
                    let iov = OfiRegistrar::cover_region(cover)
                        .iov(
                            index,
                            cover.segment.address as u64,
                            cover.segment.length as u64,
                            addressing,
                        )
                        .map_err(|err| err.to_string())?;
                    described.push(RemoteSegment {
                        address: iov.address,
                        length: iov.length,
                        key: iov.key,
                    });
                }
                guard.held.push(registration);
            }
            self.lendings.fetch_add(1, Ordering::Relaxed);
            self.segments
                .fetch_add(segments.len() as u64, Ordering::Relaxed);
            Ok(Lending {
                endpoint: self.endpoint.name().to_vec(),
                segments: described,
                guard: Box::new(guard),
            })
        }

        fn invalidate(&self, address: usize, length: usize) -> Result<usize, String> {
            if length == 0 {
                return Ok(0);
            }
            self.registry
                .invalidate(Segment::new(address, length))
                .map_err(|err| err.to_string())
        }

        fn stats(&self) -> LendStats {
            let stats = self.registry.stats();
            LendStats {
                lendings: self.lendings.load(Ordering::Relaxed),
                segments: self.segments.load(Ordering::Relaxed),
                registrations: stats.registrations,
                deregistrations: stats.deregistrations,
                cache_hits: stats.cache_hits,
                cache_misses: stats.cache_misses,
                invalidated: stats.invalidated,
                unmapped: stats.unmapped,
                cached_entries: stats.cached_entries,
                watching: self.registry.watching(),
            }
        }
    }
}
