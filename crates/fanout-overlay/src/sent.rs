//! What a child holds, as far as its parent knows: which source symbols
//! it was given and how many symbols each block still needs. A host that
//! has decoded serves a child from its own copy of the object the source
//! symbols it lacks, instead of reading its parent for it (which would
//! make every host up to the source keep sending for the slowest host
//! below it).
//!
//! Source symbols are slices of the object: giving them costs a copy and
//! a tag, no coding. A block decodes from any K distinct symbols (RFC
//! 6330: K with high probability, K + 1 or K + 2 almost always), so a
//! block needs K less the symbols given, source or repair; a child that
//! still lacks one or two once every block's need is met is served by
//! the parent's stream again.
//!
//! A child that moves to a new parent says what it holds (its "have":
//! the same record, from its decoder), so the new parent gives it only
//! what it lacks and a move costs nothing (ROMA §IV).

/// Bytes of a have message's header: `"FOVH"`, body length (u32).
pub const HAVE_HEADER: usize = 8;
/// A have message's first bytes.
pub const HAVE_MAGIC: &[u8; 4] = b"FOVH";

/// Source symbols given to one child and each block's need, per block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentSource {
    /// Each block's source symbol count (K).
    k: Vec<u32>,
    /// Each block's source symbols given, a bit per encoding symbol id
    /// below K.
    given: Vec<Vec<u64>>,
    /// Each block's symbols still needed (K less those given, source or
    /// repair; 0 once decoded).
    need: Vec<u32>,
    /// Each block's lowest id that may not have been given.
    from: Vec<u32>,
    /// The block the next symbol comes from (one of each block in turn,
    /// so the child's blocks fill evenly).
    turn: usize,
}

impl SentSource {
    /// A record for an object whose blocks have `k` source symbols each,
    /// nothing given.
    pub fn new(k: &[u32]) -> Self {
        SentSource {
            k: k.to_vec(),
            given: k
                .iter()
                .map(|&k| vec![0; (k as usize).div_ceil(64)])
                .collect(),
            need: k.to_vec(),
            from: vec![0; k.len()],
            turn: 0,
        }
    }

    /// Symbol `esi` of block `sbn` was given: a source symbol once, a
    /// repair symbol each time (a stream never repeats one); ids of blocks
    /// the object does not have are ignored.
    pub fn mark(&mut self, sbn: u8, esi: u32) {
        let b = usize::from(sbn);
        let Some(&k) = self.k.get(b) else {
            return;
        };
        if esi < k {
            let w = &mut self.given[b][(esi / 64) as usize];
            if *w & (1 << (esi % 64)) != 0 {
                return;
            }
            *w |= 1 << (esi % 64);
        }
        self.need[b] = self.need[b].saturating_sub(1);
    }

    /// Block `sbn` is whole (decoded): it needs nothing more.
    pub fn complete(&mut self, sbn: u8) {
        if let Some(n) = self.need.get_mut(usize::from(sbn)) {
            *n = 0;
        }
    }

    /// Symbols still needed, all blocks.
    pub fn left(&self) -> u64 {
        self.need.iter().map(|&n| u64::from(n)).sum()
    }

    /// The next source symbol not given of a block that still needs one,
    /// blocks in turn (`None` when no block needs one): recorded as given.
    pub fn take_next(&mut self) -> Option<(u8, u32)> {
        for _ in 0..self.k.len() {
            let b = self.turn;
            self.turn = (self.turn + 1) % self.k.len();
            if self.need[b] == 0 {
                continue;
            }
            while self.from[b] < self.k[b] {
                let esi = self.from[b];
                self.from[b] += 1;
                if self.given[b][(esi / 64) as usize] & (1 << (esi % 64)) == 0 {
                    self.mark(b as u8, esi);
                    return Some((b as u8, esi));
                }
            }
        }
        None
    }

    /// What `other` (a record of the same object) says was given counts
    /// here too: the union of the symbols given, the lesser need.
    pub fn merge(&mut self, other: &SentSource) {
        if other.k != self.k {
            return;
        }
        for (mine, theirs) in self.given.iter_mut().zip(&other.given) {
            for (a, b) in mine.iter_mut().zip(theirs) {
                *a |= b;
            }
        }
        for (a, b) in self.need.iter_mut().zip(&other.need) {
            *a = (*a).min(*b);
        }
    }

    /// The have message saying what this record says is held:
    /// `"FOVH" | body length (u32) | per block: need (u32) | bits given
    /// (⌈K/8⌉ bytes, least significant bit first)`.
    pub fn have_message(&self) -> Vec<u8> {
        let body: usize = self.k.iter().map(|&k| 4 + (k as usize).div_ceil(8)).sum();
        let mut m = Vec::with_capacity(HAVE_HEADER + body);
        m.extend_from_slice(HAVE_MAGIC);
        m.extend_from_slice(&(body as u32).to_be_bytes());
        for (b, &k) in self.k.iter().enumerate() {
            m.extend_from_slice(&self.need[b].to_be_bytes());
            let bytes = (k as usize).div_ceil(8);
            m.extend(
                self.given[b]
                    .iter()
                    .flat_map(|w| w.to_le_bytes())
                    .take(bytes),
            );
        }
        m
    }

    /// The record a have message's `body` describes, for an object whose
    /// blocks have `k` source symbols each: `None` when the body is not
    /// one of that object's (its length, a need above K, a bit past K).
    pub fn from_have(k: &[u32], body: &[u8]) -> Option<Self> {
        let mut s = SentSource::new(k);
        let mut at = 0;
        for (b, &kb) in k.iter().enumerate() {
            let need = u32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?);
            at += 4;
            let bytes = (kb as usize).div_ceil(8);
            let bits = body.get(at..at + bytes)?;
            at += bytes;
            if need > kb {
                return None;
            }
            for (i, chunk) in bits.chunks(8).enumerate() {
                let mut w = [0u8; 8];
                w[..chunk.len()].copy_from_slice(chunk);
                s.given[b][i] = u64::from_le_bytes(w);
            }
            let past = s.given[b].len() as u32 * 64 - kb;
            if past > 0 && s.given[b].last().is_some_and(|w| w >> (64 - past) != 0) {
                return None;
            }
            s.need[b] = need;
        }
        (at == body.len()).then_some(s)
    }
}

/// A have message's body length from its header (the first
/// [`HAVE_HEADER`] bytes), at most `max` bytes: `None` when the header is
/// not a have's or the body is longer.
pub fn have_body_len(header: &[u8], max: usize) -> Option<usize> {
    if header.len() < HAVE_HEADER || &header[..4] != HAVE_MAGIC {
        return None;
    }
    let n = u32::from_be_bytes(header[4..8].try_into().ok()?) as usize;
    (n <= max).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_each_missing_source_symbol_once_block_by_block() {
        let mut s = SentSource::new(&[3, 70, 2]);
        assert_eq!(s.left(), 75);
        s.mark(1, 0);
        s.mark(1, 0);
        s.mark(1, 65);
        s.mark(0, 1);
        // Unknown blocks: not the object's.
        s.mark(9, 0);
        assert_eq!(s.left(), 72);
        let first: Vec<(u8, u32)> = (0..6).map(|_| s.take_next().unwrap()).collect();
        assert_eq!(first, [(0, 0), (1, 1), (2, 0), (0, 2), (1, 2), (2, 1)]);
        let mut rest = Vec::new();
        while let Some(x) = s.take_next() {
            rest.push(x);
        }
        assert_eq!(rest.len(), 66);
        assert!(rest.iter().all(|&(b, _)| b == 1));
        assert!(!rest.contains(&(1, 65)) && !rest.contains(&(1, 0)));
        assert_eq!(s.left(), 0);
        assert_eq!(s.take_next(), None);
    }

    #[test]
    fn repair_symbols_and_decoded_blocks_lower_the_need() {
        let mut s = SentSource::new(&[4, 4]);
        // Two repair symbols of block 0: it needs two source symbols more.
        s.mark(0, 10);
        s.mark(0, 11);
        s.complete(1);
        assert_eq!(s.left(), 2);
        assert_eq!(s.take_next(), Some((0, 0)));
        assert_eq!(s.take_next(), Some((0, 1)));
        assert_eq!(s.take_next(), None);
    }

    #[test]
    fn a_have_message_carries_the_record_and_a_bad_one_is_refused() {
        let k = [70, 5];
        let mut s = SentSource::new(&k);
        for esi in [0, 3, 64, 69] {
            s.mark(0, esi);
        }
        s.mark(0, 100);
        s.complete(1);
        let m = s.have_message();
        let body = have_body_len(&m, 1 << 20).unwrap();
        assert_eq!(body, m.len() - HAVE_HEADER);
        let mut back = SentSource::from_have(&k, &m[HAVE_HEADER..]).unwrap();
        assert_eq!(back.left(), 65);
        assert_eq!(back.need, s.need);
        assert_eq!(back.given, s.given);
        // What it lacks comes next, never what it holds.
        assert_eq!(back.take_next(), Some((0, 1)));
        // Another layout, a cut body, a need above K, a bit past K.
        assert!(SentSource::from_have(&[70, 9], &m[HAVE_HEADER..]).is_none());
        assert!(SentSource::from_have(&k, &m[HAVE_HEADER..m.len() - 1]).is_none());
        let mut bad = m[HAVE_HEADER..].to_vec();
        bad[..4].copy_from_slice(&71u32.to_be_bytes());
        assert!(SentSource::from_have(&k, &bad).is_none());
        let mut bad = m[HAVE_HEADER..].to_vec();
        bad[4 + 8] |= 0x80;
        assert!(SentSource::from_have(&k, &bad).is_none());
        assert_eq!(have_body_len(&m, 10), None);
        assert_eq!(have_body_len(b"FOVXabcd", 1 << 20), None);
    }
}
