//! A media receiver, sans-IO ([`fanout_core::Engine`]): it takes the
//! sender's RTP (payloads for the application, each packet for its rate
//! controller, [`ReceiverControl`]) and its RTCP (the SR a report block
//! echoes, the controller's APP parts), and at its RTCP interval sends an
//! RR (RFC 3550 A.1, A.3, A.8), its CNAME and its controller's report (an
//! APP part); feedback the controller cannot delay goes at once, in a
//! compound of an RR and the APP part.

use crate::control::{AppData, Arrival, Controller, Estimates, ReceiverControl, Report};
use fanout_core::{Engine, Instant, Rng, Transmit};
use fanout_rtp::interval::{Participants, RtcpTiming};
use fanout_rtp::jitter::Jitter;
use fanout_rtp::mp2t::CLOCK_RATE;
use fanout_rtp::ntp::{middle32, to_short, WallClock};
use fanout_rtp::report::{self, Block, Part};
use fanout_rtp::sequence::SourceSequence;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

/// Most other participants a receiver counts for its RTCP interval.
pub const MAX_MEMBERS: usize = 100_000;
/// Most reports waiting for the application to take them.
const MAX_QUEUED_REPORTS: usize = 16;

/// How a media receiver runs.
#[derive(Debug, Clone)]
pub struct MediaReceiverConfig {
    /// Where its RTCP goes (the group, so other receivers hear it, or
    /// the sender); `None`: where the sender's SRs come from, and until
    /// one came, the port above the one its first RTP came from (RFC 3550
    /// §11: ffmpeg sends RTP from port P and RTCP from P + 1; fanout sends
    /// both from one port).
    pub rtcp_destination: Option<SocketAddr>,
    /// Its SSRC.
    pub ssrc: u32,
    /// Its canonical name.
    pub cname: String,
    /// The wall clock at one instant (one-way delays against SRs).
    pub wall: WallClock,
    /// Seeds its RTCP draws.
    pub seed: u64,
    /// RTCP's reduced minimum interval (RFC 3550 §6.2).
    pub reduced_rtcp_minimum: bool,
    /// Payloads held for the application, bytes; the oldest go beyond.
    pub max_output_bytes: usize,
    /// The rate controller. The sender's wins: if its packets carry
    /// TFMCC's or PGMCC's fields, the receiver runs that; if they carry
    /// none, ASMP (the variant configured, or the default).
    pub controller: Controller,
}

/// What a media receiver counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MediaReceiverStats {
    /// RTP packets taken from the sender.
    pub packets: u64,
    /// Their payload bytes.
    pub payload_bytes: u64,
    /// RTP from another source than the one followed.
    pub other_sources: u64,
    /// Reports sent.
    pub reports_sent: u64,
    /// Their bytes (UDP payload).
    pub report_bytes: u64,
    /// Reports given up for another receiver's (ASMP §3.8, RFC 4654 §4.5).
    pub reports_suppressed: u64,
    /// Feedback sent outside RTCP's schedule.
    pub feedback_sent: u64,
    /// Payloads dropped because the application did not read them.
    pub output_drops: u64,
    /// Datagrams that were neither RTP nor well-formed RTCP.
    pub malformed: u64,
}

/// The last SR from the sender.
#[derive(Debug, Clone, Copy)]
struct LastSr {
    ntp: u64,
    rtp_timestamp: u32,
    received: Instant,
}

/// The receiving side of a media session.
#[derive(Debug)]
pub struct MediaReceiver {
    cfg: MediaReceiverConfig,
    /// Where its RTCP goes when not configured: learned from the sender.
    learned_rtcp: Option<SocketAddr>,
    control: Box<dyn ReceiverControl>,
    /// The followed source's sequence numbers and jitter, for the RR.
    sequence: Option<SourceSequence>,
    jitter: Jitter,
    timing: RtcpTiming,
    rng: Rng,
    sender: Option<u32>,
    last_sr: Option<LastSr>,
    members: BTreeMap<u32, Instant>,
    report_at: Instant,
    /// A report its controller deferred (feedback suppression): when it
    /// goes.
    deferred: Option<Instant>,
    reported_once: bool,
    rtcp_out: VecDeque<Vec<u8>>,
    out: VecDeque<Vec<u8>>,
    out_bytes: usize,
    ended: bool,
    left: bool,
    /// RTP bytes received since `rate_since`, and the receive rate they
    /// gave at the last report (bytes per second): the session bandwidth
    /// RTCP's share is taken of. (Not the rate it computes: a receiver that
    /// loses nothing computes ever more, and its reports would then come
    /// ever faster.)
    received: u64,
    rate_since: Instant,
    receive_rate: f64,
    stats: MediaReceiverStats,
}

fn ntp_secs(ntp: u64) -> f64 {
    (ntp >> 32) as f64 + (ntp & 0xffff_ffff) as f64 / 4_294_967_296.0
}

impl MediaReceiver {
    /// A receiver starting at `now`.
    pub fn new(cfg: MediaReceiverConfig, now: Instant) -> Self {
        let mut rng = Rng::new(cfg.seed);
        let timing = RtcpTiming::new(crate::asmp::INITIAL_RATE, cfg.reduced_rtcp_minimum, 100);
        let control = cfg.controller.receiver(cfg.ssrc);
        let first = timing.interval(
            Participants {
                members: 2,
                senders: 1,
                we_sent: false,
                initial: true,
            },
            &mut rng,
        );
        MediaReceiver {
            learned_rtcp: None,
            control,
            sequence: None,
            jitter: Jitter::default(),
            timing,
            rng,
            sender: None,
            last_sr: None,
            members: BTreeMap::new(),
            report_at: now + first,
            deferred: None,
            reported_once: false,
            rtcp_out: VecDeque::new(),
            out: VecDeque::new(),
            out_bytes: 0,
            ended: false,
            left: false,
            received: 0,
            rate_since: now,
            receive_rate: crate::asmp::INITIAL_RATE,
            stats: MediaReceiverStats::default(),
            cfg,
        }
    }

    /// The next payload the sender sent, in order of arrival.
    pub fn read(&mut self) -> Option<Vec<u8>> {
        let p = self.out.pop_front()?;
        self.out_bytes -= p.len();
        Some(p)
    }

    /// Whether the sender said BYE.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// Leaves the session: a BYE goes out (RFC 3550 §6.3.7) and nothing
    /// more is taken or sent after it.
    pub fn leave(&mut self) {
        if self.left {
            return;
        }
        let parts = [
            Part::Report {
                ssrc: self.cfg.ssrc,
                sender: None,
                blocks: vec![],
            },
            Part::Bye {
                ssrcs: vec![self.cfg.ssrc],
                reason: Some("leaving".into()),
            },
        ];
        self.rtcp_out.clear();
        if let Some(bytes) = report::write(&parts) {
            self.stats.report_bytes += bytes.len() as u64;
            self.rtcp_out.push_back(bytes);
        }
        self.left = true;
    }

    /// Whether it left.
    pub fn has_left(&self) -> bool {
        self.left
    }

    /// What it counted.
    pub fn stats(&self) -> &MediaReceiverStats {
        &self.stats
    }

    /// Its controller's estimates.
    pub fn estimates(&self) -> Estimates {
        self.control.estimates()
    }

    /// Its rate controller.
    pub fn control(&self) -> &dyn ReceiverControl {
        self.control.as_ref()
    }

    /// The followed source's sequence state, once a packet came.
    pub fn sequence(&self) -> Option<&SourceSequence> {
        self.sequence.as_ref()
    }

    /// The interarrival jitter it reports, RTP timestamp units (RFC 3550
    /// A.8).
    pub fn jitter(&self) -> u32 {
        self.jitter.value()
    }

    fn note_member(&mut self, now: Instant, ssrc: u32) {
        if ssrc != self.cfg.ssrc
            && (self.members.contains_key(&ssrc) || self.members.len() < MAX_MEMBERS)
        {
            self.members.insert(ssrc, now);
        }
    }

    fn on_rtp(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        let Ok(rtp) = fanout_rtp::rtp_types::RtpPacket::parse(datagram) else {
            self.stats.malformed += 1;
            return;
        };
        let ssrc = *self.sender.get_or_insert(rtp.ssrc());
        if rtp.ssrc() != ssrc {
            self.stats.other_sources += 1;
            return;
        }
        if self.learned_rtcp.is_none() {
            let port = from.port().wrapping_add(1);
            self.learned_rtcp = Some(SocketAddr::new(from.ip(), port));
        }
        let arrival_ticks = now.as_nanos() as u128 * u128::from(CLOCK_RATE) / 1_000_000_000;
        // The one-way delay: our wall clock now less when the sender sent
        // it, placed by the last SR's NTP/RTP pair.
        let one_way = self.last_sr.map_or(f64::NAN, |sr| {
            let since = rtp.timestamp().wrapping_sub(sr.rtp_timestamp) as i32;
            let sent = ntp_secs(sr.ntp) + f64::from(since) / f64::from(CLOCK_RATE);
            ntp_secs(self.cfg.wall.ntp(now)) - sent
        });
        if self.sequence.is_none() {
            self.follow_senders_controller(rtp.extension());
        }
        let seq = rtp.sequence_number();
        let fresh = self
            .sequence
            .get_or_insert_with(|| SourceSequence::new(seq))
            .update(seq);
        if fresh {
            self.jitter.on_packet(arrival_ticks as u32, rtp.timestamp());
        }
        self.control.on_rtp(
            now,
            &Arrival {
                seq,
                timestamp: rtp.timestamp(),
                len: datagram.len(),
                arrival_ticks: arrival_ticks as u32,
                one_way,
                extension: rtp.extension(),
            },
        );
        self.take_feedback(now);
        self.stats.packets += 1;
        self.stats.payload_bytes += rtp.payload().len() as u64;
        self.received += datagram.len() as u64;
        self.out.push_back(rtp.payload().to_vec());
        self.out_bytes += rtp.payload().len();
        while self.out_bytes > self.cfg.max_output_bytes {
            let Some(p) = self.out.pop_front() else {
                break;
            };
            self.out_bytes -= p.len();
            self.stats.output_drops += 1;
        }
    }

    fn on_rtcp(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        let Ok(parts) = report::parse(datagram) else {
            self.stats.malformed += 1;
            return;
        };
        self.timing.on_compound(datagram.len());
        for part in parts {
            match part {
                Part::Report { ssrc, sender, .. } => {
                    self.note_member(now, ssrc);
                    match sender {
                        Some(si) if self.sender.is_none_or(|s| s == ssrc) => {
                            self.sender = Some(ssrc);
                            self.learned_rtcp = Some(from);
                            self.last_sr = Some(LastSr {
                                ntp: si.ntp,
                                rtp_timestamp: si.rtp_timestamp,
                                received: now,
                            });
                        }
                        _ => {}
                    }
                }
                Part::App {
                    ssrc,
                    name,
                    subtype,
                    data,
                } if ssrc != self.cfg.ssrc => {
                    let app = AppData {
                        name,
                        subtype,
                        data,
                    };
                    self.control.on_app(now, Some(ssrc) == self.sender, &app);
                }
                Part::Bye { ssrcs, .. } => {
                    for s in ssrcs {
                        self.members.remove(&s);
                        if Some(s) == self.sender {
                            self.ended = true;
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Takes the sender's controller from its first packet: TFMCC's or
    /// PGMCC's header extension, or none (ASMP).
    fn follow_senders_controller(&mut self, extension: Option<(u16, &[u8])>) {
        let wanted = match extension.map(|(id, _)| id) {
            Some(fanout_rtp::tfmcc::EXTENSION_ID) => Controller::Tfmcc,
            Some(fanout_rtp::pgmcc::EXTENSION_ID) => Controller::Pgmcc,
            _ => match self.cfg.controller {
                Controller::Asmp(v) => Controller::Asmp(v),
                _ => Controller::default(),
            },
        };
        if wanted != self.cfg.controller {
            self.cfg.controller = wanted;
            self.control = wanted.receiver(self.cfg.ssrc);
        }
    }

    /// Its SSRC.
    pub fn ssrc(&self) -> u32 {
        self.cfg.ssrc
    }

    /// The controller it runs (the sender's, once a packet came).
    pub fn controller(&self) -> Controller {
        self.cfg.controller
    }

    /// Sends what feedback the controller has at once, beside an RR.
    fn take_feedback(&mut self, now: Instant) {
        while let Some(app) = self.control.poll_feedback(now) {
            if self.write_report(now, Some(app), false) {
                self.stats.feedback_sent += 1;
            }
        }
    }

    /// A compound RR, with its CNAME if `full`, and `app`: true if
    /// written.
    fn write_report(&mut self, now: Instant, app: Option<AppData>, full: bool) -> bool {
        let Some(sender) = self.sender else {
            return false;
        };
        let (lsr, dlsr) = self.last_sr.map_or((0, 0), |sr| {
            (
                middle32(sr.ntp),
                to_short(now.saturating_duration_since(sr.received)),
            )
        });
        // The interval's losses close only at the regular report.
        let (fraction, cumulative, extended) = match self.sequence.as_mut() {
            Some(s) if full => (
                s.close_interval().fraction,
                s.cumulative_lost(),
                s.extended_max(),
            ),
            Some(s) => (0, s.cumulative_lost(), s.extended_max()),
            None => (0, 0, 0),
        };
        let block = Block {
            ssrc: sender,
            fraction_lost: fraction,
            cumulative_lost: cumulative,
            extended_max: extended,
            jitter: self.jitter.value(),
            lsr,
            dlsr,
        };
        let mut parts = vec![Part::Report {
            ssrc: self.cfg.ssrc,
            sender: None,
            blocks: vec![block],
        }];
        if full {
            parts.push(Part::Sdes(vec![(self.cfg.ssrc, self.cfg.cname.clone())]));
        }
        if let Some(AppData {
            name,
            subtype,
            data,
        }) = app
        {
            parts.push(Part::App {
                ssrc: self.cfg.ssrc,
                name,
                subtype,
                data,
            });
        }
        let Some(bytes) = report::write(&parts) else {
            return false;
        };
        self.timing.on_compound(bytes.len());
        self.stats.reports_sent += 1;
        self.stats.report_bytes += bytes.len() as u64;
        if self.rtcp_out.len() < MAX_QUEUED_REPORTS {
            self.rtcp_out.push_back(bytes);
        }
        self.reported_once = true;
        true
    }

    fn participants(&self) -> Participants {
        Participants {
            members: self.members.len() + 1,
            senders: 1,
            we_sent: false,
            initial: !self.reported_once,
        }
    }
}

impl Engine for MediaReceiver {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if self.left {
            return;
        }
        if report::is_rtcp(datagram) {
            self.on_rtcp(now, from, datagram);
        } else {
            self.on_rtp(now, from, datagram);
        }
    }

    fn poll_transmit(&mut self, _now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let destination = self.cfg.rtcp_destination.or(self.learned_rtcp)?;
        let bytes = self.rtcp_out.pop_front()?;
        buf.extend_from_slice(&bytes);
        Some(Transmit { destination })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.ended || self.left {
            return None;
        }
        [
            Some(self.report_at),
            self.deferred,
            self.control.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.left {
            return;
        }
        if self.control.poll_timeout().is_some_and(|t| t <= now) {
            self.control.handle_timeout(now, &mut self.rng);
            self.stats.reports_suppressed = self.control.suppressed();
            self.take_feedback(now);
        }
        if self.deferred.is_some_and(|t| t <= now) {
            self.deferred = None;
            let app = self.control.deferred_report(now);
            self.stats.reports_suppressed = self.control.suppressed();
            self.write_report(now, app, true);
        }
        if now < self.report_at {
            return;
        }
        let elapsed = now.saturating_duration_since(self.rate_since);
        if !elapsed.is_zero() {
            self.receive_rate = std::mem::take(&mut self.received) as f64 / elapsed.as_secs_f64();
            self.rate_since = now;
        }
        // Never below the initial rate: an interval that brought nothing
        // would otherwise stretch the next one without bound.
        self.timing
            .set_session_bandwidth(self.receive_rate.max(crate::asmp::INITIAL_RATE));
        let td = self.timing.deterministic(self.participants());
        self.members
            .retain(|_, heard| now.saturating_duration_since(*heard) <= td * 5);
        let interval = self.timing.interval(self.participants(), &mut self.rng);
        self.report_at = now + interval;
        if self.sender.is_none() {
            return;
        }
        // A deferred report goes before the next one is due.
        match self
            .control
            .on_report(now, elapsed, interval, &mut self.rng)
        {
            Report::Now(app) => {
                self.write_report(now, app, true);
            }
            // One report an interval: the deferred one carries the RR.
            Report::Later(at) => self.deferred = Some(at),
        }
    }
}
