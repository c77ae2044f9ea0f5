//! ASMP (ASMP §3), the receiver's side: at every RTCP report it turns what
//! it measured since the previous one into a rate.
//!
//! - [`LossHistory`]: the loss rate of the last 8 report intervals,
//!   weighted 1, 1, 1, 1, 0.8, 0.6, 0.4, 0.2 (§3.3);
//! - [`RttEstimate`]: the round trip from one-way delays, calibrated by the
//!   sender's own measurement of it (§3.5);
//! - [`CongestionIndicator`]: cumulative jitter's short-run average against
//!   its long-run one (§3.7);
//! - [`rate`]: the TCP throughput equation ASMP uses, its +1 packet per
//!   RTT without loss, and the smoothing (§3.6);
//! - [`ReceiverEstimator`]: the four together, as a receiver runs them;
//! - [`SenderState`]: the sender's round trips to its receivers and the
//!   least of their rates (§3.1);
//! - [`AsmpSender`], [`AsmpReceiver`]: the two behind the controllers'
//!   interface ([`crate::control`]);
//! - [`suppression`]: truncated exponential report timers and the 2% rule
//!   for large groups (§3.8).

mod congestion;
mod control;
mod loss_history;
pub mod rate;
mod receiver;
mod rtt;
mod sender;
pub mod suppression;

pub use congestion::{CongestionIndicator, NetworkState};
pub use control::{AsmpReceiver, AsmpSender, SUPPRESS_ABOVE};
pub use loss_history::{LossHistory, LOSS_WEIGHTS};
pub use receiver::{
    IntervalReport, ReceiverEstimator, Variant, EVENT_SPAN, INITIAL_RATE, LOSS_INTERVALS,
    OVERRUN_LOSS, OVERRUN_PACKETS,
};
pub use rtt::{RttEstimate, RTT_GAIN};
pub use sender::{SenderState, MAX_RECEIVERS};
