//! The unit both layouts cut an access into: one contiguous run on one server, with its
//! place in the file and in that server's object. A leaf: the stripe layout (`layout.rs`)
//! and the pattern layout (`pattern.rs`) both produce it, and it knows neither.

/// One contiguous run of an access that falls on one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Position of the server in the layout's server list (not its cluster index).
    pub server_position: usize,
    /// Offset in that server's local object.
    pub local_offset: u64,
    /// Logical offset in the file.
    pub logical_offset: u64,
    /// Bytes in the run.
    pub length: u64,
}
