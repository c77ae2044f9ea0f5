//! The downstream side of a host (the source or a relay): its children's
//! connections, each greeted with the manifest record and then fed frames
//! from the host's [`Relay`] as fast as it takes them.

use crate::hop::{hello_len, HopError, HELLO};
use crate::relay::{Downstream, DownstreamCounts, Relay};
use crate::sent::SentSource;
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
                c.sent = self.track.as_deref().map(SentSource::new);
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
                c.sent = Some(SentSource::new(k));
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
                return Err(HopError::ChildBytes);
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
                c.sent = self.track.as_deref().map(SentSource::new);
            }
        }
        Ok(())
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
