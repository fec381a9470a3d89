//! The one error type of the backend. Every libfabric failure becomes a value here carrying the
//! provider's name, and transfer failures also name the peer and the pieces, because a server
//! moving many clients' lists must say which transfer broke; nothing in the crate panics on a
//! libfabric error.

use std::time::Duration;

/// What went wrong in the libfabric backend.
#[derive(Debug, thiserror::Error)]
pub enum OfiError {
    /// A libfabric call returned an error code.
    #[error("provider {provider}: {call} failed: {message} (code {code})")]
    Call {
        /// The provider the call went to.
        provider: String,
        /// The libfabric function.
        call: &'static str,
        /// Its error code (positive `FI_E*`).
        code: i32,
        /// `fi_strerror` of the code.
        message: String,
    },
    /// `fi_getinfo` found no provider of that name with RDM endpoints and RMA.
    #[error("no libfabric provider {provider:?} with RDM endpoints and RMA: {message}")]
    NoProvider {
        /// The name asked for, e.g. `tcp;ofi_rxm`.
        provider: String,
        /// Why, from `fi_strerror`.
        message: String,
    },
    /// A read or write finished with an error completion.
    #[error("{0}")]
    Completion(Box<CompletionFailure>),
    /// Operations did not complete in time; the endpoint was closed so that no late completion
    /// can touch the caller's memory after the call returned.
    #[error(
        "provider {provider}: {operation} with peer {peer}: {pending} operations not complete \
         after {timeout:?}; the endpoint is closed"
    )]
    Timeout {
        /// The provider.
        provider: String,
        /// `read` or `write`.
        operation: &'static str,
        /// The peer's printable address.
        peer: String,
        /// Operations still in flight.
        pending: usize,
        /// The completion timeout in force.
        timeout: Duration,
    },
    /// The endpoint was closed by an earlier timeout.
    #[error("provider {provider}: the endpoint was closed after an earlier timeout")]
    Closed {
        /// The provider.
        provider: String,
    },
    /// The two piece lists of a transfer do not hold the same number of bytes.
    #[error("local pieces hold {local_bytes} bytes but remote pieces hold {remote_bytes}")]
    LengthMismatch {
        /// Sum of the local piece lengths.
        local_bytes: u64,
        /// Sum of the remote piece lengths.
        remote_bytes: u64,
    },
    /// A count is over one of the crate's named limits.
    #[error("{what} is {value}, over the limit {limit_name} = {limit}")]
    Limit {
        /// What was counted.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The constant's name.
        limit_name: &'static str,
        /// The constant's value.
        limit: u64,
    },
    /// A piece does not lie inside the region it is said to belong to.
    #[error(
        "{side} piece {index} ({address:#x}, {length} bytes) is outside the registered region \
         ({region_address:#x}, {region_length} bytes)"
    )]
    OutsideRegion {
        /// `local` or `remote`.
        side: &'static str,
        /// The piece's index in its list.
        index: usize,
        /// The piece's (virtual) address.
        address: u64,
        /// Its length.
        length: u64,
        /// The region's (virtual) base address.
        region_address: u64,
        /// The region's length.
        region_length: u64,
    },
    /// The provider needs registered local buffers (`FI_MR_LOCAL`) and a piece has no
    /// descriptor.
    #[error(
        "provider {provider} requires registered local buffers (FI_MR_LOCAL) and local piece \
         {index} has no descriptor"
    )]
    LocalNotRegistered {
        /// The provider.
        provider: String,
        /// The piece's index in the local list.
        index: usize,
    },
    /// A string passed to libfabric holds a NUL byte.
    #[error("{what} {value:?} contains a NUL byte")]
    Nul {
        /// `provider` or `node`.
        what: &'static str,
        /// The string.
        value: String,
    },
    /// A peer handle from another endpoint.
    #[error("peer {peer} was inserted into another endpoint")]
    ForeignPeer {
        /// The peer's printable address.
        peer: String,
    },
    /// A peer name of the wrong size for this provider.
    #[error(
        "provider {provider}: a peer name is {length} bytes, this provider's names are {expected}"
    )]
    PeerName {
        /// The provider.
        provider: String,
        /// Bytes given.
        length: usize,
        /// Bytes of this endpoint's own name.
        expected: usize,
    },
    /// The endpoint's state lock was poisoned by a panic on another thread.
    #[error("provider {provider}: endpoint lock poisoned by a panic on another thread")]
    Poisoned {
        /// The provider.
        provider: String,
    },
}

/// Which operation of a transfer failed and why: the provider, the peer and the pieces.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "provider {provider}: {operation} with peer {peer} failed on local pieces \
     {local_first}..={local_last} and remote pieces {remote_first}..={remote_last} \
     ({bytes} bytes): {message} (error {code}, provider error {provider_code})"
)]
pub struct CompletionFailure {
    /// The provider.
    pub provider: String,
    /// `read` or `write`.
    pub operation: &'static str,
    /// The peer's printable address.
    pub peer: String,
    /// First local piece (index into the caller's list) the failed operation touched.
    pub local_first: usize,
    /// Last local piece it touched.
    pub local_last: usize,
    /// First remote piece it touched.
    pub remote_first: usize,
    /// Last remote piece it touched.
    pub remote_last: usize,
    /// Bytes of the failed operation.
    pub bytes: u64,
    /// `fi_strerror` of the code, with the provider's own explanation when it gives one.
    pub message: String,
    /// Positive `FI_E*` code.
    pub code: i32,
    /// The provider's own error number.
    pub provider_code: i32,
}
