//! The seed's figures this simulator is checked against, typed in with their source.
//!
//! Seed 001, chapter 6, Table 6.3: "Mean READ latencies and speedups over DEMOTE for
//! single-client synthetic workloads (DE: DEMOTE; DB: Demote Buffering)", in ms, for 4 KiB
//! blocks, client and server caches of 16384 blocks, a 10-block DEMOTE buffer, and working
//! sets of 32767 (Seq), 32768 (Random) and 49152 (Zipf) blocks (§6.4.2). Table 6.2 gives the
//! hit rates behind them.

/// One cell pair of Table 6.3.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaperRow {
    /// Network (Table 6.1's names).
    pub network: &'static str,
    /// Workload (this simulator's name for it).
    pub workload: &'static str,
    /// Mean READ latency with eager DEMOTE, ms.
    pub demote_ms: f64,
    /// Mean READ latency with DEMOTE buffering, ms.
    pub buffered_ms: f64,
}

impl PaperRow {
    /// The paper's speedup of DEMOTE buffering over DEMOTE.
    pub fn speedup(&self) -> f64 {
        self.demote_ms / self.buffered_ms
    }
}

/// Seed 001 Table 6.3, row by row.
pub const TABLE_6_3: [PaperRow; 9] = [
    row("FE", "seq", 1.21, 1.09),
    row("FE", "random", 0.99, 0.92),
    row("FE", "zipf", 0.84, 0.83),
    row("IBNice", "seq", 0.26, 0.18),
    row("IBNice", "random", 0.52, 0.46),
    row("IBNice", "zipf", 0.73, 0.71),
    row("VAPI", "seq", 0.078, 0.056),
    row("VAPI", "random", 0.41, 0.40),
    row("VAPI", "zipf", 0.704, 0.70),
];

const fn row(
    network: &'static str,
    workload: &'static str,
    demote_ms: f64,
    buffered_ms: f64,
) -> PaperRow {
    PaperRow {
        network,
        workload,
        demote_ms,
        buffered_ms,
    }
}

/// Seed 001 Table 6.2: client and server cache hit rates (fractions of the reads) with DEMOTE.
pub const TABLE_6_2: [(&str, f64, f64); 3] = [
    ("seq", 0.0, 1.0),
    ("random", 0.50, 0.46),
    ("zipf", 0.86, 0.09),
];

/// The paper's row for a network and workload, if it has one.
pub fn paper_row(network: &str, workload: &str) -> Option<PaperRow> {
    TABLE_6_3
        .iter()
        .copied()
        .find(|row| row.network == network && row.workload == workload)
}
