//! Counters of one driver.

use crate::impair::ImpairStats;

/// What a [`crate::Driver`] did. Every datagram the engine emitted is either
/// sent, dropped by the send impairment, failed (counted in `send_errors`),
/// or still `unsent`; none disappears uncounted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Datagrams the engine emitted through `drain`.
    pub datagrams_emitted: u64,
    /// Datagrams accepted by the kernel.
    pub datagrams_sent: u64,
    /// Payload bytes accepted by the kernel.
    pub bytes_sent: u64,
    /// Send syscalls made (one GSO send carries several datagrams).
    pub send_syscalls: u64,
    /// Sends refused with `WouldBlock` (socket buffer full); retried on writability.
    pub send_would_block: u64,
    /// Sends refused with `ENOBUFS`; retried after a short sleep.
    pub send_no_buffer: u64,
    /// GSO sends the kernel refused as a whole (their datagrams were then
    /// sent one by one); after the first `EIO`/`EINVAL` GSO stays off.
    pub gso_refused: u64,
    /// Datagrams given up after a hard send error (unreachable, too big, ...).
    pub send_errors: u64,
    /// Datagrams emitted but not yet sent (queued or held by impairment) at
    /// the time of the snapshot.
    pub unsent: u64,
    /// Datagrams read from the socket (before the receive impairment).
    pub datagrams_received: u64,
    /// Payload bytes read from the socket.
    pub bytes_received: u64,
    /// Receive syscalls that returned data (one may carry a batch).
    pub recv_syscalls: u64,
    /// Receive syscalls that found the socket empty (`WouldBlock`); after
    /// one, wake-ups without a readiness event skip the syscall.
    pub recv_empty: u64,
    /// Receive syscalls that failed with something other than `WouldBlock`.
    pub recv_errors: u64,
    /// Datagrams handed to the engine's `handle_datagram`.
    pub datagrams_delivered: u64,
    /// Receive-side impairment counters.
    pub impair_rx: ImpairStats,
    /// Send-side impairment counters.
    pub impair_tx: ImpairStats,
    /// Sleeps that did not wake for input ([`crate::DriverConfig::rx_coalesce`]).
    pub coalesced_waits: u64,
    /// Event-loop iterations (`Driver::step` calls); a measure of wake-ups.
    pub iterations: u64,
}
