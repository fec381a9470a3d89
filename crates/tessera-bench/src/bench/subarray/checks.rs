//! What the iod's checks of data requests cost subarray's gather: the same list calls (heap
//! memory, the server pulls the rows one-sidedly) against one iod run inside this process
//! ([`InProcessCluster`]) with its checks on and off (capabilities, and the one-sided path's
//! client credentials, pin checks and stall watch), the two alternating call by call in an
//! order shuffled per round. The client is this process: the iod's mover reaches it as it
//! reaches any client on the host, through its pidfd and `/proc/PID/mem`.

use std::io::{IoSlice, IoSliceMut};
use std::time::Instant;

use tessera_client::{
    Client, ClientOptions, ClusterConfig, CreateOptions, Mechanism, Piece, TransferPolicy,
};

use super::{pattern, rows, Part, SubarrayRow, ELEMENT_BYTES, SERVERS};
use crate::bench::inproc::InProcessCluster;
use crate::report::{self, Measure, Spread};

/// The two rows of each n: checks on, then off.
pub(super) const METHODS: [&str; 2] = ["gather, checked", "gather, unchecked"];

/// The rows of every n in `sizes`, `repetitions` each; `verified` turns false when a read
/// back differs. `step` is called once per n.
pub(super) fn measure(
    sizes: &[usize],
    repetitions: usize,
    call_budget: usize,
    verified: &mut bool,
    mut step: impl FnMut(usize),
) -> Result<Vec<SubarrayRow>, String> {
    let cluster = InProcessCluster::start(SERVERS)?;
    let config = ClusterConfig::load(&cluster.file).map_err(|err| err.to_string())?;
    let client = Client::new(&config, &ClientOptions::default());
    let path = "/subarray-checks";
    let mut file = client
        .create(
            path,
            &CreateOptions {
                stripe_unit_bytes: 64 << 20,
                server_count: 1,
                ..CreateOptions::default()
            },
        )
        .map_err(|err| format!("create {path}: {err}"))?;
    file.set_transfer_policy(TransferPolicy::Force(Mechanism::Gather));
    let mut out = Vec::new();
    for &n in sizes {
        let case = format!("bench subarray: checks, n={n}");
        let array = pattern(n as u64, n * n * ELEMENT_BYTES);
        let pieces = rows(n);
        let memory: Vec<IoSlice<'_>> = pieces
            .iter()
            .map(|&(offset, length)| IoSlice::new(&array[offset..offset + length]))
            .collect();
        let bytes: usize = pieces.iter().map(|&(_, length)| length).sum();
        let target = [Piece::new(0, bytes as u64)];
        let iterations = (call_budget / bytes).clamp(2, 256);
        // Per method: each repetition's median call; the requests and one-sided requests of
        // the last repetition.
        let mut medians = [Vec::new(), Vec::new()];
        let mut counts = [(0u64, 0u64); 2];
        for repetition in 0..repetitions {
            let mut calls = [
                Vec::with_capacity(iterations),
                Vec::with_capacity(iterations),
            ];
            counts = [(0, 0); 2];
            for on in [true, false] {
                cluster.check(on);
                file.write_list(&memory, &target)
                    .map_err(|err| format!("{case}: {err}"))?;
            }
            for iteration in 0..iterations {
                for method in report::turn_order(repetition * iterations + iteration, 2) {
                    cluster.check(method == 0);
                    let start = Instant::now();
                    let report = file
                        .write_list(&memory, &target)
                        .map_err(|err| format!("{case}, {}: {err}", METHODS[method]))?;
                    calls[method].push(start.elapsed().as_secs_f64());
                    counts[method].0 += report.requests;
                    counts[method].1 += report.one_sided;
                }
            }
            for (method, calls) in calls.iter().enumerate() {
                medians[method].push(
                    Spread::of(calls)
                        .map_err(|err| format!("{case}, {}: {err}", METHODS[method]))?
                        .median,
                );
            }
        }
        cluster.check(true);
        let mut back = vec![0u8; bytes];
        file.read_list(&mut [IoSliceMut::new(&mut back)], &target)
            .map_err(|err| format!("{case}: read back: {err}"))?;
        let contiguous: Vec<u8> = memory
            .iter()
            .flat_map(|slice| slice.iter().copied())
            .collect();
        *verified &= back == contiguous;
        for (method, name) in METHODS.iter().enumerate() {
            let seconds =
                Spread::of(&medians[method]).map_err(|err| format!("{case}, {name}: {err}"))?;
            let (requests, one_sided) = counts[method];
            let measure = Measure::of_seconds(seconds, bytes as u64);
            out.push(SubarrayRow {
                requests: requests / iterations as u64,
                memory_pieces: pieces.len() as u64,
                piece_bytes: n / 2 * ELEMENT_BYTES,
                one_sided: one_sided > 0,
                // Checked speed over unchecked, within each repetition.
                paired_vs_unchecked: (method == 0)
                    .then(|| report::paired_ratio(&medians[1], &medians[0])),
                ..SubarrayRow::plain(Part::Checks, Some(n), name, measure, bytes as u64)
            });
        }
        step(n);
    }
    let _ = client.unlink(path);
    Ok(out)
}
