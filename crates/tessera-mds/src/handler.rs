//! The mds request handlers: namespace changes in redb plus the iod calls they need.
//!
//! Each request runs on a blocking thread because both redb and the iod connections block.
//! Object life cycle is ordered so no failure leaves a visible name without its objects:
//! create makes the objects first and then commits the name; unlink and rename commit the
//! name change first and then remove the objects (a failure there leaves only orphans,
//! logged). Sizes are computed from the objects on every `Stat` (see `docs/SEMANTICS.md`).
//!
//! Range locks are the exception: `LockRange` and `UnlockRange` touch only the in-memory
//! [`LockTable`], and a `LockRange` waits for its lock asynchronously on the connection's task
//! (only the check that the handle names a file goes to a blocking thread), so waiting
//! requests hold no thread.
//!
//! Every namespace request names its caller; [`caller_of`] is the one place that turns the
//! request's credentials into the [`Caller`] the permission checks trust.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tessera_auth::{ClusterKey, Grant, KeySigner, Rights};
use tessera_net::server::{ConnectionError, Incoming, ServerConnection, Service};
use tessera_net::{Identity, NetError, Peer, Pool};
use tessera_proto::limits::{cache_unit_for_stripe, check_cache_unit_bytes, FILE_BYTES_MAX};
use tessera_proto::{
    Attr, Capability, Chmod, Chown, Create, Credentials, Decoder, Empty, ErrorCode, HandlesLive,
    HandlesLiveReply, Layout, LockGranted, LockRange, Lookup, MdsStatsReply, Mkdir, ObjectCreate,
    ObjectLeft, ObjectRemove, ObjectStat, ObjectTruncate, Opcode, Open, Opened, PingReply, Readdir,
    RemoteError, Rename, Renew, Request, Rmdir, SetTimes, Stat, StatHandle, Truncate, Unlink,
    UnlinkReply, UnlockRange, Wire, CHOWN_UNCHANGED, ROLE_MDS,
};

mod iods;
mod refill;

use self::iods::{check_servers_on, iod_call_each_on, iod_call_on, split_replies};
use self::refill::keep_precreated;
use crate::access::Caller;
use crate::locks::{LockRequest, LockTable};
use crate::namespace::{CreatePlan, Inode, Namespace};
use crate::precreate::Precreated;

/// The metadata server.
#[derive(Debug)]
pub struct Mds {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    namespace: Namespace,
    /// Connections to the iods for the request threads: [`MDS_IOD_CONNECTIONS`] pools, each
    /// with at most one connection per iod ([`Inner::iods`]).
    iods: Vec<Pool>,
    locks: LockTable,
    /// Handles of creates in flight: objects made (or being made) on the iods, name not yet
    /// committed, and every handle of the pool of objects made ahead. An iod's orphan sweep
    /// must keep them ([`Inner::handles_live`]). At most one entry per request in flight
    /// (bounded by the blocking threads serving requests) plus `PRECREATE_MAX`.
    creating: Mutex<HashSet<u64>>,
    /// Handles whose objects exist on every iod, for the next ordinary creates.
    precreated: Arc<Precreated>,
    /// Connections of the `mds-precreate` thread to the iods, its own: a refill never holds a
    /// connection a request waits for.
    background_iods: Pool,
    /// Signs capabilities.
    key: ClusterKey,
    options: MdsOptions,
}

/// How the mds grants access.
#[derive(Debug, Clone)]
pub struct MdsOptions {
    /// How long the capabilities it signs are accepted (`tessera mds --capability-seconds`).
    pub capability_lifetime: Duration,
    /// Handles whose objects it keeps made ahead on every iod (`tessera mds --precreate`;
    /// 0: none, each create makes its objects).
    pub precreate: usize,
}

impl Default for MdsOptions {
    fn default() -> Self {
        Self {
            capability_lifetime: tessera_auth::CAPABILITY_LIFETIME,
            precreate: PRECREATE_DEFAULT,
        }
    }
}

/// Handles an mds keeps made ahead unless told otherwise.
pub const PRECREATE_DEFAULT: usize = 1024;

/// Connections the mds's request threads keep to each iod (a refill of objects made ahead
/// has one more of its own): concurrent stats, creates and unlinks of different clients
/// reach an iod side by side. Each learns of a silent iod on its own (`IOD_RETRY_AFTER`).
pub const MDS_IOD_CONNECTIONS: usize = 4;

/// After an iod fails to answer, how long the mds answers `Unavailable` for it without
/// asking it again: requests that need a stopped iod then cost one timeout, not one each.
const IOD_RETRY_AFTER: Duration = Duration::from_secs(5);

/// How long a blocking thread of the mds waits on the CPU for an iod's reply before it
/// blocks (`Pool::with_reply_spin`): a stat's sizes come back from the iods sooner than an
/// idle CPU wakes.
const IOD_REPLY_SPIN: Duration = Duration::from_micros(50);

/// Most times a create plans again because the existing file it was to return was removed
/// between the plan and the reply (an unlink or a rename onto the name won the race): past
/// this it answers `Busy`.
const CREATE_PLANS_MAX: usize = 8;

/// Most times a create takes a new handle because an iod already holds an object of the one
/// planned (an orphan of a create the mds never committed, before a crash: at most one per
/// create in flight then, and those are bounded by the blocking threads, 64): past this it
/// answers `Busy`.
const CREATE_HANDLES_TAKEN_MAX: usize = 64;

/// What one try of a create came to.
enum Tried {
    /// The file, made or found.
    Done(Attr),
    /// The existing file it was to return was removed meanwhile: plan again.
    Removed,
    /// An iod holds an object of the planned handle already: plan again, with a new handle.
    HandleTaken,
}

/// The layout epoch capabilities carry: a file's layout never changes after its create, so
/// every capability names epoch 1 (a re-layout would sign a higher one).
const LAYOUT_EPOCH: u64 = 1;

impl Mds {
    /// An mds over `namespace` whose files live on the iods at `iod_addresses` (index order),
    /// holding the cluster `key` (to check credentials, sign capabilities and authenticate
    /// to the iods as a server).
    pub fn new(
        namespace: Namespace,
        iod_addresses: &[String],
        timeout: Duration,
        key: ClusterKey,
        options: MdsOptions,
    ) -> Self {
        let peers: Vec<Peer> = iod_addresses
            .iter()
            .enumerate()
            .map(|(index, address)| {
                let index = u16::try_from(index).expect("at most servers_max iods");
                Peer::tcp(
                    format!("iod {index} at {address}"),
                    address.clone(),
                    Identity::iod(index),
                )
            })
            .collect();
        let signer = Arc::new(KeySigner::server(key.clone()));
        let cluster_id = Some(key.cluster_id());
        let precreated = Arc::new(Precreated::new(options.precreate));
        let pool = |peers: Vec<Peer>| {
            Pool::new(peers, timeout, signer.clone())
                .with_cluster_id(cluster_id)
                .with_retry_after(IOD_RETRY_AFTER)
                .with_reply_spin(IOD_REPLY_SPIN)
        };
        let inner = Arc::new(Inner {
            namespace,
            iods: (0..MDS_IOD_CONNECTIONS)
                .map(|_| pool(peers.clone()))
                .collect(),
            background_iods: pool(peers),
            locks: LockTable::new(),
            creating: Mutex::new(HashSet::new()),
            precreated: precreated.clone(),
            key,
            options,
        });
        if inner.options.precreate > 0 {
            let weak = Arc::downgrade(&inner);
            let started = std::thread::Builder::new()
                .name("mds-precreate".to_owned())
                .spawn(move || keep_precreated(&precreated, &weak));
            if let Err(err) = started {
                tracing::warn!("mds: objects are not made ahead of creates: {err}");
            }
        }
        Self { inner }
    }
}

/// The caller a request speaks for: its credential, whose tag, expiry and uid `Mds::handle`
/// checked against the connection before the request got here.
pub fn caller_of(credentials: &Credentials) -> Caller {
    Caller {
        uid: credentials.uid,
        gid: credentials.gid,
        groups: credentials.groups.clone(),
    }
}

/// A chown id: [`CHOWN_UNCHANGED`] leaves it as it is.
fn chown_id(id: u32) -> Option<u32> {
    (id != CHOWN_UNCHANGED).then_some(id)
}

fn net_error(error: NetError) -> RemoteError {
    match error {
        NetError::Remote { peer, error } => {
            RemoteError::new(error.code, format!("{peer}: {}", error.message))
        }
        other => RemoteError::new(ErrorCode::Unavailable, other.to_string()),
    }
}

impl Inner {
    /// The connections to the iods this request thread uses: each thread keeps to one of the
    /// [`MDS_IOD_CONNECTIONS`] pools, so requests on different threads reach one iod over
    /// different connections rather than queueing for one.
    fn iods(&self) -> &Pool {
        thread_local! {
            static SLOT: usize = NEXT_SLOT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        static NEXT_SLOT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        &self.iods[SLOT.with(|slot| *slot) % self.iods.len()]
    }

    fn iod_call<R: Request>(&self, server: u16, request: &R) -> Result<R::Reply, RemoteError> {
        iod_call_on(self.iods(), server, request)
    }

    /// Asks each iod of `servers` its request (`request_for(server)`) at once
    /// ([`Pool::call_each`]): the call costs about one round trip, not one per iod. The
    /// replies come in the order of `servers`.
    fn iod_call_each<R: Request>(
        &self,
        servers: &[u16],
        request_for: impl Fn(u16) -> R,
    ) -> Vec<Result<R::Reply, RemoteError>> {
        iod_call_each_on(self.iods(), servers, request_for)
    }

    /// Size and latest data mtime of a file, from its objects (asked of all its iods at
    /// once).
    fn file_size(&self, handle: u64, layout: &Layout) -> Result<(u64, u64), RemoteError> {
        let mut size = 0;
        let mut mtime_ns = 0;
        let replies = self.iod_call_each(layout.servers(), |_| ObjectStat {
            handle,
            capability: Capability::default(),
        });
        for (position, (&server, reply)) in layout.servers().iter().zip(replies).enumerate() {
            let reply = reply?;
            let local_max = layout.local_size(position, FILE_BYTES_MAX);
            if reply.size > local_max {
                return Err(RemoteError::new(
                    ErrorCode::Protocol,
                    format!(
                        "iod {server} reports object {handle:#x} at {} bytes, past file_bytes_max",
                        reply.size
                    ),
                ));
            }
            size = size.max(layout.logical_end(position, reply.size));
            mtime_ns = mtime_ns.max(reply.mtime_ns);
        }
        Ok((size, mtime_ns))
    }

    fn attr(&self, handle: u64, inode: &Inode) -> Result<Attr, RemoteError> {
        let Some(layout) = inode.layout()? else {
            return inode.attr(handle, 0);
        };
        let (size, data_mtime_ns) = self.file_size(handle, &layout)?;
        let mut attr = inode.attr(handle, size)?;
        attr.mtime_ns = inode.mtime_with_data(data_mtime_ns);
        Ok(attr)
    }

    /// Removes the objects of a file whose name is gone (or never committed); returns those
    /// it could not remove, each logged. Their iods' next orphan sweep removes what is left.
    /// When a server at one of the addresses is not the iod expected there, nothing is
    /// removed anywhere: with the iod list in the wrong order, the other "objects of this
    /// file" would be other files' objects.
    fn remove_objects(&self, handle: u64, inode: &Inode) -> Vec<ObjectLeft> {
        self.remove_objects_on(handle, &inode.servers)
    }

    /// [`Inner::remove_objects`] of the objects of `handle` on `servers`.
    fn remove_objects_on(&self, handle: u64, servers: &[u16]) -> Vec<ObjectLeft> {
        if let Err((server, error @ NetError::WrongServer { .. })) = self.check_servers(servers) {
            let error = net_error(error);
            tracing::warn!(
                "mds: objects of handle {handle:#x} left on iods {servers:?}: iod {server}: {error}"
            );
            return servers
                .iter()
                .map(|&server| ObjectLeft {
                    server,
                    error: error.clone(),
                })
                .collect();
        }
        let namespace = self.namespace.namespace_id();
        let replies = self.iod_call_each(servers, |_| ObjectRemove { handle, namespace });
        let mut left = Vec::new();
        for (&server, reply) in servers.iter().zip(replies) {
            if let Err(error) = reply {
                tracing::warn!("mds: object {handle:#x} left on iod {server}: {error}");
                left.push(ObjectLeft { server, error });
            }
        }
        left
    }

    /// Which of `handles` an iod must keep: those of files in the namespace and of creates
    /// in flight. The in-flight set is read before the namespace: a create commits its name
    /// before it leaves the set, so a handle missing from the set here is either committed
    /// (and seen by the read that follows) or not being created.
    fn handles_live(&self, handles: &[u64]) -> Result<HandlesLiveReply, RemoteError> {
        let creating: Vec<bool> = {
            let creating = self.creating.lock().unwrap_or_else(PoisonError::into_inner);
            handles
                .iter()
                .map(|handle| creating.contains(handle))
                .collect()
        };
        let stored = self.namespace.handles_stored(handles)?;
        let live = handles
            .iter()
            .zip(creating.iter().zip(&stored))
            .filter(|(_, (&creating, &stored))| creating || stored)
            .map(|(&handle, _)| handle)
            .collect();
        Ok(HandlesLiveReply {
            namespace: self.namespace.namespace_id(),
            live,
        })
    }

    /// A capability for `rights` on `handle`, for `credentials`' uid.
    fn capability(&self, credentials: &Credentials, handle: u64, rights: Rights) -> Capability {
        let lifetime = self.options.capability_lifetime.as_secs();
        Grant {
            handle,
            rights,
            uid: credentials.uid,
            expires_s: tessera_auth::now_s().saturating_add(lifetime),
            epoch: LAYOUT_EPOCH,
        }
        .sign(&self.key)
    }

    /// Opens `path` for `rights`: search on its directories and the mode check, then a
    /// capability.
    fn open(&self, open: &Open) -> Result<Opened, RemoteError> {
        let rights = Rights {
            read: open.read,
            write: open.write,
        };
        let attr = self.namespace.open(
            &caller_of(&open.credentials),
            &open.path,
            rights.read,
            rights.write,
        )?;
        Ok(Opened {
            capability: self.capability(&open.credentials, attr.handle, rights),
            attr,
        })
    }

    /// Renews a capability: the one presented must be the caller's, for this handle, with at
    /// least the rights asked for, and signed with the cluster key (it may have expired: it
    /// only shows that the handle was learned from an open). Checked before the handle is
    /// looked at, so every refusal of a stranger reads the same whether the handle exists or
    /// not. Then the open's checks again, as of now ([`Namespace::open_handle`]).
    fn renew(&self, renew: &Renew) -> Result<Opened, RemoteError> {
        let rights = Rights {
            read: renew.read,
            write: renew.write,
        };
        let handle = renew.handle;
        Grant::verify(&self.key, &renew.capability)
            .and_then(|grant| grant.allows_renewal(handle, rights, renew.credentials.uid))
            .map_err(|err| {
                RemoteError::new(
                    ErrorCode::PermissionDenied,
                    format!(
                        "permission denied: renewing the capability of handle {handle:#x}: {err}"
                    ),
                )
            })?;
        let attr = self.namespace.open_handle(
            &caller_of(&renew.credentials),
            handle,
            rights.read,
            rights.write,
        )?;
        Ok(Opened {
            capability: self.capability(&renew.credentials, handle, rights),
            attr,
        })
    }

    fn create(&self, request: &Create) -> Result<Opened, RemoteError> {
        let attr = self.create_objects(request)?;
        Ok(Opened {
            capability: self.capability(&request.credentials, attr.handle, Rights::READ_WRITE),
            attr,
        })
    }

    /// Whether `error`, from a call on the file found as `handle`, means that the file was
    /// removed since it was looked up (an unlink, or a rename onto its name): its objects are
    /// gone and so is its handle. An object missing from a file still in the namespace is not
    /// that (SEMANTICS.md §8).
    fn removed_since_lookup(&self, handle: u64, error: &RemoteError) -> bool {
        error.code == ErrorCode::UnknownHandle
            && matches!(self.namespace.get(handle), Err(gone) if gone.code == ErrorCode::UnknownHandle)
    }

    /// The answer to a call on `path` whose file was removed during `doing` (see
    /// [`Inner::removed_since_lookup`]): the path no longer names a file.
    fn removed_during(path: &str, doing: &str) -> RemoteError {
        RemoteError::new(
            ErrorCode::NotFound,
            format!("{path}: removed while it was {doing}"),
        )
    }

    /// The attributes of the file that `path` named when it was looked up as `handle`, or
    /// `None` if the file was removed since: the path no longer names it.
    fn attr_at(&self, path: &str, handle: u64, inode: &Inode) -> Result<Option<Attr>, RemoteError> {
        match self.attr(handle, inode) {
            Ok(attr) => Ok(Some(attr)),
            Err(error) if self.removed_since_lookup(handle, &error) => Ok(None),
            Err(error) if error.code == ErrorCode::UnknownHandle => Err(RemoteError::new(
                error.code,
                format!("{path}: {}", error.message),
            )),
            Err(error) => Err(error),
        }
    }

    /// A create, planned again while an unlink or rename removes the existing file it was to
    /// return (up to [`CREATE_PLANS_MAX`] times): a non-exclusive create then makes the name
    /// anew or returns the file that took it, never an error for the file that went. Planned
    /// again too, with a new handle, when an iod already holds an object of the planned
    /// handle (up to [`CREATE_HANDLES_TAKEN_MAX`] times): an orphan of a create this mds never
    /// committed, whose handle it hands out again after a crash. That object is left alone
    /// (its iod's orphan sweep removes it), never emptied or taken over.
    fn create_objects(&self, request: &Create) -> Result<Attr, RemoteError> {
        check_cache_unit_bytes(u64::from(request.cache_unit_bytes)).map_err(|reason| {
            RemoteError::new(
                ErrorCode::InvalidArgument,
                format!("creating {}: {reason}", request.path),
            )
        })?;
        let caller = caller_of(&request.credentials);
        let (mut removed, mut taken) = (0, 0);
        loop {
            match self.create_once(&caller, request)? {
                Tried::Done(attr) => return Ok(attr),
                Tried::Removed => removed += 1,
                Tried::HandleTaken => taken += 1,
            }
            if removed >= CREATE_PLANS_MAX {
                return Err(RemoteError::new(
                    ErrorCode::Busy,
                    format!(
                        "creating {}: the file it names was removed under the create {CREATE_PLANS_MAX} times; try again",
                        request.path
                    ),
                ));
            }
            if taken >= CREATE_HANDLES_TAKEN_MAX {
                return Err(RemoteError::new(
                    ErrorCode::Busy,
                    format!(
                        "creating {}: the iods held objects of {CREATE_HANDLES_TAKEN_MAX} handles in a row (create_handles_taken_max; orphans of unfinished creates, which the iods' orphan sweeps remove at their next start); try again",
                        request.path
                    ),
                ));
            }
        }
    }

    /// Connects to every iod of `servers` (or finds it connected) and checks that each is the
    /// server the mds expects at that address: role, index and cluster (`Pool::lease`). Made
    /// before a call changes anything on any of them, so a misconfigured iod list refuses
    /// the call before its first change, never halfway through.
    fn check_servers(&self, servers: &[u16]) -> Result<(), (u16, NetError)> {
        check_servers_on(self.iods(), servers)
    }

    /// One try of [`Inner::create_objects`].
    fn create_once(&self, caller: &Caller, request: &Create) -> Result<Tried, RemoteError> {
        let default_unit = self.namespace.default_cache_unit();
        let pooled = self
            .namespace
            .precreatable(request, default_unit)
            .then(|| self.precreated.take())
            .flatten();
        let give_back = || {
            if let Some(handle) = pooled {
                self.precreated.give_back(handle);
            }
        };
        let plan = self
            .namespace
            .plan_create_with(caller, request, pooled)
            .inspect_err(|_| give_back())?;
        let (handle, inode) = match plan {
            // An existing file, opened for reading and writing (checked by the plan).
            CreatePlan::Existing(handle, inode) => {
                give_back();
                return Ok(self
                    .attr_at(&request.path, handle, &inode)?
                    .map_or(Tried::Removed, Tried::Done));
            }
            CreatePlan::New(handle, inode) => (handle, inode),
        };
        let failed = |error: RemoteError| {
            RemoteError::new(
                error.code,
                format!("creating {}: {}", request.path, error.message),
            )
        };
        self.check_servers(&inode.servers)
            .inspect_err(|_| give_back())
            .map_err(|(_, error)| failed(net_error(error)))?;
        // The iods keep the unit with each object; without a hint a finely striped file
        // takes its stripe unit (ARCHITECTURE §2.7), others the iod's default (0).
        let cache_unit_bytes = match request.cache_unit_bytes {
            0 if inode.pattern.is_empty() => cache_unit_for_stripe(inode.stripe_unit_bytes),
            hinted => hinted,
        };
        let _in_flight = Creating::enter(&self.creating, handle);
        let namespace = self.namespace.namespace_id();
        // A pooled handle's objects exist on every iod already.
        let replies = if pooled.is_some() {
            Vec::new()
        } else {
            self.iod_call_each(&inode.servers, |_| ObjectCreate {
                handle,
                namespace,
                cache_unit_bytes,
            })
        };
        if replies.iter().any(Result::is_err) {
            // Only the objects this create made go; one that was there stays.
            let (made, refused) = split_replies(&inode.servers, replies);
            let _ = self.remove_objects_on(handle, &made);
            let mut first = None;
            for (server, error) in refused {
                if error.code == ErrorCode::Exists {
                    tracing::warn!(
                        "mds: creating {}: iod {server} already holds an object of handle {handle:#x} (an orphan of an unfinished create?), left as it is; taking a new handle",
                        request.path
                    );
                    return Ok(Tried::HandleTaken);
                }
                first.get_or_insert(error);
            }
            return Err(failed(first.expect("a failed reply")));
        }
        match self
            .namespace
            .commit_create(caller, &request.path, handle, &inode, request.exclusive)
        {
            Ok((winner, winner_inode, true)) => winner_inode.attr(winner, 0).map(Tried::Done),
            Ok((winner, winner_inode, false)) => {
                let _ = self.remove_objects(handle, &inode);
                Ok(self
                    .attr_at(&request.path, winner, &winner_inode)?
                    .map_or(Tried::Removed, Tried::Done))
            }
            // A store failure may have committed the name after all (an error of the fsync
            // itself: redb wrote the commit first; a commit past its wait may still land):
            // its objects stay, orphans the iods sweep at their next start if it did not.
            Err(error) if commit_outcome_unknown(&error) => Err(error),
            Err(error) => {
                let _ = self.remove_objects(handle, &inode);
                Err(error)
            }
        }
    }

    /// Who this server is and how its store is. Answered even while the store is closed
    /// after an I/O error (`objects` is then 0): `store_state` says what is wrong.
    fn ping(&self) -> PingReply {
        PingReply {
            role: ROLE_MDS,
            server_index: 0,
            pid: std::process::id(),
            objects: self.namespace.inode_count().unwrap_or(0),
            store_state: self.namespace.store_health().wire(),
        }
    }

    /// The group commit counters and the inode count.
    fn stats(&self) -> Result<MdsStatsReply, RemoteError> {
        let commits = self.namespace.commit_stats();
        Ok(MdsStatsReply {
            changes: commits.changes,
            commits: commits.commits,
            inodes: self.namespace.inode_count()?,
            precreated: self.precreated.len() as u64,
        })
    }

    fn truncate(&self, request: &Truncate) -> Result<Attr, RemoteError> {
        if request.size > FILE_BYTES_MAX {
            return Err(RemoteError::over_limit(
                "file_bytes_max",
                request.size,
                FILE_BYTES_MAX,
            ));
        }
        let caller = caller_of(&request.credentials);
        let (handle, inode) = self
            .namespace
            .open_inode(&caller, &request.path, false, true)?;
        let Some(layout) = inode.layout()? else {
            return Err(RemoteError::new(
                ErrorCode::IsDirectory,
                format!("{} is a directory", request.path),
            ));
        };
        let namespace = self.namespace.namespace_id();
        let truncated = self
            .check_servers(layout.servers())
            .map_err(|(_, error)| net_error(error))
            .and_then(|()| {
                layout
                    .servers()
                    .iter()
                    .enumerate()
                    .try_for_each(|(position, &server)| {
                        let size = layout.local_size(position, request.size);
                        let truncate = ObjectTruncate {
                            handle,
                            namespace,
                            size,
                        };
                        self.iod_call(server, &truncate).map(drop)
                    })
            })
            .and_then(|()| self.namespace.touch(handle));
        match truncated {
            Ok(inode) => inode.attr(handle, request.size),
            Err(error) if self.removed_since_lookup(handle, &error) => {
                Err(Self::removed_during(&request.path, "truncated"))
            }
            Err(error) => Err(error),
        }
    }

    /// Serves a namespace request on this thread (redb and the iod connections block).
    fn serve(&self, request: &Incoming) -> Result<Vec<u8>, Refusal> {
        self.serve_query(request)
    }

    /// The requests that read the namespace (an open may also create, and a renew signs);
    /// the others go to [`serve_change`](Self::serve_change).
    fn serve_query(&self, request: &Incoming) -> Result<Vec<u8>, Refusal> {
        match request.opcode {
            Opcode::Lookup => {
                let Lookup { credentials, path } = request.decode()?;
                body(
                    self.namespace
                        .lookup(&caller_of(&credentials), &path)
                        .and_then(|(handle, inode)| inode.attr(handle, 0)),
                )
            }
            Opcode::Stat => {
                let Stat { credentials, path } = request.decode()?;
                body(
                    self.namespace
                        .lookup(&caller_of(&credentials), &path)
                        .and_then(|(handle, inode)| {
                            self.attr_at(&path, handle, &inode)?
                                .ok_or_else(|| Self::removed_during(&path, "looked up"))
                        }),
                )
            }
            Opcode::StatHandle => {
                let StatHandle { handle, .. } = request.decode()?;
                body(
                    self.namespace
                        .get(handle)
                        .and_then(|inode| self.attr(handle, &inode)),
                )
            }
            Opcode::Readdir => {
                let Readdir {
                    credentials,
                    path,
                    after,
                } = request.decode()?;
                body(
                    self.namespace
                        .readdir(&caller_of(&credentials), &path, &after),
                )
            }
            Opcode::Open => {
                let open: Open = request.decode()?;
                body(self.open(&open))
            }
            Opcode::Renew => {
                let renew: Renew = request.decode()?;
                body(self.renew(&renew))
            }
            Opcode::HandlesLive => {
                let HandlesLive { handles, .. } = request.decode()?;
                body(self.handles_live(&handles))
            }
            _ => self.serve_change(request),
        }
    }

    /// The requests that change the namespace.
    fn serve_change(&self, request: &Incoming) -> Result<Vec<u8>, Refusal> {
        match request.opcode {
            Opcode::Create => {
                let create: Create = request.decode()?;
                body(self.create(&create))
            }
            Opcode::Mkdir => {
                let Mkdir {
                    credentials,
                    path,
                    mode,
                } = request.decode()?;
                body(
                    self.namespace
                        .mkdir(&caller_of(&credentials), &path, mode)
                        .and_then(|(handle, inode)| inode.attr(handle, 0)),
                )
            }
            Opcode::Rmdir => {
                let Rmdir { credentials, path } = request.decode()?;
                body(
                    self.namespace
                        .remove(&caller_of(&credentials), &path, true)
                        .map(|_| Empty {}),
                )
            }
            Opcode::Unlink => {
                let Unlink { credentials, path } = request.decode()?;
                body(
                    self.namespace
                        .remove(&caller_of(&credentials), &path, false)
                        .map(|(handle, inode)| UnlinkReply {
                            left: self.remove_objects(handle, &inode),
                        }),
                )
            }
            Opcode::Rename => {
                let Rename {
                    credentials,
                    source,
                    target,
                } = request.decode()?;
                body(
                    self.namespace
                        .rename(&caller_of(&credentials), &source, &target)
                        .map(|replaced| {
                            if let Some((handle, inode)) = replaced {
                                let _ = self.remove_objects(handle, &inode);
                            }
                            Empty {}
                        }),
                )
            }
            Opcode::Truncate => {
                let truncate: Truncate = request.decode()?;
                body(self.truncate(&truncate))
            }
            Opcode::Chmod => {
                let Chmod {
                    credentials,
                    path,
                    mode,
                } = request.decode()?;
                body(
                    self.namespace
                        .chmod(&caller_of(&credentials), &path, mode)
                        .and_then(|(handle, inode)| inode.attr(handle, 0)),
                )
            }
            Opcode::Chown => {
                let Chown {
                    credentials,
                    path,
                    uid,
                    gid,
                } = request.decode()?;
                body(
                    self.namespace
                        .chown(
                            &caller_of(&credentials),
                            &path,
                            chown_id(uid),
                            chown_id(gid),
                        )
                        .and_then(|(handle, inode)| inode.attr(handle, 0)),
                )
            }
            Opcode::SetTimes => {
                let SetTimes {
                    credentials,
                    path,
                    atime_ns,
                    mtime_ns,
                } = request.decode()?;
                body(
                    self.namespace
                        .set_times(&caller_of(&credentials), &path, atime_ns, mtime_ns)
                        .and_then(|(handle, inode)| {
                            self.attr_at(&path, handle, &inode)?
                                .ok_or_else(|| Self::removed_during(&path, "given its times"))
                        }),
                )
            }
            other => Err(Refusal::Answer(RemoteError::new(
                ErrorCode::Protocol,
                format!("the metadata server does not serve {other:?}"),
            ))),
        }
    }
}

/// Whether a refused change may still have been committed: the store failed (`Io`,
/// `NoSpace`: the reopened store may hold the change whole, SEMANTICS §7.1) or the commit was
/// not durable within its wait (`Unavailable`). Any other refusal came before the commit.
fn commit_outcome_unknown(error: &RemoteError) -> bool {
    matches!(
        error.code,
        ErrorCode::Io | ErrorCode::NoSpace | ErrorCode::Unavailable
    )
}

/// Marks a handle as being created for as long as it lives ([`Inner::creating`]).
struct Creating<'a> {
    set: &'a Mutex<HashSet<u64>>,
    handle: u64,
}

impl<'a> Creating<'a> {
    fn enter(set: &'a Mutex<HashSet<u64>>, handle: u64) -> Self {
        set.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(handle);
        Self { set, handle }
    }
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.handle);
    }
}

/// Why a request is not served: answered with an error (the connection stays open), or the
/// connection closes (a body that does not decode).
#[derive(Debug)]
enum Refusal {
    Answer(RemoteError),
    Close(ConnectionError),
}

impl From<ConnectionError> for Refusal {
    fn from(error: ConnectionError) -> Self {
        Refusal::Close(error)
    }
}

/// A reply's body, or the refusal to answer.
fn body<T: Wire>(result: Result<T, RemoteError>) -> Result<Vec<u8>, Refusal> {
    result.map(|reply| reply.to_body()).map_err(Refusal::Answer)
}

/// Runs `work` on a blocking thread (redb and the iod connections block).
async fn run_blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Refusal> + Send + 'static,
) -> Result<T, Refusal> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|err| {
            Err(Refusal::Answer(RemoteError::new(
                ErrorCode::Internal,
                format!("request task failed: {err}"),
            )))
        })
}

impl Mds {
    /// Checks the request and that its handle names a file, then waits for the lock, which
    /// uid `holder` holds.
    async fn lock_range(&self, lock: &LockRange, holder: u32) -> Result<u64, RemoteError> {
        let request = LockRequest::new(lock, holder)?;
        let inner = self.inner.clone();
        let handle = request.handle;
        run_blocking(move || {
            let inode = inner.namespace.get(handle).map_err(Refusal::Answer)?;
            if inode.is_directory() {
                return Err(Refusal::Answer(RemoteError::new(
                    ErrorCode::IsDirectory,
                    format!("range lock on handle {handle:#x}: a directory has no bytes to lock"),
                )));
            }
            Ok(())
        })
        .await
        .map_err(|refusal| match refusal {
            Refusal::Answer(error) => error,
            Refusal::Close(fatal) => RemoteError::new(ErrorCode::Internal, fatal.to_string()),
        })?;
        self.inner.locks.lock(&request).await
    }
}

impl Service for Mds {
    fn name(&self) -> String {
        "mds".to_owned()
    }

    async fn handle(
        &self,
        request: Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let header = request.header;
        if header.bulk_bytes != 0 {
            return Err(ConnectionError::Refused(RemoteError::new(
                ErrorCode::Protocol,
                "metadata requests carry no bulk data",
            )));
        }
        if !matches!(
            request.opcode,
            Opcode::Ping | Opcode::LockRange | Opcode::UnlockRange
        ) {
            // Every namespace request starts with the caller's credential: believe it only
            // when it is signed, current and this connection's.
            let credentials = Credentials::decode(&mut Decoder::new(&request.body))
                .map_err(|err| ConnectionError::Refused(err.into()))?;
            if let Err(error) = connection.check_credentials(&credentials) {
                return connection.reply_error(&header, &error).await;
            }
        }
        if request.opcode == Opcode::HandlesLive && !connection.is_server() {
            // Which handles live is the servers' business (an iod's orphan sweep).
            let error = RemoteError::new(
                ErrorCode::PermissionDenied,
                format!(
                    "permission denied: HandlesLive is served to the cluster's servers only, not to uid {} at {}",
                    connection.credentials().uid,
                    connection.peer()
                ),
            );
            return connection.reply_error(&header, &error).await;
        }
        // Requests that name a file by handle carry the capability its open returned (a
        // `Renew` may carry one that has expired: `Inner::renew` checks it, before any
        // lookup too).
        let by_handle = match request.opcode {
            Opcode::StatHandle => {
                let stat: StatHandle = request.decode()?;
                Some((stat.handle, stat.capability, Rights::ANY))
            }
            Opcode::LockRange => {
                let lock: LockRange = request.decode()?;
                let wanted = if lock.exclusive {
                    Rights::WRITE
                } else {
                    Rights::ANY
                };
                Some((lock.handle, lock.capability, wanted))
            }
            Opcode::UnlockRange => {
                let unlock: UnlockRange = request.decode()?;
                Some((unlock.handle, unlock.capability, Rights::ANY))
            }
            _ => None,
        };
        if let Some((handle, capability, wanted)) = by_handle {
            if let Err(error) = connection.check_capability(&capability, handle, wanted) {
                return connection.reply_error(&header, &error).await;
            }
        }
        let outcome = match request.opcode {
            // Answered on the connection's task: no thread hop for a request whose only work
            // is one read of the store, so a ping is the round trip's floor.
            Opcode::Ping => Ok(self.inner.ping().to_body()),
            Opcode::MdsStats => body(self.inner.stats()),
            // Reads of the namespace alone (a redb read transaction, a capability signed):
            // microseconds of work, less than the hop to a blocking thread would cost. A
            // read never waits for a commit (§2.3.2); only a failing store's reopen could
            // hold this task, for at most `STORE_DRAIN_MS`.
            Opcode::Lookup | Opcode::Open | Opcode::Readdir => self.inner.serve(&request),
            Opcode::LockRange => {
                let lock: LockRange = request.decode()?;
                self.lock_range(&lock, connection.credentials().uid)
                    .await
                    .map(|lock_id| LockGranted { lock_id }.to_body())
                    .map_err(Refusal::Answer)
            }
            Opcode::UnlockRange => {
                let UnlockRange {
                    handle, lock_id, ..
                } = request.decode()?;
                // Only the uid that took the lock releases it; another's id releases nothing,
                // answered as an unknown one.
                self.inner
                    .locks
                    .unlock(handle, lock_id, connection.credentials().uid);
                Ok(Empty {}.to_body())
            }
            _ => {
                let inner = self.inner.clone();
                run_blocking(move || inner.serve(&request)).await
            }
        };
        match outcome {
            Ok(body) => connection.reply_raw(&header, &body).await,
            Err(Refusal::Answer(error)) => connection.reply_error(&header, &error).await,
            Err(Refusal::Close(fatal)) => Err(fatal),
        }
    }
}

#[cfg(test)]
mod commit_tests {
    use super::*;

    #[test]
    fn only_a_store_failure_leaves_a_refused_create_s_objects() {
        for code in [ErrorCode::Io, ErrorCode::NoSpace, ErrorCode::Unavailable] {
            assert!(
                commit_outcome_unknown(&RemoteError::new(code, "x")),
                "{code:?}"
            );
        }
        for code in [
            ErrorCode::Exists,
            ErrorCode::PermissionDenied,
            ErrorCode::NotFound,
            ErrorCode::InvalidArgument,
        ] {
            assert!(
                !commit_outcome_unknown(&RemoteError::new(code, "x")),
                "{code:?}"
            );
        }
    }
}
