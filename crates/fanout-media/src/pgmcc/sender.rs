//! A PGMCC sender (pgmcc §3.3–§3.5): it numbers its packets, names the
//! acker in each, measures each receiver's round trip from the echo in its
//! NAKs and ACKs, and elects as acker the receiver with the least TCP
//! throughput `1/(RTT·√p)`: a NAKing receiver replaces the acker when its
//! throughput is below [`SWITCH_FACTOR`] of the acker's. With the acker it
//! runs TCP's window ([`Window`]): the engine sends while the window has
//! tokens, paced at the window's rate (twice it in slow start, 1.25× after,
//! as Linux TCP paces) so a round's packets do not leave in one burst.
//!
//! Before any receiver is heard there is no acker and no window to wait
//! for: the sender paces at its initial rate. The first receiver heard (in
//! an RR or a NAK) becomes the acker until a NAK names a slower one;
//! receivers that send neither (ffmpeg) never move the rate. An acker that
//! leaves (BYE), falls silent past RTCP's timeout or lets
//! [`ACKER_TIMEOUTS`] timeouts pass in a row is replaced by the slowest
//! receiver known.

use super::{relative_throughput, Window, ACKER_TIMEOUTS, MIN_TIMEOUT, SWITCH_FACTOR};
use crate::control::{clock_us, echoed_round_trip, AppData, SenderControl};
use fanout_core::pacing::{DEFAULT_CONGESTION_AVOIDANCE_GAIN, DEFAULT_SLOW_START_GAIN};
use fanout_core::rtt::{RtoConfig, RttEstimator};
use fanout_core::Instant;
use fanout_rtp::ntp::round_trip;
use fanout_rtp::pgmcc::{DataInfo, Feedback, EXTENSION_ID};
use fanout_rtp::report::Block;
use std::collections::BTreeMap;
use std::time::Duration;

/// Most receivers a sender keeps state for.
pub const MAX_RECEIVERS: usize = 100_000;
/// The period the sent rate is measured over (RTCP's session bandwidth).
const SENT_RATE_PERIOD: Duration = Duration::from_secs(1);
/// The retransmission timer's bounds: RFC 6298's, its 1 s floor included
/// (a media window of a few packets times out more than a bulk one, and a
/// shorter floor would make it less TCP-friendly).
const RTO: RtoConfig = RtoConfig {
    initial: Duration::from_secs(1),
    min: MIN_TIMEOUT,
    max: Duration::from_secs(60),
    granularity: Duration::from_millis(1),
};

/// What the sender knows of a receiver.
#[derive(Debug, Clone, Copy)]
struct Member {
    /// Its last round trip, s.
    rtt: Option<f64>,
    /// The loss rate it last reported, 0–1.
    loss: f64,
    heard: Instant,
}

/// A PGMCC sender.
#[derive(Debug)]
pub struct PgmccSender {
    window: Window,
    /// The number the next packet carries.
    next: u32,
    /// The acker's round trip and the retransmission timer (RFC 6298).
    rtt: RttEstimator,
    /// Average packet size, bytes.
    packet_size: f64,
    acker: Option<u32>,
    members: BTreeMap<u32, Member>,
    /// When the window last moved (an ACK covered packets, or a flight
    /// began): the retransmission timer runs from here.
    progress: Instant,
    /// Timeouts in a row.
    timeouts: u32,
    switches: u64,
    /// The rate without an acker, bytes per second: the initial rate,
    /// then the one in force when the acker was lost.
    fallback_rate: f64,
    /// Bytes sent since `sent_since`, and the rate over the last such
    /// period (a second or more), bytes per second.
    sent_bytes: f64,
    sent_since: Instant,
    sent_rate: Option<f64>,
}

impl PgmccSender {
    /// Sending at `initial_rate` bytes per second until an acker is heard
    /// (then a window of that rate over the acker's round trip).
    pub fn new(initial_rate: f64, now: Instant) -> Self {
        let packet_size = 1356.0;
        let rtt = RttEstimator::new(RTO);
        PgmccSender {
            window: Window::new(initial_rate * rtt.srtt().as_secs_f64() / packet_size),
            next: 0,
            rtt,
            packet_size,
            acker: None,
            members: BTreeMap::new(),
            progress: now,
            timeouts: 0,
            switches: 0,
            fallback_rate: initial_rate,
            sent_bytes: 0.0,
            sent_since: now,
            sent_rate: None,
        }
    }

    /// Times the acker changed.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// The window, packets.
    pub fn window(&self) -> &Window {
        &self.window
    }

    /// The acker's smoothed round trip (a third of the first timeout
    /// before a sample), s.
    fn rtt(&self) -> f64 {
        self.rtt.srtt().as_secs_f64()
    }

    fn throughput_of(&self, m: &Member) -> f64 {
        relative_throughput(m.rtt.unwrap_or(self.rtt()), m.loss)
    }

    /// `ssrc` was heard: its entry, if it has or gets one.
    fn member(&mut self, now: Instant, ssrc: u32) -> Option<&mut Member> {
        if !self.members.contains_key(&ssrc) && self.members.len() >= MAX_RECEIVERS {
            return None;
        }
        let m = self.members.entry(ssrc).or_insert(Member {
            rtt: None,
            loss: 0.0,
            heard: now,
        });
        m.heard = now;
        Some(m)
    }

    fn make_acker(&mut self, ssrc: u32) {
        if let Some(rtt) = self.members.get(&ssrc).and_then(|m| m.rtt) {
            // The window's round trip is the new acker's.
            self.rtt = RttEstimator::new(RTO);
            self.rtt.on_sample(Duration::from_secs_f64(rtt));
        }
        match self.acker {
            Some(_) => self.switches += 1,
            // The window starts at the rate in force.
            None => {
                self.window
                    .restart(self.fallback_rate * self.rtt() / self.packet_size);
            }
        }
        self.acker = Some(ssrc);
        self.window.new_acker();
        self.timeouts = 0;
    }

    /// The acker is gone: the slowest receiver known takes over, if any.
    fn replace_acker(&mut self) {
        self.fallback_rate = self.rate();
        self.acker = None;
        let slowest = self
            .members
            .iter()
            .min_by(|a, b| self.throughput_of(a.1).total_cmp(&self.throughput_of(b.1)))
            .map(|(&s, _)| s);
        if let Some(s) = slowest {
            self.make_acker(s);
        }
    }

    /// A NAK from `from`: the election (pgmcc §3.3).
    fn elect(&mut self, from: u32) {
        let Some(acker) = self.acker else {
            self.make_acker(from);
            return;
        };
        if acker == from {
            return;
        }
        let (Some(j), Some(a)) = (self.members.get(&from), self.members.get(&acker)) else {
            return;
        };
        if self.throughput_of(j) < SWITCH_FACTOR * self.throughput_of(a) {
            self.make_acker(from);
        }
    }
}

impl SenderControl for PgmccSender {
    fn rate(&self) -> f64 {
        match self.acker {
            Some(_) => self.window.packets() * self.packet_size / self.rtt(),
            None => self.fallback_rate,
        }
    }

    fn session_bandwidth(&self) -> f64 {
        self.sent_rate
            .unwrap_or(self.fallback_rate)
            .min(self.rate())
    }

    fn pacing_rate(&self) -> f64 {
        match (self.acker, self.window.slow_start()) {
            (None, _) => self.rate(),
            (Some(_), true) => self.rate() * DEFAULT_SLOW_START_GAIN,
            (Some(_), false) => self.rate() * DEFAULT_CONGESTION_AVOIDANCE_GAIN,
        }
    }

    fn may_send(&self) -> bool {
        self.acker.is_none() || self.window.may_send()
    }

    fn on_send(&mut self, now: Instant, _seq: u16, len: usize) -> Option<(u16, Vec<u8>)> {
        if self.acker.is_some() && !self.window.has_in_flight() {
            self.progress = now;
        }
        self.window.on_send(self.next);
        self.packet_size += (len as f64 + 40.0 - self.packet_size) / 16.0;
        self.sent_bytes += self.packet_size;
        let period = now.saturating_duration_since(self.sent_since);
        if period >= SENT_RATE_PERIOD {
            self.sent_rate = Some(self.sent_bytes / period.as_secs_f64());
            self.sent_bytes = 0.0;
            self.sent_since = now;
        }
        let info = DataInfo {
            number: self.next,
            timestamp_us: clock_us(now),
            acker: self.acker.unwrap_or(0),
        };
        self.next = self.next.wrapping_add(1);
        Some((EXTENSION_ID, info.encode().to_vec()))
    }

    fn on_block(&mut self, now: Instant, from: u32, block: &Block, arrival: u32) {
        let rtt = (block.lsr != 0)
            .then(|| round_trip(arrival, block.lsr, block.dlsr))
            .flatten();
        let Some(m) = self.member(now, from) else {
            return;
        };
        if m.rtt.is_none() {
            m.rtt = rtt.map(|d| d.as_secs_f64());
        }
        if self.acker.is_none() {
            self.make_acker(from);
        }
    }

    fn on_app(&mut self, now: Instant, from: u32, app: &AppData) -> bool {
        let Ok(fb) = Feedback::decode(app.name, app.subtype, &app.data) else {
            return false;
        };
        let rtt = echoed_round_trip(now, fb.echo_timestamp_us, fb.echo_delay_us);
        let Some(m) = self.member(now, from) else {
            return true;
        };
        m.loss = f64::from(fb.loss_ppm.min(1_000_000)) / 1e6;
        if let Some(r) = rtt {
            m.rtt = Some(r.as_secs_f64());
        }
        match fb.hole {
            None if self.acker == Some(from) => {
                if let Some(r) = rtt {
                    self.rtt.on_sample(r);
                }
                if self.window.on_ack(fb.rx_max, fb.bitmap) {
                    self.progress = now;
                    self.timeouts = 0;
                    self.rtt.clear_backoff();
                }
            }
            None => {}
            Some(_) => self.elect(from),
        }
        true
    }

    fn on_bye(&mut self, _now: Instant, ssrc: u32) {
        self.members.remove(&ssrc);
        if self.acker == Some(ssrc) {
            self.replace_acker();
        }
    }

    fn expire(&mut self, now: Instant, timeout: Duration) {
        self.members
            .retain(|_, m| now.saturating_duration_since(m.heard) <= timeout);
        if self.acker.is_some_and(|a| !self.members.contains_key(&a)) {
            self.replace_acker();
        }
    }

    fn sr_apps(&mut self, _now: Instant) -> Vec<AppData> {
        Vec::new()
    }

    fn receivers(&self) -> usize {
        self.members.len()
    }

    fn limiting_receiver(&self) -> Option<u32> {
        self.acker
    }

    fn poll_timeout(&self) -> Option<Instant> {
        (self.acker.is_some() && self.window.has_in_flight())
            .then(|| self.progress + self.rtt.rto())
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.poll_timeout().is_none_or(|t| t > now) {
            return;
        }
        self.window.on_timeout();
        self.rtt.on_timeout();
        self.timeouts += 1;
        self.progress = now;
        if self.timeouts >= ACKER_TIMEOUTS {
            if let Some(a) = self.acker {
                self.members.remove(&a);
            }
            self.replace_acker();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    /// A NAK from `from` with loss `p`, echoing a packet sent `rtt_ms`
    /// before `now`.
    fn nak(now: Instant, rtt_ms: u64, p: f64) -> AppData {
        let (subtype, data) = Feedback {
            hole: Some((1, 1)),
            rx_max: 2,
            bitmap: 0b101,
            loss_ppm: (p * 1e6) as u32,
            echo_timestamp_us: clock_us(now).wrapping_sub(rtt_ms as u32 * 1000),
            echo_delay_us: 0,
        }
        .encode();
        AppData {
            name: fanout_rtp::pgmcc::NAME,
            subtype,
            data,
        }
    }

    #[test]
    fn the_acker_is_the_receiver_of_least_throughput_with_hysteresis() {
        let mut s = PgmccSender::new(50_000.0, at(0));
        assert_eq!(s.rate(), 50_000.0, "no receiver: the initial rate");
        assert!(s.may_send());
        for _ in 0..3 {
            s.on_send(at(0), 0, 1316);
        }
        // 1: 100 ms, 1% → T = 100; the first NAK elects it.
        assert!(s.on_app(at(200), 1, &nak(at(200), 100, 0.01)));
        assert_eq!(s.limiting_receiver(), Some(1));
        // 2: 100 ms, 1.5% → T = 81.6, not below 0.75 × 100: no switch.
        s.on_app(at(210), 2, &nak(at(210), 100, 0.015));
        assert_eq!(s.limiting_receiver(), Some(1));
        // 3: 200 ms, 1% → T = 50: it becomes the acker.
        s.on_app(at(220), 3, &nak(at(220), 200, 0.01));
        assert_eq!(s.limiting_receiver(), Some(3));
        assert_eq!(s.switches(), 1);
        // The acker leaves: the slowest left (2) takes over.
        s.on_bye(at(300), 3);
        assert_eq!(s.limiting_receiver(), Some(2));
        // A malformed or foreign part is not PGMCC's.
        let foreign = AppData {
            name: *b"ASMP",
            subtype: 0,
            data: vec![0; 16],
        };
        assert!(!s.on_app(at(300), 2, &foreign));
    }

    #[test]
    fn silence_from_the_acker_times_out_to_one_packet_then_replaces_it() {
        let mut s = PgmccSender::new(100_000.0, at(0));
        s.on_app(at(0), 7, &nak(at(0), 50, 0.01));
        s.on_app(at(0), 8, &nak(at(0), 60, 0.001));
        assert_eq!(s.limiting_receiver(), Some(7));
        let mut now = at(10);
        while s.may_send() {
            s.on_send(now, 0, 1316);
        }
        for i in 1..=ACKER_TIMEOUTS {
            now = s.poll_timeout().expect("a flight in the air");
            s.handle_timeout(now);
            if i < ACKER_TIMEOUTS {
                assert_eq!(s.window().packets(), 1.0);
                assert_eq!(s.limiting_receiver(), Some(7));
            }
            s.on_send(now, 0, 1316);
        }
        assert_eq!(s.limiting_receiver(), Some(8), "7 is taken to be gone");
    }
}
