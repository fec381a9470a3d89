//! `tessera-bench ecio` end to end: the bench binary against a real 1-server cluster on
//! loopback, started here with `tessera_cluster::start` (which runs the `tessera` binary cargo
//! built beside this test: `cargo test --workspace` builds it) and stopped when the test ends.

use std::path::{Path, PathBuf};
use std::process::Command;

const TESSERA_BENCH: &str = env!("CARGO_BIN_EXE_tessera-bench");

/// A private cluster in a temporary directory, stopped on drop (also when the test fails).
struct Cluster {
    dir: tempfile::TempDir,
}

impl Cluster {
    fn start(servers: u16) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let cluster = Self { dir };
        tessera_cluster::start(
            cluster.dir.path(),
            servers,
            tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT,
        )
        .unwrap_or_else(|err| panic!("cannot start a cluster: {err}"));
        cluster
    }

    fn file(&self) -> PathBuf {
        self.dir.path().join("cluster.toml")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        tessera_cluster::stop_all(self.dir.path());
    }
}

fn bench(args: &[&str], cluster: &Path) -> std::process::Output {
    Command::new(TESSERA_BENCH)
        .args(args)
        .arg("--cluster")
        .arg(cluster)
        .env_remove("TESSERA_CLUSTER")
        .output()
        .expect("tessera-bench runs")
}

/// Two counts, one repetition of one call per measurement: every byte verified, one row per
/// (direction, processes, count, method), and the server-directed writes reach the server as
/// one request per process and are stored as one merged run per collective.
#[test]
fn ecio_bench_verifies_and_merges_each_collective_into_one_run() {
    let cluster = Cluster::start(1);
    let output = bench(
        &[
            "ecio",
            "--json",
            "--counts",
            "4000,64000",
            "--repetitions",
            "1",
            "--iterations",
            "1",
        ],
        &cluster.file(),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("one JSON object on stdout");
    assert_eq!(report["bench"], "ecio");
    assert_eq!(report["verified"], true);
    assert_eq!(
        report["config"]["counts"],
        serde_json::json!([4000, 64_000])
    );
    let rows = report["rows"].as_array().unwrap();
    // 2 directions x 2 process counts x 2 counts x 2 methods.
    assert_eq!(rows.len(), 2 * 2 * 2 * 2);
    for processes in [2u64, 4] {
        for count in [4000u64, 64_000] {
            let case = format!("write m={processes} count={count}");
            let row = |method: &str| {
                rows.iter()
                    .find(|row| row["case"] == case && row["method"] == method)
                    .unwrap_or_else(|| panic!("no row {case} {method}"))
            };
            let server = row("server_directed");
            assert_eq!(server["requests"], processes, "{case}");
            assert_eq!(
                server["pieces"], 1,
                "{case}: one storage call per collective"
            );
            assert_eq!(server["bytes"], count * 4);
            assert_eq!(server["extra"]["iterations"], 1, "{case}");
            assert_eq!(server["extra"]["repetitions"], 1, "{case}");
            let two_phase = row("two_phase");
            // Every process is an aggregator and writes its domain as one run.
            assert_eq!(two_phase["requests"], processes, "{case}");
            assert_eq!(two_phase["pieces"], processes, "{case}");
            assert!(server["mib_s"].as_f64().unwrap() > 0.0);
        }
    }
}

/// Bad `--counts` are refused by name before anything runs.
#[test]
fn ecio_refuses_counts_that_do_not_divide_among_the_processes() {
    for (counts, expected) in [
        ("4002", "multiple of 4"),
        ("0", "multiple of 4"),
        ("many", "not a count"),
        ("67108864", "COUNT_MAX"),
    ] {
        let output = bench(
            &["ecio", "--json", "--counts", counts],
            Path::new("/nonexistent/cluster.toml"),
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "--counts {counts} was accepted");
        assert!(stderr.contains(expected), "--counts {counts}: {stderr}");
        assert!(output.stdout.is_empty(), "--counts {counts}");
    }
}
