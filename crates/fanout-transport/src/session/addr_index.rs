//! Members by source address. IPv4 addresses (the common case) are keyed
//! by one `u64` (address and port) in a sorted array searched without
//! branches: O(log N) per lookup, the per-ACK cost; adding or removing a
//! member moves at most N keys (a memmove of a few KiB, not per ACK).
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
}

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

    /// Maps `addr` to `slot`.
    pub fn insert(&mut self, addr: SocketAddr, slot: u32) {
        match v4_key(&addr) {
            Some(k) => {
                let i = self.lower_bound(k);
                if self.v4_keys.get(i) == Some(&k) {
                    self.v4_slots[i] = slot;
                } else {
                    self.v4_keys.insert(i, k);
                    self.v4_slots.insert(i, slot);
                }
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
                }
            }
            None => {
                self.other.remove(addr);
            }
        }
    }

    /// The slot of `addr`.
    pub fn get(&self, addr: &SocketAddr) -> Option<u32> {
        match v4_key(addr) {
            Some(k) => {
                let i = self.lower_bound(k);
                (self.v4_keys.get(i) == Some(&k)).then(|| self.v4_slots[i])
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
}
