//! A [`Communicator`] between separate processes on one host, over Unix sockets: what the
//! benchmarks' client processes use where an MPI program would use MPI.
//!
//! Every process joins with the same directory, its rank and the group size
//! ([`SocketCommunicator::join`]). Rank `r` listens on `DIR/rank-r.sock`, connects to every
//! lower rank and accepts a connection from every higher one, so each pair of ranks shares one
//! stream (a full mesh: no rank relays another's data). A connection opens with a handshake
//! (magic, rank, size) that must match. Each message on a stream is a length (`u64`, at most
//! [`SOCKET_MESSAGE_BYTES_MAX`]) and its bytes. In a collective every outgoing message is
//! written by its own scoped thread while this thread reads the incoming ones in rank order,
//! so two ranks sending each other large messages never block each other. Every read waits at
//! most the group's wait, so a process that died or stopped calling is named in an error.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::Communicator;
use crate::error::ClientError;

/// Most bytes of one message between two processes.
pub const SOCKET_MESSAGE_BYTES_MAX: u64 = 1 << 30;

/// How long a process waits for another (to join, or to send) by default.
pub const SOCKET_WAIT_DEFAULT: Duration = Duration::from_mins(1);

/// Most processes in one group.
pub const SOCKET_GROUP_SIZE_MAX: usize = 1024;

const HANDSHAKE_MAGIC: u32 = 0x5453_4343; // "TSCC"

/// One process's member of a group over Unix sockets.
#[derive(Debug)]
pub struct SocketCommunicator {
    rank: usize,
    size: usize,
    /// `peers[r]`: the stream to rank `r` (none to itself).
    peers: Vec<Option<UnixStream>>,
    wait: Duration,
}

fn failed(rank: usize, what: impl std::fmt::Display) -> ClientError {
    ClientError::Collective(format!("rank {rank}: {what}"))
}

fn socket_path(directory: &Path, rank: usize) -> PathBuf {
    directory.join(format!("rank-{rank}.sock"))
}

impl SocketCommunicator {
    /// Joins the group of `size` processes meeting in `directory` as `rank`, waiting at most
    /// `wait` for the others to appear (and, later, for each message).
    pub fn join(
        directory: &Path,
        rank: usize,
        size: usize,
        wait: Duration,
    ) -> Result<Self, ClientError> {
        if size == 0 || size > SOCKET_GROUP_SIZE_MAX || rank >= size {
            return Err(ClientError::InvalidArgument(format!(
                "rank {rank} of a group of {size} (1..={SOCKET_GROUP_SIZE_MAX} processes)"
            )));
        }
        let own = socket_path(directory, rank);
        let _ = std::fs::remove_file(&own);
        let listener = UnixListener::bind(&own).map_err(|err| {
            failed(
                rank,
                format_args!("cannot listen on {}: {err}", own.display()),
            )
        })?;
        let deadline = Instant::now() + wait;
        let mut peers: Vec<Option<UnixStream>> = (0..size).map(|_| None).collect();
        let handshake = |rank: usize| {
            let mut bytes = Vec::with_capacity(12);
            bytes.extend_from_slice(&HANDSHAKE_MAGIC.to_le_bytes());
            bytes.extend_from_slice(
                &u32::try_from(rank)
                    .expect("below the size limit")
                    .to_le_bytes(),
            );
            bytes.extend_from_slice(
                &u32::try_from(size)
                    .expect("below the size limit")
                    .to_le_bytes(),
            );
            bytes
        };
        for (lower, peer) in peers.iter_mut().enumerate().take(rank) {
            let path = socket_path(directory, lower);
            let mut stream = connect_until(&path, (rank, lower), deadline, wait)?;
            stream
                .write_all(&handshake(rank))
                .map_err(|err| failed(rank, format_args!("handshake with rank {lower}: {err}")))?;
            *peer = Some(stream);
        }
        listener
            .set_nonblocking(true)
            .map_err(|err| failed(rank, err))?;
        let mut missing = size - rank - 1;
        while missing > 0 {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    stream
                        .set_nonblocking(false)
                        .and_then(|()| stream.set_read_timeout(Some(wait)))
                        .map_err(|err| failed(rank, err))?;
                    let higher = read_handshake(&mut stream, rank, size, &peers)?;
                    peers[higher] = Some(stream);
                    missing -= 1;
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(failed(
                            rank,
                            format_args!(
                                "{missing} higher ranks did not connect within {} ms",
                                wait.as_millis()
                            ),
                        ));
                    }
                    std::thread::sleep(ACCEPT_POLL_INTERVAL);
                }
                Err(err) => return Err(failed(rank, err)),
            }
        }
        drop(listener);
        let _ = std::fs::remove_file(&own);
        for stream in peers.iter().flatten() {
            stream
                .set_read_timeout(Some(wait))
                .and_then(|()| stream.set_write_timeout(Some(wait)))
                .map_err(|err| failed(rank, err))?;
        }
        Ok(Self {
            rank,
            size,
            peers,
            wait,
        })
    }

    fn peer(&self, rank: usize) -> &UnixStream {
        self.peers[rank]
            .as_ref()
            .expect("a stream to every other rank")
    }

    fn receive(&self, source: usize) -> Result<Vec<u8>, ClientError> {
        let broken = |err: std::io::Error| {
            let what = if matches!(
                err.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) {
                format!(
                    "no message from rank {source} within {} ms",
                    self.wait.as_millis()
                )
            } else {
                format!("the stream from rank {source} broke: {err}")
            };
            failed(self.rank, what)
        };
        let mut stream = self.peer(source);
        let mut length = [0u8; 8];
        stream.read_exact(&mut length).map_err(broken)?;
        let length = u64::from_le_bytes(length);
        if length > SOCKET_MESSAGE_BYTES_MAX {
            return Err(failed(
                self.rank,
                format_args!(
                    "rank {source} announced a message of {length} bytes, over socket_message_bytes_max ({SOCKET_MESSAGE_BYTES_MAX})"
                ),
            ));
        }
        let mut data = vec![0u8; usize::try_from(length).expect("below the limit")];
        stream.read_exact(&mut data).map_err(broken)?;
        Ok(data)
    }
}

fn send(mut stream: &UnixStream, data: &[u8]) -> std::io::Result<()> {
    stream.write_all(&(data.len() as u64).to_le_bytes())?;
    stream.write_all(data)
}

impl Communicator for SocketCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>, ClientError> {
        self.alltoallv(vec![data.to_vec(); self.size])
    }

    fn alltoallv(&self, mut data: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, ClientError> {
        if data.len() != self.size {
            return Err(ClientError::InvalidArgument(format!(
                "alltoallv of {} messages in a group of {}",
                data.len(),
                self.size
            )));
        }
        if let Some((target, message)) = data
            .iter()
            .enumerate()
            .find(|(_, message)| message.len() as u64 > SOCKET_MESSAGE_BYTES_MAX)
        {
            return Err(failed(
                self.rank,
                format_args!(
                    "a message of {} bytes to rank {target} is over socket_message_bytes_max ({SOCKET_MESSAGE_BYTES_MAX})",
                    message.len()
                ),
            ));
        }
        let own = std::mem::take(&mut data[self.rank]);
        std::thread::scope(|scope| {
            let writers: Vec<_> = data
                .iter()
                .enumerate()
                .filter(|(target, _)| *target != self.rank)
                .map(|(target, message)| {
                    let stream = self.peer(target);
                    (target, scope.spawn(move || send(stream, message)))
                })
                .collect();
            let mut received = Vec::with_capacity(self.size);
            let mut failure = None;
            for source in 0..self.size {
                if source == self.rank {
                    received.push(Vec::new());
                    continue;
                }
                match self.receive(source) {
                    Ok(message) => received.push(message),
                    Err(error) => {
                        failure = Some(error);
                        break;
                    }
                }
            }
            for (target, writer) in writers {
                match writer.join() {
                    Ok(Ok(())) => {}
                    Ok(Err(err)) => {
                        failure.get_or_insert_with(|| {
                            failed(self.rank, format_args!("sending to rank {target}: {err}"))
                        });
                    }
                    Err(_) => {
                        failure.get_or_insert_with(|| {
                            failed(
                                self.rank,
                                format_args!("the sender to rank {target} panicked"),
                            )
                        });
                    }
                }
            }
            if let Some(error) = failure {
                return Err(error);
            }
            received[self.rank] = own;
            Ok(received)
        })
    }

    fn barrier(&self) -> Result<(), ClientError> {
        self.allgather(&[]).map(drop)
    }
}

/// How often a rank looks for its higher ranks' connections while it waits for them.
const ACCEPT_POLL_INTERVAL: Duration = Duration::from_millis(2);
/// How long a rank waits before it tries a lower rank's socket again.
const CONNECT_RETRY_PAUSE: Duration = Duration::from_millis(5);

/// Connects rank `rank` to rank `lower`'s socket at `path`, trying again until `deadline`
/// (the lower rank may not listen yet).
fn connect_until(
    path: &Path,
    (rank, lower): (usize, usize),
    deadline: Instant,
    wait: Duration,
) -> Result<UnixStream, ClientError> {
    loop {
        match UnixStream::connect(path) {
            Ok(stream) => return Ok(stream),
            Err(err) if Instant::now() >= deadline => {
                return Err(failed(
                    rank,
                    format_args!(
                        "rank {lower} did not appear at {} within {} ms: {err}",
                        path.display(),
                        wait.as_millis()
                    ),
                ))
            }
            Err(_) => std::thread::sleep(CONNECT_RETRY_PAUSE),
        }
    }
}

/// Reads a higher rank's handshake on `stream`: the magic, its rank (above `rank`, below
/// `size`, not connected yet among `peers`) and the group's size. Gives its rank.
fn read_handshake(
    stream: &mut UnixStream,
    rank: usize,
    size: usize,
    peers: &[Option<UnixStream>],
) -> Result<usize, ClientError> {
    let mut bytes = [0u8; 12];
    stream
        .read_exact(&mut bytes)
        .map_err(|err| failed(rank, format_args!("handshake: {err}")))?;
    let field = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let (magic, higher, their_size) = (field(0), field(4) as usize, field(8) as usize);
    if magic != HANDSHAKE_MAGIC
        || their_size != size
        || higher <= rank
        || higher >= size
        || peers[higher].is_some()
    {
        return Err(failed(
            rank,
            format_args!(
                "a bad handshake: magic {magic:#x}, rank {higher}, size {their_size} (this group: size {size})"
            ),
        ));
    }
    Ok(higher)
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // ranks and targets are below 4
mod tests {
    use super::*;

    #[test]
    fn processes_meet_in_a_directory_and_exchange_large_messages() {
        let directory =
            std::env::temp_dir().join(format!("tsr-socket-comm-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let size = 3;
        let results: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..size)
                .map(|rank| {
                    let directory = &directory;
                    scope.spawn(move || {
                        let member = SocketCommunicator::join(
                            directory,
                            rank,
                            size,
                            Duration::from_secs(20),
                        )
                        .unwrap();
                        // 3 MiB each way: more than a socket buffer holds.
                        let sent = (0..size)
                            .map(|target| vec![(rank * 10 + target) as u8; 3 << 20])
                            .collect();
                        let exchanged = member.alltoallv(sent).unwrap();
                        let gathered = member.allgather(&[rank as u8]).unwrap();
                        member.barrier().unwrap();
                        (exchanged, gathered)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (rank, (exchanged, gathered)) in results.into_iter().enumerate() {
            assert_eq!(gathered, vec![vec![0], vec![1], vec![2]]);
            for (source, message) in exchanged.into_iter().enumerate() {
                assert_eq!(message.len(), 3 << 20);
                assert!(message
                    .iter()
                    .all(|&b| usize::from(b) == source * 10 + rank));
            }
        }
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn a_missing_process_is_named_within_the_wait() {
        let directory =
            std::env::temp_dir().join(format!("tsr-socket-missing-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let error =
            SocketCommunicator::join(&directory, 1, 2, Duration::from_millis(200)).unwrap_err();
        assert!(
            error.to_string().contains("rank 0 did not appear"),
            "{error}"
        );
        std::fs::remove_dir_all(&directory).unwrap();
    }
}
