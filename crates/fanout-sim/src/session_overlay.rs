//! The overlay (ROMA) in the simulator (`kind = "overlay"`): hosts joined
//! into a tree by reliable, congestion-controlled byte streams — the
//! session engine with one member, fanout's TCP-like connection — each
//! running the sans-IO overlay engine of `fanout-overlay`, exactly as the
//! kernel-TCP runtime drives it: the source writes its fountain into each
//! child's stream as fast as the stream takes it, a node reads its
//! parent's stream, checks and decodes, and copies what arrived into its
//! children's streams only as fast as they take it (forward-when-feasible).
//!
//! ```toml
//! [[flow]]
//! kind = "overlay"
//! source = "a:7000"
//! hops = [["a:7000", "b:7000"], ["b:7000", "c:7000"]]   # parent, child
//! object = "32MB"        # the object's size
//! symbol = "1KiB"        # optional (default 8KiB); multiple of 8
//! block = "8MiB"         # optional RaptorQ block size (default 64MiB)
//! buffer = "1MiB"        # optional relay buffer per host
//! segment = "1KiB"       # optional: each hop's largest segment payload
//! cc = "newreno"         # optional (default cubic)
//! window = "8MiB"        # optional send buffer / receive window per hop
//! start = "0s"           # optional
//! ```
//!
//! One difference from the kernel-TCP runtime: a hop here is a one-way
//! session the parent opens to the child, so the hello a child writes on
//! its connection is handed to the parent's host directly.

use crate::app::{AppProbe, SimApp};
use crate::ids::AppId;
use crate::scenario::{FlowFactory, FlowSpec, ScenarioContext};
use crate::sim::Simulator;
use crate::transfer::apply_transport_options;
use crate::units::{Bytes, HumanDuration};
use fanout_core::{Engine, Instant, Transmit};
use fanout_overlay::fountain::Layout;
use fanout_overlay::hop::HELLO;
use fanout_overlay::{ChildId, Children, NodeError, OverlayNode, OverlaySource, SymbolKey};
use fanout_transport::session::{SessionConfig, SessionSender};
use fanout_transport::{Receiver, TransportConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// Bytes read from a parent's stream per call.
const READ_CHUNK: usize = 64 << 10;

/// The source's or a node's overlay engine.
#[derive(Debug)]
enum Role {
    Source(Box<OverlaySource>),
    Node(Box<OverlayNode>),
}

impl Role {
    fn children(&mut self) -> &mut Children {
        match self {
            Role::Source(s) => s.children(),
            Role::Node(n) => n.children(),
        }
    }

    fn writable(&mut self, id: ChildId) -> Option<&[u8]> {
        match self {
            Role::Source(s) => s.writable(id),
            Role::Node(n) => n.writable(id),
        }
    }
}

/// One child's stream: the session the host opens to it.
#[derive(Debug)]
struct ChildStream {
    peer: SocketAddr,
    id: ChildId,
    session_id: u64,
    sender: Option<SessionSender>,
}

/// One overlay host: the source or a node, with a stream to each child
/// and (a node) one from its parent.
#[derive(Debug)]
pub struct OverlayHost {
    role: Role,
    /// The parent's stream (nodes only).
    upstream: Option<Receiver>,
    children: Vec<ChildStream>,
    config: SessionConfig,
    start: Instant,
    scratch: Vec<u8>,
    /// When the object was decoded and checked (nodes only).
    decoded_at: Option<Instant>,
    /// Why the parent's stream was given up, if it was.
    error: Option<NodeError>,
    /// Bytes written into children's streams.
    sent_bytes: u64,
}

impl OverlayHost {
    /// The source of `source`, opening streams to `children` at `start`.
    pub fn source(
        source: OverlaySource,
        config: SessionConfig,
        children: &[(SocketAddr, u64)],
        start: Instant,
    ) -> Self {
        Self::new(
            Role::Source(Box::new(source)),
            None,
            config,
            children,
            start,
        )
    }

    /// A node listening for its parent's stream with `transport`, opening
    /// streams to `children` at `start`.
    pub fn node(
        node: OverlayNode,
        transport: TransportConfig,
        config: SessionConfig,
        children: &[(SocketAddr, u64)],
        start: Instant,
    ) -> Self {
        let upstream = Receiver::listen(transport, start);
        Self::new(
            Role::Node(Box::new(node)),
            Some(upstream),
            config,
            children,
            start,
        )
    }

    fn new(
        mut role: Role,
        upstream: Option<Receiver>,
        config: SessionConfig,
        children: &[(SocketAddr, u64)],
        start: Instant,
    ) -> Self {
        let children = children
            .iter()
            .map(|&(peer, session_id)| {
                let id = role.children().add();
                role.children()
                    .on_bytes(id, &HELLO)
                    .expect("the hello is the protocol's own");
                ChildStream {
                    peer,
                    id,
                    session_id,
                    sender: None,
                }
            })
            .collect();
        OverlayHost {
            role,
            upstream,
            children,
            config,
            start,
            scratch: vec![0; READ_CHUNK],
            decoded_at: None,
            error: None,
            sent_bytes: 0,
        }
    }

    /// When it decoded and checked the object (nodes).
    pub fn decoded_at(&self) -> Option<Instant> {
        self.decoded_at
    }

    /// Bytes read from its parent's stream (nodes).
    pub fn upstream_bytes(&self) -> u64 {
        match &self.role {
            Role::Node(n) => n.upstream_bytes(),
            Role::Source(_) => 0,
        }
    }

    /// Bytes of its parent's stream it took to decode (nodes).
    pub fn bytes_to_decode(&self) -> Option<u64> {
        match &self.role {
            Role::Node(n) => n.bytes_to_decode(),
            Role::Source(_) => None,
        }
    }

    /// Symbols refused as not authentic or not usable (nodes).
    pub fn refused_symbols(&self) -> u64 {
        match &self.role {
            Role::Node(n) => n.counts().refused,
            Role::Source(_) => 0,
        }
    }

    /// Why it gave up its parent's stream, if it did.
    pub fn error(&self) -> Option<&NodeError> {
        self.error.as_ref()
    }

    /// Bytes it wrote into its children's streams.
    pub fn sent_bytes(&self) -> u64 {
        self.sent_bytes
    }

    /// Moves bytes until nothing moves: reads the parent's stream while
    /// the node wants it, and writes into each child's stream what it
    /// takes.
    fn pump(&mut self, now: Instant) {
        loop {
            let mut moved = false;
            if let (Role::Node(node), Some(rx)) = (&mut self.role, &mut self.upstream) {
                while self.error.is_none() && node.wants_upstream() {
                    let n = rx.read(&mut self.scratch);
                    if n == 0 {
                        break;
                    }
                    moved = true;
                    if let Err(e) = node.on_upstream(&self.scratch[..n]) {
                        self.error = Some(e);
                    }
                    if self.decoded_at.is_none() && node.object().is_some() {
                        self.decoded_at = Some(now);
                    }
                }
            }
            for child in &mut self.children {
                let Some(tx) = child.sender.as_mut() else {
                    continue;
                };
                while let Some(bytes) = self.role.writable(child.id) {
                    let len = bytes.len();
                    let taken = tx.write(bytes);
                    self.role.children().wrote(child.id, taken);
                    self.sent_bytes += taken as u64;
                    moved |= taken > 0;
                    if taken < len {
                        break;
                    }
                }
            }
            if !moved {
                return;
            }
        }
    }
}

impl Engine for OverlayHost {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        match self.children.iter_mut().find(|c| c.peer == from) {
            Some(c) => {
                if let Some(tx) = c.sender.as_mut() {
                    tx.handle_datagram(now, from, datagram);
                }
            }
            None => {
                if let Some(rx) = self.upstream.as_mut() {
                    rx.handle_datagram(now, from, datagram);
                }
            }
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if now >= self.start {
            for c in self.children.iter_mut().filter(|c| c.sender.is_none()) {
                let mut s = SessionSender::new(self.config.clone(), c.session_id, now);
                s.offer(now, c.peer);
                c.sender = Some(s);
            }
        }
        self.pump(now);
        for c in &mut self.children {
            if let Some(t) = c.sender.as_mut().and_then(|s| s.poll_transmit(now, buf)) {
                return Some(t);
            }
        }
        self.upstream.as_mut()?.poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let children = self.children.iter().map(|c| match &c.sender {
            None => Some(self.start),
            Some(s) => s.poll_timeout(),
        });
        let upstream = self.upstream.as_ref().and_then(Receiver::poll_timeout);
        children.chain([upstream]).flatten().min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        for s in self.children.iter_mut().filter_map(|c| c.sender.as_mut()) {
            s.handle_timeout(now);
        }
        if let Some(rx) = self.upstream.as_mut() {
            rx.handle_timeout(now);
        }
    }
}

impl SimApp for OverlayHost {
    fn probe(&self) -> AppProbe {
        AppProbe {
            delivered_bytes: match &self.role {
                Role::Node(n) => n.upstream_bytes(),
                Role::Source(_) => self.sent_bytes,
            },
            ..AppProbe::default()
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OverlaySpec {
    source: String,
    hops: Vec<(String, String)>,
    object: Bytes,
    #[serde(default)]
    symbol: Option<Bytes>,
    #[serde(default)]
    block: Option<Bytes>,
    #[serde(default)]
    buffer: Option<Bytes>,
    #[serde(default)]
    segment: Option<Bytes>,
    #[serde(default)]
    cc: Option<String>,
    #[serde(default)]
    window: Option<Bytes>,
    #[serde(default)]
    start: Option<HumanDuration>,
}

/// One host of an overlay flow.
#[derive(Debug, Clone)]
pub struct OverlayHostRef {
    /// Its address as the scenario names it.
    pub label: String,
    /// Its parent's (empty for the source).
    pub parent: String,
    /// The [`OverlayHost`].
    pub app: AppId,
}

/// One overlay built into a simulation.
#[derive(Debug, Clone)]
pub struct OverlayFlow {
    /// The object's size, bytes.
    pub object_bytes: u64,
    /// When the source starts.
    pub start: Instant,
    /// The source first, then the nodes in the order their hops came.
    pub hosts: Vec<OverlayHostRef>,
}

/// Builds `kind = "overlay"` flows and remembers them.
#[derive(Debug, Default)]
pub struct OverlayFlows {
    /// Flows built, in scenario order.
    pub flows: Vec<OverlayFlow>,
}

/// The object a simulated source serves: `len` bytes of a fixed pattern.
pub fn pattern_object(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(13) ^ (i >> 11)) as u8)
        .collect()
}

/// The smallest `max_datagram` whose segments carry at least `payload`
/// bytes.
fn max_datagram_for(config: &TransportConfig, payload: u64) -> Result<usize, String> {
    let mut c = config.clone();
    (256..=65_000)
        .find(|&m| {
            c.max_datagram = m;
            c.max_payload() >= payload
        })
        .ok_or_else(|| "segment: must be 64..=64000 bytes".to_owned())
}

impl FlowFactory for OverlayFlows {
    fn build(
        &mut self,
        spec: &FlowSpec,
        sim: &mut Simulator,
        _ctx: &ScenarioContext,
    ) -> Result<bool, String> {
        if spec.kind != "overlay" {
            return Ok(false);
        }
        let o: OverlaySpec = spec.parse()?;
        // The tree: every host but the source is the child of exactly one
        // host that the source reaches.
        let mut parent_of: BTreeMap<&str, &str> = BTreeMap::new();
        for (p, c) in &o.hops {
            if c == &o.source {
                return Err(format!("hops: the source {c} cannot be a child"));
            }
            if parent_of.insert(c, p).is_some() {
                return Err(format!("hops: {c} has two parents"));
            }
        }
        for (p, _) in &o.hops {
            let mut at = p.as_str();
            let mut steps = 0;
            while at != o.source {
                at = parent_of
                    .get(at)
                    .ok_or_else(|| format!("hops: {p} is not reached from the source"))?;
                steps += 1;
                if steps > o.hops.len() {
                    return Err(format!("hops: a cycle through {p}"));
                }
            }
        }
        let children_of = |host: &str| -> Vec<&str> {
            o.hops
                .iter()
                .filter(|(p, _)| p == host)
                .map(|(_, c)| c.as_str())
                .collect()
        };
        let mut transport = TransportConfig::default();
        apply_transport_options(&mut transport, o.cc.as_deref(), o.window, None)?;
        if let Some(s) = o.segment {
            transport.max_datagram = max_datagram_for(&transport, s.0)?;
        }
        let session = SessionConfig::unicast(transport.clone());
        let symbol = u16::try_from(o.symbol.map_or(8192, |b| b.0))
            .map_err(|_| "symbol: at most 65528 bytes".to_owned())?;
        let block = o.block.map_or(64 << 20, |b| b.0);
        let buffer = usize::try_from(o.buffer.map_or(1 << 20, |b| b.0))
            .map_err(|_| "buffer: too large".to_owned())?;
        let len = usize::try_from(o.object.0).map_err(|_| "object: too large".to_owned())?;
        let layout = Layout::new(o.object.0, symbol, block).map_err(|e| format!("object: {e}"))?;
        let start = Instant::ZERO + o.start.map_or(Duration::ZERO, |d| d.0);
        let flow_index = self.flows.len() as u64;
        let mut psk = [0u8; 32];
        psk[..8].copy_from_slice(&flow_index.to_be_bytes());
        let key = SymbolKey::derive(&psk);
        let resolve = |sim: &Simulator, host: &str| {
            sim.resolve(host).map_err(|e| format!("hops: {host}: {e}"))
        };
        let mut hop_ids = 0u64;
        let mut streams = |sim: &Simulator, host: &str| -> Result<Vec<(SocketAddr, u64)>, String> {
            children_of(host)
                .into_iter()
                .map(|c| {
                    hop_ids += 1;
                    Ok((resolve(sim, c)?, 0x0FE1_0000 + (flow_index << 8) + hop_ids))
                })
                .collect()
        };
        let data = pattern_object(len);
        let source = OverlaySource::new(
            data,
            "object",
            0x0B1E_C700 + flow_index,
            (layout, block),
            key.clone(),
            buffer,
        );
        let mut hosts = Vec::new();
        let children = streams(sim, &o.source)?;
        let addr = resolve(sim, &o.source)?;
        let app = sim
            .add_app(
                addr,
                Box::new(OverlayHost::source(
                    source,
                    session.clone(),
                    &children,
                    start,
                )),
            )
            .map_err(|e| format!("source: {e}"))?;
        hosts.push(OverlayHostRef {
            label: o.source.clone(),
            parent: String::new(),
            app,
        });
        for (p, c) in &o.hops {
            let children = streams(sim, c)?;
            let addr = resolve(sim, c)?;
            let node = OverlayNode::new(key.clone(), buffer);
            let app = sim
                .add_app(
                    addr,
                    Box::new(OverlayHost::node(
                        node,
                        transport.clone(),
                        session.clone(),
                        &children,
                        start,
                    )),
                )
                .map_err(|e| format!("hops: {c}: {e}"))?;
            hosts.push(OverlayHostRef {
                label: c.clone(),
                parent: p.clone(),
                app,
            });
        }
        self.flows.push(OverlayFlow {
            object_bytes: o.object.0,
            start,
            hosts,
        });
        Ok(true)
    }
}

/// What one overlay host did.
#[derive(Debug, Clone, Serialize)]
pub struct OverlayHostFigures {
    /// Its address as the scenario names it.
    pub host: String,
    /// Its parent's.
    pub parent: String,
    /// Its parent's stream, bytes read per second from the start until it
    /// decoded (or the end of the run), bit/s.
    pub rate_bps: f64,
    /// Seconds from the start until it decoded and checked the object.
    pub decoded_s: Option<f64>,
    /// Bytes read per object byte until then.
    pub bytes_per_object_byte: Option<f64>,
    /// Symbols it refused.
    pub refused_symbols: u64,
    /// Why it gave up its parent's stream, if it did.
    pub error: Option<String>,
}

/// What an overlay flow did, per host below the source.
#[derive(Debug, Clone, Serialize)]
pub struct OverlayFigures {
    /// The object's size, bytes.
    pub object_bytes: u64,
    /// Bytes the source wrote per object byte.
    pub source_copies: f64,
    /// The hosts below the source.
    pub hosts: Vec<OverlayHostFigures>,
}

/// The figures of every overlay flow of `sim` over `[from, to]`.
pub fn overlay_figures(
    sim: &Simulator,
    flows: &OverlayFlows,
    from: Instant,
    to: Instant,
) -> Vec<OverlayFigures> {
    flows
        .flows
        .iter()
        .map(|f| {
            let host = |r: &OverlayHostRef| sim.app::<OverlayHost>(r.app).expect("an overlay host");
            let source = host(&f.hosts[0]);
            let hosts = f.hosts[1..]
                .iter()
                .map(|r| {
                    let h = host(r);
                    OverlayHostFigures {
                        host: r.label.clone(),
                        parent: r.parent.clone(),
                        rate_bps: host_rate_bps(sim, r.app, h.decoded_at(), (f.start, from, to)),
                        decoded_s: h.decoded_at().map(|d| (d - f.start).as_secs_f64()),
                        bytes_per_object_byte: h
                            .bytes_to_decode()
                            .map(|b| b as f64 / f.object_bytes as f64),
                        refused_symbols: h.refused_symbols(),
                        error: h.error().map(ToString::to_string),
                    }
                })
                .collect();
            OverlayFigures {
                object_bytes: f.object_bytes,
                source_copies: source.sent_bytes() as f64 / f.object_bytes as f64,
                hosts,
            }
        })
        .collect()
}

/// A host's rate from its parent's stream, bit/s: bytes read over
/// `[from, to]`, cut short where it decoded (it reads no more than its
/// children want after that); over `[start, decoded]` if it decoded
/// before `from`.
pub fn host_rate_bps(
    sim: &Simulator,
    app: AppId,
    decoded: Option<Instant>,
    (start, from, to): (Instant, Instant, Instant),
) -> f64 {
    let until = decoded.map_or(to, |d| d.min(to));
    let from = if until > from { from } else { start };
    crate::transfer::goodput_bps(sim, app, from, until)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    /// The scenario with an overlay flow over `hops` among a, b and c.
    fn build(hops: &str) -> Result<(), String> {
        let text = format!(
            "seed = 1\nduration = \"1s\"\n\
             [[node]]\nname = \"a\"\nip = \"10.0.0.1\"\n\
             [[node]]\nname = \"b\"\nip = \"10.0.0.2\"\n\
             [[node]]\nname = \"c\"\nip = \"10.0.0.3\"\n\
             [[link]]\nfrom = \"a\"\nto = \"b\"\nrate = \"1Gbit\"\ndelay = \"1ms\"\nduplex = true\n\
             [[link]]\nfrom = \"b\"\nto = \"c\"\nrate = \"1Gbit\"\ndelay = \"1ms\"\nduplex = true\n\
             [[flow]]\nkind = \"overlay\"\nsource = \"a:1\"\nobject = \"64KB\"\nhops = {hops}\n"
        );
        let sc = Scenario::from_toml(&text, "test").map_err(|e| e.to_string())?;
        sc.build(&mut [&mut OverlayFlows::default()])
            .map(drop)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn only_a_tree_rooted_at_the_source_is_accepted() {
        build(r#"[["a:1", "b:1"], ["b:1", "c:1"]]"#).unwrap();
        build(r#"[["a:1", "b:1"], ["a:1", "c:1"]]"#).unwrap();
        for (hops, says) in [
            (r#"[["a:1", "b:1"], ["c:1", "b:1"]]"#, "two parents"),
            (r#"[["b:1", "a:1"]]"#, "cannot be a child"),
            (r#"[["b:1", "c:1"], ["c:1", "b:1"]]"#, "cycle"),
            (r#"[["a:1", "b:1"], ["c:1", "c:2"]]"#, "not reached"),
        ] {
            let e = build(hops).unwrap_err();
            assert!(e.contains(says), "{hops}: {e}");
        }
    }

    #[test]
    fn a_segment_sets_the_largest_datagram_that_carries_it() {
        let c = TransportConfig::default();
        let m = max_datagram_for(&c, 1024).unwrap();
        let mut t = c.clone();
        t.max_datagram = m;
        assert_eq!(t.max_payload(), 1024);
        t.max_datagram = m - 1;
        assert!(t.max_payload() < 1024);
        assert!(max_datagram_for(&c, 1 << 20).is_err());
    }
}
