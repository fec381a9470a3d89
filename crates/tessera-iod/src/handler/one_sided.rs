//! One-sided requests: the client's memory named by a descriptor in the bulk, reached
//! through its connection's mover (same-host process memory, with the client's own
//! credentials), a shared region it lent, or the fabric; the probe of that path, and a write
//! or read served over it.

use std::sync::Arc;

use tessera_net::local::mover::Mover;
use tessera_net::server::{ConnectionError, Incoming, ServerConnection};
use tessera_proto::{
    ErrorCode, Header, RemoteAccess, RemoteError, RemoteMemory, RemoteProbe, RemoteProbeReply, Wire,
};

use super::request::{DataRequest, Refusal};
use super::{reply_of, Iod, INLINE_STORAGE_BYTES_MAX, WORKER_COPY_BYTES_MAX};
use crate::remote;
use crate::storage::ObjectStorage;
use crate::store::ObjectStore;

impl<S: ObjectStorage> Iod<S> {
    /// The one-sided peer of a request whose bulk is a [`RemoteMemory`]: the process at the
    /// other end of a same-host Unix socket, by the kernel's word. A malformed descriptor
    /// closes the connection; one that cannot be served here is an error reply.
    pub(super) async fn remote_client(
        &self,
        connection: &mut ServerConnection,
        descriptor: &[u8],
    ) -> Result<remote::Client, Refusal> {
        let memory = RemoteMemory::from_body(descriptor)
            .map_err(|err| ConnectionError::Refused(err.into()))?;
        if let (RemoteAccess::Fabric, Some(fabric)) = (memory.access, &self.fabric) {
            let link = fabric.link(&memory.endpoint.0).map_err(Refusal::answer)?;
            return Ok(remote::Client {
                mover: None,
                unchecked: false,
                memory,
                fabric: Some(link),
                shared: None,
            });
        }
        if memory.access == RemoteAccess::Shared {
            let Some(key) = memory.segments.first().map(|segment| segment.key) else {
                return Err(Refusal::answer(RemoteError::new(
                    ErrorCode::Protocol,
                    "a shared-memory transfer names no segment",
                )));
            };
            if let Some(index) = memory.segments.iter().position(|s| s.key != key) {
                return Err(Refusal::answer(RemoteError::new(
                    ErrorCode::Protocol,
                    format!(
                        "a shared-memory transfer names one region; segment {index} names another"
                    ),
                )));
            }
            let region = connection.shared_region(key).map_err(Refusal::answer)?;
            return Ok(remote::Client {
                mover: None,
                unchecked: false,
                memory,
                fabric: None,
                shared: Some(region),
            });
        }
        if memory.access != RemoteAccess::Process {
            return Err(Refusal::answer(RemoteError::new(
                ErrorCode::RemoteAccessRefused,
                "fabric one-sided access is not served on this connection",
            )));
        }
        // The client's process memory: reached only by its connection's mover, a thread with
        // the client's own credentials (tessera_net::local::mover).
        let mover = connection.mover().await.map_err(Refusal::answer)?;
        Ok(remote::Client {
            unchecked: !self.checking(),
            mover: Some(mover),
            memory,
            fabric: None,
            shared: None,
        })
    }

    /// Runs `call`, which moves data to or from a client's process memory through `mover`,
    /// on a blocking thread, never on an async worker: a copy may wait on the client's memory
    /// (a FUSE mapping, userfaultfd). If the mover is retired meanwhile (a copy stalled past
    /// its deadline, the process is gone), the answer is its reason at once, whatever the
    /// thread still does, and the caller closes the connection.
    pub(super) async fn one_sided<T: Send + 'static>(
        &self,
        mover: &Arc<Mover>,
        call: impl FnOnce(&ObjectStore<S>) -> Result<T, RemoteError> + Send + 'static,
    ) -> Result<T, RemoteError> {
        // On a connection's own thread the copy runs in line: a wait on the client's memory
        // holds up that connection alone, and the watchdog declares a stall (the mover's
        // `watch`).
        if tessera_net::server::serving_on_own_thread() {
            return call(&self.store);
        }
        let store = self.store.clone();
        let job = tokio::task::spawn_blocking(move || call(&store));
        tokio::select! {
            joined = job => joined.unwrap_or_else(|err| {
                Err(RemoteError::new(
                    ErrorCode::Internal,
                    format!("one-sided transfer failed: {err}"),
                ))
            }),
            () = mover.retired_wait() => Err(Self::retired_error(mover)),
        }
    }

    pub(super) fn retired_error(mover: &Mover) -> RemoteError {
        RemoteError::new(
            ErrorCode::RemoteAccessRefused,
            format!(
                "pid {}: {}",
                mover.pid(),
                mover.retired().unwrap_or_default()
            ),
        )
    }

    /// Sends `result`; but when the mover of the request's client was retired (its process is
    /// gone, or a copy stalled), the connection is closed after it: its lent memory may still
    /// be written, and it is never used one-sidedly again.
    pub(super) async fn answer_one_sided<T: tessera_proto::Wire>(
        connection: &mut ServerConnection,
        header: &Header,
        mover: Option<&Arc<Mover>>,
        result: Result<T, RemoteError>,
    ) -> Result<(), ConnectionError> {
        if let Some(mover) = mover.filter(|mover| mover.retired().is_some()) {
            let error = match result {
                Err(error) => error,
                Ok(_) => Self::retired_error(mover),
            };
            return Err(ConnectionError::Refused(error));
        }
        Self::answer(connection, header, result).await
    }

    /// A one-sided transfer's failure as [`answer_one_sided`](Self::answer_one_sided) sends
    /// it: an answer, or, when the client's mover was retired, the connection's end.
    pub(super) fn one_sided_refusal(mover: Option<&Arc<Mover>>, error: RemoteError) -> Refusal {
        if mover.is_some_and(|mover| mover.retired().is_some()) {
            Refusal::Close(ConnectionError::Refused(error))
        } else {
            Refusal::answer(error)
        }
    }

    pub(super) async fn probe(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let RemoteProbe {} = request.decode()?;
        let descriptor = connection.read_bulk(&request.header).await?;
        let client = match self.remote_client(connection, &descriptor).await {
            Ok(client) => client,
            Err(refusal) => return refusal.send(connection, &request.header).await,
        };
        let mover = client.mover.clone();
        let result = if client.memory.segments.iter().map(|s| s.length).sum::<u64>() == 8 {
            let probe = move |_: &ObjectStore<S>| {
                let mut token = [0u8; 8];
                client
                    .pull(&client.memory.segments, 0, &mut token)
                    .map(|()| token)
            };
            match &mover {
                // Off the async worker: the client's memory may make the copy wait.
                Some(mover) => self.one_sided(mover, probe).await,
                None => probe(&self.store),
            }
        } else {
            Err(RemoteError::new(
                ErrorCode::Protocol,
                "a remote probe names exactly 8 bytes",
            ))
        };
        let result = result.map(|token| RemoteProbeReply {
            token: u64::from_le_bytes(token),
        });
        Self::answer_one_sided(connection, &request.header, mover.as_ref(), result).await
    }

    /// Serves a write or read whose data the server moves one-sidedly.
    pub(super) async fn serve_remote(
        &self,
        header: &Header,
        connection: &mut ServerConnection,
        write: bool,
        DataRequest {
            handle,
            storage,
            pieces,
            total,
            ..
        }: DataRequest,
        descriptor: &[u8],
    ) -> Result<(), ConnectionError> {
        let client = match self.remote_client(connection, descriptor).await {
            Ok(client) => client,
            Err(refusal) => return refusal.send(connection, header).await,
        };
        let mover = client.mover.clone();
        // Pipelined requests hold two units at a time, not the whole request.
        let buffered = total.min(2 * tessera_proto::limits::PIPELINE_UNIT_BYTES);
        let _budget = self
            .buffer_budget(connection, buffered + Self::sieve_budget(&pieces, storage))
            .await;
        // A read the unified cache holds whole is a memory copy with no storage call: pushed
        // from this worker when not too large.
        let inline = !write
            && (INLINE_STORAGE_BYTES_MAX + 1..=WORKER_COPY_BYTES_MAX).contains(&total)
            && self.store.is_cached(handle, &pieces);
        let serve = move |store: &ObjectStore<S>| {
            let outcome = if write {
                remote::write(store, handle, &pieces, storage, &client)
            } else {
                remote::read(store, handle, &pieces, storage, &client)
            };
            outcome.map(|outcome| reply_of(total, outcome))
        };
        let result = if let Some(mover) = &mover {
            self.one_sided(mover, serve).await
        } else if inline {
            serve(&self.store)
        } else {
            self.storage(total, serve).await
        };
        Self::answer_one_sided(connection, header, mover.as_ref(), result).await
    }
}
