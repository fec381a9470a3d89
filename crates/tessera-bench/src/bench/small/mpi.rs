//! The many-small pattern through MPI-IO (`mpiio/bench/many_small.c`, built by `make mpiio`):
//! the Tessera MPI-IO library on a `tessera:` name, with the hint `tessera_write_back=enable`
//! and without, against the MPI's own MPI-IO on a local file, under each MPI installed.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Deserialize;

use super::super::btio_mpi::{finish, on_path, Mpi, SHIM};

/// The program `make mpiio` builds beside the library.
const PROGRAM: &str = "many-small";
/// Processes of each run.
pub const PROCESSES: u32 = 4;
/// The longest one run may take.
const RUN_MAX: Duration = Duration::from_mins(5);

/// How a run reaches its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// The MPI's own MPI-IO on a local file.
    Local,
    /// The Tessera MPI-IO library, writes going through.
    Tessera,
    /// The Tessera MPI-IO library with `tessera_write_back=enable`.
    WriteBack,
}

impl Way {
    pub const ALL: [Self; 3] = [Self::Local, Self::Tessera, Self::WriteBack];

    pub fn method(self) -> &'static str {
        match self {
            Self::Local => "mpiio-local-file",
            Self::Tessera => "mpiio-tessera",
            Self::WriteBack => "mpiio-tessera-cached",
        }
    }
}

/// One line of the program: one piece size, one repeat.
#[derive(Debug, Clone, Deserialize)]
pub struct Line {
    pub piece: usize,
    pub repeat: usize,
    pub seconds: f64,
    pub verified: bool,
}

/// The MPIs whose launcher is installed and whose program and library `make mpiio` built;
/// each one left out comes with the reason.
pub fn available() -> (Vec<Mpi>, Vec<String>) {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for mpi in [Mpi::Mpich, Mpi::Openmpi] {
        if !on_path(mpi.launcher()) {
            missing.push(format!("{} is not installed", mpi.launcher()));
            continue;
        }
        match mpi
            .built("small", PROGRAM)
            .and_then(|_| mpi.built("small", SHIM))
        {
            Ok(_) => found.push(mpi),
            Err(why) => missing.push(why),
        }
    }
    (found, missing)
}

/// One run of the program under `mpi` by `way`: `repeats` of each piece size.
pub fn run(
    mpi: Mpi,
    way: Way,
    (cluster, local_dir): (&Path, &Path),
    (pieces, repeats, sizes): (usize, usize, &[usize]),
) -> Result<Vec<Line>, String> {
    let program = mpi.built("small", PROGRAM)?;
    let file = match way {
        Way::Local => local_dir
            .join(format!("many-small-{}", mpi.name()))
            .display()
            .to_string(),
        Way::Tessera | Way::WriteBack => format!(
            "tessera:/bench/many-small-{}-{}",
            std::process::id(),
            mpi.name()
        ),
    };
    let mut command = match way {
        Way::Local => {
            let mut command = Command::new(mpi.launcher());
            if mpi == Mpi::Openmpi {
                command.args(["--allow-run-as-root", "--oversubscribe"]);
            }
            command.args(["-n", &PROCESSES.to_string()]);
            command
        }
        Way::Tessera | Way::WriteBack => mpi.launch(PROCESSES, &mpi.built("small", SHIM)?, cluster),
    };
    command
        .arg(&program)
        .args([
            file.as_str(),
            &pieces.to_string(),
            &repeats.to_string(),
            if way == Way::WriteBack { "1" } else { "0" },
        ])
        .args(sizes.iter().map(ToString::to_string))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let child = command
        .spawn()
        .map_err(|err| format!("cannot start {}: {err}", mpi.launcher()))?;
    let (status, text) = finish(child, RUN_MAX, &format!("{} {}", mpi.name(), way.method()))?;
    let lines: Vec<Line> = text
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| {
            serde_json::from_str(line).map_err(|err| format!("{}: {line:?}: {err}", mpi.name()))
        })
        .collect::<Result<_, _>>()?;
    if !status.success() || lines.len() != repeats * sizes.len() {
        return Err(format!(
            "{} {}: {status}, {} result lines of {}",
            mpi.name(),
            way.method(),
            lines.len(),
            repeats * sizes.len()
        ));
    }
    Ok(lines)
}
