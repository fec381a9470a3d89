//! One column's processes for one process count ([`Group`]): the MPI program under `mpirun`
//! (with or without the library preloaded) fed through one FIFO per rank, or the native
//! workers fed through their standard inputs. The parent sends each a [`Step`] line per case
//! and reads rank 0's [`Outcome`] line back, checked against the command.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::command::{Outcome, Step};
use super::{Mpi, CASE_SECONDS_MAX, METHODS, OUTPUT_LINES_MAX, QUIT_SECONDS_MAX};

/// One column's processes, driven a case at a time.
pub(super) struct Group {
    label: String,
    children: Vec<Child>,
    /// Where each rank reads its commands (FIFOs or the workers' standard inputs).
    inputs: Vec<Box<dyn Write + Send>>,
    /// Rank 0's standard output, line by line.
    lines: Receiver<String>,
}

/// Forwards `source`'s lines to a channel (at most [`OUTPUT_LINES_MAX`] waiting).
fn line_reader(source: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (sender, receiver) = std::sync::mpsc::sync_channel(OUTPUT_LINES_MAX);
    std::thread::spawn(move || {
        for line in BufReader::new(source).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

impl Group {
    /// The MPI program under `mpi`: with the shim (`preload` = shim, cluster file) on a
    /// Tessera file, or without it on a local file.
    pub(super) fn mpi(
        mpi: Mpi,
        processes: u32,
        program: &Path,
        file: &str,
        control: &Path,
        preload: Option<(&Path, &Path)>,
    ) -> Result<Self, String> {
        std::fs::create_dir_all(control)
            .map_err(|err| format!("cannot create {}: {err}", control.display()))?;
        let mut inputs: Vec<Box<dyn Write + Send>> = Vec::new();
        for rank in 0..processes {
            let fifo = control.join(format!("rank-{rank}"));
            let _ = std::fs::remove_file(&fifo);
            let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes())
                .map_err(|err| err.to_string())?;
            // SAFETY: mkfifo reads the NUL-terminated path `name` owns for the whole call.
            if unsafe { libc::mkfifo(name.as_ptr(), 0o600) } != 0 {
                return Err(format!(
                    "mkfifo {}: {}",
                    fifo.display(),
                    std::io::Error::last_os_error()
                ));
            }
            // Read and write: on Linux the open does not wait for the reader, and the rank's
            // open does not wait for us.
            let writer = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&fifo)
                .map_err(|err| format!("cannot open {}: {err}", fifo.display()))?;
            inputs.push(Box::new(writer));
        }
        let mut command = Command::new(mpi.launcher());
        let count = processes.to_string();
        match mpi {
            Mpi::Mpich => {
                command.args(["-n", &count]);
                if let Some((shim, cluster)) = preload {
                    command
                        .args(["-genv", "LD_PRELOAD"])
                        .arg(shim)
                        .args(["-genv", "TESSERA_CLUSTER"])
                        .arg(cluster);
                }
            }
            Mpi::Openmpi => {
                command.args(["--allow-run-as-root", "--oversubscribe", "-n", &count]);
                if let Some((shim, cluster)) = preload {
                    command
                        .arg("-x")
                        .arg(format!("LD_PRELOAD={}", shim.display()))
                        .arg("-x")
                        .arg(format!("TESSERA_CLUSTER={}", cluster.display()));
                }
            }
        }
        let mut child = command
            .arg(program)
            .arg(file)
            .arg(control)
            .env_remove("LD_PRELOAD")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|err| format!("cannot start {}: {err}", mpi.launcher()))?;
        let lines = line_reader(child.stdout.take().expect("piped"));
        Ok(Self {
            label: format!(
                "{} {} p{processes}",
                if preload.is_some() {
                    METHODS[0]
                } else {
                    METHODS[2]
                },
                mpi.name()
            ),
            children: vec![child],
            inputs,
            lines,
        })
    }

    /// `processes` native workers on the Tessera file `path`.
    pub(super) fn native(
        processes: u32,
        cluster: &Path,
        path: &str,
        meeting: &Path,
        mpi: &str,
    ) -> Result<Self, String> {
        std::fs::create_dir_all(meeting)
            .map_err(|err| format!("cannot create {}: {err}", meeting.display()))?;
        let mut group = Self {
            label: format!("{} {mpi} p{processes}", METHODS[1]),
            children: Vec::new(),
            inputs: Vec::new(),
            lines: std::sync::mpsc::sync_channel(1).1,
        };
        for rank in 0..processes {
            let mut child = crate::bench::spawn_worker(
                crate::bench::worker_command()?
                    .arg("mpiio-worker")
                    .args(["--rank", &rank.to_string()])
                    .args(["--processes", &processes.to_string()])
                    .arg("--cluster")
                    .arg(cluster)
                    .args(["--path", path])
                    .arg("--meeting")
                    .arg(meeting)
                    .stdin(Stdio::piped()),
                "mpiio",
                rank as usize,
            )?;
            group
                .inputs
                .push(Box::new(child.stdin.take().expect("piped")));
            if rank == 0 {
                group.lines = line_reader(child.stdout.take().expect("piped"));
            }
            group.children.push(child);
        }
        Ok(group)
    }

    fn send(&mut self, line: &str) -> Result<(), String> {
        for input in &mut self.inputs {
            input
                .write_all(line.as_bytes())
                .and_then(|()| input.flush())
                .map_err(|err| format!("{}: cannot send a command: {err}", self.label))?;
        }
        Ok(())
    }

    /// Runs one case; its outcome, checked against the command.
    pub(super) fn run(&mut self, command: &Step, processes: u32) -> Result<Outcome, String> {
        self.send(&command.line())?;
        let deadline = Instant::now() + Duration::from_secs(CASE_SECONDS_MAX);
        let line = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with('{') => break line,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "{}: no answer to `{}` within {CASE_SECONDS_MAX} s (CASE_SECONDS_MAX)",
                        self.label,
                        command.line().trim_end()
                    ))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!(
                        "{}: exited during `{}`",
                        self.label,
                        command.line().trim_end()
                    ))
                }
            }
        };
        let outcome: Outcome = serde_json::from_str(&line)
            .map_err(|err| format!("{}: said {line:?}: {err}", self.label))?;
        let expected = (
            if command.collective {
                "collective"
            } else {
                "independent"
            },
            if command.strided {
                "strided"
            } else {
                "contiguous"
            },
            command.transfer,
            command.segments,
            processes,
            command.generation,
            command.process_bytes() * u64::from(processes),
        );
        let got = (
            outcome.access.as_str(),
            outcome.pattern.as_str(),
            outcome.transfer_bytes,
            outcome.segments,
            outcome.processes,
            outcome.generation,
            outcome.bytes,
        );
        if got != expected {
            return Err(format!(
                "{}: answered {got:?} to a command for {expected:?}",
                self.label
            ));
        }
        Ok(outcome)
    }

    /// Tells every rank to quit and waits (bounded) for the processes to exit successfully.
    pub(super) fn finish(mut self) -> Result<(), String> {
        let _ = self.send("quit\n");
        self.inputs.clear();
        let deadline = Instant::now() + Duration::from_secs(QUIT_SECONDS_MAX);
        let mut failures = Vec::new();
        for child in &mut self.children {
            let status = loop {
                if let Some(status) = child.try_wait().map_err(|err| err.to_string())? {
                    break Some(status);
                }
                if Instant::now() > deadline {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            match status {
                Some(status) if status.success() => {}
                Some(status) => failures.push(format!("{}: exited with {status}", self.label)),
                None => failures.push(format!(
                    "{}: did not quit within {QUIT_SECONDS_MAX} s (QUIT_SECONDS_MAX)",
                    self.label
                )),
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.inputs.clear();
        for child in &mut self.children {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}
