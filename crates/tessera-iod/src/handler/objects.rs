//! The object life cycle the mds drives (`ObjectCreate`, `ObjectCreateMany`, `ObjectRemove`,
//! `ObjectTruncate`; `authorize` checked that the connection is a server's of this
//! namespace), and what any client may ask of an object it holds a capability for
//! (`ObjectStat`, `ObjectSync`). A change to an object waits for, and ends, the leases on it.

use tessera_net::server::{ConnectionError, Incoming, ServerConnection};
use tessera_proto::limits::FILE_BYTES_MAX;
use tessera_proto::{
    Empty, ErrorCode, ObjectCreate, ObjectCreateMany, ObjectCreateManyReply, ObjectRemove,
    ObjectStat, ObjectStatReply, ObjectSync, ObjectTruncate, RemoteError,
};

use super::Iod;
use crate::leases::WHOLE;
use crate::storage::ObjectStorage;

impl<S: ObjectStorage> Iod<S> {
    pub(super) async fn object_create(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let ObjectCreate {
            handle,
            cache_unit_bytes,
            ..
        } = request.decode()?;
        let result = self
            .blocking(move |store| store.create(handle, cache_unit_bytes).map(|()| Empty {}))
            .await;
        Self::answer(connection, &request.header, result).await
    }

    /// Creates every handle it can; one that exists already is left out of the reply, any
    /// other failure ends the request.
    pub(super) async fn object_create_many(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let ObjectCreateMany {
            handles,
            cache_unit_bytes,
            ..
        } = request.decode()?;
        let result = self
            .blocking(move |store| {
                let mut created = Vec::with_capacity(handles.len());
                for handle in handles {
                    match store.create(handle, cache_unit_bytes) {
                        Ok(()) => created.push(handle),
                        Err(error) if error.code == ErrorCode::Exists => {}
                        Err(error) => return Err(error),
                    }
                }
                Ok(ObjectCreateManyReply { created })
            })
            .await;
        Self::answer(connection, &request.header, result).await
    }

    pub(super) async fn object_remove(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let ObjectRemove { handle, .. } = request.decode()?;
        let _writing = self.leases.begin_write(handle, WHOLE, None).await;
        self.views.release_handle(handle);
        let result = self
            .blocking(move |store| store.remove(handle).map(|()| Empty {}))
            .await;
        Self::answer(connection, &request.header, result).await
    }

    pub(super) async fn object_stat(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let ObjectStat { handle, .. } = request.decode()?;
        // Bytes a client buffers under a write lease count: it writes them first.
        self.leases.begin_read(handle, WHOLE).await;
        // Without a unified cache a stat is one `fstat`: served in line; with one it waits
        // for writes under way and writes the object back first.
        let bytes = if self.store.stat_may_wait() {
            u64::MAX
        } else {
            0
        };
        let result = self
            .storage(bytes, move |store| {
                store
                    .stat(handle)
                    .map(|(size, mtime_ns)| ObjectStatReply { size, mtime_ns })
            })
            .await;
        Self::answer(connection, &request.header, result).await
    }

    pub(super) async fn object_truncate(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let ObjectTruncate { handle, size, .. } = request.decode()?;
        let _writing = self.leases.begin_write(handle, WHOLE, None).await;
        let result = if size > FILE_BYTES_MAX {
            Err(RemoteError::over_limit(
                "file_bytes_max",
                size,
                FILE_BYTES_MAX,
            ))
        } else {
            self.blocking(move |store| store.truncate(handle, size).map(|()| Empty {}))
                .await
        };
        Self::answer(connection, &request.header, result).await
    }

    pub(super) async fn object_sync(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let ObjectSync { handle, .. } = request.decode()?;
        let result = self
            .blocking(move |store| store.sync(handle).map(|()| Empty {}))
            .await;
        Self::answer(connection, &request.header, result).await
    }
}
