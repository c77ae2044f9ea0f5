//! The downstream side of a host (the source or a relay): its children's
//! connections, each greeted with the manifest record and then fed frames
//! from the host's [`Relay`] as fast as it takes them.

use crate::hop::{hello_len, HopError, HELLO};
use crate::relay::{Downstream, DownstreamCounts, Relay};
use crate::sent::{have_body_len, SentSource, HAVE_HEADER, HAVE_MAGIC};
use crate::symbol::HEADER_LEN;
use raptorq::PayloadId;

/// A child connection's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChildId(usize);

/// Who a child said it is, and where it connected from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    /// The name in its hello (`None`: anonymous, or not UTF-8).
    pub name: Option<String>,
    /// Its peer address's IP, when the runtime said.
    pub peer: Option<std::net::IpAddr>,
}

#[derive(Debug)]
struct Child {
    /// Its hello so far.
    hello: Vec<u8>,
    /// Its hello is whole.
    greeted: bool,
    /// Its peer's IP, when the runtime said.
    peer: Option<std::net::IpAddr>,
    /// Its greeting was handed out ([`Children::take_greeting`]).
    greeting_taken: bool,
    /// Bytes of the manifest record written.
    record_at: usize,
    /// Its place in the relay, once it greeted and the object is known.
    downstream: Option<Downstream>,
    /// The source symbols it was given, when the host keeps that record.
    sent: Option<SentSource>,
    /// Its have message so far (after the hello), at most
    /// [`MAX_HAVE_BYTES`].
    have: Vec<u8>,
    /// Bytes of its have message read (kept or not).
    have_got: usize,
    /// Its have message is whole.
    had: bool,
}

/// A have message's body length for blocks of `k` source symbols each.
fn have_body_bytes(k: &[u32]) -> usize {
    k.iter().map(|&k| 4 + (k as usize).div_ceil(8)).sum()
}

/// The largest have message a child may send, bytes: the header and, for
/// the largest layout, 4 bytes and a bit per source symbol of each of 255
/// blocks of 56 403 symbols (1.8 MB).
pub const MAX_HAVE_BYTES: usize = HAVE_HEADER + 255 * (4 + 56_403usize.div_ceil(8));

impl Child {
    /// Reads what of `bytes` belongs to its have message, keeping the body
    /// unless `keep` is `Some(0)`: the bytes taken.
    fn read_have(&mut self, bytes: &[u8], keep: Option<usize>) -> Result<usize, HopError> {
        let want = if self.have_got < HAVE_HEADER {
            HAVE_HEADER
        } else {
            HAVE_HEADER + self.have_body(keep)?
        };
        let take = (want - self.have_got).min(bytes.len());
        if self.have_got < HAVE_HEADER || keep != Some(0) {
            self.have.extend_from_slice(&bytes[..take]);
        }
        self.have_got += take;
        let magic = self.have.len().min(HAVE_MAGIC.len());
        if self.have[..magic] != HAVE_MAGIC[..magic] {
            return Err(HopError::ChildBytes);
        }
        if self.have_got >= HAVE_HEADER {
            self.had = self.have_got == HAVE_HEADER + self.have_body(keep)?;
        }
        Ok(take)
    }

    /// Its have's body length from its header: refused past the bound, or
    /// when `keep` gives the object's length and it is another.
    fn have_body(&self, keep: Option<usize>) -> Result<usize, HopError> {
        let body =
            have_body_len(&self.have, MAX_HAVE_BYTES - HAVE_HEADER).ok_or(HopError::ChildBytes)?;
        match keep {
            Some(n) if n > 0 && body != n => Err(HopError::ChildBytes),
            _ => Ok(body),
        }
    }

    /// Its record for blocks of `k` source symbols: what its have said,
    /// if anything (a have of another layout says nothing).
    fn record(&self, k: &[u32]) -> SentSource {
        (self.had && self.have.len() > HAVE_HEADER)
            .then(|| SentSource::from_have(k, &self.have[HAVE_HEADER..]))
            .flatten()
            .unwrap_or_else(|| SentSource::new(k))
    }
}

/// A host's children.
#[derive(Debug)]
pub struct Children {
    buffer_bytes: usize,
    /// The manifest record and the relay, once the object is known.
    object: Option<(Vec<u8>, Relay)>,
    kids: Vec<Option<Child>>,
    /// Each block's source symbol count, when every child's source
    /// symbols are recorded.
    track: Option<Vec<u32>>,
}

impl Children {
    /// Children of a host whose relay keeps `buffer_bytes` of frames.
    pub fn new(buffer_bytes: usize) -> Self {
        Children {
            buffer_bytes,
            object: None,
            kids: Vec::new(),
            track: None,
        }
    }

    /// The object is known: its manifest record and frame length.
    pub fn start(&mut self, record: Vec<u8>, frame_len: usize) {
        let mut relay = Relay::new(frame_len, self.buffer_bytes);
        for c in self.kids.iter_mut().flatten() {
            if c.greeted {
                c.downstream = Some(relay.add_downstream());
                c.sent = self.track.as_deref().map(|k| c.record(k));
            }
        }
        self.object = Some((record, relay));
    }

    /// Records from now on which source symbols each child is given, for
    /// an object whose blocks have `k` source symbols each (see
    /// [`crate::sent`]).
    pub fn track_source_symbols(&mut self, k: &[u32]) {
        for c in self.kids.iter_mut().flatten() {
            if c.downstream.is_some() {
                c.sent = Some(c.record(k));
            }
        }
        self.track = Some(k.to_vec());
    }

    /// The next source symbol `id` was not given (recorded as given now),
    /// when its source symbols are recorded.
    pub fn next_unsent(&mut self, id: ChildId) -> Option<PayloadId> {
        let sent = self.kids.get_mut(id.0)?.as_mut()?.sent.as_mut()?;
        sent.take_next().map(|(sbn, esi)| PayloadId::new(sbn, esi))
    }

    /// A frame for `id` alone, once it has had every frame held (see
    /// [`Relay::inject`]).
    pub fn push_to(&mut self, id: ChildId, frame: Vec<u8>) -> bool {
        let Some((_, relay)) = &mut self.object else {
            return false;
        };
        match self.kids.get(id.0).and_then(Option::as_ref) {
            Some(Child {
                downstream: Some(d),
                ..
            }) => relay.inject(*d, frame),
            _ => false,
        }
    }

    /// Whether some child waits for frames that only the parent can give:
    /// it has had every frame held, and no source symbol is left that it
    /// was not given (or none are recorded).
    pub fn any_waiting_for_parent(&mut self) -> bool {
        (0..self.kids.len()).any(|i| {
            self.caught_up(ChildId(i))
                && self.kids[i]
                    .as_ref()
                    .and_then(|c| c.sent.as_ref())
                    .is_none_or(|s| s.left() == 0)
        })
    }

    /// A new child connection.
    pub fn add(&mut self) -> ChildId {
        let child = Child {
            hello: Vec::with_capacity(HELLO.len()),
            greeted: false,
            peer: None,
            greeting_taken: false,
            record_at: 0,
            downstream: None,
            sent: None,
            have: Vec::new(),
            have_got: 0,
            had: false,
        };
        ChildId(crate::slots::insert(&mut self.kids, child))
    }

    /// A child connection closed: what its relay cursor counted.
    pub fn remove(&mut self, id: ChildId) -> Option<DownstreamCounts> {
        let child = self.kids.get_mut(id.0)?.take()?;
        let d = child.downstream?;
        self.object.as_mut()?.1.remove_downstream(d)
    }

    /// Children connected now.
    pub fn len(&self) -> usize {
        self.kids.iter().flatten().count()
    }

    /// Whether no child is connected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where child `id` connected from (its IP, for a source that plans
    /// joins by address).
    pub fn set_peer(&mut self, id: ChildId, ip: std::net::IpAddr) {
        if let Some(c) = self.kids.get_mut(id.0).and_then(Option::as_mut) {
            c.peer = Some(ip);
        }
    }

    /// `id`'s greeting, once its hello is whole: given once per
    /// connection (`None` after, and before the hello is whole).
    pub fn take_greeting(&mut self, id: ChildId) -> Option<Greeting> {
        let c = self.kids.get_mut(id.0)?.as_mut()?;
        if !c.greeted || c.greeting_taken {
            return None;
        }
        c.greeting_taken = true;
        let name = std::str::from_utf8(&c.hello[HELLO.len()..])
            .ok()
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        Some(Greeting { name, peer: c.peer })
    }

    /// Bytes from a child: its hello, and nothing after it.
    pub fn on_bytes(&mut self, id: ChildId, mut bytes: &[u8]) -> Result<(), HopError> {
        let Some(c) = self.kids.get_mut(id.0).and_then(Option::as_mut) else {
            return Ok(());
        };
        while !bytes.is_empty() {
            if c.greeted {
                // Then at most one have message (what it holds).
                if c.had {
                    return Err(HopError::ChildBytes);
                }
                // Its body is kept only where it can count: by a host
                // that records what its children hold (which refuses a body
                // of another length than its object's), or before the
                // object is known.
                let keep = match (&self.track, &self.object) {
                    (Some(k), _) => Some(have_body_bytes(k)),
                    (None, None) => None,
                    (None, Some(_)) => Some(0),
                };
                let taken = c.read_have(bytes, keep)?;
                bytes = &bytes[taken..];
                if c.had {
                    // Heard once its record exists: what it holds counts.
                    if let (Some(sent), Some(k)) = (&mut c.sent, &self.track) {
                        if let Some(held) = SentSource::from_have(k, &c.have[HAVE_HEADER..]) {
                            sent.merge(&held);
                        }
                    }
                }
                continue;
            }
            let want = hello_len(&c.hello)?;
            let take = (want - c.hello.len()).min(bytes.len());
            c.hello.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            let want = hello_len(&c.hello)?;
            c.greeted = c.hello.len() == want;
        }
        if c.greeted && c.downstream.is_none() {
            if let Some((_, relay)) = &mut self.object {
                c.downstream = Some(relay.add_downstream());
                c.sent = self.track.as_deref().map(|k| c.record(k));
            }
        }
        Ok(())
    }

    /// Bytes of `id`'s have message kept: its header and, where its
    /// holdings are recorded, its body (at most [`MAX_HAVE_BYTES`]).
    pub fn kept_have_bytes(&self, id: ChildId) -> usize {
        self.kids
            .get(id.0)
            .and_then(Option::as_ref)
            .map_or(0, |c| c.have.len())
    }

    /// A frame to relay.
    pub fn push(&mut self, frame: Vec<u8>) {
        if let Some((_, relay)) = &mut self.object {
            relay.push(frame);
        }
    }

    /// Whether `id` greeted, has the whole manifest record and every frame
    /// the relay holds (the source makes a new one then).
    pub fn caught_up(&mut self, id: ChildId) -> bool {
        let Some((record, relay)) = &mut self.object else {
            return false;
        };
        match self.kids.get(id.0).and_then(Option::as_ref) {
            Some(Child {
                record_at,
                downstream: Some(d),
                ..
            }) if *record_at == record.len() => relay.writable(*d).is_none(),
            _ => false,
        }
    }

    /// Whether some child has had every frame held and waits for more.
    pub fn any_waiting(&mut self) -> bool {
        (0..self.kids.len()).any(|i| self.caught_up(ChildId(i)))
    }

    /// The bytes to write to `id` next: the manifest record, then frames.
    pub fn writable(&mut self, id: ChildId) -> Option<&[u8]> {
        let (record, relay) = self.object.as_mut()?;
        let c = self.kids.get(id.0)?.as_ref()?;
        let d = c.downstream?;
        if c.record_at < record.len() {
            return Some(&record[c.record_at..]);
        }
        relay.writable(d)
    }

    /// `n` bytes of what [`Children::writable`] gave for `id` were written.
    pub fn wrote(&mut self, id: ChildId, n: usize) {
        let Some((record, relay)) = self.object.as_mut() else {
            return;
        };
        let Some(c) = self.kids.get_mut(id.0).and_then(Option::as_mut) else {
            return;
        };
        if c.record_at < record.len() {
            c.record_at = (c.record_at + n).min(record.len());
        } else if let Some(d) = c.downstream {
            if let Some(sent) = &mut c.sent {
                // A frame begun is a frame given (the rest follows before
                // anything else): its payload id is in its header.
                let frame_len = relay.frame_len();
                if let Some(frame) = relay.writable(d).filter(|f| f.len() == frame_len) {
                    if n > 0 {
                        let id = PayloadId::deserialize(
                            frame[8..HEADER_LEN].try_into().expect("4 bytes"),
                        );
                        sent.mark(id.source_block_number(), id.encoding_symbol_id());
                    }
                }
            }
            relay.wrote(d, n);
        }
    }

    /// What `id`'s relay cursor counted so far.
    pub fn counts(&self, id: ChildId) -> Option<DownstreamCounts> {
        let c = self.kids.get(id.0)?.as_ref()?;
        self.object.as_ref()?.1.counts(c.downstream?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sent::HAVE_MAGIC;

    fn have(body: &[u8]) -> Vec<u8> {
        let mut m = HAVE_MAGIC.to_vec();
        m.extend_from_slice(&(body.len() as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn a_childs_have_is_read_once_bounded_and_counts_only_where_recorded() {
        // Blocks of 9 and 3 source symbols: 4 + 2 and 4 + 1 bytes.
        let k = [9, 3];
        let mut held = SentSource::new(&k);
        held.mark(0, 2);
        held.complete(1);
        let m = held.have_message();
        // A recording host, the have before the object is known, in pieces.
        let mut c = Children::new(1 << 10);
        c.track_source_symbols(&k);
        let id = c.add();
        c.on_bytes(id, &HELLO).unwrap();
        for piece in m.chunks(3) {
            c.on_bytes(id, piece).unwrap();
        }
        c.start(vec![1, 2, 3], 4);
        c.wrote(id, 3);
        // It lacks 8 of block 0 and nothing of block 1.
        let next: Vec<_> = std::iter::from_fn(|| c.next_unsent(id)).collect();
        assert_eq!(next.len(), 8);
        assert!(next.iter().all(|p| p.source_block_number() == 0));
        assert!(!next.iter().any(|p| p.encoding_symbol_id() == 2));
        // Nothing after the have.
        assert_eq!(c.on_bytes(id, b"F"), Err(HopError::ChildBytes));
        // Another magic, a body over the bound: refused.
        let mut c = Children::new(1 << 10);
        let (x, y) = (c.add(), c.add());
        c.on_bytes(x, &HELLO).unwrap();
        assert_eq!(c.on_bytes(x, b"FOVX"), Err(HopError::ChildBytes));
        c.on_bytes(y, &HELLO).unwrap();
        let mut long = HAVE_MAGIC.to_vec();
        long.extend_from_slice(&(MAX_HAVE_BYTES as u32).to_be_bytes());
        assert_eq!(c.on_bytes(y, &long), Err(HopError::ChildBytes));
        // A host that does not record (the source) reads it and keeps
        // nothing of its body.
        let mut c = Children::new(1 << 10);
        c.start(vec![1], 4);
        let z = c.add();
        c.on_bytes(z, &HELLO).unwrap();
        c.on_bytes(z, &have(&[0; 1000])).unwrap();
        let kid = c.kids[z.0].as_ref().unwrap();
        assert!(kid.had && kid.have.len() == HAVE_HEADER);
        assert_eq!(c.next_unsent(z), None);
    }
}
