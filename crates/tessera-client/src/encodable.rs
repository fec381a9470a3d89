//! Whether a datatype can go on the wire: a type built by the constructors may still pass
//! the node, block or encoded-size limits that only its encoding measures. A leaf: file
//! creation (pattern layouts), datatype I/O and server-directed collectives all check here
//! before they send a type.

use tessera_proto::Datatype;

use crate::error::ClientError;

/// Checks that a type can be sent: within the node, block and encoded-size limits that
/// only its encoding measures (a type built by the constructors may still exceed them).
pub(crate) fn check_encodable(what: &str, datatype: &Datatype) -> Result<(), ClientError> {
    tessera_proto::dtype::wire::encode(datatype)
        .map(drop)
        .map_err(|err| ClientError::InvalidArgument(format!("{what}: {err}")))
}
