//! The object as a fountain: a RaptorQ code (RFC 6330, the `raptorq`
//! crate) of which the source sends an endless run of symbols, any
//! slightly more than K distinct of a block decoding it (ROMA §IV: joins,
//! parent switches and restarts then cost nothing, since whatever symbols
//! a host holds count).
//!
//! The source sends each block's K source symbols first, then repair
//! symbols, taking the blocks in turn, so a host that hears everything
//! decodes from the source symbols alone (no decoding work) and one that
//! missed some makes up for them with repair symbols of the same block.

use crate::sent::SentSource;
use crate::symbol::{frame_len, open, seal, SymbolError, SymbolKey};
use raptorq::{EncodingPacket, ObjectTransmissionInformation, PayloadId, SourceBlockDecoder};

/// RFC 6330 §5.1.2's largest number of source symbols in a block (K'max).
pub const MAX_BLOCK_SYMBOLS: u64 = 56_403;
/// RFC 6330's largest object (its errata 5548): bytes.
pub const MAX_OBJECT_BYTES: u64 = 942_574_504_275;
/// The most source blocks: RFC 6330's 8-bit field allows 256 (as 0), the
/// `raptorq` crate 255.
pub const MAX_BLOCKS: u64 = 255;
/// Symbols are whole multiples of this (RFC 6330's symbol alignment Al).
pub const SYMBOL_ALIGNMENT: u16 = 8;
/// The largest encoding symbol id (24 bits, RFC 6330 §3.2).
const MAX_ESI: u32 = (1 << 24) - 1;

/// Why an object cannot be laid out as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// Nothing to send.
    #[error("an empty object")]
    Empty,
    /// Larger than RFC 6330 codes.
    #[error("{0} bytes: RaptorQ codes objects of at most {MAX_OBJECT_BYTES} bytes")]
    TooLarge(u64),
    /// A symbol size that is 0 or not a multiple of the alignment.
    #[error("symbol size {0}: must be a positive multiple of {SYMBOL_ALIGNMENT}")]
    SymbolSize(u16),
    /// More than 255 blocks, or blocks of more than K'max symbols.
    #[error("{length} bytes in blocks of at most {block_bytes} bytes need {blocks} blocks of {symbols} symbols: at most {MAX_BLOCKS} blocks of {MAX_BLOCK_SYMBOLS} symbols (use larger symbols or blocks)")]
    Blocks {
        /// The object's length.
        length: u64,
        /// The largest block asked for.
        block_bytes: u64,
        /// Blocks it would take.
        blocks: u64,
        /// Symbols in the largest block.
        symbols: u64,
    },
}

/// How an object is cut into blocks and symbols (checked: only
/// [`Layout::new`] makes one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The object's length, bytes.
    length: u64,
    /// Bytes per symbol.
    symbol_size: u16,
    /// Source blocks (1–255).
    blocks: u16,
}

impl Layout {
    /// An object of `length` bytes in symbols of `symbol_size` bytes and
    /// blocks of at most `block_bytes` bytes (fewer, larger blocks cost
    /// less completion overhead; smaller ones decode faster).
    pub fn new(length: u64, symbol_size: u16, block_bytes: u64) -> Result<Self, LayoutError> {
        if length == 0 {
            return Err(LayoutError::Empty);
        }
        if length > MAX_OBJECT_BYTES {
            return Err(LayoutError::TooLarge(length));
        }
        if symbol_size == 0 || !symbol_size.is_multiple_of(SYMBOL_ALIGNMENT) {
            return Err(LayoutError::SymbolSize(symbol_size));
        }
        let block_bytes = block_bytes.max(u64::from(symbol_size));
        let blocks = length.div_ceil(block_bytes);
        let symbols = length
            .div_ceil(u64::from(symbol_size))
            .div_ceil(blocks.max(1));
        if blocks > MAX_BLOCKS || symbols > MAX_BLOCK_SYMBOLS {
            return Err(LayoutError::Blocks {
                length,
                block_bytes,
                blocks,
                symbols,
            });
        }
        Ok(Layout {
            length,
            symbol_size,
            blocks: blocks as u16,
        })
    }

    /// RFC 6330's object transmission information for it.
    fn oti(&self) -> ObjectTransmissionInformation {
        ObjectTransmissionInformation::new(
            self.length,
            self.symbol_size,
            self.blocks as u8,
            1,
            SYMBOL_ALIGNMENT as u8,
        )
    }

    /// The object's length, bytes.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// Bytes per symbol.
    pub fn symbol_size(&self) -> u16 {
        self.symbol_size
    }

    /// Source blocks (1–255).
    pub fn blocks(&self) -> u16 {
        self.blocks
    }

    /// A frame's length on the wire (header, symbol, tag).
    pub fn frame_len(&self) -> usize {
        frame_len(self.symbol_size)
    }

    /// Each source block's bytes, in block order: RFC 6330 §4.4.1.2's
    /// partition of the object's symbols into blocks of KL or KS symbols
    /// (the first blocks the larger). The last block's bytes run past the
    /// object's end by its padding.
    pub fn block_bytes(&self) -> Vec<u64> {
        let t = u64::from(self.symbol_size);
        // At most 255 blocks of 56 403 symbols: well within u32.
        let kt = self.length.div_ceil(t) as u32;
        let (kl, ks, zl, zs) = raptorq::partition(kt, u32::from(self.blocks));
        std::iter::repeat_n(u64::from(kl) * t, zl as usize)
            .chain(std::iter::repeat_n(u64::from(ks) * t, zs as usize))
            .collect()
    }

    /// Each source block's first byte in the object and its source symbol
    /// count (K), in block order.
    pub fn block_spans(&self) -> Vec<(usize, u32)> {
        let t = u64::from(self.symbol_size);
        self.block_bytes()
            .iter()
            .scan(0usize, |at, &n| {
                let here = *at;
                *at += n as usize;
                Some((here, (n / t) as u32))
            })
            .collect()
    }
}

/// Source symbol `esi` of the block starting at byte `start` of `data`,
/// sealed: a slice of the object, zero-padded past its end.
pub fn seal_source_symbol(
    key: &SymbolKey,
    object: u64,
    data: &[u8],
    (start, symbol_size): (usize, usize),
    id: PayloadId,
) -> Vec<u8> {
    let from = start + id.encoding_symbol_id() as usize * symbol_size;
    let to = from + symbol_size;
    if to <= data.len() {
        seal(key, object, &id, &data[from..to])
    } else {
        let mut symbol = data[from.min(data.len())..].to_vec();
        symbol.resize(symbol_size, 0);
        seal(key, object, &id, &symbol)
    }
}

/// The source's endless run of sealed symbols. Source symbols are slices
/// of the object; a block is coded (its RaptorQ intermediate symbols
/// computed, about what decoding it costs) only when its first repair
/// symbol is wanted, so the source sends at once, holds the object once
/// plus the blocks coded so far, and never codes a block that nobody
/// needed repair symbols of.
pub struct FountainSource {
    object: u64,
    key: SymbolKey,
    oti: ObjectTransmissionInformation,
    data: Vec<u8>,
    symbol_size: usize,
    /// Each block's first byte in the object and its length with padding.
    spans: Vec<(usize, usize)>,
    /// Each block's encoder, once a repair symbol of it was wanted.
    encoders: Vec<Option<raptorq::SourceBlockEncoder>>,
    /// Each block's source symbol count (K).
    k: Vec<u32>,
    /// Each block's next encoding symbol id.
    next_esi: Vec<u32>,
    /// This round's order of the blocks (one symbol of each a round) and
    /// the place in it.
    round: Vec<usize>,
    at: usize,
    /// Shuffles each round's order.
    rng: fanout_core::rng::Rng,
}

impl std::fmt::Debug for FountainSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FountainSource")
            .field("object", &self.object)
            .field("blocks", &self.spans.len())
            .field(
                "coded",
                &self.encoders.iter().filter(|e| e.is_some()).count(),
            )
            .field("next_esi", &self.next_esi)
            .finish_non_exhaustive()
    }
}

impl FountainSource {
    /// The fountain of `data` laid out as `layout` (its length must be
    /// `data`'s), object id `object`, sealed with `key`.
    pub fn new(data: Vec<u8>, layout: Layout, object: u64, key: SymbolKey) -> Self {
        assert_eq!(layout.length, data.len() as u64, "the layout is data's");
        let symbol_size = usize::from(layout.symbol_size);
        let (spans, k): (Vec<(usize, usize)>, Vec<u32>) = layout
            .block_spans()
            .into_iter()
            .map(|(start, k)| ((start, k as usize * symbol_size), k))
            .unzip();
        let n = spans.len();
        FountainSource {
            object,
            key,
            oti: layout.oti(),
            data,
            symbol_size,
            encoders: (0..n).map(|_| None).collect(),
            spans,
            k,
            next_esi: vec![0; n],
            round: (0..n).collect(),
            at: 0,
            rng: fanout_core::rng::Rng::new(object),
        }
    }

    /// Repair symbols only, each block's from encoding symbol id
    /// `K + first_repair` on, blocks ordered by `seed`: for a host that
    /// decoded and now feeds its own children, whose symbols then do not
    /// repeat the source's (which starts at `K`) until the source has sent
    /// `first_repair` of a block.
    pub fn repair_only_from(mut self, first_repair: u32, seed: u64) -> Self {
        for (b, k) in self.k.iter().enumerate() {
            self.next_esi[b] = k.saturating_add(first_repair).min(MAX_ESI);
        }
        self.rng = fanout_core::rng::Rng::new(seed);
        self
    }

    /// Blocks coded so far.
    pub fn coded_blocks(&self) -> usize {
        self.encoders.iter().filter(|e| e.is_some()).count()
    }

    /// The next symbol's frame: one symbol of every block a round, the
    /// blocks in a new random order each round (a relay's downstream
    /// connection that skips frames at a steady pace would otherwise see
    /// some blocks far more than others), each block's source symbols
    /// first, then its repair symbols (ids wrap after 2²⁴, when repair
    /// symbols start over).
    pub fn next_frame(&mut self) -> Vec<u8> {
        if self.at == self.round.len() {
            // Fisher-Yates.
            for i in (1..self.round.len()).rev() {
                let j = self.rng.below(i as u64 + 1) as usize;
                self.round.swap(i, j);
            }
            self.at = 0;
        }
        let b = self.round[self.at];
        self.at += 1;
        let esi = self.next_esi[b];
        let k = self.k[b];
        self.next_esi[b] = if esi >= MAX_ESI { k } else { esi + 1 };
        let (start, len) = self.spans[b];
        if esi < k {
            let id = PayloadId::new(b as u8, esi);
            return seal_source_symbol(
                &self.key,
                self.object,
                &self.data,
                (start, self.symbol_size),
                id,
            );
        }
        let (data, oti) = (&self.data, &self.oti);
        let encoder = self.encoders[b].get_or_insert_with(|| {
            let end = start + len;
            if end <= data.len() {
                raptorq::SourceBlockEncoder::new(b as u8, oti, &data[start..end])
            } else {
                let mut block = data[start..].to_vec();
                block.resize(len, 0);
                raptorq::SourceBlockEncoder::new(b as u8, oti, &block)
            }
        });
        let packet = encoder
            .repair_packets(esi - k, 1)
            .pop()
            .expect("one repair packet");
        seal(&self.key, self.object, packet.payload_id(), packet.data())
    }
}

/// What a receiver's decoder has made of the frames so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkCounts {
    /// Frames whose symbols went to the decoder.
    pub accepted: u64,
    /// Frames refused: bad length, another object, bad tag.
    pub refused: u64,
    /// Authentic frames naming a block the object does not have.
    pub out_of_layout: u64,
    /// Frames after the object was decoded.
    pub surplus: u64,
}

/// The object, decoded and checked, or why it is not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    /// The frame was refused (counted).
    #[error(transparent)]
    Symbol(#[from] SymbolError),
    /// An authentic symbol of a block the layout does not have.
    #[error("a symbol of block {0}, which the object does not have")]
    OutOfLayout(u8),
    /// Decoded, but not the object the manifest describes.
    #[error("the decoded object's BLAKE3 is not the manifest's")]
    HashMismatch,
}

/// A receiver's decoder of one object: one RaptorQ decoder per source
/// block, dropped with the symbols it held as soon as its block decodes,
/// whose bytes go straight to their place in the object. (The `raptorq`
/// crate's whole-object decoder keeps every block's symbols and decoded
/// bytes until the last block, then copies them all once more: four times
/// the object at its peak; this holds the object and the symbols of the
/// blocks still open.)
pub struct FountainSink {
    layout: Layout,
    object: u64,
    key: SymbolKey,
    hash: blake3::Hash,
    /// Per block, its decoder until it decoded.
    blocks: Vec<Option<SourceBlockDecoder>>,
    /// Per block, its first byte's offset in the object.
    offsets: Vec<u64>,
    /// The object as its blocks decode (zeroed, so pages are touched only
    /// as blocks land); dropped if the hash is wrong.
    bytes: Vec<u8>,
    /// Blocks not decoded yet.
    open_blocks: usize,
    done: bool,
    counts: SinkCounts,
    /// What it holds: the source symbols, each block's need (what it
    /// tells a new parent, [`crate::sent`]).
    held: SentSource,
}

impl std::fmt::Debug for FountainSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FountainSink")
            .field("layout", &self.layout)
            .field("object", &self.object)
            .field("open_blocks", &self.open_blocks)
            .field("decoded", &self.done)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl FountainSink {
    /// A decoder of object `object` laid out as `layout`, whose symbols are
    /// sealed with `key` and whose bytes hash to `hash` (from the
    /// object's manifest).
    pub fn new(layout: Layout, object: u64, key: SymbolKey, hash: blake3::Hash) -> Self {
        let oti = layout.oti();
        let sizes = layout.block_bytes();
        let offsets = sizes
            .iter()
            .scan(0u64, |at, &n| {
                let here = *at;
                *at += n;
                Some(here)
            })
            .collect();
        let blocks: Vec<_> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| Some(SourceBlockDecoder::new(i as u8, &oti, n)))
            .collect();
        FountainSink {
            layout,
            object,
            key,
            hash,
            open_blocks: blocks.len(),
            blocks,
            offsets,
            bytes: vec![0; layout.length as usize],
            done: false,
            counts: SinkCounts::default(),
            held: SentSource::new(
                &layout
                    .block_spans()
                    .iter()
                    .map(|&(_, k)| k)
                    .collect::<Vec<_>>(),
            ),
        }
    }

    /// A frame from upstream: `Ok(true)` once the object is decoded and
    /// its hash checked (then frames are still checked, and counted as
    /// surplus). A refused frame changes nothing but a count.
    pub fn on_frame(&mut self, frame: &[u8]) -> Result<bool, SinkError> {
        let symbol = match open(&self.key, self.object, self.layout.symbol_size, frame) {
            Ok(s) => s,
            Err(e) => {
                self.counts.refused += 1;
                return Err(e.into());
            }
        };
        if self.done {
            self.counts.surplus += 1;
            return Ok(true);
        }
        let block = symbol.payload_id.source_block_number();
        let Some(slot) = self.blocks.get_mut(usize::from(block)) else {
            self.counts.out_of_layout += 1;
            return Err(SinkError::OutOfLayout(block));
        };
        self.counts.accepted += 1;
        let Some(decoder) = slot.as_mut() else {
            // A symbol of a block already decoded.
            return Ok(false);
        };
        let esi = symbol.payload_id.encoding_symbol_id();
        self.held.mark(block, esi);
        let packet = EncodingPacket::new(PayloadId::new(block, esi), symbol.data);
        let Some(decoded) = decoder.decode(std::iter::once(packet)) else {
            return Ok(false);
        };
        *slot = None;
        self.held.complete(block);
        self.open_blocks -= 1;
        let at = self.offsets[usize::from(block)] as usize;
        let n = decoded.len().min(self.bytes.len() - at);
        self.bytes[at..at + n].copy_from_slice(&decoded[..n]);
        if self.open_blocks > 0 {
            return Ok(false);
        }
        if blake3::hash(&self.bytes) != self.hash {
            self.bytes = Vec::new();
            return Err(SinkError::HashMismatch);
        }
        self.done = true;
        Ok(true)
    }

    /// What it holds, as a new parent is told it.
    pub fn held(&self) -> &SentSource {
        &self.held
    }

    /// The decoded, checked object.
    pub fn object(&self) -> Option<&[u8]> {
        self.done.then_some(&self.bytes[..])
    }

    /// What came so far.
    pub fn counts(&self) -> SinkCounts {
        self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn layouts_are_checked() {
        assert_eq!(Layout::new(0, 1024, 1 << 20), Err(LayoutError::Empty));
        assert_eq!(
            Layout::new(10, 1001, 1 << 20),
            Err(LayoutError::SymbolSize(1001))
        );
        assert_eq!(Layout::new(10, 0, 1 << 20), Err(LayoutError::SymbolSize(0)));
        let l = Layout::new(3 << 20, 1024, 1 << 20).unwrap();
        assert_eq!(l.blocks(), 3);
        assert!(matches!(
            Layout::new(1 << 30, 8, 1 << 30),
            Err(LayoutError::Blocks { .. })
        ));
        assert!(matches!(
            Layout::new(1 << 30, 1024, 1 << 20),
            Err(LayoutError::Blocks { blocks: 1024, .. })
        ));
        assert_eq!(
            Layout::new(MAX_OBJECT_BYTES + 1, 1024, 1 << 30),
            Err(LayoutError::TooLarge(MAX_OBJECT_BYTES + 1))
        );
    }

    /// Blocks partition the object's symbols as RFC 6330 §4.4.1.2 does:
    /// sizes differ by at most one symbol, the larger first, and cover the
    /// object with less than one symbol of padding.
    #[test]
    fn blocks_partition_the_objects_symbols() {
        for (len, t, block) in [(5000, 64, 1 << 20), (1_000_003, 128, 100_000), (64, 8, 8)] {
            let l = Layout::new(len, t, block).unwrap();
            let sizes = l.block_bytes();
            assert_eq!(sizes.len(), usize::from(l.blocks()));
            let total: u64 = sizes.iter().sum();
            assert!(total >= len && total - len < u64::from(t), "{sizes:?}");
            assert!(sizes
                .windows(2)
                .all(|w| w[0] >= w[1] && w[0] - w[1] <= u64::from(t)));
        }
    }

    /// The source codes nothing until a repair symbol is wanted, and then
    /// only that block: a host that hears every source symbol decodes
    /// with no block coded.
    #[test]
    fn blocks_are_coded_only_when_their_repair_symbols_are_wanted() {
        let object = data(300_000);
        let layout = Layout::new(object.len() as u64, 1024, 100_000).unwrap();
        let key = SymbolKey::derive(&[2; 32]);
        let mut source = FountainSource::new(object.clone(), layout, 5, key.clone());
        let mut sink = FountainSink::new(layout, 5, key, blake3::hash(&object));
        let k: u64 = layout.block_bytes().iter().map(|b| b / 1024).sum();
        let mut done = false;
        for _ in 0..k {
            done = sink.on_frame(&source.next_frame()).unwrap();
        }
        assert!(done, "the source symbols alone decode");
        assert_eq!(sink.object(), Some(&object[..]));
        assert_eq!(source.coded_blocks(), 0);
        source.next_frame();
        assert_eq!(
            source.coded_blocks(),
            1,
            "one repair symbol, one block coded"
        );
    }

    #[test]
    fn any_enough_symbols_decode_and_forgeries_never_reach_the_decoder() {
        let object = data(300_000);
        let layout = Layout::new(object.len() as u64, 1024, 128 << 10).unwrap();
        assert_eq!(layout.blocks(), 3);
        let key = SymbolKey::new([3; 32]);
        let mut source = FountainSource::new(object.clone(), layout, 42, key.clone());
        let mut sink = FountainSink::new(layout, 42, key, blake3::hash(&object));
        let k = object.len().div_ceil(1024) as u64;
        // Lose 40% of the symbols (a fixed pattern), forge one in five.
        let mut sent = 0u64;
        let mut forged = 0u64;
        let mut done = false;
        while !done {
            let mut frame = source.next_frame();
            assert_eq!(frame.len(), layout.frame_len());
            sent += 1;
            if sent % 5 < 2 {
                continue;
            }
            if sent.is_multiple_of(7) {
                let at = (sent as usize * 31) % frame.len();
                frame[at] ^= 0x40;
                forged += 1;
                assert!(sink.on_frame(&frame).is_err());
                continue;
            }
            done = sink.on_frame(&frame).expect("an authentic symbol");
            assert!(sent < 3 * k, "{sent} symbols sent for {k}");
        }
        assert_eq!(sink.object(), Some(&object[..]));
        let c = sink.counts();
        assert_eq!(c.refused, forged);
        // RaptorQ needs K, rarely K + 1 or 2, symbols a block.
        assert!(c.accepted <= k + 2 * 3, "{c:?} for K = {k}");
        assert!(sink.on_frame(&source.next_frame()).unwrap());
        assert_eq!(sink.counts().surplus, 1);
    }

    #[test]
    fn a_hosts_own_repair_symbols_decode_and_are_not_the_sources() {
        let object = data(200_000);
        let layout = Layout::new(200_000, 1024, 1 << 20).unwrap();
        let key = SymbolKey::new([2; 32]);
        let mut source = FountainSource::new(object.clone(), layout, 3, key.clone());
        let mut own = FountainSource::new(object.clone(), layout, 3, key.clone())
            .repair_only_from(1 << 20, 99);
        let k = 200_000u32.div_ceil(1024);
        let first = open(&key, 3, 1024, &own.next_frame()).unwrap();
        assert_eq!(first.payload_id.encoding_symbol_id(), k + (1 << 20));
        // Half from the source, half of its own: one decoder takes both.
        let mut sink = FountainSink::new(layout, 3, key, blake3::hash(&object));
        let mut n = 0;
        while sink.object().is_none() {
            let frame = if n % 2 == 0 {
                source.next_frame()
            } else {
                own.next_frame()
            };
            sink.on_frame(&frame).unwrap();
            n += 1;
            assert!(n < 2 * k as usize, "{n}");
        }
        assert_eq!(sink.object(), Some(&object[..]));
    }

    #[test]
    fn an_authentic_symbol_outside_the_layout_is_refused_not_a_panic() {
        let object = data(5000);
        let layout = Layout::new(5000, 1024, 1 << 20).unwrap();
        let key = SymbolKey::new([9; 32]);
        let mut sink = FountainSink::new(layout, 1, key.clone(), blake3::hash(&object));
        let frame = seal(&key, 1, &PayloadId::new(7, 0), &[0; 1024]);
        assert_eq!(sink.on_frame(&frame), Err(SinkError::OutOfLayout(7)));
        assert_eq!(sink.counts().out_of_layout, 1);
        // A key holder's forgery decodes to something else: caught by the
        // manifest's hash.
        let mut wrong = FountainSink::new(layout, 1, key.clone(), blake3::hash(b"other"));
        let mut source = FountainSource::new(object.clone(), layout, 1, key);
        let mut last = Ok(false);
        for _ in 0..10 {
            last = wrong.on_frame(&source.next_frame());
            if last != Ok(false) {
                break;
            }
        }
        assert_eq!(last, Err(SinkError::HashMismatch));
        assert_eq!(wrong.object(), None);
    }

    proptest::proptest! {
        /// No frame panics the decoder: random bytes, and authentic
        /// frames (a key holder's) with any block, symbol id and bytes.
        #[test]
        fn no_frame_panics_the_decoder(
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            sealed in proptest::collection::vec(
                (proptest::prelude::any::<u8>(), 0u32..(1 << 24), proptest::prelude::any::<u8>()),
                1..40,
            ),
        ) {
            let object = data(3000);
            let layout = Layout::new(3000, 64, 1024).unwrap();
            let key = SymbolKey::new([5; 32]);
            let mut sink = FountainSink::new(layout, 9, key.clone(), blake3::hash(&object));
            proptest::prop_assert!(sink.on_frame(&junk).is_err());
            for (block, esi, fill) in sealed {
                let frame = seal(&key, 9, &PayloadId::new(block, esi), &[fill; 64]);
                let _ = sink.on_frame(&frame);
            }
            let c = sink.counts();
            proptest::prop_assert_eq!(c.refused, 1);
        }
    }
}
