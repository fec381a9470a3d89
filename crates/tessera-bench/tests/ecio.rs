//! `tessera-bench ecio` end to end: the bench binary against a real 1-server cluster on
//! loopback, started here with `tessera_cluster::start` (which runs the `tessera` binary cargo
//! built beside this test: `cargo test --workspace` builds it) and stopped when the test ends.

mod common;

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
    let out = tempfile::tempdir().expect("a temporary directory");
    let output = bench(
        &[
            "ecio",
            "--json",
            "--out",
            out.path().to_str().unwrap(),
            "--counts",
            "4000,64000",
            "--repetitions",
            "1",
            "--iterations",
            "1",
        ],
        &cluster.file(),
    );
    let report = common::verified_report(&output, "ecio");
    assert_eq!(
        report["config"]["counts"],
        serde_json::json!([4000, 64_000])
    );
    let rows = report["rows"].as_array().unwrap();
    // 2 directions x 2 process counts x 2 counts x 2 methods.
    assert_eq!(rows.len(), 2 * 2 * 2 * 2);
    for processes in [2u64, 4] {
        for count in [4000u64, 64_000] {
            let row = |method: &str| {
                rows.iter()
                    .find(|row| {
                        row["direction"] == "write"
                            && row["processes"] == processes
                            && row["count"] == count
                            && row["method"] == method
                    })
                    .unwrap_or_else(|| panic!("no row write {processes} {count} {method}"))
            };
            let case = format!("write, {processes} clients, {count} ints");
            let server = row("server_directed");
            assert_eq!(server["requests"], processes, "{case}");
            assert_eq!(
                server["pieces"], 1,
                "{case}: one storage call per collective"
            );
            assert_eq!(server["bytes"], count * 4);
            assert_eq!(server["iterations"], 1, "{case}");
            assert_eq!(server["repetitions"], 1, "{case}");
            assert_eq!(server["verified"], true, "{case}");
            let two_phase = row("two_phase");
            // Every process is an aggregator and writes its domain as one run.
            assert_eq!(two_phase["requests"], processes, "{case}");
            assert_eq!(two_phase["pieces"], processes, "{case}");
            assert!(server["mib_s"].as_f64().unwrap() > 0.0);
            // One repetition: the range is the median.
            assert_eq!(server["mib_s_min"], server["mib_s"]);
            assert_eq!(server["mib_s_max"], server["mib_s"]);
            // The paper's Table 1/2 value at 4000 and 64000 ints.
            assert!(server["paper_improvement_pct"].as_f64().is_some(), "{case}");
        }
    }
    // The CSV has the same rows, one per line after the header, and the figure is written
    // as SVG and PNG.
    let csv = std::fs::read_to_string(out.path().join("ecio.csv")).expect("ecio.csv");
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let header = reader.headers().unwrap().clone();
    assert!(
        header.iter().any(|name| name == "speedup_vs_two_phase"),
        "{header:?}"
    );
    assert_eq!(reader.records().count(), rows.len());
    for name in ["ecio.svg", "ecio.png"] {
        let bytes = std::fs::metadata(out.path().join(name))
            .unwrap_or_else(|err| panic!("{name}: {err}"))
            .len();
        assert!(bytes > 1000, "{name}: {bytes} bytes");
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
