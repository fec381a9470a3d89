//! Collective array I/O over an mpi4py communicator: every process of the communicator
//! moves its own block of one array in the file together, by the client's collective methods
//! (the server-directed one by default: each process sends its share straight to the
//! servers as one datatype request, and each server merges the participants' parts).
//!
//! The client library's collectives talk through its `Communicator` trait; [`MpiComm`]
//! implements it over the mpi4py object's pickle-based `allgather`, `alltoall` and `Barrier`
//! (the messages are agreements and, for `two_phase`, the data moved between processes).
//! The collective call runs with the GIL released; each communication takes the GIL back
//! for its MPI call. MPI's calls have no timeout of their own: a process that never joins
//! leaves the others waiting in MPI, as in any MPI program (the servers' collective wait,
//! `wait_ms`, bounds the server side).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use tessera_client::{
    ClientError, CollectiveBuffering, CollectiveMethod, CollectiveOptions, Communicator, Datatype,
    IoReport, ViewedFile,
};

/// An mpi4py communicator (any object with `Get_rank`, `Get_size`, `allgather`, `alltoall`
/// and `Barrier`).
pub struct MpiComm {
    comm: Py<PyAny>,
    rank: usize,
    size: usize,
}

impl MpiComm {
    /// Wraps `comm`, asking its rank and size once.
    pub fn new(comm: &Bound<'_, PyAny>) -> PyResult<Self> {
        let rank: usize = comm.call_method0("Get_rank")?.extract()?;
        let size: usize = comm.call_method0("Get_size")?.extract()?;
        if size == 0 || rank >= size {
            return Err(PyValueError::new_err(format!(
                "the communicator says rank {rank} of {size}"
            )));
        }
        Ok(Self {
            comm: comm.clone().unbind(),
            rank,
            size,
        })
    }

    fn failed(&self, call: &str, error: &PyErr) -> ClientError {
        ClientError::Collective(format!("rank {}: mpi4py {call}: {error}", self.rank))
    }

    /// Calls `method` with one list of bytes objects and returns the list it answers, one
    /// bytes object per rank.
    fn exchange(
        &self,
        method: &str,
        argument: impl FnOnce(Python<'_>) -> PyResult<Bound<'_, PyAny>>,
    ) -> Result<Vec<Vec<u8>>, ClientError> {
        Python::attach(|py| {
            let answer = argument(py)
                .and_then(|argument| self.comm.bind(py).call_method1(method, (argument,)))
                .map_err(|err| self.failed(method, &err))?;
            let list = answer
                .cast_into::<PyList>()
                .map_err(|err| self.failed(method, &err.into()))?;
            if list.len() != self.size {
                return Err(ClientError::Collective(format!(
                    "rank {}: mpi4py {method} answered {} items for {} ranks",
                    self.rank,
                    list.len(),
                    self.size
                )));
            }
            list.iter()
                .map(|item| {
                    item.cast::<PyBytes>()
                        .map(|bytes| bytes.as_bytes().to_vec())
                        .map_err(|err| self.failed(method, &err.into()))
                })
                .collect()
        })
    }
}

impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>, ClientError> {
        self.exchange("allgather", |py| Ok(PyBytes::new(py, data).into_any()))
    }

    fn alltoallv(&self, data: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, ClientError> {
        if data.len() != self.size {
            return Err(ClientError::Collective(format!(
                "rank {}: alltoallv of {} messages for {} ranks",
                self.rank,
                data.len(),
                self.size
            )));
        }
        self.exchange("alltoall", |py| {
            PyList::new(py, data.iter().map(|message| PyBytes::new(py, message)))
                .map(Bound::into_any)
        })
    }

    fn barrier(&self) -> Result<(), ClientError> {
        Python::attach(|py| {
            self.comm
                .bind(py)
                .call_method0("Barrier")
                .map(drop)
                .map_err(|err| self.failed("Barrier", &err))
        })
    }
}

/// The options of a collective by `method`'s name: the method is always used (buffering
/// `Enable`), so a call named `server_directed` is one even when the blocks do not interleave.
pub fn options(method: &str) -> PyResult<CollectiveOptions> {
    let method = CollectiveMethod::from_name(method).ok_or_else(|| {
        PyValueError::new_err(format!(
            "collective method {method:?} is not one of server_directed, two_phase, independent"
        ))
    })?;
    Ok(CollectiveOptions {
        method,
        buffering: CollectiveBuffering::Enable,
        ..CollectiveOptions::default()
    })
}

/// One process's part of a collective array access: its block of the file's array as the
/// view, and its memory walked by `memtype`.
pub struct Part<'a> {
    /// The file.
    pub file: tessera_client::File,
    /// The block in the file (a subarray type), tiled from `offset`.
    pub filetype: &'a Datatype,
    /// Where the array starts in the file.
    pub offset: u64,
    /// The memory type over the array's span.
    pub memtype: &'a Datatype,
}

impl Part<'_> {
    fn viewed(&self) -> Result<ViewedFile, ClientError> {
        let mut viewed = ViewedFile::new(self.file.clone());
        // A process with an empty block still joins; its view is any valid one (it moves
        // no instance of its memory type).
        if self.filetype.size() == 0 {
            viewed.set_view(self.offset, &Datatype::byte())?;
        } else {
            viewed.set_view(self.offset, self.filetype)?;
        }
        Ok(viewed)
    }

    /// Writes this process's block from `memory`, collectively.
    pub fn write(
        &self,
        comm: &MpiComm,
        options: &CollectiveOptions,
        memory: &[u8],
    ) -> Result<IoReport, ClientError> {
        let count = u64::from(!memory.is_empty());
        self.viewed()?
            .write_all(comm, options, 0, memory, self.memtype, count)
    }

    /// Reads this process's block into `memory`, collectively.
    pub fn read(
        &self,
        comm: &MpiComm,
        options: &CollectiveOptions,
        memory: &mut [u8],
    ) -> Result<IoReport, ClientError> {
        let count = u64::from(!memory.is_empty());
        self.viewed()?
            .read_all(comm, options, 0, memory, self.memtype, count)
    }
}
