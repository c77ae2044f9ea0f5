//! [`drive_session`]: a multicast [`SessionSender`] with honest members
//! under attack from strangers.

use crate::attack::{Attack, Attackers, View};
use crate::model::Stream;
use crate::net::{
    attack, group, pump_receivers, receiver_addr, run_until, sender_addr, Network, Wire,
};
use crate::script::{Cursor, Step};
use crate::{eviction_justified, honest_config, ATTACK_TIME, ONE_WAY, TAIL_TIME};
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use fanout_core::{drain, Engine};
use fanout_transport::merge::MAX_SUBTREE_RECEIVERS;
use fanout_transport::session::{
    JoinPolicy, RepairPolicy, SessionConfig, SessionEvent, SessionSender,
    MAX_SESSION_ROSTER_ENTRIES, MAX_UPSTREAM_BUFFERS, MAX_UPSTREAM_WINDOW,
};
use fanout_transport::wire::{accept_header, decode_frames, Frame};
use fanout_transport::{CloseReason, Receiver};
use std::net::SocketAddr;
use std::time::Duration;

/// The session's id.
pub const SESSION: u64 = 0x5e55_0001;
/// Most members the session admits (honest ones included).
pub const MAX_MEMBERS: usize = 8;
/// Upstream memory a member that used upstream may hold besides its
/// reassembly buffer (its entry and acknowledgement-queue slot: "a small
/// entry per member", `SessionSender::upstream_memory_bytes`).
pub const UPSTREAM_ENTRY_BYTES: usize = 1024;

/// The session's configuration from the script's first byte: bit 0 picks
/// coded repair, bit 2 the catch-up join policy.
pub fn session_config(first: u8, honest: usize) -> SessionConfig {
    SessionConfig {
        transport: honest_config(),
        group: Some(group()),
        join: if first & 4 != 0 {
            JoinPolicy::CatchUp
        } else {
            JoinPolicy::FromStart
        },
        repair: if first & 1 != 0 {
            RepairPolicy::Coded {
                block: 32,
                uplink_ratio: 1.0,
            }
        } else {
            RepairPolicy::Threshold(0.05)
        },
        wait_for_members: honest,
        max_members: MAX_MEMBERS,
        stall_timeout: Duration::from_secs(5),
        ..SessionConfig::default()
    }
}

struct Sim {
    now: Instant,
    sender: SessionSender,
    members: Vec<Receiver>,
    got: Vec<Vec<u8>>,
    wire: Wire,
    stream: Stream,
    /// `MemberLeft` events: (address, reason).
    left: Vec<(SocketAddr, String)>,
    /// Datagrams handed to the sender / drained from it.
    to_sender: u64,
    from_sender: u64,
    buf: Vec<u8>,
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
        let mut next = drain(&mut self.sender, now, &mut self.buf, 256, |t, b| {
            out.push((t.destination, b.to_vec()))
        });
        let mut sent = !out.is_empty();
        for (to, bytes) in out {
            self.from_sender += 1;
            self.stream.check_sent(&bytes, SESSION);
            if to == group() {
                for i in 0..self.members.len() {
                    self.wire
                        .send(now, sender_addr(), receiver_addr(i), bytes.clone());
                }
            } else if let Some(i) = (0..self.members.len()).find(|&i| receiver_addr(i) == to) {
                self.wire.send(now, sender_addr(), receiver_addr(i), bytes);
            }
            // Anything else went to an attacker, who is not listening.
        }
        let mut upstream = Vec::new();
        while let Some(e) = self.sender.poll_event() {
            match e {
                SessionEvent::MemberLeft { addr, reason, .. } => self.left.push((addr, reason)),
                SessionEvent::Upstream { id, .. } => upstream.push(id),
                _ => {}
            }
        }
        // As an application would: on the event, read until empty.
        let mut chunk = [0u8; 4096];
        for id in upstream {
            while self.sender.read_upstream(id, &mut chunk) > 0 {}
        }
        let (t, s) = pump_receivers(
            &mut self.members,
            &mut self.got,
            receiver_addr,
            |i, start, got| self.stream.check_read(&format!("member {i}"), start, got),
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
            self.to_sender += 1;
            self.sender.handle_datagram(self.now, from, &bytes);
        } else if let Some(i) = (0..self.members.len()).find(|&i| receiver_addr(i) == to) {
            self.members[i].handle_datagram(self.now, from, &bytes);
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
            honest: (0..self.members.len()).map(receiver_addr).collect(),
            tokens: View::tokens_of(&self.sender),
        }
    }

    /// An attacker's datagram into the sender now: it is counted, and a
    /// refused one is counted once under the reason the engine's contract
    /// names (a bad header by its reason; a closed session; a stranger's
    /// non-CONNECT as an unknown peer).
    fn inject(&mut self, from: SocketAddr, d: &[u8]) {
        let before = self.sender.stats().clone();
        let member = self.sender.members().any(|m| m.1 == from);
        let closed = self.sender.close_reason().is_some();
        self.to_sender += 1;
        self.sender.handle_datagram(self.now, from, d);
        let after = self.sender.stats();
        assert_eq!(after.datagrams_received, before.datagrams_received + 1);
        let dropped = |r: DropReason| after.drops.get(r) - before.drops.get(r);
        let total = after.drops.total() - before.drops.total();
        match accept_header(d) {
            Err(reason) => assert!(dropped(reason) == 1 && total == 1, "{reason:?}"),
            Ok(_) if closed => assert!(dropped(DropReason::SessionClosed) == 1 && total == 1),
            Ok((h, body)) if !member => {
                let connect = matches!(
                    decode_frames(body).next(),
                    Some(Ok(Frame::Connect(_)))
                        if h.session_id == 0 || h.session_id == SESSION
                );
                if !connect {
                    assert!(dropped(DropReason::UnknownPeer) == 1 && total == 1);
                }
            }
            Ok(_) => {}
        }
    }

    /// The bounds and bookkeeping every step must keep.
    fn check(&self) {
        let s = &self.sender;
        let st = s.stats();
        let members = s.member_count();
        // Peer-controlled: members.
        assert!(members <= MAX_MEMBERS, "{members} members");
        assert_eq!(
            st.members_joined - st.members_left,
            members as u64,
            "members joined − left ≠ members"
        );
        // Every datagram counted, both ways.
        assert_eq!(st.datagrams_received, self.to_sender);
        assert_eq!(st.datagrams_sent, self.from_sender);
        // Peer-controlled: the roster (entries behind mergers, their claims).
        let receivers = s.receivers();
        let behind = receivers.iter().filter(|r| r.via.is_some()).count();
        assert!(
            behind <= MAX_SESSION_ROSTER_ENTRIES,
            "{behind} roster entries"
        );
        let mut weights = 0u64;
        for (id, addr, cumulative, _, _) in s.members() {
            let w = s.member_weight(id);
            assert!((1..=MAX_SUBTREE_RECEIVERS).contains(&w), "weight {w}");
            weights += w;
            // An ACK of data never sent is refused.
            assert!(cumulative <= s.snd_nxt(), "{addr} acked {cumulative}");
        }
        for r in &receivers {
            if let Some((id, addr)) = r.via {
                assert!(
                    s.members().any(|m| m.0 == id && m.1 == addr),
                    "a roster entry of a member that left"
                );
            }
        }
        assert_eq!(s.receiver_count(), weights, "receiver count ≠ Σ weights");
        // Peer-controlled: upstream buffers (one per member at most, at
        // most MAX_UPSTREAM_BUFFERS) and a small entry per member.
        let bound = members.min(MAX_UPSTREAM_BUFFERS) * MAX_UPSTREAM_WINDOW
            + (members + 1) * UPSTREAM_ENTRY_BYTES;
        let used = s.upstream_memory_bytes();
        assert!(used <= bound, "upstream holds {used} > {bound} bytes");
        let up = s.upstream_stats();
        assert!(up.bytes_delivered <= up.bytes_received);
        // The stream: nothing sent or acknowledged beyond what was written
        // (plus the FIN's offset).
        let written = self.stream.written.len() as u64;
        assert!(s.snd_nxt() <= written + u64::from(self.stream.finished));
        assert!(s.bytes_acked_by_all() <= written);
        for m in s.member_snapshots() {
            assert!(m.start <= m.cumulative, "{m:?}");
        }
    }

    fn step(&mut self, step: &Step<'_>, attackers: &mut Attackers) {
        let mut c = Cursor::new(step.body);
        let attack = match step.kind {
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
                let i = c.below(self.members.len() as u64) as usize;
                let n = c.below(4) as u32 + 1;
                self.wire.drop_next(receiver_addr(i), n);
                return;
            }
            _ => return,
        };
        let view = self.view();
        let (from, d) = attackers.datagram(attack, &mut c, &view);
        self.inject(from, &d);
    }
}

/// Hostile strangers against a live multicast session (see the crate
/// docs): every step keeps the bounds, and in the end every honest member
/// has the whole stream or was evicted for a reason the script explains.
pub fn drive_session(data: &[u8]) {
    let Some((&first, script)) = data.split_first() else {
        return;
    };
    let honest = if first & 2 != 0 { 3 } else { 2 };
    let now = Instant::ZERO;
    let members = (0..honest)
        .map(|_| Receiver::join(honest_config(), sender_addr(), now))
        .collect();
    let mut sim = Sim {
        now,
        sender: SessionSender::new(session_config(first, honest), SESSION, now),
        members,
        got: vec![Vec::new(); honest],
        wire: Wire::new(ONE_WAY),
        stream: Stream::default(),
        left: Vec::new(),
        to_sender: 0,
        from_sender: 0,
        buf: Vec::new(),
    };
    // The honest members join first (no attacker yet).
    run_until(&mut sim, now + Duration::from_secs(1), |s| {
        s.members.iter().all(|r| r.session_id().is_some())
    });
    for r in &sim.members {
        assert_eq!(r.session_id(), Some(SESSION), "honest members joined");
        assert_eq!(r.start_offset(), 0);
    }
    let attack_end = sim.now + ATTACK_TIME;
    attack(&mut sim, script, attack_end, Sim::step, |s| s.check());
    // The attack is over: the application ends its stream after a last
    // piece, and the honest members must get all of it.
    sim.wire.stop_dropping();
    sim.stream.queue(8 << 10, 0xa5);
    sim.stream.request_finish();
    let end = sim.now + TAIL_TIME;
    run_until(&mut sim, end, |s| {
        s.wire.is_empty() && s.members.iter().all(Receiver::is_closed)
    });
    sim.check();
    for (i, r) in sim.members.iter().enumerate() {
        let addr = receiver_addr(i);
        if r.is_finished() {
            assert!(
                sim.got[i] == sim.stream.written,
                "member {i} finished with {} of {} bytes",
                sim.got[i].len(),
                sim.stream.written.len()
            );
            continue;
        }
        let dropped = sim.wire.dropped(addr);
        let evicted = sim
            .left
            .iter()
            .filter(|(a, _)| *a == addr)
            .any(|(_, why)| eviction_justified(why, dropped));
        let reset = matches!(r.close_reason(),
            Some(CloseReason::PeerReset { reason, .. }) if eviction_justified(reason, dropped));
        assert!(
            evicted || reset,
            "honest member {i} did not complete: {:?}, read {} of {} bytes, {dropped} \
             datagrams dropped; sender: {} members, snd_nxt {}, cwnd {}, left {:?}, closed {:?}",
            r.close_reason(),
            sim.got[i].len(),
            sim.stream.written.len(),
            sim.sender.member_count(),
            sim.sender.snd_nxt(),
            sim.sender.cwnd(),
            sim.left,
            sim.sender.close_reason(),
        );
    }
}
