//! One source block at a receiver: its symbols gathered until a decode
//! can be tried (K distinct ones: RaptorQ, RFC 6330, decodes from K
//! with high probability, from K + 1 or K + 2 almost always), the
//! decode under way (inline or as a [`crate::jobs::Job`]), then done.
//!
//! Memory is bounded whatever a parent sends: while collecting, symbols
//! are kept once per encoding symbol id and a decode is tried as soon as
//! K distinct ones are in, so at most K plus those of failed attempts
//! are held; while a decode is out, at most [`MAX_WAITING`] more wait
//! for a retry, and any beyond are dropped (counted as spare).

use raptorq::{EncodingPacket, PayloadId, SourceBlockDecoder};
use std::collections::BTreeSet;

/// Symbols of a block kept while its decode is out, for a retry should it
/// fail (a failed attempt needs one or two more, RFC 6330): 32 is
/// ample, and bounds what a parent can make a receiver hold meanwhile
/// (32 symbols a block).
pub const MAX_WAITING: usize = 32;

/// The distinct encoding symbol ids a block was given.
#[derive(Debug)]
struct Ids {
    /// A bit per source symbol id (below K).
    source: Vec<u64>,
    /// Source symbols among them.
    sources: u32,
    /// Repair symbol ids (K and above).
    repair: BTreeSet<u32>,
}

impl Ids {
    fn new(k: u32) -> Self {
        Ids {
            source: vec![0; (k as usize).div_ceil(64)],
            sources: 0,
            repair: BTreeSet::new(),
        }
    }

    fn contains(&self, k: u32, esi: u32) -> bool {
        if esi < k {
            self.source[(esi / 64) as usize] & (1 << (esi % 64)) != 0
        } else {
            self.repair.contains(&esi)
        }
    }

    /// Adds `esi` (not already in).
    fn insert(&mut self, k: u32, esi: u32) {
        if esi < k {
            self.source[(esi / 64) as usize] |= 1 << (esi % 64);
            self.sources += 1;
        } else {
            self.repair.insert(esi);
        }
    }

    fn len(&self) -> usize {
        self.sources as usize + self.repair.len()
    }
}

enum State {
    /// Gathering symbols: the decoder (holding those of failed attempts)
    /// and the symbols not yet given to it, each of a new id.
    Collecting {
        decoder: Box<SourceBlockDecoder>,
        fresh: Vec<EncodingPacket>,
    },
    /// Its decoder is out (in a job); symbols of new ids that came since,
    /// at most [`MAX_WAITING`].
    Decoding { waiting: Vec<EncodingPacket> },
    /// Decoded: its bytes are in the object.
    Decoded,
}

/// What became of a symbol offered to a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offer {
    /// Kept: a new id.
    Kept,
    /// An id it already has.
    Duplicate,
    /// Dropped: its decode is out and [`MAX_WAITING`] symbols wait.
    Spare,
    /// The block is decoded already.
    Decoded,
}

/// One source block's state at a receiver.
pub(crate) struct BlockRx {
    sbn: u8,
    /// Source symbols in it (K).
    k: u32,
    /// Ids it was given (emptied once decoded).
    ids: Ids,
    state: State,
}

impl std::fmt::Debug for BlockRx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Collecting { .. } => "collecting",
            State::Decoding { .. } => "decoding",
            State::Decoded => "decoded",
        };
        f.debug_struct("BlockRx")
            .field("sbn", &self.sbn)
            .field("k", &self.k)
            .field("ids", &self.ids.len())
            .field("state", &state)
            .finish()
    }
}

impl BlockRx {
    /// Block `sbn`, of `k` source symbols, decoded by `decoder`.
    pub(crate) fn new(sbn: u8, k: u32, decoder: SourceBlockDecoder) -> Self {
        BlockRx {
            sbn,
            k,
            ids: Ids::new(k),
            state: State::Collecting {
                decoder: Box::new(decoder),
                fresh: Vec::new(),
            },
        }
    }

    /// Symbol `esi` with its bytes.
    pub(crate) fn offer(&mut self, esi: u32, data: Vec<u8>) -> Offer {
        let kept = match &mut self.state {
            State::Decoded => return Offer::Decoded,
            _ if self.ids.contains(self.k, esi) => return Offer::Duplicate,
            State::Decoding { waiting } if waiting.len() >= MAX_WAITING => return Offer::Spare,
            State::Collecting { fresh, .. } => fresh,
            State::Decoding { waiting } => waiting,
        };
        kept.push(EncodingPacket::new(PayloadId::new(self.sbn, esi), data));
        self.ids.insert(self.k, esi);
        Offer::Kept
    }

    /// Whether a decode is worth trying now: collecting, K distinct ids
    /// in, and one the last attempt did not have.
    pub(crate) fn ready(&self) -> bool {
        matches!(&self.state, State::Collecting { fresh, .. } if !fresh.is_empty())
            && self.ids.len() >= self.k as usize
    }

    /// Whether every source symbol is in: the decode is a copy (RFC 6330
    /// codes are systematic), not worth a job.
    pub(crate) fn all_sources(&self) -> bool {
        self.ids.sources == self.k
    }

    /// Its decoder and the symbols not yet given to it, for a decode
    /// attempt; it is decoding from now on. `None` unless collecting.
    pub(crate) fn start_decode(
        &mut self,
    ) -> Option<(Box<SourceBlockDecoder>, Vec<EncodingPacket>)> {
        match std::mem::replace(
            &mut self.state,
            State::Decoding {
                waiting: Vec::new(),
            },
        ) {
            State::Collecting { decoder, fresh } => Some((decoder, fresh)),
            other => {
                self.state = other;
                None
            }
        }
    }

    /// Whether its decode is out.
    pub(crate) fn decoding(&self) -> bool {
        matches!(self.state, State::Decoding { .. })
    }

    /// The attempt failed: it collects again, its decoder back, the
    /// symbols that came meanwhile not yet given to it.
    pub(crate) fn decode_failed(&mut self, decoder: Box<SourceBlockDecoder>) {
        if let State::Decoding { waiting } = std::mem::replace(&mut self.state, State::Decoded) {
            self.state = State::Collecting {
                decoder,
                fresh: waiting,
            };
        }
    }

    /// It decoded: whatever it held is dropped.
    pub(crate) fn decoded(&mut self) {
        self.state = State::Decoded;
        self.ids = Ids::new(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raptorq::ObjectTransmissionInformation;

    fn block(k: u32) -> BlockRx {
        let oti = ObjectTransmissionInformation::new(u64::from(k) * 8, 8, 1, 1, 8);
        BlockRx::new(0, k, SourceBlockDecoder::new(0, &oti, u64::from(k) * 8))
    }

    #[test]
    fn a_block_is_ready_at_k_distinct_ids_and_holds_no_more_while_decoding() {
        let mut b = block(4);
        assert_eq!(b.offer(0, vec![0; 8]), Offer::Kept);
        assert_eq!(b.offer(0, vec![0; 8]), Offer::Duplicate);
        for esi in [1, 9, 10] {
            assert!(!b.ready());
            assert_eq!(b.offer(esi, vec![0; 8]), Offer::Kept);
        }
        assert!(b.ready() && !b.all_sources());
        let (_, symbols) = b.start_decode().unwrap();
        assert_eq!(symbols.len(), 4);
        assert!(b.decoding() && !b.ready() && b.start_decode().is_none());
        // Meanwhile: new ids wait, up to the bound.
        for esi in 0..MAX_WAITING as u32 {
            assert_eq!(b.offer(100 + esi, vec![0; 8]), Offer::Kept);
        }
        assert_eq!(b.offer(10_000, vec![0; 8]), Offer::Spare);
        assert_eq!(b.offer(9, vec![0; 8]), Offer::Duplicate);
        b.decoded();
        assert_eq!(b.offer(2, vec![0; 8]), Offer::Decoded);
    }
}
