//! The report harness of `tessera-bench`: what every experiment's measurements become.
//!
//! An experiment measures each (case, method) a number of times, interleaving the methods, and
//! keeps the samples. [`Spread::of`] turns a case's samples into the median the report gives
//! and the minimum and maximum its figure draws. The experiment builds one typed row per
//! (case, method) — a `#[derive(Serialize)]` struct of its own that implements [`Row`] — and
//! a [`Report`] of them, which adds what every report carries: the bench, `--quick`, the
//! configuration, whether every byte read back was right, and [`Meta`] (timestamp, host,
//! version, git commit, repetitions). [`Report::finish`] then writes the output contract
//! (README, "Benchmark output"): one JSON object on standard output with `--json`
//! (`serde_json`), the table (`comfy-table`) on standard output or, with `--json`, standard
//! error, and into `--out` the rows as `NAME.csv` (`csv`) and each [`Figure`] as SVG and PNG
//! (`plotters`).
//!
//! A figure or table reads the rows back through [`Report::row`] / [`Report::find`], which
//! fail with the bench, case and method named when a row is missing: never a 0.

pub mod figure;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use tessera_cluster::{out, outln};

pub use figure::{Figure, Line, Panel, Point, Scale};
pub use tessera_cluster::progress::Steps as Progress;

use crate::args::CommonArgs;

/// What a report says about the run itself, beside its figures.
#[derive(Debug, Clone, Serialize)]
pub struct Meta {
    /// When the report was made, RFC 3339 in UTC.
    pub timestamp: String,
    /// The host the bench ran on.
    pub host: String,
    /// The version of tessera-bench.
    pub version: &'static str,
    /// The git commit it was built from (short hash, or "unknown" outside a checkout).
    pub commit: &'static str,
    /// How many times each case was measured (the figures are medians over them).
    pub repetitions: usize,
}

impl Meta {
    /// The metadata of a report made now of `repetitions` measurements per case.
    pub fn now(repetitions: usize) -> Self {
        Self {
            timestamp: tessera_cluster::human::rfc3339(tessera_cluster::human::now_ns()),
            host: host_name(),
            version: env!("CARGO_PKG_VERSION"),
            commit: env!("TESSERA_GIT_COMMIT"),
            repetitions,
        }
    }
}

/// The kernel's host name, or "unknown".
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Which way the data of a case moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Client memory to the file.
    Write,
    /// The file to client memory.
    Read,
}

impl Direction {
    /// Writes first, as the benches run them.
    pub const BOTH: [Self; 2] = [Self::Write, Self::Read];
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Write => "write",
            Self::Read => "read",
        })
    }
}

/// The median and range of one figure over a case's repetitions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// The smallest sample.
    pub min: f64,
    /// The median (the mean of the middle two of an even count).
    pub median: f64,
    /// The largest sample.
    pub max: f64,
}

impl Spread {
    /// The spread of `samples`; an error when there are none or one is not finite.
    pub fn of(samples: &[f64]) -> Result<Self, String> {
        if samples.is_empty() {
            return Err("no samples to take a median of".to_owned());
        }
        if let Some(bad) = samples.iter().find(|sample| !sample.is_finite()) {
            return Err(format!("sample {bad} is not a finite number"));
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let middle = sorted.len() / 2;
        let median = if sorted.len().is_multiple_of(2) {
            f64::midpoint(sorted[middle - 1], sorted[middle])
        } else {
            sorted[middle]
        };
        Ok(Self {
            min: sorted[0],
            median,
            max: sorted[sorted.len() - 1],
        })
    }

    /// The MiB/s of moving `bytes` in each of these seconds: the slowest sample gives the
    /// smallest rate.
    pub fn rate_of(self, bytes: u64) -> Self {
        Self {
            min: mib_s(bytes, self.max),
            median: mib_s(bytes, self.median),
            max: mib_s(bytes, self.min),
        }
    }
}

/// The rate figures every measured row carries, flattened into it (`#[serde(flatten)]`):
/// the median MiB/s over the repetitions, its range, and the median seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Measure {
    /// MiB/s of useful data, median over the repetitions (NaN, `null` in JSON, if skipped).
    pub mib_s: f64,
    /// The slowest repetition's MiB/s.
    pub mib_s_min: f64,
    /// The fastest repetition's MiB/s.
    pub mib_s_max: f64,
    /// Seconds of the median repetition (per call or per step, as the bench says).
    pub seconds: f64,
}

impl Measure {
    /// The figures of moving `bytes` in each of the `seconds` samples.
    pub fn of_seconds(seconds: Spread, bytes: u64) -> Self {
        let rate = seconds.rate_of(bytes);
        Self {
            mib_s: rate.median,
            mib_s_min: rate.min,
            mib_s_max: rate.max,
            seconds: seconds.median,
        }
    }

    /// The figures of a row that was not measured (NaN, `null` in JSON).
    pub fn none() -> Self {
        Self {
            mib_s: f64::NAN,
            mib_s_min: f64::NAN,
            mib_s_max: f64::NAN,
            seconds: f64::NAN,
        }
    }

    /// The median MiB/s, or `None` for a row that was not measured ([`Measure::none`]).
    pub fn measured(&self) -> Option<f64> {
        Some(self.mib_s).filter(|mib_s| !mib_s.is_nan())
    }

    /// The MiB/s as a figure's point at `x`.
    pub fn point(&self, x: f64) -> Point {
        Point {
            x,
            y: Spread {
                min: self.mib_s_min,
                median: self.mib_s,
                max: self.mib_s_max,
            },
        }
    }
}

/// The range of a row's seconds over the repetitions, for rows that give it beside
/// [`Measure`] (flattened into the row after it: `seconds_min`, `seconds_max`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SecondsRange {
    /// The fastest repetition's seconds.
    pub seconds_min: f64,
    /// The slowest repetition's seconds.
    pub seconds_max: f64,
}

impl SecondsRange {
    /// The range of the `seconds` samples.
    pub fn of(seconds: Spread) -> Self {
        Self {
            seconds_min: seconds.min,
            seconds_max: seconds.max,
        }
    }
}

/// MiB (2^20 bytes) per second.
pub fn mib_s(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20) / seconds.max(1e-9)
}

/// A row of an experiment's report: one (case, method). Its serialized fields are the
/// columns of `NAME.csv` and the keys of the JSON rows, so they must be scalars (numbers,
/// strings, unit enums, options of those) or structs of them flattened into the row
/// (`#[serde(flatten)]`, as [`Measure`]).
pub trait Row: Serialize {
    /// The case as people read it, built from the row's typed fields (e.g. "write 128 B"),
    /// and the method measured.
    fn key(&self) -> (String, &str);
}

/// The whole output of one run of an experiment.
#[derive(Debug, Serialize)]
pub struct Report<R> {
    /// Experiment name.
    pub bench: &'static str,
    /// Reduced sizes.
    pub quick: bool,
    /// When, where and from what the run was made.
    pub meta: Meta,
    /// Cluster and workload settings.
    pub config: serde_json::Value,
    /// Every byte read back was right.
    pub verified: bool,
    /// One row per (case, method).
    pub rows: Vec<R>,
}

/// What `tessera-bench` needs of a finished run.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Experiment name.
    pub bench: String,
    /// Every byte read back was right.
    pub verified: bool,
}

impl<R: Row> Report<R> {
    /// The row of `case` and `method`; an error naming both when there is none.
    pub fn row(&self, case: &str, method: &str) -> Result<&R, String> {
        self.find(case, method, |row| row.key().0 == case)
    }

    /// The row of `method` that `matches`, `case` saying which one was meant; an error naming
    /// the bench, case and method when none does.
    pub fn find(
        &self,
        case: &str,
        method: &str,
        matches: impl Fn(&R) -> bool,
    ) -> Result<&R, String> {
        self.rows
            .iter()
            .find(|row| row.key().1 == method && matches(row))
            .ok_or_else(|| {
                format!(
                    "bench {}: no row for case \"{case}\", method \"{method}\"",
                    self.bench
                )
            })
    }

    /// The rows as CSV: a header of the row type's field names (flattened structs'
    /// fields in place), then one record per row; `null` is an empty field.
    pub fn to_csv(&self) -> Result<Vec<u8>, String> {
        let failed = |err: &dyn fmt::Display| format!("bench {}: CSV: {err}", self.bench);
        let mut writer = csv::Writer::from_writer(Vec::new());
        let mut header: Option<Vec<String>> = None;
        for row in &self.rows {
            // Through JSON text, which keeps the fields in their order and flattens
            // `#[serde(flatten)]` structs (the csv serializer takes neither maps nor
            // nested structs' names).
            let text = serde_json::to_string(row).map_err(|err| failed(&err))?;
            let Fields(fields) = serde_json::from_str(&text).map_err(|err| failed(&err))?;
            let names: Vec<String> = fields.iter().map(|(name, _)| name.clone()).collect();
            match &header {
                None => {
                    writer.write_record(&names).map_err(|err| failed(&err))?;
                    header = Some(names);
                }
                Some(header) if *header != names => {
                    return Err(failed(&format!(
                        "a row has the fields {names:?}, the first {header:?}"
                    )));
                }
                Some(_) => {}
            }
            let mut record = Vec::with_capacity(fields.len());
            for (name, value) in fields {
                record.push(match value {
                    serde_json::Value::Null => String::new(),
                    serde_json::Value::String(text) => text,
                    serde_json::Value::Bool(_) | serde_json::Value::Number(_) => value.to_string(),
                    serde_json::Value::Array(_) | serde_json::Value::Object(_) => {
                        return Err(failed(&format!("field {name} is not a number or a string")));
                    }
                });
            }
            writer.write_record(&record).map_err(|err| failed(&err))?;
        }
        writer.into_inner().map_err(|err| failed(&err))
    }

    /// Prints and writes the run's output (see the module doc): `text` is the table and notes
    /// for people, `figures` the figures of the paper. Returns what `tessera-bench` needs.
    pub fn finish(
        &self,
        common: &CommonArgs,
        text: &str,
        figures: &[Figure],
    ) -> Result<Outcome, String> {
        if common.json {
            eprint!("{text}");
            outln!(
                "{}",
                serde_json::to_string_pretty(self).map_err(|err| err.to_string())?
            );
        } else {
            out!("{text}");
        }
        let mut written = vec![write_file(
            &common.out,
            &format!("{}.csv", self.bench),
            &self.to_csv()?,
        )?];
        for figure in figures {
            written.extend(figure.write(&common.out)?);
        }
        let names: Vec<String> = written
            .iter()
            .map(|path| path.display().to_string())
            .collect();
        eprintln!("bench: wrote {}", names.join(", "));
        Ok(Outcome {
            bench: self.bench.to_owned(),
            verified: self.verified,
        })
    }
}

/// A JSON object's fields in their order.
struct Fields(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Fields;
            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a row object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Fields, A::Error> {
                let mut fields = Vec::new();
                while let Some(field) = map.next_entry()? {
                    fields.push(field);
                }
                Ok(Fields(fields))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// Writes `bytes` as `dir/name`, making `dir` if needed; returns the path.
fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir)
        .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, bytes)
        .map_err(|err| format!("cannot write {}: {err}", path.display()))?;
    Ok(path)
}

/// A table for people with `header`, in the look every bench shares (Markdown-like, so it
/// pastes into docs).
pub fn table<I, T>(header: I) -> comfy_table::Table
where
    I: IntoIterator<Item = T>,
    T: Into<comfy_table::Cell>,
{
    let mut table = comfy_table::Table::new();
    table
        .load_style(comfy_table::presets::ASCII_MARKDOWN)
        .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
        .set_header(header);
    table
}

/// A number for a table cell: `decimals` places.
pub fn cell(value: f64, decimals: usize) -> String {
    format!("{value:.decimals$}")
}

/// The ratio `numerator / denominator` for a table cell ("2.31x"), "-" when the denominator
/// is 0.
pub fn ratio(numerator: f64, denominator: f64) -> String {
    if denominator == 0.0 {
        "-".to_owned()
    } else {
        format!("{:.2}x", numerator / denominator)
    }
}

/// The median over repetitions of `before[k] / after[k]`: how much faster the method timed
/// `after` ran than the one timed `before` within repetition `k` (the same bytes each).
pub fn paired_ratio(before: &[f64], after: &[f64]) -> f64 {
    let mut ratios: Vec<f64> = before
        .iter()
        .zip(after)
        .filter(|&(_, &after)| after > 0.0)
        .map(|(before, after)| before / after)
        .collect();
    ratios.sort_by(f64::total_cmp);
    match ratios.len() {
        0 => 0.0,
        len if len % 2 == 1 => ratios[len / 2],
        len => f64::midpoint(ratios[len / 2 - 1], ratios[len / 2]),
    }
}

/// The order in which repetition `repetition` runs `count` methods: a permutation drawn from
/// a fixed seed, so every run of a bench takes the same orders. A rotation would give each
/// method the same predecessor in every repetition, and a predecessor that leaves the machine
/// slower for a while (pages unpinned, caches cold) would bias one row in every repetition:
/// `subarray` measured hybrid, which always followed `gather, cached`, at 0.81x of pack while
/// both moved the data by pack. Shuffled, a predecessor's effect is spread over all the
/// methods, where the medians and the paired ratios take it out.
pub fn turn_order(repetition: usize, count: usize) -> Vec<usize> {
    // splitmix64 (Steele, Lea, Flood 2014): a few well-mixed numbers from a counter.
    let mut state = (repetition as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut order: Vec<usize> = (0..count).collect();
    // Fisher–Yates.
    for last in (1..count).rev() {
        let pick = usize::try_from(next() % (last as u64 + 1)).expect("below count");
        order.swap(last, pick);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_orders_are_fixed_permutations_that_change_each_method_s_predecessor() {
        for count in [0, 1, 2, 11] {
            for repetition in 0..15 {
                let order = turn_order(repetition, count);
                let mut sorted = order.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..count).collect::<Vec<_>>());
                assert_eq!(
                    order,
                    turn_order(repetition, count),
                    "the same in every run"
                );
            }
        }
        // Over 11 repetitions of 11 methods, every method follows at least 4 different ones.
        let mut predecessors = vec![std::collections::BTreeSet::new(); 11];
        for repetition in 0..11 {
            let order = turn_order(repetition, 11);
            for pair in order.windows(2) {
                predecessors[pair[1]].insert(pair[0]);
            }
        }
        for (method, seen) in predecessors.iter().enumerate() {
            assert!(seen.len() >= 4, "method {method} follows only {seen:?}");
        }
    }

    #[test]
    fn paired_ratios_compare_within_each_repetition() {
        // Seconds per repetition: the machine slowed in the second and third repetition.
        let before = [2.0, 4.0, 8.0];
        let after = [1.0, 2.0, 8.0];
        // Ratios 2, 2 and 1: median 2.
        assert!((paired_ratio(&before, &after) - 2.0).abs() < 1e-12);
        // The same times in other repetitions pair otherwise: 0.25, 4 and 4.
        let after_shuffled = [8.0, 1.0, 2.0];
        assert!((paired_ratio(&before, &after_shuffled) - 4.0).abs() < 1e-12);
        assert!((paired_ratio(&[3.0, 1.0], &[1.0, 1.0]) - 2.0).abs() < 1e-12);
        assert!(paired_ratio(&[], &[]).abs() < 1e-12);
    }

    #[derive(Serialize)]
    struct TestRow {
        direction: Direction,
        method: String,
        #[serde(flatten)]
        measure: Measure,
        skipped: Option<String>,
    }

    fn measure(mib_s: f64) -> Measure {
        Measure {
            mib_s,
            mib_s_min: mib_s / 2.0,
            mib_s_max: mib_s * 2.0,
            seconds: 1.0 / mib_s,
        }
    }

    impl Row for TestRow {
        fn key(&self) -> (String, &str) {
            (self.direction.to_string(), &self.method)
        }
    }

    fn report(rows: Vec<TestRow>) -> Report<TestRow> {
        Report {
            bench: "test",
            quick: true,
            meta: Meta::now(3),
            config: serde_json::json!({}),
            verified: true,
            rows,
        }
    }

    #[test]
    fn csv_quotes_commas_quotes_and_newlines() {
        let report = report(vec![
            TestRow {
                direction: Direction::Write,
                method: "gather, capabilities \"checked\"".to_owned(),
                measure: measure(1.5),
                skipped: None,
            },
            TestRow {
                direction: Direction::Read,
                method: "pack".to_owned(),
                measure: Measure::none(),
                skipped: Some("no libfabric\nin this build".to_owned()),
            },
        ]);
        let text = String::from_utf8(report.to_csv().unwrap()).unwrap();
        assert_eq!(
            text,
            "direction,method,mib_s,mib_s_min,mib_s_max,seconds,skipped\n\
             write,\"gather, capabilities \"\"checked\"\"\",1.5,0.75,3.0,0.6666666666666666,\n\
             read,pack,,,,,\"no libfabric\nin this build\"\n"
        );
        // And a CSV reader gets the fields back whole.
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
        assert_eq!(records.len(), 2);
        assert_eq!(&records[0][1], "gather, capabilities \"checked\"");
        assert_eq!(&records[1][6], "no libfabric\nin this build");
    }

    #[test]
    fn an_unmeasured_row_is_null_in_json_and_has_no_rate() {
        let row = TestRow {
            direction: Direction::Read,
            method: "native".to_owned(),
            measure: Measure::none(),
            skipped: Some("no MPI".to_owned()),
        };
        let json = serde_json::to_value(&row).unwrap();
        for field in ["mib_s", "mib_s_min", "mib_s_max", "seconds"] {
            assert!(json[field].is_null(), "{field}: {json}");
        }
        assert_eq!(row.measure.measured(), None);
        assert_eq!(measure(2.0).measured(), Some(2.0));
        let range = SecondsRange::of(Spread::of(&[3.0, 1.0, 2.0]).unwrap());
        assert_eq!(
            serde_json::to_value(range).unwrap(),
            serde_json::json!({"seconds_min": 1.0, "seconds_max": 3.0})
        );
    }

    #[test]
    fn a_missing_row_is_an_error_naming_bench_case_and_method() {
        let report = report(vec![TestRow {
            direction: Direction::Write,
            method: "pack".to_owned(),
            measure: measure(2.0),
            skipped: None,
        }]);
        let found = report.row("write", "pack").unwrap();
        assert!((found.measure.mib_s - 2.0).abs() < f64::EPSILON);
        let err = report.row("read", "pack").err().unwrap();
        assert_eq!(err, "bench test: no row for case \"read\", method \"pack\"");
        let err = report.row("write", "gather").err().unwrap();
        assert!(
            err.contains("\"write\"") && err.contains("\"gather\""),
            "{err}"
        );
    }

    #[test]
    fn spread_gives_median_min_and_max() {
        let odd = Spread::of(&[3.0, 1.0, 2.0, 9.0, 5.0]).unwrap();
        assert_eq!(
            odd,
            Spread {
                min: 1.0,
                median: 3.0,
                max: 9.0
            }
        );
        let even = Spread::of(&[4.0, 1.0, 2.0, 8.0]).unwrap();
        assert_eq!(
            even,
            Spread {
                min: 1.0,
                median: 3.0,
                max: 8.0
            }
        );
        assert!(Spread::of(&[]).is_err());
        assert!(Spread::of(&[1.0, f64::NAN]).is_err());
        // Rates: the slowest time is the smallest rate.
        let rate = Spread::of(&[1.0, 2.0, 4.0]).unwrap().rate_of(1 << 20);
        assert_eq!(
            rate,
            Spread {
                min: 0.25,
                median: 0.5,
                max: 1.0
            }
        );
    }

    #[test]
    fn meta_names_version_commit_and_an_rfc3339_utc_time() {
        let meta = Meta::now(5);
        assert_eq!(meta.version, env!("CARGO_PKG_VERSION"));
        assert!(!meta.commit.is_empty());
        assert!(!meta.host.is_empty());
        let stamp = meta.timestamp.as_bytes();
        assert!(
            stamp.len() == 30 && stamp[4] == b'-' && stamp[10] == b'T' && stamp[29] == b'Z',
            "{}",
            meta.timestamp
        );
        assert_eq!(meta.repetitions, 5);
    }
}
