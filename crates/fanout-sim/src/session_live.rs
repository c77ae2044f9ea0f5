//! Live real-time sessions as scenario flows (`kind = "live"`,
//! [`fanout_transport::realtime`]): a source writing one message every
//! `interval` into a real-time [`SessionSender`] (multicast to a group, or
//! to one receiver), and a real-time member on every node of the group
//! that reads whole messages and records when each arrived.
//!
//! ```toml
//! [[flow]]
//! kind = "live"
//! from = "s:5000"
//! group = "239.1.1.1:7000"    # or `to = "r:7000"`: one receiver, no group
//! interval = "20ms"           # one message per interval (50 per second)
//! message = "1448B"           # its size
//! messages = 5000             # how many (default: until the run ends)
//! start = "1s"                # the first (default 1 s: members have joined)
//! latency = "400ms"           # optional deadline of each message after it
//!                             # is written, and the members' own budget;
//!                             # without: TCP-CM, losses never repaired
//! queue = "fifo"              # optional: "fifo" (default) or "lifo"
//! queue_bytes = "144800B"     # optional (default 100 × the largest datagram)
//! cc = "newreno"              # optional (default cubic)
//! window_policy = "fair"      # optional: "auto" (default: "equation" with a latency,
//!                             # "min" without), "min", "fair",
//!                             # "equation" or "equation-min"
//! fair = { percentile = 1.0 } # optional, for "fair" (as in `kind = "session"`)
//! ```
//!
//! Each message carries its number and the time it was written, so a
//! member knows which arrived, how late, and in what order
//! ([`live_figures`]).

use crate::app::{AppProbe, SimApp};
use crate::ids::AppId;
use crate::scenario::{FlowFactory, FlowSpec, ScenarioContext};
use crate::sim::Simulator;
use crate::transfer::apply_transport_options;
use crate::units::{Bytes, HumanDuration};
use fanout_core::{Engine, Instant, Transmit};
use fanout_transport::realtime::{QueueLimit, QueueOrder, RealtimeSend};
use fanout_transport::session::{JoinPolicy, SessionConfig, SessionSender};
use fanout_transport::Receiver;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

/// Bytes at the head of each message: its number (u64) and when it was
/// written (ns, u64).
pub const MESSAGE_HEADER: usize = 16;

/// The live source: a real-time session sender fed on a clock.
#[derive(Debug)]
pub struct LiveSource {
    session: SessionSender,
    start: Instant,
    interval: Duration,
    message: usize,
    count: Option<u64>,
    latency: Option<Duration>,
    written: u64,
}

impl LiveSource {
    /// The session.
    pub fn session(&self) -> &SessionSender {
        &self.session
    }

    /// Messages written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    fn next_write(&self) -> Option<Instant> {
        if self.count.is_some_and(|c| self.written >= c) {
            return None;
        }
        let n = u32::try_from(self.written).ok()?;
        Some(self.start + self.interval * n)
    }

    /// Writes every message due at `now`.
    fn write_due(&mut self, now: Instant) {
        while let Some(at) = self.next_write().filter(|&t| t <= now) {
            let mut m = vec![0u8; self.message.max(MESSAGE_HEADER)];
            m[..8].copy_from_slice(&self.written.to_be_bytes());
            m[8..16].copy_from_slice(&at.as_nanos().to_be_bytes());
            let deadline = self.latency.map(|l| at + l);
            self.session.send_message(at, &m, deadline);
            self.written += 1;
            if self.count == Some(self.written) {
                self.session.finish();
            }
        }
    }
}

impl Engine for LiveSource {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.session.handle_datagram(now, from, datagram);
        while self.session.poll_event().is_some() {}
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.write_due(now);
        self.session.poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        [self.session.poll_timeout(), self.next_write()]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.write_due(now);
        self.session.handle_timeout(now);
        while self.session.poll_event().is_some() {}
    }
}

impl SimApp for LiveSource {
    fn probe(&self) -> AppProbe {
        crate::session_flow::session_probe(&self.session)
    }
}

/// A live member: reads whole messages and keeps, for each, its number and
/// how long after it was written it was read.
#[derive(Debug)]
pub struct LiveMember {
    receiver: Receiver,
    /// `(message number, delay)` in the order read.
    got: Vec<(u64, Duration)>,
    scratch: Vec<u8>,
    bytes: u64,
}

impl LiveMember {
    /// A member around `receiver`.
    pub fn new(receiver: Receiver) -> Self {
        LiveMember {
            receiver,
            got: Vec::new(),
            scratch: Vec::new(),
            bytes: 0,
        }
    }

    /// The transport.
    pub fn receiver(&self) -> &Receiver {
        &self.receiver
    }

    /// `(message number, delay from writing to reading)`, in read order.
    pub fn got(&self) -> &[(u64, Duration)] {
        &self.got
    }

    fn read(&mut self, now: Instant) {
        while self.receiver.read_message(now, &mut self.scratch).is_some() {
            self.bytes += self.scratch.len() as u64;
            if self.scratch.len() < MESSAGE_HEADER {
                continue;
            }
            let n = u64::from_be_bytes(self.scratch[..8].try_into().expect("8 bytes"));
            let at = u64::from_be_bytes(self.scratch[8..16].try_into().expect("8 bytes"));
            let delay = now.saturating_duration_since(Instant::from_nanos(at));
            self.got.push((n, delay));
        }
    }
}

impl Engine for LiveMember {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.receiver.handle_datagram(now, from, datagram);
        self.read(now);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.receiver.poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.receiver.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.receiver.handle_timeout(now);
        self.read(now);
    }
}

impl SimApp for LiveMember {
    fn probe(&self) -> AppProbe {
        AppProbe {
            delivered_bytes: self.bytes,
            ..AppProbe::default()
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LiveSpec {
    from: String,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    to: Option<String>,
    interval: HumanDuration,
    message: Bytes,
    #[serde(default)]
    messages: Option<u64>,
    #[serde(default)]
    start: Option<HumanDuration>,
    #[serde(default)]
    latency: Option<HumanDuration>,
    #[serde(default)]
    queue: Option<String>,
    #[serde(default)]
    queue_bytes: Option<Bytes>,
    #[serde(default)]
    cc: Option<String>,
    #[serde(default)]
    window_policy: Option<String>,
    #[serde(default)]
    fair: Option<crate::session_flow::FairSpec>,
}

/// One live flow built into a simulation.
#[derive(Debug, Clone)]
pub struct LiveFlow {
    /// The [`LiveSource`].
    pub source: AppId,
    /// One [`LiveMember`] per member node.
    pub members: Vec<AppId>,
    /// The messages' latency budget, if any.
    pub latency: Option<Duration>,
}

/// Builds `kind = "live"` flows and remembers them.
#[derive(Debug, Default)]
pub struct LiveFlows {
    /// Flows built, in scenario order.
    pub flows: Vec<LiveFlow>,
}

impl FlowFactory for LiveFlows {
    fn build(
        &mut self,
        spec: &FlowSpec,
        sim: &mut Simulator,
        ctx: &ScenarioContext,
    ) -> Result<bool, String> {
        if spec.kind != "live" {
            return Ok(false);
        }
        let t: LiveSpec = spec.parse()?;
        let from = sim.resolve(&t.from).map_err(|e| format!("from: {e}"))?;
        let (group, addrs) = ctx.receivers_of(sim, t.group.as_deref(), t.to.as_deref())?;
        if t.interval.0.is_zero() {
            return Err("interval: must be above 0".into());
        }
        let message = usize::try_from(t.message.0)
            .ok()
            .filter(|&m| (MESSAGE_HEADER..=1 << 20).contains(&m))
            .ok_or_else(|| format!("message: {MESSAGE_HEADER} B to 1 MiB"))?;
        let latency = t.latency.map(|l| l.0).filter(|l| !l.is_zero());
        let mut transport = fanout_transport::TransportConfig::default();
        apply_transport_options(&mut transport, t.cc.as_deref(), None, None)?;
        let mut mode = RealtimeSend::with_defaults(transport.max_datagram);
        mode.deadlines = latency.is_some();
        match t.queue.as_deref() {
            None | Some("fifo") => {}
            Some("lifo") => mode.order = QueueOrder::Lifo,
            Some(o) => return Err(format!("queue: `{o}` (fifo or lifo)")),
        }
        if let Some(b) = t.queue_bytes {
            let b = usize::try_from(b.0).map_err(|_| "queue_bytes: too large")?;
            mode.limit = QueueLimit::Bytes(b.max(1));
        }
        let config = SessionConfig {
            group,
            wait_for_members: addrs.len(),
            join: JoinPolicy::Live,
            steady_ack_every: None,
            realtime: Some(mode),
            window: crate::session_flow::window_policy(
                t.window_policy.as_deref(),
                t.fair.as_ref(),
            )?,
            transport: transport.clone(),
            ..SessionConfig::default()
        };
        let mut members = Vec::with_capacity(addrs.len());
        for addr in addrs {
            let member_transport = fanout_transport::TransportConfig {
                realtime: true,
                realtime_latency: latency,
                ..transport.clone()
            };
            let r = Receiver::join(member_transport, from, Instant::ZERO);
            members.push(
                sim.add_app(addr, Box::new(LiveMember::new(r)))
                    .map_err(|e| format!("member {addr}: {e}"))?,
            );
        }
        let session_id = 0x11FE_0000 + self.flows.len() as u64;
        let source = LiveSource {
            session: SessionSender::new(config, session_id, Instant::ZERO),
            start: Instant::ZERO + t.start.map_or(Duration::from_secs(1), |s| s.0),
            interval: t.interval.0,
            message,
            count: t.messages,
            latency,
            written: 0,
        };
        let source = sim
            .add_app(from, Box::new(source))
            .map_err(|e| format!("from: {e}"))?;
        self.flows.push(LiveFlow {
            source,
            members,
            latency,
        });
        Ok(true)
    }
}

/// What a live flow delivered.
#[derive(Debug, Clone, Serialize)]
pub struct LiveFigures {
    /// Messages the source wrote.
    pub written: u64,
    /// Members.
    pub members: usize,
    /// Perceived loss (messages written but never read), averaged over
    /// members, as a fraction.
    pub mean_perceived_loss: f64,
    /// The worst member's perceived loss.
    pub max_perceived_loss: f64,
    /// Messages read after their deadline (latency budget), all members.
    pub late: u64,
    /// Messages the members dropped because they were complete only after
    /// the deadline the sender named (so not read late), all members.
    pub dropped_late: u64,
    /// Delay from writing to reading over every message read: median,
    /// 99th percentile and largest, milliseconds.
    pub delay_p50_ms: f64,
    /// See `delay_p50_ms`.
    pub delay_p99_ms: f64,
    /// See `delay_p50_ms`.
    pub delay_max_ms: f64,
    /// Mean delay from writing to reading, milliseconds.
    pub delay_mean_ms: f64,
    /// The 99th percentile of the delivery delay as the members measured
    /// it themselves (from first sending, on the sender's clock mapped
    /// onto theirs), the median over members, milliseconds: beside
    /// `delay_p99_ms` it shows how well they measure.
    pub measured_delay_p99_ms: f64,
    /// Jitter: the mean difference between consecutive messages' delays,
    /// milliseconds, averaged over members (TCP-CM §4's jitter).
    pub jitter_ms: f64,
    /// Messages read per second by the average member, times their size:
    /// what it received, bit/s over the time messages were written.
    pub delivered_bps: f64,
    /// Reordering index (TCP-CM §4): the mean, over messages read, of how
    /// many places each moved from its send order, averaged over members.
    pub reordering_index: f64,
    /// Messages the sender's queue dropped (full or expired).
    pub queue_dropped: u64,
    /// SKIPs the sender sent, and stream bytes it repaired.
    pub skips_sent: u64,
    /// Stream bytes sent again as repairs.
    pub repair_bytes: u64,
    /// Repairs sent twice, their last chance to arrive in time.
    pub second_copies: u64,
    /// Members' retransmission timeouts and loss-recovery episodes.
    pub rto_events: u64,
    /// See `rto_events`.
    pub recovery_episodes: u64,
}

/// The figures of every live flow of `sim`.
pub fn live_figures(sim: &Simulator, flows: &LiveFlows) -> Vec<LiveFigures> {
    flows
        .flows
        .iter()
        .filter_map(|f| {
            let source = sim.app::<LiveSource>(f.source)?;
            let written = source.written();
            let members: Vec<&LiveMember> = f
                .members
                .iter()
                .filter_map(|&m| sim.app::<LiveMember>(m))
                .collect();
            let losses: Vec<f64> = members
                .iter()
                .map(|m| 1.0 - m.got().len() as f64 / written.max(1) as f64)
                .collect();
            let mut delays: Vec<Duration> = members
                .iter()
                .flat_map(|m| m.got().iter().map(|g| g.1))
                .collect();
            delays.sort_unstable();
            let pick = |q: f64| {
                delays
                    .get(((delays.len() as f64 - 1.0) * q).round().max(0.0) as usize)
                    .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
            };
            let late = f
                .latency
                .map_or(0, |l| delays.iter().filter(|&&d| d > l).count() as u64);
            let reordering = members
                .iter()
                .map(|m| reordering_index(m.got()))
                .sum::<f64>()
                / members.len().max(1) as f64;
            let jitter_ms = members.iter().map(|m| jitter(m.got())).sum::<f64>()
                / members.len().max(1) as f64
                * 1000.0;
            let read: usize = members.iter().map(|m| m.got().len()).sum();
            let span = source.interval.as_secs_f64() * written.max(1) as f64;
            let delivered_bps =
                read as f64 / members.len().max(1) as f64 * (source.message * 8) as f64 / span;
            let st = source.session().stats();
            let q = source.session().realtime_stats().unwrap_or_default().queue;
            Some(LiveFigures {
                written,
                members: members.len(),
                mean_perceived_loss: losses.iter().sum::<f64>() / losses.len().max(1) as f64,
                max_perceived_loss: losses.iter().copied().fold(0.0, f64::max),
                late,
                dropped_late: members
                    .iter()
                    .map(|m| m.receiver().stats().messages_late)
                    .sum(),
                delay_p50_ms: pick(0.5),
                delay_p99_ms: pick(0.99),
                delay_max_ms: pick(1.0),
                delay_mean_ms: delays.iter().map(Duration::as_secs_f64).sum::<f64>()
                    / delays.len().max(1) as f64
                    * 1000.0,
                measured_delay_p99_ms: {
                    let mut p99: Vec<f64> = members
                        .iter()
                        .filter_map(|m| m.receiver().delivery_delays()?.percentile(0.99))
                        .map(|d| d.as_secs_f64() * 1000.0)
                        .collect();
                    p99.sort_by(f64::total_cmp);
                    p99.get(p99.len() / 2).copied().unwrap_or(0.0)
                },
                reordering_index: reordering,
                jitter_ms,
                delivered_bps,
                queue_dropped: q.discarded + q.expired,
                skips_sent: st.skips_sent,
                repair_bytes: st.repair_bytes,
                second_copies: st.second_copies,
                rto_events: st.rto_events,
                recovery_episodes: st.recovery_episodes,
            })
        })
        .collect()
}

/// The mean absolute difference between consecutive delays of `got`, in
/// seconds.
pub fn jitter(got: &[(u64, Duration)]) -> f64 {
    if got.len() < 2 {
        return 0.0;
    }
    let sum: f64 = got
        .windows(2)
        .map(|w| (w[1].1.as_secs_f64() - w[0].1.as_secs_f64()).abs())
        .sum();
    sum / (got.len() - 1) as f64
}

/// TCP-CM §4's reordering index of messages read in the order `got`: the
/// mean distance between each message's place in the order read and its
/// place in the order sent (among the messages read).
pub fn reordering_index(got: &[(u64, Duration)]) -> f64 {
    if got.is_empty() {
        return 0.0;
    }
    let mut sorted: Vec<u64> = got.iter().map(|g| g.0).collect();
    sorted.sort_unstable();
    let moved: usize = got
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let sent_place = sorted.partition_point(|&n| n < g.0);
            i.abs_diff(sent_place)
        })
        .sum();
    moved as f64 / got.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reordering_index_counts_places_moved() {
        let d = Duration::ZERO;
        assert_eq!(reordering_index(&[(0, d), (1, d), (2, d)]), 0.0);
        // Newest first: 2 1 0 — places moved 2, 0, 2.
        assert!((reordering_index(&[(2, d), (1, d), (0, d)]) - 4.0 / 3.0).abs() < 1e-9);
    }
}
