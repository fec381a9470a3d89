//! The client processes of `tessera bench small`: each runs one step — timed small calls on
//! its own file, the many-small-writes pattern, or null requests to its file's iod — and
//! checks the bytes afterwards, untimed.

use std::collections::HashMap;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tessera_client::{Client, ClientOptions, ClusterConfig, CreateOptions, File};

use crate::workers::expected_byte;

/// Arguments of the hidden `tessera-bench small-worker` command.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// Rank of this process among the workers.
    #[arg(long)]
    rank: usize,
}

/// How a Tessera method reaches its iods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// The same-host Unix socket, data moved one-sidedly.
    Local,
    /// Loopback TCP.
    Tcp,
}

impl Transport {
    pub const BOTH: [Self; 2] = [Self::Local, Self::Tcp];

    pub fn name(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Tcp => "tcp",
        }
    }
}

/// Where a step's calls go.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Target {
    /// The native client of the cluster in `cluster`, over `transport`, with a client cache
    /// of `cache_bytes` (0: none).
    Tessera {
        cluster: PathBuf,
        transport: Transport,
        cache_bytes: u64,
    },
    /// A local file: pread/pwrite.
    Local,
}

/// The calls of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Work {
    /// `slots` reads of `size` bytes, each slot once: in order, or in a shuffled order. A
    /// first untimed pass warms every cache.
    Read {
        size: usize,
        slots: usize,
        random: bool,
    },
    /// `slots` writes of `size` bytes, each slot once.
    Write {
        size: usize,
        slots: usize,
        random: bool,
    },
    /// The many-small-writes pattern: this process's `pieces` pieces of `piece` bytes of an
    /// array interleaved over `processes`, one write call each, from open to close.
    ManySmall {
        piece: usize,
        pieces: usize,
        processes: usize,
    },
    /// Reads back what many-small wrote, untimed, after every process closed.
    CheckMany {
        piece: usize,
        pieces: usize,
        processes: usize,
    },
    /// `count` null requests to the iod holding the file.
    Ping { count: usize },
}

/// What one worker does in one step.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Step {
    pub target: Target,
    /// The file: a Tessera path, or a local path.
    pub path: String,
    pub work: Work,
    /// The generation of the bytes the file holds (reads) or is to hold (writes).
    pub generation: u64,
    /// The write group the processes of the step share (0: none; `File::set_write_group`).
    #[serde(default)]
    pub group: u64,
}

/// What one worker measured in one step.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Outcome {
    /// Seconds from `go` to the last call (to the close, for many-small).
    pub seconds: f64,
    /// Calls timed.
    pub ops: u64,
    /// Bytes moved by them.
    pub bytes: u64,
    /// Each call's latency, microseconds (none for many-small: its time is the figure).
    pub latencies_us: Vec<f32>,
    /// The untimed check found every byte where it belongs.
    pub verified: bool,
    /// What the check found wrong (empty when verified).
    pub problem: String,
}

/// A file open on one target.
enum Opened {
    Tessera(File),
    Local(std::fs::File),
}

impl Opened {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), String> {
        match self {
            Self::Tessera(file) => file.read_at(offset, buf).map(drop),
            Self::Local(file) => return file.read_exact_at(buf, offset).map_err(|e| e.to_string()),
        }
        .map_err(|err| err.to_string())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), String> {
        match self {
            Self::Tessera(file) => file.write_at(offset, data).map(drop),
            Self::Local(file) => return file.write_all_at(data, offset).map_err(|e| e.to_string()),
        }
        .map_err(|err| err.to_string())
    }
}

/// A worker process: a client per (cluster, transport, cache), made once.
struct SmallWorker {
    rank: usize,
    clients: HashMap<Target, Client>,
}

impl SmallWorker {
    fn client(&mut self, target: &Target) -> Result<&Client, String> {
        let Target::Tessera {
            cluster,
            transport,
            cache_bytes,
        } = target
        else {
            return Err("a local target has no client".to_owned());
        };
        if !self.clients.contains_key(target) {
            let config = ClusterConfig::load(cluster).map_err(|err| err.to_string())?;
            let options = ClientOptions {
                local: *transport == Transport::Local,
                cache_bytes: Some(*cache_bytes),
                // The client cache, both halves: cached reads and buffered writes.
                write_back: Some(*cache_bytes > 0),
                ..ClientOptions::default()
            };
            self.clients
                .insert(target.clone(), Client::new(&config, &options));
        }
        Ok(&self.clients[target])
    }

    /// Opens `path` for reading and writing, making it if missing: on one iod, or striped
    /// over all (`servers` 0).
    fn open(&mut self, target: &Target, path: &str, servers: u16) -> Result<Opened, String> {
        if *target == Target::Local {
            return std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(path)
                .map(Opened::Local)
                .map_err(|err| format!("{path}: {err}"));
        }
        let client = self.client(target)?;
        let options = CreateOptions {
            server_count: servers,
            ..CreateOptions::default()
        };
        client
            .create(path, &options)
            .map(Opened::Tessera)
            .map_err(|err| format!("{path}: {err}"))
    }

    /// Runs one step on its target: its kind of calls, timed, then checked.
    fn step(&mut self, step: &Step) -> Result<Outcome, String> {
        let servers = u16::from(!matches!(
            step.work,
            Work::ManySmall { .. } | Work::CheckMany { .. }
        ));
        let file = self.open(&step.target, &step.path, servers)?;
        match step.work {
            Work::Read {
                size,
                slots,
                random,
            } => self.read_calls(&file, step, size, slots, random),
            Work::Write {
                size,
                slots,
                random,
            } => {
                let order = slot_order(slots, random, self.rank);
                let data = contents(0, size * slots, step.generation);
                let (seconds, latencies) = timed_writes(&file, &order, size, &data)?;
                drop(file);
                let mut back = vec![0u8; data.len()];
                self.open(&step.target, &step.path, servers)?
                    .read_at(0, &mut back)?;
                Ok(checked(seconds, latencies, size, &back, step.generation))
            }
            Work::ManySmall {
                piece,
                pieces,
                processes,
            } => {
                drop(file);
                self.many_small(step, servers, piece, pieces, processes)
            }
            Work::CheckMany {
                piece,
                pieces,
                processes,
            } => check_many(&file, step.generation, piece, pieces * processes),
            Work::Ping { count } => self.ping(&file, &step.target, count),
        }
    }

    /// Reads `slots` slots of `size` bytes in this rank's order after an untimed read of
    /// them all (every cache warm), timing each call; then checks what was read.
    fn read_calls(
        &self,
        file: &Opened,
        step: &Step,
        size: usize,
        slots: usize,
        random: bool,
    ) -> Result<Outcome, String> {
        let order = slot_order(slots, random, self.rank);
        let mut data = vec![0u8; size * slots];
        // Warm every cache, untimed.
        for (slot, chunk) in data.chunks_mut(size).enumerate() {
            file.read_at((slot * size) as u64, chunk)?;
        }
        data.fill(0);
        let started = Instant::now();
        let mut latencies = Vec::with_capacity(order.len());
        for &slot in &order {
            let at = Instant::now();
            let start = slot * size;
            file.read_at(start as u64, &mut data[start..start + size])?;
            latencies.push(at.elapsed().as_secs_f32() * 1e6);
        }
        let seconds = started.elapsed().as_secs_f64();
        Ok(checked(seconds, latencies, size, &data, step.generation))
    }

    /// This rank's `pieces` pieces of `piece` bytes (interleaved with the other
    /// processes'), written one call each, timed from open to close.
    fn many_small(
        &mut self,
        step: &Step,
        servers: u16,
        piece: usize,
        pieces: usize,
        processes: usize,
    ) -> Result<Outcome, String> {
        let rank = self.rank;
        let offset = |i: usize| (i * processes + rank) * piece;
        let data = contents(0, piece * pieces * processes, step.generation);
        let started = Instant::now();
        let mut file = self.open(&step.target, &step.path, servers)?;
        if let Opened::Tessera(file) = &mut file {
            file.set_write_group(step.group)
                .map_err(|err| err.to_string())?;
        }
        for i in 0..pieces {
            let at = offset(i);
            file.write_at(at as u64, &data[at..at + piece])?;
        }
        drop(file);
        let seconds = started.elapsed().as_secs_f64();
        Ok(Outcome {
            seconds,
            ops: pieces as u64,
            bytes: (piece * pieces) as u64,
            latencies_us: Vec::new(),
            verified: true,
            problem: String::new(),
        })
    }

    /// `count` pings of the iod holding the file, each timed.
    fn ping(&mut self, file: &Opened, target: &Target, count: usize) -> Result<Outcome, String> {
        let Opened::Tessera(file) = file else {
            return Err("a ping needs a Tessera target".to_owned());
        };
        let iod = usize::from(file.layout().servers()[0]);
        let client = self.client(target)?;
        let started = Instant::now();
        let mut latencies = Vec::with_capacity(count);
        for _ in 0..count {
            let at = Instant::now();
            client.ping_iod(iod).map_err(|err| err.to_string())?;
            latencies.push(at.elapsed().as_secs_f32() * 1e6);
        }
        Ok(Outcome {
            seconds: started.elapsed().as_secs_f64(),
            ops: count as u64,
            bytes: 0,
            latencies_us: latencies,
            verified: true,
            problem: String::new(),
        })
    }
}

/// The bytes of generation `generation` from `offset` on, `bytes` of them.
pub fn contents(offset: usize, bytes: usize, generation: u64) -> Vec<u8> {
    (offset..offset + bytes)
        .map(|at| expected_byte(at as u64, generation))
        .collect()
}

/// Writes the slots of `size` bytes of `data` in `order`, each call timed: the seconds of
/// them all and each call's µs.
fn timed_writes(
    file: &Opened,
    order: &[usize],
    size: usize,
    data: &[u8],
) -> Result<(f64, Vec<f32>), String> {
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(order.len());
    for &slot in order {
        let at = Instant::now();
        let start = slot * size;
        file.write_at(start as u64, &data[start..start + size])?;
        latencies.push(at.elapsed().as_secs_f32() * 1e6);
    }
    Ok((started.elapsed().as_secs_f64(), latencies))
}

/// After every process closed: reads the whole array (`count` pieces of `piece` bytes) and
/// finds the first byte that reads back wrong.
fn check_many(
    file: &Opened,
    generation: u64,
    piece: usize,
    count: usize,
) -> Result<Outcome, String> {
    let total = piece * count;
    let mut back = vec![0u8; total];
    file.read_at(0, &mut back)?;
    let wrong = back
        .iter()
        .zip(contents(0, total, generation))
        .position(|(read, expected)| *read != expected);
    Ok(Outcome {
        verified: wrong.is_none(),
        problem: wrong
            .map(|at| format!("byte {at} (piece {}) reads back wrong", at / piece))
            .unwrap_or_default(),
        ..Outcome::default()
    })
}

/// Slots `0..slots` in order, or shuffled (a fixed order per rank: every run the same).
fn slot_order(slots: usize, random: bool, rank: usize) -> Vec<usize> {
    if random {
        crate::report::turn_order(0x5EED + rank, slots)
    } else {
        (0..slots).collect()
    }
}

/// The outcome of a timed pass whose file now reads `data` from byte 0.
fn checked(
    seconds: f64,
    latencies_us: Vec<f32>,
    size: usize,
    data: &[u8],
    generation: u64,
) -> Outcome {
    let wrong = data
        .iter()
        .enumerate()
        .position(|(at, &byte)| byte != expected_byte(at as u64, generation));
    Outcome {
        seconds,
        ops: latencies_us.len() as u64,
        bytes: (latencies_us.len() * size) as u64,
        latencies_us,
        verified: wrong.is_none(),
        problem: wrong
            .map(|at| format!("byte {at} is not generation {generation}'s"))
            .unwrap_or_default(),
    }
}

impl crate::lockstep::Worker for SmallWorker {
    type Step = Step;
    type Outcome = Outcome;

    fn prepare(&mut self, step: &Step) -> Result<(), String> {
        if step.target != Target::Local {
            self.client(&step.target)?;
        }
        Ok(())
    }

    fn run(&mut self, step: &Step) -> Outcome {
        self.step(step).unwrap_or_else(|problem| Outcome {
            problem,
            ..Outcome::default()
        })
    }
}

/// The hidden `small-worker` command: serves steps until its standard input closes.
pub fn run(args: &WorkerArgs) -> Result<(), String> {
    let mut worker = SmallWorker {
        rank: args.rank,
        clients: HashMap::new(),
    };
    crate::lockstep::serve("small", args.rank, &mut worker)
}

/// The worker processes of a run.
pub fn spawn(count: usize) -> Result<crate::lockstep::Lockstep, String> {
    crate::lockstep::Lockstep::spawn("small", "small-worker", count)
}
