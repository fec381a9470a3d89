//! What time things take: the network, the disk, a client cache hit.
//!
//! A message of `n` bytes costs `latency + n / bandwidth`. The paper's parameters are seed 001
//! Table 6.1 (minimum latency and effective bandwidth at 4 KiB of its three networks) and
//! §6.4.2 (4 KiB blocks, 10 ms per random disk block). Parameters measured on this machine come
//! from a JSON file the user gives, or from a short loopback TCP run ([`measure_loopback`]).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Block size of the paper's simulation (seed 001 §6.4.2), bytes.
pub const BLOCK_BYTES: usize = 4096;
/// Time to read one random block from disk (seed 001 §6.4.2, after Wong and Wilkes), µs.
pub const PAPER_DISK_US: f64 = 10_000.0;
/// Bytes of a read request, and of the server's answer to a DEMOTE's metadata.
pub const CONTROL_BYTES: usize = 64;
/// Bytes of metadata per demoted block (file, block, version).
pub const METADATA_BYTES_PER_BLOCK: usize = 24;

/// The cost parameters of one network (and the disk behind the server).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Costs {
    /// Its name in tables.
    pub name: String,
    /// One-way latency of a message, µs.
    pub latency_us: f64,
    /// Bandwidth, MiB/s.
    pub bandwidth_mib_s: f64,
    /// Time to read one block from disk, µs.
    #[serde(default = "paper_disk_us")]
    pub disk_us: f64,
    /// Time a client cache (or DEMOTE buffer) hit takes, µs: the paper charges nothing.
    #[serde(default)]
    pub hit_us: f64,
}

fn paper_disk_us() -> f64 {
    PAPER_DISK_US
}

impl Costs {
    /// Time of one message of `bytes`, µs.
    pub fn message_us(&self, bytes: usize) -> f64 {
        self.latency_us + bytes as f64 / (self.bandwidth_mib_s * 1_048_576.0) * 1e6
    }

    /// Refuses parameters that are not positive finite numbers (or non-negative, for hits).
    pub fn check(&self) -> Result<(), String> {
        let fields = [
            ("latency_us", self.latency_us, false),
            ("bandwidth_mib_s", self.bandwidth_mib_s, true),
            ("disk_us", self.disk_us, false),
            ("hit_us", self.hit_us, false),
        ];
        for (field, value, positive) in fields {
            if !value.is_finite() || value < 0.0 || (positive && value == 0.0) {
                return Err(format!(
                    "cost parameters `{}`: {field} = {value} is not a {} number",
                    self.name,
                    if positive { "positive" } else { "non-negative" }
                ));
            }
        }
        Ok(())
    }

    /// Reads measured parameters from a JSON object with these fields (`disk_us` defaults to
    /// the paper's 10 ms, `hit_us` to 0, `name` to "measured").
    pub fn from_json(text: &str, origin: &str) -> Result<Self, String> {
        let mut value: serde_json::Value =
            serde_json::from_str(text).map_err(|err| format!("{origin}: {err}"))?;
        if let Some(object) = value.as_object_mut() {
            object
                .entry("name")
                .or_insert_with(|| serde_json::Value::from("measured"));
        }
        let costs: Costs =
            serde_json::from_value(value).map_err(|err| format!("{origin}: {err}"))?;
        costs.check()?;
        Ok(costs)
    }
}

/// The paper's three networks (seed 001 Table 6.1: min. latency, eff. bandwidth at 4 kB) with
/// its 10 ms disk (§6.4.2).
pub fn paper_networks() -> Vec<Costs> {
    [
        ("FE", 68.0, 11.0),
        ("IBNice", 36.0, 109.0),
        ("VAPI", 5.4, 718.0),
    ]
    .into_iter()
    .map(|(name, latency_us, bandwidth_mib_s)| Costs {
        name: name.to_owned(),
        latency_us,
        bandwidth_mib_s,
        disk_us: PAPER_DISK_US,
        hit_us: 0.0,
    })
    .collect()
}

/// Round trips of the loopback latency measurement.
const LOOPBACK_ROUND_TRIPS: u32 = 2000;
/// Blocks sent one way in the loopback bandwidth measurement.
const LOOPBACK_BLOCKS: u32 = 20_000;
/// How long any socket call of the measurement may wait.
const LOOPBACK_TIMEOUT: Duration = Duration::from_secs(5);

/// Measures this machine's loopback TCP: one-way latency as half the median of 1-byte round
/// trips, bandwidth from streaming 4 KiB blocks, and a 4 KiB `memcpy` as the hit time. The
/// disk stays the paper's 10 ms (a random-read disk cannot be measured quickly or safely).
pub fn measure_loopback() -> Result<Costs, String> {
    let fail = |what: &str, err: std::io::Error| format!("loopback measurement: {what}: {err}");
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|err| fail("bind", err))?;
    let address = listener.local_addr().map_err(|err| fail("address", err))?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut stream, _) = listener.accept()?;
        stream.set_read_timeout(Some(LOOPBACK_TIMEOUT))?;
        stream.set_nodelay(true)?;
        let mut byte = [0_u8; 1];
        for _ in 0..LOOPBACK_ROUND_TRIPS {
            stream.read_exact(&mut byte)?;
            stream.write_all(&byte)?;
        }
        let mut block = vec![0_u8; BLOCK_BYTES];
        for _ in 0..LOOPBACK_BLOCKS {
            stream.read_exact(&mut block)?;
        }
        stream.write_all(&byte)
    });
    let mut stream = TcpStream::connect_timeout(&address, LOOPBACK_TIMEOUT)
        .map_err(|err| fail("connect", err))?;
    stream
        .set_read_timeout(Some(LOOPBACK_TIMEOUT))
        .and_then(|()| stream.set_nodelay(true))
        .map_err(|err| fail("socket options", err))?;
    let mut round_trips_us = Vec::with_capacity(LOOPBACK_ROUND_TRIPS as usize);
    let mut byte = [7_u8; 1];
    for _ in 0..LOOPBACK_ROUND_TRIPS {
        let start = Instant::now();
        stream
            .write_all(&byte)
            .and_then(|()| stream.read_exact(&mut byte))
            .map_err(|err| fail("round trip", err))?;
        round_trips_us.push(start.elapsed().as_secs_f64() * 1e6);
    }
    round_trips_us.sort_by(f64::total_cmp);
    let latency_us = round_trips_us[round_trips_us.len() / 2] / 2.0;
    let block = vec![1_u8; BLOCK_BYTES];
    let start = Instant::now();
    for _ in 0..LOOPBACK_BLOCKS {
        stream
            .write_all(&block)
            .map_err(|err| fail("stream", err))?;
    }
    stream
        .read_exact(&mut byte)
        .map_err(|err| fail("stream end", err))?;
    let seconds = start.elapsed().as_secs_f64();
    echo.join()
        .map_err(|_| "loopback measurement: the echo thread panicked".to_owned())?
        .map_err(|err| fail("echo", err))?;
    let bandwidth_mib_s =
        f64::from(LOOPBACK_BLOCKS) * BLOCK_BYTES as f64 / 1_048_576.0 / seconds.max(1e-9);
    let costs = Costs {
        name: "loopback".to_owned(),
        latency_us,
        bandwidth_mib_s,
        disk_us: PAPER_DISK_US,
        hit_us: memcpy_block_us(),
    };
    costs.check()?;
    Ok(costs)
}

/// Median time of a 4 KiB copy, µs.
fn memcpy_block_us() -> f64 {
    const COPIES: usize = 10_000;
    let source = vec![3_u8; BLOCK_BYTES];
    let mut target = vec![0_u8; BLOCK_BYTES];
    let start = Instant::now();
    for _ in 0..COPIES {
        target.copy_from_slice(std::hint::black_box(&source));
        std::hint::black_box(&mut target);
    }
    start.elapsed().as_secs_f64() * 1e6 / COPIES as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_4k_message_on_fast_ethernet_costs_latency_plus_transfer() {
        let fe = &paper_networks()[0];
        let us = fe.message_us(BLOCK_BYTES);
        assert!((us - (68.0 + 355.1)).abs() < 1.0, "{us}");
    }

    #[test]
    fn measured_json_fills_defaults_and_refuses_nonsense() {
        let costs =
            Costs::from_json(r#"{"latency_us": 20, "bandwidth_mib_s": 900}"#, "m.json").unwrap();
        assert_eq!(costs.name, "measured");
        assert!((costs.disk_us - PAPER_DISK_US).abs() < f64::EPSILON);
        let err =
            Costs::from_json(r#"{"latency_us": 20, "bandwidth_mib_s": 0}"#, "m.json").unwrap_err();
        assert!(err.contains("bandwidth_mib_s"), "{err}");
        let err = Costs::from_json(r#"{"latency_us": 20}"#, "m.json").unwrap_err();
        assert!(
            err.starts_with("m.json:") && err.contains("bandwidth_mib_s"),
            "{err}"
        );
        let err = Costs::from_json(
            r#"{"latency_us": 1, "bandwidth_mib_s": 1, "disk": 3}"#,
            "m.json",
        )
        .unwrap_err();
        assert!(err.contains("disk"), "{err}");
    }

    #[test]
    fn loopback_measurement_gives_positive_numbers() {
        let costs = measure_loopback().unwrap();
        assert!(
            costs.latency_us > 0.0 && costs.latency_us < 10_000.0,
            "{costs:?}"
        );
        assert!(costs.bandwidth_mib_s > 1.0, "{costs:?}");
    }
}
