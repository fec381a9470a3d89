//! The rows of `bench views` ([`ViewsRow`]): what each turn measured at each matrix side,
//! turned into medians and per-call figures, as rows of the distributions on stripes and of
//! the (*,BLOCK) layout match with their speedups.

use serde::Serialize;

use super::{Measured, Turn, PAPER_TABLE_2};
use crate::report::{self, Direction, Measure, Spread};
use crate::workers::MatrixDistribution;

/// Which comparison a row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Part {
    /// List vs view I/O per distribution, on stripes (Fig. 2, Tables 2-3).
    Distributions,
    /// The (*,BLOCK) view on stripes vs on the matching pattern layout (Figs. 3-4).
    LayoutMatch,
}

/// One (part, distribution, n, direction, method) of views.
#[derive(Debug, Clone, Serialize)]
pub struct ViewsRow {
    /// Which comparison.
    pub part: Part,
    /// The HPF distribution of the shares.
    pub distribution: &'static str,
    /// The matrix side in bytes.
    pub n: u64,
    /// Writes or reads.
    pub direction: Direction,
    /// `list`, `view`, `view-stripe` or `view-pattern`.
    pub method: String,
    /// MiB/s and seconds, median over the repetitions, and the MiB/s range.
    #[serde(flatten)]
    pub measure: Measure,
    /// Requests per call, all processes.
    pub requests: u64,
    /// Storage pieces the servers touched per call, all processes.
    pub pieces: u64,
    /// Bytes per call, all processes.
    pub bytes: u64,
    /// The most requests of one process per call.
    pub requests_per_process: u64,
    /// Access description bytes sent per call, all processes.
    pub offset_bytes: u64,
    /// `offset_bytes` over the data bytes, %.
    pub offset_overhead_pct: f64,
    /// Storage pieces per call / servers reached.
    pub storage_calls_per_server: f64,
    /// Servers reached.
    pub servers: u64,
    /// File pieces of one call, all processes.
    pub file_pieces: u64,
    /// Calls per timed step.
    pub calls: u64,
    /// Repetitions measured.
    pub repetitions: usize,
    /// View declaration bytes, sent once (views only).
    pub declare_bytes: Option<u64>,
    /// View declaration seconds, median (views only).
    pub declare_seconds: Option<f64>,
    /// Declaration time over one call's, % (views only).
    pub declare_overhead_pct: Option<f64>,
    /// Views: the client's planning of a first call of the range, µs (measured apart, slowest
    /// process; later calls reuse the view's kept plan).
    pub plan_us: Option<f64>,
    /// Views: the slowest server's type walk of a first request of the range, µs (measured
    /// apart with the iod's code, slowest process; later requests reuse the kept share).
    pub server_walk_us: Option<f64>,
    /// Microseconds one call spent sending its requests (slowest process, median over the
    /// repetitions).
    pub send_us: f64,
    /// Microseconds one call spent receiving replies after its sends (slowest process,
    /// median over the repetitions).
    pub reply_us: f64,
    /// Views on stripes: the median over the repetitions of list seconds / view seconds of
    /// one call, both measured in the same repetition (how much faster view I/O ran, with
    /// the machine's drift between repetitions taken out).
    pub paired_vs_list: Option<f64>,
    /// MiB/s over the stripe view's (layout match only).
    pub speedup: Option<f64>,
    /// The fastest repetitions' speedup (layout match only).
    pub speedup_best: Option<f64>,
    /// The speedup paired within each repetition, as `paired_vs_list` (layout match only).
    pub speedup_paired: Option<f64>,
}

impl report::Row for ViewsRow {
    fn key(&self) -> (String, &str) {
        (
            case(self.part, self.distribution, self.n, self.direction),
            &self.method,
        )
    }
}

/// The case label of a row.
pub(super) fn case(part: Part, distribution: &str, n: u64, direction: Direction) -> String {
    match part {
        Part::Distributions => format!("{distribution} n={n} {direction}"),
        Part::LayoutMatch => format!("match {distribution} n={n} {direction}"),
    }
}

/// The rows of side `n`: for each direction, every turn's row of the distributions on
/// stripes, then the three rows of the layout match (`view-stripe`, `view-pattern`,
/// `contiguous`) with their speedups over the striped view.
pub(super) fn size_rows(
    n: u64,
    turns: &[Turn],
    measured: &[[Measured; 2]],
    repetitions: usize,
) -> Result<Vec<ViewsRow>, String> {
    let side = Side {
        n,
        turns,
        measured,
        repetitions,
    };
    let star_block_view = side.stripe_turn(MatrixDistribution::StarBlock, "view")?;
    let mut rows = Vec::new();
    for (slot, direction) in Direction::BOTH.into_iter().enumerate() {
        let mut stripe_view = None;
        let mut pattern_view = None;
        let mut contiguous = None;
        for (turn, measured) in turns.iter().zip(measured) {
            let row = side.turn_row(*turn, &measured[slot], slot, direction)?;
            if turn.contiguous {
                contiguous = Some(row);
                continue;
            }
            if turn.distribution == MatrixDistribution::StarBlock && turn.via == "view" {
                if turn.pattern_file {
                    pattern_view = Some(row.clone());
                } else {
                    stripe_view = Some(row.clone());
                }
            }
            if !turn.pattern_file {
                rows.push(row);
            }
        }
        let (Some(stripe), Some(pattern), Some(contiguous)) =
            (stripe_view, pattern_view, contiguous)
        else {
            return Err(format!(
                "bench views: n={n} {direction}: the (*,BLOCK) view was not measured on both layouts"
            ));
        };
        rows.extend(side.layout_match_rows(star_block_view, slot, &stripe, pattern, contiguous));
    }
    Ok(rows)
}

/// What was measured at one matrix side, every turn in both directions.
struct Side<'a> {
    n: u64,
    turns: &'a [Turn],
    measured: &'a [[Measured; 2]],
    repetitions: usize,
}

impl Side<'_> {
    /// The index of the turn of `distribution` and `via` on stripes.
    fn stripe_turn(&self, distribution: MatrixDistribution, via: &str) -> Result<usize, String> {
        self.turns
            .iter()
            .position(|turn| {
                turn.distribution == distribution
                    && turn.via == via
                    && !turn.pattern_file
                    && !turn.contiguous
            })
            .ok_or_else(|| format!("bench views: no {via} turn on stripes"))
    }

    /// The row of one turn in one direction (`slot`), as a row of the distributions: its
    /// medians, its per-call figures and, for a view on stripes, its speed paired with the
    /// list's of the same distribution.
    fn turn_row(
        &self,
        turn: Turn,
        measured: &Measured,
        slot: usize,
        direction: Direction,
    ) -> Result<ViewsRow, String> {
        let n = self.n;
        let figures = &measured.figures;
        let distribution = turn.distribution.name();
        let unmeasured = |err: String| {
            format!(
                "bench views: case \"{}\", method \"{}\": {err}",
                case(Part::Distributions, distribution, n, direction),
                turn.method()
            )
        };
        let seconds = Spread::of(&measured.seconds).map_err(unmeasured)?;
        let declare_seconds = if turn.via == "view" {
            Some(
                Spread::of(&measured.declare_seconds)
                    .map_err(unmeasured)?
                    .median,
            )
        } else {
            None
        };
        let paired_vs_list = if turn.via == "view" && !turn.pattern_file {
            let list = &self.measured[self.stripe_turn(turn.distribution, "list")?][slot].seconds;
            Some(report::paired_ratio(list, &measured.seconds))
        } else {
            None
        };
        Ok(ViewsRow {
            part: Part::Distributions,
            distribution,
            n,
            direction,
            method: turn.method().to_owned(),
            measure: Measure::of_seconds(seconds, figures.bytes),
            requests: figures.requests,
            pieces: figures.storage_pieces,
            bytes: figures.bytes,
            requests_per_process: figures.requests_per_process,
            offset_bytes: figures.offset_bytes,
            offset_overhead_pct: figures.offset_bytes as f64 / figures.bytes.max(1) as f64 * 100.0,
            storage_calls_per_server: figures.storage_pieces as f64 / figures.servers.max(1) as f64,
            servers: figures.servers,
            file_pieces: figures.file_pieces,
            calls: measured.calls,
            repetitions: self.repetitions,
            declare_bytes: declare_seconds.map(|_| figures.declare_bytes),
            declare_seconds,
            declare_overhead_pct: declare_seconds.map(|declare| declare / seconds.median * 100.0),
            plan_us: declare_seconds.map(|_| figures.plan_seconds * 1e6),
            server_walk_us: declare_seconds.map(|_| figures.server_walk_seconds * 1e6),
            send_us: median(measured.phases.iter().map(|phase| phase.0)) * 1e6,
            reply_us: median(measured.phases.iter().map(|phase| phase.1)) * 1e6,
            paired_vs_list,
            speedup: None,
            speedup_best: None,
            speedup_paired: None,
        })
    }

    /// The layout match's rows in one direction: the (*,BLOCK) view on stripes, on the
    /// matching pattern layout and the contiguous bound, each with its speedup over the view
    /// on stripes (of the medians, of the bests, and paired within each repetition).
    fn layout_match_rows(
        &self,
        star_block_view: usize,
        slot: usize,
        stripe: &ViewsRow,
        pattern: ViewsRow,
        contiguous: ViewsRow,
    ) -> [ViewsRow; 3] {
        let speedup = pattern.measure.mib_s / stripe.measure.mib_s.max(1e-9);
        let speedup_best = pattern.measure.mib_s_max / stripe.measure.mib_s_max.max(1e-9);
        let stripe_seconds = &self.measured[star_block_view][slot].seconds;
        let paired = |method: &str| {
            self.turns
                .iter()
                .position(|turn| turn.method() == method)
                .map(|index| {
                    report::paired_ratio(stripe_seconds, &self.measured[index][slot].seconds)
                })
        };
        let contiguous_speedup = contiguous.measure.mib_s / stripe.measure.mib_s.max(1e-9);
        let contiguous_best = contiguous.measure.mib_s_max / stripe.measure.mib_s_max.max(1e-9);
        [
            ViewsRow {
                part: Part::LayoutMatch,
                method: "view-stripe".to_owned(),
                speedup: Some(1.0),
                ..stripe.clone()
            },
            ViewsRow {
                part: Part::LayoutMatch,
                speedup: Some(speedup),
                speedup_best: Some(speedup_best),
                speedup_paired: paired("view-pattern"),
                ..pattern
            },
            ViewsRow {
                part: Part::LayoutMatch,
                speedup: Some(contiguous_speedup),
                speedup_best: Some(contiguous_best),
                speedup_paired: paired("contiguous"),
                ..contiguous
            },
        ]
    }
}

/// The median of `values` (0 for none).
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// The paper's matrix size in MiB for side `n`, if it reports one.
pub(super) fn paper_mib(n: u64) -> Option<u64> {
    let bytes = n * n;
    bytes
        .is_multiple_of(1 << 20)
        .then_some(bytes >> 20)
        .filter(|mib| PAPER_TABLE_2.iter().any(|&(paper, _, _)| paper == *mib))
}

/// A figure a view row must have, else an error naming it.
pub(super) fn view_figure<T>(row: &ViewsRow, name: &str, value: Option<T>) -> Result<T, String> {
    value.ok_or_else(|| {
        format!(
            "bench views: case \"{}\", method \"{}\" has no {name}",
            report::Row::key(row).0,
            row.method
        )
    })
}
