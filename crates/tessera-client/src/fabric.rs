//! Choosing the fabric a client's one-sided transfers go over (`ofi` feature).
//!
//! The cluster file's `[ofi]` entry names the libfabric provider the iods serve
//! (`tessera up --ofi-provider`); `$TESSERA_OFI_PROVIDER` overrides it (`off` turns the fabric
//! off). The client opens its own domain and endpoint on that provider, with a progress thread,
//! and every iod connection then lends its memory through it (`RemoteAccess::Fabric`). A
//! provider that cannot be opened is logged once and the client moves data as it would
//! without one; an iod that cannot reach the client over it (its probe on connect fails) is
//! logged once per connection, which then moves data in messages.
//!
//! Lent memory is registered through a registration cache (OGR groups, FMRD caching by
//! default); `$TESSERA_OFI_REGISTRATION` (`individual`, `pin-down`, `fmrd`, `ogr-fmrd`) picks
//! another policy for experiments. Cached registrations outlive the calls that made them, so
//! an application must call `Client::forget_memory` on memory it has written or read before it
//! frees or unmaps it.

use std::sync::Arc;

use tessera_net::fabric::{Fabric, FabricRegistration, OfiFabric};

use crate::config::ClusterConfig;
use crate::options::ClientOptions;

/// The environment variable overriding the cluster file's provider (`off`: no fabric).
pub const OFI_PROVIDER_ENV: &str = "TESSERA_OFI_PROVIDER";
/// The environment variable choosing how lent memory is registered (default `ogr-fmrd`).
pub const OFI_REGISTRATION_ENV: &str = "TESSERA_OFI_REGISTRATION";

/// The registration policy `$TESSERA_OFI_REGISTRATION` names (an unknown name is logged and
/// the default used).
pub fn registration_from_env() -> FabricRegistration {
    match std::env::var(OFI_REGISTRATION_ENV) {
        Ok(value) if !value.is_empty() => FabricRegistration::parse(&value).unwrap_or_else(|err| {
            tracing::warn!("${OFI_REGISTRATION_ENV}: {err}; using the default");
            FabricRegistration::default()
        }),
        _ => FabricRegistration::default(),
    }
}

/// The fabric for a client of `config`, if the cluster (or the environment) names one and it
/// opens.
pub(crate) fn open(config: &ClusterConfig, _options: &ClientOptions) -> Option<Arc<dyn Fabric>> {
    let node = config.ofi.as_ref().and_then(|entry| entry.node.clone());
    let provider = match std::env::var(OFI_PROVIDER_ENV) {
        Ok(value) if value == "off" => return None,
        Ok(value) if !value.is_empty() => value,
        _ => config.ofi.as_ref()?.provider.clone(),
    };
    match OfiFabric::open(&provider, node.as_deref(), registration_from_env()) {
        Ok(fabric) => Some(Arc::new(fabric)),
        Err(err) => {
            tracing::warn!("cannot open the {provider} fabric ({err}); moving data without it");
            None
        }
    }
}
