//! The unmap monitor against real mappings: a cached registration is never returned for
//! memory unmapped, discarded or replaced since, with no call from the application.
//!
//! The monitor is process-wide, and these tests run in parallel threads: each works on memory
//! of its own, so the events of one never touch the registrations of another. (The test that
//! overruns the event log lives in `monitor_overrun.rs`, a process of its own.)

use tessera_testing as not_run;

use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use tessera_reg::{
    page_bytes, Caching, Grouping, NoneRegistrar, PinRegistrar, Policy, Registrar, Registry,
    Segment,
};

/// Anonymous read-write pages, unmapped on drop unless already gone.
struct Pages {
    address: usize,
    length: usize,
}

impl Pages {
    fn new(pages: usize) -> Self {
        Self::at(0, pages, 0)
    }

    fn at(address: usize, pages: usize, extra_flags: libc::c_int) -> Self {
        let length = pages * page_bytes();
        // SAFETY: a fresh anonymous mapping (MAP_FIXED_NOREPLACE never replaces one).
        let mapped = unsafe {
            libc::mmap(
                address as *mut libc::c_void,
                length,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags,
                -1,
                0,
            )
        };
        assert_ne!(mapped, libc::MAP_FAILED, "mmap of {pages} pages failed");
        let pages = Self {
            address: mapped as usize,
            length,
        };
        pages.fill(0x5A);
        pages
    }

    fn fill(&self, byte: u8) {
        // SAFETY: our own live mapping.
        unsafe { std::ptr::write_bytes(self.address as *mut u8, byte, self.length) };
    }

    fn byte(&self, offset: usize) -> u8 {
        assert!(offset < self.length);
        // SAFETY: inside our own live mapping.
        unsafe { std::ptr::read_volatile((self.address + offset) as *const u8) }
    }

    fn page(&self, index: usize) -> Segment {
        Segment::new(self.address + index * page_bytes(), page_bytes())
    }

    /// Leaves the mapping to whoever replaces it.
    fn forget(&mut self) {
        self.length = 0;
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        if self.length > 0 {
            // SAFETY: our own mapping.
            unsafe { libc::munmap(self.address as *mut libc::c_void, self.length) };
        }
    }
}

/// A pin-down cache over `registrar`, watched; `None` (the test ignored at run time, failing
/// under `CI=true`) where this process gets no full userfaultfd (an unprivileged user with
/// `vm.unprivileged_userfaultfd = 0`, or a seccomp filter that refuses the call).
fn watched_registry(registrar: Arc<dyn Registrar>) -> Option<Registry> {
    let registry = Registry::new(
        registrar,
        Policy::new(Grouping::Individual, Caching::PinDown),
    )
    .unwrap();
    if let Err(reason) = tessera_reg::Monitor::process() {
        not_run::ignored_at_run_time(&format!("no unmap monitor: {reason}"));
        return None;
    }
    assert!(
        registry.watching(),
        "the monitor runs, so the registry watches"
    );
    Some(registry)
}

#[test]
fn memory_unmapped_and_mapped_again_at_the_same_address_is_registered_anew() {
    let Some(registry) = watched_registry(Arc::new(PinRegistrar::new())) else {
        return;
    };
    let mut pages = Pages::new(16);
    pages.fill(0x11);
    let whole = Segment::new(pages.address, pages.length);
    drop(registry.acquire(&[whole]).unwrap());
    drop(registry.acquire(&[whole]).unwrap());
    let stats = registry.stats();
    assert_eq!((stats.registrations, stats.cache_hits), (1, 1), "{stats:?}");

    // New memory over the same addresses: MAP_FIXED unmaps the old pages as it maps.
    let address = pages.address;
    pages.forget();
    let again = Pages::at(address, 16, libc::MAP_FIXED);
    assert_eq!(again.address, address);
    let guard = registry.acquire(&[whole]).unwrap();
    let stats = registry.stats();
    assert_eq!(stats.unmapped, 1, "the old registration was forgotten");
    assert_eq!(stats.registrations, 2, "the new memory was registered");
    assert_eq!(
        stats.cache_hits, 1,
        "the stale registration was not returned"
    );
    drop(guard);
    // The new registration is cached and watched in its turn.
    drop(registry.acquire(&[whole]).unwrap());
    assert_eq!(registry.stats().cache_hits, 2);
}

#[test]
fn discarded_pages_end_their_registrations_and_fault_back_as_zeros() {
    let registrar = Arc::new(NoneRegistrar::new());
    let Some(registry) = watched_registry(registrar.clone()) else {
        return;
    };
    let pages = Pages::new(8);
    let first = pages.page(1);
    let other = pages.page(5);
    drop(registry.acquire(&[first, other]).unwrap());
    assert_eq!(registry.stats().registrations, 2);

    // What free() does to a large block it keeps: discard the pages, keep the mapping.
    // SAFETY: a page of our own mapping.
    let discarded = unsafe {
        libc::madvise(
            first.address as *mut libc::c_void,
            first.length,
            libc::MADV_DONTNEED,
        )
    };
    assert_eq!(discarded, 0);
    drop(registry.acquire(&[first, other]).unwrap());
    let stats = registry.stats();
    assert_eq!(
        stats.unmapped, 1,
        "only the discarded page's registration went"
    );
    assert_eq!(stats.registrations, 3);
    assert_eq!(stats.cache_hits, 1, "the other page is still a hit");

    // The discarded page faults back as zeros, from user mode and from the kernel: the
    // monitor resolves the faults the watch routes to it.
    let monitor = tessera_reg::Monitor::process().unwrap();
    let faults = monitor.faults();
    assert_eq!(pages.byte(page_bytes() + 17), 0);
    assert_eq!(pages.byte(0), 0x5A, "pages around it keep their bytes");
    assert!(
        monitor.faults() > faults,
        "the user-mode fault went through the monitor"
    );
    // SAFETY: as above, another page that stays watched.
    let discarded = unsafe {
        libc::madvise(
            other.address as *mut libc::c_void,
            other.length,
            libc::MADV_DONTNEED,
        )
    };
    assert_eq!(discarded, 0);
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(&[0xC3; 100]).unwrap();
    // SAFETY: reads 100 bytes into a page of our own mapping.
    let read = unsafe { libc::pread(file.as_raw_fd(), other.address as *mut libc::c_void, 100, 0) };
    assert_eq!(
        read, 100,
        "a kernel-mode fault on a watched page must not fail"
    );
    assert_eq!(pages.byte(5 * page_bytes() + 99), 0xC3);
    assert_eq!(pages.byte(5 * page_bytes() + 100), 0);
}

#[test]
fn unmapping_part_of_the_memory_ends_only_the_registrations_over_it() {
    let Some(registry) = watched_registry(Arc::new(NoneRegistrar::new())) else {
        return;
    };
    let pages = Pages::new(8);
    let (kept, gone) = (pages.page(0), pages.page(6));
    drop(registry.acquire(&[kept, gone]).unwrap());
    // SAFETY: the last two pages of our own mapping, never touched again.
    let unmapped = unsafe { libc::munmap(gone.address as *mut libc::c_void, 2 * page_bytes()) };
    assert_eq!(unmapped, 0);
    drop(registry.acquire(&[kept]).unwrap());
    let stats = registry.stats();
    assert_eq!((stats.unmapped, stats.cache_hits), (1, 1));
    assert_eq!(stats.cached_entries, 1);
    // Drop unmaps the whole range; the two pages already gone are no error.
}

#[test]
fn memory_that_cannot_be_watched_is_registered_for_one_use_only() {
    let registrar = Arc::new(NoneRegistrar::new());
    let Some(registry) = watched_registry(registrar.clone()) else {
        return;
    };
    // A shared mapping of a regular file: userfaultfd watches anonymous and shared memory
    // only.
    let file = tempfile::tempfile().unwrap();
    file.set_len(4 * page_bytes() as u64).unwrap();
    // SAFETY: maps our own file; unmapped below.
    let mapped = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4 * page_bytes(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(mapped, libc::MAP_FAILED);
    let segment = Segment::new(mapped as usize, 4 * page_bytes());
    drop(registry.acquire(&[segment]).unwrap());
    drop(registry.acquire(&[segment]).unwrap());
    let stats = registry.stats();
    assert_eq!(stats.registrations, 2, "each use registers");
    assert_eq!(stats.unwatched, 2);
    assert_eq!(stats.cached_entries, 0);
    assert_eq!(registrar.deregisters(), 2, "and deregisters after the use");
    // SAFETY: our mapping, not used after.
    unsafe { libc::munmap(mapped, 4 * page_bytes()) };
}

#[test]
fn a_policy_may_leave_the_cache_unwatched() {
    let registry = Registry::new(
        Arc::new(NoneRegistrar::new()),
        Policy::new(Grouping::Individual, Caching::PinDown).with_watch_unmaps(false),
    )
    .unwrap();
    assert!(!registry.watching());
    let dynamic = Registry::new(
        Arc::new(NoneRegistrar::new()),
        Policy::new(Grouping::Individual, Caching::None),
    )
    .unwrap();
    assert!(!dynamic.watching(), "nothing cached, nothing to watch");
}
