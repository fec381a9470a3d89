//! Pattern layouts for common array distributions, and the layout syntax of the CLI.
//!
//! A 2-D array of `rows` × `row_bytes` bytes stored row-major can be laid out so that each
//! server holds exactly what one process of a distribution accesses: then a view of that
//! process's part maps to one contiguous range of one server's object (seed 002 Fig. 1,
//! case a). [`parse`] reads the `--layout` syntax of `tessera create`:
//!
//! | spec | layout |
//! | --- | --- |
//! | `stripe` / `stripe:UNIT` / `stripe:UNIT:SERVERS` | round-robin stripes (default unit 64k) |
//! | `columns:ROW_BYTES[:SERVERS]` | (*,BLOCK): server i holds columns `[i·R/n, (i+1)·R/n)` of every row |
//! | `rows:ROW_BYTES:ROWS[:SERVERS]` | (BLOCK,*): server i holds rows `[i·ROWS/n, (i+1)·ROWS/n)` |
//! | `blocks:ROW_BYTES:ROWS:P:Q` | (BLOCK,BLOCK) over a P×Q grid of servers, row-major |
//!
//! Sizes take an optional `k`, `m` or `g` suffix (powers of 1024). SERVERS defaults to every
//! server of the cluster.

use tessera_proto::dtype::{DatatypeError, Order};
use tessera_proto::Datatype;

use crate::options::CreateOptions;
pub use crate::size::parse_bytes;

/// The share `[start, end)` of part `index` when `total` is cut into `parts` near-equal parts.
fn share(total: u64, parts: u64, index: u64) -> (u64, u64) {
    (total * index / parts, total * (index + 1) / parts)
}

fn signed(value: u64) -> Result<i64, DatatypeError> {
    i64::try_from(value).map_err(|_| DatatypeError::Invalid {
        what: "layout",
        detail: format!("{value} bytes is too large"),
    })
}

/// (*,BLOCK): one type per server, each a block of columns of every row.
pub fn column_blocks(row_bytes: u64, servers: u64) -> Result<Vec<Datatype>, DatatypeError> {
    (0..servers)
        .map(|i| {
            let (first, end) = share(row_bytes, servers, i);
            let columns = Datatype::hindexed(&[end - first], &[signed(first)?], &Datatype::byte())?;
            Datatype::resized(0, signed(row_bytes)?, &columns)
        })
        .collect()
}

/// (BLOCK,*): one type per server, each a block of whole rows.
pub fn row_blocks(row_bytes: u64, rows: u64, servers: u64) -> Result<Vec<Datatype>, DatatypeError> {
    (0..servers)
        .map(|i| {
            let (first, end) = share(rows, servers, i);
            let block = Datatype::hindexed(
                &[(end - first) * row_bytes],
                &[signed(first * row_bytes)?],
                &Datatype::byte(),
            )?;
            Datatype::resized(0, signed(rows * row_bytes)?, &block)
        })
        .collect()
}

/// (BLOCK,BLOCK): one type per server of a `grid_rows` × `grid_columns` grid, row-major.
pub fn block_blocks(
    row_bytes: u64,
    rows: u64,
    grid_rows: u64,
    grid_columns: u64,
) -> Result<Vec<Datatype>, DatatypeError> {
    let mut types = Vec::new();
    for p in 0..grid_rows {
        for q in 0..grid_columns {
            let (row, row_end) = share(rows, grid_rows, p);
            let (column, column_end) = share(row_bytes, grid_columns, q);
            types.push(Datatype::subarray(
                &[rows, row_bytes],
                &[row_end - row, column_end - column],
                &[row, column],
                Order::C,
                &Datatype::byte(),
            )?);
        }
    }
    Ok(types)
}

/// Reads a stripe unit (`--stripe-unit`, a layout's UNIT; as [`parse_bytes`]): never 0, which
/// would otherwise quietly mean the default.
pub fn parse_stripe_unit(text: &str) -> Result<u64, String> {
    match parse_bytes(text)? {
        0 => Err(format!(
            "{text:?}: a stripe unit of 0 bytes; leave it out for the default ({})",
            tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT
        )),
        unit => Ok(unit),
    }
}

/// Reads a cache unit hint (`--cache-unit`, as [`parse_bytes`]): a power of two from 4 KiB
/// to 64 KiB, or 0 to let the mds choose.
pub fn parse_cache_unit(text: &str) -> Result<u32, String> {
    let unit_bytes = parse_bytes(text)?;
    tessera_proto::limits::check_cache_unit_bytes(unit_bytes)?;
    u32::try_from(unit_bytes).map_err(|_| format!("{text:?} is too large for a cache unit"))
}

/// Reads a `--layout` spec (see the module docs) for a cluster of `cluster_servers` servers.
pub fn parse(spec: &str, cluster_servers: u16) -> Result<CreateOptions, String> {
    let fields: Vec<&str> = spec.split(':').collect();
    let number = |index: usize, name: &str| -> Result<u64, String> {
        let field = fields
            .get(index)
            .ok_or_else(|| format!("layout {spec:?}: {name} is missing"))?;
        parse_bytes(field).map_err(|why| format!("layout {spec:?}: {name}: {why}"))
    };
    let servers = |index: usize| -> Result<u64, String> {
        let count = if fields.len() > index {
            number(index, "SERVERS")?
        } else {
            u64::from(cluster_servers)
        };
        if count == 0 || count > u64::from(cluster_servers) {
            return Err(format!(
                "layout {spec:?}: {count} servers; the cluster has {cluster_servers}"
            ));
        }
        Ok(count)
    };
    let most = |count: usize| -> Result<(), String> {
        if fields.len() > count {
            return Err(format!("layout {spec:?}: too many fields"));
        }
        Ok(())
    };
    let types = |made: Result<Vec<Datatype>, DatatypeError>| {
        made.map_err(|err| format!("layout {spec:?}: {err}"))
    };
    let mut options = CreateOptions::default();
    match fields[0] {
        "stripe" => {
            most(3)?;
            if fields.len() > 1 {
                let field = fields[1];
                options.stripe_unit_bytes = parse_stripe_unit(field)
                    .map_err(|why| format!("layout {spec:?}: UNIT: {why}"))?;
            }
            options.server_count = u16::try_from(servers(2)?).expect("at most the cluster size");
        }
        "columns" => {
            most(3)?;
            let row_bytes = number(1, "ROW_BYTES")?;
            let count = servers(2)?;
            if row_bytes < count {
                return Err(format!(
                    "layout {spec:?}: {row_bytes} columns cannot feed {count} servers"
                ));
            }
            options.pattern = types(column_blocks(row_bytes, count))?;
        }
        "rows" => {
            most(4)?;
            let (row_bytes, rows, count) =
                (number(1, "ROW_BYTES")?, number(2, "ROWS")?, servers(3)?);
            if rows < count || row_bytes == 0 {
                return Err(format!(
                    "layout {spec:?}: {rows} rows cannot feed {count} servers"
                ));
            }
            options.pattern = types(row_blocks(row_bytes, rows, count))?;
        }
        "blocks" => {
            most(5)?;
            let (row_bytes, rows) = (number(1, "ROW_BYTES")?, number(2, "ROWS")?);
            let (p, q) = (number(3, "P")?, number(4, "Q")?);
            if p == 0 || q == 0 || p * q > u64::from(cluster_servers) || rows < p || row_bytes < q {
                return Err(format!(
                    "layout {spec:?}: a {p}x{q} grid of a {rows}x{row_bytes} array does not fit {cluster_servers} servers"
                ));
            }
            options.pattern = types(block_blocks(row_bytes, rows, p, q))?;
        }
        other => {
            return Err(format!(
                "layout {spec:?}: unknown kind {other:?}; use stripe, columns, rows or blocks"
            ))
        }
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::PatternLayout;

    #[test]
    fn every_kind_tiles_its_period() {
        for spec in [
            "columns:1000",
            "columns:64:3",
            "rows:10:7",
            "blocks:9:5:2:2",
        ] {
            let options = parse(spec, 4).unwrap();
            let servers: Vec<u16> = (0..u16::try_from(options.pattern.len()).unwrap()).collect();
            PatternLayout::new(servers, options.pattern)
                .unwrap_or_else(|why| panic!("{spec}: {why}"));
        }
        let stripe = parse("stripe:1m:2", 4).unwrap();
        assert_eq!(
            (stripe.stripe_unit_bytes, stripe.server_count),
            (1 << 20, 2)
        );
        assert!(parse("columns:2:4", 4).unwrap_err().contains("cannot feed"));
        assert!(parse("wedges:4", 4).unwrap_err().contains("unknown kind"));
        assert!(parse("columns:1x", 4).unwrap_err().contains("not a size"));
        assert_eq!(parse_cache_unit("16k"), Ok(16384));
        assert!(parse_cache_unit("12k").unwrap_err().contains("12288 bytes"));
        assert!(parse("stripe:64k:9", 4)
            .unwrap_err()
            .contains("cluster has 4"));
    }
}
