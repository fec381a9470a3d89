//! The calibration of the storage cost model of Active Data Sieving (seed 001 §3.3, Table
//! 3.1): the model itself, its arithmetic and its file `DATA/cost-model.toml` are
//! `tessera_policy::cost`, re-exported here.
//!
//! [`calibrate`] measures the parameters at start-up in a scratch file under the data
//! directory; [`load_or_calibrate`] keeps the result in `DATA/cost-model.toml` so later starts
//! reuse it, and an operator's file overrides any of them. The planner (`plan.rs`) only ever
//! asks the model "how long would this call take".

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

use tessera_proto::limits::URING_BATCH_ENTRIES_MAX;

pub use tessera_policy::cost::{
    BandwidthPoint, CostModel, CostModelError, Direction, COST_MODEL_FILE,
};
use tessera_policy::cost::{CALIBRATION_SIZES, COLD_SIZES, PLAN_MARGIN_DEFAULT};

use crate::extent::ExtentLocks;
use crate::uring;

/// Bytes of the scratch file calibration measures on.
const CALIBRATION_FILE_BYTES: usize = 8 << 20;

/// Bytes per call that fill the scratch file (the default stripe unit).
const CALIBRATION_FILL_BYTES: usize = 64 << 10;

/// Bytes moved by each call of the per-call overhead measurements.
const PROBE_BYTES: usize = 64;

/// Bytes per call when a cold span is read with many small calls.
const COLD_STREAM_CALL_BYTES: usize = 4 << 10;

/// Loads `DATA/cost-model.toml` if it exists, otherwise measures the model ([`calibrate`])
/// and keeps it there; with `recalibrate` it always measures. Then applies the operator's
/// `overrides` file, if given.
pub fn load_or_calibrate(
    data_directory: &Path,
    recalibrate: bool,
    overrides: Option<&Path>,
) -> Result<CostModel, CostModelError> {
    tessera_policy::cost::load_or_measure(data_directory, recalibrate, overrides, calibrate)
}

/// The median of `samples` runs of `measure`, each returning seconds per call.
fn median_of(samples: usize, mut measure: impl FnMut() -> io::Result<f64>) -> io::Result<f64> {
    let mut times = (0..samples)
        .map(|_| measure())
        .collect::<io::Result<Vec<f64>>>()?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// A deterministic scatter of `count` 4 KiB-aligned offsets inside the scratch file.
fn scattered_offsets(count: usize, bytes: usize) -> Vec<u64> {
    let slots = (CALIBRATION_FILE_BYTES / 4096 - 1) as u64;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % slots) * 4096 + (4096 - bytes as u64).min(64)
        })
        .collect()
}

/// Seconds per call of `calls` calls of `call(offset, index)`.
fn per_call(calls: &[u64], mut call: impl FnMut(u64, usize) -> io::Result<()>) -> io::Result<f64> {
    let started = Instant::now();
    for (index, &offset) in calls.iter().enumerate() {
        call(offset, index)?;
    }
    Ok(started.elapsed().as_secs_f64() / calls.len() as f64)
}

/// Measures the model on a scratch file in `data_directory` (about 50 ms on a small VM; the
/// file is removed afterwards). Measurements run against the page cache, as the server's own
/// calls do: the model is conservative for data that must come from the device, where
/// sieving pays more (seed 001 §3.3.1).
pub fn calibrate(data_directory: &Path) -> io::Result<CostModel> {
    let path = data_directory.join(".calibrate.tmp");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(crate::files::OWNER_ONLY_FILE)
        .open(&path)?;
    let result = calibrate_on(&file);
    drop(file);
    let _ = fs::remove_file(&path);
    result
}

fn calibrate_on(file: &File) -> io::Result<CostModel> {
    let pattern: Vec<u8> = (0..CALIBRATION_FILE_BYTES)
        .map(|index| u8::try_from(index % 251).expect("below 251"))
        .collect();
    // Written in stripe-unit calls, as objects are: the page cache sizes its folios by the
    // writes that filled it, and a small write into a large folio costs several times more
    // (measured here: 0.4 µs into 64 KiB-written data, 7 µs into data written 8 MiB at once).
    for (index, unit) in pattern.chunks(CALIBRATION_FILL_BYTES).enumerate() {
        file.write_all_at(unit, (index * CALIBRATION_FILL_BYTES) as u64)?;
    }
    let mut buffer = vec![0u8; CALIBRATION_SIZES[CALIBRATION_SIZES.len() - 1]];
    // Warm the cache with one pass.
    for offset in (0..CALIBRATION_FILE_BYTES).step_by(buffer.len()) {
        file.read_exact_at(&mut buffer, offset as u64)?;
    }

    // Ascending, one probe per 1 KiB (the pieces of a list request are apart, not adjacent),
    // against the same number scattered at random: the difference is `O_seek`.
    let probes = 2048;
    let sequential: Vec<u64> = (0..probes).map(|i| (i * 1024) as u64).collect();
    let scattered = scattered_offsets(probes, PROBE_BYTES);
    let mut probe = [0u8; PROBE_BYTES];
    let read_sequential = median_of(3, || {
        per_call(&sequential, |offset, _| {
            file.read_exact_at(&mut probe, offset)
        })
    })?;
    let read_scattered = median_of(3, || {
        per_call(&scattered, |offset, _| {
            file.read_exact_at(&mut probe, offset)
        })
    })?;
    let write_sequential = median_of(3, || {
        per_call(&sequential, |offset, _| {
            file.write_all_at(&pattern[..PROBE_BYTES], offset)
        })
    })?;
    let write_scattered = median_of(3, || {
        per_call(&scattered, |offset, _| {
            file.write_all_at(&pattern[..PROBE_BYTES], offset)
        })
    })?;
    let read_op = read_sequential;
    let write_op = write_sequential;
    let seek = f64::midpoint(
        read_scattered - read_sequential,
        write_scattered - write_sequential,
    );

    // Small calls first: the large writes below grow the page cache's folios.
    let (batch_submit, batch_read_entry, batch_write_entry) = match uring::available() {
        Ok(()) => calibrate_batches(file, &scattered, &pattern)?,
        // No io_uring: the planner never chooses a batch, so these are never used.
        Err(_) => (1e-6, 1e-6, 1e-6),
    };

    let (read_bandwidth, write_bandwidth) =
        calibrate_bandwidths(file, &mut buffer, &pattern, (read_op, write_op))?;

    let (cold_read_bandwidth, cold_stream_bandwidth) = calibrate_cold(file, read_op)?;

    let copy_bytes = 4 << 20;
    let mut target = vec![0u8; copy_bytes];
    let copy = median_of(5, || {
        let started = Instant::now();
        target.copy_from_slice(&pattern[..copy_bytes]);
        std::hint::black_box(&mut target);
        Ok(started.elapsed().as_secs_f64())
    })?;

    let locks = ExtentLocks::default();
    let rounds = 10_000;
    let lock_pair = median_of(3, || {
        let started = Instant::now();
        for round in 0..rounds {
            let guard = locks.lock(round, round + 1, true);
            std::hint::black_box(&guard);
        }
        Ok(started.elapsed().as_secs_f64() / rounds as f64)
    })?;

    let us = |seconds: f64| (seconds * 1e6).max(0.0);
    let model = CostModel {
        read_op_us: us(read_op),
        write_op_us: us(write_op),
        seek_us: us(seek),
        lock_us: us(lock_pair / 2.0),
        unlock_us: us(lock_pair / 2.0),
        memory_mib_s: copy_bytes as f64 / copy / f64::from(1u32 << 20),
        batch_submit_us: us(batch_submit),
        batch_read_entry_us: us(batch_read_entry),
        batch_write_entry_us: us(batch_write_entry),
        plan_margin: PLAN_MARGIN_DEFAULT,
        read_bandwidth,
        write_bandwidth,
        cold_read_bandwidth,
        cold_stream_bandwidth,
    };
    model.validate().map_err(|detail| {
        io::Error::other(format!("calibration gave an unusable model: {detail}"))
    })?;
    Ok(model)
}

/// Read and write bandwidth of warm calls of each of `CALIBRATION_SIZES`, net of the per-call
/// costs `(read_op, write_op)` (never below a tenth of the gross figure).
fn calibrate_bandwidths(
    file: &File,
    buffer: &mut [u8],
    pattern: &[u8],
    (read_op, write_op): (f64, f64),
) -> io::Result<(Vec<BandwidthPoint>, Vec<BandwidthPoint>)> {
    let mut read_bandwidth = Vec::new();
    let mut write_bandwidth = Vec::new();
    for &size in &CALIBRATION_SIZES {
        let calls: Vec<u64> = (0..(CALIBRATION_FILE_BYTES / size).clamp(4, 256))
            .map(|i| ((i * size) % CALIBRATION_FILE_BYTES) as u64)
            .collect();
        let read = median_of(3, || {
            per_call(&calls, |offset, _| {
                file.read_exact_at(&mut buffer[..size], offset)
            })
        })?;
        let write = median_of(3, || {
            per_call(&calls, |offset, _| {
                file.write_all_at(&pattern[..size], offset)
            })
        })?;
        // Bandwidth net of the per-call overhead, never below a tenth of the gross figure.
        let net = |seconds: f64, op: f64| (seconds - op).max(seconds / 10.0);
        let mib_s = |seconds: f64| size as f64 / seconds / f64::from(1u32 << 20);
        read_bandwidth.push(BandwidthPoint {
            bytes: size as u64,
            mib_s: mib_s(net(read, read_op)),
        });
        write_bandwidth.push(BandwidthPoint {
            bytes: size as u64,
            mib_s: mib_s(net(write, write_op)),
        });
    }
    Ok((read_bandwidth, write_bandwidth))
}

/// Drops the page cache of `file` (whose data must be on the device already).
fn drop_cached(file: &File) -> io::Result<()> {
    // SAFETY: posix_fadvise only advises the kernel about an open descriptor.
    let status = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if status == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(status))
    }
}

/// The cold-read curves: for each span of [`COLD_SIZES`], after the file's cached pages are
/// dropped, one call over the span, and [`COLD_STREAM_CALL_BYTES`] calls across it (net of
/// `read_op` seconds per call). Where the page cache cannot be dropped (tmpfs), both measure
/// cached reads and the planner prices cold and cached reads alike.
fn calibrate_cold(
    file: &File,
    read_op: f64,
) -> io::Result<(Vec<BandwidthPoint>, Vec<BandwidthPoint>)> {
    file.sync_data()?;
    let mut buffer = vec![0u8; COLD_SIZES[COLD_SIZES.len() - 1]];
    let (mut single, mut stream) = (Vec::new(), Vec::new());
    let mib_s = |bytes: usize, seconds: f64| bytes as f64 / seconds / f64::from(1u32 << 20);
    for &size in &COLD_SIZES {
        // The span ends the file, as a whole small object does: the kernel's readahead stops
        // at the end of the file rather than reading past the span for one plan and not the
        // other.
        let start = CALIBRATION_FILE_BYTES - size;
        let one = median_of(5, || {
            drop_cached(file)?;
            let started = Instant::now();
            file.read_exact_at(&mut buffer[..size], start as u64)?;
            Ok(started.elapsed().as_secs_f64())
        })?;
        let calls = size / COLD_STREAM_CALL_BYTES;
        let many = median_of(5, || {
            drop_cached(file)?;
            let started = Instant::now();
            for offset in (start..CALIBRATION_FILE_BYTES).step_by(COLD_STREAM_CALL_BYTES) {
                file.read_exact_at(&mut buffer[..COLD_STREAM_CALL_BYTES], offset as u64)?;
            }
            Ok(started.elapsed().as_secs_f64())
        })?;
        let net = |seconds: f64, overhead: f64| (seconds - overhead).max(seconds / 10.0);
        single.push(BandwidthPoint {
            bytes: size as u64,
            mib_s: mib_s(size, net(one, read_op)),
        });
        stream.push(BandwidthPoint {
            bytes: size as u64,
            mib_s: mib_s(size, net(many, calls as f64 * read_op)),
        });
    }
    Ok((single, stream))
}

/// Seconds of one io_uring submission and of each read and write entry in one.
fn calibrate_batches(file: &File, offsets: &[u64], pattern: &[u8]) -> io::Result<(f64, f64, f64)> {
    use crate::run::Run;
    let entries = URING_BATCH_ENTRIES_MAX as usize;
    let runs = |count: usize| -> Vec<Run> {
        offsets[..count]
            .iter()
            .enumerate()
            .map(|(index, &offset)| Run {
                offset,
                length: PROBE_BYTES as u64,
                data: index * PROBE_BYTES,
            })
            .collect()
    };
    let (one, full) = (runs(1), runs(entries));
    let mut buffer = vec![0u8; entries * PROBE_BYTES];
    let read_one = median_of(5, || {
        let started = Instant::now();
        uring::read(file, &one, &mut buffer)?;
        Ok(started.elapsed().as_secs_f64())
    })?;
    let read_full = median_of(5, || {
        let started = Instant::now();
        uring::read(file, &full, &mut buffer)?;
        Ok(started.elapsed().as_secs_f64())
    })?;
    let data = &pattern[..entries * PROBE_BYTES];
    let write_one = median_of(5, || {
        let started = Instant::now();
        uring::write(file, &one, data)?;
        Ok(started.elapsed().as_secs_f64())
    })?;
    let write_full = median_of(5, || {
        let started = Instant::now();
        uring::write(file, &full, data)?;
        Ok(started.elapsed().as_secs_f64())
    })?;
    let spread = (entries - 1) as f64;
    let read_entry = ((read_full - read_one) / spread).max(0.0);
    let write_entry = ((write_full - write_one) / spread).max(0.0);
    let submit = (read_one - read_entry).max(0.0);
    Ok((submit, read_entry, write_entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_measures_a_usable_model_and_keeps_it() {
        let directory = tempfile::tempdir().unwrap();
        let model = load_or_calibrate(directory.path(), false, None).unwrap();
        model.validate().unwrap();
        assert!(model.read_op_us > 0.0 && model.write_op_us > 0.0);
        assert_eq!(model.read_bandwidth.len(), CALIBRATION_SIZES.len());
        let kept = directory.path().join(COST_MODEL_FILE);
        assert!(kept.exists());
        assert!(!directory.path().join(".calibrate.tmp").exists());
        // A second start reads the kept model instead of measuring again.
        fs::write(&kept, "read_op_us = 123.0\n").unwrap();
        let again = load_or_calibrate(directory.path(), false, None).unwrap();
        assert!((again.read_op_us - 123.0).abs() < f64::EPSILON);
        let broken = directory.path().join("bad.toml");
        fs::write(&broken, "read_op_us = \"fast\"\n").unwrap();
        let err = load_or_calibrate(directory.path(), false, Some(&broken)).unwrap_err();
        assert!(err.to_string().contains("bad.toml"), "{err}");
    }
}
