//! What a user sees of a running cluster: the servers' Prometheus metrics (`--metrics`),
//! and `ls`, `stat`, `df` with `--json`, against a real cluster on loopback.

mod common;

use common::{bytes, metrics_address, sample, scrape, tessera, Cluster};
use serde_json::Value;

/// Runs a client command against `cluster`; panics with its stderr if it fails.
fn ok(cluster: &Cluster, args: &[&str]) -> String {
    let file = cluster.file();
    let mut all = args.to_vec();
    all.extend(["--cluster", file.to_str().unwrap()]);
    let output = tessera(&all);
    assert!(
        output.status.success(),
        "tessera {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

fn json(cluster: &Cluster, args: &[&str]) -> Value {
    let text = ok(cluster, args);
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{args:?}: {err}:\n{text}"))
}

#[test]
fn an_iods_metrics_count_the_bytes_of_a_put() {
    let cluster = Cluster::start_with(1, &["--precreate", "0"]);
    cluster.restart_iod_with(0, &["--metrics", "127.0.0.1:0"]);
    let address = metrics_address(&cluster, "iod-0");
    let before = scrape(&address);
    let wanted_before = sample(
        &before,
        "tessera_storage_bytes_wanted_total",
        &["direction=\"write\""],
    );

    let length = 5 << 20;
    let local = cluster.path().join("input");
    std::fs::write(&local, bytes(3, length)).unwrap();
    ok(&cluster, &["put", local.to_str().unwrap(), "/five"]);

    let after = scrape(&address);
    let write = ["direction=\"write\""];
    let wanted = sample(&after, "tessera_storage_bytes_wanted_total", &write) - wanted_before;
    let moved = sample(&after, "tessera_storage_bytes_moved_total", &write);
    assert!(
        wanted >= length as f64,
        "wanted {wanted} < {length}:\n{after}"
    );
    assert!(moved >= length as f64, "moved {moved} < {length}:\n{after}");
    assert!(sample(&after, "tessera_storage_requests_total", &write) >= 1.0);
    assert!(sample(&after, "tessera_storage_calls_total", &write) >= 1.0);
    // The transport counted the requests and timed them.
    let creates = sample(
        &after,
        "tessera_requests_total",
        &["kind=\"object_create\""],
    );
    assert!(creates >= 1.0, "{after}");
    let timed = sample(
        &after,
        "tessera_request_seconds_count",
        &["kind=\"object_sync\""],
    );
    assert!(timed >= 1.0, "{after}");
    assert!(
        after.contains("tessera_request_seconds_bucket{kind=\"object_sync\",le=\"0.001\"}"),
        "{after}"
    );
    // The put's capability was verified once per connection, then found in the cache.
    assert!(sample(&after, "tessera_capability_cache_total", &[]) >= 1.0);

    // A read counts its direction too.
    let back = cluster.path().join("back");
    ok(&cluster, &["get", "/five", back.to_str().unwrap()]);
    let read = scrape(&address);
    let wanted = sample(
        &read,
        "tessera_storage_bytes_wanted_total",
        &["direction=\"read\""],
    );
    assert!(wanted >= length as f64, "read wanted {wanted}:\n{read}");
    assert_eq!(std::fs::read(&back).unwrap(), bytes(3, length));
}

#[test]
fn ls_stat_and_df_print_json() {
    // The object counts are the files': no objects made ahead.
    let cluster = Cluster::start_with(2, &["--precreate", "0"]);
    let length = 3 << 20;
    let local = cluster.path().join("input");
    std::fs::write(&local, bytes(5, length)).unwrap();
    ok(&cluster, &["mkdir", "/dir"]);
    ok(
        &cluster,
        &["put", local.to_str().unwrap(), "/data", "--mode", "640"],
    );

    let stat = json(&cluster, &["stat", "/data", "--json"]);
    assert_eq!(stat["path"], "/data");
    assert_eq!(stat["kind"], "file");
    assert_eq!(stat["size_bytes"], length);
    assert_eq!(stat["mode"], 0o640);
    assert_eq!(stat["mode_octal"], "0640");
    assert_eq!(stat["nlink"], 1);
    let mtime = stat["mtime"].as_str().expect("mtime is a string");
    let mtime_ns = stat["mtime_ns"].as_u64().expect("mtime_ns is a number");
    assert!(mtime.ends_with('Z') && mtime.contains('T'), "{mtime}");
    assert!(
        mtime.ends_with(&format!(".{:09}Z", mtime_ns % 1_000_000_000)),
        "{mtime} vs {mtime_ns}"
    );
    assert!(stat["layout"].as_str().unwrap().contains("stripe"));

    let listing = json(&cluster, &["ls", "/", "--json"]);
    let entries = listing.as_array().expect("ls --json is an array");
    let names: Vec<&str> = entries
        .iter()
        .map(|entry| entry["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{listing}");
    assert!(
        names.contains(&"data") && names.contains(&"dir"),
        "{names:?}"
    );
    for entry in entries {
        if entry["name"] == "data" {
            assert_eq!(entry["size_bytes"], length);
            assert_eq!(entry["path"], "/data");
            assert_eq!(entry["handle"], stat["handle"]);
        } else {
            assert_eq!(entry["kind"], "directory");
            assert!(entry["layout"].is_null());
        }
    }

    let df = json(&cluster, &["df", "--json"]);
    let iods = df["iods"].as_array().expect("df --json has iods");
    assert_eq!(iods.len(), 2, "{df}");
    let mut object_bytes = 0;
    for (index, iod) in iods.iter().enumerate() {
        assert_eq!(iod["index"], index);
        assert!(iod["error"].is_null(), "{iod}");
        let total = iod["total_bytes"].as_u64().unwrap();
        let used = iod["used_bytes"].as_u64().unwrap();
        assert!(total > 0 && used <= total, "{iod}");
        assert!(iod["available_bytes"].as_u64().unwrap() <= total);
        assert_eq!(iod["objects"], 1, "one object of /data per iod: {iod}");
        object_bytes += iod["object_bytes"].as_u64().unwrap();
    }
    // The objects hold the file's bytes, split over the two iods.
    assert_eq!(object_bytes, length as u64, "{df}");
    assert_eq!(df["total"]["object_bytes"], length);
    assert_eq!(df["total"]["objects"], 2);

    // The human forms.
    let stat = ok(&cluster, &["stat", "/data"]);
    assert!(stat.contains("size:    3.0 MiB (3145728 bytes)"), "{stat}");
    let table = ok(&cluster, &["df"]);
    assert!(
        table.lines().any(|line| line.starts_with("total")),
        "{table}"
    );
    assert!(table.contains("3.0 MiB"), "{table}");
}

/// A port P with P, P+1, .. P+count-1 free on loopback right now.
fn free_ports(count: u16) -> u16 {
    for _ in 0..50 {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = probe.local_addr().unwrap().port();
        drop(probe);
        if base.checked_add(count).is_some()
            && (0..count)
                .all(|offset| std::net::TcpListener::bind(("127.0.0.1", base + offset)).is_ok())
        {
            return base;
        }
    }
    panic!("no {count} consecutive free ports on loopback");
}

#[test]
fn up_gives_every_server_a_metrics_port_and_status_prints_json() {
    let dir = tempfile::tempdir().unwrap();
    let base = free_ports(3);
    let output = tessera(&[
        "up",
        "--servers",
        "2",
        "--dir",
        dir.path().to_str().unwrap(),
        "--metrics-base-port",
        &base.to_string(),
        "--precreate",
        "0",
    ]);
    let cluster = Cluster { dir };
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        metrics_address(&cluster, "mds"),
        format!("127.0.0.1:{base}")
    );
    for index in 0..2u16 {
        assert_eq!(
            metrics_address(&cluster, &format!("iod-{index}")),
            format!("127.0.0.1:{}", base + 1 + index)
        );
    }
    let local = cluster.path().join("input");
    std::fs::write(&local, bytes(9, 1 << 20)).unwrap();
    ok(&cluster, &["put", local.to_str().unwrap(), "/m"]);
    let mds = scrape(&format!("127.0.0.1:{base}"));
    assert!(
        sample(&mds, "tessera_requests_total", &["kind=\"create\""]) >= 1.0,
        "{mds}"
    );
    assert!(
        sample(&mds, "tessera_requests_total", &["kind=\"rename\""]) >= 1.0,
        "{mds}"
    );
    // put looks its target up first and finds nothing: an error reply, counted by code.
    assert!(
        sample(
            &mds,
            "tessera_errors_total",
            &["kind=\"lookup\"", "code=\"not found\""]
        ) >= 1.0,
        "{mds}"
    );
    assert!(mds.contains("tessera_mds_store_state 0"), "{mds}");
    assert!(
        mds.contains("# HELP tessera_mds_store_state The metadata store's state"),
        "{mds}"
    );

    let status = json(&cluster, &["status", "--servers", "--json"]);
    let servers = status["servers"].as_array().expect("servers");
    assert_eq!(servers.len(), 3, "{status}");
    assert_eq!(servers[0]["role"], "mds");
    assert_eq!(servers[0]["objects"], 2, "the root and one file: {status}");
    assert_eq!(servers[0]["pid"], cluster.pid("mds"));
    for (position, server) in servers.iter().enumerate() {
        assert_eq!(server["state"], "up", "{server}");
        assert_eq!(server["store_state"], 0);
        assert!(server["answer_seconds"].as_f64().unwrap() > 0.0);
        if position > 0 {
            assert_eq!(server["role"], "iod");
            assert_eq!(server["index"], position - 1);
        }
    }
    let time = status["time"].as_str().unwrap();
    assert!(time.ends_with('Z') && time.len() == 30, "{time}");
    let storage = status["storage"]
        .as_array()
        .expect("storage with --servers");
    let written: u64 = storage
        .iter()
        .map(|iod| iod["writes"]["bytes_wanted"].as_u64().unwrap())
        .sum();
    assert_eq!(written, 1 << 20, "{status}");
    // Not serving unified: the cache counters are there, all zeros.
    for iod in storage {
        assert_eq!(iod["cache"]["budget_bytes"], 0, "{iod}");
        assert_eq!(iod["cache"]["hits"], 0, "{iod}");
    }
    let iod_metrics = scrape(&format!("127.0.0.1:{}", base + 1));
    assert!(
        sample(&iod_metrics, "tessera_requests_total", &["kind=\"ping\""]) >= 1.0,
        "status pinged iod 0: {iod_metrics}"
    );
    let table = ok(&cluster, &["status", "--servers"]);
    assert!(
        table.contains("answered") && table.contains("KiB"),
        "{table}"
    );
}
