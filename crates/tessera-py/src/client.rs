//! `tessera.connect()` and the namespace calls of a `Client`: each call releases the GIL
//! while it waits for the metadata server.

use std::path::PathBuf;

use pyo3::exceptions::{PyFileNotFoundError, PyValueError};
use pyo3::prelude::*;
use tessera_client::config::CLUSTER_ENV;
use tessera_client::{ClientOptions, ClusterConfig, CreateOptions, OpenMode};

use crate::error;
use crate::file::File;
use crate::stat::Stat;

/// A connection to one Tessera cluster. Safe to share between threads.
#[pyclass(module = "tessera._tessera", frozen)]
pub struct Client {
    pub(crate) inner: tessera_client::Client,
    cluster: PathBuf,
}

/// Connects to the cluster described by the cluster file `cluster` (default
/// `$TESSERA_CLUSTER`). Servers are reached on first use.
#[pyfunction]
#[pyo3(signature = (cluster=None))]
pub fn connect(py: Python<'_>, cluster: Option<PathBuf>) -> PyResult<Client> {
    let Some(cluster) = cluster.or_else(|| std::env::var_os(CLUSTER_ENV).map(PathBuf::from)) else {
        return Err(PyValueError::new_err(format!(
            "no cluster: pass connect(cluster=PATH) or set {CLUSTER_ENV} to the cluster file"
        )));
    };
    if !cluster.exists() {
        return Err(PyFileNotFoundError::new_err((
            libc::ENOENT,
            format!("cluster file {} does not exist", cluster.display()),
            cluster.display().to_string(),
        )));
    }
    let config = py
        .detach(|| ClusterConfig::load(&cluster))
        .map_err(|err| error::client(&err))?;
    Ok(Client {
        inner: tessera_client::Client::new(&config, &ClientOptions::default()),
        cluster,
    })
}

fn open_mode(mode: &str) -> PyResult<OpenMode> {
    match mode {
        "r" | "rb" => Ok(OpenMode::ReadOnly),
        "w" | "wb" => Ok(OpenMode::WriteOnly),
        "r+" | "rb+" | "r+b" | "rw" => Ok(OpenMode::ReadWrite),
        other => Err(PyValueError::new_err(format!(
            "open mode {other:?} is not 'r', 'w' or 'r+' (use create() to make a file)"
        ))),
    }
}

#[pymethods]
impl Client {
    /// Opens an existing file: `mode` is `'r'` (read), `'w'` (write) or `'r+'` (both).
    #[pyo3(signature = (path, mode="r"))]
    fn open(&self, py: Python<'_>, path: &str, mode: &str) -> PyResult<File> {
        let mode = open_mode(mode)?;
        py.detach(|| self.inner.open(path, mode))
            .map(File::new)
            .map_err(|err| error::client_at(&err, path))
    }

    /// Creates a file open for reading and writing (or opens it, unless `exclusive`), with
    /// `mode` less the process's umask, as `os.open` does. `stripe_unit` is the stripe unit in
    /// bytes (default 64 KiB), `servers` how many I/O servers to stripe over (0: all).
    #[pyo3(signature = (path, mode=0o666, exclusive=false, stripe_unit=None, servers=0))]
    fn create(
        &self,
        py: Python<'_>,
        path: &str,
        mode: u32,
        exclusive: bool,
        stripe_unit: Option<u64>,
        servers: u16,
    ) -> PyResult<File> {
        let mut options = CreateOptions {
            mode: tessera_client::umask::apply(mode & 0o7777),
            exclusive,
            server_count: servers,
            ..CreateOptions::default()
        };
        if let Some(stripe_unit) = stripe_unit {
            options.stripe_unit_bytes = stripe_unit;
        }
        py.detach(|| self.inner.create(path, &options))
            .map(File::new)
            .map_err(|err| error::client_at(&err, path))
    }

    /// The attributes of `path` (a file's size computed from the I/O servers).
    fn stat(&self, py: Python<'_>, path: &str) -> PyResult<Stat> {
        py.detach(|| self.inner.stat(path))
            .map(|attr| Stat::from(&attr))
            .map_err(|err| error::client_at(&err, path))
    }

    /// The names in directory `path`, in name order.
    fn listdir(&self, py: Python<'_>, path: &str) -> PyResult<Vec<String>> {
        py.detach(|| self.inner.readdir(path))
            .map(|entries| entries.into_iter().map(|entry| entry.name).collect())
            .map_err(|err| error::client_at(&err, path))
    }

    /// Removes the file `path` and its data.
    fn remove(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        py.detach(|| self.inner.unlink(path))
            .map_err(|err| error::client_at(&err, path))
    }

    /// Removes the empty directory `path`.
    fn rmdir(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        py.detach(|| self.inner.rmdir(path))
            .map_err(|err| error::client_at(&err, path))
    }

    /// Moves `source` to `target`, replacing a file (or empty directory) there.
    fn rename(&self, py: Python<'_>, source: &str, target: &str) -> PyResult<()> {
        py.detach(|| self.inner.rename(source, target))
            .map_err(|err| error::client_at(&err, source))
    }

    /// Makes the directory `path`, with `mode` less the process's umask, as `os.mkdir` does.
    #[pyo3(signature = (path, mode=0o777))]
    fn mkdir(&self, py: Python<'_>, path: &str, mode: u32) -> PyResult<()> {
        let mode = tessera_client::umask::apply(mode & 0o7777);
        py.detach(|| self.inner.mkdir(path, mode))
            .map(drop)
            .map_err(|err| error::client_at(&err, path))
    }

    /// The cluster file this client was made from.
    #[getter]
    fn cluster(&self) -> PathBuf {
        self.cluster.clone()
    }

    fn __repr__(&self) -> String {
        format!(
            "tessera.Client(cluster={:?})",
            self.cluster.display().to_string()
        )
    }
}
