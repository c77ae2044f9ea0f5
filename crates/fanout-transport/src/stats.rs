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
    /// Stream bytes the sender skipped (SKIP, real-time mode): never to
    /// come.
    pub skipped_bytes: u64,
    /// Stream bytes this receiver gave up itself: the data behind them had
    /// waited its latency budget (real-time mode, TCP-RTM).
    pub late_skipped_bytes: u64,
    /// Whole messages read (real-time mode).
    pub messages_read: u64,
    /// Messages dropped because some of their bytes were skipped
    /// (real-time mode).
    pub messages_dropped: u64,
    /// Messages dropped because they were complete only after the
    /// deadline the sender named for them (real-time mode).
    pub messages_late: u64,
    /// Input refused, by reason.
    pub drops: DropCounters,
}
