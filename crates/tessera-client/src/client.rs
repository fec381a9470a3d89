//! Namespace calls and the connections a client keeps.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tessera_auth::{AgentClient, Authenticator, ClusterKey, KeySigner, NoAuthenticator};
use tessera_net::{Identity, Peer, Pool};
use tessera_proto::{
    Attr, Chmod, Chown, Credentials, DirEntry, Lookup, MdsStats, MdsStatsReply, Mkdir, ObjectLeft,
    Opened, Ping, PingReply, Readdir, Rename, Renew, Request, Rmdir, ServerStats, ServerStatsReply,
    SetTimes, Stat, StatHandle, Statfs, StatfsReply, Truncate, Unlink, CHOWN_UNCHANGED,
};

use crate::config::ClusterConfig;
use crate::error::ClientError;
use crate::options::{ClientOptions, OpenMode};

pub(crate) struct Inner {
    pub(crate) mds: Pool,
    /// Shared with the client cache's DEMOTE sender thread.
    pub(crate) iods: Arc<Pool>,
    /// The client cache (`ClientOptions::cache_bytes`), if any.
    pub(crate) cache: Option<crate::cache::BlockCache>,
}

/// The environment variable naming the agent socket, over the cluster file's.
pub const AGENT_ENV: &str = "TESSERA_AGENT";

/// Where this process's credentials come from: `$TESSERA_AGENT`, else the cluster key if
/// this process can read it, else the agent the cluster file names.
fn authenticator(config: &ClusterConfig, timeout: Duration) -> Arc<dyn Authenticator> {
    if let Some(socket) = std::env::var_os(AGENT_ENV) {
        return Arc::new(AgentClient::new(socket.into(), timeout));
    }
    if let Some(key) = config
        .auth
        .key
        .as_deref()
        .filter(|key| ClusterKey::readable(key))
    {
        return match KeySigner::from_key_file(key) {
            Ok(signer) => Arc::new(signer),
            Err(err) => Arc::new(NoAuthenticator(err.to_string())),
        };
    }
    if let Some(agent) = &config.auth.agent {
        return Arc::new(AgentClient::new(agent.clone(), timeout));
    }
    Arc::new(NoAuthenticator(format!(
        "no credential: this process cannot read the cluster key{} and no agent socket is named (cluster file [auth] agent, or ${AGENT_ENV})",
        config
            .auth
            .key
            .as_ref()
            .map(|key| format!(" {}", key.display()))
            .unwrap_or_default()
    )))
}

/// A connection to one Tessera cluster. Cheap to clone; safe to share between threads.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("mds", &self.inner.mds.peers()[0].address)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the cluster described by `config`. Connections are made on first use.
    pub fn new(config: &ClusterConfig, options: &ClientOptions) -> Self {
        Self::with_authenticator(config, options, authenticator(config, options.timeout))
    }

    /// A client whose every connection and namespace call speaks with the credentials of
    /// `auth`, instead of this process's own (a mount daemon holding the key acts for each
    /// of its callers this way: one client per caller).
    pub fn with_authenticator(
        config: &ClusterConfig,
        options: &ClientOptions,
        auth: Arc<dyn Authenticator>,
    ) -> Self {
        let flusher_auth = auth.clone();
        let mds = Pool::new(
            vec![Peer::tcp(
                format!("mds at {}", config.mds.address),
                config.mds.address.clone(),
                Identity::MDS,
            )],
            options.timeout,
            auth.clone(),
        )
        .with_cluster_id(config.cluster_id)
        .with_reply_spin(options.reply_spin);
        let iods = Pool::new(
            config
                .iods
                .iter()
                .map(|iod| Peer {
                    name: format!("iod {} at {}", iod.index, iod.address),
                    address: iod.address.clone(),
                    local: iod.local.clone().filter(|_| options.local),
                    expect: Identity::iod(iod.index),
                })
                .collect(),
            options.timeout,
            auth,
        )
        .with_cluster_id(config.cluster_id)
        .with_reply_spin(options.reply_spin);
        #[cfg(feature = "ofi")]
        if let Some(fabric) = crate::fabric::open(config, options) {
            iods.set_fabric(Some(fabric));
        }
        // The client's own choice, else the cluster file's (checked when it was loaded).
        let cache_bytes = options
            .cache_bytes
            .or_else(|| config.client.cache_bytes().ok().flatten())
            .unwrap_or(0);
        let demote = options
            .demote
            .or_else(|| config.client.demote().ok().flatten())
            .unwrap_or_default();
        let write_back = options
            .write_back
            .or(config.client.write_back)
            .unwrap_or(false);
        if write_back && cache_bytes == 0 {
            tracing::warn!("client write-back is off: it needs a client cache (cache_bytes)");
        }
        let cache = (cache_bytes > 0).then(|| {
            // Buffered writes go out over a client of their own, without a cache.
            let flusher = write_back.then(|| {
                let plain = ClientOptions {
                    cache_bytes: Some(0),
                    write_back: Some(false),
                    ..options.clone()
                };
                Self::with_authenticator(config, &plain, flusher_auth)
            });
            crate::cache::BlockCache::new(cache_bytes, demote, flusher)
        });
        Self {
            inner: Arc::new(Inner {
                mds,
                iods: Arc::new(iods),
                cache,
            }),
        }
    }

    /// Registers the memory of every later one-sided transfer through `registry` (`None`:
    /// no registration, the default). Connections made after this call use it too.
    pub fn set_registration(&self, registry: Option<Arc<tessera_reg::Registry>>) {
        let registration = registry.map(|registry| {
            Arc::new(crate::registration::RegistryRegistration(registry))
                as Arc<dyn tessera_net::Registration>
        });
        self.inner.iods.set_registration(registration);
    }

    /// What the client cache did (`None` without one: `ClientOptions::cache_bytes` 0).
    pub fn cache_stats(&self) -> Option<crate::cache::ClientCacheStats> {
        self.inner
            .cache
            .as_ref()
            .map(crate::cache::BlockCache::stats)
    }

    /// What the client cache's write-back did (`None` without one: `ClientOptions::write_back`).
    pub fn write_back_stats(&self) -> Option<crate::cache::WriteBackStats> {
        self.inner
            .cache
            .as_ref()
            .and_then(crate::cache::BlockCache::write_back_stats)
    }

    /// Test-only: while `hold` is set, this client does not answer lease revocations, as a
    /// client that stopped would not (each held at most 60 s). Without a cache, nothing.
    #[doc(hidden)]
    pub fn hold_lease_answers(&self, hold: bool) {
        if let Some(cache) = &self.inner.cache {
            cache.hold_answers(hold);
        }
    }

    /// What the fabric's memory registrations have done (`None` without a fabric).
    pub fn fabric_stats(&self) -> Option<tessera_net::fabric::LendStats> {
        self.inner.iods.fabric().map(|fabric| fabric.stats())
    }

    /// Forgets every fabric registration overlapping `memory`; returns how many were dropped
    /// (0 without a fabric). Registrations of lent memory are cached across calls and watched
    /// for unmaps (`fabric_stats().watching`), so a registration over memory unmapped or
    /// discarded since is never reused; where the kernel offers no watch, call this before
    /// freeing or unmapping memory that was written or read with a fabric.
    pub fn forget_memory(&self, memory: &[u8]) -> Result<usize, ClientError> {
        let Some(fabric) = self.inner.iods.fabric() else {
            return Ok(0);
        };
        fabric
            .invalidate(memory.as_ptr() as usize, memory.len())
            .map_err(|detail| {
                ClientError::Net(tessera_net::NetError::Register {
                    peer: format!("the {} fabric", fabric.provider()),
                    detail: format!("forgetting registrations: {detail}"),
                })
            })
    }

    /// A client of the cluster in the cluster file at `path`, with default options.
    pub fn from_file(path: &Path) -> Result<Self, ClientError> {
        Ok(Self::new(
            &ClusterConfig::load(path)?,
            &ClientOptions::default(),
        ))
    }

    pub(crate) fn mds_call<R: Request>(&self, request: &R) -> Result<R::Reply, ClientError> {
        Ok(self
            .inner
            .mds
            .with(0, |connection| connection.call(request))?)
    }

    /// As [`Client::mds_call`] for calls that must not be repeated (their first attempt may
    /// have taken effect before the connection died): no retry on a dead connection.
    pub(crate) fn mds_call_once<R: Request>(&self, request: &R) -> Result<R::Reply, ClientError> {
        Ok(self
            .inner
            .mds
            .with_once(0, |connection| connection.call(request))?)
    }

    /// This process's credential (from the key or the agent), renewed before it expires.
    pub(crate) fn credentials(&self) -> Result<Credentials, ClientError> {
        self.inner.mds.authenticator().credentials().map_err(|err| {
            ClientError::Net(tessera_net::NetError::Auth {
                peer: self.inner.mds.peers()[0].name.clone(),
                detail: err.to_string(),
            })
        })
    }

    /// Asks the mds and every iod who they are, in that order ("mds", then "iod N").
    pub fn ping_all(&self) -> Vec<(String, Result<PingReply, ClientError>)> {
        self.ping_all_timed()
            .into_iter()
            .map(|(name, _, reply)| (name, reply))
            .collect()
    }

    /// [`Client::ping_all`], with the time each server took to answer (a connection's
    /// handshake included when the ping opened it).
    pub fn ping_all_timed(
        &self,
    ) -> Vec<(String, std::time::Duration, Result<PingReply, ClientError>)> {
        let timed = |call: &dyn Fn() -> Result<PingReply, ClientError>| {
            let started = std::time::Instant::now();
            let reply = call();
            (started.elapsed(), reply)
        };
        let (elapsed, reply) = timed(&|| {
            self.inner
                .mds
                .with(0, |connection| connection.call(&Ping {}))
                .map_err(ClientError::from)
        });
        let mut replies = vec![(self.inner.mds.peers()[0].name.clone(), elapsed, reply)];
        for (index, peer) in self.inner.iods.peers().iter().enumerate() {
            let (elapsed, reply) = timed(&|| {
                self.inner
                    .iods
                    .with(index, |connection| connection.call(&Ping {}))
                    .map_err(ClientError::from)
            });
            replies.push((peer.name.clone(), elapsed, reply));
        }
        replies
    }

    /// Sets the access and modification times of `path`, as `utimensat(2)`: a time given
    /// needs the owner (or root); both [`SetTime::Now`] need write permission on the file. A
    /// file's mtime then shows the time set until its data next changes.
    pub fn set_times(
        &self,
        path: &str,
        atime: SetTime,
        mtime: SetTime,
    ) -> Result<Attr, ClientError> {
        self.mds_call(&SetTimes {
            credentials: self.credentials()?,
            path: path.to_owned(),
            atime_ns: atime.wire(),
            mtime_ns: mtime.wire(),
        })
    }

    /// A null request to the mds and its reply: the metadata path's round-trip floor.
    pub fn ping_mds(&self) -> Result<PingReply, ClientError> {
        self.mds_call(&Ping {})
    }

    /// A null request to iod `index` and its reply: the data path's round-trip floor.
    pub fn ping_iod(&self, index: usize) -> Result<PingReply, ClientError> {
        self.call_iod(index, &Ping {})
    }

    /// The mds's group commit counters and inode count (`tessera bench meta`).
    pub fn mds_stats(&self) -> Result<MdsStatsReply, ClientError> {
        self.mds_call(&MdsStats {
            credentials: self.credentials()?,
        })
    }

    /// The storage counters and cost model of iod `index` (its Active Data Sieving decisions).
    pub fn server_stats(&self, index: usize) -> Result<ServerStatsReply, ClientError> {
        self.call_iod(index, &ServerStats {})
    }

    /// Capacity and use of the file system under iod `index`'s data directory, and the
    /// bytes its objects hold (`tessera df`).
    pub fn server_statfs(&self, index: usize) -> Result<StatfsReply, ClientError> {
        self.call_iod(index, &Statfs {})
    }

    /// One server-level `request` to iod `index` (an error naming the iod if there is none).
    fn call_iod<R: Request>(&self, index: usize, request: &R) -> Result<R::Reply, ClientError> {
        if index >= self.server_count() {
            return Err(ClientError::Config {
                path: format!("iod {index}"),
                detail: format!("the cluster has {} iods", self.server_count()),
            });
        }
        self.inner
            .iods
            .with(index, |connection| connection.call(request))
            .map_err(ClientError::from)
    }

    /// Number of I/O servers in the cluster.
    pub fn server_count(&self) -> usize {
        self.inner.iods.peers().len()
    }

    /// Attributes of `path`, with the file size computed from the servers.
    pub fn stat(&self, path: &str) -> Result<Attr, ClientError> {
        self.mds_call(&Stat {
            credentials: self.credentials()?,
            path: path.to_owned(),
        })
    }

    pub(crate) fn stat_handle(
        &self,
        handle: u64,
        capability: tessera_proto::Capability,
    ) -> Result<Attr, ClientError> {
        self.mds_call(&StatHandle {
            credentials: self.credentials()?,
            handle,
            capability,
        })
    }

    /// Creates a directory.
    pub fn mkdir(&self, path: &str, mode: u32) -> Result<Attr, ClientError> {
        self.mds_call_once(&Mkdir {
            credentials: self.credentials()?,
            path: path.to_owned(),
            mode,
        })
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, path: &str) -> Result<(), ClientError> {
        self.mds_call_once(&Rmdir {
            credentials: self.credentials()?,
            path: path.to_owned(),
        })
        .map(drop)
    }

    /// Removes a file and its data. The name goes even when an object cannot be removed (its
    /// iod down, or the object already missing); [`Client::unlink_reporting`] says which.
    pub fn unlink(&self, path: &str) -> Result<(), ClientError> {
        self.unlink_reporting(path).map(drop)
    }

    /// Removes a file, as [`Client::unlink`], and returns the objects left behind: one entry
    /// per iod whose object the mds could not remove, with the iod's error (see
    /// `docs/SEMANTICS.md` on what a failure leaves).
    pub fn unlink_reporting(&self, path: &str) -> Result<Vec<ObjectLeft>, ClientError> {
        self.mds_call_once(&Unlink {
            credentials: self.credentials()?,
            path: path.to_owned(),
        })
        .map(|reply| reply.left)
    }

    /// Moves `source` to `target`, replacing a file (or empty directory) there.
    pub fn rename(&self, source: &str, target: &str) -> Result<(), ClientError> {
        self.mds_call_once(&Rename {
            credentials: self.credentials()?,
            source: source.to_owned(),
            target: target.to_owned(),
        })
        .map(drop)
    }

    /// Sets the size of a file.
    pub fn truncate(&self, path: &str, size: u64) -> Result<Attr, ClientError> {
        self.mds_call(&Truncate {
            credentials: self.credentials()?,
            path: path.to_owned(),
            size,
        })
    }

    /// Sets the permission bits (`0o7777`) of `path`: only its owner or root may.
    pub fn chmod(&self, path: &str, mode: u32) -> Result<Attr, ClientError> {
        self.mds_call(&Chmod {
            credentials: self.credentials()?,
            path: path.to_owned(),
            mode,
        })
    }

    /// Sets the owner and/or group of `path` (`None` leaves one unchanged): only root may
    /// change the owner; the owner may change the group to one of their own groups.
    pub fn chown(
        &self,
        path: &str,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<Attr, ClientError> {
        self.mds_call(&Chown {
            credentials: self.credentials()?,
            path: path.to_owned(),
            uid: uid.unwrap_or(CHOWN_UNCHANGED),
            gid: gid.unwrap_or(CHOWN_UNCHANGED),
        })
    }

    /// Lists a directory, in name order.
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>, ClientError> {
        let mut entries = Vec::new();
        let mut after = String::new();
        loop {
            let (page, more) = self.readdir_page(path, &after)?;
            entries.extend(page);
            match entries.last() {
                Some(last) if more => after.clone_from(&last.name),
                _ => return Ok(entries),
            }
        }
    }

    /// One page of a directory's listing: at most `READDIR_ENTRIES_MAX` entries in name
    /// order, those after the name `after` ("" for the first page), and whether more follow.
    /// A caller that lists page by page holds one page at a time, whatever the directory's
    /// size; an entry made or removed between two pages may or may not be listed, and no name
    /// is listed twice.
    pub fn readdir_page(
        &self,
        path: &str,
        after: &str,
    ) -> Result<(Vec<DirEntry>, bool), ClientError> {
        let page = self.mds_call(&Readdir {
            credentials: self.credentials()?,
            path: path.to_owned(),
            after: after.to_owned(),
        })?;
        Ok((page.entries, page.more))
    }

    /// A fresh capability for an open file, in exchange for the one it `held` (expired or
    /// not): the mds renews only a capability of this caller for this handle.
    pub(crate) fn renew(
        &self,
        handle: u64,
        held: &tessera_proto::Capability,
        mode: OpenMode,
    ) -> Result<Opened, ClientError> {
        let (read, write) = mode.rights();
        self.mds_call(&Renew {
            credentials: self.credentials()?,
            handle,
            capability: held.clone(),
            read,
            write,
        })
    }

    /// Resolves a path to its attributes (size 0; see [`Client::stat`]) with no access check
    /// beyond searching its directories.
    pub fn lookup(&self, path: &str) -> Result<Attr, ClientError> {
        self.mds_call(&Lookup {
            credentials: self.credentials()?,
            path: path.to_owned(),
        })
    }
}

/// One time of [`Client::set_times`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    /// Leave it as it is (`UTIME_OMIT`).
    Omit,
    /// The mds's clock's now (`UTIME_NOW`).
    Now,
    /// This many ns since the epoch (below `TIME_NOW`).
    At(u64),
}

impl SetTime {
    fn wire(self) -> u64 {
        match self {
            Self::Omit => tessera_proto::TIME_OMIT,
            Self::Now => tessera_proto::TIME_NOW,
            Self::At(ns) => ns.min(tessera_proto::TIME_NOW - 1),
        }
    }
}
