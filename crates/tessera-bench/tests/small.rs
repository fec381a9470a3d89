//! `tessera-bench small --quick --json` at a tiny size against a private cluster of real
//! server processes: every case of every method has its row, every byte the bench wrote and
//! read was checked, the call counts are the ones the steps make, and the ratios to the local
//! file, the floor and the bare socket are there.

mod common;

const BENCH: &str = env!("CARGO_BIN_EXE_tessera-bench");
const OPS: u64 = 8;

#[test]
fn small_checks_every_byte_and_reports_typed_rows() {
    let scratch = tempfile::tempdir().unwrap();
    let ops = OPS.to_string();
    let output = common::run_private(
        BENCH,
        &[
            "small",
            "--quick",
            "--json",
            "--ops",
            &ops,
            "--repetitions",
            "1",
            // The MPI rows need `make mpiio`, which runs after this tier; the MPI tests
            // cover the pattern (mpiio/tests/write_back.c).
            "--no-mpi",
        ],
        scratch.path(),
    );
    let report = common::verified_report(&output, "small");
    let rows = report["rows"].as_array().unwrap();
    let find = |part: &str,
                op: &str,
                order: &str,
                size: u64,
                processes: u64,
                transport: &str,
                method: &str| {
        rows.iter()
            .find(|row| {
                row["part"] == part
                    && row["op"] == op
                    && row["order"] == order
                    && row["size"] == size
                    && row["processes"] == processes
                    && row["transport"] == transport
                    && row["method"] == method
            })
            .unwrap_or_else(|| {
                panic!("no row {part} {op} {order} {size} {processes} {transport} {method}")
            })
    };
    let methods = [
        ("local", "tessera"),
        ("local", "tessera-cached"),
        ("tcp", "tessera"),
        ("tcp", "tessera-cached"),
        ("-", "local-file"),
    ];
    // calls: 3 sizes x 2 ops x 2 orders x 2 process counts x 5 methods; floor: 2 process
    // counts x 2 transports; many-small: 3 piece sizes x 2 process counts x 5 methods;
    // socket: 3 sizes x 2 transports.
    assert_eq!(rows.len(), 120 + 4 + 30 + 6);
    for processes in [1u64, 4] {
        for transport in ["local", "tcp"] {
            let floor = find("floor", "ping", "-", 0, processes, transport, "floor");
            assert_eq!(floor["ops"], processes * OPS, "{floor}");
            assert!(floor["p50_us"].as_f64().unwrap() > 0.0, "{floor}");
        }
        for (transport, method) in methods {
            for size in [512u64, 4096, 65536] {
                for op in ["read", "write"] {
                    for order in ["seq", "random"] {
                        let row = find("calls", op, order, size, processes, transport, method);
                        assert_eq!(row["ops"], processes * OPS, "{row}");
                        assert!(row["ops_s"].as_f64().unwrap() > 0.0, "{row}");
                        if method == "local-file" {
                            assert!(row["vs_local_file"].is_null(), "{row}");
                        } else {
                            assert!(row["vs_local_file"].as_f64().unwrap() > 0.0, "{row}");
                            assert!(row["p50_vs_floor"].as_f64().unwrap() > 0.0, "{row}");
                            assert_eq!(row["p50_vs_socket"].is_null(), processes != 1, "{row}");
                        }
                    }
                }
            }
            for piece in [40u64, 320, 2048] {
                let row = find(
                    "many-small",
                    "write",
                    "-",
                    piece,
                    processes,
                    transport,
                    method,
                );
                assert_eq!(row["ops"], processes * OPS, "{row}");
                assert_eq!(
                    row["vs_local_file"].is_null(),
                    method == "local-file",
                    "{row}"
                );
            }
        }
    }
    for transport in ["local", "tcp"] {
        for size in [512u64, 4096, 65536] {
            let row = find("socket", "round-trip", "-", size, 1, transport, "socket");
            assert_eq!(row["ops"], OPS, "{row}");
        }
    }
}
