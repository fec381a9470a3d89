//! Worker processes driven in lock step over JSON lines on their standard input and output
//! (`bench meta`, `bench small`): the parent sends each worker its step, every worker prepares
//! it (opens what it needs) and answers `{"ready": true}`, then the parent sends `"go"` to all
//! at once and reads each worker's outcome, one JSON line.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// What a worker process does with each step.
pub trait Worker {
    /// What the parent asks.
    type Step: DeserializeOwned;
    /// What the worker answers.
    type Outcome: Serialize;
    /// Readies `step` (untimed: opens clients and files); an error ends the worker.
    fn prepare(&mut self, step: &Self::Step) -> Result<(), String>;
    /// Runs `step`, started with every other worker's.
    fn run(&mut self, step: &Self::Step) -> Self::Outcome;
}

/// The worker side: serves steps from standard input until it closes.
pub fn serve<W: Worker>(name: &str, rank: usize, worker: &mut W) -> Result<(), String> {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut out = std::io::stdout().lock();
    let mut say = |text: &str| -> Result<(), String> {
        writeln!(out, "{text}")
            .and_then(|()| out.flush())
            .map_err(|err| format!("{name} worker {rank}: {err}"))
    };
    while let Some(line) = lines.next() {
        let line = line.map_err(|err| format!("{name} worker {rank}: {err}"))?;
        let step: W::Step = serde_json::from_str(&line)
            .map_err(|err| format!("{name} worker {rank} step: {err}"))?;
        worker.prepare(&step)?;
        say(r#"{"ready":true}"#)?;
        match lines.next() {
            Some(Ok(go)) if go.trim() == "\"go\"" => {}
            other => return Err(format!("{name} worker {rank}: expected go, got {other:?}")),
        }
        let outcome = serde_json::to_string(&worker.run(&step)).map_err(|err| err.to_string())?;
        say(&outcome)?;
    }
    Ok(())
}

/// The parent side: the worker processes of a run, ended (standard input closed, waited
/// for) on drop.
pub struct Lockstep {
    name: &'static str,
    children: Vec<(Child, ChildStdin, BufReader<ChildStdout>)>,
}

impl Lockstep {
    /// Starts `count` workers, each `tessera-bench SUBCOMMAND --rank R`; `name` names them in
    /// errors.
    pub fn spawn(name: &'static str, subcommand: &str, count: usize) -> Result<Self, String> {
        let mut children = Vec::with_capacity(count);
        for rank in 0..count {
            let mut child = crate::bench::worker_command()?
                .args([subcommand, "--rank", &rank.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|err| format!("cannot start {name} worker {rank}: {err}"))?;
            let stdin = child.stdin.take().expect("piped");
            let stdout = BufReader::new(child.stdout.take().expect("piped"));
            children.push((child, stdin, stdout));
        }
        Ok(Self { name, children })
    }

    /// One step: `steps[rank]` to each worker, all started together; their outcomes.
    pub fn step<S: Serialize, O: DeserializeOwned>(
        &mut self,
        steps: &[S],
    ) -> Result<Vec<O>, String> {
        let name = self.name;
        if steps.len() != self.children.len() {
            return Err(format!(
                "{name}: {} steps for {} workers",
                steps.len(),
                self.children.len()
            ));
        }
        let send = |rank: usize, stdin: &mut ChildStdin, text: &str| {
            writeln!(stdin, "{text}")
                .and_then(|()| stdin.flush())
                .map_err(|err| format!("{name} worker {rank} is gone: {err}"))
        };
        for (rank, ((_, stdin, _), step)) in self.children.iter_mut().zip(steps).enumerate() {
            let text = serde_json::to_string(step).map_err(|err| err.to_string())?;
            send(rank, stdin, &text)?;
        }
        for (rank, (_, _, stdout)) in self.children.iter_mut().enumerate() {
            let ready: serde_json::Value = read_line(name, rank, stdout)?;
            if ready["ready"] != true {
                return Err(format!("{name} worker {rank}: {ready}"));
            }
        }
        for (rank, (_, stdin, _)) in self.children.iter_mut().enumerate() {
            send(rank, stdin, "\"go\"")?;
        }
        self.children
            .iter_mut()
            .enumerate()
            .map(|(rank, (_, _, stdout))| read_line(name, rank, stdout))
            .collect()
    }
}

fn read_line<T: DeserializeOwned>(
    name: &str,
    rank: usize,
    stdout: &mut BufReader<ChildStdout>,
) -> Result<T, String> {
    let mut line = String::new();
    let read = stdout
        .read_line(&mut line)
        .map_err(|err| format!("{name} worker {rank}: {err}"))?;
    if read == 0 {
        return Err(format!("{name} worker {rank} ended (see its error above)"));
    }
    serde_json::from_str(&line).map_err(|err| format!("{name} worker {rank}: {err}: {line}"))
}

impl Drop for Lockstep {
    fn drop(&mut self) {
        for (mut child, stdin, _) in self.children.drain(..) {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

/// The `fraction` percentile (nearest rank) of `sorted`; NaN when empty.
pub fn percentile(sorted: &[f32], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    // The smallest sample with at least `fraction` of them at or below it.
    let below = sorted.len() as f64 * fraction;
    let index = (0..sorted.len())
        .position(|rank| (rank + 1) as f64 >= below)
        .unwrap_or(sorted.len() - 1);
    f64::from(sorted[index])
}
