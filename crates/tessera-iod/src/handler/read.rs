//! `Read`, `ReadType`, `ReadView`: decoded into one [`DataRequest`], then one path. Bytes a
//! client buffers under a write lease are written before they are read. A one-sided read is
//! pushed into the client's memory; with the unified cache the bytes go out from its pinned
//! units; a small read all in the page cache goes out on the async worker; the rest is read
//! on a blocking thread.

use std::sync::Arc;

use tessera_net::server::{ConnectionError, Incoming, ServerConnection};
use tessera_proto::{ErrorCode, Header, Piece, RemoteError, StoragePlan, TransferMode};

use super::request::DataRequest;
use super::{extent, reply_of, Iod, WORKER_COPY_BYTES_MAX};
use crate::buffers::REQUEST_BUFFERS;
use crate::leases::ClientKey;
use crate::storage::ObjectStorage;
use crate::store::ObjectStore;

/// Moves a read's units to the least recent end of the unified cache when dropped (after
/// the reply went to a client that caches them).
struct SentToCache<'a, S: ObjectStorage> {
    store: &'a Arc<ObjectStore<S>>,
    handle: u64,
    pieces: Vec<Piece>,
}

impl<S: ObjectStorage> Drop for SentToCache<'_, S> {
    fn drop(&mut self) {
        self.store.place_least_recent(self.handle, &self.pieces);
    }
}

impl<S: ObjectStorage> Iod<S> {
    pub(super) async fn read(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let header = &request.header;
        // A one-sided read's bulk is its memory descriptor; read it before anything can fail
        // so the stream stays in step.
        let descriptor = if header.bulk_bytes > 0 {
            Some(connection.read_bulk(header).await?)
        } else {
            None
        };
        let read = match DataRequest::read(self, request).await {
            Ok(read) => read,
            Err(refusal) => return refusal.send(connection, header).await,
        };
        let handle = read.handle;
        // Bytes another client buffers under a write lease are written before they are read.
        self.leases.begin_read(handle, extent(&read.pieces)).await;
        // Blocks a leased, demoting caching client reads go to the least recent end once sent.
        let uid = connection.credentials().uid;
        let _sent = connection
            .client_id()
            .filter(|&id| self.leases.demotes(handle, ClientKey::new(uid, id)))
            .map(|_| SentToCache {
                store: &self.store,
                handle,
                pieces: read.pieces.clone(),
            });
        match (read.mode, descriptor) {
            (TransferMode::Remote, Some(descriptor)) => {
                return self
                    .serve_remote(header, connection, false, read, &descriptor)
                    .await;
            }
            (TransferMode::Remote, None) | (_, Some(_)) => {
                return Err(ConnectionError::Refused(RemoteError::new(
                    ErrorCode::Protocol,
                    "a read carries a memory descriptor as bulk exactly when its mode is remote",
                )));
            }
            _ => {}
        }
        let sieve = Self::sieve_budget(&read.pieces, read.storage);
        let _budget = self.buffer_budget(connection, read.total + sieve).await;
        if self.store.cache().is_some() {
            return self.read_cached(header, connection, read).await;
        }
        self.read_uncached(header, connection, read).await
    }

    /// A read with no unified cache: a small one all in the page cache goes out right here,
    /// the rest is read on a blocking thread.
    async fn read_uncached(
        &self,
        header: &Header,
        connection: &mut ServerConnection,
        DataRequest {
            handle,
            mode,
            storage,
            pieces,
            total,
        }: DataRequest,
    ) -> Result<(), ConnectionError> {
        let length = usize::try_from(total).expect("bounded by the bulk limit");
        let small = matches!(storage, StoragePlan::Auto | StoragePlan::PerPiece)
            && total <= WORKER_COPY_BYTES_MAX;
        // A small read all in the page cache goes out right here: in the mmap serve mode, with
        // the plan left to the iod, straight from the object's pages into the socket (what the
        // socket does not take at once copied before the extent is let go), else read into a
        // buffer first. The rest is read on a blocking thread, which also sizes (and so may
        // zero) a larger buffer.
        // A plan the client forced (per piece, batched, sieve) is followed to the letter.
        if small && matches!(storage, StoragePlan::Auto) && mode != TransferMode::Multiple {
            let sent = self
                .store
                .read_mapped_now(handle, &pieces, |outcome, slices| {
                    connection.try_reply_vectored(header, &reply_of(total, *outcome), slices)
                });
            if let Some(rest) = sent {
                return connection.finish_reply(&rest?).await;
            }
        }
        let mut small = small.then(|| REQUEST_BUFFERS.take(length));
        let now = small
            .as_mut()
            .and_then(|data| self.store.read_now(handle, &pieces, data));
        let result = match (now, small) {
            (Some(outcome), Some(data)) => outcome.map(|outcome| (data, pieces, outcome)),
            (_, small) => {
                self.storage(total, move |store| {
                    let mut data = small.unwrap_or_else(|| REQUEST_BUFFERS.take(length));
                    let outcome = store.read(handle, &pieces, &mut data, storage)?;
                    Ok((data, pieces, outcome))
                })
                .await
            }
        };
        match result {
            Err(error) => connection.reply_error(header, &error).await,
            Ok((data, pieces, outcome)) => {
                let reply = reply_of(total, outcome);
                if mode == TransferMode::Multiple {
                    connection.reply(header, &reply, &[]).await?;
                    connection.send_data_frames(header, &pieces, &data).await
                } else {
                    connection.reply(header, &reply, &data).await
                }
            }
        }
    }

    /// Sends a read from the unified cache: its bytes stay pinned in the cache's buffers
    /// (no request buffer) and go out straight from them, one `writev` per frame. The
    /// pinned bytes count against the buffer budget the caller holds.
    async fn read_cached(
        &self,
        header: &Header,
        connection: &mut ServerConnection,
        DataRequest {
            handle,
            mode,
            pieces,
            total,
            ..
        }: DataRequest,
    ) -> Result<(), ConnectionError> {
        // A hit is pinned right here; a miss or a wait goes where storage calls go.
        let result = match self.store.read_pinned_now(handle, &pieces) {
            Some(cached) => Ok((cached, pieces)),
            None => {
                self.storage(total, move |store| {
                    let cached = store.read_pinned(handle, &pieces)?;
                    Ok((cached, pieces))
                })
                .await
            }
        };
        let (cached, pieces) = match result {
            Ok(found) => found,
            Err(error) => return connection.reply_error(header, &error).await,
        };
        let reply = reply_of(total, cached.outcome);
        if mode == TransferMode::Multiple {
            let slices = match cached.piece_slices(handle, &pieces) {
                Ok(slices) => slices,
                Err(error) => return connection.reply_error(header, &error).await,
            };
            connection.reply(header, &reply, &[]).await?;
            connection.send_data_frames_vectored(header, slices).await
        } else {
            match cached.slices(handle, &pieces) {
                Ok(slices) => connection.reply_vectored(header, &reply, &slices).await,
                Err(error) => connection.reply_error(header, &error).await,
            }
        }
    }
}
