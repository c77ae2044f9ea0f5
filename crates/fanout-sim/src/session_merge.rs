//! MCTCP ACK mergers in session flows (`docs/mctcp.md`, MCTCP §IV–§V): nodes on
//! the data path that merge the feedback of the members below them into one
//! flow toward the sender.
//!
//! ```toml
//! [[flow]]
//! kind = "session"
//! from = "s:5000"
//! group = "239.1.1.1:7000"
//! mergers = ["m1", "m2"]      # nodes hosting a merger (not group members)
//! ```
//!
//! Data still goes to the group; only feedback is redirected. Every member,
//! and every merger, reports to the **first merger on its path toward the
//! sender** (up the sender's shortest-path tree), or to the sender when
//! there is none: concast, ACKs merge where reverse paths meet (MCTCP §II).
//! Members report through [`fanout_transport::TransportConfig::feedback_via`].
//! A merger's join merge waits for exactly its children (by count, with a
//! 500 ms timer as a fallback). Give merger and sender nodes a
//! `cpu = { ... }` ([`crate::node::CpuModel`]) to model their processing
//! capacity (the bottleneck of MCTCP §VI).

use crate::app::{AppProbe, SimApp};
use crate::ids::{LinkId, NodeId};
use crate::sim::Simulator;
use crate::topology::routing::parents_from;
use fanout_core::{Engine, Instant, Transmit};
use fanout_transport::merge::{JoinMerge, Merger, MergerConfig};
use std::net::SocketAddr;
use std::time::Duration;

/// A merger hosted on a simulated node.
#[derive(Debug)]
pub struct MergerApp {
    merger: Merger,
}

impl MergerApp {
    /// A merger reporting to `config.parent`.
    pub fn new(config: MergerConfig) -> Self {
        MergerApp {
            merger: Merger::new(config, Instant::ZERO),
        }
    }

    /// The merger.
    pub fn merger(&self) -> &Merger {
        &self.merger
    }
}

impl Engine for MergerApp {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.merger.handle_datagram(now, from, datagram);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.merger.poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.merger.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.merger.handle_timeout(now);
    }
}

impl SimApp for MergerApp {
    fn probe(&self) -> AppProbe {
        AppProbe::default()
    }
}

/// Where each member and merger sends its feedback.
#[derive(Debug, Clone)]
pub struct MergePlan {
    /// Per member (in the order given): its merger, or `None` for the
    /// sender itself.
    pub member_parent: Vec<Option<SocketAddr>>,
    /// Per merger (in the order given): its address, its parent (a merger
    /// or the sender) and how many children report to it.
    pub mergers: Vec<(SocketAddr, SocketAddr, usize)>,
    /// Children reporting straight to the sender (members and mergers).
    pub sender_children: usize,
}

/// Computes the concast tree: each member and merger reports to the first
/// merger node on its path up the sender's shortest-path tree.
/// `mergers` are node ids; each merger listens on `port`.
pub fn plan(
    sim: &Simulator,
    sender: SocketAddr,
    port: u16,
    mergers: &[NodeId],
    members: &[SocketAddr],
) -> Result<MergePlan, String> {
    let src = sim
        .node_by_ip(sender.ip())
        .ok_or_else(|| format!("no node has the sender's address {}", sender.ip()))?;
    let mut outgoing: Vec<Vec<LinkId>> = vec![Vec::new(); sim.nodes().len()];
    for l in sim.links() {
        outgoing[l.from().index()].push(l.id());
    }
    let via = parents_from(src, sim.links(), &outgoing);
    let addr = |n: NodeId| SocketAddr::new(sim.node(n).ip(), port);
    // The first merger strictly above `n`, or the sender.
    let parent_of = |n: NodeId| -> Result<SocketAddr, String> {
        let mut at = n;
        // A tree path visits each node once.
        for _ in 0..sim.nodes().len() {
            let Some(l) = via[at.index()] else {
                return Err(format!(
                    "{} is not reachable from the sender",
                    sim.node(n).name()
                ));
            };
            at = sim.link(l).from();
            if at == src {
                return Ok(sender);
            }
            if mergers.contains(&at) {
                return Ok(addr(at));
            }
        }
        Err(format!("no path from the sender to {}", sim.node(n).name()))
    };
    let mut member_parent = Vec::with_capacity(members.len());
    for m in members {
        let node = sim
            .node_by_ip(m.ip())
            .ok_or_else(|| format!("member {m}: no node"))?;
        if mergers.contains(&node) {
            return Err(format!(
                "{}: a merger node cannot be a group member",
                sim.node(node).name()
            ));
        }
        let p = parent_of(node)?;
        member_parent.push((p != sender).then_some(p));
    }
    let mut tree = Vec::with_capacity(mergers.len());
    for &m in mergers {
        if m == src {
            return Err("the sender's node merges already (it is the root)".into());
        }
        tree.push((addr(m), parent_of(m)?, 0usize));
    }
    let mut sender_children = 0;
    let parents: Vec<SocketAddr> = member_parent
        .iter()
        .map(|p| p.unwrap_or(sender))
        .chain(tree.iter().map(|t| t.1))
        .collect();
    for p in parents {
        match tree.iter_mut().find(|t| t.0 == p) {
            Some(t) => t.2 += 1,
            None => sender_children += 1,
        }
    }
    Ok(MergePlan {
        member_parent,
        mergers: tree,
        sender_children,
    })
}

/// The merger configuration for a node expecting `children`.
pub fn merger_config(parent: SocketAddr, children: usize) -> MergerConfig {
    MergerConfig {
        join: JoinMerge::CountOrTimer(children.max(1), Duration::from_millis(500)),
        ..MergerConfig::new(parent)
    }
}
