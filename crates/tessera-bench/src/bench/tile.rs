//! `tessera bench tile` (seed 001 §3.4.3, Figs. 3.8-3.9: mpi-tile-io).
//!
//! Four client processes each render one tile of a 2 x 2 display wall of 1024 x 768 pixels
//! of 24 bits: the file is the 2048 x 1536 array of 3-byte elements in C order (9 MiB),
//! striped over four servers (64 KiB units). A process's tile is contiguous in memory and
//! 768 file pieces of 3072 bytes in the file, each between two of its neighbour's. The four
//! methods and four cases of `tessera bench blockcol` run on it, interleaved the same way
//! (see [`super::blockcol::Sweep`]); every read is verified byte by byte.

use serde_json::json;

use super::blockcol::{
    case_label, case_lines, cases_config, create, methods_config, open_cluster, rows, sweep_table,
    Case, Sweep, SweepRow,
};
use super::CommonArgs;
use crate::report::{Figure, Meta, Outcome, Panel, Report, Scale};
use crate::workers::{ArrayMethod, ArrayShare};

const SERVERS: u16 = 4;
const SHARE: ArrayShare = ArrayShare::Tile {
    tile_rows: 768,
    tile_columns: 1024,
    element_bytes: 3,
    grid_rows: 2,
    grid_columns: 2,
};

/// Seed 001 §3.4.3 (Fig. 3.8, write without sync and cached read): list+ADS over
/// (multiple, list, ROMIO sieve), for (write, read).
const PAPER_ADS_OVER: [(ArrayMethod, f64, f64); 3] = [
    (ArrayMethod::Multiple, 5.7, 8.8),
    (ArrayMethod::List, 1.084, 1.45),
    (ArrayMethod::Sieve, 5.7, 1.18),
];

/// Runs the experiment and writes its report.
pub fn run(common: &CommonArgs) -> Result<Outcome, String> {
    let (cluster, client) = open_cluster(common)?;
    let path = format!("/bench/tile-{}", std::process::id());
    // The same 9 MiB file in both modes: quick only repeats less.
    let repetitions = if common.quick { 7 } else { 15 };
    let mut sweep = Sweep::new(&cluster, "tile")?;
    create(&client, &path)?;
    let measured = sweep.measure(&path, SHARE, repetitions)?;
    let _ = client.unlink(&path);
    let uncached = sweep.uncached();
    let report = Report {
        bench: "tile",
        quick: common.quick,
        meta: Meta::now(repetitions),
        config: json!({
            "servers": SERVERS,
            "clients": SHARE.processes(),
            "transport": "tcp",
            "array": "mpi-tile-io: 2 x 2 tiles of 1024 x 768 elements of 24 bits, 2048 x 1536 elements in C order (9 MiB); process r owns tile r (row-major): memory contiguous, 768 file pieces of 3072 bytes",
            "tile_elements": [1024, 768],
            "grid": [2, 2],
            "element_bytes": 3,
            "file_bytes": SHARE.array_bytes(),
            "stripe_unit_bytes": tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT,
            "methods": methods_config(),
            "cases": cases_config(uncached),
            "repetitions": repetitions,
            "timing": "as blockcol: seconds per call = slowest process / calls; mib_s from the median over the repetitions",
            "figures": "as blockcol: per call, all processes",
            "verify": "every byte read back == expected_byte(file offset, generation of the last write)",
        }),
        verified: sweep.verified,
        rows: rows(&measured, None, repetitions, uncached)
            .map_err(|err| format!("bench tile: {err}"))?,
    };
    drop(sweep);
    let text = text(&report)?;
    report.finish(common, &text, &[figure(&report)?])
}

fn text(report: &Report<SweepRow>) -> Result<String, String> {
    let cases: Vec<(String, Vec<String>)> = Case::ALL
        .iter()
        .map(|&case| (case_label(case, None), vec![case.name().to_owned()]))
        .collect();
    let ratios = [
        (ArrayMethod::ListAds, ArrayMethod::Multiple),
        (ArrayMethod::ListAds, ArrayMethod::List),
        (ArrayMethod::ListAds, ArrayMethod::Sieve),
    ];
    let (table, skipped) = sweep_table(report, &["case"], &cases, &ratios)?;
    let paper: Vec<String> = PAPER_ADS_OVER
        .iter()
        .map(|(method, write, read)| {
            let name = match method {
                ArrayMethod::Multiple => "mult",
                other => other.name(),
            };
            format!("ads/{name} {write}x / {read}x")
        })
        .collect();
    Ok(format!(
        "tile: mpi-tile-io, 2 x 2 tiles of 1024 x 768 x 24-bit (9 MiB), 4 clients x {SERVERS} I/O servers, 64 KiB stripes, tcp (MiB/s, all processes, median per call of {} repetitions)\n{table}\n{skipped}\
         paper (001 Fig. 3.8, write no sync / read cached): {}\n\
         paper (001 Fig. 3.9, with disk effects): list+ADS still best for writes; for reads ROMIO sieve beats list+ADS (one request against six pairs of 128-piece requests)\n\
         verified: {}\n",
        report.meta.repetitions,
        paper.join("; "),
        report.verified
    ))
}

/// 001 Figs. 3.8-3.9: MiB/s per case (x) and method (line).
fn figure(report: &Report<SweepRow>) -> Result<Figure, String> {
    let mut panel = Panel::categorical(
        "Figs. 3.8-3.9",
        ("case", Case::ALL.iter().map(|case| case.name())),
        ("MiB/s (all processes)", Scale::Log10),
    );
    let mut lines = Vec::new();
    for (index, case) in Case::ALL.into_iter().enumerate() {
        let x = index as f64;
        lines.push(case_lines(report, &[(case, "")], &[(x, None)])?);
    }
    // One line per method across the cases.
    for method in ArrayMethod::ALL {
        let points = lines
            .iter()
            .flatten()
            .filter(|line| line.name == method.name())
            .flat_map(|line| line.points.iter().copied())
            .collect();
        panel.lines.push(crate::report::Line {
            name: method.name().to_owned(),
            points,
        });
    }
    Ok(Figure {
        stem: "tile".to_owned(),
        title: format!(
            "tile: mpi-tile-io, 4 clients x {SERVERS} servers, tcp (median, min-max of {} repetitions)",
            report.meta.repetitions
        ),
        panels: vec![panel],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::Pattern;

    #[test]
    fn a_tile_is_768_pieces_of_3072_bytes_and_the_tiles_cover_the_file_once() {
        let mut seen = vec![0u8; usize::try_from(SHARE.array_bytes()).unwrap()];
        for rank in 0..4 {
            let access = Pattern::Array { rank, share: SHARE }.access();
            assert_eq!(access.file.len(), 768);
            assert!(access.file.iter().all(|piece| piece.length == 3072));
            assert_eq!(access.memory, [(0, 768 * 3072)]);
            for piece in access.file {
                for offset in piece.offset..piece.offset + piece.length {
                    seen[usize::try_from(offset).unwrap()] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&count| count == 1));
    }
}
