//! The contract every protocol engine fulfils, and the one `drain` loop both
//! drivers (real runtime and simulator) use to pump it.
//!
//! After quinn-proto's `handle_*` / `poll_*` split: inputs are datagrams and
//! timer expiries stamped with `now`; outputs are datagrams and the next
//! deadline. Application-level events are engine-specific and polled from the
//! concrete type.

use crate::time::Instant;
use std::net::SocketAddr;

/// Where a datagram produced by an engine goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Destination: a unicast peer or a multicast group.
    pub destination: SocketAddr,
}

/// A sans-IO protocol state machine.
pub trait Engine {
    /// One datagram arrived from `from` at `now`. Malformed input is counted
    /// and dropped, never a panic.
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]);

    /// Writes the next datagram to send into `buf` (which the caller has
    /// cleared) and says where it goes; `None` when nothing may be sent now
    /// (nothing queued, or window or pacer closed until [`Engine::poll_timeout`]).
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit>;

    /// The earliest instant at which [`Engine::handle_timeout`] must be
    /// called, or `None` when no timer is armed.
    fn poll_timeout(&self) -> Option<Instant>;

    /// Processes every timer that expired at or before `now`.
    fn handle_timeout(&mut self, now: Instant);

    /// How late a runtime may react — read arrived input, or wake for
    /// [`Engine::poll_timeout`] — without lengthening the engine's control
    /// loop by more than it accepts (e.g. a share of its round-trip time).
    /// A runtime that batches wake-ups to save CPU (timer slack, input
    /// coalescing) delays by no more than this. `None` (the default): no
    /// bound of the engine's own.
    fn max_wake_delay(&self) -> Option<std::time::Duration> {
        None
    }
}

/// Runs expired timers, then emits up to `budget` datagrams through `send`,
/// and returns the next deadline. Both drivers call exactly this, so what the
/// simulator tests is what the runtime ships.
pub fn drain<E: Engine + ?Sized>(
    engine: &mut E,
    now: Instant,
    buf: &mut Vec<u8>,
    budget: usize,
    mut send: impl FnMut(Transmit, &[u8]),
) -> Option<Instant> {
    if engine.poll_timeout().is_some_and(|t| t <= now) {
        engine.handle_timeout(now);
    }
    for _ in 0..budget {
        buf.clear();
        match engine.poll_transmit(now, buf) {
            Some(t) => send(t, buf),
            None => break,
        }
    }
    engine.poll_timeout()
}
