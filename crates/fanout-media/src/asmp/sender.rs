//! An ASMP sender's state (ASMP §3.1, Figure 1): the round trip to each
//! receiver, measured from the report blocks about its own source (RFC
//! 3550 §6.4.1: A − LSR − DLSR) and published in an APP part beside its
//! next SR; and the rate each receiver reported last. It sends at the
//! least of those rates (eq. 1). Receivers leave with a BYE or when not
//! heard for a timeout (RFC 3550 §6.3.5: five report intervals); at most
//! [`MAX_RECEIVERS`] are tracked, and reports beyond are counted, not
//! kept.

use fanout_core::Instant;
use fanout_rtp::app::{RateReport, RoundTrips, MAX_ROUND_TRIPS};
use fanout_rtp::ntp;
use fanout_rtp::report::Block;
use std::collections::BTreeMap;
use std::time::Duration;

/// Most receivers a sender keeps state for.
pub const MAX_RECEIVERS: usize = 100_000;

/// What the sender knows of one receiver.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ReceiverState {
    /// Its last reported rate, bytes per second, and when it came.
    rate: Option<(f64, Instant)>,
    /// The round trip last measured to it.
    rtt: Option<Duration>,
    /// That round trip is still to be published.
    rtt_unpublished: bool,
    /// When it was last heard.
    heard: Instant,
}

/// The sender's side of ASMP.
#[derive(Debug, Clone)]
pub struct SenderState {
    ssrc: u32,
    /// The rate when no report counts, bytes per second: the initial
    /// one, then the last in force.
    fallback_rate: f64,
    receivers: BTreeMap<u32, ReceiverState>,
    /// Reports from receivers beyond [`MAX_RECEIVERS`], not kept.
    refused: u64,
}

impl SenderState {
    /// The state of the sender whose source is `ssrc`, sending at
    /// `initial_rate` bytes per second until a receiver reports
    /// ([`INITIAL_RATE`](super::INITIAL_RATE) in the paper's runs).
    pub fn new(ssrc: u32, initial_rate: f64) -> Self {
        SenderState {
            ssrc,
            fallback_rate: initial_rate,
            receivers: BTreeMap::new(),
            refused: 0,
        }
    }

    fn receiver(&mut self, now: Instant, ssrc: u32) -> Option<&mut ReceiverState> {
        if !self.receivers.contains_key(&ssrc) && self.receivers.len() >= MAX_RECEIVERS {
            self.refused += 1;
            return None;
        }
        let r = self.receivers.entry(ssrc).or_insert(ReceiverState {
            rate: None,
            rtt: None,
            rtt_unpublished: false,
            heard: now,
        });
        r.heard = now;
        Some(r)
    }

    /// A report block from receiver `from`, in a compound that arrived at
    /// `arrival` (the middle 32 bits of the sender's NTP clock then):
    /// about this sender's source, it gives the round trip to `from`.
    pub fn on_report_block(&mut self, now: Instant, from: u32, block: &Block, arrival: u32) {
        if block.ssrc != self.ssrc {
            return;
        }
        let rtt = ntp::round_trip(arrival, block.lsr, block.dlsr);
        if let (Some(r), Some(rtt)) = (self.receiver(now, from), rtt) {
            r.rtt = Some(rtt);
            r.rtt_unpublished = true;
        }
    }

    /// Receiver `from` reported the rate it computed (its APP part).
    pub fn on_rate_report(&mut self, now: Instant, from: u32, report: &RateReport) {
        if let Some(r) = self.receiver(now, from) {
            r.rate = Some((report.rate as f64, now));
        }
    }

    /// Receiver `ssrc` left (BYE).
    pub fn on_bye(&mut self, ssrc: u32) {
        self.receivers.remove(&ssrc);
    }

    /// Forgets receivers not heard since `now − timeout`, and rate
    /// reports older than `report_age`: a receiver whose report was
    /// suppressed (ASMP §3.8) or lost no longer holds the rate down with
    /// an old one. The rate stays where it was if no report is left.
    pub fn expire(&mut self, now: Instant, timeout: Duration, report_age: Duration) {
        let rate = self.rate();
        self.receivers
            .retain(|_, r| now.saturating_duration_since(r.heard) <= timeout);
        for r in self.receivers.values_mut() {
            if r.rate
                .is_some_and(|(_, at)| now.saturating_duration_since(at) > report_age)
            {
                r.rate = None;
            }
        }
        if self.receivers.values().all(|r| r.rate.is_none()) {
            self.fallback_rate = rate;
        }
    }

    /// The sending rate (eq. 1): the least rate reported by a receiver
    /// still in the session, or, with none, the initial rate or the last
    /// one in force.
    pub fn rate(&self) -> f64 {
        self.receivers
            .values()
            .filter_map(|r| r.rate.map(|(rate, _)| rate))
            .reduce(f64::min)
            .unwrap_or(self.fallback_rate)
    }

    /// The receiver whose report sets the rate, once one reported.
    pub fn limiting(&self) -> Option<u32> {
        self.receivers
            .iter()
            .filter_map(|(s, r)| Some((*s, r.rate?.0)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(s, _)| s)
    }

    /// Round trips measured since the last call, for the APP part beside
    /// the next SR (at most [`MAX_ROUND_TRIPS`]; the rest wait for the
    /// next).
    pub fn round_trips_to_publish(&mut self) -> RoundTrips {
        let mut entries = Vec::new();
        for (ssrc, r) in &mut self.receivers {
            if entries.len() == MAX_ROUND_TRIPS {
                break;
            }
            if let (true, Some(rtt)) = (r.rtt_unpublished, r.rtt) {
                r.rtt_unpublished = false;
                let us = u32::try_from(rtt.as_micros()).unwrap_or(u32::MAX);
                entries.push((*ssrc, us));
            }
        }
        RoundTrips { entries }
    }

    /// Receivers known.
    pub fn receivers(&self) -> usize {
        self.receivers.len()
    }

    /// Reports from receivers beyond [`MAX_RECEIVERS`].
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asmp::INITIAL_RATE;

    fn block(ssrc: u32, lsr: u32, dlsr: u32) -> Block {
        Block {
            ssrc,
            fraction_lost: 0,
            cumulative_lost: 0,
            extended_max: 0,
            jitter: 0,
            lsr,
            dlsr,
        }
    }

    fn rate(r: u64) -> RateReport {
        RateReport {
            rate: r,
            loss_ppm: 0,
            rtt_us: 0,
        }
    }

    #[test]
    fn the_sender_follows_the_least_rate_and_publishes_round_trips() {
        let t0 = Instant::ZERO;
        let mut s = SenderState::new(7, INITIAL_RATE);
        assert_eq!(s.rate(), INITIAL_RATE);
        s.on_rate_report(t0, 1, &rate(300_000));
        s.on_rate_report(t0, 2, &rate(120_000));
        s.on_rate_report(t0, 3, &rate(200_000));
        assert_eq!(s.rate(), 120_000.0);
        // Receiver 2 reports more now: the least is 200 000.
        s.on_rate_report(t0, 2, &rate(250_000));
        assert_eq!(s.rate(), 200_000.0);
        // RFC 3550's example round trip, to receiver 3; a block about
        // another source gives none.
        s.on_report_block(t0, 3, &block(7, 0xb705_2000, 0x0005_4000), 0xb710_8000);
        s.on_report_block(t0, 1, &block(99, 0xb705_2000, 0x0005_4000), 0xb710_8000);
        let published = s.round_trips_to_publish();
        assert_eq!(published.entries, [(3, 6_125_000)]);
        assert!(s.round_trips_to_publish().entries.is_empty(), "once");
        // Receiver 3 leaves: the least is 250 000.
        s.on_bye(3);
        assert_eq!(s.rate(), 250_000.0);
    }

    #[test]
    fn silent_receivers_expire_and_strangers_are_bounded() {
        let mut s = SenderState::new(7, INITIAL_RATE);
        s.on_rate_report(Instant::ZERO, 1, &rate(100_000));
        let later = Instant::ZERO.saturating_add(Duration::from_secs(30));
        s.on_rate_report(later, 2, &rate(400_000));
        s.expire(later, Duration::from_secs(25), Duration::from_secs(10));
        assert_eq!(s.receivers(), 1);
        assert_eq!(s.rate(), 400_000.0);
        // Receiver 2 still sends RRs but no rate report for long: its old
        // report no longer counts, and the rate stays where it was.
        let much_later = later.saturating_add(Duration::from_secs(11));
        s.on_report_block(much_later, 2, &block(7, 0, 0), 0);
        s.expire(much_later, Duration::from_secs(25), Duration::from_secs(10));
        assert_eq!((s.receivers(), s.limiting()), (1, None));
        assert_eq!(s.rate(), 400_000.0);
        s.on_rate_report(much_later, 2, &rate(300_000));
        assert_eq!(s.rate(), 300_000.0);
        for i in 0..MAX_RECEIVERS as u32 + 10 {
            s.on_rate_report(later, 1000 + i, &rate(500_000));
        }
        assert_eq!(s.receivers(), MAX_RECEIVERS);
        assert_eq!(s.refused(), 11, "receiver 2 was already known");
    }
}
