//! `tessera up` (a local cluster, or the servers of a hostfile) and [`start`], the private
//! cluster of the benches and tests.

use std::path::{Path, PathBuf};

use tessera_client::config::OfiEntry;
use tessera_client::ClusterConfig;
use tessera_proto::limits::STRIPE_UNIT_BYTES_DEFAULT;

use crate::directory::claim;
use crate::error::ClusterError;
use crate::hosted::start_hosts;
use crate::local::start_local;
use crate::names::HOSTS_FILE;
use tessera_policy::ServeMode;

/// Arguments of `tessera up`.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Number of I/O servers of a local cluster (default: as many as it had, else 4).
    #[arg(long, conflicts_with = "hosts")]
    servers: Option<u16>,
    /// Start the servers a hostfile names, each through its launcher at its fixed address
    /// (see docs/DEPLOY.md); the file is kept as DIR/hosts for later `up` and `restart`.
    #[arg(long)]
    hosts: Option<PathBuf>,
    /// Cluster directory (created if missing).
    #[arg(long)]
    dir: PathBuf,
    /// Default stripe unit of new files, in bytes (4096, 64k, 1m).
    #[arg(long, value_parser = tessera_client::layouts::parse_stripe_unit, default_value_t = STRIPE_UNIT_BYTES_DEFAULT)]
    stripe_unit: u64,
    /// Have the iods serve one-sided transfers over this libfabric provider ("tcp;ofi_rxm"
    /// bound to 127.0.0.1, or "shm"); the cluster file names it for clients.
    #[arg(long)]
    ofi_provider: Option<String>,
    /// Start the mds with root squash: callers with uid 0 are treated as nobody (65534).
    #[arg(long)]
    root_squash: bool,
    /// How long the capabilities the mds signs are accepted, in seconds (default one hour);
    /// clients renew theirs before they expire.
    #[arg(long)]
    capability_seconds: Option<u64>,
    /// Handles whose objects the mds keeps made ahead on every iod (`tessera mds
    /// --precreate`; default the mds's, 0 turns it off).
    #[arg(long, value_name = "N")]
    precreate: Option<usize>,
    /// Have the servers of a local cluster serve Prometheus metrics on loopback: the mds on
    /// port P, iod i on P+1+i (`http://127.0.0.1:PORT/metrics`).
    #[arg(long, value_name = "P")]
    metrics_base_port: Option<u16>,
    /// How every iod of a local cluster serves reads: `normal` (copied through a server
    /// buffer from the page cache), `mmap` (pushed from a mapping of the object over `local`;
    /// as `normal` over tcp) or `unified` (from the iod's own cache). Default: the iod's.
    #[arg(long, value_name = "MODE", value_parser = clap::builder::ValueParser::new(str::parse::<ServeMode>))]
    serve: Option<ServeMode>,
    /// Byte budget of each iod's unified cache (4096, 64k, 512m, 2g); passed to every iod of
    /// a local cluster as a plain byte count. Default: the iod's.
    #[arg(long, value_name = "BYTES", value_parser = tessera_client::layouts::parse_bytes)]
    cache_bytes: Option<u64>,
}

/// The flags that make every iod serve by `serve` with a unified cache of `cache_bytes`
/// (each only when given), for [`start_local`]'s `iod_flags`.
pub fn serve_flags(serve: Option<ServeMode>, cache_bytes: Option<u64>) -> Vec<String> {
    let mut flags = Vec::new();
    if let Some(serve) = serve {
        flags.extend(["--serve".to_owned(), serve.name().to_owned()]);
    }
    if let Some(bytes) = cache_bytes {
        flags.extend(["--cache-bytes".to_owned(), bytes.to_string()]);
    }
    flags
}

/// The `--metrics` address of each server of a local cluster of `servers` iods when
/// `--metrics-base-port` is `base`: the mds on `base`, iod i on `base + 1 + i`.
pub(crate) fn metrics_addresses(
    base: u16,
    servers: u16,
) -> Result<(String, Vec<String>), ClusterError> {
    let last = u32::from(base) + u32::from(servers);
    if base == 0 || last > u32::from(u16::MAX) {
        return Err(ClusterError::MetricsPorts {
            base,
            servers,
            last,
        });
    }
    let address = |offset: u16| format!("127.0.0.1:{}", base + offset);
    Ok((address(0), (1..=servers).map(address).collect()))
}

/// Starts a cluster: the servers of a hostfile (`--hosts`, or the one an earlier `up` kept
/// in `DIR/hosts`), else a local cluster of `--servers` iods. Servers already running are
/// left alone; the missing ones start at their old addresses.
pub fn up(args: &UpArgs) -> Result<(), ClusterError> {
    let mut mds_flags = Vec::new();
    if args.root_squash {
        mds_flags.push("--root-squash".to_owned());
    }
    if let Some(seconds) = args.capability_seconds {
        mds_flags.extend(["--capability-seconds".to_owned(), seconds.to_string()]);
    }
    if let Some(handles) = args.precreate {
        mds_flags.extend(["--precreate".to_owned(), handles.to_string()]);
    }
    // Nothing of the directory is read before it is known to be this user's alone.
    claim(&args.dir)?;
    let kept_hosts = args.dir.join(HOSTS_FILE);
    let hosts = match (&args.hosts, kept_hosts.exists()) {
        (Some(file), _) => Some(file.clone()),
        (None, true) if args.servers.is_none() => Some(kept_hosts),
        (None, true) => {
            return Err(ClusterError::StartedFromHostfile {
                dir: args.dir.clone(),
                kept: kept_hosts,
            })
        }
        (None, false) => None,
    };
    let (config, started) = if let Some(hosts) = hosts {
        if args.ofi_provider.is_some()
            || args.metrics_base_port.is_some()
            || args.serve.is_some()
            || args.cache_bytes.is_some()
        {
            return Err(ClusterError::LocalFlagsWithHostfile);
        }
        start_hosts(&args.dir, &hosts, args.stripe_unit, &mds_flags)?
    } else {
        let ofi = args.ofi_provider.as_ref().map(|provider| OfiEntry {
            provider: provider.clone(),
            // tcp binds to loopback, where the servers listen.
            node: provider.starts_with("tcp").then(|| "127.0.0.1".to_owned()),
        });
        let previous = ClusterConfig::load(&args.dir.join("cluster.toml"))
            .ok()
            .and_then(|config| u16::try_from(config.iods.len()).ok());
        let servers = args.servers.or(previous).unwrap_or(SERVERS_DEFAULT);
        let mut iod_metrics = Vec::new();
        if let Some(base) = args.metrics_base_port {
            let (mds, iods) = metrics_addresses(base, servers)?;
            mds_flags.extend(["--metrics".to_owned(), mds]);
            iod_metrics = iods;
        }
        start_local(
            &args.dir,
            servers,
            args.stripe_unit,
            ofi.as_ref(),
            &mds_flags,
            &iod_metrics,
            &serve_flags(args.serve, args.cache_bytes),
        )?
    };
    let started = if started.is_empty() {
        "every server was already running".to_owned()
    } else {
        format!("started {}", started.join(", "))
    };
    crate::outln!(
        "tessera: cluster up in {}: mds at {}, {} I/O servers; {started}",
        args.dir.display(),
        config.mds.address,
        config.iods.len()
    );
    crate::outln!(
        "export TESSERA_CLUSTER={}",
        args.dir.join("cluster.toml").display()
    );
    Ok(())
}

/// Iods of a local cluster when `up` is given no `--servers` and there is no earlier one.
pub(crate) const SERVERS_DEFAULT: u16 = 4;

/// Starts a cluster of `servers` iods in `dir`, writes `dir/cluster.toml` and returns once
/// every server answers. On failure nothing it started is left running.
pub fn start(dir: &Path, servers: u16, stripe_unit: u64) -> Result<ClusterConfig, ClusterError> {
    start_local(dir, servers, stripe_unit, None, &[], &[], &[]).map(|(config, _)| config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_flags_forward_only_what_was_given_as_the_iod_spells_it() {
        assert!(serve_flags(None, None).is_empty());
        assert_eq!(
            serve_flags(Some(ServeMode::Unified), Some(64 << 20)),
            ["--serve", "unified", "--cache-bytes", "67108864"]
        );
        assert_eq!(serve_flags(None, Some(4096)), ["--cache-bytes", "4096"]);
        let names: Vec<&str> = ServeMode::ALL.iter().map(|mode| mode.name()).collect();
        assert_eq!(names, ["normal", "mmap", "unified"]);
        let up = |words: &[&str]| {
            #[derive(clap::Parser)]
            struct Cli {
                #[command(flatten)]
                up: UpArgs,
            }
            let words = ["up", "--dir", "/c"].iter().chain(words);
            <Cli as clap::Parser>::try_parse_from(words).map(|cli| cli.up)
        };
        let args = up(&["--serve", "unified", "--cache-bytes", "512m"]).unwrap();
        assert_eq!(
            (args.serve, args.cache_bytes),
            (Some(ServeMode::Unified), Some(512 << 20))
        );
        assert_eq!(up(&[]).unwrap().serve, None);
        let err = up(&["--serve", "fast"]).err().unwrap().to_string();
        assert!(err.contains("fast") && err.contains("unified"), "{err}");
    }

    #[test]
    fn metrics_ports_follow_the_base_and_stay_in_range() {
        let (mds, iods) = metrics_addresses(9100, 3).unwrap();
        assert_eq!(mds, "127.0.0.1:9100");
        assert_eq!(iods, ["127.0.0.1:9101", "127.0.0.1:9102", "127.0.0.1:9103"]);
        assert!(metrics_addresses(65_535, 1)
            .unwrap_err()
            .to_string()
            .contains("65535 to 65536"));
        assert!(metrics_addresses(0, 1).is_err());
        assert_eq!(metrics_addresses(65_534, 1).unwrap().1, ["127.0.0.1:65535"]);
    }
}
