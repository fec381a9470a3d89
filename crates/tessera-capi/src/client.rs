//! Connecting to a cluster and the namespace calls: create, open, delete, mkdir, rmdir,
//! rename, chmod, chown, stat (listing a directory is `dir.rs`).
//!
//! A `TesseraClient` wraps one `tessera_client::Client` (its connections are made on first
//! use and shared by every file opened through it). Paths are Tessera paths (`/dir/file`).

use std::ffi::{c_char, c_int};
use std::path::PathBuf;

use tessera_client::config::CLUSTER_ENV;
use tessera_client::{
    Client, ClientOptions, ClusterConfig, CreateOptions, DemoteMode, OpenMode, ViewedFile,
};

use crate::error::{
    guard, handle, put, text, Failure, TESSERA_ERR_CONFIG, TESSERA_ERR_INVALID_ARGUMENT,
};
use crate::file::{FileState, TesseraFile};
use crate::stat::TesseraStat;

/// A connection to one cluster.
pub struct TesseraClient {
    pub(crate) client: Client,
}

/// Open for reading only.
pub const TESSERA_MODE_READ_ONLY: c_int = 1;
/// Open for writing only.
pub const TESSERA_MODE_WRITE_ONLY: c_int = 2;
/// Open for reading and writing.
pub const TESSERA_MODE_READ_WRITE: c_int = 3;

/// How [`tessera_create`] makes a file. Fill it with [`tessera_create_options_init`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TesseraCreateOptions {
    /// Permission bits (default 0644).
    pub mode: u32,
    /// Non-zero: fail with `TESSERA_ERR_EXISTS` if the name exists (default 0: open it).
    pub exclusive: c_int,
    /// Stripe unit in bytes (default 64 KiB).
    pub stripe_unit_bytes: u64,
    /// Servers to stripe over; 0 means all (default).
    pub server_count: u32,
    /// Unit of the iods' unified caches for the file: a power of two from 4096 to 65536
    /// bytes; 0 (default) lets the mds choose (the stripe unit where it is smaller than
    /// 64 KiB, else the iods' default). Another value fails with `TESSERA_ERR_INVALID_ARGUMENT`.
    pub cache_unit_bytes: u32,
}

/// The cluster file named by `cluster`, or by `$TESSERA_CLUSTER` when it is empty; a
/// directory stands for the `cluster.toml` in it.
fn cluster_file(cluster: &str) -> Result<PathBuf, Failure> {
    let named = if cluster.is_empty() {
        std::env::var(CLUSTER_ENV).map_err(|_| {
            Failure::new(
                TESSERA_ERR_CONFIG,
                format!("no cluster file given and ${CLUSTER_ENV} is not set"),
            )
        })?
    } else {
        cluster.to_owned()
    };
    let path = PathBuf::from(named);
    Ok(if path.is_dir() {
        path.join("cluster.toml")
    } else {
        path
    })
}

/// Connects to the cluster described by the cluster file `cluster` (a path to
/// `cluster.toml` or to the directory holding it). With `cluster` null or empty,
/// `$TESSERA_CLUSTER` names it. Connections are made on first use.
///
/// # Safety
/// `cluster` is null or a NUL-terminated string; `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_connect(
    cluster: *const c_char,
    out: *mut *mut TesseraClient,
) -> c_int {
    guard(|| {
        let cluster = if cluster.is_null() {
            ""
        } else {
            // SAFETY: not null; the caller guarantees a NUL-terminated string.
            unsafe { text(cluster, "cluster")? }
        };
        let client = Client::from_file(&cluster_file(cluster)?)?;
        let boxed = Box::into_raw(Box::new(TesseraClient { client }));
        // SAFETY: the caller guarantees `out` is valid for one write.
        unsafe { put(out, boxed, "out") }.inspect_err(|_| {
            // SAFETY: `boxed` came from Box::into_raw above and was not handed out.
            drop(unsafe { Box::from_raw(boxed) });
        })
    })
}

/// Evicted blocks are dropped ([`tessera_connect_with_cache`]).
pub const TESSERA_DEMOTE_OFF: c_int = 0;
/// Each evicted block is demoted to its iods before the read returns.
pub const TESSERA_DEMOTE_EAGER: c_int = 1;
/// Evicted blocks wait in a DEMOTE buffer and travel in batches.
pub const TESSERA_DEMOTE_BUFFERED: c_int = 2;

/// As [`tessera_connect`], with a client cache of `cache_bytes` (0: none) whose evicted
/// blocks are handled by `demote` (`TESSERA_DEMOTE_*`). Contiguous reads of a file's default
/// view go through the cache (docs/SEMANTICS.md §3.2). Another `demote` value fails with
/// `TESSERA_ERR_INVALID_ARGUMENT`.
///
/// # Safety
/// As [`tessera_connect`].
#[no_mangle]
pub unsafe extern "C" fn tessera_connect_with_cache(
    cluster: *const c_char,
    cache_bytes: u64,
    demote: c_int,
    out: *mut *mut TesseraClient,
) -> c_int {
    // SAFETY: the caller's guarantees, passed on.
    unsafe { connect_cached(cluster, (cache_bytes, demote, false), out) }
}

/// As [`tessera_connect_with_cache`], and the cache also buffers small writes under write
/// leases, sent as one list write per server at `tessera_file_flush`, `tessera_file_sync`,
/// `tessera_close`, a revocation, a full buffer or half a second (docs/SEMANTICS.md §3.3). A
/// `cache_bytes` of 0 fails with `TESSERA_ERR_INVALID_ARGUMENT`: buffered writes live in the
/// cache.
///
/// # Safety
/// As [`tessera_connect`].
#[no_mangle]
pub unsafe extern "C" fn tessera_connect_with_write_back(
    cluster: *const c_char,
    cache_bytes: u64,
    demote: c_int,
    out: *mut *mut TesseraClient,
) -> c_int {
    if cache_bytes == 0 {
        return guard(|| {
            Err(Failure::new(
                TESSERA_ERR_INVALID_ARGUMENT,
                "write-back needs a client cache: cache_bytes 0",
            ))
        });
    }
    // SAFETY: the caller's guarantees, passed on.
    unsafe { connect_cached(cluster, (cache_bytes, demote, true), out) }
}

/// The body of the cached connects.
///
/// # Safety
/// As [`tessera_connect`].
unsafe fn connect_cached(
    cluster: *const c_char,
    (cache_bytes, demote, write_back): (u64, c_int, bool),
    out: *mut *mut TesseraClient,
) -> c_int {
    guard(|| {
        let demote = match demote {
            TESSERA_DEMOTE_OFF => DemoteMode::Off,
            TESSERA_DEMOTE_EAGER => DemoteMode::Eager,
            TESSERA_DEMOTE_BUFFERED => DemoteMode::Buffered,
            other => {
                return Err(Failure::new(
                    TESSERA_ERR_INVALID_ARGUMENT,
                    format!(
                        "demote {other}: give TESSERA_DEMOTE_OFF, _EAGER or _BUFFERED (0, 1, 2)"
                    ),
                ))
            }
        };
        let cluster = if cluster.is_null() {
            ""
        } else {
            // SAFETY: not null; the caller guarantees a NUL-terminated string.
            unsafe { text(cluster, "cluster")? }
        };
        let config = ClusterConfig::load(&cluster_file(cluster)?)?;
        let options = ClientOptions {
            cache_bytes: Some(cache_bytes),
            demote: Some(demote),
            write_back: Some(write_back),
            ..ClientOptions::default()
        };
        let client = Client::new(&config, &options);
        let boxed = Box::into_raw(Box::new(TesseraClient { client }));
        // SAFETY: the caller guarantees `out` is valid for one write.
        unsafe { put(out, boxed, "out") }.inspect_err(|_| {
            // SAFETY: `boxed` came from Box::into_raw above and was not handed out.
            drop(unsafe { Box::from_raw(boxed) });
        })
    })
}

/// What a client's cache did since the client was made (all zeros without a cache).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TesseraCacheStats {
    /// Blocks found cached.
    pub hits: u64,
    /// Blocks read from the iods.
    pub misses: u64,
    /// Blocks dropped to make room.
    pub evictions: u64,
    /// Revocations answered.
    pub revocations: u64,
    /// Evicted blocks demoted to their iods.
    pub demotes_sent: u64,
    /// Evicted blocks not demoted.
    pub demotes_refused: u64,
    /// Misses found in the DEMOTE buffer.
    pub buffer_hits: u64,
}

/// Fills `out` with the client cache's counters.
///
/// # Safety
/// `client` comes from [`tessera_connect`] or [`tessera_connect_with_cache`]; `out` is valid
/// for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_client_cache_stats(
    client: *const TesseraClient,
    out: *mut TesseraCacheStats,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee.
        let client = unsafe { handle(client, "client")? };
        let stats = client.client.cache_stats().unwrap_or_default();
        let counters = TesseraCacheStats {
            hits: stats.hits,
            misses: stats.misses,
            evictions: stats.evictions,
            revocations: stats.revocations,
            demotes_sent: stats.demotes_sent,
            demotes_refused: stats.demotes_refused,
            buffer_hits: stats.buffer_hits,
        };
        // SAFETY: the caller guarantees `out` is valid for one write.
        unsafe { put(out, counters, "out") }
    })
}

/// What a client's write-back did since the client was made (all zeros without one).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TesseraWriteBackStats {
    /// Writes kept in the buffer.
    pub buffered: u64,
    /// Writes sent to the servers at once.
    pub through: u64,
    /// Flushes that wrote buffered bytes.
    pub flushes: u64,
    /// Write leases granted.
    pub leases: u64,
    /// Revocations of write leases answered.
    pub revocations: u64,
}

/// Copies the counters of `client`'s write-back into `out`.
///
/// # Safety
/// `client` is a live client; `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_client_write_back_stats(
    client: *const TesseraClient,
    out: *mut TesseraWriteBackStats,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee.
        let client = unsafe { handle(client, "client")? };
        let stats = client.client.write_back_stats().unwrap_or_default();
        let counters = TesseraWriteBackStats {
            buffered: stats.buffered,
            through: stats.through,
            flushes: stats.flushes,
            leases: stats.leases,
            revocations: stats.revocations,
        };
        // SAFETY: the caller guarantees `out` is valid for one write.
        unsafe { put(out, counters, "out") }
    })
}

/// Frees a client. Files opened through it stay usable. Null is ignored.
///
/// # Safety
/// `client` is null or a pointer from [`tessera_connect`] not freed before.
#[no_mangle]
pub unsafe extern "C" fn tessera_client_free(client: *mut TesseraClient) {
    if !client.is_null() {
        // SAFETY: the caller guarantees the pointer came from tessera_connect, once.
        drop(unsafe { Box::from_raw(client) });
    }
}

/// Fills `options` with the defaults: mode 0644, not exclusive, 64 KiB stripe unit, all
/// servers, the cache unit chosen by the mds.
///
/// # Safety
/// `options` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_create_options_init(options: *mut TesseraCreateOptions) -> c_int {
    guard(|| {
        let defaults = CreateOptions::default();
        let value = TesseraCreateOptions {
            mode: defaults.mode,
            exclusive: 0,
            stripe_unit_bytes: defaults.stripe_unit_bytes,
            server_count: u32::from(defaults.server_count),
            cache_unit_bytes: defaults.cache_unit_bytes,
        };
        // SAFETY: the caller guarantees `options` is valid for one write.
        unsafe { put(options, value, "options") }
    })
}

fn hand_out(
    client: &Client,
    file: tessera_client::File,
    out: *mut *mut TesseraFile,
) -> Result<(), Failure> {
    let state = FileState::new(ViewedFile::new(file));
    let boxed = Box::into_raw(Box::new(TesseraFile::new(client.clone(), state)));
    // SAFETY: the exported callers guarantee `out` is valid for one write.
    unsafe { put(out, boxed, "out") }.inspect_err(|_| {
        // SAFETY: `boxed` came from Box::into_raw above and was not handed out.
        drop(unsafe { Box::from_raw(boxed) });
    })
}

/// Creates the file `path` (or opens it when it exists and `options->exclusive` is 0; an
/// existing file is not truncated), open for reading and writing. `options` may be null
/// for the defaults.
///
/// # Safety
/// `client` comes from [`tessera_connect`]; `path` is a NUL-terminated string; `options` is
/// null or points at a `TesseraCreateOptions`; `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_create(
    client: *const TesseraClient,
    path: *const c_char,
    options: *const TesseraCreateOptions,
    out: *mut *mut TesseraFile,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (client, path) = unsafe { (handle(client, "client")?, text(path, "path")?) };
        let mut create = CreateOptions::default();
        // SAFETY: the caller guarantees `options` is null or points at options.
        if let Some(options) = unsafe { options.as_ref() } {
            create.mode = options.mode;
            create.exclusive = options.exclusive != 0;
            create.stripe_unit_bytes = options.stripe_unit_bytes;
            create.cache_unit_bytes = options.cache_unit_bytes;
            create.server_count = u16::try_from(options.server_count).map_err(|_| {
                Failure::invalid(format!(
                    "create {path}: server_count {} is too large",
                    options.server_count
                ))
            })?;
        }
        hand_out(&client.client, client.client.create(path, &create)?, out)
    })
}

/// Opens the existing file `path` with `mode` (`TESSERA_MODE_*`).
///
/// # Safety
/// `client` comes from [`tessera_connect`]; `path` is a NUL-terminated string; `out` is
/// valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_open(
    client: *const TesseraClient,
    path: *const c_char,
    mode: c_int,
    out: *mut *mut TesseraFile,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (client, path) = unsafe { (handle(client, "client")?, text(path, "path")?) };
        let mode = match mode {
            TESSERA_MODE_READ_ONLY => OpenMode::ReadOnly,
            TESSERA_MODE_WRITE_ONLY => OpenMode::WriteOnly,
            TESSERA_MODE_READ_WRITE => OpenMode::ReadWrite,
            other => {
                return Err(Failure::invalid(format!(
                    "open {path}: mode {other} is not one of TESSERA_MODE_READ_ONLY, _WRITE_ONLY, _READ_WRITE"
                )))
            }
        };
        hand_out(&client.client, client.client.open(path, mode)?, out)
    })
}

/// Removes the file `path` and its data.
///
/// # Safety
/// `client` comes from [`tessera_connect`]; `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tessera_delete(
    client: *const TesseraClient,
    path: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (client, path) = unsafe { (handle(client, "client")?, text(path, "path")?) };
        Ok(client.client.unlink(path)?)
    })
}

/// Creates the directory `path` with permission bits `mode`.
///
/// # Safety
/// `client` comes from [`tessera_connect`]; `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tessera_mkdir(
    client: *const TesseraClient,
    path: *const c_char,
    mode: u32,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (client, path) = unsafe { (handle(client, "client")?, text(path, "path")?) };
        client.client.mkdir(path, mode).map(drop)?;
        Ok(())
    })
}

/// Attributes of `path`, the size computed from the servers.
///
/// # Safety
/// `client` comes from [`tessera_connect`]; `path` is a NUL-terminated string; `out` is
/// valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_stat(
    client: *const TesseraClient,
    path: *const c_char,
    out: *mut TesseraStat,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (client, path) = unsafe { (handle(client, "client")?, text(path, "path")?) };
        let attr = client.client.stat(path)?;
        // SAFETY: the caller guarantees `out` is valid for one write.
        unsafe { put(out, TesseraStat::from(&attr), "out") }
    })
}

/// Removes the empty directory `path`.
///
/// # Safety
/// `client` comes from [`tessera_connect`]; `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tessera_rmdir(client: *const TesseraClient, path: *const c_char) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (client, path) = unsafe { (handle(client, "client")?, text(path, "path")?) };
        Ok(client.client.rmdir(path)?)
    })
}

/// Moves `source` to `target` in one step, as POSIX `rename` does: a file or empty directory
/// at `target` is replaced, and a file open under the old name stays open. Fails with
/// `TESSERA_ERR_NOT_FOUND` when `source` does not exist, `TESSERA_ERR_NOT_EMPTY` when
/// `target` is a directory with entries, `TESSERA_ERR_IS_DIRECTORY` or
/// `TESSERA_ERR_NOT_DIRECTORY` when one is a directory and the other is not.
///
/// # Safety
/// `client` comes from [`tessera_connect`]; `source` and `target` are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn tessera_rename(
    client: *const TesseraClient,
    source: *const c_char,
    target: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (client, source, target) = unsafe {
            (
                handle(client, "client")?,
                text(source, "source")?,
                text(target, "target")?,
            )
        };
        Ok(client.client.rename(source, target)?)
    })
}

/// Sets the permission bits of `path` to `mode` (the low 12 bits: permissions, setuid,
/// setgid, sticky). Only the owner or root may.
///
/// # Safety
/// `client` comes from [`tessera_connect`]; `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tessera_chmod(
    client: *const TesseraClient,
    path: *const c_char,
    mode: u32,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (client, path) = unsafe { (handle(client, "client")?, text(path, "path")?) };
        client.client.chmod(path, mode).map(drop)?;
        Ok(())
    })
}

/// Pass as `uid` or `gid` of [`tessera_chown`] to leave that one unchanged (POSIX's
/// `(uid_t)-1`).
pub const TESSERA_ID_UNCHANGED: u32 = u32::MAX;
const _: () = assert!(TESSERA_ID_UNCHANGED == tessera_proto::CHOWN_UNCHANGED);

/// Sets the owner `uid` and the group `gid` of `path`; `TESSERA_ID_UNCHANGED` leaves one as it
/// is. Only root may change the owner; the owner may change the group to one of their own
/// groups.
///
/// # Safety
/// `client` comes from [`tessera_connect`]; `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tessera_chown(
    client: *const TesseraClient,
    path: *const c_char,
    uid: u32,
    gid: u32,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (client, path) = unsafe { (handle(client, "client")?, text(path, "path")?) };
        let given = |id: u32| (id != TESSERA_ID_UNCHANGED).then_some(id);
        client
            .client
            .chown(path, given(uid), given(gid))
            .map(drop)?;
        Ok(())
    })
}
