//! A host of the overlay below the source: it reads its parent's stream,
//! checks and decodes every symbol, and relays the authentic ones to its
//! own children as they can take them (forward-when-feasible).
//!
//! In job mode ([`OverlayNode::with_jobs`]) the expensive part of
//! decoding (a block's RaptorQ decode, the object's BLAKE3 check) is
//! handed to the runtime as [`Job`]s to run off its event loop; frames are
//! relayed meanwhile exactly as without jobs.

use crate::children::ChildId;
use crate::children::Children;
use crate::fountain::{seal_source_symbol, FountainSink, FountainSource, SinkCounts, SinkError};
use crate::hop::{HopError, Manifest, UpstreamReader};
use crate::jobs::{Job, JobDone};
use crate::redirect::{is_redirect, open_redirect};
use crate::symbol::{check, SymbolKey};
use std::net::SocketAddr;

/// Why a node gave up on its parent's stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// The stream is not a fanout overlay stream under this key.
    #[error(transparent)]
    Hop(#[from] HopError),
    /// A new parent announced another object than the first one did.
    #[error("the new parent serves another object")]
    OtherObject,
    /// Decoded, but not the object the manifest describes: a holder of
    /// the key forged symbols.
    #[error(
        "the decoded object is not the one the manifest describes (symbols forged by a key holder)"
    )]
    Corrupt,
}

/// One overlay host below the source.
#[derive(Debug)]
pub struct OverlayNode {
    key: SymbolKey,
    reader: UpstreamReader,
    sink: Option<FountainSink>,
    children: Children,
    /// Bytes read from the parent.
    upstream_bytes: u64,
    /// Bytes of the parent's stream up to the frame that completed the
    /// object (the manifest record and every frame before).
    bytes_to_decode: Option<u64>,
    /// Bytes of whole records and frames read so far.
    whole_bytes: u64,
    /// In job mode, bytes of the parent's stream up to the frame after
    /// which no block was collecting any more (every symbol needed in
    /// hand, unless a decode then fails): what [`Self::bytes_to_decode`]
    /// becomes once the jobs succeed.
    in_hand: Option<u64>,
    /// Hands the decoder's expensive work out as jobs.
    jobs: bool,
    /// The object's manifest, from the first parent.
    manifest: Option<Manifest>,
    /// Its relay buffer, bytes.
    buffer_bytes: usize,
    /// Its own fountain, once it decoded, lost its parent, and a child
    /// wanted more.
    own: Option<FountainSource>,
    /// Its parent went away after it decoded.
    orphan: bool,
    /// What it accepted and has not handed out yet (the manifest record,
    /// then each useful frame), when it keeps a journal.
    journal: Option<Vec<u8>>,
    /// It only relays: checks every frame's tag and forwards it, decodes
    /// nothing, holds nothing but its relay buffer.
    relay_only: bool,
    /// Frames refused when relaying only (a decoding node's sink counts
    /// its own).
    refused: u64,
    /// Each block's first byte in the object (from the manifest).
    block_starts: Vec<usize>,
    /// The parent the source last suggested, not yet taken by the runtime.
    redirect: Option<SocketAddr>,
}

impl OverlayNode {
    /// A host whose symbols are sealed with `key`, relaying through a
    /// buffer of `buffer_bytes`.
    pub fn new(key: SymbolKey, buffer_bytes: usize) -> Self {
        OverlayNode {
            reader: UpstreamReader::new(key.clone()),
            key,
            sink: None,
            children: Children::new(buffer_bytes),
            upstream_bytes: 0,
            bytes_to_decode: None,
            whole_bytes: 0,
            in_hand: None,
            jobs: false,
            manifest: None,
            buffer_bytes,
            own: None,
            orphan: false,
            journal: None,
            relay_only: false,
            refused: 0,
            block_starts: Vec::new(),
            redirect: None,
        }
    }

    /// A host that only relays (a relay in a data centre that does not
    /// need the object): every frame's tag is checked before it is
    /// forwarded, nothing is decoded or kept beyond the relay buffer, and
    /// the parent is read only while a child waits for frames.
    pub fn relay_only(key: SymbolKey, buffer_bytes: usize) -> Self {
        OverlayNode {
            relay_only: true,
            ..Self::new(key, buffer_bytes)
        }
    }

    /// Whether it only relays.
    pub fn is_relay_only(&self) -> bool {
        self.relay_only
    }

    /// Job mode: a block's decode (unless every source symbol of it came,
    /// when it is a copy) and the final BLAKE3 check of the object are not
    /// done inline but handed out by [`OverlayNode::take_job`], to be run
    /// anywhere ([`Job::run`]) and given back with
    /// [`OverlayNode::on_job_done`]. Frames are checked and relayed as
    /// ever while jobs are out; [`OverlayNode::object`] is `Some` once the
    /// check's job came back matching. No effect on a relay-only host.
    pub fn with_jobs(mut self) -> Self {
        self.jobs = true;
        if let Some(sink) = self.sink.take() {
            self.sink = Some(sink.with_jobs());
        }
        self
    }

    /// The next job to run (job mode only; it comes as frames and
    /// results complete blocks).
    pub fn take_job(&mut self) -> Option<Job> {
        self.sink.as_mut()?.take_job()
    }

    /// Jobs handed out (or waiting to be) whose results have not come
    /// back.
    pub fn jobs_out(&self) -> usize {
        self.sink.as_ref().map_or(0, FountainSink::jobs_out)
    }

    /// A job's result, given back. An error when the object decoded but
    /// its BLAKE3 is not the manifest's (as from [`OverlayNode::on_upstream`]
    /// without jobs); a result of no job of this node's is ignored.
    pub fn on_job_done(&mut self, done: JobDone) -> Result<(), NodeError> {
        let Some(sink) = &mut self.sink else {
            return Ok(());
        };
        match sink.on_job_done(done) {
            Ok(true) => {
                if self.bytes_to_decode.is_none() {
                    self.bytes_to_decode = Some(self.in_hand.unwrap_or(self.whole_bytes));
                }
                Ok(())
            }
            Ok(false) => {
                if sink.blocks_collecting() > 0 {
                    // A decode failed: more symbols are needed after all.
                    self.in_hand = None;
                }
                Ok(())
            }
            Err(SinkError::HashMismatch) => Err(NodeError::Corrupt),
            Err(_) => Ok(()),
        }
    }

    /// Keeps a journal of what it accepts: the manifest record, then every
    /// frame that checked and that the decoder could still use — a stream
    /// a restarted node replays ([`OverlayNode::resume`]) to finish with
    /// only what it lacks.
    pub fn journaling(mut self) -> Self {
        self.journal = Some(Vec::new());
        self
    }

    /// Hands the journal's bytes since the last call to `write` (which
    /// appends them to its file), then forgets them, keeping the buffer
    /// (a fresh one per call would fault its pages in again each time).
    pub fn drain_journal<R>(&mut self, write: impl FnOnce(&[u8]) -> R) -> R {
        let r = write(self.journal.as_deref().unwrap_or_default());
        if let Some(j) = &mut self.journal {
            j.clear();
        }
        r
    }

    /// Journal bytes waiting for [`OverlayNode::drain_journal`].
    pub fn journal_len(&self) -> usize {
        self.journal.as_ref().map_or(0, Vec::len)
    }

    /// Replays a journal an earlier run wrote: what it holds comes back
    /// without a byte from the network (the counts of bytes read start
    /// from zero after it), and the next parent's stream starts afresh.
    /// A journal cut short (the run died mid-write) is read up to its last
    /// whole frame.
    pub fn resume(&mut self, journal: &[u8]) -> Result<(), NodeError> {
        let keeping = self.journal.take();
        let replayed = self.on_upstream(journal);
        self.journal = keeping;
        replayed?;
        self.upstream_bytes = 0;
        self.whole_bytes = 0;
        if self.bytes_to_decode.is_some() {
            self.bytes_to_decode = Some(0);
        }
        if self.in_hand.is_some() {
            self.in_hand = Some(0);
        }
        self.rejoin();
        Ok(())
    }

    /// More of the parent's stream. Refused symbols are dropped and
    /// counted; an error means the stream is not one to read further.
    pub fn on_upstream(&mut self, bytes: &[u8]) -> Result<(), NodeError> {
        self.upstream_bytes += bytes.len() as u64;
        let read = self.reader.on_bytes(bytes)?;
        if let Some(m) = read.manifest {
            let record = m.seal(&self.key);
            self.whole_bytes += record.len() as u64;
            if let Some(known) = &self.manifest {
                // A new parent: the same object, whose symbols held so far
                // still count; the children already have its manifest.
                if (known.object, known.hash, known.layout) != (m.object, m.hash, m.layout) {
                    return Err(NodeError::OtherObject);
                }
                return self.on_frames(read.frames);
            }
            if let Some(j) = &mut self.journal {
                j.extend_from_slice(&record);
            }
            self.manifest = Some(m.clone());
            if !self.relay_only {
                let sink = FountainSink::new(m.layout, m.object, self.key.clone(), m.hash);
                self.sink = Some(if self.jobs { sink.with_jobs() } else { sink });
                let (starts, k): (Vec<usize>, Vec<u32>) =
                    m.layout.block_spans().into_iter().unzip();
                self.block_starts = starts;
                self.children.track_source_symbols(&k);
            }
            self.children.start(record, m.layout.frame_len());
        }
        self.on_frames(read.frames)
    }

    /// Frames from the parent: checked, decoded, relayed; a redirect is
    /// checked and kept for [`OverlayNode::take_redirect`], never relayed
    /// or decoded.
    fn on_frames(&mut self, frames: Vec<Vec<u8>>) -> Result<(), NodeError> {
        let Some(m) = &self.manifest else {
            return Ok(());
        };
        let (object, symbol_size) = (m.object, m.layout.symbol_size());
        for frame in frames {
            self.whole_bytes += frame.len() as u64;
            if is_redirect(&frame) {
                match open_redirect(&self.key, object, symbol_size, &frame) {
                    Ok(to) => self.redirect = Some(to),
                    Err(_) => self.refused += 1,
                }
                continue;
            }
            if self.relay_only {
                match check(&self.key, object, symbol_size, &frame) {
                    Ok(_) => self.children.push(frame),
                    Err(_) => self.refused += 1,
                }
                continue;
            }
            let Some(sink) = &mut self.sink else {
                continue;
            };
            match sink.on_frame(&frame) {
                Ok(done) => {
                    if self.bytes_to_decode.is_none() {
                        if let Some(j) = &mut self.journal {
                            j.extend_from_slice(&frame);
                        }
                        if done {
                            self.bytes_to_decode = Some(self.whole_bytes);
                        }
                        if self.in_hand.is_none() && sink.blocks_collecting() == 0 {
                            self.in_hand = Some(self.whole_bytes);
                        }
                    }
                    self.children.push(frame);
                }
                Err(SinkError::HashMismatch) => return Err(NodeError::Corrupt),
                Err(_) => {}
            }
        }
        Ok(())
    }

    /// The parent its source suggested last (a redirect that checked),
    /// once: the runtime decides whether and when to move there.
    pub fn take_redirect(&mut self) -> Option<SocketAddr> {
        self.redirect.take()
    }

    /// Whether `m` announces the object this node is getting (a
    /// suggested parent's manifest, before moving to it).
    pub fn same_object(&self, m: &Manifest) -> bool {
        self.manifest
            .as_ref()
            .is_some_and(|k| (k.object, k.hash, k.layout) == (m.object, m.hash, m.layout))
    }

    /// The manifest, once read.
    pub fn manifest(&self) -> Option<&Manifest> {
        self.manifest.as_ref()
    }

    /// The parent went away: the next stream comes from a new one, which
    /// starts with the manifest again. What the decoder holds stays (any
    /// symbols count, whoever sent them: ROMA's free parent switch), and
    /// so do the children.
    pub fn rejoin(&mut self) {
        self.reader = UpstreamReader::new(self.key.clone());
    }

    /// What it tells a new parent it holds (a have message,
    /// [`crate::sent`]), so the parent gives it only what it lacks; empty
    /// before it holds anything or when it only relays.
    pub fn have(&self) -> Vec<u8> {
        match &self.sink {
            Some(sink) if sink.counts().accepted > 0 => sink.held().have_message(),
            _ => Vec::new(),
        }
    }

    /// The decoded, checked object.
    pub fn object(&self) -> Option<&[u8]> {
        self.sink.as_ref()?.object()
    }

    /// What the decoder made of the frames (a relay-only host counts
    /// only those it refused).
    pub fn counts(&self) -> SinkCounts {
        let mut c = self
            .sink
            .as_ref()
            .map(FountainSink::counts)
            .unwrap_or_default();
        c.refused += self.refused;
        c
    }

    /// The key its symbols are checked with.
    pub fn key(&self) -> &SymbolKey {
        &self.key
    }

    /// Its relay buffer, bytes.
    pub fn buffer_bytes(&self) -> usize {
        self.buffer_bytes
    }

    /// Bytes read from the parent so far.
    pub fn upstream_bytes(&self) -> u64 {
        self.upstream_bytes
    }

    /// Bytes of the parent's stream it took to decode the object: the
    /// manifest record and the frames up to the one that completed it.
    pub fn bytes_to_decode(&self) -> Option<u64> {
        self.bytes_to_decode
    }

    /// Its children.
    pub fn children(&mut self) -> &mut Children {
        &mut self.children
    }

    /// Whether it still needs its parent: until it decoded (always, if
    /// it only relays).
    pub fn needs_parent(&self) -> bool {
        self.object().is_none()
    }

    /// Whether to read more of its parent's stream now: always until it
    /// decoded; after that only while a child waits for frames it cannot
    /// give from its own copy (every source symbol the child lacks is
    /// given from there first), so the parent (and the source above it)
    /// sends no faster than the fastest such child below takes, and
    /// nothing for a subtree it can finish itself.
    /// A relay-only host reads the manifest, then only while a child
    /// waits. In job mode, a node that holds every symbol it needs and
    /// waits for its jobs' results reads only while a child waits for
    /// frames (it cannot serve them from its own copy yet), not for
    /// itself; should a decode fail, it reads again.
    pub fn wants_upstream(&mut self) -> bool {
        if self.relay_only {
            return self.manifest.is_none() || self.children.any_waiting();
        }
        if self.object().is_some() {
            return self.children.any_waiting_for_parent();
        }
        match &self.sink {
            Some(sink) if sink.blocks_collecting() == 0 => self.children.any_waiting(),
            _ => true,
        }
    }

    /// Its parent went away after it decoded: its children get fresh
    /// symbols of its own from now on (ROMA §IV: a host that decoded may
    /// generate).
    pub fn parent_gone(&mut self) {
        self.orphan = true;
    }

    /// The bytes for child `id` next: relayed frames; once it decoded,
    /// whenever the child has had every frame held, the source symbols it
    /// was not given, from its own copy (slices of the object, no coding);
    /// and once those are all given and its parent is gone, fresh repair
    /// symbols of its own. Those start 2²⁰ past the source's first, at a
    /// point of its own, so they do not repeat what the child had. (Coding
    /// them costs about what decoding did, so a node that still has its
    /// parent relays instead.)
    pub fn writable(&mut self, id: ChildId) -> Option<&[u8]> {
        if !self.relay_only && self.children.caught_up(id) {
            if let (Some(object), Some(m)) =
                (self.sink.as_ref().and_then(|s| s.object()), &self.manifest)
            {
                if let Some(pid) = self.children.next_unsent(id) {
                    let start = self.block_starts[usize::from(pid.source_block_number())];
                    let size = usize::from(m.layout.symbol_size());
                    let frame = seal_source_symbol(&self.key, m.object, object, (start, size), pid);
                    self.children.push_to(id, frame);
                } else if self.orphan {
                    let own = self.own.get_or_insert_with(|| {
                        // Its own offset: the id of the object and the
                        // bytes it read, so siblings that decoded differ.
                        let seed = m.object ^ self.whole_bytes.rotate_left(17);
                        let first = (1 << 20) + (seed % (1 << 22)) as u32;
                        FountainSource::new(object.to_vec(), m.layout, m.object, self.key.clone())
                            .repair_only_from(first, seed)
                    });
                    let frame = own.next_frame();
                    self.children.push(frame);
                }
            }
        }
        self.children.writable(id)
    }
}
