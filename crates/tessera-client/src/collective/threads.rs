//! A [`Communicator`] between threads of one process, for tests: `size` threads each hold one
//! member of a group made by [`ThreadCommunicator::group`].
//!
//! Every ordered pair of ranks has its own channel, so the messages of consecutive
//! collectives between two ranks arrive in the order they were sent. A collective sends to
//! every other rank first (the channels never block a sender), then receives from each,
//! waiting at most the group's wait: a rank that stopped calling (a thread that returned or
//! panicked) makes the others fail with an error naming it, never hang.

use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use super::Communicator;
use crate::error::ClientError;

/// How long a member waits for another's message by default.
pub const THREAD_WAIT_DEFAULT: Duration = Duration::from_mins(1);

/// One member of a group of threads.
#[derive(Debug)]
pub struct ThreadCommunicator {
    rank: usize,
    /// `to[r]`: the channel to rank `r` (none to itself).
    to: Vec<Option<Sender<Vec<u8>>>>,
    /// `from[r]`: the channel from rank `r` (none from itself).
    from: Vec<Option<Receiver<Vec<u8>>>>,
    wait: Duration,
}

impl ThreadCommunicator {
    /// A group of `size` members, one per rank, each waiting at most `wait` for a message.
    pub fn group(size: usize, wait: Duration) -> Vec<Self> {
        let mut members: Vec<Self> = (0..size)
            .map(|rank| Self {
                rank,
                to: (0..size).map(|_| None).collect(),
                from: (0..size).map(|_| None).collect(),
                wait,
            })
            .collect();
        for source in 0..size {
            for target in 0..size {
                if source != target {
                    let (sender, receiver) = channel();
                    members[source].to[target] = Some(sender);
                    members[target].from[source] = Some(receiver);
                }
            }
        }
        members
    }

    fn send(&self, target: usize, data: Vec<u8>) -> Result<(), ClientError> {
        self.to[target]
            .as_ref()
            .expect("a channel to every other rank")
            .send(data)
            .map_err(|_| {
                ClientError::Collective(format!(
                    "rank {}: rank {target} has left the group",
                    self.rank
                ))
            })
    }

    fn receive(&self, source: usize) -> Result<Vec<u8>, ClientError> {
        self.from[source]
            .as_ref()
            .expect("a channel from every other rank")
            .recv_timeout(self.wait)
            .map_err(|error| {
                ClientError::Collective(match error {
                    RecvTimeoutError::Timeout => format!(
                        "rank {}: no message from rank {source} within {} ms",
                        self.rank,
                        self.wait.as_millis()
                    ),
                    RecvTimeoutError::Disconnected => {
                        format!("rank {}: rank {source} has left the group", self.rank)
                    }
                })
            })
    }
}

impl Communicator for ThreadCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.to.len()
    }

    fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>, ClientError> {
        self.alltoallv(vec![data.to_vec(); self.size()])
    }

    fn alltoallv(&self, mut data: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, ClientError> {
        if data.len() != self.size() {
            return Err(ClientError::InvalidArgument(format!(
                "alltoallv of {} messages in a group of {}",
                data.len(),
                self.size()
            )));
        }
        for (target, message) in data.iter_mut().enumerate() {
            if target != self.rank {
                self.send(target, std::mem::take(message))?;
            }
        }
        let mut received = Vec::with_capacity(self.size());
        for (source, own) in data.into_iter().enumerate() {
            received.push(if source == self.rank {
                own
            } else {
                self.receive(source)?
            });
        }
        Ok(received)
    }

    fn barrier(&self) -> Result<(), ClientError> {
        self.allgather(&[]).map(drop)
    }
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // ranks and targets are below 4
mod tests {
    use super::*;

    #[test]
    fn allgather_and_alltoallv_deliver_by_rank() {
        let group = ThreadCommunicator::group(3, Duration::from_secs(10));
        let results: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = group
                .into_iter()
                .map(|member| {
                    scope.spawn(move || {
                        let rank = member.rank() as u8;
                        let gathered = member.allgather(&[rank]).unwrap();
                        let sent = (0..3).map(|target| vec![rank, target]).collect();
                        let exchanged = member.alltoallv(sent).unwrap();
                        member.barrier().unwrap();
                        (gathered, exchanged)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (rank, (gathered, exchanged)) in results.into_iter().enumerate() {
            assert_eq!(gathered, vec![vec![0], vec![1], vec![2]]);
            let rank = rank as u8;
            assert_eq!(exchanged, vec![vec![0, rank], vec![1, rank], vec![2, rank]]);
        }
    }

    #[test]
    fn a_member_that_left_is_named() {
        let mut group = ThreadCommunicator::group(2, Duration::from_secs(10));
        drop(group.pop());
        let error = group[0].allgather(&[1]).unwrap_err();
        assert!(error.to_string().contains("rank 1 has left"), "{error}");
    }
}
