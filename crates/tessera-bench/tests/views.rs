//! `tessera-bench views --quick --json` with two small matrices and one repetition against its
//! private cluster of real server processes: every byte read back is verified, every
//! (distribution, direction, method) has its row, list and view move the same bytes in the same
//! requests with different access descriptions, and the matched layout reaches each server
//! once per process.
//!
//! The bench starts its cluster itself from the `tessera` binary beside it (build it first:
//! `cargo build -p tessera-cli`; `cargo test --workspace` does).

mod common;

const BENCH: &str = env!("CARGO_BIN_EXE_tessera-bench");
const DISTRIBUTIONS: [&str; 3] = ["(BLOCK,BLOCK)", "(*,BLOCK)", "(CYCLIC,CYCLIC)"];
const DIRECTIONS: [&str; 2] = ["write", "read"];

#[test]
fn views_verifies_and_reports_list_view_and_the_match_for_every_size() {
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("out");
    let output = common::run_private(
        BENCH,
        &[
            "views",
            "--quick",
            "--json",
            "--sizes",
            "64,1024",
            "--repetitions",
            "1",
        ],
        scratch.path(),
    );
    let report = common::verified_report(&output, "views");
    assert_eq!(report["meta"]["repetitions"], 1);
    assert_eq!(report["config"]["sizes_n"], serde_json::json!([64, 1024]));
    let rows = report["rows"].as_array().unwrap();
    // Per size: 3 distributions x 2 directions x (list, view); per direction the match's
    // view-stripe, view-pattern, contiguous and its two bounds.
    assert_eq!(rows.len(), 2 * (3 * 2 * 2 + 2 * 5));
    let find = |part: &str, distribution: &str, n: u64, direction: &str, method: &str| {
        rows.iter()
            .find(|row| {
                row["part"] == part
                    && row["distribution"] == distribution
                    && row["n"] == n
                    && row["direction"] == direction
                    && row["method"] == method
            })
            .unwrap_or_else(|| panic!("no row {part} {distribution} n={n} {direction} {method}"))
    };
    let number = |row: &serde_json::Value, key: &str| {
        row[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} of {row}"))
    };
    for n in [64u64, 1024] {
        for direction in DIRECTIONS {
            for distribution in DISTRIBUTIONS {
                let list = find("distributions", distribution, n, direction, "list");
                let view = find("distributions", distribution, n, direction, "view");
                // The same bytes in the same requests, described by 16 bytes per piece or by
                // 16 bytes per request.
                for key in ["bytes", "requests", "calls"] {
                    assert_eq!(list[key], view[key], "{key}: {list} {view}");
                }
                assert_eq!(number(view, "bytes"), n * n, "{view}");
                assert_eq!(
                    number(view, "offset_bytes"),
                    16 * number(view, "requests"),
                    "{view}"
                );
                assert!(
                    number(list, "offset_bytes") > number(view, "offset_bytes"),
                    "{list} {view}"
                );
                // Timed in one step, call by call: a ratio of the same repetition.
                assert!(view["paired_vs_list"].as_f64().unwrap() > 0.0, "{view}");
                assert!(list["paired_vs_list"].is_null(), "{list}");
            }
            let stripe = find("layout-match", "(*,BLOCK)", n, direction, "view-stripe");
            let pattern = find("layout-match", "(*,BLOCK)", n, direction, "view-pattern");
            let contiguous = find("layout-match", "(*,BLOCK)", n, direction, "contiguous");
            // Process i's columns all lie on server i: one request each, and one storage call
            // (none for a read sent from the page cache's mapping).
            for row in [pattern, contiguous] {
                assert_eq!(number(row, "requests"), 4, "{row}");
                if direction == "write" {
                    assert_eq!(number(row, "pieces"), 4, "{row}");
                } else {
                    assert!(number(row, "pieces") <= 4, "{row}");
                }
                assert!(row["speedup_paired"].as_f64().unwrap() > 0.0, "{row}");
            }
            if n == 1024 {
                // A 1 MiB matrix covers 16 stripe units: every process reaches every server.
                assert_eq!(number(stripe, "requests"), 16, "{stripe}");
                assert_eq!(number(stripe, "servers"), 4, "{stripe}");
            }
            for bound in ["tcp", "tcp+file"] {
                let row = find("layout-match", "(*,BLOCK)", n, direction, bound);
                assert!(row["mib_s"].as_f64().unwrap() > 0.0, "{row}");
            }
        }
    }
    let csv = std::fs::read_to_string(out.join("views.csv")).unwrap();
    assert_eq!(csv.lines().count(), rows.len() + 1);
    assert!(out.join("views.svg").is_file());
}

#[test]
fn views_refuses_a_matrix_side_its_shares_cannot_tile() {
    let scratch = tempfile::tempdir().unwrap();
    for side in ["100", "0", "16384"] {
        let output = common::run_private(BENCH, &["views", "--sizes", side], scratch.path());
        assert!(!output.status.success(), "--sizes {side} was taken");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("multiple of 64 between 64 and 8192"),
            "--sizes {side}: {stderr}"
        );
    }
}
