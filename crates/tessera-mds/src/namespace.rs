//! The namespace in redb: inodes, directory entries and cluster facts, all transactional.
//!
//! Three tables hold everything the mds knows. `inodes` maps a handle to its attributes and
//! layout (postcard-encoded [`Inode`]); `dirents` maps (parent handle, name) to a child handle,
//! so a directory listing is one ordered range scan; `meta` holds the next free handle, the
//! cluster's server count, which must not change under existing layouts, and the namespace id:
//! a random number made at the store's first open, which the mds names in every request that
//! changes objects on the iods, so that an iod obeys the mds of one namespace only. Every change is one
//! redb write transaction, committed in groups and answered once durable ([`Store::change`]). File data and sizes are not here: sizes
//! are computed from the iods (see `docs/SEMANTICS.md`).
//!
//! Every call that names a path takes the [`Caller`] and checks POSIX permissions
//! ([`crate::access`]) inside the same transaction that reads or changes the namespace: search
//! on each directory passed through, then the rights the call needs on the parent or the
//! entry. A refusal returns before anything is written.

use std::borrow::Cow;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use tessera_proto::limits::{cache_unit_for_stripe, READDIR_ENTRIES_MAX, SERVERS_MAX};
use tessera_proto::{
    Attr, Create, DirEntry, ErrorCode, FileKind, PatternLayout, ReaddirReply, RemoteError,
    StripeLayout, TIME_NOW, TIME_OMIT,
};

use crate::access::{self, Caller, Rights};
/// Mode of the namespace store's file (kept here, where it was, for callers of this path).
pub use crate::store::STORE_FILE_MODE;
use crate::store::{
    open_database, store_error, CommitStats, FileStore, Store, StoreBackend, StoreHealth,
};

const INODES: TableDefinition<u64, &[u8]> = TableDefinition::new("inodes");
const DIRENTS: TableDefinition<(u64, &str), u64> = TableDefinition::new("dirents");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

mod inode;
mod path;

use inode::{now_ns, KIND_FILE};
pub use inode::{Inode, ROOT_HANDLE};
pub use path::components;
use path::{
    check_mode, check_new_name, check_open, decode_inode, encode_inode, expect_kind,
    names_no_directory, not_found, read_inode, search_above, unknown_handle, walk, walk_parent,
    Parent,
};

/// The outcome of preparing a create.
#[derive(Debug)]
pub enum CreatePlan {
    /// The file exists and the create was not exclusive: use it.
    Existing(u64, Inode),
    /// A new file: create its objects, then [`Namespace::commit_create`].
    New(u64, Inode),
}

/// Version of the stored records; 2 added pattern layouts to file inodes.
const FORMAT: u64 = 2;

/// The namespace of one cluster.
#[derive(Debug)]
pub struct Namespace {
    /// The redb file, reopened after an I/O error ([`crate::store`]).
    store: Store,
    next_handle: AtomicU64,
    /// This namespace's id, never 0 (`meta` key `namespace_id`).
    id: u64,
    server_count: u16,
    default_stripe_unit_bytes: u64,
    /// Treat callers with uid 0 as `nobody` ([`access::NOBODY`]).
    root_squash: bool,
}

/// A random namespace id, not 0 (0 means "none" on the wire).
fn new_namespace_id() -> Result<u64, RemoteError> {
    loop {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).map_err(|err| {
            RemoteError::new(
                ErrorCode::Internal,
                format!("no random bytes for a namespace id: {err}"),
            )
        })?;
        let id = u64::from_le_bytes(bytes);
        if id != 0 {
            return Ok(id);
        }
    }
}

impl Namespace {
    /// Opens (or creates) the namespace in the redb file `db_path` (owner-only,
    /// [`STORE_FILE_MODE`]) for a cluster of `server_count` iods. A new namespace's root
    /// directory is mode 0755, owned by the user running the mds.
    pub fn open_store(
        db_path: &Path,
        server_count: u16,
        default_stripe_unit_bytes: u64,
    ) -> Result<Self, RemoteError> {
        Self::open_on(
            Box::new(FileStore::new(db_path)),
            server_count,
            default_stripe_unit_bytes,
        )
    }

    /// Opens (or creates) the namespace on `backend` (its bytes, reopened there after a
    /// storage error), as [`Namespace::open_store`] does on a file: servers use that, tests
    /// the backends of `crate::testing`.
    pub fn open_on(
        backend: Box<dyn StoreBackend>,
        server_count: u16,
        default_stripe_unit_bytes: u64,
    ) -> Result<Self, RemoteError> {
        if server_count == 0 || usize::from(server_count) > SERVERS_MAX {
            return Err(RemoteError::new(
                ErrorCode::InvalidArgument,
                format!("server count {server_count} is outside 1..={SERVERS_MAX}"),
            ));
        }
        StripeLayout::new(default_stripe_unit_bytes, vec![0])
            .map_err(|why| RemoteError::new(ErrorCode::InvalidArgument, why))?;
        let at_path = |error: RemoteError| {
            RemoteError::new(error.code, format!("{backend}: {}", error.message))
        };
        let db = open_database(&*backend, true).map_err(|err| at_path(store_error(err)))?;
        let txn = db.begin_write().map_err(store_error)?;
        let next_handle;
        let namespace_id;
        {
            let mut meta = txn.open_table(META).map_err(store_error)?;
            let mut inodes = txn.open_table(INODES).map_err(store_error)?;
            txn.open_table(DIRENTS).map_err(store_error)?;
            let stored_servers = meta
                .get("server_count")
                .map_err(store_error)?
                .map(|guard| guard.value());
            let stored_format = meta
                .get("format")
                .map_err(store_error)?
                .map(|guard| guard.value());
            match (stored_format, stored_servers) {
                (Some(FORMAT), _) => {}
                (None, None) => {
                    meta.insert("format", FORMAT).map_err(store_error)?;
                }
                (found, _) => {
                    return Err(RemoteError::new(
                        ErrorCode::InvalidArgument,
                        format!(
                            "{backend} holds namespace format {}, this build reads format {FORMAT}: move it aside and start a new cluster",
                            found.unwrap_or(1)
                        ),
                    ));
                }
            }
            match stored_servers {
                Some(stored) if stored != u64::from(server_count) => {
                    return Err(RemoteError::new(
                        ErrorCode::InvalidArgument,
                        format!("{backend} was made for {stored} I/O servers, not {server_count}: start the cluster with --servers {stored}"),
                    ));
                }
                Some(_) => {}
                None => {
                    meta.insert("server_count", u64::from(server_count))
                        .map_err(store_error)?;
                }
            }
            if inodes.get(ROOT_HANDLE).map_err(store_error)?.is_none() {
                // SAFETY: geteuid and getegid cannot fail and touch no memory of ours.
                let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
                // The root belongs to whoever runs the mds: root for a system cluster, the
                // user for a private one.
                let root = Inode::directory(0o755, &Caller::new(uid, gid), ROOT_HANDLE);
                inodes
                    .insert(ROOT_HANDLE, encode_inode(&root)?.as_slice())
                    .map_err(store_error)?;
            }
            next_handle = meta
                .get("next_handle")
                .map_err(store_error)?
                .map_or(ROOT_HANDLE + 1, |guard| guard.value());
            let stored_id = meta
                .get("namespace_id")
                .map_err(store_error)?
                .map(|guard| guard.value());
            namespace_id = match stored_id {
                Some(id) if id != 0 => id,
                // A new store, or one an older version made: its id is made now, and its iods
                // record it at their next contact.
                _ => {
                    let id = new_namespace_id().map_err(at_path)?;
                    meta.insert("namespace_id", id).map_err(store_error)?;
                    id
                }
            };
        }
        txn.commit().map_err(store_error)?;
        Ok(Self {
            store: Store::new(backend, db),
            next_handle: AtomicU64::new(next_handle),
            id: namespace_id,
            server_count,
            default_stripe_unit_bytes,
            root_squash: false,
        })
    }

    /// This namespace's id: random, made at the store's first open, never 0.
    pub fn namespace_id(&self) -> u64 {
        self.id
    }

    /// Turns root squash on or off: with it on, a caller with uid 0 is treated as uid and gid
    /// [`access::NOBODY`] with no supplementary groups, in every call.
    #[must_use]
    pub fn with_root_squash(mut self, root_squash: bool) -> Self {
        self.root_squash = root_squash;
        self
    }

    /// Whether root squash is on.
    pub fn root_squash(&self) -> bool {
        self.root_squash
    }

    /// The caller the checks see: squashed when root squash is on.
    fn effective<'c>(&self, caller: &'c Caller) -> Cow<'c, Caller> {
        if self.root_squash && caller.is_root() {
            Cow::Owned(caller.squashed())
        } else {
            Cow::Borrowed(caller)
        }
    }

    /// The store's condition after the last call (`Ping` reports it).
    pub fn store_health(&self) -> StoreHealth {
        self.store.health()
    }

    /// Changes made durable and the group commits that did it, since the mds started.
    pub fn commit_stats(&self) -> CommitStats {
        self.store.commit_stats()
    }

    /// Inodes stored (files and directories, the root included).
    pub fn inode_count(&self) -> Result<u64, RemoteError> {
        self.store.read(|db| {
            let txn = db.begin_read().map_err(store_error)?;
            txn.open_table(INODES)
                .map_err(store_error)?
                .len()
                .map_err(store_error)
        })
    }

    /// For each of `handles`, whether an inode holds it (in one read transaction).
    pub fn handles_stored(&self, handles: &[u64]) -> Result<Vec<bool>, RemoteError> {
        self.store.read(|db| {
            let txn = db.begin_read().map_err(store_error)?;
            let inodes = txn.open_table(INODES).map_err(store_error)?;
            handles
                .iter()
                .map(|&handle| Ok(inodes.get(handle).map_err(store_error)?.is_some()))
                .collect()
        })
    }

    /// Resolves `path`: search on every directory passed through.
    pub fn lookup(&self, caller: &Caller, path: &str) -> Result<(u64, Inode), RemoteError> {
        let caller = self.effective(caller);
        let names = components(path)?;
        self.store.read(|db| {
            let txn = db.begin_read().map_err(store_error)?;
            let dirents = txn.open_table(DIRENTS).map_err(store_error)?;
            let inodes = txn.open_table(INODES).map_err(store_error)?;
            let handle = walk(&dirents, &inodes, &caller, path, &names)?;
            Ok((handle, read_inode(&inodes, handle)?))
        })
    }

    /// Resolves `path` as [`Namespace::lookup`] does, then checks that the caller may open it
    /// for `read` and/or `write` ([`Namespace::check_open`]).
    pub fn open_inode(
        &self,
        caller: &Caller,
        path: &str,
        read: bool,
        write: bool,
    ) -> Result<(u64, Inode), RemoteError> {
        let (handle, inode) = self.lookup(caller, path)?;
        self.check_open(caller, path, &inode, read, write)?;
        Ok((handle, inode))
    }

    /// [`Namespace::open_inode`] as attributes (`size` 0: the mds computes sizes from the
    /// iods).
    pub fn open(
        &self,
        caller: &Caller,
        path: &str,
        read: bool,
        write: bool,
    ) -> Result<Attr, RemoteError> {
        let (handle, inode) = self.open_inode(caller, path, read, write)?;
        inode.attr(handle, 0)
    }

    /// The checks of [`Namespace::open`], by handle, for renewing a capability: as of now,
    /// search on every directory from the root down to the file's (walking up its parents in
    /// one read transaction) and the rights against the file's bits, for the caller after
    /// root squash. A file has one name (there are no hard links), so this is what an open of
    /// its current path checks. The caller must have shown a capability for the handle
    /// first: the handler does, so a stranger learns nothing of a handle, not even whether it
    /// exists.
    pub fn open_handle(
        &self,
        caller: &Caller,
        handle: u64,
        read: bool,
        write: bool,
    ) -> Result<Attr, RemoteError> {
        let caller = self.effective(caller);
        let inode = self.store.read(|db| {
            let txn = db.begin_read().map_err(store_error)?;
            let inodes = txn.open_table(INODES).map_err(store_error)?;
            let inode = inodes
                .get(handle)
                .map_err(store_error)?
                .ok_or_else(|| unknown_handle(handle))
                .and_then(|guard| decode_inode(guard.value()))?;
            search_above(&inodes, &caller, handle, &inode)?;
            Ok(inode)
        })?;
        check_open(&caller, &format!("handle {handle:#x}"), &inode, read, write)?;
        inode.attr(handle, 0)
    }

    /// Refuses to open `inode` (named `path` in errors) for `read` and/or `write` unless its
    /// bits grant the caller those rights; a directory opened for write is `IsDirectory`.
    /// A non-exclusive create of an existing file makes this check for read and write.
    pub fn check_open(
        &self,
        caller: &Caller,
        path: &str,
        inode: &Inode,
        read: bool,
        write: bool,
    ) -> Result<(), RemoteError> {
        check_open(&self.effective(caller), path, inode, read, write)
    }

    /// The inode of `handle`.
    pub fn get(&self, handle: u64) -> Result<Inode, RemoteError> {
        self.store.read(|db| {
            let txn = db.begin_read().map_err(store_error)?;
            let inodes = txn.open_table(INODES).map_err(store_error)?;
            inodes
                .get(handle)
                .map_err(store_error)?
                .ok_or_else(|| unknown_handle(handle))
                .and_then(|guard| decode_inode(guard.value()))
        })
    }

    /// Checks a create and, for a new file, picks its handle and layout. The caller creates
    /// the file's objects on the iods before [`Namespace::commit_create`] makes it visible.
    /// The request's credentials are not read: `caller` is who asks. A new file needs write
    /// and search on the parent; an existing file (not `exclusive`) is opened for reading and
    /// writing, so it needs read and write on the file.
    pub fn plan_create(
        &self,
        caller: &Caller,
        request: &Create,
    ) -> Result<CreatePlan, RemoteError> {
        self.plan_create_with(caller, request, None)
    }

    /// [`Namespace::plan_create`], a new file taking `handle` when given (one whose objects
    /// were made ahead on every iod: [`Namespace::precreatable`] says when that fits) instead
    /// of the next free one.
    pub fn plan_create_with(
        &self,
        caller: &Caller,
        request: &Create,
        handle: Option<u64>,
    ) -> Result<CreatePlan, RemoteError> {
        let caller = self.effective(caller);
        let Create {
            credentials: _,
            path,
            mode,
            exclusive,
            stripe_unit_bytes,
            server_count,
            pattern,
            cache_unit_bytes: _,
        } = request;
        let (path, mode, exclusive) = (path.as_str(), *mode, *exclusive);
        let (stripe_unit_bytes, server_count) = (*stripe_unit_bytes, *server_count);
        check_mode(mode)?;
        names_no_directory(path, "create", ErrorCode::IsDirectory)?;
        self.store.read(|db| {
            let txn = db.begin_read().map_err(store_error)?;
            let dirents = txn.open_table(DIRENTS).map_err(store_error)?;
            let inodes = txn.open_table(INODES).map_err(store_error)?;
            let parent = walk_parent(&dirents, &inodes, &caller, path)?;
            if let Some(existing) = dirents
                .get((parent.handle, parent.name))
                .map_err(store_error)?
            {
                let handle = existing.value();
                let inode = read_inode(&inodes, handle)?;
                if inode.is_directory() {
                    return Err(RemoteError::new(
                        ErrorCode::IsDirectory,
                        format!("{path} is a directory"),
                    ));
                }
                if exclusive {
                    return Err(RemoteError::new(
                        ErrorCode::Exists,
                        format!("{path} already exists"),
                    ));
                }
                check_open(&caller, path, &inode, true, true)?;
                return Ok(CreatePlan::Existing(handle, inode));
            }
            check_new_name(path, parent.name)?;
            parent.require_write(&caller, path)?;
            let parent = parent.handle;
            let stripe_unit_bytes = if stripe_unit_bytes == 0 {
                self.default_stripe_unit_bytes
            } else {
                stripe_unit_bytes
            };
            let count = if !pattern.is_empty() {
                let types = u16::try_from(pattern.len()).unwrap_or(u16::MAX);
                if server_count != 0 && server_count != types {
                    return Err(RemoteError::new(
                        ErrorCode::InvalidArgument,
                        format!("{path}: a pattern of {types} types needs {types} servers, not {server_count}"),
                    ));
                }
                types
            } else if server_count == 0 {
                self.server_count
            } else {
                server_count
            };
            if count > self.server_count {
                return Err(RemoteError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "{path}: asked for {count} servers but the cluster has {}",
                        self.server_count
                    ),
                ));
            }
            let handle =
                handle.unwrap_or_else(|| self.next_handle.fetch_add(1, Ordering::Relaxed));
            // Spread files over the servers: each starts its stripes on a different one.
            let first =
                u16::try_from(handle % u64::from(self.server_count)).expect("below server count");
            let servers: Vec<u16> = (0..count)
                .map(|i| (first + i) % self.server_count)
                .collect();
            let invalid =
                |why: String| RemoteError::new(ErrorCode::InvalidArgument, format!("{path}: {why}"));
            let pattern = if pattern.is_empty() {
                StripeLayout::new(stripe_unit_bytes, servers.clone()).map_err(invalid)?;
                Vec::new()
            } else {
                PatternLayout::new(servers.clone(), pattern.clone()).map_err(invalid)?;
                pattern
                    .iter()
                    .map(|datatype| {
                        tessera_proto::dtype::wire::encode(datatype)
                            .map_err(|err| invalid(err.to_string()))
                    })
                    .collect::<Result<_, _>>()?
            };
            let now = now_ns();
            let inode = Inode {
                kind: KIND_FILE,
                mode,
                uid: caller.uid,
                gid: caller.gid,
                atime_ns: now,
                mtime_ns: now,
                ctime_ns: now,
                nlink: 1,
                parent,
                stripe_unit_bytes,
                servers,
                pattern,
                times_set_ns: 0,
            };
            Ok(CreatePlan::New(handle, inode))
        })
    }

    /// Whether a create of `request` may take a handle whose objects were made ahead on every
    /// iod with `cache_unit_bytes`: a striped file over all the servers whose objects want
    /// that cache unit.
    pub fn precreatable(&self, request: &Create, cache_unit_bytes: u32) -> bool {
        let stripe_unit_bytes = match request.stripe_unit_bytes {
            0 => self.default_stripe_unit_bytes,
            given => given,
        };
        request.pattern.is_empty()
            && (request.server_count == 0 || request.server_count == self.server_count)
            && match request.cache_unit_bytes {
                0 => cache_unit_for_stripe(stripe_unit_bytes) == cache_unit_bytes,
                hinted => hinted == cache_unit_bytes,
            }
    }

    /// The cache unit a create of a striped file with the default stripe unit and no hint
    /// gives its objects: the one objects made ahead carry.
    pub fn default_cache_unit(&self) -> u32 {
        cache_unit_for_stripe(self.default_stripe_unit_bytes)
    }

    /// The number of servers of the cluster.
    pub fn server_count(&self) -> u16 {
        self.server_count
    }

    /// Takes `count` handles for objects made ahead of their creates, and records the next
    /// free handle past them durably first: after a crash of the mds they are never handed out
    /// again, so their objects are orphans for the iods' sweep, never a later file's.
    pub fn reserve_handles(&self, count: u64) -> Result<std::ops::Range<u64>, RemoteError> {
        let start = self.next_handle.fetch_add(count, Ordering::Relaxed);
        let end = start + count;
        self.store.change(|txn| {
            let mut meta = txn.open_table(META).map_err(store_error)?;
            let stored = meta
                .get("next_handle")
                .map_err(store_error)?
                .map_or(0, |guard| guard.value());
            meta.insert("next_handle", stored.max(end))
                .map_err(store_error)?;
            Ok(())
        })?;
        Ok(start..end)
    }

    /// Makes a planned file visible. If another create of the same name won the race, returns
    /// that file (or `Exists` when `exclusive`) and `false`: the caller removes its objects.
    /// The permission checks of [`Namespace::plan_create`] are made again in this transaction,
    /// so a chmod in between is honoured.
    pub fn commit_create(
        &self,
        caller: &Caller,
        path: &str,
        handle: u64,
        inode: &Inode,
        exclusive: bool,
    ) -> Result<(u64, Inode, bool), RemoteError> {
        let caller = self.effective(caller);
        self.store.change(|txn| {
            let outcome;
            {
                let mut dirents = txn.open_table(DIRENTS).map_err(store_error)?;
                let mut inodes = txn.open_table(INODES).map_err(store_error)?;
                let mut meta = txn.open_table(META).map_err(store_error)?;
                let Parent {
                    handle: parent,
                    inode: mut parent_inode,
                    name,
                    path: parent_path,
                } = walk_parent(&dirents, &inodes, &caller, path)?;
                let existing = dirents
                    .get((parent, name))
                    .map_err(store_error)?
                    .map(|guard| guard.value());
                if let Some(existing) = existing {
                    if exclusive {
                        return Err(RemoteError::new(
                            ErrorCode::Exists,
                            format!("{path} already exists"),
                        ));
                    }
                    let other = read_inode(&inodes, existing)?;
                    if other.is_directory() {
                        return Err(RemoteError::new(
                            ErrorCode::IsDirectory,
                            format!("{path} is a directory"),
                        ));
                    }
                    check_open(&caller, path, &other, true, true)?;
                    outcome = (existing, other, false);
                } else {
                    check_new_name(path, name)?;
                    access::require(
                        &caller,
                        parent_inode.owner(),
                        Rights::WRITE_SEARCH,
                        path,
                        &parent_path,
                    )?;
                    let mut inode = inode.clone();
                    inode.parent = parent;
                    inodes
                        .insert(handle, encode_inode(&inode)?.as_slice())
                        .map_err(store_error)?;
                    dirents
                        .insert((parent, name), handle)
                        .map_err(store_error)?;
                    parent_inode.mtime_ns = inode.mtime_ns;
                    parent_inode.ctime_ns = inode.mtime_ns;
                    inodes
                        .insert(parent, encode_inode(&parent_inode)?.as_slice())
                        .map_err(store_error)?;
                    let stored_next = meta
                        .get("next_handle")
                        .map_err(store_error)?
                        .map_or(0, |guard| guard.value());
                    meta.insert("next_handle", stored_next.max(handle + 1))
                        .map_err(store_error)?;
                    outcome = (handle, inode, true);
                }
            }
            Ok(outcome)
        })
    }

    /// Creates a directory, owned by the caller: needs write and search on the parent.
    pub fn mkdir(
        &self,
        caller: &Caller,
        path: &str,
        mode: u32,
    ) -> Result<(u64, Inode), RemoteError> {
        let caller = self.effective(caller);
        check_mode(mode)?;
        self.store.change(|txn| {
            let created;
            {
                let mut dirents = txn.open_table(DIRENTS).map_err(store_error)?;
                let mut inodes = txn.open_table(INODES).map_err(store_error)?;
                let mut meta = txn.open_table(META).map_err(store_error)?;
                let found = walk_parent(&dirents, &inodes, &caller, path)?;
                if dirents
                    .get((found.handle, found.name))
                    .map_err(store_error)?
                    .is_some()
                {
                    return Err(RemoteError::new(
                        ErrorCode::Exists,
                        format!("{path} already exists"),
                    ));
                }
                check_new_name(path, found.name)?;
                found.require_write(&caller, path)?;
                let (parent, mut parent_inode, name) = (found.handle, found.inode, found.name);
                let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
                let inode = Inode::directory(mode, &caller, parent);
                inodes
                    .insert(handle, encode_inode(&inode)?.as_slice())
                    .map_err(store_error)?;
                dirents
                    .insert((parent, name), handle)
                    .map_err(store_error)?;
                parent_inode.nlink += 1;
                parent_inode.mtime_ns = inode.mtime_ns;
                parent_inode.ctime_ns = inode.mtime_ns;
                inodes
                    .insert(parent, encode_inode(&parent_inode)?.as_slice())
                    .map_err(store_error)?;
                let stored_next = meta
                    .get("next_handle")
                    .map_err(store_error)?
                    .map_or(0, |guard| guard.value());
                meta.insert("next_handle", stored_next.max(handle + 1))
                    .map_err(store_error)?;
                created = (handle, inode);
            }
            Ok(created)
        })
    }

    /// Removes a name: a file (`want_directory == false`) or an empty directory. Returns the
    /// removed inode, whose objects the caller deletes. Needs write and search on the parent,
    /// and, in a sticky parent, to own the entry or the parent (or be root).
    pub fn remove(
        &self,
        caller: &Caller,
        path: &str,
        want_directory: bool,
    ) -> Result<(u64, Inode), RemoteError> {
        let caller = self.effective(caller);
        self.store.change(|txn| {
            let removed;
            {
                let mut dirents = txn.open_table(DIRENTS).map_err(store_error)?;
                let mut inodes = txn.open_table(INODES).map_err(store_error)?;
                let found = walk_parent(&dirents, &inodes, &caller, path)?;
                let handle = dirents
                    .get((found.handle, found.name))
                    .map_err(store_error)?
                    .ok_or_else(|| not_found(path))?
                    .value();
                let inode = read_inode(&inodes, handle)?;
                found.require_write(&caller, path)?;
                found.require_sticky(&caller, inode.uid, path)?;
                let (parent, mut parent_inode, name) = (found.handle, found.inode, found.name);
                expect_kind(path, &inode, want_directory)?;
                if inode.is_directory()
                    && dirents
                        .range((handle, "")..(handle + 1, ""))
                        .map_err(store_error)?
                        .next()
                        .is_some()
                {
                    return Err(RemoteError::new(
                        ErrorCode::NotEmpty,
                        format!("{path} is not empty"),
                    ));
                }
                dirents.remove((parent, name)).map_err(store_error)?;
                inodes.remove(handle).map_err(store_error)?;
                let now = now_ns();
                if inode.is_directory() {
                    parent_inode.nlink -= 1;
                }
                parent_inode.mtime_ns = now;
                parent_inode.ctime_ns = now;
                inodes
                    .insert(parent, encode_inode(&parent_inode)?.as_slice())
                    .map_err(store_error)?;
                removed = (handle, inode);
            }
            Ok(removed)
        })
    }

    /// Moves `source` to `target`, replacing a target file or empty directory of the same
    /// kind. Returns a replaced file, whose objects the caller deletes. Needs write and search
    /// on both parents; the sticky rule of [`Namespace::remove`] for the moved entry and for a
    /// replaced one; and write on a directory that moves to another parent (its `..` changes).
    pub fn rename(
        &self,
        caller: &Caller,
        source: &str,
        target: &str,
    ) -> Result<Option<(u64, Inode)>, RemoteError> {
        let caller = self.effective(caller);
        self.store.change(|txn| {
            let replaced;
            {
                let mut dirents = txn.open_table(DIRENTS).map_err(store_error)?;
                let mut inodes = txn.open_table(INODES).map_err(store_error)?;
                let from = walk_parent(&dirents, &inodes, &caller, source)?;
                let to = walk_parent(&dirents, &inodes, &caller, target)?;
                let (source_parent, source_name) = (from.handle, from.name);
                let (target_parent, target_name) = (to.handle, to.name);
                check_new_name(target, target_name)?;
                let handle = dirents
                    .get((source_parent, source_name))
                    .map_err(store_error)?
                    .ok_or_else(|| not_found(source))?
                    .value();
                let mut inode = read_inode(&inodes, handle)?;
                if !inode.is_directory() {
                    names_no_directory(target, "rename a file to", ErrorCode::NotDirectory)?;
                }
                from.require_write(&caller, source)?;
                to.require_write(&caller, target)?;
                from.require_sticky(&caller, inode.uid, source)?;
                if inode.is_directory() && source_parent != target_parent {
                    access::require(&caller, inode.owner(), Rights::WRITE, source, source)?;
                }
                if inode.is_directory() {
                    // A directory cannot move below itself.
                    let mut ancestor = target_parent;
                    loop {
                        if ancestor == handle {
                            return Err(RemoteError::new(
                                ErrorCode::InvalidArgument,
                                format!("cannot move {source} into itself ({target})"),
                            ));
                        }
                        if ancestor == ROOT_HANDLE {
                            break;
                        }
                        ancestor = read_inode(&inodes, ancestor)?.parent;
                    }
                }
                let existing = dirents
                    .get((target_parent, target_name))
                    .map_err(store_error)?
                    .map(|guard| guard.value());
                let mut victim = None;
                if let Some(existing) = existing {
                    if existing == handle {
                        return Ok(None);
                    }
                    let other = read_inode(&inodes, existing)?;
                    to.require_sticky(&caller, other.uid, target)?;
                    expect_kind(target, &other, inode.is_directory())?;
                    let non_empty = other.is_directory()
                        && dirents
                            .range((existing, "")..(existing + 1, ""))
                            .map_err(store_error)?
                            .next()
                            .is_some();
                    if non_empty {
                        return Err(RemoteError::new(
                            ErrorCode::NotEmpty,
                            format!("{target} is not empty"),
                        ));
                    }
                    inodes.remove(existing).map_err(store_error)?;
                    victim = Some((existing, other));
                }
                dirents
                    .remove((source_parent, source_name))
                    .map_err(store_error)?;
                dirents
                    .insert((target_parent, target_name), handle)
                    .map_err(store_error)?;
                let now = now_ns();
                inode.ctime_ns = now;
                inode.parent = target_parent;
                inodes
                    .insert(handle, encode_inode(&inode)?.as_slice())
                    .map_err(store_error)?;
                // A moved directory leaves its old parent and joins the new one, unless it
                // replaced a directory there, whose link it takes over.
                let mut deltas = vec![(source_parent, 0i64), (target_parent, 0i64)];
                if inode.is_directory() {
                    deltas[0].1 -= 1;
                    if victim.is_none() {
                        deltas[1].1 += 1;
                    }
                }
                if source_parent == target_parent {
                    deltas[0].1 += deltas[1].1;
                    deltas.truncate(1);
                }
                for (parent, delta) in deltas {
                    let mut parent_inode = read_inode(&inodes, parent)?;
                    parent_inode.mtime_ns = now;
                    parent_inode.ctime_ns = now;
                    parent_inode.nlink = u32::try_from(i64::from(parent_inode.nlink) + delta)
                        .expect("link counts stay positive");
                    inodes
                        .insert(parent, encode_inode(&parent_inode)?.as_slice())
                        .map_err(store_error)?;
                }
                replaced = victim.filter(|(_, other)| !other.is_directory());
            }
            Ok(replaced)
        })
    }

    /// One page of the entries of directory `path` with names after `after`: needs read on
    /// the directory.
    pub fn readdir(
        &self,
        caller: &Caller,
        path: &str,
        after: &str,
    ) -> Result<ReaddirReply, RemoteError> {
        let caller = self.effective(caller);
        let names = components(path)?;
        self.store.read(|db| {
            let txn = db.begin_read().map_err(store_error)?;
            let dirents = txn.open_table(DIRENTS).map_err(store_error)?;
            let inodes = txn.open_table(INODES).map_err(store_error)?;
            let handle = walk(&dirents, &inodes, &caller, path, &names)?;
            let directory = read_inode(&inodes, handle)?;
            if !directory.is_directory() {
                return Err(RemoteError::new(
                    ErrorCode::NotDirectory,
                    format!("{path} is not a directory"),
                ));
            }
            access::require(&caller, directory.owner(), Rights::READ, path, path)?;
            let mut entries = Vec::new();
            let mut more = false;
            for item in dirents
                .range((handle, after)..(handle + 1, ""))
                .map_err(store_error)?
            {
                let (key, value) = item.map_err(store_error)?;
                let (_, name) = key.value();
                if name == after {
                    continue;
                }
                if entries.len() == READDIR_ENTRIES_MAX as usize {
                    more = true;
                    break;
                }
                let child = value.value();
                let kind = if read_inode(&inodes, child)?.is_directory() {
                    FileKind::Directory
                } else {
                    FileKind::File
                };
                entries.push(DirEntry {
                    name: name.to_owned(),
                    handle: child,
                    kind,
                });
            }
            Ok(ReaddirReply { entries, more })
        })
    }

    /// Records a change of the data of `handle` (truncate) in its times. A handle that is no
    /// longer in the namespace (the file was removed meanwhile) is `UnknownHandle`.
    pub fn touch(&self, handle: u64) -> Result<Inode, RemoteError> {
        self.store.change(|txn| {
            let inode;
            {
                let mut inodes = txn.open_table(INODES).map_err(store_error)?;
                let mut current = match inodes.get(handle).map_err(store_error)? {
                    Some(guard) => decode_inode(guard.value())?,
                    None => return Err(unknown_handle(handle)),
                };
                let now = now_ns();
                current.mtime_ns = now;
                current.ctime_ns = now;
                inodes
                    .insert(handle, encode_inode(&current)?.as_slice())
                    .map_err(store_error)?;
                inode = current;
            }
            Ok(inode)
        })
    }

    /// Sets the permission bits of `path` (only its owner or root may; see
    /// [`access::chmod`]). Returns the changed inode.
    pub fn chmod(
        &self,
        caller: &Caller,
        path: &str,
        mode: u32,
    ) -> Result<(u64, Inode), RemoteError> {
        check_mode(mode)?;
        self.set_attributes(caller, path, |caller, inode| {
            inode.mode = access::chmod(caller, inode.owner(), mode, path)?;
            Ok(())
        })
    }

    /// Sets the owner and/or group of `path` (`None` leaves one as it is; see
    /// [`access::chown`]). Returns the changed inode.
    pub fn chown(
        &self,
        caller: &Caller,
        path: &str,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<(u64, Inode), RemoteError> {
        self.set_attributes(caller, path, |caller, inode| {
            (inode.mode, inode.uid, inode.gid) =
                access::chown(caller, inode.owner(), uid, gid, path)?;
            Ok(())
        })
    }

    /// Sets the access and modification times of `path` (`SetTimes`: each ns since the epoch,
    /// `TIME_NOW` or `TIME_OMIT`; see [`access::set_times`] for who may). Returns the changed
    /// inode.
    pub fn set_times(
        &self,
        caller: &Caller,
        path: &str,
        atime_ns: u64,
        mtime_ns: u64,
    ) -> Result<(u64, Inode), RemoteError> {
        self.set_attributes(caller, path, |caller, inode| {
            let now = now_ns();
            access::set_times(caller, inode.owner(), (atime_ns, mtime_ns), path)?;
            let resolve = |time: u64| match time {
                TIME_OMIT => None,
                TIME_NOW => Some(now),
                at => Some(at),
            };
            if let Some(atime) = resolve(atime_ns) {
                inode.atime_ns = atime;
            }
            if let Some(mtime) = resolve(mtime_ns) {
                inode.mtime_ns = mtime;
                inode.times_set_ns = now;
            }
            Ok(())
        })
    }

    /// Resolves `path` and applies `change` to its inode in one transaction, stamping ctime.
    fn set_attributes(
        &self,
        caller: &Caller,
        path: &str,
        change: impl FnOnce(&Caller, &mut Inode) -> Result<(), RemoteError>,
    ) -> Result<(u64, Inode), RemoteError> {
        let caller = self.effective(caller);
        let names = components(path)?;
        self.store.change(|txn| {
            let changed;
            {
                let dirents = txn.open_table(DIRENTS).map_err(store_error)?;
                let mut inodes = txn.open_table(INODES).map_err(store_error)?;
                let handle = walk(&dirents, &inodes, &caller, path, &names)?;
                let mut inode = read_inode(&inodes, handle)?;
                change(&caller, &mut inode)?;
                inode.ctime_ns = now_ns();
                inodes
                    .insert(handle, encode_inode(&inode)?.as_slice())
                    .map_err(store_error)?;
                changed = (handle, inode);
            }
            Ok(changed)
        })
    }
}

/// Every inode and every directory entry `(parent, name, child)`, in key order.
#[cfg(test)]
type Snapshot = (Vec<(u64, Inode)>, Vec<(u64, String, u64)>);

#[cfg(test)]
impl Namespace {
    /// Every inode and entry, in key order: a refused call must leave this unchanged.
    fn snapshot(&self) -> Snapshot {
        self.store
            .read(|db| {
                let txn = db.begin_read().unwrap();
                let inodes = txn.open_table(INODES).unwrap();
                let dirents = txn.open_table(DIRENTS).unwrap();
                let inodes = inodes
                    .iter()
                    .unwrap()
                    .map(|item| {
                        let (key, value) = item.unwrap();
                        (key.value(), decode_inode(value.value()).unwrap())
                    })
                    .collect();
                let dirents = dirents
                    .iter()
                    .unwrap()
                    .map(|item| {
                        let (key, value) = item.unwrap();
                        let (parent, name) = key.value();
                        (parent, name.to_owned(), value.value())
                    })
                    .collect();
                Ok((inodes, dirents))
            })
            .unwrap()
    }
}

#[cfg(test)]
mod permission_tests;

#[cfg(test)]
mod store_fault_tests;

#[cfg(test)]
mod tests;
