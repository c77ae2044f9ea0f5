//! The session sender (TCP-SMO master block) as a sans-IO engine: a thin
//! shell over its parts — the member set ([`super::members`]), each
//! member's loss recovery ([`crate::recovery`]), the session controller
//! ([`super::controller`]), the repair queue ([`super::repair_queue`]),
//! named timers ([`super::timers`]) and the packet builder
//! ([`crate::packet`]).
//!
//! * [`admission`]: CONNECTs, resumes, OFFERs to listeners.
//! * [`feedback`]: ACKs and the other members' frames, eviction.
//! * [`repair`]: which loss is repaired next, and how.
//! * [`transmit`]: control datagrams, new data, unicast fan-out.
//! * [`coded`]: the coded repair policy's blocks and symbols.

use super::config::{ReleasePolicy, SessionConfig};
use super::controller::{self, SessionController};
use super::eviction::OutlierTracker;
use super::fanout_run::FanoutRun;
use super::member::{MemberClock, MemberTimer};
use super::member_token::TokenKey;
use super::members::{MemberSet, SetIndexes};
use super::policy::{self, RttPolicy};
use super::repair_queue::RepairQueue;
use super::roster::{ReceiverProgress, SessionRoster};
use super::timers::{Timer, TimerTable};
use super::upstream::{UpstreamStats, UpstreamTable};
use super::MemberId;
use crate::event::CloseReason;
use crate::packet::PacketNumbers;
use crate::segment_log::SegmentLog;
use crate::send_buffer::SendBuffer;
use fanout_core::pacing::Pacer;
use fanout_core::stats::DropCounters;
use fanout_core::time::Instant;
use fanout_core::{Engine, Transmit};
use std::collections::VecDeque;
use std::net::SocketAddr;

mod admission;
mod coded;
mod datagram_size;
mod feedback;
mod protect;
mod realtime;
mod repair;
mod transmit;

pub use realtime::RealtimeStats;

use admission::Offers;
pub use admission::MAX_OFFERS;
use transmit::Control;
pub use transmit::MAX_PENDING_CONTROL;

/// Who ended a member's part in a session ([`SessionEvent::MemberLeft`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Departure {
    /// The member reset its membership (RESET): it failed (its output, its
    /// disk) or was stopped; `code` is its RESET's error code.
    MemberReset {
        /// The RESET's code (`docs/wire.md` §3).
        code: u64,
    },
    /// The sender removed it: stalled, unreachable, silent, behind data a
    /// quorum or buffer release freed, or a failed key update.
    Evicted,
}
/// What the session tells its application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEvent {
    /// A member was admitted, and its address validated
    /// ([`crate::address_budget`]; at once if the application invited it).
    MemberJoined {
        /// Its id.
        id: MemberId,
        /// Its address.
        addr: SocketAddr,
        /// Offset at which its delivery starts.
        start: u64,
    },
    /// A member (one [`SessionEvent::MemberJoined`] announced) left or was
    /// evicted.
    MemberLeft {
        /// Its id.
        id: MemberId,
        /// Its address.
        addr: SocketAddr,
        /// Why.
        reason: String,
        /// Who ended its membership: itself, or the sender.
        departure: Departure,
        /// An ACK merger (it had sent a roster): its receivers re-attach
        /// elsewhere or are gone; the session does not know them one by one.
        merger: bool,
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
    /// A joiner's path carries smaller datagrams than the session's: before
    /// any data went out, the session's were made that small.
    DatagramsFitted {
        /// The joiner.
        addr: SocketAddr,
        /// The session's datagram size now, bytes of UDP payload.
        max_datagram: usize,
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
    /// Announcements (OFFERs) multicast to the group.
    pub announcements_sent: u64,
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
    /// Stream bytes sent again as repairs (per-segment, unicast or
    /// multicast; coded symbols are counted apart).
    pub repair_bytes: u64,
    /// Coded repair symbols multicast (REPAIR frames, coded policy).
    pub coded_repairs: u64,
    /// Blocks repaired by coding (decisions; a block may take several).
    pub coded_blocks: u64,
    /// Member-segment losses covered by coded repair decisions.
    pub coded_repair_members: u64,
    /// Losses not queued for repair because the repair queue was full
    /// (put back in flight, detected again later).
    pub repairs_refused: u64,
    /// Zero-window probes sent (RFC 9293 §3.8.6.1).
    pub persist_probes: u64,
    /// Keep-alive PINGs sent to silent members (and validation PINGs to
    /// members whose address is not validated yet).
    pub keepalives: u64,
    /// Datagrams to unvalidated members dropped: they would have exceeded
    /// three times what the address sent ([`crate::address_budget`]).
    pub amplification_limited: u64,
    /// Members evicted because their address was never validated.
    pub unvalidated_evicted: u64,
    /// Stateless RETRYs sent to joiners during a join flood.
    pub retries_sent: u64,
    /// OFFERs sent to listeners.
    pub offers_sent: u64,
    /// Datagrams sent in all.
    pub datagrams_sent: u64,
    /// Bytes of stream data sent (new data, repairs and fan-out copies).
    pub payload_bytes_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// ACK frames processed.
    pub acks_received: u64,
    /// Member retransmission timeouts.
    pub rto_events: u64,
    /// Tail loss probes sent to members (RFC 8985 §7).
    pub tail_probes: u64,
    /// Member loss-recovery episodes (RACK).
    pub recovery_episodes: u64,
    /// Repairs a member acknowledged too soon after they went to have been
    /// the copy it received: its path reordered or delayed the original,
    /// and RACK's reordering window for it grew (RFC 8985 §6.2).
    pub spurious_repairs: u64,
    /// Member recovery episodes whose congestion response was undone:
    /// everything they deemed lost arrived in its first sending.
    pub recoveries_undone: u64,
    /// Group keys taken into use after the first: one per member that left
    /// or was evicted before it held the whole stream (protected sessions,
    /// `docs/wire.md` §4.12, key update).
    pub group_key_updates: u64,
    /// Segment lists multicast ahead of their segments (protected
    /// multicast, `docs/wire.md` §4.12, listed data).
    pub segment_lists_sent: u64,
    /// Segment lists sent again by unicast to members that missed them
    /// (protected multicast, `docs/wire.md` §4.12, listed data).
    pub segment_lists_resent: u64,
    /// Runs' details sent to members that held two different copies of a
    /// segment of a run, or a run whose hash did not match (a rogue member
    /// sent one; `docs/wire.md` §4.12, listed data).
    pub segment_details_sent: u64,
    /// Segments members acknowledged and then said they no longer held
    /// (held copies of a run that proved forged), repaired again.
    pub reneged_segments: u64,
    /// SKIPs sent instead of stale repairs (real-time mode,
    /// [`crate::realtime`]).
    pub skips_sent: u64,
    /// Stream bytes those SKIPs named (summed over SKIPs).
    pub skipped_bytes: u64,
    /// Repairs sent twice (real-time mode): a repair lost before, whose
    /// loss no later repair could follow in time ([`crate::realtime`]).
    /// The second copies' bytes count in `repair_bytes`.
    pub second_copies: u64,
    /// Input refused, by reason.
    pub drops: DropCounters,
}

/// The sending end of a one-to-many session.
#[derive(Debug)]
pub struct SessionSender {
    config: SessionConfig,
    session_id: u64,
    buffer: SendBuffer,
    /// Next new offset to send (`SND.NXT`); the FIN counts as one offset.
    snd_nxt: u64,
    log: SegmentLog,
    mss: u64,
    members: MemberSet,
    controller: Box<dyn SessionController>,
    repairs: RepairQueue,
    timers: TimerTable,
    /// An announcement to the group is due ([`SessionConfig::announce_every`]).
    announce_due: bool,
    /// Sizes of the padded announcements still to send this round
    /// (path probes, `crate::wire::path_probe`), largest first.
    probes_due: Vec<usize>,
    /// Listeners invited to join ([`SessionSender::offer`]).
    offers: Offers,
    /// Unicast fan-out of the segment just sent (no multicast group).
    fanout: FanoutRun,
    controls: VecDeque<(SocketAddr, Control)>,
    /// RETRYs among `controls` ([`transmit::MAX_QUEUED_RETRIES`]).
    queued_retries: usize,
    numbers: PacketNumbers,
    pacer: Pacer,
    cwnd_limited: bool,
    created: Instant,
    data_open: bool,
    finished: bool,
    /// When every validated member had acknowledged the whole stream, and
    /// the next member id one validation timeout later. Unvalidated
    /// members admitted before that id are waited for (an honest one whose
    /// ACCEPT was lost, or that joined at the very end), later ones not: a
    /// flood of forged joins holds the end for at most two validation
    /// timeouts.
    validated_done: Option<(Instant, Option<MemberId>)>,
    /// Until when unproven joins get a stateless RETRY
    /// ([`super::config::RETRY_MODE_HOLD`] after the last one that did).
    retry: super::RetryGate,
    closed: Option<CloseReason>,
    events: VecDeque<SessionEvent>,
    stats: SessionStats,
    /// Outlier-eviction state ([`super::eviction`]).
    outliers: OutlierTracker,
    /// `(member count, feedback budget)` → [`super::feedback::ack_interval_us`]
    /// of them, last computed (saves its divisions on every ACK).
    ack_interval: ((usize, u32), u32),
    /// The least `max_ack_delay_us` any member was asked for
    /// ([`super::feedback::max_ack_delay_us`]), µs: the sender's runtime
    /// holds its own input no longer ([`Engine::max_wake_delay`]).
    /// [`crate::wire::MAX_ACK_INTERVAL_US`] when none was asked.
    input_delay_us: u32,
    /// Members' upstream streams ([`super::upstream`]), off the ACK path:
    /// created on the first UPSTREAM frame.
    upstream: Option<Box<UpstreamTable>>,
    /// Blocks and queued symbols of the coded repair policy
    /// ([`super::coded_repair`]; created with the first segment).
    coded: Option<Box<super::coded_repair::CodedBlocks>>,
    /// Mergers' rosters: receivers behind each merger member and their
    /// progress ([`super::roster`]).
    roster: SessionRoster,
    /// Handshakes, members' keys and the group key of a protected session
    /// ([`protect`]); `None` when unprotected.
    keys: Option<Box<protect::SenderKeys>>,
    /// Where a sealed datagram is opened.
    scratch: Vec<u8>,
    /// The pushed queue and sent messages of a real-time session
    /// ([`realtime`]); `None` for a reliable stream.
    realtime: Option<Box<realtime::RealtimeOut>>,
}

/// The pacer of a session of `mss`-byte segments (disabled unless pacing
/// or a rate cap is asked for).
fn pacer_for(t: &crate::TransportConfig, mss: u64) -> Pacer {
    if t.pacing || t.max_rate.is_some() {
        Pacer::new(mss).with_burst_time(t.pacing_burst)
    } else {
        Pacer::disabled()
    }
}

impl SessionSender {
    /// Opens a session named `session_id`, waiting for members, with the
    /// controller `config.window` names.
    pub fn new(config: SessionConfig, session_id: u64, now: Instant) -> Self {
        let controller = controller::build(
            config.window,
            config.realtime.is_some_and(|r| r.deadlines),
            config.transport.cc,
            config.transport.max_payload(),
        );
        Self::with_controller(config, session_id, now, controller)
    }

    /// Opens a session whose sending follows `controller` (any
    /// [`SessionController`]; `config.window` is then not used).
    pub fn with_controller(
        config: SessionConfig,
        session_id: u64,
        now: Instant,
        controller: Box<dyn SessionController>,
    ) -> Self {
        // Messages with deadlines name them in every DATA datagram.
        let deadline_room = if config.realtime.is_some_and(|r| r.deadlines) {
            crate::wire::DEADLINE_FRAME_LEN as u64
        } else {
            0
        };
        let mss = config.transport.max_payload() - deadline_room;
        let pacer = pacer_for(&config.transport, mss);
        let own = SetIndexes {
            // Quorum release reads a rank on every ACK that progresses.
            cumulative_ranked: matches!(config.release, ReleasePolicy::Quorum(_)),
            srtt_ranked: matches!(config.rtt, RttPolicy::Percentile(_)),
        };
        let clock = MemberClock::of(&config);
        let mut timers = TimerTable::default();
        timers.set(Timer::Admission, Some(now + config.wait_at_most));
        if config.group.is_some() && config.announce_every.is_some() {
            timers.set(Timer::Announce, Some(now));
        }
        SessionSender {
            announce_due: false,
            probes_due: Vec::new(),
            buffer: SendBuffer::new(config.transport.send_buffer_bytes),
            session_id,
            snd_nxt: 0,
            log: SegmentLog::default(),
            mss,
            members: MemberSet::new(&controller.indexes(), own, clock),
            controller,
            repairs: RepairQueue::default(),
            timers,
            offers: Offers::default(),
            fanout: FanoutRun::default(),
            controls: VecDeque::new(),
            queued_retries: 0,
            numbers: PacketNumbers::default(),
            pacer,
            cwnd_limited: false,
            created: now,
            data_open: false,
            finished: false,
            validated_done: None,
            retry: super::RetryGate::default(),
            closed: None,
            events: VecDeque::new(),
            stats: SessionStats::default(),
            outliers: OutlierTracker::default(),
            ack_interval: ((0, 0), 0),
            input_delay_us: crate::wire::MAX_ACK_INTERVAL_US,
            upstream: None,
            coded: None,
            roster: SessionRoster::default(),
            keys: config
                .transport
                .protection
                .clone()
                .map(|p| Box::new(protect::SenderKeys::new(p, config.transport.max_datagram))),
            scratch: Vec::new(),
            realtime: config
                .realtime
                .map(|m| Box::new(realtime::RealtimeOut::new(m, config.transport.max_datagram))),
            config,
        }
    }

    /// This session's id.
    pub fn session_id(&self) -> u64 {
        self.session_id
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
        self.coded_before_release(offset);
        self.buffer.release(offset);
        self.log.release_below(offset);
        self.coded_release(offset);
        if let Some(k) = self.keys.as_mut() {
            k.release_below(offset);
        }
        self.realtime_release(offset);
    }

    /// Aborts the session: every member gets RESET with `reason`.
    pub fn abort(&mut self, reason: &str) {
        if self.closed.is_some() {
            return;
        }
        let addrs: Vec<SocketAddr> = self.members.iter().map(|m| m.addr()).collect();
        for a in addrs {
            self.control(
                a,
                Control::Reset {
                    reason: reason.into(),
                },
            );
        }
        self.close(CloseReason::LocalReset {
            code: 2,
            reason: reason.into(),
        });
    }

    /// Ends the session with `why` (once).
    fn close(&mut self, why: CloseReason) {
        if self.closed.is_none() {
            tracing::debug!(session = self.session_id, reason = ?why, "session closed");
            self.closed = Some(why.clone());
            self.events.push_back(SessionEvent::Closed(why));
        }
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

    /// No more data: the stream ends after what was written (in a
    /// real-time session, after the messages still queued).
    pub fn finish(&mut self) {
        match self.realtime.as_mut() {
            Some(rt) => rt.finish(),
            None => self.buffer.finish(),
        }
    }

    /// Next application event.
    pub fn poll_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }

    /// Counters.
    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }

    /// Starts the stream at offset `offset` instead of 0, before anything
    /// was written or anyone joined: a session resumed by a restarted
    /// sender, whose receivers hold (or fetch elsewhere) the bytes before
    /// `offset`. Members are then admitted there, as late joiners (with
    /// [`super::JoinPolicy::CatchUp`], at the send position). The application
    /// writes the stream's bytes from `offset` on. False, and nothing
    /// changed, once data was written or a member joined.
    pub fn start_stream_at(&mut self, offset: u64) -> bool {
        if self.snd_nxt != 0 || !self.members.is_empty() || !self.buffer.start_at(offset) {
            return false;
        }
        self.snd_nxt = offset;
        true
    }

    /// Next new offset to send (`SND.NXT`).
    pub fn snd_nxt(&self) -> u64 {
        self.snd_nxt
    }

    /// The secret its member tokens derive from, for keys of related
    /// sessions ([`TokenKey::derive`]).
    pub fn token_key(&self) -> &TokenKey {
        &self.config.token_key
    }

    /// The header id member `id`'s datagrams must carry: the token its
    /// ACCEPT gave it (`docs/wire.md` §4.10). `None` if it is not a member.
    pub fn member_token(&self, id: MemberId) -> Option<u64> {
        self.members.get(id).map(|m| m.token())
    }

    /// Members currently in the session (a merger counts once; see
    /// [`SessionSender::receiver_count`]).
    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    /// Receivers in the session: members, with each merger member counted
    /// as the receivers it reported behind it (its ROSTER count). O(1).
    pub fn receiver_count(&self) -> u64 {
        self.roster.receivers(self.members.len())
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
            .members
            .iter()
            .filter(|m| !self.roster.is_merger(&m.id()))
            .map(|m| ReceiverProgress {
                addr: m.addr(),
                cumulative: m.cumulative(),
                via: None,
                reported: None,
            })
            .collect();
        out.extend(
            self.roster
                .entries()
                .filter_map(|(id, addr, cumulative, at)| {
                    let merger = self.members.get(id)?.addr();
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
        self.roster.feedback_sources(self.members.len())
    }

    /// Why the session ended, once it has.
    pub fn close_reason(&self) -> Option<&CloseReason> {
        self.closed.as_ref()
    }

    /// Stream bytes every member acknowledged (the slowest member's
    /// cumulative ACK, the FIN excluded).
    pub fn bytes_acked_by_all(&self) -> u64 {
        let min = self.members.min_cumulative().unwrap_or(0);
        self.buffer.fin().map_or(min, |f| min.min(f))
    }

    /// Per-member progress: (id, address, cumulative ACK, cwnd, srtt).
    pub fn members(
        &self,
    ) -> impl Iterator<Item = (MemberId, SocketAddr, u64, u64, std::time::Duration)> + '_ {
        self.members.iter().map(|m| {
            (
                m.id(),
                m.addr(),
                m.cumulative(),
                m.recovery().cwnd(),
                m.recovery().srtt(),
            )
        })
    }

    /// Copies member `id`'s next in-order upstream bytes (session relay,
    /// `super::upstream`) into `out`; returns the count (0 when nothing
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

    /// Member–segment entries waiting in the repair queue (at most
    /// [`super::MAX_QUEUED_REPAIRS`]).
    pub fn queued_repairs(&self) -> usize {
        self.repairs.entries()
    }

    /// Control datagrams waiting to be sent (at most
    /// [`super::MAX_PENDING_CONTROL`]).
    pub fn queued_controls(&self) -> usize {
        self.controls.len()
    }

    /// Receivers listed behind mergers (at most
    /// [`super::MAX_SESSION_ROSTER_ENTRIES`]).
    pub fn roster_entries(&self) -> usize {
        self.roster.len()
    }

    /// Blocks the coded repair policy tracks (at most one per block of
    /// segments in the send buffer, plus one per short segment).
    pub fn coded_blocks(&self) -> usize {
        self.coded.as_ref().map_or(0, |c| c.len())
    }

    /// Stream bytes held in the send buffer (at most its size,
    /// [`crate::TransportConfig::send_buffer_bytes`]).
    pub fn buffered_bytes(&self) -> usize {
        self.buffer.len()
    }

    /// Stops multicasting: from now on every new segment and repair goes to
    /// each member by unicast (the application's fallback when sending to
    /// the group fails). Segments already multicast but lost are repaired
    /// by unicast as members report them missing.
    pub fn fall_back_to_unicast(&mut self) {
        self.config.group = None;
    }

    /// Where data is multicast (`None`: unicast fan-out).
    pub fn group(&self) -> Option<SocketAddr> {
        self.config.group
    }

    /// Every validated member's figures now (O(N): for displays and
    /// reports, not per packet). Members whose address is not validated
    /// yet, maybe forged joins, are left out.
    pub fn member_snapshots(&self) -> impl Iterator<Item = super::MemberSnapshot> + '_ {
        self.members
            .iter()
            .filter(|m| m.is_validated())
            .map(|m| m.snapshot())
    }

    /// Session congestion window (bytes), from the session controller.
    pub fn cwnd(&self) -> u64 {
        self.controller.window(&self.members.view())
    }

    /// The rate the session may send at now (its pacing rate: the session
    /// window per round trip, within the controller's cap), in bytes per
    /// second: what a real-time source (an encoder) should follow.
    pub fn allowed_rate_bytes_per_sec(&self) -> u64 {
        self.pacer.rate_bytes_per_sec()
    }

    /// The session RTT (pacing): the largest member RTT, or a percentile.
    pub fn session_rtt(&self) -> std::time::Duration {
        let ns = |k: Option<u64>| std::time::Duration::from_nanos(k.unwrap_or(0));
        policy::session_rtt(
            self.config.rtt,
            self.members.len(),
            ns(self.members.max_srtt_ns()),
            |k| ns(self.members.nth_srtt_ns(k)),
        )
    }

    /// The member whose round trip is the session's ([`Self::session_rtt`]).
    fn session_rtt_member(&self) -> Option<&super::member::Member> {
        let id = match self.config.rtt {
            RttPolicy::Maximum => self.members.max_srtt_member(),
            RttPolicy::Percentile(p) => self
                .members
                .nth_srtt_member(policy::rank_at(p, self.members.len())),
        }?;
        self.members.get(id)
    }

    fn stream_end(&self) -> Option<u64> {
        self.buffer.fin().map(|f| f + 1)
    }

    /// Changes member `id` through the member set (which re-indexes it)
    /// and tells the controller.
    fn update_member<R>(
        &mut self,
        now: Instant,
        id: MemberId,
        f: impl FnOnce(&mut super::member::Member) -> R,
    ) -> Option<R> {
        let r = self.members.update(id, self.snd_nxt, f)?;
        if let Some(m) = self.members.get(id) {
            self.controller.on_feedback(now, m);
        }
        Some(r)
    }

    /// Removes a member (evicted, reset, or left) and tells it why. Callers
    /// then run [`SessionSender::after_progress`] (release may advance).
    fn remove(&mut self, now: Instant, id: MemberId, reason: &str, departure: Departure) {
        let Some(member) = self.members.remove(id) else {
            return;
        };
        let merger = self.roster.is_merger(&id);
        let held_everything = self
            .stream_end()
            .is_some_and(|end| member.cumulative() >= end);
        if let Some(k) = self.keys.as_mut() {
            k.forget(now, member.addr(), held_everything);
            self.arm_key_update(now);
        }
        if let Some(u) = self.upstream.as_mut() {
            u.remove(id);
        }
        self.roster.remove(id);
        self.controller.on_member_left(id);
        if member.ack_schedule().max_ack_delay_us == self.input_delay_us {
            self.input_delay_us = self.least_input_delay();
        }
        if !self.members.is_empty() {
            self.update_pacing_rate();
        }
        self.stats.members_left += 1;
        tracing::debug!(
            session = self.session_id,
            member = id.0,
            reason,
            "member left"
        );
        // An address never validated is not told: it may be a victim's.
        if departure == Departure::Evicted && member.is_validated() {
            self.control(
                member.addr(),
                Control::Reset {
                    reason: reason.into(),
                },
            );
        }
        if member.is_validated() {
            self.events.push_back(SessionEvent::MemberLeft {
                id,
                addr: member.addr(),
                reason: reason.into(),
                departure,
                merger,
            });
        }
    }

    /// Releases what every (counted) member acknowledged; finishes the
    /// session once the whole stream is acknowledged.
    fn after_progress(&mut self, now: Instant) {
        let release = match self.config.release {
            ReleasePolicy::SlowestReceiver | ReleasePolicy::BufferLimited => {
                self.members.min_needed()
            }
            ReleasePolicy::Quorum(f) => {
                let n = self.members.validated_len();
                let need = ((f.clamp(0.0, 1.0) * n as f64).ceil() as usize).clamp(1, n.max(1));
                // The need-th highest cumulative ACK.
                n.checked_sub(need)
                    .and_then(|k| self.members.nth_cumulative(k))
            }
        };
        if let Some(r) = release {
            let r = r.min(self.buffer.end());
            // TCP-SMO §II quorum release: data the quorum acknowledged is
            // freed. A member still missing some of it is evicted only when
            // it needs a repair of freed data (see `next_repair`).
            self.release_below(r);
        }
        if self.data_open && self.members.is_empty() && self.closed.is_none() {
            self.close(CloseReason::NoReceivers);
            return;
        }
        if !self.finished && !self.members.is_empty() {
            if let (Some(end), Some(min_cum)) = (self.stream_end(), self.members.min_cumulative()) {
                let next_id = self.members.next_id();
                let grace = self.config.validation_timeout;
                let waited_for = min_cum >= end && {
                    let (at, cutoff) = self.validated_done.get_or_insert((now, None));
                    if cutoff.is_none() && now >= *at + grace {
                        *cutoff = Some(next_id);
                    }
                    let cutoff = *cutoff;
                    self.members
                        .oldest_unvalidated()
                        .is_some_and(|id| cutoff.is_none_or(|c| id < c))
                };
                if min_cum >= end && !waited_for {
                    self.finished = true;
                    self.events.push_back(SessionEvent::Finished);
                    let addrs: Vec<SocketAddr> = self
                        .members
                        .iter()
                        .filter(|m| m.is_validated())
                        .map(|m| m.addr())
                        .collect();
                    for a in addrs {
                        self.control(a, Control::Close);
                    }
                    self.close(CloseReason::Completed);
                }
            }
        }
    }

    /// Runs member `id`'s expired timers, by name.
    fn on_member_timer(&mut self, now: Instant, id: MemberId) {
        let (snd_nxt, clock) = (self.snd_nxt, self.member_clock());
        let Some(member) = self.members.get(id) else {
            return;
        };
        let due = |t: MemberTimer| {
            member
                .deadline(t, snd_nxt, &clock)
                .is_some_and(|d| d <= now)
        };
        let (recovery_due, persist, keepalive, stalled, silent, unvalidated) = (
            due(MemberTimer::Rack) || due(MemberTimer::Rto),
            due(MemberTimer::Persist),
            due(MemberTimer::KeepAlive),
            due(MemberTimer::Stall),
            due(MemberTimer::Silence),
            due(MemberTimer::Validation),
        );
        if unvalidated {
            // Nothing more goes to an address that never proved itself.
            self.stats.unvalidated_evicted += 1;
            self.remove(
                now,
                id,
                "address not validated: its token never came back",
                Departure::Evicted,
            );
            self.after_progress(now);
            return;
        }
        let addr = member.addr();
        let mut rto = false;
        if recovery_due {
            let (log, mss) = (&self.log, self.mss);
            let out = self.members.update(id, snd_nxt, |m| {
                let episodes = m.recovery().recovery_episodes();
                let out = m.on_recovery_timeout(now, log, snd_nxt, mss);
                (out, m.recovery().recovery_episodes() - episodes)
            });
            if let Some((out, episodes)) = out {
                self.stats.recovery_episodes += episodes;
                self.stats.rto_events += u64::from(out.rto);
                self.stats.tail_probes += u64::from(out.probe);
                rto = out.rto;
                self.queue_repairs(now, id, out.newly_lost);
            }
        }
        if persist {
            self.stats.persist_probes += 1;
            self.control(addr, Control::Ping);
            self.members.update(id, snd_nxt, |m| m.on_persist_probe());
        }
        if keepalive && !silent {
            self.stats.keepalives += 1;
            self.control(addr, Control::Ping);
            self.members.update(id, snd_nxt, |m| m.on_ping_sent(now));
        }
        let Some(m) = self.members.get(id) else {
            return;
        };
        let (cumulative, backoffs) = (m.cumulative(), m.recovery().rto_backoffs());
        let reason = if rto && cumulative < self.buffer.base() {
            // Its retransmission timer fired for data a quorum or
            // buffer-limited release freed.
            Some(self.released_reason())
        } else if stalled {
            Some("stalled: no progress within the stall timeout")
        } else if backoffs > self.config.max_rto_backoffs {
            Some("unreachable: too many retransmission timeouts")
        } else if silent {
            Some("silent: nothing heard within the idle timeout")
        } else {
            None
        };
        if let Some(reason) = reason {
            self.remove(now, id, reason, Departure::Evicted);
            self.after_progress(now);
        } else if let Some(m) = self.members.get(id) {
            self.controller.on_feedback(now, m);
        }
    }

    fn member_clock(&self) -> MemberClock {
        MemberClock::of(&self.config)
    }
}

impl Engine for SessionSender {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.on_datagram(now, from, datagram);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.next_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.closed.is_some() {
            return None;
        }
        [self.timers.earliest(), self.members.next_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    fn max_wake_delay(&self) -> Option<std::time::Duration> {
        (self.input_delay_us < crate::wire::MAX_ACK_INTERVAL_US)
            .then(|| std::time::Duration::from_micros(u64::from(self.input_delay_us)))
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.closed.is_some() {
            return;
        }
        for timer in Timer::VALUES {
            if self.timers.take_expired(timer, now) {
                match timer {
                    // The next poll_transmit sends what became due (and
                    // computes the next wake-up).
                    Timer::Pacing | Timer::Repair | Timer::Admission | Timer::Sign => {}
                    Timer::Offer => self.on_offer_timeout(now),
                    Timer::KeyUpdate => self.on_key_update_timer(now),
                    Timer::BlockedRun => self.on_blocked_run_timer(),
                    Timer::Announce => self.announce_due = true,
                }
            }
        }
        while let Some(id) = self.members.pop_expired(now) {
            self.on_member_timer(now, id);
        }
    }
}
