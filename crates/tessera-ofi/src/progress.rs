//! Completions and progress.
//!
//! `tcp;ofi_rxm` and `shm` use manual data progress: bytes move only while some thread calls
//! into the endpoint, on the initiator (which polls its completion queue while it waits) and on
//! the target too, whose memory is read or written. [`EndpointState::poll`] reads up to
//! [`CQ_BATCH`] completions and turns an error completion (`fi_cq_readerr`) into the failed
//! slot's index and message; [`crate::Endpoint::progress`] is the target's single poll, and
//! [`ProgressThread`] polls an endpoint in the background until stopped, for a client that
//! blocks on its control socket while a server reads or writes its memory.

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tessera_ofi_sys as sys;

use crate::call::{check, cstr_to_string, strerror, FI_EAVAIL};
use crate::endpoint::{Endpoint, EndpointState};
use crate::error::OfiError;

/// Completions read per `fi_cq_read`.
pub(crate) const CQ_BATCH: usize = 16;
/// How long a [`ProgressThread`] sleeps between polls that found nothing.
pub const PROGRESS_IDLE_SLEEP: Duration = Duration::from_micros(50);

/// One completion: the slot it belongs to, and its error if it failed.
pub(crate) struct Completion {
    pub(crate) slot: Option<usize>,
    pub(crate) error: Option<CompletionError>,
}

/// What `fi_cq_readerr` said.
pub(crate) struct CompletionError {
    pub(crate) code: i32,
    pub(crate) provider_code: i32,
    pub(crate) message: String,
}

impl EndpointState {
    /// The slot whose context `op_context` points at.
    fn slot_of(&self, op_context: *mut c_void) -> Option<usize> {
        self.slots.iter().position(|slot| {
            ptr::addr_of!(slot.context).cast::<c_void>() == op_context.cast_const()
        })
    }

    /// Reads what the completion queue holds (driving the provider's progress) and hands each
    /// completion to `sink`. Returns how many it read.
    pub(crate) fn poll(
        &mut self,
        provider: &str,
        mut sink: impl FnMut(&mut EndpointState, Completion),
    ) -> Result<usize, OfiError> {
        let mut entries = [sys::fi_cq_entry::default(); CQ_BATCH];
        // SAFETY: `cq` is open; `entries` has room for CQ_BATCH entries of the queue's format
        // (FI_CQ_FORMAT_CONTEXT).
        let ret =
            unsafe { sys::tessera_fi_cq_read(self.cq, entries.as_mut_ptr().cast(), CQ_BATCH) };
        if let Ok(count) = usize::try_from(ret) {
            for entry in &entries[..count] {
                let slot = self.slot_of(entry.op_context);
                sink(self, Completion { slot, error: None });
            }
            return Ok(count);
        }
        if ret == -(sys::FI_EAGAIN as isize) {
            return Ok(0);
        }
        if ret != -(FI_EAVAIL as isize) {
            check(
                provider,
                "fi_cq_read",
                i64::try_from(ret).unwrap_or(i64::MIN),
            )?;
        }
        let mut entry = sys::fi_cq_err_entry::default();
        // SAFETY: `cq` is open; `entry` is a zeroed error entry (err_data_size 0 lets the
        // provider point err_data at its own buffer, valid until the next read).
        let ret = unsafe { sys::tessera_fi_cq_readerr(self.cq, &raw mut entry, 0) };
        if ret == -(sys::FI_EAGAIN as isize) {
            return Ok(0);
        }
        check(
            provider,
            "fi_cq_readerr",
            i64::try_from(ret).unwrap_or(i64::MIN),
        )?;
        // The last byte stays 0, so the text is terminated even if the provider truncates.
        let mut text = [0 as std::ffi::c_char; 256];
        // SAFETY: `cq` is open; err_data came with this entry and is still valid; the provider
        // writes at most `text.len() - 1` bytes.
        let detail = unsafe {
            let printed = sys::tessera_fi_cq_strerror(
                self.cq,
                entry.prov_errno,
                entry.err_data,
                text.as_mut_ptr(),
                text.len() - 1,
            );
            cstr_to_string(printed)
        };
        let code = entry.err.abs();
        let mut message = strerror(code);
        if !detail.is_empty() && detail != message {
            message = format!("{message}; {detail}");
        }
        let slot = self.slot_of(entry.op_context);
        sink(
            self,
            Completion {
                slot,
                error: Some(CompletionError {
                    code,
                    provider_code: entry.prov_errno,
                    message,
                }),
            },
        );
        Ok(1)
    }
}

impl Endpoint {
    /// Polls the completion queue once so the provider moves the bytes peers read from or
    /// write to this endpoint's registered memory. A target calls this (or runs a
    /// [`ProgressThread`]) while peers work on its memory. Returns the completions read, which
    /// are none unless a transfer timed out earlier.
    pub fn progress(&self) -> Result<usize, OfiError> {
        let provider = self.provider();
        let mut state = self.lock()?;
        if state.closed {
            return Err(OfiError::Closed {
                provider: provider.to_owned(),
            });
        }
        state.poll(provider, |state, completion| {
            if let Some(slot) = completion.slot {
                state.slots[slot].busy = false;
            }
        })
    }
}

/// A thread that keeps an endpoint progressing until stopped or dropped.
#[derive(Debug)]
pub struct ProgressThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<(), OfiError>>>,
}

impl ProgressThread {
    /// Starts polling `endpoint`, sleeping [`PROGRESS_IDLE_SLEEP`] between polls that find
    /// nothing. Fails only if the thread cannot be spawned.
    pub fn spawn(endpoint: Arc<Endpoint>) -> std::io::Result<ProgressThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("tessera-ofi-progress".to_owned())
            .spawn(move || {
                while !stop_flag.load(Ordering::Acquire) {
                    if endpoint.progress()? == 0 {
                        std::thread::sleep(PROGRESS_IDLE_SLEEP);
                    }
                }
                Ok(())
            })?;
        Ok(ProgressThread {
            stop,
            handle: Some(handle),
        })
    }

    /// Stops the thread and returns the error that ended it early, if any.
    pub fn stop(mut self) -> Result<(), OfiError> {
        self.join()
    }

    fn join(&mut self) -> Result<(), OfiError> {
        self.stop.store(true, Ordering::Release);
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) | None => Ok(()),
        }
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        let _ = self.join();
    }
}
