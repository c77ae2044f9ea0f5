//! [`drive_merger`]: an MCTCP [`Merger`] between a multicast
//! [`SessionSender`] and honest receivers, under attack from strangers.

use crate::attack::{Attack, Attackers, View};
use crate::model::Stream;
use crate::net::{
    attack, group, pump_receivers, receiver_addr, run_until, sender_addr, Network, Wire,
};
use crate::script::{Cursor, Step};
use crate::session::{session_config, MAX_MEMBERS, SESSION};
use crate::{eviction_justified, honest_config, ATTACK_TIME, ONE_WAY, TAIL_TIME};
use fanout_core::time::Instant;
use fanout_core::{drain, Engine};
use fanout_transport::merge::{
    JoinMerge, Merger, MergerConfig, MAX_MERGER_ROSTER_ENTRIES, MAX_SUBTREE_RECEIVERS,
};
use fanout_transport::session::{SessionEvent, SessionSender};
use fanout_transport::wire::{accept_header, decode_frames, Frame};
use fanout_transport::{CloseReason, Receiver};
use std::net::SocketAddr;
use std::time::Duration;

/// Why a receiver joining late may be refused: the merger is full or
/// closed, or its parent refused the merger's new membership.
const REFUSALS: [&str; 3] = ["merger full", "merger closed", "parent refused"];

/// Most children the merger keeps (honest ones included).
pub const MAX_CHILDREN: usize = 6;

fn merger_addr() -> SocketAddr {
    SocketAddr::from(([10, 0, 2, 1], 6000))
}

/// The merger's configuration: joins merged by count or after 200 ms,
/// at most [`MAX_CHILDREN`] children, the default stall and soft-state
/// timers.
pub fn merger_config(honest: usize) -> MergerConfig {
    MergerConfig {
        join: JoinMerge::CountOrTimer(honest, Duration::from_millis(200)),
        max_children: MAX_CHILDREN,
        ..MergerConfig::new(sender_addr())
    }
}

struct Sim {
    now: Instant,
    sender: SessionSender,
    merger: Merger,
    /// The honest receivers (the first `honest` joined before the attack,
    /// one more may join during it).
    receivers: Vec<Receiver>,
    honest: usize,
    got: Vec<Vec<u8>>,
    /// Per honest receiver, as the merger's datagrams to it tell: admitted
    /// (ACCEPT sent, no RESET or CLOSE since), and the RESET reasons sent.
    held: Vec<bool>,
    resets: Vec<Vec<String>>,
    /// Whether the late receiver was admitted while no early one was held
    /// (`None`: not admitted yet). A subtree of strangers alone is theirs
    /// to steer: the merger believes its children's ACKs up to what it
    /// forwarded (it must, or it would take back what the parent was told),
    /// so a child joining it starts where they claim, even past the end of
    /// a stream that stops short of it. Keeping strangers out is admission
    /// control's job, not the merger's.
    late_alone: Option<bool>,
    wire: Wire,
    stream: Stream,
    /// The sender's `MemberLeft` reasons (the merger is its member).
    left: Vec<String>,
    to_merger: u64,
    from_merger: u64,
    /// Memberships of the merger upstream (a CONNECT or RESET to the
    /// sender starts a new one) and the highest merged cumulative ACK of
    /// the current one, as sent and as `Merger::merged` tells it.
    epoch: u64,
    wire_cumulative: Option<u64>,
    seen: Option<(u64, u64)>,
    buf: Vec<u8>,
}

impl Sim {
    fn receiver_index(&self, addr: SocketAddr) -> Option<usize> {
        (0..self.receivers.len()).find(|&i| receiver_addr(i) == addr)
    }

    fn honest_child(&self) -> bool {
        // (Not a late receiver admitted where strangers alone said.)
        let alone = self.late_alone == Some(true);
        self.held
            .iter()
            .enumerate()
            .any(|(i, &h)| h && !(alone && i == self.honest))
    }

    /// A merger datagram to honest receiver `i`: admissions and evictions.
    fn note_down(&mut self, i: usize, d: &[u8]) {
        let (_, body) = accept_header(d).expect("the merger's header is valid");
        for f in decode_frames(body).map_while(Result::ok) {
            match f {
                Frame::Accept(_) => {
                    if i == self.honest && self.late_alone.is_none() {
                        self.late_alone = Some(!self.held[..self.honest].contains(&true));
                    }
                    self.held[i] = true;
                }
                Frame::Close(_) => self.held[i] = false,
                Frame::Reset(r) => {
                    self.held[i] = false;
                    self.resets[i].push(r.reason.to_string());
                }
                _ => {}
            }
        }
    }

    /// A merger datagram to the sender: its merged ACKs never go back
    /// within one membership.
    fn check_upstream(&mut self, d: &[u8]) {
        let (_, body) = accept_header(d).expect("the merger's header is valid");
        for f in decode_frames(body) {
            match f.expect("the merger's frames decode") {
                Frame::Connect(_) | Frame::Reset(_) => {
                    self.epoch += 1;
                    self.wire_cumulative = None;
                }
                Frame::Ack(a) => {
                    let last = self.wire_cumulative.unwrap_or(0);
                    assert!(
                        a.cumulative >= last,
                        "the merged ACK went back on the wire: {} after {last}",
                        a.cumulative
                    );
                    self.wire_cumulative = Some(a.cumulative);
                }
                _ => {}
            }
        }
    }
}

impl Network for Sim {
    fn now(&self) -> Instant {
        self.now
    }

    fn set_now(&mut self, now: Instant) {
        self.now = self.now.max(now);
    }

    fn pump(&mut self) -> (Option<Instant>, bool) {
        let now = self.now;
        self.stream.feed(&mut self.sender);
        let mut out = Vec::new();
        let t = drain(&mut self.sender, now, &mut self.buf, 256, |t, b| {
            out.push((t.destination, b.to_vec()))
        });
        let mut next = t;
        let mut sent = !out.is_empty();
        for (to, bytes) in out {
            self.stream.check_sent(&bytes, SESSION);
            if to == group() {
                for i in 0..self.receivers.len() {
                    self.wire
                        .send(now, sender_addr(), receiver_addr(i), bytes.clone());
                }
            } else {
                self.wire.send(now, sender_addr(), to, bytes);
            }
        }
        while let Some(e) = self.sender.poll_event() {
            if let SessionEvent::MemberLeft { reason, .. } = e {
                self.left.push(reason);
            }
        }
        let mut out = Vec::new();
        let t = drain(&mut self.merger, now, &mut self.buf, 256, |t, b| {
            out.push((t.destination, b.to_vec()))
        });
        next = [next, t].into_iter().flatten().min();
        sent |= !out.is_empty();
        for (to, bytes) in out {
            self.from_merger += 1;
            if to == sender_addr() {
                self.check_upstream(&bytes);
            } else if let Some(i) = self.receiver_index(to) {
                self.note_down(i, &bytes);
            }
            self.wire.send(now, merger_addr(), to, bytes);
        }
        let (t, s) = pump_receivers(
            &mut self.receivers,
            &mut self.got,
            receiver_addr,
            |i, start, got| {
                // Admitted when strangers alone held the subtree: where they
                // said (see `late_alone`).
                let beyond = start > self.stream.written.len() as u64 + 1;
                if beyond && self.late_alone == Some(true) && i == self.honest {
                    assert!(got.is_empty());
                } else {
                    self.stream.check_read(&format!("receiver {i}"), start, got);
                }
            },
            now,
            &mut self.wire,
            &mut self.buf,
        );
        sent |= s;
        next = [next, t].into_iter().flatten().min();
        (next, sent)
    }

    fn wire(&mut self) -> &mut Wire {
        &mut self.wire
    }

    fn deliver(&mut self, from: SocketAddr, to: SocketAddr, bytes: Vec<u8>) {
        if to == sender_addr() {
            self.sender.handle_datagram(self.now, from, &bytes);
        } else if to == merger_addr() {
            self.to_merger += 1;
            self.merger.handle_datagram(self.now, from, &bytes);
        } else if let Some(i) = self.receiver_index(to) {
            self.receivers[i].handle_datagram(self.now, from, &bytes);
        }
    }
}

impl Sim {
    fn view(&self) -> View {
        View {
            now: self.now,
            session: SESSION,
            snd_nxt: self.sender.snd_nxt(),
            written: self.stream.written.len() as u64,
            mss: honest_config().max_payload(),
            honest: (0..self.receivers.len()).map(receiver_addr).collect(),
            tokens: View::tokens_of(&self.sender),
        }
    }

    /// The bounds and bookkeeping every step must keep.
    fn check(&mut self) {
        let m = &self.merger;
        let children = m.children();
        // Peer-controlled: children, the roster and its claims.
        assert!(children <= MAX_CHILDREN, "{children} children");
        let listed = m.roster_entries().len();
        assert!(
            listed <= children + MAX_MERGER_ROSTER_ENTRIES,
            "{listed} roster entries for {children} children"
        );
        let receivers = m.subtree_receivers();
        assert!(
            receivers >= children as u64 && receivers <= children as u64 * MAX_SUBTREE_RECEIVERS,
            "{receivers} receivers behind {children} children"
        );
        // Every datagram counted, both ways.
        let st = m.stats();
        assert_eq!(st.datagrams_received, self.to_merger);
        assert_eq!(st.datagrams_sent, self.from_merger);
        // The merged ACK never goes back within a membership, and while an
        // honest child is in the meet it never covers data not sent.
        match m.merged() {
            None => self.seen = None,
            Some(a) => {
                let snd_nxt = self.sender.snd_nxt();
                if let Some((epoch, last)) = self.seen {
                    if epoch == self.epoch {
                        assert!(
                            a.cumulative >= last,
                            "the merged ACK went back: {} after {last}",
                            a.cumulative
                        );
                    }
                }
                self.seen = Some((self.epoch, a.cumulative));
                if self.honest_child() {
                    assert!(
                        a.highest() <= snd_nxt,
                        "merged ACK up to {} beyond SND.NXT {snd_nxt}",
                        a.highest()
                    );
                }
            }
        }
        let s = &self.sender;
        assert!(s.member_count() <= MAX_MEMBERS);
        for (_, addr, cumulative, _, _) in s.members() {
            assert!(cumulative <= s.snd_nxt(), "{addr} acked {cumulative}");
        }
    }

    fn step(&mut self, step: &Step<'_>, attackers: &mut Attackers) {
        let mut c = Cursor::new(step.body);
        let attack = match step.kind {
            // Children have no upstream: kind 7 joins, as kind 2 does.
            7 => Attack::Connect,
            k if k < 12 => Attack::of_kind(k).expect("kinds 0-11"),
            12 => {
                let n = usize::from(c.u16()) % (48 << 10);
                self.stream.queue(n, c.u8());
                return;
            }
            13 => {
                self.stream.request_finish();
                return;
            }
            14 => {
                let i = c.below(self.receivers.len() as u64) as usize;
                let n = c.below(4) as u32 + 1;
                self.wire.drop_next(receiver_addr(i), n);
                return;
            }
            15 => {
                // One honest receiver joins late (through the merger).
                if self.receivers.len() == self.honest {
                    let mut cfg = honest_config();
                    cfg.feedback_via = Some(merger_addr());
                    let r = Receiver::join(cfg, sender_addr(), self.now);
                    self.receivers.push(r);
                    self.got.push(Vec::new());
                    self.held.push(false);
                    self.resets.push(Vec::new());
                }
                return;
            }
            _ => return,
        };
        let view = self.view();
        let (from, d) = attackers.datagram(attack, &mut c, &view);
        self.to_merger += 1;
        self.merger.handle_datagram(self.now, from, &d);
    }
}

/// Hostile strangers against an ACK merger (see the crate docs): every
/// step keeps the bounds and the merged ACK's order, and in the end every
/// honest receiver has the whole stream or was evicted for a reason the
/// script explains.
pub fn drive_merger(data: &[u8]) {
    let Some((&first, script)) = data.split_first() else {
        return;
    };
    let honest = if first & 2 != 0 { 3 } else { 2 };
    let now = Instant::ZERO;
    let mut cfg = honest_config();
    cfg.feedback_via = Some(merger_addr());
    let receivers = (0..honest)
        .map(|_| Receiver::join(cfg.clone(), sender_addr(), now))
        .collect();
    let session = fanout_transport::session::SessionConfig {
        wait_for_members: 1,
        // Above the merger's child stall (its documented requirement).
        stall_timeout: Duration::from_secs(10),
        ..session_config(first, 1)
    };
    let mut sim = Sim {
        now,
        sender: SessionSender::new(session, SESSION, now),
        merger: Merger::new(merger_config(honest), now),
        receivers,
        honest,
        got: vec![Vec::new(); honest],
        held: vec![false; honest],
        resets: vec![Vec::new(); honest],
        late_alone: None,
        wire: Wire::new(ONE_WAY),
        stream: Stream::default(),
        left: Vec::new(),
        to_merger: 0,
        from_merger: 0,
        epoch: 0,
        wire_cumulative: None,
        seen: None,
        buf: Vec::new(),
    };
    run_until(&mut sim, now + Duration::from_secs(2), |s| {
        s.receivers.iter().all(|r| r.session_id().is_some())
    });
    for r in &sim.receivers {
        assert_eq!(r.session_id(), Some(SESSION), "honest receivers joined");
        assert_eq!(r.start_offset(), 0);
    }
    let attack_end = sim.now + ATTACK_TIME;
    attack(&mut sim, script, attack_end, Sim::step, Sim::check);
    sim.wire.stop_dropping();
    sim.stream.queue(8 << 10, 0xa5);
    sim.stream.request_finish();
    let end = sim.now + TAIL_TIME;
    run_until(&mut sim, end, |s| {
        s.wire.is_empty() && s.receivers.iter().all(Receiver::is_closed)
    });
    sim.check();
    let any_dropped = (0..sim.receivers.len()).any(|i| sim.wire.dropped(receiver_addr(i)) > 0);
    let merger_evicted = sim
        .left
        .iter()
        .any(|why| eviction_justified(why, u32::from(any_dropped)));
    for (i, r) in sim.receivers.iter().enumerate() {
        let addr = receiver_addr(i);
        if r.is_finished() {
            let start = r.start_offset() as usize;
            assert!(
                start <= sim.stream.written.len() && sim.got[i] == sim.stream.written[start..],
                "receiver {i} finished with {} bytes from {start} of {} bytes",
                sim.got[i].len(),
                sim.stream.written.len()
            );
            continue;
        }
        let dropped = sim.wire.dropped(addr);
        let late = i >= sim.honest;
        // A late joiner admitted after the whole stream was acknowledged
        // starts past its end and never sees it; one asking a merger whose
        // session ended is not answered, nor one whose answers the script
        // dropped.
        let handshake = r.close_reason() == Some(&CloseReason::HandshakeTimeout);
        let total = sim.stream.written.len() as u64 + 1;
        let after_end = late
            && (r.start_offset() == total
                || r.start_offset() > total && sim.late_alone == Some(true)
                || handshake && (sim.merger.close_reason().is_some() || dropped > 0));
        let justified = merger_evicted
            || after_end
            || match r.close_reason() {
                // A late joiner may be refused admission (attackers may
                // fill the merger; the sender refuses a new membership
                // once the start of the stream was released).
                Some(CloseReason::PeerReset { reason, .. })
                    if late && REFUSALS.contains(&reason.as_str()) =>
                {
                    true
                }
                Some(CloseReason::PeerReset { reason, .. }) => eviction_justified(reason, dropped),
                // Evicted, and the RESET saying so was dropped.
                _ if sim.resets[i]
                    .iter()
                    .any(|why| eviction_justified(why, dropped)) =>
                {
                    true
                }
                _ => false,
            };
        assert!(
            justified,
            "honest receiver {i} did not complete: {:?}, read {} of {} bytes, {dropped} \
             datagrams dropped; merger: {} children, merged {:?}, closed {:?}; sender: \
             snd_nxt {}, left {:?}, closed {:?}",
            r.close_reason(),
            sim.got[i].len(),
            sim.stream.written.len(),
            sim.merger.children(),
            sim.merger.merged().map(|a| a.cumulative),
            sim.merger.close_reason(),
            sim.sender.snd_nxt(),
            sim.left,
            sim.sender.close_reason(),
        );
    }
}
