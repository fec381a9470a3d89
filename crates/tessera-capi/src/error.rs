//! Return codes, the thread-local error message and errno, and the guard every entry point
//! runs in.
//!
//! A failure inside the client library arrives as a `ClientError` or a `DatatypeError`; it
//! leaves through [`guard`] as one return code (the client's `ErrorCode` number, or one of
//! the codes below for what has no server code), and a message and an errno kept per thread
//! until the next failure on that thread. The errno is the client's (`ClientError::errno`,
//! over the one table of `ErrorCode::errno`); [`tessera_errno`] gives a return code's.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use tessera_client::dtype::DatatypeError;
use tessera_client::{ClientError, ErrorCode};

/// Success.
pub const TESSERA_OK: c_int = 0;
/// A path or name does not exist.
pub const TESSERA_ERR_NOT_FOUND: c_int = 1;
/// The name already exists.
pub const TESSERA_ERR_EXISTS: c_int = 2;
/// A path component is not a directory.
pub const TESSERA_ERR_NOT_DIRECTORY: c_int = 3;
/// A file was needed but the path is a directory.
pub const TESSERA_ERR_IS_DIRECTORY: c_int = 4;
/// The directory is not empty.
pub const TESSERA_ERR_NOT_EMPTY: c_int = 5;
/// A malformed argument (null pointer, bad type, bad mode name, ...).
pub const TESSERA_ERR_INVALID_ARGUMENT: c_int = 6;
/// A count or size over a named limit (the message names it).
pub const TESSERA_ERR_LIMIT_EXCEEDED: c_int = 7;
/// The file's objects are gone (the file was removed while open).
pub const TESSERA_ERR_UNKNOWN_HANDLE: c_int = 8;
/// A server's storage failed.
pub const TESSERA_ERR_IO: c_int = 9;
/// A peer broke the protocol.
pub const TESSERA_ERR_PROTOCOL: c_int = 10;
/// The file is not open for this operation.
pub const TESSERA_ERR_PERMISSION_DENIED: c_int = 11;
/// A server or lock is busy (a range lock not granted in time, a lease that ran out).
pub const TESSERA_ERR_BUSY: c_int = 12;
/// A server could not be reached or did not answer in time.
pub const TESSERA_ERR_UNAVAILABLE: c_int = 13;
/// An invariant broke inside a server.
pub const TESSERA_ERR_INTERNAL: c_int = 14;
/// A server's disk is full (the message names the server's store); nothing was changed.
pub const TESSERA_ERR_NO_SPACE: c_int = 19;
// The codes above are the client library's `ErrorCode` numbers (written out for the header
// generator, which cannot evaluate the casts).
const _: () = {
    assert!(TESSERA_ERR_NOT_FOUND == ErrorCode::NotFound as c_int);
    assert!(TESSERA_ERR_EXISTS == ErrorCode::Exists as c_int);
    assert!(TESSERA_ERR_NOT_DIRECTORY == ErrorCode::NotDirectory as c_int);
    assert!(TESSERA_ERR_IS_DIRECTORY == ErrorCode::IsDirectory as c_int);
    assert!(TESSERA_ERR_NOT_EMPTY == ErrorCode::NotEmpty as c_int);
    assert!(TESSERA_ERR_INVALID_ARGUMENT == ErrorCode::InvalidArgument as c_int);
    assert!(TESSERA_ERR_LIMIT_EXCEEDED == ErrorCode::LimitExceeded as c_int);
    assert!(TESSERA_ERR_UNKNOWN_HANDLE == ErrorCode::UnknownHandle as c_int);
    assert!(TESSERA_ERR_IO == ErrorCode::Io as c_int);
    assert!(TESSERA_ERR_PROTOCOL == ErrorCode::Protocol as c_int);
    assert!(TESSERA_ERR_PERMISSION_DENIED == ErrorCode::PermissionDenied as c_int);
    assert!(TESSERA_ERR_BUSY == ErrorCode::Busy as c_int);
    assert!(TESSERA_ERR_UNAVAILABLE == ErrorCode::Unavailable as c_int);
    assert!(TESSERA_ERR_INTERNAL == ErrorCode::Internal as c_int);
    assert!(TESSERA_ERR_NO_SPACE == ErrorCode::NoSpace as c_int);
};

/// The cluster file is missing or malformed, or no cluster was named.
pub const TESSERA_ERR_CONFIG: c_int = 64;
/// A bug inside the library (it panicked); the message says where. The handle involved may
/// be unusable.
pub const TESSERA_ERR_PANIC: c_int = 65;

/// Longest message kept for [`tessera_last_error`], in bytes (a longer one is cut).
pub const TESSERA_ERROR_MESSAGE_BYTES_MAX: usize = 4096;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static LAST_ERRNO: Cell<c_int> = const { Cell::new(0) };
}

/// A failed call: its return code, errno and message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: c_int,
    pub(crate) errno: c_int,
    pub(crate) message: String,
}

impl Failure {
    /// A failure with the errno of its return code.
    pub(crate) fn new(code: c_int, message: impl Into<String>) -> Self {
        Self {
            code,
            errno: tessera_errno(code),
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(TESSERA_ERR_INVALID_ARGUMENT, message)
    }

    pub(crate) fn limit(message: impl Into<String>) -> Self {
        Self::new(TESSERA_ERR_LIMIT_EXCEEDED, message)
    }
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        Self {
            code: error
                .code()
                .map_or(TESSERA_ERR_CONFIG, |code| c_int::from(code as u16)),
            errno: error.errno(),
            message: error.to_string(),
        }
    }
}

impl From<DatatypeError> for Failure {
    fn from(error: DatatypeError) -> Self {
        let code = match error {
            DatatypeError::LimitExceeded { .. } => TESSERA_ERR_LIMIT_EXCEEDED,
            _ => TESSERA_ERR_INVALID_ARGUMENT,
        };
        Self::new(code, error.to_string())
    }
}

/// The errno of a return code: the one table's (docs/PROTOCOL.md §4.9) for a code that is an
/// error code's number, `EINVAL` for `TESSERA_ERR_CONFIG` (a bad cluster file), `EIO` for
/// `TESSERA_ERR_PANIC`, 0 for `TESSERA_OK`, and `EINVAL` for a number that is no return code.
/// The MPI-IO library's POSIX calls set errno with it.
#[no_mangle]
pub extern "C" fn tessera_errno(code: c_int) -> c_int {
    match code {
        TESSERA_OK => 0,
        TESSERA_ERR_CONFIG => ErrorCode::InvalidArgument.errno(),
        TESSERA_ERR_PANIC => ErrorCode::Internal.errno(),
        other => u16::try_from(other)
            .ok()
            .and_then(|value| ErrorCode::from_u16(value).ok())
            .map_or(ErrorCode::InvalidArgument.errno(), ErrorCode::errno),
    }
}

/// The errno of the last failed call on this thread (0 if none failed yet): as
/// `tessera_errno` of its return code, but telling apart what one code covers (a server that
/// timed out, `ETIMEDOUT`, or refused the connection, `ECONNREFUSED`, where the code is
/// `TESSERA_ERR_UNAVAILABLE`).
#[no_mangle]
pub extern "C" fn tessera_last_errno() -> c_int {
    LAST_ERRNO.with(Cell::get)
}

fn set_last_error(message: &str) {
    let mut end = message.len().min(TESSERA_ERROR_MESSAGE_BYTES_MAX);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let text: Vec<u8> = message.as_bytes()[..end]
        .iter()
        .map(|&byte| if byte == 0 { b'?' } else { byte })
        .collect();
    let text = CString::new(text).expect("NUL bytes were replaced");
    LAST_ERROR.with(|last| *last.borrow_mut() = text);
}

/// Runs one entry point: its error becomes a code and the thread's message, and a panic
/// becomes `TESSERA_ERR_PANIC` instead of unwinding into C.
pub(crate) fn guard(call: impl FnOnce() -> Result<(), Failure>) -> c_int {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(Ok(())) => TESSERA_OK,
        Ok(Err(failure)) => {
            set_last_error(&failure.message);
            LAST_ERRNO.with(|last| last.set(failure.errno));
            failure.code
        }
        Err(panic) => {
            let detail = panic
                .downcast_ref::<&str>()
                .map(ToString::to_string)
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_owned());
            set_last_error(&format!(
                "internal error in the Tessera C API (a bug): {detail}"
            ));
            LAST_ERRNO.with(|last| last.set(tessera_errno(TESSERA_ERR_PANIC)));
            TESSERA_ERR_PANIC
        }
    }
}

/// The message of the last failed call on this thread ("" if none failed yet). The pointer
/// stays valid until the next failing call on the same thread.
#[no_mangle]
pub extern "C" fn tessera_last_error() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}

/// Reads a C string argument.
///
/// # Safety
/// `text` is null or points at a NUL-terminated string that lives for `'a`.
pub(crate) unsafe fn text<'a>(text: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if text.is_null() {
        return Err(Failure::invalid(format!("{what} is a null pointer")));
    }
    // SAFETY: not null, and the caller guarantees a NUL-terminated string living for 'a.
    unsafe { std::ffi::CStr::from_ptr(text) }
        .to_str()
        .map_err(|_| Failure::invalid(format!("{what} is not UTF-8")))
}

/// A shared reference to a handle argument.
///
/// # Safety
/// `pointer` is null or points at a live `T` for `'a`.
pub(crate) unsafe fn handle<'a, T>(pointer: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller guarantees a live T or null, and null is refused.
    unsafe { pointer.as_ref() }.ok_or_else(|| Failure::invalid(format!("{what} is a null pointer")))
}

/// Stores `value` through an output pointer.
///
/// # Safety
/// `pointer` is null or valid for a write of one `T`.
pub(crate) unsafe fn put<T>(pointer: *mut T, value: T, what: &str) -> Result<(), Failure> {
    if pointer.is_null() {
        return Err(Failure::invalid(format!("{what} is a null pointer")));
    }
    // SAFETY: not null, and the caller guarantees it is valid for one write.
    unsafe { pointer.write(value) };
    Ok(())
}

/// Stores `value` through an output pointer the caller may leave null.
///
/// # Safety
/// `pointer` is null or valid for a write of one `T`.
pub(crate) unsafe fn put_optional<T>(pointer: *mut T, value: T) {
    if !pointer.is_null() {
        // SAFETY: not null, and the caller guarantees it is valid for one write.
        unsafe { pointer.write(value) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_set_the_code_and_message_and_panics_are_caught() {
        let code = guard(|| Err(Failure::invalid("bad thing")));
        assert_eq!(code, TESSERA_ERR_INVALID_ARGUMENT);
        // SAFETY: tessera_last_error returns a NUL-terminated string owned by this thread.
        let message = unsafe { std::ffi::CStr::from_ptr(tessera_last_error()) };
        assert_eq!(message.to_str().unwrap(), "bad thing");
        let code = guard(|| panic!("boom"));
        assert_eq!(code, TESSERA_ERR_PANIC);
        // SAFETY: as above.
        let message = unsafe { std::ffi::CStr::from_ptr(tessera_last_error()) };
        assert!(message.to_str().unwrap().contains("boom"));
        assert_eq!(tessera_last_errno(), ErrorCode::Internal.errno());
        assert_eq!(guard(|| Ok(())), TESSERA_OK);
    }

    #[test]
    fn return_codes_map_to_the_one_errno_table() {
        assert_eq!(tessera_errno(TESSERA_OK), 0);
        for value in 1..=u16::MAX {
            if let Ok(code) = ErrorCode::from_u16(value) {
                assert_eq!(tessera_errno(c_int::from(value)), code.errno(), "{code:?}");
            }
        }
        assert_eq!(
            tessera_errno(TESSERA_ERR_CONFIG),
            ErrorCode::InvalidArgument.errno()
        );
        assert_eq!(tessera_errno(-1), ErrorCode::InvalidArgument.errno());
        let busy = ClientError::Server {
            code: ErrorCode::Busy,
            message: "/f".to_owned(),
        };
        let code = guard(|| Err(busy.into()));
        assert_eq!(code, TESSERA_ERR_BUSY);
        assert_eq!(tessera_last_errno(), ErrorCode::Busy.errno());
        assert_eq!(tessera_errno(code), tessera_last_errno());
    }
}
