//! Progress bars (`indicatif`) for `put`, `get` and long experiments: drawn on standard error
//! only when it is a terminal, hidden otherwise, so pipes, logs and tests see plain output.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar for a copy of `total` bytes (a spinner with a byte count when the total is not
/// known, as for a `put` from a pipe), labelled `what`.
pub fn copy(total: Option<u64>, what: &str) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
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
