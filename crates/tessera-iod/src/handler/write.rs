//! `Write`, `WriteType`, `WriteView`: decoded into one [`DataRequest`], then one path. Leases
//! on the object are revoked before the data is applied; the data arrives in one bulk, one
//! `Data` frame per piece, or one-sidedly; with the unified cache it lands straight in the
//! cache units it will be, else in one request buffer applied on the storage path.

use tessera_net::server::{ConnectionError, Incoming, ServerConnection};
use tessera_proto::{ErrorCode, RemoteError, TransferMode};

use super::request::DataRequest;
use super::{extent, reply_of, Iod};
use crate::buffers::REQUEST_BUFFERS;
use crate::storage::ObjectStorage;

impl<S: ObjectStorage> Iod<S> {
    pub(super) async fn write(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let header = &request.header;
        let write = match DataRequest::write(self, request).await {
            Ok(write) => write,
            Err(refusal) => return refusal.send(connection, header).await,
        };
        // Leases on the object are revoked before the data is applied; new ones wait until it
        // is (the guard goes before the answer, so a reader told of the write can lease).
        let writer = Self::lease_client(connection);
        let writing = self
            .leases
            .begin_write(write.handle, extent(&write.pieces), writer)
            .await;
        if write.mode == TransferMode::Remote {
            let descriptor = connection.read_bulk(header).await?;
            return self
                .serve_remote(header, connection, true, write, &descriptor)
                .await;
        }
        let DataRequest {
            handle,
            mode,
            storage,
            pieces,
            total,
        } = write;
        let expected_bulk = if mode == TransferMode::Multiple {
            0
        } else {
            total
        };
        if u64::from(header.bulk_bytes) != expected_bulk {
            return Err(ConnectionError::Refused(RemoteError::new(
                ErrorCode::Protocol,
                format!(
                    "write carries {} bulk bytes but its pieces add up to {expected_bulk}",
                    header.bulk_bytes
                ),
            )));
        }
        let _budget = self
            .buffer_budget(connection, total + Self::sieve_budget(&pieces, storage))
            .await;
        if let Some(mut landing) = self.store.land(handle, &pieces) {
            // Unified cache: the bytes arrive straight in the units they will be.
            if mode == TransferMode::Multiple {
                let mut slices = landing.slices();
                connection
                    .read_data_frames_into(header, &pieces, &mut slices)
                    .await?;
            } else {
                connection
                    .read_bulk_into(header, &mut landing.slices())
                    .await?;
            }
            let result = self
                .storage(total, move |store| {
                    store
                        .write_landed(&pieces, landing)
                        .map(|outcome| reply_of(total, outcome))
                })
                .await;
            drop(writing);
            return Self::answer(connection, header, result).await;
        }
        let mut data =
            REQUEST_BUFFERS.take(usize::try_from(total).expect("bounded by the bulk limit"));
        if mode == TransferMode::Multiple {
            connection
                .read_data_frames(header, &pieces, &mut data)
                .await?;
        } else {
            connection
                .read_bulk_into(header, &mut [std::io::IoSliceMut::new(&mut data)])
                .await?;
        }
        let result = self
            .storage(total, move |store| {
                store
                    .write(handle, &pieces, &data, storage)
                    .map(|outcome| reply_of(total, outcome))
            })
            .await;
        drop(writing);
        Self::answer(connection, header, result).await
    }
}
