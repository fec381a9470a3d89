//! The one decoded form of a list or datatype request, [`DataRequest`], and [`Refusal`], why a
//! request is not served.
//!
//! A list request (`Write`, `Read`) names its pieces; a datatype request (`WriteType`,
//! `ReadType`) carries a file type and a stream range, and a view request (`WriteView`,
//! `ReadView`) names a declared view instead: both become this server's share of the range,
//! its pieces found by [`share`](super::share). From then on every form goes down one write
//! and one read path. The capability is not part of it: `authorize` checked it, for every
//! opcode alike, before the body was decoded.

use tessera_net::server::{ConnectionError, Incoming, ServerConnection};
use tessera_proto::limits::{FILE_BYTES_MAX, MESSAGE_BULK_BYTES_MAX};
use tessera_proto::{
    ErrorCode, Header, Opcode, Piece, Read, ReadType, ReadView, RemoteError, StoragePlan,
    TransferMode, Write, WriteType, WriteView,
};

use super::{share, Iod};
use crate::storage::ObjectStorage;
use crate::views::Declared;

/// A list, datatype or view request once decoded: this server's pieces of it.
#[derive(Debug)]
pub(super) struct DataRequest {
    /// The object.
    pub handle: u64,
    /// How the data moves (bulk, one frame per piece, one-sidedly).
    pub mode: TransferMode,
    /// The storage plan the client asked for.
    pub storage: StoragePlan,
    /// The object's pieces, in stream order.
    pub pieces: Vec<Piece>,
    /// Their bytes.
    pub total: u64,
}

/// Why a request is not served.
#[derive(Debug)]
pub(super) enum Refusal {
    /// Answered with an error: the stream stays in step, the connection open. `skip` says
    /// whether the request's data must be dropped first, and how many `Data` frames it has.
    Answer {
        error: RemoteError,
        skip: Option<u32>,
    },
    /// The stream cannot be kept in step (a malformed body, bulk that does not add up): the
    /// connection closes.
    Close(ConnectionError),
}

impl From<ConnectionError> for Refusal {
    fn from(error: ConnectionError) -> Self {
        Refusal::Close(error)
    }
}

impl Refusal {
    /// An answer that drops nothing first.
    pub fn answer(error: RemoteError) -> Self {
        Refusal::Answer { error, skip: None }
    }

    /// The same refusal, dropping the request's data (`frames` `Data` frames) first.
    #[must_use]
    pub fn skipping(self, frames: u32) -> Self {
        match self {
            Refusal::Answer { error, .. } => Refusal::Answer {
                error,
                skip: Some(frames),
            },
            close @ Refusal::Close(_) => close,
        }
    }

    /// Sends the refusal, or closes the connection.
    pub async fn send(
        self,
        connection: &mut ServerConnection,
        header: &Header,
    ) -> Result<(), ConnectionError> {
        match self {
            Refusal::Answer { error, skip } => {
                if let Some(frames) = skip {
                    connection.skip_request_data(header, frames).await?;
                }
                connection.reply_error(header, &error).await
            }
            Refusal::Close(error) => Err(error),
        }
    }
}

/// The fields the datatype and view forms share, before their share is found.
struct TypedAccess {
    handle: u64,
    mode: TransferMode,
    storage: StoragePlan,
    /// The file type, or why the named view cannot be used.
    file: Result<Declared, RemoteError>,
    start: u64,
    end: u64,
    ranges: Vec<Piece>,
    /// A write's count of its local pieces (so of its `Data` frames in the multiple mode).
    frames: Option<u32>,
}

impl TypedAccess {
    /// This server's share of the access. A write whose share cannot be found drops its data
    /// so the connection stays usable (an unknown view is declared again and the write resent
    /// on it); one whose client counted other pieces than this server closes it.
    async fn resolve(self) -> Result<DataRequest, Refusal> {
        let skip = self.frames.map(|frames| {
            if self.mode == TransferMode::Multiple {
                frames
            } else {
                0
            }
        });
        let refuse = |error| Refusal::Answer { error, skip };
        let file = self.file.map_err(refuse)?;
        let share = share::find(file, self.start, self.end, self.ranges)
            .await
            .map_err(refuse)?;
        if let Some(frames) = self
            .frames
            .filter(|&frames| share.pieces.len() != frames as usize)
        {
            return Err(Refusal::Close(ConnectionError::Refused(RemoteError::new(
                ErrorCode::Protocol,
                format!(
                    "the client counted {frames} local pieces in stream bytes {}..{}, this server {}",
                    self.start,
                    self.end,
                    share.pieces.len()
                ),
            ))));
        }
        Ok(DataRequest {
            handle: self.handle,
            mode: self.mode,
            storage: self.storage,
            pieces: share.pieces,
            total: share.bytes,
        })
    }
}

impl DataRequest {
    /// Decodes a `Write`, `WriteType` or `WriteView`.
    pub async fn write<S: ObjectStorage>(
        iod: &Iod<S>,
        request: &Incoming,
    ) -> Result<DataRequest, Refusal> {
        let typed = match request.opcode {
            Opcode::WriteType => {
                let write: WriteType = request.decode()?;
                TypedAccess {
                    handle: write.handle,
                    mode: write.mode,
                    storage: write.storage,
                    file: Ok(Declared::of_type(write.file)),
                    start: write.start,
                    end: write.end,
                    ranges: write.ranges,
                    frames: Some(write.pieces),
                }
            }
            Opcode::WriteView => {
                let write: WriteView = request.decode()?;
                TypedAccess {
                    handle: write.handle,
                    mode: write.mode,
                    storage: write.storage,
                    file: iod.views.get(write.handle, write.view_id),
                    start: write.start,
                    end: write.end,
                    ranges: write.ranges,
                    frames: Some(write.pieces),
                }
            }
            _ => {
                let write: Write = request.decode()?;
                let total = check_pieces(&write.pieces)
                    .map_err(|error| Refusal::Close(ConnectionError::Refused(error)))?;
                return Ok(DataRequest {
                    handle: write.handle,
                    mode: write.mode,
                    storage: write.storage,
                    pieces: write.pieces,
                    total,
                });
            }
        };
        typed.resolve().await
    }

    /// Decodes a `Read`, `ReadType` or `ReadView`.
    pub async fn read<S: ObjectStorage>(
        iod: &Iod<S>,
        request: &Incoming,
    ) -> Result<DataRequest, Refusal> {
        let typed = match request.opcode {
            Opcode::ReadType => {
                let read: ReadType = request.decode()?;
                TypedAccess {
                    handle: read.handle,
                    mode: read.mode,
                    storage: read.storage,
                    file: Ok(Declared::of_type(read.file)),
                    start: read.start,
                    end: read.end,
                    ranges: read.ranges,
                    frames: None,
                }
            }
            Opcode::ReadView => {
                let read: ReadView = request.decode()?;
                TypedAccess {
                    handle: read.handle,
                    mode: read.mode,
                    storage: read.storage,
                    file: iod.views.get(read.handle, read.view_id),
                    start: read.start,
                    end: read.end,
                    ranges: read.ranges,
                    frames: None,
                }
            }
            _ => {
                let read: Read = request.decode()?;
                let total = check_pieces(&read.pieces).map_err(Refusal::answer)?;
                return Ok(DataRequest {
                    handle: read.handle,
                    mode: read.mode,
                    storage: read.storage,
                    pieces: read.pieces,
                    total,
                });
            }
        };
        typed.resolve().await
    }
}

/// Checks a piece list: every piece inside the file limit, total within one bulk.
pub(super) fn check_pieces(pieces: &[Piece]) -> Result<u64, RemoteError> {
    let mut total = 0u64;
    for piece in pieces {
        if piece
            .offset
            .checked_add(piece.length)
            .is_none_or(|end| end > FILE_BYTES_MAX)
        {
            return Err(RemoteError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "piece at {} of {} bytes ends past file_bytes_max ({FILE_BYTES_MAX})",
                    piece.offset, piece.length
                ),
            ));
        }
        total = total.saturating_add(piece.length);
    }
    if total > u64::from(MESSAGE_BULK_BYTES_MAX) {
        return Err(RemoteError::over_limit(
            "message_bulk_bytes_max",
            total,
            u64::from(MESSAGE_BULK_BYTES_MAX),
        ));
    }
    Ok(total)
}
