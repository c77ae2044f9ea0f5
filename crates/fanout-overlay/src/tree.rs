//! The widest-path tree (ROMA §VI-C): since a host's rate is the least
//! hop rate above it (ROMA §V, equation 2), the best tree maximises, for
//! every host, the least hop rate on its path from the source. Dijkstra's
//! algorithm with "shortest" replaced by "widest" builds it: repeatedly
//! take the unreached host with the widest path from the source and join
//! it to the tree through the hop that gives it.
//!
//! With a bound on each host's children (so the source, whose uplink every
//! first-level connection shares, is no hot spot), a host that reached the
//! bound stops offering paths and the hosts that counted on it take their
//! next widest offer from the tree. That greedy tree is no longer optimal
//! in general (a degree-bounded widest tree is NP-hard to find), but every
//! host joins through the widest hop still open when it joins.

/// A tree over hosts `0..n`, rooted at the source.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    /// Each host's parent (`None` for the source and for hosts no hop
    /// reaches).
    pub parent: Vec<Option<usize>>,
    /// Each host's path width: the least hop rate from the source (the
    /// source's is infinite, an unreached host's 0), in the hop rates'
    /// unit.
    pub width: Vec<f64>,
    /// Hops from the source (0 for the source and unreached hosts).
    pub depth: Vec<usize>,
    /// The hosts in the order they joined, the source first.
    pub order: Vec<usize>,
}

impl Tree {
    /// The hosts no hop from the tree reaches.
    pub fn unreached(&self) -> Vec<usize> {
        (0..self.parent.len())
            .filter(|h| !self.order.contains(h))
            .collect()
    }

    /// `host`'s children, in the order they joined.
    pub fn children(&self, host: usize) -> Vec<usize> {
        self.order
            .iter()
            .copied()
            .filter(|&c| self.parent[c] == Some(host))
            .collect()
    }

    /// The hosts from the source down to `host` (just the source for it).
    pub fn path(&self, host: usize) -> Vec<usize> {
        let mut path = vec![host];
        let mut at = host;
        while let Some(p) = self.parent[at] {
            path.push(p);
            at = p;
        }
        path.reverse();
        path
    }
}

/// The widest-path tree over hosts `0..n` from `source`, where `rate(from,
/// to)` is the rate of the hop from `from` to `to` (0 or less, or NaN: no
/// such hop) and each host takes at most `max_children` children (`None`:
/// no bound). Ties go to the shallower parent, then the earlier one.
pub fn widest_path_tree(
    n: usize,
    source: usize,
    rate: impl Fn(usize, usize) -> f64,
    max_children: Option<usize>,
) -> Tree {
    assert!(source < n, "the source is one of the hosts");
    let usable = |r: f64| if r > 0.0 { r } else { 0.0 };
    let mut tree = Tree {
        parent: vec![None; n],
        width: vec![0.0; n],
        depth: vec![0; n],
        order: Vec::with_capacity(n),
    };
    let mut joined = vec![false; n];
    let mut children = vec![0usize; n];
    // Each unjoined host's best offer from the tree: (width, parent).
    let mut offer: Vec<Option<(f64, usize)>> = vec![None; n];
    let open = |children: &[usize], h: usize| max_children.is_none_or(|m| children[h] < m);
    let better = |tree: &Tree, w: f64, p: usize, than: Option<(f64, usize)>| match than {
        None => w > 0.0,
        Some((tw, tp)) => w > tw || (w == tw && (tree.depth[p], p) < (tree.depth[tp], tp)),
    };
    let mut next = Some(source);
    tree.width[source] = f64::INFINITY;
    while let Some(host) = next {
        joined[host] = true;
        tree.order.push(host);
        if let Some(p) = tree.parent[host] {
            tree.depth[host] = tree.depth[p] + 1;
            children[p] += 1;
            if !open(&children, p) {
                // The parent is full: whoever counted on it looks again.
                for v in 0..n {
                    if joined[v] || offer[v].is_none_or(|(_, o)| o != p) {
                        continue;
                    }
                    offer[v] = None;
                    for u in (0..n).filter(|&u| joined[u] && open(&children, u)) {
                        let w = tree.width[u].min(usable(rate(u, v)));
                        if better(&tree, w, u, offer[v]) {
                            offer[v] = Some((w, u));
                        }
                    }
                }
            }
        }
        if open(&children, host) {
            for v in (0..n).filter(|&v| !joined[v]) {
                let w = tree.width[host].min(usable(rate(host, v)));
                if better(&tree, w, host, offer[v]) {
                    offer[v] = Some((w, host));
                }
            }
        }
        // The widest offer joins next (ties: the lower index).
        next = None;
        let mut widest = 0.0;
        for v in (0..n).filter(|&v| !joined[v]) {
            if let Some((w, _)) = offer[v] {
                if w > widest {
                    widest = w;
                    next = Some(v);
                }
            }
        }
        if let Some(v) = next {
            let (w, p) = offer[v].expect("an offer");
            tree.width[v] = w;
            tree.parent[v] = Some(p);
        }
    }
    tree
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rate matrix: `m[from][to]`, 0 for no hop.
    fn from_matrix<'a>(m: &'a [&'a [f64]]) -> impl Fn(usize, usize) -> f64 + 'a {
        move |a, b| m[a][b]
    }

    #[test]
    fn a_wider_detour_beats_the_direct_hop() {
        // ROMA §V-B: A→C 9, A→B 31, B→C 22 (Mbit/s).
        let m: &[&[f64]] = &[&[0.0, 31.0, 9.0], &[0.0, 0.0, 22.0], &[0.0, 0.0, 0.0]];
        let t = widest_path_tree(3, 0, from_matrix(m), None);
        assert_eq!(t.parent, vec![None, Some(0), Some(1)]);
        assert_eq!(t.width[1..], [31.0, 22.0]);
        assert_eq!(t.depth, vec![0, 1, 2]);
        assert_eq!(t.order, vec![0, 1, 2]);
        assert_eq!(t.path(2), vec![0, 1, 2]);
        assert!(t.unreached().is_empty());
    }

    #[test]
    fn every_host_gets_the_widest_path_there_is() {
        // Checked against brute force over all paths on random matrices.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200 {
            let n = 2 + (next() % 6) as usize;
            let m: Vec<Vec<f64>> = (0..n)
                .map(|a| {
                    (0..n)
                        .map(|b| match (a == b, next() % 4) {
                            (true, _) | (_, 0) => 0.0,
                            _ => (next() % 100) as f64 + 1.0,
                        })
                        .collect()
                })
                .collect();
            let t = widest_path_tree(n, 0, |a, b| m[a][b], None);
            // The widest path by Bellman-Ford style relaxation.
            let mut best = vec![0.0f64; n];
            best[0] = f64::INFINITY;
            for _ in 0..n {
                for a in 0..n {
                    for b in 0..n {
                        best[b] = best[b].max(best[a].min(m[a][b]));
                    }
                }
            }
            for h in 1..n {
                assert_eq!(t.width[h], best[h], "host {h} of {m:?}");
                if let Some(p) = t.parent[h] {
                    assert_eq!(t.width[h], t.width[p].min(m[p][h]));
                } else {
                    assert_eq!(best[h], 0.0);
                    assert!(t.unreached().contains(&h));
                }
            }
        }
    }

    #[test]
    fn a_bound_on_children_spreads_the_tree_below_the_source() {
        // The source reaches all five at 100; the hosts reach each other
        // at 80.
        let rate = |a: usize, b: usize| match (a, b) {
            (_, 0) => 0.0,
            (0, _) => 100.0,
            (a, b) if a != b => 80.0,
            _ => 0.0,
        };
        let free = widest_path_tree(6, 0, rate, None);
        assert_eq!(free.children(0).len(), 5);
        let bounded = widest_path_tree(6, 0, rate, Some(2));
        for h in 0..6 {
            assert!(bounded.children(h).len() <= 2, "{h}: {bounded:?}");
        }
        assert_eq!(bounded.children(0), vec![1, 2]);
        for h in 3..6 {
            assert_eq!(bounded.width[h], 80.0);
            assert_eq!(bounded.depth[h], 2, "{bounded:?}");
        }
        // A host nothing reaches is left out.
        let island = widest_path_tree(3, 0, |a, b| if (a, b) == (0, 1) { 5.0 } else { 0.0 }, None);
        assert_eq!(island.unreached(), vec![2]);
        assert_eq!(island.parent[2], None);
    }
}
