//! What a parent (a merger, or the session sender) keeps of the ROSTER
//! pages its merger children send (`docs/wire.md` §4.8): per reporting
//! child its claimed receiver count and fan-in, and the receivers it
//! listed with their cumulative ACKs.
//!
//! Everything here is peer-controlled input, so it is bounded: claims are
//! clamped ([`MAX_SUBTREE_RECEIVERS`], [`crate::merge::MAX_CHILDREN`]),
//! entries are capped in all and per reporter, and what does not fit is
//! dropped and counted. The roster is accounting only: nothing here feeds
//! the release of the send buffer, which follows the (merged) cumulative
//! ACKs alone, so a lying roster cannot make a sender free data a genuine
//! receiver lacks.

use super::children::MAX_CHILDREN;
use crate::wire::{RosterFrame, MAX_ROSTER_PAGE};
use fanout_core::time::Instant;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Largest receiver count a child may claim for its subtree (about a
/// million receivers): a bigger claim is clamped and counted.
pub const MAX_SUBTREE_RECEIVERS: u64 = 1 << 20;

/// The smallest socket address (IPv4 sorts before IPv6): the start of one
/// reporter's range of entries.
const LOWEST_ADDR: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::UNSPECIFIED,
    0,
));

/// One reporting child's claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Report {
    /// Receivers behind it (clamped to 1 ..= [`MAX_SUBTREE_RECEIVERS`]).
    receivers: u64,
    /// Largest fan-in in its subtree (clamped to 1 ..= [`MAX_CHILDREN`]).
    fan_in: u64,
    /// Cycles of pages seen (a page with `first` = 0 starts one).
    cycle: u32,
    /// Entries held for it.
    entries: usize,
}

/// One receiver behind a reporting child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredEntry {
    /// Its cumulative ACK as last reported.
    pub cumulative: u64,
    /// When that report arrived.
    pub heard: Instant,
    /// The reporter's cycle in which it was last listed.
    cycle: u32,
}

/// Counters of a [`RosterStore`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RosterStats {
    /// ROSTER pages taken in.
    pub pages_in: u64,
    /// Entries refused because a cap was reached (in all, or the
    /// reporter's share, or beyond the count it claims).
    pub entries_dropped: u64,
    /// Entries forgotten because their reporter stopped listing them.
    pub entries_expired: u64,
    /// Claims (receivers or fan-in) clamped to their bound.
    pub claims_clamped: u64,
}

/// The roster pages of a parent's reporting children, keyed by `K` (the
/// child's address at a merger, its member id at the session sender).
#[derive(Debug)]
pub struct RosterStore<K> {
    reports: BTreeMap<K, Report>,
    entries: BTreeMap<(K, SocketAddr), StoredEntry>,
    /// Σ (receivers − 1) over the reports: a reporting child counts as
    /// its claim, any other child as 1.
    extra: u64,
    cap: usize,
    stats: RosterStats,
}

impl<K: Ord + Copy> RosterStore<K> {
    /// A store holding at most `cap` entries in all.
    pub fn new(cap: usize) -> Self {
        RosterStore {
            reports: BTreeMap::new(),
            entries: BTreeMap::new(),
            extra: 0,
            cap,
            stats: RosterStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> RosterStats {
        self.stats
    }

    /// Entries held in all (at most the cap given to [`Self::new`]).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// True once `from` sent a ROSTER (it is a merger).
    pub fn is_reporting(&self, from: &K) -> bool {
        self.reports.contains_key(from)
    }

    /// Receivers `from` stands for: its claim once it reported, else 1.
    pub fn receivers_of(&self, from: &K) -> u64 {
        self.reports.get(from).map_or(1, |r| r.receivers)
    }

    /// Σ (receivers − 1) over the reporting children: a parent with `n`
    /// children stands for `n + extra()` receivers. O(1).
    pub fn extra(&self) -> u64 {
        self.extra
    }

    /// Largest fan-in any reporting child claims (0 without reports).
    /// O(reporting children).
    pub fn max_fan_in(&self) -> u64 {
        self.reports.values().map(|r| r.fan_in).max().unwrap_or(0)
    }

    /// Reporting children.
    pub fn reporters(&self) -> impl Iterator<Item = &K> {
        self.reports.keys()
    }

    /// Every entry, by (reporter, receiver address).
    pub fn entries(&self) -> impl Iterator<Item = (&K, &SocketAddr, &StoredEntry)> {
        self.entries.iter().map(|((k, a), e)| (k, a, e))
    }

    /// The entries after key `after` (all with `None`), in key order.
    pub fn entries_after(
        &self,
        after: Option<(K, SocketAddr)>,
    ) -> impl Iterator<Item = (&K, &SocketAddr, &StoredEntry)> {
        use std::ops::Bound;
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.entries
            .range((lower, Bound::Unbounded))
            .map(|((k, a), e)| (k, a, e))
    }

    /// Takes one ROSTER page from `from`, heard at `now`.
    pub fn on_page(&mut self, from: K, f: &RosterFrame, now: Instant) {
        self.stats.pages_in += 1;
        let receivers = f.receivers.clamp(1, MAX_SUBTREE_RECEIVERS);
        let fan_in = f.fan_in.clamp(1, MAX_CHILDREN as u64);
        self.stats.claims_clamped +=
            u64::from(receivers != f.receivers) + u64::from(fan_in != f.fan_in);
        let reporters = self.reports.len() + usize::from(!self.reports.contains_key(&from));
        let report = self.reports.entry(from).or_insert(Report {
            receivers: 1,
            fan_in: 1,
            cycle: 0,
            entries: 0,
        });
        self.extra = self.extra - (report.receivers - 1) + (receivers - 1);
        report.receivers = receivers;
        report.fan_in = fan_in;
        if f.first == 0 {
            report.cycle = report.cycle.wrapping_add(1);
        }
        let cycle = report.cycle;
        // Entries for this reporter: no more than it claims (plus a page:
        // receivers that left linger for a cycle, and a lower merger is
        // listed as a receiver until its own first page), nor more than an
        // equal share of the cap once the store is half full.
        let share = (self.cap / reporters.max(1)).max(MAX_ROSTER_PAGE);
        let limit = (receivers as usize)
            .saturating_add(MAX_ROSTER_PAGE)
            .min(self.cap);
        for e in &f.entries {
            let key = (from, e.addr);
            if let Some(old) = self.entries.get_mut(&key) {
                *old = StoredEntry {
                    cumulative: e.cumulative,
                    heard: now,
                    cycle,
                };
                continue;
            }
            let report = self.reports.get_mut(&from).expect("inserted above");
            let full = self.entries.len() >= self.cap;
            let over_share = self.entries.len() * 2 >= self.cap && report.entries >= share;
            if full || over_share || report.entries >= limit {
                self.stats.entries_dropped += 1;
                continue;
            }
            report.entries += 1;
            self.entries.insert(
                key,
                StoredEntry {
                    cumulative: e.cumulative,
                    heard: now,
                    cycle,
                },
            );
        }
        if f.first == 0 {
            self.expire_old(from, cycle);
        }
    }

    /// Forgets `from`'s entries not listed in its current or previous
    /// cycle (a receiver that left its subtree; one lost page keeps an
    /// entry for one more cycle).
    fn expire_old(&mut self, from: K, cycle: u32) {
        let stale: Vec<(K, SocketAddr)> = self
            .entries
            .range((from, LOWEST_ADDR)..)
            .take_while(|((k, _), _)| *k == from)
            .filter(|(_, e)| cycle.wrapping_sub(e.cycle) > 1)
            .map(|(key, _)| *key)
            .collect();
        for key in &stale {
            self.entries.remove(key);
        }
        if let Some(r) = self.reports.get_mut(&from) {
            r.entries -= stale.len();
        }
        self.stats.entries_expired += stale.len() as u64;
    }

    /// Forgets everything `from` reported (it left).
    pub fn remove(&mut self, from: &K) {
        let Some(r) = self.reports.remove(from) else {
            return;
        };
        self.extra -= r.receivers - 1;
        let keys: Vec<(K, SocketAddr)> = self
            .entries
            .range((*from, LOWEST_ADDR)..)
            .take_while(|((k, _), _)| k == from)
            .map(|(key, _)| *key)
            .collect();
        for key in &keys {
            self.entries.remove(key);
        }
    }

    /// Keeps only the reporters for which `keep` holds.
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        let gone: Vec<K> = self.reports.keys().filter(|k| !keep(k)).copied().collect();
        for k in &gone {
            self.remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::RosterEntry;

    fn addr(i: u32) -> SocketAddr {
        SocketAddr::from((std::net::Ipv4Addr::from(0x0a00_0000 + i), 7000))
    }

    fn page(
        receivers: u64,
        first: u64,
        entries: impl IntoIterator<Item = (u32, u64)>,
    ) -> RosterFrame {
        RosterFrame {
            receivers,
            fan_in: 4,
            total: 0,
            first,
            entries: entries
                .into_iter()
                .map(|(i, cumulative)| RosterEntry {
                    addr: addr(i),
                    cumulative,
                })
                .collect(),
        }
    }

    #[test]
    fn counts_and_claims_are_bounded() {
        let mut s = RosterStore::<u8>::new(100);
        s.on_page(1, &page(8, 0, []), Instant::ZERO);
        assert_eq!(
            (s.receivers_of(&1), s.receivers_of(&2), s.extra()),
            (8, 1, 7)
        );
        s.on_page(2, &page(u64::MAX >> 2, 0, []), Instant::ZERO);
        assert_eq!(s.receivers_of(&2), MAX_SUBTREE_RECEIVERS);
        assert_eq!(s.stats().claims_clamped, 1);
        s.on_page(1, &page(0, 0, []), Instant::ZERO);
        assert_eq!(
            s.receivers_of(&1),
            1,
            "a claim of 0 counts the child itself"
        );
        s.remove(&2);
        assert_eq!(s.extra(), 0);
    }

    #[test]
    fn entries_are_capped_in_all_and_by_claim() {
        let mut s = RosterStore::<u8>::new(64);
        // Claims 4 receivers, lists 64: one page beyond its claim is held,
        // 28 dropped.
        s.on_page(1, &page(4, 0, (0..32).map(|i| (i, 10))), Instant::ZERO);
        s.on_page(1, &page(4, 32, (32..64).map(|i| (i, 10))), Instant::ZERO);
        assert_eq!(s.len(), 36);
        assert_eq!(s.stats().entries_dropped, 28);
        s.remove(&1);
        s.on_page(1, &page(4, 0, (0..4).map(|i| (i, 10))), Instant::ZERO);
        assert_eq!(s.len(), 4);
        // A flood from a reporter claiming a million: no more than the cap
        // in all, and the first reporter's entries are still held.
        for p in 0..100 {
            s.on_page(
                2,
                &page(
                    1 << 20,
                    p * 32,
                    (0..32).map(|i| (1000 + p as u32 * 32 + i, 1)),
                ),
                Instant::ZERO,
            );
        }
        assert!(s.len() <= 64);
        assert_eq!(s.entries().filter(|(k, _, _)| **k == 1).count(), 4);
        assert_eq!(
            s.entries().filter(|(k, _, _)| **k == 2).count(),
            32,
            "its share"
        );
        // A newcomer still gets its share while the flooder is over its own.
        s.on_page(3, &page(2, 0, [(5000, 7), (5001, 8)]), Instant::ZERO);
        assert!(s.len() <= 64);
        assert!(s.stats().entries_dropped >= 28 + 100 * 32 - 64);
    }

    #[test]
    fn receivers_no_longer_listed_expire_after_two_cycles() {
        let mut s = RosterStore::<u8>::new(100);
        s.on_page(1, &page(3, 0, [(1, 5), (2, 5), (3, 5)]), Instant::ZERO);
        // Receiver 3 left: the next cycles list 1 and 2 only.
        s.on_page(1, &page(2, 0, [(1, 6), (2, 6)]), Instant::ZERO);
        assert_eq!(s.len(), 3, "kept one more cycle (a page may be lost)");
        s.on_page(1, &page(2, 0, [(1, 7), (2, 7)]), Instant::ZERO);
        assert_eq!(s.len(), 2);
        assert_eq!(s.stats().entries_expired, 1);
        let cums: Vec<u64> = s.entries().map(|(_, _, e)| e.cumulative).collect();
        assert_eq!(cums, vec![7, 7]);
    }

    proptest::proptest! {
        /// Arbitrary page sequences from a few reporters (any claims, any
        /// indexes, any entries): the store never exceeds its cap nor a
        /// reporter its largest claim plus a page, and the O(1) count stays the
        /// sum of the clamped claims.
        #[test]
        fn arbitrary_pages_stay_bounded(
            pages in proptest::collection::vec(
                (0u8..4, proptest::prop_oneof![0u64..40, 0u64..u64::MAX >> 2], 0u64..3, proptest::collection::vec((0u32..500, 0u64..1 << 40), 0..=32)),
                0..200,
            ),
            removals in proptest::collection::vec(0u8..4, 0..5),
        ) {
            let cap = 300;
            let mut s = RosterStore::<u8>::new(cap);
            // Largest claim each reporter made (entries admitted under it
            // stay until they expire, even if the claim shrinks).
            let mut most = [0u64; 4];
            for (k, (from, claim, first, entries)) in pages.into_iter().enumerate() {
                s.on_page(from, &page(claim, first, entries), Instant::ZERO);
                most[from as usize] = most[from as usize].max(s.receivers_of(&from));
                if let Some(r) = removals.get(k % 50) {
                    if k % 50 == 49 {
                        s.remove(r);
                        most[*r as usize] = 0;
                    }
                }
                proptest::prop_assert!(s.len() <= cap);
                let mut extra = 0;
                for r in s.reporters() {
                    let w = s.receivers_of(r);
                    proptest::prop_assert!((1..=MAX_SUBTREE_RECEIVERS).contains(&w));
                    extra += w - 1;
                    let held = s.entries().filter(|(k, _, _)| *k == r).count() as u64;
                    proptest::prop_assert!(held <= most[*r as usize] + MAX_ROSTER_PAGE as u64);
                }
                proptest::prop_assert_eq!(extra, s.extra());
            }
        }
    }

    #[test]
    fn order_of_reporters_does_not_matter() {
        // The same pages from distinct reporters, in either order, give the
        // same store (reporters' state is independent: commutative).
        let pages = [
            (1u8, page(5, 0, [(1, 3), (2, 4)])),
            (2u8, page(3, 0, [(9, 1)])),
        ];
        let mut a = RosterStore::<u8>::new(100);
        let mut b = RosterStore::<u8>::new(100);
        for (k, p) in &pages {
            a.on_page(*k, p, Instant::ZERO);
        }
        for (k, p) in pages.iter().rev() {
            b.on_page(*k, p, Instant::ZERO);
        }
        let list = |s: &RosterStore<u8>| -> Vec<(u8, SocketAddr, u64)> {
            s.entries()
                .map(|(k, a, e)| (*k, *a, e.cumulative))
                .collect()
        };
        assert_eq!(list(&a), list(&b));
        assert_eq!((a.extra(), a.max_fan_in()), (b.extra(), b.max_fan_in()));
    }
}
