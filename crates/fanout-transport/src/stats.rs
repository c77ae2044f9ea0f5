//! Plain counters per engine.

use fanout_core::stats::DropCounters;

/// Sender counters.
#[derive(Debug, Clone, Default)]
pub struct SenderStats {
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Stream payload bytes sent, retransmissions included.
    pub payload_bytes_sent: u64,
    /// Stream payload bytes sent again.
    pub retransmitted_bytes: u64,
    /// ACK frames processed.
    pub acks_received: u64,
    /// Loss recovery episodes (fast retransmit / RACK).
    pub recovery_episodes: u64,
    /// Retransmission timeouts.
    pub rto_events: u64,
    /// Input refused, by reason.
    pub drops: DropCounters,
}

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
    /// silent ([`crate::reattach`]).
    pub reattaches: u64,
    /// Input refused, by reason.
    pub drops: DropCounters,
}
