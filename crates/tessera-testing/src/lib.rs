//! What the workspace's tests share, as a dev-dependency (never a `#[path]` include of a file
//! in another crate).
//!
//! [`ignored_at_run_time`] is the one way a test that cannot run on this machine says so:
//! every crate's tests call it rather than printing a note of their own and passing (most
//! through `use tessera_testing as not_run;`).
//!
//! Where the condition is known before the test runs, the test is `#[ignore = "reason"]`
//! instead. Where it is found at run time (no userfaultfd for this user, no way to drop a
//! capability, no root for a tmpfs or a network namespace), the test calls
//! [`ignored_at_run_time`] and returns: under `CI=true`, where every test must run, that
//! fails the test with the reason; elsewhere it prints `ignored at run time: REASON` to
//! stderr, so a reader of the output never takes the test for one that ran.

use std::io::Write as _;

/// Reports that the calling test cannot run here, for `reason`. Panics under `CI=true`;
/// otherwise prints `ignored at run time: REASON` to stderr, and the caller returns.
#[track_caller]
pub fn ignored_at_run_time(reason: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "this test cannot run here, and CI=true requires every test to run: {reason}"
    );
    // Straight to the process's stderr, not through `eprintln!`, which the test harness
    // captures and shows only for a failed test.
    let _ = writeln!(std::io::stderr(), "ignored at run time: {reason}");
}
