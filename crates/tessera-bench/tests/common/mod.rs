//! What the end-to-end tests of `tessera-bench` share.

/// The report `tessera-bench BENCH --json` printed as `output`, after asserting that it
/// succeeded (its standard error in the message), printed one JSON object on standard output,
/// and that the report names `bench` and says every byte read back was right.
pub fn verified_report(output: &std::process::Output, bench: &str) -> serde_json::Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("one JSON object on stdout");
    assert_eq!(report["bench"], bench);
    assert_eq!(report["verified"], true);
    report
}
