//! Which source symbols a child connection was given, so a host that has
//! decoded can serve the child from its own copy of the object the source
//! symbols it never had, instead of reading its parent for it (which
//! would make every host up to the source keep sending for the slowest
//! host below it).
//!
//! Source symbols are slices of the object: giving them costs a copy and
//! a tag, no coding, and the child decodes a block from them alone once
//! it holds all K. A child that reconnects starts with an empty record
//! (it may then get symbols it holds already; they are dropped there).

/// Source symbols given to one child, per block.
#[derive(Debug, Clone)]
pub struct SentSource {
    /// Each block's source symbol count (K).
    k: Vec<u32>,
    /// Each block's symbols given, a bit per encoding symbol id below K.
    given: Vec<Vec<u64>>,
    /// Each block's lowest id that may not have been given.
    from: Vec<u32>,
    /// The block the next symbol comes from (one of each block in turn,
    /// so the child's blocks fill evenly).
    turn: usize,
    /// Source symbols left to give, all blocks.
    left: u64,
}

impl SentSource {
    /// A record for an object whose blocks have `k` source symbols each.
    pub fn new(k: &[u32]) -> Self {
        SentSource {
            k: k.to_vec(),
            given: k
                .iter()
                .map(|&k| vec![0; (k as usize).div_ceil(64)])
                .collect(),
            from: vec![0; k.len()],
            turn: 0,
            left: k.iter().map(|&k| u64::from(k)).sum(),
        }
    }

    /// Symbol `esi` of block `sbn` was given (repair symbols and ids out
    /// of range are not recorded).
    pub fn mark(&mut self, sbn: u8, esi: u32) {
        let b = usize::from(sbn);
        if b >= self.k.len() || esi >= self.k[b] {
            return;
        }
        let (word, bit) = ((esi / 64) as usize, esi % 64);
        let w = &mut self.given[b][word];
        if *w & (1 << bit) == 0 {
            *w |= 1 << bit;
            self.left -= 1;
        }
    }

    /// Source symbols not given yet, all blocks.
    pub fn left(&self) -> u64 {
        self.left
    }

    /// The next source symbol not given, its block's turn coming round
    /// (`None` when every one was): recorded as given.
    pub fn take_next(&mut self) -> Option<(u8, u32)> {
        if self.left == 0 {
            return None;
        }
        for _ in 0..self.k.len() {
            let b = self.turn;
            self.turn = (self.turn + 1) % self.k.len();
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
        // Repair symbols, unknown blocks: not source symbols of the object.
        s.mark(0, 3);
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
}
