//! Collective accesses from C: the caller's communicator as a table of callbacks, and the
//! collective write and read through it.
//!
//! A C program (the MPI-IO shim) hands a [`TesseraCommunicator`]: its rank and size, an
//! opaque context and three callbacks on fixed-size buffers — an allgather of the same number
//! of bytes from every process, an alltoallv with per-rank counts and displacements, a
//! barrier — which MPI's `Allgather`, `Alltoallv` and `Barrier` implement directly. The
//! client library's `Communicator` needs messages of any length, so this layer exchanges the
//! sizes first (an allgather of 8 bytes, or of one count per rank) and then the data. MPI
//! counts and displacements are `int`: a message or displacement over
//! [`TESSERA_COMM_COUNT_MAX`] is refused here with an error naming the limit, before any
//! callback sees it.

use std::ffi::{c_char, c_int, c_void};

use tessera_client::{
    ClientError, CollectiveBuffering, CollectiveMethod, CollectiveOptions, Communicator,
};

use crate::datatype::TesseraDatatype;
use crate::error::{guard, put_optional, text, Failure};
use crate::file::{
    file_ref, optional_type, read_access, write_access, TesseraFile, TesseraIoReport,
};

/// Most bytes of one message, and the largest displacement, a communicator callback is given
/// (MPI's counts are `int`).
pub const TESSERA_COMM_COUNT_MAX: u64 = 0x7FFF_FFFF;

/// The processes of a collective call, as callbacks. Every callback returns 0 on success and
/// anything else on failure; every process calls them in the same order.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TesseraCommunicator {
    /// Passed to every callback.
    pub ctx: *mut c_void,
    /// This process's rank, `0..size`.
    pub rank: u32,
    /// Processes in the group (at least 1).
    pub size: u32,
    /// Every process sends `bytes` bytes from `send`; `recv` receives `size · bytes` bytes,
    /// rank 0's first.
    pub allgather: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            send: *const c_void,
            bytes: u64,
            recv: *mut c_void,
        ) -> c_int,
    >,
    /// Sends `send_counts[r]` bytes from `send + send_displs[r]` to rank `r`, and receives
    /// `recv_counts[r]` bytes from rank `r` at `recv + recv_displs[r]` (arrays of `size`).
    pub alltoallv: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            send: *const c_void,
            send_counts: *const u64,
            send_displs: *const u64,
            recv: *mut c_void,
            recv_counts: *const u64,
            recv_displs: *const u64,
        ) -> c_int,
    >,
    /// Returns when every process has called it.
    pub barrier: Option<unsafe extern "C" fn(ctx: *mut c_void) -> c_int>,
}

/// How a collective access reaches the servers (MPI hints `tessera_coll`, `cb_buffer_size`,
/// `cb_nodes`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TesseraCollectiveOptions {
    /// `"two_phase"`, `"server_directed"` or `"independent"`; null is `"server_directed"`.
    pub method: *const c_char,
    /// `two_phase`: most bytes per aggregator and round; 0 is the default (16 MiB).
    pub cb_buffer_size: u64,
    /// `two_phase`: aggregators; 0 is the default (every process, or one per server if
    /// fewer).
    pub cb_nodes: u32,
    /// `server_directed`: how long a server waits for missing participants, in ms; 0 is the
    /// default (20 s).
    pub wait_ms: u32,
    /// 0: automatic (ROMIO's `romio_cb_read`/`romio_cb_write` `automatic`): when no two
    /// processes' accesses can touch the same file bytes, each makes its own access; 1:
    /// always the method (`enable`).
    pub buffering: u32,
}

/// # Safety
/// `options` is null or valid; its `method` is null or NUL-terminated.
unsafe fn options(options: *const TesseraCollectiveOptions) -> Result<CollectiveOptions, Failure> {
    let mut resolved = CollectiveOptions::default();
    // SAFETY: the caller's guarantee.
    let Some(given) = (unsafe { options.as_ref() }) else {
        return Ok(resolved);
    };
    if !given.method.is_null() {
        // SAFETY: the caller's guarantee.
        let name = unsafe { text(given.method, "collective method")? };
        resolved.method = CollectiveMethod::from_name(name).ok_or_else(|| {
            Failure::invalid(format!(
                "collective method {name:?} is not one of two_phase, server_directed, independent"
            ))
        })?;
    }
    if given.cb_buffer_size > 0 {
        resolved.cb_buffer_bytes = given.cb_buffer_size;
    }
    if given.cb_nodes > 0 {
        resolved.cb_nodes = Some(given.cb_nodes as usize);
    }
    if given.wait_ms > 0 {
        if given.wait_ms > tessera_proto::limits::COLLECTIVE_WAIT_MS_MAX {
            return Err(Failure::limit(format!(
                "a collective wait of {} ms is over collective_wait_ms_max ({})",
                given.wait_ms,
                tessera_proto::limits::COLLECTIVE_WAIT_MS_MAX
            )));
        }
        resolved.wait_ms = given.wait_ms;
    }
    resolved.buffering = match given.buffering {
        0 => CollectiveBuffering::Automatic,
        1 => CollectiveBuffering::Enable,
        other => {
            return Err(Failure::invalid(format!(
                "collective buffering {other} is not 0 (automatic) or 1 (enable)"
            )))
        }
    };
    Ok(resolved)
}

/// Checks collective options without an access: 0 if a later call would accept them.
///
/// # Safety
/// `options` is null or valid; its `method` is null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn tessera_collective_options_check(
    options_given: *const TesseraCollectiveOptions,
) -> c_int {
    // SAFETY: the caller's guarantees.
    guard(|| unsafe { options(options_given) }.map(drop))
}

/// The callbacks as the client library's `Communicator`.
struct Callbacks {
    table: TesseraCommunicator,
}

impl Callbacks {
    fn new(table: TesseraCommunicator) -> Result<Self, Failure> {
        if table.size == 0 || table.rank >= table.size {
            return Err(Failure::invalid(format!(
                "communicator rank {} of size {}",
                table.rank, table.size
            )));
        }
        if table.allgather.is_none() || table.alltoallv.is_none() || table.barrier.is_none() {
            return Err(Failure::invalid(
                "the communicator lacks a callback (allgather, alltoallv and barrier are needed)",
            ));
        }
        Ok(Self { table })
    }

    fn failed(&self, what: &str, code: c_int) -> ClientError {
        ClientError::Collective(format!(
            "rank {}: the communicator's {what} failed with code {code}",
            self.table.rank
        ))
    }

    fn over(&self, what: &str, value: u64) -> ClientError {
        ClientError::LimitExceeded {
            what: format!("rank {}: {what}", self.table.rank),
            limit: "tessera_comm_count_max (MPI's int counts)",
            value,
            max: TESSERA_COMM_COUNT_MAX,
        }
    }

    /// Fixed-size allgather: `send.len()` bytes from every process.
    fn gather_fixed(&self, send: &[u8]) -> Result<Vec<u8>, ClientError> {
        let bytes = send.len() as u64;
        if bytes > TESSERA_COMM_COUNT_MAX {
            return Err(self.over("allgather message bytes", bytes));
        }
        let mut received = vec![0u8; send.len() * self.size()];
        let call = self.table.allgather.expect("checked in new");
        // SAFETY: `send` holds `bytes` bytes and `received` `size · bytes`, as the callback's
        // contract says; both live across the call.
        let code = unsafe {
            call(
                self.table.ctx,
                send.as_ptr().cast(),
                bytes,
                received.as_mut_ptr().cast(),
            )
        };
        if code != 0 {
            return Err(self.failed("allgather", code));
        }
        Ok(received)
    }

    /// The alltoallv callback over laid-out buffers.
    fn exchange(
        &self,
        send: &[u8],
        send_counts: &[u64],
        send_displs: &[u64],
        recv_counts: &[u64],
    ) -> Result<(Vec<u8>, Vec<u64>), ClientError> {
        let mut recv_displs = Vec::with_capacity(recv_counts.len());
        let mut total = 0u64;
        for &count in recv_counts {
            recv_displs.push(total);
            total += count;
        }
        for (what, values) in [
            ("alltoallv send count", send_counts),
            ("alltoallv send displacement", send_displs),
            ("alltoallv receive count", recv_counts),
            ("alltoallv receive displacement", &recv_displs[..]),
        ] {
            if let Some(&value) = values.iter().find(|&&value| value > TESSERA_COMM_COUNT_MAX) {
                return Err(self.over(what, value));
            }
        }
        let mut received = vec![0u8; usize::try_from(total).expect("below the count limit")];
        let call = self.table.alltoallv.expect("checked in new");
        // SAFETY: every count and displacement lies inside its buffer (the displacements
        // were made from the counts), the arrays hold `size` entries, and everything lives
        // across the call.
        let code = unsafe {
            call(
                self.table.ctx,
                send.as_ptr().cast(),
                send_counts.as_ptr(),
                send_displs.as_ptr(),
                received.as_mut_ptr().cast(),
                recv_counts.as_ptr(),
                recv_displs.as_ptr(),
            )
        };
        if code != 0 {
            return Err(self.failed("alltoallv", code));
        }
        Ok((received, recv_displs))
    }
}

fn split(received: &[u8], counts: &[u64], displs: &[u64]) -> Vec<Vec<u8>> {
    counts
        .iter()
        .zip(displs)
        .map(|(&count, &displ)| {
            let start = usize::try_from(displ).expect("inside the buffer");
            received[start..start + usize::try_from(count).expect("inside the buffer")].to_vec()
        })
        .collect()
}

impl Communicator for Callbacks {
    fn rank(&self) -> usize {
        self.table.rank as usize
    }

    fn size(&self) -> usize {
        self.table.size as usize
    }

    fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>, ClientError> {
        let lengths = self.gather_fixed(&(data.len() as u64).to_le_bytes())?;
        let counts: Vec<u64> = lengths
            .chunks(8)
            .map(|bytes| u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
            .collect();
        // The same bytes go to everyone: every send displacement is 0.
        let size = self.size();
        let (received, displs) = self.exchange(
            data,
            &vec![data.len() as u64; size],
            &vec![0; size],
            &counts,
        )?;
        Ok(split(&received, &counts, &displs))
    }

    fn alltoallv(&self, data: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, ClientError> {
        let size = self.size();
        if data.len() != size {
            return Err(ClientError::InvalidArgument(format!(
                "alltoallv of {} messages in a group of {size}",
                data.len()
            )));
        }
        let send_counts: Vec<u64> = data.iter().map(|message| message.len() as u64).collect();
        let counts_bytes: Vec<u8> = send_counts.iter().flat_map(|c| c.to_le_bytes()).collect();
        // Everyone's counts: row r is what rank r sends to each; this rank receives column
        // `rank`.
        let all = self.gather_fixed(&counts_bytes)?;
        let rank = self.rank();
        let recv_counts: Vec<u64> = (0..size)
            .map(|source| {
                let at = (source * size + rank) * 8;
                u64::from_le_bytes(all[at..at + 8].try_into().expect("8 bytes"))
            })
            .collect();
        let mut send_displs = Vec::with_capacity(size);
        let mut total = 0u64;
        for &count in &send_counts {
            send_displs.push(total);
            total += count;
        }
        let send = data.concat();
        let (received, displs) = self.exchange(&send, &send_counts, &send_displs, &recv_counts)?;
        Ok(split(&received, &recv_counts, &displs))
    }

    fn barrier(&self) -> Result<(), ClientError> {
        let call = self.table.barrier.expect("checked in new");
        // SAFETY: the callback's contract: it only needs the context.
        let code = unsafe { call(self.table.ctx) };
        if code != 0 {
            return Err(self.failed("barrier", code));
        }
        Ok(())
    }
}

/// Writes collectively with every process of `communicator`: as [`crate::tessera_file_write`]
/// (same memory rules), but every process of the group calls it, and the group's
/// `options.method` decides how the data reaches the servers. A process with nothing to
/// write passes a count of 0. Every process gets an error if any failed.
///
/// # Safety
/// `file` is a live handle; `communicator` is valid and its callbacks are as
/// [`TesseraCommunicator`] says; `options` is null or valid; `memtype` is null or a live
/// handle; the memory is as for [`crate::tessera_file_write`]; `report` is null or valid for
/// one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_file_write_all(
    file: *const TesseraFile,
    communicator: *const TesseraCommunicator,
    options_given: *const TesseraCollectiveOptions,
    offset: u64,
    buffer: *const c_void,
    count: u64,
    memtype: *const TesseraDatatype,
    report: *mut TesseraIoReport,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees.
        let (file, memtype, options, table) = unsafe {
            (
                file_ref(file)?,
                optional_type(memtype),
                options(options_given)?,
                communicator.as_ref(),
            )
        };
        let table = table.ok_or_else(|| Failure::invalid("the communicator is null"))?;
        let callbacks = Callbacks::new(*table)?;
        let mut state = file.lock();
        // SAFETY: the caller's guarantees on the memory.
        let done = unsafe {
            write_access(
                &mut state,
                offset,
                buffer,
                count,
                memtype,
                |viewed, start, memory, memtype, count| {
                    viewed.write_all(&callbacks, &options, start, memory, memtype, count)
                },
            )?
        };
        // SAFETY: the caller guarantees `report` is null or valid for one write.
        unsafe { put_optional(report, TesseraIoReport::from(done)) };
        Ok(())
    })
}

/// Reads collectively with every process of `communicator`: as [`crate::tessera_file_read`],
/// with the group as for [`tessera_file_write_all`].
///
/// # Safety
/// As [`tessera_file_write_all`], with the memory as for [`crate::tessera_file_read`].
#[no_mangle]
pub unsafe extern "C" fn tessera_file_read_all(
    file: *const TesseraFile,
    communicator: *const TesseraCommunicator,
    options_given: *const TesseraCollectiveOptions,
    offset: u64,
    buffer: *mut c_void,
    count: u64,
    memtype: *const TesseraDatatype,
    report: *mut TesseraIoReport,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees.
        let (file, memtype, options, table) = unsafe {
            (
                file_ref(file)?,
                optional_type(memtype),
                options(options_given)?,
                communicator.as_ref(),
            )
        };
        let table = table.ok_or_else(|| Failure::invalid("the communicator is null"))?;
        let callbacks = Callbacks::new(*table)?;
        let mut state = file.lock();
        // SAFETY: the caller's guarantees on the memory.
        let done = unsafe {
            read_access(
                &mut state,
                offset,
                buffer,
                count,
                memtype,
                |viewed, start, memory, memtype, count| {
                    viewed.read_all(&callbacks, &options, start, memory, memtype, count)
                },
            )?
        };
        // SAFETY: the caller guarantees `report` is null or valid for one write.
        unsafe { put_optional(report, TesseraIoReport::from(done)) };
        Ok(())
    })
}
