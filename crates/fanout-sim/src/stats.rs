//! Counters kept by links and nodes, and the typed reasons the network drops
//! a packet.

use std::fmt;
use std::ops::{Index, IndexMut};

/// Why the simulated network dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NetDrop {
    /// The link queue was full (DropTail, or RED's physical limit).
    QueueOverflow,
    /// RED early drop: average queue between the thresholds.
    RedEarly,
    /// RED forced drop: average queue above `max_th` (`2·max_th` if gentle).
    RedForced,
    /// The link's loss model lost it.
    RandomLoss,
    /// The receiving node's input (processing) queue was full.
    CpuOverflow,
    /// No route to the destination.
    NoRoute,
    /// Hop limit exhausted (a routing loop).
    TtlExpired,
    /// Nothing bound to the destination port on the destination node.
    NoListener,
}

impl NetDrop {
    /// Every reason, in declaration order.
    pub const ALL: [NetDrop; 8] = [
        NetDrop::QueueOverflow,
        NetDrop::RedEarly,
        NetDrop::RedForced,
        NetDrop::RandomLoss,
        NetDrop::CpuOverflow,
        NetDrop::NoRoute,
        NetDrop::TtlExpired,
        NetDrop::NoListener,
    ];

    /// Stable snake_case label for reports and CSV headers.
    pub fn label(self) -> &'static str {
        match self {
            NetDrop::QueueOverflow => "queue_overflow",
            NetDrop::RedEarly => "red_early",
            NetDrop::RedForced => "red_forced",
            NetDrop::RandomLoss => "random_loss",
            NetDrop::CpuOverflow => "cpu_overflow",
            NetDrop::NoRoute => "no_route",
            NetDrop::TtlExpired => "ttl_expired",
            NetDrop::NoListener => "no_listener",
        }
    }
}

impl fmt::Display for NetDrop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Packet drop counts per [`NetDrop`] reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropCounts([u64; NetDrop::ALL.len()]);

impl DropCounts {
    /// Sum over all reasons.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// (reason, count) pairs with a non-zero count.
    pub fn nonzero(&self) -> impl Iterator<Item = (NetDrop, u64)> + '_ {
        NetDrop::ALL
            .iter()
            .zip(self.0.iter())
            .filter(|(_, &c)| c > 0)
            .map(|(&r, &c)| (r, c))
    }
}

impl Index<NetDrop> for DropCounts {
    type Output = u64;
    fn index(&self, r: NetDrop) -> &u64 {
        &self.0[r as usize]
    }
}

impl IndexMut<NetDrop> for DropCounts {
    fn index_mut(&mut self, r: NetDrop) -> &mut u64 {
        &mut self.0[r as usize]
    }
}

impl fmt::Display for DropCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (r, c) in self.nonzero() {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            write!(f, "{r}={c}")?;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// Counters of one directed link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets offered to the link (before queue and loss).
    pub offered_packets: u64,
    /// Packets fully serialized onto the wire (including ones then lost).
    pub tx_packets: u64,
    /// Wire bytes fully serialized.
    pub tx_bytes: u64,
    /// Packets that reached the far end.
    pub delivered_packets: u64,
    /// Drops on this link, per reason.
    pub drops: DropCounts,
}

/// Counters of one node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Packets handed to an engine on this node.
    pub delivered_packets: u64,
    /// Payload bytes handed to engines on this node.
    pub delivered_bytes: u64,
    /// Packets forwarded on to another link.
    pub forwarded_packets: u64,
    /// Largest input-queue length seen (packets), with a CPU model.
    pub cpu_queue_peak: u32,
    /// Drops at this node (no route, no listener, CPU overflow, TTL).
    pub drops: DropCounts,
}
