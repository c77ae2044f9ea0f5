//! A tournament (winner) tree over slots with deferred updates: setting a
//! leaf is O(1); reading the winner first recomputes the ancestors of the
//! leaves set since the last read, level by level, each node once, and
//! stops climbing where a node's winner did not change. `k` updates between
//! two reads cost O(min(k log N, N + k)): O(log N) each, amortised O(1)
//! when many members ACK between two sends.

/// An empty leaf (loses to every entry).
pub const EMPTY: u128 = u128::MAX;

/// The smallest of per-slot `u128` keys.
#[derive(Debug)]
pub struct Tournament {
    /// Heap layout: node 1 is the root, node `i` has children `2i` and
    /// `2i + 1`, slot `s` is the leaf `cap + s`. A node holds the smallest
    /// key below it ([`EMPTY`] if none) — once its pending updates are done.
    best: Vec<u128>,
    /// Leaves: a power of two, at least 1.
    cap: usize,
    /// Internal nodes to recompute, all on the same level (the leaves'
    /// parents) until a read flushes them.
    pending: Vec<u32>,
    /// Per internal node: already in `pending` (or the level being built).
    queued: Vec<bool>,
    /// Scratch for the next level during a flush (kept to avoid allocating).
    next: Vec<u32>,
}

impl Default for Tournament {
    fn default() -> Self {
        Tournament {
            best: vec![EMPTY; 2],
            cap: 1,
            pending: Vec::new(),
            queued: vec![false; 1],
            next: Vec::new(),
        }
    }
}

impl Tournament {
    /// The key of `slot`'s leaf ([`EMPTY`] if none).
    #[inline]
    pub fn leaf(&self, slot: usize) -> u128 {
        if slot < self.cap {
            self.best[self.cap + slot]
        } else {
            EMPTY
        }
    }

    /// Sets `slot`'s key ([`EMPTY`] removes it); its ancestors are
    /// recomputed at the next [`Tournament::flush`].
    #[inline]
    pub fn set(&mut self, slot: usize, key: u128) {
        if slot >= self.cap {
            self.grow(slot + 1);
        }
        let leaf = self.cap + slot;
        self.best[leaf] = key;
        let p = leaf >> 1;
        if p >= 1 && !self.queued[p] {
            self.queued[p] = true;
            self.pending.push(p as u32);
        }
    }

    /// Brings every node up to date.
    pub fn flush(&mut self) {
        if let [p] = self.pending[..] {
            // One leaf changed (the common case between two reads): climb.
            self.pending.clear();
            let mut p = p as usize;
            self.queued[p] = false;
            while p >= 1 {
                let (l, r) = (self.best[2 * p], self.best[2 * p + 1]);
                let w = if r < l { r } else { l };
                if self.best[p] == w {
                    return;
                }
                self.best[p] = w;
                p >>= 1;
            }
            return;
        }
        while !self.pending.is_empty() {
            self.next.clear();
            for &p in &self.pending {
                let p = p as usize;
                self.queued[p] = false;
                let (l, r) = (self.best[2 * p], self.best[2 * p + 1]);
                // Branch-free: which child wins is unpredictable.
                let w = if r < l { r } else { l };
                if self.best[p] != w {
                    self.best[p] = w;
                    let g = p >> 1;
                    if g >= 1 && !self.queued[g] {
                        self.queued[g] = true;
                        self.next.push(g as u32);
                    }
                }
            }
            std::mem::swap(&mut self.pending, &mut self.next);
        }
    }

    /// The smallest key ([`EMPTY`] if none); call [`Tournament::flush`] first.
    pub fn winner(&self) -> u128 {
        debug_assert!(self.pending.is_empty());
        self.best[1]
    }

    /// The slot holding the smallest key, down the path of nodes holding
    /// it (keys are unique); call [`Tournament::flush`] first. O(log N).
    pub fn winner_slot(&self) -> Option<usize> {
        let t = self.winner();
        if t == EMPTY {
            return None;
        }
        let mut i = 1;
        while i < self.cap {
            // Branch-free: left unless the left subtree lacks the key.
            i = 2 * i + usize::from(self.best[2 * i] != t);
        }
        Some(i - self.cap)
    }

    /// Doubles the leaves until `slots` fit and rebuilds every node: O(N),
    /// amortised O(1) per slot added.
    fn grow(&mut self, slots: usize) {
        let cap = slots.next_power_of_two();
        let mut best = vec![EMPTY; 2 * cap];
        best[cap..cap + self.cap].copy_from_slice(&self.best[self.cap..]);
        for p in (1..cap).rev() {
            best[p] = best[2 * p].min(best[2 * p + 1]);
        }
        self.best = best;
        self.cap = cap;
        self.pending.clear();
        self.queued = vec![false; cap];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deferred_updates_give_the_minimum() {
        let mut t = Tournament::default();
        for s in 0..37 {
            t.set(s, 100 + (s as u128 * 7919) % 37);
        }
        t.flush();
        assert_eq!(t.winner(), 100);
        let slot = t.winner_slot().expect("non-empty");
        assert_eq!(t.leaf(slot), 100);
        t.set(slot, EMPTY);
        t.set(5, 3);
        t.set(6, 2);
        t.set(6, 50);
        t.flush();
        assert_eq!((t.winner(), t.winner_slot()), (3, Some(5)));
        for s in 0..37 {
            t.set(s, EMPTY);
        }
        t.flush();
        assert_eq!((t.winner(), t.winner_slot()), (EMPTY, None));
    }
}
