//! Media sessions as scenario flows (`kind = "media"`, `fanout_media`): an
//! RTP sender whose rate controller (ASMP, TFMCC, PGMCC) sets its rate
//! from its receivers' RTCP, fed by a constant-rate encoder or by one that
//! always has data, and a media receiver on every node of the group.
//!
//! ```toml
//! [[flow]]
//! kind = "media"
//! from = "s:5004"
//! group = "239.1.1.1:5004"   # or `to = "r:5004"`: one receiver, no group
//! cc = "asmp"                # optional: asmp (default), asmp-paper, tfmcc, pgmcc
//! media_rate = "2Mbit"       # optional: the encoder's rate (default: it
//!                            # always has data, as a bulk source)
//! initial_rate = "100kbit"   # optional: before any report (default 100 kbit/s)
//! max_rate = "10Mbit"        # optional: a cap
//! start = "0s"               # optional: when the encoder starts
//! queue_bytes = "200KB"      # optional: the sender's queue (default 150 payloads)
//! leave = { r3 = "100s" }    # optional: members that leave (BYE) at a time
//! reduced_rtcp_minimum = false # optional: RTCP's 5 s minimum interval
//!                            # instead of the reduced 360/kbit/s (RFC 3550 §6.2)
//! ```
//!
//! Each source records its allowed rate at every sample (`rate_bps`) and
//! counts payload bytes sent; each member counts payload bytes received
//! ([`media_figures`]).

use crate::app::{AppProbe, SimApp};
use crate::ids::AppId;
use crate::scenario::{FlowFactory, FlowSpec, ScenarioContext};
use crate::sim::Simulator;
use crate::units::{Bytes, HumanDuration, Rate};
use fanout_core::{Engine, Instant, Transmit};
use fanout_media::{
    Controller, MediaReceiver, MediaReceiverConfig, MediaSender, MediaSenderConfig,
};
use fanout_rtp::ntp::WallClock;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// Payload bytes per RTP packet: seven MPEG-TS packets (RFC 2250).
pub const PAYLOAD: usize = 7 * 188;

fn wall() -> WallClock {
    WallClock {
        at: Instant::ZERO,
        unix: Duration::from_secs(1_800_000_000),
    }
}

fn payload() -> Vec<u8> {
    let mut p = vec![0u8; PAYLOAD];
    for ts in p.chunks_mut(188) {
        ts[0] = 0x47;
    }
    p
}

/// A media sender fed by an encoder.
#[derive(Debug)]
pub struct MediaSource {
    sender: MediaSender,
    start: Instant,
    /// Time between payloads of a constant-rate encoder; `None`: the queue
    /// is kept full (a source that always has data).
    every: Option<Duration>,
    next: Instant,
}

impl MediaSource {
    /// The sender.
    pub fn sender(&self) -> &MediaSender {
        &self.sender
    }

    fn feed(&mut self, now: Instant) {
        if now < self.start {
            return;
        }
        match self.every {
            Some(every) => {
                while self.next <= now {
                    self.sender.write(self.next, &payload());
                    self.next += every;
                }
            }
            None => {
                // Two payloads ahead of the pacer: never idle, never old.
                while self.sender.queued_bytes() < 2 * PAYLOAD {
                    self.sender.write(now, &payload());
                }
            }
        }
    }
}

impl Engine for MediaSource {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, d: &[u8]) {
        self.sender.handle_datagram(now, from, d);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.feed(now);
        self.sender.poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        // A constant-rate encoder's next payload; one that always has
        // data needs waking only to start (or if its queue ran dry).
        let feed = match self.every {
            Some(_) => Some(self.next.max(self.start)),
            None => Some(self.start).filter(|_| self.sender.queued_bytes() == 0),
        };
        [self.sender.poll_timeout(), feed]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.feed(now);
        if self.sender.poll_timeout().is_some_and(|t| t <= now) {
            self.sender.handle_timeout(now);
        }
    }
}

impl SimApp for MediaSource {
    fn probe(&self) -> AppProbe {
        AppProbe {
            delivered_bytes: self.sender.stats().payload_bytes,
            rate_bps: Some((self.sender.rate() * 8.0) as u64),
            ..AppProbe::default()
        }
    }
}

/// A media receiver whose application reads everything, leaving (BYE)
/// at a set time if told to.
#[derive(Debug)]
pub struct MediaMember {
    receiver: MediaReceiver,
    leave: Option<Instant>,
    bytes: u64,
}

impl MediaMember {
    /// The receiver.
    pub fn receiver(&self) -> &MediaReceiver {
        &self.receiver
    }

    fn read(&mut self) {
        while let Some(p) = self.receiver.read() {
            self.bytes += p.len() as u64;
        }
    }
}

impl Engine for MediaMember {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, d: &[u8]) {
        if self.receiver.has_left() {
            return;
        }
        self.receiver.handle_datagram(now, from, d);
        self.read();
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.receiver.poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let leave = self.leave.filter(|_| !self.receiver.has_left());
        [self.receiver.poll_timeout(), leave]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.leave.is_some_and(|t| t <= now) && !self.receiver.has_left() {
            self.receiver.leave();
            return;
        }
        if self.receiver.poll_timeout().is_some_and(|t| t <= now) {
            self.receiver.handle_timeout(now);
        }
        self.read();
    }
}

impl SimApp for MediaMember {
    fn probe(&self) -> AppProbe {
        let e = self.receiver.estimates();
        AppProbe {
            delivered_bytes: self.bytes,
            srtt: e.rtt,
            rate_bps: Some((e.rate * 8.0).min(u64::MAX as f64) as u64),
            ..AppProbe::default()
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MediaSpec {
    from: String,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    to: Option<String>,
    #[serde(default)]
    cc: Option<String>,
    #[serde(default)]
    media_rate: Option<Rate>,
    #[serde(default)]
    initial_rate: Option<Rate>,
    #[serde(default)]
    max_rate: Option<Rate>,
    #[serde(default)]
    start: Option<HumanDuration>,
    #[serde(default)]
    queue_bytes: Option<Bytes>,
    #[serde(default)]
    leave: BTreeMap<String, HumanDuration>,
    #[serde(default)]
    reduced_rtcp_minimum: Option<bool>,
}

/// One media flow built into a simulation.
#[derive(Debug, Clone)]
pub struct MediaFlow {
    /// Its controller's name.
    pub cc: &'static str,
    /// The [`MediaSource`].
    pub source: AppId,
    /// `(node name, its [`MediaMember`])`.
    pub members: Vec<(String, AppId)>,
}

/// Builds `kind = "media"` flows and remembers them.
#[derive(Debug, Default)]
pub struct MediaFlows {
    /// Flows built, in scenario order.
    pub flows: Vec<MediaFlow>,
}

impl FlowFactory for MediaFlows {
    fn build(
        &mut self,
        spec: &FlowSpec,
        sim: &mut Simulator,
        ctx: &ScenarioContext,
    ) -> Result<bool, String> {
        if spec.kind != "media" {
            return Ok(false);
        }
        let m: MediaSpec = spec.parse()?;
        let from = sim.resolve(&m.from).map_err(|e| format!("from: {e}"))?;
        let (group, addrs) = ctx.receivers_of(sim, m.group.as_deref(), m.to.as_deref())?;
        let destination = match group {
            Some(group) => {
                // The sender hears its receivers' RTCP on the group.
                let node = sim
                    .node_by_ip(from.ip())
                    .ok_or_else(|| format!("from: no node {}", from.ip()))?;
                sim.join(group.ip(), node)
                    .map_err(|e| format!("group: {e}"))?;
                group
            }
            None => addrs[0],
        };
        let controller = match m.cc.as_deref() {
            None => Controller::default(),
            Some(name) => Controller::parse(name)
                .ok_or_else(|| format!("cc: `{name}` (one of {})", Controller::NAMES.join(", ")))?,
        };
        let bytes_per_s = |r: Rate| r.0 as f64 / 8.0;
        let every = m
            .media_rate
            .map(|r| Duration::from_secs_f64(PAYLOAD as f64 / bytes_per_s(r)));
        let queue_bytes = match m.queue_bytes {
            Some(b) => usize::try_from(b.0).map_err(|_| "queue_bytes: too large")?,
            None => 150 * PAYLOAD,
        };
        let index = self.flows.len() as u32;
        let mut members = Vec::with_capacity(addrs.len());
        let mut leaves = m.leave.clone();
        for (i, addr) in addrs.iter().enumerate() {
            let node = sim
                .node_by_ip(addr.ip())
                .map(|n| sim.node(n).name().to_owned())
                .unwrap_or_else(|| addr.ip().to_string());
            let leave = leaves.remove(&node).map(|d| Instant::ZERO + d.0);
            let cfg = MediaReceiverConfig {
                // RTCP to the group, so receivers hear each other.
                rtcp_destination: Some(destination),
                ssrc: 0x5200_0000 + (index << 16) + i as u32,
                cname: format!("{node}@sim"),
                wall: wall(),
                seed: sim.seed() ^ (u64::from(index) << 32 | i as u64),
                reduced_rtcp_minimum: m.reduced_rtcp_minimum.unwrap_or(true),
                max_output_bytes: 1 << 20,
                controller,
            };
            let member = MediaMember {
                receiver: MediaReceiver::new(cfg, Instant::ZERO),
                leave,
                bytes: 0,
            };
            let id = sim
                .add_app(*addr, Box::new(member))
                .map_err(|e| format!("member {addr}: {e}"))?;
            members.push((node, id));
        }
        if let Some(name) = leaves.keys().next() {
            return Err(format!("leave: `{name}` is not a member"));
        }
        let cfg = MediaSenderConfig {
            destination,
            rtcp_destination: destination,
            initial_rate: m.initial_rate.map_or(12_500.0, bytes_per_s),
            ssrc: 0x5100_0000 + index,
            cname: format!("{}@sim", m.from),
            queue_bytes,
            wall: wall(),
            seed: sim.seed() ^ (0x6d65_6469_6100 + u64::from(index)),
            reduced_rtcp_minimum: m.reduced_rtcp_minimum.unwrap_or(true),
            max_rate: m.max_rate.map(bytes_per_s),
            controller,
        };
        let start = Instant::ZERO + m.start.map_or(Duration::ZERO, |s| s.0);
        let source = MediaSource {
            sender: MediaSender::new(cfg, Instant::ZERO),
            start,
            every,
            next: start,
        };
        let source = sim
            .add_app(from, Box::new(source))
            .map_err(|e| format!("from: {e}"))?;
        self.flows.push(MediaFlow {
            cc: controller.name(),
            source,
            members,
        });
        Ok(true)
    }
}

/// One member's figures.
#[derive(Debug, Clone, Serialize)]
pub struct MediaMemberFigures {
    /// Its node.
    pub node: String,
    /// Payload it received over the window, bit/s.
    pub goodput_bps: f64,
    /// Packets lost over the whole run, as a share of those sent.
    pub loss: f64,
    /// The rate its controller computed last, bit/s.
    pub computed_bps: f64,
    /// Its loss (event) rate as its controller measured it.
    pub measured_loss: f64,
    /// Its round trip as its controller measured it, ms.
    pub measured_rtt_ms: Option<f64>,
}

/// What a media flow did over the window.
#[derive(Debug, Clone, Serialize)]
pub struct MediaFigures {
    /// The controller.
    pub cc: String,
    /// Its allowed rate at every sample in the window, bit/s.
    pub rate_bps: Vec<f64>,
    /// Their mean.
    pub mean_rate_bps: f64,
    /// Payload sent over the window, bit/s.
    pub sent_bps: f64,
    /// The coefficient of variation (standard deviation over mean) of the
    /// payload the slowest member received in each sample interval.
    pub cov: f64,
    /// Members.
    pub members: Vec<MediaMemberFigures>,
    /// The least member goodput, bit/s.
    pub min_goodput_bps: f64,
    /// RTCP bytes (sender and members) per RTP payload byte sent, the
    /// whole run.
    pub rtcp_share: f64,
    /// Reports the members' controllers gave up (suppression).
    pub suppressed: u64,
    /// Rate reports (controllers' APP parts) the sender took, the whole
    /// run.
    pub rate_reports: u64,
    /// Report rounds: RTCP reports on schedule per member, the whole run.
    pub rounds: f64,
    /// Payloads the sender's queue dropped.
    pub queue_drops: u64,
}

/// The coefficient of variation of `xs`.
pub fn coefficient_of_variation(xs: &[f64]) -> f64 {
    let n = xs.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mean = xs.iter().sum::<f64>() / n;
    if mean <= 0.0 {
        return 0.0;
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    var.sqrt() / mean
}

/// The figures of every media flow of `sim` over `[from, to]`.
pub fn media_figures(
    sim: &Simulator,
    flows: &MediaFlows,
    from: Instant,
    to: Instant,
) -> Vec<MediaFigures> {
    let in_window = |at: Instant| at > from && at <= to;
    flows
        .flows
        .iter()
        .map(|f| {
            let source = sim.app::<MediaSource>(f.source).expect("a media source");
            let sent = source.sender().stats();
            let rate_bps: Vec<f64> = sim.metrics().apps[f.source.index()]
                .samples
                .iter()
                .filter(|s| in_window(s.at))
                .filter_map(|s| s.rate_bps.map(|r| r as f64))
                .collect();
            let mean_rate_bps = rate_bps.iter().sum::<f64>() / rate_bps.len().max(1) as f64;
            let mut rtcp = sent.rtcp_bytes;
            let mut suppressed = 0;
            let mut on_schedule = 0;
            let members: Vec<MediaMemberFigures> = f
                .members
                .iter()
                .map(|(node, id)| {
                    let m = sim.app::<MediaMember>(*id).expect("a media member");
                    let st = m.receiver().stats();
                    rtcp += st.report_bytes;
                    suppressed += st.reports_suppressed;
                    on_schedule += st.reports_sent - st.feedback_sent;
                    let e = m.receiver().estimates();
                    MediaMemberFigures {
                        node: node.clone(),
                        goodput_bps: crate::transfer::goodput_bps(sim, *id, from, to),
                        loss: 1.0 - st.packets as f64 / sent.packets.max(1) as f64,
                        computed_bps: e.rate * 8.0,
                        measured_loss: e.loss,
                        measured_rtt_ms: e.rtt.map(|d| d.as_secs_f64() * 1e3),
                    }
                })
                .collect();
            let (slowest, min_goodput_bps) = members
                .iter()
                .zip(&f.members)
                .map(|(m, (_, id))| (*id, m.goodput_bps))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap_or((f.source, 0.0));
            let per_sample: Vec<f64> = sim.metrics().apps[slowest.index()]
                .samples
                .iter()
                .filter(|s| in_window(s.at))
                .map(|s| s.goodput_bps)
                .collect();
            MediaFigures {
                cc: f.cc.to_owned(),
                mean_rate_bps,
                sent_bps: crate::transfer::goodput_bps(sim, f.source, from, to),
                cov: coefficient_of_variation(&per_sample),
                rate_bps,
                members,
                min_goodput_bps,
                rtcp_share: rtcp as f64 / sent.payload_bytes.max(1) as f64,
                suppressed,
                rate_reports: sent.rate_reports,
                rounds: on_schedule as f64 / f.members.len().max(1) as f64,
                queue_drops: sent.queue_drops,
            }
        })
        .collect()
}
