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

/// Runs `tessera-bench ARGS --out SCRATCH/out` (`bench` the binary) with the private clusters
/// it starts under `scratch` and no `$TESSERA_CLUSTER`, after asserting that the `tessera`
/// servers it starts were built beside it.
#[allow(
    dead_code,
    reason = "for the tests whose bench starts its own clusters"
)]
pub fn run_private(bench: &str, args: &[&str], scratch: &std::path::Path) -> std::process::Output {
    let servers = std::path::Path::new(bench).with_file_name("tessera");
    assert!(
        servers.is_file(),
        "{} is missing: build it with `cargo build -p tessera-cli`",
        servers.display()
    );
    std::process::Command::new(bench)
        .args(args)
        .arg("--out")
        .arg(scratch.join("out"))
        .env_remove("TESSERA_CLUSTER")
        .env("TMPDIR", scratch)
        .output()
        .expect("tessera-bench runs")
}
