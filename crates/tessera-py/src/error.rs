//! Errors leave Rust here, once: a client failure becomes an `OSError` with an errno, which
//! Python turns into the matching subclass (`FileNotFoundError` for `ENOENT`,
//! `PermissionError` for `EACCES`, `TimeoutError` for `ETIMEDOUT`, ...); a bad Python
//! argument found before any request is a `ValueError` or `TypeError`.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::PyErr;
use tessera_client::{ClientError, ErrorCode};
use tessera_net::NetError;

use crate::layout::LayoutError;

/// The errno of a client failure.
pub fn errno(error: &ClientError) -> i32 {
    match error {
        ClientError::Net(NetError::TimedOut { .. }) => libc::ETIMEDOUT,
        ClientError::Net(NetError::Connect { .. } | NetError::NotAsked { .. }) => {
            libc::ECONNREFUSED
        }
        ClientError::Net(NetError::Io { .. }) => libc::ECONNRESET,
        ClientError::Net(NetError::Protocol { .. } | NetError::WrongServer { .. }) => libc::EPROTO,
        ClientError::Config { .. } => libc::EINVAL,
        ClientError::Collective(_) => libc::ECOMM,
        _ => error.code().map_or(libc::EIO, code_errno),
    }
}

/// The errno of a server's error code.
fn code_errno(code: ErrorCode) -> i32 {
    match code {
        ErrorCode::NotFound => libc::ENOENT,
        ErrorCode::Exists => libc::EEXIST,
        ErrorCode::NotDirectory => libc::ENOTDIR,
        ErrorCode::IsDirectory => libc::EISDIR,
        ErrorCode::NotEmpty => libc::ENOTEMPTY,
        ErrorCode::InvalidArgument => libc::EINVAL,
        ErrorCode::LimitExceeded => libc::E2BIG,
        ErrorCode::UnknownHandle => libc::ESTALE,
        ErrorCode::PermissionDenied => libc::EACCES,
        ErrorCode::Busy => libc::EBUSY,
        ErrorCode::Unavailable => libc::EHOSTUNREACH,
        ErrorCode::NoSpace => libc::ENOSPC,
        ErrorCode::Protocol => libc::EPROTO,
        ErrorCode::BadAddress => libc::EFAULT,
        _ => libc::EIO,
    }
}

/// A client failure as the Python exception: `OSError(errno, message)`, which Python makes
/// the subclass of that errno.
pub fn client(error: &ClientError) -> PyErr {
    PyOSError::new_err((errno(error), error.to_string()))
}

/// A client failure about `path`: as [`client`], with the path as the exception's
/// `filename`.
pub fn client_at(error: &ClientError, path: &str) -> PyErr {
    PyOSError::new_err((errno(error), error.to_string(), path.to_owned()))
}

/// A bad array, dtype or shape argument.
pub fn layout(error: &LayoutError) -> PyErr {
    PyValueError::new_err(error.0.clone())
}
