//! The storage cost model of Active Data Sieving (seed 001 §3.3, Table 3.1), with a batched
//! (io_uring) plan added: its parameters, its arithmetic ("how long would this call take"),
//! and the file an iod keeps it in, `DATA/cost-model.toml`.
//!
//! The parameters are what one storage call costs on a server's own data directory: per-call
//! overheads (`O_r`, `O_w`), the extra cost of a call that does not continue where the
//! previous one ended (`O_seek`), bandwidth by call size (`B_r(s)`, `B_w(s)`), memory copy
//! bandwidth (`B_mem`), the extent-lock costs (`O_lock`, `O_unlock`) and, for the batched plan,
//! the cost of one submission and of each entry in it.
//!
//! The measuring stays in the iod (`tessera_iod::cost::calibrate`, also `tessera iod
//! --calibrate`); it lives here, below the iod, so that the supervisor (`tessera-cluster`),
//! which shares one measured file between the iods of a machine, reads and copies it without
//! depending on the server. [`load_or_measure`] keeps a measurement in the file so later
//! starts reuse it, and an operator's file overrides any of the parameters.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// File name of the kept calibration inside a data directory.
pub const COST_MODEL_FILE: &str = "cost-model.toml";

/// Call sizes at which bandwidth is measured (and between which it is interpolated).
pub const CALIBRATION_SIZES: [usize; 4] = [4 << 10, 64 << 10, 1 << 20, 4 << 20];

/// Spans at which reads of data not in the page cache are measured.
pub const COLD_SIZES: [usize; 3] = [64 << 10, 1 << 20, 4 << 20];

/// [`CostModel::plan_margin`] unless a file sets it.
pub const PLAN_MARGIN_DEFAULT: f64 = 0.8;

/// Bandwidth at one call size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BandwidthPoint {
    /// Bytes per call.
    pub bytes: u64,
    /// MiB per second moved by calls of that size, not counting the per-call overhead.
    pub mib_s: f64,
}

/// Which way data moves between the server and storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Storage to the server.
    Read,
    /// The server to storage.
    Write,
}

/// The parameters of seed 001 Table 3.1, measured on this server's storage, plus io_uring.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostModel {
    /// `O_r`: overhead of one read call, µs.
    pub read_op_us: f64,
    /// `O_w`: overhead of one write call, µs.
    pub write_op_us: f64,
    /// `O_seek`: extra cost of a call that does not continue the previous one, µs.
    pub seek_us: f64,
    /// `O_lock`: taking the server-local extent lock, µs.
    pub lock_us: f64,
    /// `O_unlock`: releasing it, µs.
    pub unlock_us: f64,
    /// `B_mem`: memory copy bandwidth, MiB/s.
    pub memory_mib_s: f64,
    /// One io_uring submission and wait, µs (0 entries).
    pub batch_submit_us: f64,
    /// Each read entry of an io_uring batch, µs.
    pub batch_read_entry_us: f64,
    /// Each write entry of an io_uring batch, µs.
    pub batch_write_entry_us: f64,
    /// A plan other than per-piece is chosen only when its price is below this fraction of
    /// the plan it replaces. Calibration measures an idle machine with a hot cache; under load
    /// (many clients and servers on few cores) sieving's extra copies slow down more than
    /// system calls do, and an io_uring read that misses the page cache goes to a kernel
    /// worker thread. Measured on the block-column and tile benches here: at a predicted 13 %
    /// gain, sieved reads were 25 % slower, and batched reads were slower than per-piece.
    #[serde(default = "default_plan_margin")]
    pub plan_margin: f64,
    /// `B_r(s)`, ascending `bytes`.
    pub read_bandwidth: Vec<BandwidthPoint>,
    /// `B_w(s)`, ascending `bytes`.
    pub write_bandwidth: Vec<BandwidthPoint>,
    /// Reads of data that is not in the page cache, one call over `bytes` (a sieving chunk):
    /// MiB/s, the device's latency included. Ascending `bytes`.
    #[serde(default = "default_cold_read_bandwidth")]
    pub cold_read_bandwidth: Vec<BandwidthPoint>,
    /// Reads of a span of `bytes` that is not in the page cache, with one small call after
    /// another in ascending order, as per-piece reads of nearby pieces go: MiB/s over the
    /// span, the calls' own overhead (`O_r`) not counted. The kernel's readahead streams the
    /// span ahead of the calls, which on this kind of machine beats one large call over the
    /// same span (a single 1 MiB `pread` of cold data waited ~1.4x longer than 256 4 KiB
    /// calls across it). Ascending `bytes`.
    #[serde(default = "default_cold_stream_bandwidth")]
    pub cold_stream_bandwidth: Vec<BandwidthPoint>,
}

/// Points at `sizes` with the bandwidths `mib_s`.
fn curve_at<const N: usize>(sizes: &[usize; N], mib_s: [f64; N]) -> Vec<BandwidthPoint> {
    sizes
        .iter()
        .zip(mib_s)
        .map(|(&bytes, mib_s)| BandwidthPoint {
            bytes: bytes as u64,
            mib_s,
        })
        .collect()
}

fn default_cold_read_bandwidth() -> Vec<BandwidthPoint> {
    curve_at(&COLD_SIZES, [550.0, 1000.0, 900.0])
}

fn default_cold_stream_bandwidth() -> Vec<BandwidthPoint> {
    curve_at(&COLD_SIZES, [480.0, 1600.0, 2000.0])
}

impl Default for CostModel {
    /// Typical figures of a page-cache-backed ext4 directory on a small VM, used by tests and
    /// until a calibration exists.
    fn default() -> Self {
        let curve = |mib_s| curve_at(&CALIBRATION_SIZES, mib_s);
        Self {
            read_op_us: 0.8,
            write_op_us: 1.5,
            seek_us: 0.1,
            lock_us: 0.05,
            unlock_us: 0.05,
            memory_mib_s: 8000.0,
            batch_submit_us: 1.5,
            batch_read_entry_us: 0.4,
            batch_write_entry_us: 1.0,
            plan_margin: default_plan_margin(),
            read_bandwidth: curve([4000.0, 6000.0, 6000.0, 5000.0]),
            write_bandwidth: curve([2000.0, 3000.0, 3000.0, 2500.0]),
            cold_read_bandwidth: default_cold_read_bandwidth(),
            cold_stream_bandwidth: default_cold_stream_bandwidth(),
        }
    }
}

fn default_plan_margin() -> f64 {
    PLAN_MARGIN_DEFAULT
}

/// Microseconds per byte at `bytes` on `curve` (non-empty, ascending): interpolated on log
/// size between points, flat past the ends.
#[inline]
fn per_byte_on(curve: &[BandwidthPoint], bytes: u64) -> f64 {
    let per_byte = |point: &BandwidthPoint| 1.0 / (point.mib_s * 1.048_576);
    let first = &curve[0];
    let last = &curve[curve.len() - 1];
    if bytes <= first.bytes {
        return per_byte(first);
    }
    if bytes >= last.bytes {
        return per_byte(last);
    }
    let upper = curve.partition_point(|point| point.bytes < bytes);
    let (low, high) = (&curve[upper - 1], &curve[upper]);
    let (x0, x1, x) = (
        (low.bytes as f64).ln(),
        (high.bytes as f64).ln(),
        (bytes as f64).ln(),
    );
    let weight = (x - x0) / (x1 - x0);
    per_byte(low) + weight * (per_byte(high) - per_byte(low))
}

/// A cost model that cannot be used, with the reason.
#[derive(Debug, thiserror::Error)]
pub enum CostModelError {
    /// Reading or writing a model file, or measuring, failed.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// A model file does not parse, or a value in it is out of range.
    #[error("{path}: {detail}")]
    Invalid {
        /// The file involved.
        path: PathBuf,
        /// What is wrong, naming the key.
        detail: String,
    },
}

impl CostModel {
    /// Checks every parameter: finite, not negative, bandwidths positive, curves ascending.
    pub fn validate(&self) -> Result<(), String> {
        let scalars = [
            ("read_op_us", self.read_op_us),
            ("write_op_us", self.write_op_us),
            ("seek_us", self.seek_us),
            ("lock_us", self.lock_us),
            ("unlock_us", self.unlock_us),
            ("batch_submit_us", self.batch_submit_us),
            ("batch_read_entry_us", self.batch_read_entry_us),
            ("batch_write_entry_us", self.batch_write_entry_us),
        ];
        for (key, value) in scalars {
            if !value.is_finite() || value < 0.0 {
                return Err(format!("{key} = {value} must be a finite number >= 0"));
            }
        }
        if !(self.plan_margin > 0.0 && self.plan_margin <= 1.0) {
            return Err(format!(
                "plan_margin = {} must be in (0, 1]",
                self.plan_margin
            ));
        }
        if !self.memory_mib_s.is_finite() || self.memory_mib_s <= 0.0 {
            return Err(format!(
                "memory_mib_s = {} must be a finite number > 0",
                self.memory_mib_s
            ));
        }
        for (key, curve) in [
            ("read_bandwidth", &self.read_bandwidth),
            ("write_bandwidth", &self.write_bandwidth),
            ("cold_read_bandwidth", &self.cold_read_bandwidth),
            ("cold_stream_bandwidth", &self.cold_stream_bandwidth),
        ] {
            if curve.is_empty() {
                return Err(format!("{key} needs at least one point"));
            }
            for (index, point) in curve.iter().enumerate() {
                if !point.mib_s.is_finite() || point.mib_s <= 0.0 || point.bytes == 0 {
                    return Err(format!(
                        "{key}[{index}] = ({} bytes, {} MiB/s) needs bytes > 0 and a finite MiB/s > 0",
                        point.bytes, point.mib_s
                    ));
                }
                if index > 0 && curve[index - 1].bytes >= point.bytes {
                    return Err(format!("{key} sizes must ascend (see point {index})"));
                }
            }
        }
        Ok(())
    }

    /// Per-call overhead of `direction`, µs.
    #[inline]
    pub fn op_us(&self, direction: Direction) -> f64 {
        match direction {
            Direction::Read => self.read_op_us,
            Direction::Write => self.write_op_us,
        }
    }

    /// Microseconds per byte of a call of `bytes` bytes (`1 / B(s)`), interpolated on log size
    /// between measured points and flat past the ends.
    #[inline]
    pub fn us_per_byte(&self, direction: Direction, bytes: u64) -> f64 {
        match direction {
            Direction::Read => per_byte_on(&self.read_bandwidth, bytes),
            Direction::Write => per_byte_on(&self.write_bandwidth, bytes),
        }
    }

    /// One read call of `bytes` bytes of data not in the page cache, µs: `O_r` plus the
    /// bytes at the cold single-call bandwidth.
    #[inline]
    pub fn cold_read_us(&self, bytes: u64) -> f64 {
        self.read_op_us + bytes as f64 * per_byte_on(&self.cold_read_bandwidth, bytes)
    }

    /// Reading `calls` pieces spread over a cold span of `span` bytes one call each, µs:
    /// `calls × O_r` plus the span at the cold streaming bandwidth.
    #[inline]
    pub fn cold_stream_us(&self, span: u64, calls: usize) -> f64 {
        calls as f64 * self.read_op_us
            + span as f64 * per_byte_on(&self.cold_stream_bandwidth, span)
    }

    /// One storage call of `bytes` bytes (`O + S/B(S)`), µs; `seek` adds `O_seek`.
    #[inline]
    pub fn call_us(&self, direction: Direction, bytes: u64, seek: bool) -> f64 {
        let seek_us = if seek { self.seek_us } else { 0.0 };
        self.op_us(direction) + seek_us + bytes as f64 * self.us_per_byte(direction, bytes)
    }

    /// Copying `bytes` bytes in memory (`S/B_mem`), µs.
    #[inline]
    pub fn copy_us(&self, bytes: u64) -> f64 {
        bytes as f64 / (self.memory_mib_s * 1.048_576)
    }

    /// Each entry of an io_uring batch, µs.
    #[inline]
    pub fn batch_entry_us(&self, direction: Direction) -> f64 {
        match direction {
            Direction::Read => self.batch_read_entry_us,
            Direction::Write => self.batch_write_entry_us,
        }
    }

    /// The widest gap between two pieces that sieving should read through rather than start
    /// a new chunk: where moving the gap's bytes costs as much as the calls a split adds.
    pub fn gap_break_bytes(&self, direction: Direction) -> u64 {
        let large = 1 << 20;
        let (split_us, gap_us_per_byte) = match direction {
            Direction::Read => (
                self.read_op_us + self.seek_us,
                self.us_per_byte(Direction::Read, large),
            ),
            Direction::Write => (
                self.read_op_us + self.write_op_us + 2.0 * self.seek_us,
                self.us_per_byte(Direction::Read, large)
                    + self.us_per_byte(Direction::Write, large),
            ),
        };
        // Float to integer: the result is a byte count far below 2^53, rounded down.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let bytes = (split_us / gap_us_per_byte) as u64;
        bytes
    }

    /// One line of `key=value` pairs for logs and `tessera status --servers`.
    pub fn describe(&self) -> String {
        let curve = |points: &[BandwidthPoint]| {
            points
                .iter()
                .map(|point| format!("{}K:{:.0}", point.bytes >> 10, point.mib_s))
                .collect::<Vec<_>>()
                .join(",")
        };
        format!(
            "read_op_us={:.2} write_op_us={:.2} seek_us={:.2} lock_us={:.3} unlock_us={:.3} \
             memory_mib_s={:.0} batch_submit_us={:.2} batch_read_entry_us={:.2} \
             batch_write_entry_us={:.2} plan_margin={:.2} read_mib_s={} write_mib_s={} \
             cold_read_mib_s={} cold_stream_mib_s={} gap_break_read={} gap_break_write={}",
            self.read_op_us,
            self.write_op_us,
            self.seek_us,
            self.lock_us,
            self.unlock_us,
            self.memory_mib_s,
            self.batch_submit_us,
            self.batch_read_entry_us,
            self.batch_write_entry_us,
            self.plan_margin,
            curve(&self.read_bandwidth),
            curve(&self.write_bandwidth),
            curve(&self.cold_read_bandwidth),
            curve(&self.cold_stream_bandwidth),
            self.gap_break_bytes(Direction::Read),
            self.gap_break_bytes(Direction::Write),
        )
    }

    /// This model with every key present in the TOML text `overrides` replaced (a partial
    /// model: an operator sets only what they know better). `source` names the text in errors.
    pub fn with_overrides(&self, overrides: &str, source: &Path) -> Result<Self, CostModelError> {
        let invalid = |detail: String| CostModelError::Invalid {
            path: source.to_owned(),
            detail,
        };
        let table: toml::Table =
            toml::from_str(overrides).map_err(|err| invalid(err.to_string()))?;
        let mut merged = toml::Table::try_from(self).map_err(|err| invalid(err.to_string()))?;
        for (key, value) in table {
            if !merged.contains_key(&key) {
                return Err(invalid(format!("unknown cost model key `{key}`")));
            }
            merged.insert(key, value);
        }
        let model: Self = merged.try_into().map_err(|err| invalid(err.to_string()))?;
        model.validate().map_err(invalid)?;
        Ok(model)
    }
}

/// Reads the model kept in `data_directory` ([`COST_MODEL_FILE`]), checked; `None` when there
/// is none.
pub fn load(data_directory: &Path) -> Result<Option<CostModel>, CostModelError> {
    let kept = data_directory.join(COST_MODEL_FILE);
    match fs::read_to_string(&kept) {
        Ok(text) => CostModel::default().with_overrides(&text, &kept).map(Some),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CostModelError::Io { path: kept, source }),
    }
}

/// Keeps `model` in `data_directory` ([`COST_MODEL_FILE`]), by rename: a reader never sees
/// half of it.
pub fn save(data_directory: &Path, model: &CostModel) -> Result<(), CostModelError> {
    let kept = data_directory.join(COST_MODEL_FILE);
    let text = toml::to_string(model).map_err(|err| CostModelError::Invalid {
        path: kept.clone(),
        detail: err.to_string(),
    })?;
    let temporary = kept.with_extension("tmp");
    fs::write(&temporary, text)
        .and_then(|()| fs::rename(&temporary, &kept))
        .map_err(|source| CostModelError::Io { path: kept, source })
}

/// Loads `DATA/cost-model.toml` if it exists, otherwise runs `measure` on the data directory
/// and keeps its model there; with `recalibrate` it always measures. Then applies the
/// operator's `overrides` file, if given.
pub fn load_or_measure(
    data_directory: &Path,
    recalibrate: bool,
    overrides: Option<&Path>,
    measure: impl FnOnce(&Path) -> io::Result<CostModel>,
) -> Result<CostModel, CostModelError> {
    let io = |path: &Path, source: io::Error| CostModelError::Io {
        path: path.to_owned(),
        source,
    };
    // A recalibration replaces a kept file that does not parse; one that cannot be read is
    // still an error.
    let kept = match load(data_directory) {
        Ok(kept) => kept.filter(|_| !recalibrate),
        Err(CostModelError::Invalid { .. }) if recalibrate => None,
        Err(err) => return Err(err),
    };
    let model = if let Some(model) = kept {
        model
    } else {
        let model = measure(data_directory).map_err(|err| io(data_directory, err))?;
        save(data_directory, &model)?;
        model
    };
    match overrides {
        None => Ok(model),
        Some(path) => {
            let text = fs::read_to_string(path).map_err(|err| io(path, err))?;
            model.with_overrides(&text, path)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_interpolates_on_log_size_and_is_flat_past_the_ends() {
        let model = CostModel {
            read_bandwidth: vec![
                BandwidthPoint {
                    bytes: 1024,
                    mib_s: 1000.0,
                },
                BandwidthPoint {
                    bytes: 1 << 20,
                    mib_s: 4000.0,
                },
            ],
            ..CostModel::default()
        };
        let at = |bytes| model.us_per_byte(Direction::Read, bytes);
        assert!((at(1) - at(1024)).abs() < 1e-15);
        assert!((at(1 << 30) - at(1 << 20)).abs() < 1e-15);
        let middle = at(32 << 10);
        assert!(middle < at(1024) && middle > at(1 << 20), "{middle}");
        // Halfway on the log scale is halfway between the two per-byte costs.
        let halfway = f64::midpoint(at(1024), at(1 << 20));
        assert!((middle - halfway).abs() < 1e-12);
    }

    #[test]
    fn overrides_replace_named_keys_and_refuse_unknown_or_bad_ones() {
        let base = CostModel::default();
        let path = Path::new("/etc/tessera/cost.toml");
        let changed = base.with_overrides("seek_us = 40.0\n", path).unwrap();
        assert!((changed.seek_us - 40.0).abs() < f64::EPSILON);
        assert!((changed.read_op_us - base.read_op_us).abs() < f64::EPSILON);
        let unknown = base.with_overrides("seek_ms = 1.0\n", path).unwrap_err();
        assert!(unknown.to_string().contains("seek_ms"), "{unknown}");
        assert!(unknown.to_string().contains("/etc/tessera/cost.toml"));
        let negative = base.with_overrides("lock_us = -1.0\n", path).unwrap_err();
        assert!(negative.to_string().contains("lock_us"), "{negative}");
        let unsorted = base
            .with_overrides(
                "read_bandwidth = [{ bytes = 4096, mib_s = 1.0 }, { bytes = 16, mib_s = 1.0 }]\n",
                path,
            )
            .unwrap_err();
        assert!(unsorted.to_string().contains("ascend"), "{unsorted}");
    }

    #[test]
    fn a_measured_model_is_kept_and_read_back_and_a_bad_file_is_refused() {
        let directory = tempfile::tempdir().unwrap();
        assert!(load(directory.path()).unwrap().is_none());
        let measured = CostModel {
            seek_us: 7.0,
            ..CostModel::default()
        };
        let model =
            load_or_measure(directory.path(), false, None, |_| Ok(measured.clone())).unwrap();
        assert_eq!(model, measured);
        let kept = directory.path().join(COST_MODEL_FILE);
        assert!(kept.exists());
        // A second start reads the kept model instead of measuring again.
        let again = load_or_measure(directory.path(), false, None, |_| {
            Err(io::Error::other("measured again"))
        })
        .unwrap();
        assert_eq!(again, measured);
        let failed = load_or_measure(directory.path(), true, None, |_| {
            Err(io::Error::other("no storage"))
        })
        .unwrap_err();
        assert!(failed.to_string().contains("no storage"), "{failed}");
        fs::write(&kept, "read_op_us = \"fast\"\n").unwrap();
        let err = load(directory.path()).unwrap_err();
        assert!(err.to_string().contains(COST_MODEL_FILE), "{err}");
    }
}
