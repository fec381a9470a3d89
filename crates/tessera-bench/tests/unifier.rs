//! `tessera-bench unifier --quick --json` with tiny sizes against its three private clusters
//! of real server processes (one per `tessera iod --serve` mode): every byte read back is
//! verified, every (case, method) has its row, the `ofi` rows say why they were skipped, and
//! the memory-copy bandwidth is reported.
//!
//! The bench starts its clusters itself from the `tessera` binary beside it (build it first:
//! `cargo build -p tessera-cli`; `cargo test --workspace` does).

mod common;

use std::time::{Duration, Instant};

const BENCH: &str = env!("CARGO_BIN_EXE_tessera-bench");
/// The whole run, three clusters started and stopped included.
const RUN_SECONDS_MAX: u64 = 60;
const METHODS: [&str; 3] = ["normal", "mmap", "unified"];

#[test]
fn unifier_verifies_and_reports_every_case_of_every_method() {
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("out");
    let started = Instant::now();
    let output = common::run_private(
        BENCH,
        &[
            "unifier",
            "--quick",
            "--json",
            "--cache-bytes",
            "4m",
            "--sizes",
            "64k,1m",
            "--repetitions",
            "1",
            "--region-bytes",
            "1m",
        ],
        scratch.path(),
    );
    let took = started.elapsed();
    let report = common::verified_report(&output, "unifier");
    assert!(
        took < Duration::from_secs(RUN_SECONDS_MAX),
        "the tiny run took {took:?}"
    );
    assert_eq!(report["quick"], true);
    let config = &report["config"];
    assert_eq!(config["cache_bytes"], 4 << 20);
    assert!(config["memcpy_mib_s"].as_f64().unwrap() > 0.0, "{config}");
    assert_eq!(config["cached_read"]["file_bytes"], 2 << 20);
    assert_eq!(config["aggregate"]["region_bytes_per_client"], 1 << 20);
    let rows = report["rows"].as_array().unwrap();
    // Cached reads and writes: 2 sizes x 3 transports (ofi skipped) each; re-read: 5
    // regions over local; aggregate: 4 client counts x 2 transports; each for 3 methods.
    assert_eq!(rows.len(), (2 * 2 * 3 + 5 + 4 * 2) * 3);
    let find = |part: &str, transport: &str, key: &str, value: u64, method: &str| {
        rows.iter()
            .find(|row| {
                row["part"] == part
                    && row["transport"] == transport
                    && row[key] == value
                    && row["method"] == method
            })
            .unwrap_or_else(|| panic!("no row {part} {transport} {key}={value} {method}"))
    };
    for method in METHODS {
        for size in [64u64 << 10, 1 << 20] {
            for (part, transport) in [
                ("cached-read", "local"),
                ("cached-read", "tcp"),
                ("cached-write", "local"),
                ("cached-write", "tcp"),
            ] {
                let row = find(part, transport, "access_bytes", size, method);
                assert!(row["skipped"].is_null(), "{row}");
                assert!(row["mib_s"].as_f64().unwrap() > 0.0, "{row}");
                // At least 16 calls of `size` per repetition (32 MiB with --quick).
                assert_eq!(row["bytes"], row["calls"].as_u64().unwrap() * size, "{row}");
                assert!(row["calls"].as_u64().unwrap() >= 16, "{row}");
                assert!(row["requests"].as_u64().unwrap() >= row["calls"].as_u64().unwrap());
            }
            for part in ["cached-read", "cached-write"] {
                let ofi = find(part, "ofi", "access_bytes", size, method);
                assert!(ofi["skipped"].as_str().unwrap().contains("ofi"), "{ofi}");
                assert!(ofi["mib_s"].is_null(), "{ofi}");
            }
        }
        for tenths in [8u64, 9, 10, 11, 13] {
            let region = (4 << 20) * tenths / 10;
            let row = find("re-read", "local", "file_bytes", region, method);
            assert_eq!(row["bytes"], region, "{row}");
            assert_eq!(row["calls"], region.div_ceil(128 << 10), "{row}");
        }
        for clients in 1..=4u64 {
            for transport in ["local", "tcp"] {
                let row = find("aggregate", transport, "clients", clients, method);
                // 2 calls of the 1 MiB region per client with --quick.
                assert_eq!(row["file_bytes"], 1 << 20, "{row}");
                assert_eq!(row["bytes"], clients * 2 * (1 << 20), "{row}");
                assert!(row["mib_s"].as_f64().unwrap() > 0.0, "{row}");
            }
        }
    }
    let csv = std::fs::read_to_string(out.join("unifier.csv")).unwrap();
    assert_eq!(csv.lines().count(), rows.len() + 1);
    let svg = std::fs::read_to_string(out.join("unifier.svg")).unwrap();
    for method in METHODS {
        assert!(
            svg.contains(&format!("{method}\n</text>")),
            "legend lacks {method}"
        );
    }
}
