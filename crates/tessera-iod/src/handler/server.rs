//! Requests about the server itself rather than a file: `Ping`, `ServerStats`, `Statfs`, and
//! `ShareRegion`, which lends a connection a shared-memory region for later one-sided
//! requests.

use tessera_net::server::{ConnectionError, Incoming, ServerConnection};
use tessera_proto::{
    Empty, Header, PingReply, ServerStats, ShareRegion, Statfs, ROLE_IOD, STORE_OK,
};

use super::Iod;
use crate::storage::ObjectStorage;
use crate::store::ObjectStore;

impl<S: ObjectStorage> Iod<S> {
    pub(super) async fn ping(
        &self,
        header: &Header,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let reply = PingReply {
            role: ROLE_IOD,
            server_index: self.index,
            pid: std::process::id(),
            objects: self.store.object_count(),
            store_state: STORE_OK,
        };
        connection.reply(header, &reply, &[]).await
    }

    pub(super) async fn server_stats(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let ServerStats {} = request.decode()?;
        connection
            .reply(&request.header, &self.store.stats(), &[])
            .await
    }

    pub(super) async fn statfs(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let Statfs {} = request.decode()?;
        let result = self.blocking(ObjectStore::statfs).await;
        Self::answer(connection, &request.header, result).await
    }

    pub(super) async fn share_region(
        request: &mut Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let ShareRegion { key, bytes } = request.decode()?;
        let result = connection
            .share_region(key, bytes, request.descriptor.take())
            .map(|()| Empty {});
        Self::answer(connection, &request.header, result).await
    }
}
