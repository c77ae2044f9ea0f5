//! The session sender (SMO master block) as a sans-IO engine.

use super::config::{JoinPolicy, ReleasePolicy, SessionConfig};
use super::member::Member;
use super::ordered::OrderedIndex;
use super::segment_log::SegmentLog;
use super::MemberId;
use crate::event::CloseReason;
use crate::send_buffer::SendBuffer;
use crate::sender::wire_timestamp;
use crate::wire::{
    accept_header, decode_frames, encode_data_header, AckFrame, CloseFrame, ConnectFrame, Frame,
    Header, HeaderFlags,
};
use fanout_core::codec::{expand_pn, truncate_pn};
use fanout_core::pacing::Pacer;
use fanout_core::rtt::RttEstimator;
use fanout_core::stats::{DropCounters, DropReason};
use fanout_core::time::Instant;
use fanout_core::{Engine, TimerTable, Transmit};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::ops::Range;

/// Most control datagrams (ACCEPT, RESET, CLOSE) queued at once; beyond it
/// replies to new joiners are dropped (a join flood cannot grow memory).
const MAX_PENDING_CONTROL: usize = 1024;

/// What the session tells its application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEvent {
    /// A member was admitted.
    MemberJoined {
        /// Its id.
        id: MemberId,
        /// Its address.
        addr: SocketAddr,
        /// Offset at which its delivery starts.
        start: u64,
    },
    /// A member left or was evicted.
    MemberLeft {
        /// Its id.
        id: MemberId,
        /// Its address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// Every remaining member acknowledged the whole stream.
    Finished,
    /// The session ended.
    Closed(CloseReason),
}

/// Session counters.
#[derive(Debug, Clone, Default)]
pub struct SessionStats {
    /// Members admitted.
    pub members_joined: u64,
    /// Members evicted or reset.
    pub members_left: u64,
    /// New data segments sent (once each when multicast).
    pub data_segments: u64,
    /// Segment copies sent by unicast fan-out (no multicast).
    pub fanout_copies: u64,
    /// Repairs sent by multicast.
    pub multicast_repairs: u64,
    /// Repairs sent by unicast.
    pub unicast_repairs: u64,
    /// Datagrams sent in all.
    pub datagrams_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// ACK frames processed.
    pub acks_received: u64,
    /// Member retransmission timeouts.
    pub rto_events: u64,
    /// Member loss-recovery episodes (RACK).
    pub recovery_episodes: u64,
    /// Input refused, by reason.
    pub drops: DropCounters,
}

#[derive(Debug)]
enum Control {
    AckFrequency(u32),
    Accept {
        member_id: MemberId,
        timestamp: u32,
        start: u64,
    },
    Reset {
        reason: String,
    },
    Close,
}

/// A member and the keys it is indexed under.
#[derive(Debug)]
struct Slot {
    member: Member,
    edge: u64,
    cum: u64,
    cwnd: u64,
    srtt_ns: u64,
}

/// The sending end of a one-to-many session.
#[derive(Debug)]
pub struct SessionSender {
    config: SessionConfig,
    session_id: u64,
    buffer: SendBuffer,
    snd_nxt: u64,
    log: SegmentLog,
    mss: u64,
    slots: BTreeMap<MemberId, Slot>,
    by_addr: BTreeMap<SocketAddr, MemberId>,
    next_member: u64,
    edges: OrderedIndex,
    cums: OrderedIndex,
    cwnds: OrderedIndex,
    srtts: OrderedIndex,
    timers: TimerTable<MemberId>,
    /// Members with nothing outstanding (no timer needed until new data).
    idle: BTreeSet<MemberId>,
    /// Lost segments to repair: start → (end, members missing it).
    repairs: BTreeMap<u64, (u64, Vec<MemberId>)>,
    /// Unicast fan-out of the segment just sent (no multicast group).
    fanout: Option<(Range<u64>, VecDeque<SocketAddr>)>,
    controls: VecDeque<(SocketAddr, Control)>,
    pacer: Pacer,
    pacing_deadline: Option<Instant>,
    cwnd_limited: bool,
    created: Instant,
    data_open: bool,
    next_pn: u64,
    finished: bool,
    closed: Option<CloseReason>,
    events: VecDeque<SessionEvent>,
    stats: SessionStats,
}

impl SessionSender {
    /// Opens a session named `session_id`, waiting for members.
    pub fn new(config: SessionConfig, session_id: u64, now: Instant) -> Self {
        let mss = config.transport.max_payload();
        let pacer = if config.transport.pacing {
            Pacer::new(mss)
        } else {
            Pacer::disabled()
        };
        SessionSender {
            buffer: SendBuffer::new(config.transport.send_buffer_bytes),
            session_id,
            snd_nxt: 0,
            log: SegmentLog::default(),
            mss,
            slots: BTreeMap::new(),
            by_addr: BTreeMap::new(),
            next_member: 1,
            edges: OrderedIndex::default(),
            cums: OrderedIndex::default(),
            cwnds: OrderedIndex::default(),
            srtts: OrderedIndex::default(),
            timers: TimerTable::new(),
            idle: BTreeSet::new(),
            repairs: BTreeMap::new(),
            fanout: None,
            controls: VecDeque::new(),
            pacer,
            pacing_deadline: None,
            cwnd_limited: false,
            created: now,
            data_open: false,
            next_pn: 0,
            finished: false,
            closed: None,
            events: VecDeque::new(),
            stats: SessionStats::default(),
            config,
        }
    }

    /// Queues as much of `data` as the send buffer takes; never blocks.
    pub fn write(&mut self, data: &[u8]) -> usize {
        if self.closed.is_some() {
            return 0;
        }
        self.buffer.write(data)
    }

    /// Queues `msg` as one application message (segments never span two
    /// messages). False if it does not fit now.
    pub fn write_message(&mut self, msg: &[u8]) -> bool {
        self.closed.is_none() && self.buffer.write_message(msg)
    }

    /// Aborts the session: every member gets RESET with `reason`.
    pub fn abort(&mut self, reason: &str) {
        if self.closed.is_some() {
            return;
        }
        let addrs: Vec<SocketAddr> = self.slots.values().map(|s| s.member.addr).collect();
        for a in addrs {
            self.control(
                a,
                Control::Reset {
                    reason: reason.into(),
                },
            );
        }
        let why = CloseReason::LocalReset {
            code: 2,
            reason: reason.into(),
        };
        self.closed = Some(why.clone());
        self.events.push_back(SessionEvent::Closed(why));
    }

    /// Bytes [`SessionSender::write`] would take now.
    pub fn writable(&self) -> usize {
        if self.closed.is_some() {
            0
        } else {
            self.buffer.free()
        }
    }

    /// No more data: the stream ends after what was written.
    pub fn finish(&mut self) {
        self.buffer.finish();
    }

    /// Next application event.
    pub fn poll_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }

    /// Counters.
    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }

    /// Next new offset to send (`SND.NXT`).
    pub fn snd_nxt(&self) -> u64 {
        self.snd_nxt
    }

    /// Members currently in the session.
    pub fn member_count(&self) -> usize {
        self.slots.len()
    }

    /// Why the session ended, once it has.
    pub fn close_reason(&self) -> Option<&CloseReason> {
        self.closed.as_ref()
    }

    /// Stream bytes every member acknowledged (the slowest member's
    /// cumulative ACK, the FIN excluded).
    pub fn bytes_acked_by_all(&self) -> u64 {
        let min = self.cums.min().map_or(0, |(c, _)| c);
        self.buffer.fin().map_or(min, |f| min.min(f))
    }

    /// Per-member progress: (id, address, cumulative ACK, cwnd, srtt).
    pub fn members(
        &self,
    ) -> impl Iterator<Item = (MemberId, SocketAddr, u64, u64, std::time::Duration)> + '_ {
        self.slots.values().map(|s| {
            (
                s.member.id,
                s.member.addr,
                s.member.cumulative,
                s.member.cc.cwnd(),
                s.member.rtt.srtt(),
            )
        })
    }

    /// Session congestion window: the smallest member cwnd (SMO default `G = min`).
    pub fn cwnd(&self) -> u64 {
        self.cwnds.min().map_or(0, |(c, _)| c)
    }

    fn stream_end(&self) -> Option<u64> {
        self.buffer.fin().map(|f| f + 1)
    }

    fn reindex(&mut self, id: MemberId) {
        let snd_nxt = self.snd_nxt;
        let stall = self.config.stall_timeout;
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        let m = &slot.member;
        let edge = m.send_edge();
        let cum = m.cumulative;
        let cwnd = m.cc.cwnd();
        let srtt_ns = m.rtt.srtt().as_nanos() as u64;
        let outstanding = m.cumulative < snd_nxt;
        let timer = [m.next_timer(), outstanding.then(|| m.last_progress + stall)]
            .into_iter()
            .flatten()
            .min();
        self.edges.update(id, Some(slot.edge), edge);
        self.cums.update(id, Some(slot.cum), cum);
        self.cwnds.update(id, Some(slot.cwnd), cwnd);
        self.srtts.update(id, Some(slot.srtt_ns), srtt_ns);
        self.timers.set(id, timer);
        (slot.edge, slot.cum, slot.cwnd, slot.srtt_ns) = (edge, cum, cwnd, srtt_ns);
        if outstanding {
            self.idle.remove(&id);
        } else {
            self.idle.insert(id);
        }
    }

    fn admit(&mut self, now: Instant, from: SocketAddr, connect: &ConnectFrame) {
        if self.slots.len() >= self.config.max_members {
            self.stats.drops.count(DropReason::LimitExceeded);
            self.control(
                from,
                Control::Reset {
                    reason: "session full".into(),
                },
            );
            return;
        }
        let start = match self.config.join {
            JoinPolicy::Live => self.snd_nxt,
            JoinPolicy::FromStart if self.buffer.base() == 0 => 0,
            JoinPolicy::FromStart => {
                self.control(
                    from,
                    Control::Reset {
                        reason: "joined after the start of the file was released".into(),
                    },
                );
                return;
            }
        };
        let id = MemberId(self.next_member);
        self.next_member += 1;
        let t = &self.config.transport;
        let member = Member::new(
            id,
            from,
            start,
            connect.window,
            RttEstimator::new(t.rto),
            t.cc.build(self.mss),
            now,
        );
        let (edge, cum, cwnd) = (member.send_edge(), member.cumulative, member.cc.cwnd());
        let srtt_ns = member.rtt.srtt().as_nanos() as u64;
        self.slots.insert(
            id,
            Slot {
                member,
                edge,
                cum,
                cwnd,
                srtt_ns,
            },
        );
        self.edges.update(id, None, edge);
        self.cums.update(id, None, cum);
        self.cwnds.update(id, None, cwnd);
        self.srtts.update(id, None, srtt_ns);
        self.by_addr.insert(from, id);
        self.idle.insert(id);
        self.stats.members_joined += 1;
        self.events.push_back(SessionEvent::MemberJoined {
            id,
            addr: from,
            start,
        });
        self.control(
            from,
            Control::Accept {
                member_id: id,
                timestamp: connect.timestamp,
                start,
            },
        );
    }

    fn control(&mut self, to: SocketAddr, c: Control) {
        if self.controls.len() < MAX_PENDING_CONTROL {
            self.controls.push_back((to, c));
        } else {
            self.stats.drops.count(DropReason::LimitExceeded);
        }
    }

    /// Removes a member (evicted, reset, or left) and tells it why. Callers
    /// then run [`SessionSender::after_progress`] (release may advance).
    fn remove(&mut self, id: MemberId, reason: &str, notify: bool) {
        let Some(slot) = self.slots.remove(&id) else {
            return;
        };
        self.edges.remove(id, slot.edge);
        self.cums.remove(id, slot.cum);
        self.cwnds.remove(id, slot.cwnd);
        self.srtts.remove(id, slot.srtt_ns);
        self.timers.set(id, None);
        self.idle.remove(&id);
        self.by_addr.remove(&slot.member.addr);
        self.stats.members_left += 1;
        if notify {
            self.control(
                slot.member.addr,
                Control::Reset {
                    reason: reason.into(),
                },
            );
        }
        self.events.push_back(SessionEvent::MemberLeft {
            id,
            addr: slot.member.addr,
            reason: reason.into(),
        });
    }

    /// Releases what every (counted) member acknowledged; finishes the
    /// session once the whole stream is acknowledged.
    fn after_progress(&mut self) {
        let release = match self.config.release {
            ReleasePolicy::SlowestReceiver => self.cums.min().map(|(c, _)| c),
            ReleasePolicy::Quorum(f) => {
                let n = self.cums.len();
                let need = ((f.clamp(0.0, 1.0) * n as f64).ceil() as usize).clamp(1, n.max(1));
                // The need-th highest cumulative ACK.
                n.checked_sub(need)
                    .and_then(|k| self.cums.nth(k))
                    .map(|(c, _)| c)
            }
        };
        if let Some(r) = release {
            let r = r.min(self.buffer.end());
            // SMO §II quorum release: data the quorum acknowledged is freed.
            // A member still missing some of it is evicted only when it
            // needs a repair of freed data (see `next_repair`).
            self.buffer.release(r);
            self.log.release_below(r);
        }
        if self.data_open && self.slots.is_empty() && self.closed.is_none() {
            self.closed = Some(CloseReason::NoReceivers);
            self.events
                .push_back(SessionEvent::Closed(CloseReason::NoReceivers));
            return;
        }
        if !self.finished && !self.slots.is_empty() {
            if let (Some(end), Some((min_cum, _))) = (self.stream_end(), self.cums.min()) {
                if min_cum >= end {
                    self.finished = true;
                    self.events.push_back(SessionEvent::Finished);
                    let addrs: Vec<SocketAddr> =
                        self.slots.values().map(|s| s.member.addr).collect();
                    for a in addrs {
                        self.control(a, Control::Close);
                    }
                    self.closed = Some(CloseReason::Completed);
                    self.events
                        .push_back(SessionEvent::Closed(CloseReason::Completed));
                }
            }
        }
    }

    fn queue_repairs(&mut self, id: MemberId, lost: Vec<Range<u64>>) {
        for r in lost {
            self.repairs
                .entry(r.start)
                .or_insert((r.end, Vec::new()))
                .1
                .push(id);
        }
    }

    fn on_ack(&mut self, now: Instant, id: MemberId, pn: u64, ack: &AckFrame) {
        self.stats.acks_received += 1;
        let snd_nxt = self.snd_nxt;
        if ack.cumulative > snd_nxt || ack.sack.iter().any(|r| r.end > snd_nxt) {
            self.stats.drops.count(DropReason::AckOfUnsent);
            return;
        }
        let (log, mss, cwnd_limited) = (&self.log, self.mss, self.cwnd_limited);
        let members = self.slots.len() as u32;
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        let m = &mut slot.member;
        let newer = m.largest_ack_pn.is_none_or(|l| pn > l);
        if newer {
            m.largest_ack_pn = Some(pn);
            m.window_end = m.window_end.max(ack.cumulative.saturating_add(ack.window));
        }
        let episodes = m.recovery_episodes;
        let out = m.on_ack(now, ack, log, snd_nxt, mss, cwnd_limited);
        self.stats.recovery_episodes += m.recovery_episodes - episodes;
        // SMO §II adaptive ACKs: every 2 segments in slow start or recovery,
        // thinned once the member is in congestion avoidance without loss.
        if let Some(steady) = self.config.steady_ack_every {
            // Keep at least four ACKs per window, or the window's tail waits
            // for the delayed-ACK timer and the ACK clock stalls.
            let per_window = (m.cc.cwnd() / (4 * mss)).clamp(2, 64) as u32;
            // Thin by count as the session grows, so the total feedback
            // stays well below the sender's link: `steady` up to 125
            // members, then one more multiple per 125 (64 at most).
            let scaled = steady.saturating_mul(members.div_ceil(125).max(1));
            let want = if m.cc.in_slow_start() || m.recovery_point.is_some() {
                2
            } else {
                scaled.clamp(1, 64).min(per_window)
            };
            if want != m.ack_every {
                m.ack_every = want;
                let addr = m.addr;
                self.control(addr, Control::AckFrequency(want));
            }
        }
        if out.clipped {
            self.stats.drops.count(DropReason::InvalidAck);
        }
        if out.sack_capped {
            self.stats.drops.count(DropReason::LimitExceeded);
        }
        self.queue_repairs(id, out.newly_lost);
        self.reindex(id);
        if out.progressed {
            self.after_progress();
        }
    }

    fn handle_member_frames(&mut self, now: Instant, id: MemberId, pn: u64, body: &[u8]) {
        for frame in decode_frames(body) {
            let Ok(frame) = frame else {
                self.stats.drops.count(DropReason::MalformedFrame);
                return;
            };
            match frame {
                Frame::Ack(ack) => self.on_ack(now, id, pn, &ack),
                Frame::Connect(c) if !c.sends_data => {
                    // ACCEPT lost: answer again.
                    if let Some(slot) = self.slots.get(&id) {
                        let (addr, start) = (slot.member.addr, slot.member.start);
                        self.control(
                            addr,
                            Control::Accept {
                                member_id: id,
                                timestamp: c.timestamp,
                                start,
                            },
                        );
                    }
                }
                Frame::Reset(CloseFrame { reason, .. }) => {
                    let why = format!("member reset: {reason}");
                    self.remove(id, &why, false);
                    self.after_progress();
                    return;
                }
                Frame::Close(_) | Frame::Ping | Frame::Padding => {}
                _ => self.stats.drops.count(DropReason::UnexpectedFrame),
            }
        }
    }

    fn header(&mut self, out: &mut Vec<u8>, multicast: bool) {
        let pn = self.next_pn;
        self.next_pn += 1;
        let flags = if multicast {
            HeaderFlags::default().with(HeaderFlags::MULTICAST)
        } else {
            HeaderFlags::default()
        };
        Header {
            flags,
            session_id: self.session_id,
            packet_number: truncate_pn(pn),
        }
        .encode(out);
    }

    fn write_data(
        &mut self,
        now: Instant,
        range: Range<u64>,
        to: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Transmit {
        self.header(out, to.ip().is_multicast());
        let data_end = range.end.min(self.buffer.end());
        let fin = self.buffer.fin().is_some_and(|f| range.end == f + 1);
        let len = (data_end - range.start) as usize;
        let message_end = self.buffer.is_message_end(data_end) && len > 0;
        encode_data_header(out, range.start, wire_timestamp(now), fin, message_end, len);
        self.buffer.copy_to(range.start..data_end, out);
        self.pacer.on_sent(now, len as u64);
        self.stats.datagrams_sent += 1;
        Transmit { destination: to }
    }

    /// The next repair to send, if any member still misses a queued segment.
    fn next_repair(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<Transmit> {
        while let Some(mut entry) = self.repairs.first_entry() {
            let start = *entry.key();
            let (end, ids) = entry.get_mut();
            let range = start..*end;
            let slots = &self.slots;
            ids.retain(|id| {
                slots
                    .get(id)
                    .is_some_and(|s| s.member.is_lost(range.clone()))
            });
            if ids.is_empty() {
                entry.remove();
                continue;
            }
            if start < self.buffer.base() {
                // Freed by a quorum release: these members cannot be repaired.
                for id in entry.remove().1 {
                    self.remove(id, "fell behind the quorum: its data was released", true);
                }
                self.after_progress();
                continue;
            }
            let share = ids.len() as f64 / self.slots.len().max(1) as f64;
            let multicast = self.config.group.filter(|_| {
                share > self.config.multicast_repair_threshold
                    || self.config.multicast_repair_threshold <= 0.0
            });
            if let Some(group) = multicast {
                let ids = entry.remove().1;
                for id in &ids {
                    if let Some(s) = self.slots.get_mut(id) {
                        s.member.on_repair_sent(range.clone(), now);
                    }
                }
                for id in ids {
                    self.reindex(id);
                }
                self.log.on_multicast_repair(start, now);
                self.stats.multicast_repairs += 1;
                return Some(self.write_data(now, range, group, out));
            }
            let id = ids.pop().expect("non-empty");
            if ids.is_empty() {
                entry.remove();
            }
            let addr = self.slots.get_mut(&id).map(|s| {
                s.member.on_repair_sent(range.clone(), now);
                s.member.addr
            })?;
            self.reindex(id);
            self.stats.unicast_repairs += 1;
            return Some(self.write_data(now, range, addr, out));
        }
        None
    }

    /// The next new segment, if every member's window allows it.
    fn next_new(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<Transmit> {
        if !self.data_open {
            let enough = self.slots.len() >= self.config.wait_for_members.max(1);
            let waited = now >= self.created + self.config.wait_at_most && !self.slots.is_empty();
            if !(enough || waited) {
                return None;
            }
            self.data_open = true;
        }
        let data_end = self.buffer.end();
        let fin = self.buffer.fin();
        if self.snd_nxt >= data_end && fin.is_none_or(|f| self.snd_nxt > f) {
            self.cwnd_limited = false;
            return None;
        }
        let (mut range, _) = self.buffer.next_segment(self.snd_nxt, self.mss);
        if fin.is_some_and(|f| range.end == f) {
            range.end += 1; // the FIN occupies one offset
        }
        let edge = self.edges.min().map_or(0, |(e, _)| e);
        if range.end > edge {
            self.cwnd_limited = true;
            return None;
        }
        self.log.push(range.clone(), now);
        self.snd_nxt = range.end;
        self.stats.data_segments += 1;
        // Members that had nothing outstanding now do: arm their timers.
        let idle: Vec<MemberId> = std::mem::take(&mut self.idle).into_iter().collect();
        for id in idle {
            if let Some(s) = self.slots.get_mut(&id) {
                // Stall time counts from when data became outstanding, not
                // from the last ACK of a member that was simply caught up.
                s.member.last_progress = now;
                s.member.arm_rto(now, self.snd_nxt);
            }
            self.reindex(id);
        }
        match self.config.group {
            Some(group) => Some(self.write_data(now, range, group, out)),
            None => {
                let mut addrs: VecDeque<SocketAddr> =
                    self.slots.values().map(|s| s.member.addr).collect();
                let first = addrs.pop_front()?;
                self.fanout = Some((range.clone(), addrs));
                self.stats.fanout_copies += 1;
                Some(self.write_data(now, range, first, out))
            }
        }
    }

    fn on_member_timer(&mut self, now: Instant, id: MemberId) {
        let (snd_nxt, mss, stall, max_backoffs) = (
            self.snd_nxt,
            self.mss,
            self.config.stall_timeout,
            self.config.max_rto_backoffs,
        );
        let log = &self.log;
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        let m = &mut slot.member;
        let episodes = m.recovery_episodes;
        let mut lost = Vec::new();
        if m.rack_deadline.is_some_and(|t| t <= now) {
            let flight = m.in_flight(snd_nxt);
            lost.extend(m.detect_losses(now, log, snd_nxt, mss, flight));
        }
        let mut rto = false;
        if m.rto_deadline.is_some_and(|t| t <= now) && m.cumulative < snd_nxt {
            lost.extend(m.on_rto(now, snd_nxt, log));
            rto = true;
        }
        let stalled = m.cumulative < snd_nxt && now >= m.last_progress + stall;
        self.stats.rto_events += u64::from(rto);
        self.stats.recovery_episodes += m.recovery_episodes - episodes;
        let backoffs = m.rto_backoffs;
        let cumulative = m.cumulative;
        self.queue_repairs(id, lost);
        if rto && cumulative < self.buffer.base() {
            // Its retransmission timer fired for data a quorum release freed.
            self.remove(id, "fell behind the quorum: its data was released", true);
            self.after_progress();
        } else if stalled {
            self.remove(id, "stalled: no progress within the stall timeout", true);
            self.after_progress();
        } else if backoffs > max_backoffs {
            self.remove(id, "unreachable: too many retransmission timeouts", true);
            self.after_progress();
        } else {
            self.reindex(id);
        }
    }
}

impl Engine for SessionSender {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.stats.datagrams_received += 1;
        let (header, body) = match accept_header(datagram) {
            Ok(ok) => ok,
            Err(reason) => {
                self.stats.drops.count(reason);
                return;
            }
        };
        if self.closed.is_some() {
            self.stats.drops.count(DropReason::SessionClosed);
            return;
        }
        match self.by_addr.get(&from).copied() {
            Some(id) => {
                if header.session_id != self.session_id {
                    self.stats.drops.count(DropReason::UnknownSession);
                    return;
                }
                let expected = self
                    .slots
                    .get(&id)
                    .and_then(|s| s.member.largest_ack_pn)
                    .map_or(0, |l| l + 1);
                let pn = expand_pn(expected, header.packet_number);
                self.handle_member_frames(now, id, pn, body);
            }
            None => match decode_frames(body).next() {
                Some(Ok(Frame::Connect(c)))
                    if !c.sends_data
                        && (header.session_id == 0 || header.session_id == self.session_id) =>
                {
                    self.admit(now, from, &c);
                }
                _ => self.stats.drops.count(DropReason::UnknownPeer),
            },
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if let Some((to, c)) = self.controls.pop_front() {
            self.header(buf, false);
            match c {
                Control::Accept {
                    member_id,
                    timestamp,
                    start,
                } => Frame::Accept(ConnectFrame {
                    sends_data: true,
                    max_payload: self.mss,
                    window: 0,
                    timestamp,
                    member_id: member_id.0,
                    start_offset: start,
                })
                .encode(buf),
                Control::Reset { reason } => Frame::Reset(CloseFrame {
                    code: 1,
                    reason: &reason,
                })
                .encode(buf),
                Control::AckFrequency(n) => Frame::AckFrequency(n).encode(buf),
                Control::Close => Frame::Close(CloseFrame {
                    code: 0,
                    reason: "",
                })
                .encode(buf),
            }
            self.stats.datagrams_sent += 1;
            return Some(Transmit { destination: to });
        }
        if self.closed.is_some() {
            return None;
        }
        if let Some((range, addrs)) = self.fanout.as_mut() {
            if let Some(to) = addrs.pop_front() {
                let range = range.clone();
                self.stats.fanout_copies += 1;
                return Some(self.write_data(now, range, to, buf));
            }
            self.fanout = None;
        }
        let release = self.pacer.next_send_time(now, self.mss);
        if release > now {
            self.pacing_deadline = Some(release);
            return None;
        }
        self.pacing_deadline = None;
        let t = match self.next_repair(now, buf) {
            Some(t) => Some(t),
            None => self.next_new(now, buf),
        };
        if t.is_some() {
            let srtt = std::time::Duration::from_nanos(self.srtts.max().map_or(0, |(s, _)| s));
            let slow_start = self
                .slots
                .values()
                .next()
                .is_some_and(|s| s.member.cc.in_slow_start());
            self.pacer.set_rate(self.cwnd(), srtt, slow_start);
        }
        t
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.closed.is_some() {
            return None;
        }
        let admission = (!self.data_open).then_some(self.created + self.config.wait_at_most);
        [self.pacing_deadline, self.timers.next_deadline(), admission]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.pacing_deadline.is_some_and(|t| t <= now) {
            self.pacing_deadline = None;
        }
        while let Some(id) = self.timers.pop_expired(now) {
            self.on_member_timer(now, id);
        }
    }
}
