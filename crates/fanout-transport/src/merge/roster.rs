//! A merger's roster of its subtree (`docs/wire.md` §4.8): the receiver count
//! and per-receiver progress it reports upstream in ROSTER pages, built from
//! its direct receiver children (their cumulative ACKs in the [`ChildTable`])
//! and from the pages its merger children report ([`RosterStore`]), so that
//! every parent up to the session sender knows how many receivers a merged
//! member stands for and how far each got (MCTCP's merged ACK alone hides them,
//! MCTCP §V.B).
//!
//! Pages go to the parent at most every [`MIN_PAGE_GAP`] and at least one
//! full cycle per [`ROSTER_CYCLE`] (bounded: at most 50 pages of at most
//! [`crate::wire::MAX_ROSTER_PAGE`] entries a second), and at once (after
//! the minimum gap) when the subtree's count changes.

use super::children::{Child, ChildTable};
use super::roster_store::{RosterStats, RosterStore};
use crate::wire::{RosterEntry, RosterFrame, MAX_ROSTER_PAGE};
use fanout_core::time::Instant;
use std::net::SocketAddr;
use std::time::Duration;

/// Most descendant entries a merger holds (from its merger children's
/// pages): about 0.8 MiB.
pub const MAX_MERGER_ROSTER_ENTRIES: usize = 8192;

/// One full cycle of pages takes at most about this long (unless the
/// minimum gap stretches it: beyond 50 pages).
pub const ROSTER_CYCLE: Duration = Duration::from_secs(1);

/// Least time between two pages.
pub const MIN_PAGE_GAP: Duration = Duration::from_millis(20);

/// The roster a merger keeps and pages upstream.
#[derive(Debug)]
pub struct SubtreeRoster {
    store: RosterStore<SocketAddr>,
    /// Key of the last entry sent in the current cycle: (child, receiver);
    /// a direct receiver child's key is (its address, its address).
    cursor: Option<(SocketAddr, SocketAddr)>,
    /// Entries sent so far in the current cycle.
    index: u64,
    next_page: Instant,
    last_sent: Option<Instant>,
    /// (children, Σ claims − children) when the last page went.
    last_count: Option<(usize, u64)>,
    pages_out: u64,
}

impl Default for SubtreeRoster {
    fn default() -> Self {
        SubtreeRoster {
            store: RosterStore::new(MAX_MERGER_ROSTER_ENTRIES),
            cursor: None,
            index: 0,
            next_page: Instant::ZERO,
            last_sent: None,
            last_count: None,
            pages_out: 0,
        }
    }
}

fn child_cumulative(c: &Child) -> u64 {
    c.ack
        .as_ref()
        .map(|a| a.cumulative)
        .or(c.start)
        .unwrap_or(0)
}

impl SubtreeRoster {
    /// Counters of the pages taken in.
    pub fn stats(&self) -> RosterStats {
        self.store.stats()
    }

    /// Pages sent upstream.
    pub fn pages_out(&self) -> u64 {
        self.pages_out
    }

    /// A merger child's page.
    pub fn on_page(&mut self, child: SocketAddr, f: &RosterFrame, now: Instant) {
        self.store.on_page(child, f, now);
    }

    /// Forgets what children no longer in `children` reported.
    pub fn retain_children(&mut self, children: &ChildTable) {
        self.store.retain(|a| children.get(a).is_some());
    }

    /// Receivers behind this merger: each child's claim, 1 for a child
    /// that never sent a page (a receiver). O(children).
    pub fn receivers(&self, children: &ChildTable) -> u64 {
        children
            .iter()
            .map(|(a, _)| self.store.receivers_of(a))
            .sum()
    }

    /// Largest fan-in in the subtree, this merger's own included.
    pub fn fan_in(&self, children: &ChildTable) -> u64 {
        (children.len() as u64).max(self.store.max_fan_in())
    }

    /// Every receiver of the subtree with its cumulative ACK: direct
    /// receiver children first-hand, the others as their mergers reported
    /// them. O(entries): for displays and tests.
    pub fn list(&self, children: &ChildTable) -> Vec<RosterEntry> {
        let mut out: Vec<RosterEntry> = children
            .iter()
            .filter(|(a, _)| !self.store.is_reporting(a))
            .map(|(a, c)| RosterEntry {
                addr: *a,
                cumulative: child_cumulative(c),
            })
            .collect();
        out.extend(self.store.entries().map(|(_, a, e)| RosterEntry {
            addr: *a,
            cumulative: e.cumulative,
        }));
        out
    }

    fn count_key(&self, children: &ChildTable) -> (usize, u64) {
        (children.len(), self.store.extra())
    }

    /// When the next page is due.
    pub fn next_due(&self, children: &ChildTable) -> Instant {
        if self.last_count != Some(self.count_key(children)) {
            return self.last_sent.map_or(Instant::ZERO, |t| t + MIN_PAGE_GAP);
        }
        self.next_page
    }

    /// Entries of the cycle after `cursor`, in key order, at most one page.
    fn page_after(
        &self,
        children: &ChildTable,
        cursor: Option<(SocketAddr, SocketAddr)>,
    ) -> Vec<((SocketAddr, SocketAddr), u64)> {
        let after = |k: &(SocketAddr, SocketAddr)| cursor.is_none_or(|c| *k > c);
        let direct = children
            .iter()
            .filter(|(a, _)| !self.store.is_reporting(a))
            .map(|(a, c)| ((*a, *a), child_cumulative(c)))
            .filter(|(k, _)| after(k));
        let mut below = self
            .store
            .entries_after(cursor)
            .map(|(k, a, e)| ((*k, *a), e.cumulative))
            .peekable();
        let mut direct = direct.peekable();
        let mut out = Vec::with_capacity(MAX_ROSTER_PAGE);
        while out.len() < MAX_ROSTER_PAGE {
            let take_direct = match (direct.peek(), below.peek()) {
                (Some(d), Some(b)) => d.0 <= b.0,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let next = if take_direct {
                direct.next()
            } else {
                below.next()
            };
            out.extend(next);
        }
        out
    }

    /// A page with the counts only (no entries), sent at `now` with the
    /// merged CONNECT: the parent knows the count from the admission on,
    /// and the first page with entries follows a cycle later (or after the
    /// least gap if the count changes).
    pub fn summary(&mut self, now: Instant, children: &ChildTable) -> RosterFrame {
        self.last_sent = Some(now);
        self.last_count = Some(self.count_key(children));
        self.next_page = now + ROSTER_CYCLE;
        RosterFrame {
            receivers: self.receivers(children),
            fan_in: self.fan_in(children),
            total: 0,
            first: 0,
            entries: Vec::new(),
        }
    }

    /// The next page, if one is due at `now`.
    pub fn poll_page(&mut self, now: Instant, children: &ChildTable) -> Option<RosterFrame> {
        if now < self.next_due(children) {
            return None;
        }
        let mut items = self.page_after(children, self.cursor);
        if items.is_empty() && self.cursor.is_some() {
            self.cursor = None;
            self.index = 0;
            items = self.page_after(children, None);
        }
        let direct = children
            .iter()
            .filter(|(a, _)| !self.store.is_reporting(a))
            .count();
        let total = (direct + self.store.len()) as u64;
        let first = self.index;
        self.index += items.len() as u64;
        self.cursor = items.last().map(|(k, _)| *k).or(self.cursor);
        let pages = total.div_ceil(MAX_ROSTER_PAGE as u64).max(1);
        let gap = (ROSTER_CYCLE / pages.min(u64::from(u32::MAX)) as u32).max(MIN_PAGE_GAP);
        self.next_page = now + gap;
        self.last_sent = Some(now);
        self.last_count = Some(self.count_key(children));
        self.pages_out += 1;
        Some(RosterFrame {
            receivers: self.receivers(children),
            fan_in: self.fan_in(children),
            total,
            first,
            entries: items
                .into_iter()
                .map(|((_, addr), cumulative)| RosterEntry { addr, cumulative })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::ack_meet::AckSummary;
    use crate::merge::join::ConnectSummary;
    use crate::wire::WireTimestamp;
    use std::collections::BTreeMap;

    fn addr(i: u32) -> SocketAddr {
        SocketAddr::from((std::net::Ipv4Addr::from(0x0a00_0000 + i), 7000))
    }

    fn table(n: u32) -> ChildTable {
        let mut t = ChildTable::new(Duration::from_secs(30), 256);
        let opts = ConnectSummary {
            max_payload: 1400,
            window: 1 << 20,
        };
        for i in 1..=n {
            t.insert(addr(i), opts, WireTimestamp(0), Instant::ZERO)
                .unwrap();
            t.admit(&addr(i), 0, Instant::ZERO);
            let mut a = AckSummary::at_start(0, 1 << 20);
            a.cumulative = u64::from(i) * 100;
            a.window_end = a.cumulative + (1 << 20);
            t.set_ack(&addr(i), a, Instant::ZERO);
        }
        t
    }

    /// Collects one full cycle of pages into addr → cumulative.
    fn cycle(r: &mut SubtreeRoster, t: &ChildTable, mut now: Instant) -> BTreeMap<SocketAddr, u64> {
        let mut seen = BTreeMap::new();
        let mut expect_first = None;
        for _ in 0..1000 {
            now = now.max(r.next_due(t));
            let p = r.poll_page(now, t).expect("due");
            if p.first == 0 && expect_first.is_some() {
                return seen;
            }
            assert_eq!(Some(p.first), expect_first.or(Some(0)));
            assert!(p.entries.len() <= MAX_ROSTER_PAGE);
            expect_first = Some(p.first + p.entries.len() as u64);
            for e in p.entries {
                assert!(seen.insert(e.addr, e.cumulative).is_none(), "listed twice");
            }
        }
        panic!("no cycle end");
    }

    #[test]
    fn a_cycle_lists_direct_and_reported_receivers_once() {
        let t = table(40);
        let mut r = SubtreeRoster::default();
        // Child 1 is a merger for 50 receivers (it sent a page).
        let entries = (0..50)
            .map(|i| RosterEntry {
                addr: addr(1000 + i),
                cumulative: 7,
            })
            .collect::<Vec<_>>();
        for (k, chunk) in entries.chunks(MAX_ROSTER_PAGE).enumerate() {
            let p = RosterFrame {
                receivers: 50,
                fan_in: 9,
                total: 50,
                first: (k * MAX_ROSTER_PAGE) as u64,
                entries: chunk.to_vec(),
            };
            r.on_page(addr(1), &p, Instant::ZERO);
        }
        assert_eq!(r.receivers(&t), 39 + 50);
        assert_eq!(r.fan_in(&t), 40);
        let seen = cycle(&mut r, &t, Instant::ZERO);
        assert_eq!(seen.len(), 39 + 50);
        assert!(!seen.contains_key(&addr(1)), "a merger is not a receiver");
        assert_eq!(seen[&addr(2)], 200);
        assert_eq!(seen[&addr(1010)], 7);
        assert_eq!(r.list(&t).len(), 89);
    }

    #[test]
    fn pages_are_rate_limited_and_prompt_on_count_changes() {
        let t = table(4);
        let mut r = SubtreeRoster::default();
        let t0 = Instant::ZERO + Duration::from_secs(1);
        assert!(r.poll_page(t0, &t).is_some(), "first page at once");
        assert!(r.poll_page(t0, &t).is_none());
        assert_eq!(r.next_due(&t), t0 + ROSTER_CYCLE, "one page per cycle");
        // A child's claim changes the count: a page after the least gap.
        r.on_page(
            addr(2),
            &RosterFrame {
                receivers: 10,
                fan_in: 3,
                total: 0,
                first: 0,
                entries: vec![],
            },
            t0,
        );
        assert_eq!(r.next_due(&t), t0 + MIN_PAGE_GAP);
        let p = r.poll_page(t0 + MIN_PAGE_GAP, &t).unwrap();
        assert_eq!(p.receivers, 13);
    }
}
