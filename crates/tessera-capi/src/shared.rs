//! Shared file pointers for C: a counter that several processes advance together.
//!
//! A thin wrapper over `tessera_client::SharedPointer`: one side file per name under
//! `/.tessera-shfp`, updated under a range lock (see that module). The MPI-IO shim names it
//! after the file handle and an id the opening processes agree on, opens it on first use,
//! and removes it at close; an open handle holds its side file (a renewed lease), and
//! [`tessera_shared_pointer_sweep`] removes the side files no live process holds.

use std::ffi::{c_char, c_int};

use tessera_client::shared_pointer::SHARED_POINTER_SWEEP_MAX;

use tessera_client::SharedPointer;

use crate::client::TesseraClient;
use crate::error::{guard, handle, put, text, Failure};

/// A shared file pointer.
pub struct TesseraSharedPointer {
    pointer: SharedPointer,
}

/// # Safety
/// `pointer` is null or a live handle.
unsafe fn pointer_ref<'a>(
    pointer: *const TesseraSharedPointer,
) -> Result<&'a SharedPointer, Failure> {
    // SAFETY: the caller's guarantee.
    unsafe { handle(pointer, "shared pointer") }.map(|pointer| &pointer.pointer)
}

/// Opens the shared pointer `name` (1 to 255 bytes, no '/'), making it, holding 0, if no one
/// has yet. Any number of processes may open one name at once.
///
/// # Safety
/// `client` is a live handle; `name` is a NUL-terminated string; `out` is valid for one
/// write.
#[no_mangle]
pub unsafe extern "C" fn tessera_shared_pointer_open(
    client: *const TesseraClient,
    name: *const c_char,
    out: *mut *mut TesseraSharedPointer,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (client, name) = unsafe { (handle(client, "client")?, text(name, "name")?) };
        let pointer = SharedPointer::open(&client.client, name)?;
        let boxed = Box::into_raw(Box::new(TesseraSharedPointer { pointer }));
        // SAFETY: the caller guarantees `out` is valid for one write.
        unsafe { put(out, boxed, "out") }.inspect_err(|_| {
            // SAFETY: `boxed` came from Box::into_raw above and was not handed out.
            drop(unsafe { Box::from_raw(boxed) });
        })
    })
}

/// Adds `delta` to the pointer and stores the value before in `before`.
///
/// # Safety
/// `pointer` is a live handle; `before` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_shared_pointer_fetch_add(
    pointer: *const TesseraSharedPointer,
    delta: u64,
    before: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee.
        let value = unsafe { pointer_ref(pointer)? }.fetch_add(delta)?;
        // SAFETY: the caller guarantees `before` is valid for one write.
        unsafe { put(before, value, "before") }
    })
}

/// The pointer's value.
///
/// # Safety
/// `pointer` is a live handle; `value` is valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_shared_pointer_load(
    pointer: *const TesseraSharedPointer,
    value: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantee.
        let current = unsafe { pointer_ref(pointer)? }.load()?;
        // SAFETY: the caller guarantees `value` is valid for one write.
        unsafe { put(value, current, "value") }
    })
}

/// Sets the pointer to `value`.
///
/// # Safety
/// `pointer` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tessera_shared_pointer_store(
    pointer: *const TesseraSharedPointer,
    value: u64,
) -> c_int {
    // SAFETY: the caller's guarantee.
    guard(|| Ok(unsafe { pointer_ref(pointer)? }.store(value)?))
}

/// Frees the handle (the side file stays; see [`tessera_shared_pointer_remove`]). Null is
/// ignored.
///
/// # Safety
/// `pointer` is null or a handle not freed before.
#[no_mangle]
pub unsafe extern "C" fn tessera_shared_pointer_free(pointer: *mut TesseraSharedPointer) {
    if !pointer.is_null() {
        // SAFETY: the caller guarantees a live handle, freed once.
        drop(unsafe { Box::from_raw(pointer) });
    }
}

/// Removes the side file of the shared pointer `name`; a missing one is not an error.
///
/// # Safety
/// `client` is a live handle; `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tessera_shared_pointer_remove(
    client: *const TesseraClient,
    name: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (client, name) = unsafe { (handle(client, "client")?, text(name, "name")?) };
        Ok(SharedPointer::remove(&client.client, name)?)
    })
}

/// Removes the side files whose names start with `prefix` (1 to 255 bytes, no '/') that no
/// live process holds: the leftovers of opens whose processes died (a holder's lease,
/// `SHARED_POINTER_HOLD_LEASE`, 10 s, must have ended). At most `SHARED_POINTER_SWEEP_MAX`
/// (256) side files are looked at per call. Stores how many were removed in `removed`
/// (may be null).
///
/// # Safety
/// `client` is a live handle; `prefix` is a NUL-terminated string; `removed` is null or
/// valid for one write.
#[no_mangle]
pub unsafe extern "C" fn tessera_shared_pointer_sweep(
    client: *const TesseraClient,
    prefix: *const c_char,
    removed: *mut u64,
) -> c_int {
    const _: () = assert!(SHARED_POINTER_SWEEP_MAX > 0);
    guard(|| {
        // SAFETY: the caller's guarantees, argument by argument.
        let (client, prefix) = unsafe { (handle(client, "client")?, text(prefix, "prefix")?) };
        let count = SharedPointer::sweep(&client.client, prefix)?;
        if !removed.is_null() {
            // SAFETY: the caller guarantees a non-null `removed` is valid for one write.
            unsafe { put(removed, count as u64, "removed") }?;
        }
        Ok(())
    })
}
