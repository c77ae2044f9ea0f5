//! What the session sends next: control datagrams first, then upstream
//! acknowledgements, the rest of a unicast fan-out run, and — when the
//! pacer allows — a repair or a new segment within the controller's limit.
//! Every datagram is assembled by the [`PacketBuilder`].

use super::SessionSender;
use crate::packet::PacketBuilder;
use crate::protection::TAG_LEN;
use crate::session::fanout_run::FANOUT_RUN_SEGMENTS;
use crate::session::timers::Timer;
use crate::session::MemberId;
use crate::wire::{
    AcceptFrame, AckFrequencyFrame, CloseFrame, Frame, OfferFrame, SentFrame, WireTimestamp,
};
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use fanout_core::Transmit;
use std::net::SocketAddr;
use std::ops::Range;

/// Most control datagrams queued at once; beyond it replies to new joiners
/// are dropped (a join flood cannot grow memory).
pub const MAX_PENDING_CONTROL: usize = 1024;

/// Most RETRYs queued at once (of [`MAX_PENDING_CONTROL`]): under a join
/// flood they go to unproven addresses, so beyond this they are dropped
/// (counted as `limit_exceeded`) and the rest of the queue stays for
/// members and proven joiners.
pub const MAX_QUEUED_RETRIES: usize = MAX_PENDING_CONTROL / 4;

/// A control datagram waiting to go out.
#[derive(Debug)]
pub(super) enum Control {
    AckFrequency(AckFrequencyFrame),
    Accept {
        member_id: MemberId,
        timestamp: WireTimestamp,
        start: u64,
        token: u64,
    },
    Reset {
        reason: String,
    },
    Close,
    /// Keep-alive or zero-window probe: the member's ACK answers it.
    Ping,
    /// An invitation to a listener.
    Offer,
    /// How far the stream was sent (to a merger member).
    Sent,
    /// A handshake answer (a protected session's refusal).
    Handshake(Vec<u8>),
    /// The group key being handed out (a protected session's key update),
    /// under the member's pair key.
    GroupKey,
    /// A segment list a member asked for again.
    Segments(Box<crate::protection::segments::SegmentList>),
    /// A stateless retry: join again under this token.
    Retry(u64),
}

impl SessionSender {
    /// Queues a control datagram to `to` (dropped and counted beyond
    /// [`MAX_PENDING_CONTROL`]).
    pub(super) fn control(&mut self, to: SocketAddr, c: Control) {
        let retry = matches!(c, Control::Retry(_));
        if retry && self.queued_retries >= MAX_QUEUED_RETRIES {
            self.stats.drops.count(DropReason::LimitExceeded);
            return;
        }
        if self.controls.len() < MAX_PENDING_CONTROL {
            self.queued_retries += usize::from(retry);
            self.controls.push_back((to, c));
        } else {
            self.stats.drops.count(DropReason::LimitExceeded);
        }
    }

    /// [`fanout_core::Engine::poll_transmit`]: the next datagram, except
    /// that a member whose address is not validated gets at most three
    /// times what it sent ([`crate::address_budget`]); a datagram beyond
    /// that is dropped here and counted (to the protocol it is lost).
    pub(super) fn next_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        // `buf` may already hold datagrams of a batch: this one starts here.
        let start = buf.len();
        loop {
            if let Some(k) = self.keys.as_mut() {
                k.built_listed = false;
            }
            let t = self.next_datagram(now, buf)?;
            let len = (buf.len() - start) as u64;
            let len = len + self.keys.as_ref().map_or(0, |_| TAG_LEN as u64);
            if self.may_send(t.destination, len) {
                let Some(k) = self.keys.as_mut() else {
                    return Some(t);
                };
                if k.seal(now, t.destination, buf, start, &self.numbers) {
                    self.timers.set(Timer::Sign, k.list_deadline());
                    return Some(t);
                }
                // Nothing goes to an address without keys but its
                // handshake.
                self.stats.drops.count(DropReason::Unauthenticated);
            } else {
                self.stats.amplification_limited += 1;
            }
            self.stats.datagrams_sent -= 1; // built, but never handed out
            buf.truncate(start);
        }
    }

    /// Whether a datagram of `len` bytes may go to `to` now (charged to an
    /// unvalidated member's budget if so). Strangers get only refusals,
    /// one per request and no longer than it (see the amplification test).
    fn may_send(&mut self, to: SocketAddr, len: u64) -> bool {
        // Multicast, or every member validated (the common case): no
        // lookup on the per-datagram path.
        if to.ip().is_multicast() || self.members.validated_len() == self.members.len() {
            return true;
        }
        let Some(m) = self.members.at_addr(&to) else {
            return true;
        };
        if m.is_validated() {
            return true;
        }
        let id = m.id();
        self.members
            .update(id, self.snd_nxt, |m| m.try_send(len))
            .unwrap_or(true)
    }

    fn next_datagram(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        // A due list of signed multicast datagrams goes first: receivers
        // hold those datagrams until it comes.
        if let (Some(group), Some(k)) = (self.config.group, self.keys.as_mut()) {
            if let Some(list) = k.take_list(now, self.session_id) {
                let mut p = PacketBuilder::new(buf, &mut self.numbers, self.session_id, true);
                p.frame(&Frame::Signature(list));
                p.finish();
                self.stats.datagrams_sent += 1;
                return Some(Transmit { destination: group });
            }
        }
        // Segments are listed before they go (receivers check them on
        // arrival); the list itself is not paced.
        self.list_segments_ahead(now);
        if let (Some(group), Some(k)) = (self.config.group, self.keys.as_mut()) {
            if let Some(list) = k.take_segment_list() {
                let mut p = PacketBuilder::new(buf, &mut self.numbers, self.session_id, true);
                p.frame(&Frame::Segments(list));
                p.finish();
                self.stats.datagrams_sent += 1;
                return Some(Transmit { destination: group });
            }
        }
        if let Some(t) = self.next_announcement(now, buf) {
            return Some(t);
        }
        if let Some((to, c)) = self.controls.pop_front() {
            let mut p = PacketBuilder::new(buf, &mut self.numbers, self.session_id, false);
            match c {
                Control::Accept {
                    member_id,
                    timestamp,
                    start,
                    token,
                } => {
                    let accept = Frame::Accept(AcceptFrame {
                        max_payload: self.mss,
                        timestamp_echo: timestamp,
                        member_id: member_id.0,
                        start_offset: start,
                        token,
                    });
                    match self.keys.as_mut() {
                        None => p.frame(&accept),
                        Some(k) => {
                            // Protected: inside the handshake's answer,
                            // with the group key.
                            let mut inner = Vec::new();
                            accept.encode(&mut inner);
                            match k.answer(to, &inner) {
                                Some(answer) => p.frame(&Frame::Handshake(answer)),
                                None => p.frame(&Frame::Padding),
                            }
                        }
                    }
                }
                Control::Handshake(answer) => p.frame(&Frame::Handshake(&answer)),
                Control::Segments(list) => p.frame(&Frame::Segments(*list)),
                Control::Retry(token) => {
                    self.queued_retries -= 1;
                    p.frame(&Frame::Retry(token))
                }
                Control::GroupKey => {
                    match self.keys.as_ref().and_then(|k| k.next_key_frame()) {
                        Some(k) => p.frame(&Frame::GroupKey(k)),
                        // Done meanwhile: a keep-alive instead.
                        None => p.frame(&Frame::Ping),
                    }
                }
                Control::Reset { reason } => p.frame(&Frame::Reset(CloseFrame {
                    code: 1,
                    reason: &reason,
                })),
                Control::AckFrequency(f) => p.frame(&Frame::AckFrequency(f)),
                Control::Close => p.frame(&Frame::Close(CloseFrame {
                    code: 0,
                    reason: "",
                })),
                Control::Ping => p.frame(&Frame::Ping),
                Control::Offer => p.frame(&Frame::Offer(OfferFrame {
                    max_payload: self.mss,
                    timestamp: WireTimestamp::at(now),
                })),
                Control::Sent => p.frame(&Frame::Sent(SentFrame {
                    end: self.snd_nxt(),
                })),
            };
            p.finish();
            self.stats.datagrams_sent += 1;
            return Some(Transmit { destination: to });
        }
        if self.closed.is_some() {
            return None;
        }
        if let Some((to, ack)) = self.upstream.as_mut().and_then(|u| u.next_ack()) {
            let mut p = PacketBuilder::new(buf, &mut self.numbers, self.session_id, false);
            p.frame(&Frame::UpstreamAck(ack));
            p.finish();
            self.stats.datagrams_sent += 1;
            return Some(Transmit { destination: to });
        }
        if let Some(t) = self.next_fanout_copy(now, buf) {
            return Some(t);
        }
        let release = self.pacer.next_send_time(now, self.mss);
        if release > now {
            self.timers.set(Timer::Pacing, Some(release));
            return None;
        }
        self.timers.set(Timer::Pacing, None);
        let t = match self.next_repair(now, buf) {
            Some(t) => Some(t),
            None => self.next_new(now, buf),
        };
        if t.is_some() {
            self.update_pacing_rate();
        }
        t
    }

    /// The announcement due, if one is: an OFFER to the group (it travels
    /// in clear in a protected session too, and joined members ignore it),
    /// whose source address tells a receiver that knows only the group
    /// where to join. Every [`SessionConfig::announce_every`], four times
    /// as often until data starts; none once the session ended.
    ///
    /// [`SessionConfig::announce_every`]: crate::session::SessionConfig::announce_every
    ///
    /// Each announcement is followed by copies padded to the session's
    /// datagram size and to smaller common path sizes
    /// ([`crate::wire::path_probe`]): a member that hears the small one but
    /// never one as large as the data learns that a link on the path takes
    /// less, and says so.
    fn next_announcement(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let group = self.config.group?;
        let padded = self.probes_due.pop();
        if padded.is_none() && !std::mem::take(&mut self.announce_due) {
            return None;
        }
        let every = self.config.announce_every?;
        if self.closed.is_some() {
            self.probes_due.clear();
            return None;
        }
        let start = buf.len();
        let mut p = PacketBuilder::new(buf, &mut self.numbers, self.session_id, true);
        p.frame(&Frame::Offer(OfferFrame {
            max_payload: self.mss,
            timestamp: WireTimestamp::at(now),
        }));
        p.finish();
        match padded {
            Some(len) => crate::wire::path_probe::pad(buf, start, len),
            None => {
                let every = if self.snd_nxt == 0 { every / 4 } else { every };
                self.timers.set(Timer::Announce, Some(now + every));
                self.stats.announcements_sent += 1;
                // Popped smallest first: the largest goes out last.
                self.probes_due =
                    crate::wire::path_probe::rungs(self.config.transport.max_datagram);
            }
        }
        self.stats.datagrams_sent += 1;
        Some(Transmit { destination: group })
    }

    /// Sets the pacer's rate from the session window and RTT, within the
    /// controller's cap: after every send, and when a member leaves (its
    /// RTT may have set the rate).
    pub(super) fn update_pacing_rate(&mut self) {
        let srtt = self.session_rtt();
        let slow_start = self
            .members
            .iter()
            .next()
            .is_some_and(|m| m.recovery().cc().in_slow_start());
        self.pacer.set_rate(self.cwnd(), srtt, slow_start);
        if let Some(cap) = self.controller.rate_cap() {
            self.pacer.cap_rate(cap);
        }
        if let Some(cap) = self.config.transport.max_rate {
            self.pacer.cap_rate(cap);
        }
    }

    /// The next new segment, if the controller's limit allows it.
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
        let addrs = self.members.iter().map(|m| m.addr()).collect();
        self.fanout.start(ranges, addrs);
        self.next_fanout_copy(now, out)
    }

    /// The next copy of the current fan-out run, if any.
    fn next_fanout_copy(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<Transmit> {
        let (range, to) = self.fanout.next_copy()?;
        self.stats.fanout_copies += 1;
        Some(self.write_segment(now, range, to, out))
    }

    /// Whether data may flow at `now`: once enough members are validated
    /// ([`crate::session::SessionConfig::wait_for_members`]) or the wait
    /// is over with at least one (then it stays open).
    pub(super) fn data_may_flow(&mut self, now: Instant) -> bool {
        if !self.data_open {
            // Members count once their address is validated.
            let validated = self.members.validated_len();
            let enough = validated >= self.config.wait_for_members.max(1);
            let waited = now >= self.created + self.config.wait_at_most && validated > 0;
            if !(enough || waited) {
                return false;
            }
            self.data_open = true;
            self.timers.set(Timer::Admission, None);
        }
        true
    }

    /// Takes the next new segment off the send buffer if the controller's
    /// limit allows it (logging it and arming idle members' timers).
    fn take_new(&mut self, now: Instant) -> Option<Range<u64>> {
        if !self.data_may_flow(now) {
            return None;
        }
        if let Some(end) = self.feed_realtime(now) {
            // A message waits for the window in the queue, where its
            // deadline is still checked when the window opens.
            self.cwnd_limited = true;
            self.probe_closed_window(now, end);
            self.note_blocked_in_run(now);
            return None;
        }
        let data_end = self.buffer.end();
        let fin = self.buffer.fin();
        if self.snd_nxt >= data_end && fin.is_none_or(|f| self.snd_nxt > f) {
            self.cwnd_limited = false;
            return None;
        }
        let listed = self.keys.as_ref().and_then(|k| k.listed(self.snd_nxt));
        let range = match listed {
            // Exactly as listed (its FIN, if it carries one).
            Some(l) => self.snd_nxt..self.snd_nxt + l.len + u64::from(l.fin),
            None => {
                let (mut range, _) = self.buffer.next_segment(self.snd_nxt, self.mss);
                if fin.is_some_and(|f| range.end == f) {
                    range.end += 1; // the FIN occupies one offset
                }
                range
            }
        };
        if range.end > self.send_limit() {
            self.cwnd_limited = true;
            self.probe_closed_window(now, range.end);
            self.note_blocked_in_run(now);
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
        let snd_nxt = self.snd_nxt;
        for id in self.members.take_idle() {
            self.members
                .update(id, snd_nxt, |m| m.on_data_outstanding(now, snd_nxt));
        }
        Some(range)
    }

    /// The stream offset new data may reach now: the controller's limit
    /// for its window over the members (O(members) for some controllers:
    /// asked only when a segment is ready to go).
    pub(super) fn send_limit(&self) -> u64 {
        let view = self.members.view();
        let window = self.controller.window(&view);
        self.controller.send_limit(&view, window)
    }

    /// New data up to `end` waits and the tightest receive window blocks it:
    /// if nothing is in flight to that member, no ACK will reopen its
    /// window, so it gets a zero-window probe (RFC 9293 §3.8.6.1).
    fn probe_closed_window(&mut self, now: Instant, end: u64) {
        let snd_nxt = self.snd_nxt;
        let Some((window_end, id)) = self.members.tightest_window() else {
            return;
        };
        let blocked = window_end < end
            && self
                .members
                .get(id)
                .is_some_and(|m| !m.has_outstanding(snd_nxt) && m.window_end() <= snd_nxt);
        if blocked {
            self.members
                .update(id, snd_nxt, |m| m.on_window_blocked(now, snd_nxt));
        }
    }

    /// Writes one data datagram and charges the pacer for it.
    pub(super) fn write_data(
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
    /// a unicast fan-out run were charged once per segment; a unicast
    /// repair charges its share).
    pub(super) fn write_segment(
        &mut self,
        now: Instant,
        range: Range<u64>,
        to: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Transmit {
        let data_end = range.end.min(self.buffer.end());
        let fin = self.buffer.fin().is_some_and(|f| range.end == f + 1);
        let len = (data_end - range.start) as usize;
        let multicast = to.ip().is_multicast();
        let listed = self.keys.as_mut().and_then(|k| {
            let l = k
                .listed(range.start)
                .filter(|l| multicast && l.len == len as u64);
            // Then it goes as one DATA frame, sealed as listed data.
            k.built_listed = l.is_some_and(|l| l.fin == fin);
            l
        });
        let message_end = match listed {
            // A listed segment goes exactly as its hash says.
            Some(l) => l.message_end,
            None => self.buffer.is_message_end(data_end) && len > 0,
        };
        // The message's deadline, for the receivers (TCP-RTM): not in a
        // listed datagram, which carries its DATA alone (its list vouches
        // for nothing else).
        let deadline = listed
            .is_none()
            .then(|| self.message_deadline(range.start))
            .flatten();
        let buffer = &self.buffer;
        let mut p = PacketBuilder::new(out, &mut self.numbers, self.session_id, multicast);
        if let Some(d) = deadline {
            p.frame(&Frame::Deadline(WireTimestamp::at(d)));
        }
        p.data(
            range.start,
            WireTimestamp::at(now),
            fin,
            message_end,
            len,
            |o| buffer.copy_to(range.start..data_end, o),
        );
        p.finish();
        self.stats.datagrams_sent += 1;
        self.stats.payload_bytes_sent += len as u64;
        Transmit { destination: to }
    }
}
