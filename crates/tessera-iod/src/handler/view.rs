//! `DeclareView` and `ReleaseView`: a connection's views, kept in the iod's `ViewTable` by
//! (handle, view id), which `WriteView`/`ReadView` name instead of resending the file type.

use tessera_net::server::{ConnectionError, Incoming, ServerConnection};
use tessera_proto::{DeclareView, Empty, ReleaseView};

use super::Iod;
use crate::storage::ObjectStorage;

impl<S: ObjectStorage> Iod<S> {
    pub(super) async fn declare_view(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let DeclareView {
            handle,
            view_id,
            file,
            ..
        } = request.decode()?;
        let body_bytes = request.body.len() as u64;
        let result = self
            .views
            .declare(handle, view_id, file, body_bytes)
            .map(|()| Empty {});
        Self::answer(connection, &request.header, result).await
    }

    pub(super) async fn release_view(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let ReleaseView {
            handle, view_id, ..
        } = request.decode()?;
        self.views.release(handle, view_id);
        Self::answer(connection, &request.header, Ok(Empty {})).await
    }
}
