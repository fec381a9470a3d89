//! Shared-memory regions between a same-host client and its servers: the eager buffer of a
//! connection ([`super::eager`]) and shared arenas ([`super::arena`]).
//!
//! The client makes each region with `memfd_create(MFD_ALLOW_SEALING)`, sizes it, allocates
//! every page of it (`fallocate`, so the pages are charged to the client's memory cgroup),
//! and seals it with `F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL` ([`sealed_memfd`]) so that its
//! size is fixed for good. It hands the descriptor itself to the server, once per connection,
//! in a `ShareRegion` frame with `SCM_RIGHTS` ([`super::scm`]), under a key unique in the
//! process for its life ([`next_key`]). The server maps a region only if the descriptor it
//! was given is a memfd sealed against shrinking (so the client can never cut the file under
//! the server's mapping, which would raise `SIGBUS` in the server), open read-write (it is
//! mapped with exactly the rights it came with), of the declared size within the limit of its
//! kind, and allocated whole ([`SharedRegion::from_descriptor`]): a page the server faulted
//! into a hole would be allocated for, and charged to, the server. The server maps it without
//! touching it (no `MAP_POPULATE`); its page tables grow only where data moves. It never
//! opens a client's file by path (`/proc/PID/fd/N` would use the server's rights, not the
//! client's).
//!
//! Each connection keeps its regions in a [`RegionTable`] (at most
//! `SHARED_REGIONS_PER_CONNECTION_MAX`, least recently used unmapped first), and every mapping
//! is charged to the uid the kernel reports for the connection's peer in the server's
//! [`SharedBytes`], from its share until it is unmapped (evicted, replaced, or its connection
//! closed): one uid may have at most `SHARED_BYTES_PER_UID_MAX` bytes mapped by one server.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tessera_proto::limits::{
    ARENA_BYTES_MAX, EAGER_BYTES_MAX, SHARED_BYTES_PER_UID_MAX, SHARED_REGIONS_PER_CONNECTION_MAX,
};
use tessera_proto::SHARED_KEY_ARENA;

/// A shared read-write mapping of a whole file, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    pub(crate) base: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; it is unmapped only by
// Drop, and every access goes through the methods of its owners.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&self` methods only hand out raw views that callers use while the
// region is lent to one request at a time.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// A shared read-write mapping of the first `len` bytes of `fd`. Nothing is faulted in:
    /// a page enters the page tables when it is first touched.
    pub(crate) fn new(fd: i32, len: usize) -> io::Result<Self> {
        // SAFETY: a new shared mapping of an open file chosen by the kernel; it aliases no
        // Rust object and is unmapped only by Drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            base: base.cast(),
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped only here.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

/// The seals a client puts on every region before sharing it: its size can never change,
/// and no seal can be added or removed (so no later `F_SEAL_WRITE` can break a mapping).
pub const REGION_SEALS: i32 = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// A new memfd of `bytes` bytes named `name`, close-on-exec, every page allocated, sealed
/// with [`REGION_SEALS`].
///
/// The pages are allocated here (`fallocate`), by this process, so they are charged to its
/// memory cgroup; a server refuses a region with holes ([`SharedRegion::from_descriptor`]),
/// since a page it faulted in would be charged to the server. `fallocate` leaves them to be
/// zeroed at first touch, which costs no more than the first touch of an unallocated page.
pub(crate) fn sealed_memfd(name: &std::ffi::CStr, bytes: u64) -> io::Result<OwnedFd> {
    let length = libc::off_t::try_from(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{bytes} bytes do not fit a file"),
        )
    })?;
    // SAFETY: a NUL-terminated name and valid flags; the result is checked.
    let raw =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor just returned to us and owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    File::from(fd.try_clone()?).set_len(bytes)?;
    // SAFETY: fallocate on a descriptor this function owns, within the size just set.
    if unsafe { libc::fallocate(fd.as_raw_fd(), 0, 0, length) } < 0 {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(
            err.kind(),
            format!("allocating {bytes} bytes of shared memory: {err}"),
        ));
    }
    // SAFETY: fcntl on a descriptor this function owns, with an int argument.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, REGION_SEALS) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Serials of the regions of this process; never reused, so a key never comes to mean
/// another region (a fork inherits the counter, but a child never speaks on its parent's
/// connections, and keys are per connection on the server).
static SERIAL: AtomicU64 = AtomicU64::new(1);

/// A new key for a region: an arena's has [`SHARED_KEY_ARENA`] set.
pub(crate) fn next_key(arena: bool) -> u64 {
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    assert!(serial < SHARED_KEY_ARENA, "region serials never reach 2^63");
    if arena {
        serial | SHARED_KEY_ARENA
    } else {
        serial
    }
}

/// Whether `key` names an arena (not an eager buffer).
pub fn is_arena(key: u64) -> bool {
    key & SHARED_KEY_ARENA != 0
}

/// What a key names, for messages, and the largest such region with its limit's name.
fn kind_of(key: u64) -> (&'static str, u64, &'static str) {
    if is_arena(key) {
        ("an arena", ARENA_BYTES_MAX, "arena_bytes_max")
    } else {
        ("an eager buffer", EAGER_BYTES_MAX, "eager_bytes_max")
    }
}

/// The server's side: a client's region, mapped for one connection.
#[derive(Debug)]
pub struct SharedRegion {
    key: u64,
    mapping: Mapping,
    /// Its bytes on its uid's account in the server's [`SharedBytes`], given back when the
    /// region is unmapped (dropped). `None` for a region mapped outside a [`RegionTable`].
    charge: Option<Charge>,
}

impl SharedRegion {
    /// Maps the region the client shared as `key`, declared `bytes` bytes long, from the
    /// descriptor that came with its `ShareRegion` frame. Refused, with the reason, unless
    /// the descriptor is open read-write, is a memfd sealed with `F_SEAL_SHRINK`, holds
    /// exactly `bytes` bytes, 1 to [`EAGER_BYTES_MAX`] for an eager buffer or
    /// [`ARENA_BYTES_MAX`] for an arena, and has every page allocated. The mapping is made
    /// without touching a page. The caller may close the descriptor once mapped (the mapping
    /// keeps the memory).
    pub fn from_descriptor(key: u64, bytes: u64, descriptor: &OwnedFd) -> Result<Self, String> {
        let (what, limit, limit_name) = kind_of(key);
        if bytes == 0 || bytes > limit {
            return Err(format!(
                "declared {bytes} bytes; {what} holds 1 to {limit} ({limit_name})"
            ));
        }
        let fd = descriptor.as_raw_fd();
        // SAFETY: fcntl on a descriptor this function owns.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            return Err(format!(
                "the descriptor cannot be inspected (F_GETFL: {})",
                io::Error::last_os_error()
            ));
        }
        if flags & libc::O_PATH != 0 {
            return Err("the descriptor was opened O_PATH: it grants no access to map".to_owned());
        }
        match flags & libc::O_ACCMODE {
            libc::O_RDWR => {}
            mode => {
                let how = if mode == libc::O_RDONLY {
                    "read-only"
                } else {
                    "write-only"
                };
                return Err(format!(
                    "the descriptor is open {how}; a region is mapped read-write and must be \
                     passed open read-write (O_RDWR)"
                ));
            }
        }
        // SAFETY: fcntl on a descriptor this function owns.
        let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
        if seals < 0 {
            return Err(format!(
                "not a memfd (F_GET_SEALS: {})",
                io::Error::last_os_error()
            ));
        }
        if seals & libc::F_SEAL_SHRINK == 0 {
            return Err(format!(
                "not a memfd sealed against shrinking (seals {seals:#x}, F_SEAL_SHRINK missing; \
                 a tmpfs file opened by path cannot be sealed)"
            ));
        }
        // SAFETY: an all-zero `stat` is a valid value for fstat to overwrite.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on a descriptor this function owns, into a local of the right type.
        if unsafe { libc::fstat(fd, &raw mut stat) } < 0 {
            return Err(format!("fstat: {}", io::Error::last_os_error()));
        }
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        if size != bytes {
            return Err(format!(
                "the memfd holds {size} bytes, not the {bytes} declared"
            ));
        }
        // A hole is a page the client never allocated: the first touch of it through this
        // server's mapping (a fault, or `MAP_POPULATE`) would allocate it and charge it to
        // the server. `st_blocks` counts every allocated page, fallocated-but-untouched and
        // swapped-out ones included (`SEEK_HOLE` reports fallocated pages as holes).
        let allocated = u64::try_from(stat.st_blocks)
            .unwrap_or(0)
            .saturating_mul(512);
        if allocated < size {
            return Err(format!(
                "the memfd has holes: {allocated} of its {size} bytes are allocated; a client \
                 allocates a region whole (fallocate) before sharing it, so that its pages are \
                 charged to the client and never allocated by the server"
            ));
        }
        let len = usize::try_from(size).map_err(|_| format!("{size} bytes do not fit"))?;
        // No `MAP_POPULATE`: the page tables of a page are made where a request first moves
        // data through it (about 0.8 µs a 4 KiB page at its first touch per mapping, measured
        // in docs/ARCHITECTURE.md §2.5), never for pages no request reaches.
        let mapping = Mapping::new(fd, len).map_err(|err| format!("mmap: {err}"))?;
        Ok(Self {
            key,
            mapping,
            charge: None,
        })
    }

    /// The key it was shared under.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// Bytes on its uid's account for it (0 outside a [`RegionTable`]).
    fn charged_bytes(&self) -> u64 {
        self.charge.as_ref().map_or(0, |charge| charge.bytes)
    }

    /// Bytes it holds.
    pub fn len(&self) -> usize {
        self.mapping.len
    }

    /// Whether it holds no bytes (never: empty regions are refused).
    pub fn is_empty(&self) -> bool {
        self.mapping.len == 0
    }

    /// Bytes `[offset, offset + len)` of the region, if inside it.
    ///
    /// # Safety
    ///
    /// The bytes are mapped by the client too, which lends them to the request being served
    /// and should not touch them until the reply; but nothing stops a client that breaks that
    /// promise, so while the slice is alive its bytes may change under it. The caller must
    /// only copy the bytes somewhere (to the kernel with `pwrite`, into a buffer), never
    /// check them and then rely on what it checked; and it must not hold the slice while a
    /// [`bytes_mut`](Self::bytes_mut) view of the same bytes is alive in this process.
    pub unsafe fn bytes(&self, offset: u64, len: u64) -> Option<&[u8]> {
        let (offset, len) = self.range(offset, len)?;
        // SAFETY: inside the mapping, which lives as long as `self`; what the client may do
        // to the bytes meanwhile is this function's contract.
        Some(unsafe { std::slice::from_raw_parts(self.mapping.base.add(offset), len) })
    }

    /// Bytes `[offset, offset + len)` of the region to fill, if inside it.
    ///
    /// The region is reached through `&self` (the connection and the request being served
    /// share it by `Arc`), so the exclusivity of the returned slice is the caller's to keep.
    ///
    /// # Safety
    ///
    /// While the returned slice is alive, no other reference into the same bytes of this
    /// region may be made or used in this process: no second `bytes_mut` and no `bytes`
    /// overlapping it. The server keeps this by serving one request at a time per
    /// connection (regions are per connection) and by taking one view of a range at a time
    /// within that request.
    #[allow(clippy::mut_from_ref)] // exclusivity is the caller's contract, stated above
    pub unsafe fn bytes_mut(&self, offset: u64, len: u64) -> Option<&mut [u8]> {
        let (offset, len) = self.range(offset, len)?;
        // SAFETY: inside the mapping, which lives as long as `self`; no other reference to
        // these bytes is alive in this process (this function's contract). The client, the
        // other process mapping them, does not touch them until the reply.
        Some(unsafe { std::slice::from_raw_parts_mut(self.mapping.base.add(offset), len) })
    }

    fn range(&self, offset: u64, len: u64) -> Option<(usize, usize)> {
        let end = offset.checked_add(len)?;
        if end > self.mapping.len as u64 {
            return None;
        }
        Some((usize::try_from(offset).ok()?, usize::try_from(len).ok()?))
    }
}

/// One server's account of the shared regions it maps, per uid: at most a limit
/// ([`SHARED_BYTES_PER_UID_MAX`]) of bytes mapped at once for one uid over all its
/// connections. Bounded: a uid is kept only while it has bytes mapped.
#[derive(Debug)]
pub struct SharedBytes {
    limit: u64,
    held: Mutex<HashMap<u32, u64>>,
}

impl Default for SharedBytes {
    fn default() -> Self {
        Self::with_limit(SHARED_BYTES_PER_UID_MAX)
    }
}

impl SharedBytes {
    /// An account whose uids may each hold at most `limit` bytes (tests use a small one).
    pub fn with_limit(limit: u64) -> Self {
        Self {
            limit,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// Bytes `uid` has mapped now.
    pub fn held(&self, uid: u32) -> u64 {
        self.lock().get(&uid).copied().unwrap_or(0)
    }

    /// Puts `bytes` on `uid`'s account, where `freeing` bytes of its mappings are about to be
    /// unmapped to make room (they count as gone); refused, naming the uid, the bytes and the
    /// limit, where that would pass the limit. The bytes go back when the charge drops.
    fn charge(self: &Arc<Self>, uid: u32, bytes: u64, freeing: u64) -> Result<Charge, String> {
        let mut held = self.lock();
        let before = held.get(&uid).copied().unwrap_or(0);
        let after = before.saturating_sub(freeing).saturating_add(bytes);
        if after > self.limit {
            return Err(format!(
                "uid {uid} has {before} bytes of shared regions mapped by this server; {bytes} \
                 more would make {after}, over shared_bytes_per_uid_max ({} bytes)",
                self.limit
            ));
        }
        *held.entry(uid).or_insert(0) += bytes;
        Ok(Charge {
            account: Arc::clone(self),
            uid,
            bytes,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, u64>> {
        // Every change is one arithmetic step under the lock: a poisoned map is consistent.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Bytes of one mapping on its uid's account; given back on drop.
#[derive(Debug)]
struct Charge {
    account: Arc<SharedBytes>,
    uid: u32,
    bytes: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        let mut held = self.account.lock();
        let left = held.get(&self.uid).copied().unwrap_or(0);
        debug_assert!(
            left >= self.bytes,
            "uid {} gives back more than it holds",
            self.uid
        );
        match left.saturating_sub(self.bytes) {
            0 => held.remove(&self.uid),
            rest => held.insert(self.uid, rest),
        };
    }
}

/// The shared regions one connection's peer handed over, least recently used first (at most
/// [`SHARED_REGIONS_PER_CONNECTION_MAX`]), each charged to the peer's uid. Dropping the table
/// (the connection closes) unmaps them and gives their bytes back, once no request holds them.
#[derive(Debug)]
pub struct RegionTable {
    regions: Vec<Arc<SharedRegion>>,
    account: Arc<SharedBytes>,
    /// The peer's uid as the kernel reported it for the socket (`SO_PEERCRED`); `None` where
    /// it did not (no region is mapped then).
    uid: Option<u32>,
}

impl RegionTable {
    /// An empty table for a connection whose peer is `uid`, charging `account`.
    pub fn new(account: Arc<SharedBytes>, uid: Option<u32>) -> Self {
        Self {
            regions: Vec::new(),
            account,
            uid,
        }
    }

    /// The region shared as `key`, which becomes the most recently used.
    pub fn get(&mut self, key: u64) -> Option<Arc<SharedRegion>> {
        let at = self.regions.iter().position(|region| region.key() == key)?;
        let region = self.regions.remove(at);
        self.regions.push(Arc::clone(&region));
        Some(region)
    }

    /// Regions mapped now.
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    /// Whether none is mapped.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// Maps the region `descriptor` holds as `key`, declared `bytes` long
    /// ([`SharedRegion::from_descriptor`] checks it), charged to the peer's uid; it replaces a
    /// region shared as `key` before, and the least recently used is unmapped past the limit.
    /// A refusal changes nothing: no region is unmapped for a share that is refused.
    pub fn share(&mut self, key: u64, bytes: u64, descriptor: &OwnedFd) -> Result<(), String> {
        let Some(uid) = self.uid else {
            return Err(
                "the kernel reported no uid for this socket's peer (SO_PEERCRED), and shared \
                 regions are charged to a uid"
                    .to_owned(),
            );
        };
        let mut region = SharedRegion::from_descriptor(key, bytes, descriptor)?;
        let replaced = self.regions.iter().find(|region| region.key() == key);
        let kept = self.regions.len() - usize::from(replaced.is_some());
        let evicted = (kept >= SHARED_REGIONS_PER_CONNECTION_MAX)
            .then(|| self.regions.iter().find(|region| region.key() != key))
            .flatten();
        let freeing = [replaced, evicted]
            .into_iter()
            .flatten()
            .map(|region| region.charged_bytes())
            .sum();
        region.charge = Some(self.account.charge(uid, bytes, freeing)?);
        self.regions.retain(|old| old.key() != key);
        if self.regions.len() >= SHARED_REGIONS_PER_CONNECTION_MAX {
            self.regions.remove(0);
        }
        self.regions.push(Arc::new(region));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn reopen(fd: &OwnedFd, flags: i32) -> OwnedFd {
        let path = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
        // SAFETY: a NUL-terminated path and valid flags; the result is checked.
        let raw = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
        assert!(raw >= 0, "{}", io::Error::last_os_error());
        // SAFETY: a descriptor just opened and owned by nothing else.
        unsafe { OwnedFd::from_raw_fd(raw) }
    }

    fn refusal(key: u64, bytes: u64, fd: &OwnedFd) -> String {
        SharedRegion::from_descriptor(key, bytes, fd).unwrap_err()
    }

    #[test]
    fn only_a_sealed_read_write_memfd_of_the_declared_size_is_mapped() {
        let key = next_key(false);
        let fd = sealed_memfd(c"test", 4096).unwrap();
        // The client's seals hold: the file can neither shrink nor grow.
        assert!(File::from(fd.try_clone().unwrap()).set_len(100).is_err());
        assert!(File::from(fd.try_clone().unwrap()).set_len(8192).is_err());
        let client = Mapping::new(fd.as_raw_fd(), 4096).unwrap();
        let region = SharedRegion::from_descriptor(key, 4096, &fd).unwrap();
        // SAFETY: the only view of these bytes in this test.
        unsafe { region.bytes_mut(10, 4) }
            .unwrap()
            .copy_from_slice(b"SEEN");
        // SAFETY: bytes 10..14 of the client's mapping of the same memfd.
        let seen = unsafe { std::slice::from_raw_parts(client.base.add(10), 4) };
        assert_eq!(seen, b"SEEN");
        // SAFETY: a range check only; no byte is read.
        assert!(unsafe { region.bytes(4090, 7) }.is_none());

        let plain = tempfile::tempfile().unwrap();
        plain.set_len(4096).unwrap();
        assert!(refusal(key, 4096, &OwnedFd::from(plain)).contains("not a memfd"));
        // A tmpfs file opened by path passes F_GET_SEALS but can never be sealed.
        let shm = tempfile::tempfile_in("/dev/shm").expect("a tmpfs at /dev/shm");
        shm.set_len(4096).unwrap();
        assert!(refusal(key, 4096, &OwnedFd::from(shm)).contains("F_SEAL_SHRINK"));
        let readonly = reopen(&fd, libc::O_RDONLY);
        assert!(refusal(key, 4096, &readonly).contains("read-only"));
        let path_only = reopen(&fd, libc::O_PATH);
        assert!(refusal(key, 4096, &path_only).contains("O_PATH"));
        assert!(refusal(key, 8192, &fd).contains("not the 8192 declared"));
        assert!(refusal(key, EAGER_BYTES_MAX + 1, &fd).contains("eager_bytes_max"));
        assert!(refusal(key, 0, &fd).contains("1 to"));
        // SAFETY: a NUL-terminated name and valid flags; the result is checked.
        let raw = unsafe { libc::memfd_create(c"unsealed".as_ptr(), libc::MFD_ALLOW_SEALING) };
        assert!(raw >= 0);
        // SAFETY: a descriptor just made and owned by nothing else.
        let unsealed = unsafe { OwnedFd::from_raw_fd(raw) };
        File::from(unsealed.try_clone().unwrap())
            .set_len(4096)
            .unwrap();
        assert!(refusal(key, 4096, &unsealed).contains("F_SEAL_SHRINK"));
        // An arena key allows more than the eager buffer's size.
        let big = sealed_memfd(c"big", EAGER_BYTES_MAX * 2).unwrap();
        let arena = next_key(true);
        assert!(is_arena(arena) && !is_arena(key));
        assert_eq!(
            SharedRegion::from_descriptor(arena, EAGER_BYTES_MAX * 2, &big)
                .unwrap()
                .len() as u64,
            EAGER_BYTES_MAX * 2
        );
    }

    /// A sealed memfd of `bytes` bytes with no page allocated (as a client that skipped
    /// `fallocate` would share).
    fn sparse_memfd(bytes: u64) -> OwnedFd {
        // SAFETY: a NUL-terminated name and valid flags; the result is checked.
        let raw = unsafe {
            libc::memfd_create(
                c"sparse".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        assert!(raw >= 0);
        // SAFETY: a descriptor just made and owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        File::from(fd.try_clone().unwrap()).set_len(bytes).unwrap();
        // SAFETY: fcntl on a descriptor owned here.
        let sealed = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, REGION_SEALS) };
        assert_eq!(sealed, 0);
        fd
    }

    /// Bytes of `fd`'s file that are allocated.
    fn allocated(fd: &OwnedFd) -> u64 {
        File::from(fd.try_clone().unwrap())
            .metadata()
            .map(|metadata| std::os::unix::fs::MetadataExt::blocks(&metadata) * 512)
            .unwrap()
    }

    /// This process's resident bytes of the mapping that starts at `base` (`/proc/self/smaps`).
    fn resident(base: *mut u8) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let start = format!("{:x}-", base as usize);
        let entry = smaps
            .split_inclusive('\n')
            .skip_while(|line| !line.starts_with(&start))
            .skip(1)
            .find_map(|line| line.strip_prefix("Rss:"))
            .expect("the mapping is listed");
        entry
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .unwrap()
            * 1024
    }

    #[test]
    fn a_region_with_holes_is_refused_and_a_whole_one_is_mapped_untouched() {
        let key = next_key(true);
        // The sparse memfds of the report: refused, and not a page allocated by the check.
        let sparse = sparse_memfd(64 << 20);
        let reason = refusal(key, 64 << 20, &sparse);
        assert!(reason.contains("holes"), "{reason}");
        assert!(reason.contains("0 of its 67108864 bytes"), "{reason}");
        assert_eq!(allocated(&sparse), 0);
        // One page short of whole is still refused.
        let nearly = sparse_memfd(1 << 20);
        // SAFETY: fallocate on a descriptor owned here, inside its size.
        let filled = unsafe { libc::fallocate(nearly.as_raw_fd(), 0, 4096, (1 << 20) - 4096) };
        assert_eq!(filled, 0);
        assert!(refusal(key, 1 << 20, &nearly).contains("1044480 of its 1048576"));
        // A client's region is allocated whole when made, by the client; the server maps it
        // without touching it: no page of it is resident in the server's mapping.
        let whole = sealed_memfd(c"whole", 16 << 20).unwrap();
        assert_eq!(allocated(&whole), 16 << 20);
        let region = SharedRegion::from_descriptor(key, 16 << 20, &whole).unwrap();
        assert_eq!(resident(region.mapping.base), 0);
        // Data moving through one page brings in that page alone.
        // SAFETY: the only view of these bytes in this test.
        unsafe { region.bytes_mut(8 << 20, 4096) }.unwrap().fill(7);
        assert_eq!(resident(region.mapping.base), 4096);
        assert_eq!(allocated(&whole), 16 << 20);
    }

    /// A table for uid `uid` over `account` holding regions of `bytes` bytes each under the
    /// arena keys returned, in sharing order.
    fn fill(table: &mut RegionTable, count: usize, bytes: u64) -> Vec<u64> {
        (0..count)
            .map(|_| {
                let key = next_key(true);
                let fd = sealed_memfd(c"charged", bytes).unwrap();
                table.share(key, bytes, &fd).unwrap();
                key
            })
            .collect()
    }

    #[test]
    fn a_uids_mappings_are_charged_until_unmapped_and_capped() {
        const PAGE: u64 = 4096;
        let account = Arc::new(SharedBytes::with_limit(12 * PAGE));
        let mut first = RegionTable::new(Arc::clone(&account), Some(2001));
        let keys = fill(&mut first, SHARED_REGIONS_PER_CONNECTION_MAX, PAGE);
        assert_eq!(account.held(2001), 8 * PAGE);
        // Past the connection's limit the least recently used is evicted: its charge goes
        // back as the new one is taken.
        first.get(keys[0]).unwrap();
        let ninth = fill(&mut first, 1, PAGE)[0];
        assert_eq!(first.len(), SHARED_REGIONS_PER_CONNECTION_MAX);
        assert!(first.get(keys[1]).is_none(), "the least recently used went");
        assert_eq!(account.held(2001), 8 * PAGE);
        // Replacing a key gives back the old mapping's bytes and takes the new one's.
        let bigger = sealed_memfd(c"bigger", 3 * PAGE).unwrap();
        first.share(ninth, 3 * PAGE, &bigger).unwrap();
        assert_eq!(first.get(ninth).unwrap().len() as u64, 3 * PAGE);
        assert_eq!(account.held(2001), 10 * PAGE);
        // A second connection of the same uid draws on the same account.
        let mut second = RegionTable::new(Arc::clone(&account), Some(2001));
        let second_keys = fill(&mut second, 2, PAGE);
        assert_eq!(account.held(2001), 12 * PAGE);
        // Past the uid's limit: refused, naming the uid, the bytes and the limit, and
        // nothing is unmapped for it.
        let refused = next_key(true);
        let fd = sealed_memfd(c"refused", PAGE).unwrap();
        let reason = second.share(refused, PAGE, &fd).unwrap_err();
        for part in [
            "uid 2001 has 49152 bytes",
            "4096 more would make 53248",
            "shared_bytes_per_uid_max (49152 bytes)",
        ] {
            assert!(reason.contains(part), "{part}: {reason}");
        }
        assert!(second.get(refused).is_none());
        assert_eq!(second.len(), 2);
        assert_eq!(account.held(2001), 12 * PAGE);
        // A full connection may still swap its least recently used for one of the same size:
        // the eviction makes the room.
        let swapped = fill(&mut first, 1, PAGE)[0];
        assert!(first.get(swapped).is_some());
        assert_eq!(account.held(2001), 12 * PAGE);
        // Another uid has its own account.
        let mut other = RegionTable::new(Arc::clone(&account), Some(2002));
        fill(&mut other, 3, PAGE);
        assert_eq!(account.held(2002), 3 * PAGE);
        // A region a request still holds stays charged after its eviction, until it is
        // unmapped when the request lets go.
        let in_flight = second.get(second_keys[0]).unwrap();
        second.share(second_keys[0], PAGE, &fd).unwrap();
        assert_eq!(account.held(2001), 13 * PAGE);
        drop(in_flight);
        assert_eq!(account.held(2001), 12 * PAGE);
        // A connection's close gives back all it held.
        drop(first);
        assert_eq!(account.held(2001), 2 * PAGE);
        drop(second);
        assert_eq!(account.held(2001), 0);
        assert!(
            account.lock().get(&2001).is_none(),
            "an empty account is forgotten"
        );
        assert_eq!(account.held(2002), 3 * PAGE);
        // A peer whose uid the kernel did not report shares nothing.
        let mut unknown = RegionTable::new(Arc::clone(&account), None);
        let fd = sealed_memfd(c"unknown", PAGE).unwrap();
        assert!(unknown
            .share(next_key(true), PAGE, &fd)
            .unwrap_err()
            .contains("SO_PEERCRED"));
        assert!(unknown.is_empty());
    }
}
