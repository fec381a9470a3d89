//! Whether a connection may make a request, checked for every opcode before its body is
//! decoded: a capability with the rights the request needs on its handle for requests on a
//! file; for the object life cycle, a server's connection and this iod's namespace.

use tessera_auth::Rights;
use tessera_net::server::{ConnectionError, Incoming, ServerConnection};
use tessera_proto::{
    Capability, Decoder, ErrorCode, Opcode, RemoteError, TransferMode, Wire, Write,
    WriteCollective, WriteType, WriteView,
};

use super::request::Refusal;
use super::Iod;
use crate::storage::ObjectStorage;

impl<S: ObjectStorage> Iod<S> {
    /// Whether the connection may make this request: a capability with the rights it needs
    /// on its handle for data requests; for object life-cycle requests, a server's
    /// connection and the namespace this iod belongs to ([`Membership`](crate::membership::Membership)).
    /// A body too short to hold a handle and capability, or a malformed life-cycle request,
    /// closes the connection.
    pub(super) fn authorize(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), Refusal> {
        let wanted = match request.opcode {
            Opcode::ObjectCreate
            | Opcode::ObjectRemove
            | Opcode::ObjectTruncate
            | Opcode::ObjectCreateMany => {
                if !connection.is_server() {
                    return Err(Refusal::answer(RemoteError::new(
                        ErrorCode::PermissionDenied,
                        format!(
                            "permission denied: only the metadata server may {:?}; {} speaks for uid {}",
                            request.opcode,
                            connection.peer(),
                            connection.credentials().uid
                        ),
                    )));
                }
                // Every life-cycle request starts with its handle and the mds's namespace; a
                // create of many starts with the namespace.
                let mut decoder = Decoder::new(&request.body);
                let refused = |err: tessera_proto::WireError| ConnectionError::Refused(err.into());
                if request.opcode == Opcode::ObjectCreateMany {
                    let namespace = decoder.u64().map_err(refused)?;
                    return self
                        .membership
                        .check(namespace, format_args!("{:?}", request.opcode))
                        .map_err(Refusal::answer);
                }
                let handle = decoder.u64().map_err(refused)?;
                let namespace = decoder.u64().map_err(refused)?;
                return self
                    .membership
                    .check(
                        namespace,
                        format_args!("{:?} of handle {handle:#x}", request.opcode),
                    )
                    .map_err(Refusal::answer);
            }
            Opcode::Write
            | Opcode::WriteType
            | Opcode::WriteView
            | Opcode::WriteCollective
            | Opcode::DemoteOffer
            | Opcode::Demote => Rights::WRITE,
            Opcode::Read
            | Opcode::ReadType
            | Opcode::ReadView
            | Opcode::ReadCollective
            | Opcode::LeaseAcquire => Rights::READ,
            Opcode::DeclareView | Opcode::ReleaseView | Opcode::ObjectStat | Opcode::ObjectSync => {
                Rights::ANY
            }
            // Ping, ServerStats, Statfs and RemoteProbe touch no file; others are refused
            // later.
            _ => return Ok(()),
        };
        if !self.checking() {
            return Ok(());
        }
        // Every request on a file starts with its handle and capability.
        let mut decoder = Decoder::new(&request.body);
        let handle = decoder
            .u64()
            .map_err(|err| ConnectionError::Refused(err.into()))?;
        let capability =
            Capability::decode(&mut decoder).map_err(|err| ConnectionError::Refused(err.into()))?;
        connection
            .check_capability(&capability, handle, wanted)
            .map_err(Refusal::answer)
    }

    /// `Data` frames that follow a request (a write in the multiple mode).
    pub(super) fn data_frames(request: &Incoming) -> Result<u32, ConnectionError> {
        let multiple = |mode: TransferMode, frames: u32| {
            if mode == TransferMode::Multiple {
                frames
            } else {
                0
            }
        };
        Ok(match request.opcode {
            Opcode::Write => {
                let write: Write = request.decode()?;
                multiple(
                    write.mode,
                    u32::try_from(write.pieces.len()).expect("bounded by request_pieces_max"),
                )
            }
            Opcode::WriteType => {
                let write: WriteType = request.decode()?;
                multiple(write.mode, write.pieces)
            }
            Opcode::WriteView => {
                let write: WriteView = request.decode()?;
                multiple(write.mode, write.pieces)
            }
            Opcode::WriteCollective => {
                let write: WriteCollective = request.decode()?;
                multiple(write.mode, write.pieces)
            }
            _ => 0,
        })
    }
}
