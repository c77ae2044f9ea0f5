//! Signed segment lists: multicast DATA a receiver checks before it takes
//! it (`docs/wire.md` §4.12, listed data; `docs/security.md`).
//!
//! The sender knows the bytes of a file (and of whatever a stream's
//! application has written) before it sends them, so it can sign them
//! *ahead*: before the first segment of a stretch goes out, it multicasts a
//! SEGMENTS frame naming what follows, signed with the session's Ed25519
//! key (the one of [`super::source`]). A DATA frame that such a list names
//! carries no AEAD tag ([`super::DataKey`]): the list's hash authenticates
//! it. Repairs resend the same segments, so the same hashes check them.
//!
//! An entry of a list names either one segment (its length and a SHA-256
//! hash, checked on arrival: the ends of messages and of the stream, short
//! segments) or a *run* of up to [`MAX_RUN`] whole segments of one length
//! (one BLAKE3 hash over all of them, checked once the run is complete,
//! its segments held until then). A run costs the sender a fraction of the
//! per-segment hashes and signatures — BLAKE3 hashes 16 KiB and more with
//! all of a processor's SIMD lanes, where a 1400-byte input leaves them
//! idle, and one list names up to 16 times as many bytes — at the price of
//! a hold of at most one run at the receiver ([`RUN_BYTES`], shorter where
//! sending it would take longer than [`RUN_SPAN`]). A held segment counts
//! as received: the receiver acknowledges it selectively (SACK), so the
//! sender's loss recovery sees what it sees without protection; a held
//! copy that proves forged, where no copy of the sender's came, it
//! *reneges* ([`SegmentVerifier::take_dropped`], the RENEGE frame), and
//! the sender repairs it.
//!
//! A datagram whose list has not arrived (lost, or overtaken) waits, at
//! most [`MAX_HELD_SEGMENTS`] datagrams in all, and the receiver asks its
//! sender for the list under its pair key (SEGMENTS_REQUEST, at most every
//! [`REQUEST_INTERVAL`]); the answer is the same signed list, by unicast.
//! Two different copies of one segment of a run (a rogue member holding the
//! group key sent one) are both kept, and the one that checks is taken; a
//! run that checks with neither makes the receiver ask for its *detail*:
//! a list naming each of its segments by its own hash, which settles which
//! copy is the sender's. Everything else the sender multicasts (control
//! frames, coded repair symbols, data beyond the lists) goes under the
//! group AEAD key and the datagram lists of [`super::source`].

use super::source::{Signer, SIGNATURE_LEN};
use crate::wire::DataFrame;
use fanout_core::codec::{DecodeError, Reader, Writer};
use fanout_core::time::Instant;
use ring::signature::{UnparsedPublicKey, ED25519};
use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::time::Duration;

/// Bytes of a segment's (or a run's) hash in a list.
pub const SEGMENT_HASH_LEN: usize = 16;
/// Most entries one list names (fewer if they would not fit its datagram).
pub const MAX_LIST_ENTRIES: usize = 128;
/// Buffers of released datagrams a receiver keeps for the next held
/// ones: two runs' worth.
pub const MAX_SPARE_BUFFERS: usize = 2 * MAX_RUN as usize;
/// Largest buffer kept (a datagram's frames fit it).
pub const MAX_SPARE_CAPACITY: usize = 64 * 1024;
/// Most segments one entry (a run) names.
pub const MAX_RUN: u64 = 16;
/// The bytes a run is made of where nothing shortens it: just over 16
/// BLAKE3 chunks, which a processor with 16-lane SIMD (AVX-512) hashes
/// side by side (12 segments of 1405 bytes: 0.22 ns a byte on the
/// development machine, against 0.30 for 16 and 0.68 for SHA-256 of each
/// segment).
pub const RUN_BYTES: u64 = 16 * 1024;
/// Longest a run's segments take to send at the session's pacing rate:
/// the longest the first of them waits at a receiver for the rest when
/// nothing is lost (reported as ACK delay, so the sender's RTT stays the
/// path's).
pub const RUN_SPAN: Duration = Duration::from_millis(2);
/// Segment datagrams a receiver holds unchecked (waiting for their list, or
/// for the rest of their run), copies included; beyond it the oldest is
/// dropped (counted).
pub const MAX_HELD_SEGMENTS: usize = 4096;
/// Different copies of one segment of a run a receiver keeps until the run
/// is settled (the sender's, and one a rogue member sent); more are
/// dropped (counted).
pub const MAX_COPIES: usize = 2;
/// Ranges of dropped held datagrams a receiver keeps to report (the
/// farthest are forgotten: a hole there is found again by its loss
/// recovery's timer).
pub const MAX_DROPPED_RANGES: usize = 64;
/// List entries whose hashes a receiver keeps (those below its delivery
/// point are dropped first): 16 384 runs of 16 segments, or single
/// segments, about 24 MiB of them.
pub const MAX_KNOWN_ENTRIES: usize = 16_384;
/// Least time between two requests of a receiver for missing lists or a
/// run's detail while none is answered (an answer lets the next go at
/// once).
pub const REQUEST_INTERVAL: Duration = Duration::from_millis(20);
/// Least time between two details the sender sends one member (each costs
/// hashes and a signature).
pub const DETAIL_INTERVAL: Duration = Duration::from_millis(5);
/// Longest a datagram waits for its list or its run; then it is dropped
/// (counted) and repaired like a loss. Asked for every
/// [`REQUEST_INTERVAL`], a list that exists arrives long before.
pub const MAX_SEGMENT_HOLD: Duration = Duration::from_secs(3);
/// Bytes of a datagram around a list besides its entries: header, frame
/// type, start (at most 8) and count (at most 2), signature, AEAD tag.
const LIST_OVERHEAD: usize = crate::wire::HEADER_LEN + 1 + 8 + 2 + SIGNATURE_LEN + super::TAG_LEN;

const CONTEXT: &[u8] = b"fanout segments v2";
/// BLAKE3 key-derivation context of run hashes.
const RUN_CONTEXT: &str = "fanout segment run v1";

/// One segment's (or run's) hash.
pub type SegmentHash = [u8; SEGMENT_HASH_LEN];

/// The hash a list names one segment by: SHA-256 over its offset (u64,
/// big-endian), a flags byte (1: the stream ends after it, 2: a message
/// does) and its bytes, truncated to 16 bytes.
pub fn segment_hash(offset: u64, fin: bool, message_end: bool, payload: &[u8]) -> SegmentHash {
    segment_hash_of_pieces(offset, fin, message_end, &[payload])
}

/// [`segment_hash`] of a payload held in pieces (a ring buffer's two
/// slices), hashed in place.
pub fn segment_hash_of_pieces(
    offset: u64,
    fin: bool,
    message_end: bool,
    pieces: &[&[u8]],
) -> SegmentHash {
    let mut c = ring::digest::Context::new(&ring::digest::SHA256);
    c.update(&offset.to_be_bytes());
    c.update(&[u8::from(fin) | u8::from(message_end) << 1]);
    for p in pieces {
        c.update(p);
    }
    let mut h = [0u8; SEGMENT_HASH_LEN];
    h.copy_from_slice(&c.finish().as_ref()[..SEGMENT_HASH_LEN]);
    h
}

/// The hash a list names a run by: BLAKE3 in key-derivation mode (context
/// `"fanout segment run v1"`) over the bytes of all its segments (held in
/// `pieces`, hashed in place), then its offset, its segments' length and
/// their count (u64, big-endian each), truncated to 16 bytes. The bytes come
/// first so that they start BLAKE3's first chunk: its chunks are then
/// hashed side by side in the processor's SIMD lanes.
pub fn run_hash(offset: u64, len: u64, count: u64, pieces: &[&[u8]]) -> SegmentHash {
    let mut h = blake3::Hasher::new_derive_key(RUN_CONTEXT);
    for p in pieces {
        h.update(p);
    }
    h.update(&offset.to_be_bytes());
    h.update(&len.to_be_bytes());
    h.update(&count.to_be_bytes());
    let mut out = [0u8; SEGMENT_HASH_LEN];
    out.copy_from_slice(&h.finalize().as_bytes()[..SEGMENT_HASH_LEN]);
    out
}

/// One entry of a list: `count` consecutive segments of `len` bytes each
/// (its offset follows from the list's start and the entries before it).
/// One segment is hashed by [`segment_hash`] (its flags included); a run of
/// several, which carry no flags, by [`run_hash`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListEntry {
    /// Payload bytes of each segment (0 only for a FIN alone).
    pub len: u64,
    /// Segments it names, 1 to [`MAX_RUN`].
    pub count: u64,
    /// [`segment_hash`] or [`run_hash`].
    pub hash: SegmentHash,
}

impl ListEntry {
    /// One segment.
    pub fn single(len: u64, hash: SegmentHash) -> Self {
        ListEntry {
            len,
            count: 1,
            hash,
        }
    }

    /// Stream bytes it covers.
    pub fn bytes(&self) -> u64 {
        self.len * self.count
    }

    /// Whether it names several segments.
    pub fn is_run(&self) -> bool {
        self.count > 1
    }
}

/// A signed list of consecutive entries (the SEGMENTS frame).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentList {
    /// Stream offset of the first entry.
    pub start: u64,
    /// The entries, in stream order.
    pub entries: Vec<ListEntry>,
    /// Ed25519 over the context, the session id, the start and every
    /// entry's length, count and hash.
    pub signature: [u8; SIGNATURE_LEN],
}

fn message(session_id: u64, start: u64, entries: &[ListEntry]) -> Vec<u8> {
    let mut m = Vec::with_capacity(CONTEXT.len() + 16 + entries.len() * 32);
    m.extend_from_slice(CONTEXT);
    m.extend_from_slice(&session_id.to_be_bytes());
    m.extend_from_slice(&start.to_be_bytes());
    for e in entries {
        m.extend_from_slice(&e.len.to_be_bytes());
        m.extend_from_slice(&e.count.to_be_bytes());
        m.extend_from_slice(&e.hash);
    }
    m
}

impl SegmentList {
    /// The list of `entries` from `start`, signed by `signer` for session
    /// `session_id`.
    pub fn sign(signer: &Signer, session_id: u64, start: u64, entries: Vec<ListEntry>) -> Self {
        let signature = signer.sign(&message(session_id, start, &entries));
        SegmentList {
            start,
            entries,
            signature,
        }
    }

    /// Whether `key` signed it for session `session_id`.
    pub fn verify(&self, key: &[u8; 32], session_id: u64) -> bool {
        UnparsedPublicKey::new(&ED25519, key)
            .verify(
                &message(session_id, self.start, &self.entries),
                &self.signature,
            )
            .is_ok()
    }

    /// `(offset, entry)` of each entry.
    pub fn iter(&self) -> impl Iterator<Item = (u64, ListEntry)> + '_ {
        let mut at = self.start;
        self.entries.iter().map(move |e| {
            let o = at;
            at += e.bytes();
            (o, *e)
        })
    }

    /// `(offset, length)` of each segment it names.
    pub fn segments(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.iter()
            .flat_map(|(o, e)| (0..e.count).map(move |i| (o + i * e.len, e.len)))
    }

    /// The stream offset after its last entry's bytes.
    pub fn end(&self) -> u64 {
        self.start + self.entries.iter().map(ListEntry::bytes).sum::<u64>()
    }

    /// Encodes its fields (the SEGMENTS frame after its type byte).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_varint(self.start);
        out.put_varint(self.entries.len() as u64);
        for e in &self.entries {
            out.put_varint(e.len);
            out.put_varint(e.count);
            out.put_bytes(&e.hash);
        }
        out.put_bytes(&self.signature);
    }

    /// Decodes its fields: 1 to [`MAX_LIST_ENTRIES`] entries, each of 1 to
    /// [`MAX_RUN`] segments (a run's not empty), ending within `u64`.
    pub fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let start = r.varint()?;
        let n = r.varint_len("segments.count", MAX_LIST_ENTRIES)?;
        if n == 0 {
            return Err(DecodeError::Invalid("segments.count"));
        }
        let mut entries = Vec::with_capacity(n);
        let mut end = start;
        for _ in 0..n {
            let len = r.varint()?;
            let count = r.varint()?;
            if count == 0 || count > MAX_RUN || (count > 1 && len == 0) {
                return Err(DecodeError::Invalid("segments.run"));
            }
            end = len
                .checked_mul(count)
                .and_then(|b| end.checked_add(b))
                .ok_or(DecodeError::Invalid("segments.len"))?;
            let hash = r
                .bytes(SEGMENT_HASH_LEN)?
                .try_into()
                .map_err(|_| DecodeError::Invalid("segments.hash"))?;
            entries.push(ListEntry { len, count, hash });
        }
        let signature = r
            .bytes(SIGNATURE_LEN)?
            .try_into()
            .map_err(|_| DecodeError::Invalid("segments.signature"))?;
        Ok(SegmentList {
            start,
            entries,
            signature,
        })
    }
}

/// How a listed segment goes out: exactly so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listing {
    /// Payload bytes.
    pub len: u64,
    /// The stream ends after it.
    pub fin: bool,
    /// A message ends with it.
    pub message_end: bool,
    /// It follows the first segment of its run.
    pub continues_run: bool,
    /// Where its run starts (its own offset, for a single segment).
    pub run_start: u64,
    /// Where its run ends (its own end, for a single segment).
    pub run_end: u64,
}

/// One listed entry at the sender: `count` segments of `len` bytes from
/// `start`; a single segment's flags (a run carries none).
#[derive(Debug, Clone, Copy)]
struct ListedEntry {
    start: u64,
    len: u64,
    count: u64,
    fin: bool,
    message_end: bool,
}

impl ListedEntry {
    /// Where its last segment ends.
    fn end(&self) -> u64 {
        self.start + self.len * self.count
    }

    /// Whether a segment of it starts at `offset` (a FIN alone, of
    /// length 0, occupies its offset).
    fn names_offset(&self, offset: u64) -> bool {
        match self.len {
            0 => offset == self.start,
            len => {
                offset >= self.start
                    && offset < self.end()
                    && (offset - self.start).is_multiple_of(len)
            }
        }
    }
}

/// The sender's side: what is listed, and the lists kept for members that
/// ask again.
#[derive(Debug)]
pub struct SegmentLists {
    /// Most entries a list holds: what fits its datagram.
    max_entries: usize,
    /// The stream offset up to which segments are listed.
    listed_to: u64,
    /// Listed entries (runs and single segments) not yet released, by
    /// increasing offset; the session sends their segments exactly so.
    /// Appended at the back, released from the front, searched by
    /// bisection (a lookup or two per multicast datagram sent). One entry
    /// per run, not per segment: a dozen times fewer to walk and release.
    listed: VecDeque<ListedEntry>,
    /// Entries released from the front of `listed` so far, and the
    /// absolute index (released + position) of the last one looked up:
    /// lookups go mostly in order, so that one and the next are tried
    /// first.
    released: usize,
    hint: std::cell::Cell<usize>,
    /// Lists of data not yet released, oldest first, each with its end,
    /// for requests.
    kept: VecDeque<(u64, SegmentList)>,
    /// Lists to multicast before their segments, and details to multicast.
    pending: VecDeque<SegmentList>,
    /// Details sent lately, by the run they start at: members that missed
    /// the multicast one ask again, and get this one.
    details: VecDeque<(u64, SegmentList)>,
}

/// Details a sender keeps for members that ask again.
const KEPT_DETAILS: usize = 16;

impl SegmentLists {
    /// Lists for datagrams of at most `max_datagram` bytes.
    pub fn new(max_datagram: usize) -> Self {
        SegmentLists {
            max_entries: Self::entries_per_list(max_datagram),
            listed_to: 0,
            listed: VecDeque::new(),
            released: 0,
            hint: std::cell::Cell::new(0),
            kept: VecDeque::new(),
            pending: VecDeque::new(),
            details: VecDeque::new(),
        }
    }

    /// The detail kept for the run at `start`, if one was made lately.
    pub fn detail(&self, start: u64) -> Option<&SegmentList> {
        (self.details.iter())
            .find(|(o, _)| *o == start)
            .map(|(_, l)| l)
    }

    /// Queues a run's detail (a list of its segments one by one, from
    /// `list.start`) to be multicast, and keeps it for those that ask
    /// again.
    pub fn push_detail(&mut self, list: SegmentList) {
        if self.details.len() >= KEPT_DETAILS {
            self.details.pop_front();
        }
        self.details.push_back((list.start, list.clone()));
        self.pending.push_back(list);
    }

    /// Most entries a list in a `max_datagram`-byte datagram holds: each
    /// is the length's varint (a segment is shorter than its datagram), the
    /// count's (one byte) and the hash.
    fn entries_per_list(max_datagram: usize) -> usize {
        let entry = fanout_core::codec::varint_size(max_datagram as u64) + 1 + SEGMENT_HASH_LEN;
        (max_datagram.saturating_sub(LIST_OVERHEAD) / entry).clamp(1, MAX_LIST_ENTRIES)
    }

    /// Lists made from now on fit datagrams of at most `max_datagram`
    /// bytes (those already made keep their size).
    pub fn set_max_datagram(&mut self, max_datagram: usize) {
        self.max_entries = Self::entries_per_list(max_datagram);
    }

    /// Most entries one list holds.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// Where the next list starts: the first offset not listed yet (0
    /// before any).
    pub fn listed_to(&self) -> u64 {
        self.listed_to
    }

    /// The listed segment at `offset`, if one is.
    pub fn listed(&self, offset: u64) -> Option<Listing> {
        let at = self.hint.get().saturating_sub(self.released);
        let near = [at, at + 1]
            .into_iter()
            .find(|&i| self.listed.get(i).is_some_and(|e| e.names_offset(offset)));
        let i = match near {
            Some(i) => i,
            None => (self.listed.partition_point(|e| e.start <= offset)).checked_sub(1)?,
        };
        let e = *self.listed.get(i)?;
        if !e.names_offset(offset) {
            return None;
        }
        self.hint.set(self.released + i);
        Some(Listing {
            len: e.len,
            fin: e.fin,
            message_end: e.message_end,
            continues_run: offset > e.start,
            run_start: e.start,
            run_end: e.end(),
        })
    }

    /// Whether a list waits to go out.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether a datagram's `frames` are exactly one DATA frame that a
    /// list names (same offset, length and flags).
    pub fn names(&self, frames: &[u8]) -> bool {
        let mut it = crate::wire::decode_frames(frames);
        let (Some(Ok(crate::wire::Frame::Data(d))), None) = (it.next(), it.next()) else {
            return false;
        };
        self.listed(d.offset).is_some_and(|l| {
            (l.len, l.fin, l.message_end) == (d.payload.len() as u64, d.fin, d.message_end)
        })
    }

    /// Adds a signed list (starting at or after
    /// [`SegmentLists::listed_to`]), each segment's `(fin, message end)` in
    /// `flags`, and queues it to go out.
    pub fn push(&mut self, list: SegmentList, flags: &[(bool, bool)]) {
        debug_assert!(list.start >= self.listed_to);
        debug_assert_eq!(list.segments().count(), flags.len());
        let mut flags = flags.iter();
        for (start, e) in list.iter() {
            let (mut fin, mut message_end) = (false, false);
            for &(f, m) in flags.by_ref().take(e.count as usize) {
                (fin, message_end) = (fin | f, message_end | m);
            }
            // A run's segments carry no flags.
            debug_assert!(e.count == 1 || !(fin || message_end));
            self.listed.push_back(ListedEntry {
                start,
                len: e.len,
                count: e.count,
                fin,
                message_end,
            });
        }
        // A FIN alone (length 0) still occupies its offset.
        let fin_alone = list.entries.last().is_some_and(|e| e.len == 0);
        let end = list.end();
        self.listed_to = end + u64::from(fin_alone);
        self.pending.push_back(list.clone());
        self.kept.push_back((end, list));
    }

    /// The next list to multicast, if one waits.
    pub fn take_pending(&mut self) -> Option<SegmentList> {
        self.pending.pop_front()
    }

    /// The kept list naming the segment at `offset` (lists are kept in
    /// stream order: a binary search, then one list's entries).
    pub fn covering(&self, offset: u64) -> Option<&SegmentList> {
        let i = self
            .kept
            .partition_point(|(_, l)| l.start <= offset)
            .checked_sub(1)?;
        let l = &self.kept[i].1;
        l.segments().any(|(o, _)| o == offset).then_some(l)
    }

    /// The kept run containing the segment at `offset`: its offset and
    /// entry.
    pub fn run_at(&self, offset: u64) -> Option<(u64, ListEntry)> {
        let l = self.covering(offset)?;
        l.iter()
            .find(|(o, e)| (*o..o + e.bytes()).contains(&offset))
            .filter(|(_, e)| e.is_run())
    }

    /// Forgets lists and segments wholly below `base` (released data).
    pub fn release_below(&mut self, base: u64) {
        while self.kept.front().is_some_and(|(end, _)| *end < base) {
            self.kept.pop_front();
        }
        while self.listed.front().is_some_and(|e| e.end() < base) {
            self.listed.pop_front();
            self.released += 1;
        }
    }
}

/// What became of a listed DATA datagram at a receiver.
#[derive(Debug, PartialEq, Eq)]
pub enum Listed {
    /// Its hash matches its list: process it.
    Verified,
    /// Its list has not arrived: held.
    Held,
    /// A segment of a run not complete yet: held, and counted as received
    /// (acknowledged, selectively) — if it proves forged and no other copy
    /// came, its range is among [`SegmentVerifier::take_dropped`].
    HeldInRun {
        /// All of the run before it is held and the run starts at or below
        /// the delivery point: nothing before it is missing.
        in_order: bool,
    },
    /// It completed its run and the run's hash matches: process these
    /// held datagrams (itself among them), in stream order.
    Released(Vec<ReleasedSegment>),
    /// A copy of a segment of a run already settled: its bytes were taken,
    /// so it is a duplicate if it equals them (the caller compares, where
    /// it still holds them) and forged if not.
    Settled,
    /// Its list names another hash, or it is malformed: dropped.
    Forged,
    /// All of it was delivered already and its list is forgotten: dropped
    /// as a duplicate.
    Old,
}

/// A held datagram a list or a completed run released: its offset, when it
/// arrived, its frames.
pub type ReleasedSegment = (u64, Instant, Vec<u8>);

/// What the receiver already took of a range of the stream: copies its
/// bytes into the buffer given and returns true if it holds all of them
/// (bytes it took as the sender's: checked, or sent under its pair key, or
/// decoded from authenticated repair symbols).
pub type Taken<'a> = &'a dyn Fn(Range<u64>, &mut Vec<u8>) -> bool;

/// A known list entry at a receiver.
#[derive(Debug, Clone, Copy)]
struct Known {
    entry: ListEntry,
    /// A run whose hash matched (its segments are taken as they come).
    verified: bool,
}

/// One copy of a segment of a run, held.
#[derive(Debug)]
struct Copy {
    arrived: Instant,
    frames: Vec<u8>,
    /// Where its payload lies in `frames`.
    payload: Range<usize>,
}

impl Copy {
    fn payload(&self) -> &[u8] {
        &self.frames[self.payload.clone()]
    }
}

/// The held segments of a run not yet settled: per segment, the different
/// copies that came (the first one first).
#[derive(Debug)]
struct RunCopies {
    slots: Vec<Vec<Copy>>,
    /// When its first copy arrived (it is dropped [`MAX_SEGMENT_HOLD`]
    /// after).
    first: Instant,
    /// Its hash did not match, or two copies of a segment differ: the
    /// run's detail is asked for.
    wants_detail: bool,
}

impl RunCopies {
    fn copies(&self) -> usize {
        self.slots.iter().map(Vec::len).sum()
    }
}

/// A receiver's side: known entries, held datagrams and runs.
pub struct SegmentVerifier {
    key: [u8; 32],
    session_id: u64,
    /// Entries of verified lists by offset.
    known: BTreeMap<u64, Known>,
    /// Runs with held segments, by offset.
    runs: BTreeMap<u64, RunCopies>,
    /// Datagrams waiting for their list, by offset and hash: arrival,
    /// payload length, frames.
    held: BTreeMap<(u64, SegmentHash), (Instant, u64, Vec<u8>)>,
    /// Stream ranges of held datagrams dropped, not released, since
    /// [`SegmentVerifier::take_dropped`] (at most [`MAX_DROPPED_RANGES`]).
    dropped_ranges: Vec<Range<u64>>,
    /// Datagrams held in `held` and `runs`.
    held_count: usize,
    /// When we last asked the sender for a list or a detail.
    last_request: Option<Instant>,
    /// A run's bytes, gathered to hash them in one piece.
    scratch: Vec<u8>,
    /// Buffers of released datagrams handed back
    /// ([`SegmentVerifier::recycle`]), for the next held ones: a run's
    /// segments are held one allocation each otherwise.
    spare: Vec<Vec<u8>>,
    /// Datagrams dropped: held beyond the caps or too long, or held under
    /// an offset whose list named another hash (a forged one that arrives
    /// after its list is [`Listed::Forged`], counted by the caller).
    pub dropped: u64,
    /// Lists whose signature did not verify.
    pub bad_signatures: u64,
}

impl std::fmt::Debug for SegmentVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentVerifier")
            .field("known", &self.known.len())
            .field("runs", &self.runs.len())
            .field("held", &self.held_count)
            .finish()
    }
}

/// Where `d`'s payload lies in `frames`, if it lies there.
fn payload_range(frames: &[u8], d: &DataFrame<'_>) -> Option<Range<usize>> {
    let start = (d.payload.as_ptr() as usize).checked_sub(frames.as_ptr() as usize)?;
    let end = start + d.payload.len();
    (end <= frames.len()).then_some(start..end)
}

impl SegmentVerifier {
    /// A verifier of session `session_id`'s lists under `key`.
    pub fn new(key: [u8; 32], session_id: u64) -> Self {
        SegmentVerifier {
            key,
            session_id,
            known: BTreeMap::new(),
            runs: BTreeMap::new(),
            held: BTreeMap::new(),
            dropped_ranges: Vec::new(),
            held_count: 0,
            last_request: None,
            scratch: Vec::new(),
            spare: Vec::new(),
            dropped: 0,
            bad_signatures: 0,
        }
    }

    /// The known entry whose bytes contain `offset` (a FIN alone contains
    /// its own offset).
    fn entry_at(&self, offset: u64) -> Option<(u64, Known)> {
        let (&o, &k) = self.known.range(..=offset).next_back()?;
        (offset < o + k.entry.bytes().max(1)).then_some((o, k))
    }

    /// A listed datagram's one DATA frame `d` (its `frames` as opened),
    /// arrived at `now`, the stream delivered below `delivered`.
    pub fn on_data(
        &mut self,
        now: Instant,
        d: &DataFrame<'_>,
        frames: &[u8],
        delivered: u64,
        taken: Taken<'_>,
    ) -> Listed {
        let len = d.payload.len() as u64;
        let end = d.offset + len + u64::from(d.fin);
        let Some((start, k)) = self.entry_at(d.offset) else {
            if end <= delivered {
                return Listed::Old;
            }
            let hash = segment_hash(d.offset, d.fin, d.message_end, d.payload);
            self.hold_for_list(now, d.offset, hash, len, frames);
            return Listed::Held;
        };
        let e = k.entry;
        if !e.is_run() {
            let hash = segment_hash(d.offset, d.fin, d.message_end, d.payload);
            return if start == d.offset && e.len == len && e.hash == hash {
                Listed::Verified
            } else {
                Listed::Forged
            };
        }
        // A segment of a run: whole, in place, without flags.
        let at = d.offset - start;
        if !at.is_multiple_of(e.len) || len != e.len || d.fin || d.message_end {
            return Listed::Forged;
        }
        if k.verified {
            return Listed::Settled;
        }
        if start + e.bytes() <= delivered {
            return Listed::Old;
        }
        let Some(payload) = payload_range(frames, d) else {
            return Listed::Forged;
        };
        let copy = Copy {
            arrived: now,
            frames: self.buffer_of(frames),
            payload,
        };
        let slot = (at / e.len) as usize;
        self.place(now, start, slot, copy);
        let in_order = start <= delivered
            && (self.runs.get(&start))
                .is_some_and(|r| r.slots[..slot].iter().all(|s| !s.is_empty()));
        self.settle(start, taken)
            .map_or(Listed::HeldInRun { in_order }, Listed::Released)
    }

    /// A copy of `frames` to hold, in a spare buffer if one was handed
    /// back.
    fn buffer_of(&mut self, frames: &[u8]) -> Vec<u8> {
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(frames);
        buf
    }

    /// Takes back the buffer of a released datagram once it is processed,
    /// to hold a later one in (at most [`MAX_SPARE_BUFFERS`] are kept, none
    /// larger than [`MAX_SPARE_CAPACITY`] bytes).
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.spare.len() < MAX_SPARE_BUFFERS && buf.capacity() <= MAX_SPARE_CAPACITY {
            self.spare.push(buf);
        }
    }

    /// Holds a datagram whose list has not arrived (`len` payload bytes at
    /// `offset`).
    fn hold_for_list(
        &mut self,
        now: Instant,
        offset: u64,
        hash: SegmentHash,
        len: u64,
        frames: &[u8],
    ) {
        if self.held.contains_key(&(offset, hash)) {
            return;
        }
        self.make_room();
        self.held
            .insert((offset, hash), (now, len, frames.to_vec()));
        self.held_count += 1;
    }

    /// Notes that the held datagram of `range` was dropped unreleased.
    fn lost_held(&mut self, range: Range<u64>) {
        if let Some(last) = self.dropped_ranges.last_mut() {
            if last.end == range.start {
                last.end = range.end;
                return;
            }
        }
        if self.dropped_ranges.len() < MAX_DROPPED_RANGES {
            self.dropped_ranges.push(range);
        }
    }

    /// Notes that every held copy of the run at `start` was dropped.
    fn lost_run(&mut self, start: u64, run: &RunCopies) {
        let len = self.known.get(&start).map_or(0, |k| k.entry.len);
        for (i, s) in run.slots.iter().enumerate() {
            if !s.is_empty() {
                let o = start + i as u64 * len;
                self.lost_held(o..o + len);
            }
        }
    }

    /// Stream ranges of held datagrams dropped, not released, since the
    /// last call: where no other copy came (the receiver holds no byte
    /// there), those of runs were acknowledged in vain, and the sender is
    /// told to send them again.
    pub fn take_dropped(&mut self) -> Vec<Range<u64>> {
        std::mem::take(&mut self.dropped_ranges)
    }

    /// Stream ranges of the segments held in runs not complete yet (they
    /// count as received), in increasing order, adjacent ones joined.
    pub fn held_ranges(&self) -> Vec<Range<u64>> {
        let mut out: Vec<Range<u64>> = Vec::new();
        for (&o, run) in &self.runs {
            let len = self.known.get(&o).map_or(0, |k| k.entry.len);
            for (i, s) in run.slots.iter().enumerate() {
                if s.is_empty() {
                    continue;
                }
                let r = o + i as u64 * len..o + (i as u64 + 1) * len;
                match out.last_mut() {
                    Some(last) if last.end == r.start => last.end = r.end,
                    _ => out.push(r),
                }
            }
        }
        out
    }

    /// Frees a place for one more held datagram if all are taken: the
    /// lowest waiting for its list, else the run farthest ahead.
    fn make_room(&mut self) {
        if self.held_count < MAX_HELD_SEGMENTS {
            return;
        }
        if let Some(((o, _), (_, len, _))) = self.held.pop_first() {
            self.held_count -= 1;
            self.lost_held(o..o + len);
        } else if let Some((start, run)) = self.runs.pop_last() {
            self.held_count -= run.copies();
            self.lost_run(start, &run);
        } else {
            return;
        }
        self.dropped += 1;
    }

    /// Puts a copy of segment `slot` of the run at `start` among its held
    /// copies (the same bytes twice are kept once).
    fn place(&mut self, now: Instant, start: u64, slot: usize, copy: Copy) {
        if !self.runs.contains_key(&start) {
            let count = self.known[&start].entry.count as usize;
            self.runs.insert(
                start,
                RunCopies {
                    slots: (0..count).map(|_| Vec::new()).collect(),
                    first: now,
                    wants_detail: false,
                },
            );
        }
        let run = self.runs.get(&start).expect("made above");
        let copies = &run.slots[slot];
        if copies.iter().any(|c| c.payload() == copy.payload()) {
            return;
        }
        if copies.len() >= MAX_COPIES {
            self.dropped += 1;
            return;
        }
        self.make_room();
        let Some(run) = self.runs.get_mut(&start) else {
            self.dropped += 1; // it was the one dropped to make room
            return;
        };
        run.slots[slot].push(copy);
        self.held_count += 1;
    }

    /// Checks the run at `start` if every segment of it is held: the first
    /// copies, then (where two differ) the second ones. A match releases
    /// the matching copies (the others dropped); otherwise the run waits
    /// for its detail.
    fn settle(&mut self, start: u64, taken: Taken<'_>) -> Option<Vec<ReleasedSegment>> {
        let run = self.runs.get(&start)?;
        let e = self.known.get(&start)?.entry;
        // Segments it lacks the receiver may have taken otherwise (by
        // unicast, decoded): their bytes stand in.
        let mut have = Vec::new();
        let mut from_taken = vec![false; run.slots.len()];
        for (i, s) in run.slots.iter().enumerate() {
            if s.is_empty() {
                let o = start + i as u64 * e.len;
                if !taken(o..o + e.len, &mut have) {
                    return None;
                }
                from_taken[i] = true;
            }
        }
        let contested = run.slots.iter().any(|s| s.len() > 1);
        let tries: &[usize] = if contested { &[0, 1] } else { &[0] };
        let mut found = None;
        for &pick in tries {
            self.scratch.clear();
            let mut taken_at = 0;
            for s in &run.slots {
                match s.get(pick.min(s.len().saturating_sub(1))) {
                    Some(c) => self.scratch.extend_from_slice(c.payload()),
                    None => {
                        let n = e.len as usize;
                        self.scratch
                            .extend_from_slice(&have[taken_at..taken_at + n]);
                        taken_at += n;
                    }
                }
            }
            if run_hash(start, e.len, e.count, &[&self.scratch]) == e.hash {
                found = Some(pick);
                break;
            }
        }
        let Some(pick) = found else {
            self.runs.get_mut(&start).expect("checked").wants_detail = true;
            return None;
        };
        let run = self.runs.remove(&start).expect("checked");
        self.held_count -= run.copies();
        if let Some(k) = self.known.get_mut(&start) {
            k.verified = true;
        }
        let mut released = Vec::with_capacity(run.slots.len());
        for (i, mut s) in run.slots.into_iter().enumerate() {
            if from_taken[i] {
                continue;
            }
            self.dropped += s.len() as u64 - 1;
            let c = s.swap_remove(pick.min(s.len() - 1));
            released.push((start + i as u64 * e.len, c.arrived, c.frames));
        }
        Some(released)
    }

    /// Runs held that the receiver has now taken all of (the segments they
    /// lacked came otherwise: by unicast, decoded): those that check are
    /// released; those wholly below `delivered` forgotten.
    pub fn recheck(&mut self, delivered: u64, taken: Taken<'_>) -> Vec<ReleasedSegment> {
        self.forget_below(delivered);
        let starts: Vec<u64> = self.runs.keys().copied().collect();
        let mut released = Vec::new();
        for o in starts {
            released.extend(self.settle(o, taken).into_iter().flatten());
        }
        released
    }

    /// A list: if its signature verifies, the held datagrams it releases
    /// (by offset), others held at its offsets dropped; `None` if it does
    /// not verify.
    pub fn on_list(
        &mut self,
        list: &SegmentList,
        delivered: u64,
        taken: Taken<'_>,
    ) -> Option<Vec<ReleasedSegment>> {
        if !list.verify(&self.key, self.session_id) {
            self.bad_signatures += 1;
            return None;
        }
        // A run's detail must name all of it: single entries covering a
        // known, unsettled run only in part are left out.
        let (start, end) = (list.start, list.end());
        let partial: Vec<Range<u64>> = (self.known.range(..end))
            .rev()
            .take_while(|(&o, k)| o + k.entry.bytes() > start)
            .filter(|(&o, k)| {
                let e = k.entry;
                e.is_run() && !k.verified && (o < start || o + e.bytes() > end)
            })
            .map(|(&o, k)| o..o + k.entry.bytes())
            .collect();
        let mut released = Vec::new();
        for (o, e) in list.iter() {
            if !e.is_run() && partial.iter().any(|r| r.contains(&o)) {
                continue;
            }
            self.learn(o, e, taken, &mut released);
        }
        // The list answers the request: ask for the next one at once.
        self.last_request = None;
        self.forget_below(delivered);
        Some(released)
    }

    /// Takes in one entry of a verified list.
    fn learn(
        &mut self,
        o: u64,
        e: ListEntry,
        taken: Taken<'_>,
        released: &mut Vec<ReleasedSegment>,
    ) {
        if let Some((s, k)) = self.entry_at(o) {
            if s == o && k.entry == e {
                return; // known already (a list asked for again)
            }
            if !e.is_run() && k.entry.is_run() && !k.verified {
                // The detail of a run: its held copies are checked one by
                // one, as if their list had just come.
                self.detail(s);
            } else {
                return; // covered by what is known (a run's detail came first)
            }
        }
        self.known.insert(
            o,
            Known {
                entry: e,
                verified: false,
            },
        );
        let under: Vec<_> = self
            .held
            .range((o, [0; SEGMENT_HASH_LEN])..(o + e.bytes().max(1), [0; SEGMENT_HASH_LEN]))
            .map(|(k, _)| *k)
            .collect();
        for key in under {
            let (arrived, len, frames) = self.held.remove(&key).expect("listed above");
            self.held_count -= 1;
            if !e.is_run() {
                if key.0 == o && key.1 == e.hash {
                    released.push((o, arrived, frames));
                } else {
                    self.dropped += 1;
                    self.lost_held(key.0..key.0 + len);
                }
                continue;
            }
            // A segment of the run held before the list came: into the run.
            let mut it = crate::wire::decode_frames(&frames);
            let d = match (it.next(), it.next()) {
                (Some(Ok(crate::wire::Frame::Data(d))), None) => d,
                _ => {
                    self.dropped += 1;
                    continue;
                }
            };
            let at = d.offset - o;
            let fits = at.is_multiple_of(e.len) && d.payload.len() as u64 == e.len && !d.fin;
            match payload_range(&frames, &d).filter(|_| fits && !d.message_end) {
                None => {
                    self.dropped += 1;
                    self.lost_held(key.0..key.0 + len);
                }
                Some(payload) => {
                    let slot = (at / e.len) as usize;
                    let copy = Copy {
                        arrived,
                        frames,
                        payload,
                    };
                    self.place(arrived, o, slot, copy);
                }
            }
        }
        if e.is_run() {
            released.extend(self.settle(o, taken).into_iter().flatten());
        }
    }

    /// Turns the unsettled run at `start` back into held datagrams waiting
    /// for the lists of its single segments (its detail).
    fn detail(&mut self, start: u64) {
        let Some(k) = self.known.remove(&start) else {
            return;
        };
        let Some(run) = self.runs.remove(&start) else {
            return;
        };
        self.held_count -= run.copies();
        for (i, copies) in run.slots.into_iter().enumerate() {
            let offset = start + i as u64 * k.entry.len;
            for c in copies {
                let hash = segment_hash(offset, false, false, c.payload());
                self.hold_for_list(c.arrived, offset, hash, k.entry.len, &c.frames);
            }
        }
    }

    /// Forgets what was delivered, then, if still too many, the farthest
    /// entries.
    fn forget_below(&mut self, delivered: u64) {
        while let Some((&o, k)) = self.known.first_key_value() {
            if o + k.entry.bytes() >= delivered || self.known.len() <= MAX_KNOWN_ENTRIES / 2 {
                break;
            }
            self.known.remove(&o);
        }
        while self.known.len() > MAX_KNOWN_ENTRIES {
            self.known.pop_last();
        }
        // Runs whose bytes all came otherwise (by unicast, decoded) or
        // whose entry was forgotten.
        let gone: Vec<u64> = self
            .runs
            .keys()
            .copied()
            .filter(|o| {
                self.known
                    .get(o)
                    .is_none_or(|k| o + k.entry.bytes() <= delivered)
            })
            .collect();
        for o in gone {
            let run = self.runs.remove(&o).expect("listed above");
            self.held_count -= run.copies();
        }
    }

    /// The lowest offset to ask the sender about now, and whether for a
    /// run's detail (else for a missing list); requests at most every
    /// [`REQUEST_INTERVAL`].
    fn wanted(&self) -> Option<(u64, bool, Instant)> {
        let list = (self.held.first_key_value()).map(|(k, v)| (k.0, false, v.0));
        let detail = self
            .runs
            .iter()
            .find(|(_, r)| r.wants_detail)
            .map(|(&o, r)| (o, true, r.first));
        [list, detail].into_iter().flatten().min_by_key(|w| w.0)
    }

    /// When [`SegmentVerifier::take_request`] has work: while datagrams
    /// wait for their list or a run for its detail, [`REQUEST_INTERVAL`]
    /// after the last request.
    pub fn request_deadline(&self) -> Option<Instant> {
        let (_, _, since) = self.wanted()?;
        Some(self.last_request.map_or(since, |t| t + REQUEST_INTERVAL))
    }

    /// What to ask the sender at `now`, if anything: the offset whose list
    /// is missing (the lowest held one) or whose run's detail is wanted
    /// (`true`), if the last request is at least [`REQUEST_INTERVAL`] old.
    /// Datagrams held longer than [`MAX_SEGMENT_HOLD`] are dropped first.
    pub fn take_request(&mut self, now: Instant) -> Option<(u64, bool)> {
        let expired: Vec<_> = (self.held.iter())
            .filter(|(_, (arrived, _, _))| now >= *arrived + MAX_SEGMENT_HOLD)
            .map(|(k, (_, len, _))| (*k, *len))
            .collect();
        let mut dropped = expired.len();
        for (k, len) in expired {
            self.held.remove(&k);
            self.lost_held(k.0..k.0 + len);
        }
        let stale: Vec<u64> = (self.runs.iter())
            .filter(|(_, r)| now >= r.first + MAX_SEGMENT_HOLD)
            .map(|(&o, _)| o)
            .collect();
        for o in stale {
            let run = self.runs.remove(&o).expect("listed above");
            dropped += run.copies();
            self.lost_run(o, &run);
        }
        self.held_count -= dropped;
        self.dropped += dropped as u64;
        let (offset, detail, _) = self.wanted()?;
        if self
            .last_request
            .is_some_and(|t| now < t + REQUEST_INTERVAL)
        {
            return None;
        }
        self.last_request = Some(now);
        Some((offset, detail))
    }

    /// Datagrams held now.
    pub fn held(&self) -> usize {
        self.held_count
    }
}

#[cfg(test)]
mod tests;
