//! `tessera mds`, `tessera iod` and `tessera agent`: one server in the foreground until
//! SIGTERM or Ctrl-C.
//!
//! A server binds its listen address (port 0 picks a free port), then writes the address it
//! got to `--address-file` so `tessera up` can find it, and serves until told to stop. With
//! `--metrics ADDR` it also serves its Prometheus metrics at `http://ADDR/metrics`
//! ([`serve_metrics`]; the names are in `tessera_proto::metrics`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tessera_cluster::{out, outln};
use tessera_net::Identity;
use tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT;
use thiserror::Error;

/// Why a server (mds, iod, agent) could not start, or `keygen` could not write its key. Each
/// names the server and the file, address or option involved.
#[derive(Debug, Error)]
pub enum ServerError {
    /// A file, directory or option the server needs could not be used.
    #[error("{server}: {detail}")]
    Start {
        /// "mds", "iod N" or "agent".
        server: String,
        /// What could not be used, and why.
        detail: String,
    },
    /// The listen address could not be bound; for a port in use, who holds it.
    #[error("{server}: cannot listen on {listen}: {source}{}", holder_text(holder.as_deref()))]
    Listen {
        /// The server.
        server: Identity,
        /// The address asked for.
        listen: String,
        /// Why.
        source: std::io::Error,
        /// Who holds the port, when it is in use ([`port_holder`]).
        holder: Option<String>,
    },
    /// The async runtime could not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    /// A failure reported as text, as it is printed: by `tessera-cluster` (the address file)
    /// or `tessera-auth` (the key file), or an argument refused before any server starts.
    #[error("{0}")]
    Reported(String),
}

fn holder_text(holder: Option<&str>) -> String {
    holder
        .map(|holder| format!(": {holder}"))
        .unwrap_or_default()
}

/// A [`ServerError::Reported`]: the text another crate's error prints.
fn reported(err: impl std::fmt::Display) -> ServerError {
    ServerError::Reported(err.to_string())
}

/// A [`ServerError::Start`] of `server`.
fn start(server: impl std::fmt::Display, detail: impl std::fmt::Display) -> ServerError {
    ServerError::Start {
        server: server.to_string(),
        detail: detail.to_string(),
    }
}

/// Arguments of `tessera mds`.
#[derive(Debug, clap::Args)]
pub struct MdsArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// The metadata store (a redb file; created if missing).
    #[arg(long)]
    db: PathBuf,
    /// The I/O servers, in index order (repeat the flag).
    #[arg(long = "iod", required = true)]
    iods: Vec<String>,
    /// Default stripe unit of new files, in bytes (4096, 64k, 1m).
    #[arg(long, value_parser = tessera_client::layouts::parse_stripe_unit, default_value_t = STRIPE_UNIT_BYTES_DEFAULT)]
    stripe_unit: u64,
    /// Write the bound address here once listening.
    #[arg(long)]
    address_file: Option<PathBuf>,
    /// The cluster key file (mode 0600; `tessera keygen FILE` makes one).
    #[arg(long)]
    key: PathBuf,
    /// How long the capabilities it signs are accepted, in seconds; clients renew them
    /// before they expire.
    #[arg(long, default_value_t = tessera_auth::CAPABILITY_LIFETIME.as_secs())]
    capability_seconds: u64,
    /// Handles whose objects the mds keeps made ahead on every iod, so that an ordinary
    /// create costs one commit (at most 256; 0: each create makes its objects).
    #[arg(
        long,
        default_value_t = tessera_mds::handler::PRECREATE_DEFAULT,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new()
            .range(0..=tessera_mds::precreate::PRECREATE_MAX as u64),
    )]
    precreate: usize,
    /// Treat callers with uid 0 as uid and gid 65534 (nobody), as NFS's root squash does:
    /// root on a client host gets no more rights than any other user.
    #[arg(long)]
    root_squash: bool,
    /// Serve Prometheus metrics over HTTP on this address (`http://ADDR/metrics`; port 0
    /// picks a free port, logged at start). Without it nothing is recorded.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
}

/// Arguments of `tessera iod`.
#[derive(Debug, clap::Args)]
pub struct IodArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Index of this server in the cluster.
    #[arg(long)]
    index: u16,
    /// Data directory (objects live in DATA/objects).
    #[arg(long)]
    data: PathBuf,
    /// Write the bound address here once listening.
    #[arg(long)]
    address_file: Option<PathBuf>,
    /// The cluster key file (mode 0600; `tessera keygen FILE` makes one).
    #[arg(long)]
    key: PathBuf,
    /// Measure the storage cost model again on the data directory, keep it in
    /// DATA/cost-model.toml, print it and exit (a running server picks it up at restart).
    #[arg(long)]
    calibrate: bool,
    /// A TOML file of cost-model parameters that override the measured ones (any subset of
    /// the keys in DATA/cost-model.toml).
    #[arg(long)]
    cost_model: Option<PathBuf>,
    /// Also listen on this Unix socket, for clients on this host: their data then moves
    /// one-sidedly (the `local` backend). A stale socket file is replaced.
    #[arg(long)]
    local_socket: Option<PathBuf>,
    /// Serve one-sided transfers over this libfabric provider too (e.g. "tcp;ofi_rxm" or
    /// "shm"; needs a build with the `ofi` feature).
    #[arg(long)]
    ofi_provider: Option<String>,
    /// The address the fabric endpoint binds to (`tcp;ofi_rxm`).
    #[arg(long, requires = "ofi_provider")]
    ofi_node: Option<String>,
    /// The mds's address: once it answers, remove the local objects no file owns (the
    /// orphan sweep, in the background while serving; see docs/ARCHITECTURE.md).
    #[arg(long, conflicts_with = "mds_address_file")]
    mds: Option<String>,
    /// As --mds, reading the address from this file (retried until it names an mds that
    /// answers; `tessera up` passes DIR/run/mds.addr).
    #[arg(long)]
    mds_address_file: Option<PathBuf>,
    /// How long the orphan sweep waits for the mds before giving up, in seconds.
    #[arg(long, default_value_t = tessera_iod::sweep::SWEEP_MDS_WAIT.as_secs())]
    sweep_wait_seconds: u64,
    /// Serve Prometheus metrics over HTTP on this address (`http://ADDR/metrics`; port 0
    /// picks a free port, logged at start). Without it nothing is recorded.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// How reads are served: `normal` (page cache, copied through a buffer), `mmap` (reads
    /// all in the page cache sent or pushed straight from a mapping of the object) or `unified`
    /// (the iod's own cache, hits sent straight from its buffers; docs/ARCHITECTURE.md).
    #[arg(long, default_value = "mmap", value_parser = clap::builder::ValueParser::new(str::parse::<tessera_iod::store::ServeMode>))]
    serve: tessera_iod::store::ServeMode,
    /// The unified cache's budget (65536, 64k, 512m, 2g; default: an eighth of the machine's
    /// memory).
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    cache_bytes: Option<usize>,
    /// The Ready part of that budget, mapped and pinned (mlock) at start for the server's
    /// life, a multiple of 64k (default 0: every unit is plain heap memory).
    #[arg(long, value_name = "BYTES", value_parser = parse_size, default_value = "0")]
    cache_ready_bytes: usize,
    /// Test-only: act as if the --ofi-provider required local memory registration
    /// (`FI_MR_LOCAL`), so the registered paths (the Ready region's descriptor, buffers
    /// registered per call) run over providers that need none (`tcp;ofi_rxm`, `shm`).
    #[arg(long, requires = "ofi_provider")]
    ofi_force_local_mr: bool,
    /// How long a caching client's read lease lasts, in milliseconds (100 to 60000): a
    /// client that stops answering holds up a write to the file at most this long.
    #[arg(long, default_value_t = tessera_proto::limits::LEASE_MS_DEFAULT)]
    lease_ms: u32,
}

/// Why a byte count option was refused.
#[derive(Debug, Error)]
enum SizeError {
    /// Not a byte count (the reason as `parse_bytes` gives it).
    #[error("{0}")]
    Unreadable(String),
    /// More than this machine can address.
    #[error("{0} bytes do not fit in memory here")]
    TooLarge(u64),
}

/// A byte count with an optional k/m/g suffix that fits this machine's address space.
fn parse_size(text: &str) -> Result<usize, SizeError> {
    let bytes = tessera_client::layouts::parse_bytes(text).map_err(SizeError::Unreadable)?;
    usize::try_from(bytes).map_err(|_| SizeError::TooLarge(bytes))
}

/// The iod's fabric, if `--ofi-provider` names one, with the unified cache's Ready region
/// (`ready`) registered with it for the server's life.
#[cfg(feature = "ofi")]
fn open_fabric(
    args: &IodArgs,
    ready: Option<tessera_iod::cache::ReadyMemory>,
) -> Result<Option<Arc<tessera_iod::fabric::FabricServer>>, ServerError> {
    let Some(provider) = &args.ofi_provider else {
        return Ok(None);
    };
    let options = tessera_iod::fabric::FabricOptions {
        ready,
        force_local_registration: args.ofi_force_local_mr,
    };
    let fabric =
        tessera_iod::fabric::FabricServer::open(provider, args.ofi_node.as_deref(), options)
            .map_err(|err| start(format!("iod {}", args.index), format!("fabric: {err}")))?;
    let ready = match fabric.ready_registered_bytes() {
        0 => String::new(),
        bytes => format!(
            "; the unified cache's Ready region ({bytes} bytes) registered with it (fi_mr_reg) \
             for the server's life"
        ),
    };
    let forced = if args.ofi_force_local_mr {
        "; local memory registered as if the provider required it (--ofi-force-local-mr)"
    } else {
        ""
    };
    tracing::info!(
        "iod {}: serving one-sided transfers over {provider}{ready}{forced}",
        args.index
    );
    Ok(Some(fabric))
}

/// Without the `ofi` feature there is no fabric to open.
#[cfg(not(feature = "ofi"))]
fn open_fabric(
    args: &IodArgs,
    _ready: Option<tessera_iod::cache::ReadyMemory>,
) -> Result<Option<Arc<tessera_iod::fabric::FabricServer>>, ServerError> {
    match &args.ofi_provider {
        Some(provider) => Err(start(
            format!("iod {}", args.index),
            format!("--ofi-provider {provider}: this tessera was built without the `ofi` feature"),
        )),
        None => Ok(None),
    }
}

/// Arguments of `tessera keygen`.
#[derive(Debug, clap::Args)]
pub struct KeygenArgs {
    /// Where to write the new key (mode 0600; an existing file is never replaced).
    file: PathBuf,
}

/// Writes a new cluster key.
pub fn keygen(args: &KeygenArgs) -> Result<(), ServerError> {
    let key = tessera_auth::ClusterKey::create(&args.file).map_err(reported)?;
    outln!(
        "tessera: wrote a new cluster key to {} (mode 0600); give it to every server with --key and to every host's agent",
        args.file.display()
    );
    // The line a hand-written cluster.toml takes, so clients check they reach this cluster.
    outln!("cluster_id = \"{:016x}\"", key.cluster_id());
    Ok(())
}

/// Arguments of `tessera agent`.
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// The cluster key file.
    #[arg(long)]
    key: PathBuf,
    /// The Unix socket to listen on (made connectable by every local user).
    #[arg(long)]
    socket: PathBuf,
    /// How long the credentials it signs are accepted, in seconds.
    #[arg(long, default_value_t = tessera_auth::CREDENTIAL_LIFETIME.as_secs())]
    credential_seconds: u64,
    /// Write "agent" here once listening (how `tessera up` knows it started).
    #[arg(long)]
    address_file: Option<PathBuf>,
    /// Serve Prometheus metrics over HTTP on this address (`http://ADDR/metrics`; port 0
    /// picks a free port, logged at start). Without it nothing is recorded.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
}

/// Runs the agent of this host in the foreground.
pub fn run_agent(args: &AgentArgs) -> Result<(), ServerError> {
    let key = tessera_auth::ClusterKey::load_owned(&args.key).map_err(|err| start("agent", err))?;
    serve_metrics(args.metrics.as_deref(), "agent")?;
    let config = tessera_auth::agent::AgentConfig {
        key,
        lifetime: Duration::from_secs(args.credential_seconds.max(1)),
    };
    runtime()?.block_on(async {
        let listener = tessera_cluster::bind_local(&args.socket)
            .map_err(|err| start("agent", format!("socket {}: {err}", args.socket.display())))?;
        if let Some(path) = &args.address_file {
            tessera_cluster::owned::write_new(
                path,
                &args.socket.display().to_string(),
                tessera_cluster::owned::SHARED_FILE_MODE,
            )
            .map_err(reported)?;
        }
        tracing::info!("agent: signing credentials on {}", args.socket.display());
        tessera_auth::agent::serve(listener, config, shutdown_signal()).await;
        let _ = std::fs::remove_file(&args.socket);
        tracing::info!("agent: stopped");
        Ok(())
    })
}

/// Upper bounds of the request-latency histogram's buckets, seconds (10 µs to 10 s).
const REQUEST_SECONDS_BUCKETS: [f64; 13] = [
    1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0,
];

/// With `listen` given, installs the Prometheus recorder for this process and serves its
/// metrics at `http://LISTEN/metrics` from a thread of its own (so a busy server still
/// answers a scrape); without, does nothing and every metric record stays a no-op. Port 0
/// is resolved to a free port first (bound, read and released), and the address is logged.
pub fn serve_metrics(listen: Option<&str>, server: &str) -> Result<(), ServerError> {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    use tessera_proto::metrics::MetricKind;
    let Some(listen) = listen else {
        return Ok(());
    };
    let failed = |err: &dyn std::fmt::Display| start(server, format!("--metrics {listen}: {err}"));
    let address = std::net::TcpListener::bind(listen)
        .and_then(|probe| probe.local_addr())
        .map_err(|err| failed(&err))?;
    PrometheusBuilder::new()
        .with_http_listener(address)
        .set_buckets_for_metric(
            Matcher::Full(tessera_proto::metrics::REQUEST_SECONDS.to_owned()),
            &REQUEST_SECONDS_BUCKETS,
        )
        .map_err(|err| failed(&err))?
        .install()
        .map_err(|err| failed(&err))?;
    for (name, kind, help) in tessera_proto::metrics::CATALOGUE {
        match kind {
            MetricKind::Counter => metrics::describe_counter!(name, help),
            MetricKind::Gauge => metrics::describe_gauge!(name, help),
            MetricKind::Histogram => metrics::describe_histogram!(name, help),
        }
    }
    tracing::info!("{server}: metrics at http://{address}/metrics");
    Ok(())
}

/// How long the mds waits for an iod before naming it in an error.
const MDS_IOD_TIMEOUT: Duration = Duration::from_secs(10);
/// Most threads a server uses for blocking storage and metadata calls.
const BLOCKING_THREADS_MAX: usize = 64;

/// Raises this process's open-file limit to its hard limit: a server holds a descriptor per
/// connection (up to `CONNECTIONS_MAX`) besides its objects, and at the soft limit it could
/// not even accept a connection to close an idle one for.
fn raise_open_files() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the local struct only.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) == 0
            && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit) != 0 {
                tracing::warn!(
                    "cannot raise the open-file limit: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ServerError> {
    raise_open_files();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS_MAX)
        .build()
        .map_err(ServerError::Runtime)
}

/// How long a server that finds its port taken waits for what listens there to prove it
/// holds the cluster key.
const PORT_HOLDER_TIMEOUT: Duration = Duration::from_secs(2);

/// Who holds `listen`, which `server` could not bind: connects to it and runs the handshake
/// as a key holder expecting `server` of this cluster. Either it is that very server (an
/// earlier process of it still runs), or something that cannot prove the key: a squatter,
/// which the mds and the clients refuse in turn, and which keeps this server from starting
/// until the port is freed (docs/DEPLOY.md §7).
fn port_holder(listen: &str, server: Identity, key: &tessera_auth::ClusterKey) -> String {
    let expect = tessera_net::Expected {
        identity: server,
        cluster_id: Some(key.cluster_id()),
    };
    let signer = tessera_auth::KeySigner::server(key.clone());
    match tessera_net::Connection::connect(
        format!("{server} at {listen}"),
        listen,
        PORT_HOLDER_TIMEOUT,
        &signer,
        Some(expect),
    ) {
        Ok(_) => format!("{server} of this cluster is already running at {listen}"),
        Err(tessera_net::NetError::Connect { source, .. }) => format!(
            "nothing answers at {listen} now ({source}): it was taken a moment ago; try again"
        ),
        Err(err) => format!(
            "{listen} is taken by something that is not {server} of this cluster (it did not \
             prove the cluster key: {err}): another program is squatting the port"
        ),
    }
}

/// Binds `listen` for `server` and writes the address it got to `address_file`. A port in
/// use is reported with who holds it ([`port_holder`]).
async fn bind(
    listen: &str,
    address_file: Option<&Path>,
    server: Identity,
    key: &tessera_auth::ClusterKey,
) -> Result<(tokio::net::TcpListener, SocketAddr), ServerError> {
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(listener) => listener,
        Err(source) if source.kind() == std::io::ErrorKind::AddrInUse => {
            let (address, key) = (listen.to_owned(), key.clone());
            let holder = tokio::task::spawn_blocking(move || port_holder(&address, server, &key))
                .await
                .unwrap_or_else(|err| format!("cannot tell who holds it: {err}"));
            return Err(ServerError::Listen {
                server,
                listen: listen.to_owned(),
                source,
                holder: Some(holder),
            });
        }
        Err(source) => {
            return Err(ServerError::Listen {
                server,
                listen: listen.to_owned(),
                source,
                holder: None,
            })
        }
    };
    let address = listener.local_addr().map_err(reported)?;
    if let Some(path) = address_file {
        tessera_cluster::owned::write_new(
            path,
            &address.to_string(),
            tessera_cluster::owned::SHARED_FILE_MODE,
        )
        .map_err(reported)?;
    }
    Ok((listener, address))
}

/// Puts back the default action of the signals a server stops on, before tokio installs its
/// handlers: tokio calls the handler it finds in place too, and a library may have put one
/// there at load. libfabric's dependency `libinfinipath` (PSM) does, for SIGINT and SIGTERM,
/// and its handler calls `exit(1)` at once, so an `ofi` build stopped by `tessera down` would
/// exit without writing back its unified cache or releasing its registrations.
fn forget_library_stop_handlers() {
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: setting a signal's action to the default touches no memory of ours; it runs
        // before this process installs any handler of its own for these signals.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    }
}

/// Resolves at SIGTERM, SIGINT or SIGHUP. A hangup counts as a request to stop: a server
/// started by `tessera up` over `ssh -tt` gets it when `down` or `restart` ends that ssh.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    forget_library_stop_handlers();
    let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    let mut hangup = signal(SignalKind::hangup()).expect("SIGHUP handler installs");
    tokio::select! {
        _ = terminate.recv() => {}
        _ = hangup.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Runs the metadata server.
pub fn run_mds(args: &MdsArgs) -> Result<(), ServerError> {
    if let Some(data) = args
        .db
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        tessera_cluster::private_dir(data)
            .map_err(|err| start("mds", format!("data directory {}: {err}", data.display())))?;
    }
    tessera_cluster::owned::check_file(&args.db)
        .map_err(|err| start("mds", format!("store {err}")))?;
    let key = tessera_auth::ClusterKey::load_owned(&args.key).map_err(|err| start("mds", err))?;
    serve_metrics(args.metrics.as_deref(), "mds")?;
    let server_count = u16::try_from(args.iods.len())
        .map_err(|_| ServerError::Reported("too many --iod addresses".to_owned()))?;
    let auth = Arc::new(tessera_auth::ServerAuth::new(
        key.clone(),
        tessera_proto::ROLE_MDS,
        0,
    ));
    let probe_key = key.clone();
    let options = tessera_mds::MdsOptions {
        capability_lifetime: Duration::from_secs(args.capability_seconds.max(1)),
        precreate: args.precreate,
    };
    let namespace = tessera_mds::Namespace::open_store(&args.db, server_count, args.stripe_unit)
        .map_err(|err| start("mds", err.message))?
        .with_root_squash(args.root_squash);
    let mds = Arc::new(tessera_mds::Mds::new(
        namespace,
        &args.iods,
        MDS_IOD_TIMEOUT,
        key,
        options,
    ));
    runtime()?.block_on(async {
        let (listener, address) = bind(
            &args.listen,
            args.address_file.as_deref(),
            Identity::MDS,
            &probe_key,
        )
        .await?;
        tracing::info!(
            "mds: listening on {address}, {server_count} iods, store {}{}",
            args.db.display(),
            if args.root_squash {
                ", root squashed to uid 65534"
            } else {
                ""
            }
        );
        tessera_net::server::serve(listener, mds, auth, shutdown_signal()).await;
        tracing::info!("mds: stopped");
        Ok(())
    })
}

/// Starts the orphan sweep of `iod` on a thread of its own, when the iod knows its mds
/// (`--mds` or `--mds-address-file`): it asks the mds which of its objects live and removes
/// the rest.
fn start_sweep<S: tessera_iod::storage::ObjectStorage>(
    args: &IodArgs,
    iod: &tessera_iod::Iod<S>,
    key: &tessera_auth::ClusterKey,
    server: &str,
) -> Result<(), ServerError> {
    let mds = match (&args.mds, &args.mds_address_file) {
        (Some(address), _) => Some(tessera_iod::sweep::MdsAddress::Fixed(address.clone())),
        (None, Some(path)) => Some(tessera_iod::sweep::MdsAddress::File(path.clone())),
        (None, None) => None,
    };
    if let Some(mds) = mds {
        let options = tessera_iod::sweep::SweepOptions {
            index: args.index,
            mds,
            key: key.clone(),
            timeout: MDS_IOD_TIMEOUT,
            give_up_after: Duration::from_secs(args.sweep_wait_seconds),
            membership: iod.membership().clone(),
        };
        let store = iod.store().clone();
        std::thread::Builder::new()
            .name(format!("iod-{}-sweep", args.index))
            .spawn(move || {
                let _ = tessera_iod::sweep::run(&store, &options);
            })
            .map_err(|err| start(server, format!("cannot start the orphan sweep: {err}")))?;
    } else {
        tracing::info!(
            "iod {}: no --mds given, so no orphan sweep at this start",
            args.index
        );
    }
    Ok(())
}

/// Runs an I/O server.
pub fn run_iod(args: &IodArgs) -> Result<(), ServerError> {
    let server = format!("iod {}", args.index);
    tessera_cluster::private_dir(&args.data).map_err(|err| {
        start(
            &server,
            format!("data directory {}: {err}", args.data.display()),
        )
    })?;
    let key = (!args.calibrate)
        .then(|| tessera_auth::ClusterKey::load_owned(&args.key))
        .transpose()
        .map_err(|err| start(&server, err))?;
    let model = tessera_iod::cost::load_or_calibrate(
        &args.data,
        args.calibrate,
        args.cost_model.as_deref(),
    )
    .map_err(|err| start(&server, format!("cost model: {err}")))?;
    if args.calibrate {
        let kept = args.data.join(tessera_iod::cost::COST_MODEL_FILE);
        outln!("# {}", kept.display());
        out!(
            "{}",
            toml::to_string(&model).expect("a cost model serializes")
        );
        outln!("# {}", model.describe());
        return Ok(());
    }
    tracing::info!("iod {}: cost model {}", args.index, model.describe());
    serve_metrics(args.metrics.as_deref(), &server)?;
    let store = tessera_iod::ObjectStore::open_with(&args.data, model).map_err(|err| {
        start(
            &server,
            format!("data directory {}: {err}", args.data.display()),
        )
    })?;
    let cache = tessera_iod::cache::CacheConfig {
        ready_bytes: args.cache_ready_bytes,
        ..tessera_iod::cache::CacheConfig::new(
            args.cache_bytes
                .unwrap_or_else(tessera_iod::store::default_cache_bytes),
        )
    };
    let store = store
        .with_serve(args.serve, Some(cache))
        .map_err(|err| start(&server, format!("--cache-bytes/--cache-ready-bytes: {err}")))?;
    let fabric = open_fabric(args, store.ready_memory())?;
    let ready_stats = store.cache_stats().filter(|stats| stats.ready_bytes > 0);
    if let (Some(_), Some(stats)) = (&fabric, ready_stats) {
        tracing::info!(
            "iod {}: unified cache Ready region registered by {:?}",
            args.index,
            stats.ready_registrar
        );
    }
    let membership = tessera_iod::membership::Membership::open(&args.data, args.index)
        .map_err(|err| start(&server, format!("namespace record: {err}")))?;
    let mut iod = tessera_iod::Iod::new(args.index, store)
        .with_membership(Arc::new(membership))
        .with_lease_ms(args.lease_ms)
        .map_err(|err| start(&server, format!("--lease-ms: {err}")))?;
    if let Some(fabric) = fabric {
        iod = iod.with_fabric(fabric);
    }
    let iod = Arc::new(iod);
    let store = iod.store().clone();
    let key = key.expect("loaded unless calibrating");
    start_sweep(args, &iod, &key, &server)?;
    let auth = Arc::new(tessera_auth::ServerAuth::new(
        key.clone(),
        tessera_proto::ROLE_IOD,
        args.index,
    ));
    runtime()?.block_on(async {
        let (listener, address) = bind(
            &args.listen,
            args.address_file.as_deref(),
            Identity::iod(args.index),
            &key,
        )
        .await?;
        let local = match &args.local_socket {
            Some(path) => Some(tessera_cluster::bind_local(path).map_err(|err| {
                start(&server, format!("local socket {}: {err}", path.display()))
            })?),
            None => None,
        };
        tracing::info!(
            "iod {}: listening on {address}{}, data in {}, serving {}",
            args.index,
            args.local_socket
                .as_ref()
                .map(|path| format!(" and {}", path.display()))
                .unwrap_or_default(),
            args.data.display(),
            args.serve
        );
        tessera_net::server::serve_with_local(listener, local, iod, auth, shutdown_signal()).await;
        if let Some(path) = &args.local_socket {
            let _ = std::fs::remove_file(path);
        }
        match store.flush(None, u64::MAX) {
            Ok(0) => {}
            Ok(bytes) => tracing::info!("iod {}: wrote back {bytes} cached bytes", args.index),
            Err(error) => tracing::error!("iod {}: write-back at stop: {error}", args.index),
        }
        tracing::info!("iod {}: stopped", args.index);
        Ok(())
    })
}
