//! Static routes of the emulated network: for every host, the first link of
//! a shortest path to it from every node, with the simulator's metric
//! (propagation delay in ns plus 1 per hop, `fanout_sim::topology::routing`).

use crate::topo::DirLink;
use fanout_core::time::duration_nanos;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Next-hop tables toward each host.
#[derive(Debug, Clone)]
pub struct Routes {
    /// `toward[h][n]`: the link node `n` forwards on to reach host `h`
    /// (`None` at `h` itself and where `h` is unreachable).
    toward: Vec<Vec<Option<usize>>>,
}

impl Routes {
    /// Computes the tables for `hosts` destination hosts (nodes `0..hosts`)
    /// in a graph of `nodes` nodes.
    pub fn new(hosts: usize, nodes: usize, links: &[DirLink]) -> Self {
        let mut incoming = vec![Vec::new(); nodes];
        for (i, l) in links.iter().enumerate() {
            incoming[l.to].push(i);
        }
        let toward = (0..hosts)
            .map(|dest| reverse_dijkstra(dest, nodes, links, &incoming))
            .collect();
        Routes { toward }
    }

    /// The link `node` forwards a packet for host `dest` on.
    pub fn next_hop(&self, node: usize, dest: usize) -> Option<usize> {
        self.toward.get(dest)?.get(node).copied().flatten()
    }
}

/// Shortest paths toward `dest`: for each node, the first link of its path.
/// Ties break on (distance, node index), so the result is deterministic.
fn reverse_dijkstra(
    dest: usize,
    nodes: usize,
    links: &[DirLink],
    incoming: &[Vec<usize>],
) -> Vec<Option<usize>> {
    let mut dist = vec![u64::MAX; nodes];
    let mut via = vec![None; nodes];
    let mut heap = BinaryHeap::new();
    dist[dest] = 0;
    heap.push(Reverse((0u64, dest)));
    while let Some(Reverse((d, n))) = heap.pop() {
        if d > dist[n] {
            continue;
        }
        for &l in &incoming[n] {
            let link = &links[l];
            let cost = duration_nanos(link.config.delay).saturating_add(1);
            let nd = d.saturating_add(cost);
            if nd < dist[link.from] {
                dist[link.from] = nd;
                via[link.from] = Some(l);
                heap.push(Reverse((nd, link.from)));
            }
        }
    }
    via
}

#[cfg(test)]
mod tests {
    use super::*;
    use fanout_sim::LinkConfig;
    use std::time::Duration;

    fn link(from: usize, to: usize, ms: u64) -> DirLink {
        DirLink {
            from,
            to,
            config: LinkConfig::new(1_000_000, Duration::from_millis(ms)),
        }
    }

    #[test]
    fn prefers_lower_delay_then_fewer_hops() {
        // Hosts 0 and 1; routers 2 and 3. 0->2->1 costs 2 ms, 0->3->1 costs 10 ms.
        let links = [
            link(0, 2, 1),
            link(2, 1, 1),
            link(0, 3, 5),
            link(3, 1, 5),
            link(1, 2, 1),
        ];
        let r = Routes::new(2, 4, &links);
        assert_eq!(r.next_hop(0, 1), Some(0));
        assert_eq!(r.next_hop(2, 1), Some(1));
        assert_eq!(r.next_hop(3, 1), Some(3));
        assert_eq!(r.next_hop(1, 1), None);
        // 1 -> 0: no path back to 0 (no link into 0).
        assert_eq!(r.next_hop(1, 0), None);
    }
}
