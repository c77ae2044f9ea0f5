//! NewReno congestion control (RFC 5681, RFC 6582, RFC 3465).
//!
//! All windows are in bytes; `SMSS` is the `mss` given to [`NewReno::new`].
//!
//! * **Initial window**: [`INITIAL_WINDOW_SEGMENTS`] · SMSS (RFC 6928,
//!   RFC 5681 §3.1).
//! * **Slow start** (RFC 5681 §3.1, eq. 2) with Appropriate Byte Counting
//!   (RFC 3465 §2.2–2.3): each ACK adds `min(acked, L)`. RFC 3465 recommends
//!   `L = 2·SMSS` and allows larger values "with care"; fanout uses
//!   [`ABC_LIMIT_SEGMENTS`] = 64, close to Linux (which has no limit), because
//!   its receivers legitimately stretch ACKs (TCP-SMO's adaptive ACKs every
//!   4–8 segments; batched receive) and pacing spreads the resulting burst.
//!   While the data that was outstanding when the retransmission timer fired
//!   is being acknowledged, `L = 1·SMSS` (RFC 3465 §2.3: ACKs of data
//!   retransmitted after an RTO may cover segments the receiver already held).
//!   Slow start stops at `ssthresh`; the rest of that ACK's bytes count
//!   towards congestion avoidance.
//! * **Congestion avoidance** (RFC 5681 §3.1, eq. 3, in the byte-counting form
//!   of RFC 3465 §2.1): acknowledged bytes accumulate in `bytes_acked`; every
//!   full `cwnd` of them adds one SMSS. Growth is therefore exactly one SMSS
//!   per window of acknowledged data whatever the ACK pattern (delayed or
//!   stretch ACKs).
//! * **Congestion event** (RFC 5681 §3.2 step 2 with eq. 4, RFC 6675 §5):
//!   `ssthresh = max(FlightSize/2, 2·SMSS)`, `cwnd = ssthresh`. The transport
//!   runs RFC 6675 pipe-based loss recovery, so RFC 6582's window inflation
//!   and deflation do not apply and the end of recovery changes nothing.
//! * **Retransmission timeout** (RFC 5681 §3.1 eq. 4 and the paragraph after
//!   it): `ssthresh = max(FlightSize/2, 2·SMSS)`, `cwnd = 1·SMSS`. When the
//!   timer fires again before any new data was acknowledged, `ssthresh` is
//!   held constant (RFC 5681 §3.1). An RTO during a recovery episode keeps
//!   that episode's `ssthresh` (it was computed from the same flight) instead
//!   of reducing it a second time.
//! * **Application-limited periods** (RFC 7661 spirit): no growth from ACKs
//!   whose data was not sent cwnd-limited.
//!
//! FlightSize is capped at `cwnd` before halving (`min(FlightSize, cwnd)`, as
//! Linux uses cwnd): a reaction to loss must never open the window, which a
//! FlightSize left large by an earlier RTO (cwnd = 1 SMSS, old data still
//! outstanding) otherwise would.

use super::{AckSample, CongestionController, INITIAL_WINDOW_SEGMENTS};
use crate::time::Instant;

/// RFC 3465 §2.3: the ABC limit `L`, in segments, per ACK in slow start
/// (see the module doc for why it is above the RFC's recommended 2).
pub(super) const ABC_LIMIT_SEGMENTS: u64 = 64;

/// Window state and loss bookkeeping shared by NewReno and CUBIC: slow start,
/// and the rules deciding whether a retransmission timeout reduces ssthresh.
#[derive(Debug, Clone)]
pub(super) struct WindowCore {
    /// SMSS, bytes (at least 1).
    pub(super) mss: u64,
    /// Congestion window, bytes.
    pub(super) cwnd: u64,
    /// Slow-start threshold, bytes (`u64::MAX` before the first reduction).
    pub(super) ssthresh: u64,
    /// Bytes, of those outstanding when the last RTO fired, not yet
    /// acknowledged; ABC uses `L = 1·SMSS` while this is non-zero.
    post_rto_bytes: u64,
    /// An RTO fired and no new data was acknowledged since.
    rto_backoff: bool,
    /// Between `on_congestion_event` and the end of that recovery episode.
    in_recovery: bool,
}

impl WindowCore {
    /// Initial window of [`INITIAL_WINDOW_SEGMENTS`] segments of `mss` bytes.
    pub(super) fn new(mss: u64) -> Self {
        let mss = mss.max(1);
        WindowCore {
            mss,
            cwnd: mss.saturating_mul(INITIAL_WINDOW_SEGMENTS),
            ssthresh: u64::MAX,
            post_rto_bytes: 0,
            rto_backoff: false,
            in_recovery: false,
        }
    }

    /// Bookkeeping common to every ACK of new data (whether or not it may
    /// grow the window); returns the ABC limit `L` (bytes) for this ACK.
    pub(super) fn begin_ack(&mut self, acked: u64) -> u64 {
        let limit = if self.post_rto_bytes > 0 {
            self.mss
        } else {
            self.mss.saturating_mul(ABC_LIMIT_SEGMENTS)
        };
        self.post_rto_bytes = self.post_rto_bytes.saturating_sub(acked);
        if acked > 0 {
            self.rto_backoff = false;
        }
        // `on_ack` is only called outside recovery.
        self.in_recovery = false;
        limit
    }

    /// RFC 5681 eq. 2 with ABC: grows cwnd by `min(acked, limit)`, not past
    /// ssthresh. Returns the acknowledged bytes left for congestion avoidance
    /// (non-zero only when ssthresh was reached).
    pub(super) fn slow_start(&mut self, acked: u64, limit: u64) -> u64 {
        let room = self.ssthresh.saturating_sub(self.cwnd);
        let increase = acked.min(limit);
        if increase < room {
            self.cwnd += increase;
            0
        } else {
            self.cwnd = self.ssthresh;
            acked - room.min(acked)
        }
    }

    /// The amount a reduction is computed from: `min(FlightSize, cwnd)`.
    pub(super) fn reduction_base(&self, flight_size: u64) -> u64 {
        flight_size.min(self.cwnd)
    }

    /// Starts from `cwnd` bytes (at least one segment) in slow start.
    pub(super) fn take_over(&mut self, cwnd: u64) {
        self.cwnd = cwnd.max(self.mss);
    }

    /// The smallest window after a congestion event: 2·SMSS.
    pub(super) fn min_window(&self) -> u64 {
        self.mss.saturating_mul(2)
    }

    /// A recovery episode begins.
    pub(super) fn enter_recovery(&mut self) {
        self.in_recovery = true;
    }

    /// The recovery episode ended.
    pub(super) fn exit_recovery(&mut self) {
        self.in_recovery = false;
    }

    /// The retransmission timer fired: cwnd = 1·SMSS (RFC 5681 eq. 4). The
    /// caller recomputes ssthresh beforehand if [`WindowCore::rto_reduces`].
    pub(super) fn on_rto(&mut self, flight_size: u64) {
        self.cwnd = self.mss;
        self.post_rto_bytes = self.post_rto_bytes.max(flight_size);
        self.rto_backoff = true;
        self.in_recovery = false;
    }

    /// Whether an RTO firing now should recompute ssthresh: not on a repeated
    /// RTO (RFC 5681 §3.1), nor during a recovery episode, whose ssthresh
    /// already reflects this flight.
    pub(super) fn rto_reduces(&self) -> bool {
        !self.rto_backoff && !self.in_recovery
    }
}

/// NewReno (RFC 5681 / RFC 6582) with RFC 3465 byte counting; see the
/// module documentation for the exact rules.
#[derive(Debug, Clone)]
pub struct NewReno {
    core: WindowCore,
    /// RFC 3465 §2.1 `bytes_acked` during congestion avoidance, bytes
    /// (always below cwnd after an ACK is processed).
    bytes_acked: u64,
}

impl NewReno {
    /// A controller for segments of `mss` bytes (SMSS; 0 is treated as 1),
    /// starting in slow start with the initial window.
    pub fn new(mss: u64) -> Self {
        NewReno {
            core: WindowCore::new(mss),
            bytes_acked: 0,
        }
    }

    /// The segment size (SMSS) in bytes.
    pub fn mss(&self) -> u64 {
        self.core.mss
    }

    /// RFC 3465 §2.1: one SMSS per full cwnd of acknowledged bytes.
    fn congestion_avoidance(&mut self, acked: u64) {
        let core = &mut self.core;
        self.bytes_acked = self.bytes_acked.saturating_add(acked);
        if self.bytes_acked >= core.cwnd {
            // Several windows at once only with huge stretch ACKs; counted
            // against the current cwnd (as Linux's tcp_cong_avoid_ai does).
            let windows = self.bytes_acked / core.cwnd;
            self.bytes_acked -= windows * core.cwnd;
            core.cwnd = core.cwnd.saturating_add(windows.saturating_mul(core.mss));
        }
    }
}

impl CongestionController for NewReno {
    fn name(&self) -> &'static str {
        "newreno"
    }

    fn on_ack(&mut self, _now: Instant, ack: AckSample) {
        let limit = self.core.begin_ack(ack.acked_bytes);
        if !ack.cwnd_limited || ack.acked_bytes == 0 {
            return;
        }
        let mut acked = ack.acked_bytes;
        if self.core.cwnd < self.core.ssthresh {
            acked = self.core.slow_start(acked, limit);
        }
        if acked > 0 {
            self.congestion_avoidance(acked);
        }
    }

    fn on_congestion_event(&mut self, _now: Instant, flight_size: u64) {
        let core = &mut self.core;
        core.enter_recovery();
        core.ssthresh = (core.reduction_base(flight_size) / 2).max(core.min_window());
        core.cwnd = core.ssthresh;
        self.bytes_acked = 0;
    }

    fn on_recovery_end(&mut self, _now: Instant) {
        // No inflation to undo: RFC 6675 recovery keeps cwnd at ssthresh.
        self.core.exit_recovery();
    }

    fn on_retransmission_timeout(&mut self, _now: Instant, flight_size: u64) {
        let core = &mut self.core;
        if core.rto_reduces() {
            core.ssthresh = (core.reduction_base(flight_size) / 2).max(core.min_window());
        }
        core.on_rto(flight_size);
        self.bytes_acked = 0;
    }

    fn snapshot(&self) -> Box<dyn CongestionController> {
        Box::new(self.clone())
    }

    fn cwnd(&self) -> u64 {
        self.core.cwnd
    }

    fn ssthresh(&self) -> u64 {
        self.core.ssthresh
    }

    fn take_over(&mut self, cwnd: u64) {
        self.core.take_over(cwnd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MSS: u64 = 1000;

    fn ack(bytes: u64) -> AckSample {
        AckSample {
            acked_bytes: bytes,
            srtt: Duration::from_millis(100),
            min_rtt: Duration::from_millis(100),
            cwnd_limited: true,
        }
    }

    /// Acknowledges `total` bytes in ACKs of `per_ack` bytes.
    fn ack_all(cc: &mut NewReno, total: u64, per_ack: u64) {
        let mut left = total;
        while left > 0 {
            let n = left.min(per_ack);
            cc.on_ack(Instant::ZERO, ack(n));
            left -= n;
        }
    }

    #[test]
    fn initial_window() {
        let cc = NewReno::new(MSS);
        assert_eq!(cc.cwnd(), INITIAL_WINDOW_SEGMENTS * MSS);
        assert_eq!(cc.ssthresh(), u64::MAX);
        assert!(cc.in_slow_start());
        assert_eq!(cc.name(), "newreno");
    }

    #[test]
    fn slow_start_doubles_per_rtt() {
        // One ACK per segment.
        let mut cc = NewReno::new(MSS);
        for round in 1..=4 {
            let w = cc.cwnd();
            ack_all(&mut cc, w, MSS);
            assert_eq!(cc.cwnd(), (10 * MSS) << round);
        }
        // Delayed ACKs (every second segment): L = 2 SMSS still doubles.
        let mut cc = NewReno::new(MSS);
        let w = cc.cwnd();
        ack_all(&mut cc, w, 2 * MSS);
        assert_eq!(cc.cwnd(), 2 * w);
    }

    #[test]
    fn abc_counts_stretch_acks_up_to_the_limit() {
        let mut cc = NewReno::new(MSS);
        cc.on_ack(Instant::ZERO, ack(8 * MSS));
        assert_eq!(cc.cwnd(), 18 * MSS);
        cc.on_ack(Instant::ZERO, ack(100 * MSS));
        assert_eq!(cc.cwnd(), (18 + ABC_LIMIT_SEGMENTS) * MSS);
        // Sub-MSS ACKs count bytes, not ACKs.
        cc.on_ack(Instant::ZERO, ack(100));
        assert_eq!(cc.cwnd(), (18 + ABC_LIMIT_SEGMENTS) * MSS + 100);
    }

    #[test]
    fn slow_start_stops_at_ssthresh_and_carries_over() {
        let mut cc = NewReno::new(MSS);
        ack_all(&mut cc, 30 * MSS, MSS); // cwnd 40
        cc.on_congestion_event(Instant::ZERO, 40 * MSS); // ssthresh 20
        cc.on_retransmission_timeout(Instant::ZERO, 0); // in recovery: keeps 20
        assert_eq!(cc.ssthresh(), 20 * MSS);
        assert_eq!(cc.cwnd(), MSS);
        ack_all(&mut cc, 30 * MSS, MSS);
        // 19 ACKs reach ssthresh, the remaining 11 segments go to CA.
        assert_eq!(cc.cwnd(), 20 * MSS);
        assert_eq!(cc.bytes_acked, 11 * MSS);
        assert!(!cc.in_slow_start());
    }

    #[test]
    fn congestion_avoidance_one_mss_per_window() {
        let mut cc = NewReno::new(MSS);
        ack_all(&mut cc, 30 * MSS, MSS); // cwnd 40
        cc.on_congestion_event(Instant::ZERO, 40 * MSS);
        cc.on_recovery_end(Instant::ZERO);
        assert_eq!(cc.cwnd(), 20 * MSS);
        // Per-segment, delayed and stretch ACKs all give one SMSS per window.
        for per_ack in [MSS, 2 * MSS, 7 * MSS, 333] {
            let w = cc.cwnd();
            ack_all(&mut cc, w, per_ack);
            assert_eq!(cc.cwnd(), w + MSS, "per_ack {per_ack}");
            assert_eq!(cc.bytes_acked, 0);
        }
        // Just short of a window: no growth yet, the bytes are remembered.
        let w = cc.cwnd();
        ack_all(&mut cc, w - 1, MSS);
        assert_eq!(cc.cwnd(), w);
        cc.on_ack(Instant::ZERO, ack(1));
        assert_eq!(cc.cwnd(), w + MSS);
    }

    #[test]
    fn congestion_event_halves() {
        let mut cc = NewReno::new(MSS);
        ack_all(&mut cc, 30 * MSS, MSS); // cwnd 40
        cc.on_congestion_event(Instant::ZERO, 40 * MSS);
        assert_eq!(cc.ssthresh(), 20 * MSS);
        assert_eq!(cc.cwnd(), 20 * MSS);
        cc.on_recovery_end(Instant::ZERO);
        assert_eq!(cc.cwnd(), 20 * MSS);
        // Application-limited flight: halve the flight, not cwnd.
        cc.on_congestion_event(Instant::ZERO, 6 * MSS);
        assert_eq!(cc.cwnd(), 3 * MSS);
        // Floor of 2 SMSS.
        cc.on_congestion_event(Instant::ZERO, MSS);
        assert_eq!(cc.cwnd(), 2 * MSS);
        assert_eq!(cc.ssthresh(), 2 * MSS);
    }

    #[test]
    fn congestion_event_never_opens_the_window() {
        let mut cc = NewReno::new(MSS);
        cc.on_retransmission_timeout(Instant::ZERO, 10 * MSS);
        cc.on_ack(Instant::ZERO, ack(MSS)); // cwnd 2 (L = 1 after RTO)
        assert_eq!(cc.cwnd(), 2 * MSS);
        // Old data still outstanding: flight 10 SMSS > cwnd.
        cc.on_congestion_event(Instant::ZERO, 10 * MSS);
        assert_eq!(cc.cwnd(), 2 * MSS);
    }

    #[test]
    fn rto_collapses_to_one_mss() {
        let mut cc = NewReno::new(MSS);
        ack_all(&mut cc, 30 * MSS, MSS); // cwnd 40
        cc.on_retransmission_timeout(Instant::ZERO, 40 * MSS);
        assert_eq!(cc.cwnd(), MSS);
        assert_eq!(cc.ssthresh(), 20 * MSS);
        assert!(cc.in_slow_start());
        // Backed-off timer fires again: ssthresh held constant.
        cc.on_retransmission_timeout(Instant::ZERO, 40 * MSS);
        assert_eq!(cc.ssthresh(), 20 * MSS);
        assert_eq!(cc.cwnd(), MSS);
    }

    #[test]
    fn slow_start_after_rto_uses_l_of_one_segment() {
        let mut cc = NewReno::new(MSS);
        ack_all(&mut cc, 30 * MSS, MSS); // cwnd 40
        cc.on_retransmission_timeout(Instant::ZERO, 40 * MSS);
        assert_eq!(cc.ssthresh(), 20 * MSS);
        // Stretch ACKs covering the old flight: 1 SMSS each.
        for _ in 0..10 {
            cc.on_ack(Instant::ZERO, ack(4 * MSS));
        }
        assert_eq!(cc.cwnd(), 11 * MSS);
        // Old flight acknowledged: the normal limit again.
        cc.on_ack(Instant::ZERO, ack(4 * MSS));
        assert_eq!(cc.cwnd(), 15 * MSS);
    }

    #[test]
    fn no_growth_when_not_cwnd_limited() {
        let mut cc = NewReno::new(MSS);
        let limited = AckSample {
            cwnd_limited: false,
            ..ack(MSS)
        };
        for _ in 0..100 {
            cc.on_ack(Instant::ZERO, limited);
        }
        assert_eq!(cc.cwnd(), 10 * MSS);
        cc.on_congestion_event(Instant::ZERO, 10 * MSS);
        cc.on_recovery_end(Instant::ZERO);
        for _ in 0..100 {
            cc.on_ack(Instant::ZERO, limited);
        }
        assert_eq!(cc.cwnd(), 5 * MSS);
        assert_eq!(cc.bytes_acked, 0);
    }

    #[test]
    fn huge_values_do_not_overflow() {
        let mut cc = NewReno::new(u64::MAX / 4);
        cc.on_ack(Instant::ZERO, ack(u64::MAX));
        cc.on_ack(Instant::ZERO, ack(u64::MAX));
        assert_eq!(cc.cwnd(), u64::MAX);
        cc.on_congestion_event(Instant::ZERO, u64::MAX);
        cc.on_recovery_end(Instant::ZERO);
        cc.on_ack(Instant::ZERO, ack(u64::MAX));
        assert!(cc.cwnd() >= u64::MAX / 2);
        let mut cc = NewReno::new(0);
        cc.on_retransmission_timeout(Instant::ZERO, 0);
        assert_eq!(cc.cwnd(), 1);
        assert_eq!(cc.ssthresh(), 2);
    }
}
