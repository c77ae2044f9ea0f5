//! `[[star]]`: many leaves behind their own links to one hub, in a few
//! lines of scenario (the TCP-SMO experiments' topology). Expanded into plain
//! nodes, links and group members when the scenario is parsed.
//!
//! ```toml
//! [[star]]
//! hub = "r"                 # created unless a [[node]] has this name
//! hub_ip = "10.0.0.254"
//! leaves = 1000             # named d1 … d1000
//! prefix = "d"
//! first_ip = "10.1.0.1"     # leaf i gets first_ip + (i − 1)
//! rate = "100Mbit"          # both directions of each leaf link
//! delay = "5ms"
//! queue = { kind = "drop_tail", packets = 100 }   # optional, hub → leaf
//! loss = { model = "bernoulli", p = 0.02 }        # optional, hub → leaf
//! lossy_leaves = 400        # optional: loss on the first K leaves only
//! reorder = { p = 0.01, extra = "2ms" }  # optional, hub → leaf, every leaf
//! group = "239.1.1.1"       # optional: every leaf joins at time zero
//! join_at = "300s"          # optional: … or then
//! ```

use crate::loss::LossSpec;
use crate::queue::QueueConfig;
use crate::reorder::ReorderSpec;
use crate::scenario::{GroupSpec, LinkSpec, MembershipChange, NodeSpec};
use crate::units::{HumanDuration, Rate};
use serde::Deserialize;
use std::net::{IpAddr, Ipv4Addr};

/// Most leaves one star may declare (keeps a typo from allocating millions).
pub const MAX_STAR_LEAVES: u32 = 100_000;

/// A `[[star]]` block.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StarSpec {
    /// Hub node name.
    pub hub: String,
    /// Hub address, used if the hub is created here.
    #[serde(default)]
    pub hub_ip: Option<IpAddr>,
    /// Number of leaves.
    pub leaves: u32,
    /// Leaf name prefix.
    pub prefix: String,
    /// Address of the first leaf (IPv4).
    pub first_ip: Ipv4Addr,
    /// Leaf link rate.
    pub rate: Rate,
    /// Leaf link propagation delay.
    pub delay: HumanDuration,
    /// Hub → leaf queue.
    #[serde(default)]
    pub queue: Option<QueueConfig>,
    /// Hub → leaf loss.
    #[serde(default)]
    pub loss: LossSpec,
    /// Hub → leaf reordering, on every leaf (default none).
    #[serde(default)]
    pub reorder: ReorderSpec,
    /// Apply `loss` to the first this many leaves only (default: all).
    #[serde(default)]
    pub lossy_leaves: Option<u32>,
    /// Group every leaf joins.
    #[serde(default)]
    pub group: Option<IpAddr>,
    /// When they join it (default: at time zero).
    #[serde(default)]
    pub join_at: Option<HumanDuration>,
}

impl StarSpec {
    /// Appends the star's nodes, links and group membership.
    pub fn expand(
        &self,
        nodes: &mut Vec<NodeSpec>,
        links: &mut Vec<LinkSpec>,
        groups: &mut Vec<GroupSpec>,
    ) -> Result<(), String> {
        if self.leaves == 0 || self.leaves > MAX_STAR_LEAVES {
            return Err(format!("leaves: must be 1..={MAX_STAR_LEAVES}"));
        }
        if !nodes.iter().any(|n| n.name == self.hub) {
            let ip = self.hub_ip.ok_or("hub_ip: needed to create the hub")?;
            nodes.push(NodeSpec {
                name: self.hub.clone(),
                ip,
                cpu: None,
            });
        }
        let first = u32::from(self.first_ip);
        let lossy = self.lossy_leaves.unwrap_or(self.leaves);
        let mut members = Vec::with_capacity(self.leaves as usize);
        for i in 0..self.leaves {
            let name = format!("{}{}", self.prefix, i + 1);
            let ip = first
                .checked_add(i)
                .ok_or("first_ip: leaves overflow the address space")?;
            nodes.push(NodeSpec {
                name: name.clone(),
                ip: IpAddr::V4(Ipv4Addr::from(ip)),
                cpu: None,
            });
            links.push(LinkSpec {
                from: self.hub.clone(),
                to: name.clone(),
                rate: self.rate,
                delay: self.delay,
                duplex: false,
                loss: if i < lossy { self.loss } else { LossSpec::None },
                queue: self.queue,
                reorder: self.reorder,
            });
            links.push(LinkSpec {
                from: name.clone(),
                to: self.hub.clone(),
                rate: self.rate,
                delay: self.delay,
                duplex: false,
                loss: LossSpec::None,
                queue: None,
                reorder: ReorderSpec::NONE,
            });
            members.push(name);
        }
        if let Some(addr) = self.group {
            let i = match groups.iter().position(|g| g.addr == addr) {
                Some(i) => i,
                None => {
                    groups.push(GroupSpec {
                        addr,
                        members: Vec::new(),
                        tree: None,
                        schedule: Vec::new(),
                    });
                    groups.len() - 1
                }
            };
            let g = &mut groups[i];
            match self.join_at {
                None => g.members.extend(members),
                Some(at) => g
                    .schedule
                    .extend(members.into_iter().map(|n| MembershipChange {
                        at,
                        join: Some(n),
                        leave: None,
                    })),
            }
        } else if self.join_at.is_some() {
            return Err("join_at: needs a group".into());
        }
        Ok(())
    }
}
