//! Read leases for clients that cache file blocks (issue 20; docs/SEMANTICS.md §3.2).
//!
//! A client that caches blocks of a file holds a read lease on the file's object from every
//! iod holding part of it. Before a write, truncate or remove of an object is applied, the
//! iod revokes every lease on it: a [`LeaseRevoke`](tessera_proto::LeaseRevoke) goes out on
//! each holder's callback channel (a connection the client opened with `LeaseListen`), and
//! the write waits until the holder answered — having dropped what it cached — or until the
//! lease would have run out anyway, whichever comes first. So a client that stops answering
//! holds up a write at most one lease time. While a write is under way, no new lease on the
//! object is granted (the client is told `lease_ms` 0 and reads without caching), so no
//! client can cache bytes the write is about to replace.
//!
//! A client is known by the id it picked *and* the uid its connections authenticated as
//! ([`ClientKey`]): another user who learns or guesses the id names a different client, so
//! it can neither take over a callback channel nor demote bytes under someone else's lease.
//!
//! A client that buffers writes (the client cache's write-back, docs/SEMANTICS.md §3.3) holds
//! a *write* lease on a range of the object's bytes instead: no other client holds any lease
//! that conflicts with it — a read lease on the object, or a write lease on an overlapping
//! range — and before any read of bytes in its range, any write or truncate of them, or a stat
//! of the object is served, the iod revokes it the same way; the holder writes what it
//! buffered before it answers. A write lease is granted on the largest gap around the asked
//! range that no other client's write lease covers; when granting it had to revoke another
//! client's write lease, the gap starts at the asked range (so two writers of neighbouring
//! ranges settle on one boundary instead of taking the whole object from each other in turn).
//!
//! Like NFSv4 delegations and Lustre's LDLM locks, a lease is recalled by the server over a
//! channel of its own and bounded by time; a revoked client simply asks again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tessera_proto::limits::{
    LEASES_MAX, LEASE_LISTENERS_MAX, LEASE_MS_MAX, LEASE_MS_MIN, LEASE_REVOCATIONS_QUEUED_MAX,
};
use tessera_proto::{ErrorCode, RemoteError};
use tokio::sync::{mpsc, oneshot};

/// A caching client as the iod knows it: the id it picked, under the uid its connection
/// authenticated as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientKey {
    /// The uid of the client's credential (`ServerConnection::credentials`).
    pub uid: u32,
    /// The id the client sent (`LeaseListen`, `LeaseAcquire`, `DemoteOffer`, `Demote`).
    pub id: u64,
}

impl ClientKey {
    /// The client `id` speaking for `uid`.
    pub fn new(uid: u32, id: u64) -> Self {
        Self { uid, id }
    }
}

/// One revocation for a callback channel to deliver: the object, and whom to tell once the
/// client answered.
#[derive(Debug)]
pub struct Revocation {
    /// The object whose lease ends.
    pub handle: u64,
    /// Told when the client answered.
    pub answered: oneshot::Sender<()>,
}

/// A client's callback channel: where its revocations go.
#[derive(Debug)]
struct Listener {
    /// Which `LeaseListen` connection this is (a later one replaces it).
    generation: u64,
    revocations: mpsc::Sender<Revocation>,
}

/// One client's lease on one object.
#[derive(Debug, Clone, Copy)]
struct Held {
    expiry: Instant,
    /// Whether the client demotes what it evicts.
    demotes: bool,
    /// Names the lease (kept by renewals; a new grant gets a new one).
    id: u64,
    /// A write lease's byte range of the object, `[start, end)`; `None` for a read lease.
    write: Option<(u64, u64)>,
    /// A write lease's group (0: none): leases of one group do not conflict.
    group: u64,
}

impl Held {
    /// Whether this lease keeps a write lease of `group` on bytes `range` from being held
    /// by another client at the same time.
    fn conflicts_with_write(&self, range: (u64, u64), group: u64) -> bool {
        match self.write {
            None => true,
            Some(held) => overlaps(held, range) && (group == 0 || self.group != group),
        }
    }
}

/// Every byte of an object: the range of a truncate, remove, stat or collective.
pub const WHOLE: (u64, u64) = (0, u64::MAX);

fn overlaps((a, b): (u64, u64), (c, d): (u64, u64)) -> bool {
    a < d && c < b
}

/// A write lease granted: its length in milliseconds (0: none now), its id, and its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteGrant {
    /// How long it lasts, in milliseconds.
    pub lease_ms: u32,
    /// Its id (kept by a renewal of the same range).
    pub id: u64,
    /// The bytes it covers, `[start, end)`.
    pub range: (u64, u64),
}

#[derive(Debug, Default)]
struct State {
    listeners: HashMap<ClientKey, Listener>,
    next_generation: u64,
    /// The leases of each object, by client.
    leases: HashMap<u64, HashMap<ClientKey, Held>>,
    /// The id of the last lease granted.
    last_lease_id: u64,
    held: usize,
    /// Writes (and truncates, removes) under way, per object.
    writing: HashMap<u64, usize>,
    revocations: u64,
    revocations_unanswered: u64,
}

/// What the lease table counts (exported as metrics, and for tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseStats {
    /// Callback channels open.
    pub listeners: usize,
    /// Leases held.
    pub held: usize,
    /// Revocations sent.
    pub revocations: u64,
    /// Revocations the client did not answer before its lease ran out.
    pub revocations_unanswered: u64,
}

/// The read leases of one iod.
#[derive(Debug)]
pub struct Leases {
    lease: Duration,
    state: Mutex<State>,
}

/// Held while a write (truncate, remove) of an object is applied: no lease on it is granted
/// meanwhile.
#[must_use = "the write must be applied while this is held"]
#[derive(Debug)]
pub struct Writing {
    leases: Arc<Leases>,
    handle: u64,
}

impl Drop for Writing {
    fn drop(&mut self) {
        let mut state = self.leases.lock();
        if let Some(count) = state.writing.get_mut(&self.handle) {
            *count -= 1;
            if *count == 0 {
                state.writing.remove(&self.handle);
            }
        }
    }
}

impl Leases {
    /// A table whose leases last `lease_ms` milliseconds (within `LEASE_MS_MIN..=MAX`).
    pub fn new(lease_ms: u32) -> Result<Self, String> {
        if !(LEASE_MS_MIN..=LEASE_MS_MAX).contains(&lease_ms) {
            return Err(format!(
                "lease of {lease_ms} ms: give {LEASE_MS_MIN} to {LEASE_MS_MAX} ms"
            ));
        }
        Ok(Self {
            lease: Duration::from_millis(u64::from(lease_ms)),
            state: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lease time, in milliseconds.
    pub fn lease_ms(&self) -> u32 {
        u32::try_from(self.lease.as_millis()).unwrap_or(u32::MAX)
    }

    /// Opens the callback channel of `client` (replacing an earlier one, whose leases
    /// stay): its generation, and the revocations to deliver on it.
    pub fn listen(
        &self,
        client: ClientKey,
    ) -> Result<(u64, mpsc::Receiver<Revocation>), RemoteError> {
        let mut state = self.lock();
        if !state.listeners.contains_key(&client) && state.listeners.len() >= LEASE_LISTENERS_MAX {
            return Err(RemoteError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "{LEASE_LISTENERS_MAX} clients already have a callback channel on this iod \
                     (LEASE_LISTENERS_MAX)"
                ),
            ));
        }
        state.next_generation += 1;
        let generation = state.next_generation;
        let (sender, receiver) = mpsc::channel(LEASE_REVOCATIONS_QUEUED_MAX);
        state.listeners.insert(
            client,
            Listener {
                generation,
                revocations: sender,
            },
        );
        Ok((generation, receiver))
    }

    /// Closes the callback channel `generation` of `client` (if it is still the current
    /// one): the client's leases end with it.
    pub fn unlisten(&self, client: ClientKey, generation: u64) {
        let mut state = self.lock();
        if state
            .listeners
            .get(&client)
            .is_none_or(|listener| listener.generation != generation)
        {
            return;
        }
        state.listeners.remove(&client);
        let mut dropped = 0;
        state.leases.retain(|_, holders| {
            dropped += usize::from(holders.remove(&client).is_some());
            !holders.is_empty()
        });
        state.held -= dropped;
    }

    /// Grants (or renews) `client` a read lease on `handle`: its length in milliseconds
    /// (0 while a write of the object is under way) and its id (the same for a renewal).
    pub fn acquire(
        &self,
        handle: u64,
        client: ClientKey,
        demotes: bool,
    ) -> Result<(u32, u64), RemoteError> {
        let mut state = self.lock();
        if !state.listeners.contains_key(&client) {
            return Err(Self::no_listener(handle, client));
        }
        if state.writing.contains_key(&handle) {
            return Ok((0, 0));
        }
        // Another client's write lease (or this client's own): read uncached; the read
        // itself revokes the others' (`begin_read`).
        if state
            .leases
            .get(&handle)
            .is_some_and(|holders| holders.values().any(|held| held.write.is_some()))
        {
            return Ok((0, 0));
        }
        let renewing = state
            .leases
            .get(&handle)
            .and_then(|holders| holders.get(&client))
            .map(|held| held.id);
        if renewing.is_none() && state.held >= LEASES_MAX {
            return Err(RemoteError::new(
                ErrorCode::LimitExceeded,
                format!("this iod holds {LEASES_MAX} leases already (LEASES_MAX)"),
            ));
        }
        let id = renewing.unwrap_or_else(|| {
            state.held += 1;
            state.last_lease_id += 1;
            state.last_lease_id
        });
        let held = Held {
            expiry: Instant::now() + self.lease,
            demotes,
            id,
            write: None,
            group: 0,
        };
        state.leases.entry(handle).or_default().insert(client, held);
        Ok((self.lease_ms(), id))
    }

    /// Grants (or renews) `client` a write lease on bytes `asked` of `handle`, first revoking
    /// every other client's lease that conflicts (waiting as [`Leases::begin_write`] does);
    /// `lease_ms` 0 while a write of the object is under way. It replaces any lease `client`
    /// held on the object (the client wrote what it buffered before it asked).
    pub async fn acquire_write(
        self: &Arc<Self>,
        handle: u64,
        client: ClientKey,
        (asked, group): ((u64, u64), u64),
    ) -> Result<WriteGrant, RemoteError> {
        let none = WriteGrant {
            lease_ms: 0,
            id: 0,
            range: (0, 0),
        };
        if asked.0 >= asked.1 {
            return Err(RemoteError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "a write lease on bytes {}..{} of object {handle:#x} covers none",
                    asked.0, asked.1
                ),
            ));
        }
        let (writing, pending, took_write) = {
            let mut state = self.lock();
            if !state.listeners.contains_key(&client) {
                return Err(Self::no_listener(handle, client));
            }
            if state.writing.contains_key(&handle) {
                return Ok(none);
            }
            let known = state
                .leases
                .get(&handle)
                .is_some_and(|holders| holders.contains_key(&client));
            if !known && state.held >= LEASES_MAX {
                return Err(RemoteError::new(
                    ErrorCode::LimitExceeded,
                    format!("this iod holds {LEASES_MAX} leases already (LEASES_MAX)"),
                ));
            }
            let took_write = state.leases.get(&handle).is_some_and(|holders| {
                holders.iter().any(|(key, held)| {
                    *key != client
                        && held.write.is_some()
                        && held.conflicts_with_write(asked, group)
                })
            });
            let pending = Self::revoke(&mut state, handle, |key, held| {
                key != client && held.conflicts_with_write(asked, group)
            });
            // No other grant on the object while the revoked answer.
            *state.writing.entry(handle).or_default() += 1;
            let writing = Writing {
                leases: Arc::clone(self),
                handle,
            };
            (writing, pending, took_write)
        };
        self.wait_answers(pending).await;
        let mut state = self.lock();
        let others: Vec<(u64, u64)> = state
            .leases
            .get(&handle)
            .map(|holders| {
                holders
                    .iter()
                    .filter(|(key, held)| **key != client && (group == 0 || held.group != group))
                    .filter_map(|(_, held)| held.write)
                    .collect()
            })
            .unwrap_or_default();
        if others.iter().any(|&range| overlaps(range, asked)) {
            // Another client took the range while this one waited: ask again later.
            drop(state);
            drop(writing);
            return Ok(none);
        }
        let (start, end) = expanded_range(asked, took_write, &others);
        let previous = state
            .leases
            .get(&handle)
            .and_then(|holders| holders.get(&client))
            .copied();
        let id = match previous {
            Some(held) if held.write == Some((start, end)) => held.id,
            Some(_) => {
                state.last_lease_id += 1;
                state.last_lease_id
            }
            None => {
                state.held += 1;
                state.last_lease_id += 1;
                state.last_lease_id
            }
        };
        let held = Held {
            expiry: Instant::now() + self.lease,
            demotes: false,
            id,
            write: Some((start, end)),
            group,
        };
        state.leases.entry(handle).or_default().insert(client, held);
        drop(state);
        drop(writing);
        Ok(WriteGrant {
            lease_ms: self.lease_ms(),
            id,
            range: (start, end),
        })
    }

    fn no_listener(handle: u64, client: ClientKey) -> RemoteError {
        RemoteError::new(
            ErrorCode::Protocol,
            format!(
                "client {:#x} (uid {}) asked for a lease on object {handle:#x} without a \
                 callback channel on this iod (LeaseListen first)",
                client.id, client.uid
            ),
        )
    }

    /// Takes the leases on `handle` that `revoked` picks out of the table and sends each
    /// holder its revocation: what to wait for, with each lease's expiry.
    fn revoke(
        state: &mut State,
        handle: u64,
        revoked: impl Fn(ClientKey, &Held) -> bool,
    ) -> Vec<(oneshot::Receiver<()>, Instant)> {
        let Some(holders) = state.leases.get_mut(&handle) else {
            return Vec::new();
        };
        let taken: Vec<(ClientKey, Held)> = holders
            .iter()
            .filter(|(key, held)| revoked(**key, held))
            .map(|(key, held)| (*key, *held))
            .collect();
        for (key, _) in &taken {
            holders.remove(key);
        }
        if holders.is_empty() {
            state.leases.remove(&handle);
        }
        state.held -= taken.len();
        let mut pending = Vec::with_capacity(taken.len());
        for (client, Held { expiry, .. }) in taken {
            let Some(listener) = state.listeners.get(&client) else {
                continue;
            };
            let (answered, answer) = oneshot::channel();
            // A full queue or a closed channel: the client cannot be told; its lease still
            // runs out at `expiry`.
            let sent = listener
                .revocations
                .try_send(Revocation { handle, answered })
                .is_ok();
            state.revocations += 1;
            if sent {
                pending.push((answer, expiry));
            } else {
                let (_, never) = oneshot::channel();
                pending.push((never, expiry));
            }
        }
        pending
    }

    /// Waits until each revoked holder answered or its lease ran out.
    async fn wait_answers(&self, pending: Vec<(oneshot::Receiver<()>, Instant)>) {
        for (answer, expiry) in pending {
            let left = expiry.saturating_duration_since(Instant::now());
            let answered = matches!(tokio::time::timeout(left, answer).await, Ok(Ok(())));
            if !answered {
                // Dropped unanswered (channel gone) or timed out: wait out the lease.
                tokio::time::sleep_until(expiry.into()).await;
                self.lock().revocations_unanswered += 1;
            }
        }
    }

    /// Before a read of bytes `range` of `handle` (or a stat, [`WHOLE`]) is served: revokes
    /// the write leases on them and waits until their holders wrote what they buffered (or
    /// the leases ran out). Costs a lookup when there are none.
    pub async fn begin_read(&self, handle: u64, range: (u64, u64)) {
        let pending = {
            let mut state = self.lock();
            let any = state.leases.get(&handle).is_some_and(|holders| {
                holders
                    .values()
                    .any(|held| held.write.is_some_and(|held| overlaps(held, range)))
            });
            if !any {
                return;
            }
            Self::revoke(&mut state, handle, |_, held| {
                held.write.is_some_and(|held| overlaps(held, range))
            })
        };
        self.wait_answers(pending).await;
    }

    /// Revokes every read lease on `handle` and every write lease on bytes of `range` (a
    /// truncate or remove: [`WHOLE`]), and waits until each holder answered or its lease ran
    /// out; returns a guard that keeps new leases off the object until the caller has
    /// applied its change.
    ///
    /// A write of caching client `writer` (its connection said so, `LeaseClient`) keeps the
    /// writer's own write lease, and those of its write group under the same uid: the writer
    /// is sending what it buffered, and the group orders its own writes.
    pub async fn begin_write(
        self: &Arc<Self>,
        handle: u64,
        range: (u64, u64),
        writer: Option<ClientKey>,
    ) -> Writing {
        // Made with the count it undoes, so a write dropped while it waits (its connection
        // gone) gives the object back to new leases.
        let writing = Writing {
            leases: Arc::clone(self),
            handle,
        };
        let pending = {
            let mut state = self.lock();
            *state.writing.entry(handle).or_default() += 1;
            let group = writer
                .and_then(|writer| state.leases.get(&handle)?.get(&writer))
                .filter(|held| held.write.is_some())
                .map_or(0, |held| held.group);
            Self::revoke(&mut state, handle, |key, held| {
                let kept = writer.is_some_and(|writer| {
                    key == writer || (group != 0 && held.group == group && key.uid == writer.uid)
                }) && held.write.is_some();
                !kept && held.write.is_none_or(|held| overlaps(held, range))
            })
        };
        self.wait_answers(pending).await;
        writing
    }

    /// Runs `apply` if `client` holds lease `lease_id` on `handle` now, unexpired, with new
    /// leases and revocations held off meanwhile (so no write of the object can be under
    /// way or begin): `None` if it holds none, or a later one.
    pub fn with_lease<T>(
        &self,
        handle: u64,
        (client, lease_id): (ClientKey, u64),
        apply: impl FnOnce() -> T,
    ) -> Option<T> {
        let state = self.lock();
        let held = state
            .leases
            .get(&handle)
            .and_then(|holders| holders.get(&client))
            .is_some_and(|held| {
                held.id == lease_id && held.write.is_none() && held.expiry > Instant::now()
            });
        held.then(apply)
    }

    /// Whether `client` holds an unexpired lease on `handle` and demotes what it evicts.
    pub fn demotes(&self, handle: u64, client: ClientKey) -> bool {
        self.lock()
            .leases
            .get(&handle)
            .and_then(|holders| holders.get(&client))
            .is_some_and(|held| held.demotes && held.expiry > Instant::now())
    }

    /// The counters now.
    pub fn stats(&self) -> LeaseStats {
        let state = self.lock();
        LeaseStats {
            listeners: state.listeners.len(),
            held: state.held,
            revocations: state.revocations,
            revocations_unanswered: state.revocations_unanswered,
        }
    }
}

/// The range a write lease on `asked` is granted: grown to the nearest write lease of another
/// client on each side (`others`), or the whole object's ends; its start stays put when it
/// took a range from another writer (`took_write`), so the two do not flip-flop.
fn expanded_range(asked: (u64, u64), took_write: bool, others: &[(u64, u64)]) -> (u64, u64) {
    let start = if took_write {
        asked.0
    } else {
        others
            .iter()
            .map(|&(_, end)| end)
            .filter(|&end| end <= asked.0)
            .max()
            .unwrap_or(0)
    };
    let end = others
        .iter()
        .map(|&(start, _)| start)
        .filter(|&start| start >= asked.1)
        .min()
        .unwrap_or(u64::MAX);
    (start, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Client `id` of uid 1000.
    fn client(id: u64) -> ClientKey {
        ClientKey::new(1000, id)
    }

    fn table(lease_ms: u32) -> Arc<Leases> {
        Arc::new(Leases::new(lease_ms).unwrap())
    }

    #[test]
    fn bad_lease_times_and_listenerless_clients_are_refused_by_name() {
        assert!(Leases::new(10).unwrap_err().contains("10 ms"));
        assert!(Leases::new(LEASE_MS_MAX + 1).is_err());
        let leases = table(1000);
        let refused = leases.acquire(7, client(0xabc), false).unwrap_err();
        assert!(refused.message.contains("LeaseListen"), "{refused:?}");
        assert_eq!(leases.stats().held, 0);
    }

    #[tokio::test]
    async fn a_write_waits_for_the_holder_to_answer_and_no_lease_is_granted_meanwhile() {
        let leases = table(5000);
        let (_, mut channel) = leases.listen(client(1)).unwrap();
        assert_eq!(leases.acquire(7, client(1), false).unwrap().0, 5000);
        assert_eq!(
            leases.acquire(7, client(1), false).unwrap().0,
            5000,
            "a renewal"
        );
        assert_eq!(leases.stats().held, 1);
        let writer = {
            let leases = Arc::clone(&leases);
            tokio::spawn(async move { leases.begin_write(7, WHOLE, None).await })
        };
        let revocation = channel.recv().await.unwrap();
        assert_eq!(revocation.handle, 7);
        // Under way: no lease on 7, one on another object.
        assert_eq!(leases.acquire(7, client(1), false).unwrap().0, 0);
        assert_eq!(leases.acquire(8, client(1), false).unwrap().0, 5000);
        assert!(!writer.is_finished());
        revocation.answered.send(()).unwrap();
        let writing = tokio::time::timeout(Duration::from_secs(2), writer)
            .await
            .expect("the write goes on once answered")
            .unwrap();
        assert_eq!(leases.acquire(7, client(1), false).unwrap().0, 0);
        drop(writing);
        assert_eq!(leases.acquire(7, client(1), false).unwrap().0, 5000);
        let stats = leases.stats();
        assert_eq!((stats.revocations, stats.revocations_unanswered), (1, 0));
    }

    #[tokio::test]
    async fn a_holder_that_does_not_answer_holds_a_write_up_for_its_lease_time_only() {
        let leases = table(300);
        let (_, mut channel) = leases.listen(client(1)).unwrap();
        leases.acquire(7, client(1), false).unwrap();
        let started = Instant::now();
        let writing =
            tokio::time::timeout(Duration::from_secs(5), leases.begin_write(7, WHOLE, None))
                .await
                .expect("bounded by the lease");
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(250), "{waited:?}");
        let revocation = channel.recv().await.unwrap();
        assert_eq!(revocation.handle, 7, "it was told, and never answered");
        assert_eq!(leases.stats().revocations_unanswered, 1);
        drop(writing);
    }

    #[tokio::test]
    async fn a_closed_channel_ends_its_leases() {
        let leases = table(60_000);
        let (generation, channel) = leases.listen(client(1)).unwrap();
        leases.acquire(7, client(1), false).unwrap();
        leases.acquire(8, client(1), false).unwrap();
        // A second channel of the same client replaces the first; closing the old one
        // changes nothing.
        let (newer, _channel) = leases.listen(client(1)).unwrap();
        drop(channel);
        leases.unlisten(client(1), generation);
        assert_eq!(leases.stats().held, 2);
        leases.unlisten(client(1), newer);
        assert_eq!(leases.stats().held, 0);
        // Nobody to ask: the write goes on at once.
        let started = Instant::now();
        drop(leases.begin_write(7, WHOLE, None).await);
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn a_write_dropped_while_it_waits_gives_the_object_back_to_new_leases() {
        let leases = table(60_000);
        let (_, _channel) = leases.listen(client(1)).unwrap();
        leases.acquire(7, client(1), false).unwrap();
        let waiting = tokio::time::timeout(
            Duration::from_millis(100),
            leases.begin_write(7, WHOLE, None),
        );
        assert!(waiting.await.is_err(), "the holder never answers");
        assert_eq!(leases.acquire(7, client(1), false).unwrap().0, 60_000);
    }

    #[tokio::test]
    async fn another_uid_with_the_same_client_id_is_another_client() {
        let leases = table(60_000);
        let (_, _channel) = leases.listen(client(1)).unwrap();
        let (_, id) = leases.acquire(7, client(1), true).unwrap();
        let intruder = ClientKey::new(1001, 1);
        // No callback channel of its own: no lease.
        let refused = leases.acquire(7, intruder, true).unwrap_err();
        assert!(refused.message.contains("uid 1001"), "{refused:?}");
        // The owner's lease does not cover it.
        assert_eq!(leases.with_lease(7, (intruder, id), || ()), None);
        assert!(!leases.demotes(7, intruder));
        assert_eq!(leases.with_lease(7, (client(1), id), || ()), Some(()));
        // Its own channel does not replace the owner's, and the owner's lease stays.
        let (_, _intruders) = leases.listen(intruder).unwrap();
        let stats = leases.stats();
        assert_eq!((stats.listeners, stats.held), (2, 1));
        assert!(leases.demotes(7, client(1)));
    }

    #[tokio::test]
    async fn a_lease_keeps_its_id_when_renewed_and_a_new_grant_gets_another() {
        let leases = table(60_000);
        let (_, _channel) = leases.listen(client(1)).unwrap();
        let (_, first) = leases.acquire(7, client(1), true).unwrap();
        assert_eq!(leases.acquire(7, client(1), true).unwrap().1, first);
        assert_eq!(leases.with_lease(7, (client(1), first), || 1), Some(1));
        // Revoked (nobody answers: the client's channel is alive but never read, so the
        // write waits out the lease; a short lease table shows it without the wait).
        drop(leases.begin_write(8, WHOLE, None).await);
        let writing = tokio::time::timeout(
            Duration::from_millis(50),
            leases.begin_write(7, WHOLE, None),
        );
        assert!(
            writing.await.is_err(),
            "the holder never answers within 50 ms"
        );
        let (_, second) = leases.acquire(7, client(1), true).unwrap();
        assert_ne!(second, first, "a new grant after the revocation");
        // Blocks cached under the first lease are refused under the second.
        assert_eq!(leases.with_lease(7, (client(1), first), || 1), None);
        assert_eq!(leases.with_lease(7, (client(1), second), || 1), Some(1));
    }
}
