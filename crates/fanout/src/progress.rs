//! Progress bars on a terminal, silence elsewhere.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A byte-progress bar on stderr when it is a terminal and `quiet` is off.
pub fn bytes_bar(total: u64, prefix: &str, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>8} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta} {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_prefix(prefix.to_owned());
    bar
}

/// A byte counter for a stream of unknown length (bytes, rate, elapsed) on
/// stderr when it is a terminal and `quiet` is off.
pub fn stream_bar(prefix: &str, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    }
    let bar = ProgressBar::no_length();
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>8} {spinner} {bytes} {binary_bytes_per_sec} elapsed {elapsed} {msg}",
        )
        .expect("valid template"),
    );
    bar.set_prefix(prefix.to_owned());
    bar
}
