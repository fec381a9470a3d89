//! Accesses as MPI-IO describes them, served by any of the five independent methods.
//!
//! An MPI file handle carries a *view*: a file type tiled from a byte displacement, whose
//! data stream is the file as the program sees it. Every read or write names a byte range of
//! that stream, starting anywhere, and the caller's memory as a buffer with a memory type and
//! a count. [`ViewedFile`] keeps the view and a [`Method`] and serves each access by one of:
//!
//! - `list`: the file type's runs over the range become file pieces and the memory type's
//!   runs memory slices, sent with [`File::write_list`] / [`File::read_list`] in batches of
//!   at most [`ACCESS_BATCH_PIECES_MAX`] pieces per side;
//! - `multiple`: the same pieces, one request each ([`File::write_multiple`]);
//! - `sieve`: the same pieces through client-side data sieving ([`File::write_sieve`]);
//! - `datatype`: datatype I/O ([`File::write_type`]): one request per involved server
//!   carrying the encoded file type. It tiles whole instances, so an access that starts inside
//!   an instance sends that instance's remaining bytes as a list first;
//! - `view`: the file type declared on the servers once (on the first access that uses it,
//!   [`File::set_view`]), after which each request carries only the view id and the range.
//!
//! All five put the same bytes in the same places; they differ in messages and storage calls.
//! [`Method::Auto`] is `view` when a view other than the default is set, `datatype`
//! otherwise, and `list` for an access of contiguous memory on the default view. Everything here goes through the public calls of [`File`] and [`View`].

use std::io::{IoSlice, IoSliceMut};

use tessera_proto::access::check_file_range;
use tessera_proto::limits::{FILE_BYTES_MAX, PIECE_BYTES_MAX};
use tessera_proto::{Datatype, Piece, RemoteError};

use crate::error::ClientError;
use crate::file::{File, IoReport};
use crate::methods::{Part, SieveOptions};
use crate::typed::View;

/// Most file pieces, and most memory slices, in one list call of the `list`, `multiple` and
/// `sieve` methods; a longer access is sent as several calls, in stream order.
pub const ACCESS_BATCH_PIECES_MAX: usize = 1 << 16;

/// Most runs a memory type may give in one access of the `list`, `multiple` and `sieve`
/// methods (each becomes a slice of 16 bytes), and in an unaligned `datatype` access.
pub const ACCESS_MEMORY_RUNS_MAX: usize = 1 << 22;

/// How an access reaches the servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Method {
    /// `View` when a view other than the default is set, `Datatype` otherwise.
    #[default]
    Auto,
    /// One request per file piece (the baseline of seed 001).
    Multiple,
    /// Client-side data sieving: covering reads; writes as read-modify-write under range locks.
    Sieve,
    /// The file type's runs as one list of pieces per call.
    List,
    /// The encoded file type and a stream range in every request.
    Datatype,
    /// The file type declared once; requests carry a view id and a range.
    View,
}

impl Method {
    /// Every method, in the order of their names in [`Method::name`].
    pub const ALL: [Self; 6] = [
        Self::Auto,
        Self::Multiple,
        Self::Sieve,
        Self::List,
        Self::Datatype,
        Self::View,
    ];

    /// The name hints and reports use (`auto`, `multiple`, `sieve`, `list`, `datatype`,
    /// `view`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Multiple => "multiple",
            Self::Sieve => "sieve",
            Self::List => "list",
            Self::Datatype => "datatype",
            Self::View => "view",
        }
    }

    /// The method of a name given by [`Method::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|method| method.name() == name)
    }
}

/// A file with a current view and method: the state an MPI file handle keeps.
#[derive(Debug)]
pub struct ViewedFile {
    file: File,
    displacement: u64,
    filetype: Datatype,
    /// The view is the default one: displacement 0, every byte in order.
    default_view: bool,
    /// The view declared on the servers, once an access used the `view` method.
    declared: Option<View>,
    method: Method,
    sieve: SieveOptions,
    /// Each access holds a range lock over the file bytes it spans (MPI's atomic mode).
    atomic: bool,
}

impl ViewedFile {
    /// `file` with the default view (displacement 0, the bytes in order) and [`Method::Auto`].
    pub fn new(file: File) -> Self {
        Self {
            file,
            displacement: 0,
            filetype: Datatype::byte(),
            default_view: true,
            declared: None,
            method: Method::Auto,
            sieve: SieveOptions::default(),
            atomic: false,
        }
    }

    /// The file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The file, to change its transfer mode or storage plan.
    pub fn file_mut(&mut self) -> &mut File {
        &mut self.file
    }

    /// The view's displacement in bytes.
    pub fn displacement(&self) -> u64 {
        self.displacement
    }

    /// The view's file type.
    pub fn filetype(&self) -> &Datatype {
        &self.filetype
    }

    /// The method asked for.
    pub fn method(&self) -> Method {
        self.method
    }

    /// Chooses the method of later accesses.
    pub fn set_method(&mut self, method: Method) {
        self.method = method;
    }

    /// The buffers of the `sieve` method.
    pub fn sieve_options(&self) -> SieveOptions {
        self.sieve
    }

    /// Sets the buffers of the `sieve` method.
    pub fn set_sieve_options(&mut self, options: SieveOptions) {
        self.sieve = options;
    }

    /// Whether accesses are atomic.
    pub fn atomic(&self) -> bool {
        self.atomic
    }

    /// MPI's atomic mode: from now on each write holds an exclusive, and each read a shared,
    /// range lock from the mds over the file bytes it spans (first to last byte), so atomic
    /// accesses that overlap apply one after the other, whole, even across servers. Locks
    /// keep out only other lockers: accesses made outside atomic mode are not held back. In
    /// atomic mode the `sieve` method's writes go as `list` (the access's own lock already
    /// covers its chunks, and a lock of the same client would wait for itself).
    pub fn set_atomic(&mut self, atomic: bool) {
        self.atomic = atomic;
        // An atomic write is applied whole, under its lock, before it returns.
        if atomic {
            if let Err(err) = self.file.flush_buffered() {
                tracing::warn!(
                    "{}: buffered writes before atomic mode: {err}",
                    self.file.path()
                );
            }
        }
        self.file.buffer_writes = !atomic;
    }

    /// The method an access made now would use ([`Method::Auto`] resolved).
    pub fn effective_method(&self) -> Method {
        match self.method {
            Method::Auto if self.default_view => Method::Datatype,
            Method::Auto => Method::View,
            method => method,
        }
    }

    /// The method of one access with memory type `memtype`: [`ViewedFile::effective_method`],
    /// except that `Auto` sends a contiguous access (the default view, memory of instances
    /// without gaps) as `list`: one piece per server, as a plain write or read, with no file
    /// type to encode and walk on each server (`datatype` was 5–10 % slower there).
    fn access_method(&self, memtype: &Datatype) -> Method {
        let contiguous_memory = memtype.is_dense()
            && u64::try_from(memtype.extent()).is_ok_and(|extent| extent == memtype.size());
        if self.method == Method::Auto && self.default_view && contiguous_memory {
            Method::List
        } else {
            self.effective_method()
        }
    }

    /// Runs `access` under the range lock of atomic mode over view bytes `[offset, end)`.
    fn under_lock<T>(
        &mut self,
        offset: u64,
        end: u64,
        exclusive: bool,
        access: impl FnOnce(&mut Self) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        if !self.atomic {
            return access(self);
        }
        let first = self.byte_offset(offset)?;
        let last = self.byte_offset(end - 1)?;
        let lock = self.file.lock_range(first, last + 1, exclusive)?;
        let result = access(self);
        if result.is_ok() && lock.expired() {
            return Err(lock.lease_error());
        }
        lock.release()?;
        result
    }

    fn invalid(&self, detail: impl std::fmt::Display) -> ClientError {
        ClientError::InvalidArgument(format!("{}: {detail}", self.file.path()))
    }

    /// Checks view bytes `[start, end)` of `filetype` tiled from `displacement` against the
    /// file's limits (no byte before 0 or past `file_bytes_max`).
    fn check_range(
        &self,
        filetype: &Datatype,
        displacement: u64,
        start: u64,
        end: u64,
    ) -> Result<(), ClientError> {
        check_file_range(filetype, displacement, start, end).map_err(|error: RemoteError| {
            self.invalid(format_args!("file type: {}", error.message))
        })
    }

    /// Sets the view: the stream of `filetype` tiled from file byte `displacement`. A view
    /// declared on the servers for the previous view is released (its error, if any, is
    /// returned after the new view is in place).
    pub fn set_view(&mut self, displacement: u64, filetype: &Datatype) -> Result<(), ClientError> {
        if filetype.size() == 0 {
            return Err(self.invalid("the view's file type selects no bytes"));
        }
        self.check_range(filetype, displacement, 0, filetype.size())?;
        tessera_proto::dtype::wire::encode(filetype)
            .map_err(|error| self.invalid(format_args!("file type: {error}")))?;
        let old = self.declared.take();
        self.displacement = displacement;
        self.filetype = filetype.clone();
        self.default_view = displacement == 0
            && filetype.is_dense()
            && filetype.lb() == 0
            && u64::try_from(filetype.extent()).is_ok_and(|extent| extent == filetype.size());
        match old {
            Some(view) => view.release(),
            None => Ok(()),
        }
    }

    /// The file pieces of view bytes `[start, end)` of the current view, checked, lazily.
    pub(crate) fn pieces(
        &self,
        start: u64,
        end: u64,
    ) -> Result<impl Iterator<Item = Piece> + '_, ClientError> {
        self.check_range(&self.filetype, self.displacement, start, end)?;
        #[allow(clippy::cast_possible_wrap)] // checked against file_bytes_max
        let runs = self
            .filetype
            .runs(self.displacement as i64, start, end)
            .map_err(|error| self.invalid(error))?;
        Ok(runs.map(|run| {
            Piece::new(
                u64::try_from(run.offset).expect("checked by check_file_range"),
                run.length,
            )
        }))
    }

    /// The file byte that view byte `offset` lies at (MPI_File_get_byte_offset).
    pub fn byte_offset(&self, offset: u64) -> Result<u64, ClientError> {
        let end = offset
            .checked_add(1)
            .ok_or_else(|| self.invalid(format_args!("view offset {offset} is past the end")))?;
        self.pieces(offset, end)?
            .next()
            .map(|piece| piece.offset)
            .ok_or_else(|| self.invalid(format_args!("view offset {offset} has no byte")))
    }

    /// How many view bytes lie at file bytes below `file_byte`: the view offset of the end
    /// of a file of that size (MPI_SEEK_END). The view must hold its bytes in increasing file
    /// order, as MPI asks of file types; then view byte `v` lies at or past file byte `v`, and
    /// the count is found by bisection.
    pub fn view_bytes_below(&self, file_byte: u64) -> Result<u64, ClientError> {
        let (mut low, mut high) = (0u64, file_byte);
        while low < high {
            let middle = low + (high - low) / 2;
            if self.byte_offset(middle)? < file_byte {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        Ok(low)
    }

    /// The declared view, declaring it on first use.
    fn view(&mut self) -> Result<View, ClientError> {
        if let Some(view) = &self.declared {
            return Ok(view.clone());
        }
        let view = self.file.set_view(self.displacement, &self.filetype)?;
        self.declared = Some(view.clone());
        Ok(view)
    }

    /// Where a `datatype` access from view byte `offset` starts: the displacement of the
    /// file type instance holding it, and the offset inside that instance's stream bytes.
    fn instance_of(&self, offset: u64) -> Result<(u64, u64), ClientError> {
        let size = self.filetype.size();
        let (instance, within) = (offset / size, offset % size);
        let displacement = i128::from(self.displacement)
            + i128::from(instance) * i128::from(self.filetype.extent());
        let displacement = u64::try_from(displacement)
            .ok()
            .filter(|&displacement| displacement <= FILE_BYTES_MAX)
            .ok_or_else(|| {
                self.invalid(format_args!(
                    "view offset {offset} lies at file byte {displacement}, outside 0..file_bytes_max"
                ))
            })?;
        Ok((displacement, within))
    }

    /// Writes `count` instances of `memtype` from `memory` (the type's offsets count from
    /// `memory[0]`) to view bytes from `offset`.
    pub fn write(
        &mut self,
        offset: u64,
        memory: &[u8],
        memtype: &Datatype,
        count: u64,
    ) -> Result<IoReport, ClientError> {
        let total = stream_bytes(memtype, count)?;
        if total == 0 {
            return Ok(IoReport::default());
        }
        let end = self.end_of(offset, total)?;
        self.under_lock(offset, end, true, |viewed| {
            viewed.write_unlocked(offset, end, memory, memtype, count)
        })
    }

    fn write_unlocked(
        &mut self,
        offset: u64,
        end: u64,
        memory: &[u8],
        memtype: &Datatype,
        count: u64,
    ) -> Result<IoReport, ClientError> {
        let total = end - offset;
        let method = match self.access_method(memtype) {
            Method::Sieve if self.atomic => Method::List,
            method => method,
        };
        match method {
            Method::View => self.view()?.write_typed(offset, memory, memtype, count),
            Method::Datatype => {
                let (displacement, within) = self.instance_of(offset)?;
                if within == 0 {
                    return self.file.write_type(
                        memory,
                        memtype,
                        count,
                        &self.filetype,
                        displacement,
                    );
                }
                // The access starts inside an instance: that instance's remaining bytes go as
                // a list, the rest as datatype I/O from the next instance.
                let slices = memory_slices(memory, memtype, count)?;
                let packed = pack(&slices);
                let head_bytes = (self.filetype.size() - within).min(total);
                let (head, rest) =
                    packed.split_at(usize::try_from(head_bytes).expect("within memory"));
                let mut report = self.file.write_list(
                    &[IoSlice::new(head)],
                    &self
                        .pieces(offset, offset + head_bytes)?
                        .collect::<Vec<_>>(),
                )?;
                if !rest.is_empty() {
                    let (next, _) = self.instance_of(offset + head_bytes)?;
                    report += self.file.write_type(
                        rest,
                        &Datatype::byte(),
                        rest.len() as u64,
                        &self.filetype,
                        next,
                    )?;
                }
                Ok(report)
            }
            method => {
                let pieces = self.pieces(offset, end)?;
                let slices = memory_slices(memory, memtype, count)?;
                let file = &self.file;
                let sieve = self.sieve;
                let mut report = IoReport::default();
                batches(slices.into_iter(), pieces, |slices, pieces| {
                    let slices: Vec<IoSlice<'_>> = slices.into_iter().map(IoSlice::new).collect();
                    report += match method {
                        Method::Multiple => file.write_multiple(&slices, pieces)?,
                        Method::Sieve => file.write_sieve(&slices, pieces, &sieve)?,
                        _ => file.write_list(&slices, pieces)?,
                    };
                    Ok(())
                })?;
                Ok(report)
            }
        }
    }

    /// Reads view bytes from `offset` into `count` instances of `memtype` over `memory`.
    /// Bytes never written read as zeros. The memory type may not select a byte twice.
    pub fn read(
        &mut self,
        offset: u64,
        memory: &mut [u8],
        memtype: &Datatype,
        count: u64,
    ) -> Result<IoReport, ClientError> {
        let total = stream_bytes(memtype, count)?;
        if total == 0 {
            return Ok(IoReport::default());
        }
        let end = self.end_of(offset, total)?;
        self.under_lock(offset, end, false, |viewed| {
            viewed.read_unlocked(offset, end, memory, memtype, count)
        })
    }

    fn read_unlocked(
        &mut self,
        offset: u64,
        end: u64,
        memory: &mut [u8],
        memtype: &Datatype,
        count: u64,
    ) -> Result<IoReport, ClientError> {
        let total = end - offset;
        match self.access_method(memtype) {
            Method::View => self.view()?.read_typed(offset, memory, memtype, count),
            Method::Datatype => {
                let (displacement, within) = self.instance_of(offset)?;
                if within == 0 {
                    return self.file.read_type(
                        memory,
                        memtype,
                        count,
                        &self.filetype,
                        displacement,
                    );
                }
                let mut packed = vec![
                    0u8;
                    usize::try_from(total)
                        .map_err(|_| self.invalid("access too large"))?
                ];
                let head_bytes = (self.filetype.size() - within).min(total);
                let head_pieces: Vec<Piece> = self.pieces(offset, offset + head_bytes)?.collect();
                let (head, rest) =
                    packed.split_at_mut(usize::try_from(head_bytes).expect("within memory"));
                let mut report = self
                    .file
                    .read_list(&mut [IoSliceMut::new(head)], &head_pieces)?;
                if !rest.is_empty() {
                    let (next, _) = self.instance_of(offset + head_bytes)?;
                    let length = rest.len() as u64;
                    report += self.file.read_type(
                        rest,
                        &Datatype::byte(),
                        length,
                        &self.filetype,
                        next,
                    )?;
                }
                unpack(&packed, memory_slices_mut(memory, memtype, count)?);
                Ok(report)
            }
            method => {
                let mut slices = memory_slices_mut(memory, memtype, count)?;
                if method == Method::List && self.default_view && self.file.caches() {
                    // A contiguous read of the default view is a plain `read_at`: the client
                    // cache serves it (MPI-IO's reads of a byte range come here).
                    if let [only] = slices.as_mut_slice() {
                        return self.file.read_at(offset, only);
                    }
                }
                let pieces = self.pieces(offset, end)?;
                let file = &self.file;
                let sieve = self.sieve;
                let mut report = IoReport::default();
                batches(slices.into_iter(), pieces, |slices, pieces| {
                    let mut slices: Vec<IoSliceMut<'_>> =
                        slices.into_iter().map(IoSliceMut::new).collect();
                    report += match method {
                        Method::Multiple => file.read_multiple(&mut slices, pieces)?,
                        Method::Sieve => file.read_sieve(&mut slices, pieces, &sieve)?,
                        _ => file.read_list(&mut slices, pieces)?,
                    };
                    Ok(())
                })?;
                Ok(report)
            }
        }
    }

    fn end_of(&self, offset: u64, total: u64) -> Result<u64, ClientError> {
        offset
            .checked_add(total)
            .ok_or_else(|| self.invalid(format_args!("view range {offset}+{total} overflows")))
    }

    /// Releases the declared view and every view declared through the file, then closes it.
    pub fn close(self) -> Result<(), ClientError> {
        self.file.close()
    }
}

/// Bytes in `count` instances of `memtype`.
pub(crate) fn stream_bytes(memtype: &Datatype, count: u64) -> Result<u64, ClientError> {
    let total = u128::from(memtype.size()) * u128::from(count);
    u64::try_from(total)
        .ok()
        .filter(|&total| total <= FILE_BYTES_MAX)
        .ok_or_else(|| ClientError::LimitExceeded {
            what: format!(
                "{count} instances of a memory type of {} bytes",
                memtype.size()
            ),
            limit: "file_bytes_max",
            value: u64::try_from(total).unwrap_or(u64::MAX),
            max: FILE_BYTES_MAX,
        })
}

/// The runs `count` instances of `memtype` select in a buffer of `length` bytes, as (offset,
/// length), in stream order; every run must lie inside the buffer.
fn memory_runs(
    length: usize,
    memtype: &Datatype,
    count: u64,
) -> Result<Vec<(usize, usize)>, ClientError> {
    let total = stream_bytes(memtype, count)?;
    let Some((low, high)) = memtype.span(0, 0, total) else {
        return Ok(Vec::new());
    };
    if low < 0 || high > length as i128 {
        return Err(ClientError::InvalidArgument(format!(
            "the memory type reaches bytes {low}..{high}, outside the buffer of {length} bytes"
        )));
    }
    let mut runs = Vec::new();
    for run in memtype
        .runs(0, 0, total)
        .map_err(|error| ClientError::InvalidArgument(error.to_string()))?
    {
        if runs.len() == ACCESS_MEMORY_RUNS_MAX {
            return Err(ClientError::LimitExceeded {
                what: "memory type of one access".to_owned(),
                limit: "access_memory_runs_max",
                value: ACCESS_MEMORY_RUNS_MAX as u64 + 1,
                max: ACCESS_MEMORY_RUNS_MAX as u64,
            });
        }
        runs.push((
            usize::try_from(run.offset).expect("inside the buffer"),
            usize::try_from(run.length).expect("inside the buffer"),
        ));
    }
    Ok(runs)
}

/// The bytes `count` instances of `memtype` select in `memory`, in stream order.
pub(crate) fn memory_slices<'a>(
    memory: &'a [u8],
    memtype: &Datatype,
    count: u64,
) -> Result<Vec<&'a [u8]>, ClientError> {
    Ok(memory_runs(memory.len(), memtype, count)?
        .into_iter()
        .map(|(offset, length)| &memory[offset..offset + length])
        .collect())
}

/// As [`memory_slices`] for a read: the runs are cut out of `memory` in address order
/// (so no two may overlap) and handed back in stream order.
pub(crate) fn memory_slices_mut<'a>(
    memory: &'a mut [u8],
    memtype: &Datatype,
    count: u64,
) -> Result<Vec<&'a mut [u8]>, ClientError> {
    let runs = memory_runs(memory.len(), memtype, count)?;
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_unstable_by_key(|&index| runs[index].0);
    let mut cut: Vec<Option<&'a mut [u8]>> = (0..runs.len()).map(|_| None).collect();
    let mut rest = memory;
    let mut consumed = 0usize;
    for index in order {
        let (offset, length) = runs[index];
        if offset < consumed {
            return Err(ClientError::InvalidArgument(format!(
                "the memory type selects byte {offset} of the buffer twice; a read cannot land there twice"
            )));
        }
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(offset - consumed);
        let (piece, tail) = tail.split_at_mut(length);
        cut[index] = Some(piece);
        rest = tail;
        consumed = offset + length;
    }
    Ok(cut
        .into_iter()
        .map(|piece| piece.expect("every run was cut"))
        .collect())
}

pub(crate) fn pack(slices: &[&[u8]]) -> Vec<u8> {
    slices.concat()
}

pub(crate) fn unpack(packed: &[u8], targets: Vec<&mut [u8]>) {
    let mut at = 0;
    for target in targets {
        let length = target.len();
        target.copy_from_slice(&packed[at..at + length]);
        at += length;
    }
}

/// Pairs the memory slices with the file runs, in stream order, and hands them to `call` in
/// batches of at most [`ACCESS_BATCH_PIECES_MAX`] slices and pieces, each piece at most
/// `PIECE_BYTES_MAX`. Each batch's memory and file totals are equal. The caller has checked
/// that the memory total equals the runs' total.
fn batches<P: Part>(
    memory: impl Iterator<Item = P>,
    runs: impl Iterator<Item = Piece>,
    mut call: impl FnMut(Vec<P>, &[Piece]) -> Result<(), ClientError>,
) -> Result<(), ClientError> {
    let mut memory = memory.filter(|slice| slice.length() > 0);
    let mut front: Option<P> = None;
    let mut slices: Vec<P> = Vec::new();
    let mut pieces: Vec<Piece> = Vec::new();
    for run in runs {
        let (mut offset, mut left) = (run.offset, run.length);
        while left > 0 {
            let slice = match front.take() {
                Some(slice) => slice,
                None => memory
                    .next()
                    .expect("the memory total matches the file total"),
            };
            let want = left.min(PIECE_BYTES_MAX);
            let slice = if slice.length() as u64 > want {
                let (head, tail) = slice.cut(usize::try_from(want).expect("below a slice length"));
                front = Some(tail);
                head
            } else {
                slice
            };
            let length = slice.length() as u64;
            match pieces.last_mut() {
                Some(last)
                    if last.offset + last.length == offset
                        && last.length + length <= PIECE_BYTES_MAX =>
                {
                    last.length += length;
                }
                _ => pieces.push(Piece::new(offset, length)),
            }
            slices.push(slice);
            offset += length;
            left -= length;
            if pieces.len() >= ACCESS_BATCH_PIECES_MAX || slices.len() >= ACCESS_BATCH_PIECES_MAX {
                call(std::mem::take(&mut slices), &pieces)?;
                pieces.clear();
            }
        }
    }
    if !pieces.is_empty() {
        call(slices, &pieces)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_pair_slices_with_pieces_and_cut_at_the_limit() {
        let memory: Vec<u8> = (0..=255).collect();
        let slices: Vec<&[u8]> = memory.chunks(3).collect();
        // Runs of 5 bytes, 10 apart: slices of 3 cut across them.
        let runs: Vec<Piece> = (0..51).map(|k| Piece::new(k * 10, 5)).collect();
        let mut seen = Vec::new();
        let mut calls = 0;
        batches(slices.into_iter(), runs.iter().copied(), |batch, pieces| {
            calls += 1;
            let memory_total: usize = batch.iter().map(|slice| slice.len()).sum();
            let file_total: u64 = pieces.iter().map(|piece| piece.length).sum();
            assert_eq!(memory_total as u64, file_total);
            let mut bytes = batch.concat().into_iter();
            for piece in pieces {
                for k in 0..piece.length {
                    seen.push((piece.offset + k, bytes.next().unwrap()));
                }
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(calls, 1);
        assert_eq!(seen.len(), 255);
        for (index, (offset, byte)) in seen.into_iter().enumerate() {
            let index = index as u64;
            assert_eq!(offset, (index / 5) * 10 + index % 5);
            assert_eq!(u64::from(byte), index);
        }
    }

    #[test]
    fn adjacent_runs_merge_and_many_runs_make_several_batches() {
        let memory = vec![7u8; 2 * ACCESS_BATCH_PIECES_MAX + 5];
        let singles: Vec<&[u8]> = memory.chunks(1).collect();
        let runs = (0..memory.len() as u64).map(|k| Piece::new(2 * k, 1));
        let mut batch_pieces = Vec::new();
        batches(singles.into_iter(), runs, |batch, pieces| {
            assert_eq!(batch.len(), pieces.len());
            batch_pieces.push(pieces.len());
            Ok(())
        })
        .unwrap();
        assert_eq!(
            batch_pieces,
            vec![ACCESS_BATCH_PIECES_MAX, ACCESS_BATCH_PIECES_MAX, 5]
        );
        // Contiguous runs over one slice merge into one piece.
        let whole = [&memory[..]];
        let runs = (0..10u64).map(|k| Piece::new(k * 3, 3));
        batches(
            whole.into_iter(),
            runs.chain([Piece::new(30, memory.len() as u64 - 30)]),
            |batch, pieces| {
                assert_eq!(pieces, &[Piece::new(0, memory.len() as u64)]);
                assert_eq!(batch.len(), 11);
                Ok(())
            },
        )
        .unwrap();
    }

    #[test]
    fn method_names_round_trip() {
        for method in Method::ALL {
            assert_eq!(Method::from_name(method.name()), Some(method));
        }
        assert_eq!(Method::from_name("two_phase"), None);
    }
}
