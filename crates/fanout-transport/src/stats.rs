//! Plain counters per engine.

use fanout_core::stats::DropCounters;

/// Receiver counters.
#[derive(Debug, Clone, Default)]
pub struct ReceiverStats {
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// ACK frames sent.
    pub acks_sent: u64,
    /// New stream bytes stored.
    pub payload_bytes_received: u64,
    /// Stream bytes received that were already held.
    pub duplicate_bytes: u64,
    /// Re-attachments to an ancestor after the feedback merger fell
    /// silent (`crate::reattach`).
    pub reattaches: u64,
    /// Input refused, by reason.
    pub drops: DropCounters,
}
