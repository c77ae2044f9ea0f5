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

pub use crate::block::MAX_WAITING;
use crate::block::{BlockRx, Offer};
use crate::jobs::{Job, JobDone, Outcome};
use crate::sent::SentSource;
use crate::symbol::{frame_len, open, seal, SymbolError, SymbolKey};
use raptorq::{ObjectTransmissionInformation, PayloadId, SourceBlockDecoder};
use std::collections::VecDeque;

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
    /// Frames after the object was decoded, and (in job mode) those of a
    /// block whose decode was out while [`MAX_WAITING`] of
    /// its symbols already waited.
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
///
/// By default it does all its work inline, in [`FountainSink::on_frame`].
/// In job mode ([`FountainSink::with_jobs`]) a block's decode that is not
/// a mere copy of its source symbols, and the final BLAKE3 check, are
/// handed out as [`Job`]s instead ([`FountainSink::take_job`]), to run
/// anywhere and come back through [`FountainSink::on_job_done`]; frames
/// are taken meanwhile as ever. Either way, [`FountainSink::object`] is
/// `Some` only once the whole object's BLAKE3 matched the manifest's.
pub struct FountainSink {
    layout: Layout,
    object: u64,
    key: SymbolKey,
    hash: blake3::Hash,
    /// Per block, what it gathered and whether it decoded.
    blocks: Vec<BlockRx>,
    /// Per block, its first byte's offset in the object.
    offsets: Vec<u64>,
    /// The object as its blocks decode (zeroed, so pages are touched only
    /// as blocks land); dropped if the hash is wrong; out in the check's
    /// job while that runs.
    bytes: Vec<u8>,
    /// Blocks not decoded yet.
    open_blocks: usize,
    /// Blocks gathering symbols (neither decoding nor decoded).
    collecting: usize,
    /// The whole object's check is out in a job.
    verifying: bool,
    done: bool,
    counts: SinkCounts,
    /// What it holds: the source symbols, each block's need (what it
    /// tells a new parent, [`crate::sent`]).
    held: SentSource,
    /// Job mode: jobs handed out, not yet taken ([`FountainSink::take_job`]).
    /// `None`: inline.
    queued: Option<VecDeque<Job>>,
    /// Jobs made and not yet handed back (queued or running).
    jobs_out: usize,
}

impl std::fmt::Debug for FountainSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FountainSink")
            .field("layout", &self.layout)
            .field("object", &self.object)
            .field("open_blocks", &self.open_blocks)
            .field("collecting", &self.collecting)
            .field("jobs_out", &self.jobs_out)
            .field("decoded", &self.done)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl FountainSink {
    /// A decoder of object `object` laid out as `layout`, whose symbols are
    /// sealed with `key` and whose bytes hash to `hash` (from the
    /// object's manifest). It works inline.
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
        let t = u64::from(layout.symbol_size);
        let blocks: Vec<_> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                BlockRx::new(
                    i as u8,
                    (n / t) as u32,
                    SourceBlockDecoder::new(i as u8, &oti, n),
                )
            })
            .collect();
        FountainSink {
            layout,
            object,
            key,
            hash,
            open_blocks: blocks.len(),
            collecting: blocks.len(),
            blocks,
            offsets,
            bytes: vec![0; layout.length as usize],
            verifying: false,
            done: false,
            counts: SinkCounts::default(),
            held: SentSource::new(
                &layout
                    .block_spans()
                    .iter()
                    .map(|&(_, k)| k)
                    .collect::<Vec<_>>(),
            ),
            queued: None,
            jobs_out: 0,
        }
    }

    /// The same in job mode: decodes that are more than a copy of source
    /// symbols, and the final check, become [`Job`]s.
    pub fn with_jobs(mut self) -> Self {
        self.queued.get_or_insert_with(VecDeque::new);
        self
    }

    /// Whether it hands its expensive work out as jobs.
    pub fn in_job_mode(&self) -> bool {
        self.queued.is_some()
    }

    /// A frame from upstream: `Ok(true)` once the object is decoded and
    /// its hash checked (then frames are still checked, and counted as
    /// surplus). A refused frame changes nothing but a count. In job mode
    /// it never completes the object itself: [`FountainSink::on_job_done`]
    /// does.
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
        let Some(b) = self.blocks.get_mut(usize::from(block)) else {
            self.counts.out_of_layout += 1;
            return Err(SinkError::OutOfLayout(block));
        };
        let esi = symbol.payload_id.encoding_symbol_id();
        match b.offer(esi, symbol.data) {
            Offer::Spare => {
                self.counts.surplus += 1;
                return Ok(false);
            }
            // A symbol of a block already decoded.
            Offer::Decoded => {
                self.counts.accepted += 1;
                return Ok(false);
            }
            Offer::Kept | Offer::Duplicate => self.counts.accepted += 1,
        }
        self.held.mark(block, esi);
        self.try_decode(block)
    }

    /// Tries block `sbn`'s decode if it is ready: inline when in inline
    /// mode or when it is a copy of source symbols, else as a job.
    fn try_decode(&mut self, sbn: u8) -> Result<bool, SinkError> {
        let b = &mut self.blocks[usize::from(sbn)];
        if !b.ready() {
            return Ok(false);
        }
        let cheap = b.all_sources();
        let Some((decoder, symbols)) = b.start_decode() else {
            return Ok(false);
        };
        self.collecting -= 1;
        let job = Job::decode(self.object, sbn, decoder, symbols);
        match &mut self.queued {
            Some(queue) if !cheap => {
                queue.push_back(job);
                self.jobs_out += 1;
                Ok(false)
            }
            _ => self.apply(job.run()),
        }
    }

    /// The next job to run, in job mode (none in inline mode): its result
    /// goes back through [`FountainSink::on_job_done`].
    pub fn take_job(&mut self) -> Option<Job> {
        self.queued.as_mut()?.pop_front()
    }

    /// Jobs made and not yet handed back (queued or running).
    pub fn jobs_out(&self) -> usize {
        self.jobs_out
    }

    /// Blocks gathering symbols: neither decoded nor with a decode out.
    /// None left means every symbol the object needs is in hand, unless a
    /// decode fails (then its block collects again).
    pub fn blocks_collecting(&self) -> usize {
        self.collecting
    }

    /// A job's result, handed back: `Ok(true)` once the object decoded
    /// and its hash matched. A decode that failed for want of symbols puts
    /// its block back to collecting (and tries again at once if symbols
    /// came meanwhile). A result not of this sink's jobs (another object,
    /// or nothing out for it) is ignored.
    pub fn on_job_done(&mut self, done: JobDone) -> Result<bool, SinkError> {
        if done.object != self.object || self.jobs_out == 0 {
            return Ok(self.done);
        }
        self.jobs_out -= 1;
        self.apply(done)
    }

    /// Takes a job's result (one run inline, or handed back).
    fn apply(&mut self, done: JobDone) -> Result<bool, SinkError> {
        match done.outcome {
            Outcome::Decoded { sbn, bytes } => {
                let Some(b) = self.blocks.get_mut(usize::from(sbn)) else {
                    return Ok(false);
                };
                if !b.decoding() {
                    return Ok(self.done);
                }
                b.decoded();
                self.held.complete(sbn);
                self.open_blocks -= 1;
                let at = (self.offsets[usize::from(sbn)] as usize).min(self.bytes.len());
                let n = bytes.len().min(self.bytes.len() - at);
                self.bytes[at..at + n].copy_from_slice(&bytes[..n]);
                drop(bytes);
                if self.open_blocks > 0 {
                    return Ok(false);
                }
                self.verifying = true;
                let job = Job::verify(self.object, std::mem::take(&mut self.bytes), self.hash);
                match &mut self.queued {
                    Some(queue) => {
                        queue.push_back(job);
                        self.jobs_out += 1;
                        Ok(false)
                    }
                    None => self.apply(job.run()),
                }
            }
            Outcome::Failed { sbn, decoder } => {
                let Some(b) = self.blocks.get_mut(usize::from(sbn)) else {
                    return Ok(false);
                };
                if !b.decoding() {
                    return Ok(self.done);
                }
                b.decode_failed(decoder);
                self.collecting += 1;
                self.try_decode(sbn)
            }
            Outcome::Verified { bytes, matches } => {
                if !self.verifying {
                    return Ok(self.done);
                }
                self.verifying = false;
                if !matches {
                    return Err(SinkError::HashMismatch);
                }
                self.bytes = bytes;
                self.done = true;
                Ok(true)
            }
        }
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
    use crate::jobs::JobKind;

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

    /// Runs every job `sink` hands out (and those their results bring)
    /// until none is left: the last result.
    fn run_jobs(sink: &mut FountainSink) -> Result<bool, SinkError> {
        let mut last = Ok(sink.object().is_some());
        while let Some(job) = sink.take_job() {
            last = sink.on_job_done(job.run());
        }
        last
    }

    /// In job mode, frames never decode inline: a block short of source
    /// symbols becomes a decode job, the last block's result a check job,
    /// and the object is there once that comes back matching.
    #[test]
    fn in_job_mode_decodes_and_the_check_come_back_as_jobs() {
        let object = data(300_000);
        let layout = Layout::new(object.len() as u64, 1024, 128 << 10).unwrap();
        let key = SymbolKey::new([3; 32]);
        let mut source = FountainSource::new(object.clone(), layout, 42, key.clone());
        let mut sink = FountainSink::new(layout, 42, key, blake3::hash(&object)).with_jobs();
        assert!(sink.in_job_mode());
        let mut held = Vec::new();
        let mut sent = 0u64;
        while sink.blocks_collecting() > 0 {
            let frame = source.next_frame();
            sent += 1;
            // Lose one symbol in four: every block needs repair symbols.
            if sent.is_multiple_of(4) {
                continue;
            }
            assert_eq!(sink.on_frame(&frame), Ok(false));
            held.extend(std::iter::from_fn(|| sink.take_job()));
            assert!(sent < 10_000);
        }
        assert_eq!(held.len(), 3, "a decode job a block");
        assert!(held
            .iter()
            .all(|j| matches!(j.kind(), JobKind::Decode { .. })));
        assert_eq!(sink.jobs_out(), 3);
        // Frames that come while the decodes are out change nothing.
        for _ in 0..10 {
            assert_eq!(sink.on_frame(&source.next_frame()), Ok(false));
        }
        assert_eq!(sink.object(), None);
        // Results in any order (here the last first).
        while let Some(job) = held.pop() {
            assert_eq!(sink.on_job_done(job.run()), Ok(false));
        }
        let check = sink.take_job().expect("the check");
        assert_eq!(
            check.kind(),
            JobKind::Verify {
                bytes: object.len() as u64
            }
        );
        assert_eq!(sink.object(), None, "not before the check");
        assert_eq!(sink.on_job_done(check.run()), Ok(true));
        assert_eq!(sink.object(), Some(&object[..]));
        assert_eq!(sink.jobs_out(), 0);
        assert_eq!(sink.on_frame(&source.next_frame()), Ok(true));
    }

    /// Source symbols ESI 1–9 and repair symbol 142 of a block of K = 10:
    /// K distinct symbols that RaptorQ cannot decode from (found by
    /// search; whether a set decodes depends on its ids only); with
    /// repair symbol 143 as well it decodes.
    fn failing_set() -> (Vec<u8>, Layout, SymbolKey, Vec<Vec<u8>>, Vec<u8>) {
        let object = data(640);
        let layout = Layout::new(640, 64, 1 << 20).unwrap();
        let key = SymbolKey::new([6; 32]);
        let encoder = raptorq::SourceBlockEncoder::new(0, &layout.oti(), &object);
        let mut frames: Vec<Vec<u8>> = encoder.source_packets()[1..]
            .iter()
            .map(|p| seal(&key, 8, p.payload_id(), p.data()))
            .collect();
        let repair = encoder.repair_packets(132, 2);
        assert_eq!(repair[0].payload_id().encoding_symbol_id(), 142);
        frames.push(seal(&key, 8, repair[0].payload_id(), repair[0].data()));
        let more = seal(&key, 8, repair[1].payload_id(), repair[1].data());
        (object, layout, key, frames, more)
    }

    /// A decode job that fails for want of symbols puts its block back to
    /// collecting; the next symbol makes a new job, which decodes.
    #[test]
    fn a_failed_decode_job_returns_its_block_to_collecting_and_it_decodes_later() {
        let (object, layout, key, frames, more) = failing_set();
        let mut sink = FountainSink::new(layout, 8, key.clone(), blake3::hash(&object)).with_jobs();
        for f in &frames {
            assert_eq!(sink.on_frame(f), Ok(false));
        }
        assert_eq!(sink.blocks_collecting(), 0);
        let job = sink.take_job().expect("K symbols: a decode");
        assert_eq!(
            job.kind(),
            JobKind::Decode {
                block: 0,
                symbols: 10
            }
        );
        let done = job.run();
        assert!(done.is_failed_decode(), "{done:?}");
        assert_eq!(sink.on_job_done(done), Ok(false));
        assert_eq!(sink.blocks_collecting(), 1);
        assert_eq!(sink.jobs_out(), 0);
        assert!(sink.take_job().is_none(), "nothing new to try");
        // A duplicate is no reason to try again.
        assert_eq!(sink.on_frame(&frames[0]), Ok(false));
        assert!(sink.take_job().is_none());
        assert_eq!(sink.on_frame(&more), Ok(false));
        let job = sink.take_job().expect("one more symbol: a new try");
        assert_eq!(
            job.kind(),
            JobKind::Decode {
                block: 0,
                symbols: 1
            }
        );
        assert_eq!(sink.on_job_done(job.run()), Ok(false));
        assert_eq!(run_jobs(&mut sink), Ok(true));
        assert_eq!(sink.object(), Some(&object[..]));

        // A symbol that comes while the failing decode is out is tried at
        // once when it fails.
        let mut sink = FountainSink::new(layout, 8, key.clone(), blake3::hash(&object)).with_jobs();
        for f in &frames {
            sink.on_frame(f).unwrap();
        }
        let job = sink.take_job().unwrap();
        assert_eq!(sink.on_frame(&more), Ok(false));
        assert_eq!(sink.on_job_done(job.run()), Ok(false));
        assert_eq!(sink.blocks_collecting(), 0, "decoding again");
        assert_eq!(run_jobs(&mut sink), Ok(true));
        assert_eq!(sink.object(), Some(&object[..]));

        // Inline, the same symbols decode at the same one.
        let mut sink = FountainSink::new(layout, 8, key, blake3::hash(&object));
        for f in &frames {
            assert_eq!(sink.on_frame(f), Ok(false));
        }
        assert_eq!(sink.on_frame(&more), Ok(true));
        assert_eq!(sink.object(), Some(&object[..]));
    }

    /// While a block's decode is out, at most [`MAX_WAITING`] of its
    /// symbols wait; more are counted as surplus, never held.
    #[test]
    fn symbols_of_a_block_being_decoded_are_bounded() {
        let object = data(64 * 100);
        let layout = Layout::new(object.len() as u64, 64, 1 << 20).unwrap();
        let key = SymbolKey::new([7; 32]);
        let mut source = FountainSource::new(object.clone(), layout, 1, key.clone());
        let mut sink = FountainSink::new(layout, 1, key, blake3::hash(&object)).with_jobs();
        source.next_frame(); // lost
        while sink.jobs_out() == 0 {
            sink.on_frame(&source.next_frame()).unwrap();
        }
        let job = sink.take_job().unwrap();
        for _ in 0..MAX_WAITING + 50 {
            sink.on_frame(&source.next_frame()).unwrap();
        }
        assert_eq!(sink.counts().surplus, 50);
        assert_eq!(sink.counts().accepted, 100 + MAX_WAITING as u64);
        assert_eq!(sink.on_job_done(job.run()), Ok(false));
        assert_eq!(run_jobs(&mut sink), Ok(true));
        assert_eq!(sink.object(), Some(&object[..]));
    }

    /// A decoded object whose hash is not the manifest's is refused in
    /// job mode too, when the check comes back.
    #[test]
    fn in_job_mode_a_wrong_hash_is_refused() {
        let object = data(30_000);
        let layout = Layout::new(30_000, 1024, 1 << 20).unwrap();
        let key = SymbolKey::new([9; 32]);
        let mut source = FountainSource::new(object, layout, 1, key.clone());
        let mut wrong = FountainSink::new(layout, 1, key, blake3::hash(b"other")).with_jobs();
        source.next_frame(); // lost: a real decode
        let mut last = Ok(false);
        for _ in 0..100 {
            wrong.on_frame(&source.next_frame()).unwrap();
            last = run_jobs(&mut wrong);
            if last != Ok(false) {
                break;
            }
        }
        assert_eq!(last, Err(SinkError::HashMismatch));
        assert_eq!(wrong.object(), None);
        assert_eq!(wrong.jobs_out(), 0);
    }

    /// A result of another sink's job, or of another object's, is
    /// ignored.
    #[test]
    fn results_of_jobs_it_did_not_hand_out_are_ignored() {
        let (object, layout, key, frames, _) = failing_set();
        let mut sink = FountainSink::new(layout, 8, key.clone(), blake3::hash(&object)).with_jobs();
        let mut other =
            FountainSink::new(layout, 8, key.clone(), blake3::hash(&object)).with_jobs();
        for f in &frames {
            sink.on_frame(f).unwrap();
        }
        assert_eq!(other.on_job_done(sink.take_job().unwrap().run()), Ok(false));
        assert_eq!(other.blocks_collecting(), 1);
        let elsewhere = Job::verify(99, vec![1], blake3::hash(&[1]));
        assert_eq!(sink.on_job_done(elsewhere.run()), Ok(false));
        assert_eq!(sink.jobs_out(), 1);
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
            // Inline, and in job mode with every job run as it comes.
            for jobs in [false, true] {
                let mut sink = FountainSink::new(layout, 9, key.clone(), blake3::hash(&object));
                if jobs {
                    sink = sink.with_jobs();
                }
                proptest::prop_assert!(sink.on_frame(&junk).is_err());
                for &(block, esi, fill) in &sealed {
                    let frame = seal(&key, 9, &PayloadId::new(block, esi), &[fill; 64]);
                    let _ = sink.on_frame(&frame);
                    let _ = run_jobs(&mut sink);
                }
                let c = sink.counts();
                proptest::prop_assert_eq!(c.refused, 1);
            }
        }
    }
}
