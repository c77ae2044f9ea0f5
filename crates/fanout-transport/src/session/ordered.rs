//! A member index ordered by one key (a minimum or maximum over members in
//! O(log N) per change): the session's send edge, release point and RTT.

use super::MemberId;
use std::collections::BTreeSet;

/// `(key, member)` pairs; each member appears at most once.
#[derive(Debug, Default)]
pub struct OrderedIndex {
    set: BTreeSet<(u64, MemberId)>,
}

impl OrderedIndex {
    /// Sets `id`'s key from `old` (if indexed) to `new`.
    pub fn update(&mut self, id: MemberId, old: Option<u64>, new: u64) {
        if old == Some(new) {
            return;
        }
        if let Some(o) = old {
            self.set.remove(&(o, id));
        }
        self.set.insert((new, id));
    }

    /// Removes `id` (indexed under `key`).
    pub fn remove(&mut self, id: MemberId, key: u64) {
        self.set.remove(&(key, id));
    }

    /// Smallest key and its member.
    pub fn min(&self) -> Option<(u64, MemberId)> {
        self.set.first().copied()
    }

    /// Largest key and its member.
    pub fn max(&self) -> Option<(u64, MemberId)> {
        self.set.last().copied()
    }

    /// The key at rank `k` from the smallest (0-based).
    pub fn nth(&self, k: usize) -> Option<(u64, MemberId)> {
        self.set.iter().nth(k).copied()
    }

    /// Members indexed.
    pub fn len(&self) -> usize {
        self.set.len()
    }
}
