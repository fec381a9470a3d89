//! A real local cluster for integration tests: `tessera up` in a temporary directory, real
//! server processes on loopback, `tessera down` when the test ends.

#![allow(dead_code, clippy::cast_possible_truncation)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use tessera_client::{Client, ClientOptions, ClusterConfig};

pub const TESSERA: &str = env!("CARGO_BIN_EXE_tessera");

pub fn tessera(args: &[&str]) -> Output {
    Command::new(TESSERA)
        .args(args)
        .env_remove("TESSERA_CLUSTER")
        .output()
        .expect("tessera runs")
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
}

impl Cluster {
    pub fn start(servers: u16) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let cluster = Self { dir };
        cluster.up(servers);
        cluster
    }

    pub fn up(&self, servers: u16) {
        let output = tessera(&[
            "up",
            "--servers",
            &servers.to_string(),
            "--dir",
            self.path().to_str().unwrap(),
        ]);
        assert!(
            output.status.success(),
            "tessera up failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn down(&self) {
        let output = tessera(&["down", "--dir", self.path().to_str().unwrap()]);
        assert!(
            output.status.success(),
            "tessera down failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn file(&self) -> PathBuf {
        self.path().join("cluster.toml")
    }

    pub fn client(&self) -> Client {
        self.client_with_timeout(Duration::from_secs(30))
    }

    pub fn client_with_timeout(&self, timeout: Duration) -> Client {
        let config = ClusterConfig::load(&self.file()).expect("cluster file");
        Client::new(&config, &ClientOptions { timeout })
    }

    pub fn pid(&self, server: &str) -> i32 {
        std::fs::read_to_string(self.path().join("run").join(format!("{server}.pid")))
            .expect("pid file")
            .trim()
            .parse()
            .expect("pid")
    }

    pub fn log(&self, server: &str) -> String {
        std::fs::read_to_string(self.path().join("log").join(format!("{server}.log")))
            .unwrap_or_default()
    }

    pub fn iod_address(&self, index: usize) -> String {
        ClusterConfig::load(&self.file()).unwrap().iods[index]
            .address
            .clone()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = tessera(&["down", "--dir", self.path().to_str().unwrap()]);
    }
}

/// Deterministic pseudo-random bytes.
pub fn bytes(seed: u64, length: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..length)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}
