//! One kernel TCP flow, bulk, from a scenario's sender to its first
//! receiver: what one TCP-friendly flow gets on that path, the yardstick of
//! scenarios that ask for it (`tcp_reference = true` in the file suite and
//! in the live race). Its congestion control is CUBIC, set on the socket:
//! the machine's default may be another (BBR here), and namespaces only
//! offer what the host's sysctl allows.

use super::scenario::{receiver_name, SENDER};
use crate::emu::LinkReport;
use crate::error::LabError;
use crate::lab::Lab;
use crate::tcp::{TcpSink, TcpSource};
use fanout_io::Clock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The reference flow's port at the receiver.
const REFERENCE_PORT: u16 = 5002;

/// The reference flow's congestion control.
pub const REFERENCE_CC: &str = "cubic";

/// How long the file suite's reference flow runs: long enough for a
/// loss-limited CUBIC flow on a 20 ms path to go through hundreds of loss
/// epochs.
pub const FILE_SUITE_REFERENCE: Duration = Duration::from_secs(60);

/// Runs the reference flow over `lab` for `duration` (or until `cancel`):
/// its goodput, Mbit/s.
pub fn one_flow(
    lab: &Lab,
    duration: Duration,
    cancel: Option<&AtomicBool>,
) -> Result<f64, LabError> {
    let to = receiver_name(0);
    let (Some(src), Some(dst)) = (lab.host(SENDER), lab.host(&to)) else {
        return Err(LabError::io(
            "scenario hosts missing",
            std::io::ErrorKind::NotFound.into(),
        ));
    };
    let sink = TcpSink::start(dst, REFERENCE_PORT)?;
    let source = TcpSource::start_with(src, sink.addr(), Some(REFERENCE_CC))?;
    let clock = Clock::new();
    let start = clock.now();
    while clock.now() < start + duration {
        if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(LabError::io(
                "cancelled",
                std::io::ErrorKind::Interrupted.into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let secs = clock.now().saturating_duration_since(start).as_secs_f64();
    let bytes = sink.bytes();
    // The source first, so the sink sees a clean end.
    drop(source);
    drop(sink);
    Ok(bytes as f64 * 8.0 / secs / 1e6)
}

/// The loss the network drew on `links` toward `hosts`, as a share of the
/// packets offered to them.
pub fn loss_toward(links: &[LinkReport], hosts: &[String]) -> f64 {
    let (mut lost, mut offered) = (0u64, 0u64);
    for l in links.iter().filter(|l| hosts.contains(&l.to)) {
        lost += l.drops.get("random_loss").copied().unwrap_or(0);
        offered += l.offered_packets;
    }
    lost as f64 / offered.max(1) as f64
}
