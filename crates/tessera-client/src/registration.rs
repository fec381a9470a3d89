//! Memory registration for one-sided transfers: a [`tessera_reg::Registry`] plugged into the
//! transport, which registers every segment a server will reach before the request goes out
//! and releases it after the reply, by the registry's policy (per segment, OGR groups, a
//! pin-down cache, FMRD). On the `local` backend nothing needs registering, so this is for
//! measuring the policies (with the `pin` registrar) and for fabrics that need it.

use std::sync::Arc;

use tessera_reg::{Registry, Segment};

/// A registry as the transport's [`tessera_net::Registration`].
#[derive(Debug)]
pub struct RegistryRegistration(pub Arc<Registry>);

impl tessera_net::Registration for RegistryRegistration {
    fn acquire(&self, segments: &[(usize, usize)]) -> Result<Box<dyn Send>, String> {
        let segments: Vec<Segment> = segments
            .iter()
            .map(|&(address, length)| Segment::new(address, length))
            .collect();
        self.0
            .acquire_owned(&segments)
            .map(|guard| Box::new(guard) as Box<dyn Send>)
            .map_err(|err| err.to_string())
    }
}
