//! Pattern layouts: a file's physical distribution given by one datatype per server.
//!
//! As in Clusterfile, the file is cut into periods of `period_bytes`; within each period,
//! the server at position `i` holds the bytes that its type `types[i]` selects, and keeps
//! them in its local object in file order, period after period. A (*,BLOCK) layout of a
//! matrix, for example, gives each server a block of columns of every row, so a process
//! whose view is that block of columns finds all its bytes contiguous on one server.
//!
//! The types must tile one period exactly: each has lower bound 0 and extent `period_bytes`,
//! its runs increase, and together they cover every byte of the period once. At
//! construction the runs of one period are flattened into a sorted table (at most
//! [`PATTERN_RUNS_MAX`]), so mapping an offset is a binary search.

use tessera_dtype::Datatype;

use crate::limits::{PATTERN_RUNS_MAX, SERVERS_MAX};
use crate::segment::Segment;

/// One run of a period and where it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PatternRun {
    /// Offset within the period.
    offset: u64,
    length: u64,
    /// Position of the server holding it.
    position: usize,
    /// Offset within that server's share of one period.
    local: u64,
}

/// A periodic layout given by one datatype per server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternLayout {
    /// Cluster indices of the I/O servers, one per type.
    pub servers: Vec<u16>,
    /// The bytes of each period held by the server at the same position.
    pub types: Vec<Datatype>,
    period_bytes: u64,
    /// The runs of one period, sorted by offset and covering it.
    runs: Vec<PatternRun>,
    /// Bytes each server holds of one period.
    share_bytes: Vec<u64>,
}

impl PatternLayout {
    /// A layout of `types[i]` on `servers[i]`, checked to tile one period exactly.
    pub fn new(servers: Vec<u16>, types: Vec<Datatype>) -> Result<Self, String> {
        if servers.is_empty() || servers.len() > SERVERS_MAX || servers.len() != types.len() {
            return Err(format!(
                "a pattern layout needs one type per server (1..={SERVERS_MAX}); got {} servers and {} types",
                servers.len(),
                types.len()
            ));
        }
        let mut unique = servers.clone();
        unique.sort_unstable();
        unique.dedup();
        if unique.len() != servers.len() {
            return Err("pattern layout names a server twice".to_owned());
        }
        let period = types[0].extent();
        let period_bytes = u64::try_from(period)
            .ok()
            .filter(|&bytes| bytes > 0 && bytes <= crate::limits::FILE_BYTES_MAX)
            .ok_or_else(|| {
                format!("pattern period (the extent of the types) {period} is not positive")
            })?;
        let mut runs = Vec::new();
        let mut share_bytes = Vec::with_capacity(types.len());
        for (position, datatype) in types.iter().enumerate() {
            if datatype.lb() != 0 || datatype.extent() != period {
                return Err(format!(
                    "type {position} has lower bound {} and extent {}; every type of a pattern needs lower bound 0 and extent {period}",
                    datatype.lb(),
                    datatype.extent()
                ));
            }
            if datatype.size() == 0 {
                return Err(format!("type {position} selects no bytes"));
            }
            let mut local = 0u64;
            let mut last_end = 0i64;
            let walk = datatype
                .runs(0, 0, datatype.size())
                .map_err(|err| format!("type {position}: {err}"))?;
            for run in walk {
                if run.offset < last_end || run.end() > period {
                    return Err(format!(
                        "type {position}: its runs must increase and stay inside the period 0..{period} (run at {} of {} bytes)",
                        run.offset, run.length
                    ));
                }
                if runs.len() >= PATTERN_RUNS_MAX {
                    return Err(format!(
                        "the pattern has more than pattern_runs_max ({PATTERN_RUNS_MAX}) runs per period"
                    ));
                }
                last_end = run.end();
                runs.push(PatternRun {
                    offset: u64::try_from(run.offset).expect("checked non-negative"),
                    length: run.length,
                    position,
                    local,
                });
                local += run.length;
            }
            share_bytes.push(local);
        }
        runs.sort_unstable_by_key(|run| run.offset);
        let mut next = 0u64;
        for run in &runs {
            if run.offset != next {
                return Err(if run.offset < next {
                    format!("the types overlap at byte {} of the period", run.offset)
                } else {
                    format!("no type holds bytes {next}..{} of the period", run.offset)
                });
            }
            next = run.offset + run.length;
        }
        if next != period_bytes {
            return Err(format!(
                "no type holds bytes {next}..{period_bytes} of the period"
            ));
        }
        Ok(Self {
            servers,
            types,
            period_bytes,
            runs,
            share_bytes,
        })
    }

    /// Bytes in one period.
    pub fn period_bytes(&self) -> u64 {
        self.period_bytes
    }

    /// Splits `[offset, offset + length)` into per-server runs, in logical order.
    pub fn map(&self, offset: u64, length: u64) -> impl Iterator<Item = Segment> + '_ {
        let end = offset + length;
        let mut cursor = offset;
        let mut index = None::<usize>;
        std::iter::from_fn(move || {
            if cursor >= end {
                return None;
            }
            let period = cursor / self.period_bytes;
            let within = cursor % self.period_bytes;
            let run_index = match index {
                Some(i) if i < self.runs.len() && self.runs[i].offset == within => i,
                _ => self.runs.partition_point(|run| run.offset <= within) - 1,
            };
            let run = self.runs[run_index];
            let skip = within - run.offset;
            let length = (run.length - skip).min(end - cursor);
            let segment = Segment {
                server_position: run.position,
                local_offset: period * self.share_bytes[run.position] + run.local + skip,
                logical_offset: cursor,
                length,
            };
            cursor += length;
            index = Some((run_index + 1) % self.runs.len());
            Some(segment)
        })
    }

    /// Whether the stream of `filetype` tiled from `displacement` is exactly the bytes of one
    /// server, in file order: a view that matches the layout. Then stream byte `x` lies at
    /// local byte `base + x` of that server, and a request needs no walk on either side.
    /// Returns the server's position and `base`. Compares at most `runs_max` runs; a type
    /// with more is not recognised (its requests are walked as any other).
    pub fn matched(
        &self,
        filetype: &Datatype,
        displacement: u64,
        runs_max: usize,
    ) -> Option<(usize, u64)> {
        let extent = u64::try_from(filetype.extent()).ok()?;
        if filetype.size() == 0
            || extent == 0
            || !extent.is_multiple_of(self.period_bytes)
            || !displacement.is_multiple_of(self.period_bytes)
        {
            return None;
        }
        let periods = extent / self.period_bytes;
        let mut actual = filetype.runs(0, 0, filetype.size()).ok()?.peekable();
        let first = u64::try_from(actual.peek()?.offset).ok()?;
        if first >= self.period_bytes {
            return None;
        }
        let position = self.runs[self.runs.partition_point(|run| run.offset <= first) - 1].position;
        let own: Vec<PatternRun> = self
            .runs
            .iter()
            .filter(|run| run.position == position)
            .copied()
            .collect();
        if filetype.size() != periods.checked_mul(self.share_bytes[position])?
            || (own.len() as u64).checked_mul(periods)? > runs_max as u64
        {
            return None;
        }
        // The server's runs over `periods` periods, merged where they touch, against the
        // type's (merged) runs.
        let expected = (0..periods).flat_map(|period| {
            own.iter()
                .map(move |run| (period * self.period_bytes + run.offset, run.length))
        });
        let mut pending: Option<(u64, u64)> = None;
        let mut same = |(offset, length): (u64, u64)| {
            actual.next().is_some_and(|run| {
                u64::try_from(run.offset).ok() == Some(offset) && run.length == length
            })
        };
        for (offset, length) in expected {
            match pending {
                Some((start, bytes)) if start + bytes == offset => {
                    pending = Some((start, bytes + length));
                }
                Some(run) => {
                    if !same(run) {
                        return None;
                    }
                    pending = Some((offset, length));
                }
                None => pending = Some((offset, length)),
            }
        }
        if !same(pending?) || actual.next().is_some() {
            return None;
        }
        Some((
            position,
            displacement / self.period_bytes * self.share_bytes[position],
        ))
    }

    /// Bytes the server at `position` holds of a file of `logical_size` bytes.
    pub fn local_size(&self, position: usize, logical_size: u64) -> u64 {
        let periods = logical_size / self.period_bytes;
        let within = logical_size % self.period_bytes;
        let partial: u64 = self
            .runs
            .iter()
            .filter(|run| run.position == position && run.offset < within)
            .map(|run| run.length.min(within - run.offset))
            .sum();
        periods * self.share_bytes[position] + partial
    }

    /// The logical offset just past the last byte of a local object of `local_size` bytes on
    /// the server at `position` (0 for an empty object).
    pub fn logical_end(&self, position: usize, local_size: u64) -> u64 {
        if local_size == 0 {
            return 0;
        }
        let last = local_size - 1;
        let share = self.share_bytes[position];
        let (period, within) = (last / share, last % share);
        let run = self
            .runs
            .iter()
            .find(|run| {
                run.position == position && run.local <= within && within < run.local + run.length
            })
            .expect("every local byte of a period lies in one run");
        period * self.period_bytes + run.offset + (within - run.local) + 1
    }
}
