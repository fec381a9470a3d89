//! The `mds-precreate` thread and the refill of the pool of objects made ahead
//! ([`crate::precreate`]): handles reserved durably, then one `ObjectCreateMany` per iod per
//! chunk, over the thread's own connections.

use std::collections::HashMap;
use std::sync::PoisonError;

use tessera_proto::{ObjectCreateMany, RemoteError};

use super::iods::{check_servers_on, iod_call_each_on};
use super::{net_error, Inner};
use crate::precreate::{Precreated, PRECREATE_CHUNK, PRECREATE_RETRY, PRECREATE_TICK};

/// The `mds-precreate` thread: refills the pool whenever it runs low, until the mds is gone
/// (at most a [`PRECREATE_TICK`] after).
pub(super) fn keep_precreated(pool: &Precreated, mds: &std::sync::Weak<Inner>) {
    let mut failing = false;
    loop {
        let wanted = pool.wanted(PRECREATE_TICK);
        let Some(inner) = mds.upgrade() else {
            return;
        };
        if wanted == 0 {
            continue;
        }
        match inner.precreate(wanted) {
            Ok(_) => failing = false,
            Err(error) => {
                if !failing {
                    tracing::warn!("mds: objects not made ahead, creates make their own: {error}");
                }
                failing = true;
                drop(inner);
                std::thread::sleep(PRECREATE_RETRY);
            }
        }
    }
}

impl Inner {
    /// Makes the objects of `count` new handles on every iod and pools them; returns how
    /// many it pooled. The handles are reserved durably first
    /// ([`Namespace::reserve_handles`]), and each is in `creating` from before its objects
    /// exist, so no sweep takes them for orphans. One `ObjectCreateMany` per iod, all at once,
    /// makes them; a handle whose object some iod did not make (it was there: an orphan of an
    /// older mds) is not pooled, and the objects made of it elsewhere are removed.
    fn precreate(&self, count: usize) -> Result<usize, RemoteError> {
        let servers: Vec<u16> = (0..self.namespace.server_count()).collect();
        check_servers_on(&self.background_iods, &servers).map_err(|(_, error)| net_error(error))?;
        let handles: Vec<u64> = self.namespace.reserve_handles(count as u64)?.collect();
        let mut pooled = 0;
        // In chunks, so that the first objects are there for creates while the rest are made.
        for chunk in handles.chunks(PRECREATE_CHUNK) {
            pooled += self.precreate_chunk(&servers, chunk)?;
        }
        Ok(pooled)
    }

    /// One `ObjectCreateMany` of `handles` (reserved) to every iod of `servers` at once.
    fn precreate_chunk(&self, servers: &[u16], handles: &[u64]) -> Result<usize, RemoteError> {
        let set_creating = |entering: bool, handles: &[u64]| {
            let mut creating = self.creating.lock().unwrap_or_else(PoisonError::into_inner);
            for handle in handles {
                if entering {
                    creating.insert(*handle);
                } else {
                    creating.remove(handle);
                }
            }
        };
        set_creating(true, handles);
        let request = ObjectCreateMany {
            namespace: self.namespace.namespace_id(),
            cache_unit_bytes: self.namespace.default_cache_unit(),
            handles: handles.to_vec(),
        };
        let replies = iod_call_each_on(&self.background_iods, servers, |_| request.clone());
        let mut made_on: HashMap<u64, Vec<u16>> = HashMap::with_capacity(handles.len());
        let mut failure = None;
        for (&server, reply) in servers.iter().zip(replies) {
            match reply {
                Ok(reply) => {
                    for handle in reply.created {
                        made_on.entry(handle).or_default().push(server);
                    }
                }
                Err(error) => {
                    failure.get_or_insert(RemoteError::new(
                        error.code,
                        format!("making objects ahead: iod {server}: {}", error.message),
                    ));
                }
            }
        }
        let mut pooled = 0;
        let mut left = Vec::new();
        for &handle in handles {
            match made_on.remove(&handle) {
                Some(made) if made.len() == servers.len() => {
                    self.precreated.add(handle);
                    pooled += 1;
                }
                made => {
                    if let Some(made) = made {
                        let _ = self.remove_objects_on(handle, &made);
                    }
                    left.push(handle);
                }
            }
        }
        set_creating(false, &left);
        match failure {
            Some(error) => Err(error),
            None => Ok(pooled),
        }
    }
}
