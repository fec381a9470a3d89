//! `tessera bench subarray` (seed 000 Fig. 3, seed 001 Fig. 3.3).
//!
//! One client sends one 2-D subarray to one server: an N x N array of 4-byte ints is
//! distributed block-block over 4 processes, and the process's (N/2) x (N/2) block goes out as
//! one list call, N/2 rows of memory to one contiguous file piece. The mechanisms are the
//! seed's: `pack` (copy the rows into one buffer, moved as one piece; with a fresh
//! registration per call — `pack, reg` — or from a registered pool, `pack`), `gather` (the
//! server moves the rows themselves: registered per row, `gather, multiple reg`; once for the
//! covering region by OGR, `gather, one reg`; found in a pin-down cache, `gather, cached`; or
//! with no registration, `gather`), `hybrid` (the transfer model picks per request) and
//! `contiguous` (the same bytes from one buffer, the upper bound). Registration is the
//! `--registrar` (default `fixed`, io_uring fixed buffers: the kernel's long-term page pinning
//! that RDMA registration does; `pin`, mlock/munlock). The `arena` rows put the array in a
//! shared arena, the `local` backend's registered memory, which the server reaches with plain
//! copies. All methods run interleaved; every call's data is read back and compared.
//!
//! A second case measures the transport alone against the kernel: 64 KiB pieces read from a
//! cached file over `local` (the server pushes from a mapping of the object with
//! `process_vm_writev`) against the raw rate of `process_vm_writev` moving the same pieces in
//! this run, each timed copy starting after a 32 MiB write that leaves no data of either warm.

use std::io::{IoSlice, IoSliceMut};
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use tessera_client::tessera_reg::{Caching, Grouping, Policy, Registry, Segment};
use tessera_client::{
    Arena, Client, ClientOptions, ClusterConfig, CreateOptions, ErrorCode, File, Mechanism, Piece,
    TransferPolicy,
};

use super::{median, mib_s, BenchCluster, CommonArgs, Report, Row};

const SERVERS: u16 = 1;
const ELEMENT_BYTES: usize = 4;

/// One compared method: how the transfer is chosen and how memory is registered.
#[derive(Debug, Clone, Copy)]
struct Method {
    name: &'static str,
    policy: TransferPolicy,
    registration: Option<(Grouping, Caching)>,
    contiguous: bool,
    /// The array lives in a shared arena (`tessera_client::Arena`): the `local` backend's
    /// registered memory, which the server reaches with plain copies.
    arena: bool,
}

const METHODS: [Method; 11] = [
    Method {
        name: "contiguous",
        policy: TransferPolicy::Force(Mechanism::Gather),
        registration: None,
        contiguous: true,
        arena: false,
    },
    Method {
        name: "pack",
        policy: TransferPolicy::Force(Mechanism::Pack),
        registration: None,
        contiguous: false,
        arena: false,
    },
    Method {
        name: "pack, reg",
        policy: TransferPolicy::Force(Mechanism::Pack),
        registration: Some((Grouping::Individual, Caching::None)),
        contiguous: false,
        arena: false,
    },
    Method {
        name: "gather",
        policy: TransferPolicy::Force(Mechanism::Gather),
        registration: None,
        contiguous: false,
        arena: false,
    },
    Method {
        name: "gather, multiple reg",
        policy: TransferPolicy::Force(Mechanism::Gather),
        registration: Some((Grouping::Individual, Caching::None)),
        contiguous: false,
        arena: false,
    },
    Method {
        name: "gather, one reg",
        policy: TransferPolicy::Force(Mechanism::Gather),
        registration: Some((Grouping::Ogr, Caching::None)),
        contiguous: false,
        arena: false,
    },
    Method {
        name: "gather, cached",
        policy: TransferPolicy::Force(Mechanism::Gather),
        registration: Some((Grouping::Individual, Caching::PinDown)),
        contiguous: false,
        arena: false,
    },
    Method {
        name: "hybrid",
        policy: TransferPolicy::Auto,
        registration: None,
        contiguous: false,
        arena: false,
    },
    Method {
        name: "pack, arena",
        policy: TransferPolicy::Force(Mechanism::Pack),
        registration: None,
        contiguous: false,
        arena: true,
    },
    Method {
        name: "gather, arena",
        policy: TransferPolicy::Force(Mechanism::Gather),
        registration: None,
        contiguous: false,
        arena: true,
    },
    Method {
        name: "hybrid, arena",
        policy: TransferPolicy::Auto,
        registration: None,
        contiguous: false,
        arena: true,
    },
];

fn pattern(seed: u64, length: usize) -> Vec<u8> {
    (0..length)
        .map(|i| ((i as u64).wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8)
        .collect()
}

/// The rows of the subarray of rank 0 in an `n` x `n` int array: (offset, length) in memory.
fn rows(n: usize) -> Vec<(usize, usize)> {
    let half = n / 2;
    (0..half)
        .map(|row| (row * n * ELEMENT_BYTES, half * ELEMENT_BYTES))
        .collect()
}

struct Subject {
    method: Method,
    registry: Option<Arc<Registry>>,
}

/// Runs the experiment and returns its report.
pub fn run(common: &CommonArgs) -> Result<Report, String> {
    let cluster = BenchCluster::open(common.cluster.as_deref(), SERVERS)?;
    let config = ClusterConfig::load(&cluster.file).map_err(|err| err.to_string())?;
    let client = Client::new(&config, &ClientOptions::default());
    match client.mkdir("/bench", 0o755) {
        Ok(_) => {}
        Err(err) if err.code() == Some(ErrorCode::Exists) => {}
        Err(err) => return Err(format!("mkdir /bench: {err}")),
    }
    let path = format!("/bench/subarray-{}", std::process::id());
    let mut file = client
        .create(
            &path,
            &CreateOptions {
                stripe_unit_bytes: 64 << 20,
                server_count: 1,
                ..CreateOptions::default()
            },
        )
        .map_err(|err| format!("create {path}: {err}"))?;
    let (registrar, registrar_name) = common.registrar(super::RegistrarKind::Fixed)?;
    let subjects: Vec<Subject> = METHODS
        .iter()
        .map(|&method| {
            let registry = match method.registration {
                Some((grouping, caching)) => Some(Arc::new(
                    Registry::new(registrar.clone(), Policy::new(grouping, caching))
                        .map_err(|err| format!("{}: registry: {err}", method.name))?,
                )),
                None => None,
            };
            Ok(Subject { method, registry })
        })
        .collect::<Result<_, String>>()?;
    let sizes: &[usize] = if common.quick {
        &[512, 1024, 2048]
    } else {
        &[512, 1024, 2048, 4096]
    };
    let repetitions = if common.quick { 7 } else { 9 };
    let mut rows_out = Vec::new();
    let mut verified = true;
    for &n in sizes {
        let array = pattern(n as u64, n * n * ELEMENT_BYTES);
        let mut arena = Arena::new(array.len()).map_err(|err| format!("arena: {err}"))?;
        arena.as_mut_slice().copy_from_slice(&array);
        let pieces = rows(n);
        let bytes: usize = pieces.iter().map(|&(_, length)| length).sum();
        let contiguous: Vec<u8> = pieces
            .iter()
            .flat_map(|&(offset, length)| array[offset..offset + length].iter().copied())
            .collect();
        let iterations = (if common.quick { 16 << 20 } else { 64 << 20 } / bytes).clamp(2, 64);
        let mut samples = vec![Vec::new(); subjects.len()];
        let mut last = vec![(0u64, 0u64, 0u64, 0f64); subjects.len()];
        for repetition in 0..repetitions {
            for turn in 0..subjects.len() {
                let index = (turn + repetition) % subjects.len();
                let subject = &subjects[index];
                file.set_transfer_policy(subject.method.policy);
                client.set_registration(subject.registry.clone());
                let source: &[u8] = if subject.method.arena {
                    arena.as_slice()
                } else {
                    &array
                };
                let memory: Vec<IoSlice<'_>> = if subject.method.contiguous {
                    vec![IoSlice::new(&contiguous)]
                } else {
                    pieces
                        .iter()
                        .map(|&(offset, length)| IoSlice::new(&source[offset..offset + length]))
                        .collect()
                };
                let target = [Piece::new(0, bytes as u64)];
                // Warm the connection and, for the cached method, the cache.
                file.write_list(&memory, &target)
                    .map_err(|err| err.to_string())?;
                let before = subject.registry.as_ref().map(|registry| registry.stats());
                let mut requests = 0;
                let mut one_sided = 0;
                for _ in 0..iterations {
                    let start = Instant::now();
                    let report = file
                        .write_list(&memory, &target)
                        .map_err(|err| format!("{}: {err}", subject.method.name))?;
                    samples[index].push(start.elapsed().as_secs_f64());
                    requests += report.requests;
                    one_sided += report.one_sided;
                }
                client.set_registration(None);
                let (registrations, registration_us) = match (&subject.registry, before) {
                    (Some(registry), Some(before)) => {
                        let after = registry.stats();
                        (
                            (after.registrations - before.registrations) / iterations as u64,
                            (after.registration_us + after.deregistration_us
                                - before.registration_us
                                - before.deregistration_us)
                                / iterations as f64,
                        )
                    }
                    _ => (0, 0.0),
                };
                last[index] = (requests, one_sided, registrations, registration_us);
                // The registrars share one array: a cache left holding its rows locked would
                // make the next method's mlock of them nearly free.
                if let Some(registry) = &subject.registry {
                    registry
                        .clear()
                        .map_err(|err| format!("{}: {err}", subject.method.name))?;
                }
                // Read back through a plain gather and compare.
                file.set_transfer_policy(TransferPolicy::Auto);
                let mut back = vec![0u8; bytes];
                file.read_list(&mut [IoSliceMut::new(&mut back)], &target)
                    .map_err(|err| err.to_string())?;
                if back != contiguous {
                    verified = false;
                }
            }
        }
        for (index, subject) in subjects.iter().enumerate() {
            let seconds = median(&samples[index]);
            let (requests, one_sided, registrations, registration_us) = last[index];
            rows_out.push(Row {
                case: format!("n={n}"),
                method: subject.method.name.to_owned(),
                mib_s: mib_s(bytes as u64, seconds),
                requests: requests / iterations as u64,
                pieces: 1,
                bytes: bytes as u64,
                seconds,
                extra: json!({
                    "memory_pieces": if subject.method.contiguous { 1 } else { pieces.len() },
                    "memory": if subject.method.arena { "arena" } else { "heap" },
                    "one_sided": one_sided > 0,
                    "registrations": registrations,
                    "registration_us": registration_us,
                }),
                skipped: None,
            });
        }
    }
    let raw = raw_case(&client, &mut file, common.quick, &mut verified)?;
    rows_out.extend(raw);
    print_table(&rows_out, sizes);
    let _ = client.unlink(&path);
    Ok(Report {
        bench: "subarray".to_owned(),
        quick: common.quick,
        config: json!({
            "servers": SERVERS,
            "clients": 1,
            "transport": "local",
            "element_bytes": ELEMENT_BYTES,
            "registrar": registrar_name,
            "sizes": sizes,
            "repetitions": repetitions,
            "timing": "each repetition runs every method in turn (order rotated), a block of calls each after one untimed warm-up call; seconds = the median of every timed call's own time over all repetitions, so a call that another tenant of the machine interrupted does not move it",
        }),
        verified,
        rows: rows_out,
    })
}

/// 64 KiB pieces read over `local` vs. raw `process_vm_writev` of the same pieces.
fn raw_case(
    client: &Client,
    file: &mut File,
    quick: bool,
    verified: &mut bool,
) -> Result<Vec<Row>, String> {
    const PIECE: usize = 64 << 10;
    let count = if quick { 128 } else { 256 };
    let bytes = PIECE * count;
    let data = pattern(99, bytes);
    file.set_transfer_policy(TransferPolicy::Force(Mechanism::Gather));
    client.set_registration(None);
    file.write_list(&[IoSlice::new(&data)], &[Piece::new(0, bytes as u64)])
        .map_err(|err| err.to_string())?;
    // Client memory: 64 KiB pieces with 4 KiB gaps.
    let mut memory = vec![0u8; count * (PIECE + 4096)];
    let repetitions = if quick { 15 } else { 31 };
    let (mut local, mut raw) = (Vec::new(), Vec::new());
    let source = pattern(5, bytes);
    // Both timed copies start with cold caches: the verification between them reads the
    // client's memory and the raw copy's source, which would leave the raw copy (this
    // process, this core) a warm source and target and the server's copy neither.
    let mut scratch = vec![1u8; EVICT_BYTES];
    for _ in 0..repetitions {
        {
            let mut slices: Vec<IoSliceMut<'_>> = memory
                .chunks_mut(PIECE + 4096)
                .map(|chunk| IoSliceMut::new(&mut chunk[..PIECE]))
                .collect();
            evict(&mut scratch);
            let start = Instant::now();
            file.read_list(&mut slices, &[Piece::new(0, bytes as u64)])
                .map_err(|err| err.to_string())?;
            local.push(start.elapsed().as_secs_f64());
        }
        let ok = memory
            .chunks(PIECE + 4096)
            .zip(data.chunks(PIECE))
            .all(|(got, want)| &got[..PIECE] == want);
        *verified &= ok;
        // The kernel alone: the same pieces, this process to itself.
        let targets: Vec<Segment> = memory
            .chunks(PIECE + 4096)
            .map(|chunk| Segment::new(chunk.as_ptr() as usize, PIECE))
            .collect();
        evict(&mut scratch);
        let start = Instant::now();
        raw_writev(&source, &targets)?;
        raw.push(start.elapsed().as_secs_f64());
        let ok = memory
            .chunks(PIECE + 4096)
            .zip(source.chunks(PIECE))
            .all(|(got, want)| &got[..PIECE] == want);
        *verified &= ok;
    }
    let row = |method: &str, seconds: f64, requests: u64| Row {
        case: "pieces=64KiB".to_owned(),
        method: method.to_owned(),
        mib_s: mib_s(bytes as u64, seconds),
        requests,
        pieces: count as u64,
        bytes: bytes as u64,
        seconds,
        extra: json!({ "piece_bytes": PIECE }),
        skipped: None,
    };
    Ok(vec![
        row("local read", median(&local), 1),
        row("raw process_vm_writev", median(&raw), 0),
    ])
}

/// Bytes written between timed copies to push earlier data out of the caches (more than the
/// per-core L2 and the data of one copy together).
const EVICT_BYTES: usize = 32 << 20;

/// Writes all of `scratch`, evicting what the caches held.
fn evict(scratch: &mut [u8]) {
    let next = scratch[0].wrapping_add(1);
    scratch.fill(next);
    std::hint::black_box(&scratch);
}

/// `process_vm_writev` of `source` into `targets` of this process, 1024 pieces a call.
fn raw_writev(source: &[u8], targets: &[Segment]) -> Result<(), String> {
    let segments: Vec<tessera_proto::RemoteSegment> = targets
        .iter()
        .map(|segment| tessera_proto::RemoteSegment {
            address: segment.address as u64,
            length: segment.length as u64,
            key: 0,
        })
        .collect();
    tessera_net::local::rma::push(std::process::id(), source, &segments, 0)
        .map(|_| ())
        .map_err(|err| err.to_string())
}

fn print_table(rows: &[Row], sizes: &[usize]) {
    eprintln!("subarray (seed 000 Fig. 3): one (n/2 x n/2)-int subarray client -> server, MiB/s");
    eprint!("{:<24}", "method");
    for n in sizes {
        eprint!("{:>10}", format!("n={n}"));
    }
    eprintln!();
    for method in METHODS {
        eprint!("{:<24}", method.name);
        for n in sizes {
            let case = format!("n={n}");
            let value = rows
                .iter()
                .find(|row| row.case == case && row.method == method.name)
                .map_or(0.0, |row| row.mib_s);
            eprint!("{value:>10.0}");
        }
        eprintln!();
    }
    for row in rows.iter().filter(|row| row.case == "pieces=64KiB") {
        eprintln!("64 KiB pieces: {:<24} {:>8.0} MiB/s", row.method, row.mib_s);
    }
    eprintln!("paper: gather/pack grows with size; hybrid follows the better of the two");
    eprintln!(
        "arena rows: the array in a shared arena (the local backend's registered memory), which the server reaches with plain copies"
    );
}
