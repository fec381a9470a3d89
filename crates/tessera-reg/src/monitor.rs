//! Watching registered memory for unmaps, so a cached registration is never reused after the
//! application unmapped or discarded the memory under it.
//!
//! A registration pins the pages that were mapped when it was made. If the application then
//! unmaps that memory (or `free` does it for a large block) and maps new memory at the same
//! address, a cache keyed by address would hand out the old registration: on an RDMA fabric
//! the NIC would move the old, still pinned pages — silently wrong data. Calling
//! [`crate::Registry::invalidate`] before every unmap is the explicit way; this module is the
//! automatic one, with no hook on `free`/`munmap`: the kernel's userfaultfd reports, for the
//! ranges registered with it, every `munmap` (`UFFD_EVENT_UNMAP`), `madvise(MADV_DONTNEED /
//! MADV_REMOVE)` (`UFFD_EVENT_REMOVE`) and `mremap` (`UFFD_EVENT_REMAP`), and the thread that
//! unmaps waits until the event has been read.
//!
//! One [`Monitor`] serves the whole process (a range can be registered with one userfaultfd
//! only). Its thread reads events into a bounded log ([`MONITOR_EVENTS_KEPT`]); every registry
//! reads the log from its own cursor before it looks anything up, and a registry whose cursor
//! fell behind the log invalidates everything it caches. The thread never allocates, so it can
//! never wait on an unmap of its own. While it reads, [`Monitor::settle`] waits for it: the
//! unmapping thread is released by the read itself, so an acquire made after `munmap` returned
//! always sees the event.
//!
//! Registering a range with userfaultfd (mode "missing") also routes the faults of its
//! not-present pages to the monitor, which resolves each the way the kernel would have, with a
//! zero page (`UFFDIO_ZEROPAGE`), or by unregistering the page's range where that is not
//! possible. Ranges the kernel refuses to watch (file-backed mappings other than shared
//! memory) make their registrations transient: used for one transfer, never cached.

// The userfaultfd messages carry 64-bit addresses and lengths; Tessera builds for 64-bit
// Linux only (usize is u64), and log positions modulo MONITOR_EVENTS_KEPT fit any usize.
#![allow(clippy::cast_possible_truncation)]

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;

use crate::segment::{page_bytes, Segment};

/// Unmap events the log keeps; a registry further behind than this invalidates everything.
pub const MONITOR_EVENTS_KEPT: usize = 1024;

/// Messages read from the userfaultfd per `read`.
const MESSAGES_PER_READ: usize = 64;

/// Faults waiting for an unmap event to be read before they can be resolved (each faulting
/// thread waits for its own, so this bounds the threads faulting at once on watched pages).
const FAULTS_PENDING_MAX: usize = 4096;

// The kernel's userfaultfd ABI (linux/userfaultfd.h), stable since Linux 4.11.
const UFFD_API: u64 = 0xAA;
const UFFD_FEATURE_EVENT_REMAP: u64 = 1 << 2;
const UFFD_FEATURE_EVENT_REMOVE: u64 = 1 << 3;
const UFFD_FEATURE_EVENT_UNMAP: u64 = 1 << 6;
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
const UFFD_EVENT_REMAP: u8 = 0x14;
const UFFD_EVENT_REMOVE: u8 = 0x15;
const UFFD_EVENT_UNMAP: u8 = 0x16;

const fn iowr(nr: u64, size: usize) -> u64 {
    (3 << 30) | ((size as u64) << 16) | (UFFD_API << 8) | nr
}
const fn ior(nr: u64, size: usize) -> u64 {
    (2 << 30) | ((size as u64) << 16) | (UFFD_API << 8) | nr
}
const UFFDIO_API: u64 = iowr(0x3F, std::mem::size_of::<UffdioApi>());
const UFFDIO_REGISTER: u64 = iowr(0x00, std::mem::size_of::<UffdioRegister>());
const UFFDIO_UNREGISTER: u64 = ior(0x01, std::mem::size_of::<UffdioRange>());
const UFFDIO_WAKE: u64 = ior(0x02, std::mem::size_of::<UffdioRange>());
const UFFDIO_ZEROPAGE: u64 = iowr(0x04, std::mem::size_of::<UffdioZeropage>());

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioZeropage {
    range: UffdioRange,
    mode: u64,
    zeropage: i64,
}

/// `struct uffd_msg`: an event byte, padding, and 24 bytes of arguments.
#[repr(C)]
#[derive(Clone, Copy)]
struct UffdMsg {
    event: u8,
    reserved: [u8; 7],
    arg: [u64; 3],
}

const _: () = assert!(std::mem::size_of::<UffdMsg>() == 32);

/// What happened to a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnmapKind {
    /// `munmap` (or the unmapping part of `mremap`/`brk`): the range is gone.
    Unmap,
    /// `madvise(MADV_DONTNEED)` or `MADV_REMOVE`: the range stays mapped, its pages are not.
    Remove,
    /// `mremap` moved the mapping away from this range.
    Remap,
}

/// One event of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnmapEvent {
    /// The range whose pages are no longer the ones registered.
    pub segment: Segment,
    /// What happened to it.
    pub kind: UnmapKind,
}

/// What a registry finds when it reads the log from its cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmapped {
    /// These events (possibly none) happened since the cursor.
    Events(Vec<UnmapEvent>),
    /// More than [`MONITOR_EVENTS_KEPT`] happened since the cursor: assume everything moved.
    Overrun,
}

/// The bounded log, written by the monitor thread without allocating.
struct Log {
    events: Box<[Option<UnmapEvent>]>,
    /// Events ever logged; the newest is at `(written - 1) % len`.
    written: u64,
}

impl Log {
    fn push(&mut self, event: UnmapEvent) {
        let len = self.events.len() as u64;
        self.events[(self.written % len) as usize] = Some(event);
        self.written += 1;
    }
}

/// Page ranges registered with the userfaultfd (start → end), disjoint and merged.
#[derive(Default)]
struct Watched {
    ranges: BTreeMap<usize, usize>,
    /// Log position up to which unmaps were taken out of `ranges`.
    applied: u64,
}

impl Watched {
    fn covers(&self, start: usize, end: usize) -> bool {
        self.ranges
            .range(..=start)
            .next_back()
            .is_some_and(|(_, &range_end)| range_end >= end)
    }

    fn insert(&mut self, mut start: usize, mut end: usize) {
        if let Some((&before, &before_end)) = self.ranges.range(..=start).next_back() {
            if before_end >= start {
                start = before;
                end = end.max(before_end);
            }
        }
        let swallowed: Vec<usize> = self.ranges.range(start..=end).map(|(&s, _)| s).collect();
        for key in swallowed {
            let range_end = self.ranges.remove(&key).expect("listed");
            end = end.max(range_end);
        }
        self.ranges.insert(start, end);
    }

    fn remove(&mut self, start: usize, end: usize) {
        let touched: Vec<(usize, usize)> = self
            .ranges
            .range(..end)
            .filter(|(_, &range_end)| range_end > start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (range_start, range_end) in touched {
            self.ranges.remove(&range_start);
            if range_start < start {
                self.ranges.insert(range_start, start);
            }
            if range_end > end {
                self.ranges.insert(end, range_end);
            }
        }
    }
}

struct Shared {
    uffd: OwnedFd,
    /// Written to stop the thread.
    stop: OwnedFd,
    log: Mutex<Log>,
    /// `log.written`, readable without the lock.
    written: AtomicU64,
    /// Set while the thread is between reading messages and logging them.
    reading: AtomicBool,
    /// Faults of watched pages the thread resolved.
    faults: AtomicU64,
}

/// The process's userfaultfd watch over registered memory; see the module documentation.
pub struct Monitor {
    /// The process whose address space the userfaultfd watches: a child made by `fork`
    /// inherits the descriptor, but it still names the parent's memory, and no thread.
    pid: u32,
    shared: Arc<Shared>,
    watched: Mutex<Watched>,
    page: usize,
    _thread: JoinHandle<()>,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor")
            .field("uffd", &self.shared.uffd.as_raw_fd())
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn ioctl<T>(fd: RawFd, request: u64, argument: &mut T) -> io::Result<()> {
    // SAFETY: `argument` is the #[repr(C)] structure `request` names, live for the call.
    let result = unsafe { libc::ioctl(fd, request as _, std::ptr::from_mut(argument)) };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Monitor {
    /// The process's monitor, started on first use; `Err` says why this kernel or sandbox has
    /// none (then registries cache without watching, as before).
    pub fn process() -> Result<Arc<Self>, String> {
        static MONITOR: OnceLock<Result<Arc<Monitor>, String>> = OnceLock::new();
        let monitor = MONITOR
            .get_or_init(|| Self::start().map(Arc::new))
            .clone()?;
        if monitor.pid != std::process::id() {
            return Err(
                "this process was forked from the one whose memory the unmap monitor \
                        watches: cached registrations are not watched, so call \
                        Registry::invalidate before unmapping registered memory"
                    .to_owned(),
            );
        }
        Ok(monitor)
    }

    fn start() -> Result<Self, String> {
        // SAFETY: plain system calls; the descriptors are owned at once.
        let raw =
            unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) };
        if raw < 0 {
            // Without privilege (vm.unprivileged_userfaultfd = 0) only a user-mode-only
            // userfaultfd is offered, and a kernel-mode fault on a watched page that is not
            // present (a `read` into it, another process's `process_vm_writev`) would fail
            // with EFAULT instead of reaching the monitor: not watching is the safe choice.
            return Err(format!(
                "userfaultfd is unavailable ({}; it needs CAP_SYS_PTRACE or \
                 vm.unprivileged_userfaultfd = 1): cached registrations are not watched for \
                 unmaps, so call Registry::invalidate before unmapping registered memory",
                io::Error::last_os_error()
            ));
        }
        // SAFETY: a new descriptor nobody else owns.
        let uffd = unsafe { OwnedFd::from_raw_fd(raw as RawFd) };
        let mut api = UffdioApi {
            api: UFFD_API,
            features: UFFD_FEATURE_EVENT_UNMAP
                | UFFD_FEATURE_EVENT_REMOVE
                | UFFD_FEATURE_EVENT_REMAP,
            ioctls: 0,
        };
        ioctl(uffd.as_raw_fd(), UFFDIO_API, &mut api)
            .map_err(|err| format!("userfaultfd refuses the unmap events (UFFDIO_API): {err}"))?;
        // SAFETY: as above.
        let stop_raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if stop_raw < 0 {
            return Err(format!(
                "cannot make the monitor's eventfd: {}",
                io::Error::last_os_error()
            ));
        }
        // SAFETY: as above.
        let stop = unsafe { OwnedFd::from_raw_fd(stop_raw) };
        let shared = Arc::new(Shared {
            uffd,
            stop,
            log: Mutex::new(Log {
                events: vec![None; MONITOR_EVENTS_KEPT].into_boxed_slice(),
                written: 0,
            }),
            written: AtomicU64::new(0),
            reading: AtomicBool::new(false),
            faults: AtomicU64::new(0),
        });
        let thread_shared = Arc::clone(&shared);
        let page = page_bytes();
        let thread = std::thread::Builder::new()
            .name("tessera-reg-monitor".to_owned())
            .spawn(move || run(&thread_shared, page))
            .map_err(|err| format!("cannot start the monitor thread: {err}"))?;
        Ok(Self {
            pid: std::process::id(),
            shared,
            watched: Mutex::new(Watched::default()),
            page,
            _thread: thread,
        })
    }

    /// Watches the pages under `segment` (already watched ones cost a lookup); `false` when
    /// the kernel refuses (a file-backed mapping, memory another userfaultfd watches, or an
    /// unmapped page), and then the registration over it must not be cached.
    pub fn watch(&self, segment: Segment) -> bool {
        if self.pid != std::process::id() {
            // A registry made before a fork, used in the child.
            return false;
        }
        let start = segment.address / self.page * self.page;
        let Some(end) = segment
            .checked_end()
            .and_then(|end| end.checked_next_multiple_of(self.page))
        else {
            return false;
        };
        let mut watched = lock(&self.watched);
        self.settle();
        let unmapped = self.read_from(watched.applied);
        match unmapped.0 {
            Unmapped::Overrun => watched.ranges.clear(),
            Unmapped::Events(events) => {
                for event in events {
                    let (s, e) = (
                        event.segment.address,
                        event.segment.address + event.segment.length,
                    );
                    if event.kind != UnmapKind::Remove {
                        watched.remove(s, e);
                    }
                }
            }
        }
        watched.applied = unmapped.1;
        if watched.covers(start, end) {
            return true;
        }
        let mut register = UffdioRegister {
            range: UffdioRange {
                start: start as u64,
                len: (end - start) as u64,
            },
            mode: UFFDIO_REGISTER_MODE_MISSING,
            ioctls: 0,
        };
        if let Err(err) = ioctl(self.shared.uffd.as_raw_fd(), UFFDIO_REGISTER, &mut register) {
            tracing::debug!("cannot watch {start:#x}..{end:#x} for unmaps: {err}");
            return false;
        }
        watched.insert(start, end);
        true
    }

    /// Waits while the thread is between reading events and logging them.
    pub fn settle(&self) {
        while self.shared.reading.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
    }

    /// Events logged so far (a cursor for [`Self::read_from`]).
    pub fn position(&self) -> u64 {
        self.shared.written.load(Ordering::SeqCst)
    }

    /// The events logged since `cursor`, and the new cursor. Call [`Self::settle`] first.
    ///
    /// The lock the monitor thread logs under is never held while this thread could fault on
    /// a watched page (which only the monitor thread can resolve): the events are copied into
    /// memory written before the lock is taken.
    pub fn read_from(&self, cursor: u64) -> (Unmapped, u64) {
        let written = self.position();
        if written <= cursor {
            return (Unmapped::Events(Vec::new()), cursor);
        }
        let kept = MONITOR_EVENTS_KEPT as u64;
        if written - cursor > kept {
            return (Unmapped::Overrun, written);
        }
        let placeholder = UnmapEvent {
            segment: Segment::new(0, 0),
            kind: UnmapKind::Remove,
        };
        let mut events = vec![placeholder; (written - cursor) as usize];
        let log = lock(&self.shared.log);
        if log.written - cursor > kept {
            return (Unmapped::Overrun, log.written);
        }
        // Events logged after `written` are left for the next read.
        for (slot, position) in events.iter_mut().zip(cursor..written) {
            *slot = log.events[(position % kept) as usize].unwrap_or(placeholder);
        }
        drop(log);
        (Unmapped::Events(events), written)
    }

    /// Faults of watched, not-present pages the monitor resolved.
    pub fn faults(&self) -> u64 {
        self.shared.faults.load(Ordering::Relaxed)
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        // Only the process-wide monitor exists and it lives as long as the process; a monitor
        // that is dropped stops its thread.
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe {
            libc::write(
                self.shared.stop.as_raw_fd(),
                std::ptr::from_ref(&one).cast(),
                8,
            );
        }
    }
}

/// The monitor thread: waits for messages, logs unmaps, resolves faults. Allocates nothing.
fn run(shared: &Shared, page: usize) {
    let uffd = shared.uffd.as_raw_fd();
    let mut messages = [UffdMsg {
        event: 0,
        reserved: [0; 7],
        arg: [0; 3],
    }; MESSAGES_PER_READ];
    // Faults to resolve again; allocated once, so the loop never allocates.
    let mut retry: Vec<usize> = Vec::with_capacity(FAULTS_PENDING_MAX);
    loop {
        let mut fds = [
            libc::pollfd {
                fd: uffd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: shared.stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let timeout_ms = if retry.is_empty() { -1 } else { 1 };
        // SAFETY: two live pollfd structures.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
        if ready < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if fds[1].revents != 0 {
            return;
        }
        if fds[0].revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
            return;
        }
        shared.reading.store(true, Ordering::SeqCst);
        // SAFETY: reads whole messages into a live array of them.
        let read = unsafe {
            libc::read(
                uffd,
                messages.as_mut_ptr().cast(),
                std::mem::size_of_val(&messages),
            )
        };
        let count = usize::try_from(read).unwrap_or(0) / std::mem::size_of::<UffdMsg>();
        {
            let mut log = lock(&shared.log);
            for message in &messages[..count] {
                let [a, b, c] = message.arg;
                let (start, end, kind) = match message.event {
                    UFFD_EVENT_UNMAP => (a, b, UnmapKind::Unmap),
                    UFFD_EVENT_REMOVE => (a, b, UnmapKind::Remove),
                    // from, to, len: the old range is gone.
                    UFFD_EVENT_REMAP => (a, a.saturating_add(c), UnmapKind::Remap),
                    UFFD_EVENT_PAGEFAULT => {
                        shared.faults.fetch_add(1, Ordering::Relaxed);
                        if retry.len() < retry.capacity() {
                            retry.push(b as usize);
                        } else {
                            // Full (not expected: a fault waits for us, so at most one per
                            // thread): wake it to fault again.
                            let mut range = UffdioRange {
                                start: b / page as u64 * page as u64,
                                len: page as u64,
                            };
                            let _ = ioctl(uffd, UFFDIO_WAKE, &mut range);
                        }
                        continue;
                    }
                    _ => continue,
                };
                log.push(UnmapEvent {
                    segment: Segment::new(start as usize, end.saturating_sub(start) as usize),
                    kind,
                });
            }
            // Faults after the events: an unmap in progress makes a fault wait for its
            // event to be read (EAGAIN until then).
            retry.retain(|&address| match resolve_fault(uffd, address, page) {
                Resolved::Done => false,
                Resolved::Later => true,
                Resolved::Unwatched(start, end) => {
                    // A range no longer watched counts as unmapped: its registrations go,
                    // and it is watched again before one is cached.
                    log.push(UnmapEvent {
                        segment: Segment::new(start as usize, (end - start) as usize),
                        kind: UnmapKind::Unmap,
                    });
                    false
                }
            });
            shared.written.store(log.written, Ordering::SeqCst);
        }
        shared.reading.store(false, Ordering::SeqCst);
    }
}

/// What became of a fault of a watched page.
enum Resolved {
    /// The faulting thread goes on.
    Done,
    /// The kernel is in the middle of an unmap of ours to read first (EAGAIN): try again.
    Later,
    /// Resolved by no longer watching this range, which now counts as unmapped.
    Unwatched(u64, u64),
}

/// Resolves a fault of a watched page the way the kernel would: a zero page. Where that is
/// refused for good (a huge-page mapping), the page's huge-page-aligned range stops being
/// watched, which wakes the faulting thread to fault normally.
fn resolve_fault(uffd: RawFd, address: usize, page: usize) -> Resolved {
    let start = (address / page * page) as u64;
    let mut zero = UffdioZeropage {
        range: UffdioRange {
            start,
            len: page as u64,
        },
        mode: 0,
        zeropage: 0,
    };
    let wake = || {
        let mut range = UffdioRange {
            start,
            len: page as u64,
        };
        let _ = ioctl(uffd, UFFDIO_WAKE, &mut range);
    };
    match ioctl(uffd, UFFDIO_ZEROPAGE, &mut zero).map_err(|err| err.raw_os_error()) {
        Ok(()) => Resolved::Done,
        Err(Some(libc::EAGAIN)) => Resolved::Later,
        Err(Some(libc::EINVAL)) => {
            for huge in [2u64 << 20, 1 << 30] {
                let mut range = UffdioRange {
                    start: start / huge * huge,
                    len: huge,
                };
                if ioctl(uffd, UFFDIO_UNREGISTER, &mut range).is_ok() {
                    wake();
                    return Resolved::Unwatched(range.start, range.start + huge);
                }
            }
            wake();
            Resolved::Done
        }
        // EEXIST: another thread's fault filled it; ENOENT/ESRCH/EFAULT: the page or the
        // process is going away. Either way the faulting thread retries on its own.
        Err(_) => {
            wake();
            Resolved::Done
        }
    }
}
