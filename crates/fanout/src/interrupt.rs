//! SIGINT (Ctrl-C) and SIGTERM as a flag the event loops poll, so a
//! command stopped by its operator tells its peers before it exits (a
//! receiver's RESET reaches the sender at once, instead of the sender
//! waiting out a stall). A second signal ends the process at once.

use crate::outcome::{exit_code, reset_code, Exit};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static WATCH: Once = Once::new();

/// Installs the handler (once per process; later calls do nothing).
pub fn watch() {
    WATCH.call_once(|| {
        let installed = ctrlc::set_handler(|| {
            if INTERRUPTED.swap(true, Ordering::SeqCst) {
                std::process::exit(i32::from(exit_code::INTERRUPTED));
            }
        });
        if let Err(e) = installed {
            tracing::warn!("cannot watch for Ctrl-C: {e}");
        }
    });
}

/// Whether SIGINT or SIGTERM arrived since [`watch`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// The error that ends an interrupted command (exit code 130), saying what
/// the peers were told.
pub fn error(told: &str) -> anyhow::Error {
    Exit {
        code: exit_code::INTERRUPTED,
        message: format!("interrupted; {told}"),
    }
    .into()
}

/// If interrupted before the whole stream arrived: resets `r` (the sender
/// learns it at once) and returns true, to end the receiving loop. A
/// stream that arrived whole is finished first (verified, renamed).
pub fn reset_if_interrupted(r: &mut fanout_transport::Receiver) -> bool {
    if !interrupted() || r.is_finished() {
        return false;
    }
    r.reset(reset_code::INTERRUPTED, "interrupted by its operator");
    true
}
