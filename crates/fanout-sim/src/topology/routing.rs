//! Unicast routing: explicit per-node routes to prefixes (longest prefix
//! wins) and automatic shortest-path routes over the link graph, computed
//! lazily one destination at a time.

use crate::ids::{LinkId, NodeId};
use crate::link::Link;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An address prefix such as `10.0.1.0/24` or `fd00::/8`; a bare address is
/// a host route (/32 or /128).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Prefix {
    /// Network address.
    pub addr: IpAddr,
    /// Prefix length in bits.
    pub len: u8,
}

impl Prefix {
    /// A host route for `ip`.
    pub fn host(ip: IpAddr) -> Self {
        let len = if ip.is_ipv4() { 32 } else { 128 };
        Prefix { addr: ip, len }
    }

    /// True if `ip` falls inside this prefix (same address family only).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(net) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Prefix {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("`{s}`: not an IP address or prefix"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => l
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&l| l <= max)
                .ok_or_else(|| format!("`{s}`: prefix length must be 0..={max}"))?,
        };
        Ok(Prefix { addr, len })
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// An explicit route on one node: packets for `prefix` leave on `link`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticRoute {
    /// Destinations covered.
    pub prefix: Prefix,
    /// Outgoing link (must start at the node holding the route).
    pub link: LinkId,
}

/// Longest-prefix match among `routes`.
pub fn lookup(routes: &[StaticRoute], ip: IpAddr) -> Option<LinkId> {
    routes
        .iter()
        .filter(|r| r.prefix.contains(ip))
        .max_by_key(|r| r.prefix.len)
        .map(|r| r.link)
}

/// Routing metric of a link: propagation delay in ns plus 1 per hop, so
/// equal-delay paths prefer fewer hops.
pub fn link_cost(link: &Link) -> u64 {
    link.delay_nanos().saturating_add(1)
}

/// Reverse Dijkstra toward `dest`: for every node, the first link of a
/// shortest path to `dest` (`None` for `dest` itself and unreachable nodes).
/// `incoming[n]` lists the links ending at node `n`.
pub fn next_hops_toward(
    dest: NodeId,
    links: &[Link],
    incoming: &[Vec<LinkId>],
) -> Vec<Option<LinkId>> {
    dijkstra(dest, incoming.len(), |n| {
        incoming[n.index()]
            .iter()
            .map(|&l| (l, links[l.index()].from(), link_cost(&links[l.index()])))
    })
}

/// Forward Dijkstra from `src`: for every node, the last link of a shortest
/// path from `src` (its parent edge in the shortest-path tree).
/// `outgoing[n]` lists the links starting at node `n`.
pub fn parents_from(src: NodeId, links: &[Link], outgoing: &[Vec<LinkId>]) -> Vec<Option<LinkId>> {
    dijkstra(src, outgoing.len(), |n| {
        outgoing[n.index()]
            .iter()
            .map(|&l| (l, links[l.index()].to(), link_cost(&links[l.index()])))
    })
}

/// Dijkstra from `root`; `edges(n)` yields (link, neighbour, cost). Returns
/// the link by which each node was reached. Ties break on (distance, node
/// id) and first-found, so the result is deterministic.
fn dijkstra<I>(root: NodeId, n: usize, edges: impl Fn(NodeId) -> I) -> Vec<Option<LinkId>>
where
    I: Iterator<Item = (LinkId, NodeId, u64)>,
{
    let mut dist = vec![u64::MAX; n];
    let mut via = vec![None; n];
    let mut heap = BinaryHeap::new();
    dist[root.index()] = 0;
    heap.push(Reverse((0u64, root)));
    while let Some(Reverse((d, u))) = heap.pop() {
        if d > dist[u.index()] {
            continue;
        }
        for (link, v, cost) in edges(u) {
            let nd = d.saturating_add(cost);
            if nd < dist[v.index()] {
                dist[v.index()] = nd;
                via[v.index()] = Some(link);
                heap.push(Reverse((nd, v)));
            }
        }
    }
    via
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        let p: Prefix = "10.0.1.0/24".parse().unwrap();
        assert!(p.contains("10.0.1.77".parse().unwrap()));
        assert!(!p.contains("10.0.2.1".parse().unwrap()));
        let any: Prefix = "0.0.0.0/0".parse().unwrap();
        assert!(any.contains("1.2.3.4".parse().unwrap()));
        assert_eq!("10.0.0.1".parse::<Prefix>().unwrap().len, 32);
        assert!("10.0.0.0/33".parse::<Prefix>().is_err());
        let v6: Prefix = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn longest_prefix_wins() {
        let routes = [
            StaticRoute {
                prefix: "10.0.0.0/8".parse().unwrap(),
                link: LinkId(1),
            },
            StaticRoute {
                prefix: "10.0.1.0/24".parse().unwrap(),
                link: LinkId(2),
            },
        ];
        assert_eq!(
            lookup(&routes, "10.0.1.5".parse().unwrap()),
            Some(LinkId(2))
        );
        assert_eq!(
            lookup(&routes, "10.9.1.5".parse().unwrap()),
            Some(LinkId(1))
        );
        assert_eq!(lookup(&routes, "11.0.0.1".parse().unwrap()), None);
    }
}
