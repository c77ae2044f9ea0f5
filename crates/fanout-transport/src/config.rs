//! Transport configuration with the defaults a file transfer wants.

use crate::wire::HEADER_LEN;
use fanout_core::ack_policy::AckPolicy;
use fanout_core::cc::CcAlgorithm;
use fanout_core::rtt::RtoConfig;
use std::net::SocketAddr;
use std::time::Duration;

/// Largest datagram by default: 1500-byte MTU − 40 (IPv6) − 8 (UDP).
pub const DEFAULT_MAX_DATAGRAM: usize = 1452;
/// DATA frame overhead besides its length field: type (1) + offset (8, the
/// longest varint) + timestamp (4).
pub const DATA_FRAME_FIXED_OVERHEAD: usize = 13;

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
    /// Sending time the pacer's bucket holds at high rates (it never holds
    /// fewer than 10 segments; [`fanout_core::pacing::Pacer::with_burst_time`]).
    /// A runtime that may wake up to `x` late for a pacing deadline needs
    /// more than `x` here, or it loses sending credit on every late wake-up.
    pub pacing_burst: Duration,
    /// A cap on the sending rate, in stream bytes per second (new data and
    /// repairs, as the pacer counts them; headers not included), on top of
    /// congestion control (which may only send slower); pacing is on
    /// whenever it is set. A unicast fan-out caps each receiver's copy.
    /// `None`: congestion control alone.
    pub max_rate: Option<u64>,
    /// Close the session after this long without hearing the peer.
    pub idle_timeout: Duration,
    /// Give up connecting after this long.
    pub handshake_timeout: Duration,
    /// After the whole stream arrived, a receiver keeps acknowledging
    /// retransmissions this long unless the sender's CLOSE comes first
    /// (TCP's TIME-WAIT, shortened).
    pub linger: Duration,
    /// A joining receiver ([`crate::Receiver::join`]) sends its CONNECT and
    /// its feedback here, to an MCTCP merger (its parent in an ACK
    /// aggregation tree, [`crate::merge`]), while still taking DATA and
    /// control from the session sender's address it joined (multicast) and
    /// from the merger (relayed control and repairs). `None`: everything
    /// goes to the sender. Ignored by senders and listeners.
    pub feedback_via: Option<SocketAddr>,
    /// Ancestors to re-attach to, in order, when the merger named by
    /// `feedback_via` (or a later one of this list, except the last) falls
    /// silent for `parent_silence` — typically that merger's parent, ...,
    /// then the session sender (`crate::reattach`). Empty: the merger is
    /// never abandoned (the idle timeout ends the session instead).
    pub feedback_fallback: Vec<SocketAddr>,
    /// A feedback parent that is not the last of `feedback_fallback` and
    /// sends nothing (mergers send keep-alives) for this long is taken for
    /// dead.
    pub parent_silence: Duration,
    /// Keys that protect every datagram (`crate::protection`); `None`: an
    /// unprotected session (`docs/security.md`). Session senders and their
    /// direct members only so far: mergers refuse it.
    pub protection: Option<crate::protection::Protection>,
    /// A real-time receiver ([`crate::realtime`]): it takes SKIPs from its
    /// sender — bytes that will never come — and reads whole messages
    /// ([`crate::Receiver::read_message`]). Off: a SKIP is refused
    /// (`unexpected_frame`), so a reliable stream never gets a hole.
    pub realtime: bool,
    /// A real-time receiver's latency budget (TCP-RTM): a hole is skipped
    /// by the receiver itself once the first data behind it has waited
    /// this long, so that data is delivered in time even if the sender's
    /// SKIP or repair does not come. `None`: only the sender skips.
    pub realtime_latency: Option<Duration>,
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
            pacing_burst: fanout_core::pacing::DEFAULT_BURST_TIME,
            max_rate: None,
            idle_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            linger: Duration::from_secs(2),
            feedback_via: None,
            feedback_fallback: Vec::new(),
            parent_silence: crate::reattach::DEFAULT_PARENT_SILENCE,
            protection: None,
            realtime: false,
            realtime_latency: None,
        }
    }
}

impl TransportConfig {
    /// Largest DATA payload (the MSS), in bytes: what is left of
    /// `max_datagram` after the header, the DATA frame's fields and, in a
    /// protected session, the AEAD tag.
    pub fn max_payload(&self) -> u64 {
        let tag = if self.protection.is_some() {
            crate::protection::TAG_LEN
        } else {
            0
        };
        let room = self
            .max_datagram
            .saturating_sub(HEADER_LEN + DATA_FRAME_FIXED_OVERHEAD + tag);
        // The length varint takes 2 bytes below 16 KiB, 4 up to 1 GiB.
        let len_field = fanout_core::codec::varint_size(room as u64);
        room.saturating_sub(len_field).max(64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_data_datagram_fits_max_datagram() {
        for max_datagram in [256, 1452, 9000, 16_500, 65_000] {
            let c = TransportConfig {
                max_datagram,
                ..TransportConfig::default()
            };
            let payload = vec![0u8; c.max_payload() as usize];
            let mut out = Vec::new();
            crate::wire::Header {
                flags: Default::default(),
                session_id: 1,
                packet_number: 1,
            }
            .encode(&mut out);
            crate::wire::Frame::Data(crate::wire::DataFrame {
                offset: fanout_core::codec::VARINT_MAX - payload.len() as u64,
                timestamp: crate::wire::WireTimestamp(0),
                fin: false,
                message_end: false,
                payload: &payload,
            })
            .encode(&mut out);
            assert!(out.len() <= max_datagram, "{} > {max_datagram}", out.len());
            assert!(
                out.len() + 2 > max_datagram,
                "payload wastes room at {max_datagram}"
            );
        }
    }
}
