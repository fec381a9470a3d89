//! A registry that fell more than `MONITOR_EVENTS_KEPT` unmap events behind forgets every
//! cached registration. A process of its own: the overrun would reach every registry in it.

use tessera_testing as not_run;

use std::sync::Arc;

use tessera_reg::{
    page_bytes, Caching, Grouping, Monitor, NoneRegistrar, Policy, Registry, Segment,
    MONITOR_EVENTS_KEPT,
};

#[test]
fn an_overrun_event_log_forgets_every_cached_registration() {
    let registry = Registry::new(
        Arc::new(NoneRegistrar::new()),
        Policy::new(Grouping::Individual, Caching::PinDown),
    )
    .unwrap();
    if let Err(reason) = Monitor::process() {
        not_run::ignored_at_run_time(&format!("no unmap monitor: {reason}"));
        return;
    }
    assert!(
        registry.watching(),
        "the monitor runs, so the registry watches"
    );
    let page = page_bytes();
    let pages = 4;
    // SAFETY: a fresh anonymous mapping, unmapped at the end.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            pages * page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED);
    let segments: Vec<Segment> = (0..pages)
        .map(|index| Segment::new(base as usize + index * page, page))
        .collect();
    drop(registry.acquire(&segments).unwrap());
    assert_eq!(registry.stats().cached_entries, pages);
    // Discard the first page over and over: one event each, all of them while the registry
    // does not look.
    let last = (base as usize + (pages - 1) * page) as *mut libc::c_void;
    for _ in 0..=MONITOR_EVENTS_KEPT {
        // SAFETY: a page of our own mapping.
        assert_eq!(unsafe { libc::madvise(last, page, libc::MADV_DONTNEED) }, 0);
    }
    drop(registry.acquire(&segments[..1]).unwrap());
    let stats = registry.stats();
    assert_eq!(
        stats.unmapped, pages as u64,
        "all of them, not only the discarded page's"
    );
    assert_eq!(stats.registrations, pages as u64 + 1);
    // SAFETY: our mapping.
    unsafe { libc::munmap(base, pages * page) };
}
