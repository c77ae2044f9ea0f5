//! ASMP behind the controllers' interface ([`crate::control`]): the
//! sender's [`SenderState`] and the receiver's [`ReceiverEstimator`] with
//! its large-group feedback suppression (ASMP §3.8: past
//! [`SUPPRESS_ABOVE`] of report interval, a receiver waits a truncated
//! exponential time and drops its report if a rate within 2% of its own
//! came first; in fanout's variant, any rate not 2% above its own).

use super::suppression::{self, LAMBDA};
use super::{IntervalReport, ReceiverEstimator, SenderState, Variant};
use crate::control::{AppData, Arrival, Estimates, ReceiverControl, Report, SenderControl};
use fanout_core::{Instant, Rng};
use fanout_rtp::app::{AsmpApp, RateReport, NAME};
use fanout_rtp::report::Block;
use std::time::Duration;

/// Report intervals longer than this use feedback suppression (ASMP
/// §3.8): some 60 receivers of a 1 Mbit/s stream.
pub const SUPPRESS_ABOVE: Duration = Duration::from_secs(5);

fn app(a: &AsmpApp) -> AppData {
    let (subtype, data) = a.encode();
    AppData {
        name: NAME,
        subtype,
        data,
    }
}

/// ASMP's sender.
#[derive(Debug)]
pub struct AsmpSender {
    state: SenderState,
}

impl AsmpSender {
    /// Sending at `initial_rate` bytes per second until a report.
    pub fn new(ssrc: u32, initial_rate: f64) -> Self {
        AsmpSender {
            state: SenderState::new(ssrc, initial_rate),
        }
    }
}

impl SenderControl for AsmpSender {
    fn rate(&self) -> f64 {
        self.state.rate()
    }
    fn on_send(&mut self, _now: Instant, _seq: u16, _len: usize) -> Option<(u16, Vec<u8>)> {
        None
    }
    fn on_block(&mut self, now: Instant, from: u32, block: &Block, arrival: u32) {
        self.state.on_report_block(now, from, block, arrival);
    }
    fn on_app(&mut self, now: Instant, from: u32, a: &AppData) -> bool {
        match AsmpApp::decode(a.name, a.subtype, &a.data) {
            Ok(AsmpApp::Rate(r)) => {
                self.state.on_rate_report(now, from, &r);
                true
            }
            _ => false,
        }
    }
    fn on_bye(&mut self, _now: Instant, ssrc: u32) {
        self.state.on_bye(ssrc);
    }
    fn expire(&mut self, now: Instant, timeout: Duration) {
        // Reports live two report intervals (the timeout is five).
        self.state.expire(now, timeout, timeout * 2 / 5);
    }
    fn sr_apps(&mut self, _now: Instant) -> Vec<AppData> {
        let trips = self.state.round_trips_to_publish();
        if trips.entries.is_empty() {
            return Vec::new();
        }
        vec![app(&AsmpApp::RoundTrips(trips))]
    }
    fn receivers(&self) -> usize {
        self.state.receivers()
    }
    fn limiting_receiver(&self) -> Option<u32> {
        self.state.limiting()
    }
}

/// ASMP's receiver.
#[derive(Debug)]
pub struct AsmpReceiver {
    estimator: ReceiverEstimator,
    variant: Variant,
    ssrc: u32,
    /// A report waiting out its suppression timer, and whether another
    /// receiver's made it needless.
    pending: Option<(IntervalReport, bool)>,
    /// The least rate another receiver reported, and when.
    heard: Option<(f64, Instant)>,
    suppressed: u64,
}

impl AsmpReceiver {
    /// A receiver running `variant`; `ssrc` is its own.
    pub fn new(variant: Variant, ssrc: u32) -> Self {
        AsmpReceiver {
            estimator: ReceiverEstimator::new(super::INITIAL_RATE, variant),
            variant,
            ssrc,
            pending: None,
            heard: None,
            suppressed: 0,
        }
    }

    /// Its estimates.
    pub fn estimator(&self) -> &ReceiverEstimator {
        &self.estimator
    }

    fn suppresses(&self, own: f64, heard: f64) -> bool {
        match self.variant {
            Variant::Paper => suppression::suppresses(own, heard),
            Variant::Improved => suppression::suppresses_at_or_below(own, heard),
        }
    }

    fn report(r: &IntervalReport) -> AppData {
        app(&AsmpApp::Rate(RateReport {
            rate: r.rate as u64,
            loss_ppm: (r.loss * 1e6) as u32,
            rtt_us: r
                .rtt
                .map_or(0, |d| u32::try_from(d.as_micros()).unwrap_or(u32::MAX)),
        }))
    }
}

impl ReceiverControl for AsmpReceiver {
    fn on_rtp(&mut self, now: Instant, p: &Arrival<'_>) {
        self.estimator
            .on_rtp(now, p.seq, p.timestamp, p.len, p.arrival_ticks, p.one_way);
    }

    fn on_app(&mut self, now: Instant, from_sender: bool, a: &AppData) {
        match AsmpApp::decode(a.name, a.subtype, &a.data) {
            Ok(AsmpApp::RoundTrips(t)) if from_sender => {
                if let Some((_, us)) = t.entries.iter().find(|(s, _)| *s == self.ssrc) {
                    self.estimator
                        .on_sender_rtt(Duration::from_micros(u64::from(*us)));
                }
            }
            Ok(AsmpApp::Rate(r)) if !from_sender => {
                let rate = r.rate as f64;
                let needless = self
                    .pending
                    .as_ref()
                    .is_some_and(|(own, _)| self.suppresses(own.rate, rate));
                if let Some((_, suppressed)) = self.pending.as_mut() {
                    *suppressed |= needless;
                }
                if self.heard.is_none_or(|(least, _)| rate <= least) {
                    self.heard = Some((rate, now));
                }
            }
            _ => {}
        }
    }

    fn on_report(
        &mut self,
        now: Instant,
        elapsed: Duration,
        interval: Duration,
        rng: &mut Rng,
    ) -> Report {
        let report = self.estimator.on_report(now, elapsed);
        if !report.measured {
            return Report::Now(None);
        }
        if interval <= SUPPRESS_ABOVE {
            return Report::Now(Some(Self::report(&report)));
        }
        // fanout's variant: a report heard this interval already makes
        // this one needless (the paper waits only for what comes while
        // the timer runs).
        let heard = self
            .heard
            .filter(|(_, at)| now.saturating_duration_since(*at) <= interval)
            .is_some_and(|(rate, _)| {
                self.variant == Variant::Improved && self.suppresses(report.rate, rate)
            });
        self.heard = None;
        let wait = suppression::truncated_exponential(interval, LAMBDA, rng);
        self.pending = Some((report, heard));
        Report::Later(now + wait)
    }

    fn deferred_report(&mut self, _now: Instant) -> Option<AppData> {
        let (report, suppressed) = self.pending.take()?;
        if suppressed {
            self.suppressed += 1;
            return None;
        }
        Some(Self::report(&report))
    }

    fn poll_feedback(&mut self, _now: Instant) -> Option<AppData> {
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn handle_timeout(&mut self, _now: Instant, _rng: &mut Rng) {}

    fn estimates(&self) -> Estimates {
        Estimates {
            rate: self.estimator.rate(),
            loss: self.estimator.loss(),
            rtt: self.estimator.rtt(),
        }
    }

    fn suppressed(&self) -> u64 {
        self.suppressed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asmp::INITIAL_RATE;

    fn rate_report(rate: u64) -> AppData {
        app(&AsmpApp::Rate(RateReport {
            rate,
            loss_ppm: 0,
            rtt_us: 0,
        }))
    }

    /// A receiver of `variant` that measured a second of 50 packets and
    /// reported, at 1 s.
    fn measured(variant: Variant) -> AsmpReceiver {
        let mut r = AsmpReceiver::new(variant, 5);
        for k in 0..50u16 {
            let at = Instant::from_nanos(u64::from(k) * 20_000_000);
            let ts = u32::from(k) * 1800;
            r.on_rtp(
                at,
                &Arrival {
                    seq: k,
                    timestamp: ts,
                    len: 1328,
                    arrival_ticks: ts,
                    one_way: 0.01,
                    extension: None,
                },
            );
        }
        let second = Duration::from_secs(1);
        let t = Instant::ZERO + second;
        let report = r.on_report(t, second, second, &mut Rng::new(2));
        assert!(matches!(report, Report::Now(Some(_))), "{report:?}");
        r
    }

    /// A receiver of `variant` that heard another's report of `heard`
    /// before its own report came due in a large group: whether its own
    /// still goes.
    fn reports_after_hearing(variant: Variant, heard: u64) -> bool {
        let mut r = measured(variant);
        let mut rng = Rng::new(1);
        let t0 = Instant::ZERO + Duration::from_secs(1);
        r.on_app(t0, false, &rate_report(heard));
        let interval = SUPPRESS_ABOVE * 2;
        let Report::Later(at) = r.on_report(t0, interval, interval, &mut rng) else {
            panic!("a large group's report waits");
        };
        assert!(at <= t0 + interval);
        let sent = r.deferred_report(at).is_some();
        assert_eq!(r.suppressed(), u64::from(!sent));
        sent
    }

    #[test]
    fn in_a_large_group_a_report_goes_only_if_no_lower_one_was_heard() {
        // One heard below its own rate (or 2% above) makes its report
        // needless in fanout's variant, even heard before its timer
        // started; one well above does not.
        let own = measured(Variant::Improved).estimates().rate as u64;
        assert!(!reports_after_hearing(Variant::Improved, own / 2));
        assert!(!reports_after_hearing(Variant::Improved, own + own / 100));
        assert!(reports_after_hearing(Variant::Improved, own * 2));
        // The paper's rule: only a similar rate heard while the timer runs.
        let own = measured(Variant::Paper).estimates().rate as u64;
        assert!(reports_after_hearing(Variant::Paper, own));
        let mut r = AsmpReceiver::new(Variant::Paper, 5);
        let mut rng = Rng::new(1);
        let interval = SUPPRESS_ABOVE * 2;
        let Report::Later(at) = r.on_report(Instant::ZERO, interval, interval, &mut rng) else {
            panic!("waits");
        };
        let initial = INITIAL_RATE as u64;
        r.on_app(Instant::ZERO, false, &rate_report(initial + initial / 100));
        assert_eq!(r.deferred_report(at), None);
        // A small group reports at once; a receiver that has measured
        // nothing sends its RR alone.
        let mut r = AsmpReceiver::new(Variant::Improved, 5);
        let small = SUPPRESS_ABOVE / 2;
        assert_eq!(
            r.on_report(Instant::ZERO, small, small, &mut rng),
            Report::Now(None)
        );
    }
}
