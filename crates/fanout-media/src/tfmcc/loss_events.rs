//! A receiver's loss event rate, as TFRC computes it (RFC 5348 §5, used by
//! RFC 4654 §4.3): losses within one round trip of the first loss of an
//! event are one event; the intervals between events' starts, in packets,
//! are averaged over the last 8 with weights 1, 1, 1, 1, 0.8, 0.6, 0.4,
//! 0.2 — counting the interval still open only if it raises the average
//! (§5.4) — and the rate is one over that average. (fanout's ASMP uses it
//! with a longer history and shorter events, [`LossEvents::new`].) The first
//! interval is unknown: it is set to what makes the TCP equation give the
//! rate the receiver was receiving when the first loss came (§6.3.1).

use fanout_core::tfrc::{loss_rate_for, mean_interval, LOSS_INTERVALS};
use fanout_core::Instant;
use std::collections::VecDeque;
use std::time::Duration;

/// A receiver's loss intervals.
#[derive(Debug, Clone)]
pub struct LossEvents {
    /// Closed intervals, newest first, packets (at most 8).
    closed: VecDeque<f64>,
    /// Packets since the newest event began (the open interval).
    open: f64,
    /// When the newest event began.
    event_start: Option<Instant>,
    /// Intervals averaged (at least 2).
    history: usize,
    /// Losses within this share of a round trip of an event's start
    /// belong to it.
    span: f64,
    /// The first interval is at least the packets before the first loss.
    count_first: bool,
    /// Packets before the first loss.
    before_first: f64,
    /// The first event lasts until the sender can have acted on it.
    first_until_reported: bool,
    /// When the first event ends: a round trip after the first report
    /// sent once it began (`None`: not reported yet).
    first_end: Option<Instant>,
}

impl Default for LossEvents {
    /// RFC 5348's: 8 intervals, events a round trip long.
    fn default() -> Self {
        LossEvents::new(LOSS_INTERVALS, 1.0)
    }
}

impl LossEvents {
    /// Averaging the last `history` intervals (RFC 5348: 8), losses
    /// within `span` round trips of an event's start one event (RFC 5348:
    /// 1).
    pub fn new(history: usize, span: f64) -> Self {
        LossEvents {
            closed: VecDeque::new(),
            open: 0.0,
            event_start: None,
            history: history.max(2),
            span: span.max(0.0),
            count_first: false,
            before_first: 0.0,
            first_until_reported: false,
            first_end: None,
        }
    }

    /// The first interval is at least the packets that came before the
    /// first loss, where RFC 5348 §6.3.1 takes only what the receive rate
    /// then implies: a stream that was not probing its path (a large
    /// group's rate moves once a report round) meets its first loss far
    /// below what the path carries, and an interval seeded from that rate
    /// would hold it there for the whole history.
    pub fn counting_the_first(mut self) -> Self {
        self.count_first = true;
        self
    }

    /// Losses are part of the first event until the sender can have acted
    /// on it: until a round trip after the first report sent once it began
    /// ([`LossEvents::on_report`]). A receiver whose rate doubles per
    /// report (the slow start) overshoots the path for a whole report
    /// interval, not a round trip as TCP's ACK-clocked slow start does;
    /// the losses of that one overshoot are one congestion event, as they
    /// are one window reduction for TCP, where counted a round trip at a
    /// time they would fill the history with short intervals that hold the
    /// rate down long after.
    pub fn first_event_until_reported(mut self) -> Self {
        self.first_until_reported = true;
        self
    }

    /// The receiver sent a report at `now`; its round trip is `rtt`.
    pub fn on_report(&mut self, now: Instant, rtt: Duration) {
        if self.first_until_reported && self.in_first_event() && self.first_end.is_none() {
            self.first_end = Some(now + rtt);
        }
    }

    /// Whether the first event is the newest one.
    fn in_first_event(&self) -> bool {
        self.event_start.is_some() && self.closed.len() == 1
    }

    /// `received` packets arrived and `lost` were found missing at `now`,
    /// with round trip `rtt`. Before the first loss, `receive_rate` (bytes
    /// per second) and `packet_size` (bytes) seed the first interval.
    pub fn on_packets(
        &mut self,
        now: Instant,
        received: u64,
        lost: u64,
        rtt: Duration,
        receive_rate: f64,
        packet_size: f64,
    ) {
        if lost > 0 {
            let first_lasts = self.first_until_reported
                && self.in_first_event()
                && self.first_end.is_none_or(|end| now <= end);
            let new_event = !first_lasts
                && self
                    .event_start
                    .is_none_or(|s| now.saturating_duration_since(s) > rtt.mul_f64(self.span));
            if new_event {
                if self.event_start.is_none() {
                    let mut first = first_interval(packet_size, rtt.as_secs_f64(), receive_rate);
                    if self.count_first {
                        first = first.max(self.before_first + 1.0);
                    }
                    self.closed.push_front(first);
                } else {
                    self.closed.push_front(self.open.max(1.0));
                }
                self.closed.truncate(self.history);
                self.open = 0.0;
                self.event_start = Some(now);
            }
        }
        if self.event_start.is_some() {
            self.open += (received + lost) as f64;
        } else {
            self.before_first += received as f64;
        }
    }

    /// Begins the history again at `now`: every interval `interval`
    /// packets (so the rate is `1 / interval`), a new event starting now.
    /// For a path that changed under the stream, whose old intervals
    /// describe a path that is gone.
    pub fn restart(&mut self, now: Instant, interval: f64) {
        self.closed.clear();
        self.closed
            .extend(std::iter::repeat_n(interval.max(1.0), self.history));
        self.open = 0.0;
        self.event_start = Some(now);
    }

    /// Whether a loss event was seen.
    pub fn has_loss(&self) -> bool {
        self.event_start.is_some()
    }

    /// The loss event rate (0 before the first loss).
    pub fn rate(&self) -> f64 {
        mean_interval(self.open, self.closed.iter().copied(), self.history)
            .map_or(0.0, |mean| 1.0 / mean.max(1.0))
    }
}

/// The interval (packets) whose loss rate makes the TCP equation give
/// `rate` bytes per second with packets of `s` bytes and round trip `rtt`
/// s (RFC 5348 §6.3.1).
pub fn first_interval(s: f64, rtt: f64, rate: f64) -> f64 {
    if !(s > 0.0 && rtt > 0.0 && rate > 0.0) {
        return 1.0;
    }
    1.0 / loss_rate_for(s, rtt, rate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fanout_core::tfrc::throughput;

    #[test]
    fn the_first_interval_gives_the_receive_rate_through_the_equation() {
        let i = first_interval(1000.0, 0.1, 112_334.0);
        // 1% loss gives 112 334 B/s at 100 ms (the equation's own test).
        assert!((i - 100.0).abs() < 0.1, "{i}");
        let p = 1.0 / first_interval(1316.0, 0.05, 500_000.0);
        let back = throughput(1316.0, 0.05, p);
        assert!((back - 500_000.0).abs() / 500_000.0 < 1e-6, "{back}");
    }

    #[test]
    fn losses_within_a_round_trip_are_one_event_and_the_rate_averages_intervals() {
        let rtt = Duration::from_millis(50);
        let mut e = LossEvents::default();
        let t = |ms: u64| Instant::from_nanos(ms * 1_000_000);
        e.on_packets(t(0), 500, 0, rtt, 100_000.0, 1000.0);
        assert!(!e.has_loss());
        assert_eq!(e.rate(), 0.0);
        // The first event: the seeded interval.
        e.on_packets(t(10), 1, 1, rtt, 100_000.0, 1000.0);
        let first = first_interval(1000.0, 0.05, 100_000.0);
        // A second loss 20 ms later is the same event.
        e.on_packets(t(30), 1, 1, rtt, 100_000.0, 1000.0);
        e.on_packets(t(40), 96, 0, rtt, 100_000.0, 1000.0);
        // 100 packets since: a new event closes an interval of 100.
        e.on_packets(t(200), 0, 1, rtt, 100_000.0, 1000.0);
        let closed = [100.0, first];
        let mean = (closed[0] + closed[1]) / 2.0;
        assert!((e.rate() - 1.0 / mean).abs() < 1e-9, "{} {mean}", e.rate());
        // A long open interval raises the average: it counts.
        e.on_packets(t(300), 10_000, 0, rtt, 100_000.0, 1000.0);
        let open = 10_001.0;
        let with = (open + closed[0] + closed[1]) / 3.0;
        assert!((e.rate() - 1.0 / with).abs() < 1e-9);
    }

    #[test]
    fn the_first_event_lasts_until_a_report_has_had_a_round_trip() {
        let rtt = Duration::from_millis(50);
        let t = |ms: u64| Instant::from_nanos(ms * 1_000_000);
        let mut e = LossEvents::new(8, 1.0)
            .counting_the_first()
            .first_event_until_reported();
        e.on_packets(t(0), 1000, 0, rtt, 100_000.0, 1000.0);
        // The overshoot: losses for 400 ms, eight round trips, before the
        // receiver reports; then a round trip for the report to act.
        for ms in (10..=400).step_by(20) {
            e.on_packets(t(ms), 10, 1, rtt, 100_000.0, 1000.0);
        }
        e.on_report(t(400), rtt);
        e.on_packets(t(440), 10, 1, rtt, 100_000.0, 1000.0);
        assert_eq!(e.closed.len(), 1, "one event so far");
        assert_eq!(e.closed[0], 1001.0, "the packets before the first loss");
        // After that round trip, losses are events as before.
        e.on_packets(t(460), 10, 1, rtt, 100_000.0, 1000.0);
        assert_eq!(e.closed.len(), 2);
        // Without the rule the same losses are an event a round trip.
        let mut plain = LossEvents::new(8, 1.0).counting_the_first();
        plain.on_packets(t(0), 1000, 0, rtt, 100_000.0, 1000.0);
        for ms in (10..=400).step_by(20) {
            plain.on_packets(t(ms), 10, 1, rtt, 100_000.0, 1000.0);
        }
        assert!(plain.closed.len() >= 7, "{}", plain.closed.len());
        assert!(
            plain.rate() > 3.0 * e.rate(),
            "{} {}",
            plain.rate(),
            e.rate()
        );
    }
}
