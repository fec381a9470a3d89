//! Replays accesses through clients' caches, their DEMOTE buffers and one server cache, and
//! charges each read its time.
//!
//! The caches and the buffer are `tessera-policy`'s, the live path's own types; this module
//! only keeps time. Each client has its own link to the server. A read waits for its own
//! messages (request, reply, the disk on a server miss) and, with eager DEMOTE, for the
//! demote that made room for it (metadata, answer, data). With DEMOTE buffering a sealed
//! batch costs the same three messages once per batch, but runs in the background: it owes
//! its link time (`debt`), which drains while the client does not use the link (a cache hit,
//! the server's disk read, think time between accesses); a client whose buffer is full waits
//! for what is left. Reads have priority over the background batch on the link.

use std::collections::BTreeMap;

use serde::Serialize;
use tessera_policy::{
    BatchId, BlockCache, ClientCache, DemoteBuffer, End, Placement, Push, ServerCache,
};

use crate::cost::{Costs, BLOCK_BYTES, CONTROL_BYTES, METADATA_BYTES_PER_BLOCK};
use crate::workload::Access;

/// How the two cache levels work together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// No client cache: every read goes to the server (LRU).
    Nocache,
    /// LRU at both levels, no demote: the levels hold the same blocks.
    Inclusive,
    /// Exclusive caching, one blocking demote per eviction.
    Demote,
    /// Exclusive caching through a double-buffered DEMOTE buffer.
    DemoteBuffered,
}

impl Method {
    /// Every method, in table order.
    pub const ALL: [Method; 4] = [
        Method::Nocache,
        Method::Inclusive,
        Method::Demote,
        Method::DemoteBuffered,
    ];

    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Method::Nocache => "nocache",
            Method::Inclusive => "inclusive",
            Method::Demote => "demote",
            Method::DemoteBuffered => "demote-buffered",
        }
    }
}

/// Sizes of a simulation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Config {
    /// Blocks of each client cache.
    pub client_blocks: usize,
    /// Blocks of the server cache.
    pub server_blocks: usize,
    /// Blocks of each DEMOTE buffer (both halves).
    pub buffer_blocks: usize,
    /// Time a client spends between two accesses, µs (seed 001 §6.4.4's delay).
    pub think_us: f64,
}

/// What one simulation counted over its timed accesses.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Outcome {
    /// The method's name.
    pub method: &'static str,
    /// Reads timed.
    pub reads: u64,
    /// Writes (through to the server; not timed).
    pub writes: u64,
    /// Reads that hit the client cache.
    pub client_hits: u64,
    /// Reads that hit the client's DEMOTE buffer (victim lookup).
    pub buffer_hits: u64,
    /// Reads that hit the server cache.
    pub server_hits: u64,
    /// Reads served from the disk.
    pub disk_reads: u64,
    /// Demoted blocks whose data went to the server.
    pub demotes_sent: u64,
    /// Demoted blocks the server refused from their metadata (it had them).
    pub demotes_refused: u64,
    /// DEMOTE batches sent (buffered only).
    pub batches: u64,
    /// Times a client found its DEMOTE buffer full and waited.
    pub buffer_full_waits: u64,
    /// Total time of the timed reads, µs.
    pub read_time_us: f64,
    /// The part of it spent on demotes (eager demotes, waits for a full buffer), µs.
    pub demote_visible_us: f64,
}

impl Outcome {
    /// Mean time of a read, µs (0 without reads).
    pub fn mean_read_us(&self) -> f64 {
        if self.reads == 0 {
            0.0
        } else {
            self.read_time_us / self.reads as f64
        }
    }

    /// `count` as a fraction of the reads.
    pub fn rate(&self, count: u64) -> f64 {
        if self.reads == 0 {
            0.0
        } else {
            count as f64 / self.reads as f64
        }
    }
}

struct Client {
    cache: ClientCache<u64>,
    buffer: Option<DemoteBuffer<u64, ()>>,
    /// Link time the batch in flight still needs, µs.
    debt_us: f64,
}

struct Sim<'a> {
    method: Method,
    config: Config,
    costs: &'a Costs,
    server: ServerCache<u64>,
    clients: BTreeMap<u32, Client>,
    counts: Outcome,
}

/// Replays `accesses` with `method`; the first `warmup` accesses fill the caches untimed and
/// uncounted.
pub fn simulate(
    accesses: &[Access],
    warmup: usize,
    method: Method,
    config: Config,
    costs: &Costs,
) -> Result<Outcome, String> {
    costs.check()?;
    if !config.think_us.is_finite() || config.think_us < 0.0 {
        return Err(format!("think time {} µs: must be >= 0", config.think_us));
    }
    let placement = match method {
        Method::Nocache | Method::Inclusive => Placement::Inclusive,
        Method::Demote | Method::DemoteBuffered => Placement::Demote,
    };
    let server =
        ServerCache::new(config.server_blocks, placement).map_err(|err| format!("server {err}"))?;
    // Check the client sizes once, before the first access.
    BlockCache::<u64>::lru(config.client_blocks).map_err(|err| format!("client {err}"))?;
    if method == Method::DemoteBuffered {
        DemoteBuffer::<u64, ()>::new(config.buffer_blocks).map_err(|err| err.to_string())?;
    }
    let mut sim = Sim {
        method,
        config,
        costs,
        server,
        clients: BTreeMap::new(),
        counts: Outcome::default(),
    };
    for (index, access) in accesses.iter().enumerate() {
        if index == warmup {
            sim.counts = Outcome::default();
        }
        if access.write {
            sim.write(access.client, access.block);
        } else {
            let time_us = sim.read(access.client, access.block);
            sim.counts.reads += 1;
            sim.counts.read_time_us += time_us;
        }
        if config.think_us > 0.0 {
            sim.idle(access.client, config.think_us);
        }
    }
    if warmup >= accesses.len() {
        sim.counts = Outcome::default();
    }
    sim.counts.method = method.name();
    Ok(sim.counts)
}

impl Sim<'_> {
    fn client(&mut self, id: u32) -> &mut Client {
        let (blocks, buffer_blocks, buffered) = (
            self.config.client_blocks,
            self.config.buffer_blocks,
            self.method == Method::DemoteBuffered,
        );
        self.clients.entry(id).or_insert_with(|| Client {
            cache: ClientCache::lru(blocks).expect("size checked in simulate"),
            buffer: buffered
                .then(|| DemoteBuffer::new(buffer_blocks).expect("size checked in simulate")),
            debt_us: 0.0,
        })
    }

    /// One read; returns its time, µs.
    fn read(&mut self, client: u32, block: u64) -> f64 {
        if self.method == Method::Nocache {
            return self.fetch(client, block);
        }
        let hit_us = self.costs.hit_us;
        let state = self.client(client);
        if state.cache.place(&block, End::MostRecent) {
            self.counts.client_hits += 1;
            self.idle(client, hit_us);
            return hit_us;
        }
        let in_buffer = state
            .buffer
            .as_mut()
            .is_some_and(|buffer| buffer.take(&block).is_some());
        if in_buffer {
            self.counts.buffer_hits += 1;
            self.idle(client, hit_us);
            return hit_us + self.admit(client, block);
        }
        // Room first (an eager demote blocks the read), then the server.
        let room_us = self.admit(client, block);
        room_us + self.fetch(client, block)
    }

    /// Reads `block` from the server: request, the disk on a miss, reply.
    fn fetch(&mut self, client: u32, block: u64) -> f64 {
        let mut time_us = self.costs.message_us(CONTROL_BYTES) + self.costs.message_us(BLOCK_BYTES);
        match self.server.read(block) {
            tessera_policy::server::ServerRead::Hit => self.counts.server_hits += 1,
            tessera_policy::server::ServerRead::Miss => {
                self.counts.disk_reads += 1;
                time_us += self.costs.disk_us;
                self.idle(client, self.costs.disk_us);
            }
        }
        time_us
    }

    /// A write through: other clients drop their copies, the writer caches the new data.
    fn write(&mut self, client: u32, block: u64) {
        self.counts.writes += 1;
        self.server.write(block);
        if self.method == Method::Nocache {
            return;
        }
        for state in self.clients.values_mut() {
            state.cache.remove(&block);
            if let Some(buffer) = state.buffer.as_mut() {
                buffer.take(&block);
            }
        }
        self.admit(client, block);
    }

    /// Caches `block` at the client, demoting the block it evicts as the method says; returns
    /// the time the client waits for that, µs.
    fn admit(&mut self, client: u32, block: u64) -> f64 {
        let Some(victim) = self.client(client).cache.insert(block, End::MostRecent) else {
            return 0.0;
        };
        let wait_us = match self.method {
            Method::Nocache | Method::Inclusive => 0.0,
            Method::Demote => {
                let mut time_us = self.costs.message_us(METADATA_BYTES_PER_BLOCK)
                    + self.costs.message_us(CONTROL_BYTES);
                if self.server.demote(victim) {
                    self.counts.demotes_sent += 1;
                    time_us += self.costs.message_us(BLOCK_BYTES);
                } else {
                    self.counts.demotes_refused += 1;
                }
                time_us
            }
            Method::DemoteBuffered => self.buffer_victim(client, victim),
        };
        self.counts.demote_visible_us += wait_us;
        wait_us
    }

    fn buffer_victim(&mut self, client: u32, victim: u64) -> f64 {
        let mut wait_us = 0.0;
        loop {
            let buffer = self
                .client(client)
                .buffer
                .as_mut()
                .expect("buffered method");
            match buffer.push(victim, ()) {
                Push::Buffered => return wait_us,
                Push::Sealed(id) => {
                    self.start_batch(client, id);
                    return wait_us;
                }
                Push::Full(..) => {
                    self.counts.buffer_full_waits += 1;
                    let debt_us = self.client(client).debt_us;
                    wait_us += debt_us;
                    self.idle(client, debt_us);
                }
            }
        }
    }

    /// Sends batch `id`'s metadata, takes the server's answer, starts the gathered transfer.
    fn start_batch(&mut self, client: u32, id: BatchId) {
        let state = self.clients.get_mut(&client).expect("client exists");
        let buffer = state.buffer.as_mut().expect("buffered method");
        let keys = buffer.metadata(id).expect("batch just sealed");
        let wanted = self.server.offer(&keys);
        let sent = buffer.answer(id, &wanted).expect("one answer per key");
        for (key, ()) in &sent {
            self.server.accept(*key);
        }
        self.counts.batches += 1;
        self.counts.demotes_sent += sent.len() as u64;
        self.counts.demotes_refused += (keys.len() - sent.len()) as u64;
        let mut debt_us = 0.0;
        if !keys.is_empty() {
            debt_us += self.costs.message_us(METADATA_BYTES_PER_BLOCK * keys.len())
                + self.costs.message_us(CONTROL_BYTES);
        }
        if !sent.is_empty() {
            debt_us += self.costs.message_us(BLOCK_BYTES * sent.len());
        }
        state.debt_us = debt_us;
    }

    /// The client leaves its link free for `time_us`: the batch in flight progresses, and
    /// completes (sealing the next, if its half is full) when its debt is paid.
    fn idle(&mut self, client: u32, time_us: f64) {
        let mut left_us = time_us;
        loop {
            let state = self.client(client);
            let Some(buffer) = state.buffer.as_mut() else {
                return;
            };
            let Some(id) = buffer.in_flight() else {
                return;
            };
            if state.debt_us > left_us {
                state.debt_us -= left_us;
                return;
            }
            left_us -= state.debt_us;
            state.debt_us = 0.0;
            match buffer.complete(id).expect("answered at start") {
                Some(next) => self.start_batch(client, next),
                None => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::paper_networks;
    use crate::workload::Workload;

    fn config(client_blocks: usize, server_blocks: usize) -> Config {
        Config {
            client_blocks,
            server_blocks,
            buffer_blocks: 10,
            think_us: 0.0,
        }
    }

    fn run(workload: Workload, method: Method, config: Config) -> Outcome {
        let blocks = workload.blocks();
        let accesses = workload.generate(blocks * 11, 42).unwrap();
        simulate(
            &accesses,
            usize::try_from(blocks).unwrap(),
            method,
            config,
            &paper_networks()[1],
        )
        .unwrap()
    }

    #[test]
    fn a_loop_that_fits_only_both_levels_hits_the_server_only_with_demote() {
        let workload = Workload::Sequential { blocks: 255 };
        let inclusive = run(workload, Method::Inclusive, config(128, 128));
        assert_eq!(inclusive.reads, 2550);
        assert_eq!((inclusive.client_hits, inclusive.server_hits), (0, 0));
        assert_eq!(inclusive.disk_reads, 2550);
        let eager = run(workload, Method::Demote, config(128, 128));
        assert_eq!((eager.client_hits, eager.server_hits), (0, 2550));
        assert_eq!(eager.demotes_sent, 2550);
        // Buffering delays up to 10 demotes: a few blocks reach the server too late.
        let buffered = run(workload, Method::DemoteBuffered, config(128, 128));
        assert_eq!(buffered.client_hits, 0);
        assert!(buffered.server_hits >= 2550 * 99 / 100, "{buffered:?}");
        assert_eq!(
            buffered.server_hits + buffered.buffer_hits + buffered.disk_reads,
            2550
        );
        assert!(buffered.mean_read_us() < eager.mean_read_us());
        let nocache = run(workload, Method::Nocache, config(128, 128));
        assert_eq!(nocache.disk_reads, 2550);
    }

    #[test]
    fn buffering_sends_the_same_demotes_in_batches_and_is_faster() {
        let workload = Workload::Random { blocks: 512 };
        let eager = run(workload, Method::Demote, config(256, 256));
        let buffered = run(workload, Method::DemoteBuffered, config(256, 256));
        assert!(buffered.batches > 0);
        assert!(buffered.demotes_sent <= buffered.batches * 5);
        let hits = |o: &Outcome| o.client_hits + o.buffer_hits + o.server_hits;
        // Within 1% of the reads: the buffer delays demotes by at most 10 blocks.
        assert!(
            hits(&eager).abs_diff(hits(&buffered)) * 100 <= eager.reads,
            "{eager:?} {buffered:?}"
        );
        assert!(buffered.mean_read_us() < eager.mean_read_us());
        assert!(buffered.demote_visible_us < eager.demote_visible_us);
    }

    #[test]
    fn writes_invalidate_other_clients_and_are_not_timed() {
        let accesses = [
            Access {
                client: 0,
                block: 1,
                write: false,
            },
            Access {
                client: 1,
                block: 1,
                write: false,
            },
            Access {
                client: 0,
                block: 1,
                write: true,
            },
            Access {
                client: 1,
                block: 1,
                write: false,
            },
            Access {
                client: 0,
                block: 1,
                write: false,
            },
        ];
        let outcome = simulate(
            &accesses,
            0,
            Method::Demote,
            config(4, 4),
            &paper_networks()[0],
        )
        .unwrap();
        assert_eq!((outcome.reads, outcome.writes), (4, 1));
        // Client 1 lost its copy to the write and reads it from the server; client 0 hits.
        assert_eq!(outcome.client_hits, 1);
        assert_eq!(outcome.server_hits, 2);
        assert_eq!(outcome.disk_reads, 1);
    }

    #[test]
    fn bad_sizes_are_errors() {
        let accesses = [Access {
            client: 0,
            block: 1,
            write: false,
        }];
        let costs = &paper_networks()[0];
        assert!(simulate(&accesses, 0, Method::Demote, config(0, 4), costs)
            .unwrap_err()
            .contains("client cache of 0 blocks"));
        let mut bad = config(4, 4);
        bad.buffer_blocks = 1;
        assert!(simulate(&accesses, 0, Method::DemoteBuffered, bad, costs)
            .unwrap_err()
            .contains("DEMOTE buffer of 1 blocks"));
    }
}
