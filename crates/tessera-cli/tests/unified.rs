//! The unified server cache (`tessera iod --serve unified`, issue 19) against real server
//! processes, every check byte for byte against a plain model of the file:
//! - an acknowledged `sync` survives `kill -9` of every iod (the object files hold the bytes,
//!   and restarted iods serve them);
//! - coherence of the cache with truncate, remove, collectives, views, datatype I/O, the
//!   same-host one-sided path and shared arenas, each written one way and read the other;
//! - several tcp and same-host clients writing and reading interleaved stripes of the same
//!   cache units never see a torn stripe, and the file ends equal to the model;
//! - a cache far smaller than the data (evictions) still returns every byte.

mod common;

use std::io::{IoSlice, IoSliceMut};
use std::time::{Duration, Instant};

use common::{bytes, metrics_address, sample, scrape, Cluster};
use tessera_client::{
    Arena, Client, CollectiveBuffering, CollectiveMethod, CollectiveOptions, Communicator,
    CreateOptions, Datatype, File, Mechanism, OpenMode, Piece, ThreadCommunicator, TransferPolicy,
    ViewedFile,
};

/// The cache budget of most tests (64 MiB).
const BUDGET: usize = 64 << 20;
/// The budget of the eviction test (1 MiB: 16 units of 64 KiB).
const SMALL_BUDGET: usize = 1 << 20;

/// The longest a test waits for a metric to reach its value: far above the write-back's
/// tick (200 ms) and age (2 s), so a loaded machine cannot fail a test by timing; the waits
/// end as soon as the value is there.
const METRIC_WAIT: Duration = Duration::from_secs(20);

/// A cluster of `servers` iods restarted to serve through a unified cache of `budget` bytes,
/// half of it Ready (pinned) memory, so units live both in Ready slots and on the heap.
fn unified(servers: u16, budget: usize) -> Cluster {
    let cluster = Cluster::start(servers);
    let ready = (budget / 2 / (64 << 10) * (64 << 10)).to_string();
    let budget = budget.to_string();
    cluster.restart_iods_with(&[
        "--serve",
        "unified",
        "--cache-bytes",
        &budget,
        "--cache-ready-bytes",
        &ready,
        "--metrics",
        "127.0.0.1:0",
    ]);
    wait_for_unified(&cluster, servers);
    cluster
}

/// Waits until every iod logged that it serves through the unified cache.
fn wait_for_unified(cluster: &Cluster, servers: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    for index in 0..servers {
        let name = format!("iod-{index}");
        while !cluster.log(&name).contains("serving unified") {
            assert!(
                Instant::now() < deadline,
                "{name} does not serve unified:\n{}",
                cluster.log(&name)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The sum over iods `0..servers` of the metric `name` (their latest `--metrics`), once every
/// one of them exports it (the cache's metrics are exported every write-back tick).
fn metric(cluster: &Cluster, servers: u16, name: &str) -> Option<f64> {
    let mut total = 0.0;
    for index in 0..servers {
        let body = scrape(&metrics_address(cluster, &format!("iod-{index}")));
        let exported = body.lines().any(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' '))
        });
        if !exported {
            return None;
        }
        total += sample(&body, name, &[]);
    }
    Some(total)
}

/// Waits (up to `within`) until every iod exports `name` and `done` holds for their sum;
/// returns the last sum (`NaN` while not exported) and how long it took.
fn wait_for_metric(
    cluster: &Cluster,
    servers: u16,
    name: &str,
    within: Duration,
    done: impl Fn(f64) -> bool,
) -> (f64, Duration) {
    let started = Instant::now();
    loop {
        let value = metric(cluster, servers, name).unwrap_or(f64::NAN);
        if done(value) || started.elapsed() > within {
            return (value, started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn create(client: &Client, path: &str, stripe_unit_bytes: u64) -> File {
    client
        .create(
            path,
            &CreateOptions {
                stripe_unit_bytes,
                ..CreateOptions::default()
            },
        )
        .unwrap()
}

fn open(client: &Client, path: &str) -> File {
    client.open(path, OpenMode::ReadWrite).unwrap()
}

/// Applies a write of `data` at `offset` to the model.
fn model_write(model: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let start = usize::try_from(offset).unwrap();
    if model.len() < start + data.len() {
        model.resize(start + data.len(), 0);
    }
    model[start..start + data.len()].copy_from_slice(data);
}

/// Applies a list write (`data` back to back over `pieces`, later pieces win) to the model.
fn model_write_list(model: &mut Vec<u8>, pieces: &[Piece], data: &[u8]) {
    let mut cursor = 0;
    for piece in pieces {
        let length = usize::try_from(piece.length).unwrap();
        model_write(model, piece.offset, &data[cursor..cursor + length]);
        cursor += length;
    }
    assert_eq!(cursor, data.len());
}

/// The model's bytes of `pieces`, back to back (zeros past its end).
fn model_read_list(model: &[u8], pieces: &[Piece]) -> Vec<u8> {
    pieces
        .iter()
        .flat_map(|piece| piece.offset..piece.offset + piece.length)
        .map(|at| {
            model
                .get(usize::try_from(at).unwrap())
                .copied()
                .unwrap_or(0)
        })
        .collect()
}

/// Panics naming the first differing byte unless `got == want`.
fn assert_bytes(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(first) = got.iter().zip(want).position(|(a, b)| a != b) {
        let differing = got.iter().zip(want).filter(|(a, b)| a != b).count();
        panic!(
            "{what}: {differing} of {} bytes differ, the first at byte {first} (got {:#04x}, want \
             {:#04x})",
            got.len(),
            got[first],
            want[first]
        );
    }
}

/// Reads `length` bytes from offset 0 (pre-filled with 0xEE, so unread bytes show).
fn read_whole(file: &File, length: usize) -> Vec<u8> {
    let mut buffer = vec![0xEE; length];
    let report = file.read_at(0, &mut buffer).unwrap();
    assert_eq!(report.bytes, length as u64, "{}: bytes read", file.path());
    buffer
}

/// Reads `length` bytes through every file in `files` and compares each with `model`
/// (zero-padded), and the size `stat` reports with `size`.
fn check(files: &[&File], model: &[u8], length: usize, size: u64, what: &str) {
    let mut want = model.to_vec();
    want.resize(length, 0);
    for (index, file) in files.iter().enumerate() {
        let got = read_whole(file, length);
        assert_bytes(&got, &want, &format!("{what} (reader {index})"));
        assert_eq!(
            file.stat().unwrap().size,
            size,
            "{what} (reader {index}): size"
        );
    }
}

/// Every piece of the layout of `file` that `pieces` map to: (position, local offset,
/// logical offset, length).
fn local_runs(file: &File, pieces: &[Piece]) -> Vec<(usize, u64, u64, u64)> {
    pieces
        .iter()
        .flat_map(|piece| file.layout().map(piece.offset, piece.length))
        .map(|segment| {
            (
                segment.server_position,
                segment.local_offset,
                segment.logical_offset,
                segment.length,
            )
        })
        .collect()
}

/// Checks that each iod's object file of `file` holds exactly its share of the bytes
/// `written` (pieces, in any order) as the model has them, and nothing past them.
fn assert_objects_on_disk(
    cluster: &Cluster,
    file: &File,
    written: &[Piece],
    model: &[u8],
    what: &str,
) {
    let servers = file.layout().servers().to_vec();
    let mut shares = vec![Vec::new(); servers.len()];
    for (position, local_offset, logical, length) in local_runs(file, written) {
        let share: &mut Vec<u8> = &mut shares[position];
        let (start, logical) = (
            usize::try_from(local_offset).unwrap(),
            usize::try_from(logical).unwrap(),
        );
        let end = start + usize::try_from(length).unwrap();
        if share.len() < end {
            share.resize(end, 0);
        }
        share[start..end].copy_from_slice(&model[logical..logical + (end - start)]);
    }
    for (position, share) in shares.iter().enumerate() {
        let index = usize::from(servers[position]);
        let on_disk = std::fs::read(cluster.object_file(index, file.handle())).unwrap_or_default();
        assert_bytes(
            &on_disk,
            share,
            &format!("object file of iod-{index} {what}"),
        );
    }
}

/// The 300 scattered 1000-byte pieces and 200 overlapping 900-byte pieces of the
/// durability test.
fn durability_pieces() -> (Vec<Piece>, Vec<Piece>) {
    let first = (0..300u64)
        .map(|i| Piece::new(i * 1700 + (i % 5) * 13, 1000))
        .collect();
    let second = (0..200u64)
        .map(|i| Piece::new(i * 2600 + 500, 900))
        .collect();
    (first, second)
}

#[test]
fn an_acknowledged_sync_survives_kill_9_of_every_iod() {
    let cluster = unified(3, BUDGET);
    let tcp = cluster.tcp_client();
    let local = cluster.client();
    let by_tcp = create(&tcp, "/durable", 4096);
    let by_local = open(&local, "/durable");
    let (first, second) = durability_pieces();
    let mut model = Vec::new();
    let data = bytes(1, 300_000);
    assert_eq!(
        by_tcp
            .write_list(&[IoSlice::new(&data)], &first)
            .unwrap()
            .bytes,
        300_000
    );
    model_write_list(&mut model, &first, &data);
    // Over the first pieces, from a same-host client: in the same cache units.
    let again = bytes(2, 180_000);
    let memory: Vec<IoSlice<'_>> = again.chunks(7000).map(IoSlice::new).collect();
    assert_eq!(
        by_local.write_list(&memory, &second).unwrap().bytes,
        180_000
    );
    model_write_list(&mut model, &second, &again);
    // The sync covers both clients' acknowledged writes; SIGKILL at once, before the
    // write-back's age (2 s) would flush them anyway.
    by_tcp.sync().unwrap();
    for index in 0..3 {
        cluster.kill_iod(index);
    }

    let mut pieces = first.clone();
    pieces.extend(&second);
    assert_objects_on_disk(&cluster, &by_tcp, &pieces, &model, "after sync and kill -9");

    // Restarted iods (unified again) serve the same bytes to fresh clients.
    cluster.restart_iods_with(&["--serve", "unified", "--cache-bytes", &BUDGET.to_string()]);
    let fresh_tcp = cluster.tcp_client();
    let fresh_local = cluster.client();
    let files = [open(&fresh_tcp, "/durable"), open(&fresh_local, "/durable")];
    let length = model.len();
    check(
        &[&files[0], &files[1]],
        &model,
        length + 5000,
        length as u64,
        "after restart",
    );
    let mut listed = vec![0u8; 480_000];
    files[0]
        .read_list(&mut [IoSliceMut::new(&mut listed)], &pieces)
        .unwrap();
    assert_bytes(
        &listed,
        &model_read_list(&model, &pieces),
        "list read after restart",
    );
}

#[test]
fn write_back_reaches_storage_within_its_age_without_sync() {
    let cluster = unified(2, BUDGET);
    let client = cluster.tcp_client();
    let file = create(&client, "/aged", 4096);
    let (first, _) = durability_pieces();
    let data = bytes(11, 300_000);
    let written = Instant::now();
    file.write_list(&[IoSlice::new(&data)], &first).unwrap();
    let mut model = Vec::new();
    model_write_list(&mut model, &first, &data);
    // No sync: the write-back thread writes every dirty byte within its age (2 s, checked
    // every 200 ms); the test checks that the bytes reach storage with no sync at all.
    let (flushed, _) = wait_for_metric(
        &cluster,
        2,
        "tessera_cache_flushed_bytes_total",
        METRIC_WAIT,
        |flushed| flushed >= 300_000.0,
    );
    let age = written.elapsed();
    assert!(
        flushed >= 300_000.0,
        "{flushed} bytes written back {age:?} after the write"
    );
    let dirty = metric(&cluster, 2, "tessera_cache_dirty_bytes");
    assert_eq!(dirty, Some(0.0), "dirty bytes {age:?} after the write");
    for index in 0..2 {
        cluster.kill_iod(index);
    }
    assert_objects_on_disk(
        &cluster,
        &file,
        &first,
        &model,
        "written back by age, then kill -9",
    );
}

#[test]
fn truncate_drops_cached_bytes_past_the_new_size() {
    let cluster = unified(2, BUDGET);
    let (tcp, local) = (cluster.tcp_client(), cluster.client());
    let by_tcp = create(&tcp, "/truncated", 4096);
    let by_local = open(&local, "/truncated");
    let files = [&by_tcp, &by_local];
    let mut model = Vec::new();

    let data = bytes(3, 200_000);
    by_tcp.write_at(0, &data).unwrap();
    model_write(&mut model, 0, &data);
    // Both clients read it: the units are cached (clean) on both iods.
    check(&files, &model, 200_000, 200_000, "written");

    // Shrink: the bytes past the new size read as zeros.
    tcp.truncate("/truncated", 50_001).unwrap();
    model.truncate(50_001);
    check(&files, &model, 200_000, 50_001, "shrunk");

    // Extend: the old bytes between the sizes must not come back from the cache.
    local.truncate("/truncated", 300_000).unwrap();
    model.resize(300_000, 0);
    check(&files, &model, 300_000, 300_000, "extended");

    // Writes after the truncates, from both clients, across the old end.
    let across = bytes(4, 30_000);
    by_tcp.write_at(40_000, &across).unwrap();
    model_write(&mut model, 40_000, &across);
    let tail = bytes(5, 10_000);
    by_local.write_at(250_000, &tail).unwrap();
    model_write(&mut model, 250_000, &tail);
    check(&files, &model, 300_000, 300_000, "written after truncate");

    // A write still dirty in the cache, then a shrink into its middle: the bytes below stay.
    let dirty = bytes(6, 20_000);
    by_local.write_at(100_000, &dirty).unwrap();
    model_write(&mut model, 100_000, &dirty);
    tcp.truncate("/truncated", 110_000).unwrap();
    model.truncate(110_000);
    check(&files, &model, 300_000, 110_000, "dirty, then shrunk");

    // Down to nothing, and one late write far out.
    tcp.truncate("/truncated", 0).unwrap();
    model.clear();
    check(&files, &model, 300_000, 0, "truncated to 0");
    let late = bytes(7, 100);
    by_tcp.write_at(70_000, &late).unwrap();
    model_write(&mut model, 70_000, &late);
    check(
        &files,
        &model,
        300_000,
        70_100,
        "written after truncate to 0",
    );
}

#[test]
fn a_removed_file_leaves_no_stale_bytes_and_no_late_write_back() {
    let cluster = unified(2, BUDGET);
    let (tcp, local) = (cluster.tcp_client(), cluster.client());
    let old = create(&tcp, "/gone", 4096);
    let data = bytes(8, 300_000);
    old.write_at(0, &data).unwrap();
    check(&[&old], &data, 300_000, 300_000, "before remove");
    // Dirty bytes in the cache when the file goes.
    let dirty = bytes(9, 50_000);
    open(&local, "/gone").write_at(120_000, &dirty).unwrap();
    let old_handle = old.handle();
    // The gauge shows them cached first (it is exported every write-back tick).
    let (before, _) = wait_for_metric(&cluster, 2, "tessera_cache_bytes", METRIC_WAIT, |bytes| {
        bytes >= 300_000.0
    });
    assert!(
        before >= 300_000.0,
        "only {before} bytes cached before the remove"
    );
    tcp.unlink("/gone").unwrap();
    // Its units (clean and dirty) left the cache with it.
    let (cached, waited) =
        wait_for_metric(&cluster, 2, "tessera_cache_bytes", METRIC_WAIT, |bytes| {
            bytes == 0.0
        });
    assert!(
        cached == 0.0,
        "{cached} bytes still cached {waited:?} after the remove"
    );

    let new = create(&local, "/gone", 4096);
    let new_tcp = open(&tcp, "/gone");
    check(&[&new, &new_tcp], &[], 300_000, 0, "the new file");
    let mut model = Vec::new();
    let some = bytes(10, 1000);
    new_tcp.write_at(150_000, &some).unwrap();
    model_write(&mut model, 150_000, &some);
    check(
        &[&new, &new_tcp],
        &model,
        300_000,
        151_000,
        "the new file written",
    );

    // Past the write-back's age: the dropped dirty units of the removed object were not
    // written back (no object file came back for the old handle).
    std::thread::sleep(Duration::from_millis(2600));
    for index in 0..2 {
        if old_handle != new.handle() {
            assert!(
                !cluster.object_file(index, old_handle).exists(),
                "iod-{index}: the removed object {old_handle:#x} came back"
            );
        }
    }
    check(
        &[&new, &new_tcp],
        &model,
        300_000,
        151_000,
        "the new file, later",
    );
}

const PROCESSES: usize = 4;
const BLOCK: u64 = 1000;

/// Process `rank`'s file type: `BLOCK` bytes of every `BLOCK · PROCESSES`, its own the
/// `rank`-th.
fn block_of(rank: u64) -> Datatype {
    let mine = Datatype::hindexed(
        &[BLOCK],
        &[i64::try_from(rank * BLOCK).unwrap()],
        &Datatype::byte(),
    )
    .unwrap();
    Datatype::resized(0, i64::try_from(BLOCK * PROCESSES as u64).unwrap(), &mine).unwrap()
}

/// The file pieces of process `rank`'s first `blocks` blocks.
fn blocks_of(rank: u64, blocks: u64) -> Vec<Piece> {
    (0..blocks)
        .map(|k| Piece::new((k * PROCESSES as u64 + rank) * BLOCK, BLOCK))
        .collect()
}

/// Runs `body(rank, member, client)` on `PROCESSES` threads of one thread communicator,
/// even ranks with a same-host client, odd ones with a tcp client.
fn collectively(cluster: &Cluster, body: impl Fn(u64, &ThreadCommunicator, &Client) + Sync) {
    let group = ThreadCommunicator::group(PROCESSES, Duration::from_secs(30));
    std::thread::scope(|scope| {
        let handles: Vec<_> = group
            .into_iter()
            .map(|member| {
                let body = &body;
                scope.spawn(move || {
                    let rank = member.rank() as u64;
                    let client = if rank.is_multiple_of(2) {
                        cluster.client()
                    } else {
                        cluster.tcp_client()
                    };
                    body(rank, &member, &client);
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
    });
}

#[test]
fn collective_and_independent_accesses_see_the_same_bytes() {
    collective_and_independent(BUDGET, 12);
}

#[test]
fn collective_and_independent_accesses_see_the_same_bytes_through_a_small_cache() {
    // 2.4 MB over two iods with 1 MiB of cache each.
    collective_and_independent(SMALL_BUDGET, 600);
}

/// Two-phase and server-directed collective writes of `blocks` interleaved blocks per
/// process, read independently, then independent writes read collectively.
fn collective_and_independent(budget: usize, blocks: u64) {
    let cluster = unified(2, budget);
    let setup = cluster.tcp_client();
    let length = usize::try_from(BLOCK * blocks * PROCESSES as u64).unwrap();
    for (round, method) in [CollectiveMethod::TwoPhase, CollectiveMethod::ServerDirected]
        .into_iter()
        .enumerate()
    {
        let path = format!("/collective-{}", method.name());
        let file = create(&setup, &path, 4096);
        let options = CollectiveOptions {
            method,
            buffering: CollectiveBuffering::Enable,
            ..CollectiveOptions::default()
        };
        let salt = round as u64 * 100;
        // Collective write, then independent reads of the whole file.
        collectively(&cluster, |rank, member, client| {
            let mut viewed = ViewedFile::new(open(client, &path));
            viewed.set_view(0, &block_of(rank)).unwrap();
            let data = bytes(salt + rank, usize::try_from(BLOCK * blocks).unwrap());
            let report = viewed
                .write_all(
                    member,
                    &options,
                    0,
                    &data,
                    &Datatype::byte(),
                    BLOCK * blocks,
                )
                .unwrap();
            assert_eq!(report.bytes, BLOCK * blocks, "{path}: rank {rank} wrote");
        });
        let mut model = Vec::new();
        for rank in 0..PROCESSES as u64 {
            let data = bytes(salt + rank, usize::try_from(BLOCK * blocks).unwrap());
            model_write_list(&mut model, &blocks_of(rank, blocks), &data);
        }
        let local = cluster.client();
        let by_local = open(&local, &path);
        check(
            &[&file, &by_local],
            &model,
            length,
            length as u64,
            &format!("{path}: collective write, independent read"),
        );

        // Independent writes of every block (one list write per rank from one client),
        // then a collective read: each rank gets its blocks' new bytes.
        for rank in 0..PROCESSES as u64 {
            let data = bytes(salt + 50 + rank, usize::try_from(BLOCK * blocks).unwrap());
            let writer = if rank.is_multiple_of(2) {
                &by_local
            } else {
                &file
            };
            writer
                .write_list(&[IoSlice::new(&data)], &blocks_of(rank, blocks))
                .unwrap();
            model_write_list(&mut model, &blocks_of(rank, blocks), &data);
        }
        let model = &model;
        collectively(&cluster, |rank, member, client| {
            let mut viewed = ViewedFile::new(open(client, &path));
            viewed.set_view(0, &block_of(rank)).unwrap();
            let mut back = vec![0xEE; usize::try_from(BLOCK * blocks).unwrap()];
            let report = viewed
                .read_all(
                    member,
                    &options,
                    0,
                    &mut back,
                    &Datatype::byte(),
                    BLOCK * blocks,
                )
                .unwrap();
            assert_eq!(report.bytes, BLOCK * blocks, "{path}: rank {rank} read");
            assert_bytes(
                &back,
                &model_read_list(model, &blocks_of(rank, blocks)),
                &format!("{path}: independent write, collective read (rank {rank})"),
            );
        });
    }
}

/// A file type with holes: 3 blocks of 300 bytes every 700 bytes, in an extent of 2500.
fn holey_type() -> Datatype {
    let blocks = Datatype::vector(3, 3, 7, &Datatype::bytes(100).unwrap()).unwrap();
    Datatype::resized(0, 2500, &blocks).unwrap()
}

/// The file pieces of view bytes `0..length` of `filetype` from `displacement`.
fn view_pieces(filetype: &Datatype, displacement: u64, length: u64) -> Vec<Piece> {
    filetype
        .runs(i64::try_from(displacement).unwrap(), 0, length)
        .unwrap()
        .map(|run| Piece::new(u64::try_from(run.offset).unwrap(), run.length))
        .collect()
}

#[test]
fn view_and_list_accesses_see_the_same_bytes() {
    let cluster = unified(3, BUDGET);
    let (tcp, local) = (cluster.tcp_client(), cluster.client());
    let by_tcp = create(&tcp, "/viewed", 4096);
    let by_local = open(&local, "/viewed");
    let filetype = holey_type();
    let displacement = 123;
    let length = filetype.size() * 40;
    let pieces = view_pieces(&filetype, displacement, length);
    let size = pieces
        .iter()
        .map(|piece| piece.offset + piece.length)
        .max()
        .unwrap();
    let whole = usize::try_from(size).unwrap() + 3000;
    let mut model = Vec::new();
    for (round, (viewer, lister)) in [(&by_local, &by_tcp), (&by_tcp, &by_local)]
        .into_iter()
        .enumerate()
    {
        let what = format!("round {round}");
        let view = viewer.set_view(displacement, &filetype).unwrap();
        // A view write, then a list read of the same bytes.
        let data = bytes(20 + round as u64, usize::try_from(length).unwrap());
        assert_eq!(view.write_at(0, &data).unwrap().bytes, length);
        model_write_list(&mut model, &pieces, &data);
        let mut listed = vec![0xEE; data.len()];
        lister
            .read_list(&mut [IoSliceMut::new(&mut listed)], &pieces)
            .unwrap();
        assert_bytes(&listed, &data, &format!("{what}: view write, list read"));
        check(&[viewer, lister], &model, whole, size, &what);

        // A list write over part of the view (and a hole), then a view read.
        let part: Vec<Piece> = pieces.iter().skip(5).step_by(3).copied().collect();
        let total = usize::try_from(part.iter().map(|piece| piece.length).sum::<u64>()).unwrap();
        let update = bytes(30 + round as u64, total);
        lister.write_list(&[IoSlice::new(&update)], &part).unwrap();
        model_write_list(&mut model, &part, &update);
        let hole = bytes(40 + round as u64, 200);
        lister.write_at(displacement + 300, &hole).unwrap();
        model_write(&mut model, displacement + 300, &hole);
        let mut back = vec![0xEE; usize::try_from(length).unwrap()];
        assert_eq!(view.read_at(0, &mut back).unwrap().bytes, length);
        assert_bytes(
            &back,
            &model_read_list(&model, &pieces),
            &format!("{what}: list write, view read"),
        );
        check(&[viewer, lister], &model, whole, size, &what);
    }
}

#[test]
fn datatype_and_plain_accesses_see_the_same_bytes() {
    let cluster = unified(4, BUDGET);
    let (tcp, local) = (cluster.tcp_client(), cluster.client());
    let by_tcp = create(&tcp, "/typed", 1024);
    let by_local = open(&local, "/typed");
    let filetype = holey_type();
    let displacement = 77;
    let count = 30;
    let length = filetype.size() * count;
    let pieces = view_pieces(&filetype, displacement, length);
    let size = pieces
        .iter()
        .map(|piece| piece.offset + piece.length)
        .max()
        .unwrap();
    let whole = usize::try_from(size).unwrap() + 100;
    // Every other 3-byte group of memory.
    let memtype = Datatype::resized(0, 6, &Datatype::bytes(3).unwrap()).unwrap();
    let mut model = Vec::new();
    for (round, (typed, plain)) in [(&by_tcp, &by_local), (&by_local, &by_tcp)]
        .into_iter()
        .enumerate()
    {
        let what = format!("round {round}");
        // A datatype write (memory and file types with holes), then plain reads.
        let memory = bytes(50 + round as u64, usize::try_from(length * 2).unwrap());
        let report = typed
            .write_type(&memory, &memtype, length / 3, &filetype, displacement)
            .unwrap();
        assert_eq!(report.bytes, length, "{what}: typed write");
        let packed: Vec<u8> = memory
            .chunks(6)
            .flat_map(|group| group[..3].iter().copied())
            .collect();
        model_write_list(&mut model, &pieces, &packed);
        check(
            &[typed, plain],
            &model,
            whole,
            size,
            &format!("{what}: typed write"),
        );

        // A plain write over the whole span (holes included), then a datatype read.
        let span = bytes(60 + round as u64, usize::try_from(size - 1000).unwrap());
        plain.write_at(1000, &span).unwrap();
        model_write(&mut model, 1000, &span);
        let mut back = vec![0xEE; usize::try_from(length * 2).unwrap()];
        typed
            .read_type(&mut back, &memtype, length / 3, &filetype, displacement)
            .unwrap();
        let expected = model_read_list(&model, &pieces);
        for (k, (got, hole)) in back.chunks(6).zip(expected.chunks(3)).enumerate() {
            assert_bytes(
                &got[..3],
                hole,
                &format!("{what}: plain write, typed read (group {k})"),
            );
            assert_eq!(&got[3..], &[0xEE; 3], "{what}: memory hole {k} written");
        }
    }
}

#[test]
fn tcp_and_one_sided_same_host_accesses_see_the_same_bytes() {
    let cluster = unified(2, BUDGET);
    let (tcp, local) = (cluster.tcp_client(), cluster.client());
    let by_tcp = create(&tcp, "/mapped", 16384);
    let by_local = open(&local, "/mapped");
    let length = 1 << 20;
    let mut model = Vec::new();

    // Written over tcp (dirty in the cache), read one-sidedly: pushed from the cache.
    let data = bytes(70, length);
    by_tcp.write_at(0, &data).unwrap();
    model_write(&mut model, 0, &data);
    let mut back = vec![0xEE; length];
    let report = by_local.read_at(0, &mut back).unwrap();
    assert_eq!(report.one_sided, report.requests, "{report:?}");
    assert!(report.requests > 0);
    assert_bytes(&back, &model, "tcp write, one-sided read");
    // The read found the 16 units the write left in the caches (hits, exported every tick).
    let (hits, waited) = wait_for_metric(
        &cluster,
        2,
        "tessera_cache_hits_total",
        METRIC_WAIT,
        |hits| hits >= 16.0,
    );
    assert!(hits >= 16.0, "{hits} cache hits after {waited:?}");

    // Written one-sidedly in scattered pieces, read over tcp, and one-sidedly again.
    let pieces: Vec<Piece> = (0..300u64)
        .map(|i| Piece::new(i * 3400 + (i % 7) * 9, 1500))
        .collect();
    let scattered = bytes(71, 450_000);
    let memory: Vec<IoSlice<'_>> = scattered.chunks(4096).map(IoSlice::new).collect();
    let report = by_local.write_list(&memory, &pieces).unwrap();
    assert_eq!(report.one_sided, report.requests, "{report:?}");
    model_write_list(&mut model, &pieces, &scattered);
    check(
        &[&by_tcp, &by_local],
        &model,
        length,
        length as u64,
        "one-sided write",
    );

    // A tcp overwrite of bytes the same-host client just read: its next read sees it.
    let over = bytes(72, 100_000);
    by_tcp.write_at(333_333, &over).unwrap();
    model_write(&mut model, 333_333, &over);
    let mut listed = vec![0xEE; 450_000];
    let report = by_local
        .read_list(&mut [IoSliceMut::new(&mut listed)], &pieces)
        .unwrap();
    assert_eq!(report.one_sided, report.requests, "{report:?}");
    assert_bytes(
        &listed,
        &model_read_list(&model, &pieces),
        "tcp overwrite, one-sided list read",
    );
    check(&[&by_local, &by_tcp], &model, length, length as u64, "end");
}

#[test]
fn writes_land_straight_in_cache_units_over_tcp_and_one_sided() {
    let cluster = unified(2, BUDGET);
    let (tcp, local) = (cluster.tcp_client(), cluster.client());
    let by_tcp = create(&tcp, "/landed", 64 << 10);
    let by_local = open(&local, "/landed");
    let length = 1 << 20;
    let mut model = Vec::new();
    let landed = |at_least: f64| {
        let (value, waited) = wait_for_metric(
            &cluster,
            2,
            "tessera_cache_units_landed_total",
            METRIC_WAIT,
            |value| value >= at_least,
        );
        assert!(value >= at_least, "{value} units landed after {waited:?}");
        value
    };

    // 1 MiB over tcp: 8 whole 64 KiB units on each iod are received into.
    let data = bytes(73, length);
    by_tcp.write_at(0, &data).unwrap();
    model_write(&mut model, 0, &data);
    let after_tcp = landed(16.0);
    check(
        &[&by_local, &by_tcp],
        &model,
        length,
        length as u64,
        "tcp write",
    );

    // The next MiB pulled one-sidedly: 16 more units, pulled straight into.
    let data = bytes(74, length);
    let report = by_local.write_at(length as u64, &data).unwrap();
    assert_eq!(report.one_sided, report.requests, "{report:?}");
    model_write(&mut model, length as u64, &data);
    landed(after_tcp + 16.0);
    check(
        &[&by_tcp, &by_local],
        &model,
        2 * length,
        2 * length as u64,
        "one-sided write",
    );

    // An unaligned overwrite across units over tcp: partial units merged with the landed ones.
    let over = bytes(75, 300_000);
    by_tcp.write_at(100_001, &over).unwrap();
    model_write(&mut model, 100_001, &over);
    check(
        &[&by_local, &by_tcp],
        &model,
        2 * length,
        2 * length as u64,
        "overwrite",
    );

    // Durable after sync, read from the files by restarted iods.
    by_tcp.sync().unwrap();
    for index in 0..2 {
        cluster.kill_iod(index);
    }
    let whole = [Piece::new(0, 2 * length as u64)];
    assert_objects_on_disk(&cluster, &by_tcp, &whole, &model, "after sync and kill -9");
}

/// 256 slices of 1000 bytes every 1536 bytes of `memory`.
fn arena_slices(memory: &[u8]) -> Vec<IoSlice<'_>> {
    memory
        .chunks(1536)
        .take(256)
        .map(|chunk| IoSlice::new(&chunk[..1000]))
        .collect()
}

#[test]
fn arena_and_tcp_accesses_see_the_same_bytes() {
    let cluster = unified(4, BUDGET);
    let (tcp, local) = (cluster.tcp_client(), cluster.client());
    let by_local = create(&local, "/arena", 4096);
    let by_tcp = open(&tcp, "/arena");
    let pieces: Vec<Piece> = (0..256u64)
        .map(|i| Piece::new(((i * 37) % 256) * 1300 + (i % 2) * 200, 1000))
        .collect();
    let mut model = Vec::new();
    let mut arena = Arena::new(1 << 20).unwrap();
    for round in 0..2u64 {
        let what = format!("round {round}");
        // From an arena (no client copy), read over tcp.
        let source = bytes(80 + round, 1 << 20);
        arena.as_mut_slice().copy_from_slice(&source);
        let report = by_local
            .write_list(&arena_slices(arena.as_slice()), &pieces)
            .unwrap();
        assert_eq!(report.bytes, 256_000, "{what}");
        assert_eq!(report.bytes_copied, 0, "{what}: no client copy");
        let packed: Vec<u8> = source
            .chunks(1536)
            .take(256)
            .flat_map(|chunk| chunk[..1000].iter().copied())
            .collect();
        model_write_list(&mut model, &pieces, &packed);
        let size = model.len();
        check(
            &[&by_tcp, &by_local],
            &model,
            size,
            size as u64,
            &format!("{what}: arena write"),
        );

        // Over tcp, read into the arena.
        let update = bytes(90 + round, 256_000);
        by_tcp
            .write_list(&[IoSlice::new(&update)], &pieces)
            .unwrap();
        model_write_list(&mut model, &pieces, &update);
        arena.as_mut_slice().fill(0xEE);
        let report = {
            let mut targets: Vec<IoSliceMut<'_>> = arena
                .as_mut_slice()
                .chunks_mut(1536)
                .take(256)
                .map(|chunk| IoSliceMut::new(&mut chunk[..1000]))
                .collect();
            by_local.read_list(&mut targets, &pieces).unwrap()
        };
        assert_eq!(report.bytes_copied, 0, "{what}: no client copy");
        let got: Vec<u8> = arena
            .as_slice()
            .chunks(1536)
            .take(256)
            .flat_map(|chunk| chunk[..1000].iter().copied())
            .collect();
        assert_bytes(&got, &update, &format!("{what}: tcp write, arena read"));
        for (index, chunk) in arena.as_slice().chunks(1536).take(256).enumerate() {
            assert!(
                chunk[1000..].iter().all(|&b| b == 0xEE),
                "{what}: gap {index}"
            );
        }
    }
}

/// Threads of the concurrency test, each owning every `THREADS`-th stripe.
const THREADS: u64 = 4;
/// Bytes of one stripe.
const STRIPE: usize = 1024;

/// The bytes thread `owner` writes to `stripe` in `generation` (1..): the generation, the
/// owner, then bytes of their own.
fn stripe_bytes(owner: u64, stripe: u64, generation: u8) -> Vec<u8> {
    let mut stripe_data = bytes(
        (owner << 40) | (stripe << 8) | u64::from(generation),
        STRIPE,
    );
    stripe_data[0] = generation;
    stripe_data[1] = u8::try_from(owner).unwrap();
    stripe_data
}

/// Checks every stripe of `whole`: never written (all zero), or exactly what its owner wrote
/// in some generation up to `generations`; `owner`'s own stripes must hold `own_generation`.
/// Returns the stripes seen written.
fn check_stripes(
    whole: &[u8],
    owner: u64,
    (own_generation, generations): (u8, u8),
    what: &str,
) -> u64 {
    let mut written = 0;
    for (stripe, got) in (0u64..).zip(whole.chunks(STRIPE)) {
        let by = stripe % THREADS;
        if got.iter().all(|&b| b == 0) {
            assert_ne!(by, owner, "{what}: own stripe {stripe} reads as zeros");
            continue;
        }
        let generation = got[0];
        assert!(
            (1..=generations).contains(&generation) && u64::from(got[1]) == by,
            "{what}: stripe {stripe} (thread {by}) starts {:?}",
            &got[..2]
        );
        if by == owner {
            assert_eq!(generation, own_generation, "{what}: own stripe {stripe}");
        }
        assert_bytes(
            got,
            &stripe_bytes(by, stripe, generation),
            &format!("{what}: stripe {stripe} (thread {by}, generation {generation}) torn"),
        );
        written += 1;
    }
    written
}

#[test]
fn concurrent_clients_on_shared_units_match_the_model() {
    // 1 MiB: 16 units of 64 KiB, well within the budget.
    concurrent_clients(BUDGET, 1024, 16);
}

#[test]
fn concurrent_clients_on_a_small_cache_match_the_model() {
    // 4 MiB over two iods with 1 MiB of cache each: units are evicted and refilled, and
    // grants wait for room while the others write and read.
    concurrent_clients(SMALL_BUDGET, 4096, 6);
}

/// `THREADS` clients (same-host and tcp in turn), each writing its interleaved 1 KiB stripes
/// of the first `stripes` of a file for `generations` generations, reading the whole file
/// after each and a list of another thread's stripes; at the end the file equals the model,
/// and again after the iods restart (written back at stop).
fn concurrent_clients(budget: usize, stripes: u64, generations: u8) {
    let cluster = unified(2, budget);
    let setup = cluster.client();
    create(&setup, "/shared", 16384);
    let started = Instant::now();
    let checked: Vec<u64> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|owner| {
                let cluster = &cluster;
                scope.spawn(move || {
                    let client = if owner.is_multiple_of(2) {
                        cluster.client()
                    } else {
                        cluster.tcp_client()
                    };
                    let file = open(&client, "/shared");
                    let every = usize::try_from(THREADS).unwrap();
                    let file_bytes = usize::try_from(stripes).unwrap() * STRIPE;
                    let mine: Vec<u64> = (owner..stripes).step_by(every).collect();
                    let pieces: Vec<Piece> = mine
                        .iter()
                        .map(|&stripe| Piece::new(stripe * STRIPE as u64, STRIPE as u64))
                        .collect();
                    let mut stripes_checked = 0;
                    for generation in 1..=generations {
                        let data: Vec<u8> = mine
                            .iter()
                            .flat_map(|&stripe| stripe_bytes(owner, stripe, generation))
                            .collect();
                        let report = file.write_list(&[IoSlice::new(&data)], &pieces).unwrap();
                        assert_eq!(report.bytes, data.len() as u64);
                        let what = format!("thread {owner}, generation {generation}");
                        let whole = read_whole(&file, file_bytes);
                        stripes_checked +=
                            check_stripes(&whole, owner, (generation, generations), &what);
                        // And a list read of another thread's stripes, in reverse order.
                        let other = (owner + 1) % THREADS;
                        let mut theirs: Vec<u64> = (other..stripes).step_by(every).collect();
                        theirs.reverse();
                        let theirs: Vec<Piece> = theirs
                            .into_iter()
                            .map(|stripe| Piece::new(stripe * STRIPE as u64, STRIPE as u64))
                            .collect();
                        let mut listed = vec![0xEE; theirs.len() * STRIPE];
                        file.read_list(&mut [IoSliceMut::new(&mut listed)], &theirs)
                            .unwrap();
                        for (piece, got) in theirs.iter().zip(listed.chunks(STRIPE)) {
                            let stripe = piece.offset / STRIPE as u64;
                            if got.iter().all(|&b| b == 0) {
                                continue;
                            }
                            assert_bytes(
                                got,
                                &stripe_bytes(other, stripe, got[0].clamp(1, generations)),
                                &format!("{what}: listed stripe {stripe} of thread {other}"),
                            );
                            stripes_checked += 1;
                        }
                        assert!(
                            started.elapsed() < Duration::from_secs(25),
                            "{what}: the test ran past 25 s"
                        );
                    }
                    stripes_checked
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().unwrap())
            .collect()
    });
    // Every thread checked at least its own stripes every generation.
    for (owner, count) in checked.iter().enumerate() {
        assert!(
            *count >= u64::from(generations) * stripes / THREADS,
            "thread {owner} checked {count} stripes"
        );
    }
    let model: Vec<u8> = (0..stripes)
        .flat_map(|stripe| stripe_bytes(stripe % THREADS, stripe, generations))
        .collect();
    let tcp = cluster.tcp_client();
    let files = [open(&setup, "/shared"), open(&tcp, "/shared")];
    let length = model.len();
    check(
        &[&files[0], &files[1]],
        &model,
        length,
        length as u64,
        "the end",
    );
    // Written back when the iods stop (SIGTERM), served again by new processes.
    cluster.restart_iods_with(&["--serve", "unified", "--cache-bytes", &budget.to_string()]);
    let after = open(&cluster.tcp_client(), "/shared");
    check(&[&after], &model, length, length as u64, "after restart");
}

/// Reads and storage bytes of reads summed over every iod.
fn storage_reads(client: &Client) -> u64 {
    (0..client.server_count())
        .map(|index| client.server_stats(index).unwrap().reads.bytes_storage)
        .sum()
}

#[test]
fn a_small_cache_evicts_and_still_returns_every_byte() {
    let cluster = unified(2, SMALL_BUDGET);
    let (tcp, local) = (cluster.tcp_client(), cluster.client());
    let by_tcp = create(&tcp, "/evicted", 16384);
    let by_local = open(&local, "/evicted");
    // 2048 pieces of 4096 bytes, 5000 apart: 8 MiB over about 10 MiB, 8 list writes of
    // 1 MiB each, from both clients in turn.
    let pieces: Vec<Piece> = (0..2048u64)
        .map(|i| Piece::new(i * 5000 + (i % 7) * 100, 4096))
        .collect();
    let mut model = Vec::new();
    for (batch, chunk) in pieces.chunks(256).enumerate() {
        let data = bytes(100 + batch as u64, chunk.len() * 4096);
        let writer = if batch.is_multiple_of(2) {
            &by_tcp
        } else {
            &by_local
        };
        let memory: Vec<IoSlice<'_>> = data.chunks(10_000).map(IoSlice::new).collect();
        assert_eq!(
            writer.write_list(&memory, chunk).unwrap().bytes,
            data.len() as u64
        );
        model_write_list(&mut model, chunk, &data);
    }
    let before = storage_reads(&tcp);
    // Read back in another order and cut: last batch first, every list by the other client.
    for (batch, chunk) in pieces.chunks(256).enumerate().rev() {
        let reader = if batch.is_multiple_of(2) {
            &by_local
        } else {
            &by_tcp
        };
        let mut back = vec![0xEE; chunk.len() * 4096];
        reader
            .read_list(&mut [IoSliceMut::new(&mut back)], chunk)
            .unwrap();
        assert_bytes(
            &back,
            &model_read_list(&model, chunk),
            &format!("list read of batch {batch}"),
        );
    }
    let size = model.len();
    check(&[&by_tcp, &by_local], &model, size, size as u64, "whole");
    // Units were evicted, and the cache never grew past its budget.
    let (evictions, _) = wait_for_metric(
        &cluster,
        2,
        "tessera_cache_evictions_total",
        METRIC_WAIT,
        |evictions| evictions > 0.0,
    );
    assert!(evictions >= 64.0, "{evictions} units evicted");
    for index in 0..2 {
        let body = scrape(&metrics_address(&cluster, &format!("iod-{index}")));
        let cached = sample(&body, "tessera_cache_bytes", &[]);
        assert!(
            cached <= SMALL_BUDGET as f64,
            "iod-{index}: {cached} bytes cached over a budget of {SMALL_BUDGET}"
        );
        // Units came out of the Ready slots (8 of them, reused as units were evicted) and,
        // past them, the heap.
        let made = |memory: &str| {
            sample(
                &body,
                "tessera_cache_units_made_total",
                &[&format!("memory=\"{memory}\"")],
            )
        };
        assert!(
            made("ready") > 8.0 && made("raw") > 0.0,
            "iod-{index}: {} units made in Ready memory, {} on the heap",
            made("ready"),
            made("raw")
        );
    }
    // 2 MiB of cache could not hold 8 MiB: most of it was read from storage again.
    let refilled = storage_reads(&tcp) - before;
    assert!(
        refilled >= 4 << 20,
        "only {refilled} bytes were read from storage: nothing was evicted?"
    );
}

/// What writer `writer` writes over the whole region in `generation` (1..): bytes of their
/// own, starting with the generation and the writer.
fn region_bytes(writer: u8, generation: u8, length: usize) -> Vec<u8> {
    let mut data = bytes((u64::from(writer) << 8) | u64::from(generation), length);
    data[0] = generation;
    data[1] = writer;
    data
}

/// docs/SEMANTICS.md §2.1 through a small cache: two writers (tcp and same-host) overwrite
/// the same 768 KiB on one server, whole, while two readers (tcp and same-host) read it whole;
/// every read holds exactly one write's bytes, never a mix.
#[test]
fn a_read_sees_all_of_a_concurrent_write_or_none_of_it() {
    reads_see_all_of_a_concurrent_write_or_none_of_it(&unified(2, SMALL_BUDGET));
}

/// The same in the default `mmap` serve mode, where a cached read over tcp is sent straight
/// from the object's mapping (a write waits for the socket to take it, or for its rest to be
/// copied aside) and a same-host one is pushed from it.
#[test]
fn a_read_sent_from_the_mapping_sees_all_of_a_concurrent_write_or_none_of_it() {
    let cluster = Cluster::start(2);
    let client = cluster.client();
    let mapped = || -> u64 {
        (0..client.server_count())
            .map(|index| client.server_stats(index).unwrap().reads.mapped)
            .sum()
    };
    let before = mapped();
    let [by_tcp, same_host] = reads_see_all_of_a_concurrent_write_or_none_of_it(&cluster);
    // Every same-host read is pushed from the mapping, and at least the tcp reader's last
    // one, made once no write ran, was sent from it (with the final read: one more).
    let sent = mapped() - before;
    assert!(
        sent >= same_host + 2 && sent <= same_host + by_tcp + 1,
        "{sent} reads from the mapping, {by_tcp} by tcp and {same_host} same-host"
    );
}

/// Runs the test; returns the reads of the tcp and of the same-host reader.
fn reads_see_all_of_a_concurrent_write_or_none_of_it(cluster: &Cluster) -> [u64; 2] {
    const LENGTH: usize = 768 << 10;
    const WRITES: u8 = 30;
    let setup = cluster.client();
    let file = setup
        .create(
            "/atomic",
            &CreateOptions {
                stripe_unit_bytes: 1 << 20,
                server_count: 1,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    file.write_at(0, &region_bytes(9, 1, LENGTH)).unwrap();
    let writing = std::sync::atomic::AtomicUsize::new(2);
    let started = Instant::now();
    let reads: Vec<u64> = std::thread::scope(|scope| {
        for writer in 0..2u8 {
            let writing = &writing;
            scope.spawn(move || {
                let client = if writer == 0 {
                    cluster.tcp_client()
                } else {
                    cluster.client()
                };
                let file = open(&client, "/atomic");
                for generation in 1..=WRITES {
                    file.write_at(0, &region_bytes(writer, generation, LENGTH))
                        .unwrap();
                }
                writing.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
        let readers: Vec<_> = (0..2)
            .map(|reader| {
                let writing = &writing;
                scope.spawn(move || {
                    let client = if reader == 0 {
                        cluster.tcp_client()
                    } else {
                        cluster.client()
                    };
                    let file = open(&client, "/atomic");
                    let mut count = 0u64;
                    loop {
                        let done = writing.load(std::sync::atomic::Ordering::SeqCst) == 0;
                        let got = read_whole(&file, LENGTH);
                        let (generation, writer) = (got[0], got[1]);
                        assert_bytes(
                            &got,
                            &region_bytes(writer, generation, LENGTH),
                            &format!(
                                "reader {reader}, read {count}: the write of writer {writer} \
                                 generation {generation}"
                            ),
                        );
                        count += 1;
                        if done {
                            return count;
                        }
                        assert!(
                            started.elapsed() < Duration::from_secs(25),
                            "the writers did not finish in 25 s"
                        );
                    }
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|reader| reader.join().unwrap())
            .collect()
    });
    assert!(reads.iter().all(|&count| count >= 2), "reads: {reads:?}");
    // The end: the last write of one of the writers, whole.
    let got = read_whole(&file, LENGTH);
    assert_eq!(got[0], WRITES, "the last generation");
    assert_bytes(
        &got,
        &region_bytes(got[1], WRITES, LENGTH),
        "the region at the end",
    );
    [reads[0], reads[1]]
}

/// Overlapping, repeated, unordered and empty pieces in one list write through the cache
/// (batched against a 1 MiB budget): the later piece wins (docs/SEMANTICS.md §4); overlapping
/// pieces of a list read each get the file's bytes; over tcp and same-host alike.
#[test]
fn overlapping_and_empty_pieces_follow_list_order_through_the_cache() {
    let cluster = unified(2, SMALL_BUDGET);
    let (tcp, local) = (cluster.tcp_client(), cluster.client());
    let by_tcp = create(&tcp, "/overlaps", 8192);
    let by_local = open(&local, "/overlaps");
    let mut model = Vec::new();
    for (round, writer) in [&by_tcp, &by_local, &by_tcp, &by_local]
        .into_iter()
        .enumerate()
    {
        let round = round as u64;
        let mut pieces = Vec::new();
        for k in 0..60u64 {
            // Across 64 KiB units and stripe units, going down, with repeats.
            let at = ((k * 7919 + round * 1237) % 600) * 1024 + (k % 3) * 4000;
            pieces.push(Piece::new(at, 3000 + (k % 5) * 1000));
            pieces.push(Piece::new(at + 1500, 2000));
            pieces.push(Piece::new(at, 0));
            if k % 4 == 0 {
                pieces.push(Piece::new(at + 60_000, 70_000));
            }
        }
        let total = usize::try_from(pieces.iter().map(|piece| piece.length).sum::<u64>()).unwrap();
        let data = bytes(200 + round, total);
        let memory: Vec<IoSlice<'_>> = data.chunks(33_333).map(IoSlice::new).collect();
        let report = writer.write_list(&memory, &pieces).unwrap();
        assert_eq!(report.bytes, total as u64, "round {round}");
        model_write_list(&mut model, &pieces, &data);
        let size = model.len();
        check(
            &[&by_tcp, &by_local],
            &model,
            size + 10_000,
            size as u64,
            &format!("round {round}"),
        );
        // Read back through the same overlapping list, from the other client.
        let reader = if round.is_multiple_of(2) {
            &by_local
        } else {
            &by_tcp
        };
        let mut back = vec![0xEE; total];
        reader
            .read_list(&mut [IoSliceMut::new(&mut back)], &pieces)
            .unwrap();
        assert_bytes(
            &back,
            &model_read_list(&model, &pieces),
            &format!("round {round}: overlapping list read"),
        );
    }
}

/// The smallest budget the iod accepts (one 64 KiB unit) still serves a piece that crosses a
/// unit boundary, and a request larger than the whole cache.
#[test]
fn the_smallest_budget_serves_pieces_across_units() {
    let cluster = unified(1, 64 << 10);
    let (tcp, local) = (cluster.tcp_client(), cluster.client());
    let by_tcp = create(&tcp, "/tiny", 1 << 20);
    let by_local = open(&local, "/tiny");
    let mut model = Vec::new();
    for (round, (offset, length)) in [(65_500u64, 100usize), (10_000, 300_000), (131_000, 2000)]
        .into_iter()
        .enumerate()
    {
        let data = bytes(300 + round as u64, length);
        let writer = if round.is_multiple_of(2) {
            &by_tcp
        } else {
            &by_local
        };
        writer.write_at(offset, &data).unwrap();
        model_write(&mut model, offset, &data);
        let size = model.len();
        check(
            &[&by_tcp, &by_local],
            &model,
            size,
            size as u64,
            &format!("round {round}"),
        );
    }
}

/// More files than an iod keeps open (`IOD_OPEN_OBJECTS_MAX`, 512): objects leave the open
/// table while their units are cached and dirty; every file still reads back whole, before
/// and after the write-back, and its object file holds it.
#[test]
fn more_files_than_the_open_table_holds_read_back_whole() {
    const FILES: u64 = 600;
    let cluster = unified(1, BUDGET);
    let (tcp, local) = (cluster.tcp_client(), cluster.client());
    let files: Vec<File> = (0..FILES)
        .map(|k| {
            let client = if k.is_multiple_of(2) { &tcp } else { &local };
            let file = create(client, &format!("/many-{k}"), 4096);
            file.write_at(k * 7, &bytes(1000 + k, 9000)).unwrap();
            file
        })
        .collect();
    let expect = |k: u64| {
        let mut model = Vec::new();
        model_write(&mut model, k * 7, &bytes(1000 + k, 9000));
        model
    };
    for (k, file) in (0..FILES).zip(&files) {
        let model = expect(k);
        check(
            &[file],
            &model,
            model.len(),
            model.len() as u64,
            &format!("file {k}"),
        );
    }
    // Overwrite every file's first bytes, wait past the write-back's age, read again.
    for (k, file) in (0..FILES).zip(&files) {
        file.write_at(0, &[u8::try_from(k % 251).unwrap(); 7])
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(2600));
    for (k, file) in (0..FILES).zip(&files) {
        let mut model = expect(k);
        model_write(&mut model, 0, &[u8::try_from(k % 251).unwrap(); 7]);
        check(
            &[file],
            &model,
            model.len(),
            model.len() as u64,
            &format!("file {k}, later"),
        );
        let on_disk = std::fs::read(cluster.object_file(0, file.handle())).unwrap();
        assert_bytes(&on_disk, &model, &format!("object file of file {k}"));
    }
}

/// Requests far larger than a 1 MiB cache (12 MiB, 8 MiB on one iod): a same-host write
/// pipelined in 1 MiB units, a tcp write, one-sided and tcp reads; all whole.
#[test]
fn requests_larger_than_the_cache_move_whole() {
    let cluster = unified(2, SMALL_BUDGET);
    let (tcp, local) = (cluster.tcp_client(), cluster.client());
    let mut by_local = create(&local, "/large", 8 << 20);
    by_local.set_transfer_policy(TransferPolicy::Force(Mechanism::Gather));
    let by_tcp = open(&tcp, "/large");
    let length = 12 << 20;
    let data = bytes(400, length);
    let memory: Vec<IoSlice<'_>> = data.chunks(64 << 10).map(IoSlice::new).collect();
    let report = by_local
        .write_list(&memory, &[Piece::new(0, length as u64)])
        .unwrap();
    assert_eq!(report.one_sided, report.requests, "{report:?}");
    let mut model = data.clone();
    check(
        &[&by_tcp, &by_local],
        &model,
        length,
        length as u64,
        "same-host write",
    );
    let over = bytes(401, 9 << 20);
    by_tcp.write_at(1 << 20, &over).unwrap();
    model_write(&mut model, 1 << 20, &over);
    check(
        &[&by_local, &by_tcp],
        &model,
        length,
        length as u64,
        "tcp write",
    );
}

/// 24 MiB written once, contiguously, over two iods (more than one write-back step of
/// `FLUSH_BATCH_BYTES`, 8 MiB, and more than the dirty limit of a quarter of 64 MiB): once
/// every byte is written back, the iods count exactly 24 MiB flushed, each byte once.
#[test]
fn write_back_counts_each_flushed_byte_once() {
    let cluster = unified(2, BUDGET);
    let client = cluster.tcp_client();
    let file = create(&client, "/counted", 1 << 20);
    let length = 24 << 20;
    let data = bytes(500, length);
    file.write_at(0, &data).unwrap();
    let (flushed, waited) = wait_for_metric(
        &cluster,
        2,
        "tessera_cache_flushed_bytes_total",
        METRIC_WAIT,
        |flushed| flushed >= length as f64,
    );
    assert!(
        flushed >= length as f64,
        "{flushed} bytes written back in {waited:?}"
    );
    // One more write-back tick: nothing is left dirty, and nothing more was counted.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(metric(&cluster, 2, "tessera_cache_dirty_bytes"), Some(0.0));
    assert_eq!(
        metric(&cluster, 2, "tessera_cache_flushed_bytes_total"),
        Some(length as f64),
        "bytes counted as written back, for {length} bytes written once"
    );
    check(&[&file], &data, length, length as u64, "read back");
}

/// The cache counters of the one iod of `client`'s cluster, from its `ServerStats` reply.
fn cache_counters(client: &Client) -> tessera_proto::CacheCounters {
    client.server_stats(0).unwrap().cache
}

/// Files get their cache unit at create: a 4 KiB hint, a 16 KiB stripe unit without one, the
/// 64 KiB default otherwise. After a restart of the iod (the units kept with the objects) and
/// a first write that lands in units, reading one 4 KiB piece of each adds one unit of that
/// size to the cache, which the `ServerStats` reply shows; reading it again is a hit. A bad
/// hint is refused by name.
#[test]
fn files_keep_their_cache_unit_across_a_restart_and_stats_show_it() {
    let cluster = unified(1, BUDGET);
    let client = cluster.tcp_client();
    let hinted = CreateOptions {
        cache_unit_bytes: 4096,
        ..CreateOptions::default()
    };
    let length = 256 << 10;
    let files = [
        ("/hinted", client.create("/hinted", &hinted).unwrap(), 4096),
        ("/striped", create(&client, "/striped", 16 << 10), 16 << 10),
        ("/default", create(&client, "/default", 64 << 10), 64 << 10),
    ];
    for (seed, (_, file, _)) in (700..).zip(&files) {
        file.write_at(0, &bytes(seed, length)).unwrap();
        file.sync().unwrap();
    }
    cluster.restart_iods_with(&["--serve", "unified", "--cache-bytes", &BUDGET.to_string()]);
    let client = cluster.tcp_client();
    assert_eq!(cache_counters(&client).bytes_in_use, 0, "a fresh cache");
    for (seed, (path, _, unit_bytes)) in (700..).zip(&files) {
        let file = open(&client, path);
        let want = bytes(seed, length);
        // The object's first request is a write large enough to land in units: the units it
        // lands in are already the file's.
        file.write_at(32 << 10, &want[32 << 10..96 << 10]).unwrap();
        let before = cache_counters(&client);
        let mut piece = vec![0u8; 4096];
        file.read_at(200 << 10, &mut piece).unwrap();
        assert_bytes(&piece, &want[200 << 10..204 << 10], path);
        let after = cache_counters(&client);
        assert_eq!(
            after.bytes_in_use - before.bytes_in_use,
            *unit_bytes,
            "{path}: bytes one 4 KiB read added to the cache"
        );
        assert_eq!(after.misses - before.misses, 1, "{path}: misses");
        file.read_at(200 << 10, &mut piece).unwrap();
        assert_eq!(cache_counters(&client).hits - after.hits, 1, "{path}: hits");
        assert_bytes(&read_whole(&file, length), &want, path);
    }
    let stats = cache_counters(&client);
    assert!(
        stats.hits >= 3 && stats.budget_bytes == BUDGET as u64,
        "{stats:?}"
    );
    let dir = cluster.path().to_str().unwrap();
    let status = common::tessera(&["status", "--dir", dir, "--servers", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let cache = &status["storage"][0]["cache"];
    assert_eq!(cache["hits"], stats.hits, "{status}");
    assert_eq!(cache["bytes_in_use"], stats.bytes_in_use, "{status}");
    let table = common::tessera(&["status", "--dir", dir, "--servers"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains(&format!("hits={}", stats.hits)), "{table}");

    let bad = CreateOptions {
        cache_unit_bytes: 12288,
        ..CreateOptions::default()
    };
    let error = client.create("/bad", &bad).unwrap_err();
    assert_eq!(
        error.code(),
        Some(tessera_proto::ErrorCode::InvalidArgument)
    );
    let text = error.to_string();
    assert!(
        text.contains("/bad") && text.contains("12288 bytes") && text.contains("4096 to 65536"),
        "{text}"
    );
    assert!(client.lookup("/bad").is_err(), "nothing made");
    let refused = common::tessera(&["put", "--cache-unit", "3k", "/dev/null", "/put"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("3072 bytes"),
        "{stderr}"
    );
}
