//! The client processes of `tessera bench meta`: each runs one phase of mdtest on one target
//! per step, timing every operation, and checks afterwards (untimed) that the phase did what
//! it says: every name made is listed, every name removed is gone.
//!
//! A parent drives them in lock step over JSON lines on their standard input and output, as
//! [`crate::workers`] does for the data benches: a [`Step`] (the worker opens what it needs
//! and answers `ready`), then `go` (all start at once) and the worker's [`Outcome`].

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::ops::{OpResult, Ops, Target, TREE_FANOUT};
use super::tar::{self, TarSource};

/// Arguments of the hidden `tessera-bench meta-worker` command.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// Rank of this process among the workers.
    #[arg(long)]
    rank: usize,
}

/// One phase of mdtest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Create and close `items` empty files.
    Create,
    /// Stat each file.
    Stat,
    /// Open each file for reading and close it.
    OpenClose,
    /// List the directory (ops: entries listed).
    Readdir,
    /// Rename each file to a new name in the same directory.
    Rename,
    /// Remove each renamed file.
    Unlink,
    /// Make `items` directories.
    Mkdir,
    /// Remove them.
    Rmdir,
    /// Make a tree: a directory, [`TREE_FANOUT`] subdirectories, `items` files among them.
    TreeCreate,
    /// Remove the tree, files first.
    TreeRemove,
    /// Unpack an archive of a small tree as `tar x` does (ops: entries made).
    TarX,
    /// A null request and reply to the mds (the floor; native only).
    Ping,
}

impl Phase {
    /// The phases of one pass, in the order they depend on each other.
    pub const PASS: [Self; 11] = [
        Self::Create,
        Self::Stat,
        Self::OpenClose,
        Self::Readdir,
        Self::Rename,
        Self::Unlink,
        Self::Mkdir,
        Self::Rmdir,
        Self::TreeCreate,
        Self::TreeRemove,
        Self::TarX,
    ];

    /// The name reports use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Stat => "stat",
            Self::OpenClose => "open-close",
            Self::Readdir => "readdir",
            Self::Rename => "rename",
            Self::Unlink => "unlink",
            Self::Mkdir => "mkdir",
            Self::Rmdir => "rmdir",
            Self::TreeCreate => "tree-create",
            Self::TreeRemove => "tree-remove",
            Self::TarX => "tar-x",
            Self::Ping => "ping",
        }
    }

    /// Whether the phase changes the namespace (the mds's commits are counted for it).
    pub fn changes(self) -> bool {
        !matches!(
            self,
            Self::Stat | Self::OpenClose | Self::Readdir | Self::Ping
        )
    }
}

/// What one worker does in one step.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Step {
    /// Where.
    pub target: Target,
    /// What.
    pub phase: Phase,
    /// The directory the worker works in, absolute in the target's namespace (made by the
    /// parent; shared by all workers or one per worker).
    pub dir: String,
    /// Files or directories this worker makes (pings, for `ping`).
    pub items: usize,
    /// The archive of `tar-x`.
    #[serde(default)]
    pub tar: Option<TarSource>,
}

/// What one worker measured in one step.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    /// Seconds from `go` to the last operation.
    pub seconds: f64,
    /// Operations timed.
    pub ops: u64,
    /// Each operation's latency, microseconds.
    pub latencies_us: Vec<f32>,
    /// The untimed check after the phase found what the phase was to leave.
    pub verified: bool,
    /// What the check found wrong (empty when verified).
    pub problem: String,
}

/// The names a worker of `rank` uses in its directory `dir`.
struct Names<'a> {
    dir: &'a str,
    rank: usize,
}

impl Names<'_> {
    fn file(&self, item: usize) -> String {
        format!("{}/f.{}.{item}", self.dir, self.rank)
    }
    fn renamed(&self, item: usize) -> String {
        format!("{}/g.{}.{item}", self.dir, self.rank)
    }
    fn directory(&self, item: usize) -> String {
        format!("{}/d.{}.{item}", self.dir, self.rank)
    }
    fn tree(&self) -> String {
        format!("{}/t.{}", self.dir, self.rank)
    }
    fn unpacked(&self) -> String {
        format!("{}/x.{}", self.dir, self.rank)
    }
    fn branch(&self, branch: usize) -> String {
        format!("{}/s{branch}", self.tree())
    }
    fn leaf(&self, item: usize) -> String {
        format!("{}/f{item}", self.branch(item % TREE_FANOUT))
    }
    /// How many of `names` this worker made with `prefix` (`f`, `g` or `d`).
    fn count(&self, names: &[String], prefix: &str) -> usize {
        let mine = format!("{prefix}.{}.", self.rank);
        names.iter().filter(|name| name.starts_with(&mine)).count()
    }
}

/// Times `op` over `items`, pushing each latency.
fn timed(
    items: usize,
    latencies: &mut Vec<f32>,
    mut op: impl FnMut(usize) -> OpResult<()>,
) -> OpResult<()> {
    for item in 0..items {
        let started = Instant::now();
        op(item)?;
        latencies.push(started.elapsed().as_secs_f32() * 1e6);
    }
    Ok(())
}

/// Runs `step` on `ops`: the timed phase, then its check.
fn run_step(ops: &Ops, step: &Step, rank: usize) -> OpResult<Outcome> {
    let names = Names {
        dir: &step.dir,
        rank,
    };
    let items = step.items;
    let mut latencies = Vec::with_capacity(items + TREE_FANOUT + 1);
    let started = Instant::now();
    match step.phase {
        Phase::Create => timed(items, &mut latencies, |i| ops.create(&names.file(i)))?,
        Phase::Stat => timed(items, &mut latencies, |i| {
            match ops.stat(&names.file(i))? {
                (true, 0) => Ok(()),
                found => Err(format!(
                    "{}: stat says (file, size) {found:?}",
                    names.file(i)
                )),
            }
        })?,
        Phase::OpenClose => timed(items, &mut latencies, |i| ops.open_close(&names.file(i)))?,
        Phase::Readdir => {
            let listed = ops.list(&step.dir)?;
            // One listing, counted as an operation per entry (mdtest's readdir rate).
            let per_entry = started.elapsed().as_secs_f32() * 1e6 / listed.len().max(1) as f32;
            latencies.extend(std::iter::repeat_n(per_entry, listed.len()));
            if names.count(&listed, "f") != items {
                return Ok(failed(
                    started,
                    &latencies,
                    format!(
                        "{}: listed {} of this worker's {items} files",
                        step.dir,
                        names.count(&listed, "f")
                    ),
                ));
            }
        }
        Phase::Rename => timed(items, &mut latencies, |i| {
            ops.rename(&names.file(i), &names.renamed(i))
        })?,
        Phase::Unlink => timed(items, &mut latencies, |i| ops.unlink(&names.renamed(i)))?,
        Phase::Mkdir => timed(items, &mut latencies, |i| ops.mkdir(&names.directory(i)))?,
        Phase::Rmdir => timed(items, &mut latencies, |i| ops.rmdir(&names.directory(i)))?,
        Phase::TreeCreate => {
            timed(1, &mut latencies, |_| ops.mkdir(&names.tree()))?;
            timed(TREE_FANOUT, &mut latencies, |b| ops.mkdir(&names.branch(b)))?;
            timed(items, &mut latencies, |i| ops.create(&names.leaf(i)))?;
        }
        Phase::TreeRemove => {
            timed(items, &mut latencies, |i| ops.unlink(&names.leaf(i)))?;
            timed(TREE_FANOUT, &mut latencies, |b| ops.rmdir(&names.branch(b)))?;
            timed(1, &mut latencies, |_| ops.rmdir(&names.tree()))?;
        }
        Phase::Ping => timed(items, &mut latencies, |_| ops.ping())?,
        Phase::TarX => {
            let source = step.tar.as_ref().ok_or("tar-x without an archive")?;
            tar::extract(ops, source, &names.unpacked())?;
            // One unpacking, counted as an operation per entry made.
            let entries = source.entries();
            let per_entry = started.elapsed().as_secs_f32() * 1e6 / entries as f32;
            latencies.extend(std::iter::repeat_n(per_entry, entries));
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let problem = check(ops, step, &names)?;
    Ok(Outcome {
        seconds,
        ops: latencies.len() as u64,
        verified: problem.is_empty(),
        latencies_us: latencies,
        problem,
    })
}

fn failed(started: Instant, latencies: &[f32], problem: String) -> Outcome {
    Outcome {
        seconds: started.elapsed().as_secs_f64(),
        ops: latencies.len() as u64,
        latencies_us: latencies.to_vec(),
        verified: false,
        problem,
    }
}

/// The untimed check of a phase: what it leaves in the directory ("" when right).
fn check(ops: &Ops, step: &Step, names: &Names<'_>) -> OpResult<String> {
    let expect = |prefix: &str, want: usize, listed: &[String]| {
        let found = names.count(listed, prefix);
        if found == want {
            String::new()
        } else {
            format!(
                "after {}: {} holds {found} of this worker's {prefix}.* names, not {want}",
                step.phase.name(),
                step.dir
            )
        }
    };
    let items = step.items;
    Ok(match step.phase {
        Phase::Create | Phase::Stat | Phase::OpenClose | Phase::Readdir => {
            expect("f", items, &ops.list(step.dir.as_str())?)
        }
        Phase::Rename => {
            let listed = ops.list(&step.dir)?;
            format!("{}{}", expect("f", 0, &listed), expect("g", items, &listed))
        }
        Phase::Unlink => expect("g", 0, &ops.list(&step.dir)?),
        Phase::Mkdir => expect("d", items, &ops.list(&step.dir)?),
        Phase::Rmdir => expect("d", 0, &ops.list(&step.dir)?),
        Phase::TreeCreate => {
            let leaves: usize = (0..TREE_FANOUT)
                .map(|branch| ops.list(&names.branch(branch)).map(|listed| listed.len()))
                .sum::<OpResult<usize>>()?;
            if leaves == items {
                String::new()
            } else {
                format!(
                    "after tree-create: {} holds {leaves} files, not {items}",
                    names.tree()
                )
            }
        }
        Phase::TreeRemove => expect("t", 0, &ops.list(&step.dir)?),
        Phase::Ping => String::new(),
        Phase::TarX => {
            let source = step.tar.as_ref().ok_or("tar-x without an archive")?;
            tar::check_and_remove(ops, source, &names.unpacked())?
        }
    })
}

/// A worker process: the target opened last, reused while steps name it.
struct MetaWorker {
    rank: usize,
    opened: Option<(Target, Ops)>,
}

impl crate::lockstep::Worker for MetaWorker {
    type Step = Step;
    type Outcome = Outcome;

    fn prepare(&mut self, step: &Step) -> Result<(), String> {
        if self
            .opened
            .as_ref()
            .is_none_or(|(target, _)| *target != step.target)
        {
            self.opened = Some((step.target.clone(), Ops::open(&step.target)?));
        }
        Ok(())
    }

    fn run(&mut self, step: &Step) -> Outcome {
        let ops = &self.opened.as_ref().expect("prepared").1;
        run_step(ops, step, self.rank).unwrap_or_else(|problem| Outcome {
            seconds: 0.0,
            ops: 0,
            latencies_us: Vec::new(),
            verified: false,
            problem,
        })
    }
}

/// The hidden `meta-worker` command: serves steps until its standard input closes.
pub fn run(args: &WorkerArgs) -> Result<(), String> {
    let mut worker = MetaWorker {
        rank: args.rank,
        opened: None,
    };
    crate::lockstep::serve("meta", args.rank, &mut worker)
}

/// The worker processes of a run.
pub fn spawn(count: usize) -> Result<crate::lockstep::Lockstep, String> {
    crate::lockstep::Lockstep::spawn("meta", "meta-worker", count)
}
