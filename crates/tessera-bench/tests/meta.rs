//! `tessera-bench meta --quick --json` at a tiny size against a private cluster of real
//! server processes: every phase of every method has its row, every phase's result was
//! checked by the bench (names listed, files empty, all removed), the operation counts are
//! the ones the phases make, and the ratios and the mds's commit figures are there.

mod common;

use tessera_testing as not_run;

const BENCH: &str = env!("CARGO_BIN_EXE_tessera-bench");
const FILES: u64 = 6;
const PHASES: [&str; 11] = [
    "create",
    "stat",
    "open-close",
    "readdir",
    "rename",
    "unlink",
    "mkdir",
    "rmdir",
    "tree-create",
    "tree-remove",
    "tar-x",
];

#[test]
fn meta_checks_every_phase_and_reports_typed_rows() {
    let scratch = tempfile::tempdir().unwrap();
    let files = FILES.to_string();
    let output = common::run_private(
        BENCH,
        &[
            "meta",
            "--quick",
            "--json",
            "--files",
            &files,
            "--repetitions",
            "1",
        ],
        scratch.path(),
    );
    let report = common::verified_report(&output, "meta");
    let rows = report["rows"].as_array().unwrap();
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    let mounted = unsafe { libc::geteuid() } == 0 && std::path::Path::new("/dev/fuse").exists();
    if !mounted {
        not_run::ignored_at_run_time("the mount rows need root and /dev/fuse");
    }
    let mut methods = vec!["native", "local-disk", "tmpfs"];
    if mounted {
        methods.push("mount");
    }
    let row = |phase: &str, processes: u64, dirs: &str, method: &str| {
        rows.iter()
            .find(|row| {
                row["phase"] == phase
                    && row["processes"] == processes
                    && row["dirs"] == dirs
                    && row["method"] == method
            })
            .unwrap_or_else(|| panic!("no row {phase} {processes} {dirs} {method}"))
    };
    // 11 phases x 2 process counts x 2 directory layouts x the methods, and a floor row per
    // process count.
    assert_eq!(rows.len(), 11 * 2 * 2 * methods.len() + 2);
    for processes in [1u64, 4] {
        let floor = row("ping", processes, "unique", "floor");
        assert_eq!(floor["ops"], processes * FILES, "{floor}");
        for dirs in ["unique", "shared"] {
            for method in &methods {
                for phase in PHASES {
                    let row = row(phase, processes, dirs, method);
                    let ops = row["ops"].as_u64().unwrap();
                    let listed = if dirs == "shared" { processes } else { 1 };
                    let expected = match phase {
                        // Each process lists its directory: its own files, or everyone's.
                        "readdir" => processes * listed * FILES,
                        // The tree's directory, its 10 branches and the files (tar-x: the
                        // entries of the archive, unpacked and checked byte for byte, times
                        // included).
                        "tree-create" | "tree-remove" | "tar-x" => processes * (1 + 10 + FILES),
                        _ => processes * FILES,
                    };
                    assert_eq!(ops, expected, "{row}");
                    let rate = row["ops_s"].as_f64().unwrap();
                    assert!(rate > 0.0 && rate.is_finite(), "{row}");
                    assert!(row["p50_us"].as_f64().unwrap() <= row["p99_us"].as_f64().unwrap());
                    assert!(row["vs_local_disk"].as_f64().unwrap() > 0.0, "{row}");
                    assert!(row["p50_vs_floor"].as_f64().unwrap() > 0.0, "{row}");
                    // The mds counted the commits of every phase that changes the namespace.
                    let changes = !matches!(phase, "stat" | "open-close" | "readdir");
                    let tessera = matches!(*method, "native" | "mount");
                    let per_commit = &row["changes_per_commit"];
                    if changes && tessera {
                        assert!(per_commit.as_f64().unwrap() >= 1.0, "{row}");
                    } else {
                        assert!(per_commit.is_null(), "{row}");
                    }
                }
            }
        }
    }
    let out = scratch.path().join("out");
    for name in ["meta.csv", "meta.svg", "meta.png"] {
        assert!(out.join(name).is_file(), "{name} missing");
    }
}
