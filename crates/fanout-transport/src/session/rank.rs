//! An order-statistic treap over member slots: the k-th smallest key, and
//! inserts and removals, in O(log N) expected time.
//!
//! Nodes are the slots themselves (arrays indexed by slot number, no
//! allocation per operation). Heap priorities are a fixed mix of the
//! member id, independent of the keys: peers influence keys (through their
//! ACKs) but not ids, so the expected depth stays O(log N) whatever keys
//! they choose.

/// No node.
const NIL: u32 = u32::MAX;

/// Slots ordered by a unique 128-bit key, with subtree sizes.
#[derive(Debug)]
pub struct RankTree {
    /// Per slot: its key (meaningful while the slot is in the tree).
    key: Vec<u128>,
    /// Per slot: heap priority (a parent's is never below its children's).
    prio: Vec<u64>,
    left: Vec<u32>,
    right: Vec<u32>,
    /// Per slot: nodes in its subtree, itself included.
    size: Vec<u32>,
    root: u32,
}

impl Default for RankTree {
    fn default() -> Self {
        RankTree {
            key: Vec::new(),
            prio: Vec::new(),
            left: Vec::new(),
            right: Vec::new(),
            size: Vec::new(),
            root: NIL,
        }
    }
}

/// SplitMix64 finaliser: a fixed, well-mixed priority for an id.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl RankTree {
    fn size_of(&self, n: u32) -> u32 {
        if n == NIL {
            0
        } else {
            self.size[n as usize]
        }
    }

    fn fix(&mut self, n: u32) {
        let (l, r) = (self.left[n as usize], self.right[n as usize]);
        self.size[n as usize] = 1 + self.size_of(l) + self.size_of(r);
    }

    /// Adds `slot` under `key` (unique among entries); `id` seeds its priority.
    /// The slot must not be in the tree.
    pub fn insert(&mut self, slot: u32, id: u64, key: u128) {
        let i = slot as usize;
        if i >= self.key.len() {
            let n = i + 1;
            self.key.resize(n, 0);
            self.prio.resize(n, 0);
            self.left.resize(n, NIL);
            self.right.resize(n, NIL);
            self.size.resize(n, 0);
        }
        self.key[i] = key;
        self.prio[i] = mix(id);
        self.left[i] = NIL;
        self.right[i] = NIL;
        self.size[i] = 1;
        self.root = self.insert_at(self.root, slot);
    }

    fn insert_at(&mut self, t: u32, n: u32) -> u32 {
        if t == NIL {
            return n;
        }
        if self.prio[n as usize] > self.prio[t as usize] {
            let (l, r) = self.split(t, self.key[n as usize]);
            self.left[n as usize] = l;
            self.right[n as usize] = r;
            self.fix(n);
            return n;
        }
        if self.key[n as usize] < self.key[t as usize] {
            self.left[t as usize] = self.insert_at(self.left[t as usize], n);
        } else {
            self.right[t as usize] = self.insert_at(self.right[t as usize], n);
        }
        self.size[t as usize] += 1;
        t
    }

    /// Splits subtree `t` into keys below `key` and keys at or above it.
    fn split(&mut self, t: u32, key: u128) -> (u32, u32) {
        if t == NIL {
            return (NIL, NIL);
        }
        if self.key[t as usize] < key {
            let (l, r) = self.split(self.right[t as usize], key);
            self.right[t as usize] = l;
            self.fix(t);
            (t, r)
        } else {
            let (l, r) = self.split(self.left[t as usize], key);
            self.left[t as usize] = r;
            self.fix(t);
            (l, t)
        }
    }

    /// Joins two subtrees, every key of `a` below every key of `b`.
    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.prio[a as usize] > self.prio[b as usize] {
            self.right[a as usize] = self.merge(self.right[a as usize], b);
            self.fix(a);
            a
        } else {
            self.left[b as usize] = self.merge(a, self.left[b as usize]);
            self.fix(b);
            b
        }
    }

    /// Removes `slot` (in the tree under its current key).
    pub fn remove(&mut self, slot: u32) {
        let key = self.key[slot as usize];
        self.root = self.remove_at(self.root, key);
    }

    fn remove_at(&mut self, t: u32, key: u128) -> u32 {
        if t == NIL {
            return NIL;
        }
        let tk = self.key[t as usize];
        if tk == key {
            return self.merge(self.left[t as usize], self.right[t as usize]);
        }
        if key < tk {
            self.left[t as usize] = self.remove_at(self.left[t as usize], key);
        } else {
            self.right[t as usize] = self.remove_at(self.right[t as usize], key);
        }
        self.fix(t);
        t
    }

    /// The key at rank `k` from the smallest (0-based).
    pub fn nth(&self, mut k: usize) -> Option<u128> {
        let mut t = self.root;
        while t != NIL {
            let l = self.size_of(self.left[t as usize]) as usize;
            match k.cmp(&l) {
                std::cmp::Ordering::Less => t = self.left[t as usize],
                std::cmp::Ordering::Equal => return Some(self.key[t as usize]),
                std::cmp::Ordering::Greater => {
                    k -= l + 1;
                    t = self.right[t as usize];
                }
            }
        }
        None
    }
}
