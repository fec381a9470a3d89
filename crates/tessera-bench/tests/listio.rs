//! `tessera-bench listio --quick --json` against a private cluster of real server processes:
//! the data it reads back is verified, the rows are typed and complete, the request counts are
//! the ones the layout dictates, and the CSV and figures are written.
//!
//! The bench starts its cluster itself from the `tessera` binary beside it (build it first:
//! `cargo build -p tessera-cli`; `cargo test --workspace` does).

mod common;

const BENCH: &str = env!("CARGO_BIN_EXE_tessera-bench");

#[test]
fn listio_verifies_and_reports_typed_rows() {
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("out");
    let output = common::run_private(BENCH, &["listio", "--quick", "--json"], scratch.path());
    let report = common::verified_report(&output, "listio");
    assert_eq!(report["quick"], true);
    let meta = &report["meta"];
    assert_eq!(meta["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(meta["repetitions"], 5);
    assert!(meta["timestamp"].as_str().unwrap().ends_with('Z'), "{meta}");
    assert!(!meta["commit"].as_str().unwrap().is_empty(), "{meta}");
    let rows = report["rows"].as_array().unwrap();
    // write and read x 7 piece sizes x 8 methods (5 over local, 3 over tcp), then write and
    // read x 2 piece sizes x gather with the checks of data requests on and off.
    assert_eq!(rows.len(), 2 * 7 * 8 + 2 * 2 * 2);
    let row = |direction: &str, piece_bytes: u64, method: &str| {
        rows.iter()
            .find(|row| {
                row["direction"] == direction
                    && row["piece_bytes"] == piece_bytes
                    && row["method"] == method
            })
            .unwrap_or_else(|| panic!("no row {direction} {piece_bytes} {method}"))
    };
    for row in rows {
        assert!(
            row.get("case").is_none() && row.get("extra").is_none(),
            "{row}"
        );
        let (low, median, high) = (
            row["mib_s_min"].as_f64().unwrap(),
            row["mib_s"].as_f64().unwrap(),
            row["mib_s_max"].as_f64().unwrap(),
        );
        assert!(0.0 < low && low <= median && median <= high, "{row}");
        assert_eq!(
            row["repetitions"],
            if row["servers"] == "in-process" { 9 } else { 5 }
        );
    }
    for checked in ["checked", "unchecked"] {
        let row = row("write", 128, &format!("gather, {checked}"));
        assert_eq!(row["servers"], "in-process", "{row}");
        assert_eq!(row["requests"], 4, "{row}");
    }
    for method in ["multiple", "pack", "gather", "eager"] {
        // At 128 B the 4 x 128 pieces fill one 64 KiB stripe unit: one server, one request
        // per process. At 8 KiB they cover all 4 servers: one request per server per process.
        for (piece_bytes, requests) in [(128, 4), (8192, 16)] {
            let row = row("write", piece_bytes, method);
            assert_eq!(row["servers"], "cluster");
            assert_eq!(row["requests"], requests, "{row}");
            assert_eq!(row["pieces"], 512, "{row}: 4 x 128 file pieces");
            assert_eq!(row["bytes"], 4 * 128 * piece_bytes, "{row}");
        }
    }
    // The CSV holds the same rows under a header of the row's fields.
    let mut csv = csv::Reader::from_path(out.join("listio.csv")).unwrap();
    let header = csv.headers().unwrap().clone();
    assert_eq!(&header[0], "direction");
    assert_eq!(&header[1], "piece_bytes");
    assert!(header.iter().any(|name| name == "mib_s_max"), "{header:?}");
    let records: Vec<csv::StringRecord> = csv.records().map(Result::unwrap).collect();
    assert_eq!(records.len(), rows.len());
    assert!(
        records.iter().any(|record| &record[2] == "gather, checked"),
        "a method with a comma is one field"
    );
    let svg = std::fs::read_to_string(out.join("listio.svg")).unwrap();
    for method in ["multiple", "pack", "gather", "tcp:gather"] {
        assert!(
            svg.contains(&format!("{method}\n</text>")),
            "legend lacks {method}"
        );
    }
    let png = std::fs::read(out.join("listio.png")).unwrap();
    assert_eq!(&png[..4], b"\x89PNG");
}
