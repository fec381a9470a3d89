//! Collective I/O: every process of a group makes one access together, and the group decides
//! how the data reaches the servers.
//!
//! The processes talk through a [`Communicator`] (rank, size, allgather, alltoallv, barrier):
//! MPI in the shim (`mpiio/`), threads in tests ([`ThreadCommunicator`]), Unix sockets between
//! separate processes in the benchmarks ([`SocketCommunicator`]). A collective access is a
//! [`ViewedFile`] access — view bytes from an offset, memory with a memory type and a count —
//! made by every process at once with [`ViewedFile::write_all`] / [`ViewedFile::read_all`], by
//! one of the [`CollectiveMethod`]s:
//!
//! - `two_phase` ([`two_phase`], ROMIO-style, the baseline): the processes agree on the range
//!   the group touches, split it into file domains over `cb_nodes` aggregators and move the
//!   data to (or from) the aggregator owning each byte with alltoallv, in rounds of at most
//!   `cb_buffer_size` bytes; the aggregators make large contiguous accesses. The data crosses
//!   the network twice.
//! - `server_directed` ([`server_directed`], seed 004 ECIO): each process sends its own share
//!   straight to every server it touches, as one datatype request (its file type and stream
//!   range) tagged with a collective id; each server gathers the participants' parts, merges
//!   them by file offset and makes large sorted accesses. The data crosses the network once.
//! - `independent`: each process makes its access alone, then a barrier.
//!
//! Before either collective method, [`CollectiveBuffering::Automatic`] (the default, ROMIO's
//! `automatic`) exchanges each process's file span and lets accesses that do not overlap go
//! as `independent`: contiguous per-process blocks gain nothing from merging.
//!
//! Every method agrees before any data moves, so an error one process meets in its arguments
//! fails them all (the error names the rank it came from). `two_phase` and `independent` also
//! end with an exchange of outcomes, so that every process returns an error if any failed: in
//! two-phase a process's data is written by another. `server_directed` needs no such step:
//! each server answers every participant of a collective with the collective's outcome, and a
//! participant that never arrives fails the others' requests at the server. Where processes' collective writes
//! overlap (MPI leaves the result undefined) the process of higher rank wins, in both
//! collective methods, as long as each process's share of a server fits one request round.

mod server_directed;
mod socket;
mod threads;
mod two_phase;

pub use socket::{SocketCommunicator, SOCKET_MESSAGE_BYTES_MAX, SOCKET_WAIT_DEFAULT};
pub use threads::{ThreadCommunicator, THREAD_WAIT_DEFAULT};

use crate::access::{stream_bytes, ViewedFile};
use crate::error::ClientError;
use crate::file::IoReport;
use tessera_proto::Datatype;

/// `cb_buffer_size`'s default: the most bytes one aggregator handles in one round of
/// `two_phase`.
pub const CB_BUFFER_BYTES_DEFAULT: u64 = 16 << 20;

/// Smallest `cb_buffer_size` accepted (smaller values are raised to it).
pub const CB_BUFFER_BYTES_MIN: u64 = 4096;

/// How long a server keeps a `server_directed` collective open for missing participants by
/// default, in milliseconds (below the client's default timeout of 30 s, so the server's
/// error, which names the collective, arrives first).
pub const COLLECTIVE_WAIT_MS_DEFAULT: u32 = 20_000;

/// Most rounds of one `two_phase` access: the range the group touches, divided by the
/// aggregators and `cb_buffer_size`, may not need more.
pub const TWO_PHASE_ROUNDS_MAX: u64 = 1 << 20;

/// The processes of one collective call, as MPI's communicator of the file.
///
/// Every process calls the same methods in the same order; each call returns only when every
/// process has made it (or with an error, never a hang: an implementation bounds its waits).
pub trait Communicator {
    /// This process's rank, `0..size`.
    fn rank(&self) -> usize;
    /// Processes in the group.
    fn size(&self) -> usize;
    /// Every process's `data`, indexed by rank.
    fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>, ClientError>;
    /// Sends `data[r]` to rank `r`; returns what each rank sent this one, indexed by rank.
    fn alltoallv(&self, data: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, ClientError>;
    /// Returns once every process has called it.
    fn barrier(&self) -> Result<(), ClientError>;
}

/// How a collective access reaches the servers (the `tessera_coll` hint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CollectiveMethod {
    /// ROMIO-style two-phase I/O through aggregators.
    TwoPhase,
    /// Seed 004's server-directed I/O (ECIO): the servers merge the processes' parts.
    #[default]
    ServerDirected,
    /// Each process alone, then a barrier.
    Independent,
}

impl CollectiveMethod {
    /// Every method.
    pub const ALL: [Self; 3] = [Self::TwoPhase, Self::ServerDirected, Self::Independent];

    /// The hint's value: `two_phase`, `server_directed`, `independent`.
    pub fn name(self) -> &'static str {
        match self {
            Self::TwoPhase => "two_phase",
            Self::ServerDirected => "server_directed",
            Self::Independent => "independent",
        }
    }

    /// The method of a name given by [`CollectiveMethod::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|method| method.name() == name)
    }
}

/// Whether a collective access may go as each process's own access (ROMIO's `romio_cb_read` /
/// `romio_cb_write` hints; their `disable` is [`CollectiveMethod::Independent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CollectiveBuffering {
    /// The processes first exchange the file span each one's access can touch; when no two
    /// spans overlap, the collective method would only add rounds of waiting and merging to
    /// accesses that are already each one large run per server, so each process makes its
    /// own access (then the outcomes are exchanged). Spans that overlap or interleave (the
    /// strided patterns collective I/O exists for) go by the method.
    #[default]
    Automatic,
    /// Always the method.
    Enable,
}

/// The knobs of collective accesses (MPI hints `tessera_coll`, `cb_buffer_size`, `cb_nodes`,
/// `romio_cb_read`/`romio_cb_write`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectiveOptions {
    /// The method.
    pub method: CollectiveMethod,
    /// Whether accesses that do not interleave skip the method.
    pub buffering: CollectiveBuffering,
    /// `two_phase`: most bytes an aggregator handles per round (at least
    /// [`CB_BUFFER_BYTES_MIN`]).
    pub cb_buffer_bytes: u64,
    /// `two_phase`: aggregators; `None` is all processes, or one per server of the file if
    /// there are fewer servers.
    pub cb_nodes: Option<usize>,
    /// `server_directed`: how long a server waits for missing participants (milliseconds).
    pub wait_ms: u32,
    /// `server_directed`: most bytes of one process's request to one server; `None` is
    /// `collective_bytes_max / (2 × processes)`, which keeps every round of every collective
    /// within the servers' limit.
    pub request_bytes_max: Option<u64>,
}

impl Default for CollectiveOptions {
    fn default() -> Self {
        Self {
            method: CollectiveMethod::default(),
            buffering: CollectiveBuffering::default(),
            cb_buffer_bytes: CB_BUFFER_BYTES_DEFAULT,
            cb_nodes: None,
            wait_ms: COLLECTIVE_WAIT_MS_DEFAULT,
            request_bytes_max: None,
        }
    }
}

impl ViewedFile {
    /// Writes, collectively with every process of `communicator`, `count` instances of
    /// `memtype` from `memory` to view bytes from `offset` (MPI's `write_at_all`). Every
    /// process must call it; a process with nothing to write passes a count of 0.
    pub fn write_all(
        &mut self,
        communicator: &dyn Communicator,
        options: &CollectiveOptions,
        offset: u64,
        memory: &[u8],
        memtype: &Datatype,
        count: u64,
    ) -> Result<IoReport, ClientError> {
        let access = Access {
            offset,
            memtype,
            count,
        };
        let method = self.collective_method(communicator, options, &access)?;
        let result = match method {
            CollectiveMethod::Independent => self.write(offset, memory, memtype, count),
            CollectiveMethod::TwoPhase => {
                two_phase::write(self, communicator, options, &access, memory)
            }
            // The servers answer every participant with the collective's outcome.
            CollectiveMethod::ServerDirected => {
                return server_directed::write(self, communicator, options, &access, memory)
            }
        };
        settle(communicator, result)
    }

    /// Reads, collectively with every process of `communicator`, view bytes from `offset`
    /// into `count` instances of `memtype` over `memory` (MPI's `read_at_all`).
    pub fn read_all(
        &mut self,
        communicator: &dyn Communicator,
        options: &CollectiveOptions,
        offset: u64,
        memory: &mut [u8],
        memtype: &Datatype,
        count: u64,
    ) -> Result<IoReport, ClientError> {
        let access = Access {
            offset,
            memtype,
            count,
        };
        let method = self.collective_method(communicator, options, &access)?;
        let result = match method {
            CollectiveMethod::Independent => self.read(offset, memory, memtype, count),
            CollectiveMethod::TwoPhase => {
                two_phase::read(self, communicator, options, &access, memory)
            }
            CollectiveMethod::ServerDirected => {
                return server_directed::read(self, communicator, options, &access, memory)
            }
        };
        settle(communicator, result)
    }

    /// The method a collective access uses: atomic mode makes every access independent (each
    /// holds its own range lock, which the collective methods do not take), and so does
    /// [`CollectiveBuffering::Automatic`] when no two processes' accesses interleave. Every
    /// process decides alike: the spans come from one exchange.
    fn collective_method(
        &self,
        communicator: &dyn Communicator,
        options: &CollectiveOptions,
        access: &Access<'_>,
    ) -> Result<CollectiveMethod, ClientError> {
        if self.atomic() || options.method == CollectiveMethod::Independent {
            return Ok(CollectiveMethod::Independent);
        }
        if options.buffering == CollectiveBuffering::Enable {
            return Ok(options.method);
        }
        if communicator.size() == 1 {
            return Ok(CollectiveMethod::Independent);
        }
        let spans = agree(communicator, self.file_span(access))?;
        Ok(if spans_interleave(&spans)? {
            options.method
        } else {
            CollectiveMethod::Independent
        })
    }

    /// The file bytes this process's part of a collective can touch, from the view's bounds
    /// (a superset where the file type has holes), encoded as two little-endian `i128`s; empty
    /// for an access of no bytes.
    fn file_span(&self, access: &Access<'_>) -> Result<Vec<u8>, ClientError> {
        let (_, end) = access.range(self)?;
        let displacement = i64::try_from(self.displacement()).map_err(|_| {
            ClientError::InvalidArgument(format!(
                "{}: view displacement {} is past the largest file offset",
                self.file().path(),
                self.displacement()
            ))
        })?;
        Ok(self
            .filetype()
            .span(displacement, access.offset, end)
            .map(|(low, high)| [low.to_le_bytes(), high.to_le_bytes()].concat())
            .unwrap_or_default())
    }
}

/// Whether any two of the processes' file spans (as [`ViewedFile::file_span`] encodes them)
/// overlap.
fn spans_interleave(spans: &[Vec<u8>]) -> Result<bool, ClientError> {
    let mut decoded = Vec::with_capacity(spans.len());
    for (rank, span) in spans.iter().enumerate() {
        match span.len() {
            0 => {}
            32 => {
                let bound = |at: usize| {
                    i128::from_le_bytes(span[at..at + 16].try_into().expect("16 bytes"))
                };
                decoded.push((bound(0), bound(16)));
            }
            length => {
                return Err(ClientError::Collective(format!(
                    "rank {rank} sent a file span of {length} bytes (32 expected)"
                )))
            }
        }
    }
    decoded.sort_unstable();
    Ok(decoded.windows(2).any(|pair| pair[1].0 < pair[0].1))
}

/// One process's part of a collective access.
pub(crate) struct Access<'a> {
    pub offset: u64,
    pub memtype: &'a Datatype,
    pub count: u64,
}

impl Access<'_> {
    /// The view bytes `[offset, end)` the access covers, as `(total, end)`: its stream bytes
    /// and one past its last view byte (an error naming the file when that overflows).
    pub fn range(&self, viewed: &ViewedFile) -> Result<(u64, u64), ClientError> {
        let total = stream_bytes(self.memtype, self.count)?;
        let end = self.offset.checked_add(total).ok_or_else(|| {
            ClientError::InvalidArgument(format!(
                "{}: view range {}+{total} overflows",
                viewed.file().path(),
                self.offset
            ))
        })?;
        Ok((total, end))
    }
}

/// Exchanges every process's outcome: all succeed, or all fail with the first failing
/// rank's error (a process's own error is returned as it is).
fn settle(
    communicator: &dyn Communicator,
    result: Result<IoReport, ClientError>,
) -> Result<IoReport, ClientError> {
    let status = match &result {
        Ok(_) => Vec::new(),
        Err(error) => {
            let mut text = error.to_string().into_bytes();
            text.truncate(1024);
            text.insert(0, 1);
            text
        }
    };
    let statuses = communicator.allgather(&status)?;
    let report = result?;
    if let Some((rank, status)) = statuses
        .iter()
        .enumerate()
        .find(|(_, status)| !status.is_empty())
    {
        return Err(ClientError::Collective(format!(
            "rank {rank} failed: {}",
            String::from_utf8_lossy(&status[1..])
        )));
    }
    Ok(report)
}

/// Exchanges a value every process computed locally, or the error it met, so that all fail
/// together before any data moves: returns every rank's bytes, or the first rank's error.
fn agree(
    communicator: &dyn Communicator,
    local: Result<Vec<u8>, ClientError>,
) -> Result<Vec<Vec<u8>>, ClientError> {
    let message = match &local {
        Ok(bytes) => {
            let mut message = vec![0u8];
            message.extend_from_slice(bytes);
            message
        }
        Err(error) => {
            let mut message = vec![1u8];
            message.extend_from_slice(error.to_string().as_bytes());
            message
        }
    };
    let all = communicator.allgather(&message)?;
    local?;
    let mut values = Vec::with_capacity(all.len());
    for (rank, message) in all.into_iter().enumerate() {
        match message.split_first() {
            Some((0, rest)) => values.push(rest.to_vec()),
            Some((_, text)) => {
                return Err(ClientError::Collective(format!(
                    "rank {rank} failed: {}",
                    String::from_utf8_lossy(text)
                )))
            }
            None => {
                return Err(ClientError::Collective(format!(
                    "rank {rank} sent an empty message"
                )))
            }
        }
    }
    Ok(values)
}

/// Little-endian encoding of the messages the collective methods exchange.
#[derive(Debug, Default)]
pub(crate) struct Writer(pub Vec<u8>);

impl Writer {
    pub fn u32(&mut self, value: u32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    pub fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
}

/// Reads what [`Writer`] wrote; a short or malformed message is an error naming its sender.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    rank: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8], rank: usize) -> Self {
        Self { bytes, rank }
    }

    fn take(&mut self, count: usize) -> Result<&'a [u8], ClientError> {
        if self.bytes.len() < count {
            return Err(ClientError::Collective(format!(
                "a message from rank {} ended {} bytes early",
                self.rank,
                count - self.bytes.len()
            )));
        }
        let (head, tail) = self.bytes.split_at(count);
        self.bytes = tail;
        Ok(head)
    }

    pub fn u32(&mut self) -> Result<u32, ClientError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    pub fn u64(&mut self) -> Result<u64, ClientError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    pub fn bytes(&mut self, count: u64) -> Result<&'a [u8], ClientError> {
        let count = usize::try_from(count).map_err(|_| {
            ClientError::Collective(format!("a message from rank {} is too long", self.rank))
        })?;
        self.take(count)
    }
}
