//! TOML scenario files: topology, groups and flows in human units, built
//! into a [`Simulator`] and run with metrics, plots and a summary.
//!
//! Flow kinds other than the built-in `cbr` are supplied by the caller
//! through [`FlowFactory`], so this crate needs no transport types.
//!
//! ```toml
//! seed = 7
//! duration = "5s"
//! sample_interval = "100ms"
//!
//! [[node]]
//! name = "src"
//! ip = "10.0.0.1"
//!
//! [[node]]
//! name = "dst"
//! ip = "10.0.0.2"
//! cpu = { per_packet = "10us", queue = 64 }
//!
//! [[link]]
//! from = "src"
//! to = "dst"
//! rate = "10Mbit"
//! delay = "25ms"
//! duplex = true
//! loss = { model = "bernoulli", p = 0.01 }
//! queue = { kind = "red", min_th = 5, max_th = 15, packets = 50 }
//! reorder = { p = 0.01, extra = "3ms" }   # 1% of packets arrive 3 ms late
//!
//! [[flow]]
//! kind = "cbr"
//! from = "src:5000"
//! to = "dst:6000"
//! rate = "5Mbit"
//! packet = 1000
//! ```

use crate::apps::{CbrSource, CountingSink};
use crate::link::LinkConfig;
use crate::loss::LossSpec;
use crate::multicast::TreeMode;
use crate::node::CpuModel;
use crate::queue::QueueConfig;
use crate::reorder::ReorderSpec;
use crate::sim::{SimConfig, Simulator};
use crate::trace::TraceLevel;
use crate::units::{Bytes, HumanDuration, Rate};
use crate::{LinkId, NodeId};
use fanout_core::Instant;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A scenario could not be loaded, built or run. Every variant names the
/// file; build errors name the field, run errors the seed.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// TOML syntax, unknown keys or bad units (the message carries the line
    /// and the key path).
    #[error("{file}: {message}")]
    Parse {
        /// Scenario file.
        file: String,
        /// What failed, where.
        message: String,
    },
    /// A semantically invalid entry.
    #[error("{file}: {field}: {message}")]
    Invalid {
        /// Scenario file.
        file: String,
        /// Key path such as `link[2].to`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The run itself failed.
    #[error("{file}: run failed with seed {seed}: {message}")]
    Run {
        /// Scenario file.
        file: String,
        /// The seed to reproduce with.
        seed: u64,
        /// What failed.
        message: String,
    },
}

/// Trace level in scenario files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceSpec {
    /// No trace, and no trace hash in the report.
    #[default]
    Off,
    /// Hash only.
    Hash,
    /// Hash and `trace.txt`.
    Full,
}

/// Routing mode in scenario files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoutingSpec {
    /// Shortest paths by delay, overridden by explicit `[[route]]`s.
    #[default]
    Auto,
    /// Only explicit `[[route]]`s.
    Static,
}

/// A whole scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Seed of every random stream.
    pub seed: u64,
    /// Virtual time to simulate.
    pub duration: HumanDuration,
    /// Metric sampling interval (default: 100 ms; `"0"` disables).
    #[serde(default)]
    pub sample_interval: Option<HumanDuration>,
    /// IP/UDP header bytes added to payloads (default 28).
    #[serde(default)]
    pub header_bytes: Option<u32>,
    /// Trace level (default off).
    #[serde(default)]
    pub trace: TraceSpec,
    /// Routing mode (default auto).
    #[serde(default)]
    pub routing: RoutingSpec,
    /// Nodes (`[[node]]`).
    #[serde(default, rename = "node")]
    pub nodes: Vec<NodeSpec>,
    /// Links (`[[link]]`).
    #[serde(default, rename = "link")]
    pub links: Vec<LinkSpec>,
    /// Explicit routes (`[[route]]`).
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteSpec>,
    /// Multicast groups (`[[group]]`).
    #[serde(default, rename = "group")]
    pub groups: Vec<GroupSpec>,
    /// Traffic (`[[flow]]`).
    #[serde(default, rename = "flow")]
    pub flows: Vec<FlowSpec>,
    /// Star topologies (`[[star]]`), expanded into nodes, links and groups
    /// when parsed.
    #[serde(default, rename = "star")]
    pub stars: Vec<crate::scenario_star::StarSpec>,
    /// Where the scenario came from (file name), for messages.
    #[serde(skip)]
    pub origin: String,
}

/// `[[node]]`: a host or router.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Unique name used by links, routes and endpoints.
    pub name: String,
    /// Unicast address.
    pub ip: IpAddr,
    /// Optional processing capacity for packets delivered to engines.
    #[serde(default)]
    pub cpu: Option<CpuSpec>,
}

/// `cpu = { per_packet = "10us", queue = 64 }` or `{ pps = 100000, queue = 64 }`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuSpec {
    /// CPU time per received packet.
    #[serde(default)]
    pub per_packet: Option<HumanDuration>,
    /// Packets per second (alternative to `per_packet`).
    #[serde(default)]
    pub pps: Option<u64>,
    /// Input queue limit in packets.
    pub queue: u32,
}

/// `[[link]]`: a directed link, or two with `duplex = true`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Sending node name.
    pub from: String,
    /// Receiving node name.
    pub to: String,
    /// Rate: `"10Mbit"` or bit/s.
    pub rate: Rate,
    /// Propagation delay: `"25ms"`.
    pub delay: HumanDuration,
    /// Also create `to → from` with the same parameters.
    #[serde(default)]
    pub duplex: bool,
    /// Loss model (default none).
    #[serde(default)]
    pub loss: LossSpec,
    /// Queue (default DropTail, 100 packets).
    #[serde(default)]
    pub queue: Option<QueueConfig>,
    /// Reordering: `{ p = 0.01, extra = "5ms" }` (default none).
    #[serde(default)]
    pub reorder: ReorderSpec,
}

/// `[[route]]`: on `node`, send `dest` (prefix or address) via neighbour `via`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    /// Node holding the route.
    pub node: String,
    /// Destination prefix, e.g. `"10.0.1.0/24"`.
    pub dest: String,
    /// Next-hop node (a link `node → via` must exist).
    pub via: String,
}

/// `[[group]]`: a multicast group, its members and optional explicit tree.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSpec {
    /// Group address (multicast).
    pub addr: IpAddr,
    /// Nodes joined at time zero.
    #[serde(default)]
    pub members: Vec<String>,
    /// Explicit tree: node name → next-hop node names (default: shortest
    /// path tree from each source).
    #[serde(default)]
    pub tree: Option<BTreeMap<String, Vec<String>>>,
    /// Timed joins and leaves.
    #[serde(default)]
    pub schedule: Vec<MembershipChange>,
}

/// `{ at = "2s", join = "rx3" }` or `{ at = "5s", leave = "rx1" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MembershipChange {
    /// When.
    pub at: HumanDuration,
    /// Node joining.
    #[serde(default)]
    pub join: Option<String>,
    /// Node leaving.
    #[serde(default)]
    pub leave: Option<String>,
}

/// `[[flow]]`: `kind` selects the factory; every other key is the kind's
/// own parameters, parsed (strictly) by that factory.
#[derive(Debug, Clone, Deserialize)]
pub struct FlowSpec {
    /// Flow kind, e.g. `"cbr"`.
    pub kind: String,
    /// The remaining keys.
    #[serde(flatten)]
    pub params: toml::Table,
}

impl FlowSpec {
    /// Parses the parameters into `T` (use `deny_unknown_fields` on `T`).
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, String> {
        T::deserialize(toml::Value::Table(self.params.clone()))
            .map_err(|e| e.to_string().trim().to_owned())
    }
}

/// Facts about the scenario a flow factory may need.
#[derive(Debug, Clone, Default)]
pub struct ScenarioContext {
    /// Simulated duration.
    pub duration: Duration,
    /// Every node that is ever a member of each group.
    pub group_receivers: BTreeMap<IpAddr, BTreeSet<NodeId>>,
}

impl ScenarioContext {
    /// A flow's receivers from its `group` or `to` key (exactly one):
    /// the group and the address of every node ever a member of it, or no
    /// group and the one receiver. Errors are messages about the keys.
    pub fn receivers_of(
        &self,
        sim: &Simulator,
        group: Option<&str>,
        to: Option<&str>,
    ) -> Result<(Option<SocketAddr>, Vec<SocketAddr>), String> {
        match (group, to) {
            (Some(g), None) => {
                let group: SocketAddr = g.parse().map_err(|e| format!("group: `{g}`: {e}"))?;
                if !group.ip().is_multicast() {
                    return Err(format!("group: {} is not a multicast address", group.ip()));
                }
                let addrs = self.member_addrs(sim, group);
                if addrs.is_empty() {
                    return Err(format!("group: no [[group]] {} with members", group.ip()));
                }
                Ok((Some(group), addrs))
            }
            (None, Some(to)) => Ok((None, vec![sim.resolve(to).map_err(|e| format!("to: {e}"))?])),
            _ => Err("give exactly one of `group` and `to`".into()),
        }
    }

    /// The address on `group`'s port of every node that is ever a member of
    /// `group`'s IP (empty if no such group).
    pub fn member_addrs(&self, sim: &Simulator, group: SocketAddr) -> Vec<SocketAddr> {
        self.group_receivers
            .get(&group.ip())
            .into_iter()
            .flatten()
            .map(|&n| SocketAddr::new(sim.node(n).ip(), group.port()))
            .collect()
    }
}

/// Builds flows of the kinds it knows. Transport crates implement this to
/// add their sessions to scenarios.
pub trait FlowFactory {
    /// Builds `spec` into `sim` and returns true, or returns false if
    /// `spec.kind` is not this factory's. Errors are messages about `spec`.
    fn build(
        &mut self,
        spec: &FlowSpec,
        sim: &mut Simulator,
        ctx: &ScenarioContext,
    ) -> Result<bool, String>;
}

/// The built-in flow kinds: `cbr` (a [`CbrSource`] plus a [`CountingSink`]
/// at the destination, or at every receiver of a group).
#[derive(Debug, Clone, Copy, Default)]
pub struct BuiltinFlows;

/// Parameters of a `kind = "cbr"` flow.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CbrFlowSpec {
    from: String,
    to: String,
    rate: Rate,
    #[serde(default)]
    packet: Option<Bytes>,
    #[serde(default)]
    start: Option<HumanDuration>,
    #[serde(default)]
    stop: Option<HumanDuration>,
}

impl FlowFactory for BuiltinFlows {
    fn build(
        &mut self,
        spec: &FlowSpec,
        sim: &mut Simulator,
        ctx: &ScenarioContext,
    ) -> Result<bool, String> {
        if spec.kind != "cbr" {
            return Ok(false);
        }
        let c: CbrFlowSpec = spec.parse()?;
        let from = sim.resolve(&c.from).map_err(|e| format!("from: {e}"))?;
        let to = sim.resolve(&c.to).map_err(|e| format!("to: {e}"))?;
        let start = Instant::ZERO + c.start.map_or(Duration::ZERO, |d| d.0);
        let stop = Instant::ZERO + c.stop.map_or(ctx.duration, |d| d.0);
        let packet = c.packet.map_or(1000, |b| b.0) as usize;
        let src = CbrSource::new(to, c.rate.0, packet, start, stop);
        sim.add_app(from, Box::new(src))
            .map_err(|e| format!("from: {e}"))?;
        let sinks: Vec<SocketAddr> = if to.ip().is_multicast() {
            ctx.member_addrs(sim, to)
        } else {
            vec![to]
        };
        for addr in sinks {
            let node = sim
                .node_by_ip(addr.ip())
                .ok_or_else(|| format!("to: no node has {}", addr.ip()))?;
            if sim.node(node).app_on_port(addr.port()).is_none() {
                sim.add_app(addr, Box::new(CountingSink::new()))
                    .map_err(|e| format!("to: {e}"))?;
            }
        }
        Ok(true)
    }
}

/// What a scenario run produced.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The seed used.
    pub seed: u64,
    /// Trace hash (FNV-1a 64); `None` if the scenario was not traced.
    pub trace_hash: Option<u64>,
    /// Events processed.
    pub events: u64,
    /// Human-readable per-link and per-node summary.
    pub summary: String,
}

impl Scenario {
    /// Parses scenario text; `origin` names it in messages.
    pub fn from_toml(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
        let mut s: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            file: origin.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        s.origin = origin.to_owned();
        for (i, star) in s.stars.clone().iter().enumerate() {
            star.expand(&mut s.nodes, &mut s.links, &mut s.groups)
                .map_err(|m| s.invalid(format!("star[{i}]"), m))?;
        }
        Ok(s)
    }

    /// Reads and parses a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text, &path.display().to_string())
    }

    fn invalid(&self, field: String, message: impl ToString) -> ScenarioError {
        ScenarioError::Invalid {
            file: self.origin.clone(),
            field,
            message: message.to_string(),
        }
    }

    /// The simulator settings this scenario asks for.
    pub fn sim_config(&self) -> SimConfig {
        let d = SimConfig::default();
        SimConfig {
            seed: self.seed,
            header_bytes: self.header_bytes.unwrap_or(d.header_bytes),
            trace: match self.trace {
                TraceSpec::Off => TraceLevel::Off,
                TraceSpec::Hash => TraceLevel::Hash,
                TraceSpec::Full => TraceLevel::Full,
            },
            sample_interval: match self.sample_interval {
                None => Some(Duration::from_millis(100)),
                Some(HumanDuration(d)) if d.is_zero() => None,
                Some(HumanDuration(d)) => Some(d),
            },
            ..d
        }
    }

    /// Builds the network and flows. Each flow goes to the first factory
    /// that knows its kind; [`BuiltinFlows`] is tried last.
    pub fn build(
        &self,
        factories: &mut [&mut dyn FlowFactory],
    ) -> Result<Simulator, ScenarioError> {
        let mut sim = Simulator::new(self.sim_config());
        sim.set_auto_routing(self.routing == RoutingSpec::Auto);
        for (i, n) in self.nodes.iter().enumerate() {
            let id = sim
                .add_node(&n.name, n.ip)
                .map_err(|e| self.invalid(format!("node[{i}]"), e))?;
            if let Some(c) = n.cpu {
                let cpu = match (c.per_packet, c.pps) {
                    (Some(d), None) => CpuModel {
                        per_packet: d.0,
                        queue_limit: c.queue,
                    },
                    (None, Some(pps)) if pps > 0 => CpuModel::packets_per_second(pps, c.queue),
                    _ => {
                        return Err(self.invalid(
                            format!("node[{i}].cpu"),
                            "give exactly one of `per_packet` and `pps` (> 0)",
                        ))
                    }
                };
                sim.set_cpu(id, Some(cpu)).expect("node just added");
            }
        }
        let node = |sim: &Simulator, field: String, name: &str| {
            sim.node_by_name(name)
                .ok_or_else(|| self.invalid(field, format!("no node named `{name}`")))
        };
        for (i, l) in self.links.iter().enumerate() {
            let from = node(&sim, format!("link[{i}].from"), &l.from)?;
            let to = node(&sim, format!("link[{i}].to"), &l.to)?;
            let cfg = LinkConfig {
                rate_bps: l.rate.0,
                delay: l.delay.0,
                loss: l.loss,
                queue: l.queue.unwrap_or_default(),
                reorder: l.reorder,
            };
            sim.add_link(from, to, cfg)
                .map_err(|e| self.invalid(format!("link[{i}]"), e))?;
            if l.duplex {
                sim.add_link(to, from, cfg)
                    .map_err(|e| self.invalid(format!("link[{i}]"), e))?;
            }
        }
        for (i, r) in self.routes.iter().enumerate() {
            let at = node(&sim, format!("route[{i}].node"), &r.node)?;
            let via = node(&sim, format!("route[{i}].via"), &r.via)?;
            let prefix = r
                .dest
                .parse()
                .map_err(|e| self.invalid(format!("route[{i}].dest"), e))?;
            let link = sim.link_between(at, via).ok_or_else(|| {
                self.invalid(
                    format!("route[{i}].via"),
                    format!("no link {} -> {}", r.node, r.via),
                )
            })?;
            sim.add_route(at, prefix, link)
                .map_err(|e| self.invalid(format!("route[{i}]"), e))?;
        }
        let mut ctx = ScenarioContext {
            duration: self.duration.0,
            group_receivers: BTreeMap::new(),
        };
        for (i, g) in self.groups.iter().enumerate() {
            if !g.addr.is_multicast() {
                return Err(self.invalid(
                    format!("group[{i}].addr"),
                    format!("{} is not multicast", g.addr),
                ));
            }
            let receivers = ctx.group_receivers.entry(g.addr).or_default();
            for (j, m) in g.members.iter().enumerate() {
                let n = node(&sim, format!("group[{i}].members[{j}]"), m)?;
                sim.join(g.addr, n).expect("validated");
                receivers.insert(n);
            }
            if let Some(tree) = &g.tree {
                let mut map: BTreeMap<NodeId, Vec<LinkId>> = BTreeMap::new();
                for (from, tos) in tree {
                    let field = format!("group[{i}].tree.{from}");
                    let f = node(&sim, field.clone(), from)?;
                    for to in tos {
                        let t = node(&sim, field.clone(), to)?;
                        let l = sim.link_between(f, t).ok_or_else(|| {
                            self.invalid(field.clone(), format!("no link {from} -> {to}"))
                        })?;
                        map.entry(f).or_default().push(l);
                    }
                }
                sim.set_group_tree(g.addr, TreeMode::Explicit(map))
                    .expect("validated");
            }
            for (j, c) in g.schedule.iter().enumerate() {
                let field = format!("group[{i}].schedule[{j}]");
                let at = Instant::ZERO + c.at.0;
                match (&c.join, &c.leave) {
                    (Some(n), None) => {
                        let n = node(&sim, field, n)?;
                        receivers.insert(n);
                        sim.join_at(at, g.addr, n).expect("validated");
                    }
                    (None, Some(n)) => {
                        let n = node(&sim, field, n)?;
                        sim.leave_at(at, g.addr, n).expect("validated");
                    }
                    _ => return Err(self.invalid(field, "give exactly one of `join` and `leave`")),
                }
            }
        }
        'flows: for (i, f) in self.flows.iter().enumerate() {
            let field = format!("flow[{i}] (kind \"{}\")", f.kind);
            for factory in factories.iter_mut() {
                if factory
                    .build(f, &mut sim, &ctx)
                    .map_err(|e| self.invalid(field.clone(), e))?
                {
                    continue 'flows;
                }
            }
            if !BuiltinFlows
                .build(f, &mut sim, &ctx)
                .map_err(|e| self.invalid(field.clone(), e))?
            {
                return Err(self.invalid(field, format!("unknown flow kind `{}`", f.kind)));
            }
        }
        Ok(sim)
    }

    /// Builds, runs for `duration`, and (if `out_dir` is given) writes
    /// `links.csv`, `apps.csv`, SVG plots, `summary.txt` and, with
    /// `trace = "full"`, `trace.txt`. A failure prints the seed.
    pub fn run(
        &self,
        out_dir: Option<&Path>,
        factories: &mut [&mut dyn FlowFactory],
    ) -> Result<(Simulator, RunReport), ScenarioError> {
        let mut sim = self.build(factories)?;
        let end = Instant::ZERO + self.duration.0;
        let res = panic::catch_unwind(AssertUnwindSafe(|| sim.run_until(end)));
        if let Err(p) = res {
            let message = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panic".to_owned());
            eprintln!("{}: run failed with seed {}", self.origin, self.seed);
            return Err(ScenarioError::Run {
                file: self.origin.clone(),
                seed: self.seed,
                message,
            });
        }
        let report = RunReport {
            seed: self.seed,
            trace_hash: sim.trace().recorded_hash(),
            events: sim.events_processed(),
            summary: summary(&sim),
        };
        if let Some(dir) = out_dir {
            let io = |source| ScenarioError::Io {
                path: dir.to_owned(),
                source,
            };
            sim.metrics().write_csv(dir).map_err(io)?;
            crate::plot::write_all(sim.metrics(), dir).map_err(io)?;
            std::fs::write(dir.join("summary.txt"), &report.summary).map_err(io)?;
            if self.trace == TraceSpec::Full {
                std::fs::write(dir.join("trace.txt"), sim.trace().text()).map_err(io)?;
            }
        }
        Ok((sim, report))
    }
}

/// A text summary: the run (with its trace hash if traced), per-link
/// packets, bytes and drops by reason; per-node deliveries and drops.
pub fn summary(sim: &Simulator) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "seed {} t={} events {}",
        sim.seed(),
        sim.now(),
        sim.events_processed()
    );
    if let Some(h) = sim.trace().recorded_hash() {
        let _ = write!(s, " trace_hash {h:016x}");
    }
    s.push('\n');
    for l in sim.links() {
        let st = l.stats();
        let _ = writeln!(
            s,
            "link {} {}->{} tx_packets {} tx_bytes {} delivered {} drops {}",
            l.id(),
            sim.node(l.from()).name(),
            sim.node(l.to()).name(),
            st.tx_packets,
            st.tx_bytes,
            st.delivered_packets,
            st.drops
        );
    }
    for n in sim.nodes() {
        let st = n.stats();
        let _ = writeln!(
            s,
            "node {} {} delivered {} ({} B) forwarded {} cpu_peak {} drops {}",
            n.id(),
            n.name(),
            st.delivered_packets,
            st.delivered_bytes,
            st.forwarded_packets,
            st.cpu_queue_peak,
            st.drops
        );
    }
    s
}
