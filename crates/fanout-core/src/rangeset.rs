//! A set of `u64` values stored as disjoint half-open ranges.
//!
//! Used for SACK scoreboards and reassembly. Adjacent and overlapping ranges
//! are coalesced, so the number of stored ranges equals the number of holes
//! plus one. Callers that take ranges from the network bound
//! [`RangeSet::range_count`] themselves.

use std::collections::BTreeMap;
use std::ops::{Bound, Range};

/// Disjoint, coalesced half-open ranges `[start, end)`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    /// start → end; invariant: ranges non-empty, disjoint, non-adjacent.
    map: BTreeMap<u64, u64>,
}

/// The gaps of a [`RangeSet`] within a range, in ascending order
/// ([`RangeSet::gaps`]).
#[derive(Debug)]
pub struct Gaps<'a> {
    /// Nothing below it is a gap still to yield.
    at: u64,
    end: u64,
    /// The stored ranges starting inside the range, not yet passed.
    stored: std::collections::btree_map::Range<'a, u64, u64>,
}

impl Iterator for Gaps<'_> {
    type Item = Range<u64>;

    fn next(&mut self) -> Option<Range<u64>> {
        while self.at < self.end {
            let Some((&s, &e)) = self.stored.next() else {
                let gap = self.at..self.end;
                self.at = self.end;
                return Some(gap);
            };
            let gap = self.at..s;
            self.at = self.at.max(e);
            if !gap.is_empty() {
                return Some(gap);
            }
        }
        None
    }
}

impl std::fmt::Debug for RangeSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl RangeSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// True when no value is stored.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Number of disjoint ranges.
    pub fn range_count(&self) -> usize {
        self.map.len()
    }

    /// Number of values stored.
    pub fn len(&self) -> u64 {
        self.map.iter().map(|(s, e)| e - s).sum()
    }

    /// Ranges in ascending order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Range<u64>> + '_ {
        self.map.iter().map(|(&s, &e)| s..e)
    }

    /// Smallest stored value.
    pub fn min(&self) -> Option<u64> {
        self.map.keys().next().copied()
    }

    /// One past the largest stored value.
    pub fn max_end(&self) -> Option<u64> {
        self.map.values().next_back().copied()
    }

    /// True if `v` is stored.
    pub fn contains(&self, v: u64) -> bool {
        self.map
            .range(..=v)
            .next_back()
            .is_some_and(|(_, &e)| v < e)
    }

    /// True if every value of `r` is stored (an empty range is contained).
    pub fn contains_range(&self, r: Range<u64>) -> bool {
        if r.is_empty() {
            return true;
        }
        self.map
            .range(..=r.start)
            .next_back()
            .is_some_and(|(_, &e)| r.end <= e)
    }

    /// True if `r` overlaps or adjoins a stored range, i.e. inserting it
    /// would not add a range of its own.
    pub fn touches(&self, r: Range<u64>) -> bool {
        self.map
            .range(..=r.start)
            .next_back()
            .is_some_and(|(_, &e)| e >= r.start)
            || self.map.range(r.start..=r.end).next().is_some()
    }

    /// The stored range holding `v`, if any.
    pub fn range_containing(&self, v: u64) -> Option<Range<u64>> {
        self.map
            .range(..=v)
            .next_back()
            .filter(|(_, &e)| v < e)
            .map(|(&s, &e)| s..e)
    }

    /// Inserts `r`; returns how many values were new. One tree descent
    /// where `r` is already stored, three where it extends a range (the
    /// SACK scoreboard's usual case).
    pub fn insert(&mut self, r: Range<u64>) -> u64 {
        if r.is_empty() {
            return 0;
        }
        let (mut start, mut end) = (r.start, r.end);
        // Values of `r` already stored.
        let mut stored = 0;
        // The range starting at or before `start`, if it touches `r`, is
        // extended.
        if let Some((&s, &e)) = self.map.range(..=start).next_back() {
            if e >= end {
                return 0;
            }
            if e >= start {
                stored += e - start;
                start = s;
            }
        }
        // Absorb every range starting inside `(start, end]` (each starts
        // above `r.start`: the one before was handled above).
        while let Some((&s, &e)) = self
            .map
            .range((Bound::Excluded(start), Bound::Included(end)))
            .next()
        {
            stored += e.min(r.end).saturating_sub(s);
            end = end.max(e);
            self.map.remove(&s);
        }
        self.map.insert(start, end);
        (r.end - r.start) - stored
    }

    /// Removes `r`; returns how many values were removed.
    pub fn remove(&mut self, r: Range<u64>) -> u64 {
        if r.is_empty() || self.map.is_empty() {
            return 0;
        }
        let removed = self.overlap_len(r.clone());
        if let Some((&s, &e)) = self.map.range(..r.start).next_back() {
            if e > r.start {
                self.map.insert(s, r.start);
                if e > r.end {
                    self.map.insert(r.end, e);
                }
            }
        }
        while let Some((&s, &e)) = self.map.range(r.start..r.end).next() {
            self.map.remove(&s);
            if e > r.end {
                self.map.insert(r.end, e);
            }
        }
        removed
    }

    /// Removes every value below `v`.
    pub fn remove_below(&mut self, v: u64) {
        self.remove(0..v);
    }

    /// Values of `r` that are stored.
    pub fn overlap_len(&self, r: Range<u64>) -> u64 {
        if r.is_empty() || self.map.is_empty() {
            return 0;
        }
        let mut n = 0;
        let first = self
            .map
            .range(..r.start)
            .next_back()
            .map(|(&s, &e)| (s, e))
            .into_iter();
        let rest = self.map.range(r.start..r.end).map(|(&s, &e)| (s, e));
        for (s, e) in first.chain(rest) {
            let lo = s.max(r.start);
            let hi = e.min(r.end);
            if hi > lo {
                n += hi - lo;
            }
        }
        n
    }

    /// The first gap at or after `from` that is not stored, as `[start, end)`
    /// where `end` is the start of the next stored range (or `None` if open).
    pub fn next_gap(&self, from: u64) -> (u64, Option<u64>) {
        let start = self.range_containing(from).map_or(from, |r| r.end);
        let end = self.map.range(start..).next().map(|(&s, _)| s);
        (start, end)
    }

    /// Values in `r` that are not stored, as ranges in ascending order
    /// (each as long as it goes): one walk over the stored ranges inside
    /// `r`.
    pub fn gaps_in(&self, r: Range<u64>) -> Vec<Range<u64>> {
        self.gaps(r).collect()
    }

    /// [`RangeSet::gaps_in`] as it walks: a caller that stops at the first
    /// gaps walks no further.
    pub fn gaps(&self, r: Range<u64>) -> Gaps<'_> {
        // A range starting before `r` may cover its beginning.
        let at = if r.is_empty() {
            r.end
        } else {
            self.map
                .range(..r.start)
                .next_back()
                .map_or(r.start, |(_, &e)| e.max(r.start))
        };
        Gaps {
            at,
            end: r.end,
            stored: self.map.range(r.start..r.end.max(r.start)),
        }
    }

    /// The intersection of `self` and `other`.
    pub fn intersection(&self, other: &RangeSet) -> RangeSet {
        let mut out = RangeSet::new();
        let (mut a, mut b) = (self.iter().peekable(), other.iter().peekable());
        while let (Some(x), Some(y)) = (a.peek().cloned(), b.peek().cloned()) {
            let lo = x.start.max(y.start);
            let hi = x.end.min(y.end);
            if lo < hi {
                out.map.insert(lo, hi);
            }
            if x.end < y.end {
                a.next();
            } else {
                b.next();
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn coalesces() {
        let mut s = RangeSet::new();
        assert_eq!(s.insert(0..10), 10);
        assert_eq!(s.insert(20..30), 10);
        assert_eq!(s.insert(10..20), 10);
        assert_eq!(s.range_count(), 1);
        assert_eq!(s.insert(5..25), 0);
        assert_eq!(s.remove(3..7), 4);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0..3, 7..30]);
        assert_eq!(s.next_gap(0), (3, Some(7)));
        assert_eq!(s.next_gap(8), (30, None));
        assert_eq!(s.gaps_in(0..40), vec![3..7, 30..40]);
        // Walked lazily, from inside a stored range, and over nothing.
        assert_eq!(s.gaps(1..40).next(), Some(3..7));
        assert_eq!(s.gaps(8..29).next(), None);
        assert_eq!(s.gaps(9..9).next(), None);
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = 20..10;
        assert_eq!(s.gaps(backwards).next(), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u64),
        Remove(u64, u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..200, 0u64..30).prop_map(|(s, l)| Op::Insert(s, s + l)),
            (0u64..200, 0u64..30).prop_map(|(s, l)| Op::Remove(s, s + l)),
        ]
    }

    fn model_of(s: &RangeSet) -> BTreeSet<u64> {
        s.iter().flatten().collect()
    }

    proptest! {
        /// Oracle: behaves exactly like a `BTreeSet<u64>`.
        #[test]
        fn matches_btreeset(ops in proptest::collection::vec(op(), 0..60), probe in 0u64..240) {
            let mut s = RangeSet::new();
            let mut m = BTreeSet::new();
            for o in ops {
                match o {
                    Op::Insert(a, b) => {
                        let new = (a..b).filter(|v| m.insert(*v)).count() as u64;
                        prop_assert_eq!(s.insert(a..b), new);
                    }
                    Op::Remove(a, b) => {
                        let gone = (a..b).filter(|v| m.remove(v)).count() as u64;
                        prop_assert_eq!(s.remove(a..b), gone);
                    }
                }
                // Invariant: disjoint and non-adjacent.
                let v: Vec<_> = s.iter().collect();
                for w in v.windows(2) {
                    prop_assert!(w[0].end < w[1].start);
                }
                prop_assert_eq!(&model_of(&s), &m);
            }
            prop_assert_eq!(s.contains(probe), m.contains(&probe));
            prop_assert_eq!(s.len(), m.len() as u64);
            let gaps: BTreeSet<u64> = s.gaps_in(0..240).into_iter().flatten().collect();
            let want: BTreeSet<u64> = (0..240).filter(|v| !m.contains(v)).collect();
            prop_assert_eq!(gaps, want);
            // Inside any window: exactly the values not stored, as
            // ascending, non-empty, non-adjacent ranges.
            let window = probe / 2..probe / 2 + probe % 97;
            let parts = s.gaps_in(window.clone());
            for w in parts.windows(2) {
                prop_assert!(w[0].end < w[1].start);
            }
            prop_assert!(parts.iter().all(|g| !g.is_empty()));
            let got: BTreeSet<u64> = parts.into_iter().flatten().collect();
            let want: BTreeSet<u64> = window.filter(|v| !m.contains(v)).collect();
            prop_assert_eq!(got, want);
            // `touches`: inserting a non-empty range adds a range of its own
            // exactly when it neither overlaps nor adjoins one.
            let r = probe..probe + 1 + probe % 7;
            let mut grown = s.clone();
            grown.insert(r.clone());
            prop_assert_eq!(s.touches(r), grown.range_count() <= s.range_count());
        }

        #[test]
        fn intersection_matches(a in proptest::collection::vec((0u64..100, 0u64..20), 0..10),
                                b in proptest::collection::vec((0u64..100, 0u64..20), 0..10)) {
            let (mut x, mut y) = (RangeSet::new(), RangeSet::new());
            for (s, l) in a { x.insert(s..s + l); }
            for (s, l) in b { y.insert(s..s + l); }
            let want: BTreeSet<u64> = model_of(&x).intersection(&model_of(&y)).copied().collect();
            prop_assert_eq!(model_of(&x.intersection(&y)), want);
        }
    }
}
