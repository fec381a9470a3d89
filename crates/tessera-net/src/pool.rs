//! Lazily connected, reusable connections to a fixed list of servers.
//!
//! Both the client (to the mds and the iods) and the mds (to the iods) keep one connection per
//! server. A connection is made on first use, reused while it works, and dropped after any
//! failure that may have left the stream out of step, so the next call starts clean. A
//! process forked from the one that connected gets connections of its own on its first call.
//!
//! A pool opens its connections through a [`Dial`]: [`SocketDial`] (TCP, or the server's Unix
//! socket on this host) for [`Pool::new`]; tests dial scripted streams instead
//! ([`Pool::with_dial`]) to check what is discarded, reused and retried.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tessera_auth::Authenticator;

use tessera_proto::Request;

use crate::client::{Connection, Registration};
use crate::error::NetError;
use crate::fabric::Fabric;
use crate::peer::{Expected, Peer};
use crate::stream::{ByteStream, Stream};

/// Opens a pool's connections: a new connection to `peer` that has passed its handshake and
/// is `expect`.
pub trait Dial<S: ByteStream>: Send + Sync + std::fmt::Debug {
    /// Connects to `peer`; connecting, and every later send or receive, gives up after
    /// `timeout`.
    fn dial(
        &self,
        peer: &Peer,
        timeout: Duration,
        auth: &dyn Authenticator,
        expect: Expected,
    ) -> Result<Connection<S>, NetError>;
}

/// Dials the server's Unix socket when it has one on this host (TCP as the fallback), or TCP.
#[derive(Debug, Default, Clone, Copy)]
pub struct SocketDial;

impl Dial<Stream> for SocketDial {
    fn dial(
        &self,
        peer: &Peer,
        timeout: Duration,
        auth: &dyn Authenticator,
        expect: Expected,
    ) -> Result<Connection, NetError> {
        match &peer.local {
            Some(path) => Connection::connect_local(
                peer.name.clone(),
                path,
                &peer.address,
                timeout,
                auth,
                Some(expect),
            ),
            None => Connection::connect(
                peer.name.clone(),
                &peer.address,
                timeout,
                auth,
                Some(expect),
            ),
        }
    }
}

/// Connections to a list of servers, at most one per server.
#[derive(Debug)]
pub struct Pool<S: ByteStream = Stream> {
    peers: Vec<Peer>,
    connections: Vec<Mutex<Option<Connection<S>>>>,
    /// Opens each new connection.
    dial: Box<dyn Dial<S>>,
    timeout: Duration,
    registration: Mutex<Option<Arc<dyn Registration>>>,
    fabric: Mutex<Option<Arc<dyn Fabric>>>,
    /// Answers each new connection's handshake.
    auth: Arc<dyn Authenticator>,
    /// The cluster every server must belong to, when known (the cluster file's
    /// `cluster_id`, or the key's).
    cluster_id: Option<u64>,
    /// How long each connection waits for a reply on the CPU before blocking
    /// ([`Connection::set_reply_spin`]).
    reply_spin: Duration,
    /// After a server fails to answer, how long it is not asked again (`None`: always
    /// asked). The mds sets it for its iods, so requests queued behind one that found an iod
    /// silent do not each wait a timeout in turn.
    retry_after: Option<Duration>,
    /// Per server: until when it is not asked, and why.
    silent_until: Vec<Mutex<Option<(std::time::Instant, String)>>>,
}

/// A connection checked out of a pool; dropped from the pool with [`Lease::discard`].
#[derive(Debug)]
pub struct Lease<'a, S: ByteStream = Stream> {
    slot: MutexGuard<'a, Option<Connection<S>>>,
    /// The connection was opened by an earlier lease (and may have died since).
    reused: bool,
}

impl<S: ByteStream> Lease<'_, S> {
    /// The connection.
    pub fn connection(&mut self) -> &mut Connection<S> {
        self.slot
            .as_mut()
            .expect("a lease always holds a connection")
    }

    /// The connection was opened by an earlier lease (it may have died since).
    pub fn reused(&self) -> bool {
        self.reused
    }

    /// Closes the connection unconditionally (an exchange on it was abandoned midway).
    pub fn discard(&mut self) {
        *self.slot = None;
    }

    /// Closes the connection if its stream may be out of step after `error`.
    pub fn discard_after(&mut self, error: &NetError) {
        if error.remote().is_none() {
            *self.slot = None;
        }
    }
}

impl Pool {
    /// A pool over `peers`; every connect, send and receive gives up after `timeout`, and
    /// every new connection authenticates through `auth`.
    pub fn new(peers: Vec<Peer>, timeout: Duration, auth: Arc<dyn Authenticator>) -> Self {
        Self::with_dial(peers, timeout, auth, Box::new(SocketDial))
    }
}

impl<S: ByteStream> Pool<S> {
    /// A pool over `peers` whose connections `dial` opens (as [`Pool::new`] otherwise).
    pub fn with_dial(
        peers: Vec<Peer>,
        timeout: Duration,
        auth: Arc<dyn Authenticator>,
        dial: Box<dyn Dial<S>>,
    ) -> Self {
        let connections = peers.iter().map(|_| Mutex::new(None)).collect();
        let peer_count = peers.len();
        Self {
            peers,
            connections,
            dial,
            timeout,
            registration: Mutex::new(None),
            fabric: Mutex::new(None),
            auth,
            cluster_id: None,
            reply_spin: Duration::ZERO,
            retry_after: None,
            silent_until: (0..peer_count).map(|_| Mutex::new(None)).collect(),
        }
    }

    /// After a server fails to answer, refuses further calls to it for `retry_after` without
    /// asking it (with `NetError::NotAsked`).
    #[must_use]
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }

    /// Refuses a call to server `index` while it is marked silent.
    fn check_silent(&self, index: usize) -> Result<(), NetError> {
        let held = self.silent_until[index]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*held {
            Some((until, why)) if std::time::Instant::now() < *until => Err(NetError::NotAsked {
                peer: self.peers[index].name.clone(),
                detail: why.clone(),
                seconds: until
                    .saturating_duration_since(std::time::Instant::now())
                    .as_secs()
                    + 1,
            }),
            _ => Ok(()),
        }
    }

    /// Marks server `index` silent after a failure that took a timeout, or answering after
    /// anything else.
    fn note<T>(&self, index: usize, result: &Result<T, NetError>) {
        let Some(retry_after) = self.retry_after else {
            return;
        };
        // Only a failure that took a timeout to find counts: a refused connect costs nothing
        // to repeat, and the server may be back a moment later.
        let slow = |error: &NetError| match error {
            NetError::TimedOut { .. } => true,
            NetError::Connect { source, .. } => matches!(
                source.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ),
            _ => false,
        };
        let mark = match result {
            Err(error) if slow(error) => {
                Some((std::time::Instant::now() + retry_after, error.to_string()))
            }
            Err(NetError::NotAsked { .. }) => return,
            _ => None,
        };
        *self.silent_until[index]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = mark;
    }

    /// Who must answer as server `index`.
    pub fn expected(&self, index: usize) -> Expected {
        Expected {
            identity: self.peers[index].expect,
            cluster_id: self.cluster_id,
        }
    }

    /// Has every connection wait up to `spin` on the CPU for each reply before blocking
    /// ([`Connection::set_reply_spin`]).
    #[must_use]
    pub fn with_reply_spin(mut self, spin: Duration) -> Self {
        self.reply_spin = spin;
        self
    }

    /// Refuses servers of any other cluster than `cluster_id`.
    #[must_use]
    pub fn with_cluster_id(mut self, cluster_id: Option<u64>) -> Self {
        self.cluster_id = cluster_id;
        self
    }

    /// The source of this pool's credentials.
    pub fn authenticator(&self) -> &Arc<dyn Authenticator> {
        &self.auth
    }

    /// Registers the memory of one-sided transfers on every connection through
    /// `registration` (`None`: no registration).
    pub fn set_registration(&self, registration: Option<Arc<dyn Registration>>) {
        *self
            .registration
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = registration;
    }

    /// Moves the data of one-sided transfers on every connection over `fabric` (`None`: the
    /// servers reach this process directly where they can).
    pub fn set_fabric(&self, fabric: Option<Arc<dyn Fabric>>) {
        *self
            .fabric
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fabric;
    }

    /// The fabric one-sided transfers go over, if one is set.
    pub fn fabric(&self) -> Option<Arc<dyn Fabric>> {
        self.fabric
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether the connection to server `index` moves data one-sidedly (connecting if needed).
    pub fn one_sided(&self, index: usize) -> Result<bool, NetError> {
        Ok(self.lease(index)?.connection().one_sided())
    }

    /// The servers of the pool.
    pub fn peers(&self) -> &[Peer] {
        &self.peers
    }

    /// The per-operation timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A new connection to server `index` of its own, outside the pool (a callback channel
    /// a caller keeps for a long time).
    pub fn dial_separate(&self, index: usize) -> Result<Connection<S>, NetError> {
        self.dial.dial(
            &self.peers[index],
            self.timeout,
            &*self.auth,
            self.expected(index),
        )
    }

    /// Checks out the connection to server `index`, connecting if needed.
    pub fn lease(&self, index: usize) -> Result<Lease<'_, S>, NetError> {
        let mut slot = self.connections[index]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Checked after the wait for the connection: callers queued behind one that found the
        // server silent are refused at once rather than each waiting a timeout.
        self.check_silent(index)?;
        if slot.as_ref().is_some_and(Connection::inherited) {
            // This process was forked from the one that connected: open its own.
            if let Some(inherited) = slot.take() {
                inherited.abandon();
            }
        }
        if slot.as_ref().is_some_and(Connection::closed_by_peer) {
            // The server closed it while it sat here (an idle connection): open a new one
            // rather than fail the next request, which may not be safe to repeat.
            *slot = None;
        }
        let reused = slot.is_some();
        if slot.is_none() {
            let connected = self.dial.dial(
                &self.peers[index],
                self.timeout,
                &*self.auth,
                self.expected(index),
            );
            self.note(index, &connected);
            *slot = Some(connected?);
        }
        let registration = self
            .registration
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let fabric = self
            .fabric
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let connection = slot.as_mut().expect("connected above");
        connection.set_registration(registration);
        connection.set_reply_spin(self.reply_spin);
        // Probes the fabric on a connection's first lease with it; a broken connection goes.
        if let Err(err) = connection.set_fabric(fabric) {
            *slot = None;
            return Err(err);
        }
        Ok(Lease { slot, reused })
    }

    /// Runs a non-idempotent `exchange` once on the connection to server `index`, dropping
    /// the connection if the exchange failed in a way that may leave the stream out of step.
    pub fn with_once<T>(
        &self,
        index: usize,
        exchange: impl FnOnce(&mut Connection<S>) -> Result<T, NetError>,
    ) -> Result<T, NetError> {
        let mut lease = self.lease(index)?;
        let result = exchange(lease.connection());
        self.note(index, &result);
        if let Err(error) = &result {
            lease.discard_after(error);
        }
        result
    }

    /// Asks each server of `calls` its request at once: every request is sent before any
    /// reply is read, so the servers work side by side and the whole costs about one round
    /// trip, not one per server. `calls` name distinct servers in increasing order (the order
    /// every caller takes their connections in, so two callers never wait on each other's).
    /// The replies come back in the order of `calls`. For idempotent requests only: as with
    /// [`Pool::with`], a kept connection found dead is replaced and its request asked again.
    pub fn call_each<R: Request>(&self, calls: &[(usize, &R)]) -> Vec<Result<R::Reply, NetError>> {
        debug_assert!(calls.windows(2).all(|pair| pair[0].0 < pair[1].0));
        let mut leases: Vec<Result<Lease<'_, S>, NetError>> =
            calls.iter().map(|&(index, _)| self.lease(index)).collect();
        let sent: Vec<Result<(), NetError>> = leases
            .iter_mut()
            .zip(calls)
            .map(|(lease, &(_, request))| match lease {
                Ok(lease) => lease.connection().send_request(request).map(drop),
                Err(_) => Ok(()),
            })
            .collect();
        // Per call: the reply, the error, or `None` for a kept connection found dead.
        let mut replies: Vec<Option<Result<R::Reply, NetError>>> = Vec::with_capacity(calls.len());
        for ((lease, sent), &(index, _)) in leases.into_iter().zip(sent).zip(calls) {
            replies.push(match lease {
                Ok(mut lease) => {
                    let result = sent.and_then(|()| lease.connection().recv_reply_to::<R>());
                    self.note(index, &result);
                    match result {
                        Err(NetError::Io { .. }) if lease.reused => {
                            lease.discard();
                            None
                        }
                        Err(error) => {
                            lease.discard_after(&error);
                            Some(Err(error))
                        }
                        ok => Some(ok),
                    }
                }
                Err(error) => Some(Err(error)),
            });
        }
        replies
            .into_iter()
            .zip(calls)
            .map(|(result, &(index, request))| {
                result
                    .unwrap_or_else(|| self.with_once(index, |connection| connection.call(request)))
            })
            .collect()
    }

    /// Runs `exchange` on the connection to server `index`, dropping the connection if the
    /// exchange failed in a way that may leave the stream out of step. A kept connection that
    /// turns out to be dead (the server restarted since it was opened) is replaced and the
    /// exchange run once more on a fresh one; callers pass only idempotent exchanges.
    pub fn with<T>(
        &self,
        index: usize,
        mut exchange: impl FnMut(&mut Connection<S>) -> Result<T, NetError>,
    ) -> Result<T, NetError> {
        let mut lease = self.lease(index)?;
        let reused = lease.reused;
        let result = exchange(lease.connection());
        self.note(index, &result);
        match result {
            Err(NetError::Io { .. }) if reused => {
                lease.discard();
                drop(lease);
                let mut lease = self.lease(index)?;
                let result = exchange(lease.connection());
                self.note(index, &result);
                if let Err(error) = &result {
                    lease.discard_after(error);
                }
                result
            }
            Err(error) => {
                lease.discard_after(&error);
                Err(error)
            }
            ok => ok,
        }
    }
}

#[cfg(test)]
mod tests;
