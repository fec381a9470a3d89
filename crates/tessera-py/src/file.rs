//! An open file from Python: bytes, lists of pieces, and N-d arrays, each call one client
//! call made with the GIL released.
//!
//! An array call describes both sides as datatypes and makes one datatype request per
//! involved server: the file side is the block's subarray type in the file's array (C or
//! Fortran order) from byte `offset`, the memory side the NumPy array's own strides
//! ([`crate::ndarray`]), so a strided view is moved in place and `out=` is filled in place.
//! `File.last_io` keeps what the last call did on the wire (requests, bytes copied on the
//! client, memory slices moved in place), for callers and tests that check it.

use std::sync::{Mutex, PoisonError};

use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use tessera_client::{IoReport, Mechanism, Piece, TransferPolicy};
use tessera_proto::limits::PIECE_BYTES_MAX;

use crate::collective::{self, MpiComm, Part};
use crate::error;
use crate::layout::{self, file_type};
use crate::ndarray::{element_type, ArrayMemory};
use crate::stat::Stat;

/// An open file. Calls from several threads may run at once.
#[pyclass(module = "tessera._tessera", frozen)]
pub struct File {
    inner: Mutex<Option<tessera_client::File>>,
    last: Mutex<IoReport>,
}

/// A view of a file: the block of an array as one contiguous byte space, declared once on
/// the servers (`File.set_view`). Accesses send only (view, offset, length).
#[pyclass(module = "tessera._tessera", frozen)]
pub struct View {
    inner: Mutex<Option<tessera_client::View>>,
    size: u64,
}

/// A contiguous byte buffer of a Python object (any object with the buffer protocol), seen
/// as unsigned bytes.
fn byte_buffer(object: &Bound<'_, PyAny>, writable: bool, what: &str) -> PyResult<PyBuffer<u8>> {
    let py = object.py();
    let view = py
        .import("builtins")?
        .getattr("memoryview")?
        .call1((object,))
        .and_then(|view| view.call_method1("cast", ("B",)))
        .map_err(|err| {
            PyTypeError::new_err(format!(
                "{what} must be a C-contiguous bytes-like object: {err}"
            ))
        })?;
    let buffer = PyBuffer::<u8>::get(&view)?;
    if writable && buffer.readonly() {
        return Err(PyTypeError::new_err(format!("{what} is read-only")));
    }
    Ok(buffer)
}

/// A NumPy array of `object`, or `numpy.asarray(object)` for anything else.
fn as_array<'py>(object: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyUntypedArray>> {
    if let Ok(array) = object.cast::<PyUntypedArray>() {
        return Ok(array.clone());
    }
    let array = object
        .py()
        .import("numpy")?
        .getattr("asarray")?
        .call1((object,))?;
    Ok(array.cast_into::<PyUntypedArray>()?)
}

fn numpy_dtype<'py>(object: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyArrayDescr>> {
    let descr = object
        .py()
        .import("numpy")?
        .getattr("dtype")?
        .call1((object,))?;
    Ok(descr.cast_into::<PyArrayDescr>()?)
}

fn report_dict<'py>(py: Python<'py>, report: &IoReport) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, value) in [
        ("requests", report.requests),
        ("bytes", report.bytes),
        ("bytes_copied", report.bytes_copied),
        ("memory_pieces", report.memory_pieces),
        ("storage_pieces", report.storage_pieces),
        ("storage_bytes", report.storage_bytes),
        ("servers", report.servers),
        ("messages_sent", report.messages_sent),
        ("messages_received", report.messages_received),
        ("one_sided", report.one_sided),
    ] {
        dict.set_item(key, value)?;
    }
    Ok(dict)
}

fn start_or_zeros(start: Option<Vec<u64>>, dims: usize) -> Vec<u64> {
    start.unwrap_or_else(|| vec![0; dims])
}

/// What a block write or read works with: the array, the block's file type in the file, and
/// the array's memory.
type BlockAccess<'py> = (
    Bound<'py, PyUntypedArray>,
    tessera_client::Datatype,
    ArrayMemory,
);

impl File {
    pub(crate) fn new(file: tessera_client::File) -> Self {
        Self {
            inner: Mutex::new(Some(file)),
            last: Mutex::new(IoReport::default()),
        }
    }

    /// The client file (a cheap clone), or the error of a closed file.
    fn file(&self) -> PyResult<tessera_client::File> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| PyValueError::new_err("I/O operation on a closed tessera.File"))
    }

    /// Keeps `outcome`'s report as `last_io`, or turns its error into the Python one.
    fn settle(
        &self,
        file: &tessera_client::File,
        outcome: Result<IoReport, tessera_client::ClientError>,
    ) -> PyResult<IoReport> {
        let report = outcome.map_err(|err| error::client_at(&err, file.path()))?;
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = report;
        Ok(report)
    }

    /// The pieces and their total, checked against the per-piece limit before any memory
    /// is set aside for them.
    fn pieces(pieces: &[(u64, u64)]) -> PyResult<(Vec<Piece>, usize)> {
        let mut total = 0u64;
        for &(_, length) in pieces {
            if length > PIECE_BYTES_MAX {
                return Err(PyValueError::new_err(format!(
                    "a piece of {length} bytes is over piece_bytes_max ({PIECE_BYTES_MAX})"
                )));
            }
            total = total.saturating_add(length);
        }
        let total = usize::try_from(total)
            .map_err(|_| PyValueError::new_err("the pieces total more bytes than memory holds"))?;
        Ok((
            pieces
                .iter()
                .map(|&(offset, length)| Piece::new(offset, length))
                .collect(),
            total,
        ))
    }

    /// The file's array layout of a block: its element type from `descr`, then the subarray.
    fn block_type(
        descr: &Bound<'_, PyArrayDescr>,
        file_shape: &[u64],
        start: &[u64],
        count: &[u64],
        order: tessera_client::dtype::Order,
    ) -> PyResult<tessera_client::Datatype> {
        let element = element_type(descr)?;
        file_type(file_shape, start, count, order, &element).map_err(|err| error::layout(&err))
    }

    /// What a write of `arr` as a block needs: the array, the block's file type, and the
    /// array's memory.
    fn write_source<'py>(
        arr: &Bound<'py, PyAny>,
        file_shape: &[u64],
        start: Option<Vec<u64>>,
        order: &str,
    ) -> PyResult<BlockAccess<'py>> {
        let array_order = layout::order(order).map_err(|err| error::layout(&err))?;
        let array = as_array(arr)?;
        let memory = ArrayMemory::of(&array, array_order, false)?;
        let start = start_or_zeros(start, file_shape.len());
        let filetype = Self::block_type(
            &array.dtype(),
            file_shape,
            &start,
            &memory.shape,
            array_order,
        )?;
        Ok((array, filetype, memory))
    }

    /// What a read of a block needs: the array it fills (new, or `out`), the block's file
    /// type, and the array's memory.
    fn read_target<'py>(
        py: Python<'py>,
        file_shape: &[u64],
        dtype: Option<&Bound<'py, PyAny>>,
        (start, count): (Option<Vec<u64>>, Option<Vec<u64>>),
        order: &str,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<BlockAccess<'py>> {
        let array_order = layout::order(order).map_err(|err| error::layout(&err))?;
        let start = start_or_zeros(start, file_shape.len());
        let (array, count) = Self::destination(py, file_shape, dtype, &start, count, order, out)?;
        let filetype = Self::block_type(&array.dtype(), file_shape, &start, &count, array_order)?;
        let memory = ArrayMemory::of(&array, array_order, true)?;
        Ok((array, filetype, memory))
    }

    /// The destination of an array read: `out` checked against `dtype` and `count`, or a new
    /// array of `count` elements of `dtype` in `order`.
    #[allow(clippy::too_many_arguments)]
    fn destination<'py>(
        py: Python<'py>,
        file_shape: &[u64],
        dtype: Option<&Bound<'py, PyAny>>,
        start: &[u64],
        count: Option<Vec<u64>>,
        order: &str,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyUntypedArray>, Vec<u64>)> {
        if let Some(out) = out {
            let out = out.cast::<PyUntypedArray>().map_err(|_| {
                PyTypeError::new_err("out= must be a numpy.ndarray (filled in place)")
            })?;
            let shape: Vec<u64> = out.shape().iter().map(|&n| n as u64).collect();
            if let Some(count) = &count {
                if *count != shape {
                    return Err(PyValueError::new_err(format!(
                        "count {count:?} differs from out.shape {shape:?}"
                    )));
                }
            }
            if let Some(dtype) = dtype {
                let dtype = numpy_dtype(dtype)?;
                if !dtype.is_equiv_to(&out.dtype()) {
                    return Err(PyTypeError::new_err(format!(
                        "dtype {dtype} differs from out.dtype {}",
                        out.dtype()
                    )));
                }
            }
            return Ok((out.clone(), shape));
        }
        let dtype = dtype
            .ok_or_else(|| PyTypeError::new_err("read_array needs a dtype (or an out= array)"))?;
        let count = if let Some(count) = count {
            count
        } else {
            if start.len() != file_shape.len() {
                return Err(PyValueError::new_err(format!(
                    "start has {} dimensions but file_shape {}",
                    start.len(),
                    file_shape.len()
                )));
            }
            file_shape
                .iter()
                .zip(start)
                .map(|(&size, &first)| size.saturating_sub(first))
                .collect()
        };
        let array = py.import("numpy")?.getattr("empty")?.call1((
            count.clone(),
            numpy_dtype(dtype)?,
            order,
        ))?;
        Ok((array.cast_into::<PyUntypedArray>()?, count))
    }
}

// PyO3 hands arguments over as owned values (a `Vec` for a Python sequence).
#[allow(clippy::needless_pass_by_value)]
#[pymethods]
impl File {
    /// Reads `n` bytes at byte `offset` (bytes never written, past the end included, read as
    /// zeros).
    fn read<'py>(&self, py: Python<'py>, offset: u64, n: u64) -> PyResult<Bound<'py, PyBytes>> {
        let file = self.file()?;
        let (_, length) = Self::pieces(&[(offset, n)])?;
        PyBytes::new_with(py, length, |buffer| {
            let outcome = py.detach(|| file.read_at(offset, buffer));
            self.settle(&file, outcome).map(drop)
        })
    }

    /// Writes the bytes-like `data` at byte `offset`; returns the bytes written.
    fn write(&self, py: Python<'_>, offset: u64, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        let file = self.file()?;
        let buffer = byte_buffer(data, false, "data")?;
        // SAFETY: the buffer is C-contiguous bytes held by `buffer` until it drops, after
        // the call.
        let bytes = unsafe {
            std::slice::from_raw_parts(buffer.buf_ptr().cast::<u8>(), buffer.len_bytes())
        };
        let outcome = py.detach(|| file.write_at(offset, bytes));
        Ok(self.settle(&file, outcome)?.bytes)
    }

    /// Reads the file pieces `[(offset, length), ...]`, in order, in one call (one request
    /// per involved server). Returns the bytes, or fills the writable bytes-like `out` (of
    /// the pieces' total length) in place and returns it.
    #[pyo3(signature = (pieces, out=None))]
    fn read_list<'py>(
        &self,
        py: Python<'py>,
        pieces: Vec<(u64, u64)>,
        out: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let file = self.file()?;
        let (pieces, total) = Self::pieces(&pieces)?;
        let read = |buffer: &mut [u8]| {
            let outcome =
                py.detach(|| file.read_list(&mut [std::io::IoSliceMut::new(buffer)], &pieces));
            self.settle(&file, outcome).map(drop)
        };
        match out {
            None => Ok(PyBytes::new_with(py, total, read)?.into_any()),
            Some(out) => {
                let buffer = byte_buffer(&out, true, "out")?;
                if buffer.len_bytes() != total {
                    return Err(PyValueError::new_err(format!(
                        "out holds {} bytes but the pieces {total}",
                        buffer.len_bytes()
                    )));
                }
                // SAFETY: a writable C-contiguous buffer of `total` bytes, held by `buffer`
                // until after the call.
                let bytes =
                    unsafe { std::slice::from_raw_parts_mut(buffer.buf_ptr().cast::<u8>(), total) };
                read(bytes)?;
                Ok(out)
            }
        }
    }

    /// Writes the bytes-like `data`, in order, to the file pieces `[(offset, length), ...]`
    /// in one call; the pieces' total must be `len(data)`. Returns the bytes written.
    fn write_list(
        &self,
        py: Python<'_>,
        pieces: Vec<(u64, u64)>,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let file = self.file()?;
        let (pieces, total) = Self::pieces(&pieces)?;
        let buffer = byte_buffer(data, false, "data")?;
        if buffer.len_bytes() != total {
            return Err(PyValueError::new_err(format!(
                "data holds {} bytes but the pieces {total}",
                buffer.len_bytes()
            )));
        }
        // SAFETY: C-contiguous bytes held by `buffer` until after the call.
        let bytes = unsafe { std::slice::from_raw_parts(buffer.buf_ptr().cast::<u8>(), total) };
        let outcome = py.detach(|| file.write_list(&[std::io::IoSlice::new(bytes)], &pieces));
        Ok(self.settle(&file, outcome)?.bytes)
    }

    /// Writes the array `arr` as the block from `start` (default the origin) of an array of
    /// `file_shape` elements stored in `order` ('C' or 'F') from byte `offset` of the file,
    /// in one call. A strided `arr` is moved through its strides, with no copy.
    #[pyo3(signature = (arr, file_shape, start=None, order="C", offset=0))]
    fn write_array(
        &self,
        py: Python<'_>,
        arr: &Bound<'_, PyAny>,
        file_shape: Vec<u64>,
        start: Option<Vec<u64>>,
        order: &str,
        offset: u64,
    ) -> PyResult<()> {
        let file = self.file()?;
        // `_array` (perhaps a conversion of `arr`) holds the memory until the end of the call.
        let (_array, filetype, memory) = Self::write_source(arr, &file_shape, start, order)?;
        if memory.length == 0 {
            return Ok(());
        }
        // SAFETY: `array` stays alive, and its buffer with it, until after the call.
        let bytes = unsafe { memory.bytes() };
        let memtype = &memory.memtype;
        let outcome = py.detach(|| file.write_type(bytes, memtype, 1, &filetype, offset));
        self.settle(&file, outcome).map(drop)
    }

    /// Reads the block of `count` elements (default: to the end of each dimension) from
    /// `start` (default the origin) of an array of `file_shape` elements of `dtype` stored
    /// in `order` ('C' or 'F') from byte `offset` of the file, in one call. Returns a new
    /// array, or fills `out` (any ndarray of that shape and dtype, strided or not) in place
    /// and returns it.
    #[pyo3(signature = (file_shape, dtype=None, start=None, count=None, order="C", offset=0, out=None))]
    #[allow(clippy::too_many_arguments)]
    fn read_array<'py>(
        &self,
        py: Python<'py>,
        file_shape: Vec<u64>,
        dtype: Option<Bound<'py, PyAny>>,
        start: Option<Vec<u64>>,
        count: Option<Vec<u64>>,
        order: &str,
        offset: u64,
        out: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyUntypedArray>> {
        let file = self.file()?;
        let (array, filetype, memory) = Self::read_target(
            py,
            &file_shape,
            dtype.as_ref(),
            (start, count),
            order,
            out.as_ref(),
        )?;
        if memory.length == 0 {
            return Ok(array);
        }
        // SAFETY: `array` stays alive until after the call; a new array is ours alone, and
        // an `out` array is the caller's to leave alone during the call.
        let bytes = unsafe { memory.bytes_mut() };
        let memtype = &memory.memtype;
        let outcome = py.detach(|| file.read_type(bytes, memtype, 1, &filetype, offset));
        self.settle(&file, outcome)?;
        Ok(array)
    }

    /// Collectively with every process of the mpi4py communicator `comm`, writes this
    /// process's `arr` as its block from `start` of the file's array (as `write_array`), by
    /// `method` (`'server_directed'`, `'two_phase'` or `'independent'`). Every process calls
    /// it.
    #[pyo3(signature = (comm, arr, file_shape, start=None, order="C", offset=0, method="server_directed"))]
    #[allow(clippy::too_many_arguments)]
    fn write_array_all(
        &self,
        py: Python<'_>,
        comm: &Bound<'_, PyAny>,
        arr: &Bound<'_, PyAny>,
        file_shape: Vec<u64>,
        start: Option<Vec<u64>>,
        order: &str,
        offset: u64,
        method: &str,
    ) -> PyResult<()> {
        let file = self.file()?;
        let options = collective::options(method)?;
        let comm = MpiComm::new(comm)?;
        // `_array` (perhaps a conversion of `arr`) holds the memory until the end of the call.
        let (_array, filetype, memory) = Self::write_source(arr, &file_shape, start, order)?;
        // SAFETY: `array` stays alive, and its buffer with it, until after the call.
        let bytes = unsafe { memory.bytes() };
        let part = Part {
            file: file.clone(),
            filetype: &filetype,
            offset,
            memtype: &memory.memtype,
        };
        let outcome = py.detach(|| part.write(&comm, &options, bytes));
        self.settle(&file, outcome).map(drop)
    }

    /// Collectively with every process of the mpi4py communicator `comm`, reads this
    /// process's block (as `read_array`) by `method`. Every process calls it.
    #[pyo3(signature = (comm, file_shape, dtype=None, start=None, count=None, order="C", offset=0, out=None, method="server_directed"))]
    #[allow(clippy::too_many_arguments)]
    fn read_array_all<'py>(
        &self,
        py: Python<'py>,
        comm: &Bound<'py, PyAny>,
        file_shape: Vec<u64>,
        dtype: Option<Bound<'py, PyAny>>,
        start: Option<Vec<u64>>,
        count: Option<Vec<u64>>,
        order: &str,
        offset: u64,
        out: Option<Bound<'py, PyAny>>,
        method: &str,
    ) -> PyResult<Bound<'py, PyUntypedArray>> {
        let file = self.file()?;
        let options = collective::options(method)?;
        let comm = MpiComm::new(comm)?;
        let (array, filetype, memory) = Self::read_target(
            py,
            &file_shape,
            dtype.as_ref(),
            (start, count),
            order,
            out.as_ref(),
        )?;
        // SAFETY: as in `read_array`.
        let bytes = unsafe { memory.bytes_mut() };
        let part = Part {
            file: file.clone(),
            filetype: &filetype,
            offset,
            memtype: &memory.memtype,
        };
        let outcome = py.detach(|| part.read(&comm, &options, bytes));
        self.settle(&file, outcome)?;
        Ok(array)
    }

    /// Declares a view: the block of `count` elements from `start` of an array of
    /// `file_shape` elements of `dtype` stored in `order` from byte `offset` becomes one
    /// contiguous byte space (`View.read`/`View.write` offsets count its bytes), declared
    /// once on the servers it touches.
    #[pyo3(signature = (file_shape, dtype, start=None, count=None, order="C", offset=0))]
    #[allow(clippy::too_many_arguments)]
    fn set_view(
        &self,
        py: Python<'_>,
        file_shape: Vec<u64>,
        dtype: &Bound<'_, PyAny>,
        start: Option<Vec<u64>>,
        count: Option<Vec<u64>>,
        order: &str,
        offset: u64,
    ) -> PyResult<View> {
        let file = self.file()?;
        let array_order = layout::order(order).map_err(|err| error::layout(&err))?;
        let start = start_or_zeros(start, file_shape.len());
        let count = count.unwrap_or_else(|| {
            file_shape
                .iter()
                .zip(&start)
                .map(|(&size, &first)| size.saturating_sub(first))
                .collect()
        });
        let filetype = Self::block_type(
            &numpy_dtype(dtype)?,
            &file_shape,
            &start,
            &count,
            array_order,
        )?;
        let view = py
            .detach(|| file.set_view(offset, &filetype))
            .map_err(|err| error::client_at(&err, file.path()))?;
        Ok(View {
            inner: Mutex::new(Some(view)),
            size: filetype.size(),
        })
    }

    /// Chooses how later calls move their data: `'auto'` (the cost model, per request),
    /// or, for experiments, `'gather'`, `'pack'`, `'multiple'`, `'eager'` or `'inline'`.
    fn set_transfer(&self, mechanism: &str) -> PyResult<()> {
        let policy = match mechanism {
            "auto" => TransferPolicy::Auto,
            "gather" => TransferPolicy::Force(Mechanism::Gather),
            "pack" => TransferPolicy::Force(Mechanism::Pack),
            "multiple" => TransferPolicy::Force(Mechanism::Multiple),
            "eager" => TransferPolicy::Force(Mechanism::Eager),
            "inline" => TransferPolicy::Force(Mechanism::Inline),
            other => {
                return Err(PyValueError::new_err(format!(
                    "transfer {other:?} is not one of auto, gather, pack, multiple, eager, inline"
                )))
            }
        };
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let file = inner
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("I/O operation on a closed tessera.File"))?;
        file.set_transfer_policy(policy);
        Ok(())
    }

    /// What the last call on this file did: requests sent, bytes moved, bytes copied on the
    /// client (pack buffers), memory slices moved in place, storage pieces, servers reached.
    #[getter]
    fn last_io<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let report = *self.last.lock().unwrap_or_else(PoisonError::into_inner);
        report_dict(py, &report)
    }

    /// The attributes, with the size computed from the servers.
    fn stat(&self, py: Python<'_>) -> PyResult<Stat> {
        let file = self.file()?;
        py.detach(|| file.stat())
            .map(|attr| Stat::from(&attr))
            .map_err(|err| error::client_at(&err, file.path()))
    }

    /// Flushes the file's data on every server to stable storage.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let file = self.file()?;
        py.detach(|| file.sync())
            .map_err(|err| error::client_at(&err, file.path()))
    }

    /// Releases the views declared through this file; later calls raise `ValueError`.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match taken {
            Some(file) => {
                let path = file.path().to_owned();
                py.detach(|| file.close())
                    .map_err(|err| error::client_at(&err, &path))
            }
            None => Ok(()),
        }
    }

    /// The path the file was opened by.
    #[getter]
    fn path(&self) -> PyResult<String> {
        Ok(self.file()?.path().to_owned())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _kind: Option<&Bound<'_, PyAny>>,
        _value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match &*self.inner.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(file) => format!("tessera.File({:?})", file.path()),
            None => "tessera.File(closed)".to_owned(),
        }
    }
}

impl View {
    fn view(&self) -> PyResult<tessera_client::View> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| PyValueError::new_err("the tessera.View was released"))
    }
}

#[pymethods]
impl View {
    /// Reads `n` bytes at byte `offset` of the view.
    fn read<'py>(&self, py: Python<'py>, offset: u64, n: u64) -> PyResult<Bound<'py, PyBytes>> {
        let view = self.view()?;
        let (_, length) = File::pieces(&[(offset, n)])?;
        PyBytes::new_with(py, length, |buffer| {
            py.detach(|| view.read_at(offset, buffer))
                .map(drop)
                .map_err(|err| error::client_at(&err, view.file().path()))
        })
    }

    /// Writes the bytes-like `data` at byte `offset` of the view; returns the bytes written.
    fn write(&self, py: Python<'_>, offset: u64, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        let view = self.view()?;
        let buffer = byte_buffer(data, false, "data")?;
        // SAFETY: C-contiguous bytes held by `buffer` until after the call.
        let bytes = unsafe {
            std::slice::from_raw_parts(buffer.buf_ptr().cast::<u8>(), buffer.len_bytes())
        };
        py.detach(|| view.write_at(offset, bytes))
            .map(|report| report.bytes)
            .map_err(|err| error::client_at(&err, view.file().path()))
    }

    /// Bytes of one tile of the view (the block's elements).
    #[getter]
    fn size(&self) -> u64 {
        self.size
    }

    /// Forgets the view on its servers now, rather than when the file is closed.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match taken {
            Some(view) => {
                let path = view.file().path().to_owned();
                py.detach(|| view.release())
                    .map_err(|err| error::client_at(&err, &path))
            }
            None => Ok(()),
        }
    }
}
