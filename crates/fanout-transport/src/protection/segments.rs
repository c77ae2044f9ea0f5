//! Signed segment lists: multicast DATA a receiver checks on arrival
//! (`docs/wire.md` §4.12, listed data; `docs/security.md`).
//!
//! The sender knows the bytes of a file (and of whatever a stream's
//! application has written) before it sends them, so it can sign them
//! *ahead*: before the first segment of a run goes out, it multicasts a
//! SEGMENTS frame naming the next segments by length and hash, signed with
//! the session's Ed25519 key (the one of [`super::source`]). A DATA frame
//! that such a list names is checked when it arrives — one hash — and
//! processed at once: no wait for a list, no burst of releases, and no
//! AEAD tag on those datagrams ([`super::DataKey`]). Repairs resend the
//! same segments, so the same hashes check them.
//!
//! A datagram whose list has not arrived (lost, or overtaken) waits, at
//! most [`MAX_HELD_SEGMENTS`] of them, and the receiver asks its sender for
//! the list under its pair key (SEGMENTS_REQUEST, at most every
//! [`REQUEST_INTERVAL`]); the answer is the same signed list, by unicast.
//! Everything else the sender multicasts (control frames, coded repair
//! symbols, data beyond the lists) goes under the group AEAD key and the
//! datagram lists of [`super::source`].

use super::source::{Signer, SIGNATURE_LEN};
use crate::wire::DataFrame;
use fanout_core::codec::{DecodeError, Reader, Writer};
use fanout_core::time::Instant;
use ring::signature::{UnparsedPublicKey, ED25519};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Bytes of a segment's hash in a list.
pub const SEGMENT_HASH_LEN: usize = 16;
/// Most segments one list names (fewer if they would not fit its datagram).
pub const MAX_LIST_SEGMENTS: usize = 128;
/// Segment datagrams a receiver holds while their list is missing; beyond
/// it the oldest is dropped (counted).
pub const MAX_HELD_SEGMENTS: usize = 1024;
/// Segments whose hashes a receiver keeps (those below its delivery point
/// are dropped first): about 24 MiB of 1452-byte segments.
pub const MAX_KNOWN_SEGMENTS: usize = 16_384;
/// Least time between two requests of a receiver for missing lists.
pub const REQUEST_INTERVAL: Duration = Duration::from_millis(20);
/// Longest a datagram waits for its list; then it is dropped (counted) and
/// repaired like a loss. Asked for every [`REQUEST_INTERVAL`], a list that
/// exists arrives long before.
pub const MAX_SEGMENT_HOLD: Duration = Duration::from_secs(3);
/// Bytes of a datagram around a list besides its entries: header, frame
/// type, start (at most 8) and count (at most 2), signature, AEAD tag.
const LIST_OVERHEAD: usize = crate::wire::HEADER_LEN + 1 + 8 + 2 + SIGNATURE_LEN + super::TAG_LEN;

const CONTEXT: &[u8] = b"fanout segments v1";

/// One segment's hash.
pub type SegmentHash = [u8; SEGMENT_HASH_LEN];

/// The hash a list names a segment by: SHA-256 over its offset (u64,
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

/// One listed segment: its stream bytes' length and hash (its offset
/// follows from the list's start and the lengths before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedSegment {
    /// Payload bytes (0 for a FIN alone).
    pub len: u64,
    /// [`segment_hash`].
    pub hash: SegmentHash,
}

/// A signed list of consecutive segments (the SEGMENTS frame).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentList {
    /// Stream offset of the first segment.
    pub start: u64,
    /// The segments, in stream order.
    pub segments: Vec<ListedSegment>,
    /// Ed25519 over the context, the session id, the start and every
    /// segment's length and hash.
    pub signature: [u8; SIGNATURE_LEN],
}

fn message(session_id: u64, start: u64, segments: &[ListedSegment]) -> Vec<u8> {
    let mut m = Vec::with_capacity(CONTEXT.len() + 16 + segments.len() * 24);
    m.extend_from_slice(CONTEXT);
    m.extend_from_slice(&session_id.to_be_bytes());
    m.extend_from_slice(&start.to_be_bytes());
    for s in segments {
        m.extend_from_slice(&s.len.to_be_bytes());
        m.extend_from_slice(&s.hash);
    }
    m
}

impl SegmentList {
    /// The list of `segments` from `start`, signed by `signer` for session
    /// `session_id`.
    pub fn sign(
        signer: &Signer,
        session_id: u64,
        start: u64,
        segments: Vec<ListedSegment>,
    ) -> Self {
        let signature = signer.sign(&message(session_id, start, &segments));
        SegmentList {
            start,
            segments,
            signature,
        }
    }

    /// Whether `key` signed it for session `session_id`.
    pub fn verify(&self, key: &[u8; 32], session_id: u64) -> bool {
        UnparsedPublicKey::new(&ED25519, key)
            .verify(
                &message(session_id, self.start, &self.segments),
                &self.signature,
            )
            .is_ok()
    }

    /// `(offset, segment)` of each segment.
    pub fn iter(&self) -> impl Iterator<Item = (u64, ListedSegment)> + '_ {
        let mut at = self.start;
        self.segments.iter().map(move |s| {
            let o = at;
            at += s.len;
            (o, *s)
        })
    }

    /// The stream offset after its last segment's bytes.
    pub fn end(&self) -> u64 {
        self.start + self.segments.iter().map(|s| s.len).sum::<u64>()
    }

    /// Encodes its fields (the SEGMENTS frame after its type byte).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_varint(self.start);
        out.put_varint(self.segments.len() as u64);
        for s in &self.segments {
            out.put_varint(s.len);
            out.put_bytes(&s.hash);
        }
        out.put_bytes(&self.signature);
    }

    /// Decodes its fields.
    pub fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let start = r.varint()?;
        let n = r.varint_len("segments.count", MAX_LIST_SEGMENTS)?;
        if n == 0 {
            return Err(DecodeError::Invalid("segments.count"));
        }
        let mut segments = Vec::with_capacity(n);
        let mut end = start;
        for _ in 0..n {
            let len = r.varint()?;
            end = end
                .checked_add(len)
                .ok_or(DecodeError::Invalid("segments.len"))?;
            let hash = r
                .bytes(SEGMENT_HASH_LEN)?
                .try_into()
                .map_err(|_| DecodeError::Invalid("segments.hash"))?;
            segments.push(ListedSegment { len, hash });
        }
        let signature = r
            .bytes(SIGNATURE_LEN)?
            .try_into()
            .map_err(|_| DecodeError::Invalid("segments.signature"))?;
        Ok(SegmentList {
            start,
            segments,
            signature,
        })
    }
}

/// The sender's side: what is listed, and the lists kept for members that
/// ask again.
#[derive(Debug)]
pub struct SegmentLists {
    /// Most segments a list names: what fits its datagram.
    max_segments: usize,
    /// The stream offset up to which segments are listed.
    listed_to: u64,
    /// Listed segments not yet released, by increasing offset: `(offset,
    /// (payload length, fin, message end))`; the session sends them
    /// exactly so. Appended at the back, released from the front, searched
    /// by bisection (one lookup per multicast datagram sent).
    listed: VecDeque<(u64, (u64, bool, bool))>,
    /// Lists of data not yet released, oldest first, for requests.
    kept: VecDeque<SegmentList>,
    /// Lists to multicast before their segments.
    pending: VecDeque<SegmentList>,
}

impl SegmentLists {
    /// Lists for datagrams of at most `max_datagram` bytes.
    pub fn new(max_datagram: usize) -> Self {
        SegmentLists {
            max_segments: Self::segments_per_list(max_datagram),
            listed_to: 0,
            listed: VecDeque::new(),
            kept: VecDeque::new(),
            pending: VecDeque::new(),
        }
    }

    /// Most entries a list in a `max_datagram`-byte datagram holds: each
    /// is the length's varint (a segment is shorter than its datagram) and
    /// the hash.
    fn segments_per_list(max_datagram: usize) -> usize {
        (max_datagram.saturating_sub(LIST_OVERHEAD)
            / (fanout_core::codec::varint_size(max_datagram as u64) + SEGMENT_HASH_LEN))
            .clamp(1, MAX_LIST_SEGMENTS)
    }

    /// Lists made from now on fit datagrams of at most `max_datagram`
    /// bytes (those already made keep their size).
    pub fn set_max_datagram(&mut self, max_datagram: usize) {
        self.max_segments = Self::segments_per_list(max_datagram);
    }

    /// Most segments one list names.
    pub fn max_segments(&self) -> usize {
        self.max_segments
    }

    /// Where the next list starts: the first offset not listed yet (0
    /// before any).
    pub fn listed_to(&self) -> u64 {
        self.listed_to
    }

    /// The listed segment at `offset`, if one is: `(payload length, fin,
    /// message end)`.
    pub fn listed(&self, offset: u64) -> Option<(u64, bool, bool)> {
        let i = self.listed.partition_point(|(o, _)| *o < offset);
        self.listed
            .get(i)
            .and_then(|&(o, entry)| (o == offset).then_some(entry))
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
        self.listed(d.offset) == Some((d.payload.len() as u64, d.fin, d.message_end))
    }

    /// Adds a signed list (starting at or after
    /// [`SegmentLists::listed_to`]), each segment's `(fin, message end)` in
    /// `flags`, and queues it to go out.
    pub fn push(&mut self, list: SegmentList, flags: &[(bool, bool)]) {
        debug_assert!(list.start >= self.listed_to);
        debug_assert_eq!(list.segments.len(), flags.len());
        for ((o, s), (fin, message_end)) in list.iter().zip(flags) {
            self.listed.push_back((o, (s.len, *fin, *message_end)));
        }
        // A FIN alone (length 0) still occupies its offset.
        self.listed_to = list.end() + u64::from(list.segments.last().is_some_and(|s| s.len == 0));
        self.pending.push_back(list.clone());
        self.kept.push_back(list);
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
            .partition_point(|l| l.start <= offset)
            .checked_sub(1)?;
        let l = &self.kept[i];
        l.iter().any(|(o, _)| o == offset).then_some(l)
    }

    /// Forgets lists and segments wholly below `base` (released data).
    pub fn release_below(&mut self, base: u64) {
        while self.kept.front().is_some_and(|l| l.end() < base) {
            self.kept.pop_front();
        }
        while let Some(&(o, (len, _, _))) = self.listed.front() {
            if o + len >= base {
                break;
            }
            self.listed.pop_front();
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
    /// Its list names another hash, or it is malformed: dropped.
    Forged,
    /// All of it was delivered already and its list is forgotten: dropped
    /// as a duplicate.
    Old,
}

/// A held datagram a list released: its offset, when it arrived, its
/// frames.
pub type ReleasedSegment = (u64, Instant, Vec<u8>);

/// A receiver's side: known segment hashes and held datagrams.
pub struct SegmentVerifier {
    key: [u8; 32],
    session_id: u64,
    /// Verified segments by offset: `(payload length, hash)`.
    known: BTreeMap<u64, (u64, SegmentHash)>,
    /// Datagrams waiting for their list, by offset and hash.
    held: BTreeMap<(u64, SegmentHash), (Instant, Vec<u8>)>,
    /// When we last asked the sender for a list.
    last_request: Option<Instant>,
    /// Datagrams dropped: held beyond the cap, or held under an offset whose
    /// list named another hash (a forged one that arrives after its list
    /// is [`Listed::Forged`], counted by the caller).
    pub dropped: u64,
    /// Lists whose signature did not verify.
    pub bad_signatures: u64,
}

impl std::fmt::Debug for SegmentVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentVerifier")
            .field("known", &self.known.len())
            .field("held", &self.held.len())
            .finish()
    }
}

impl SegmentVerifier {
    /// A verifier of session `session_id`'s lists under `key`.
    pub fn new(key: [u8; 32], session_id: u64) -> Self {
        SegmentVerifier {
            key,
            session_id,
            known: BTreeMap::new(),
            held: BTreeMap::new(),
            last_request: None,
            dropped: 0,
            bad_signatures: 0,
        }
    }

    /// A listed datagram's one DATA frame `d` (its `frames` as opened),
    /// arrived at `now`, the stream delivered below `delivered`.
    pub fn on_data(
        &mut self,
        now: Instant,
        d: &DataFrame<'_>,
        frames: &[u8],
        delivered: u64,
    ) -> Listed {
        let hash = segment_hash(d.offset, d.fin, d.message_end, d.payload);
        match self.known.get(&d.offset) {
            Some((len, h)) if *len == d.payload.len() as u64 && *h == hash => Listed::Verified,
            Some(_) => Listed::Forged,
            None if d.offset + d.payload.len() as u64 + u64::from(d.fin) <= delivered => {
                Listed::Old
            }
            None => {
                if !self.held.contains_key(&(d.offset, hash)) {
                    if self.held.len() >= MAX_HELD_SEGMENTS {
                        self.held.pop_first();
                        self.dropped += 1;
                    }
                    self.held.insert((d.offset, hash), (now, frames.to_vec()));
                }
                Listed::Held
            }
        }
    }

    /// A list: if its signature verifies, the held datagrams it names (by
    /// offset), others held at its offsets dropped; `None` if it does not.
    pub fn on_list(&mut self, list: &SegmentList, delivered: u64) -> Option<Vec<ReleasedSegment>> {
        if !list.verify(&self.key, self.session_id) {
            self.bad_signatures += 1;
            return None;
        }
        let mut released = Vec::new();
        for (o, s) in list.iter() {
            let under: Vec<_> = self
                .held
                .range((o, [0; SEGMENT_HASH_LEN])..=(o, [0xff; SEGMENT_HASH_LEN]))
                .map(|(k, _)| *k)
                .collect();
            for k in under {
                let (arrived, frames) = self.held.remove(&k).expect("listed above");
                if k.1 == s.hash {
                    released.push((o, arrived, frames));
                } else {
                    self.dropped += 1;
                }
            }
            self.known.insert(o, (s.len, s.hash));
        }
        // The list answers the request: ask for the next one at once.
        self.last_request = None;
        // Forget what was delivered, then, if still too many, the farthest.
        while let Some((&o, &(len, _))) = self.known.first_key_value() {
            if o + len >= delivered || self.known.len() <= MAX_KNOWN_SEGMENTS / 2 {
                break;
            }
            self.known.remove(&o);
        }
        while self.known.len() > MAX_KNOWN_SEGMENTS {
            self.known.pop_last();
        }
        Some(released)
    }

    /// When [`SegmentVerifier::take_request`] has work: while datagrams
    /// wait for their list, [`REQUEST_INTERVAL`] after the last request.
    pub fn request_deadline(&self) -> Option<Instant> {
        let (_, (arrived, _)) = self.held.first_key_value()?;
        Some(self.last_request.map_or(*arrived, |t| t + REQUEST_INTERVAL))
    }

    /// The offset whose list to ask the sender for at `now` — the lowest
    /// held one — if one is missing and the last request is at least
    /// [`REQUEST_INTERVAL`] old. Datagrams held longer than
    /// [`MAX_SEGMENT_HOLD`] are dropped first.
    pub fn take_request(&mut self, now: Instant) -> Option<u64> {
        let before = self.held.len();
        self.held
            .retain(|_, (arrived, _)| now < *arrived + MAX_SEGMENT_HOLD);
        self.dropped += (before - self.held.len()) as u64;
        let (&(offset, _), _) = self.held.first_key_value()?;
        if self
            .last_request
            .is_some_and(|t| now < t + REQUEST_INTERVAL)
        {
            return None;
        }
        self.last_request = Some(now);
        Some(offset)
    }

    /// Datagrams held now.
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WireTimestamp;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    fn data(offset: u64, payload: &[u8], fin: bool) -> DataFrame<'_> {
        DataFrame {
            offset,
            timestamp: WireTimestamp(0),
            fin,
            message_end: false,
            payload,
        }
    }

    /// A list of `n` segments of 100 bytes from `start`, the last ending
    /// the stream if `fin`.
    fn list(signer: &Signer, start: u64, n: u64, fin: bool) -> (SegmentList, Vec<Vec<u8>>) {
        let payloads: Vec<Vec<u8>> = (0..n).map(|i| vec![(start / 100 + i) as u8; 100]).collect();
        let segments = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| ListedSegment {
                len: 100,
                hash: segment_hash(start + 100 * i as u64, fin && i as u64 == n - 1, false, p),
            })
            .collect();
        (SegmentList::sign(signer, 42, start, segments), payloads)
    }

    #[test]
    fn listed_data_is_checked_on_arrival_and_forgeries_are_not() {
        let signer = Signer::new([1; 32], 1452);
        let mut v = SegmentVerifier::new(signer.public_key(), 42);
        let (l, payloads) = list(&signer, 0, 10, true);
        assert!(v.on_list(&l, 0).unwrap().is_empty());
        for (i, p) in payloads.iter().enumerate() {
            let fin = i == 9;
            let d = data(100 * i as u64, p, fin);
            assert_eq!(v.on_data(at(0), &d, b"", 0), Listed::Verified);
            // Another payload, the FIN flag flipped, or another length
            // under the same offset: forged.
            let mut other = p.clone();
            other[3] ^= 1;
            assert_eq!(
                v.on_data(at(0), &data(100 * i as u64, &other, fin), b"", 0),
                Listed::Forged
            );
            assert_eq!(
                v.on_data(at(0), &data(100 * i as u64, p, !fin), b"", 0),
                Listed::Forged
            );
            assert_eq!(
                v.on_data(at(0), &data(100 * i as u64, &p[1..], fin), b"", 0),
                Listed::Forged
            );
        }
        // A list under another key, another session, or altered: refused.
        let other = Signer::new([2; 32], 1452);
        let (forged, _) = list(&other, 1000, 5, false);
        assert_eq!(v.on_list(&forged, 0), None);
        let (mut altered, _) = list(&signer, 1000, 5, false);
        altered.segments[2].hash[0] ^= 1;
        assert_eq!(v.on_list(&altered, 0), None);
        let mut wrong_session = SegmentVerifier::new(signer.public_key(), 43);
        assert_eq!(wrong_session.on_list(&l, 0), None);
        assert_eq!(v.bad_signatures, 2);
        // Delivered already and forgotten: a duplicate.
        let mut fresh = SegmentVerifier::new(signer.public_key(), 42);
        assert_eq!(
            fresh.on_data(at(0), &data(0, &payloads[0], false), b"", 100),
            Listed::Old
        );
    }

    #[test]
    fn datagrams_ahead_of_their_list_wait_and_are_asked_for() {
        let signer = Signer::new([1; 32], 1452);
        let mut v = SegmentVerifier::new(signer.public_key(), 42);
        let (l, payloads) = list(&signer, 500, 4, false);
        assert_eq!(v.request_deadline(), None);
        assert_eq!(
            v.on_data(at(0), &data(700, &payloads[2], false), b"two", 0),
            Listed::Held
        );
        assert_eq!(
            v.on_data(at(1), &data(600, b"forged", false), b"x", 0),
            Listed::Held
        );
        assert_eq!(
            v.on_data(at(2), &data(600, &payloads[1], false), b"one", 0),
            Listed::Held
        );
        assert_eq!(v.held(), 3);
        // Asked for at once, then not again within the interval.
        assert_eq!(
            v.request_deadline(),
            Some(at(1)),
            "the lowest held offset arrived at 1 ms"
        );
        assert_eq!(v.take_request(at(2)), Some(600));
        assert_eq!(v.take_request(at(3)), None);
        assert_eq!(v.request_deadline(), Some(at(2) + REQUEST_INTERVAL));
        let released = v.on_list(&l, 0).unwrap();
        let got: Vec<(u64, &[u8])> = released.iter().map(|r| (r.0, &r.2[..])).collect();
        assert_eq!(got, [(600, &b"one"[..]), (700, &b"two"[..])]);
        assert_eq!(v.dropped, 1, "the forged one under 600");
        assert_eq!(v.held(), 0);
        assert_eq!(v.request_deadline(), None);
        // Held too long: dropped.
        v.on_data(at(10), &data(5000, b"never listed", false), b"", 0);
        assert!(v.take_request(at(10)).is_some());
        assert_eq!(v.take_request(at(10) + MAX_SEGMENT_HOLD), None);
        assert_eq!(v.held(), 0);
        assert_eq!(v.dropped, 2);
    }

    #[test]
    fn holding_and_knowing_are_bounded() {
        let signer = Signer::new([1; 32], 1452);
        let mut v = SegmentVerifier::new(signer.public_key(), 42);
        for i in 0..(MAX_HELD_SEGMENTS as u64 + 10) {
            v.on_data(at(0), &data(i * 100, b"x", false), b"", 0);
        }
        assert_eq!(v.held(), MAX_HELD_SEGMENTS);
        assert_eq!(v.dropped, 10);
        let mut start = 0;
        while start < 200 * MAX_KNOWN_SEGMENTS as u64 {
            let (l, _) = list(&signer, start, 100, false);
            v.on_list(&l, 0);
            start += 100 * 100;
        }
        assert!(v.known.len() <= MAX_KNOWN_SEGMENTS);
    }

    #[test]
    fn the_sender_keeps_lists_until_their_data_is_released() {
        let signer = Signer::new([1; 32], 1452);
        let mut lists = SegmentLists::new(1452);
        assert_eq!(lists.max_segments(), 74);
        let (a, _) = list(&signer, 0, 10, false);
        lists.push(a.clone(), &[(false, false); 10]);
        let (b, _) = list(&signer, 1000, 5, true);
        lists.push(
            b.clone(),
            &[
                (false, false),
                (false, false),
                (false, false),
                (false, false),
                (true, false),
            ],
        );
        assert_eq!(lists.listed_to(), 1500);
        assert_eq!(lists.listed(1400), Some((100, true, false)));
        assert_eq!(lists.listed(1450), None);
        assert_eq!(lists.take_pending(), Some(a.clone()));
        assert_eq!(lists.take_pending(), Some(b.clone()));
        assert_eq!(lists.covering(300), Some(&a));
        assert_eq!(lists.covering(1100), Some(&b));
        assert_eq!(lists.covering(350), None, "not a segment's start");
        lists.release_below(1200);
        assert_eq!(lists.covering(300), None);
        assert_eq!(lists.covering(1100), Some(&b));
        // Encoded, a full list fits its datagram.
        let (mut full, _) = list(&signer, u64::MAX >> 3, lists.max_segments() as u64, false);
        for s in &mut full.segments {
            s.len = 1400;
        }
        let mut out = Vec::new();
        crate::wire::Frame::Segments(full.clone()).encode(&mut out);
        let datagram = crate::wire::HEADER_LEN + out.len() + super::super::TAG_LEN;
        assert!(datagram <= 1452, "{datagram}");
        let mut frames = crate::wire::decode_frames(&out);
        assert!(matches!(frames.next(), Some(Ok(crate::wire::Frame::Segments(l))) if l == full));
    }
}
