//! Turning libfabric's return values and C strings into Rust: the `FI_E*` codes this crate
//! compares against, `fi_strerror`, and the check every call's result goes through. A leaf:
//! the fabric, endpoint, memory, RMA and progress modules all use it, and it uses none of them.

use std::ffi::{c_char, CStr};

use tessera_ofi_sys as sys;

use crate::error::OfiError;

/// `fi_strerror` of a positive `FI_E*` code.
pub(crate) fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror returns a pointer to a static NUL-terminated string for any code.
    unsafe { cstr_to_string(sys::fi_strerror(code)) }
}

/// Copies a C string that may be null.
///
/// # Safety
/// `text` is null or points to a NUL-terminated string valid for the call.
pub(crate) unsafe fn cstr_to_string(text: *const c_char) -> String {
    if text.is_null() {
        String::new()
    } else {
        // SAFETY: the caller promises a valid NUL-terminated string.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }
}

/// Turns a libfabric return value (0 or a negative `FI_E*`) into a result.
pub(crate) fn check(provider: &str, call: &'static str, ret: i64) -> Result<(), OfiError> {
    if ret >= 0 {
        return Ok(());
    }
    let code = i32::try_from(-ret).unwrap_or(i32::MAX);
    Err(OfiError::Call {
        provider: provider.to_owned(),
        call,
        code,
        message: strerror(code),
    })
}

/// `FI_EAVAIL`: an error completion waits in the queue. libfabric's own error numbers form an
/// anonymous `enum`, which bindgen types as `u32`; calls return them negated, as `int`.
pub(crate) const FI_EAVAIL: i32 = fi_errno(sys::FI_EAVAIL);
/// `FI_ETOOSMALL`: a buffer passed to libfabric is too small.
pub(crate) const FI_ETOOSMALL: i32 = fi_errno(sys::FI_ETOOSMALL);

#[allow(clippy::cast_possible_wrap)] // the assert keeps the value in range
const fn fi_errno(code: u32) -> i32 {
    assert!(code < 1 << 16);
    code as i32
}
