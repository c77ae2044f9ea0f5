//! A TFMCC sender (RFC 4654 §3): it sends at the rate of its current
//! limiting receiver (CLR) — the receiver that reported the least —
//! taking a lower report at once and a higher one from the CLR by at most
//! one packet per largest round trip each largest round trip; before any
//! receiver saw a loss (slowstart) it follows twice the least receive rate
//! reported. Feedback rounds of [`ROUND_RTTS`] largest round trips pace
//! the other receivers' reports; each data packet carries the round, the
//! least rate reported in it (the suppression rate) and the echo of one
//! receiver's feedback, so receivers measure their round trips: those
//! without a measurement first, then the CLR.

use super::{clock_us, CLR_QUIET_RTTS, CLR_SILENT_RTTS, INITIAL_RTT, MAX_RTT_DECAY, ROUND_RTTS};
use crate::control::{AppData, SenderControl};
use fanout_core::Instant;
use fanout_rtp::report::Block;
use fanout_rtp::tfmcc::{
    DataInfo, Feedback, EXTENSION_ID, FEEDBACK_HAVE_LOSS, FEEDBACK_HAVE_RTT, FEEDBACK_LEAVING,
    FLAG_ECHO, FLAG_SLOWSTART,
};
use std::collections::BTreeMap;
use std::time::Duration;

/// Most receivers a sender keeps state for.
pub const MAX_RECEIVERS: usize = 100_000;

/// A feedback waiting to be echoed.
#[derive(Debug, Clone, Copy)]
struct Echo {
    timestamp_us: u32,
    arrived: Instant,
    /// The receiver had no round trip yet: it goes first.
    urgent: bool,
}

/// The current limiting receiver.
#[derive(Debug, Clone, Copy)]
struct Clr {
    ssrc: u32,
    /// When it was chosen.
    chosen: Instant,
    /// When its feedback last came.
    heard: Instant,
    /// When the rate was last halved for its silence (or it was heard).
    halved: Instant,
    rtt: f64,
    /// The rate it last reported, bytes per second.
    rate: f64,
}

impl Clr {
    fn new(ssrc: u32, now: Instant, rtt: f64, rate: f64) -> Self {
        Clr {
            ssrc,
            chosen: now,
            heard: now,
            halved: now,
            rtt,
            rate,
        }
    }

    fn heard(&mut self, now: Instant, rtt: f64, rate: f64) {
        self.heard = now;
        self.rtt = rtt;
        self.rate = rate;
    }

    /// Its round trip, or the largest if it has none, s.
    fn rtt_or(&self, max_rtt: f64) -> f64 {
        if self.rtt > 0.0 {
            self.rtt
        } else {
            max_rtt
        }
    }
}

/// A TFMCC sender.
#[derive(Debug)]
pub struct TfmccSender {
    rate: f64,
    slowstart: bool,
    clr: Option<Clr>,
    /// The largest round trip reported, s (decays by [`MAX_RTT_DECAY`]
    /// each round).
    max_rtt: f64,
    round: u16,
    round_start: Instant,
    /// A receiver other than the CLR answered this round.
    round_answered: bool,
    /// The least rate reported this round (the suppression rate).
    round_least: Option<f64>,
    round_max_rtt: f64,
    /// Slowstart: the least receive rate reported this round.
    round_least_receive: Option<f64>,
    /// When the rate last rose.
    raised: Instant,
    echoes: BTreeMap<u32, Echo>,
    /// The receiver whose echo goes in each packet until another's comes.
    echoing: Option<(u32, Echo)>,
    /// Receivers heard and when.
    heard: BTreeMap<u32, Instant>,
    packet_size: f64,
}

impl TfmccSender {
    /// Sending at `initial_rate` bytes per second, in slowstart, from
    /// `now`.
    pub fn new(initial_rate: f64, now: Instant) -> Self {
        TfmccSender {
            rate: initial_rate,
            slowstart: true,
            clr: None,
            max_rtt: INITIAL_RTT.as_secs_f64(),
            round: 0,
            round_start: now,
            round_answered: false,
            round_least: None,
            round_max_rtt: 0.0,
            round_least_receive: None,
            raised: now,
            echoes: BTreeMap::new(),
            echoing: None,
            heard: BTreeMap::new(),
            packet_size: 1356.0,
        }
    }

    fn round_duration(&self) -> Duration {
        Duration::from_secs_f64(self.max_rtt * ROUND_RTTS)
    }

    /// Ends the feedback round if it is time (RFC 4654 §3.4): after one
    /// round duration if another receiver than the CLR answered, else at
    /// the first such answer, at most after two.
    fn maybe_end_round(&mut self, now: Instant) {
        let age = now.saturating_duration_since(self.round_start);
        let t = self.round_duration();
        if (age >= t && self.round_answered) || age >= 2 * t {
            if self.round_max_rtt > 0.0 {
                self.max_rtt = self.round_max_rtt.max(MAX_RTT_DECAY * self.max_rtt);
            }
            if self.slowstart {
                if let Some(least) = self.round_least_receive {
                    self.raise_to(now, least);
                }
            }
            self.round = self.round.wrapping_add(1);
            self.round_start = now;
            self.round_answered = false;
            self.round_least = None;
            self.round_least_receive = None;
            self.round_max_rtt = 0.0;
        }
    }

    /// Raises the rate toward `target`: in slowstart by at most doubling
    /// per largest round trip, else by at most one packet per largest
    /// round trip per largest round trip.
    fn raise_to(&mut self, now: Instant, target: f64) {
        let since = now.saturating_duration_since(self.raised).as_secs_f64();
        let r = self.max_rtt.max(1e-3);
        let cap = if self.slowstart {
            self.rate * 2f64.powf((since / r).min(4.0))
        } else {
            self.rate + self.packet_size / r * (since / r)
        };
        let new = target.min(cap);
        if new > self.rate {
            self.rate = new;
        }
        self.raised = now;
    }

    fn on_feedback(&mut self, now: Instant, from: u32, fb: &Feedback) {
        if fb.flags & FEEDBACK_LEAVING != 0 {
            self.on_bye(now, from);
            return;
        }
        let rtt = f64::from(fb.rtt_us) * 1e-6;
        let have_rtt = fb.flags & FEEDBACK_HAVE_RTT != 0;
        if have_rtt && rtt > 0.0 {
            self.round_max_rtt = self.round_max_rtt.max(rtt);
            // A round trip above the largest counts at once.
            self.max_rtt = self.max_rtt.max(rtt);
        }
        self.echoes.insert(
            from,
            Echo {
                timestamp_us: fb.timestamp_us,
                arrived: now,
                urgent: !have_rtt,
            },
        );
        let rate = f64::from(fb.rate);
        let is_clr = self.clr.is_some_and(|c| c.ssrc == from);
        if fb.round == self.round && !is_clr {
            self.round_answered = true;
            self.round_least = Some(self.round_least.map_or(rate, |l| l.min(rate)));
        }
        if self.slowstart {
            if fb.flags & FEEDBACK_HAVE_LOSS != 0 {
                // A loss ends slowstart: its reporter sets the rate.
                self.slowstart = false;
                self.rate = self.rate.min(rate);
                self.clr = Some(Clr::new(from, now, rtt, rate));
                self.raised = now;
                return;
            }
            let receive = f64::from(fb.receive_rate);
            self.round_least_receive =
                Some(self.round_least_receive.map_or(receive, |l| l.min(receive)));
            // The least reporter is the CLR, in slowstart too.
            match self.clr.as_mut() {
                Some(c) if c.ssrc == from => c.heard(now, rtt, 2.0 * receive),
                Some(c) if 2.0 * receive >= c.rate => {}
                _ => self.clr = Some(Clr::new(from, now, rtt, 2.0 * receive)),
            }
            if is_clr || self.clr.is_some_and(|c| c.ssrc == from) {
                self.raise_to(now, 2.0 * receive);
            }
            return;
        }
        if is_clr {
            if let Some(c) = self.clr.as_mut() {
                c.heard(now, rtt, rate);
            }
            if rate < self.rate {
                self.rate = rate;
                self.raised = now;
            } else {
                self.raise_to(now, rate);
            }
        } else if rate < self.rate || self.clr.is_none() {
            // A receiver below the rate becomes the CLR.
            self.clr = Some(Clr::new(from, now, rtt, rate));
            if rate < self.rate {
                self.rate = rate;
                self.raised = now;
            }
        }
    }

    /// Whether the sender is in slowstart.
    pub fn in_slowstart(&self) -> bool {
        self.slowstart
    }
}

impl SenderControl for TfmccSender {
    fn rate(&self) -> f64 {
        self.rate
    }

    fn on_send(&mut self, now: Instant, _seq: u16, len: usize) -> Option<(u16, Vec<u8>)> {
        self.packet_size += (len as f64 + 40.0 - self.packet_size) / 16.0;
        self.maybe_end_round(now);
        // The echo: a receiver without a round trip first, else the
        // CLR's, else any waiting; kept until another comes.
        let pick = self
            .echoes
            .iter()
            .find(|(_, e)| e.urgent)
            .or_else(|| {
                let clr = self.clr?.ssrc;
                self.echoes.get_key_value(&clr)
            })
            .or_else(|| self.echoes.iter().next())
            .map(|(s, e)| (*s, *e));
        if let Some((ssrc, e)) = pick {
            self.echoes.remove(&ssrc);
            self.echoing = Some((ssrc, e));
        }
        let mut info = DataInfo {
            timestamp_us: clock_us(now),
            round: self.round,
            suppression_rate: self
                .round_least
                .map_or(u32::MAX, |r| r.min(f64::from(u32::MAX - 1)) as u32),
            max_rtt_us: (self.max_rtt * 1e6).min(f64::from(u32::MAX)) as u32,
            rate: self.rate.min(f64::from(u32::MAX)) as u32,
            clr: self.clr.map_or(0, |c| c.ssrc),
            ..DataInfo::default()
        };
        if self.slowstart {
            info.flags |= FLAG_SLOWSTART;
        }
        if let Some((ssrc, e)) = self.echoing {
            info.flags |= FLAG_ECHO;
            info.echo_receiver = ssrc;
            info.echo_timestamp_us = e.timestamp_us;
            let held = now.saturating_duration_since(e.arrived).as_micros();
            info.echo_delay_us = u32::try_from(held).unwrap_or(u32::MAX);
        }
        Some((EXTENSION_ID, info.encode().to_vec()))
    }

    fn on_block(&mut self, now: Instant, from: u32, _block: &Block, _arrival: u32) {
        if self.heard.contains_key(&from) || self.heard.len() < MAX_RECEIVERS {
            self.heard.insert(from, now);
        }
    }

    fn on_app(&mut self, now: Instant, from: u32, app: &AppData) -> bool {
        let Ok(fb) = Feedback::decode(app.name, app.subtype, &app.data) else {
            return false;
        };
        if self.heard.contains_key(&from) || self.heard.len() < MAX_RECEIVERS {
            self.heard.insert(from, now);
        }
        self.on_feedback(now, from, &fb);
        self.maybe_end_round(now);
        true
    }

    fn on_bye(&mut self, _now: Instant, ssrc: u32) {
        self.heard.remove(&ssrc);
        self.echoes.remove(&ssrc);
        if self.clr.is_some_and(|c| c.ssrc == ssrc) {
            // The next round's least report names the new CLR.
            self.clr = None;
        }
    }

    fn expire(&mut self, now: Instant, timeout: Duration) {
        self.heard
            .retain(|_, t| now.saturating_duration_since(*t) <= timeout);
        if let Some(c) = self.clr {
            if !self.heard.contains_key(&c.ssrc) {
                self.clr = None;
            }
        }
    }

    fn sr_apps(&mut self, _now: Instant) -> Vec<AppData> {
        Vec::new()
    }

    fn receivers(&self) -> usize {
        self.heard.len()
    }

    fn limiting_receiver(&self) -> Option<u32> {
        self.clr.map(|c| c.ssrc)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let c = self.clr?;
        let r = c.rtt_or(self.max_rtt);
        let halve = c.halved.max(c.heard) + Duration::from_secs_f64(r * CLR_QUIET_RTTS);
        let gone = c.heard + Duration::from_secs_f64(r * CLR_SILENT_RTTS);
        Some(halve.min(gone))
    }

    fn handle_timeout(&mut self, now: Instant) {
        // RFC 4654 §3.3: the CLR silent for 4 round trips halves the rate
        // (unless it was chosen less than 10 ago), again every 4 it stays
        // silent; silent for 10 it is taken to be gone, and the next
        // feedback names another.
        let Some(c) = self.clr.as_mut() else {
            return;
        };
        let r = c.rtt_or(self.max_rtt);
        let gone = Duration::from_secs_f64(r * CLR_SILENT_RTTS);
        if now.saturating_duration_since(c.heard) >= gone {
            self.clr = None;
            return;
        }
        let quiet = Duration::from_secs_f64(r * CLR_QUIET_RTTS);
        if now.saturating_duration_since(c.halved.max(c.heard)) >= quiet {
            if now.saturating_duration_since(c.chosen) >= gone {
                self.rate = (self.rate / 2.0).max(self.packet_size / 64.0);
            }
            c.halved = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fanout_rtp::tfmcc::NAME;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    fn feedback(round: u16, flags: u8, rate: u32, receive: u32, rtt_ms: u32) -> AppData {
        let (subtype, data) = Feedback {
            timestamp_us: 777,
            round,
            flags,
            rate,
            receive_rate: receive,
            rtt_us: rtt_ms * 1000,
            ..Feedback::default()
        }
        .encode();
        AppData {
            name: NAME,
            subtype,
            data,
        }
    }

    fn info(s: &mut TfmccSender, now: Instant) -> DataInfo {
        let (id, data) = s.on_send(now, 0, 1316).expect("an extension");
        DataInfo::decode(id, &data).expect("TFMCC's")
    }

    #[test]
    fn slowstart_follows_twice_the_least_receive_rate_until_a_loss() {
        let mut s = TfmccSender::new(10_000.0, at(0));
        assert!(s.in_slowstart());
        // Receiver 7 received 50 kB/s, receiver 8 only 20 kB/s: 8 limits.
        let have_rtt = FEEDBACK_HAVE_RTT;
        assert!(s.on_app(at(100), 7, &feedback(0, have_rtt, 100_000, 50_000, 100)));
        assert!(s.on_app(at(100), 8, &feedback(0, have_rtt, 40_000, 20_000, 100)));
        assert_eq!(s.limiting_receiver(), Some(8));
        // Doubling per largest round trip at most (500 ms at first):
        // 100 ms later, 2^(0.1/0.5) of 10 000.
        let r = s.rate();
        assert!(r > 10_000.0 && r <= 10_000.0 * 2f64.powf(0.2) + 1.0, "{r}");
        // Much later, twice the least receive rate.
        s.on_app(at(5000), 8, &feedback(0, have_rtt, 40_000, 20_000, 100));
        assert_eq!(s.rate(), 40_000.0);
        // A loss ends slowstart: its reporter's rate at once.
        s.on_app(
            at(5100),
            7,
            &feedback(0, have_rtt | FEEDBACK_HAVE_LOSS, 30_000, 0, 100),
        );
        assert!(!s.in_slowstart());
        assert_eq!((s.rate(), s.limiting_receiver()), (30_000.0, Some(7)));
        assert_eq!(info(&mut s, at(5100)).flags & FLAG_SLOWSTART, 0);
    }

    #[test]
    fn a_lower_report_takes_over_at_once_and_the_clr_raises_slowly() {
        let mut s = TfmccSender::new(100_000.0, at(0));
        let loss = FEEDBACK_HAVE_RTT | FEEDBACK_HAVE_LOSS;
        s.on_app(at(0), 7, &feedback(0, loss, 100_000, 0, 100));
        // A receiver below the rate becomes the CLR; the rate drops.
        s.on_app(at(10), 9, &feedback(0, loss, 60_000, 0, 100));
        assert_eq!((s.rate(), s.limiting_receiver()), (60_000.0, Some(9)));
        // A report above it from another receiver changes nothing.
        s.on_app(at(20), 7, &feedback(0, loss, 90_000, 0, 100));
        assert_eq!((s.rate(), s.limiting_receiver()), (60_000.0, Some(9)));
        // The CLR asks for more: at most a packet per largest round trip
        // (500 ms) each largest round trip.
        s.on_app(at(520), 9, &feedback(0, loss, 90_000, 0, 100));
        let step = s.packet_size / 0.5 * (0.51 / 0.5);
        assert!((s.rate() - (60_000.0 + step)).abs() < 1.0, "{}", s.rate());
    }

    #[test]
    fn echoes_serve_receivers_without_a_round_trip_first() {
        let mut s = TfmccSender::new(100_000.0, at(0));
        s.on_app(
            at(0),
            7,
            &feedback(0, FEEDBACK_HAVE_RTT, 100_000, 50_000, 100),
        );
        s.on_app(at(1), 8, &feedback(0, 0, 100_000, 50_000, 0));
        let i = info(&mut s, at(3));
        assert_eq!(i.flags & FLAG_ECHO, FLAG_ECHO);
        assert_eq!((i.echo_receiver, i.echo_timestamp_us), (8, 777));
        assert_eq!(i.echo_delay_us, 2000, "held 2 ms");
        // Then the others'; the last echo repeats until another comes.
        assert_eq!(info(&mut s, at(4)).echo_receiver, 7);
        let i = info(&mut s, at(10));
        assert_eq!((i.echo_receiver, i.echo_delay_us), (7, 10_000));
    }

    #[test]
    fn a_silent_clr_halves_the_rate_and_is_then_forgotten() {
        let mut s = TfmccSender::new(100_000.0, at(0));
        let loss = FEEDBACK_HAVE_RTT | FEEDBACK_HAVE_LOSS;
        s.on_app(at(0), 7, &feedback(0, loss, 80_000, 0, 100));
        // Chosen less than 10 round trips ago: no halving yet.
        let t = s.poll_timeout().unwrap();
        assert_eq!(t, at(400));
        s.handle_timeout(t);
        assert_eq!(s.rate(), 80_000.0);
        s.handle_timeout(s.poll_timeout().unwrap());
        // 10 round trips silent: gone; the rate stays.
        s.handle_timeout(s.poll_timeout().unwrap());
        assert_eq!(s.limiting_receiver(), None);
        assert_eq!(s.rate(), 80_000.0);
        // A CLR heard for long that falls silent halves the rate.
        for i in 0..20 {
            s.on_app(at(2000 + 100 * i), 9, &feedback(0, loss, 50_000, 0, 100));
        }
        assert_eq!(s.rate(), 50_000.0);
        let t = s.poll_timeout().unwrap();
        assert_eq!(t, at(3900 + 400));
        s.handle_timeout(t);
        assert_eq!(s.rate(), 25_000.0);
    }

    #[test]
    fn rounds_end_with_feedback_and_carry_the_least_rate_reported() {
        let mut s = TfmccSender::new(100_000.0, at(0));
        let loss = FEEDBACK_HAVE_RTT | FEEDBACK_HAVE_LOSS;
        s.on_app(at(0), 7, &feedback(0, loss, 80_000, 0, 100));
        // Receiver 7 is the CLR; others answer round 0.
        s.on_app(at(100), 8, &feedback(0, loss, 95_000, 0, 100));
        s.on_app(at(110), 9, &feedback(0, loss, 90_000, 0, 100));
        // Receiver 7's first report counts too: it was no CLR when it
        // sent it (RFC 4654 §3.4).
        let i = info(&mut s, at(120));
        assert_eq!((i.round, i.suppression_rate), (0, 80_000));
        // A round lasts 6 largest round trips (500 ms, then decaying to
        // the 100 ms reported): the next begins at 3 s.
        assert_eq!(info(&mut s, at(2999)).round, 0);
        let i = info(&mut s, at(3000));
        assert_eq!((i.round, i.suppression_rate), (1, u32::MAX));
        assert_eq!(i.max_rtt_us, 450_000, "0.9 of 500 ms: nothing larger came");
    }
}
