//! Coded (parity) repair: a systematic, MDS Reed–Solomon erasure code over
//! GF(2^8) for blocks of stream bytes (RFC 5510 semantics: `k` source
//! symbols of `T` bytes, repair symbols named by an encoding symbol id, any
//! `k` distinct symbols recover the block; the role RFC 6865 gives
//! Reed–Solomon in FECFRAME).
//!
//! Why: on a multicast session where hundreds of members lose packets
//! independently, nearly every segment is missed by someone, so per-segment
//! retransmission sends about one extra copy of everything. One repair
//! symbol of a block instead replaces a *different* missing segment at each
//! member; a block needs only as many repair symbols as the member missing
//! the most of it (NORM, RFC 5740 §2, works the same way).
//!
//! The generator is a Cauchy matrix: repair symbol `r` is
//! `Σ_j D_j / (x_r ⊕ j)` with `x_r = 64 + r` (GF(2^8) arithmetic of the
//! `reed-solomon-erasure` crate, polynomial 0x11d). Every square submatrix
//! of a Cauchy matrix is invertible, so any `e` repair symbols recover any
//! `e` missing source symbols, and each repair symbol is independent of how
//! many others are ever made (a later round just uses further ids). A
//! receiver missing `e` symbols solves an `e × e` system: decoding costs
//! `O(e·k·T)`, not `O(k²·T)`.
//!
//! Pure functions of untrusted sizes: callers check geometry
//! ([`BlockGeometry::new`]); the functions here return `None` rather than
//! panic on inconsistent input.

use reed_solomon_erasure::galois_8 as gf;
use std::ops::Range;

/// Most source symbols in one block (`k`).
pub const MAX_SOURCE_SYMBOLS: usize = 64;
/// Most repair symbols of one block: ids `0 ..= MAX_REPAIR_ID`
/// (`64 + id` must stay a field element distinct from every source index).
pub const MAX_REPAIR_ID: u8 = 191;

/// Where a block lies in the stream: `k` consecutive stripes of
/// `symbol_len` bytes from `start`, the last one `last_len` bytes long
/// (zero-padded to `symbol_len` for coding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockGeometry {
    /// Stream offset of the first byte.
    pub start: u64,
    /// Source symbols, `1 ..= MAX_SOURCE_SYMBOLS`.
    pub k: usize,
    /// Bytes per symbol (`T`), at least 1.
    pub symbol_len: usize,
    /// Bytes of the last stripe, `1 ..= symbol_len`.
    pub last_len: usize,
}

impl BlockGeometry {
    /// A checked geometry, or `None` if a field is out of range or the
    /// block's end overflows `limit` (exclusive end offset allowed).
    pub fn new(
        start: u64,
        k: usize,
        symbol_len: usize,
        last_len: usize,
        limit: u64,
    ) -> Option<Self> {
        if !(1..=MAX_SOURCE_SYMBOLS).contains(&k)
            || symbol_len == 0
            || !(1..=symbol_len).contains(&last_len)
        {
            return None;
        }
        let len = ((k - 1) as u64).checked_mul(symbol_len as u64)? + last_len as u64;
        start.checked_add(len).filter(|&e| e <= limit)?;
        Some(BlockGeometry {
            start,
            k,
            symbol_len,
            last_len,
        })
    }

    /// The geometry of the bytes `range` cut into stripes of `symbol_len`.
    pub fn covering(range: Range<u64>, symbol_len: usize) -> Option<Self> {
        let len = range.end.checked_sub(range.start)?;
        let t = symbol_len as u64;
        if len == 0 || t == 0 {
            return None;
        }
        let k = len.div_ceil(t) as usize;
        let last = (len - (k as u64 - 1) * t) as usize;
        BlockGeometry::new(range.start, k, symbol_len, last, u64::MAX)
    }

    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.start + ((self.k - 1) * self.symbol_len + self.last_len) as u64
    }

    /// Stream bytes of stripe `i < k`.
    pub fn stripe(&self, i: usize) -> Range<u64> {
        let a = self.start + (i * self.symbol_len) as u64;
        let len = if i + 1 == self.k {
            self.last_len
        } else {
            self.symbol_len
        };
        a..a + len as u64
    }

    /// Index of the stripe holding `offset` (which must lie in the block).
    pub fn stripe_of(&self, offset: u64) -> usize {
        ((offset - self.start) / self.symbol_len as u64) as usize
    }
}

/// Generator coefficient of source symbol `j` in repair symbol `id`:
/// `1 / ((64 + id) ⊕ j)` (Cauchy, never a division by zero since
/// `j < 64 ≤ 64 + id`).
fn coefficient(id: u8, j: usize) -> u8 {
    gf::div(1, (64 + id) ^ j as u8)
}

/// Repair symbol `id` of the block whose source symbols are `sources`
/// (each at most `symbol_len` bytes, shorter ones zero-padded). `None` if
/// `id` or the symbol count is out of range.
pub fn encode_repair(sources: &[&[u8]], symbol_len: usize, id: u8) -> Option<Vec<u8>> {
    if sources.is_empty() || sources.len() > MAX_SOURCE_SYMBOLS || id > MAX_REPAIR_ID {
        return None;
    }
    let mut out = vec![0u8; symbol_len];
    for (j, s) in sources.iter().enumerate() {
        let n = s.len().min(symbol_len);
        gf::mul_slice_xor(coefficient(id, j), &s[..n], &mut out[..n]);
    }
    Some(out)
}

/// Recovers the source symbols `missing` (distinct indices `< k`) of a
/// block from the others (`present(j)`, each at most `symbol_len` bytes,
/// zero-padded) and at least `missing.len()` repair symbols
/// `(id, bytes of symbol_len)` with distinct ids. Returns the missing
/// symbols in the order of `missing`, each `symbol_len` bytes; `None` on
/// inconsistent input (too few or malformed repair symbols, a missing
/// present symbol).
pub fn decode<'a>(
    k: usize,
    symbol_len: usize,
    missing: &[usize],
    present: impl Fn(usize) -> Option<&'a [u8]>,
    repairs: &[(u8, &[u8])],
) -> Option<Vec<Vec<u8>>> {
    let e = missing.len();
    if e == 0 || k == 0 || k > MAX_SOURCE_SYMBOLS || repairs.len() < e {
        return None;
    }
    if missing.iter().any(|&m| m >= k) {
        return None;
    }
    let repairs = &repairs[..e];
    let mut ids: Vec<u8> = repairs.iter().map(|r| r.0).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() != e
        || ids.iter().any(|&id| id > MAX_REPAIR_ID)
        || repairs.iter().any(|r| r.1.len() != symbol_len)
    {
        return None;
    }
    // s_r = P_r − Σ_{j present} c(r, j)·D_j  (− is ⊕ in GF(2^8)).
    let mut syndromes: Vec<Vec<u8>> = repairs.iter().map(|r| r.1.to_vec()).collect();
    for j in (0..k).filter(|j| !missing.contains(j)) {
        let d = present(j)?;
        let n = d.len().min(symbol_len);
        for (s, &(id, _)) in syndromes.iter_mut().zip(repairs) {
            gf::mul_slice_xor(coefficient(id, j), &d[..n], &mut s[..n]);
        }
    }
    // Solve A·D_missing = s with A[r][i] = c(id_r, missing_i).
    let a: Vec<Vec<u8>> = repairs
        .iter()
        .map(|&(id, _)| missing.iter().map(|&m| coefficient(id, m)).collect())
        .collect();
    let inv = invert(a)?;
    let mut out = vec![vec![0u8; symbol_len]; e];
    for (i, row) in inv.iter().enumerate() {
        for (r, &c) in row.iter().enumerate() {
            gf::mul_slice_xor(c, &syndromes[r], &mut out[i]);
        }
    }
    Some(out)
}

/// Inverse of a square matrix over GF(2^8) (Gauss–Jordan), `None` if
/// singular.
fn invert(mut a: Vec<Vec<u8>>) -> Option<Vec<Vec<u8>>> {
    let n = a.len();
    let mut inv: Vec<Vec<u8>> = (0..n)
        .map(|i| (0..n).map(|j| u8::from(i == j)).collect())
        .collect();
    for col in 0..n {
        let pivot = (col..n).find(|&r| a[r][col] != 0)?;
        a.swap(col, pivot);
        inv.swap(col, pivot);
        let scale = gf::div(1, a[col][col]);
        for j in 0..n {
            a[col][j] = gf::mul(a[col][j], scale);
            inv[col][j] = gf::mul(inv[col][j], scale);
        }
        for r in (0..n).filter(|&r| r != col) {
            let f = a[r][col];
            if f == 0 {
                continue;
            }
            for j in 0..n {
                a[r][j] ^= gf::mul(f, a[col][j]);
                inv[r][j] ^= gf::mul(f, inv[col][j]);
            }
        }
    }
    Some(inv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn block(k: usize, t: usize, last: usize, seed: u64) -> Vec<Vec<u8>> {
        let mut rng = fanout_core::Rng::new(seed);
        (0..k)
            .map(|j| {
                let n = if j + 1 == k { last } else { t };
                (0..n).map(|_| rng.below(256) as u8).collect()
            })
            .collect()
    }

    #[test]
    fn geometry() {
        let g = BlockGeometry::covering(100..100 + 3 * 10 + 4, 10).unwrap();
        assert_eq!((g.k, g.last_len, g.end()), (4, 4, 134));
        assert_eq!(g.stripe(0), 100..110);
        assert_eq!(g.stripe(3), 130..134);
        assert_eq!(g.stripe_of(129), 2);
        assert!(BlockGeometry::new(0, 0, 10, 1, u64::MAX).is_none());
        assert!(BlockGeometry::new(0, 65, 10, 1, u64::MAX).is_none());
        assert!(BlockGeometry::new(0, 2, 10, 11, u64::MAX).is_none());
        assert!(BlockGeometry::new(u64::MAX - 5, 2, 10, 1, u64::MAX).is_none());
        assert!(
            BlockGeometry::new(0, 2, 10, 10, 19).is_none(),
            "beyond limit"
        );
    }

    #[test]
    fn any_e_repairs_recover_any_e_losses() {
        let (k, t) = (32, 100);
        let src = block(k, t, 37, 7);
        let refs: Vec<&[u8]> = src.iter().map(|s| s.as_slice()).collect();
        let repairs: Vec<Vec<u8>> = (0..8)
            .map(|id| encode_repair(&refs, t, id).unwrap())
            .collect();
        for (missing, ids) in [
            (vec![0], vec![5u8]),
            (vec![31], vec![0]),
            (vec![3, 17, 31], vec![7, 2, 4]),
            (vec![0, 1, 2, 3, 4, 5, 6, 7], (0..8).collect()),
        ] {
            let reps: Vec<(u8, &[u8])> = ids
                .iter()
                .map(|&i| (i, repairs[i as usize].as_slice()))
                .collect();
            let got = decode(k, t, &missing, |j| Some(src[j].as_slice()), &reps).unwrap();
            for (m, d) in missing.iter().zip(&got) {
                assert_eq!(&d[..src[*m].len()], src[*m].as_slice(), "symbol {m}");
                assert!(d[src[*m].len()..].iter().all(|&b| b == 0), "padding");
            }
        }
    }

    #[test]
    fn inconsistent_input_is_refused() {
        let src = block(4, 8, 8, 1);
        let refs: Vec<&[u8]> = src.iter().map(|s| s.as_slice()).collect();
        let r0 = encode_repair(&refs, 8, 0).unwrap();
        let at = |j: usize| Some(src[j].as_slice());
        assert!(decode(4, 8, &[1, 2], at, &[(0, &r0)]).is_none(), "too few");
        assert!(
            decode(4, 8, &[1, 2], at, &[(0, &r0), (0, &r0)]).is_none(),
            "same id"
        );
        assert!(decode(4, 8, &[1], at, &[(0, &r0[..4])]).is_none(), "short");
        assert!(decode(4, 8, &[9], at, &[(0, &r0)]).is_none(), "index");
        assert!(
            decode(4, 8, &[1], |_| None, &[(0, &r0)]).is_none(),
            "no source"
        );
        assert!(encode_repair(&refs, 8, MAX_REPAIR_ID + 1).is_none());
        assert!(decode(4, 8, &[1], at, &[(MAX_REPAIR_ID + 1, &r0)]).is_none());
    }

    proptest! {
        /// Any k, any losses, any equally many distinct repair ids: the
        /// block comes back byte for byte.
        #[test]
        fn round_trip(k in 1usize..=MAX_SOURCE_SYMBOLS, t in 1usize..64, seed: u64,
                      picks in proptest::collection::vec(any::<u16>(), 1..12)) {
            let last = 1 + (seed as usize % t);
            let src = block(k, t, last, seed);
            let refs: Vec<&[u8]> = src.iter().map(|s| s.as_slice()).collect();
            let mut missing: Vec<usize> = picks.iter().map(|&p| p as usize % k).collect();
            missing.sort_unstable();
            missing.dedup();
            let ids: Vec<u8> = (0..missing.len())
                .map(|i| ((seed as usize + i * 37) % (MAX_REPAIR_ID as usize + 1)) as u8)
                .collect();
            let mut uniq = ids.clone();
            uniq.sort_unstable();
            uniq.dedup();
            prop_assume!(uniq.len() == ids.len());
            let reps: Vec<Vec<u8>> = ids.iter().map(|&i| encode_repair(&refs, t, i).unwrap()).collect();
            let pairs: Vec<(u8, &[u8])> = ids.iter().zip(&reps).map(|(&i, r)| (i, r.as_slice())).collect();
            let got = decode(k, t, &missing, |j| Some(src[j].as_slice()), &pairs).unwrap();
            for (m, d) in missing.iter().zip(&got) {
                prop_assert_eq!(&d[..src[*m].len()], src[*m].as_slice());
            }
        }
    }
}
