//! A read-only view of one member's control block, for displays and
//! reports (`fanout send --group`'s live table and `--json` report).

use super::MemberId;
use std::net::SocketAddr;
use std::time::Duration;

/// One member's figures at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberSnapshot {
    /// Its id in the session.
    pub id: MemberId,
    /// Its address.
    pub addr: SocketAddr,
    /// Stream offset at which its delivery started (0, or the position at
    /// which a late joiner entered).
    pub start: u64,
    /// Cumulative ACK: every stream offset below was acknowledged.
    pub cumulative: u64,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Smoothed RTT (RFC 6298).
    pub srtt: Duration,
    /// In slow start (cwnd below ssthresh).
    pub slow_start: bool,
    /// In a loss-recovery episode (RFC 6582 recovery point set).
    pub in_recovery: bool,
    /// ACKs processed.
    pub acks: u64,
    /// Loss-recovery episodes entered.
    pub recovery_episodes: u64,
    /// Retransmission timeouts, in all.
    pub rtos: u64,
    /// Bytes repaired for it (by unicast or as part of a multicast repair).
    pub repaired_bytes: u64,
}
