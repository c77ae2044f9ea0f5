//! Which loss is repaired next, and how (TCP-SMO §II): a segment more than
//! the repair threshold of receivers miss is multicast again, otherwise it
//! goes by unicast to each member missing it; the coded policy repairs
//! whole blocks with parity symbols ([`super::coded`]).

use super::coded::CodedStep;
use super::SessionSender;
use crate::session::timers::Timer;
use crate::session::{Departure, MemberId};
use fanout_core::time::Instant;
use fanout_core::Transmit;
use std::ops::Range;
use std::time::Duration;

impl SessionSender {
    /// Queues member `id`'s newly lost segments; losses the full queue
    /// refuses go back in flight for it (detected again later).
    pub(super) fn queue_repairs(&mut self, now: Instant, id: MemberId, lost: Vec<Range<u64>>) {
        if lost.is_empty() {
            return;
        }
        let refused = self.repairs.push(now, id, lost);
        if !refused.is_empty() {
            self.stats.repairs_refused += refused.len() as u64;
            self.members.update(id, self.snd_nxt, |m| {
                for r in refused {
                    m.forget_loss(r);
                }
            });
        }
    }

    /// How long a newly reported loss waits before its repair is chosen:
    /// one feedback slot, the spread over which the members that lost the
    /// same segment report it (their ACKs are paced into staggered slots,
    /// [`crate::session::feedback`]), at most 50 ms; zero without time
    /// thinning. Deciding at the first report would see one member missing
    /// a segment that dozens miss, and send dozens of copies.
    pub(super) fn repair_holdoff(&self) -> Duration {
        let slot_us = crate::session::feedback::ack_interval_us(
            self.feedback_sources(),
            self.config.feedback_budget_pps,
        );
        Duration::from_micros(u64::from(slot_us).min(50_000))
    }

    /// Writes a repair of `range` to `to` and charges the pacer: the whole
    /// of it when multicast; when unicast, one member's path carries it,
    /// so the pacer (the rate every path may take) is charged its share
    /// over the members, as a unicast fan-out run charges each copy.
    pub(super) fn write_repair(
        &mut self,
        now: Instant,
        range: Range<u64>,
        to: std::net::SocketAddr,
        out: &mut Vec<u8>,
    ) -> Transmit {
        let len = range.end.min(self.buffer.end()) - range.start;
        let share = if to.ip().is_multicast() {
            len
        } else {
            len.div_ceil(self.members.len().max(1) as u64)
        };
        let t = self.write_segment(now, range, to, out);
        self.pacer.on_sent(now, share);
        t
    }

    /// The next repair to send, if any member still misses a queued segment.
    pub(super) fn next_repair(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<Transmit> {
        let holdoff = self.repair_holdoff();
        self.timers.set(Timer::Repair, None);
        if let Some(t) = self.next_coded_symbol(now, out) {
            return Some(t);
        }
        if let Some(t) = self.next_second_copy(now, out) {
            return Some(t);
        }
        let mut cursor = 0;
        while let Some(start) = self.repairs.next_start(cursor) {
            cursor = start + 1;
            if self.coded.is_some() {
                match self.coded_block_repair(now, start, holdoff, out) {
                    CodedStep::Sent(t) => return Some(t),
                    CodedStep::Skip(next) => {
                        cursor = next.max(cursor);
                        continue;
                    }
                    CodedStep::PerSegment => {}
                }
            }
            let members = &self.members;
            let Some((range, missing_members, since)) = self.repairs.prune(start, |id, r| {
                members.get(id).is_some_and(|m| m.recovery().is_lost(r))
            }) else {
                continue;
            };
            let base = self.buffer.base();
            if start < base {
                // The segment begins below the send buffer. A member that
                // holds everything below the base needs only the rest of it
                // (a joiner admitted at the FIN's offset, whose segment the
                // others acknowledged up to the FIN); one behind the base
                // lost data a quorum or buffer-limited release freed, and
                // cannot be repaired.
                let behind: Vec<MemberId> = self
                    .repairs
                    .members_of(start)
                    .iter()
                    .copied()
                    .filter(|&id| self.members.get(id).is_some_and(|m| m.cumulative() < base))
                    .collect();
                if !behind.is_empty() {
                    let why = self.released_reason();
                    for id in behind {
                        self.remove(now, id, why, Departure::Evicted);
                    }
                    self.after_progress(now);
                    // Look at this segment again, for the others.
                    cursor = start;
                    continue;
                }
            }
            let range = range.start.max(base)..range.end;
            if range.is_empty() {
                self.repairs.take(start);
                continue;
            }
            let ready = since + holdoff;
            if ready > now {
                self.timers.set_earliest(Timer::Repair, ready);
                continue;
            }
            // Receiver-weighted (a merger's loss is its subtree's).
            let ids = self.repairs.members_of(start);
            let missing = if self.roster.is_flat() {
                missing_members as u64
            } else {
                ids.iter().map(|id| self.roster.weight(id)).sum()
            };
            let receivers = self.roster.receivers(self.members.len());
            // Protected: a merger's children take data only from the
            // group, where the sender's signed lists vouch for it (what a
            // merger relays it could have altered).
            let for_a_merger =
                self.keys.is_some() && ids.iter().any(|id| self.roster.is_merger(id));
            let multicast = self.config.group.filter(|_| {
                for_a_merger
                    || self
                        .config
                        .repair
                        .multicast_weighted(missing_members, missing, receivers)
            });
            // Real-time: a stale loss gets a SKIP of its messages instead
            // of its bytes, by the same way a repair would take.
            let skip = self.stale_skip(now, &range);
            if let Some(group) = multicast {
                let ids = self.repairs.take(start).map(|p| p.ids).unwrap_or_default();
                if let Some(skip) = skip {
                    for id in ids {
                        self.update_member(now, id, |m| m.on_repair_sent(range.clone(), now));
                    }
                    return Some(self.write_skip(now, skip, group, out));
                }
                self.stats.multicast_repair_members += ids.len() as u64;
                for &id in &ids {
                    self.update_member(now, id, |m| m.on_repair_sent(range.clone(), now));
                }
                if self.log.on_multicast_repair(start, now) {
                    self.stats.repeat_multicast_repairs += 1;
                }
                self.stats.multicast_repairs += 1;
                self.stats.repair_bytes += range.end.min(self.buffer.end()) - range.start;
                self.plan_second_copy(now, &range, group, ids);
                return Some(self.write_data(now, range, group, out));
            }
            let id = self.repairs.take_one(start)?;
            self.timers.set(Timer::Repair, None);
            let addr = self.update_member(now, id, |m| {
                m.on_repair_sent(range.clone(), now);
                m.addr()
            })?;
            if let Some(skip) = skip {
                return Some(self.write_skip(now, skip, addr, out));
            }
            self.stats.unicast_repairs += 1;
            let len = range.end.min(self.buffer.end()) - range.start;
            self.stats.repair_bytes += len;
            self.plan_second_copy(now, &range, addr, vec![id]);
            return Some(self.write_repair(now, range, addr, out));
        }
        None
    }
}
