//! Multicast groups: membership and distribution trees. A packet to a group
//! follows the tree from its source, duplicated at branch points, so a loss
//! on a shared link is seen by every member below it.

use crate::ids::{LinkId, NodeId};
use crate::link::Link;
use crate::topology::routing::parents_from;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// How a group's distribution tree is built.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TreeMode {
    /// Per-source shortest-path tree to the current members (default);
    /// recomputed after membership changes.
    #[default]
    ShortestPath,
    /// A fixed tree used for every source: node → links to copy onto.
    Explicit(BTreeMap<NodeId, Vec<LinkId>>),
}

/// A distribution tree in dense form: outgoing links and local delivery per
/// node index.
#[derive(Debug, Clone)]
pub struct Tree {
    out: Vec<Vec<LinkId>>,
    deliver: Vec<bool>,
}

impl Tree {
    /// Links a packet at `node` is copied onto.
    pub fn out_links(&self, node: NodeId) -> &[LinkId] {
        self.out.get(node.index()).map_or(&[], Vec::as_slice)
    }

    /// True if `node` is a member (delivers to its bound engine).
    pub fn delivers_at(&self, node: NodeId) -> bool {
        self.deliver.get(node.index()).copied().unwrap_or(false)
    }

    /// Number of links in the tree.
    pub fn link_count(&self) -> usize {
        self.out.iter().map(Vec::len).sum()
    }
}

/// A multicast group: its address, members and trees.
#[derive(Debug, Clone)]
pub struct Group {
    ip: IpAddr,
    /// Member node → join count (several engines on one node may join).
    members: BTreeMap<NodeId, u32>,
    mode: TreeMode,
    /// Per-source trees, dropped on any membership change.
    trees: BTreeMap<NodeId, Tree>,
}

impl Group {
    pub(crate) fn new(ip: IpAddr) -> Self {
        Group {
            ip,
            members: BTreeMap::new(),
            mode: TreeMode::ShortestPath,
            trees: BTreeMap::new(),
        }
    }

    /// Group address.
    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// Member nodes.
    pub fn members(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.members.keys().copied()
    }

    /// True if `node` is a member.
    pub fn is_member(&self, node: NodeId) -> bool {
        self.members.contains_key(&node)
    }

    /// Tree construction mode.
    pub fn mode(&self) -> &TreeMode {
        &self.mode
    }

    pub(crate) fn set_mode(&mut self, mode: TreeMode) {
        self.mode = mode;
        self.trees.clear();
    }

    /// Forgets cached trees (after a topology change).
    pub(crate) fn invalidate(&mut self) {
        self.trees.clear();
    }

    /// Adds one join of `node`; true if it became a member.
    pub(crate) fn join(&mut self, node: NodeId) -> bool {
        let c = self.members.entry(node).or_insert(0);
        *c += 1;
        self.trees.clear();
        *c == 1
    }

    /// Removes one join of `node`; true if it stopped being a member.
    pub(crate) fn leave(&mut self, node: NodeId) -> bool {
        let Some(c) = self.members.get_mut(&node) else {
            return false;
        };
        *c -= 1;
        self.trees.clear();
        if *c == 0 {
            self.members.remove(&node);
            true
        } else {
            false
        }
    }

    /// The tree for packets from `src`, built on first use.
    pub(crate) fn tree(&mut self, src: NodeId, links: &[Link], outgoing: &[Vec<LinkId>]) -> &Tree {
        let n = outgoing.len();
        let members = &self.members;
        let mode = &self.mode;
        self.trees.entry(src).or_insert_with(|| {
            let mut deliver = vec![false; n];
            for &m in members.keys() {
                deliver[m.index()] = true;
            }
            let out = match mode {
                TreeMode::Explicit(map) => {
                    let mut out = vec![Vec::new(); n];
                    for (node, ls) in map {
                        out[node.index()].clone_from(ls);
                    }
                    out
                }
                TreeMode::ShortestPath => {
                    shortest_path_tree(src, members.keys().copied(), links, outgoing)
                }
            };
            Tree { out, deliver }
        })
    }
}

/// Union of the shortest paths from `src` to each member: for every node the
/// links on which to copy a packet. Unreachable members are skipped.
pub fn shortest_path_tree(
    src: NodeId,
    members: impl Iterator<Item = NodeId>,
    links: &[Link],
    outgoing: &[Vec<LinkId>],
) -> Vec<Vec<LinkId>> {
    let parents = parents_from(src, links, outgoing);
    let mut out = vec![Vec::new(); outgoing.len()];
    let mut in_tree = vec![false; links.len()];
    for m in members {
        let mut node = m;
        while let Some(l) = parents[node.index()] {
            if in_tree[l.index()] {
                break;
            }
            in_tree[l.index()] = true;
            let from = links[l.index()].from();
            out[from.index()].push(l);
            node = from;
        }
    }
    // Deterministic copy order regardless of member iteration.
    for v in &mut out {
        v.sort_unstable();
    }
    out
}
