//! An ASMP receiver's estimates, as it runs them (ASMP §3.2, Figure 2):
//! every RTP packet updates its sequence state (RFC 3550 A.1), jitter
//! (A.8), congestion indicator and round trip; every RTCP report closes
//! an interval and turns it into a rate — one packet per RTT more if the
//! interval lost nothing (eq. 13), else the TCP equation at the smoothed
//! loss rate (eq. 12) — smoothed by σ from the congestion indicator (eq.
//! 14, 19). fanout's variant ([`Variant::Improved`]) changes how the loss
//! rate, the round trip and the rate are found. The rate goes to the sender in an APP part
//! (`fanout_rtp::app::RateReport`).

use super::rate::{increase, smooth, tcp_friendly};
use super::{CongestionIndicator, LossHistory, NetworkState, RttEstimate};
use crate::tfmcc::{first_interval, LossEvents};
use fanout_core::tfrc::throughput;
use fanout_core::Instant;
use fanout_rtp::jitter::Jitter;
use fanout_rtp::sequence::{IntervalLoss, SourceSequence};
use std::time::Duration;

/// The rate before any report (ASMP §4: 150 kbit/s), bytes per second.
pub const INITIAL_RATE: f64 = 150_000.0 / 8.0;
/// fanout's variant: loss intervals its loss event rate averages (RFC
/// 5348 §5.4's weights stretched over them: the newer half 1, then falling).
pub const LOSS_INTERVALS: usize = 128;
/// fanout's variant: losses within this share of a round trip of an
/// event's start belong to it.
pub const EVENT_SPAN: f64 = 0.65;
/// fanout's variant: the weight of each report's round trip in the one
/// the equation uses.
pub const RTT_SMOOTHING: f64 = 0.1;
/// fanout's variant: the least time of arrivals a rate is measured over.
pub const MIN_RECEIVING: Duration = Duration::from_millis(100);
/// fanout's variant: a report interval that lost at least this share of
/// the packets it expected is heavy; two heavy intervals in a row mean the
/// sender overruns the path.
pub const OVERRUN_LOSS: f64 = 0.2;
/// fanout's variant: the least packets a report interval must expect to
/// count as heavy (fewer say too little: 4 of 16 at 20%).
pub const OVERRUN_PACKETS: u32 = 16;

/// Which ASMP a receiver runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Variant {
    /// As the paper gives it (for reproducing its results).
    Paper,
    /// fanout's default (ASMP §3 with seven changes, each measured in
    /// `docs/experiments/asmp.md`): the loss rate is a loss event rate
    /// (RFC 5348 §5: losses within 0.65 of a round trip of an event's
    /// start are one event, the last 128 intervals averaged, the first at
    /// least the packets before the first loss and lasting until a report
    /// has had a round trip to act), not the fraction
    /// of packets lost in the last 8 reports; the round trip is the sender's
    /// measurement plus the growth of the one-way delay since
    /// ([`RttEstimate::anchored`]), smoothed over reports, not the
    /// per-packet calibrated delay, which on a LAN is a fraction of a
    /// millisecond; the rate is the equation's, whose open interval grows
    /// between losses, instead of "+1 packet per RTT" after an interval
    /// without loss (before any loss, twice what arrived); and no receiver
    /// reports more than twice what it received in the interval (as TFRC
    /// caps its rate, RFC 5348 §4.3); a newcomer reports nothing until it
    /// has measured what arrives; and when two report intervals in a row
    /// lose a fifth of their packets ([`OVERRUN_LOSS`]), the sender
    /// overruns the path: the rate falls to what arrived and the loss
    /// history begins again from it.
    #[default]
    Improved,
}

/// What a receiver reports at the end of an interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IntervalReport {
    /// The smooth TCP-friendly rate, bytes per second.
    pub rate: f64,
    /// Whether the rate comes from measurements (fanout's variant reports
    /// nothing before it has measured what arrives: a newcomer does not
    /// drag the stream down to the initial rate; the paper's starts from
    /// the initial rate).
    pub measured: bool,
    /// The smoothed loss rate it used (0–1).
    pub loss: f64,
    /// The round trip it used, if known.
    pub rtt: Option<Duration>,
    /// The congestion indicator's reading.
    pub state: NetworkState,
    /// The interval's own counts (for the RR's report block).
    pub interval: IntervalLoss,
}

/// One receiver's ASMP state toward one sender.
#[derive(Debug, Clone)]
pub struct ReceiverEstimator {
    variant: Variant,
    /// RTP bytes received since the last report.
    received: u64,
    sequence: Option<SourceSequence>,
    jitter: Jitter,
    loss: LossHistory,
    rtt: RttEstimate,
    congestion: CongestionIndicator,
    /// Bytes per second.
    rate: f64,
    /// Average RTP packet size, bytes (a 1/16 moving average).
    packet_size: f64,
    /// Loss events (fanout's variant).
    events: LossEvents,
    /// When the first packet of the report interval came.
    interval_start: Option<Instant>,
    /// The smoothed round trip (fanout's variant), s.
    srtt: Option<f64>,
    /// It computed a rate from measurements (fanout's variant).
    reported: bool,
    /// The previous report interval was heavy (fanout's variant,
    /// [`OVERRUN_LOSS`]).
    heavy_before: bool,
}

impl Default for ReceiverEstimator {
    fn default() -> Self {
        Self::new(INITIAL_RATE, Variant::default())
    }
}

impl ReceiverEstimator {
    /// A receiver of `variant` starting from `rate` bytes per second.
    pub fn new(rate: f64, variant: Variant) -> Self {
        ReceiverEstimator {
            variant,
            received: 0,
            sequence: None,
            jitter: Jitter::default(),
            loss: LossHistory::default(),
            rtt: RttEstimate::default(),
            congestion: CongestionIndicator::default(),
            rate,
            packet_size: 0.0,
            events: LossEvents::new(LOSS_INTERVALS, EVENT_SPAN)
                .counting_the_first()
                .first_event_until_reported(),
            interval_start: None,
            srtt: None,
            reported: false,
            heavy_before: false,
        }
    }

    /// An RTP packet: sequence number `seq`, RTP timestamp `timestamp`,
    /// `len` bytes (the RTP packet), arriving at `arrival` (timestamp
    /// units, any fixed origin), with one-way delay `one_way` s (arrival
    /// less send time, in the two clocks).
    pub fn on_rtp(
        &mut self,
        now: Instant,
        seq: u16,
        timestamp: u32,
        len: usize,
        arrival: u32,
        one_way: f64,
    ) {
        let s = self
            .sequence
            .get_or_insert_with(|| SourceSequence::new(seq));
        let before = s.extended_max();
        if !s.update(seq) {
            return;
        }
        let lost = s
            .extended_max()
            .saturating_sub(before.wrapping_add(1))
            .min(3000);
        if self.variant == Variant::Improved {
            let since = *self.interval_start.get_or_insert(now);
            let secs = now.saturating_duration_since(since).as_secs_f64();
            let receive_rate = if secs > 0.01 {
                self.received as f64 / secs
            } else {
                self.rate
            };
            let rtt = self
                .rtt
                .anchored()
                .unwrap_or(Duration::from_millis(100))
                .max(Duration::from_micros(100));
            let size = if self.packet_size > 0.0 {
                self.packet_size
            } else {
                len as f64
            };
            self.events
                .on_packets(now, 1, u64::from(lost), rtt, receive_rate, size);
        }
        self.jitter.on_packet(arrival, timestamp);
        self.congestion.on_jitter(f64::from(self.jitter.value()));
        self.rtt.on_one_way(one_way);
        self.received += len as u64;
        self.packet_size = if self.packet_size == 0.0 {
            len as f64
        } else {
            self.packet_size + (len as f64 - self.packet_size) / 16.0
        };
    }

    /// The sender published the round trip it measured to this receiver.
    pub fn on_sender_rtt(&mut self, rtt: Duration) {
        self.rtt.on_sender_rtt(rtt);
    }

    /// Closes a report interval of `elapsed` since the previous one, at
    /// `now`: the rate to report.
    pub fn on_report(&mut self, now: Instant, elapsed: Duration) -> IntervalReport {
        let interval = self.sequence.as_mut().map_or(
            IntervalLoss {
                expected: 0,
                lost: 0,
                fraction: 0,
            },
            |s| s.close_interval(),
        );
        if interval.expected > 0 {
            self.loss.push(interval.rate());
        }
        // fanout's variant: a second heavy interval in a row says the
        // sender overruns the path (its capacity fell, or an unresponsive
        // flow came), not a congestion event that a TCP flow's halving
        // ends within a round trip.
        let heavy = interval.expected >= OVERRUN_PACKETS && interval.rate() >= OVERRUN_LOSS;
        let overrun = heavy && self.heavy_before;
        self.heavy_before = heavy;
        let state = self.congestion.close_interval();
        let rtt = match self.variant {
            Variant::Paper => self.rtt.rtt(),
            Variant::Improved => {
                // The anchored round trip, smoothed over reports.
                let r = self.rtt.anchored().map(|a| {
                    let a = a.as_secs_f64();
                    self.srtt.map_or(a, |s| s + RTT_SMOOTHING * (a - s))
                });
                self.srtt = r.or(self.srtt);
                r.map(Duration::from_secs_f64)
            }
        };
        self.rtt.on_report();
        if let Some(r) = rtt {
            self.events.on_report(now, r);
        }
        // fanout's variant: what arrived over the time packets came (a
        // receiver that joined mid-interval has not been receiving for
        // all of it); too short a time says nothing yet, and what came
        // counts toward the next report.
        let receiving = self
            .interval_start
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s));
        let measured = self.variant == Variant::Improved && receiving >= MIN_RECEIVING;
        let (received, secs) = if self.variant == Variant::Paper || measured {
            self.interval_start = None;
            let secs = match self.variant {
                Variant::Paper => elapsed,
                Variant::Improved => receiving,
            };
            (
                std::mem::take(&mut self.received) as f64,
                secs.as_secs_f64(),
            )
        } else {
            (0.0, 0.0)
        };
        if self.packet_size > 0.0 {
            let p = self.packet_size;
            match (self.variant, rtt) {
                (Variant::Paper, Some(r)) if interval.expected > 0 => {
                    let r = r.as_secs_f64().max(1e-4);
                    let inst = if interval.lost == 0 {
                        increase(self.rate, p, r)
                    } else {
                        tcp_friendly(p, r, self.loss.smoothed())
                    };
                    self.rate = smooth(self.rate, inst, state.smoothing());
                }
                (Variant::Improved, Some(r))
                    if measured
                        && received > 0.0
                        && overrun
                        && throughput(p, r.as_secs_f64().max(1e-4), self.events.rate())
                            > received / secs =>
                {
                    // The path carries what arrived, less than the loss
                    // history says: the rate falls to it at once, and the
                    // history, which describes a path that is gone, begins
                    // again from it (as at the first loss, RFC 5348
                    // §6.3.1) rather than taking dozens of events to fill
                    // with the new, short intervals.
                    let carried = received / secs;
                    let r = r.as_secs_f64().max(1e-4);
                    self.events.restart(now, first_interval(p, r, carried));
                    self.rate = self.rate.min(carried);
                    self.reported = true;
                }
                (Variant::Improved, rtt) if measured && received > 0.0 => {
                    // Before a loss, or before the sender gave a round
                    // trip (a receiver that just joined), twice what
                    // arrived.
                    let arrived = 2.0 * received / secs;
                    let inst = match rtt {
                        Some(r) if self.events.has_loss() => {
                            throughput(p, r.as_secs_f64().max(1e-4), self.events.rate())
                                .min(arrived)
                        }
                        _ => arrived,
                    };
                    self.rate = match self.reported {
                        true => smooth(self.rate, inst, NetworkState::Unloaded.smoothing()),
                        // Its first measurement: no initial guess to smooth.
                        false => inst,
                    };
                    self.reported = true;
                }
                _ => {}
            }
        }
        IntervalReport {
            rate: self.rate,
            measured: self.variant == Variant::Paper || self.reported,
            loss: self.loss(),
            rtt,
            state,
            interval,
        }
    }

    /// The rate computed at the last report, bytes per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The loss rate in use (0–1): the weighted loss of the last reports
    /// (the paper's) or the loss event rate (fanout's).
    pub fn loss(&self) -> f64 {
        match self.variant {
            Variant::Paper => self.loss.smoothed(),
            Variant::Improved => self.events.rate(),
        }
    }

    /// The round trip in use, once known: the paper's calibrated estimate,
    /// or fanout's smoothed anchored one (until its first report, the
    /// anchored one).
    pub fn rtt(&self) -> Option<Duration> {
        match (self.variant, self.srtt) {
            (Variant::Paper, _) => self.rtt.rtt(),
            (Variant::Improved, Some(s)) => Some(Duration::from_secs_f64(s)),
            (Variant::Improved, None) => self.rtt.anchored(),
        }
    }

    /// The jitter a report block carries, timestamp units.
    pub fn jitter(&self) -> u32 {
        self.jitter.value()
    }

    /// The sequence state, once a packet came.
    pub fn sequence(&self) -> Option<&SourceSequence> {
        self.sequence.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `n` packets of 1328 bytes from `seq`, 20 ms apart (1800
    /// timestamp units at 90 kHz), one way `one_way`, dropping those
    /// `lost` says.
    fn feed(
        e: &mut ReceiverEstimator,
        seq: &mut u16,
        n: u32,
        one_way: f64,
        lost: impl Fn(u16) -> bool,
    ) {
        for _ in 0..n {
            let ts = u32::from(*seq) * 1800;
            if !lost(*seq) {
                e.on_rtp(Instant::ZERO, *seq, ts, 1328, ts + 900, one_way);
            }
            *seq = seq.wrapping_add(1);
        }
    }

    #[test]
    fn without_loss_the_rate_grows_a_packet_per_rtt_each_report() {
        let mut e = ReceiverEstimator::new(INITIAL_RATE, Variant::Paper);
        let mut seq = 1000;
        feed(&mut e, &mut seq, 50, 0.025, |_| false);
        let r = e.on_report(
            Instant::ZERO + Duration::from_secs(1),
            Duration::from_secs(1),
        );
        assert_eq!(r.interval.lost, 0);
        assert_eq!(r.state, NetworkState::Unloaded);
        // Steady jitter (0): unloaded, σ = 0.9: the rate moves 0.9 of the
        // way to rate + P/RTT, RTT = 2 × 25 ms before calibration.
        let want = INITIAL_RATE + 0.9 * (1328.0 / 0.050);
        assert!((r.rate - want).abs() < 1e-6, "{} {want}", r.rate);
    }

    #[test]
    fn losses_bring_the_rate_to_the_tcp_equation_smoothly() {
        let mut e = ReceiverEstimator::new(500_000.0, Variant::Paper);
        let mut seq = 0;
        // Prime the source, then an interval losing 1 in 50.
        feed(&mut e, &mut seq, 2, 0.025, |_| false);
        let before = e
            .on_report(
                Instant::ZERO + Duration::from_secs(1),
                Duration::from_secs(1),
            )
            .rate;
        feed(&mut e, &mut seq, 500, 0.025, |s| s % 50 == 0);
        let r = e.on_report(
            Instant::ZERO + Duration::from_secs(1),
            Duration::from_secs(1),
        );
        assert_eq!(r.interval.lost, 10);
        assert!(
            (r.loss - 0.02 * 1.0 / 2.0).abs() < 2e-3,
            "two intervals: {}",
            r.loss
        );
        let target = tcp_friendly(1328.0, 0.050, r.loss);
        assert!(target < before);
        assert!((r.rate - smooth(before, target, 0.9)).abs() < 1e-6);
        // Calibrated by the sender's 40 ms, the round trip follows.
        e.on_sender_rtt(Duration::from_millis(40));
        feed(&mut e, &mut seq, 20, 0.025, |_| false);
        let rtt = e
            .on_report(
                Instant::ZERO + Duration::from_secs(1),
                Duration::from_secs(1),
            )
            .rtt
            .unwrap()
            .as_secs_f64();
        assert!((rtt - 0.040).abs() < 1e-6, "{rtt}");
    }

    /// Feeds one second of `n` packets of 1328 bytes from `seq`, evenly
    /// spread from `start`, dropping those `lost` says, and reports at its
    /// end.
    fn second(
        e: &mut ReceiverEstimator,
        seq: &mut u16,
        start: &mut Instant,
        n: u32,
        lost: impl Fn(u16) -> bool,
    ) -> IntervalReport {
        for i in 0..n {
            let now = *start + Duration::from_secs(1).mul_f64(f64::from(i) / f64::from(n));
            let ts = u32::from(*seq) * 1800;
            if !lost(*seq) {
                e.on_rtp(now, *seq, ts, 1328, ts + 900, 0.025);
            }
            *seq = seq.wrapping_add(1);
        }
        *start += Duration::from_secs(1);
        e.on_report(*start, Duration::from_secs(1))
    }

    #[test]
    fn two_heavy_intervals_in_a_row_bring_the_rate_to_what_arrived_and_restart_the_history() {
        let mut e = ReceiverEstimator::new(INITIAL_RATE, Variant::Improved);
        e.on_sender_rtt(Duration::from_millis(40));
        let (mut seq, mut t) = (0, Instant::ZERO);
        // A history of rare losses: one in 500.
        for _ in 0..20 {
            second(&mut e, &mut seq, &mut t, 500, |s| s % 500 == 7);
        }
        let settled = e.rate();
        let rare = e.loss();
        // One second losing a third: heavy, but not yet an overrun: its
        // events join the history (a restart would put the loss rate at
        // several times the rare one).
        let one = second(&mut e, &mut seq, &mut t, 300, |s| s % 3 == 0);
        assert!(one.loss < 5.0 * rare, "{} {rare}", one.loss);
        assert!(one.rate > 0.5 * settled, "{} {settled}", one.rate);
        // A second in a row: the sender overruns a path that carries 200
        // packets a second.
        let two = second(&mut e, &mut seq, &mut t, 300, |s| s % 3 == 0);
        let carried = 200.0 * 1328.0;
        assert!(
            (two.rate - carried).abs() / carried < 0.02,
            "{} {carried}",
            two.rate
        );
        // The history is new: the equation at its loss event rate gives
        // what arrived.
        let back = throughput(1328.0, two.rtt.unwrap().as_secs_f64(), two.loss);
        assert!((back - carried).abs() / carried < 0.02, "{back}");
        assert!(two.loss > 2.0 * one.loss, "{} {}", two.loss, one.loss);
        // Too few packets say nothing: 3 of 9 lost twice is not an overrun
        // (restarted from 6 packets a second at 40 ms, the loss rate would
        // be over 0.2).
        let mut f = ReceiverEstimator::new(INITIAL_RATE, Variant::Improved);
        f.on_sender_rtt(Duration::from_millis(40));
        for _ in 0..20 {
            second(&mut f, &mut seq, &mut t, 500, |s| s % 500 == 7);
        }
        for _ in 0..2 {
            second(&mut f, &mut seq, &mut t, 9, |s| s % 3 == 0);
        }
        assert!(f.loss() < 0.05, "{}", f.loss());
        // A restart never raises the rate: where the history already gives
        // less than what arrives, two heavy intervals leave it as it is.
        let mut g = ReceiverEstimator::new(INITIAL_RATE, Variant::Improved);
        g.on_sender_rtt(Duration::from_millis(40));
        for _ in 0..20 {
            second(&mut g, &mut seq, &mut t, 500, |s| s % 4 == 0);
        }
        let heavy = g.loss();
        for _ in 0..2 {
            second(&mut g, &mut seq, &mut t, 300, |s| s % 3 == 0);
        }
        assert!(g.loss() > 0.5 * heavy, "{} {heavy}", g.loss());
        assert!(g.rate() < 200.0 * 1328.0, "{}", g.rate());
    }

    #[test]
    fn fanouts_variant_doubles_what_arrived_until_a_loss_then_follows_the_equation() {
        let mut e = ReceiverEstimator::new(INITIAL_RATE, Variant::Improved);
        let mut seq = 0;
        // 50 packets of 1328 bytes in one second, no loss: twice what
        // arrived (49 counted: the first starts the source's probation,
        // RFC 3550 A.1).
        feed(&mut e, &mut seq, 50, 0.025, |_| false);
        let r = e.on_report(
            Instant::ZERO + Duration::from_secs(1),
            Duration::from_secs(1),
        );
        // The first measurement is taken as it is.
        let first = 2.0 * 49.0 * 1328.0;
        assert!((r.rate - first).abs() < 1e-6, "{}", r.rate);
        assert_eq!(r.loss, 0.0);
        // The sender measured 40 ms, and losses come: the equation at the
        // loss event rate and the round trip in use.
        e.on_sender_rtt(Duration::from_millis(40));
        feed(&mut e, &mut seq, 500, 0.025, |s| s % 50 == 0);
        let r = e.on_report(
            Instant::ZERO + Duration::from_secs(1),
            Duration::from_secs(1),
        );
        assert!(r.loss > 0.0);
        assert_eq!(r.loss, e.loss());
        let rtt = r.rtt.expect("a round trip");
        assert_eq!(e.rtt(), Some(rtt));
        let want = throughput(1328.0, rtt.as_secs_f64(), r.loss).min(2.0 * 490.0 * 1328.0);
        assert!(
            (r.rate - smooth(first, want, 0.9)).abs() < 1e-6,
            "{} {want}",
            r.rate
        );
        // The round trip moves a tenth of the way to each new anchored one.
        let anchored = e.rtt.anchored().unwrap().as_secs_f64();
        feed(&mut e, &mut seq, 50, 0.025, |_| false);
        let next = e
            .on_report(
                Instant::ZERO + Duration::from_secs(1),
                Duration::from_secs(1),
            )
            .rtt
            .unwrap()
            .as_secs_f64();
        let want = rtt.as_secs_f64() + RTT_SMOOTHING * (anchored - rtt.as_secs_f64());
        assert!((next - want).abs() < 1e-9, "{next} {want}");
    }
}
