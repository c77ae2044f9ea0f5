//! A timer table: at most one deadline per key, the earliest found in
//! O(log n), expired ones popped in deadline order. Engines with many timers
//! (one per session member) keep them here instead of scanning.

use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};

/// Deadlines keyed by `K`; each key has at most one.
#[derive(Debug, Clone)]
pub struct TimerTable<K: Ord + Copy> {
    by_time: BTreeSet<(Instant, K)>,
    by_key: BTreeMap<K, Instant>,
}

impl<K: Ord + Copy> Default for TimerTable<K> {
    fn default() -> Self {
        TimerTable {
            by_time: BTreeSet::new(),
            by_key: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Copy> TimerTable<K> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key`'s deadline (`None` cancels it).
    pub fn set(&mut self, key: K, deadline: Option<Instant>) {
        match deadline {
            Some(t) => {
                if let Some(old) = self.by_key.insert(key, t) {
                    if old == t {
                        return;
                    }
                    self.by_time.remove(&(old, key));
                }
                self.by_time.insert((t, key));
            }
            None => {
                if let Some(old) = self.by_key.remove(&key) {
                    self.by_time.remove(&(old, key));
                }
            }
        }
    }

    /// `key`'s deadline.
    pub fn get(&self, key: K) -> Option<Instant> {
        self.by_key.get(&key).copied()
    }

    /// The earliest deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.by_time.first().map(|(t, _)| *t)
    }

    /// Removes and returns a key whose deadline is at or before `now`,
    /// earliest first.
    pub fn pop_expired(&mut self, now: Instant) -> Option<K> {
        let &(t, key) = self.by_time.first()?;
        if t > now {
            return None;
        }
        self.by_time.remove(&(t, key));
        self.by_key.remove(&key);
        Some(key)
    }

    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// True if no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn one_deadline_per_key_popped_in_order() {
        let mut t = TimerTable::new();
        t.set(1u32, Some(at(30)));
        t.set(2, Some(at(10)));
        t.set(3, Some(at(20)));
        t.set(1, Some(at(5))); // re-arm replaces
        t.set(3, None); // cancel
        assert_eq!(t.len(), 2);
        assert_eq!(t.next_deadline(), Some(at(5)));
        assert_eq!(t.pop_expired(at(4)), None);
        assert_eq!(t.pop_expired(at(10)), Some(1));
        assert_eq!(t.pop_expired(at(10)), Some(2));
        assert_eq!(t.pop_expired(at(100)), None);
        assert!(t.is_empty());
    }
}
