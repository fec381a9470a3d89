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

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use tessera_proto::limits::{ARENA_BYTES_MAX, EAGER_BYTES_MAX};
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
        Ok(Self { key, mapping })
    }

    /// The key it was shared under.
    pub fn key(&self) -> u64 {
        self.key
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
    /// The bytes are shared with the client, which lends them to the request being served
    /// and does not touch them until the reply; they go only to the kernel (`pwrite`).
    pub fn bytes(&self, offset: u64, len: u64) -> Option<&[u8]> {
        let (offset, len) = self.range(offset, len)?;
        // SAFETY: inside the mapping, which lives as long as `self`.
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
        assert!(region.bytes(4090, 7).is_none());

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
}
