//! Transport configuration with the defaults a file transfer wants.

use crate::wire::HEADER_LEN;
use fanout_core::ack_policy::AckPolicy;
use fanout_core::cc::CcAlgorithm;
use fanout_core::rtt::RtoConfig;
use std::time::Duration;

/// Largest datagram by default: 1500-byte MTU − 40 (IPv6) − 8 (UDP).
pub const DEFAULT_MAX_DATAGRAM: usize = 1452;
/// DATA frame overhead at most: type (1) + offset (8) + timestamp (4) + length (2).
pub const DATA_FRAME_OVERHEAD: usize = 15;

/// Settings shared by sender and receiver.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// Largest UDP payload sent, in bytes.
    pub max_datagram: usize,
    /// Send buffer (bytes written, not yet acknowledged).
    pub send_buffer_bytes: usize,
    /// Receive window / reassembly buffer, in bytes.
    pub recv_window_bytes: usize,
    /// Congestion controller.
    pub cc: CcAlgorithm,
    /// Retransmission timer bounds.
    pub rto: RtoConfig,
    /// Receiver acknowledgement schedule.
    pub ack: AckPolicy,
    /// Pace transmissions at gain · cwnd / srtt (on by default).
    pub pacing: bool,
    /// Close the session after this long without hearing the peer.
    pub idle_timeout: Duration,
    /// Give up connecting after this long.
    pub handshake_timeout: Duration,
    /// After the whole stream arrived, a receiver keeps acknowledging
    /// retransmissions this long unless the sender's CLOSE comes first
    /// (TCP's TIME-WAIT, shortened).
    pub linger: Duration,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            max_datagram: DEFAULT_MAX_DATAGRAM,
            send_buffer_bytes: 8 << 20,
            recv_window_bytes: 8 << 20,
            cc: CcAlgorithm::default(),
            rto: RtoConfig::default(),
            ack: AckPolicy::default(),
            pacing: true,
            idle_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            linger: Duration::from_secs(2),
        }
    }
}

impl TransportConfig {
    /// Largest DATA payload (the MSS), in bytes.
    pub fn max_payload(&self) -> u64 {
        self.max_datagram
            .saturating_sub(HEADER_LEN + DATA_FRAME_OVERHEAD)
            .max(64) as u64
    }
}
