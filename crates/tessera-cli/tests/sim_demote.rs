//! `tessera sim demote`: the simulator through the command line, on a tiny workload and a tiny
//! trace, checking the JSON report's rows and winners and the errors on a bad trace.

use std::fmt::Write as _;
use std::process::Command;

const TESSERA: &str = env!("CARGO_BIN_EXE_tessera");

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(TESSERA)
        .args(["sim", "demote"])
        .args(args)
        .output()
        .expect("run tessera sim demote")
}

#[test]
fn a_scaled_table_6_3_run_has_every_row_and_the_papers_winners() {
    let output = sim(&["--json", "--scale", "64", "--passes", "4"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["bench"], "sim-demote");
    assert_eq!(report["config"]["client_blocks"], 256);
    let rows = report["rows"].as_array().unwrap();
    // 3 networks x (seq, random, zipf, loop).
    assert_eq!(rows.len(), 12);
    let mut compared = 0;
    for row in rows {
        let methods: Vec<&str> = row["methods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|method| method["method"].as_str().unwrap())
            .collect();
        assert_eq!(
            methods,
            ["nocache", "inclusive", "demote", "demote-buffered"]
        );
        if row["workload"] == "loop" {
            assert!(row["paper_winner"].is_null());
            continue;
        }
        compared += 1;
        assert_eq!(row["paper_winner"], "demote-buffered", "{row}");
        assert_eq!(row["winner"], row["paper_winner"], "{row}");
        assert_eq!(row["same_winner"], true);
        let reads = row["methods"][2]["reads"].as_u64().unwrap();
        assert_eq!(reads, 4 * row["working_set_blocks"].as_u64().unwrap());
    }
    assert_eq!(compared, 9);
    assert_eq!(report["winners_match"], true);
}

#[test]
fn a_trace_runs_and_a_bad_trace_names_its_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.trace");
    let mut text = String::from("# client block op\n");
    for pass in 0..6 {
        for block in 0..12 {
            writeln!(text, "{} {block} R", pass % 2).unwrap();
        }
    }
    text.push_str("1 3 W\n");
    std::fs::write(&good, text).unwrap();
    let output = sim(&[
        "--json",
        "--trace",
        good.to_str().unwrap(),
        "--client-blocks",
        "4",
        "--server-blocks",
        "4",
        "--buffer-blocks",
        "2",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for row in rows {
        assert_eq!(row["workload"], "trace");
        assert!(row["same_winner"].is_null());
        for method in row["methods"].as_array().unwrap() {
            assert_eq!(method["reads"], 72);
            assert_eq!(method["writes"], 1);
        }
    }

    let bad = dir.path().join("bad.trace");
    std::fs::write(&bad, "0 1\n0 2 R\n# fine\n0 banana\n").unwrap();
    let output = sim(&["--trace", bad.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("trace line 4, field 2 (block)"), "{stderr}");
}
