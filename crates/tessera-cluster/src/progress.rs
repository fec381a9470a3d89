//! Progress bars (`indicatif`) for `put`, `get` and long experiments: drawn on standard error
//! only when it is a terminal, hidden otherwise, so pipes, logs and tests see plain output.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Standard error when it is a terminal, else nowhere.
fn draw_target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}

/// A bar for a copy of `total` bytes (a spinner with a byte count when the total is not
/// known, as for a `put` from a pipe), labelled `what`.
pub fn copy(total: Option<u64>, what: &str) -> ProgressBar {
    let target = draw_target();
    let bar = match total {
        Some(total) => ProgressBar::with_draw_target(Some(total), target).with_style(
            ProgressStyle::with_template(
                "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        ),
        None => ProgressBar::with_draw_target(None, target).with_style(
            ProgressStyle::with_template("{msg} {spinner} {binary_bytes} {binary_bytes_per_sec}")
                .expect("a valid template"),
        ),
    };
    bar.set_message(what.to_owned());
    bar
}

/// The steps of one experiment's run (`tessera-bench`); cleared when dropped.
pub struct Steps {
    bar: ProgressBar,
}

impl Steps {
    /// A bar of `steps` steps for `bench`.
    pub fn new(bench: &str, steps: u64) -> Self {
        let bar = ProgressBar::with_draw_target(Some(steps), draw_target()).with_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(bench.to_owned());
        Self { bar }
    }

    /// One step done; `message` says what comes next.
    pub fn step(&self, message: &str) {
        self.bar.set_message(message.to_owned());
        self.bar.inc(1);
    }
}

impl Drop for Steps {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
