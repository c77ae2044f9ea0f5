//! Progress bars on a terminal, silence elsewhere.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A byte-progress bar on stderr when it is a terminal and `quiet` is off.
pub fn bytes_bar(total: u64, prefix: &str, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
    }
    let bar = ProgressBar::new(total);
    moving(&bar, Some(total));
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
    moving(&bar, None);
    bar.set_prefix(prefix.to_owned());
    bar
}

/// Turns `bar` into a spinner saying what it waits for (`{msg}`), with the
/// time waited: no rate or ETA while nothing moves.
pub fn waiting(bar: &ProgressBar) {
    bar.set_style(
        ProgressStyle::with_template("{prefix:>8} {spinner} {msg} ({elapsed})")
            .expect("valid template"),
    );
}

/// Restores `bar` to the byte-progress style of [`bytes_bar`] (`total`
/// known) or [`stream_bar`], its rate and ETA counted from now.
pub fn moving(bar: &ProgressBar, total: Option<u64>) {
    let template = match total {
        Some(_) => {
            "{prefix:>8} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta} {msg}"
        }
        None => "{prefix:>8} {spinner} {bytes} {binary_bytes_per_sec} elapsed {elapsed} {msg}",
    };
    bar.set_style(
        ProgressStyle::with_template(template)
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.reset_eta();
    bar.reset_elapsed();
}

/// A styled byte-progress bar (`total` known) or stream counter that draws
/// nowhere yet: for a `MultiProgress` to adopt, so nothing is drawn
/// outside it first.
pub fn undrawn_bar(total: Option<u64>, prefix: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
    moving(&bar, total);
    bar.set_prefix(prefix.to_owned());
    bar
}
