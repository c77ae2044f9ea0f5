//! Members by source address. IPv4 addresses (the common case) are keyed
//! by one `u64` (address and port) in a sorted array searched without
//! branches: O(log N) per lookup; adding or removing a member moves at
//! most N keys (a memmove of a few KiB, not per ACK). In front of it, a
//! small 2-way set-associative cache of `key → slot` (8 bytes an entry,
//! 2–4 entries per member) answers most lookups, the per-ACK cost, in
//! O(1): one multiply and one cache line. A miss (addresses sharing a
//! set, or chosen to collide) costs the binary search and refills the
//! entry, so the worst case stays O(log N) whatever the addresses.
//! Other addresses are kept in a B-tree by the full [`SocketAddr`].

use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Address → slot.
#[derive(Debug, Default)]
pub struct AddrIndex {
    /// Sorted `ip << 16 | port` of IPv4 members.
    v4_keys: Vec<u64>,
    /// Slot of each key in `v4_keys`.
    v4_slots: Vec<u32>,
    other: BTreeMap<SocketAddr, u32>,
    /// Lookup cache: sets of 2 entries `key << 16 | (slot + 1)` (0 =
    /// empty; slots above [`MAX_CACHED_SLOT`] are not cached), the most
    /// recently filled first. A power of two of sets, at least one per
    /// IPv4 member; every entry agrees with `v4_keys`/`v4_slots`.
    cache: Vec<u64>,
}

/// Largest slot the cache holds (its entries keep the slot in 16 bits).
const MAX_CACHED_SLOT: u32 = 0xFFFE;

/// `ip << 16 | port` for IPv4.
fn v4_key(addr: &SocketAddr) -> Option<u64> {
    match addr {
        SocketAddr::V4(a) => Some((u64::from(u32::from(*a.ip())) << 16) | u64::from(a.port())),
        SocketAddr::V6(_) => None,
    }
}

impl AddrIndex {
    /// Index of the first key at or above `k` in `v4_keys` (branch-free).
    fn lower_bound(&self, k: u64) -> usize {
        let keys = &self.v4_keys[..];
        let (mut base, mut n) = (0usize, keys.len());
        while n > 1 {
            let half = n / 2;
            base = if keys[base + half - 1] < k {
                base + half
            } else {
                base
            };
            n -= half;
        }
        base + usize::from(n == 1 && keys[base] < k)
    }

    /// Index of the first entry of `k`'s cache set (the cache is not empty).
    #[inline]
    fn set_of(&self, k: u64) -> usize {
        // Fibonacci hashing: the top bits of the product pick the set.
        let sets = self.cache.len() / 2;
        let h = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - sets.trailing_zeros());
        2 * (h as usize & (sets - 1))
    }

    /// Drops `k` from the cache.
    fn uncache(&mut self, k: u64) {
        if self.cache.is_empty() {
            return;
        }
        let i = self.set_of(k);
        for e in &mut self.cache[i..i + 2] {
            if *e != 0 && *e >> 16 == k {
                *e = 0;
            }
        }
    }

    /// Caches `k → slot` as the most recent entry of its set.
    fn cache_fill(&mut self, k: u64, slot: u32) {
        if self.cache.is_empty() || slot > MAX_CACHED_SLOT {
            return;
        }
        let i = self.set_of(k);
        let first = self.cache[i];
        if first != 0 && first >> 16 != k {
            self.cache[i + 1] = first;
        }
        self.cache[i] = (k << 16) | u64::from(slot + 1);
    }

    /// Maps `addr` to `slot`.
    pub fn insert(&mut self, addr: SocketAddr, slot: u32) {
        match v4_key(&addr) {
            Some(k) => {
                let i = self.lower_bound(k);
                if self.v4_keys.get(i) == Some(&k) {
                    self.v4_slots[i] = slot;
                    self.uncache(k);
                } else {
                    self.v4_keys.insert(i, k);
                    self.v4_slots.insert(i, slot);
                }
                if self.cache.len() < 2 * self.v4_keys.len() {
                    // Grow to a set per member (amortised O(1) per insert);
                    // entries refill as members are looked up.
                    let sets = self.v4_keys.len().next_power_of_two().max(8);
                    self.cache = vec![0; 2 * sets];
                }
                self.cache_fill(k, slot);
            }
            None => {
                self.other.insert(addr, slot);
            }
        }
    }

    /// Forgets `addr`.
    pub fn remove(&mut self, addr: &SocketAddr) {
        match v4_key(addr) {
            Some(k) => {
                let i = self.lower_bound(k);
                if self.v4_keys.get(i) == Some(&k) {
                    self.v4_keys.remove(i);
                    self.v4_slots.remove(i);
                    self.uncache(k);
                }
            }
            None => {
                self.other.remove(addr);
            }
        }
    }

    /// The slot of `addr`: O(1) when cached, else O(log N) (and cached).
    #[inline]
    pub fn get(&mut self, addr: &SocketAddr) -> Option<u32> {
        match v4_key(addr) {
            Some(k) => {
                if !self.cache.is_empty() {
                    let i = self.set_of(k);
                    for &e in &self.cache[i..i + 2] {
                        if e >> 16 == k && e != 0 {
                            return Some((e & 0xFFFF) as u32 - 1);
                        }
                    }
                }
                let i = self.lower_bound(k);
                let slot = (self.v4_keys.get(i) == Some(&k)).then(|| self.v4_slots[i])?;
                self.cache_fill(k, slot);
                Some(slot)
            }
            None => self.other.get(addr).copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_and_v6_addresses() {
        let mut m = AddrIndex::default();
        let a: SocketAddr = "10.0.0.1:7000".parse().expect("literal");
        let b: SocketAddr = "10.0.0.1:7001".parse().expect("literal");
        let c: SocketAddr = "[fe80::1]:7000".parse().expect("literal");
        m.insert(a, 1);
        m.insert(b, 2);
        m.insert(c, 3);
        assert_eq!(
            (m.get(&a), m.get(&b), m.get(&c)),
            (Some(1), Some(2), Some(3))
        );
        m.remove(&a);
        m.remove(&c);
        assert_eq!((m.get(&a), m.get(&b), m.get(&c)), (None, Some(2), None));
        // Many keys, inserted out of order, all found; absent ones not.
        for i in (0..500u32).rev().step_by(2) {
            m.insert(SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 9)), i);
        }
        for i in 0..500u32 {
            let got = m.get(&SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 9)));
            assert_eq!(got, (i % 2 == 1).then_some(i), "{i}");
        }
    }

    /// Random inserts, re-maps and removals against a `BTreeMap`, with
    /// few distinct ports and addresses (many cache-set conflicts) and
    /// slots too large to cache.
    #[test]
    fn cached_lookups_match_a_model() {
        let mut m = AddrIndex::default();
        let mut model: BTreeMap<SocketAddr, u32> = BTreeMap::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let r = next();
            let addr = SocketAddr::from((
                [192, 168, (r >> 8) as u8 % 4, r as u8],
                7000 + (r >> 16) as u16 % 3,
            ));
            match (r >> 32) % 8 {
                0 => {
                    m.remove(&addr);
                    model.remove(&addr);
                }
                1 | 2 => {
                    let slot = match (r >> 40) % 4 {
                        0 => 70_000 + (r >> 48) as u32,
                        _ => (r >> 48) as u32 % 5000,
                    };
                    m.insert(addr, slot);
                    model.insert(addr, slot);
                }
                _ => assert_eq!(m.get(&addr), model.get(&addr).copied(), "{addr}"),
            }
        }
        for (a, s) in &model {
            assert_eq!(m.get(a), Some(*s));
        }
    }
}
