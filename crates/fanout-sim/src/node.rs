//! A node: one IP address, the engines bound to its ports, explicit routes,
//! and an optional packet-processing capacity model.

use crate::ids::{AppId, LinkId, NodeId};
use crate::packet::Packet;
use crate::stats::NodeStats;
use crate::topology::StaticRoute;
use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

/// Processing capacity for packets delivered to a node's engines: each takes
/// `per_packet` of CPU time, served one at a time; up to `queue_limit`
/// packets wait, and arrivals beyond that are dropped (`cpu_overflow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuModel {
    /// CPU time per received packet.
    pub per_packet: Duration,
    /// Packets that may wait for the CPU (excluding the one in service).
    pub queue_limit: u32,
}

impl CpuModel {
    /// A model serving `pps` packets per second (> 0).
    pub fn packets_per_second(pps: u64, queue_limit: u32) -> Self {
        CpuModel {
            per_packet: Duration::from_nanos(1_000_000_000 / pps.max(1)),
            queue_limit,
        }
    }
}

/// A host or router.
#[derive(Debug)]
pub struct Node {
    pub(crate) id: NodeId,
    pub(crate) name: String,
    pub(crate) ip: IpAddr,
    pub(crate) bound: BTreeMap<u16, AppId>,
    pub(crate) routes: Vec<StaticRoute>,
    pub(crate) cpu: Option<CpuModel>,
    /// Input queue; the front entry is in service while `cpu_busy`.
    pub(crate) cpu_queue: VecDeque<(AppId, Packet)>,
    pub(crate) cpu_busy: bool,
    pub(crate) outgoing: Vec<LinkId>,
    pub(crate) stats: NodeStats,
}

impl Node {
    pub(crate) fn new(id: NodeId, name: String, ip: IpAddr) -> Self {
        Node {
            id,
            name,
            ip,
            bound: BTreeMap::new(),
            routes: Vec::new(),
            cpu: None,
            cpu_queue: VecDeque::new(),
            cpu_busy: false,
            outgoing: Vec::new(),
            stats: NodeStats::default(),
        }
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Name given at creation (used in scenario files and reports).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's IP address.
    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// Links leaving this node.
    pub fn outgoing(&self) -> &[LinkId] {
        &self.outgoing
    }

    /// The processing capacity model, if any.
    pub fn cpu(&self) -> Option<CpuModel> {
        self.cpu
    }

    /// Packets waiting for (or in) the CPU.
    pub fn cpu_queue_len(&self) -> usize {
        self.cpu_queue.len()
    }

    /// Counters.
    pub fn stats(&self) -> &NodeStats {
        &self.stats
    }

    /// Engine bound to `port`, if any.
    pub fn app_on_port(&self, port: u16) -> Option<AppId> {
        self.bound.get(&port).copied()
    }
}
