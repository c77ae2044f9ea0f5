//! A PGMCC receiver (pgmcc §3.2): it follows the packet numbers in the
//! sender's header extension, keeps a smoothed loss rate (one sample per
//! packet, [`LOSS_GAIN`]), NAKs each hole it finds, and — while the
//! sender names it the acker — ACKs every data packet. Each ACK and NAK
//! echoes the sender's clock from the highest packet received, so the
//! sender measures the round trip without synchronised clocks.

use super::LOSS_GAIN;
use crate::control::{AppData, Arrival, Estimates, ReceiverControl, Report};
use fanout_core::{Instant, Rng};
use fanout_rtp::pgmcc::{DataInfo, Feedback, NAME};
use std::collections::VecDeque;
use std::time::Duration;

/// Most ACKs and NAKs waiting to go (the engine takes them after each
/// packet, so more only pile up if sending fails).
const MAX_PENDING: usize = 16;
/// A jump in packet numbers larger than this, either way, is a new start,
/// not a hole (a sender that restarted, or a forged number).
const MAX_HOLE: u32 = 1 << 16;

/// A PGMCC receiver.
#[derive(Debug)]
pub struct PgmccReceiver {
    ssrc: u32,
    /// The highest packet number received, once one came.
    rx_max: Option<u32>,
    /// Bit `i`: packet `rx_max − i` came.
    bitmap: u32,
    /// The sender's timestamp in packet `rx_max`, and when it came.
    echo: (u32, Instant),
    /// The smoothed loss rate, 0–1.
    loss: f64,
    pending: VecDeque<AppData>,
    naks: u64,
    acks: u64,
}

impl PgmccReceiver {
    /// A receiver whose SSRC is `ssrc`.
    pub fn new(ssrc: u32) -> Self {
        PgmccReceiver {
            ssrc,
            rx_max: None,
            bitmap: 0,
            echo: (0, Instant::ZERO),
            loss: 0.0,
            pending: VecDeque::new(),
            naks: 0,
            acks: 0,
        }
    }

    /// NAKs and ACKs it sent.
    pub fn feedback_sent(&self) -> (u64, u64) {
        (self.naks, self.acks)
    }

    fn sample(&mut self, lost: bool) {
        let x = if lost { 1.0 } else { 0.0 };
        self.loss += (x - self.loss) * LOSS_GAIN;
    }

    fn feedback(&self, now: Instant, hole: Option<(u32, u32)>) -> AppData {
        let (echo_ts, came) = self.echo;
        let delay = now.saturating_duration_since(came).as_micros();
        let (subtype, data) = Feedback {
            hole,
            rx_max: self.rx_max.unwrap_or(0),
            bitmap: self.bitmap,
            loss_ppm: (self.loss * 1e6).round() as u32,
            echo_timestamp_us: echo_ts,
            echo_delay_us: delay.min(u128::from(u32::MAX)) as u32,
        }
        .encode();
        AppData {
            name: NAME,
            subtype,
            data,
        }
    }

    fn push(&mut self, app: AppData) {
        if self.pending.len() < MAX_PENDING {
            self.pending.push_back(app);
        }
    }

    /// Takes packet `n`: the hole before it, if any.
    fn take(&mut self, now: Instant, info: &DataInfo) -> Option<(u32, u32)> {
        let n = info.number;
        let Some(max) = self.rx_max else {
            self.rx_max = Some(n);
            self.bitmap = 1;
            self.echo = (info.timestamp_us, now);
            self.sample(false);
            return None;
        };
        let ahead = n.wrapping_sub(max) as i32;
        if ahead.unsigned_abs() > MAX_HOLE {
            // Too far either way for a hole: the numbers started again.
            self.rx_max = None;
            return self.take(now, info);
        }
        if ahead <= 0 {
            // A late packet fills its bit (a duplicate changes nothing);
            // further back than the bitmap is forgotten.
            let behind = ahead.unsigned_abs();
            if behind < 32 {
                self.bitmap |= 1 << behind;
            }
            return None;
        }
        let ahead = ahead.unsigned_abs();
        let missing = ahead - 1;
        for _ in 0..missing {
            self.sample(true);
        }
        self.sample(false);
        self.bitmap = if ahead >= 32 {
            1
        } else {
            (self.bitmap << ahead) | 1
        };
        self.rx_max = Some(n);
        self.echo = (info.timestamp_us, now);
        (missing > 0).then(|| (max.wrapping_add(1), missing))
    }
}

impl ReceiverControl for PgmccReceiver {
    fn on_rtp(&mut self, now: Instant, packet: &Arrival<'_>) {
        let Some(info) = packet
            .extension
            .and_then(|(id, data)| DataInfo::decode(id, data))
        else {
            return;
        };
        let hole = self.take(now, &info);
        let acker = info.acker == self.ssrc;
        if acker {
            // The acker's bitmap shows the hole: its ACK says it all.
            let ack = self.feedback(now, None);
            self.push(ack);
            self.acks += 1;
        } else if hole.is_some() {
            let nak = self.feedback(now, hole);
            self.push(nak);
            self.naks += 1;
        }
    }

    fn on_report(
        &mut self,
        _now: Instant,
        _elapsed: Duration,
        _interval: Duration,
        _rng: &mut Rng,
    ) -> Report {
        // RRs go on RTCP's schedule with nothing beside them.
        Report::Now(None)
    }

    fn poll_feedback(&mut self, _now: Instant) -> Option<AppData> {
        self.pending.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn handle_timeout(&mut self, _now: Instant, _rng: &mut Rng) {}

    fn estimates(&self) -> Estimates {
        Estimates {
            rate: 0.0,
            loss: self.loss,
            rtt: None,
        }
    }

    fn suppressed(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(ext: &[u8]) -> Arrival<'_> {
        Arrival {
            seq: 0,
            timestamp: 0,
            len: 1356,
            arrival_ticks: 0,
            one_way: f64::NAN,
            extension: Some((fanout_rtp::pgmcc::EXTENSION_ID, ext)),
        }
    }

    fn packet(r: &mut PgmccReceiver, now: Instant, number: u32, acker: u32) {
        let ext = DataInfo {
            number,
            timestamp_us: number * 1000,
            acker,
        }
        .encode();
        r.on_rtp(now, &arrival(&ext));
    }

    #[test]
    fn a_receiver_naks_each_hole_and_the_acker_acks_every_packet() {
        let mut r = PgmccReceiver::new(9);
        let t = Instant::ZERO;
        for n in [10, 11, 14, 15] {
            packet(&mut r, t, n, 1);
        }
        let nak = r.poll_feedback(t).expect("a NAK for 12-13");
        let fb = Feedback::decode(nak.name, nak.subtype, &nak.data).unwrap();
        assert_eq!(fb.hole, Some((12, 2)));
        assert_eq!((fb.rx_max, fb.bitmap), (14, 0b1_1001));
        assert!(fb.loss_ppm > 0);
        assert!(r.poll_feedback(t).is_none(), "one NAK a hole");
        // Named acker: every packet is ACKed, the late 13 fills its bit.
        packet(&mut r, t + Duration::from_millis(2), 13, 9);
        packet(&mut r, t + Duration::from_millis(3), 16, 9);
        let _ = r.poll_feedback(t);
        let ack = r.poll_feedback(t + Duration::from_millis(4)).unwrap();
        let fb = Feedback::decode(ack.name, ack.subtype, &ack.data).unwrap();
        assert_eq!(fb.hole, None);
        assert_eq!((fb.rx_max, fb.bitmap), (16, 0b110_1111));
        assert_eq!(
            (fb.echo_timestamp_us, fb.echo_delay_us),
            (16_000, 0),
            "sent as it came"
        );
        assert_eq!(r.feedback_sent(), (1, 2));
    }

    #[test]
    fn the_loss_rate_follows_a_steady_loss() {
        let mut r = PgmccReceiver::new(9);
        for n in 0..20_000u32 {
            if n % 50 != 7 {
                packet(&mut r, Instant::ZERO, n, 1);
            }
        }
        let p = r.estimates().loss;
        assert!((p - 0.02).abs() < 0.004, "{p}");
        // A jump past any plausible hole is a restart, not 2^20 losses.
        packet(&mut r, Instant::ZERO, 20_000 + (1 << 20), 1);
        assert!(r.estimates().loss < 0.03);
    }
}
