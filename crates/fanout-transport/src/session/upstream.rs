//! Session relay at the sender (TCP-SMO §IV.B: "each receiver can send any data
//! back to the source server through the individual connection; the source
//! server can monitor the data and determine whether to multicast the data to
//! all receivers"): the members' upstream streams, reassembled and handed to
//! the application in order, acknowledged to each member by unicast.
//!
//! None of this sits on the per-ACK path: the session holds it behind an
//! `Option<Box<_>>` created on the first UPSTREAM frame, and a member's
//! entry holds a reassembly buffer only while it has bytes in it.
//!
//! Bounds (all peer-controlled): a member's stream is accepted only within
//! [`MAX_UPSTREAM_WINDOW`] bytes of what the application read, in at most
//! [`MAX_UPSTREAM_RANGES`] separate held pieces; at most
//! [`MAX_UPSTREAM_BUFFERS`] members hold a buffer at once, so upstream
//! memory at the sender never exceeds `MAX_UPSTREAM_BUFFERS ×
//! MAX_UPSTREAM_WINDOW` = 4 MiB plus a small entry per member that used
//! upstream; at most one UPSTREAM_ACK per member is queued. Frames outside
//! these bounds are dropped and counted ([`UpstreamStats`]); the member
//! retransmits them.

use super::MemberId;
use crate::recv_buffer::{RecvBuffer, Refused};
use crate::wire::{UpstreamAckFrame, UpstreamFrame, WireTimestamp};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

/// Upstream bytes the sender accepts from one member beyond what its
/// application read (the upstream receive window).
pub const MAX_UPSTREAM_WINDOW: usize = 64 << 10;
/// Members holding an upstream reassembly buffer at once (the rest wait:
/// their frames are dropped and retransmitted).
pub const MAX_UPSTREAM_BUFFERS: usize = 64;
/// Separate held pieces (ranges) kept per member stream.
pub const MAX_UPSTREAM_RANGES: usize = 16;

/// Session-wide upstream counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpstreamStats {
    /// UPSTREAM frames from members.
    pub frames_received: u64,
    /// New upstream bytes stored.
    pub bytes_received: u64,
    /// Bytes the application read.
    pub bytes_delivered: u64,
    /// Members whose upstream stream ended (FIN read).
    pub streams_finished: u64,
    /// UPSTREAM_ACK frames sent.
    pub acks_sent: u64,
    /// Frames (or their new bytes) already held: dropped.
    pub dropped_duplicate: u64,
    /// Frames ending beyond the member's window or its FIN: dropped.
    pub dropped_beyond_window: u64,
    /// Frames refused by the bounds on pieces or buffers: dropped.
    pub dropped_limit: u64,
    /// Out-of-order bytes stored, then let go with a drained buffer (the
    /// member resends them): `bytes_received` counts them again when they
    /// come back.
    pub bytes_released_unread: u64,
    /// Frames contradicting the member's FIN: dropped.
    pub dropped_invalid: u64,
    /// UPSTREAM frames from addresses that are not members: dropped.
    pub dropped_non_member: u64,
}

/// What a frame did, for the session's counters and events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Stored or acknowledged; `readable` is true when the application
    /// should be told (bytes or the end became readable and it had not
    /// been told since its last read emptied the stream).
    Accepted { readable: bool },
    /// Dropped and counted.
    Dropped,
}

/// One member's upstream stream.
#[derive(Debug)]
struct Stream {
    addr: SocketAddr,
    /// Reassembly buffer while bytes are held.
    buf: Option<RecvBuffer>,
    /// Read position while `buf` is `None`.
    read_pos: u64,
    /// The stream's length once its FIN arrived.
    fin: Option<u64>,
    /// Timestamp of the latest UPSTREAM frame, echoed.
    ts_recent: WireTimestamp,
    /// Window end last advertised.
    advertised_end: u64,
    /// In the acknowledgement queue.
    ack_queued: bool,
    /// The application was told and has not emptied the stream since.
    announced: bool,
    /// The end was delivered to the application.
    finished: bool,
}

impl Stream {
    fn read_pos(&self) -> u64 {
        self.buf
            .as_ref()
            .map_or(self.read_pos, RecvBuffer::read_pos)
    }
    fn rcv_nxt(&self) -> u64 {
        self.buf.as_ref().map_or(self.read_pos, RecvBuffer::rcv_nxt)
    }
    fn window_end(&self) -> u64 {
        self.read_pos() + MAX_UPSTREAM_WINDOW as u64
    }
    fn readable(&self) -> u64 {
        self.rcv_nxt() - self.read_pos()
    }
    /// The end is next for the application.
    fn at_end(&self) -> bool {
        self.fin == Some(self.read_pos())
    }
    fn ack(&self) -> UpstreamAckFrame {
        let nxt = self.rcv_nxt();
        UpstreamAckFrame {
            cumulative: nxt + u64::from(self.fin == Some(nxt)),
            window: self.window_end() - nxt,
            timestamp_echo: self.ts_recent,
        }
    }
}

/// Every member's upstream stream.
#[derive(Debug, Default)]
pub(super) struct UpstreamTable {
    streams: BTreeMap<MemberId, Stream>,
    /// Members owed an UPSTREAM_ACK (each at most once).
    acks: VecDeque<MemberId>,
    /// Streams holding a buffer.
    buffers: usize,
    pub stats: UpstreamStats,
}

impl UpstreamTable {
    /// Takes one UPSTREAM frame of member `id` at `addr`. Every frame,
    /// even a dropped one, is answered (the member learns the window).
    pub fn on_frame(&mut self, id: MemberId, addr: SocketAddr, f: &UpstreamFrame<'_>) -> Outcome {
        self.stats.frames_received += 1;
        let s = self.streams.entry(id).or_insert(Stream {
            addr,
            buf: None,
            read_pos: 0,
            fin: None,
            ts_recent: WireTimestamp::default(),
            advertised_end: MAX_UPSTREAM_WINDOW as u64,
            ack_queued: false,
            announced: false,
            finished: false,
        });
        s.ts_recent = f.timestamp;
        if !s.ack_queued {
            s.ack_queued = true;
            self.acks.push_back(id);
        }
        let range = f.range();
        if s.fin.is_some_and(|e| range.end > e) || range.end > s.window_end() {
            self.stats.dropped_beyond_window += 1;
            return Outcome::Dropped;
        }
        // The end is recorded only from a frame inside the window.
        if f.fin {
            let held_end = s
                .buf
                .as_ref()
                .and_then(|b| b.highest_held_end())
                .unwrap_or(0);
            let consistent = s.fin.is_none_or(|e| e == range.end)
                && range.end >= s.rcv_nxt()
                && held_end <= range.end;
            if !consistent {
                self.stats.dropped_invalid += 1;
                return Outcome::Dropped;
            }
            s.fin = Some(range.end);
        }
        if !f.payload.is_empty() {
            if range.end <= s.rcv_nxt() {
                self.stats.dropped_duplicate += 1;
                return Outcome::Dropped;
            }
            if s.buf.is_none() {
                // A buffer only for data the application can read away at
                // once: out-of-order bytes without one are dropped (the
                // member resends them), so no member can pin a buffer of the
                // shared pool with a gap it never fills.
                if f.offset > s.rcv_nxt() || self.buffers >= MAX_UPSTREAM_BUFFERS {
                    self.stats.dropped_limit += 1;
                    return Outcome::Dropped;
                }
                let mut b = RecvBuffer::with_max_ranges(MAX_UPSTREAM_WINDOW, MAX_UPSTREAM_RANGES);
                b.start_at(s.read_pos);
                s.buf = Some(b);
                self.buffers += 1;
            }
            let b = s.buf.as_mut().expect("just ensured");
            match b.insert(f.offset, f.payload) {
                Ok(n) => self.stats.bytes_received += n,
                Err(Refused::Duplicate) => {
                    self.stats.dropped_duplicate += 1;
                    return Outcome::Dropped;
                }
                Err(Refused::BeyondWindow) => {
                    self.stats.dropped_beyond_window += 1;
                    return Outcome::Dropped;
                }
                Err(Refused::TooFragmented) => {
                    self.stats.dropped_limit += 1;
                    return Outcome::Dropped;
                }
            }
        }
        let readable = !s.announced && !s.finished && (s.readable() > 0 || s.at_end());
        s.announced |= readable;
        Outcome::Accepted { readable }
    }

    /// Copies member `id`'s next in-order upstream bytes into `out`;
    /// returns the count (0: nothing readable now, or no such stream).
    /// Reading opens the member's window; a window opened by a quarter is
    /// announced at once.
    pub fn read(&mut self, id: MemberId, out: &mut [u8]) -> usize {
        let Some(s) = self.streams.get_mut(&id) else {
            return 0;
        };
        let n = s.buf.as_mut().map_or(0, |b| b.read(out));
        self.stats.bytes_delivered += n as u64;
        if s.at_end() && !s.finished {
            s.finished = true;
            self.stats.streams_finished += 1;
        }
        if s.readable() == 0 {
            s.announced = false;
            // Drained: give the buffer back to the session's pool, with any
            // out-of-order bytes (not acknowledged: the member resends
            // them), so a gap never filled cannot pin a buffer.
            if let Some(b) = s.buf.as_ref() {
                let held: u64 = b.out_of_order().map(|r| r.end - r.start).sum();
                self.stats.bytes_released_unread += held;
                s.read_pos = s.read_pos();
                s.buf = None;
                self.buffers -= 1;
            }
        }
        if s.window_end() - s.advertised_end >= MAX_UPSTREAM_WINDOW as u64 / 4 && !s.ack_queued {
            s.ack_queued = true;
            self.acks.push_back(id);
        }
        n
    }

    /// True once member `id`'s upstream stream ended and all of it was read.
    pub fn finished(&self, id: MemberId) -> bool {
        self.streams
            .get(&id)
            .is_some_and(|s| s.finished || s.at_end())
    }

    /// Memory the table holds: the reassembly buffers' rings, the
    /// per-member entries and the acknowledgement queue (the buffers'
    /// range sets, at most [`MAX_UPSTREAM_RANGES`] each, not counted).
    pub fn memory_bytes(&self) -> usize {
        self.buffers * MAX_UPSTREAM_WINDOW
            + self.streams.len() * std::mem::size_of::<(MemberId, Stream)>()
            + self.acks.capacity() * std::mem::size_of::<MemberId>()
    }

    /// Forgets a member that left (its unread bytes are discarded).
    pub fn remove(&mut self, id: MemberId) {
        if let Some(s) = self.streams.remove(&id) {
            if s.buf.is_some() {
                self.buffers -= 1;
            }
        }
    }

    /// The next UPSTREAM_ACK to send, and where.
    pub fn next_ack(&mut self) -> Option<(SocketAddr, UpstreamAckFrame)> {
        while let Some(id) = self.acks.pop_front() {
            let Some(s) = self.streams.get_mut(&id) else {
                continue; // the member left
            };
            s.ack_queued = false;
            s.advertised_end = s.window_end();
            self.stats.acks_sent += 1;
            return Some((s.addr, s.ack()));
        }
        None
    }
}
