//! Coded repair at a member ([`crate::fec`], `docs/wire.md` §4.9): REPAIR
//! symbols of a block are held until the member has as many as it misses
//! stripes of the block; then the missing stripes are decoded from the
//! received ones (still in the receive ring, [`RecvBuffer::copy_out`]) and
//! stored as ordinary received data — acknowledged like any segment.
//!
//! Bounds (the symbols are peer input): at most [`MAX_PARTIAL_BLOCKS`]
//! blocks held, [`MAX_HELD_REPAIR_BYTES`] of symbols in all, and per block
//! no more symbols than it misses stripes. Decoded bytes only ever fill
//! gaps: data already received or read is never overwritten, so a forged
//! symbol can do no more than a forged DATA frame from the sender's
//! address (files are verified end to end with BLAKE3 besides).

use super::Receiver;
use crate::fec::{self, BlockGeometry};
use crate::recv_buffer::RecvBuffer;
use crate::wire::RepairFrame;
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;

/// Most blocks with symbols held but not yet decodable, per member.
pub const MAX_PARTIAL_BLOCKS: usize = 8;
/// Most bytes of repair symbols held per member (256 KiB).
pub const MAX_HELD_REPAIR_BYTES: usize = 256 << 10;

/// Symbols of one block held until enough arrive.
#[derive(Debug)]
struct Partial {
    block: BlockGeometry,
    symbols: Vec<(u8, Box<[u8]>)>,
}

/// A member's coded-repair state (created on the first REPAIR).
#[derive(Debug, Default)]
pub struct CodedRx {
    partials: Vec<Partial>,
    held_bytes: usize,
    /// Repair symbols received (valid frames).
    pub symbols_received: u64,
    /// Blocks decoded.
    pub blocks_decoded: u64,
    /// Stream bytes recovered by decoding.
    pub bytes_decoded: u64,
    /// Symbols of blocks the member already held whole.
    pub symbols_unneeded: u64,
    /// Blocks given up: a stripe it holds was no longer in the ring, or
    /// the symbols were inconsistent.
    pub blocks_failed: u64,
}

/// Indices of the stripes of `block` with a byte never received.
fn missing_stripes(buffer: &RecvBuffer, block: &BlockGeometry) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    for gap in buffer.gaps_in(block.start..block.end()) {
        let (a, b) = (block.stripe_of(gap.start), block.stripe_of(gap.end - 1));
        for i in a..=b {
            if out.last() != Some(&i) {
                out.push(i);
            }
        }
    }
    out
}

impl CodedRx {
    /// Takes one symbol; returns the decoded stripes `(offset, bytes)` once
    /// the block can be decoded. `Err` names why the symbol was dropped.
    fn on_symbol(
        &mut self,
        f: &RepairFrame<'_>,
        buffer: &RecvBuffer,
        fin: Option<u64>,
    ) -> Result<Vec<(u64, Vec<u8>)>, DropReason> {
        let block = f.block;
        if block.end() > buffer.window_end() || fin.is_some_and(|e| block.end() > e) {
            return Err(DropReason::BeyondWindow);
        }
        self.symbols_received += 1;
        let missing = missing_stripes(buffer, &block);
        let at = self.partials.iter().position(|p| p.block == block);
        if missing.is_empty() {
            self.symbols_unneeded += 1;
            if let Some(i) = at {
                self.drop_partial(i);
            }
            return Err(DropReason::Duplicate);
        }
        if at.is_some_and(|i| self.partials[i].symbols.iter().any(|s| s.0 == f.id)) {
            return Err(DropReason::Duplicate);
        }
        // The bounds hold on every symbol, not only when a block starts:
        // room is made (dropping other blocks, oldest first) before this
        // one is held, or it is refused.
        let wanted = at.is_none_or(|i| self.partials[i].symbols.len() < missing.len());
        if wanted {
            self.make_room(buffer, f.symbol.len(), block, at.is_none());
            if self.held_bytes + f.symbol.len() > MAX_HELD_REPAIR_BYTES {
                return Err(DropReason::LimitExceeded);
            }
        }
        let i = match self.partials.iter().position(|p| p.block == block) {
            Some(i) => i,
            None => {
                self.partials.push(Partial {
                    block,
                    symbols: Vec::new(),
                });
                self.partials.len() - 1
            }
        };
        let p = &mut self.partials[i];
        if wanted {
            p.symbols.push((f.id, f.symbol.into()));
            self.held_bytes += f.symbol.len();
        }
        if p.symbols.len() < missing.len() {
            return Ok(Vec::new());
        }
        // Enough symbols: every stripe it holds must still be readable.
        let mut present: Vec<Vec<u8>> = vec![Vec::new(); block.k];
        let mut readable = true;
        for (j, s) in present.iter_mut().enumerate() {
            if missing.binary_search(&j).is_err() && !buffer.copy_out(block.stripe(j), s) {
                readable = false;
                break;
            }
        }
        let p = &self.partials[i];
        let reps: Vec<(u8, &[u8])> = p.symbols.iter().map(|(id, s)| (*id, &s[..])).collect();
        let decoded = readable
            .then(|| {
                fec::decode(
                    block.k,
                    block.symbol_len,
                    &missing,
                    |j| Some(present[j].as_slice()),
                    &reps,
                )
            })
            .flatten();
        self.drop_partial(i);
        let Some(decoded) = decoded else {
            self.blocks_failed += 1;
            return Err(DropReason::UnexpectedFrame);
        };
        self.blocks_decoded += 1;
        Ok(missing
            .iter()
            .zip(decoded)
            .map(|(&j, mut bytes)| {
                let r = block.stripe(j);
                bytes.truncate((r.end - r.start) as usize);
                (r.start, bytes)
            })
            .collect())
    }

    fn drop_partial(&mut self, i: usize) {
        let p = self.partials.swap_remove(i);
        self.held_bytes -= p.symbols.iter().map(|s| s.1.len()).sum::<usize>();
    }

    /// Frees what one more `symbol_len`-byte symbol of `keep` needs (and a
    /// block slot, if `keep` is new): blocks already whole first, then the
    /// oldest (lowest offset) other than `keep`.
    fn make_room(
        &mut self,
        buffer: &RecvBuffer,
        symbol_len: usize,
        keep: BlockGeometry,
        new_block: bool,
    ) {
        let mut i = 0;
        while i < self.partials.len() {
            if missing_stripes(buffer, &self.partials[i].block).is_empty() {
                self.drop_partial(i);
            } else {
                i += 1;
            }
        }
        while (new_block && self.partials.len() >= MAX_PARTIAL_BLOCKS)
            || self.held_bytes + symbol_len > MAX_HELD_REPAIR_BYTES
        {
            let Some(oldest) = (0..self.partials.len())
                .filter(|&i| self.partials[i].block != keep)
                .min_by_key(|&i| self.partials[i].block.start)
            else {
                return;
            };
            self.drop_partial(oldest);
        }
    }

    /// Bytes of symbols held now.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }
}

impl Receiver {
    /// A REPAIR frame from the session sender: hold or decode.
    pub(super) fn on_repair(&mut self, now: Instant, f: &RepairFrame<'_>) {
        let coded = self.coded.get_or_insert_with(Default::default);
        let decoded = match coded.on_symbol(f, &self.buffer, self.fin) {
            Ok(d) => d,
            Err(reason) => {
                self.stats.drops.count(reason);
                if reason == DropReason::Duplicate {
                    // As for a duplicate segment (RFC 5681 §4.2), ACK at
                    // once: the sender repairs what this receiver already
                    // holds, so the ACK that told it was lost. Without
                    // this, a sender blocked at its window's edge resends
                    // symbols at every RTO and never learns.
                    self.acks.on_segment(now, true);
                }
                return;
            }
        };
        if decoded.is_empty() {
            return;
        }
        let nxt_before = self.buffer.rcv_nxt();
        let mut stored = 0;
        for (offset, bytes) in &decoded {
            let gaps = self.buffer.gaps_in(*offset..*offset + bytes.len() as u64);
            for g in gaps {
                let a = (g.start - offset) as usize;
                let b = (g.end - offset) as usize;
                stored += self.buffer.insert(g.start, &bytes[a..b]).unwrap_or(0);
            }
        }
        self.stats.payload_bytes_received += stored;
        if let Some(c) = self.coded.as_mut() {
            c.bytes_decoded += stored;
        }
        // Like a retransmission filling a hole: acknowledge at once. The
        // ACK echoes the newest DATA timestamp (RFC 7323 §4.3 would take
        // the left-edge segment's, which a retransmission refreshes; a
        // decoded hole has none, and the old one would make the hole's
        // whole repair time an RTT sample).
        let filled = self.buffer.rcv_nxt() > nxt_before;
        if let Some((t, at)) = self.ts_latest {
            if filled && t.is_after(self.ts_recent) {
                self.ts_recent = t;
                self.ts_recent_at = Some(at);
            }
        }
        self.acks.on_segment(now, filled || stored > 0);
    }

    /// Coded-repair counters, once a REPAIR frame arrived.
    pub fn coded_repair(&self) -> Option<&CodedRx> {
        self.coded.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::RepairFrame;

    fn stream(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    fn symbol(data: &[u8], block: BlockGeometry, id: u8) -> Vec<u8> {
        let stripes: Vec<&[u8]> = (0..block.k)
            .map(|j| {
                let r = block.stripe(j);
                &data[r.start as usize..r.end as usize]
            })
            .collect();
        fec::encode_repair(&stripes, block.symbol_len, id).unwrap()
    }

    #[test]
    fn decodes_once_it_has_as_many_symbols_as_missing_stripes() {
        let data = stream(1000);
        let block = BlockGeometry::covering(0..1000, 100).unwrap();
        let mut buf = RecvBuffer::new(4096);
        for j in (0..10).filter(|&j| j != 2 && j != 7) {
            let r = block.stripe(j);
            buf.insert(r.start, &data[r.start as usize..r.end as usize])
                .unwrap();
        }
        // The application already read the first two stripes.
        let mut out = [0u8; 200];
        assert_eq!(buf.read(&mut out), 200);
        let mut rx = CodedRx::default();
        let s0 = symbol(&data, block, 0);
        let s9 = symbol(&data, block, 9);
        fn f(block: BlockGeometry, id: u8, s: &[u8]) -> RepairFrame<'_> {
            RepairFrame {
                block,
                id,
                symbol: s,
            }
        }
        assert_eq!(rx.on_symbol(&f(block, 0, &s0), &buf, None), Ok(Vec::new()));
        assert_eq!(
            rx.on_symbol(&f(block, 0, &s0), &buf, None),
            Err(DropReason::Duplicate)
        );
        let got = rx.on_symbol(&f(block, 9, &s9), &buf, None).unwrap();
        assert_eq!(
            got,
            vec![
                (200, data[200..300].to_vec()),
                (700, data[700..800].to_vec())
            ]
        );
        assert_eq!(rx.held_bytes(), 0);
        assert_eq!(rx.blocks_decoded, 1);
    }

    #[test]
    fn partial_blocks_are_bounded() {
        let buf = RecvBuffer::new(1 << 20);
        let mut rx = CodedRx::default();
        let sym = vec![1u8; 1000];
        for b in 0..100u64 {
            let block = BlockGeometry::covering(b * 10_000..b * 10_000 + 5000, 1000).unwrap();
            let f = RepairFrame {
                block,
                id: 0,
                symbol: &sym,
            };
            let _ = rx.on_symbol(&f, &buf, None);
            assert!(rx.partials.len() <= MAX_PARTIAL_BLOCKS);
            assert!(rx.held_bytes() <= MAX_HELD_REPAIR_BYTES);
        }
        assert!(rx.blocks_decoded == 0);
        // Every symbol counts, not only a block's first: blocks of 64
        // stripes, all missing, each held with 63 symbols of 1 000 bytes
        // (one short of decoding).
        let mut rx = CodedRx::default();
        let mut refused = 0;
        for b in 0..12u64 {
            let block = BlockGeometry::covering(b * 64_000..(b + 1) * 64_000, 1000).unwrap();
            for id in 0..63u8 {
                let f = RepairFrame {
                    block,
                    id,
                    symbol: &sym,
                };
                refused +=
                    u64::from(rx.on_symbol(&f, &buf, None) == Err(DropReason::LimitExceeded));
                assert!(
                    rx.held_bytes() <= MAX_HELD_REPAIR_BYTES,
                    "{}",
                    rx.held_bytes()
                );
                assert!(rx.partials.len() <= MAX_PARTIAL_BLOCKS);
            }
        }
        assert_eq!(refused, 0, "older blocks made room");
        assert!(rx.held_bytes() > MAX_HELD_REPAIR_BYTES - 63_000);
        let far = BlockGeometry::covering(2 << 20..(2 << 20) + 10, 10).unwrap();
        let s = [0u8; 10];
        let f = RepairFrame {
            block: far,
            id: 0,
            symbol: &s,
        };
        assert_eq!(rx.on_symbol(&f, &buf, None), Err(DropReason::BeyondWindow));
    }
}
