//! The parent side ([`Workers`]): it starts the worker processes, hands each its group of
//! tasks, waits until all are ready, then tells them to go at once and gathers their results.

use std::io::BufReader;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use super::{receive, send, Message, StepResult, Task};

/// The parent side: a group of worker processes.
pub struct Workers {
    children: Vec<(Child, ChildStdin, BufReader<ChildStdout>)>,
}

impl Workers {
    /// Starts `count` worker processes.
    pub fn spawn(count: usize) -> Result<Self, String> {
        let exe = std::env::current_exe()
            .map_err(|err| format!("cannot find the tessera binary: {err}"))?;
        let mut children = Vec::with_capacity(count);
        for rank in 0..count {
            let mut child = Command::new(&exe)
                .args(["worker", "--rank", &rank.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|err| format!("cannot start worker {rank}: {err}"))?;
            let stdin = child.stdin.take().expect("piped");
            let stdout = BufReader::new(child.stdout.take().expect("piped"));
            children.push((child, stdin, stdout));
        }
        Ok(Self { children })
    }

    fn expect(&mut self, rank: usize) -> Result<Message, String> {
        match receive(&mut self.children[rank].2)? {
            Some(Message::Failed(err)) => Err(err),
            Some(message) => Ok(message),
            None => Err(format!("worker {rank} exited unexpectedly")),
        }
    }

    /// Sends `message` to every worker.
    fn broadcast(&mut self, message: &Message) -> Result<(), String> {
        for (_, stdin, _) in &mut self.children {
            send(stdin, message)?;
        }
        Ok(())
    }

    /// Every worker's next message in rank order, through `take`, which gives back any message
    /// but the `expected` reply (an error naming the worker).
    fn replies<T>(
        &mut self,
        expected: &str,
        take: impl Fn(Message) -> Result<T, Box<Message>>,
    ) -> Result<Vec<T>, String> {
        (0..self.children.len())
            .map(|rank| {
                take(self.expect(rank)?)
                    .map_err(|other| format!("worker {rank}: expected {expected}, got {other:?}"))
            })
            .collect()
    }

    /// Runs one step: task `i` on worker `i`, all starting together. Returns each worker's
    /// result and the wall time from the common start to the last finish.
    pub fn step(&mut self, tasks: Vec<Task>) -> Result<(Vec<StepResult>, f64), String> {
        Self::alone(self.run_step(Self::groups_of_one(tasks), false, || Ok(())))
    }

    /// [`Workers::step`], then a second barrier at which every worker verifies what it read
    /// (outside the timed part of every process) and reports it in `verified`.
    pub fn step_checked(&mut self, tasks: Vec<Task>) -> Result<(Vec<StepResult>, f64), String> {
        Self::alone(self.run_step(Self::groups_of_one(tasks), true, || Ok(())))
    }

    /// [`Workers::step_checked`], running `before_go` once every worker is ready and before
    /// any starts (outside every timing).
    pub fn step_checked_with(
        &mut self,
        tasks: Vec<Task>,
        before_go: impl FnOnce() -> Result<(), String>,
    ) -> Result<(Vec<StepResult>, f64), String> {
        Self::alone(self.run_step(Self::groups_of_one(tasks), true, before_go))
    }

    /// [`Workers::step_checked`] of a group of tasks per worker, whose calls take turns one by
    /// one ([`run_group`]): `results[rank][member]`.
    pub fn step_grouped(
        &mut self,
        groups: Vec<Vec<Task>>,
    ) -> Result<(Vec<Vec<StepResult>>, f64), String> {
        self.run_step(groups, true, || Ok(()))
    }

    fn groups_of_one(tasks: Vec<Task>) -> Vec<Vec<Task>> {
        tasks.into_iter().map(|task| vec![task]).collect()
    }

    fn alone(
        step: Result<(Vec<Vec<StepResult>>, f64), String>,
    ) -> Result<(Vec<StepResult>, f64), String> {
        let (results, wall_seconds) = step?;
        let results = results.into_iter().flatten().collect();
        Ok((results, wall_seconds))
    }

    /// One step (see [`Workers::step`]), `before_go` run between ready and go, and with
    /// `check` the verifying barrier of [`Workers::step_checked`].
    fn run_step(
        &mut self,
        groups: Vec<Vec<Task>>,
        check: bool,
        before_go: impl FnOnce() -> Result<(), String>,
    ) -> Result<(Vec<Vec<StepResult>>, f64), String> {
        assert_eq!(groups.len(), self.children.len(), "one group per worker");
        let sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
        assert!(sizes.iter().all(|&size| size > 0), "no empty group");
        for ((_, stdin, _), tasks) in self.children.iter_mut().zip(groups) {
            send(stdin, &Message::Prepare(tasks))?;
        }
        self.replies("ready", |message| match message {
            Message::Ready => Ok(()),
            other => Err(Box::new(other)),
        })?;
        before_go()?;
        let started = Instant::now();
        self.broadcast(&Message::Go)?;
        let mut results = self.replies("done", |message| match message {
            Message::Done(results) => Ok(results),
            other => Err(Box::new(other)),
        })?;
        let wall_seconds = started.elapsed().as_secs_f64();
        for (rank, (got, &size)) in results.iter().zip(&sizes).enumerate() {
            if got.len() != size {
                return Err(format!(
                    "worker {rank}: {} results for a group of {size}",
                    got.len()
                ));
            }
        }
        if check {
            self.broadcast(&Message::Check)?;
            let checked = self.replies("checked", |message| match message {
                Message::Checked(verified) => Ok(verified),
                other => Err(Box::new(other)),
            })?;
            for (group, verified) in results.iter_mut().zip(checked) {
                for (result, verified) in group.iter_mut().zip(verified) {
                    result.verified = verified;
                }
            }
        }
        Ok((results, wall_seconds))
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for (mut child, stdin, _) in self.children.drain(..) {
            drop(stdin);
            let _ = child.wait();
        }
    }
}
