//! A storage run: consecutive request pieces adjacent in the object, merged into one
//! positioned call. The planner (`plan.rs`) prices runs, the cost model's calibration
//! and the io_uring batches (`uring.rs`) make them, the store executes them: this leaf module
//! holds the type they all share, so none of them imports another for it.

/// One storage run: consecutive request pieces adjacent in the object, merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Offset in the object.
    pub offset: u64,
    /// Bytes.
    pub length: u64,
    /// Offset of the run's bytes in the request's data buffer.
    pub data: usize,
}

impl Run {
    /// One past the run's last object byte.
    #[inline]
    pub fn end(&self) -> u64 {
        self.offset + self.length
    }
}
