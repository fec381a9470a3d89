//! The text report of `bench views`, one table per figure or table of the paper (Fig. 2,
//! Tables 2-3, Figs. 3-4, the phases of a call, §4.3), and the figure drawn from the same
//! rows.

use comfy_table::Table;

use super::rows::{case, paper_mib, view_figure, Part, ViewsRow};
use super::{CYCLIC_BLOCK_BYTES, DISTRIBUTIONS, PAPER_TABLE_2, PAPER_TABLE_3, PROCESSES, SERVERS};
use crate::report::{self, Direction, Figure, Line, Panel, Report};
use crate::workers::LIST_OFFSET_BYTES_PER_PIECE;

/// A number for a table cell, with `places` decimals.
fn cell(value: f64, places: usize) -> String {
    report::cell(value, places)
}

/// The row of `distribution` on stripes at side `n`.
fn striped<'a>(
    report: &'a Report<ViewsRow>,
    distribution: &str,
    n: u64,
    direction: Direction,
    method: &str,
) -> Result<&'a ViewsRow, String> {
    report.row(
        &case(Part::Distributions, distribution, n, direction),
        method,
    )
}

/// The row of the (*,BLOCK) layout match at side `n`.
fn matched<'a>(
    report: &'a Report<ViewsRow>,
    n: u64,
    direction: Direction,
    method: &str,
) -> Result<&'a ViewsRow, String> {
    report.row(
        &case(Part::LayoutMatch, DISTRIBUTIONS[1].name(), n, direction),
        method,
    )
}

/// The text report: the paper's Fig. 2, Tables 2 and 3, Figs. 3-4, where a call's time goes,
/// and §4.3, each table with the paper's figures beside it.
pub(super) fn text(report: &Report<ViewsRow>, sizes: &[u64]) -> Result<String, String> {
    let cyclic = DISTRIBUTIONS[2].name();
    let fig2 = speed_table(report, sizes)?;
    let table2 = request_table(report, sizes)?;
    let table3 = offset_table(report, sizes)?;
    let fig34 = layout_match_table(report, sizes)?;
    let phases = phase_table(report, sizes)?;
    let declare = declare_table(report, sizes)?;
    Ok(format!(
        "views: {PROCESSES} client processes x {SERVERS} I/O servers, n x n bytes, 64 KiB stripes, CYCLIC k = {CYCLIC_BLOCK_BYTES}, tcp\n\
         \nFig. 2: aggregate MiB/s on stripes (median per call over {} repetitions, all processes; v/l: of the medians; paired: median over the repetitions of view/list speed within one repetition)\n{fig2}\n\
         paper (16 x 16 nodes, Myrinet, ROMIO list I/O over PVFS): view I/O beats list I/O in every case of Fig. 2\n\
         \nTable 2: {cyclic} requests of one call, all processes (and the most of one process)\n{table2}\n\
         paper: ROMIO called PVFS list I/O (at most 64 pieces a call) thousands of times, view I/O once per node; Tessera's list I/O packs up to 65536 pieces in one request per server, so the request counts meet and the difference is in the offsets below\n\
         \nTable 3: {cyclic} access description sent per call, all processes (write)\n{table3}\n\
         list I/O sends 16 bytes per {CYCLIC_BLOCK_BYTES}-byte piece here, so its overhead is a flat {:.0}% that grows in bytes with n^2; the paper's k grew with n, so its percentage fell; view I/O sends 16 bytes per request whatever n\n\
         \nFig. 3-4: (*,BLOCK) view, 64 KiB stripes vs matching (*,BLOCK) pattern layout (MiB/s; speedup of medians, of bests, and paired within each repetition); contiguous: each process's quarter as one list piece to one server (stripe unit = n*n/4); tcp: the transport alone, one loopback TCP stream per process, each call a round trip of a 1-byte request and its quarter back (no header, file or storage), the bound of both directions and of reads sent from the page cache; tcp+file: the same with the page-cache copy of a server that copies between socket and page cache (the receiver pwrites each write to a cached file, the sender preads each read from one), the bound of writes\n{fig34}\n\
         paper (Fig. 4): view I/O speedup grows with the matrix, up to 6x for writes and 4x for reads at 16 MB\n\
         \nWhere a call's time goes (slowest process; client plan and the slowest server's type walk timed apart after the calls, the walk with the iods' code: a view's first call of a range pays them inside send (plan) or reply (walk), the timed calls repeat one range and reuse the view's kept plan and the iods' kept shares; send = sending every request, a write's data as far as the sockets take it; reply = waiting for and reading the replies: the servers' walk and storage, the rest of a write's transfer, a read's data; other = the call's checks, planning and carving before the sends)\n{phases}\n\
         \n§4.3: view declaration time / one call, %\n{declare}\n\
         paper: under 12% (writes) and 10% (reads) for small matrices, about 1% for large ones, near 0 on the matching layout\n\
         verified: {}\n",
        report.meta.repetitions,
        LIST_OFFSET_BYTES_PER_PIECE as f64 / CYCLIC_BLOCK_BYTES as f64 * 100.0,
        report.verified
    ))
}

/// Fig. 2: each distribution's list and view MiB/s on stripes, their ratio and the paired
/// ratio.
fn speed_table(report: &Report<ViewsRow>, sizes: &[u64]) -> Result<Table, String> {
    let mut fig2 = report::table([
        "op", "n", "KiB", "BB list", "BB view", "v/l", "paired", "*B list", "*B view", "v/l",
        "paired", "CC list", "CC view", "v/l", "paired",
    ]);
    for direction in Direction::BOTH {
        for &n in sizes {
            let mut cells = vec![
                direction.to_string(),
                n.to_string(),
                (n * n / 1024).to_string(),
            ];
            for distribution in DISTRIBUTIONS {
                let list = striped(report, distribution.name(), n, direction, "list")?;
                let view = striped(report, distribution.name(), n, direction, "view")?;
                let paired = view_figure(view, "paired_vs_list", view.paired_vs_list)?;
                cells.extend([
                    cell(list.measure.mib_s, 1),
                    cell(view.measure.mib_s, 1),
                    report::ratio(view.measure.mib_s, list.measure.mib_s),
                    format!("{paired:.2}x"),
                ]);
            }
            fig2.add_row(cells);
        }
    }
    Ok(fig2)
}

/// Table 2: the (CYCLIC,CYCLIC) requests of one call, beside the paper's.
fn request_table(report: &Report<ViewsRow>, sizes: &[u64]) -> Result<Table, String> {
    let cyclic = DISTRIBUTIONS[2].name();
    let mut table2 = report::table([
        "op",
        "n",
        "list",
        "view",
        "list/proc",
        "view/proc",
        "paper list",
        "paper view",
    ]);
    for direction in Direction::BOTH {
        for &n in sizes {
            let list = striped(report, cyclic, n, direction, "list")?;
            let view = striped(report, cyclic, n, direction, "view")?;
            let paper = paper_mib(n).and_then(|mib| PAPER_TABLE_2.iter().find(|row| row.0 == mib));
            table2.add_row([
                direction.to_string(),
                n.to_string(),
                list.requests.to_string(),
                view.requests.to_string(),
                list.requests_per_process.to_string(),
                view.requests_per_process.to_string(),
                paper.map_or_else(
                    || "-".to_owned(),
                    |&(mib, list, _)| format!("{list} ({mib} MB)"),
                ),
                paper.map_or_else(|| "-".to_owned(), |&(_, _, view)| view.to_string()),
            ]);
        }
    }
    Ok(table2)
}

/// Table 3: the (CYCLIC,CYCLIC) access description sent per call (writes), beside the
/// paper's.
fn offset_table(report: &Report<ViewsRow>, sizes: &[u64]) -> Result<Table, String> {
    let cyclic = DISTRIBUTIONS[2].name();
    let mut table3 = report::table([
        "n",
        "data",
        "list off",
        "list %",
        "view off",
        "view %",
        "view decl",
        "paper off",
        "paper %",
    ]);
    for &n in sizes {
        let list = striped(report, cyclic, n, Direction::Write, "list")?;
        let view = striped(report, cyclic, n, Direction::Write, "view")?;
        let paper = paper_mib(n).and_then(|mib| PAPER_TABLE_3.iter().find(|row| row.0 == mib));
        table3.add_row([
            n.to_string(),
            (n * n).to_string(),
            list.offset_bytes.to_string(),
            format!("{:.2}%", list.offset_overhead_pct),
            view.offset_bytes.to_string(),
            format!("{:.4}%", view.offset_overhead_pct),
            view_figure(view, "declare_bytes", view.declare_bytes)?.to_string(),
            paper.map_or_else(
                || "-".to_owned(),
                |&(mib, bytes, _)| format!("{bytes} ({mib} MB)"),
            ),
            paper.map_or_else(|| "-".to_owned(), |&(_, _, pct)| format!("{pct:.2}%")),
        ]);
    }
    Ok(table3)
}

/// Figs. 3-4: the (*,BLOCK) view on stripes vs the matching pattern layout, and its bounds
/// (contiguous, tcp, tcp+file).
fn layout_match_table(report: &Report<ViewsRow>, sizes: &[u64]) -> Result<Table, String> {
    let mut fig34 = report::table([
        "op",
        "n",
        "stripe",
        "pattern",
        "speedup",
        "best",
        "paired",
        "calls/srv s",
        "calls/srv p",
        "contiguous",
        "pattern/contiguous",
        "tcp",
        "pattern/tcp",
        "tcp/stripe",
        "tcp+file",
        "pattern/(tcp+file)",
        "(tcp+file)/stripe",
    ]);
    for direction in Direction::BOTH {
        for &n in sizes {
            let stripe = matched(report, n, direction, "view-stripe")?;
            let pattern = matched(report, n, direction, "view-pattern")?;
            let contiguous = matched(report, n, direction, "contiguous")?;
            let tcp = matched(report, n, direction, "tcp")?;
            let tcp_file = matched(report, n, direction, "tcp+file")?;
            fig34.add_row([
                direction.to_string(),
                n.to_string(),
                cell(stripe.measure.mib_s, 1),
                cell(pattern.measure.mib_s, 1),
                format!("{:.2}x", view_figure(pattern, "speedup", pattern.speedup)?),
                format!(
                    "{:.2}x",
                    view_figure(pattern, "speedup_best", pattern.speedup_best)?
                ),
                format!(
                    "{:.2}x",
                    view_figure(pattern, "speedup_paired", pattern.speedup_paired)?
                ),
                cell(stripe.storage_calls_per_server, 1),
                cell(pattern.storage_calls_per_server, 1),
                cell(contiguous.measure.mib_s, 1),
                report::ratio(pattern.measure.mib_s, contiguous.measure.mib_s),
                cell(tcp.measure.mib_s, 1),
                report::ratio(pattern.measure.mib_s, tcp.measure.mib_s),
                report::ratio(tcp.measure.mib_s, stripe.measure.mib_s),
                cell(tcp_file.measure.mib_s, 1),
                report::ratio(pattern.measure.mib_s, tcp_file.measure.mib_s),
                report::ratio(tcp_file.measure.mib_s, stripe.measure.mib_s),
            ]);
        }
    }
    Ok(fig34)
}

/// Where a call's time goes: client plan, server walk, send, reply and the rest (n >= 512).
fn phase_table(report: &Report<ViewsRow>, sizes: &[u64]) -> Result<Table, String> {
    let star_block = DISTRIBUTIONS[1].name();
    let mut phases = report::table([
        "op",
        "n",
        "method",
        "call µs",
        "client plan µs",
        "server walk µs",
        "send µs",
        "reply µs",
        "other µs",
        "storage calls/srv",
    ]);
    for direction in Direction::BOTH {
        for &n in sizes.iter().filter(|&&n| n >= 512) {
            for (name, view) in [
                (
                    "BB list",
                    striped(report, DISTRIBUTIONS[0].name(), n, direction, "list")?,
                ),
                (
                    "BB view",
                    striped(report, DISTRIBUTIONS[0].name(), n, direction, "view")?,
                ),
                (
                    "*B list",
                    striped(report, star_block, n, direction, "list")?,
                ),
                (
                    "*B view",
                    striped(report, star_block, n, direction, "view")?,
                ),
                (
                    "*B view, pattern",
                    matched(report, n, direction, "view-pattern")?,
                ),
            ] {
                let call_us = view.measure.seconds * 1e6;
                let share = |us: f64| format!("{us:.0} ({:.0}%)", us / call_us * 100.0);
                let optional = |us: Option<f64>| us.map_or_else(|| "-".to_owned(), share);
                phases.add_row([
                    direction.to_string(),
                    n.to_string(),
                    name.to_owned(),
                    cell(call_us, 0),
                    optional(view.plan_us),
                    optional(view.server_walk_us),
                    share(view.send_us),
                    share(view.reply_us),
                    share((call_us - view.send_us - view.reply_us).max(0.0)),
                    cell(view.storage_calls_per_server, 1),
                ]);
            }
        }
    }
    Ok(phases)
}

/// §4.3: view declaration time over one call's, per distribution.
fn declare_table(report: &Report<ViewsRow>, sizes: &[u64]) -> Result<Table, String> {
    let star_block = DISTRIBUTIONS[1].name();
    let cyclic = DISTRIBUTIONS[2].name();
    let mut declare = report::table(["op", "n", "BB", "*B", "CC", "*B pattern"]);
    for direction in Direction::BOTH {
        for &n in sizes {
            let mut cells = vec![direction.to_string(), n.to_string()];
            for view in [
                striped(report, DISTRIBUTIONS[0].name(), n, direction, "view")?,
                striped(report, star_block, n, direction, "view")?,
                striped(report, cyclic, n, direction, "view")?,
                matched(report, n, direction, "view-pattern")?,
            ] {
                let pct = view_figure(view, "declare_overhead_pct", view.declare_overhead_pct)?;
                cells.push(format!("{pct:.1}%"));
            }
            declare.add_row(cells);
        }
    }
    Ok(declare)
}

/// Fig. 2 and Figs. 3-4: MiB/s against n, writes and reads, one line per (distribution,
/// method) and the (*,BLOCK) view on the matching layout.
pub(super) fn figure(report: &Report<ViewsRow>, sizes: &[u64]) -> Result<Figure, String> {
    let point = |row: &ViewsRow| row.measure.point(row.n as f64);
    let mut panels = Vec::new();
    for direction in Direction::BOTH {
        let mut panel = Panel::of_direction(direction, "matrix side n (bytes)");
        for distribution in DISTRIBUTIONS {
            for method in ["list", "view"] {
                let points = sizes
                    .iter()
                    .map(|&n| {
                        let case = case(Part::Distributions, distribution.name(), n, direction);
                        report.row(&case, method).map(point)
                    })
                    .collect::<Result<_, String>>()?;
                panel.lines.push(Line {
                    name: format!("{} {method}", distribution.name()),
                    points,
                });
            }
        }
        let points = sizes
            .iter()
            .map(|&n| {
                let case = case(Part::LayoutMatch, DISTRIBUTIONS[1].name(), n, direction);
                report.row(&case, "view-pattern").map(point)
            })
            .collect::<Result<_, String>>()?;
        panel.lines.push(Line {
            name: format!("{} view, pattern layout", DISTRIBUTIONS[1].name()),
            points,
        });
        panels.push(panel);
    }
    Ok(Figure {
        stem: "views".to_owned(),
        title: format!(
            "views: {PROCESSES} clients x {SERVERS} servers over tcp (median, min-max of {} repetitions)",
            report.meta.repetitions
        ),
        panels,
    })
}
