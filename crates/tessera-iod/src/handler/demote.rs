//! DEMOTE (§2.8 of ARCHITECTURE): a caching client that drops clean blocks of a file it
//! holds a lease on offers them (`DemoteOffer`: which would this iod keep?) and sends them
//! (`Demote`, the bytes gathered or pulled one-sidedly, or only the wanted ones when the iod
//! chooses), and the unified cache takes them in as most recent.

use tessera_net::server::{ConnectionError, Incoming, ServerConnection};
use tessera_proto::limits::DEMOTE_PIECES_MAX;
use tessera_proto::{
    Demote, DemoteOffer, DemoteReply, DemoteWanted, ErrorCode, Header, Piece, RemoteError,
    TransferMode, WantedFlags,
};

use super::request::{check_pieces, Refusal};
use super::{Iod, WORKER_COPY_BYTES_MAX};
use crate::leases::ClientKey;
use crate::remote;
use crate::storage::ObjectStorage;
use crate::store::ObjectStore;

/// A demote's blocks once received: in a buffer, or already in the memory of their units.
enum Demoted {
    Bytes(Vec<u8>),
    Landed(crate::cache::Landing),
}

impl<S: ObjectStorage> Iod<S> {
    /// Which of the offered blocks this iod would cache under the client's lease.
    pub(super) async fn demote_offer(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let DemoteOffer {
            handle,
            client_id,
            lease_id,
            pieces,
            ..
        } = request.decode()?;
        let client = ClientKey::new(connection.credentials().uid, client_id);
        let result = Self::check_demote(&pieces).map(|()| {
            let wanted = self
                .leases
                .with_lease(handle, (client, lease_id), || {
                    self.store.demote_wanted(handle, &pieces)
                })
                .unwrap_or_else(|| vec![false; pieces.len()]);
            DemoteWanted {
                wanted: WantedFlags(wanted.into_iter().map(u8::from).collect()),
            }
        });
        Self::answer(connection, &request.header, result).await
    }

    /// A demote's pieces: at most `DEMOTE_PIECES_MAX`, their bytes within the bulk limit.
    fn check_demote(pieces: &[Piece]) -> Result<(), RemoteError> {
        if pieces.len() > DEMOTE_PIECES_MAX {
            return Err(RemoteError::over_limit(
                "demote_pieces_max",
                pieces.len() as u64,
                DEMOTE_PIECES_MAX as u64,
            ));
        }
        check_pieces(pieces).map(drop)
    }

    /// Caches the clean blocks of a `Demote` (bulk: their bytes back to back, or a memory
    /// descriptor to pull them from) if the client still holds its lease on the file; with no
    /// lease, or no unified cache, nothing. A choosing demote (`choose`) pulls only the pieces
    /// this iod wants, decided before any byte moves.
    pub(super) async fn demote(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let header = &request.header;
        let Demote {
            handle,
            client_id,
            lease_id,
            mode,
            choose,
            mut pieces,
            ..
        } = request.decode()?;
        Self::check_demote(&pieces).map_err(ConnectionError::Refused)?;
        let total: u64 = pieces.iter().map(|piece| piece.length).sum();
        let refused = |detail: String| {
            Err(ConnectionError::Refused(RemoteError::new(
                ErrorCode::Protocol,
                detail,
            )))
        };
        if choose && mode != TransferMode::Remote {
            return refused(format!(
                "a demote chooses its pieces only when the iod pulls them (mode Remote), not \
                 {mode:?}"
            ));
        }
        let client = ClientKey::new(connection.credentials().uid, client_id);
        let _budget = self.buffer_budget(connection, total).await;
        let mut taken = Vec::new();
        let demoted = match mode {
            TransferMode::Gather if u64::from(header.bulk_bytes) == total => {
                Demoted::Bytes(connection.read_bulk(header).await?)
            }
            TransferMode::Gather => {
                return refused(format!(
                    "demote carries {} bulk bytes but its pieces add up to {total}",
                    header.bulk_bytes
                ));
            }
            TransferMode::Remote => {
                let lease = (handle, client, lease_id);
                let pulled = self
                    .pull_demoted(header, connection, lease, choose, &mut pieces, &mut taken)
                    .await;
                match pulled {
                    Ok(Some(demoted)) => demoted,
                    Ok(None) => {
                        let reply = DemoteReply {
                            inserted: 0,
                            taken: WantedFlags(taken),
                        };
                        return Self::answer(connection, header, Ok(reply)).await;
                    }
                    Err(refusal) => return refusal.send(connection, header).await,
                }
            }
            other => {
                return refused(format!(
                    "a demote moves its bytes gathered or one-sidedly, not {other:?}"
                ));
            }
        };
        // In memory only (a clean insert never waits for write-back): served inline, not on a
        // storage thread.
        let result = self
            .leases
            .with_lease(handle, (client, lease_id), || match demoted {
                Demoted::Bytes(data) => self.store.demote(handle, &pieces, &data),
                Demoted::Landed(landing) => self.store.demote_landed(landing),
            })
            .unwrap_or(Ok(0))
            .map(|inserted| DemoteReply {
                inserted: u32::try_from(inserted).unwrap_or(u32::MAX),
                taken: WantedFlags(taken),
            });
        Self::answer(connection, header, result).await
    }

    /// Pulls a demote's blocks from the client's memory: straight into the cache units they
    /// will be where the memory allows, else into a buffer. A choosing demote first keeps the
    /// pieces this iod wants (`None` when it wants none).
    async fn pull_demoted(
        &self,
        header: &Header,
        connection: &mut ServerConnection,
        (handle, client, lease_id): (u64, ClientKey, u64),
        choose: bool,
        pieces: &mut Vec<Piece>,
        taken: &mut Vec<u8>,
    ) -> Result<Option<Demoted>, Refusal> {
        let descriptor = connection.read_bulk(header).await?;
        let mut remote = self.remote_client(connection, &descriptor).await?;
        if choose {
            self.choose_demoted((handle, client, lease_id), pieces, &mut remote, taken)
                .map_err(Refusal::answer)?;
            if pieces.is_empty() {
                return Ok(None);
            }
        }
        let total: u64 = pieces.iter().map(|piece| piece.length).sum();
        let landing = if remote.unregistered_ok() {
            self.store.land_demote(handle, pieces)
        } else {
            None
        };
        let length = usize::try_from(total).expect("within the bulk limit");
        let mover = remote.mover.clone();
        let pull = move |_: &ObjectStore<S>| {
            if let Some(mut landing) = landing {
                return remote
                    .pull_all_into(&mut landing.slices())
                    .map(|()| Demoted::Landed(landing));
            }
            let mut data = vec![0u8; length];
            remote.pull_all(&mut data).map(|()| Demoted::Bytes(data))
        };
        // A small pull from shared or fabric memory is a memory copy: done here rather than
        // on a storage thread. Process memory is only ever reached by its mover.
        let pulled = match &mover {
            Some(mover) => self.one_sided(mover, pull).await,
            None if total <= WORKER_COPY_BYTES_MAX => pull(&self.store),
            None => self.blocking(pull).await,
        };
        pulled
            .map(Some)
            .map_err(|error| Self::one_sided_refusal(mover.as_ref(), error))
    }

    /// A choosing demote's choice, made before any byte moves: keeps of `pieces` (and of the
    /// client's memory) those this iod wants under the client's lease (as `DemoteOffer`
    /// answers), and sets `taken` to one flag per piece.
    fn choose_demoted(
        &self,
        (handle, client, lease_id): (u64, ClientKey, u64),
        pieces: &mut Vec<Piece>,
        remote: &mut remote::Client,
        taken: &mut Vec<u8>,
    ) -> Result<(), RemoteError> {
        let wanted = self
            .leases
            .with_lease(handle, (client, lease_id), || {
                self.store.demote_wanted(handle, pieces)
            })
            .unwrap_or_else(|| vec![false; pieces.len()]);
        let lengths: Vec<u64> = pieces.iter().map(|piece| piece.length).collect();
        remote.keep_pieces(&lengths, &wanted)?;
        let mut flags = wanted.iter();
        pieces.retain(|_| flags.next().copied().unwrap_or(false));
        *taken = wanted.into_iter().map(u8::from).collect();
        Ok(())
    }
}
