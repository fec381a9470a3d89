//! Errors leave Rust here, once: a client failure becomes an `OSError` with its errno
//! (`ClientError::errno`, over the one table of `ErrorCode::errno`), which Python turns into
//! the matching subclass (`FileNotFoundError` for `ENOENT`, `PermissionError` for `EACCES`,
//! `TimeoutError` for `ETIMEDOUT`, ...); a bad Python argument found before any request is a
//! `ValueError` or `TypeError`.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::PyErr;
use tessera_client::ClientError;

use crate::layout::LayoutError;

/// A client failure as the Python exception: `OSError(errno, message)`, which Python makes
/// the subclass of that errno.
pub fn client(error: &ClientError) -> PyErr {
    PyOSError::new_err((error.errno(), error.to_string()))
}

/// A client failure about `path`: as [`client`], with the path as the exception's
/// `filename`.
pub fn client_at(error: &ClientError, path: &str) -> PyErr {
    PyOSError::new_err((error.errno(), error.to_string(), path.to_owned()))
}

/// A bad array, dtype or shape argument.
pub fn layout(error: &LayoutError) -> PyErr {
    PyValueError::new_err(error.0.clone())
}
