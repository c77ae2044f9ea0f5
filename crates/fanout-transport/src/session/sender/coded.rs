//! The coded repair policy in the session sender
//! ([`super::super::coded_repair`]): block decisions in the repair queue
//! and REPAIR symbols on the wire (`docs/wire.md` §4.9).

use super::SessionSender;
use crate::fec;
use crate::packet::PacketBuilder;
use crate::session::coded_repair::{block_need, CodedBlocks};
use crate::session::policy::RepairPolicy;
use crate::session::timers::Timer;
use crate::wire::{Frame, RepairFrame};
use fanout_core::time::Instant;
use fanout_core::Transmit;
use std::ops::Range;
use std::time::Duration;

/// What the coded policy did with a due repair.
pub(super) enum CodedStep {
    /// A REPAIR symbol was written.
    Sent(Transmit),
    /// The block's repairs wait (or were all satisfied): go on from this
    /// offset.
    Skip(u64),
    /// Not coded: repair this segment by itself.
    PerSegment,
}

impl SessionSender {
    /// Files a newly sent segment into a block (coded policy only).
    pub(super) fn coded_on_segment(&mut self, range: &Range<u64>) {
        let RepairPolicy::Coded { block, .. } = self.config.repair else {
            return;
        };
        if self.config.group.is_none() {
            return;
        }
        let data_end = self.buffer.end();
        let full = range.end <= data_end && !self.buffer.is_message_end(range.end);
        let mss = self.mss;
        self.coded
            .get_or_insert_with(|| Box::new(CodedBlocks::new(block, mss)))
            .on_segment(range.clone(), full);
    }

    /// Forgets released blocks.
    pub(super) fn coded_release(&mut self, offset: u64) {
        if let Some(c) = self.coded.as_mut() {
            c.release_below(offset);
        }
    }

    /// Before the send buffer releases below `offset`: keeps a copy of the
    /// released part of the block `offset` falls inside of, since a
    /// block's symbols are encoded from all of its segments. So a member's
    /// loss late in a block stays codable after every member acknowledged
    /// the block's start (at most one block, `k` segments, is held; each
    /// byte is copied once).
    pub(super) fn coded_before_release(&mut self, offset: u64) {
        let base = self.buffer.base();
        let Some(c) = self.coded.as_mut() else {
            return;
        };
        // Copied whether or not the block has had a loss yet: most of a
        // block's losses are detected after every member acknowledged its
        // start.
        let Some(start) = c
            .peek_block(offset)
            .filter(|b| b.start < offset)
            .map(|b| b.start)
        else {
            c.prefix = None;
            return;
        };
        let mut bytes = match c.prefix.take() {
            Some((s, b)) if s == start && s + b.len() as u64 == base => b,
            // A new block: the previous copy's allocation serves again.
            old if start >= base => {
                let mut b = old.map(|(_, b)| b).unwrap_or_default();
                b.clear();
                b
            }
            // Part of the block was released uncopied: not codable.
            _ => return,
        };
        if offset > base.max(start) {
            self.buffer.copy_to(base.max(start)..offset, &mut bytes);
        }
        c.prefix = Some((start, bytes));
    }

    /// The copy of the released start of the block at `start`, if it
    /// reaches the send buffer's base.
    fn coded_prefix(&self, start: u64) -> Option<&[u8]> {
        let base = self.buffer.base();
        match self.coded.as_ref()?.prefix.as_ref() {
            Some((s, b)) if *s == start && s + b.len() as u64 == base => Some(b),
            _ => None,
        }
    }

    /// Whether every byte of the block `range` is still held (in the send
    /// buffer, or its start in the copy of a partly released block).
    fn coded_block_held(&self, range: Range<u64>) -> bool {
        range.end <= self.buffer.end()
            && (range.start >= self.buffer.base() || self.coded_prefix(range.start).is_some())
    }

    /// The bytes of the block `range`, if all are still held.
    fn coded_block_bytes(&self, range: Range<u64>) -> Option<Vec<u8>> {
        if !self.coded_block_held(range.clone()) {
            return None;
        }
        let base = self.buffer.base();
        let mut bytes = Vec::with_capacity((range.end - range.start) as usize);
        if range.start < base {
            bytes.extend_from_slice(self.coded_prefix(range.start)?);
        }
        self.buffer
            .copy_to(range.start.max(base)..range.end, &mut bytes);
        Some(bytes)
    }

    /// When the repair decision of `block` (first loss reported at
    /// `oldest`) may be taken: at once if every member has reported past
    /// the block, else once the ACK of its last segment is overdue (sent
    /// then, plus the slowest member's smoothed RTT and a quarter of it
    /// for RACK's reordering window, RFC 8985 §6.2).
    fn block_settles_at(
        &self,
        block: &crate::session::coded_repair::Block,
        oldest: Instant,
    ) -> Instant {
        let mut slowest = Duration::ZERO;
        let mut settled = true;
        for m in self.members.iter() {
            let r = m.recovery();
            if r.highest_acked() < block.end || r.undetected_bytes(block.start..block.end) > 0 {
                settled = false;
                slowest = slowest.max(r.srtt());
            }
        }
        if settled {
            return oldest;
        }
        let last_sent = self
            .log
            .containing(block.end - 1)
            .map_or(oldest, |s| s.first_sent_at);
        (last_sent + slowest + slowest / 4).max(oldest)
    }

    /// The next queued REPAIR symbol, encoded from the send buffer, if any
    /// (symbols of blocks released meanwhile are dropped).
    pub(super) fn next_coded_symbol(
        &mut self,
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let group = self.config.group?;
        loop {
            let q = self.coded.as_mut()?.queue.pop_front()?;
            let block = q.block;
            let Some(bytes) = self.coded_block_bytes(block.start..block.end()) else {
                continue;
            };
            let stripes: Vec<&[u8]> = bytes.chunks(block.symbol_len).collect();
            let Some(symbol) = fec::encode_repair(&stripes, block.symbol_len, q.id) else {
                continue;
            };
            let mut p = PacketBuilder::new(out, &mut self.numbers, self.session_id, true);
            p.frame(&Frame::Repair(RepairFrame {
                block,
                id: q.id,
                symbol: &symbol,
            }));
            p.finish();
            self.stats.datagrams_sent += 1;
            self.stats.coded_repairs += 1;
            self.pacer.on_sent(now, block.symbol_len as u64);
            return Some(Transmit { destination: group });
        }
    }

    /// Decides the repair of the block holding the due segment at `start`,
    /// once its losses are gathered (one hold-off after its first pending
    /// report, or, without time thinning, [`Self::block_settles_at`]):
    /// codes when the member missing the most of it misses no more
    /// segments than the block has missing in all.
    pub(super) fn coded_block_repair(
        &mut self,
        now: Instant,
        start: u64,
        holdoff: Duration,
        out: &mut Vec<u8>,
    ) -> CodedStep {
        if self.config.group.is_none() {
            return CodedStep::PerSegment;
        }
        // The block as filled so far: an open block is closed (its extent
        // fixed) only when its decision is taken.
        let Some(block) = self.coded.as_ref().and_then(|c| c.peek_block(start)) else {
            return CodedStep::PerSegment;
        };
        if !self.coded_block_held(block.start..block.end) {
            return CodedStep::PerSegment;
        }
        // Members still missing each pending segment of the block.
        let mut oldest: Option<Instant> = None;
        for s in self.repairs.starts_in(block.start..block.end) {
            let members = &self.members;
            if let Some((_, _, since)) = self.repairs.prune(s, |id, r| {
                members.get(id).is_some_and(|m| m.recovery().is_lost(r))
            }) {
                oldest = Some(oldest.map_or(since, |o: Instant| o.min(since)));
            }
        }
        let Some(oldest) = oldest else {
            return CodedStep::Skip(block.end);
        };
        // Due with the block's first report: one hold-off gathers the
        // members that lost the same segments; losses reported later get
        // a round of their own (waiting for the block's last report, up to
        // two hold-offs, measured 36.5 against 38.5 Mbit/s at N = 100).
        // Without time thinning (few members, each ACKing on its own
        // schedule) the decision waits instead until every member has
        // reported past the block, so one decision sees the losses of
        // all: a member's losses are otherwise coded alone, one symbol
        // per segment, no cheaper than copies.
        let ready = if holdoff.is_zero() {
            self.block_settles_at(&block, oldest)
        } else {
            oldest + holdoff
        };
        if ready > now {
            self.timers.set_earliest(Timer::Repair, ready);
            return CodedStep::Skip(block.end);
        }
        let Some(block) = self.coded.as_mut().and_then(|c| c.block_of(start)) else {
            return CodedStep::PerSegment;
        };
        let (reported, distinct) = block_need(
            self.repairs
                .entries_in(block.start..block.end)
                .map(|(_, p)| p.ids.as_slice()),
        );
        // A member decodes only once it holds as many symbols as it misses
        // segments of the block, so count, for each member that reported a
        // loss in it, every segment of the block it has not acknowledged
        // (losses not yet detected, earlier repairs not yet confirmed),
        // not just the reported ones.
        let mss = self.mss.max(1);
        // A member admitted inside the block never held its start and
        // cannot decode it, nor can one whose earlier symbols of it did
        // not help (a receiver joined behind a merger inside the block, or
        // the symbols were lost): per-segment repair then.
        let mut most = reported;
        let mut undecodable = false;
        for (_, p) in self.repairs.entries_in(block.start..block.end) {
            for id in &p.ids {
                if let Some(m) = self.members.get(*id) {
                    let unacked = m.recovery().unacked_bytes(block.start..block.end);
                    most = most.max(unacked.div_ceil(mss) as usize);
                    undecodable |= m.start() > block.start || m.was_coded(block.start);
                }
            }
        }
        if undecodable
            || most > distinct
            || !self
                .coded
                .as_mut()
                .is_some_and(|c| c.queue_symbols(block.start, most))
        {
            return CodedStep::PerSegment;
        }
        // Coded: every member's pending losses of the block count as
        // repaired now (RACK dates them by this send, as for a multicast
        // copy). Any member may decode any segment of the block from the
        // symbols, reported lost or not: none went once only.
        self.log.on_sent_again(block.start..block.end, now);
        let mut touched = Vec::new();
        for s in self.repairs.starts_in(block.start..block.end) {
            let Some(p) = self.repairs.take(s) else {
                continue;
            };
            self.stats.coded_repair_members += p.ids.len() as u64;
            for id in p.ids {
                self.members.update(id, self.snd_nxt, |m| {
                    m.on_repair_sent(s..p.end, now);
                    m.on_coded_repair(block.start);
                });
                touched.push(id);
            }
        }
        touched.sort_unstable();
        touched.dedup();
        for id in touched {
            if let Some(m) = self.members.get(id) {
                self.controller.on_feedback(now, m);
            }
        }
        self.stats.coded_blocks += 1;
        match self.next_coded_symbol(now, out) {
            Some(t) => CodedStep::Sent(t),
            None => CodedStep::Skip(block.end),
        }
    }
}
