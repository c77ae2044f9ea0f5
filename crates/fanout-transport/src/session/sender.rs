//! The session sender (SMO master block) as a sans-IO engine.

use super::addr_index::AddrIndex;
use super::coded_repair::CodedBlocks;
use super::config::{JoinPolicy, ReleasePolicy, SessionConfig};
use super::eviction::{MemberSample, OutlierTracker};
use super::fanout_run::{FanoutRun, FANOUT_RUN_SEGMENTS};
use super::feedback;
use super::member::{earliest, Member};
use super::member_timers::MemberTimers;
use super::ordered::{Extreme, OrderedIndex};
use super::policy::{self, RttPolicy, WindowPolicy};
use super::roster::{ReceiverProgress, SessionRoster};
use super::segment_log::SegmentLog;
use super::slots::SlotTable;
use super::upstream::{self, UpstreamStats, UpstreamTable};
use super::MemberId;
use crate::event::CloseReason;
use crate::send_buffer::SendBuffer;
use crate::sender::wire_timestamp;
use crate::wire::{
    accept_header, decode_frames, encode_data_header, AckFrame, AckFrequencyFrame, CloseFrame,
    ConnectFrame, Frame, Header, HeaderFlags, RosterFrame, UpstreamFrame,
};
use fanout_core::codec::{expand_pn, truncate_pn};
use fanout_core::pacing::Pacer;
use fanout_core::rtt::RttEstimator;
use fanout_core::stats::{DropCounters, DropReason};
use fanout_core::time::Instant;
use fanout_core::{Engine, Transmit};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::ops::Range;

mod coded;

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
    /// Upstream bytes of a member (session relay), or their end, became
    /// readable: call [`SessionSender::read_upstream`] until it returns 0.
    /// Told again only after a read emptied the member's stream.
    Upstream {
        /// The member.
        id: MemberId,
        /// Its address.
        addr: SocketAddr,
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
    /// Multicast repairs of a segment already multicast again before.
    pub repeat_multicast_repairs: u64,
    /// Members that had reported the segment lost, summed over multicast
    /// repairs (divided by `multicast_repairs`: members served per copy).
    pub multicast_repair_members: u64,
    /// Bytes released before every member acknowledged them, to make room
    /// for the application (buffer-limited release).
    pub buffer_limited_release_bytes: u64,
    /// Coded repair symbols multicast (REPAIR frames, coded policy).
    pub coded_repairs: u64,
    /// Blocks repaired by coding (decisions; a block may take several).
    pub coded_blocks: u64,
    /// Member-segment losses covered by coded repair decisions.
    pub coded_repair_members: u64,
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

/// A lost segment waiting for its repair.
#[derive(Debug)]
struct PendingRepair {
    /// End offset of the segment.
    end: u64,
    /// Members that reported it lost and still miss it.
    ids: Vec<MemberId>,
    /// When the first of them reported it.
    since: Instant,
}

#[derive(Debug)]
enum Control {
    AckFrequency(AckFrequencyFrame),
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

/// A member and its place in the idle list.
#[derive(Debug)]
struct Slot {
    member: Member,
    /// Nothing outstanding: no timer needed until new data.
    idle: bool,
    /// In `SessionSender::idle` (at most once).
    listed: bool,
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
    /// Members by dense slot; every index below is keyed by slot.
    slots: SlotTable<Slot>,
    by_addr: AddrIndex,
    next_member: u64,
    edges: OrderedIndex,
    cums: OrderedIndex,
    cwnds: OrderedIndex,
    srtts: OrderedIndex,
    /// Essentially-fair window only (empty otherwise): pipe bases, receive
    /// window ends and smoothed windows of the members.
    bases: OrderedIndex,
    wends: OrderedIndex,
    avgs: OrderedIndex,
    timers: MemberTimers,
    /// Members that became idle since the last send (`Slot::listed`); an
    /// entry whose slot is no longer idle, or now holds another member, is
    /// skipped when taken.
    idle: Vec<(u32, MemberId)>,
    /// Lost segments to repair: start → (end, members missing it).
    repairs: BTreeMap<u64, PendingRepair>,
    /// When the youngest held repair becomes ready ([`Self::repair_holdoff`]).
    repair_wake: Option<Instant>,
    /// Unicast fan-out of the segment just sent (no multicast group).
    fanout: FanoutRun,
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
    /// Outlier-eviction state ([`super::eviction`]).
    outliers: OutlierTracker,
    /// `(member count, feedback budget)` → [`feedback::ack_interval_us`]
    /// of them, last computed (saves its divisions on every ACK).
    ack_interval: ((usize, u32), u32),
    /// Members' upstream streams ([`super::upstream`]), off the ACK path:
    /// created on the first UPSTREAM frame.
    upstream: Option<Box<UpstreamTable>>,
    /// Blocks and queued symbols of the coded repair policy
    /// ([`super::coded_repair`]; created with the first segment).
    coded: Option<Box<CodedBlocks>>,
    /// Mergers' rosters: receivers behind each merger member and their
    /// progress ([`super::roster`]).
    roster: SessionRoster,
}

impl SessionSender {
    /// Opens a session named `session_id`, waiting for members.
    pub fn new(config: SessionConfig, session_id: u64, now: Instant) -> Self {
        let mss = config.transport.max_payload();
        let pacer = if config.transport.pacing {
            Pacer::new(mss).with_burst_time(config.transport.pacing_burst)
        } else {
            Pacer::disabled()
        };
        SessionSender {
            buffer: SendBuffer::new(config.transport.send_buffer_bytes),
            session_id,
            snd_nxt: 0,
            log: SegmentLog::default(),
            mss,
            slots: SlotTable::default(),
            by_addr: AddrIndex::default(),
            next_member: 1,
            edges: OrderedIndex::new(Extreme::Min),
            cums: match config.release {
                // Quorum release reads a rank on every ACK that progresses.
                ReleasePolicy::Quorum(_) => OrderedIndex::new(Extreme::Min).with_rank(),
                ReleasePolicy::SlowestReceiver | ReleasePolicy::BufferLimited => {
                    OrderedIndex::new(Extreme::Min)
                }
            },
            cwnds: match config.window {
                // The essentially-fair window reads a rank of the windows.
                WindowPolicy::EssentiallyFair { .. } => OrderedIndex::new(Extreme::Min).with_rank(),
                WindowPolicy::Minimum => OrderedIndex::new(Extreme::Min),
            },
            srtts: match config.rtt {
                RttPolicy::Percentile(_) => OrderedIndex::new(Extreme::Max).with_rank(),
                RttPolicy::Maximum => OrderedIndex::new(Extreme::Max),
            },
            bases: OrderedIndex::new(Extreme::Min),
            wends: OrderedIndex::new(Extreme::Min),
            avgs: OrderedIndex::new(Extreme::Min),
            timers: MemberTimers::default(),
            idle: Vec::new(),
            repairs: BTreeMap::new(),
            repair_wake: None,
            fanout: FanoutRun::default(),
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
            outliers: OutlierTracker::default(),
            ack_interval: ((0, 0), 0),
            upstream: None,
            coded: None,
            roster: SessionRoster::default(),
            config,
        }
    }

    /// Queues as much of `data` as the send buffer takes; never blocks.
    pub fn write(&mut self, data: &[u8]) -> usize {
        if self.closed.is_some() {
            return 0;
        }
        self.make_room(data.len());
        self.buffer.write(data)
    }

    /// Queues `msg` as one application message (segments never span two
    /// messages). False if it does not fit now.
    pub fn write_message(&mut self, msg: &[u8]) -> bool {
        if self.closed.is_some() {
            return false;
        }
        self.make_room(msg.len());
        self.buffer.write_message(msg)
    }

    /// [`ReleasePolicy::BufferLimited`]: frees up to `wanted` bytes of room
    /// by releasing the oldest data, but only data multicast at least once
    /// (below `snd_nxt`). Other policies release on acknowledgements only.
    fn make_room(&mut self, wanted: usize) {
        if self.config.release != ReleasePolicy::BufferLimited {
            return;
        }
        let short = wanted.saturating_sub(self.buffer.free()) as u64;
        let target = (self.buffer.base() + short).min(self.snd_nxt);
        if target > self.buffer.base() {
            self.stats.buffer_limited_release_bytes += target - self.buffer.base();
            self.release_below(target);
        }
    }

    /// Why a member missing released data is evicted.
    fn released_reason(&self) -> &'static str {
        if self.config.release == ReleasePolicy::BufferLimited {
            "fell behind the send buffer: its data was released"
        } else {
            "fell behind the quorum: its data was released"
        }
    }

    /// Frees the send buffer, the segment log and coded-repair state below
    /// `offset`.
    fn release_below(&mut self, offset: u64) {
        self.buffer.release(offset);
        self.log.release_below(offset);
        self.coded_release(offset);
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
        } else if self.config.release == ReleasePolicy::BufferLimited {
            let sent = self.snd_nxt.saturating_sub(self.buffer.base());
            self.buffer.free() + usize::try_from(sent).unwrap_or(usize::MAX)
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

    /// Members currently in the session (a merger counts once; see
    /// [`SessionSender::receiver_count`]).
    pub fn member_count(&self) -> usize {
        self.slots.len()
    }

    /// Receivers in the session: members, with each merger member counted
    /// as the receivers it reported behind it (its ROSTER count). O(1).
    pub fn receiver_count(&self) -> u64 {
        self.roster.receivers(self.slots.len())
    }

    /// Receivers member `id` stands for (1 unless it is a merger that
    /// reported a roster).
    pub fn member_weight(&self, id: MemberId) -> u64 {
        self.roster.weight(&id)
    }

    /// True if member `id` is a merger (it sent a roster).
    pub fn is_merger(&self, id: MemberId) -> bool {
        self.roster.is_merger(&id)
    }

    /// Every receiver in the session and how far it got: members of their
    /// own first-hand, receivers behind mergers as their mergers last
    /// reported them (marked with the merger). A merger that never sent a
    /// roster is listed as a receiver. O(members + roster): for displays
    /// and reports.
    pub fn receivers(&self) -> Vec<ReceiverProgress> {
        let mut out: Vec<ReceiverProgress> = self
            .slots
            .values()
            .filter(|s| !self.roster.is_merger(&s.member.id))
            .map(|s| ReceiverProgress {
                addr: s.member.addr,
                cumulative: s.member.cumulative,
                via: None,
                reported: None,
            })
            .collect();
        out.extend(
            self.roster
                .entries()
                .filter_map(|(id, addr, cumulative, at)| {
                    let merger = self.slots.get(&id)?.member.addr;
                    Some(ReceiverProgress {
                        addr,
                        cumulative,
                        via: Some((id, merger)),
                        reported: Some(at),
                    })
                }),
        );
        out
    }

    /// Roster counters: pages taken in, entries dropped at the caps,
    /// claims clamped.
    pub fn roster_stats(&self) -> crate::merge::RosterStats {
        self.roster.stats()
    }

    /// ACK streams at the busiest feedback node (the sender's members, or
    /// a merger's children): what the feedback budget divides.
    fn feedback_sources(&self) -> usize {
        self.roster.feedback_sources(self.slots.len())
    }

    /// Why the session ended, once it has.
    pub fn close_reason(&self) -> Option<&CloseReason> {
        self.closed.as_ref()
    }

    /// Stream bytes every member acknowledged (the slowest member's
    /// cumulative ACK, the FIN excluded).
    pub fn bytes_acked_by_all(&self) -> u64 {
        let min = self.cums.min_key().unwrap_or(0);
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

    /// Copies member `id`'s next in-order upstream bytes (session relay,
    /// [`super::upstream`]) into `out`; returns the count (0 when nothing
    /// is readable now). Reading opens the member's upstream window.
    pub fn read_upstream(&mut self, id: MemberId, out: &mut [u8]) -> usize {
        self.upstream.as_mut().map_or(0, |u| u.read(id, out))
    }

    /// True once member `id` ended its upstream stream and all of it was
    /// read.
    pub fn upstream_finished(&self, id: MemberId) -> bool {
        self.upstream.as_ref().is_some_and(|u| u.finished(id))
    }

    /// Upstream counters (session relay).
    pub fn upstream_stats(&self) -> UpstreamStats {
        self.upstream
            .as_ref()
            .map_or_else(Default::default, |u| u.stats)
    }

    /// Memory the members' upstream streams hold now, bytes (at most
    /// [`super::upstream::MAX_UPSTREAM_BUFFERS`] ×
    /// [`super::MAX_UPSTREAM_WINDOW`] plus a small entry per member that
    /// used upstream).
    pub fn upstream_memory_bytes(&self) -> usize {
        self.upstream.as_ref().map_or(0, |u| u.memory_bytes())
    }

    /// A merger member's roster page ([`super::roster`]): its weight and
    /// its receivers' progress. Counts only; never releases data.
    fn on_roster(&mut self, now: Instant, id: MemberId, f: &RosterFrame) {
        self.roster.on_page(id, f, now);
    }

    fn on_upstream(&mut self, id: MemberId, f: &UpstreamFrame<'_>) {
        let Some(addr) = self.slots.get(&id).map(|s| s.member.addr) else {
            return;
        };
        let table = self.upstream.get_or_insert_with(Default::default);
        if table.on_frame(id, addr, f) == (upstream::Outcome::Accepted { readable: true }) {
            self.events.push_back(SessionEvent::Upstream { id, addr });
        }
    }

    /// Stops multicasting: from now on every new segment and repair goes to
    /// each member by unicast (the application's fallback when sending to
    /// the group fails, issue 3 §6). Segments already multicast but lost
    /// are repaired by unicast as members report them missing.
    pub fn fall_back_to_unicast(&mut self) {
        self.config.group = None;
    }

    /// Where data is multicast (`None`: unicast fan-out).
    pub fn group(&self) -> Option<SocketAddr> {
        self.config.group
    }

    /// Every member's figures now (O(N): for displays and reports, not
    /// per packet).
    pub fn member_snapshots(&self) -> impl Iterator<Item = super::MemberSnapshot> + '_ {
        self.slots.values().map(|s| s.member.snapshot())
    }

    /// Session congestion window (bytes): `G` of the member windows — the
    /// smallest (SMO default), or essentially fair ([`WindowPolicy`]).
    pub fn cwnd(&self) -> u64 {
        let min = self.cwnds.min_key().unwrap_or(0);
        // The essentially-fair bounds count from the worst path's smoothed
        // window: with hundreds of members one is nearly always just after
        // a loss or a timeout, and the instantaneous minimum would pin the
        // session to that moment.
        let worst = match self.config.window {
            WindowPolicy::Minimum => min,
            WindowPolicy::EssentiallyFair { .. } => self.avgs.min_key().unwrap_or(min),
        };
        policy::session_window(self.config.window, self.cwnds.len(), worst, |k| {
            self.cwnds.nth(k).map_or(min, |(c, _)| c)
        })
    }

    /// The session RTT (pacing): the largest member RTT, or a percentile.
    pub fn session_rtt(&self) -> std::time::Duration {
        let ns = |k: Option<u64>| std::time::Duration::from_nanos(k.unwrap_or(0));
        policy::session_rtt(
            self.config.rtt,
            self.srtts.len(),
            ns(self.srtts.max_key()),
            |k| ns(self.srtts.nth(k).map(|(s, _)| s)),
        )
    }

    /// The highest offset new data may reach. `G = min`: the smallest
    /// member edge (each member's own window beyond its pipe). Otherwise
    /// the session window beyond the furthest-behind pipe, and never past
    /// any member's receive window.
    fn send_limit(&self) -> u64 {
        match self.config.window {
            WindowPolicy::Minimum => self.edges.min_key().unwrap_or(0),
            WindowPolicy::EssentiallyFair { .. } => {
                let base = self.bases.min_key().unwrap_or(0);
                let wend = self.wends.min_key().unwrap_or(0);
                (base + self.cwnd()).min(wend)
            }
        }
    }

    fn fair_window(&self) -> bool {
        matches!(self.config.window, WindowPolicy::EssentiallyFair { .. })
    }

    fn stream_end(&self) -> Option<u64> {
        self.buffer.fin().map(|f| f + 1)
    }

    fn reindex(&mut self, id: MemberId) {
        if let Some(slot) = self.slots.slot_of(&id) {
            self.reindex_slot(slot);
        }
    }

    /// Re-keys the member at `slot` in every index (each skips an
    /// unchanged key) and files it as idle or not.
    fn reindex_slot(&mut self, s: u32) {
        let snd_nxt = self.snd_nxt;
        let stall = self.config.stall_timeout;
        let Some(slot) = self.slots.at_mut(s) else {
            return;
        };
        let m = &slot.member;
        let id = m.id;
        let outstanding = m.cumulative < snd_nxt;
        let timer = earliest(m.next_timer(), outstanding.then(|| m.last_progress + stall));
        self.edges.update(s, id, m.send_edge());
        self.cums.update(s, id, m.cumulative);
        self.cwnds.update(s, id, m.cc.cwnd());
        self.srtts.update(s, id, m.rtt.srtt().as_nanos() as u64);
        self.timers.set(s, id, timer);
        if matches!(self.config.window, WindowPolicy::EssentiallyFair { .. }) {
            self.bases.update(s, id, m.pipe_base());
            self.wends.update(s, id, m.window_end);
            let avg = slot.member.smooth_cwnd();
            self.avgs.update(s, id, avg);
        }
        slot.idle = !outstanding;
        if slot.idle && !slot.listed {
            slot.listed = true;
            self.list_idle(s, id);
        }
    }

    /// Appends to the idle list. Entries of members that left stay until
    /// the next send takes the list; if churn piles them up first, the list
    /// is compacted (amortised O(1) per entry, at most one live entry per
    /// member), so peers joining and leaving cannot grow it without bound.
    fn list_idle(&mut self, s: u32, id: MemberId) {
        self.idle.push((s, id));
        if self.idle.len() > 2 * self.slots.len() + 64 {
            let slots = &self.slots;
            self.idle
                .retain(|&(s, id)| slots.at(s).is_some_and(|x| x.member.id == id && x.listed));
        }
    }

    /// Takes the idle members (in id order); none is idle afterwards until
    /// reindexed.
    fn take_idle(&mut self) -> Vec<MemberId> {
        let mut ids: Vec<MemberId> = std::mem::take(&mut self.idle)
            .into_iter()
            .filter_map(|(s, id)| {
                let slot = self.slots.at_mut(s).filter(|x| x.member.id == id)?;
                slot.listed = false;
                std::mem::replace(&mut slot.idle, false).then_some(id)
            })
            .collect();
        ids.sort_unstable();
        ids
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
        // A member re-attaching from a crashed merger holds `[0, P)` and
        // continues from P (`super::resume`).
        let resume = (connect.start_offset > 0).then(|| {
            super::resume::resume_start(connect.start_offset, self.buffer.base(), self.snd_nxt)
        });
        if let Some(Err(reason)) = resume {
            self.control(
                from,
                Control::Reset {
                    reason: reason.into(),
                },
            );
            return;
        }
        let start = match self.config.join {
            _ if resume.is_some() => resume.and_then(Result::ok).unwrap_or(self.snd_nxt),
            JoinPolicy::Live => self.snd_nxt,
            JoinPolicy::FromStart if self.buffer.base() == 0 => 0,
            // Before any data went out a joiner starts at 0; after, at the
            // send position (data already sent is not in flight to it).
            JoinPolicy::CatchUp if self.snd_nxt == 0 => 0,
            JoinPolicy::CatchUp => self.snd_nxt,
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
        let (base, wend) = (member.pipe_base(), member.window_end);
        let srtt_ns = member.rtt.srtt().as_nanos() as u64;
        let s = self.slots.insert(
            id,
            Slot {
                member,
                idle: true,
                listed: true,
            },
        );
        self.edges.update(s, id, edge);
        self.cums.update(s, id, cum);
        self.cwnds.update(s, id, cwnd);
        self.srtts.update(s, id, srtt_ns);
        if self.fair_window() {
            self.bases.update(s, id, base);
            self.wends.update(s, id, wend);
            self.avgs.update(s, id, cwnd);
        }
        self.by_addr.insert(from, s);
        self.list_idle(s, id);
        if start < self.snd_nxt {
            // Joined a bulk session whose start is still buffered, after
            // data went out: what it missed is repaired like any loss.
            let missed = self.slots.get_mut(&id).map_or_else(Vec::new, |slot| {
                slot.member.mark_missed(now, self.snd_nxt, &self.log)
            });
            self.queue_repairs(now, id, missed);
            self.reindex(id);
        }
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
        let Some((s, slot)) = self.slots.remove(&id) else {
            return;
        };
        self.edges.remove(s);
        self.cums.remove(s);
        self.cwnds.remove(s);
        self.srtts.remove(s);
        self.bases.remove(s);
        self.wends.remove(s);
        self.avgs.remove(s);
        self.timers.set(s, id, None);
        self.by_addr.remove(&slot.member.addr);
        if let Some(u) = self.upstream.as_mut() {
            u.remove(id);
        }
        self.roster.remove(id);
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
            ReleasePolicy::SlowestReceiver | ReleasePolicy::BufferLimited => self.cums.min_key(),
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
            self.release_below(r);
        }
        if self.data_open && self.slots.is_empty() && self.closed.is_none() {
            self.closed = Some(CloseReason::NoReceivers);
            self.events
                .push_back(SessionEvent::Closed(CloseReason::NoReceivers));
            return;
        }
        if !self.finished && !self.slots.is_empty() {
            if let (Some(end), Some(min_cum)) = (self.stream_end(), self.cums.min_key()) {
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

    fn queue_repairs(&mut self, now: Instant, id: MemberId, lost: Vec<Range<u64>>) {
        for r in lost {
            self.repairs
                .entry(r.start)
                .or_insert(PendingRepair {
                    end: r.end,
                    ids: Vec::new(),
                    since: now,
                })
                .ids
                .push(id);
        }
    }

    /// How long a newly reported loss waits before its repair is chosen:
    /// one feedback slot, the spread over which the members that lost the
    /// same segment report it (their ACKs are paced into staggered slots,
    /// [`feedback`]), at most 50 ms; zero without time thinning. Deciding
    /// at the first report would see one member missing a segment that
    /// dozens miss, and send dozens of copies.
    fn repair_holdoff(&self) -> std::time::Duration {
        let slot_us =
            feedback::ack_interval_us(self.feedback_sources(), self.config.feedback_budget_pps);
        std::time::Duration::from_micros(u64::from(slot_us).min(50_000))
    }

    fn on_ack(&mut self, now: Instant, id: MemberId, pn: u64, ack: &AckFrame) {
        self.stats.acks_received += 1;
        let snd_nxt = self.snd_nxt;
        if ack.cumulative > snd_nxt || ack.sack.iter().any(|r| r.end > snd_nxt) {
            self.stats.drops.count(DropReason::AckOfUnsent);
            return;
        }
        let members = self.feedback_sources();
        let (log, mss, cwnd_limited) = (&self.log, self.mss, self.cwnd_limited);
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
        // SMO §II adaptive ACKs (every 2 segments in slow start or
        // recovery, thinned in loss-free congestion avoidance), plus time
        // thinning to the session's feedback budget.
        if let Some(steady) = self.config.steady_ack_every {
            // Count ([`feedback::segments_per_ack`]) and time
            // ([`feedback::ack_interval_us`]) thinning, without divisions on
            // every ACK: the window in segments only matters outside slow
            // start and recovery, the interval only changes with the member
            // count.
            let fast = m.cc.in_slow_start() || m.recovery_point.is_some();
            let segments = if fast { 0 } else { m.cc.cwnd() / mss };
            let budget = self.config.feedback_budget_pps;
            if self.ack_interval.0 != (members, budget) {
                self.ack_interval = (
                    (members, budget),
                    feedback::ack_interval_us(members, budget),
                );
            }
            let want = AckFrequencyFrame {
                every: feedback::segments_per_ack(steady, fast, segments),
                min_interval_us: self.ack_interval.1,
            };
            if want != m.ack_schedule {
                m.ack_schedule = want;
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
        self.queue_repairs(now, id, out.newly_lost);
        self.reindex(id);
        if out.progressed {
            self.after_progress();
        }
        self.evict_outliers(now);
    }

    /// Outlier eviction ([`super::eviction`]): at most one O(N) sweep per
    /// check interval; evicted members get RESET with the reason.
    fn evict_outliers(&mut self, now: Instant) {
        let Some(policy) = self.config.outlier_eviction else {
            return;
        };
        if !self.outliers.due(now, &policy) {
            return;
        }
        let cap = self.config.transport.send_buffer_bytes as u64;
        let samples: Vec<MemberSample> = (self.slots.values())
            .map(|s| MemberSample {
                id: s.member.id,
                cwnd: s.member.cc.cwnd().min(cap),
                srtt: s.member.rtt.srtt(),
            })
            .collect();
        let evict = self.outliers.sweep(now, &policy, &samples);
        for (id, reason) in &evict {
            self.remove(*id, reason, true);
        }
        if !evict.is_empty() {
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
                Frame::Upstream(u) => self.on_upstream(id, &u),
                Frame::Roster(r) => self.on_roster(now, id, &r),
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
        let len = range.end.min(self.buffer.end()) - range.start;
        let t = self.write_segment(now, range, to, out);
        self.pacer.on_sent(now, len);
        t
    }

    /// Encodes one data datagram without charging the pacer (the copies of
    /// a unicast fan-out run were charged once per segment).
    fn write_segment(
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
        self.stats.datagrams_sent += 1;
        Transmit { destination: to }
    }

    /// The next repair to send, if any member still misses a queued segment.
    fn next_repair(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<Transmit> {
        let holdoff = self.repair_holdoff();
        self.repair_wake = None;
        if let Some(t) = self.next_coded_symbol(now, out) {
            return Some(t);
        }
        let mut cursor = 0;
        while let Some((&start, _)) = self.repairs.range(cursor..).next() {
            cursor = start + 1;
            if self.coded.is_some() {
                match self.coded_block_repair(now, start, holdoff, out) {
                    coded::CodedStep::Sent(t) => return Some(t),
                    coded::CodedStep::Skip(next) => {
                        cursor = next.max(cursor);
                        continue;
                    }
                    coded::CodedStep::PerSegment => {}
                }
            }
            let Entry::Occupied(mut entry) = self.repairs.entry(start) else {
                break;
            };
            let PendingRepair { end, ids, since } = entry.get_mut();
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
                // Freed by a quorum or buffer-limited release: these
                // members cannot be repaired.
                let ids = entry.remove().ids;
                let why = self.released_reason();
                for id in ids {
                    self.remove(id, why, true);
                }
                self.after_progress();
                continue;
            }
            let ready = *since + holdoff;
            if ready > now {
                self.repair_wake = Some(self.repair_wake.map_or(ready, |w| w.min(ready)));
                continue;
            }
            // Receiver-weighted (a merger's loss is its subtree's).
            let missing = if self.roster.is_flat() {
                ids.len() as u64
            } else {
                ids.iter().map(|id| self.roster.weight(id)).sum()
            };
            let receivers = self.roster.receivers(self.slots.len());
            let multicast = self.config.group.filter(|_| {
                self.config
                    .repair
                    .multicast_weighted(ids.len(), missing, receivers)
            });
            if let Some(group) = multicast {
                let ids = entry.remove().ids;
                self.stats.multicast_repair_members += ids.len() as u64;
                for id in &ids {
                    if let Some(s) = self.slots.get_mut(id) {
                        s.member.on_repair_sent(range.clone(), now);
                    }
                }
                for id in ids {
                    self.reindex(id);
                }
                if self.log.on_multicast_repair(start, now) {
                    self.stats.repeat_multicast_repairs += 1;
                }
                self.stats.multicast_repairs += 1;

                return Some(self.write_data(now, range, group, out));
            }
            let id = ids.pop().expect("non-empty");
            if ids.is_empty() {
                entry.remove();
            }
            self.repair_wake = None;
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
        let range = self.take_new(now)?;
        match self.config.group {
            Some(group) => Some(self.write_data(now, range, group, out)),
            None => self.start_fanout(now, range, out),
        }
    }

    /// Unicast fan-out (no group): takes a run of segments while the
    /// windows allow — about 1 ms of sending at the pacing rate (the pacer's
    /// own burst allowance at high rates), 1 to [`FANOUT_RUN_SEGMENTS`] —
    /// charges the pacer once per segment (each member's path carries each
    /// segment once; the debt spaces the runs), and starts copying the run
    /// member by member.
    fn start_fanout(
        &mut self,
        now: Instant,
        first: Range<u64>,
        out: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let charge = |s: &Self, r: &Range<u64>| r.end.min(s.buffer.end()) - r.start;
        self.pacer.on_sent(now, charge(self, &first));
        let run = (self.pacer.rate_bytes_per_sec() / 1000 / self.mss.max(1))
            .clamp(1, FANOUT_RUN_SEGMENTS as u64) as usize;
        let mut ranges = vec![first];
        while ranges.len() < run {
            let Some(r) = self.take_new(now) else {
                break;
            };
            self.pacer.on_sent(now, charge(self, &r));
            ranges.push(r);
        }
        let addrs = self.slots.values().map(|s| s.member.addr).collect();
        self.fanout.start(ranges, addrs);
        self.next_fanout_copy(now, out)
    }

    /// The next copy of the current fan-out run, if any.
    fn next_fanout_copy(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<Transmit> {
        let (range, to) = self.fanout.next_copy()?;
        self.stats.fanout_copies += 1;
        Some(self.write_segment(now, range, to, out))
    }

    /// Takes the next new segment off the send buffer if every member's
    /// window allows it (logging it and arming idle members' timers).
    fn take_new(&mut self, now: Instant) -> Option<Range<u64>> {
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
        let edge = self.send_limit();
        if range.end > edge {
            self.cwnd_limited = true;
            return None;
        }
        self.log.push(range.clone(), now);
        self.coded_on_segment(&range);
        self.snd_nxt = range.end;
        // RFC 7661: windows grow only while they limit the sending. More
        // data waiting after this segment means the window (directly, or
        // through the pacing rate it sets) limits, not the application.
        self.cwnd_limited = self.snd_nxt < data_end;
        self.stats.data_segments += 1;
        // Members that had nothing outstanding now do: arm their timers.
        let idle = self.take_idle();
        for id in idle {
            if let Some(s) = self.slots.get_mut(&id) {
                // Stall time counts from when data became outstanding, not
                // from the last ACK of a member that was simply caught up.
                s.member.last_progress = now;
                s.member.arm_rto(now, self.snd_nxt);
            }
            self.reindex(id);
        }
        Some(range)
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
        self.queue_repairs(now, id, lost);
        if rto && cumulative < self.buffer.base() {
            // Its retransmission timer fired for data a quorum or
            // buffer-limited release freed.
            self.remove(id, self.released_reason(), true);
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
        match self.by_addr.get(&from) {
            Some(s) => {
                // A member whose ACCEPT was lost retries its CONNECT, still
                // under session id 0 (it learns the id from the ACCEPT).
                let retried_connect = header.session_id == 0
                    && matches!(decode_frames(body).next(), Some(Ok(Frame::Connect(_))));
                if header.session_id != self.session_id && !retried_connect {
                    self.stats.drops.count(DropReason::UnknownSession);
                    return;
                }
                let Some(m) = self.slots.at(s).map(|slot| &slot.member) else {
                    return;
                };
                let (id, expected) = (m.id, m.largest_ack_pn.map_or(0, |l| l + 1));
                // Lookups of `id` while its frames are handled are O(1).
                self.slots.set_hint(s);
                let pn = expand_pn(expected, header.packet_number);
                self.handle_member_frames(now, id, pn, body);
            }
            None => match decode_frames(body).next() {
                Some(Ok(Frame::Connect(c)))
                    if !c.sends_data
                        && (header.session_id == 0 || header.session_id == self.session_id) =>
                {
                    self.admit(now, from, &c);
                    // A merger's CONNECT carries its subtree's count
                    // (ROSTER, `docs/wire.md` §4.8).
                    let id = self.by_addr.get(&from).and_then(|s| self.slots.at(s));
                    if let Some(id) = id.map(|slot| slot.member.id) {
                        for f in decode_frames(body).skip(1) {
                            if let Ok(Frame::Roster(r)) = f {
                                self.on_roster(now, id, &r);
                            }
                        }
                    }
                }
                Some(Ok(Frame::Upstream(_))) => {
                    self.stats.drops.count(DropReason::UnknownPeer);
                    let table = self.upstream.get_or_insert_with(Default::default);
                    table.stats.dropped_non_member += 1;
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
                Control::AckFrequency(f) => Frame::AckFrequency(f).encode(buf),
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
        if let Some((to, ack)) = self.upstream.as_mut().and_then(|u| u.next_ack()) {
            self.header(buf, false);
            Frame::UpstreamAck(ack).encode(buf);
            self.stats.datagrams_sent += 1;
            return Some(Transmit { destination: to });
        }
        if let Some(t) = self.next_fanout_copy(now, buf) {
            return Some(t);
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
            let srtt = self.session_rtt();
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
        [
            self.pacing_deadline,
            self.timers.next_deadline(),
            admission,
            self.repair_wake,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.pacing_deadline.is_some_and(|t| t <= now) {
            self.pacing_deadline = None;
        }
        // A held repair is due: the next poll_transmit sends it (and
        // computes the next wake-up).
        if self.repair_wake.is_some_and(|t| t <= now) {
            self.repair_wake = None;
        }
        while let Some(id) = self.timers.pop_expired(now) {
            self.on_member_timer(now, id);
        }
    }
}
