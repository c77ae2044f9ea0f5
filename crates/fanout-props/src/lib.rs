//! Hostile-input properties, as plain functions of fuzz bytes: the
//! cargo-fuzz targets (`fuzz/`) call them, and this crate's tests run them
//! as proptests on stable, so both always check the same thing.
//!
//! * [`unicast`] — the header and frame decoders, and the two ends of a
//!   session of one, fed arbitrary datagrams.
//! * [`protected`] — a protected session's sender and joiner fed arbitrary
//!   bytes as handshakes and sealed datagrams.
//! * [`manifest`] — the file protocol's manifest and intake.
//! * [`overlay`] — an overlay host fed a hostile child's bytes and a
//!   hostile parent's stream.
//! * [`drive_session`] — a multicast [`SessionSender`] with two or three
//!   honest members (real [`Receiver::join`] engines over an in-memory
//!   network), attacked by strangers.
//! * [`drive_merger`] — an MCTCP [`Merger`] between a multicast session
//!   sender and two or three honest receivers reporting through it,
//!   attacked by strangers.
//! * [`drive_catch_up`] — a catch-up server (`fanout_app::catch_up`) with
//!   honest members and an honest late joiner fetching its prefix,
//!   attacked by strangers (catch-up requests among them).
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
pub mod catch_up;
pub mod manifest;
pub mod media;
pub mod merger;
pub mod model;
pub mod net;
pub mod overlay;
pub mod protected;
pub mod script;
pub mod session;
pub mod unicast;

pub use catch_up::drive_catch_up;
pub use merger::drive_merger;
pub use session::drive_session;

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
}
