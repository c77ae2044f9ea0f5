//! PGMCC (Rizzo, "pgmcc: a TCP-friendly single-rate multicast congestion
//! control scheme", SIGCOMM 2000), on RTP: the second baseline ASMP's
//! authors compare it with (ASMP §5.2), built on the same engines so all
//! three controllers run under the same simulator and runtime.
//!
//! - [`PgmccReceiver`]: every receiver keeps a smoothed loss rate and
//!   NAKs each hole it finds; the acker ACKs every data packet with the
//!   highest number received and a bitmap of the 32 up to it;
//! - [`PgmccSender`]: it measures each NAKing receiver's round trip from
//!   the echo of its own clock and elects as acker the receiver with the
//!   least TCP throughput, `T ∝ 1/(RTT·√p)`, switching only for one
//!   [`SWITCH_FACTOR`] below the acker's; with the acker it runs a TCP
//!   window ([`Window`]).
//!
//! Data packets carry the packet number, the sender's clock and the acker
//! in an RTP header extension; ACKs and NAKs go in APP parts
//! ([`fanout_rtp::pgmcc`]). PGM's repairs are not part of it: a media
//! stream does not resend, and NAKs only feed the election.

mod receiver;
mod sender;
mod window;

pub use receiver::PgmccReceiver;
pub use sender::PgmccSender;
pub use window::Window;

use std::time::Duration;

/// Weight of each packet's loss sample (1 lost, 0 received) in a
/// receiver's smoothed loss rate (pgmcc §3.2: a low-pass filter of
/// constant `c_p` ≈ 500/65536, a memory of ~130 packets).
pub const LOSS_GAIN: f64 = 500.0 / 65536.0;
/// A NAKing receiver becomes the acker when its throughput is below this
/// share of the acker's (pgmcc §3.3: hysteresis against flapping
/// between receivers of nearly the same throughput).
pub const SWITCH_FACTOR: f64 = 0.75;
/// A packet is taken as lost once this many later ones were ACKed (as
/// TCP's three duplicate ACKs).
pub const DUPLICATE_THRESHOLD: u32 = 3;
/// The least retransmission timeout (RFC 6298 §2.4).
pub const MIN_TIMEOUT: Duration = Duration::from_secs(1);
/// Timeouts in a row after which the acker is taken to be gone.
pub const ACKER_TIMEOUTS: u32 = 3;

/// The TCP throughput the election compares (pgmcc §3.3), relative:
/// `1/(RTT·√p)`; unbounded for a receiver that lost nothing.
pub fn relative_throughput(rtt: f64, loss: f64) -> f64 {
    if loss <= 0.0 || rtt <= 0.0 {
        f64::INFINITY
    } else {
        1.0 / (rtt * loss.sqrt())
    }
}
