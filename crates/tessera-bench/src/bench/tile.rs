//! `tessera bench tile` (seed 001 §3.4.3, Figs. 3.8-3.9: mpi-tile-io).
//!
//! Four client processes each render one tile of a 2 x 2 display wall of 1024 x 768 pixels
//! of 24 bits: the file is the 2048 x 1536 array of 3-byte elements in C order (9 MiB),
//! striped over four servers (64 KiB units). A process's tile is contiguous in memory and
//! 768 file pieces of 3072 bytes in the file, each between two of its neighbour's. The four
//! methods and four cases of `tessera bench blockcol` run on it, interleaved the same way
//! (see [`super::blockcol::Sweep`]); every read is verified byte by byte.

use std::fmt::Write as _;
use std::time::Instant;

use serde_json::json;

use super::blockcol::{
    cases_config, create, extra_f64, find, methods_config, open_cluster, rate, rows, write_csv,
    Case, Sweep, UNCACHED_SKIPPED,
};
use super::{CommonArgs, Report};
use crate::plot::{Plot, Series};
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

/// Runs the experiment and returns its report.
pub fn run(common: &CommonArgs) -> Result<Report, String> {
    let started = Instant::now();
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
        bench: "tile".to_owned(),
        quick: common.quick,
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
        rows: rows(
            &measured,
            |case| case.name().to_owned(),
            repetitions,
            uncached,
        ),
    };
    drop(sweep);
    let table = table(&report);
    eprintln!(
        "bench tile: {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
    if common.json {
        eprint!("{table}");
    } else {
        print!("{table}");
        write_outputs(common, &report)?;
    }
    Ok(report)
}

fn table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "tile: mpi-tile-io, 2 x 2 tiles of 1024 x 768 x 24-bit (9 MiB), 4 clients x {SERVERS} I/O servers, 64 KiB stripes, tcp (MiB/s, all processes, median per call)"
    );
    let _ = writeln!(
        out,
        "{:<14} {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>8}",
        "case",
        "multiple",
        "sieve",
        "list",
        "list+ads",
        "ads/mult",
        "ads/list",
        "ads/sieve",
        "calls lst",
        "calls ads",
        "ads s/b"
    );
    for case in Case::ALL {
        let label = case.name();
        let rates = ArrayMethod::ALL.map(|method| rate(report, label, method));
        if rates.iter().all(|rate| rate.is_nan()) {
            let _ = writeln!(out, "{label:<14}   skipped: {UNCACHED_SKIPPED}");
            continue;
        }
        let ads = rates[3];
        let _ = writeln!(
            out,
            "{label:<14} {:>9.1} {:>9.1} {:>9.1} {:>9.1} | {:>8.2}x {:>8.2}x {:>8.2}x | {:>9.0} {:>9.0} {:>8.2}",
            rates[0],
            rates[1],
            rates[2],
            ads,
            ads / rates[0],
            ads / rates[2],
            ads / rates[1],
            extra_f64(find(report, label, ArrayMethod::List), "storage_calls"),
            extra_f64(find(report, label, ArrayMethod::ListAds), "storage_calls"),
            extra_f64(find(report, label, ArrayMethod::ListAds), "storage_bytes_ratio"),
        );
    }
    let _ = write!(out, "paper (001 Fig. 3.8, write no sync / read cached):");
    for (method, write, read) in PAPER_ADS_OVER {
        let _ = write!(
            out,
            " ads/{} {write}x / {read}x;",
            match method {
                ArrayMethod::Multiple => "mult",
                other => other.name(),
            }
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "paper (001 Fig. 3.9, with disk effects): list+ADS still best for writes; for reads ROMIO sieve beats list+ADS (one request against six pairs of 128-piece requests)"
    );
    let _ = writeln!(out, "verified: {}", report.verified);
    out
}

fn write_outputs(common: &CommonArgs, report: &Report) -> Result<(), String> {
    let csv_path = write_csv(common, report)?;
    let series = ArrayMethod::ALL
        .into_iter()
        .map(|method| Series {
            name: method.name().to_owned(),
            points: Case::ALL
                .into_iter()
                .zip(1u32..)
                .map(|(case, x)| (f64::from(x), rate(report, case.name(), method)))
                .collect(),
        })
        .collect();
    let plot = Plot {
        title: "tile (Figs. 3.8-3.9): mpi-tile-io, 4 clients x 4 servers, tcp".to_owned(),
        x_label: "1 write  2 write+sync  3 read cached  4 read uncached".to_owned(),
        y_label: "MiB/s".to_owned(),
        log2_x: false,
        series,
    };
    let png_path = super::write_plot(common, "tile.png", &plot)?;
    super::report_written(&[csv_path, png_path]);
    Ok(())
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
