//! The overlay's tree over a scenario's star: the source (`snd`) and the
//! receivers, each behind its own duplex link to one switch.
//!
//! On a star a hop from `a` to `b` can carry at most min(`a`'s link,
//! `b`'s link), and where the links delay or lose packets, no more than
//! one TCP connection gets over their round trip and loss (ROMA §V,
//! equation 1, [`fanout_overlay::chain::Hop::rate`]); that is the hop rate
//! given to the widest-path tree
//! ([`fanout_overlay::tree::widest_path_tree`], ROMA §VI-C). A parent's
//! uplink is shared by all its children, which the tree's hop rates do not
//! see; the prediction does ([`predict`]): each parent's uplink is split
//! max-min fairly among its children's demands, and a host's rate is the
//! least of its share and its parent's rate (ROMA §V, equation 2: a host's
//! rate is the least hop rate above it). With no bound on children given,
//! bounds 1 to [`MAX_CHILDREN_TRIED`] are tried and the tree whose worst
//! host gets the largest share of its own link is taken.

use fanout_overlay::chain::Hop;
use fanout_overlay::tree::{widest_path_tree, Tree};

/// TCP segment bytes in the hop equation (Ethernet's MSS with timestamps).
const SEGMENT: f64 = 1448.0;

/// A host's own link to the star's switch (both directions alike).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StarLink {
    /// Rate, bit/s.
    pub bps: u64,
    /// One-way delay, seconds.
    pub one_way_s: f64,
    /// Loss probability, each direction.
    pub loss: f64,
}

impl StarLink {
    /// A link of `bps` that neither delays nor loses.
    pub fn clean(bps: u64) -> Self {
        StarLink {
            bps,
            one_way_s: 0.0,
            loss: 0.0,
        }
    }

    /// The rate of one TCP connection from a host behind `self` to one
    /// behind `to`, bit/s: their links' lesser rate, and where they lose
    /// packets the TCP equation over their round trip (twice both one-way
    /// delays) and the data direction's loss.
    pub fn hop_bps(&self, to: &StarLink) -> f64 {
        let hop = Hop {
            rtt: 2.0 * (self.one_way_s + to.one_way_s),
            loss: 1.0 - (1.0 - self.loss) * (1.0 - to.loss),
            capacity: self.bps.min(to.bps) as f64 / 8.0,
        };
        hop.rate(SEGMENT) * 8.0
    }
}

/// Largest bound on children tried when the tool names none.
pub const MAX_CHILDREN_TRIED: usize = 4;

/// A planned tree: host 0 is the source, host `i` ≥ 1 receiver `i − 1`.
#[derive(Debug, Clone, PartialEq)]
pub struct OverlayTree {
    /// The widest-path tree (parents, join order, children).
    pub tree: Tree,
    /// Each host's predicted rate, bit/s (the source's is its link's).
    pub predicted_bps: Vec<f64>,
    /// The bound on children the tree was built with.
    pub max_children: usize,
}

/// Each host's rate on `parent`'s tree over hosts behind `links` (host 0
/// the source): top-down, a parent's link split max-min fairly among its
/// children's demands (each child's hop rate from it, capped by the
/// parent's rate). `order` lists parents before children.
pub fn predict(parent: &[Option<usize>], order: &[usize], links: &[StarLink]) -> Vec<f64> {
    let n = links.len();
    let mut rate = vec![0.0f64; n];
    if let Some(&root) = order.first() {
        rate[root] = links[root].bps as f64;
    }
    for &p in order {
        let mut kids: Vec<(f64, usize)> = order
            .iter()
            .copied()
            .filter(|&c| parent[c] == Some(p))
            .map(|c| (links[p].hop_bps(&links[c]).min(rate[p]), c))
            .collect();
        // Max-min fair: the smallest demands are met first.
        kids.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut left = links[p].bps as f64;
        let mut k = kids.len();
        for (demand, c) in kids {
            let share = demand.min(left / k as f64);
            rate[c] = share;
            left -= share;
            k -= 1;
        }
    }
    rate
}

/// The tree for hosts behind `links` (host 0 the source), at most
/// `max_children` children a host (`None`: the best of 1 to
/// [`MAX_CHILDREN_TRIED`] by the least predicted rate over link rate, then
/// the larger total).
pub fn plan(links: &[StarLink], max_children: Option<usize>) -> OverlayTree {
    let n = links.len();
    let build = |m: usize| {
        let hop = |a: usize, b: usize| {
            if a == b || b == 0 {
                0.0
            } else {
                links[a].hop_bps(&links[b])
            }
        };
        let t = widest_path_tree(n, 0, hop, Some(m.max(1)));
        let predicted_bps = predict(&t.parent, &t.order, links);
        OverlayTree {
            tree: t,
            predicted_bps,
            max_children: m.max(1),
        }
    };
    let score = |t: &OverlayTree| {
        let worst = (1..n)
            .map(|h| t.predicted_bps[h] / links[h].bps.max(1) as f64)
            .fold(f64::INFINITY, f64::min);
        (worst, t.predicted_bps[1..].iter().sum::<f64>())
    };
    match max_children {
        Some(m) => build(m),
        None => (1..=MAX_CHILDREN_TRIED.min(n.saturating_sub(1)).max(1))
            .map(build)
            .fold(None, |best: Option<OverlayTree>, t| match best {
                Some(b) if score(&b) >= score(&t) => Some(b),
                _ => Some(t),
            })
            .expect("at least one bound tried"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1_000_000;

    /// A source behind `sender` and receivers behind `receivers`, bit/s,
    /// none delaying or losing.
    fn clean(sender: u64, receivers: &[u64]) -> Vec<StarLink> {
        std::iter::once(sender)
            .chain(receivers.iter().copied())
            .map(StarLink::clean)
            .collect()
    }

    #[test]
    fn a_lossy_or_distant_host_is_planned_at_its_tcp_rate_and_below_no_one() {
        // Source 100; 3×100 Mbit/s, one of them 1% lossy, one 40 ms away.
        let mut links = clean(100 * M, &[100 * M; 4]);
        for l in &mut links {
            l.one_way_s = 0.001;
        }
        links[2].loss = 0.01;
        links[3].one_way_s = 0.040;
        let t = plan(&links, None);
        // One TCP connection over a 4 ms round trip at 1% loss: about 30
        // Mbit/s (equation 1); over 82 ms without loss, the link's rate.
        let lossy = links[1].hop_bps(&links[2]);
        assert!((20e6..40e6).contains(&lossy), "{lossy}");
        assert_eq!(links[1].hop_bps(&links[3]), 100e6);
        // Nobody is below the lossy host: every hop from it is as lossy.
        assert!(t.tree.children(2).is_empty(), "{t:?}");
        assert!((t.predicted_bps[2] - lossy).abs() < 1.0, "{t:?}");
        assert_eq!(t.predicted_bps[1], 100e6);
        assert_eq!(t.predicted_bps[4], 100e6);
    }

    #[test]
    fn the_issues_star_is_a_chain_in_decreasing_rate() {
        // Source 100; 4×100, 2×50, 20, 10 Mbit/s.
        let r = [100, 100, 100, 100, 50, 50, 20, 10].map(|x| x * M);
        let t = plan(&clean(100 * M, &r), None);
        assert_eq!(t.max_children, 1);
        for h in 1..=8 {
            assert_eq!(t.predicted_bps[h], r[h - 1] as f64, "host {h}: {t:?}");
            assert_eq!(t.tree.parent[h], Some(h - 1));
        }
        assert_eq!(t.tree.children(0), vec![1]);
        // One more 5 Mbit/s host joins at the end and takes from nobody.
        let mut r5 = r.to_vec();
        r5.push(5 * M);
        let t5 = plan(&clean(100 * M, &r5), None);
        assert_eq!(t5.predicted_bps[..9], t.predicted_bps[..]);
        assert_eq!(t5.tree.parent[9], Some(8));
    }

    #[test]
    fn a_shared_uplink_is_split_among_the_children() {
        // Two children of a 100 Mbit/s source share it: 50 each, and a
        // 20 Mbit/s child leaves 80 to its 100 Mbit/s sibling.
        let parent = [None, Some(0), Some(0)];
        assert_eq!(
            predict(&parent, &[0, 1, 2], &clean(100, &[100, 100])),
            [100.0, 50.0, 50.0]
        );
        assert_eq!(
            predict(&parent, &[0, 1, 2], &clean(100, &[100, 20])),
            [100.0, 80.0, 20.0]
        );
        // Below a 50 Mbit/s host no one gets more than 50.
        let chain = [None, Some(0), Some(1)];
        assert_eq!(
            predict(&chain, &[0, 1, 2], &clean(100, &[50, 100])),
            [100.0, 50.0, 50.0]
        );
        // A given bound is kept.
        let t = plan(&clean(100 * M, &[100 * M; 5]), Some(2));
        assert_eq!(t.max_children, 2);
        assert!((0..6).all(|h| t.tree.children(h).len() <= 2));
    }
}
