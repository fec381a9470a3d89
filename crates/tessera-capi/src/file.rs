//! An open file: size, sync, list I/O, the view, the method, and accesses through them.
//!
//! A `TesseraFile` holds a `ViewedFile` (the file, its view and its method) and the view's
//! etype size: offsets given to [`tessera_file_write`], [`tessera_file_read`] and
//! [`tessera_file_byte_offset`] count etypes of the current view, as MPI-IO's do, and are
//! turned into view bytes here. Every other decision (which requests, which method) is the
//! client library's.

use std::ffi::{c_char, c_int, c_void};
use std::io::{IoSlice, IoSliceMut};
use std::sync::{Mutex, MutexGuard};

use tessera_client::{
    Client, ClientError, Datatype, IoReport, Method, Piece, TransferMode, ViewedFile,
};
use tessera_proto::StoragePlan;

use crate::datatype::TesseraDatatype;
use crate::error::{guard, handle, put, put_optional, text, Failure};
use crate::memory::{memory_runs, slices, slices_mut};
use crate::stat::TesseraStat;

pub(crate) struct FileState {
    pub(crate) viewed: ViewedFile,
    /// Bytes in one etype of the current view (1 for the default view).
    pub(crate) etype_bytes: u64,
}

impl FileState {
    pub(crate) fn new(viewed: ViewedFile) -> Self {
        Self {
            viewed,
            etype_bytes: 1,
        }
    }

    fn view_bytes(&self, offset: u64) -> Result<u64, Failure> {
        offset.checked_mul(self.etype_bytes).ok_or_else(|| {
            Failure::invalid(format!(
                "{}: offset {offset} etypes of {} bytes overflows",
                self.viewed.file().path(),
                self.etype_bytes
            ))
        })
    }
}

/// An open file. Calls on one file are serialised.
pub struct TesseraFile {
    client: Client,
    state: Mutex<FileState>,
}

impl TesseraFile {
    pub(crate) fn new(client: Client, state: FileState) -> Self {
        Self {
            client,
            state: Mutex::new(state),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, FileState> {
        // A panic inside a call leaves the state as consistent as any failed call does.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What one I/O call did: requests and messages on the wire, and what the servers did.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TesseraIoReport {
    /// Requests sent.
    pub requests: u64,
    /// Frames sent.
    pub messages_sent: u64,
    /// Frames received.
    pub messages_received: u64,
    /// Contiguous storage pieces the servers touched.
    pub storage_pieces: u64,
    /// Bytes the servers moved to and from storage.
    pub storage_bytes: u64,
    /// Requests the servers served by sieving.
    pub sieved: u64,
    /// Bytes moved for the caller.
    pub bytes: u64,
    /// Bytes copied through pack buffers on the client.
    pub bytes_copied: u64,
    /// Distinct servers reached.
    pub servers: u64,
    /// Range locks taken.
    pub locks: u64,
}

impl From<IoReport> for TesseraIoReport {
    fn from(report: IoReport) -> Self {
        Self {
            requests: report.requests,
            messages_sent: report.messages_sent,
            messages_received: report.messages_received,
            storage_pieces: report.storage_pieces,
            storage_bytes: report.storage_bytes,
            sieved: report.sieved,
            bytes: report.bytes,
            bytes_copied: report.bytes_copied,
            servers: report.servers,
            locks: report.locks,
        }
    }
}

/// A memory segment of a list call: `length` bytes at `base`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TesseraMemSegment {
    /// First byte.
    pub base: *mut c_void,
    /// Bytes.
    pub length: u64,
}

/// A file segment of a list call: `length` bytes at file offset `offset`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TesseraFileSegment {
    /// First byte in the file.
    pub offset: u64,
    /// Bytes.
    pub length: u64,
}

/// # Safety
/// `file` is null or a live handle.
pub(crate) unsafe fn file_ref<'a>(file: *const TesseraFile) -> Result<&'a TesseraFile, Failure> {
    // SAFETY: the caller's guarantee.
    unsafe { handle(file, "file") }
}

/// # Safety
/// `datatype` is null or a live handle.
pub(crate) unsafe fn optional_type<'a>(datatype: *const TesseraDatatype) -> Option<&'a Datatype> {
    // SAFETY: the caller's guarantee.
    unsafe { datatype.as_ref() }.map(|datatype| &datatype.datatype)
}

/// Closes a file: releases the views declared through it and frees the handle, also when
/// the release fails (the return code then says so). Null is ignored.
///
/// # Safety
/// `file` is null or a handle not closed before.
#[no_mangle]
pub unsafe extern "C" fn tessera_close(file: *mut TesseraFile) -> c_int {
    guard(|| {
        if file.is_null() {
            return Ok(());
        }
        // SAFETY: the caller guarantees a live handle, closed once.
        let file = unsafe { Box::from_raw(file) };
        let state = file
            .state
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(state.viewed.close()?)
    })
}

/// Attributes of an open file, the size computed from the servers.
///
/// # Safety
/// `file` is a live handle; `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_stat(
    file: *const TesseraFile,
    out: *mut TesseraStat,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee.
        let attr = unsafe { file_ref(file)? }.lock().viewed.file().stat()?;
        // SAFETY: the caller guarantees `out` is valid for one write.
        unsafe { put(out, TesseraStat::from(&attr), "out") }
    })
}

/// Sets the size of the file: shrinking drops bytes, growing adds zeros.
///
/// # Safety
/// `file` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_set_size(file: *const TesseraFile, size: u64) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee.
        let file = unsafe { file_ref(file)? };
        let path = file.lock().viewed.file().path().to_owned();
        file.client.truncate(&path, size)?;
        Ok(())
    })
}

/// Writes what this process's client cache buffered of the file to its servers (nothing
/// without write-back, `tessera_connect_with_write_back`): other clients read it from then
/// on. Not to stable storage: that is `tessera_file_sync`.
///
/// # Safety
/// `file` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_flush(file: *const TesseraFile) -> c_int {
    // SAFETY: the caller's guarantee.
    guard(|| Ok(unsafe { file_ref(file)? }.lock().viewed.file().flush()?))
}

/// Makes this process a member of write group `group` for the file (0: none): with
/// write-back, the members' write leases do not conflict, so processes writing interleaved
/// pieces of one file all buffer at once; they order their own overlapping writes (MPI-IO's
/// sync, barrier, sync). What the file buffered is written first.
///
/// # Safety
/// `file` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_set_write_group(
    file: *const TesseraFile,
    group: u64,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee.
        let file = unsafe { file_ref(file)? };
        Ok(file.lock().viewed.file_mut().set_write_group(group)?)
    })
}

/// Flushes the file's data on every server to stable storage.
///
/// # Safety
/// `file` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_sync(file: *const TesseraFile) -> c_int {
    // SAFETY: the caller's guarantee.
    guard(|| Ok(unsafe { file_ref(file)? }.lock().viewed.file().sync()?))
}

/// # Safety
/// `segments` is valid for `count` reads (null allowed when `count` is 0).
unsafe fn segments<'a, T>(
    segments: *const T,
    count: usize,
    what: &str,
) -> Result<&'a [T], Failure> {
    if count == 0 {
        return Ok(&[]);
    }
    if segments.is_null() {
        return Err(Failure::invalid(format!(
            "{what}: null pointer for {count} segments"
        )));
    }
    // SAFETY: not null, and the caller guarantees `count` readable segments.
    Ok(unsafe { std::slice::from_raw_parts(segments, count) })
}

fn segment_length(length: u64) -> Result<usize, Failure> {
    usize::try_from(length)
        .ok()
        .filter(|&length| isize::try_from(length).is_ok())
        .ok_or_else(|| Failure::invalid(format!("a memory segment of {length} bytes")))
}

/// Writes the memory segments, in order, to the file segments, in order (list I/O: one
/// request per involved server). The totals must match; where file segments overlap, the
/// later wins. `report` may be null.
///
/// # Safety
/// `file` is a live handle; `memory` is valid for `memory_count` reads and each segment's
/// bytes for reads; `file_segments` is valid for `file_count` reads; `report` is null or
/// valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_write_list(
    file: *const TesseraFile,
    memory: *const TesseraMemSegment,
    memory_count: usize,
    file_segments: *const TesseraFileSegment,
    file_count: usize,
    report: *mut TesseraIoReport,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (file, memory, pieces) = unsafe {
            (
                file_ref(file)?,
                segments(memory, memory_count, "memory")?,
                segments(file_segments, file_count, "file")?,
            )
        };
        let slices = memory
            .iter()
            .map(|segment| {
                let length = segment_length(segment.length)?;
                if length == 0 {
                    return Ok(IoSlice::new(&[]));
                }
                if segment.base.is_null() {
                    return Err(Failure::invalid("a memory segment with a null base"));
                }
                // SAFETY: the caller guarantees each segment's bytes are readable.
                Ok(IoSlice::new(unsafe {
                    std::slice::from_raw_parts(segment.base.cast::<u8>(), length)
                }))
            })
            .collect::<Result<Vec<_>, Failure>>()?;
        let pieces: Vec<Piece> = pieces
            .iter()
            .map(|s| Piece::new(s.offset, s.length))
            .collect();
        let done = file.lock().viewed.file().write_list(&slices, &pieces)?;
        // SAFETY: the caller guarantees `report` is null or valid for one write.
        unsafe { put_optional(report, TesseraIoReport::from(done)) };
        Ok(())
    })
}

/// Reads the file segments, in order, into the memory segments, in order. Bytes never
/// written read as zeros. Memory segments must not overlap. `report` may be null.
///
/// # Safety
/// `file` is a live handle; `memory` is valid for `memory_count` reads and each segment's
/// bytes for writes; `file_segments` is valid for `file_count` reads; `report` is null or
/// valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_read_list(
    file: *const TesseraFile,
    memory: *const TesseraMemSegment,
    memory_count: usize,
    file_segments: *const TesseraFileSegment,
    file_count: usize,
    report: *mut TesseraIoReport,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (file, memory, pieces) = unsafe {
            (
                file_ref(file)?,
                segments(memory, memory_count, "memory")?,
                segments(file_segments, file_count, "file")?,
            )
        };
        let mut runs = Vec::with_capacity(memory.len());
        for segment in memory {
            let length = segment_length(segment.length)?;
            if length > 0 {
                if segment.base.is_null() {
                    return Err(Failure::invalid("a memory segment with a null base"));
                }
                runs.push((segment.base.cast::<u8>() as isize, length));
            }
        }
        // Absolute addresses from a null base: slices_mut checks that no two overlap.
        // SAFETY: the caller guarantees each segment's bytes are writable.
        let targets = unsafe { slices_mut(std::ptr::null_mut(), &runs)? };
        let mut targets: Vec<IoSliceMut<'_>> = targets.into_iter().map(IoSliceMut::new).collect();
        let pieces: Vec<Piece> = pieces
            .iter()
            .map(|s| Piece::new(s.offset, s.length))
            .collect();
        let done = file.lock().viewed.file().read_list(&mut targets, &pieces)?;
        // SAFETY: the caller guarantees `report` is null or valid for one write.
        unsafe { put_optional(report, TesseraIoReport::from(done)) };
        Ok(())
    })
}

/// Sets the file's view: the stream of `filetype` tiled from byte `displacement`, with
/// offsets counted in `etype`s. A null `etype` is one byte; a null `filetype` is the etype
/// (a contiguous view). The file type's size must be a multiple of the etype's. A view
/// declared on the servers for the previous view is released.
///
/// # Safety
/// `file` is a live handle; `etype` and `filetype` are null or live handles.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_set_view(
    file: *const TesseraFile,
    displacement: u64,
    etype: *const TesseraDatatype,
    filetype: *const TesseraDatatype,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (file, etype, filetype) = unsafe {
            (
                file_ref(file)?,
                optional_type(etype),
                optional_type(filetype),
            )
        };
        let byte = Datatype::byte();
        let etype = etype.unwrap_or(&byte);
        let filetype = filetype.unwrap_or(etype);
        let mut state = file.lock();
        let path = state.viewed.file().path().to_owned();
        if etype.size() == 0 || filetype.size() % etype.size() != 0 {
            return Err(Failure::invalid(format!(
                "view of {path}: the file type's {} bytes are not a whole number of etypes of {} bytes",
                filetype.size(),
                etype.size()
            )));
        }
        state.etype_bytes = etype.size();
        state.viewed.set_view(displacement, filetype)?;
        Ok(())
    })
}

/// Chooses how later accesses reach the servers: `"auto"` (the default: `"view"` when a
/// view other than the default is set, `"datatype"` otherwise), `"multiple"`, `"sieve"`,
/// `"list"`, `"datatype"` or `"view"`.
///
/// # Safety
/// `file` is a live handle; `method` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_set_method(
    file: *const TesseraFile,
    method: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees.
        let (file, name) = unsafe { (file_ref(file)?, text(method, "method")?) };
        let method = Method::from_name(name).ok_or_else(|| {
            Failure::invalid(format!(
                "method {name:?} is not one of auto, multiple, sieve, list, datatype, view"
            ))
        })?;
        file.lock().viewed.set_method(method);
        Ok(())
    })
}

/// The name of the method the next access will use (`"auto"` resolved when `resolved` is
/// non-zero). The string is static.
///
/// # Safety
/// `file` is a live handle; `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_method(
    file: *const TesseraFile,
    resolved: c_int,
    out: *mut *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee.
        let state = unsafe { file_ref(file)? }.lock();
        let method = if resolved != 0 {
            state.viewed.effective_method()
        } else {
            state.viewed.method()
        };
        // Static NUL-terminated names (byte strings: the header generator predates C
        // string literals).
        let name: &'static [u8] = match method {
            Method::Auto => b"auto\0",
            Method::Multiple => b"multiple\0",
            Method::Sieve => b"sieve\0",
            Method::List => b"list\0",
            Method::Datatype => b"datatype\0",
            Method::View => b"view\0",
        };
        // SAFETY: the caller guarantees `out` is valid for one write.
        unsafe { put(out, name.as_ptr().cast::<c_char>(), "out") }
    })
}

/// Chooses how bulk data moves (`"gather"`, the default, `"pack"`, `"multiple"`, or any
/// other mode the client library names).
///
/// # Safety
/// `file` is a live handle; `mode` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_set_transfer_mode(
    file: *const TesseraFile,
    mode: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees.
        let (file, name) = unsafe { (file_ref(file)?, text(mode, "transfer mode")?) };
        let mode = TransferMode::from_name(name)
            .ok_or_else(|| Failure::invalid(format!("transfer mode {name:?} is unknown")))?;
        file.lock().viewed.file_mut().set_transfer_mode(mode);
        Ok(())
    })
}

/// Asks the servers to serve later calls by a storage plan: `"auto"` (the default: each
/// server's cost model chooses), `"per-piece"`, `"batched"` or `"sieve"` (as the client
/// library names them).
///
/// # Safety
/// `file` is a live handle; `plan` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_set_storage_plan(
    file: *const TesseraFile,
    plan: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees.
        let (file, name) = unsafe { (file_ref(file)?, text(plan, "storage plan")?) };
        let plan = StoragePlan::from_name(name)
            .ok_or_else(|| Failure::invalid(format!("storage plan {name:?} is unknown")))?;
        file.lock().viewed.file_mut().set_storage_plan(plan);
        Ok(())
    })
}

/// Sets the buffers of the `"sieve"` method (ROMIO's `ind_rd_buffer_size` and
/// `ind_wr_buffer_size`); 0 keeps the current value.
///
/// # Safety
/// `file` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_set_sieve_buffers(
    file: *const TesseraFile,
    read_buffer_bytes: u64,
    write_buffer_bytes: u64,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee.
        let file = unsafe { file_ref(file)? };
        let mut state = file.lock();
        let mut options = state.viewed.sieve_options();
        if read_buffer_bytes > 0 {
            options.read_buffer_bytes = read_buffer_bytes;
        }
        if write_buffer_bytes > 0 {
            options.write_buffer_bytes = write_buffer_bytes;
        }
        state.viewed.set_sieve_options(options);
        Ok(())
    })
}

/// The buffers the `"sieve"` method uses now (ROMIO's `ind_rd_buffer_size` and
/// `ind_wr_buffer_size`), as `tessera_file_set_sieve_buffers` left them.
///
/// # Safety
/// `file` is a live handle; `read_buffer_bytes` and `write_buffer_bytes` are valid for
/// writes.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_sieve_buffers(
    file: *const TesseraFile,
    read_buffer_bytes: *mut u64,
    write_buffer_bytes: *mut u64,
) -> c_int {
    guard(|| {
        if read_buffer_bytes.is_null() || write_buffer_bytes.is_null() {
            return Err(Failure::invalid("tessera_file_sieve_buffers: null output"));
        }
        // SAFETY: the caller's guarantee.
        let file = unsafe { file_ref(file)? };
        let options = file.lock().viewed.sieve_options();
        // SAFETY: both checked non-null above; valid for writes by the caller's guarantee.
        unsafe {
            *read_buffer_bytes = options.read_buffer_bytes;
            *write_buffer_bytes = options.write_buffer_bytes;
        }
        Ok(())
    })
}

/// MPI's atomic mode (non-zero: on): each later write holds an exclusive, and each read a
/// shared, byte-range lock over the file bytes it spans, so overlapping atomic accesses
/// apply whole, one after the other, even across servers.
///
/// # Safety
/// `file` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_set_atomic(file: *const TesseraFile, atomic: c_int) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee.
        unsafe { file_ref(file)? }
            .lock()
            .viewed
            .set_atomic(atomic != 0);
        Ok(())
    })
}

/// The file byte where etype `offset` of the view lies (MPI_File_get_byte_offset).
///
/// # Safety
/// `file` is a live handle; `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_byte_offset(
    file: *const TesseraFile,
    offset: u64,
    out: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee.
        let state = unsafe { file_ref(file)? }.lock();
        let byte = state.viewed.byte_offset(state.view_bytes(offset)?)?;
        // SAFETY: the caller guarantees `out` is valid for one write.
        unsafe { put(out, byte, "out") }
    })
}

/// The view offset, in etypes, of the end of a file of `file_bytes` bytes: the number of
/// view bytes lying below that file byte, rounded up to whole etypes (MPI_SEEK_END).
///
/// # Safety
/// `file` is a live handle; `out` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_offset_of_byte(
    file: *const TesseraFile,
    file_bytes: u64,
    out: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee.
        let state = unsafe { file_ref(file)? }.lock();
        let below = state.viewed.view_bytes_below(file_bytes)?;
        // SAFETY: the caller guarantees `out` is valid for one write.
        unsafe { put(out, below.div_ceil(state.etype_bytes), "out") }
    })
}

/// The caller's memory for one access: the bytes from the memory type's true lower to its
/// true upper bound as one slice, and the memory type and count shifted to count from the
/// slice's first byte.
struct Span {
    start: *mut u8,
    length: usize,
    memtype: Datatype,
    count: u64,
}

/// # Safety
/// None beyond the arguments being what they say; the span is only computed here.
fn span(buffer: *mut u8, memtype: Option<&Datatype>, count: u64) -> Result<Option<Span>, Failure> {
    let memtype = memtype.cloned().unwrap_or_else(Datatype::byte);
    let total = u128::from(memtype.size()) * u128::from(count);
    let total = u64::try_from(total).map_err(|_| {
        Failure::limit(format!(
            "memory of {count} elements of {} bytes is too large",
            memtype.size()
        ))
    })?;
    let Some((low, high)) = memtype.span(0, 0, total) else {
        return Ok(None);
    };
    let bad = || {
        Failure::invalid(format!(
            "the memory type reaches bytes {low}..{high} from the buffer: too far"
        ))
    };
    let low_offset = isize::try_from(low).map_err(|_| bad())?;
    let length = usize::try_from(high - low)
        .ok()
        .filter(|&length| isize::try_from(length).is_ok())
        .ok_or_else(bad)?;
    let start = buffer.wrapping_offset(low_offset);
    if start.is_null() || (start as usize).checked_add(length).is_none() {
        return Err(bad());
    }
    let (memtype, count) = if low == 0 {
        (memtype, count)
    } else {
        let shift = i64::try_from(-low).map_err(|_| bad())?;
        (Datatype::hindexed(&[count], &[shift], &memtype)?, 1)
    };
    Ok(Some(Span {
        start,
        length,
        memtype,
        count,
    }))
}

/// Writes `count` instances of `memtype` (null: `count` bytes) from `buffer` at etype
/// `offset` of the file's view, by the file's method. `report` may be null.
///
/// The bytes from the memory type's true lower bound to its true upper bound (relative to
/// `buffer`) must lie in one allocation that nothing writes during the call. A null `buffer`
/// makes the type's offsets absolute addresses (`MPI_BOTTOM`); then only the selected bytes
/// need be readable (they are copied first).
///
/// # Safety
/// `file` is a live handle; `memtype` is null or a live handle; the memory is as above;
/// `report` is null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_write(
    file: *const TesseraFile,
    offset: u64,
    buffer: *const c_void,
    count: u64,
    memtype: *const TesseraDatatype,
    report: *mut TesseraIoReport,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees.
        let (file, memtype) = unsafe { (file_ref(file)?, optional_type(memtype)) };
        let mut state = file.lock();
        // SAFETY: the caller's guarantees on the memory.
        let done = unsafe {
            write_access(
                &mut state,
                offset,
                buffer,
                count,
                memtype,
                ViewedFile::write,
            )?
        };
        // SAFETY: the caller guarantees `report` is null or valid for one write.
        unsafe { put_optional(report, TesseraIoReport::from(done)) };
        Ok(())
    })
}

/// Reads into `count` instances of `memtype` (null: `count` bytes) over `buffer` from etype
/// `offset` of the file's view, by the file's method. Bytes never written read as zeros. The
/// memory type may not select a byte twice. `report` may be null.
///
/// The bytes from the memory type's true lower bound to its true upper bound (relative to
/// `buffer`) must lie in one allocation that nothing else uses during the call; only the
/// selected bytes are written. A null `buffer` makes the type's offsets absolute addresses
/// (`MPI_BOTTOM`); then only the selected bytes need be writable.
///
/// # Safety
/// `file` is a live handle; `memtype` is null or a live handle; the memory is as above;
/// `report` is null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_read(
    file: *const TesseraFile,
    offset: u64,
    buffer: *mut c_void,
    count: u64,
    memtype: *const TesseraDatatype,
    report: *mut TesseraIoReport,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees.
        let (file, memtype) = unsafe { (file_ref(file)?, optional_type(memtype)) };
        let mut state = file.lock();
        // SAFETY: the caller's guarantees on the memory.
        let done =
            unsafe { read_access(&mut state, offset, buffer, count, memtype, ViewedFile::read)? };
        // SAFETY: the caller guarantees `report` is null or valid for one write.
        unsafe { put_optional(report, TesseraIoReport::from(done)) };
        Ok(())
    })
}

/// An access's write with its memory resolved: `call` gets the viewed file, the view byte
/// the access starts at, and the memory as one slice with its memory type and count. With no
/// bytes to move, `call` still runs (with an empty memory and a count of 0), so that a
/// collective call takes part.
///
/// # Safety
/// The memory is as [`tessera_file_write`] describes.
pub(crate) unsafe fn write_access(
    state: &mut FileState,
    offset: u64,
    buffer: *const c_void,
    count: u64,
    memtype: Option<&Datatype>,
    call: impl FnOnce(&mut ViewedFile, u64, &[u8], &Datatype, u64) -> Result<IoReport, ClientError>,
) -> Result<IoReport, Failure> {
    let start = state.view_bytes(offset)?;
    let done = if buffer.is_null() {
        let (runs, total) = memory_runs(count, memtype)?;
        // SAFETY: the caller guarantees the selected bytes at their absolute addresses are
        // readable.
        let packed = unsafe { slices(std::ptr::null(), &runs)? }.concat();
        call(&mut state.viewed, start, &packed, &Datatype::byte(), total)?
    } else if let Some(span) = span(buffer.cast_mut().cast::<u8>(), memtype, count)? {
        // SAFETY: the caller guarantees the span is one allocation not written meanwhile.
        let memory = unsafe { std::slice::from_raw_parts(span.start.cast_const(), span.length) };
        call(&mut state.viewed, start, memory, &span.memtype, span.count)?
    } else {
        call(&mut state.viewed, start, &[], &Datatype::byte(), 0)?
    };
    Ok(done)
}

/// An access's read with its memory resolved, as [`write_access`].
///
/// # Safety
/// The memory is as [`tessera_file_read`] describes.
pub(crate) unsafe fn read_access(
    state: &mut FileState,
    offset: u64,
    buffer: *mut c_void,
    count: u64,
    memtype: Option<&Datatype>,
    call: impl FnOnce(&mut ViewedFile, u64, &mut [u8], &Datatype, u64) -> Result<IoReport, ClientError>,
) -> Result<IoReport, Failure> {
    let start = state.view_bytes(offset)?;
    let done = if buffer.is_null() {
        let (runs, total) = memory_runs(count, memtype)?;
        // SAFETY: the caller guarantees the selected bytes at their absolute addresses are
        // writable and unused meanwhile.
        let targets = unsafe { slices_mut(std::ptr::null_mut(), &runs)? };
        let mut packed = vec![0u8; targets.iter().map(|target| target.len()).sum()];
        let done = call(
            &mut state.viewed,
            start,
            &mut packed,
            &Datatype::byte(),
            total,
        )?;
        let mut at = 0;
        for target in targets {
            let length = target.len();
            target.copy_from_slice(&packed[at..at + length]);
            at += length;
        }
        done
    } else if let Some(span) = span(buffer.cast::<u8>(), memtype, count)? {
        // SAFETY: the caller guarantees the span is one allocation nothing else uses during
        // the call.
        let memory = unsafe { std::slice::from_raw_parts_mut(span.start, span.length) };
        call(&mut state.viewed, start, memory, &span.memtype, span.count)?
    } else {
        call(&mut state.viewed, start, &mut [], &Datatype::byte(), 0)?
    };
    Ok(done)
}
