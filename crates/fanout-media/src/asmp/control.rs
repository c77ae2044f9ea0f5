//! ASMP behind the controllers' interface ([`crate::control`]): the
//! sender's [`SenderState`] and the receiver's [`ReceiverEstimator`] with
//! its large-group feedback suppression (ASMP §3.8: past
//! [`SUPPRESS_ABOVE`] of report interval, a receiver waits a truncated
//! exponential time and drops its report if a rate within 2% of its own
//! came first).

use super::suppression::{self, LAMBDA};
use super::{IntervalReport, ReceiverEstimator, SenderState, Variant};
use crate::control::{AppData, Arrival, Estimates, ReceiverControl, SenderControl};
use fanout_core::{Instant, Rng};
use fanout_rtp::app::{AsmpApp, RateReport, NAME};
use fanout_rtp::report::Block;
use std::time::Duration;

/// Report intervals (deterministic, RFC 3550 §6.3.1) longer than this
/// use feedback suppression (ASMP §3.8): some 60 receivers of a 1 Mbit/s
/// stream.
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
        self.state.expire(now, timeout);
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
    ssrc: u32,
    /// A report waiting out its suppression timer: when it goes, and
    /// whether a similar one was heard.
    pending: Option<(Instant, IntervalReport, bool)>,
    ready: Option<AppData>,
    suppressed: u64,
}

impl AsmpReceiver {
    /// A receiver running `variant`; `ssrc` is its own.
    pub fn new(variant: Variant, ssrc: u32) -> Self {
        AsmpReceiver {
            estimator: ReceiverEstimator::new(super::INITIAL_RATE, variant),
            ssrc,
            pending: None,
            ready: None,
            suppressed: 0,
        }
    }

    /// Its estimates.
    pub fn estimator(&self) -> &ReceiverEstimator {
        &self.estimator
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

    fn on_app(&mut self, _now: Instant, from_sender: bool, a: &AppData) {
        match AsmpApp::decode(a.name, a.subtype, &a.data) {
            Ok(AsmpApp::RoundTrips(t)) if from_sender => {
                if let Some((_, us)) = t.entries.iter().find(|(s, _)| *s == self.ssrc) {
                    self.estimator
                        .on_sender_rtt(Duration::from_micros(u64::from(*us)));
                }
            }
            Ok(AsmpApp::Rate(r)) if !from_sender => {
                if let Some((_, own, suppressed)) = self.pending.as_mut() {
                    *suppressed |= suppression::suppresses(own.rate, r.rate as f64);
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
    ) -> Option<AppData> {
        let report = self.estimator.on_report(elapsed);
        if interval > SUPPRESS_ABOVE {
            let wait = suppression::truncated_exponential(interval, LAMBDA, rng);
            self.pending = Some((now + wait, report, false));
            return None;
        }
        Some(Self::report(&report))
    }

    fn poll_feedback(&mut self, _now: Instant) -> Option<AppData> {
        self.ready.take()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.pending.as_ref().map(|p| p.0)
    }

    fn handle_timeout(&mut self, now: Instant, _rng: &mut Rng) {
        if let Some((at, report, suppressed)) = self.pending.take() {
            if now < at {
                self.pending = Some((at, report, suppressed));
            } else if suppressed {
                self.suppressed += 1;
            } else {
                self.ready = Some(Self::report(&report));
            }
        }
    }

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
