//! A media receiver, sans-IO ([`fanout_core::Engine`]): it takes the
//! sender's RTP (payloads for the application, statistics for ASMP's
//! [`ReceiverEstimator`]) and its RTCP (the SR a report block echoes, the
//! round trip the sender measured), and at its RTCP interval sends an RR,
//! its CNAME and the rate it computed (an APP part). In a large group —
//! a report interval past [`MediaReceiverConfig::suppress_above`] — it
//! waits a truncated exponential time first and drops its report if
//! another receiver's rate within 2% came first (ASMP §3.8).

use crate::asmp::suppression::{self, LAMBDA};
use crate::asmp::{IntervalReport, ReceiverEstimator, Variant};
use fanout_core::{Engine, Instant, Rng, Transmit};
use fanout_rtp::app::{AsmpApp, RateReport, NAME};
use fanout_rtp::interval::{Participants, RtcpTiming};
use fanout_rtp::mp2t::CLOCK_RATE;
use fanout_rtp::ntp::{middle32, to_short, WallClock};
use fanout_rtp::report::{self, Block, Part};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

/// Most other participants a receiver counts for its RTCP interval.
pub const MAX_MEMBERS: usize = 100_000;

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
    /// Report intervals longer than this use feedback suppression.
    pub suppress_above: Duration,
    /// Payloads held for the application, bytes; the oldest go beyond.
    pub max_output_bytes: usize,
    /// Which ASMP it runs.
    pub variant: Variant,
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
    /// Reports given up for a similar one heard (ASMP §3.8).
    pub reports_suppressed: u64,
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
    estimator: ReceiverEstimator,
    timing: RtcpTiming,
    rng: Rng,
    sender: Option<u32>,
    last_sr: Option<LastSr>,
    members: BTreeMap<u32, Instant>,
    report_at: Instant,
    reported_once: bool,
    /// A report waiting out its suppression timer: when it goes, and
    /// whether a similar one was heard.
    pending: Option<(Instant, IntervalReport, bool)>,
    rtcp_out: Option<Vec<u8>>,
    out: VecDeque<Vec<u8>>,
    out_bytes: usize,
    ended: bool,
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
            estimator: ReceiverEstimator::new(crate::asmp::INITIAL_RATE, cfg.variant),
            timing,
            rng,
            sender: None,
            last_sr: None,
            members: BTreeMap::new(),
            report_at: now + first,
            reported_once: false,
            pending: None,
            rtcp_out: None,
            out: VecDeque::new(),
            out_bytes: 0,
            ended: false,
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

    /// What it counted.
    pub fn stats(&self) -> &MediaReceiverStats {
        &self.stats
    }

    /// Its ASMP estimates.
    pub fn estimator(&self) -> &ReceiverEstimator {
        &self.estimator
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
        self.estimator.on_rtp(
            rtp.sequence_number(),
            rtp.timestamp(),
            datagram.len(),
            arrival_ticks as u32,
            one_way,
        );
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
                } => match AsmpApp::decode(name, subtype, &data) {
                    Ok(AsmpApp::RoundTrips(t)) if Some(ssrc) == self.sender => {
                        if let Some((_, us)) = t.entries.iter().find(|(s, _)| *s == self.cfg.ssrc) {
                            self.estimator
                                .on_sender_rtt(Duration::from_micros(u64::from(*us)));
                        }
                    }
                    Ok(AsmpApp::Rate(r)) if ssrc != self.cfg.ssrc => {
                        if let Some((_, own, suppressed)) = self.pending.as_mut() {
                            *suppressed |= suppression::suppresses(own.rate, r.rate as f64);
                        }
                    }
                    _ => {}
                },
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

    fn write_report(&mut self, now: Instant, r: &IntervalReport) {
        let Some(sender) = self.sender else {
            return;
        };
        let (lsr, dlsr) = self.last_sr.map_or((0, 0), |sr| {
            (
                middle32(sr.ntp),
                to_short(now.saturating_duration_since(sr.received)),
            )
        });
        let seq = self.estimator.sequence();
        let block = Block {
            ssrc: sender,
            fraction_lost: r.interval.fraction,
            cumulative_lost: seq.map_or(0, |s| s.cumulative_lost()),
            extended_max: seq.map_or(0, |s| s.extended_max()),
            jitter: self.estimator.jitter(),
            lsr,
            dlsr,
        };
        let (subtype, data) = AsmpApp::Rate(RateReport {
            rate: r.rate as u64,
            loss_ppm: (r.loss * 1e6) as u32,
            rtt_us: r
                .rtt
                .map_or(0, |d| u32::try_from(d.as_micros()).unwrap_or(u32::MAX)),
        })
        .encode();
        let parts = [
            Part::Report {
                ssrc: self.cfg.ssrc,
                sender: None,
                blocks: vec![block],
            },
            Part::Sdes(vec![(self.cfg.ssrc, self.cfg.cname.clone())]),
            Part::App {
                ssrc: self.cfg.ssrc,
                name: NAME,
                subtype,
                data,
            },
        ];
        if let Some(bytes) = report::write(&parts) {
            self.timing.on_compound(bytes.len());
            self.stats.reports_sent += 1;
            self.stats.report_bytes += bytes.len() as u64;
            self.rtcp_out = Some(bytes);
            self.reported_once = true;
        }
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
        if report::is_rtcp(datagram) {
            self.on_rtcp(now, from, datagram);
        } else {
            self.on_rtp(now, from, datagram);
        }
    }

    fn poll_transmit(&mut self, _now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let destination = self.cfg.rtcp_destination.or(self.learned_rtcp)?;
        let bytes = self.rtcp_out.take()?;
        buf.extend_from_slice(&bytes);
        Some(Transmit { destination })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.ended {
            return None;
        }
        let pending = self.pending.as_ref().map(|p| p.0);
        [Some(self.report_at), pending].into_iter().flatten().min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let Some((at, report, suppressed)) = self.pending.take() {
            if now >= at {
                if suppressed {
                    self.stats.reports_suppressed += 1;
                } else {
                    self.write_report(now, &report);
                }
            } else {
                self.pending = Some((at, report, suppressed));
            }
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
        let report = self.estimator.on_report(elapsed);
        if td > self.cfg.suppress_above {
            let wait = suppression::truncated_exponential(interval, LAMBDA, &mut self.rng);
            self.pending = Some((now + wait, report, false));
        } else {
            self.write_report(now, &report);
        }
    }
}
