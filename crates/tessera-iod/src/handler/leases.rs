//! Leases of caching clients: `LeaseAcquire` (a read lease on a whole file, or a write lease
//! on a byte range, which needs the write right), `LeaseClient` (which client's requests a
//! connection carries), and `LeaseListen`, the callback channel each revocation goes down.

use tessera_net::server::{ConnectionError, Incoming, ServerConnection};
use tessera_proto::{
    Empty, Header, LeaseAcquire, LeaseAcquireReply, LeaseClient, LeaseListen, LeaseRevoke,
};

use super::Iod;
use crate::leases::{ClientKey, Revocation};
use crate::storage::ObjectStorage;

impl<S: ObjectStorage> Iod<S> {
    pub(super) async fn lease_listen(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let LeaseListen { client_id } = request.decode()?;
        self.serve_callbacks(&request.header, client_id, connection)
            .await
    }

    pub(super) async fn lease_client_id(
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let LeaseClient { client_id } = request.decode()?;
        connection.set_client_id(client_id);
        Self::answer(connection, &request.header, Ok(Empty {})).await
    }

    pub(super) async fn lease_acquire(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let LeaseAcquire {
            handle,
            capability,
            client_id,
            demotes,
            write,
            start,
            end,
            group,
        } = request.decode()?;
        let client = ClientKey::new(connection.credentials().uid, client_id);
        let result = if !write {
            self.leases
                .acquire(handle, client, demotes)
                .map(|(lease_ms, lease_id)| LeaseAcquireReply {
                    lease_ms,
                    lease_id,
                    start: 0,
                    end: 0,
                })
        } else if let Err(refused) = self.check_write_right(connection, handle, &capability) {
            Err(refused)
        } else {
            self.leases
                .acquire_write(handle, client, ((start, end), group))
                .await
                .map(|grant| LeaseAcquireReply {
                    lease_ms: grant.lease_ms,
                    lease_id: grant.id,
                    start: grant.range.0,
                    end: grant.range.1,
                })
        };
        if result.is_ok() {
            connection.set_client_id(client_id);
        }
        Self::answer(connection, &request.header, result).await
    }

    /// Serves a client's callback channel (`LeaseListen`) until either side closes it:
    /// delivers each revocation as a `LeaseRevoke` and reports the client's answer. The
    /// client's leases end with the channel.
    async fn serve_callbacks(
        &self,
        header: &Header,
        client_id: u64,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let client = ClientKey::new(connection.credentials().uid, client_id);
        let (generation, mut revocations) = match self.leases.listen(client) {
            Ok(listening) => listening,
            Err(error) => return connection.reply_error(header, &error).await,
        };
        if let Err(error) = connection.reply(header, &Empty {}, &[]).await {
            self.leases.unlisten(client, generation);
            return Err(error);
        }
        let lease = std::time::Duration::from_millis(u64::from(self.leases.lease_ms()));
        let result = loop {
            let revocation: Option<Revocation> = tokio::select! {
                revocation = revocations.recv() => revocation,
                closed = connection.closed() => break closed,
            };
            let Some(Revocation { handle, answered }) = revocation else {
                break Ok(()); // replaced by a newer channel of the same client
            };
            // Unanswered within the lease, the write goes on anyway (`begin_write`).
            match connection.call_peer(&LeaseRevoke { handle }, lease).await {
                Ok(Empty {}) => {
                    let _ = answered.send(());
                }
                Err(error) => break Err(error),
            }
        };
        self.leases.unlisten(client, generation);
        result
    }
}
