//! `tessera-bench demote --quick --json` with small regions against its private cluster of
//! real server processes (four unified iods, four client processes): every byte read back is
//! verified, every method has its row, and the counters show what each method is: no client
//! cache, an inclusive one, and DEMOTE (eager and buffered) making the iods' caches hold what
//! the clients evicted.
//!
//! The bench starts its cluster itself from the `tessera` binary beside it (build it first:
//! `cargo build -p tessera-cli`; `cargo test --workspace` does).

mod common;

const BENCH: &str = env!("CARGO_BIN_EXE_tessera-bench");

#[test]
fn demote_verifies_and_each_method_caches_as_it_should() {
    let scratch = tempfile::tempdir().unwrap();
    let output = common::run_private(
        BENCH,
        &[
            "demote",
            "--quick",
            "--json",
            "--region-bytes",
            "4m",
            "--repetitions",
            "1",
        ],
        scratch.path(),
    );
    let report = common::verified_report(&output, "demote");
    assert_eq!(report["config"]["region_bytes_per_client"], 4 << 20);
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{rows:?}");
    let row = |method: &str| {
        rows.iter()
            .find(|row| row["method"] == method)
            .unwrap_or_else(|| panic!("no row of {method}: {rows:?}"))
    };
    let number = |method: &str, field: &str| row(method)[field].as_f64().unwrap();
    let count = |method: &str, field: &str| row(method)[field].as_u64().unwrap();
    // 4 clients x 64 blocks x the timed walks.
    let walks = report["config"]["timed_passes"].as_u64().unwrap();
    assert!(walks >= 2, "{walks} timed walks");
    for method in ["nocache", "inclusive", "demote", "demote-buffered"] {
        assert_eq!(count(method, "bytes"), 4 * walks * (4 << 20), "{method}");
        assert!(number(method, "mib_s") > 0.0, "{method}");
    }
    assert_eq!(
        count("nocache", "client_hits") + count("nocache", "client_misses"),
        0
    );
    // Each method but the first is compared with the one before it, repetition by repetition.
    assert!(row("nocache")["paired_ratio"].is_null());
    for method in ["inclusive", "demote", "demote-buffered"] {
        assert!(number(method, "paired_ratio") > 0.0, "{method}");
    }
    // Loops longer than the client cache miss it whatever the method.
    assert_eq!(count("inclusive", "client_misses"), 4 * 64 * walks);
    assert_eq!(count("inclusive", "demotes_sent"), 0);
    for method in ["demote", "demote-buffered"] {
        assert!(
            number(method, "demotes_sent") > 0.0,
            "{method}: {:?}",
            row(method)
        );
        assert!(
            number(method, "iod_units_demoted") > 0.0,
            "{method}: {:?}",
            row(method)
        );
    }
    // Exclusive caching: the iods hold what the clients evicted, so the loops hit there.
    let inclusive = number("inclusive", "iod_hit_rate");
    let demote = number("demote", "iod_hit_rate");
    assert!(
        demote > inclusive + 0.3,
        "iod hit rates: demote {demote}, inclusive {inclusive}"
    );
}
