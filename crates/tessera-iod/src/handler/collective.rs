//! `WriteCollective` and `ReadCollective`: server-directed collectives (§3.6 of
//! ARCHITECTURE). Each participant's share is found as for `WriteType`/`ReadType`; the
//! participants wait in [`Collectives`](crate::collective::Collectives) for the last, which
//! serves the whole collective in one storage pass on a blocking thread and answers every
//! other participant.

use tessera_net::server::{ConnectionError, Incoming, ServerConnection};
use tessera_proto::{
    CollectiveTag, ErrorCode, Header, Piece, ReadCollective, RemoteError, StoragePlan,
    TransferMode, WriteCollective,
};

use super::request::Refusal;
use super::{reply_of, share, Iod, ServeCollective};
use crate::collective::{self, Arrival, Done, Joined};
use crate::leases::WHOLE;
use crate::storage::ObjectStorage;
use crate::store::{ObjectStore, Outcome};

impl<S: ObjectStorage> Iod<S> {
    /// Hands an arrival to its collective and waits for the outcome: as the last arrival,
    /// serves the collective (`serve` on a blocking thread) and answers the others; otherwise
    /// waits for the last one, or for the tag's wait to run out.
    async fn take_part(
        &self,
        tag: &CollectiveTag,
        handle: u64,
        write: bool,
        storage: StoragePlan,
        arrival: Arrival,
        serve: ServeCollective<S>,
    ) -> Result<Done, RemoteError> {
        match self
            .collectives
            .join(tag, handle, write, storage, arrival)?
        {
            Joined::Last(complete) => {
                let store = self.store.clone();
                tokio::task::spawn_blocking(move || {
                    let results = serve(&store, &complete);
                    complete.answer(results)
                })
                .await
                .unwrap_or_else(|err| {
                    Err(RemoteError::new(
                        ErrorCode::Internal,
                        format!("collective storage task failed: {err}"),
                    ))
                })
            }
            Joined::Wait(mut receiver) => {
                let wait = std::time::Duration::from_millis(u64::from(tag.wait_ms));
                match tokio::time::timeout(wait, &mut receiver).await {
                    Ok(answer) => answer.unwrap_or_else(|_| Err(Self::abandoned(tag))),
                    Err(_) => match self.collectives.expire(tag) {
                        Some(error) => Err(error),
                        // Completed meanwhile: the answer is on its way.
                        None => receiver.await.unwrap_or_else(|_| Err(Self::abandoned(tag))),
                    },
                }
            }
        }
    }

    fn abandoned(tag: &CollectiveTag) -> RemoteError {
        RemoteError::new(
            ErrorCode::Internal,
            format!(
                "collective {:#x} round {} was dropped without an answer",
                tag.id, tag.round
            ),
        )
    }

    /// One participant of a server-directed collective write (seed 004): its share of the
    /// access is found as for `WriteType`, its data read (or pulled one-sidedly), and the
    /// collective joined.
    pub(super) async fn write_collective(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let header = &request.header;
        let write: WriteCollective = request.decode()?;
        let tag = write.collective.clone();
        let frames = if write.mode == TransferMode::Multiple {
            write.pieces
        } else {
            0
        };
        let share = share::collective(&tag, write.file, write.start, write.end, write.ranges).await;
        let share = match share {
            Ok(share) if share.pieces.len() != write.pieces as usize => {
                return Err(ConnectionError::Refused(RemoteError::new(
                    ErrorCode::Protocol,
                    format!(
                        "the client counted {} local pieces in stream bytes {}..{}, this server {}",
                        write.pieces,
                        write.start,
                        write.end,
                        share.pieces.len()
                    ),
                )));
            }
            Ok(share) => collective::check_bytes(&tag, share.bytes).map(|()| share),
            Err(error) => Err(error),
        };
        let share = match share {
            Ok(share) => share,
            Err(error) => {
                connection.skip_request_data(header, frames).await?;
                return connection.reply_error(header, &error).await;
            }
        };
        let total = share.bytes;
        let data = match self
            .collective_data(header, connection, write.mode, &share.pieces, total)
            .await
        {
            Ok(data) => data,
            Err(refusal) => return refusal.send(connection, header).await,
        };
        let arrival = Arrival {
            rank: tag.rank,
            pieces: share.pieces,
            data,
            bytes: total,
        };
        // Held until this participant's answer, so past the collective's one write.
        let _writing = self.leases.begin_write(write.handle, WHOLE, None).await;
        let result = self
            .take_part(
                &tag,
                write.handle,
                true,
                write.storage,
                arrival,
                |store, complete| {
                    let outcome = collective::serve_write(store, complete);
                    let last = complete.arrivals.len() - 1;
                    (0..complete.arrivals.len())
                        .map(|index| match &outcome {
                            Ok(outcome) => Ok(Done {
                                data: Vec::new(),
                                outcome: if index == last {
                                    *outcome
                                } else {
                                    Outcome {
                                        plan: outcome.plan,
                                        ..Default::default()
                                    }
                                },
                            }),
                            Err(error) => Err(error.clone()),
                        })
                        .collect()
                },
            )
            .await
            .map(|done| reply_of(total, done.outcome));
        Self::answer(connection, header, result).await
    }

    /// A collective write participant's bytes of its share (`total` of them, over `pieces`):
    /// read from the bulk or `Data` frames, or pulled from the client's memory.
    async fn collective_data(
        &self,
        header: &Header,
        connection: &mut ServerConnection,
        mode: TransferMode,
        pieces: &[Piece],
        total: u64,
    ) -> Result<Vec<u8>, Refusal> {
        let length = usize::try_from(total).expect("bounded by collective_bytes_max");
        match mode {
            TransferMode::Remote => {
                let descriptor = connection.read_bulk(header).await?;
                let client = self.remote_client(connection, &descriptor).await?;
                let mover = client.mover.clone();
                let pull = move |_: &ObjectStore<S>| {
                    let mut data = vec![0u8; length];
                    client.pull_all(&mut data).map(|()| data)
                };
                let pulled = match &mover {
                    Some(mover) => self.one_sided(mover, pull).await,
                    None => self.blocking(pull).await,
                };
                pulled.map_err(|error| Self::one_sided_refusal(mover.as_ref(), error))
            }
            TransferMode::Multiple => {
                let mut data = vec![0u8; length];
                connection
                    .read_data_frames(header, pieces, &mut data)
                    .await?;
                Ok(data)
            }
            TransferMode::Gather | TransferMode::Pack => {
                if u64::from(header.bulk_bytes) != total {
                    return Err(Refusal::Close(ConnectionError::Refused(RemoteError::new(
                        ErrorCode::Protocol,
                        format!(
                            "collective write carries {} bulk bytes but its share is {total}",
                            header.bulk_bytes
                        ),
                    ))));
                }
                Ok(connection.read_bulk(header).await?)
            }
        }
    }

    /// One participant of a server-directed collective read: joins with its share, and gets
    /// its bytes of the union the last participant read.
    pub(super) async fn read_collective(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let header = &request.header;
        let descriptor = if header.bulk_bytes > 0 {
            Some(connection.read_bulk(header).await?)
        } else {
            None
        };
        let read: ReadCollective = request.decode()?;
        self.leases.begin_read(read.handle, WHOLE).await;
        let tag = read.collective.clone();
        let share = share::collective(&tag, read.file, read.start, read.end, read.ranges).await;
        let share = match share.and_then(|share| {
            // The union and every answer are held at once: count the share twice.
            collective::check_bytes(&tag, share.bytes.saturating_mul(2)).map(|()| share)
        }) {
            Ok(share) => share,
            Err(error) => return connection.reply_error(header, &error).await,
        };
        let client = match (read.mode, descriptor) {
            (TransferMode::Remote, Some(descriptor)) => {
                match self.remote_client(connection, &descriptor).await {
                    Ok(client) => Some(client),
                    Err(refusal) => return refusal.send(connection, header).await,
                }
            }
            (TransferMode::Remote, None) | (_, Some(_)) => {
                return Err(ConnectionError::Refused(RemoteError::new(
                    ErrorCode::Protocol,
                    "a read carries a memory descriptor as bulk exactly when its mode is remote",
                )));
            }
            _ => None,
        };
        let total = share.bytes;
        let pieces = share.pieces.clone();
        let arrival = Arrival {
            rank: tag.rank,
            pieces: share.pieces,
            data: Vec::new(),
            bytes: total.saturating_mul(2),
        };
        let result = self
            .take_part(
                &tag,
                read.handle,
                false,
                read.storage,
                arrival,
                |store, complete| {
                    let last = complete.arrivals.len() - 1;
                    match collective::serve_read(store, complete) {
                        Ok((answers, outcome)) => answers
                            .into_iter()
                            .enumerate()
                            .map(|(index, data)| {
                                Ok(Done {
                                    data,
                                    outcome: if index == last {
                                        outcome
                                    } else {
                                        Outcome {
                                            plan: outcome.plan,
                                            ..Default::default()
                                        }
                                    },
                                })
                            })
                            .collect(),
                        Err(error) => (0..complete.arrivals.len())
                            .map(|_| Err(error.clone()))
                            .collect(),
                    }
                },
            )
            .await;
        let done = match result {
            Ok(done) => done,
            Err(error) => return connection.reply_error(header, &error).await,
        };
        let reply = reply_of(total, done.outcome);
        match (client, read.mode) {
            (Some(client), _) => {
                let data = done.data;
                let mover = client.mover.clone();
                let push = move |_: &ObjectStore<S>| client.push_all(&data);
                let pushed = match &mover {
                    Some(mover) => self.one_sided(mover, push).await,
                    None => self.blocking(push).await,
                };
                Self::answer_one_sided(connection, header, mover.as_ref(), pushed.map(|()| reply))
                    .await
            }
            (None, TransferMode::Multiple) => {
                connection.reply(header, &reply, &[]).await?;
                connection
                    .send_data_frames(header, &pieces, &done.data)
                    .await
            }
            (None, _) => connection.reply(header, &reply, &done.data).await,
        }
    }
}
