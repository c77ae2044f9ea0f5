//! CUBIC (RFC 9438). PLACEHOLDER — being written.
use super::{AckSample, CongestionController};
use crate::time::Instant;

/// Cubic controller.
#[derive(Debug)]
pub struct Cubic { mss: u64, cwnd: u64, ssthresh: u64 }
impl Cubic {
    /// New controller.
    pub fn new(mss: u64) -> Self { Cubic { mss, cwnd: mss * super::INITIAL_WINDOW_SEGMENTS, ssthresh: u64::MAX } }
}
impl CongestionController for Cubic {
    fn name(&self) -> &'static str { "cubic" }
    fn on_ack(&mut self, _now: Instant, ack: AckSample) {
        if self.cwnd < self.ssthresh { self.cwnd += ack.acked_bytes.min(self.mss); } else { self.cwnd += (self.mss * ack.acked_bytes / self.cwnd).max(1); }
    }
    fn on_congestion_event(&mut self, _now: Instant, flight: u64) { self.ssthresh = (flight / 2).max(2 * self.mss); self.cwnd = self.ssthresh; }
    fn on_recovery_end(&mut self, _now: Instant) {}
    fn on_retransmission_timeout(&mut self, _now: Instant, flight: u64) { self.ssthresh = (flight / 2).max(2 * self.mss); self.cwnd = self.mss; }
    fn cwnd(&self) -> u64 { self.cwnd }
    fn ssthresh(&self) -> u64 { self.ssthresh }
}
