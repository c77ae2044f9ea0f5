//! The round trip a receiver uses (ASMP §3.5): from each RTP packet's
//! one-way delay T (arrival less the packet's timestamp), taken as
//! `(1 + a)·T` (eq. 8) — `a = 1`, a symmetric path, until calibrated — and
//! averaged as `t = β·inst + (1 − β)·t` with β = 0.5 (eq. 11). The sender
//! measures the true round trip to each receiver from its reports (A −
//! LSR − DLSR) and publishes it; the receiver then sets `a = RTT / T − 1`
//! (eq. 10) with the one-way delay it had when it sent the report the
//! sender measured from (its latest when it last reported: the sender
//! answers the latest report), which absorbs the path's asymmetry and the
//! two clocks' offset. (With the latest packet's instead, a round trip
//! measured through a full queue meets a one-way delay after it drained,
//! and the estimate stays many times the path's.)

use std::time::Duration;

/// β of eq. 11: the weight of a new sample.
pub const RTT_GAIN: f64 = 0.5;

/// A receiver's round-trip estimate.
///
/// Besides the paper's estimate it keeps what the improved variant uses
/// ([`RttEstimate::anchored`]): the sender's last measured round trip plus
/// how much the one-way delay grew since the report it was measured from —
/// differences of one-way delays, so the clocks' offset and the path's
/// asymmetry cancel, and a queue that builds shows at once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RttEstimate {
    /// The sender's last measured round trip, s, and the one-way delay
    /// at the report it was measured from.
    anchor: Option<(f64, f64)>,
    /// Sum and count of one-way delays since the last report, s.
    interval_sum: f64,
    interval_n: u32,
    /// The calibration `a` (eq. 10), once the sender published a round trip.
    a: Option<f64>,
    /// The latest one-way delay, s.
    one_way: Option<f64>,
    /// The latest one-way delay when the receiver last reported, s.
    one_way_at_report: Option<f64>,
    /// The estimate, s.
    rtt: Option<f64>,
}

impl RttEstimate {
    /// A packet's one-way delay `t` (s; arrival less send time, in the two
    /// clocks): non-positive ones (clocks apart by more than the path)
    /// are not used until a calibration makes sense of them.
    pub fn on_one_way(&mut self, t: f64) {
        if !t.is_finite() || t <= 0.0 {
            return;
        }
        self.one_way = Some(t);
        self.interval_sum += t;
        self.interval_n += 1;
        let inst = (1.0 + self.a.unwrap_or(1.0)) * t;
        self.rtt = Some(match self.rtt {
            Some(r) => RTT_GAIN * inst + (1.0 - RTT_GAIN) * r,
            None => inst,
        });
    }

    /// The receiver sends a report now (the sender will measure the
    /// round trip from it).
    pub fn on_report(&mut self) {
        self.one_way_at_report = self.one_way;
        self.interval_sum = 0.0;
        self.interval_n = 0;
    }

    /// The improved estimate at the end of an interval (call before
    /// [`RttEstimate::on_report`]): the sender's last round trip plus the
    /// growth of this interval's mean one-way delay over the one it was
    /// measured against (never less than that round trip); the paper's
    /// estimate until the sender measured one.
    pub fn anchored(&self) -> Option<Duration> {
        let Some((rtt, t_ref)) = self.anchor else {
            return self.rtt();
        };
        let grown = if self.interval_n > 0 {
            (self.interval_sum / f64::from(self.interval_n) - t_ref).max(0.0)
        } else {
            0.0
        };
        Some(Duration::from_secs_f64(rtt + grown))
    }

    /// The sender measured `rtt` to this receiver from its last report:
    /// calibrate (eq. 10).
    pub fn on_sender_rtt(&mut self, rtt: Duration) {
        if let Some(t) = self.one_way_at_report {
            self.a = Some(rtt.as_secs_f64() / t - 1.0);
            self.anchor = Some((rtt.as_secs_f64(), t));
        }
    }

    /// The calibration `a`, once known.
    pub fn calibration(&self) -> Option<f64> {
        self.a
    }

    /// The estimate, once a packet came.
    pub fn rtt(&self) -> Option<Duration> {
        self.rtt.map(Duration::from_secs_f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_way_delays_are_calibrated_by_the_senders_round_trip() {
        let mut r = RttEstimate::default();
        assert_eq!(r.rtt(), None);
        // 30 ms one way: 60 ms, a symmetric path assumed.
        r.on_one_way(0.030);
        assert_eq!(r.rtt(), Some(Duration::from_millis(60)));
        // Not calibrated before a report was sent.
        r.on_sender_rtt(Duration::from_millis(40));
        assert_eq!(r.calibration(), None);
        r.on_report();
        // Later packets do not change what the calibration is against.
        r.on_one_way(0.030);
        r.on_one_way(0.030);
        // The sender measured 40 ms (the way back is shorter): a = 1/3.
        r.on_sender_rtt(Duration::from_millis(40));
        assert!((r.calibration().unwrap() - (0.040 / 0.030 - 1.0)).abs() < 1e-12);
        // The next packet: inst = 40 ms, averaged with β = 0.5: 50 ms.
        r.on_one_way(0.030);
        assert!((r.rtt().unwrap().as_secs_f64() - 0.050).abs() < 1e-9);
        // A queue builds: 45 ms one way → inst 60 ms → 55 ms.
        r.on_one_way(0.045);
        assert!((r.rtt().unwrap().as_secs_f64() - 0.055).abs() < 1e-9);
        // Anchored: 40 ms measured against 30 ms one way; this interval's
        // mean one-way delay is (30 + 30 + 30 + 45) / 4 = 33.75 ms: 43.75.
        assert!((r.anchored().unwrap().as_secs_f64() - 0.04375).abs() < 1e-9);
        // Nonsense samples are not used.
        r.on_one_way(-1.0);
        r.on_one_way(f64::NAN);
        assert!((r.rtt().unwrap().as_secs_f64() - 0.055).abs() < 1e-9);
    }
}
