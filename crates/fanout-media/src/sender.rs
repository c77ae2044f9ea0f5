//! A media sender, sans-IO ([`fanout_core::Engine`]): the application
//! writes RTP payloads (whole MPEG-TS packets, `fanout_rtp::mp2t`) that
//! never block — a pushed queue drops the oldest when the stream outruns
//! the allowed rate — and the sender paces them out as RTP at the rate its
//! controller allows ([`SenderControl`]: ASMP, TFMCC, PGMCC), with SRs, its CNAME
//! and the controller's APP parts on RTCP's schedule (RFC 3550 §6.2). RTP and RTCP share the destination's port
//! (RFC 5761; the sender tells them apart by the packet type)
//! or RTCP the next port up (RFC 3550 §11), as the application says.

use crate::control::{AppData, Controller, SenderControl};
use fanout_core::pacing::Pacer;
use fanout_core::{Engine, Instant, Rng, Transmit};
use fanout_rtp::interval::{Participants, RtcpTiming};
use fanout_rtp::mp2t::{CLOCK_RATE, PAYLOAD_TYPE};
use fanout_rtp::ntp::{middle32, WallClock};
use fanout_rtp::report::{self, Part, SenderInfo};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

/// The least rate a sender keeps, bytes per second (a packet a second or
/// so: a session that reported 0 still probes).
pub const MIN_RATE: f64 = 1500.0;
/// Bytes of IPv4, UDP and RTP headers counted with each payload.
const PACKET_OVERHEAD: usize = 28 + fanout_rtp::mp2t::RTP_HEADER;
/// A full packet on the wire, bytes (seven TS packets with headers).
const PACED_PACKET: u64 = 1400;
/// Packets the pacer's bucket holds at least ([`BURST_TIME`] of sending
/// if more): enough for a sender woken late to make up the time, few
/// enough that a low-rate stream stays smooth (ten, a transport's initial
/// window, made the low-rate scenarios' drop-tail queues overflow).
const BURST_PACKETS: u64 = 2;
/// Sending time the pacer's bucket holds at high rates: a wake-up this
/// late loses no sending (the runtime's timer slack, 0.5 ms, and the
/// input the sender's thread also serves: with 1 ms it sent 10–20% under
/// the allowed rate at 35 Mbit/s in the lab).
const BURST_TIME: Duration = Duration::from_millis(3);
/// Report intervals a receiver may stay silent before it is forgotten
/// (RFC 3550 §6.3.5).
const SILENT_INTERVALS: u32 = 5;

/// How a media sender runs.
#[derive(Debug, Clone)]
pub struct MediaSenderConfig {
    /// Where RTP goes: a group, or one receiver.
    pub destination: SocketAddr,
    /// Where RTCP goes: the same, or its port + 1 (RFC 3550 §11).
    pub rtcp_destination: SocketAddr,
    /// The rate before any receiver reports, bytes per second.
    pub initial_rate: f64,
    /// This source's SSRC.
    pub ssrc: u32,
    /// Its canonical name (SDES CNAME).
    pub cname: String,
    /// The queue of payloads waiting for the rate, bytes; the oldest go
    /// when a write would pass it.
    pub queue_bytes: usize,
    /// The wall clock at one instant (SR timestamps).
    pub wall: WallClock,
    /// Seeds the random sequence number, timestamp and RTCP draws.
    pub seed: u64,
    /// RTCP's reduced minimum interval (RFC 3550 §6.2).
    pub reduced_rtcp_minimum: bool,
    /// A cap on the rate, bytes per second.
    pub max_rate: Option<f64>,
    /// The rate controller.
    pub controller: Controller,
}

/// What a media sender counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MediaSenderStats {
    /// RTP packets sent.
    pub packets: u64,
    /// RTP payload bytes sent.
    pub payload_bytes: u64,
    /// Payloads the queue dropped (oldest first).
    pub queue_drops: u64,
    /// The oldest a dropped payload was, µs.
    pub max_drop_age_us: u64,
    /// Compound RTCP packets sent.
    pub rtcp_sent: u64,
    /// Their bytes (UDP payload).
    pub rtcp_bytes: u64,
    /// Compound RTCP packets taken.
    pub rtcp_received: u64,
    /// Rate reports (the controller's APP parts) taken.
    pub rate_reports: u64,
    /// Datagrams that were not well-formed RTCP (or not RTCP).
    pub malformed: u64,
}

/// The sending side of a media session.
#[derive(Debug)]
pub struct MediaSender {
    cfg: MediaSenderConfig,
    control: Box<dyn SenderControl>,
    timing: RtcpTiming,
    rng: Rng,
    queue: VecDeque<(Instant, Vec<u8>)>,
    queued: usize,
    seq: u16,
    ts_offset: u32,
    start: Instant,
    /// Spaces packets at the pacing rate; its bucket lets a sender woken
    /// late (timer slack) catch up with a short burst instead of losing
    /// the time.
    pacer: Pacer,
    /// When the head of the queue may go, as of the last look.
    next_send: Instant,
    rtcp_at: Instant,
    rtcp_due: bool,
    rtcp_sent_once: bool,
    packets: u32,
    octets: u32,
    finishing: bool,
    closed: bool,
    stats: MediaSenderStats,
}

impl MediaSender {
    /// A sender starting at `now`.
    pub fn new(cfg: MediaSenderConfig, now: Instant) -> Self {
        let mut rng = Rng::new(cfg.seed);
        let seq = rng.below(1 << 16) as u16;
        let ts_offset = rng.next_u64() as u32;
        let control = cfg.controller.sender(cfg.ssrc, cfg.initial_rate, now);
        let timing = RtcpTiming::new(control.rate(), cfg.reduced_rtcp_minimum, 100);
        let mut s = MediaSender {
            control,
            timing,
            rng,
            queue: VecDeque::new(),
            queued: 0,
            seq,
            ts_offset,
            start: now,
            pacer: Pacer::new(PACED_PACKET)
                .with_burst(BURST_PACKETS * PACED_PACKET)
                .with_burst_time(BURST_TIME),
            next_send: now,
            rtcp_at: now,
            rtcp_due: false,
            rtcp_sent_once: false,
            packets: 0,
            octets: 0,
            finishing: false,
            closed: false,
            stats: MediaSenderStats::default(),
            cfg,
        };
        s.rtcp_at = now + s.next_rtcp_interval();
        s
    }

    /// The rate in force, bytes per second: the controller's, capped.
    pub fn rate(&self) -> f64 {
        self.capped(self.control.rate())
    }

    fn capped(&self, r: f64) -> f64 {
        self.cfg.max_rate.map_or(r, |m| r.min(m)).max(MIN_RATE)
    }

    /// Queues one RTP payload; never blocks: the oldest queued payloads
    /// are dropped to make room. False once finished.
    pub fn write(&mut self, now: Instant, payload: &[u8]) -> bool {
        if self.finishing {
            return false;
        }
        self.queue.push_back((now, payload.to_vec()));
        self.queued += payload.len();
        while self.queued > self.cfg.queue_bytes && self.queue.len() > 1 {
            if let Some((at, p)) = self.queue.pop_front() {
                self.queued -= p.len();
                self.stats.queue_drops += 1;
                let age = now.saturating_duration_since(at).as_micros() as u64;
                self.stats.max_drop_age_us = self.stats.max_drop_age_us.max(age);
            }
        }
        true
    }

    /// No more payloads: once the queue is sent, a BYE ends the session
    /// (at once if nothing is queued).
    pub fn finish(&mut self) {
        if !self.finishing && self.queue.is_empty() {
            self.rtcp_due = true;
        }
        self.finishing = true;
    }

    /// Whether the BYE went out.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Bytes waiting in the queue.
    pub fn queued_bytes(&self) -> usize {
        self.queued
    }

    /// What it counted.
    pub fn stats(&self) -> &MediaSenderStats {
        &self.stats
    }

    /// Which controller it runs.
    pub fn controller(&self) -> Controller {
        self.cfg.controller
    }

    /// The rate controller.
    pub fn control(&self) -> &dyn SenderControl {
        self.control.as_ref()
    }

    fn participants(&self, we_sent: bool) -> Participants {
        Participants {
            members: self.control.receivers() + 1,
            senders: 1,
            we_sent,
            initial: !self.rtcp_sent_once,
        }
    }

    fn next_rtcp_interval(&mut self) -> Duration {
        let bandwidth = self.capped(self.control.session_bandwidth());
        self.timing.set_session_bandwidth(bandwidth);
        let p = self.participants(true);
        self.timing.interval(p, &mut self.rng)
    }

    fn rtp_timestamp(&self, now: Instant) -> u32 {
        let ticks = now.saturating_duration_since(self.start).as_nanos() * u128::from(CLOCK_RATE)
            / 1_000_000_000;
        self.ts_offset.wrapping_add(ticks as u32)
    }

    fn write_rtcp(&mut self, now: Instant, buf: &mut Vec<u8>) {
        let mut parts = vec![
            Part::Report {
                ssrc: self.cfg.ssrc,
                sender: Some(SenderInfo {
                    ntp: self.cfg.wall.ntp(now),
                    rtp_timestamp: self.rtp_timestamp(now),
                    packets: self.packets,
                    octets: self.octets,
                }),
                blocks: vec![],
            },
            Part::Sdes(vec![(self.cfg.ssrc, self.cfg.cname.clone())]),
        ];
        for AppData {
            name,
            subtype,
            data,
        } in self.control.sr_apps(now)
        {
            parts.push(Part::App {
                ssrc: self.cfg.ssrc,
                name,
                subtype,
                data,
            });
        }
        if self.finishing && self.queue.is_empty() {
            parts.push(Part::Bye {
                ssrcs: vec![self.cfg.ssrc],
                reason: Some("end of stream".into()),
            });
            self.closed = true;
        }
        if let Some(bytes) = report::write(&parts) {
            self.timing.on_compound(bytes.len());
            buf.extend_from_slice(&bytes);
            self.stats.rtcp_sent += 1;
            self.stats.rtcp_bytes += bytes.len() as u64;
            self.rtcp_sent_once = true;
        }
    }

    fn write_rtp(&mut self, now: Instant, payload: &[u8], buf: &mut Vec<u8>) {
        let ts = self.rtp_timestamp(now);
        let extension = self.control.on_send(now, self.seq, payload.len());
        let mut packet = fanout_rtp::rtp_types::RtpPacketBuilder::<&[u8], &[u8]>::new()
            .payload_type(PAYLOAD_TYPE)
            .sequence_number(self.seq)
            .timestamp(ts)
            .ssrc(self.cfg.ssrc)
            .payload(payload);
        if let Some((id, data)) = &extension {
            packet = packet.extension(*id, data.as_slice());
        }
        if packet.write_into_vec(buf).is_err() {
            return;
        }
        self.seq = self.seq.wrapping_add(1);
        self.packets = self.packets.wrapping_add(1);
        self.octets = self.octets.wrapping_add(payload.len() as u32);
        self.stats.packets += 1;
        self.stats.payload_bytes += payload.len() as u64;
        self.pacer
            .on_sent(now, (payload.len() + PACKET_OVERHEAD) as u64);
    }

    /// When a packet of `payload` bytes may leave, at the pacing rate in
    /// force at `now`.
    fn send_time(&mut self, now: Instant, payload: usize) -> Instant {
        let pace = self.capped(self.control.pacing_rate());
        self.pacer.set_bytes_per_sec(pace as u64);
        self.pacer
            .next_send_time(now, (payload + PACKET_OVERHEAD) as u64)
    }
}

impl Engine for MediaSender {
    fn handle_datagram(&mut self, now: Instant, _from: SocketAddr, datagram: &[u8]) {
        if !report::is_rtcp(datagram) {
            // Our own RTP looped back by the group, or a stranger's.
            return;
        }
        let Ok(parts) = report::parse(datagram) else {
            self.stats.malformed += 1;
            return;
        };
        self.stats.rtcp_received += 1;
        self.timing.on_compound(datagram.len());
        let arrival = middle32(self.cfg.wall.ntp(now));
        for part in &parts {
            match part {
                Part::Report { ssrc, blocks, .. } if *ssrc != self.cfg.ssrc => {
                    for b in blocks {
                        self.control.on_block(now, *ssrc, b, arrival);
                    }
                }
                Part::App {
                    ssrc,
                    name,
                    subtype,
                    data,
                } if *ssrc != self.cfg.ssrc => {
                    let app = AppData {
                        name: *name,
                        subtype: *subtype,
                        data: data.clone(),
                    };
                    if self.control.on_app(now, *ssrc, &app) {
                        self.stats.rate_reports += 1;
                    }
                }
                Part::Bye { ssrcs, .. } => {
                    for s in ssrcs.iter().filter(|&&s| s != self.cfg.ssrc) {
                        self.control.on_bye(now, *s);
                    }
                }
                _ => {}
            }
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.closed {
            return None;
        }
        let to = Transmit {
            destination: self.cfg.destination,
        };
        if std::mem::take(&mut self.rtcp_due) {
            self.write_rtcp(now, buf);
            return (!buf.is_empty()).then_some(Transmit {
                destination: self.cfg.rtcp_destination,
            });
        }
        let head = self.queue.front()?.1.len();
        self.next_send = self.send_time(now, head);
        if now < self.next_send || !self.control.may_send() {
            return None;
        }
        let (_, payload) = self.queue.pop_front()?;
        self.queued -= payload.len();
        self.write_rtp(now, &payload, buf);
        if self.finishing && self.queue.is_empty() {
            // The BYE goes at once after the last payload.
            self.rtcp_due = true;
        }
        Some(to)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.closed {
            return None;
        }
        // A closed window opens on feedback, not on a timer.
        let send = (!self.queue.is_empty() && self.control.may_send()).then_some(self.next_send);
        [Some(self.rtcp_at), send, self.control.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.control.poll_timeout().is_some_and(|t| t <= now) {
            self.control.handle_timeout(now);
        }
        if now >= self.rtcp_at {
            self.rtcp_due = true;
            // Receivers silent for five of their intervals are gone.
            let td = self.timing.deterministic(self.participants(false));
            self.control.expire(now, td * SILENT_INTERVALS);
            self.rtcp_at = now + self.next_rtcp_interval();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fanout_rtp::report::Part;

    fn sender(queue_bytes: usize) -> MediaSender {
        let cfg = MediaSenderConfig {
            destination: "239.1.1.1:5004".parse().unwrap(),
            rtcp_destination: "239.1.1.1:5005".parse().unwrap(),
            initial_rate: 125_000.0,
            ssrc: 7,
            cname: "s".into(),
            queue_bytes,
            wall: WallClock {
                at: Instant::ZERO,
                unix: Duration::from_secs(1_800_000_000),
            },
            seed: 1,
            reduced_rtcp_minimum: true,
            max_rate: None,
            controller: Controller::default(),
        };
        MediaSender::new(cfg, Instant::ZERO)
    }

    #[test]
    fn payloads_go_out_paced_and_a_bye_ends_the_stream_at_once() {
        let mut s = sender(1 << 20);
        let now = Instant::ZERO;
        let mut buf = Vec::new();
        assert!(s.write(now, &[0x47; 188]));
        let t = s.poll_transmit(now, &mut buf).expect("the payload");
        assert_eq!(t.destination, s.cfg.destination);
        let rtp = fanout_rtp::rtp_types::RtpPacket::parse(&buf).unwrap();
        assert_eq!((rtp.payload_type(), rtp.ssrc()), (33, 7));
        // Nothing queued: finishing sends the BYE now, to the RTCP port.
        s.finish();
        buf.clear();
        let t = s.poll_transmit(now, &mut buf).expect("the BYE");
        assert_eq!(t.destination, s.cfg.rtcp_destination);
        let parts = fanout_rtp::report::parse(&buf).unwrap();
        assert!(parts
            .iter()
            .any(|p| matches!(p, Part::Bye { ssrcs, .. } if ssrcs == &[7])));
        assert!(s.is_closed());
        assert!(!s.write(now, &[0x47; 188]), "closed");
        assert_eq!(s.poll_timeout(), None);
    }

    #[test]
    fn a_full_queue_drops_its_oldest_payloads_and_never_blocks() {
        let mut s = sender(3 * 1316);
        for i in 0..10u64 {
            let at = Instant::from_nanos(i * 1_000_000);
            assert!(s.write(at, &[0x47; 1316]));
        }
        assert_eq!(s.queued_bytes(), 3 * 1316);
        assert_eq!(s.stats().queue_drops, 7);
        // Each dropped when the fourth after it came, 3 ms later.
        assert_eq!(s.stats().max_drop_age_us, 3000);
    }
}
