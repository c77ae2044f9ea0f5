//! The simulator: topology, event loop, forwarding and engine driving.
//!
//! Engines are pumped with [`fanout_core::drain`], exactly as the real
//! runtime does: after every datagram delivery, timer expiry or wake-up the
//! simulator calls `drain`, routes what it emitted and files the engine's
//! next deadline in the event queue (stale timer events are skipped).

use crate::app::SimApp;
use crate::event::{EventQueue, Lane};
use crate::ids::{AppId, GroupId, LinkId, NodeId};
use crate::link::{Link, LinkConfig, Offer};
use crate::metrics::Metrics;
use crate::multicast::{Group, TreeMode};
use crate::node::{CpuModel, Node};
use crate::packet::{Datagram, Dest, Packet};
use crate::stats::NetDrop;
use crate::topology::routing::{self, next_hops_toward};
use crate::topology::{Prefix, StaticRoute};
use crate::trace::{Trace, TraceLevel};
use fanout_core::time::duration_nanos;
use fanout_core::{drain, Instant, Rng};
use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;
use std::time::Duration;

/// Global simulator settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimConfig {
    /// Seed of every random stream (links fork theirs from it).
    pub seed: u64,
    /// Bytes added to every payload on the wire (IPv4 20 + UDP 8 = 28).
    pub header_bytes: u32,
    /// Datagrams taken from an engine per `drain` call; if exhausted the
    /// engine is drained again at the same instant.
    pub drain_budget: usize,
    /// Initial hop limit of every packet.
    pub ttl: u8,
    /// Event trace level.
    pub trace: TraceLevel,
    /// Metric sampling interval (None: no time series).
    pub sample_interval: Option<Duration>,
}

impl SimConfig {
    /// Defaults with the given seed.
    pub fn with_seed(seed: u64) -> Self {
        SimConfig {
            seed,
            ..SimConfig::default()
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 0,
            header_bytes: 28,
            drain_budget: 64,
            ttl: 64,
            trace: TraceLevel::Off,
            sample_interval: None,
        }
    }
}

/// Misuse of the simulator's building API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// Two nodes with the same name.
    #[error("duplicate node name `{0}`")]
    DuplicateName(String),
    /// Two nodes with the same IP address, or a multicast address.
    #[error("IP address {0} is already used or is not a unicast address")]
    BadNodeIp(IpAddr),
    /// No node has this IP address.
    #[error("no node has IP address {0}")]
    UnknownIp(IpAddr),
    /// No node has this name.
    #[error("no node named `{0}`")]
    UnknownNode(String),
    /// The (node, port) already has an engine.
    #[error("{0} already has an engine bound")]
    PortInUse(SocketAddr),
    /// A link that does not start at the node holding the route.
    #[error("link {link} does not start at node {node}")]
    LinkNotFromNode {
        /// The route's node.
        node: NodeId,
        /// The offending link.
        link: LinkId,
    },
    /// Not a multicast address.
    #[error("{0} is not a multicast address")]
    NotMulticast(IpAddr),
    /// Bad endpoint syntax.
    #[error("`{0}`: expected `node:port` or `ip:port`")]
    BadEndpoint(String),
    /// A parameter out of range.
    #[error("{0}")]
    Invalid(String),
}

/// A scheduled occurrence. Arriving packets travel inside their event, so
/// the packets propagating on all links form one sequential stream in the
/// event lane of their delay.
#[derive(Debug)]
enum Event {
    TxDone(LinkId),
    Arrive(LinkId, Packet),
    CpuDone(NodeId),
    Loopback,
    Timer(AppId, Instant),
    Wake(AppId),
    Sample,
    Call(usize),
}

struct AppSlot {
    engine: Box<dyn SimApp>,
    addr: SocketAddr,
    node: NodeId,
    /// The deadline for which a timer event is pending (lazy invalidation).
    timer: Option<Instant>,
    wake_pending: bool,
    /// Consecutive pumps at one instant, to catch engines that spin.
    spins: u32,
    spin_at: Instant,
}

/// Pumps of one engine at a single instant beyond which the run is declared
/// stuck (an engine whose deadline never advances).
const MAX_SPINS_PER_INSTANT: u32 = 1_000_000;

type Call = Box<dyn FnOnce(&mut Simulator)>;

/// A deterministic discrete-event network simulator.
pub struct Simulator {
    cfg: SimConfig,
    now: Instant,
    events: EventQueue<Event>,
    rng: Rng,
    nodes: Vec<Node>,
    links: Vec<Link>,
    /// Per link: the event lane of its arrivals (its propagation delay).
    arrive_lanes: Vec<Lane>,
    outgoing: Vec<Vec<LinkId>>,
    incoming: Vec<Vec<LinkId>>,
    by_ip: BTreeMap<IpAddr, NodeId>,
    by_name: BTreeMap<String, NodeId>,
    /// Per destination node: next hop at every node (computed on first use).
    auto_routes: Vec<Option<Vec<Option<LinkId>>>>,
    auto_routing: bool,
    groups: Vec<Group>,
    group_by_ip: BTreeMap<IpAddr, GroupId>,
    apps: Vec<AppSlot>,
    loopback: VecDeque<(NodeId, Packet)>,
    calls: Vec<Option<Call>>,
    trace: Trace,
    metrics: Metrics,
    buf: Vec<u8>,
    outbox: Vec<(SocketAddr, Rc<[u8]>)>,
    scratch_links: Vec<LinkId>,
    next_uid: u64,
    events_processed: u64,
    sampling_started: bool,
}

impl std::fmt::Debug for Simulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulator")
            .field("seed", &self.cfg.seed)
            .field("now", &self.now)
            .field("nodes", &self.nodes.len())
            .field("links", &self.links.len())
            .field("apps", &self.apps.len())
            .field("pending_events", &self.events.len())
            .finish_non_exhaustive()
    }
}

macro_rules! trace {
    ($sim:expr, $($arg:tt)*) => {
        if $sim.trace.enabled() {
            $sim.trace.record(format_args!($($arg)*));
        }
    };
}

impl Simulator {
    /// An empty network at time zero.
    pub fn new(cfg: SimConfig) -> Self {
        Simulator {
            cfg,
            now: Instant::ZERO,
            events: EventQueue::new(),
            rng: Rng::new(cfg.seed),
            nodes: Vec::new(),
            links: Vec::new(),
            arrive_lanes: Vec::new(),
            outgoing: Vec::new(),
            incoming: Vec::new(),
            by_ip: BTreeMap::new(),
            by_name: BTreeMap::new(),
            auto_routes: Vec::new(),
            auto_routing: true,
            groups: Vec::new(),
            group_by_ip: BTreeMap::new(),
            apps: Vec::new(),
            loopback: VecDeque::new(),
            calls: Vec::new(),
            trace: Trace::new(cfg.trace),
            metrics: Metrics::new(cfg.sample_interval),
            buf: Vec::with_capacity(65_536),
            outbox: Vec::new(),
            scratch_links: Vec::new(),
            next_uid: 0,
            events_processed: 0,
            sampling_started: false,
        }
    }

    // ----- building -------------------------------------------------------

    /// Adds a node named `name` with unicast address `ip`.
    pub fn add_node(&mut self, name: &str, ip: IpAddr) -> Result<NodeId, SimError> {
        if self.by_name.contains_key(name) {
            return Err(SimError::DuplicateName(name.to_owned()));
        }
        if ip.is_multicast() || self.by_ip.contains_key(&ip) {
            return Err(SimError::BadNodeIp(ip));
        }
        let id = NodeId::from_index(self.nodes.len());
        self.nodes.push(Node::new(id, name.to_owned(), ip));
        self.outgoing.push(Vec::new());
        self.incoming.push(Vec::new());
        self.auto_routes.push(None);
        self.by_ip.insert(ip, id);
        self.by_name.insert(name.to_owned(), id);
        self.invalidate_routes();
        Ok(id)
    }

    /// Adds a directed link `from → to`. Its random stream is forked from
    /// the simulator's, so adding links in the same order gives the same
    /// streams.
    pub fn add_link(
        &mut self,
        from: NodeId,
        to: NodeId,
        config: LinkConfig,
    ) -> Result<LinkId, SimError> {
        if config.rate_bps == 0 {
            return Err(SimError::Invalid("link rate must be positive".into()));
        }
        config.loss.validate().map_err(SimError::Invalid)?;
        config.queue.validate().map_err(SimError::Invalid)?;
        config
            .reorder
            .validate()
            .map_err(|e| SimError::Invalid(format!("reorder: {e}")))?;
        self.check_node(from)?;
        self.check_node(to)?;
        let id = LinkId::from_index(self.links.len());
        let rng = self.rng.fork();
        self.links.push(Link::new(id, from, to, config, rng));
        let lane = self.events.lane(duration_nanos(config.delay));
        self.arrive_lanes.push(lane);
        self.outgoing[from.index()].push(id);
        self.incoming[to.index()].push(id);
        let label = format!(
            "{}->{}",
            self.nodes[from.index()].name,
            self.nodes[to.index()].name
        );
        self.metrics.add_link(label);
        self.invalidate_routes();
        Ok(id)
    }

    /// Adds links `a → b` and `b → a` with the same configuration.
    pub fn add_duplex(
        &mut self,
        a: NodeId,
        b: NodeId,
        config: LinkConfig,
    ) -> Result<(LinkId, LinkId), SimError> {
        Ok((self.add_link(a, b, config)?, self.add_link(b, a, config)?))
    }

    /// Adds an explicit route on `node`: destinations in `prefix` leave on
    /// `link`. Explicit routes (longest prefix) take precedence over
    /// automatic ones.
    pub fn add_route(
        &mut self,
        node: NodeId,
        prefix: Prefix,
        link: LinkId,
    ) -> Result<(), SimError> {
        self.check_node(node)?;
        if self.links.get(link.index()).map(Link::from) != Some(node) {
            return Err(SimError::LinkNotFromNode { node, link });
        }
        self.nodes[node.index()]
            .routes
            .push(StaticRoute { prefix, link });
        Ok(())
    }

    /// Enables (default) or disables automatic shortest-path routes (by
    /// propagation delay, then hop count). Without them only explicit
    /// routes forward unicast packets.
    pub fn set_auto_routing(&mut self, on: bool) {
        self.auto_routing = on;
    }

    /// Sets or clears the processing-capacity model of `node`.
    pub fn set_cpu(&mut self, node: NodeId, cpu: Option<CpuModel>) -> Result<(), SimError> {
        self.check_node(node)?;
        self.nodes[node.index()].cpu = cpu;
        Ok(())
    }

    /// Binds `engine` at `addr` (the node owning `addr.ip()`, port
    /// `addr.port()`). It is first drained at the current instant.
    pub fn add_app(
        &mut self,
        addr: SocketAddr,
        engine: Box<dyn SimApp>,
    ) -> Result<AppId, SimError> {
        let node = *self
            .by_ip
            .get(&addr.ip())
            .ok_or(SimError::UnknownIp(addr.ip()))?;
        let n = &mut self.nodes[node.index()];
        if n.bound.contains_key(&addr.port()) {
            return Err(SimError::PortInUse(addr));
        }
        let id = AppId::from_index(self.apps.len());
        n.bound.insert(addr.port(), id);
        self.metrics.add_app(format!("{}:{}", n.name, addr.port()));
        self.apps.push(AppSlot {
            engine,
            addr,
            node,
            timer: None,
            wake_pending: true,
            spins: 0,
            spin_at: Instant::ZERO,
        });
        self.events.schedule(self.now, Event::Wake(id));
        Ok(id)
    }

    /// Sets how the tree of `group` is built (default: shortest path).
    pub fn set_group_tree(&mut self, group: IpAddr, mode: TreeMode) -> Result<GroupId, SimError> {
        let g = self.group_id(group)?;
        if let TreeMode::Explicit(map) = &mode {
            for (&node, links) in map {
                self.check_node(node)?;
                for &l in links {
                    if self.links.get(l.index()).map(Link::from) != Some(node) {
                        return Err(SimError::LinkNotFromNode { node, link: l });
                    }
                }
            }
        }
        self.groups[g.index()].set_mode(mode);
        Ok(g)
    }

    /// `node` joins `group` now (counted: several joins need as many leaves).
    pub fn join(&mut self, group: IpAddr, node: NodeId) -> Result<GroupId, SimError> {
        self.check_node(node)?;
        let g = self.group_id(group)?;
        if self.groups[g.index()].join(node) {
            trace!(self, "{} join {} {}", self.now.as_nanos(), node, group);
        }
        Ok(g)
    }

    /// `node` leaves `group` now.
    pub fn leave(&mut self, group: IpAddr, node: NodeId) -> Result<(), SimError> {
        self.check_node(node)?;
        let g = self.group_id(group)?;
        if self.groups[g.index()].leave(node) {
            trace!(self, "{} leave {} {}", self.now.as_nanos(), node, group);
        }
        Ok(())
    }

    /// Schedules `f` to run on the simulator at `at` (for joins, leaves,
    /// starting flows or changing the network mid-run).
    pub fn schedule_call(&mut self, at: Instant, f: impl FnOnce(&mut Simulator) + 'static) {
        let idx = self.calls.len();
        self.calls.push(Some(Box::new(f)));
        self.events.schedule(at.max(self.now), Event::Call(idx));
    }

    /// Schedules a join of `node` to `group` at `at`.
    pub fn join_at(&mut self, at: Instant, group: IpAddr, node: NodeId) -> Result<(), SimError> {
        self.check_node(node)?;
        self.group_id(group)?;
        self.schedule_call(at, move |sim| {
            sim.join(group, node).expect("validated when scheduled");
        });
        Ok(())
    }

    /// Schedules a leave of `node` from `group` at `at`.
    pub fn leave_at(&mut self, at: Instant, group: IpAddr, node: NodeId) -> Result<(), SimError> {
        self.check_node(node)?;
        self.group_id(group)?;
        self.schedule_call(at, move |sim| {
            sim.leave(group, node).expect("validated when scheduled");
        });
        Ok(())
    }

    // ----- queries ---------------------------------------------------------

    /// The seed of this run (print it with every failure).
    pub fn seed(&self) -> u64 {
        self.cfg.seed
    }

    /// Settings.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// Current virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Events processed so far.
    pub fn events_processed(&self) -> u64 {
        self.events_processed
    }

    /// All nodes, indexed by [`NodeId`].
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// One node.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    /// Node by name.
    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    /// Node by IP address.
    pub fn node_by_ip(&self, ip: IpAddr) -> Option<NodeId> {
        self.by_ip.get(&ip).copied()
    }

    /// All links, indexed by [`LinkId`].
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// One link.
    pub fn link(&self, id: LinkId) -> &Link {
        &self.links[id.index()]
    }

    /// The first link `from → to`, if any.
    pub fn link_between(&self, from: NodeId, to: NodeId) -> Option<LinkId> {
        self.outgoing
            .get(from.index())?
            .iter()
            .copied()
            .find(|l| self.links[l.index()].to() == to)
    }

    /// Links leaving `node`.
    pub fn outgoing(&self, node: NodeId) -> &[LinkId] {
        &self.outgoing[node.index()]
    }

    /// The group with address `ip`, if it was ever used.
    pub fn group(&self, ip: IpAddr) -> Option<&Group> {
        self.group_by_ip.get(&ip).map(|g| &self.groups[g.index()])
    }

    /// Address an app is bound to.
    pub fn app_addr(&self, id: AppId) -> SocketAddr {
        self.apps[id.index()].addr
    }

    /// Number of apps.
    pub fn app_count(&self) -> usize {
        self.apps.len()
    }

    /// The node hosting app `id`.
    pub fn app_node(&self, id: AppId) -> NodeId {
        self.apps[id.index()].node
    }

    /// The app `id` as its concrete type `T`, if it is one.
    pub fn app<T: SimApp>(&self, id: AppId) -> Option<&T> {
        self.apps.get(id.index())?.engine.as_any().downcast_ref()
    }

    /// The app `id` as its concrete type `T`, mutably. After changing it
    /// call [`Simulator::wake`] so new output and deadlines are seen.
    pub fn app_mut<T: SimApp>(&mut self, id: AppId) -> Option<&mut T> {
        self.apps
            .get_mut(id.index())?
            .engine
            .as_any_mut()
            .downcast_mut()
    }

    /// Drains app `id` again at the current instant.
    pub fn wake(&mut self, id: AppId) {
        let slot = &mut self.apps[id.index()];
        if !slot.wake_pending {
            slot.wake_pending = true;
            self.events.schedule(self.now, Event::Wake(id));
        }
    }

    /// The event trace.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// Time series sampled so far.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Mutable metrics (e.g. to disable series of uninteresting links).
    pub fn metrics_mut(&mut self) -> &mut Metrics {
        &mut self.metrics
    }

    /// Parses `name:port`, `ip:port` or `[v6]:port` into a socket address;
    /// names must be nodes, IPs may be unicast nodes or multicast groups.
    pub fn resolve(&self, endpoint: &str) -> Result<SocketAddr, SimError> {
        if let Ok(a) = endpoint.parse::<SocketAddr>() {
            return Ok(a);
        }
        let (name, port) = endpoint
            .rsplit_once(':')
            .ok_or_else(|| SimError::BadEndpoint(endpoint.to_owned()))?;
        let port: u16 = port
            .parse()
            .map_err(|_| SimError::BadEndpoint(endpoint.to_owned()))?;
        let node = self
            .node_by_name(name)
            .ok_or_else(|| SimError::UnknownNode(name.to_owned()))?;
        Ok(SocketAddr::new(self.nodes[node.index()].ip, port))
    }

    // ----- running ---------------------------------------------------------

    /// Processes every event up to and including `end`, then sets the clock
    /// to `end`. A panic inside (an engine's or the simulator's) first
    /// prints the seed and the virtual time.
    pub fn run_until(&mut self, end: Instant) {
        if !self.sampling_started {
            self.sampling_started = true;
            if let Some(iv) = self.cfg.sample_interval {
                self.metrics.finish_sample(self.now);
                self.events.schedule(self.now + iv, Event::Sample);
            }
        }
        let result = panic::catch_unwind(AssertUnwindSafe(|| self.run_inner(end)));
        if let Err(payload) = result {
            eprintln!(
                "fanout-sim: run failed at t={} with seed {} (rerun with this seed to reproduce)",
                self.now, self.cfg.seed
            );
            panic::resume_unwind(payload);
        }
    }

    /// Runs for `d` of virtual time from now.
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(self.now + d);
    }

    fn run_inner(&mut self, end: Instant) {
        while let Some(t) = self.events.peek_time() {
            if t > end {
                break;
            }
            let (t, ev) = self.events.pop().expect("peeked");
            assert!(t >= self.now, "seed {}: time went backwards", self.cfg.seed);
            self.now = t;
            self.events_processed += 1;
            self.dispatch(ev);
        }
        if end > self.now && end != Instant::MAX {
            self.now = end;
        }
    }

    fn dispatch(&mut self, ev: Event) {
        match ev {
            Event::TxDone(l) => self.on_tx_done(l),
            Event::Arrive(l, p) => self.on_arrive(l, p),
            Event::CpuDone(n) => self.on_cpu_done(n),
            Event::Loopback => {
                let (node, p) = self
                    .loopback
                    .pop_front()
                    .expect("loopback event without packet");
                self.deliver_local(node, p);
            }
            Event::Timer(app, at) => {
                let slot = &mut self.apps[app.index()];
                if slot.timer == Some(at) {
                    slot.timer = None;
                    self.pump(app);
                }
            }
            Event::Wake(app) => {
                self.apps[app.index()].wake_pending = false;
                self.pump(app);
            }
            Event::Sample => self.on_sample(),
            Event::Call(i) => {
                if let Some(f) = self.calls[i].take() {
                    f(self);
                }
            }
        }
    }

    fn on_sample(&mut self) {
        let now = self.now;
        self.metrics.sample_links(now, &self.links);
        for (i, slot) in self.apps.iter().enumerate() {
            if self.metrics.apps[i].enabled {
                self.metrics.sample_app(i, now, slot.engine.probe());
            }
        }
        self.metrics.finish_sample(now);
        if let Some(iv) = self.cfg.sample_interval {
            self.events.schedule(now + iv, Event::Sample);
        }
    }

    // ----- engines ---------------------------------------------------------

    /// Drains app `id` with [`fanout_core::drain`] and routes its output.
    fn pump(&mut self, id: AppId) {
        let now = self.now;
        let budget = self.cfg.drain_budget;
        let seed = self.cfg.seed;
        let slot = &mut self.apps[id.index()];
        if slot.spin_at == now {
            slot.spins += 1;
            assert!(
                slot.spins < MAX_SPINS_PER_INSTANT,
                "seed {seed}: engine at {} pumped {MAX_SPINS_PER_INSTANT} times at t={now} (deadline never advances?)",
                slot.addr
            );
        } else {
            slot.spin_at = now;
            slot.spins = 0;
        }
        let mut outbox = std::mem::take(&mut self.outbox);
        let deadline = drain(
            slot.engine.as_mut(),
            now,
            &mut self.buf,
            budget,
            |t, bytes| {
                outbox.push((t.destination, Rc::from(bytes)));
            },
        );
        let emitted = outbox.len();
        match deadline {
            Some(t) if slot.timer != Some(t) => {
                slot.timer = Some(t);
                self.events.schedule(t.max(now), Event::Timer(id, t));
            }
            Some(_) => {}
            None => slot.timer = None,
        }
        if emitted >= budget && !slot.wake_pending {
            slot.wake_pending = true;
            self.events.schedule(now, Event::Wake(id));
        }
        let (src, node) = (slot.addr, slot.node);
        for (dst, payload) in outbox.drain(..) {
            self.emit(node, src, dst, payload);
        }
        self.outbox = outbox;
    }

    fn emit(&mut self, node: NodeId, src: SocketAddr, dst: SocketAddr, payload: Rc<[u8]>) {
        let uid = self.next_uid;
        self.next_uid += 1;
        let wire_bytes = u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .saturating_add(self.cfg.header_bytes);
        trace!(
            self,
            "{} send {} #{} {}->{} {}B",
            self.now.as_nanos(),
            node,
            uid,
            src,
            dst,
            wire_bytes
        );
        let dest = if dst.ip().is_multicast() {
            match self.group_id(dst.ip()) {
                Ok(g) => Dest::Group(g),
                Err(_) => unreachable!("multicast checked"),
            }
        } else {
            match self.by_ip.get(&dst.ip()) {
                Some(&n) => Dest::Unicast(n),
                None => {
                    self.count_node_drop(node, uid, NetDrop::NoRoute);
                    return;
                }
            }
        };
        let packet = Packet {
            datagram: Rc::new(Datagram {
                uid,
                src,
                dst,
                src_node: node,
                dest,
                payload,
                wire_bytes,
            }),
            ttl: self.cfg.ttl,
        };
        self.forward(node, packet, false);
    }

    fn deliver_to_app(&mut self, node: NodeId, id: AppId, p: Packet) {
        let n = &mut self.nodes[node.index()];
        n.stats.delivered_packets += 1;
        n.stats.delivered_bytes += p.payload.len() as u64;
        trace!(
            self,
            "{} rx {} #{} {}",
            self.now.as_nanos(),
            id,
            p.uid,
            self.apps[id.index()].addr
        );
        self.apps[id.index()]
            .engine
            .handle_datagram(self.now, p.src, &p.payload);
        self.pump(id);
    }

    // ----- forwarding ------------------------------------------------------

    /// `p` is at `node`: deliver it locally and/or send it on. `via_link` is
    /// false when it was just emitted here (local delivery is then deferred
    /// through the loopback queue to keep engine calls non-reentrant).
    fn forward(&mut self, node: NodeId, p: Packet, via_link: bool) {
        match p.dest {
            Dest::Unicast(d) if d == node => {
                if via_link {
                    self.deliver_local(node, p);
                } else {
                    self.loopback.push_back((node, p));
                    self.events.schedule(self.now, Event::Loopback);
                }
            }
            Dest::Unicast(d) => match self.route(node, d, p.dst.ip()) {
                Some(l) => {
                    if via_link {
                        self.nodes[node.index()].stats.forwarded_packets += 1;
                    }
                    self.offer(l, p);
                }
                None => self.count_node_drop(node, p.uid, NetDrop::NoRoute),
            },
            Dest::Group(g) => {
                let tree = self.groups[g.index()].tree(p.src_node, &self.links, &self.outgoing);
                let deliver = tree.delivers_at(node)
                    && self.nodes[node.index()]
                        .app_on_port(p.dst.port())
                        .is_none_or(|a| self.apps[a.index()].addr != p.src);
                let mut out = std::mem::take(&mut self.scratch_links);
                out.clear();
                out.extend_from_slice(tree.out_links(node));
                if via_link && !out.is_empty() {
                    self.nodes[node.index()].stats.forwarded_packets += 1;
                }
                // Duplicate at the branch point; copies share the payload.
                let mut p = Some(p);
                for (i, &l) in out.iter().enumerate() {
                    let copy = if i + 1 == out.len() && !deliver {
                        p.take().expect("packet kept for the last copy")
                    } else {
                        p.clone().expect("packet kept for copies")
                    };
                    self.offer(l, copy);
                }
                self.scratch_links = out;
                if let (true, Some(p)) = (deliver, p) {
                    if via_link {
                        self.deliver_local(node, p);
                    } else {
                        self.loopback.push_back((node, p));
                        self.events.schedule(self.now, Event::Loopback);
                    }
                }
            }
        }
    }

    fn route(&mut self, node: NodeId, dest: NodeId, ip: IpAddr) -> Option<LinkId> {
        let n = &self.nodes[node.index()];
        if !n.routes.is_empty() {
            if let Some(l) = routing::lookup(&n.routes, ip) {
                return Some(l);
            }
        }
        if !self.auto_routing {
            return None;
        }
        let (links, incoming) = (&self.links, &self.incoming);
        self.auto_routes[dest.index()]
            .get_or_insert_with(|| next_hops_toward(dest, links, incoming))[node.index()]
    }

    fn offer(&mut self, l: LinkId, p: Packet) {
        let (uid, bytes) = (p.uid, p.wire_bytes);
        match self.links[l.index()].offer(p, self.now) {
            Offer::Started(done) => self.schedule_at_offset(done, Event::TxDone(l)),
            Offer::Queued => {}
            Offer::Dropped(reason) => {
                trace!(
                    self,
                    "{} drop {} #{} {}B {}",
                    self.now.as_nanos(),
                    l,
                    uid,
                    bytes,
                    reason
                );
            }
        }
    }

    fn on_tx_done(&mut self, l: LinkId) {
        let r = self.links[l.index()].finish_tx(self.now);
        match r.arrival {
            Some(at) if at == self.now + self.links[l.index()].config().delay => {
                let lane = self.arrive_lanes[l.index()];
                self.events
                    .schedule_in(lane, at, Event::Arrive(l, r.packet));
            }
            // Held back by the link's reordering: a lane of its own offset.
            Some(at) => self.schedule_at_offset(at, Event::Arrive(l, r.packet)),
            None => {
                trace!(
                    self,
                    "{} drop {} #{} {}B {}",
                    self.now.as_nanos(),
                    l,
                    r.packet.uid,
                    r.wire_bytes,
                    NetDrop::RandomLoss
                );
            }
        }
        if let Some(done) = r.next_done {
            self.schedule_at_offset(done, Event::TxDone(l));
        }
    }

    fn on_arrive(&mut self, l: LinkId, mut p: Packet) {
        self.links[l.index()].arrived();
        let node = self.links[l.index()].to();
        trace!(
            self,
            "{} arrive {} {} #{}",
            self.now.as_nanos(),
            l,
            node,
            p.uid
        );
        if p.ttl == 0 {
            self.count_node_drop(node, p.uid, NetDrop::TtlExpired);
            return;
        }
        p.ttl -= 1;
        self.forward(node, p, true);
    }

    /// Hands `p` to the engine on its destination port at `node`, through
    /// the node's CPU queue if it has a capacity model.
    fn deliver_local(&mut self, node: NodeId, p: Packet) {
        let n = &mut self.nodes[node.index()];
        let Some(app) = n.app_on_port(p.dst.port()) else {
            self.count_node_drop(node, p.uid, NetDrop::NoListener);
            return;
        };
        let Some(cpu) = n.cpu else {
            self.deliver_to_app(node, app, p);
            return;
        };
        if n.cpu_busy {
            let waiting = n.cpu_queue.len() - 1;
            if waiting >= cpu.queue_limit as usize {
                self.count_node_drop(node, p.uid, NetDrop::CpuOverflow);
                return;
            }
            n.cpu_queue.push_back((app, p));
            n.stats.cpu_queue_peak = n.stats.cpu_queue_peak.max(waiting as u32 + 1);
        } else {
            n.cpu_busy = true;
            n.cpu_queue.push_back((app, p));
            self.events
                .schedule(self.now + cpu.per_packet, Event::CpuDone(node));
        }
    }

    fn on_cpu_done(&mut self, node: NodeId) {
        let n = &mut self.nodes[node.index()];
        let (app, p) = n.cpu_queue.pop_front().expect("CPU done without a packet");
        match (n.cpu_queue.is_empty(), n.cpu) {
            (false, Some(cpu)) => self
                .events
                .schedule(self.now + cpu.per_packet, Event::CpuDone(node)),
            _ => n.cpu_busy = false,
        }
        self.deliver_to_app(node, app, p);
    }

    /// Schedules `ev` at `at` (not before now) in the lane of its offset
    /// from now: same order as a plain `schedule`, cheaper to pop.
    fn schedule_at_offset(&mut self, at: Instant, ev: Event) {
        let lane = self
            .events
            .lane(at.as_nanos().saturating_sub(self.now.as_nanos()));
        self.events.schedule_in(lane, at, ev);
    }

    fn count_node_drop(&mut self, node: NodeId, uid: u64, reason: NetDrop) {
        self.nodes[node.index()].stats.drops[reason] += 1;
        trace!(
            self,
            "{} drop {} #{} {}",
            self.now.as_nanos(),
            node,
            uid,
            reason
        );
    }

    // ----- helpers ---------------------------------------------------------

    fn check_node(&self, node: NodeId) -> Result<(), SimError> {
        if node.index() < self.nodes.len() {
            Ok(())
        } else {
            Err(SimError::UnknownNode(node.to_string()))
        }
    }

    fn group_id(&mut self, ip: IpAddr) -> Result<GroupId, SimError> {
        if !ip.is_multicast() {
            return Err(SimError::NotMulticast(ip));
        }
        if let Some(&g) = self.group_by_ip.get(&ip) {
            return Ok(g);
        }
        let g = GroupId::from_index(self.groups.len());
        self.groups.push(Group::new(ip));
        self.group_by_ip.insert(ip, g);
        Ok(g)
    }

    fn invalidate_routes(&mut self) {
        for r in &mut self.auto_routes {
            *r = None;
        }
        for g in &mut self.groups {
            g.invalidate();
        }
    }
}
