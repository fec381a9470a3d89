//! A child made by `fork` inherits the monitor's userfaultfd, which still names the parent's
//! address space: the child must not watch through it. A process of its own (one test, so
//! the fork happens with no other test thread running).

use tessera_testing as not_run;

use std::sync::Arc;

use tessera_reg::{Caching, Grouping, Monitor, NoneRegistrar, Policy, Registry, Segment};

#[test]
fn a_forked_child_does_not_watch_through_its_parents_monitor() {
    if let Err(reason) = Monitor::process() {
        not_run::ignored_at_run_time(&format!("no unmap monitor: {reason}"));
        return;
    }
    let registry = Registry::new(
        Arc::new(NoneRegistrar::new()),
        Policy::new(Grouping::Individual, Caching::PinDown),
    )
    .unwrap();
    assert!(registry.watching());
    let buffer = vec![3u8; 3 * 4096];
    // SAFETY: the child only runs the checks below and leaves with _exit.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        let refused = Monitor::process().is_err();
        // The registry made before the fork registers, but caches nothing it cannot watch.
        let acquired = registry.acquire(&[Segment::of(&buffer)]).is_ok();
        let stats = registry.stats();
        let ok = refused && acquired && stats.cached_entries == 0 && stats.unwatched == 1;
        let code = i32::from(!ok);
        // SAFETY: leaves the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    let waited = unsafe { libc::waitpid(child, &raw mut status, 0) };
    assert_eq!(waited, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child watched through the parent's monitor (status {status:#x})"
    );
    // The parent still watches.
    drop(registry.acquire(&[Segment::of(&buffer)]).unwrap());
    assert_eq!(registry.stats().cached_entries, 1);
}
