//! The overlay's tree over a scenario's star: the source (`snd`) and the
//! receivers, each behind its own duplex link to one switch.
//!
//! On a star a hop from `a` to `b` can carry at most min(`a`'s link,
//! `b`'s link), so that is the hop rate given to the widest-path tree
//! ([`fanout_overlay::tree::widest_path_tree`], ROMA §VI-C). A parent's
//! uplink is shared by all its children, which the tree's hop rates do not
//! see; the prediction does ([`predict`]): each parent's uplink is split
//! max-min fairly among its children's demands, and a host's rate is the
//! least of its share and its parent's rate (ROMA §V, equation 2: a host's
//! rate is the least hop rate above it). With no bound on children given,
//! bounds 1 to [`MAX_CHILDREN_TRIED`] are tried and the tree whose worst
//! host gets the largest share of its own link is taken.

use fanout_overlay::tree::{widest_path_tree, Tree};

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

/// Each host's rate on `parent`'s tree over hosts with `link_bps` (host 0
/// the source): top-down, a parent's link split max-min fairly among its
/// children's demands (each child's own link, capped by the parent's
/// rate). `order` lists parents before children.
pub fn predict(parent: &[Option<usize>], order: &[usize], link_bps: &[u64]) -> Vec<f64> {
    let n = link_bps.len();
    let mut rate = vec![0.0f64; n];
    if let Some(&root) = order.first() {
        rate[root] = link_bps[root] as f64;
    }
    for &p in order {
        let mut kids: Vec<(f64, usize)> = order
            .iter()
            .copied()
            .filter(|&c| parent[c] == Some(p))
            .map(|c| ((link_bps[c] as f64).min(rate[p]), c))
            .collect();
        // Max-min fair: the smallest demands are met first.
        kids.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut left = link_bps[p] as f64;
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

/// The tree for a source behind `sender_bps` and receivers behind
/// `receiver_bps`, at most `max_children` children a host (`None`: the best
/// of 1 to [`MAX_CHILDREN_TRIED`] by the least predicted rate over link
/// rate, then the larger total).
pub fn plan(sender_bps: u64, receiver_bps: &[u64], max_children: Option<usize>) -> OverlayTree {
    let mut link = vec![sender_bps];
    link.extend_from_slice(receiver_bps);
    let n = link.len();
    let build = |m: usize| {
        let hop = |a: usize, b: usize| {
            if a == b || b == 0 {
                0.0
            } else {
                link[a].min(link[b]) as f64
            }
        };
        let t = widest_path_tree(n, 0, hop, Some(m.max(1)));
        let predicted_bps = predict(&t.parent, &t.order, &link);
        OverlayTree {
            tree: t,
            predicted_bps,
            max_children: m.max(1),
        }
    };
    let score = |t: &OverlayTree| {
        let worst = (1..n)
            .map(|h| t.predicted_bps[h] / link[h].max(1) as f64)
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

    #[test]
    fn the_issues_star_is_a_chain_in_decreasing_rate() {
        // Source 100; 4×100, 2×50, 20, 10 Mbit/s.
        let r = [100, 100, 100, 100, 50, 50, 20, 10].map(|x| x * M);
        let t = plan(100 * M, &r, None);
        assert_eq!(t.max_children, 1);
        for h in 1..=8 {
            assert_eq!(t.predicted_bps[h], r[h - 1] as f64, "host {h}: {t:?}");
            assert_eq!(t.tree.parent[h], Some(h - 1));
        }
        assert_eq!(t.tree.children(0), vec![1]);
        // One more 5 Mbit/s host joins at the end and takes from nobody.
        let mut r5 = r.to_vec();
        r5.push(5 * M);
        let t5 = plan(100 * M, &r5, None);
        assert_eq!(t5.predicted_bps[..9], t.predicted_bps[..]);
        assert_eq!(t5.tree.parent[9], Some(8));
    }

    #[test]
    fn a_shared_uplink_is_split_among_the_children() {
        // Two children of a 100 Mbit/s source share it: 50 each, and a
        // 20 Mbit/s child leaves 80 to its 100 Mbit/s sibling.
        let parent = [None, Some(0), Some(0)];
        assert_eq!(
            predict(&parent, &[0, 1, 2], &[100, 100, 100]),
            [100.0, 50.0, 50.0]
        );
        assert_eq!(
            predict(&parent, &[0, 1, 2], &[100, 100, 20]),
            [100.0, 80.0, 20.0]
        );
        // Below a 50 Mbit/s host no one gets more than 50.
        let chain = [None, Some(0), Some(1)];
        assert_eq!(
            predict(&chain, &[0, 1, 2], &[100, 50, 100]),
            [100.0, 50.0, 50.0]
        );
        // A given bound is kept.
        let t = plan(100 * M, &[100 * M; 5], Some(2));
        assert_eq!(t.max_children, 2);
        assert!((0..6).all(|h| t.tree.children(h).len() <= 2));
    }
}
