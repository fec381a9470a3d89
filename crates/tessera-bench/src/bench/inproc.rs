//! A cluster whose servers run inside the bench process: one mds and N iods on one tokio
//! runtime, reached by the worker processes over loopback and Unix sockets like any other.
//!
//! It exists for one comparison: what checking data requests costs (capabilities, and the
//! one-sided path's credentials, pins and stall watch). The iods' checks can be switched off
//! and on between repetitions (`Iod::checks_switch`, which
//! exists only with tessera-iod's `bench` feature that this crate alone turns on: the
//! `tessera` binary's iod has no such switch). Everything else is the real server code.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tessera_client::config::{AuthEntry, IodEntry, MdsEntry};
use tessera_client::ClusterConfig;
use tokio::runtime::Runtime;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long the mds waits for an iod.
const MDS_IOD_TIMEOUT: Duration = Duration::from_secs(10);

/// Servers running in this process until dropped.
pub struct InProcessCluster {
    /// Its cluster file.
    pub file: PathBuf,
    switches: Vec<Arc<AtomicBool>>,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<()>>,
    dir: PathBuf,
}

impl InProcessCluster {
    /// Starts `servers` iods and an mds in a temporary directory.
    pub fn start(servers: u16) -> Result<Self, String> {
        let root = std::env::temp_dir().join(format!("tessera-inproc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        tessera_cluster::private_dir(&root)
            .map_err(|err| format!("cannot create {}: {err}", root.display()))?;
        let key_path = root.join(tessera_cluster::KEY_FILE);
        let key = tessera_auth::ClusterKey::create(&key_path).map_err(|err| err.to_string())?;
        let cluster_id = key.cluster_id();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|err| format!("cannot start the async runtime: {err}"))?;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let started = start_iods(&runtime, &root, &key, servers, &stopped)?;
        let mut servings = started.servings;
        let iods = started.iods;
        let addresses: Vec<String> = iods.iter().map(|iod| iod.address.clone()).collect();
        let (mds_serving, mds_address) =
            start_mds(&runtime, &root, key, servers, &addresses, &stopped)?;
        servings.push(mds_serving);
        let config = ClusterConfig {
            mds: MdsEntry {
                address: mds_address,
            },
            iods,
            ofi: None,
            auth: AuthEntry {
                key: Some(key_path),
                agent: None,
            },
            cluster_id: Some(cluster_id),
            client: tessera_client::config::ClientEntry::default(),
        };
        let file = root.join("cluster.toml");
        config
            .save(&file)
            .map_err(|err| format!("cannot write {}: {err}", file.display()))?;
        let thread = std::thread::spawn(move || {
            runtime.block_on(async {
                for serving in servings {
                    let _ = serving.await;
                }
            });
        });
        Ok(Self {
            file,
            switches: started.switches,
            stop: Some(stop),
            thread: Some(thread),
            dir: root,
        })
    }

    /// Turns the iods' checks of data requests on or off (`Iod::checks_switch`).
    pub fn check(&self, on: bool) {
        for switch in &self.switches {
            switch.store(on, Ordering::Relaxed);
        }
    }
}

impl Drop for InProcessCluster {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The iods started on the runtime: their checks' switches, their entries of the cluster
/// file, and their serving tasks.
struct StartedIods {
    switches: Vec<Arc<AtomicBool>>,
    iods: Vec<IodEntry>,
    servings: Vec<JoinHandle<()>>,
}

/// A future that ends when the cluster is told to stop.
fn stopped_signal(stopped: &watch::Receiver<bool>) -> impl Future<Output = ()> + Send + 'static {
    let mut stopped = stopped.clone();
    async move {
        let _ = stopped.wait_for(|&stop| stop).await;
    }
}

/// Starts `servers` iods under `root`, each on its own data directory (the first one's cost
/// model calibrated or loaded, the others sharing it), listening on loopback TCP and on a
/// Unix socket.
fn start_iods(
    runtime: &Runtime,
    root: &Path,
    key: &tessera_auth::ClusterKey,
    servers: u16,
    stopped: &watch::Receiver<bool>,
) -> Result<StartedIods, String> {
    let mut started = StartedIods {
        switches: Vec::new(),
        iods: Vec::new(),
        servings: Vec::new(),
    };
    let mut model = None;
    for index in 0..servers {
        let data = root.join(format!("iod-{index}"));
        tessera_cluster::private_dir(&data).map_err(|err| err.to_string())?;
        let measured = match &model {
            Some(model) => Clone::clone(model),
            None => tessera_iod::cost::load_or_calibrate(&data, false, None)
                .map_err(|err| format!("iod {index}: cost model: {err}"))?,
        };
        model = Some(measured.clone());
        let store = tessera_iod::ObjectStore::open_with(&data, measured)
            .map_err(|err| format!("iod {index}: {err}"))?;
        let iod = Arc::new(tessera_iod::Iod::new(index, store));
        started.switches.push(iod.checks_switch());
        let socket = root.join(format!("iod-{index}.sock"));
        let (listener, local, address) = runtime
            .block_on(async {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                let address = listener.local_addr()?.to_string();
                let local = tessera_cluster::bind_local(&socket)?;
                Ok::<_, std::io::Error>((listener, local, address))
            })
            .map_err(|err| format!("iod {index}: cannot listen: {err}"))?;
        let auth = Arc::new(tessera_auth::ServerAuth::new(
            key.clone(),
            tessera_proto::ROLE_IOD,
            index,
        ));
        started
            .servings
            .push(runtime.spawn(tessera_net::server::serve_with_local(
                listener,
                Some(local),
                iod,
                auth,
                stopped_signal(stopped),
            )));
        started.iods.push(IodEntry {
            index,
            address,
            local: Some(socket),
        });
    }
    Ok(started)
}

/// Starts the mds of the iods at `addresses` on loopback TCP: its serving task and address.
fn start_mds(
    runtime: &Runtime,
    root: &Path,
    key: tessera_auth::ClusterKey,
    servers: u16,
    addresses: &[String],
    stopped: &watch::Receiver<bool>,
) -> Result<(JoinHandle<()>, String), String> {
    let namespace = tessera_mds::Namespace::open_store(
        &root.join("meta.redb"),
        servers,
        tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT,
    )
    .map_err(|err| format!("mds: {}", err.message))?;
    let mds = Arc::new(tessera_mds::Mds::new(
        namespace,
        addresses,
        MDS_IOD_TIMEOUT,
        key.clone(),
        tessera_mds::MdsOptions::default(),
    ));
    let (listener, mds_address) = runtime
        .block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let address = listener.local_addr()?.to_string();
            Ok::<_, std::io::Error>((listener, address))
        })
        .map_err(|err| format!("mds: cannot listen: {err}"))?;
    let auth = Arc::new(tessera_auth::ServerAuth::new(
        key,
        tessera_proto::ROLE_MDS,
        0,
    ));
    let serving = runtime.spawn(tessera_net::server::serve(
        listener,
        mds,
        auth,
        stopped_signal(stopped),
    ));
    Ok((serving, mds_address))
}
