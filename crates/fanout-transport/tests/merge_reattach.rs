//! Asynchronous joins and crashed mergers in MCTCP trees (`docs/mctcp.md`): a
//! session sender multicasting to receivers whose feedback goes through
//! [`Merger`]s, over an in-memory wire with 5 ms per hop, deterministic.
//!
//! * A late *file* joiner behind a merger starts at the subtree's position
//!   and fetches the missed prefix from the session sender (its data
//!   source), the way `fanout recv` does (a unicast transfer: a session of
//!   one offered to the joiner's catch-up socket): the whole file arrives, and
//!   the merged ACK never goes backwards nor takes back a SACK range.
//! * A lower merger killed mid-transfer: its receivers re-attach to the
//!   merger above (resume CONNECT), and everything completes.
//! * The top merger killed: the mergers below re-attach to the sender, the
//!   sender evicts the dead member ("stalled"), and everything completes.

#[path = "common/merge.rs"]
mod merge;

use fanout_core::time::Instant;
use fanout_core::{drain, Engine, RangeSet, Rng};
use fanout_transport::merge::{JoinMerge, Merger, MergerConfig, MergerStats};
use fanout_transport::protection::{Credentials, Protection};
use fanout_transport::session::{JoinPolicy, SessionConfig, SessionEvent, SessionSender};
use fanout_transport::wire::WireTimestamp;
use fanout_transport::wire::{decode_frames, AckFrame, Frame, Header};
use fanout_transport::{CloseReason, Receiver};
use merge::{accept, acked_set, datagram, merger_addr, random_data, receiver_addr, sender_addr};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

const HOP: Duration = Duration::from_millis(5);
/// Where the test's catch-up sender runs (the CLI serves catch-ups on the
/// session socket; a second address keeps this harness simple).
const CATCH_UP: &str = "10.0.0.1:5001";
const GROUP: &str = "239.1.1.1:7000";
const KEEPALIVE: Duration = Duration::from_millis(250);

/// A receiver's catch-up socket.
fn catch_up_addr(i: usize) -> SocketAddr {
    format!("10.0.1.{}:7001", i + 1).parse().unwrap()
}

enum Node {
    Session(Box<SessionSender>),
    Merger(Box<Merger>),
    Receiver(Box<Receiver>),
    /// A transfer to one receiver (the late joiner's catch-up).
    Unicast(Box<SessionSender>),
}

impl Node {
    fn engine(&mut self) -> &mut dyn Engine {
        match self {
            Node::Session(s) => s.as_mut(),
            Node::Merger(m) => m.as_mut(),
            Node::Receiver(r) => r.as_mut(),
            Node::Unicast(s) => s.as_mut(),
        }
    }
}

struct Net {
    now: Instant,
    nodes: BTreeMap<SocketAddr, Node>,
    dead: Vec<SocketAddr>,
    wire: BTreeMap<(Instant, u64), (SocketAddr, SocketAddr, Vec<u8>)>,
    seq: u64,
    data: Vec<u8>,
    written: usize,
    got: BTreeMap<SocketAddr, Vec<u8>>,
    /// Cumulative and acknowledged set of every ACK reaching the sender,
    /// by source.
    acked_at_sender: Vec<(SocketAddr, u64, RangeSet)>,
    /// Members the sender removed, with the reason.
    left: Vec<(SocketAddr, String)>,
    /// Loss of the sender's datagrams toward receivers: (probability, rng).
    loss: Option<(f64, Rng)>,
    /// Datagrams to M0 from anyone but the sender are lost before this.
    m0_deaf_until: Instant,
    /// The pre-shared key of a protected session: the session's nodes
    /// (mergers and receivers added) hold it.
    psk: Option<[u8; 32]>,
}

impl Net {
    fn new(config: SessionConfig, data: Vec<u8>) -> Net {
        let mut nodes = BTreeMap::new();
        let sender = SessionSender::new(config, 42, Instant::ZERO);
        nodes.insert(sender_addr(), Node::Session(Box::new(sender)));
        Net {
            now: Instant::ZERO,
            nodes,
            dead: Vec::new(),
            wire: BTreeMap::new(),
            seq: 0,
            data,
            written: 0,
            got: BTreeMap::new(),
            acked_at_sender: Vec::new(),
            left: Vec::new(),
            loss: None,
            m0_deaf_until: Instant::ZERO,
            psk: None,
        }
    }

    /// A net whose every node holds `psk` (randomness of its own each).
    fn protected(mut config: SessionConfig, data: Vec<u8>, psk: Option<[u8; 32]>) -> Net {
        config.transport.protection =
            psk.map(|k| Protection::new(Credentials::with_psk(k), [1; 32]));
        let mut net = Net::new(config, data);
        net.psk = psk;
        net
    }

    /// The protection of the node at `at`, in a protected net.
    fn protection(&self, at: SocketAddr) -> Option<Protection> {
        let seed = *blake3::hash(at.to_string().as_bytes()).as_bytes();
        self.psk
            .map(|k| Protection::new(Credentials::with_psk(k), seed))
    }

    fn merger(&mut self, at: SocketAddr, parent: SocketAddr, children: usize, up: &[SocketAddr]) {
        let config = MergerConfig {
            join: JoinMerge::CountOrTimer(children, Duration::from_millis(500)),
            keepalive: Some(KEEPALIVE),
            child_silence: Some(Duration::from_secs(2)),
            fallback: up.to_vec(),
            protection: self.protection(at),
            ..MergerConfig::new(parent)
        };
        let m = Merger::new(config, self.now);
        self.nodes.insert(at, Node::Merger(Box::new(m)));
    }

    /// A receiver of the sender's group reporting to `via`, falling back
    /// to `up` in order.
    fn receiver(&mut self, at: SocketAddr, via: SocketAddr, up: &[SocketAddr]) {
        let mut cfg = SessionConfig::default().transport;
        cfg.feedback_via = Some(via);
        cfg.feedback_fallback = up.to_vec();
        cfg.protection = self.protection(at);
        let r = Receiver::join(cfg, sender_addr(), self.now);
        self.nodes.insert(at, Node::Receiver(Box::new(r)));
        self.got.insert(at, Vec::new());
    }

    fn receiver_at(&self, at: SocketAddr) -> &Receiver {
        match self.nodes.get(&at) {
            Some(Node::Receiver(r)) => r,
            _ => panic!("no receiver at {at}"),
        }
    }

    fn session(&mut self) -> &mut SessionSender {
        match self.nodes.get_mut(&sender_addr()) {
            Some(Node::Session(s)) => s,
            _ => unreachable!(),
        }
    }

    fn merger_stats(&self, at: SocketAddr) -> MergerStats {
        match self.nodes.get(&at) {
            Some(Node::Merger(m)) => m.stats(),
            _ => unreachable!(),
        }
    }

    fn session_done(&self) -> bool {
        matches!(self.nodes.get(&sender_addr()),
            Some(Node::Session(s)) if s.close_reason().is_some())
    }

    fn pump(&mut self) -> Option<Instant> {
        if self.written < self.data.len() {
            let data = std::mem::take(&mut self.data);
            let from = self.written;
            self.written += self.session().write(&data[from..]);
            if self.written == data.len() {
                self.session().finish();
            }
            self.data = data;
        }
        while let Some(e) = self.session().poll_event() {
            if let SessionEvent::MemberLeft { addr, reason, .. } = e {
                self.left.push((addr, reason));
            }
        }
        let mut next: Option<Instant> = None;
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for (&addr, node) in self.nodes.iter_mut() {
            if self.dead.contains(&addr) {
                continue;
            }
            if let Node::Receiver(r) = node {
                let mut chunk = [0u8; 16384];
                loop {
                    let n = r.read(&mut chunk);
                    if n == 0 {
                        break;
                    }
                    let g = self.got.entry(addr).or_default();
                    g.extend_from_slice(&chunk[..n]);
                }
            }
            let t = drain(node.engine(), self.now, &mut buf, 256, |t, b| {
                out.push((addr, t.destination, b.to_vec()))
            });
            next = [next, t].into_iter().flatten().min();
        }
        let group: SocketAddr = GROUP.parse().unwrap();
        // Receivers on the group: session sockets (port 7000) only.
        let members: Vec<SocketAddr> = self
            .nodes
            .iter()
            .filter(|(a, n)| matches!(n, Node::Receiver(_)) && a.port() == 7000)
            .map(|(a, _)| *a)
            .collect();
        for (from, to, bytes) in out {
            let to = if to == group {
                members.clone()
            } else {
                vec![to]
            };
            for to in to {
                if to == merger_addr(0) && from != sender_addr() && self.now < self.m0_deaf_until {
                    continue;
                }
                if let Some((p, rng)) = self.loss.as_mut() {
                    if from == sender_addr() && to.port() == 7000 && rng.bernoulli(*p) {
                        continue;
                    }
                }
                self.seq += 1;
                self.wire
                    .insert((self.now + HOP, self.seq), (from, to, bytes.clone()));
            }
        }
        next
    }

    fn run(&mut self, limit: Duration, mut at: impl FnMut(&mut Net)) {
        let end = Instant::ZERO + limit;
        while self.now < end {
            at(self);
            let timer = self.pump();
            if self.session_done() && self.wire.is_empty() && self.all_read() {
                return;
            }
            let wire = self.wire.keys().next().map(|k| k.0);
            self.now = self
                .now
                .max([timer, wire].into_iter().flatten().min().unwrap_or(end));
            while let Some(e) = self.wire.first_entry() {
                if e.key().0 > self.now {
                    break;
                }
                let (from, to, bytes) = e.remove();
                if to == sender_addr() {
                    if let Ok((_, body)) = Header::decode(&bytes) {
                        for f in decode_frames(body) {
                            if let Ok(Frame::Ack(a)) = f {
                                self.acked_at_sender
                                    .push((from, a.cumulative, acked_set(&a)));
                            }
                        }
                    }
                }
                if self.dead.contains(&to) {
                    continue;
                }
                if let Some(n) = self.nodes.get_mut(&to) {
                    n.engine().handle_datagram(self.now, from, &bytes);
                }
            }
        }
    }

    /// True when no live receiver has unread stream bytes pending: the
    /// catch-up receivers are drained like the others.
    fn all_read(&self) -> bool {
        self.nodes.iter().all(|(a, n)| match n {
            Node::Receiver(r) => self.dead.contains(a) || r.is_closed(),
            _ => true,
        })
    }

    fn kill(&mut self, at: SocketAddr) {
        if !self.dead.contains(&at) {
            self.dead.push(at);
        }
    }

    /// What the sender was told by `from`: never backwards, never taking
    /// back a range. Returns the number of ACKs checked.
    fn check_monotone(&self, from: SocketAddr) -> usize {
        let mut told = RangeSet::new();
        let mut cum = 0;
        let mut n = 0;
        for (a, c, s) in self.acked_at_sender.iter().filter(|(a, ..)| *a == from) {
            n += 1;
            assert!(*c >= cum, "{a}: cumulative ACK went back {cum} -> {c}");
            cum = *c;
            for r in told.iter() {
                assert!(s.contains_range(r.clone()), "{a}: took back {r:?}");
            }
            for r in s.iter() {
                told.insert(r);
            }
        }
        n
    }
}

fn multicast(join: JoinPolicy) -> SessionConfig {
    SessionConfig {
        group: Some(GROUP.parse().unwrap()),
        join,
        // The sender's buffer must not hold the whole file, so the late
        // joiner's prefix really is gone from the session.
        transport: fanout_transport::TransportConfig {
            send_buffer_bytes: 1 << 20,
            ..SessionConfig::default().transport
        },
        ..SessionConfig::default()
    }
}

/// Sender → M0 → {M1, M2} → 4 receivers each; receivers fall back to M0
/// then the sender, M1 and M2 to the sender.
fn two_level_tree(net: &mut Net) {
    let s = sender_addr();
    net.merger(merger_addr(0), s, 2, &[]);
    for m in 1..=2 {
        net.merger(merger_addr(m), merger_addr(0), 4, &[s]);
        for r in 0..4 {
            let at = receiver_addr((m - 1) * 4 + r);
            net.receiver(at, merger_addr(m), &[merger_addr(0), s]);
        }
    }
}

#[test]
fn a_late_file_joiner_behind_a_merger_gets_the_whole_file() {
    let data = random_data(6 << 20, 21);
    let mut net = Net::new(multicast(JoinPolicy::CatchUp), data.clone());
    let s = sender_addr();
    net.merger(merger_addr(0), s, 3, &[]);
    for r in 0..3 {
        net.receiver(receiver_addr(r), merger_addr(0), &[s]);
    }
    let late = receiver_addr(3);
    let mut prefix_end = None;
    net.run(Duration::from_secs(120), |n| {
        if !n.got.contains_key(&late) && n.got[&receiver_addr(0)].len() > 2 << 20 {
            n.receiver(late, merger_addr(0), &[s]);
        }
        // Once admitted at S > 0, fetch [0, S) from the data source, as
        // `fanout recv` does: a unicast transfer from the session sender.
        let Some(Node::Receiver(r)) = n.nodes.get(&late) else {
            return;
        };
        if prefix_end.is_some() || r.session_id().is_none() {
            return;
        }
        let end = r.start_offset() as usize;
        assert_eq!(r.data_source(), Some(s), "the catch-up goes to the sender");
        assert_ne!(r.peer(), Some(s), "feedback still goes to the merger");
        prefix_end = Some(end);
        let cfg = SessionConfig::default().transport;
        let mut tx = SessionSender::new(SessionConfig::unicast(cfg.clone()), 9, n.now);
        assert!(tx.offer(n.now, catch_up_addr(3)));
        assert_eq!(tx.write(&n.data[..end]), end);
        tx.finish();
        n.nodes
            .insert(CATCH_UP.parse().unwrap(), Node::Unicast(Box::new(tx)));
        let rx = Receiver::listen(cfg, n.now);
        n.nodes
            .insert(catch_up_addr(3), Node::Receiver(Box::new(rx)));
    });
    let end = prefix_end.expect("the late joiner was admitted");
    assert!(end > 2 << 20, "it joined late: start {end}");
    let mut whole = net.got[&catch_up_addr(3)].clone();
    assert_eq!(whole.len(), end, "the prefix arrived");
    whole.extend_from_slice(&net.got[&late]);
    assert!(whole == data, "late joiner: prefix + live part = the file");
    for r in 0..3 {
        assert!(net.got[&receiver_addr(r)] == data, "receiver {r}");
    }
    assert!(net.check_monotone(merger_addr(0)) > 10);
    eprintln!(
        "6 MiB, late file joiner behind a merger at {end} B: whole file at {:.3} s",
        net.now.as_secs_f64()
    );
}

#[test]
fn a_crashed_lower_merger_s_receivers_reattach_above_and_complete() {
    crashed_lower_merger(None);
}

/// The same with every hop protected: the receivers' resume CONNECTs ride
/// in new handshakes with M0 (`docs/security.md`, "Mergers").
#[test]
fn a_crashed_lower_merger_s_protected_receivers_reattach_with_new_handshakes() {
    crashed_lower_merger(Some([5; 32]));
}

fn crashed_lower_merger(psk: Option<[u8; 32]>) {
    let data = random_data(4 << 20, 22);
    let mut net = Net::protected(multicast(JoinPolicy::FromStart), data.clone(), psk);
    // Losses after the crash need feedback to be repaired: without the
    // re-attachment M1's receivers would never complete.
    net.loss = Some((0.005, Rng::new(5)));
    two_level_tree(&mut net);
    let victim = merger_addr(1);
    let mut killed_at = None;
    let mut reattached_at = None;
    net.run(Duration::from_secs(120), |n| {
        if killed_at.is_none() && n.got[&receiver_addr(0)].len() > 1 << 20 {
            killed_at = Some(n.now);
            n.kill(victim);
        }
        if reattached_at.is_none() && n.merger_stats(merger_addr(0)).children_resumed == 4 {
            reattached_at = Some(n.now);
        }
    });
    let killed_at = killed_at.expect("killed mid-transfer");
    let reattached_at = reattached_at.expect("re-attached");
    // Bounded: 1 s of silence, then one resume CONNECT and ACK round trip.
    assert!(
        reattached_at < killed_at + Duration::from_millis(1300),
        "killed at {killed_at:?}, re-attached at {reattached_at:?}"
    );
    for r in 0..8 {
        assert!(net.got[&receiver_addr(r)] == data, "receiver {r}");
    }
    for r in 0..4 {
        let rx = net.receiver_at(receiver_addr(r));
        assert_eq!(rx.stats().reattaches, 1, "receiver {r}");
        assert_eq!(rx.peer(), Some(merger_addr(0)), "receiver {r} under M0");
    }
    let m0 = net.merger_stats(merger_addr(0));
    assert_eq!(m0.children_resumed, 4, "{m0:?}");
    assert!(m0.keepalives > 0);
    assert!(
        net.left.is_empty(),
        "the sender lost no member: {:?}",
        net.left
    );
    // Sealed ACKs cannot be read on the wire: the unprotected run checks
    // what the sender was told.
    if psk.is_none() {
        assert!(net.check_monotone(merger_addr(0)) > 10);
    } else {
        // M1 knew the group key: M0 asked for a new one.
        assert!(m0.rekeys_sent >= 1, "{m0:?}");
        assert!(net.session().stats().group_key_updates >= 1);
    }
    // The same run without the crash, for scale.
    let mut base = Net::protected(multicast(JoinPolicy::FromStart), data.clone(), psk);
    base.loss = Some((0.005, Rng::new(5)));
    two_level_tree(&mut base);
    base.run(Duration::from_secs(120), |_| {});
    eprintln!(
        "the same without a crash: done at {:.3} s",
        base.now.as_secs_f64()
    );
    eprintln!(
        "4 MiB, 8 receivers, 0.5% loss, M1 killed at {:.3} s: M1's 4 receivers re-attached \
         to M0 at {:.3} s, all done at {:.3} s (M0: {} resumed, {} expired, {} evicted)",
        killed_at.as_secs_f64(),
        reattached_at.as_secs_f64(),
        net.now.as_secs_f64(),
        m0.children_resumed,
        m0.children_expired,
        m0.children_evicted,
    );
}

#[test]
fn a_crashed_top_merger_is_evicted_and_its_subtree_reattaches_to_the_sender() {
    crashed_top_merger(None);
}

/// The same with every hop protected: M1 and M2 re-attach to the sender
/// with new handshakes, and the dead merger's key is replaced.
#[test]
fn a_crashed_protected_top_merger_is_evicted_and_its_subtree_rejoins_with_new_keys() {
    crashed_top_merger(Some([6; 32]));
}

fn crashed_top_merger(psk: Option<[u8; 32]>) {
    let data = random_data(4 << 20, 23);
    let cfg = SessionConfig {
        stall_timeout: Duration::from_secs(3),
        ..multicast(JoinPolicy::FromStart)
    };
    let mut net = Net::protected(cfg, data.clone(), psk);
    net.loss = Some((0.005, Rng::new(6)));
    two_level_tree(&mut net);
    let victim = merger_addr(0);
    let mut killed_at = None;
    let mut reattached_at = None;
    net.run(Duration::from_secs(120), |n| {
        if killed_at.is_none() && n.got[&receiver_addr(0)].len() > 1 << 20 {
            killed_at = Some(n.now);
            n.kill(victim);
        }
        let both = (1..=2).all(|m| {
            let st = n.merger_stats(merger_addr(m));
            st.reattaches == 1 && st.acks_out > 0
        });
        if reattached_at.is_none() && killed_at.is_some() && both && n.session().member_count() == 3
        {
            reattached_at = Some(n.now);
        }
    });
    let killed_at = killed_at.expect("killed mid-transfer");
    let reattached_at = reattached_at.expect("re-attached");
    assert!(
        reattached_at < killed_at + Duration::from_millis(1300),
        "killed at {killed_at:?}, re-attached at {reattached_at:?}"
    );
    for r in 0..8 {
        assert!(net.got[&receiver_addr(r)] == data, "receiver {r}");
    }
    for m in 1..=2 {
        let st = net.merger_stats(merger_addr(m));
        assert_eq!(st.reattaches, 1, "M{m}: {st:?}");
        if psk.is_none() {
            assert!(net.check_monotone(merger_addr(m)) > 5, "M{m}");
        }
    }
    if psk.is_some() {
        // The dead merger knew the group key.
        let updates = net.session().stats().group_key_updates;
        assert!(updates >= 1, "{updates} group key updates");
    }
    let evicted: Vec<&(SocketAddr, String)> =
        net.left.iter().filter(|(a, _)| *a == victim).collect();
    assert_eq!(evicted.len(), 1, "{:?}", net.left);
    assert!(evicted[0].1.contains("stall"), "{:?}", evicted[0]);
    let done = net.now;
    eprintln!(
        "4 MiB, 8 receivers, 0.5% loss, M0 killed at {:.3} s: M1, M2 re-attached to the \
         sender at {:.3} s, M0 evicted ({}), all done at {:.3} s",
        killed_at.as_secs_f64(),
        reattached_at.as_secs_f64(),
        evicted[0].1,
        done.as_secs_f64(),
    );
}

#[test]
fn a_resuming_child_behind_the_subtree_is_sent_on() {
    // A child whose position is below what the merger told its parent
    // must not be merged in (the merged ACK would go backwards): RESET.
    let data = random_data(2 << 20, 24);
    let mut net = Net::new(multicast(JoinPolicy::FromStart), data);
    let s = sender_addr();
    net.merger(merger_addr(0), s, 2, &[]);
    for r in 0..2 {
        net.receiver(receiver_addr(r), merger_addr(0), &[s]);
    }
    let mut sent = false;
    net.run(Duration::from_secs(60), |n| {
        if sent || n.got[&receiver_addr(0)].len() < 1 << 20 {
            return;
        }
        sent = true;
        let Some(Node::Merger(m)) = n.nodes.get(&merger_addr(0)) else {
            unreachable!()
        };
        let session = m.session_id().unwrap();
        let stranger: SocketAddr = "10.0.1.99:7000".parse().unwrap();
        let mut d = Vec::new();
        fanout_transport::wire::Header {
            flags: Default::default(),
            session_id: session,
            packet_number: 0,
        }
        .encode(&mut d);
        Frame::Connect(fanout_transport::wire::ConnectFrame {
            max_payload: 1200,
            window: 1 << 20,
            timestamp: WireTimestamp(0),
            resume_from: 1000,
        })
        .encode(&mut d);
        let mut ack = d[..0].to_vec();
        fanout_transport::wire::Header {
            flags: Default::default(),
            session_id: session,
            packet_number: 1,
        }
        .encode(&mut ack);
        Frame::Ack(AckFrame {
            cumulative: 1000,
            window: 1 << 20,
            timestamp_echo: WireTimestamp(0),
            ack_delay_us: 0,
            sack: vec![],
        })
        .encode(&mut ack);
        n.seq += 1;
        n.wire
            .insert((n.now + HOP, n.seq), (stranger, merger_addr(0), d));
        n.seq += 1;
        n.wire
            .insert((n.now + HOP * 2, n.seq), (stranger, merger_addr(0), ack));
    });
    assert!(sent);
    let m0 = net.merger_stats(merger_addr(0));
    assert_eq!(m0.children_resumed, 0, "{m0:?}");
    assert_eq!(m0.children_refused, 1, "{m0:?}");
    assert!(net.check_monotone(merger_addr(0)) > 10);
    assert_eq!(
        net.nodes.get(&sender_addr()).and_then(|n| match n {
            Node::Session(s) => s.close_reason().cloned(),
            _ => None,
        }),
        Some(CloseReason::Completed)
    );
}

#[test]
fn nobody_reattaches_while_every_merger_lives() {
    // M0 hears nothing for 2 s, so M1 and M2 join upstream seconds after
    // they started: the silence watch must start at the join upstream, not
    // at creation (this once sent M1 to the sender at once in the
    // namespace test).
    let data = random_data(2 << 20, 25);
    let mut net = Net::new(multicast(JoinPolicy::FromStart), data.clone());
    net.loss = Some((0.005, Rng::new(7)));
    net.m0_deaf_until = Instant::ZERO + Duration::from_secs(2);
    two_level_tree(&mut net);
    net.run(Duration::from_secs(60), |_| {});
    let m1 = net.merger_stats(merger_addr(1));
    assert!(m1.connects_out >= 2, "M1 joined late: {m1:?}");
    for r in 0..8 {
        assert!(net.got[&receiver_addr(r)] == data, "receiver {r}");
        assert_eq!(net.receiver_at(receiver_addr(r)).stats().reattaches, 0);
    }
    for m in 0..=2 {
        let st = net.merger_stats(merger_addr(m));
        assert_eq!((st.reattaches, st.children_resumed), (0, 0), "M{m}: {st:?}");
    }
    assert!(net.left.is_empty(), "{:?}", net.left);
}

#[test]
fn the_silence_watch_starts_at_the_join_upstream() {
    // A merger created at 0 whose parent accepts at 5 s must not take the
    // parent for dead at 5 s + 1 ms (the watch once started at creation).
    let (parent, up) = (merger_addr(0), sender_addr());
    let mut m = Merger::new(
        MergerConfig {
            join: JoinMerge::Count(1),
            fallback: vec![up],
            keepalive: Some(KEEPALIVE),
            ..MergerConfig::new(parent)
        },
        Instant::ZERO,
    );
    let connect = fanout_transport::wire::ConnectFrame {
        max_payload: 1400,
        window: 1 << 20,
        timestamp: WireTimestamp(0),
        resume_from: 0,
    };
    let t0 = Instant::ZERO;
    m.handle_datagram(
        t0,
        receiver_addr(0),
        &datagram(0, 0, &[Frame::Connect(connect)]),
    );
    let mut buf = Vec::new();
    drain(&mut m, t0, &mut buf, 100, |_, _| {});
    let t = Instant::ZERO + Duration::from_secs(5);
    let accept = fanout_transport::wire::AcceptFrame {
        max_payload: 1400,
        timestamp_echo: WireTimestamp(0),
        member_id: 3,
        start_offset: 0,
        token: 7 ^ 1,
    };
    m.handle_datagram(t, parent, &datagram(7, 0, &[Frame::Accept(accept)]));
    assert!(m.is_established());
    let mut to = Vec::new();
    let later = t + Duration::from_millis(1);
    drain(&mut m, later, &mut buf, 100, |tx, _| {
        to.push(tx.destination)
    });
    assert!(!to.contains(&up), "re-attached at once: {to:?}");
    assert_eq!(m.stats().reattaches, 0);
    // Silent for the whole `parent_silence` after the join: now it goes.
    let silent = t + Duration::from_millis(1100);
    let mut to = Vec::new();
    drain(&mut m, silent, &mut buf, 100, |tx, _| {
        to.push(tx.destination)
    });
    assert_eq!(m.stats().reattaches, 1);
    assert!(to.contains(&up), "{to:?}");
}

#[test]
fn a_receivers_silence_watch_starts_at_its_merger_accept() {
    // A receiver waits 5 s for its merger (the tree forms above it); the
    // merger's ACCEPT must not find its parent already "silent" for 5 s
    // (the watch once started at creation: the receiver left its merger
    // for the next ancestor as the data began, in the namespace test).
    let (via, up) = (merger_addr(1), merger_addr(0));
    let mut cfg = SessionConfig::default().transport;
    cfg.feedback_via = Some(via);
    cfg.feedback_fallback = vec![up];
    let mut r = Receiver::join(cfg, sender_addr(), Instant::ZERO);
    let mut buf = Vec::new();
    let mut t = Instant::ZERO;
    while t < Instant::ZERO + Duration::from_secs(5) {
        drain(&mut r, t, &mut buf, 100, |tx, _| {
            assert_eq!(tx.destination, via)
        });
        t += Duration::from_millis(100);
    }
    r.handle_datagram(t, via, &datagram(7, 0, &[accept(4)]));
    assert_eq!(r.poll_event(), Some(fanout_transport::Event::Connected));
    let mut to = Vec::new();
    drain(
        &mut r,
        t + Duration::from_millis(1),
        &mut buf,
        100,
        |tx, _| to.push(tx.destination),
    );
    assert!(!to.contains(&up), "re-attached at once: {to:?}");
    assert_eq!(r.stats().reattaches, 0);
    // Silent for the whole parent silence after the ACCEPT: now it goes.
    let mut to = Vec::new();
    drain(
        &mut r,
        t + Duration::from_millis(1100),
        &mut buf,
        100,
        |tx, _| to.push(tx.destination),
    );
    assert_eq!(r.stats().reattaches, 1);
    assert!(to.contains(&up), "{to:?}");
}
