//! A member index ordered by one key (the session's send edge, release
//! point, window or RTT), over dense slot numbers.
//!
//! * The [`Extreme`] the index is built for (`min` or `max`) is kept by a
//!   [`Tournament`] over the keys alone, with deferred updates: an update
//!   is O(1), a read after `k` updates O(min(k log N, N + k)), and equal
//!   keys stop the climb early (members in lockstep share keys). Among
//!   members with the extreme key, the one in the lowest slot is reported
//!   (deterministic, but not the smallest id).
//! * Ranked indexes ([`OrderedIndex::with_rank`]) also keep an
//!   order-statistic treap ([`super::rank`]) of `(key, member id)`: `nth(k)`
//!   and the other extreme in O(log N) (updates too). Unranked, those two
//!   fall back to an O(N log N) scan — build the index ranked if they are
//!   on a per-ACK path.

use super::rank::RankTree;
use super::tournament::{Tournament, EMPTY};
use super::MemberId;
use std::cell::RefCell;

/// Which end of the order an index answers in O(1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extreme {
    /// The smallest key.
    Min,
    /// The largest key.
    Max,
}

/// `(key, id)` as one integer with the same order.
fn pack(key: u64, id: u64) -> u128 {
    (u128::from(key) << 64) | u128::from(id)
}

fn unpack(p: u128) -> (u64, MemberId) {
    ((p >> 64) as u64, MemberId(p as u64))
}

/// `(key, member)` entries, at most one per slot. Member ids are above 0.
#[derive(Debug)]
pub struct OrderedIndex {
    extreme: Extreme,
    /// Tournament keys: the key for [`Extreme::Min`], its complement for
    /// [`Extreme::Max`] (smaller is always better; never [`EMPTY`]). In a
    /// cell so that reads (`&self`) can apply deferred updates; never
    /// borrowed across a call, so borrowing cannot fail.
    tree: RefCell<Tournament>,
    /// Per slot: its member's id, 0 if the slot has no entry.
    ids: Vec<u64>,
    len: usize,
    rank: Option<RankTree>,
}

impl OrderedIndex {
    /// An empty index answering `extreme` in O(1).
    pub fn new(extreme: Extreme) -> Self {
        OrderedIndex {
            extreme,
            tree: RefCell::new(Tournament::default()),
            ids: Vec::new(),
            len: 0,
            rank: None,
        }
    }

    /// Also keeps ranks: [`OrderedIndex::nth`] and both extremes in O(log N).
    pub fn with_rank(mut self) -> Self {
        let mut rank = RankTree::default();
        for (s, &id) in self.ids.iter().enumerate() {
            if id != 0 {
                let key = self.key_of(self.tree.borrow().leaf(s));
                rank.insert(s as u32, id, pack(key, id));
            }
        }
        self.rank = Some(rank);
        self
    }

    /// True if it answers ranks in O(log N).
    pub fn is_ranked(&self) -> bool {
        self.rank.is_some()
    }

    /// Key → tournament key.
    fn order(&self, key: u64) -> u128 {
        u128::from(match self.extreme {
            Extreme::Min => key,
            Extreme::Max => !key,
        })
    }

    /// Tournament key → key.
    fn key_of(&self, t: u128) -> u64 {
        match self.extreme {
            Extreme::Min => t as u64,
            Extreme::Max => !(t as u64),
        }
    }

    /// Sets the entry of `slot` to `(key, id)`, adding it if absent.
    #[inline]
    pub fn update(&mut self, slot: u32, id: MemberId, key: u64) {
        let s = slot as usize;
        if s >= self.ids.len() {
            self.ids.resize(s + 1, 0);
        }
        let t = self.order(key);
        let tree = self.tree.get_mut();
        let old = tree.leaf(s);
        let old_id = self.ids[s];
        if old == t && old_id == id.0 {
            return;
        }
        if old_id == 0 {
            self.len += 1;
        }
        tree.set(s, t);
        self.ids[s] = id.0;
        if let Some(rank) = self.rank.as_mut() {
            if old_id != 0 {
                rank.remove(slot);
            }
            rank.insert(slot, id.0, pack(key, id.0));
        }
    }

    /// Removes the entry of `slot`, if any.
    pub fn remove(&mut self, slot: u32) {
        let s = slot as usize;
        if self.ids.get(s).is_none_or(|&id| id == 0) {
            return;
        }
        self.tree.get_mut().set(s, EMPTY);
        self.ids[s] = 0;
        self.len -= 1;
        if let Some(rank) = self.rank.as_mut() {
            rank.remove(slot);
        }
    }

    /// The entry [`Extreme`] selects (ties: the lowest slot).
    fn top(&self) -> Option<(u64, MemberId)> {
        let mut tree = self.tree.borrow_mut();
        tree.flush();
        let slot = tree.winner_slot()?;
        Some((self.key_of(tree.winner()), MemberId(self.ids[slot])))
    }

    /// The O(1) extreme's key alone (cheaper than finding its member).
    fn top_key(&self) -> Option<u64> {
        let mut tree = self.tree.borrow_mut();
        tree.flush();
        let t = tree.winner();
        (t != EMPTY).then(|| self.key_of(t))
    }

    /// Smallest key.
    pub fn min_key(&self) -> Option<u64> {
        match self.extreme {
            Extreme::Min => self.top_key(),
            Extreme::Max => self.nth(0).map(|(k, _)| k),
        }
    }

    /// Largest key.
    pub fn max_key(&self) -> Option<u64> {
        match self.extreme {
            Extreme::Max => self.top_key(),
            Extreme::Min => self.nth(self.len.checked_sub(1)?).map(|(k, _)| k),
        }
    }

    /// Smallest key and a member holding it.
    pub fn min(&self) -> Option<(u64, MemberId)> {
        match self.extreme {
            Extreme::Min => self.top(),
            Extreme::Max => self.nth(0),
        }
    }

    /// Largest key and a member holding it.
    pub fn max(&self) -> Option<(u64, MemberId)> {
        match self.extreme {
            Extreme::Max => self.top(),
            Extreme::Min => self.nth(self.len.checked_sub(1)?),
        }
    }

    /// The entry at rank `k` from the smallest (0-based) in `(key, id)`
    /// order: O(log N) if ranked, an O(N log N) scan otherwise. (If `k` is
    /// the O(1) extreme's rank, the key is read in O(1), the member is
    /// one holding it.)
    pub fn nth(&self, k: usize) -> Option<(u64, MemberId)> {
        if k >= self.len {
            return None;
        }
        if let Some(rank) = &self.rank {
            return rank.nth(k).map(unpack);
        }
        let top_rank = match self.extreme {
            Extreme::Min => 0,
            Extreme::Max => self.len - 1,
        };
        if k == top_rank {
            return self.top();
        }
        let tree = self.tree.borrow();
        let mut all: Vec<u128> = self
            .ids
            .iter()
            .enumerate()
            .filter(|(_, &id)| id != 0)
            .map(|(s, &id)| pack(self.key_of(tree.leaf(s)), id))
            .collect();
        all.sort_unstable();
        all.get(k).copied().map(unpack)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// Random updates and removals against a `BTreeSet` model.
    fn check(extreme: Extreme, ranked: bool) {
        let mut idx = OrderedIndex::new(extreme);
        if ranked {
            idx = idx.with_rank();
        }
        let mut model: BTreeMap<u32, (u64, MemberId)> = BTreeMap::new();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for step in 0..6_000u64 {
            let slot = (next() % 300) as u32;
            let r = next() % 10;
            if r < 2 {
                idx.remove(slot);
                model.remove(&slot);
            } else {
                // Few distinct keys (many ties), and the extremes of u64.
                let key = match next() % 60 {
                    50 => 0,
                    51 => u64::MAX,
                    k => k,
                };
                let id = model
                    .get(&slot)
                    .map_or(MemberId(1 + step * 1000 + u64::from(slot)), |e| e.1);
                idx.update(slot, id, key);
                model.insert(slot, (key, id));
            }
            let set: BTreeSet<(u64, MemberId)> = model.values().copied().collect();
            assert_eq!(idx.len, set.len());
            assert_eq!(idx.min_key(), set.first().map(|e| e.0));
            assert_eq!(idx.max_key(), set.last().map(|e| e.0));
            // The extremes' keys, and a member that holds them.
            for (got, want) in [(idx.min(), set.first()), (idx.max(), set.last())] {
                assert_eq!(got.map(|e| e.0), want.map(|e| e.0));
                if let Some((k, id)) = got {
                    assert!(set.contains(&(k, id)));
                }
            }
            let k = (next() as usize) % (set.len() + 1);
            let want = set.iter().nth(k).copied();
            let got = idx.nth(k);
            assert_eq!(got.map(|e| e.0), want.map(|e| e.0), "k={k}");
            if ranked || step % 50 == 0 {
                // Exact (key, id) rank order when ranked or scanned.
                let scanned = ranked || (k != 0 && k + 1 != set.len());
                if scanned {
                    assert_eq!(got, want, "k={k}");
                }
            }
        }
    }

    #[test]
    fn min_index_matches_model() {
        check(Extreme::Min, false);
    }

    #[test]
    fn max_index_matches_model() {
        check(Extreme::Max, false);
    }

    #[test]
    fn ranked_indexes_match_model() {
        check(Extreme::Min, true);
        check(Extreme::Max, true);
    }

    #[test]
    fn rank_added_later_covers_existing_entries() {
        let mut idx = OrderedIndex::new(Extreme::Min);
        for s in 0..10u32 {
            idx.update(s, MemberId(u64::from(s) + 1), u64::from(10 - s));
        }
        let idx = idx.with_rank();
        assert_eq!(idx.nth(3), Some((4, MemberId(7))));
        assert_eq!(idx.max(), Some((10, MemberId(1))));
        assert_eq!(idx.min(), Some((1, MemberId(10))));
    }
}
