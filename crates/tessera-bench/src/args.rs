//! The options every experiment takes (a leaf: the experiments and the report harness both
//! read them).

use std::path::PathBuf;

/// Options every benchmark takes.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Reduced sizes that finish in well under a minute.
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object on standard output (tables go to standard error).
    #[arg(long)]
    pub json: bool,
    /// Where to write NAME.csv and NAME.png.
    #[arg(long, default_value = ".")]
    pub out: PathBuf,
    /// Cluster file of a running cluster (default: $TESSERA_CLUSTER, else a private cluster).
    #[arg(long, env = "TESSERA_CLUSTER")]
    pub cluster: Option<PathBuf>,
    /// How the registration benches register memory: `fixed` pins pages as io_uring fixed
    /// buffers (the kernel pinning `ibv_reg_mr` does; default of subarray and ogr), `pin`
    /// locks them with mlock/munlock (default of fmrd, where registration must cost enough
    /// for the caches to differ: fixed pinning of 64 KiB costs ~1.5 % of a write here).
    #[arg(long, value_enum)]
    pub registrar: Option<RegistrarKind>,
}

/// The registrar of the registration benches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RegistrarKind {
    /// io_uring fixed buffers: `pin_user_pages(FOLL_LONGTERM)`, as RDMA registration pins.
    Fixed,
    /// mlock/munlock.
    Pin,
}

impl CommonArgs {
    /// A new registrar of the kind asked for, else of `default`, with what reports call it.
    pub fn registrar(
        &self,
        default: RegistrarKind,
    ) -> Result<
        (
            std::sync::Arc<dyn tessera_client::tessera_reg::Registrar>,
            &'static str,
        ),
        String,
    > {
        use tessera_client::tessera_reg::{FixedRegistrar, PinRegistrar};
        Ok(match self.registrar.unwrap_or(default) {
            RegistrarKind::Fixed => (
                std::sync::Arc::new(FixedRegistrar::new().map_err(|err| {
                    format!("registrar fixed: {err} (--registrar pin locks with mlock instead)")
                })?),
                "fixed (io_uring fixed buffers: pin_user_pages FOLL_LONGTERM)",
            ),
            RegistrarKind::Pin => (
                std::sync::Arc::new(PinRegistrar::new()),
                "pin (mlock/munlock)",
            ),
        })
    }
}
