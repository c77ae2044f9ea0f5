//! Congestion control behind one trait: NewReno (RFC 5681, RFC 6582) and
//! CUBIC (RFC 9438).
//!
//! The transport owns loss detection and the recovery episode (RFC 6675
//! scoreboard, recovery point); the controller only turns events into a
//! congestion window. All windows are in bytes.

mod cubic;
mod newreno;

pub use cubic::Cubic;
pub use newreno::NewReno;

use crate::time::Instant;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// RFC 5681 §3.1 / RFC 6928: initial window of 10 segments.
pub const INITIAL_WINDOW_SEGMENTS: u64 = 10;

/// What an acknowledgement tells the controller.
#[derive(Debug, Clone, Copy)]
pub struct AckSample {
    /// Bytes newly acknowledged (cumulatively or by SACK).
    pub acked_bytes: u64,
    /// Smoothed RTT of the path.
    pub srtt: Duration,
    /// Minimum RTT observed on the path.
    pub min_rtt: Duration,
    /// True if the sender was limited by cwnd (not by the application or the
    /// receive window) when the acknowledged data was sent; controllers must
    /// not grow cwnd otherwise (RFC 7661 spirit, RFC 9438 §4.2 cond. 2).
    pub cwnd_limited: bool,
}

/// A congestion controller. All quantities in bytes.
pub trait CongestionController: fmt::Debug + Send {
    /// Short name ("newreno", "cubic").
    fn name(&self) -> &'static str;
    /// New data acknowledged outside a recovery episode.
    fn on_ack(&mut self, now: Instant, ack: AckSample);
    /// Loss detected by duplicate ACKs / SACK: a recovery episode begins.
    /// Called once per episode (RFC 6582 §3.2 step 2; RFC 9438 §4.6).
    /// `flight_size` is the data outstanding when the loss was detected.
    fn on_congestion_event(&mut self, now: Instant, flight_size: u64);
    /// The recovery episode ended (cumulative ACK reached the recovery point).
    fn on_recovery_end(&mut self, now: Instant);
    /// The retransmission timer fired (RFC 5681 §3.1 eq. 4: ssthresh =
    /// max(FlightSize/2, 2·SMSS); cwnd = 1 SMSS).
    fn on_retransmission_timeout(&mut self, now: Instant, flight_size: u64);
    /// Takes over a window of `cwnd` bytes that another controller ran up
    /// to now (a session's own window continuing from its members' shared
    /// slow start), still in slow start, at least the loss window.
    fn take_over(&mut self, cwnd: u64);
    /// A copy of its state, to go back to if the congestion event about to
    /// be signalled proves spurious (RFC 4015's response to a spurious
    /// fast retransmit; Linux's undo).
    fn snapshot(&self) -> Box<dyn CongestionController>;
    /// The congestion window.
    fn cwnd(&self) -> u64;
    /// The slow-start threshold (`u64::MAX` before the first loss).
    fn ssthresh(&self) -> u64;
    /// True while cwnd < ssthresh.
    fn in_slow_start(&self) -> bool {
        self.cwnd() < self.ssthresh()
    }
}

/// Which controller to build; parsed from configuration and CLI flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CcAlgorithm {
    /// RFC 5681 + RFC 6582.
    NewReno,
    /// RFC 9438.
    #[default]
    Cubic,
}

impl CcAlgorithm {
    /// A fresh controller for segments of `mss` bytes.
    pub fn build(self, mss: u64) -> Box<dyn CongestionController> {
        match self {
            CcAlgorithm::NewReno => Box::new(NewReno::new(mss)),
            CcAlgorithm::Cubic => Box::new(Cubic::new(mss)),
        }
    }

    /// The name accepted by [`FromStr`].
    pub fn name(self) -> &'static str {
        match self {
            CcAlgorithm::NewReno => "newreno",
            CcAlgorithm::Cubic => "cubic",
        }
    }
}

impl FromStr for CcAlgorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "newreno" | "reno" => Ok(CcAlgorithm::NewReno),
            "cubic" => Ok(CcAlgorithm::Cubic),
            other => Err(format!(
                "unknown congestion control `{other}` (expected newreno or cubic)"
            )),
        }
    }
}

impl fmt::Display for CcAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
