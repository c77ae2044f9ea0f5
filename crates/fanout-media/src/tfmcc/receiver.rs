//! A TFMCC receiver (RFC 4654 §4): it measures its loss event rate
//! ([`LossEvents`]), its round trip (from the sender's echo of its own
//! feedback, smoothed; between echoes adjusted by the one-way delay's
//! change), and its receive rate, and computes the TCP-friendly rate
//! (RFC 5348 §3.1, t_RTO = 4·R); before any loss it reports twice its
//! receive rate (slowstart). The current limiting receiver (CLR) gives
//! feedback once per round trip; the others once per feedback round, after
//! a timer biased toward the end of the round, cancelled when the sender
//! echoes a suppression rate not far above their own.

use super::loss_events::LossEvents;
use super::{clock_us, feedback_timer, CLR_RTT_GAIN, INITIAL_RTT, RTT_GAIN, SUPPRESSION_MARGIN};
use crate::control::{echoed_round_trip, AppData, Arrival, Estimates, ReceiverControl, Report};
use fanout_core::tfrc::throughput;
use fanout_core::{Instant, Rng};
use fanout_rtp::tfmcc::{
    DataInfo, Feedback, FEEDBACK_HAVE_LOSS, FEEDBACK_HAVE_RTT, FLAG_ECHO, NAME,
};
use std::collections::VecDeque;
use std::time::Duration;

/// A TFMCC receiver.
#[derive(Debug)]
pub struct TfmccReceiver {
    ssrc: u32,
    /// The last sequence number taken, once one came.
    last_seq: Option<u16>,
    /// Draws the feedback timers.
    rng: Rng,
    losses: LossEvents,
    /// The smoothed round trip, once measured, s.
    rtt: Option<f64>,
    /// The one-way delay (µs, clocks' offset included) when `rtt` was
    /// last measured, and that round trip.
    anchor: Option<(i64, f64)>,
    /// The one-way delay of the latest packet, µs (clocks' offset
    /// included).
    one_way_us: Option<i64>,
    /// The largest round trip the sender announced, s.
    max_rtt: f64,
    /// The last echo taken (its timestamp), so one echo is one sample.
    last_echo: Option<u32>,
    /// Arrivals over the last round trip or so: (when, bytes).
    window: VecDeque<(Instant, usize)>,
    window_bytes: usize,
    /// Average packet size, bytes.
    packet_size: f64,
    /// The last data packet's timestamp and when it came.
    last_data: Option<(u32, Instant)>,
    received: u32,
    /// The feedback round in progress, the rate computed when it began,
    /// and the timer of this receiver's feedback in it, if still set.
    round: Option<u16>,
    round_rate: f64,
    timer: Option<Instant>,
    /// Whether this receiver is the CLR, and when it last gave feedback.
    is_clr: bool,
    last_feedback: Option<Instant>,
    ready: Option<AppData>,
    suppressed: u64,
    rate: f64,
}

impl TfmccReceiver {
    /// A receiver whose SSRC is `ssrc`.
    pub fn new(ssrc: u32) -> Self {
        TfmccReceiver {
            ssrc,
            last_seq: None,
            rng: Rng::new(u64::from(ssrc) ^ 0x7f4a_7c15_9e37_79b9),
            losses: LossEvents::default(),
            rtt: None,
            anchor: None,
            one_way_us: None,
            max_rtt: INITIAL_RTT.as_secs_f64(),
            last_echo: None,
            window: VecDeque::new(),
            window_bytes: 0,
            packet_size: 0.0,
            last_data: None,
            received: 0,
            round: None,
            round_rate: f64::INFINITY,
            timer: None,
            is_clr: false,
            last_feedback: None,
            ready: None,
            suppressed: 0,
            rate: 0.0,
        }
    }

    /// The round trip in use, s: measured and adjusted by the one-way
    /// delay since (RFC 4654 §4.2.3), or the sender's largest before a
    /// measurement.
    fn rtt_now(&self) -> f64 {
        match (self.anchor, self.one_way_us, self.is_clr) {
            (Some((d0, r0)), Some(d), false) => (r0 + (d - d0) as f64 * 1e-6).max(r0 * 0.5),
            _ => self.rtt.unwrap_or(self.max_rtt),
        }
    }

    /// Bytes per second received over the last round trip (at least
    /// 100 ms).
    fn receive_rate(&self) -> f64 {
        let span = self.rtt_now().max(0.1);
        self.window_bytes as f64 / span
    }

    fn compute_rate(&mut self) -> f64 {
        let r = self.rtt_now().max(1e-4);
        self.rate = if self.losses.has_loss() && self.packet_size > 0.0 {
            throughput(self.packet_size, r, self.losses.rate())
        } else {
            2.0 * self.receive_rate()
        };
        self.rate
    }

    fn on_info(&mut self, now: Instant, info: &DataInfo) {
        let now_us = clock_us(now);
        self.max_rtt = f64::from(info.max_rtt_us.max(1)) * 1e-6;
        self.one_way_us = Some(i64::from(now_us.wrapping_sub(info.timestamp_us) as i32));
        self.is_clr = info.clr == self.ssrc;
        let echo = info.flags & FLAG_ECHO != 0 && info.echo_receiver == self.ssrc;
        if echo && self.last_echo != Some(info.echo_timestamp_us) {
            self.last_echo = Some(info.echo_timestamp_us);
            let sample = echoed_round_trip(now, info.echo_timestamp_us, info.echo_delay_us)
                .filter(|d| !d.is_zero());
            if let Some(sample) = sample {
                let sample = sample.as_secs_f64();
                let gain = if self.is_clr { CLR_RTT_GAIN } else { RTT_GAIN };
                let rtt = self
                    .rtt
                    .map_or(sample, |r| gain * sample + (1.0 - gain) * r);
                self.rtt = Some(rtt);
                self.anchor = self.one_way_us.map(|d| (d, rtt));
            }
        }
        if self.round != Some(info.round) {
            // A new round: feedback for the old one is void.
            self.round = Some(info.round);
            self.round_rate = self.compute_rate();
            self.timer = None;
            if !self.is_clr {
                self.timer = Some(now + self.round_timer());
            }
        }
        if let Some(t) = self.timer {
            // A rate already reported this round, not far above this
            // receiver's, makes its feedback needless.
            let supp = f64::from(info.suppression_rate);
            if info.suppression_rate != u32::MAX
                && self.round_rate > (1.0 - SUPPRESSION_MARGIN) * supp
                && t > now
            {
                self.timer = None;
                self.suppressed += 1;
            }
        }
    }

    /// This receiver's feedback delay in the round just begun.
    fn round_timer(&mut self) -> Duration {
        let x = 1.0 - self.rng.next_f64();
        feedback_timer(Duration::from_secs_f64(self.max_rtt), x)
    }

    fn feedback(&mut self, now: Instant) -> AppData {
        let rate = self.compute_rate();
        let mut flags = 0;
        if self.rtt.is_some() {
            flags |= FEEDBACK_HAVE_RTT;
        }
        if self.losses.has_loss() {
            flags |= FEEDBACK_HAVE_LOSS;
        }
        let (echo, delay) = self.last_data.map_or((0, 0), |(ts, at)| {
            let d = now.saturating_duration_since(at).as_micros();
            (ts, u32::try_from(d).unwrap_or(u32::MAX))
        });
        let fb = Feedback {
            timestamp_us: clock_us(now),
            echo_timestamp_us: echo,
            echo_delay_us: delay,
            round: self.round.unwrap_or(0),
            flags,
            rate: rate.min(f64::from(u32::MAX - 1)) as u32,
            receive_rate: self.receive_rate().min(f64::from(u32::MAX)) as u32,
            loss_event_ppb: (self.losses.rate() * 1e9) as u32,
            rtt_us: (self.rtt_now() * 1e6).min(f64::from(u32::MAX)) as u32,
            received: self.received,
        };
        self.last_feedback = Some(now);
        let (subtype, data) = fb.encode();
        AppData {
            name: NAME,
            subtype,
            data,
        }
    }
}

impl ReceiverControl for TfmccReceiver {
    fn on_rtp(&mut self, now: Instant, p: &Arrival<'_>) {
        // A gap in sequence numbers is lost packets (no reordering is
        // waited for); an old or repeated one is ignored; a jump of more
        // than 3000 is a restart, not losses.
        let lost = match self.last_seq {
            None => 0,
            Some(last) => {
                let delta = p.seq.wrapping_sub(last) as i16;
                if delta <= 0 {
                    return;
                }
                u64::from(delta as u16 - 1).min(3000)
            }
        };
        let received = 1;
        self.last_seq = Some(p.seq);
        self.received = self.received.wrapping_add(1);
        self.packet_size = if self.packet_size == 0.0 {
            p.len as f64
        } else {
            self.packet_size + (p.len as f64 - self.packet_size) / 16.0
        };
        self.window.push_back((now, p.len));
        self.window_bytes += p.len;
        let span = Duration::from_secs_f64(self.rtt_now().max(0.1));
        while let Some(&(at, len)) = self.window.front() {
            if now.saturating_duration_since(at) <= span {
                break;
            }
            self.window.pop_front();
            self.window_bytes -= len;
        }
        let info = p
            .extension
            .and_then(|(id, data)| DataInfo::decode(id, data));
        if let Some(info) = &info {
            self.last_data = Some((info.timestamp_us, now));
            self.on_info(now, info);
        }
        let rtt = Duration::from_secs_f64(self.rtt_now().max(1e-4));
        let receive_rate = self.receive_rate();
        self.losses
            .on_packets(now, received, lost, rtt, receive_rate, self.packet_size);
        // The CLR reports once per round trip, at once.
        if self.is_clr
            && self
                .last_feedback
                .is_none_or(|t| now.saturating_duration_since(t) >= rtt)
        {
            self.ready = Some(self.feedback(now));
        }
    }

    fn on_report(
        &mut self,
        _now: Instant,
        _elapsed: Duration,
        _interval: Duration,
        _rng: &mut Rng,
    ) -> Report {
        // TFMCC's feedback does not ride on RTCP's schedule.
        self.compute_rate();
        Report::Now(None)
    }

    fn poll_feedback(&mut self, _now: Instant) -> Option<AppData> {
        self.ready.take()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.timer
    }

    fn handle_timeout(&mut self, now: Instant, _rng: &mut Rng) {
        if self.timer.is_some_and(|t| t <= now) {
            self.timer = None;
            self.ready = Some(self.feedback(now));
        }
    }

    fn estimates(&self) -> Estimates {
        Estimates {
            rate: self.rate,
            loss: self.losses.rate(),
            rtt: self.rtt.map(|_| Duration::from_secs_f64(self.rtt_now())),
        }
    }

    fn suppressed(&self) -> u64 {
        self.suppressed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fanout_rtp::tfmcc::EXTENSION_ID;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    /// A data packet `seq` carrying `info`, arriving at `now`.
    fn packet(r: &mut TfmccReceiver, now: Instant, seq: u16, info: DataInfo) {
        let ext = info.encode();
        r.on_rtp(
            now,
            &Arrival {
                seq,
                timestamp: 0,
                len: 1356,
                arrival_ticks: 0,
                one_way: f64::NAN,
                extension: Some((EXTENSION_ID, &ext)),
            },
        );
    }

    fn data(sent: Instant) -> DataInfo {
        DataInfo {
            timestamp_us: clock_us(sent),
            max_rtt_us: 200_000,
            suppression_rate: u32::MAX,
            ..DataInfo::default()
        }
    }

    fn feedback_of(app: &AppData) -> Feedback {
        Feedback::decode(app.name, app.subtype, &app.data).expect("feedback")
    }

    #[test]
    fn the_round_trip_comes_from_the_senders_echo() {
        let mut r = TfmccReceiver::new(5);
        let mut rng = Rng::new(1);
        // A round begins: a timer within the round's feedback delay.
        packet(&mut r, at(20), 0, data(at(0)));
        let t = r.poll_timeout().expect("a feedback timer");
        assert!(t <= at(20) + Duration::from_millis(1000), "{t:?}");
        r.handle_timeout(t, &mut rng);
        let fb = feedback_of(&r.poll_feedback(t).expect("feedback"));
        assert_eq!(fb.flags & FEEDBACK_HAVE_RTT, 0);
        assert_eq!(fb.echo_timestamp_us, clock_us(at(0)));
        // The sender echoes it after holding it 3 ms; 60 ms after the
        // receiver sent it, the packet arrives: a 57 ms round trip.
        let mut d = data(t + Duration::from_millis(33));
        d.flags = FLAG_ECHO;
        d.echo_receiver = 5;
        d.echo_timestamp_us = fb.timestamp_us;
        d.echo_delay_us = 3000;
        packet(&mut r, t + Duration::from_millis(60), 1, d);
        let rtt = r.estimates().rtt.expect("measured");
        assert_eq!(rtt, Duration::from_millis(57));
        // The same echo again is no new sample; between samples the round
        // trip follows the one-way delay: a packet 10 ms slower on the
        // way adds 10 ms.
        d.timestamp_us = clock_us(t + Duration::from_millis(63));
        packet(&mut r, t + Duration::from_millis(90), 2, d);
        assert_eq!(r.estimates().rtt, Some(Duration::from_millis(57)));
        d.timestamp_us = clock_us(t + Duration::from_millis(93));
        packet(&mut r, t + Duration::from_millis(130), 3, d);
        assert_eq!(r.estimates().rtt, Some(Duration::from_millis(67)));
    }

    #[test]
    fn a_lower_rate_reported_in_the_round_suppresses_feedback() {
        let mut r = TfmccReceiver::new(5);
        for i in 0..50u16 {
            packet(
                &mut r,
                at(u64::from(i) * 10),
                i,
                data(at(u64::from(i) * 10)),
            );
        }
        assert!(r.poll_timeout().is_some());
        // Someone reported well below this receiver's rate.
        let mut d = data(at(500));
        d.suppression_rate = 1000;
        packet(&mut r, at(500), 50, d);
        assert_eq!(r.poll_timeout(), None);
        assert_eq!(r.suppressed(), 1);
        // A new round sets a new timer.
        let mut d = data(at(510));
        d.round = 1;
        packet(&mut r, at(510), 51, d);
        assert!(r.poll_timeout().is_some());
    }

    #[test]
    fn the_clr_reports_once_per_round_trip_without_a_timer() {
        let mut r = TfmccReceiver::new(5);
        let mut sent = 0;
        for i in 0..100u16 {
            let mut d = data(at(u64::from(i) * 10));
            d.clr = 5;
            packet(&mut r, at(u64::from(i) * 10), i, d);
            if r.poll_feedback(at(u64::from(i) * 10)).is_some() {
                sent += 1;
            }
        }
        assert_eq!(r.poll_timeout(), None, "the CLR has no timer");
        // 1 s at the sender's largest round trip (200 ms) before one is
        // measured: 5 reports.
        assert_eq!(sent, 5);
    }
}
