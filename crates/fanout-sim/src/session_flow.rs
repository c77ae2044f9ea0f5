//! TCP-SMO sessions as scenario flows (`kind = "session"`): a
//! [`SessionSender`] multicasting to a group, and a member ([`Receiver::join`])
//! on every node that is ever a member of the group.
//!
//! ```toml
//! [[flow]]
//! kind = "session"
//! from = "s:5000"
//! group = "239.1.1.1:7000"
//! bytes = "100MB"             # optional; default: send until the run ends
//! cc = "newreno"              # optional (default cubic)
//! repair_threshold = 0.05     # optional: multicast a repair above this share
//! repair_cost_ratio = 1.0     # optional: cost rule instead (sender/member link speed ratio)
//! repair = "coded"            # optional: coded (parity) repair, blocks of repair_block;
//!                             #   "auto" (the CLI's default): coded unless unicast_fanout
//! repair_block = 32           #   segments; fallback: the cost rule (repair_cost_ratio, default 1)
//! window_policy = "min"       # optional: "auto" (default: "acker"), "min" (the smallest
//!                             # member window), "acker" (the worst member's ACKs drive
//!                             # one window), "fair" (essentially
//!                             # fair, TCP-SMO §II.F), "equation" or "equation-min"
//! fair = { percentile = 0.5, a = 1.0, b = 1.0, scaling = "log2" }  # optional, for "fair"
//! rtt_percentile = 0.9        # optional: session RTT = this percentile (default max)
//! wait_for = 10               # optional: members to wait for (default all)
//! unicast_fanout = false      # optional: no multicast, a copy per member
//! ack_every = 2               # optional segments per ACK at the members
//! adaptive_acks = true        # optional: false keeps every member at ack_every
//! feedback_budget = 25000     # optional ACKs/s at the sender from all members (0 = off;
//!                             # default: 12.5% of the sender's fastest link in ACKs)
//! window = "1MiB"             # optional send buffer and member receive windows
//! evict_outliers = true       # optional: false turns outlier eviction off
//! join = "catch_up"           # optional: "from_start" (default) | "live" | "catch_up"
//! late = [{ node = "j1", at = "5s" }]   # optional late joiners (see session_late)
//! catch_up_share = 32         # optional: session bytes per catch-up byte while it runs
//! relays = [{ node = "x1", group = "239.2.1.1:7000" }]   # optional (see session_relay)
//! relay_buffer = "4MiB"       # optional relay forwarding buffer
//! mergers = ["m1", "m2"]      # optional MCTCP ACK mergers (see session_merge)
//! ```

use crate::app::{AppProbe, SimApp};
use crate::ids::AppId;
use crate::scenario::{FlowFactory, FlowSpec, ScenarioContext};
use crate::session_late::{catch_up_port, LateCatchUp, LateMember, LateSpec};
use crate::session_merge::{self, MergerApp};
use crate::session_relay::{RelayApp, RelaySpec, DEFAULT_RELAY_BUFFER};
use crate::sim::Simulator;
use crate::transfer::{apply_transport_options, feed_bulk, SinkReceiver};
use crate::units::{Bytes, Rate};
use fanout_app::catch_up::{CatchUpConfig, CatchUpServer, RepeatedByte};
use fanout_core::{Engine, Instant, Rng, Transmit};
use fanout_transport::session::budget_for_link;
use fanout_transport::session::{FairScaling, RepairPolicy, RttPolicy, WindowPolicy};
use fanout_transport::session::{JoinPolicy, SessionConfig, SessionSender};
use fanout_transport::Receiver;
use serde::Deserialize;
use std::net::SocketAddr;

/// A session sender application writing `total` bytes (or forever) of
/// zeros, with the catch-up server `fanout send` runs around its session
/// (late joiners' prefixes re-produced as zeros).
pub struct BulkSession {
    server: CatchUpServer,
    total: Option<u64>,
    written: u64,
}

impl std::fmt::Debug for BulkSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BulkSession")
            .field("written", &self.written)
            .field("catch_ups", self.server.catch_up_stats())
            .finish_non_exhaustive()
    }
}

impl BulkSession {
    /// A session sending `total` bytes (`None`: endless), with the default
    /// catch-up server.
    pub fn new(config: SessionConfig, session_id: u64, total: Option<u64>) -> Self {
        Self::with_catch_up(config, session_id, total, CatchUpConfig::default())
    }

    /// Like [`BulkSession::new`], with the catch-up server's `catch_up`
    /// settings.
    pub fn with_catch_up(
        config: SessionConfig,
        session_id: u64,
        total: Option<u64>,
        catch_up: CatchUpConfig,
    ) -> Self {
        let transport = config.transport.clone();
        let session = SessionSender::new(config, session_id, Instant::ZERO);
        BulkSession {
            server: CatchUpServer::new(
                session,
                Box::new(RepeatedByte(0)),
                transport,
                catch_up,
                Rng::new(session_id),
            ),
            total,
            written: 0,
        }
    }

    /// The session.
    pub fn session(&self) -> &SessionSender {
        &self.server
    }

    /// The catch-up server around it.
    pub fn catch_up(&self) -> &CatchUpServer {
        &self.server
    }
}

impl Engine for BulkSession {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.server.handle_datagram(now, from, datagram);
        while self.server.poll_event().is_some() {}
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let s: &mut SessionSender = &mut self.server;
        if feed_bulk(&mut self.written, self.total, |b| s.write(b)) {
            s.finish();
        }
        self.server.poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.server.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.server.handle_timeout(now);
        while self.server.poll_event().is_some() {}
    }
}

impl SimApp for BulkSession {
    fn probe(&self) -> AppProbe {
        session_probe(&self.server)
    }
}

/// A session sender's sample: what every member acknowledged, the session
/// window.
pub(crate) fn session_probe(s: &SessionSender) -> AppProbe {
    AppProbe {
        delivered_bytes: s.bytes_acked_by_all(),
        cwnd_bytes: Some(s.cwnd()),
        srtt: None,
        rate_bps: None,
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionSpec {
    from: String,
    group: String,
    #[serde(default)]
    bytes: Option<Bytes>,
    #[serde(default)]
    cc: Option<String>,
    #[serde(default)]
    repair_threshold: Option<f64>,
    #[serde(default)]
    wait_for: Option<usize>,
    #[serde(default)]
    unicast_fanout: Option<bool>,
    #[serde(default)]
    ack_every: Option<u32>,
    #[serde(default)]
    repair_cost_ratio: Option<f64>,
    #[serde(default)]
    repair: Option<String>,
    #[serde(default)]
    repair_block: Option<usize>,
    #[serde(default)]
    window_policy: Option<String>,
    #[serde(default)]
    fair: Option<FairSpec>,
    #[serde(default)]
    rtt_percentile: Option<f64>,
    #[serde(default)]
    adaptive_acks: Option<bool>,
    #[serde(default)]
    feedback_budget: Option<u32>,
    #[serde(default)]
    window: Option<Bytes>,
    /// A cap on the sender's rate on top of congestion control.
    #[serde(default)]
    max_rate: Option<Rate>,
    #[serde(default)]
    evict_outliers: Option<bool>,
    #[serde(default)]
    join: Option<String>,
    #[serde(default)]
    late: Vec<LateSpec>,
    #[serde(default)]
    catch_up_share: Option<u64>,
    #[serde(default)]
    relays: Vec<RelaySpec>,
    #[serde(default)]
    relay_buffer: Option<Bytes>,
    #[serde(default)]
    mergers: Vec<String>,
}

/// An MCTCP merger built into a simulation ([`crate::session_merge`]).
#[derive(Debug, Clone)]
pub struct MergerFlow {
    /// Node name.
    pub node: String,
    /// Its [`MergerApp`].
    pub app: AppId,
    /// Where it reports (a merger or the sender).
    pub parent: SocketAddr,
    /// Children reporting to it (members and mergers).
    pub children: usize,
}

/// A relay built into a simulation.
#[derive(Debug, Clone)]
pub struct RelayFlow {
    /// Node name.
    pub node: String,
    /// Its [`RelayApp`].
    pub app: AppId,
    /// One [`SinkReceiver`] per downstream member.
    pub members: Vec<AppId>,
}

/// A late joiner built into a simulation.
#[derive(Debug, Clone)]
pub struct LateFlow {
    /// Node name.
    pub node: String,
    /// When it joins.
    pub at: Instant,
    /// Its [`LateMember`].
    pub member: AppId,
    /// Its catch-up socket ([`LateCatchUp`]).
    pub catch_up: AppId,
}

/// One session built into a simulation.
#[derive(Debug, Clone)]
pub struct SessionFlow {
    /// The [`BulkSession`].
    pub sender: AppId,
    /// One [`SinkReceiver`] per member node present from the start.
    pub members: Vec<AppId>,
    /// Late joiners.
    pub late: Vec<LateFlow>,
    /// Relays (each the sender of a downstream session).
    pub relays: Vec<RelayFlow>,
    /// ACK mergers.
    pub mergers: Vec<MergerFlow>,
    /// Stream length, if bounded.
    pub bytes: Option<u64>,
}

impl SessionFlow {
    /// Every member present from the start: the direct members, then the
    /// relays (members too; a relay's probe counts what it received).
    pub fn members_from_start(&self) -> impl Iterator<Item = AppId> + '_ {
        self.members
            .iter()
            .copied()
            .chain(self.relays.iter().map(|r| r.app))
    }
}

/// `fair = { ... }`: the essentially-fair window's parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FairSpec {
    #[serde(default = "half")]
    percentile: f64,
    #[serde(default = "one")]
    a: f64,
    #[serde(default = "one")]
    b: f64,
    #[serde(default)]
    scaling: Option<String>,
}

fn half() -> f64 {
    0.5
}

fn one() -> f64 {
    1.0
}

/// `window_policy` and `fair` → the session's window policy.
pub(crate) fn window_policy(
    name: Option<&str>,
    fair: Option<&FairSpec>,
) -> Result<WindowPolicy, String> {
    match name.unwrap_or("auto") {
        "auto" => Ok(WindowPolicy::Auto),
        "min" => Ok(WindowPolicy::Minimum),
        "acker" => Ok(WindowPolicy::Acker),
        "equation" => Ok(WindowPolicy::REALTIME),
        "equation-min" => Ok(WindowPolicy::EQUATION_WORST),
        "fair" => {
            let f = fair.cloned().unwrap_or(FairSpec {
                percentile: half(),
                a: one(),
                b: one(),
                scaling: None,
            });
            let scaling = match f.scaling.as_deref().unwrap_or("log2") {
                "one" => FairScaling::One,
                "log2" => FairScaling::Log2,
                "sqrt" => FairScaling::Sqrt,
                other => return Err(format!("fair.scaling: `{other}` (one, log2 or sqrt)")),
            };
            let valid = (0.0..=1.0).contains(&f.percentile) && f.a >= 0.0 && f.b >= f.a;
            if !valid {
                return Err("fair: need 0 ≤ percentile ≤ 1 and 0 ≤ a ≤ b".into());
            }
            Ok(WindowPolicy::EssentiallyFair {
                percentile: f.percentile,
                a: f.a,
                b: f.b,
                scaling,
            })
        }
        other => Err(format!(
            "window_policy: `{other}` (auto, min, acker, fair, equation or equation-min)"
        )),
    }
}

/// The fastest link leaving the node that owns `addr`, bit/s.
fn sender_link_bps(sim: &Simulator, addr: SocketAddr) -> Option<u64> {
    let node = sim.node_by_ip(addr.ip())?;
    sim.outgoing(node)
        .iter()
        .map(|&l| sim.link(l).config().rate_bps)
        .max()
}

/// Builds `kind = "session"` flows and remembers them.
#[derive(Debug, Default)]
pub struct SessionFlows {
    /// Sessions built, in scenario order.
    pub sessions: Vec<SessionFlow>,
}

impl FlowFactory for SessionFlows {
    fn build(
        &mut self,
        spec: &FlowSpec,
        sim: &mut Simulator,
        ctx: &ScenarioContext,
    ) -> Result<bool, String> {
        if spec.kind != "session" {
            return Ok(false);
        }
        let t: SessionSpec = spec.parse()?;
        let from = sim.resolve(&t.from).map_err(|e| format!("from: {e}"))?;
        let group: SocketAddr = t
            .group
            .parse()
            .map_err(|e| format!("group: `{}`: {e}", t.group))?;
        if !group.ip().is_multicast() {
            return Err(format!("group: {} is not a multicast address", group.ip()));
        }
        let mut late = Vec::with_capacity(t.late.len());
        for (i, l) in t.late.iter().enumerate() {
            let node = sim
                .node_by_name(&l.node)
                .ok_or_else(|| format!("late[{i}].node: no node named `{}`", l.node))?;
            late.push((l.node.clone(), node, Instant::ZERO + l.at.0));
        }
        let mut relays = Vec::with_capacity(t.relays.len());
        for (i, r) in t.relays.iter().enumerate() {
            let node = sim
                .node_by_name(&r.node)
                .ok_or_else(|| format!("relays[{i}].node: no node named `{}`", r.node))?;
            let down: SocketAddr = r
                .group
                .parse()
                .map_err(|e| format!("relays[{i}].group: `{}`: {e}", r.group))?;
            if !down.ip().is_multicast() || down.ip() == group.ip() {
                return Err(format!(
                    "relays[{i}].group: {} is not another multicast group",
                    down.ip()
                ));
            }
            relays.push((r.node.clone(), node, down));
        }
        let mut late_ips: Vec<std::net::IpAddr> =
            late.iter().map(|(_, n, _)| sim.node(*n).ip()).collect();
        late_ips.extend(relays.iter().map(|(_, n, _)| sim.node(*n).ip()));
        let addrs: Vec<SocketAddr> = ctx
            .member_addrs(sim, group)
            .into_iter()
            .filter(|a| !late_ips.contains(&a.ip()))
            .collect();
        if addrs.is_empty() && relays.is_empty() {
            return Err(format!("group: no [[group]] {} with members", group.ip()));
        }
        let mut merger_nodes = Vec::with_capacity(t.mergers.len());
        for (i, name) in t.mergers.iter().enumerate() {
            let node = sim
                .node_by_name(name)
                .ok_or_else(|| format!("mergers[{i}]: no node named `{name}`"))?;
            if merger_nodes.contains(&node) {
                return Err(format!("mergers[{i}]: `{name}` listed twice"));
            }
            merger_nodes.push(node);
        }
        if !merger_nodes.is_empty() && (!relays.is_empty() || !late.is_empty()) {
            return Err("mergers: not combined with relays or late joiners yet".into());
        }
        let merge = if merger_nodes.is_empty() {
            None
        } else {
            Some(
                session_merge::plan(sim, from, group.port(), &merger_nodes, &addrs)
                    .map_err(|e| format!("mergers: {e}"))?,
            )
        };
        let direct = merge
            .as_ref()
            .map_or(addrs.len() + relays.len(), |p| p.sender_children);
        let mut config = SessionConfig {
            group: (!t.unicast_fanout.unwrap_or(false)).then_some(group),
            wait_for_members: t.wait_for.unwrap_or(direct),
            ..SessionConfig::default()
        };
        if let Some(th) = t.repair_threshold {
            if !(0.0..=1.0).contains(&th) {
                return Err("repair_threshold: must be within 0..=1".into());
            }
            config.repair = RepairPolicy::Threshold(th);
        }
        if let Some(ratio) = t.repair_cost_ratio {
            if ratio.is_nan() || ratio < 1.0 {
                return Err("repair_cost_ratio: must be at least 1".into());
            }
            config.repair = RepairPolicy::Cost {
                uplink_ratio: ratio,
            };
        }
        let multicast = !t.unicast_fanout.unwrap_or(false);
        match t.repair.as_deref() {
            None | Some("segment") => {}
            Some("auto") if !multicast => {}
            Some("coded" | "auto") => {
                let block = t
                    .repair_block
                    .unwrap_or(fanout_transport::session::DEFAULT_BLOCK_SEGMENTS);
                if !(2..=fanout_transport::fec::MAX_SOURCE_SYMBOLS).contains(&block) {
                    return Err("repair_block: must be within 2..=64".into());
                }
                config.repair = RepairPolicy::Coded {
                    block,
                    uplink_ratio: t.repair_cost_ratio.unwrap_or(1.0),
                };
            }
            Some(other) => return Err(format!("repair: unknown policy {other:?}")),
        }
        config.window = window_policy(t.window_policy.as_deref(), t.fair.as_ref())?;
        if let Some(p) = t.rtt_percentile {
            if !(p > 0.0 && p <= 1.0) {
                return Err("rtt_percentile: must be within (0, 1]".into());
            }
            config.rtt = RttPolicy::Percentile(p);
        }
        if t.adaptive_acks == Some(false) {
            config.steady_ack_every = None;
        }
        // A sender knows its own link's speed (a real one reads its NIC's):
        // the default budget is a share of it (`budget_for_link`).
        if let Some(bps) = sender_link_bps(sim, from) {
            config.feedback_budget_pps = budget_for_link(bps);
        }
        if let Some(b) = t.feedback_budget {
            config.feedback_budget_pps = b;
        }
        if t.evict_outliers == Some(false) {
            config.outlier_eviction = None;
        }
        config.join = match t.join.as_deref() {
            None | Some("from_start") => JoinPolicy::FromStart,
            Some("live") => JoinPolicy::Live,
            Some("catch_up") => JoinPolicy::CatchUp,
            Some(o) => {
                return Err(format!(
                    "join: `{o}`: expected from_start, live or catch_up"
                ))
            }
        };
        apply_transport_options(
            &mut config.transport,
            t.cc.as_deref(),
            t.window,
            t.ack_every,
        )?;
        config.transport.max_rate = t.max_rate.map(|r| r.0.div_ceil(8));
        let mut members = Vec::with_capacity(addrs.len());
        for (i, addr) in addrs.into_iter().enumerate() {
            let mut transport = config.transport.clone();
            transport.feedback_via = merge.as_ref().and_then(|p| p.member_parent[i]);
            let r = Receiver::join(transport, from, Instant::ZERO);
            members.push(
                sim.add_app(addr, Box::new(SinkReceiver::with(r)))
                    .map_err(|e| format!("member {addr}: {e}"))?,
            );
        }
        let mut catch_up = CatchUpConfig::default();
        if let Some(share) = t.catch_up_share {
            if share == 0 {
                return Err("catch_up_share: at least 1".into());
            }
            catch_up.session_bytes_per_catch_up_byte = share;
        }
        let mut late_flows = Vec::with_capacity(late.len());
        for (name, node, at) in late {
            sim.join_at(at, group.ip(), node)
                .map_err(|e| format!("late {name}: {e}"))?;
            let ip = sim.node(node).ip();
            let plan = std::rc::Rc::default();
            let m = LateMember::new(
                config.transport.clone(),
                from,
                at,
                std::rc::Rc::clone(&plan),
            );
            let member = sim
                .add_app(SocketAddr::new(ip, group.port()), Box::new(m))
                .map_err(|e| format!("late {name}: {e}"))?;
            let client = LateCatchUp::new(config.transport.clone(), at, plan);
            let catch_up = sim
                .add_app(
                    SocketAddr::new(ip, catch_up_port(group.port())),
                    Box::new(client),
                )
                .map_err(|e| format!("late {name}: catch-up port: {e}"))?;
            late_flows.push(LateFlow {
                node: name,
                at,
                member,
                catch_up,
            });
        }
        let session_id = 0x5E55_0000 + self.sessions.len() as u64;
        let capacity = t.relay_buffer.map_or(DEFAULT_RELAY_BUFFER, |b| b.0);
        let capacity = usize::try_from(capacity).map_err(|_| "relay_buffer: too large")?;
        let mut relay_flows = Vec::with_capacity(relays.len());
        for (k, (name, node, down)) in relays.into_iter().enumerate() {
            let relay_addr = SocketAddr::new(sim.node(node).ip(), group.port());
            let down_addrs = ctx.member_addrs(sim, down);
            if down_addrs.is_empty() {
                return Err(format!(
                    "relay {name}: no [[group]] {} with members",
                    down.ip()
                ));
            }
            let down_config = SessionConfig {
                group: config.group.map(|_| down),
                wait_for_members: down_addrs.len(),
                ..config.clone()
            };
            let mut down_members = Vec::with_capacity(down_addrs.len());
            for addr in down_addrs {
                let r = Receiver::join(config.transport.clone(), relay_addr, Instant::ZERO);
                down_members.push(
                    sim.add_app(addr, Box::new(SinkReceiver::with(r)))
                        .map_err(|e| format!("relay {name} member {addr}: {e}"))?,
                );
            }
            let relay = RelayApp::new(
                from,
                down_config,
                session_id + ((k as u64 + 1) << 16),
                capacity,
            );
            let app = sim
                .add_app(relay_addr, Box::new(relay))
                .map_err(|e| format!("relay {name}: {e}"))?;
            relay_flows.push(RelayFlow {
                node: name,
                app,
                members: down_members,
            });
        }
        let mut merger_flows = Vec::new();
        for (k, &(addr, parent, children)) in merge.iter().flat_map(|p| &p.mergers).enumerate() {
            let app = MergerApp::new(session_merge::merger_config(parent, children));
            let app = sim
                .add_app(addr, Box::new(app))
                .map_err(|e| format!("mergers[{k}]: {e}"))?;
            merger_flows.push(MergerFlow {
                node: t.mergers[k].clone(),
                app,
                parent,
                children,
            });
        }
        let sender = sim
            .add_app(
                from,
                Box::new(BulkSession::with_catch_up(
                    config,
                    session_id,
                    t.bytes.map(|b| b.0),
                    catch_up,
                )),
            )
            .map_err(|e| format!("from: {e}"))?;
        self.sessions.push(SessionFlow {
            sender,
            members,
            late: late_flows,
            relays: relay_flows,
            mergers: merger_flows,
            bytes: t.bytes.map(|b| b.0),
        });
        Ok(true)
    }
}
