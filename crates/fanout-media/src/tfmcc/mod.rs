//! TFMCC, TCP-Friendly Multicast Congestion Control (RFC 4654), on RTP:
//! the baseline ASMP's authors compare it with (ASMP §4), built on the
//! same engines so both run under the same simulator and runtime.
//!
//! - [`LossEvents`]: the loss event rate as TFRC measures it (RFC 5348
//!   §5);
//! - [`TfmccReceiver`]: round trip, receive rate and the TCP-friendly
//!   rate; feedback with timers and suppression (RFC 4654 §4);
//! - [`TfmccSender`]: the current limiting receiver, feedback rounds,
//!   slowstart and the echoes receivers measure round trips by (§3).
//!
//! Data packets carry TFMCC's fields in an RTP header extension, feedback
//! goes in APP parts ([`fanout_rtp::tfmcc`]).

mod loss_events;
mod receiver;
mod sender;

pub use loss_events::{first_interval, LossEvents};
pub use receiver::TfmccReceiver;
pub use sender::TfmccSender;

pub use crate::control::clock_us;

use std::time::Duration;

/// The round trip assumed before any is measured (RFC 4654 §3.2: the
/// largest round trip starts at 500 ms).
pub const INITIAL_RTT: Duration = Duration::from_millis(500);
/// A feedback round lasts this many largest round trips (RFC 4654 §3.4
/// leaves the multiple open; TFMCC's ns-2 code uses 6).
pub const ROUND_RTTS: f64 = 6.0;
/// Each round the largest round trip falls to at least this share of
/// itself unless a larger one is reported (RFC 4654 §3.2).
pub const MAX_RTT_DECAY: f64 = 0.9;
/// Weight of a new round-trip sample at a receiver that is not the CLR
/// (RFC 4654 §4.2.1).
pub const RTT_GAIN: f64 = 0.5;
/// Weight of a new round-trip sample at the CLR, which measures often.
pub const CLR_RTT_GAIN: f64 = 0.05;
/// A receiver's feedback is suppressed by a reported rate less than this
/// share above its own (RFC 4654 §4.5).
pub const SUPPRESSION_MARGIN: f64 = 0.1;
/// Receivers the feedback timer's spread is sized for (RFC 4654 §4.5).
pub const TIMER_RECEIVERS: f64 = 10_000.0;
/// The CLR silent this many of its round trips halves the rate (RFC 4654
/// §3.3).
pub const CLR_QUIET_RTTS: f64 = 4.0;
/// The CLR silent this many round trips is taken to be gone (RFC 4654
/// §3.3); nor is the rate halved for a CLR chosen more recently.
pub const CLR_SILENT_RTTS: f64 = 10.0;

/// A receiver's feedback delay in a round (RFC 4654 §4.5): with `x`
/// uniform on (0, 1], `max(T·(1 + log_N x), 0)` with `T` the feedback
/// delay (a round less one largest round trip, so feedback arrives within
/// the round) and `N` = [`TIMER_RECEIVERS`]: most wait long, few answer
/// early.
pub fn feedback_timer(max_rtt: Duration, x: f64) -> Duration {
    let t = max_rtt.as_secs_f64() * (ROUND_RTTS - 1.0);
    let z = 1.0 + x.max(f64::MIN_POSITIVE).ln() / TIMER_RECEIVERS.ln();
    Duration::from_secs_f64((t * z).max(0.0))
}
