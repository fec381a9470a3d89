//! List I/O over the libfabric backend against real server processes: a cluster started with
//! `tessera up --ofi-provider` (for `tcp;ofi_rxm` and `shm`), a client whose control messages
//! go by TCP and whose data the iods move one-sidedly over the fabric (`fi_readmsg` for
//! writes, `fi_writemsg` for reads), scattered memory to scattered file pieces over three
//! servers, small and pipelined (over 1 MiB a server) requests, every byte read back and
//! checked, and every request counted as one-sided. Then the client's registration cache:
//! repeated calls over the same buffers register nothing new, pack buffers are not kept, a
//! forgotten and remapped buffer is registered anew; and a cluster file naming a fabric the
//! iods do not serve: each connection's probe is refused and the data moves in messages.
//! Last, iods told to register local memory as `FI_MR_LOCAL` providers need
//! (`--ofi-force-local-mr`): reads from an all-Ready unified cache leave by RMA from its
//! registered Ready units, and with a Ready region too small they leave from registered
//! request buffers, every byte checked and counted.

#![cfg(feature = "ofi")]

mod common;

use std::io::{IoSlice, IoSliceMut};

use common::{bytes, metrics_address, sample, scrape, tessera, Cluster};
use tessera_client::{ClusterConfig, CreateOptions, Mechanism, OpenMode, Piece, TransferPolicy};

/// The providers `make test` covers.
const PROVIDERS: [&str; 2] = ["tcp;ofi_rxm", "shm"];
/// I/O servers of each cluster.
const SERVERS: u16 = 3;

fn cluster_over(provider: &str) -> Cluster {
    cluster_serving(provider, &[])
}

/// A cluster over `provider` whose iods get `serve` flags (`--serve unified`, …) too.
fn cluster_serving(provider: &str, serve: &[&str]) -> Cluster {
    let dir = tempfile::tempdir().expect("temporary directory");
    let cluster = Cluster { dir };
    let servers = SERVERS.to_string();
    let mut args = vec![
        "up",
        "--servers",
        &servers,
        "--dir",
        cluster.path().to_str().unwrap(),
        "--ofi-provider",
        provider,
    ];
    args.extend_from_slice(serve);
    let output = tessera(&args);
    assert!(
        output.status.success(),
        "{provider}: tessera up failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let config = ClusterConfig::load(&cluster.file()).expect("cluster file");
    assert_eq!(
        config.ofi.as_ref().map(|entry| entry.provider.as_str()),
        Some(provider),
        "the cluster file names the fabric"
    );
    cluster
}

/// Writes `pieces` from `stride`-spaced slices of `length` bytes, reads them back into other
/// scattered memory, and checks every byte and that every request went over the fabric.
fn round_trip(
    provider: &str,
    file: &mut tessera_client::File,
    pieces: &[Piece],
    (length, stride): (usize, usize),
    seed: u64,
) {
    let count = pieces.len();
    let total: u64 = pieces.iter().map(|piece| piece.length).sum();
    assert_eq!(total, (count * length) as u64);
    let policies = [
        TransferPolicy::Auto,
        TransferPolicy::Force(Mechanism::Pack),
        TransferPolicy::Force(Mechanism::Gather),
        TransferPolicy::Force(Mechanism::Multiple),
    ];
    for (round, policy) in policies.into_iter().enumerate() {
        let source = bytes(seed + round as u64, count * stride);
        let memory: Vec<IoSlice<'_>> = source
            .chunks(stride)
            .map(|chunk| IoSlice::new(&chunk[..length]))
            .collect();
        file.set_transfer_policy(policy);
        let report = file.write_list(&memory, pieces).unwrap();
        assert_eq!(report.bytes, total, "{provider} {policy:?}");
        assert!(
            report.requests >= u64::from(SERVERS),
            "{provider}: {report:?}"
        );
        assert_eq!(
            report.one_sided, report.requests,
            "{provider} {policy:?}: every write over the fabric: {report:?}"
        );
        assert_eq!(
            report.messages_sent, report.requests,
            "{provider} {policy:?}"
        );

        // Read back through the next policy into memory scattered differently.
        let back_policy = policies[(round + 1) % policies.len()];
        file.set_transfer_policy(back_policy);
        let back_stride = stride + 64;
        let mut back = vec![0u8; count * back_stride];
        let mut slices: Vec<IoSliceMut<'_>> = back
            .chunks_mut(back_stride)
            .map(|chunk| IoSliceMut::new(&mut chunk[..length]))
            .collect();
        let report = file.read_list(&mut slices, pieces).unwrap();
        assert_eq!(report.bytes, total, "{provider} {back_policy:?}");
        assert_eq!(
            report.one_sided, report.requests,
            "{provider} {back_policy:?}: every read over the fabric: {report:?}"
        );
        for index in 0..count {
            let wrote = &source[index * stride..index * stride + length];
            let read = &back[index * back_stride..index * back_stride + length];
            assert!(
                wrote == read,
                "{provider} {policy:?}/{back_policy:?}: piece {index} differs"
            );
            // The gaps between slices stay untouched.
            assert!(
                back[index * back_stride + length..(index + 1) * back_stride]
                    .iter()
                    .all(|&byte| byte == 0),
                "{provider}: gap after piece {index} written"
            );
        }
    }
}

#[test]
fn list_io_round_trips_over_tcp_rxm() {
    list_io_round_trips(PROVIDERS[0]);
}

#[test]
fn list_io_round_trips_over_shm() {
    list_io_round_trips(PROVIDERS[1]);
}

#[test]
fn list_io_round_trips_through_a_unified_cache_over_tcp_rxm() {
    list_io_round_trips_serving(PROVIDERS[0], &UNIFIED);
}

#[test]
fn list_io_round_trips_through_a_unified_cache_over_shm() {
    list_io_round_trips_serving(PROVIDERS[1], &UNIFIED);
}

/// Iods serving through a 64 MiB unified cache: their reads go by RMA straight from it.
const UNIFIED: [&str; 4] = ["--serve", "unified", "--cache-bytes", "64m"];

fn list_io_round_trips(provider: &str) {
    list_io_round_trips_serving(provider, &[]);
}

fn list_io_round_trips_serving(provider: &str, serve: &[&str]) {
    let cluster = cluster_serving(provider, serve);
    // Control messages by TCP: only the fabric can make a transfer one-sided.
    let client = cluster.tcp_client();
    let mut file = client
        .create(
            "/ofi",
            &CreateOptions {
                stripe_unit_bytes: 64 << 10,
                ..CreateOptions::default()
            },
        )
        .unwrap();

    // 600 scattered pieces of 3000 bytes (1.8 MB) over three servers.
    let small: Vec<Piece> = (0..600u64)
        .map(|i| Piece::new(i * 5000 + (i % 7) * 13, 3000))
        .collect();
    round_trip(provider, &mut file, &small, (3000, 4096), 1);

    // 12 pieces of 600 KB (7.2 MB, over 2 MiB a server): pipelined in 1 MiB units.
    let large: Vec<Piece> = (0..12u64)
        .map(|i| Piece::new(4_000_000 + i * 700_000, 600_000))
        .collect();
    round_trip(provider, &mut file, &large, (600_000, 600_128), 100);

    // The first file's bytes were not disturbed by the second's.
    let expected = bytes(1 + 3, 600 * 4096);
    let mut back = vec![0u8; 600 * 3000];
    let mut slices: Vec<IoSliceMut<'_>> = back.chunks_mut(3000).map(IoSliceMut::new).collect();
    file.set_transfer_policy(TransferPolicy::Auto);
    let report = file.read_list(&mut slices, &small).unwrap();
    assert_eq!(report.one_sided, report.requests, "{provider}: {report:?}");
    if !serve.is_empty() {
        // Every byte came out of the iods' caches: no storage call at all.
        assert_eq!(report.storage_pieces, 0, "{provider} {serve:?}: {report:?}");
    }
    for index in 0..600 {
        assert!(
            back[index * 3000..(index + 1) * 3000] == expected[index * 4096..index * 4096 + 3000],
            "{provider}: piece {index} after the large round"
        );
    }
    for index in 0..SERVERS {
        let log = cluster.log(&format!("iod-{index}"));
        assert!(
            log.contains(&format!("one-sided transfers over {provider}")),
            "{provider}: iod {index} log: {log}"
        );
    }
    drop(file);
    drop(client);
    cluster.down();
}

/// One write and one read of `pieces` from and into `memory` (pieces of `length` bytes every
/// `stride` bytes of it) by `policy`; returns the read-back bytes of each piece compared with
/// what was written, and the requests the two calls made.
fn write_then_read(
    file: &mut tessera_client::File,
    source: &[u8],
    back: &mut [u8],
    pieces: &[Piece],
    (length, stride): (usize, usize),
    policy: TransferPolicy,
) -> u64 {
    file.set_transfer_policy(policy);
    let memory: Vec<IoSlice<'_>> = source
        .chunks(stride)
        .take(pieces.len())
        .map(|chunk| IoSlice::new(&chunk[..length]))
        .collect();
    let wrote = file.write_list(&memory, pieces).unwrap();
    assert_eq!(wrote.one_sided, wrote.requests, "{policy:?}: {wrote:?}");
    back.fill(0);
    let mut slices: Vec<IoSliceMut<'_>> = back
        .chunks_mut(stride)
        .take(pieces.len())
        .map(|chunk| IoSliceMut::new(&mut chunk[..length]))
        .collect();
    let read = file.read_list(&mut slices, pieces).unwrap();
    assert_eq!(read.one_sided, read.requests, "{policy:?}: {read:?}");
    for index in 0..pieces.len() {
        let at = index * stride;
        assert!(
            source[at..at + length] == back[at..at + length],
            "{policy:?}: piece {index} differs"
        );
    }
    wrote.requests + read.requests
}

#[test]
fn registrations_are_cached_across_calls_over_tcp_rxm() {
    registrations_are_cached(PROVIDERS[0]);
}

#[test]
fn registrations_are_cached_across_calls_over_shm() {
    registrations_are_cached(PROVIDERS[1]);
}

/// Repeated list round trips over the same buffers: the first registers (OGR: a handful of
/// registrations for hundreds of segments), every later one finds its registrations cached;
/// pack buffers are lent transiently and leave nothing cached behind.
fn registrations_are_cached(provider: &str) {
    let cluster = cluster_over(provider);
    let client = cluster.tcp_client();
    let mut file = client.create("/cached", &CreateOptions::default()).unwrap();
    let (length, stride) = (3000, 4096);
    let pieces: Vec<Piece> = (0..400u64)
        .map(|i| Piece::new(i * 5000, length as u64))
        .collect();
    let source = bytes(7, pieces.len() * stride);
    let mut back = vec![0u8; pieces.len() * stride];
    let gather = TransferPolicy::Force(Mechanism::Gather);

    let requests_first = write_then_read(
        &mut file,
        &source,
        &mut back,
        &pieces,
        (length, stride),
        gather,
    );
    let first = client.fabric_stats().expect("a fabric");
    // One probe per server connection, then the requests.
    assert_eq!(
        first.lendings,
        requests_first + u64::from(SERVERS),
        "{provider}: {first:?}"
    );
    assert!(
        first.registrations < first.segments / 10,
        "{provider}: OGR groups the segments: {first:?}"
    );

    let mut requests = requests_first;
    for _ in 0..5 {
        requests += write_then_read(
            &mut file,
            &source,
            &mut back,
            &pieces,
            (length, stride),
            gather,
        );
    }
    let later = client.fabric_stats().expect("a fabric");
    assert_eq!(
        later.registrations, first.registrations,
        "{provider}: the same buffers again register nothing: {first:?} then {later:?}"
    );
    assert!(
        later.registrations < requests,
        "{provider}: fewer registrations ({}) than requests ({requests})",
        later.registrations
    );
    assert!(
        later.cache_hits >= first.cache_hits + 5 * 2 * pieces.len() as u64,
        "{provider}: every later segment is a hit: {later:?}"
    );
    assert_eq!(later.cache_misses, first.cache_misses, "{provider}");

    // Packed requests lend a buffer of the connection's own, freed after the reply: its
    // registration is dropped with it, so the cache does not grow.
    let cached = later.cached_entries;
    for _ in 0..3 {
        write_then_read(
            &mut file,
            &source,
            &mut back,
            &pieces,
            (length, stride),
            TransferPolicy::Force(Mechanism::Pack),
        );
    }
    let packed = client.fabric_stats().expect("a fabric");
    assert!(
        packed.invalidated >= later.invalidated + 3 * 2 * u64::from(SERVERS),
        "{provider}: one pack buffer invalidated per request: {later:?} then {packed:?}"
    );
    assert!(
        packed.cached_entries <= cached,
        "{provider}: pack buffers stay out of the cache: {later:?} then {packed:?}"
    );
    drop(file);
    drop(client);
    cluster.down();
}

/// A new anonymous mapping of `bytes`, anywhere, or, when `old` is not null, in place of the
/// mapping of `bytes` at `old` (`MAP_FIXED`: the old pages are unmapped and new zero pages
/// mapped at the same address in one call, so no other thread's mapping can land in between).
fn map_at(old: *mut libc::c_void, bytes: usize) -> *mut u8 {
    let flags =
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | if old.is_null() { 0 } else { libc::MAP_FIXED };
    let hint = old;
    // SAFETY: a new private anonymous mapping; with MAP_FIXED it replaces only the test's own
    // mapping at `old`, which no reference outlives.
    let address = unsafe {
        libc::mmap(
            hint,
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    assert_ne!(address, libc::MAP_FAILED, "mmap of {bytes} bytes");
    if !hint.is_null() {
        assert_eq!(address, hint, "the new mapping lies where the old one was");
    }
    address.cast()
}

#[test]
fn memory_unmapped_and_mapped_again_moves_the_new_data_over_tcp_rxm() {
    memory_remapped(PROVIDERS[0], Forget::Explicitly);
    memory_remapped(PROVIDERS[0], Forget::ByTheMonitor);
}

#[test]
fn memory_unmapped_and_mapped_again_moves_the_new_data_over_shm() {
    memory_remapped(PROVIDERS[1], Forget::Explicitly);
    memory_remapped(PROVIDERS[1], Forget::ByTheMonitor);
}

/// How a test's stale registrations go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Forget {
    /// `Client::forget_memory` before the pages go.
    Explicitly,
    /// No call: the registry's unmap monitor sees the pages replaced.
    ByTheMonitor,
}

/// A buffer written and read (so its registrations are cached) has its pages unmapped and new
/// ones mapped at the same address with other data — forgotten first, or not: the next calls
/// register it anew (the stale registrations are gone) and move the new bytes.
fn memory_remapped(provider: &str, forget: Forget) {
    let cluster = cluster_over(provider);
    let client = cluster.tcp_client();
    let mut file = client
        .create("/remapped", &CreateOptions::default())
        .unwrap();
    let (length, stride) = (3000, 4096);
    let pieces: Vec<Piece> = (0..200u64)
        .map(|i| Piece::new(i * 7000, length as u64))
        .collect();
    let bytes_mapped = pieces.len() * stride;
    let mut back = vec![0u8; bytes_mapped];
    let gather = TransferPolicy::Force(Mechanism::Gather);

    // The fabric (and its registry) may outlive one client: count from here.
    let start = client.fabric_stats().expect("a fabric");
    let mut remaps = 0;
    let mut address: *mut u8 = std::ptr::null_mut();
    for round in 0..3u64 {
        address = map_at(address.cast(), bytes_mapped);
        // SAFETY: the mapping is `bytes_mapped` bytes, readable and writable, ours alone.
        let memory = unsafe { std::slice::from_raw_parts_mut(address, bytes_mapped) };
        memory.copy_from_slice(&bytes(100 + round, bytes_mapped));
        let before = client.fabric_stats().expect("a fabric");
        write_then_read(
            &mut file,
            memory,
            &mut back,
            &pieces,
            (length, stride),
            gather,
        );
        let after = client.fabric_stats().expect("a fabric");
        if round > 0 {
            assert!(
                after.registrations > before.registrations,
                "{provider} round {round}: the new mapping is registered anew: {before:?} \
                 then {after:?}"
            );
        }
        if forget == Forget::Explicitly {
            // Forget before the pages go: the next round maps new pages at the same address.
            let forgotten = client.forget_memory(memory).unwrap();
            assert!(forgotten >= 1, "{provider} round {round}: {forgotten}");
        }
        remaps += 1;
    }
    // SAFETY: the mapping made above; nothing refers to it past this point.
    let unmapped = unsafe { libc::munmap(address.cast(), bytes_mapped) };
    assert_eq!(unmapped, 0, "munmap");
    assert_eq!(remaps, 3);
    let stats = client.fabric_stats().expect("a fabric");
    match forget {
        Forget::Explicitly => assert!(
            stats.invalidated >= start.invalidated + 3,
            "{provider}: {start:?} then {stats:?}"
        ),
        // The two replacements were seen (the final munmap is seen by the next call, if any).
        Forget::ByTheMonitor => {
            if !stats.watching {
                common::not_run::ignored_at_run_time(&format!(
                    "{provider}: the client's registry has no unmap monitor to test (this \
                     process gets no full userfaultfd: see its log)"
                ));
                return;
            }
            // With no call, only the monitor can have dropped the stale registrations that
            // each round's "registered anew" above needed.
            assert!(
                stats.unmapped >= start.unmapped + 2,
                "{provider}: {start:?} then {stats:?}"
            );
        }
    }
    drop(file);
    drop(client);
    cluster.down();
}

/// A writer the test's log lines go into.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// A cluster whose iods serve no fabric, with a cluster file that names one anyway: each
/// connection's probe is refused, logged once, and the data moves in messages, correctly.
#[test]
fn a_refused_fabric_probe_falls_back_to_messages() {
    let cluster = common::Cluster::start(SERVERS);
    let mut text = std::fs::read_to_string(cluster.file()).unwrap();
    text.push_str("\n[ofi]\nprovider = \"tcp;ofi_rxm\"\n");
    std::fs::write(cluster.file(), text).unwrap();

    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let client = cluster.tcp_client();
        let file = client
            .create("/no-fabric", &CreateOptions::default())
            .unwrap();
        let (length, stride) = (3000, 4096);
        let pieces: Vec<Piece> = (0..300u64)
            .map(|i| Piece::new(i * 5000, length as u64))
            .collect();
        for round in 0..2u64 {
            let source = bytes(40 + round, pieces.len() * stride);
            let memory: Vec<IoSlice<'_>> = source
                .chunks(stride)
                .map(|chunk| IoSlice::new(&chunk[..length]))
                .collect();
            let wrote = file.write_list(&memory, &pieces).unwrap();
            assert_eq!(wrote.one_sided, 0, "{wrote:?}");
            assert!(wrote.requests >= u64::from(SERVERS), "{wrote:?}");
            let mut back = vec![0u8; pieces.len() * length];
            let mut slices: Vec<IoSliceMut<'_>> =
                back.chunks_mut(length).map(IoSliceMut::new).collect();
            let read = file.read_list(&mut slices, &pieces).unwrap();
            assert_eq!(read.one_sided, 0, "{read:?}");
            for index in 0..pieces.len() {
                assert!(
                    back[index * length..(index + 1) * length]
                        == source[index * stride..index * stride + length],
                    "round {round}: piece {index} differs"
                );
            }
        }
        let stats = client.fabric_stats().expect("the client opened the fabric");
        assert_eq!(
            stats.lendings,
            u64::from(SERVERS),
            "only the probes: {stats:?}"
        );
        assert_eq!(
            stats.cached_entries, 0,
            "the probe tokens are not kept: {stats:?}"
        );
    });
    let log = captured.text();
    assert_eq!(
        log.matches("cannot reach this process over").count(),
        usize::from(SERVERS),
        "one line per connection: {log}"
    );
    cluster.down();
}

#[test]
fn reads_leave_from_registered_ready_units_over_tcp_rxm() {
    reads_from_registered_ready_units(PROVIDERS[0]);
}

#[test]
fn reads_leave_from_registered_ready_units_over_shm() {
    reads_from_registered_ready_units(PROVIDERS[1]);
}

/// The sum over the cluster's iods of `tessera_fabric_pushed_bytes_total{memory}`.
fn pushed_bytes(cluster: &Cluster, memory: &str) -> f64 {
    (0..SERVERS)
        .map(|index| {
            let body = scrape(&metrics_address(cluster, &format!("iod-{index}")));
            sample(
                &body,
                "tessera_fabric_pushed_bytes_total",
                &[&format!("memory=\"{memory}\"")],
            )
        })
        .sum()
}

/// Restarts the iods serving through a 16 MiB unified cache of which `ready` is Ready, as if
/// `provider` needed local registration; checks each logged the Ready region's registration.
fn restart_registered(cluster: &Cluster, provider: &str, ready: &str) {
    cluster.restart_iods_with(&[
        "--ofi-provider",
        provider,
        "--ofi-force-local-mr",
        "--serve",
        "unified",
        "--cache-bytes",
        "16m",
        "--cache-ready-bytes",
        ready,
        "--metrics",
        "127.0.0.1:0",
    ]);
    for index in 0..SERVERS {
        let log = cluster.log(&format!("iod-{index}"));
        let registered = format!("registered by \"pin+ofi:{provider}\"");
        // What the last start logged (each logs its cost model first).
        let last = log
            .rsplit(&format!("iod {index}: cost model"))
            .next()
            .unwrap_or_default();
        assert!(
            last.contains(&registered) && last.contains("--ofi-force-local-mr"),
            "{provider}: iod {index} logged no Ready registration ({registered}):\n{log}"
        );
    }
}

/// Reads `pieces` into scattered memory by each transfer policy, checking every byte against
/// `expected` (the pieces' bytes back to back); returns the bytes read.
fn read_by_every_policy(
    provider: &str,
    file: &mut tessera_client::File,
    pieces: &[Piece],
    expected: &[u8],
) -> u64 {
    let length = usize::try_from(pieces[0].length).unwrap();
    let stride = length + 64;
    let mut read = 0;
    for policy in [
        TransferPolicy::Auto,
        TransferPolicy::Force(Mechanism::Pack),
        TransferPolicy::Force(Mechanism::Gather),
        TransferPolicy::Force(Mechanism::Multiple),
    ] {
        file.set_transfer_policy(policy);
        let mut back = vec![0u8; pieces.len() * stride];
        let mut slices: Vec<IoSliceMut<'_>> = back
            .chunks_mut(stride)
            .map(|chunk| IoSliceMut::new(&mut chunk[..length]))
            .collect();
        let report = file.read_list(&mut slices, pieces).unwrap();
        assert_eq!(report.one_sided, report.requests, "{provider} {policy:?}");
        for (index, wanted) in expected.chunks(length).enumerate() {
            assert!(
                &back[index * stride..index * stride + length] == wanted,
                "{provider} {policy:?}: piece {index} differs: {:?} read, {:?} written",
                &back[index * stride..index * stride + 8],
                &wanted[..8]
            );
        }
        read += report.bytes;
    }
    read
}

/// With local registration forced: the Ready region is registered with the fabric at start
/// (logged, and in the cache's registrar names), and while every unit is Ready each read is
/// written by RMA from the Ready units alone; with a Ready region too small for the data, reads
/// leave from registered request buffers instead. Every byte is checked.
fn reads_from_registered_ready_units(provider: &str) {
    let cluster = cluster_over(provider);
    restart_registered(&cluster, provider, "16m");
    let client = cluster.tcp_client();
    let mut file = client
        .create(
            "/ready",
            &CreateOptions {
                stripe_unit_bytes: 64 << 10,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    // 600 scattered pieces of 3000 bytes, and 6 of 600 KB (1.2 MB a server: pipelined).
    let small: Vec<Piece> = (0..600u64)
        .map(|i| Piece::new(i * 5000 + (i % 7) * 13, 3000))
        .collect();
    let large: Vec<Piece> = (0..6u64)
        .map(|i| Piece::new(4_000_000 + i * 700_000, 600_000))
        .collect();
    let mut written = Vec::new();
    for (seed, pieces) in [(11, &small), (12, &large)] {
        let total = pieces.iter().map(|piece| piece.length).sum::<u64>();
        let data = bytes(seed, usize::try_from(total).unwrap());
        file.set_transfer_policy(TransferPolicy::Auto);
        let report = file
            .write_list(&[IoSlice::new(&data)], pieces.as_slice())
            .unwrap();
        assert_eq!(report.bytes, total, "{provider}");
        written.push(data);
    }

    let read = read_by_every_policy(provider, &mut file, &small, &written[0])
        + read_by_every_policy(provider, &mut file, &large, &written[1]);
    let (ready, raw, buffer) = (
        pushed_bytes(&cluster, "ready"),
        pushed_bytes(&cluster, "raw"),
        pushed_bytes(&cluster, "buffer"),
    );
    assert_eq!(
        (ready, raw, buffer),
        (read as f64, 0.0, 0.0),
        "{provider}: every byte read ({read}) left from registered Ready units"
    );

    // A Ready region of one 64 KiB slot: units are Raw, so reads go through the pipelined
    // buffers, registered per call. (The restart wrote the cache back; the new iods know no
    // open object, so the file is opened again.)
    drop(file);
    drop(client);
    restart_registered(&cluster, provider, "64k");
    let client = cluster.tcp_client();
    let mut file = client.open("/ready", OpenMode::ReadOnly).unwrap();
    let read = read_by_every_policy(provider, &mut file, &small, &written[0])
        + read_by_every_policy(provider, &mut file, &large, &written[1]);
    let (ready, raw, buffer) = (
        pushed_bytes(&cluster, "ready"),
        pushed_bytes(&cluster, "raw"),
        pushed_bytes(&cluster, "buffer"),
    );
    assert_eq!(
        (ready + raw, buffer),
        (0.0, read as f64),
        "{provider}: with Raw units every byte read ({read}) left from request buffers"
    );
    drop(file);
    drop(client);
    cluster.down();
}
