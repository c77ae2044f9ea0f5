//! Session-level hostile-input properties, as plain functions of fuzz
//! bytes: the cargo-fuzz targets `session_input` and `merger_input`
//! (`fuzz/`) call them, and this crate's tests run them as proptests on
//! stable, so both always check the same thing.
//!
//! * [`drive_session`] — a multicast [`SessionSender`] with two or three
//!   honest members (real [`Receiver::join`] engines over an in-memory
//!   network), attacked by strangers.
//! * [`drive_merger`] — an MCTCP [`Merger`] between a multicast session
//!   sender and two or three honest receivers reporting through it,
//!   attacked by strangers.
//!
//! A script ([`script`]) is a configuration byte and steps: attacker
//! datagrams ([`attack`]: arbitrary bytes, or well-formed frames with
//! plausible values behind a header of the session), clock advances,
//! application writes and the end of the stream, and drops of datagrams on
//! their way to honest peers (bounded, [`net::MAX_DROPS_PER_PEER`]).
//! Attackers send from their own addresses only: spoofing an honest peer
//! is out of scope.
//!
//! After every step nothing panicked, every peer-controlled collection
//! observable through the engines' public API is within its cap, counters
//! agree with what the driver delivered and drained, and every DATA and
//! REPAIR on the wire carries the written bytes ([`model`]). At the end the
//! attackers stop, the application ends its stream, the honest network
//! runs for [`TAIL_TIME`], and every honest peer must have read exactly
//! the written stream — unless it was evicted for a reason the script
//! explains ([`eviction_justified`]).
//!
//! Virtual time only; the sole randomness is the input.
//!
//! [`SessionSender`]: fanout_transport::session::SessionSender
//! [`Receiver::join`]: fanout_transport::Receiver::join
//! [`Merger`]: fanout_transport::merge::Merger

pub mod attack;
pub mod merger;
pub mod model;
pub mod net;
pub mod script;
pub mod session;

pub use merger::{drive_merger, drive_merger_avoiding};
pub use session::{drive_session, drive_session_avoiding};

use fanout_transport::TransportConfig;
use std::time::Duration;

/// One-way delay of every hop of the honest network (a 60 ms RTT).
pub const ONE_WAY: Duration = Duration::from_millis(30);
/// Virtual time the attack may last; later steps happen at its end. Below
/// the honest peers' idle timeout, so an application pausing its writes
/// for the whole attack does not idle its receivers out.
pub const ATTACK_TIME: Duration = Duration::from_secs(20);
/// How long the honest network runs after the attack to finish.
pub const TAIL_TIME: Duration = Duration::from_secs(60);

/// The honest peers' transport: small buffers (64 KiB), the default idle
/// timeout (30 s, above [`ATTACK_TIME`]), short handshake and linger.
pub fn honest_config() -> TransportConfig {
    TransportConfig {
        send_buffer_bytes: 64 << 10,
        recv_window_bytes: 64 << 10,
        handshake_timeout: Duration::from_secs(2),
        linger: Duration::from_millis(500),
        ..TransportConfig::default()
    }
}

/// True if an honest peer that lost `dropped` datagrams to the script may
/// have been evicted for `reason`: only datagrams the script dropped can
/// make an honest peer stall, exhaust its retransmission timeouts or look
/// like an RTT outlier. Anything else (a full session, released data,
/// expiry, a reset it never sent) is the attackers' doing.
pub fn eviction_justified(reason: &str, dropped: u32) -> bool {
    dropped > 0
        && ["stalled", "unreachable", "outlier"]
            .iter()
            .any(|p| reason.starts_with(p))
}

/// Known findings the attackers may be told to avoid, so that fuzzing and
/// the proptests explore past them until they are fixed: an attacker
/// datagram that could trigger an avoided finding is not sent
/// ([`Avoid::allows`]). Each finding has a deterministic, ignored
/// regression test in `tests/findings.rs`; drop its field here once the
/// engine is fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Avoid {
    /// CONNECTs and ACKs offering a window below two segments
    /// (`a_member_with_a_closed_window_freezes_the_session`).
    pub closed_windows: bool,
    /// ACKs echoing a timestamp no receiver can have seen yet: less than
    /// one honest round trip old, or from before the session began (the
    /// future, modulo 2^32)
    /// (`strangers_with_fresh_echoes_evict_honest_members_as_outliers`,
    /// `an_echo_from_the_future_stops_the_pacer`).
    pub forged_echoes: bool,
    /// ACKs acknowledging, and resume CONNECTs claiming, offsets the
    /// sender has not sent
    /// (`a_child_acknowledging_unsent_data_gets_its_siblings_evicted`,
    /// `a_child_resuming_beyond_the_sent_data_gets_its_siblings_evicted`,
    /// `a_child_acknowledging_unsent_data_sets_late_joiners_past_the_stream`).
    pub claims_beyond_sent: bool,
    /// The late honest receiver of `drive_merger` (step kind 15)
    /// (`a_late_joiner_after_a_silent_child_left_is_evicted`).
    pub late_joiners: bool,
}

impl Avoid {
    /// Avoid nothing: the full properties (the fuzz targets).
    pub const NOTHING: Avoid = Avoid {
        closed_windows: false,
        forged_echoes: false,
        claims_beyond_sent: false,
        late_joiners: false,
    };
    /// Avoid every known finding (the proptests).
    pub const KNOWN_FINDINGS: Avoid = Avoid {
        closed_windows: true,
        forged_echoes: true,
        claims_beyond_sent: true,
        late_joiners: true,
    };

    /// True if an attacker who knows `v` may send `datagram`.
    pub fn allows(&self, datagram: &[u8], v: &attack::View) -> bool {
        use fanout_transport::wire::{decode_frames, Frame, Header};
        let Ok((_, body)) = Header::decode(datagram) else {
            return true;
        };
        let fresh = (2 * ONE_WAY).as_micros() as u32;
        decode_frames(body).map_while(Result::ok).all(|f| match f {
            Frame::Connect(c) => {
                !(self.closed_windows && c.window < 2 * v.mss
                    || self.claims_beyond_sent && c.start_offset > v.snd_nxt)
            }
            Frame::Ack(a) => {
                let age = attack::wire_timestamp(v.now).wrapping_sub(a.timestamp_echo);
                let forged = age < fresh || u64::from(age) > v.now.as_nanos() / 1_000;
                let unsent = a.cumulative > v.snd_nxt || a.sack.iter().any(|r| r.end > v.snd_nxt);
                !(self.closed_windows && a.window < 2 * v.mss
                    || self.forged_echoes && forged
                    || self.claims_beyond_sent && unsent)
            }
            _ => true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_drops_justify_an_eviction() {
        let stall = "stalled: no progress within the stall timeout";
        assert!(eviction_justified(stall, 1));
        assert!(!eviction_justified(stall, 0));
        assert!(eviction_justified("stalled", 2), "a merger's child stall");
        assert!(!eviction_justified("session full", 5));
        assert!(!eviction_justified("fell behind the quorum", 5));
    }

    #[test]
    fn avoided_findings_are_not_sent() {
        use fanout_core::time::Instant;
        use fanout_transport::wire::{AckFrame, ConnectFrame, Frame, Header, HeaderFlags};
        let v = attack::View {
            now: Instant::ZERO + Duration::from_secs(2),
            session: 1,
            snd_nxt: 10_000,
            written: 10_000,
            mss: 1000,
            honest: Vec::new(),
        };
        let datagram = |f: Frame<'_>| {
            let mut d = Vec::new();
            Header {
                flags: HeaderFlags::default(),
                session_id: 1,
                packet_number: 0,
            }
            .encode(&mut d);
            f.encode(&mut d);
            d
        };
        let connect = |window, start_offset| {
            datagram(Frame::Connect(ConnectFrame {
                sends_data: false,
                max_payload: 1000,
                window,
                timestamp: 0,
                member_id: 0,
                start_offset,
            }))
        };
        let ack = |cumulative, age_us: u32| {
            datagram(Frame::Ack(AckFrame {
                cumulative,
                window: 1 << 20,
                timestamp_echo: attack::wire_timestamp(v.now).wrapping_sub(age_us),
                ack_delay_us: 0,
                sack: Vec::new(),
            }))
        };
        let all = Avoid::KNOWN_FINDINGS;
        assert!(all.allows(&connect(64 << 10, 0), &v));
        assert!(all.allows(&ack(5000, 100_000), &v));
        assert!(!all.allows(&connect(1999, 0), &v), "closed window");
        assert!(!all.allows(&connect(64 << 10, 10_001), &v), "resume beyond");
        assert!(!all.allows(&ack(10_001, 100_000), &v), "ack beyond");
        assert!(!all.allows(&ack(5000, 1000), &v), "fresh echo");
        assert!(
            !all.allows(&ack(5000, 3_000_000), &v),
            "echo from the future"
        );
        let none = Avoid::NOTHING;
        assert!(none.allows(&connect(0, 1 << 40), &v) && none.allows(&ack(1 << 40, 0), &v));
    }
}
