//! A progress bar for the long benches: on standard error when it is a terminal, hidden
//! otherwise (so `--json` output, logs and CI stay clean).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// The steps of one bench run; cleared when dropped.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `steps` steps for `bench`.
    pub fn new(bench: &str, steps: u64) -> Self {
        let bar = if std::io::stderr().is_terminal() {
            ProgressBar::new(steps)
        } else {
            ProgressBar::hidden()
        };
        if let Ok(style) =
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(bench.to_owned());
        Self { bar }
    }

    /// One step done; `message` says what comes next.
    pub fn step(&self, message: &str) {
        self.bar.set_message(message.to_owned());
        self.bar.inc(1);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
