//! The sender's view of a merger tree: a merger is one member standing for its
//! subtree, whose ROSTER pages (`docs/wire.md` §4.8) give the session sender
//! its receiver count (the repair threshold counts receivers) and every
//! receiver's progress. A session sender, trees of [`Merger`]s, real
//! [`Receiver`]s and a scripted hostile member over an in-memory wire (5 ms per
//! hop, deterministic), as in `tests/merge_tree.rs`.

#[path = "common/merge.rs"]
mod merge;

use fanout_core::time::Instant;
use fanout_core::{drain, Engine};
use fanout_transport::merge::{JoinMerge, Merger, MergerConfig, MAX_SUBTREE_RECEIVERS};
use fanout_transport::session::RepairPolicy;
use fanout_transport::session::{SessionConfig, SessionSender, MAX_SESSION_ROSTER_ENTRIES};
use fanout_transport::wire::WireTimestamp;
use fanout_transport::wire::{
    decode_frames, AckFrame, ConnectFrame, Frame, Header, RosterEntry, RosterFrame,
};
use fanout_transport::Receiver;
use merge::{datagram, merger_addr, random_data, receiver_addr, sender_addr};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

const HOP: Duration = Duration::from_millis(5);
const SESSION: u64 = 42;

fn group() -> SocketAddr {
    "239.1.1.1:7000".parse().unwrap()
}

fn hostile_addr() -> SocketAddr {
    "10.0.9.9:6666".parse().unwrap()
}

enum Node {
    Sender(Box<SessionSender>),
    Merger(Box<Merger>),
    Receiver(Box<Receiver>),
    /// Scripted by the test: what reaches it is kept in its inbox.
    Raw(Vec<Vec<u8>>),
}

/// Decides whether a datagram from → to is lost.
type Loss = Box<dyn FnMut(SocketAddr, SocketAddr, &[u8]) -> bool>;

struct Net {
    now: Instant,
    nodes: BTreeMap<SocketAddr, Node>,
    wire: BTreeMap<(Instant, u64), (SocketAddr, SocketAddr, Vec<u8>)>,
    seq: u64,
    loss: Loss,
    data: Vec<u8>,
    written: usize,
    /// End the stream once written (else it stays open: the session goes
    /// on and the roster can be read once everything arrived).
    finish: bool,
    got: BTreeMap<SocketAddr, Vec<u8>>,
    /// Mergers' soft-state timeout for silent children.
    child_timeout: Duration,
}

impl Net {
    fn new(config: SessionConfig, data: Vec<u8>, finish: bool, loss: Loss) -> Net {
        let mut nodes = BTreeMap::new();
        let sender = SessionSender::new(config, SESSION, Instant::ZERO);
        nodes.insert(sender_addr(), Node::Sender(Box::new(sender)));
        Net {
            now: Instant::ZERO,
            nodes,
            wire: BTreeMap::new(),
            seq: 0,
            loss,
            data,
            written: 0,
            finish,
            got: BTreeMap::new(),
            child_timeout: Duration::from_secs(30),
        }
    }

    fn merger(&mut self, at: SocketAddr, parent: SocketAddr, children: usize) {
        let config = MergerConfig {
            join: JoinMerge::CountOrTimer(children, Duration::from_millis(500)),
            child_timeout: self.child_timeout,
            ..MergerConfig::new(parent)
        };
        let m = Merger::new(config, self.now);
        self.nodes.insert(at, Node::Merger(Box::new(m)));
    }

    /// A receiver of the sender's group reporting to `via` (the sender
    /// itself, or a merger).
    fn receiver(&mut self, at: SocketAddr, via: SocketAddr) {
        let mut cfg = SessionConfig::default().transport;
        if via != sender_addr() {
            cfg.feedback_via = Some(via);
        }
        let r = Receiver::join(cfg, sender_addr(), self.now);
        self.nodes.insert(at, Node::Receiver(Box::new(r)));
        self.got.insert(at, Vec::new());
    }

    fn sender(&self) -> &SessionSender {
        match self.nodes.get(&sender_addr()) {
            Some(Node::Sender(s)) => s,
            _ => unreachable!(),
        }
    }

    fn merger_at(&self, at: SocketAddr) -> &Merger {
        match self.nodes.get(&at) {
            Some(Node::Merger(m)) => m,
            _ => unreachable!(),
        }
    }

    /// A receiver's true cumulative point (bytes read + readable).
    fn progress(&self, at: SocketAddr) -> u64 {
        match self.nodes.get(&at) {
            Some(Node::Receiver(r)) => r.bytes_read() + r.readable(),
            _ => unreachable!(),
        }
    }

    fn send(&mut self, from: SocketAddr, to: SocketAddr, bytes: Vec<u8>) {
        self.seq += 1;
        self.wire
            .insert((self.now + HOP, self.seq), (from, to, bytes));
    }

    fn pump(&mut self) -> Option<Instant> {
        if self.written < self.data.len() {
            let data = std::mem::take(&mut self.data);
            let from = self.written;
            let Some(Node::Sender(s)) = self.nodes.get_mut(&sender_addr()) else {
                unreachable!()
            };
            self.written += s.write(&data[from..]);
            if self.written == data.len() && self.finish {
                s.finish();
            }
            self.data = data;
        }
        let mut next: Option<Instant> = None;
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for (&addr, node) in self.nodes.iter_mut() {
            let engine: &mut dyn Engine = match node {
                Node::Sender(s) => s.as_mut(),
                Node::Merger(m) => m.as_mut(),
                Node::Receiver(r) => {
                    let mut chunk = [0u8; 16384];
                    loop {
                        let n = r.read(&mut chunk);
                        if n == 0 {
                            break;
                        }
                        self.got
                            .get_mut(&addr)
                            .unwrap()
                            .extend_from_slice(&chunk[..n]);
                    }
                    r.as_mut()
                }
                Node::Raw(_) => continue,
            };
            let t = drain(engine, self.now, &mut buf, 256, |t, b| {
                out.push((addr, t.destination, b.to_vec()))
            });
            next = [next, t].into_iter().flatten().min();
        }
        // The group reaches every receiver (and the scripted member).
        let members: Vec<SocketAddr> = self
            .nodes
            .iter()
            .filter(|(_, n)| matches!(n, Node::Receiver(_) | Node::Raw(_)))
            .map(|(a, _)| *a)
            .collect();
        for (from, to, bytes) in out {
            let dests = if to == group() {
                members.clone()
            } else {
                vec![to]
            };
            for to in dests {
                if !(self.loss)(from, to, &bytes) {
                    self.send(from, to, bytes.clone());
                }
            }
        }
        next
    }

    fn run_until(&mut self, until: Duration, mut at: impl FnMut(&mut Net)) {
        let end = Instant::ZERO + until;
        while self.now < end {
            at(self);
            let timer = self.pump();
            if self.sender().close_reason().is_some() && self.wire.is_empty() {
                return;
            }
            let wire = self.wire.keys().next().map(|k| k.0);
            let step = [timer, wire].into_iter().flatten().min().unwrap_or(end);
            // Never jump past a millisecond: the hooks see the run closely.
            self.now = self.now.max(step.min(self.now + Duration::from_millis(1)));
            while let Some(e) = self.wire.first_entry() {
                if e.key().0 > self.now {
                    break;
                }
                let (from, to, bytes) = e.remove();
                match self.nodes.get_mut(&to) {
                    Some(Node::Sender(s)) => s.handle_datagram(self.now, from, &bytes),
                    Some(Node::Merger(m)) => m.handle_datagram(self.now, from, &bytes),
                    Some(Node::Receiver(r)) => r.handle_datagram(self.now, from, &bytes),
                    Some(Node::Raw(inbox)) => inbox.push(bytes),
                    None => {}
                }
            }
        }
    }
}

/// The DATA offset of a datagram from the sender, if it carries one.
fn data_offset(bytes: &[u8]) -> Option<u64> {
    let (_, body) = Header::decode(bytes).ok()?;
    decode_frames(body).find_map(|f| match f {
        Ok(Frame::Data(d)) => Some(d.offset),
        _ => None,
    })
}

/// Sender ← M0 ← {M1, M2} ← 4 receivers each, plus `direct` receivers
/// of the sender's own (partial deployment); everyone takes data from the
/// group.
fn tree(net: &mut Net, direct: usize) {
    net.merger(merger_addr(0), sender_addr(), 2);
    for m in 1..=2 {
        net.merger(merger_addr(m), merger_addr(0), 4);
        for r in 0..4 {
            net.receiver(receiver_addr((m - 1) * 4 + r), merger_addr(m));
        }
    }
    for r in 0..direct {
        net.receiver(receiver_addr(100 + r), sender_addr());
    }
}

fn multicast_config() -> SessionConfig {
    SessionConfig {
        group: Some(group()),
        wait_for_members: 3,
        ..SessionConfig::default()
    }
}

#[test]
fn the_sender_lists_every_receiver_behind_a_two_level_tree() {
    let len = 512 << 10;
    let mut net = Net::new(
        multicast_config(),
        random_data(len, 7),
        false,
        Box::new(|_, _, _| false),
    );
    tree(&mut net, 2);
    // While data flows: a roster entry never claims more than its receiver
    // holds (it is a past value of that receiver's cumulative point).
    let mut checked = 0;
    net.run_until(Duration::from_secs(4), |net| {
        for r in net.sender().receivers() {
            if let Some(&Some(truth)) = net
                .nodes
                .get(&r.addr)
                .map(|n| matches!(n, Node::Receiver(_)).then(|| net.progress(r.addr)))
                .as_ref()
            {
                assert!(r.cumulative <= truth, "{r:?} beyond {truth}");
                checked += 1;
            }
        }
    });
    assert!(checked > 1000, "checked {checked}");
    let s = net.sender();
    assert_eq!(s.member_count(), 3, "M0 and two direct receivers");
    assert_eq!(s.receiver_count(), 10);
    let m0 = s
        .members()
        .find(|m| m.1 == merger_addr(0))
        .expect("M0 a member")
        .0;
    assert!(s.is_merger(m0));
    assert_eq!(s.member_weight(m0), 8);
    let roster = s.receivers();
    assert_eq!(roster.len(), 10, "{roster:?}");
    for r in &roster {
        assert_eq!(r.cumulative, len as u64, "{r:?}: everything arrived");
        if r.addr.ip().to_string().starts_with("10.0.1.10") {
            assert_eq!(r.via, None, "direct: {r:?}");
        } else {
            assert_eq!(r.via, Some((m0, merger_addr(0))), "{r:?}");
        }
    }
    let addrs: Vec<SocketAddr> = roster.iter().map(|r| r.addr).collect();
    for i in (0..8).chain(100..102) {
        assert!(addrs.contains(&receiver_addr(i)), "{i} missing");
    }
    // M0 saw both lower mergers' pages; each merger's count is its subtree's.
    assert_eq!(net.merger_at(merger_addr(0)).subtree_receivers(), 8);
    assert_eq!(net.merger_at(merger_addr(1)).subtree_receivers(), 4);
    assert_eq!(net.merger_at(merger_addr(0)).roster_entries().len(), 8);
    let st = s.roster_stats();
    assert_eq!(st.entries_dropped + st.claims_clamped, 0, "{st:?}");
    // The lower mergers were listed as receivers until their first pages
    // reached M0; those entries expired.
    assert!(st.entries_expired <= 2, "{st:?}");
    // Bounded cost: one page per cycle per merger (≈ 4 s / 1 s each, plus
    // count changes while the tree formed).
    let pages = net.merger_at(merger_addr(0)).roster().pages_out();
    assert!((3..=12).contains(&pages), "M0 sent {pages} pages");
}

#[test]
fn a_receiver_that_leaves_a_subtree_leaves_the_senders_roster() {
    // A live stream: 32 KiB more every 50 ms, never finished, so the
    // receivers keep acknowledging (and stay fresh in their mergers).
    let mut net = Net::new(
        SessionConfig {
            wait_for_members: 1,
            join: fanout_transport::session::JoinPolicy::Live,
            ..multicast_config()
        },
        random_data(32 << 10, 8),
        false,
        Box::new(|_, _, _| false),
    );
    net.child_timeout = Duration::from_secs(2);
    tree(&mut net, 0);
    let mut next = Instant::ZERO;
    let mut feed = move |net: &mut Net| {
        if net.now >= next {
            next = net.now + Duration::from_millis(50);
            let more = random_data(32 << 10, net.data.len() as u64);
            net.data.extend_from_slice(&more);
        }
    };
    net.run_until(Duration::from_millis(2500), &mut feed);
    assert_eq!(net.sender().receiver_count(), 8);
    assert_eq!(net.sender().receivers().len(), 8);
    // Receiver 7 (under M2) crashes: M2 forgets it after its 2 s child
    // timeout (the others go on), and the sender's roster follows: the
    // count at once, the entry within two cycles of each merger's pages.
    net.nodes.remove(&receiver_addr(7));
    net.got.remove(&receiver_addr(7));
    net.run_until(Duration::from_secs(10), &mut feed);
    let s = net.sender();
    assert!(s.close_reason().is_none());
    assert_eq!(s.receiver_count(), 7);
    let roster = s.receivers();
    assert_eq!(roster.len(), 7, "{roster:?}");
    assert!(roster.iter().all(|r| r.addr != receiver_addr(7)));
    // Everyone else is current to within a roster cycle (≈ 20 chunks).
    let sent = s.snd_nxt();
    for r in &roster {
        assert!(r.cumulative + (1 << 20) >= sent, "{r:?} vs {sent}");
    }
}

/// Session of 20 receivers in 13 members: M0 standing for 8 (two levels)
/// and 12 direct receivers, with repair threshold `threshold`.
fn twenty_receivers(threshold: f64, loss: Loss) -> Net {
    let mut net = Net::new(
        SessionConfig {
            wait_for_members: 13,
            repair: RepairPolicy::Threshold(threshold),
            ..multicast_config()
        },
        random_data(600 << 10, 9),
        true,
        loss,
    );
    tree(&mut net, 12);
    net
}

/// The first multicast copy of the segment at `offset` is lost toward
/// the receivers for which `victim` holds.
fn lose_once(offset: u64, victim: impl Fn(SocketAddr) -> bool + 'static) -> Loss {
    let mut done = std::collections::BTreeSet::new();
    Box::new(move |from, to, bytes| {
        if from != sender_addr() || !victim(to) || data_offset(bytes) != Some(offset) {
            return false;
        }
        done.insert(to)
    })
}

const LOST_AT: u64 = 300_000;

fn segment_start(at: u64) -> u64 {
    // Segments are MSS-sized from 0 (the file is one message).
    let mss = SessionConfig::default().transport.max_payload();
    at / mss * mss
}

#[test]
fn a_merger_missing_a_segment_counts_its_whole_subtree() {
    // All 8 receivers behind M0 miss one segment: 8 of 20 receivers (40%)
    // is above a 5% threshold (the default) and a 10% one: one multicast
    // repair each time. (Counting members, 1 of 13 = 7.7%, a 10% threshold
    // would repair it by unicast to M0, relayed to 8 receivers.)
    for threshold in [0.05, 0.10] {
        a_merger_missing_a_segment(threshold);
    }
}

fn a_merger_missing_a_segment(threshold: f64) {
    let below_m0 = |to: SocketAddr| (0..8).any(|i| to == receiver_addr(i));
    let mut net = twenty_receivers(threshold, lose_once(segment_start(LOST_AT), below_m0));
    net.run_until(Duration::from_secs(30), |_| {});
    let s = net.sender();
    assert!(s.close_reason().is_some(), "completed");
    let st = s.stats();
    assert_eq!(s.receiver_count(), 20);
    assert_eq!(
        (st.multicast_repairs, st.unicast_repairs),
        (1, 0),
        "threshold {threshold}: {st:?}"
    );
    for (a, g) in &net.got {
        assert_eq!(g.len(), net.data.len(), "{a}");
    }
}

#[test]
fn one_direct_receiver_of_twenty_is_repaired_by_unicast() {
    // One direct receiver misses a segment: 1 of 20 receivers (5%, not
    // above the threshold): unicast. Counting members (1 of 13 = 7.7%) the
    // sender multicast it to all 20.
    let victim = receiver_addr(105);
    let mut net = twenty_receivers(
        0.05,
        lose_once(segment_start(LOST_AT), move |to| to == victim),
    );
    net.run_until(Duration::from_secs(30), |_| {});
    let s = net.sender();
    assert!(s.close_reason().is_some(), "completed");
    let st = s.stats();
    assert_eq!((st.multicast_repairs, st.unicast_repairs), (0, 1), "{st:?}");
    assert_eq!(net.got[&victim], net.data);
}

/// A member that lies in its roster: it claims a million receivers and
/// a fan-in of a billion, floods pages of made-up receivers (one of them
/// the address of a genuine receiver, claiming it has everything), and
/// acknowledges all it is sent. Meanwhile a genuine direct receiver loses
/// every segment for 300 ms (its window holds the session meanwhile).
#[test]
fn a_lying_roster_stays_bounded_and_releases_nothing_a_receiver_lacks() {
    let genuine = receiver_addr(100);
    let start_loss = Instant::ZERO + Duration::from_millis(100);
    let end_loss = Instant::ZERO + Duration::from_millis(400);
    let clock = std::rc::Rc::new(std::cell::Cell::new(Instant::ZERO));
    let seen = clock.clone();
    let mut net = Net::new(
        SessionConfig {
            wait_for_members: 2,
            ..multicast_config()
        },
        random_data(8 << 20, 10),
        true,
        Box::new(move |from, to, bytes| {
            let t = seen.get();
            from == sender_addr()
                && to == genuine
                && data_offset(bytes).is_some()
                && t >= start_loss
                && t < end_loss
        }),
    );
    net.receiver(genuine, sender_addr());
    net.nodes.insert(hostile_addr(), Node::Raw(Vec::new()));
    let connect = Frame::Connect(ConnectFrame {
        max_payload: 1400,
        window: 1 << 24,
        timestamp: WireTimestamp(0),
        resume_from: 0,
    });
    net.send(hostile_addr(), sender_addr(), datagram(0, 0, &[connect]));
    let mut pn = 1u32;
    let mut highest = 0u64;
    let mut echo = WireTimestamp(0);
    // Most the liar acknowledged beyond what the genuine receiver held.
    let mut gap = 0u64;
    let mut next_flood = Instant::ZERO;
    let mut pages = 0u64;
    let mut max_entries = 0usize;
    // The liar is a member: it speaks under the token of its ACCEPT.
    let mut token = SESSION;
    net.run_until(Duration::from_secs(30), |net| {
        clock.set(net.now);
        // The lie must never release what the genuine receiver lacks.
        let released = net.sender().bytes_acked_by_all();
        assert!(
            released <= net.progress(genuine),
            "released {released}, genuine holds {}",
            net.progress(genuine)
        );
        gap = gap.max(highest.saturating_sub(net.progress(genuine)));
        if net.now.as_nanos() % 100_000_000 == 0 {
            max_entries = max_entries.max(net.sender().receivers().len());
        }
        let Some(Node::Raw(inbox)) = net.nodes.get_mut(&hostile_addr()) else {
            unreachable!()
        };
        for d in std::mem::take(inbox) {
            if let Ok((_, body)) = Header::decode(&d) {
                for f in decode_frames(body).flatten() {
                    match f {
                        Frame::Data(d) => {
                            highest =
                                highest.max(d.offset + d.payload.len() as u64 + u64::from(d.fin));
                            echo = d.timestamp;
                        }
                        Frame::Accept(a) => token = a.token,
                        _ => {}
                    }
                }
            }
        }
        if net.now < next_flood {
            return;
        }
        next_flood = net.now + Duration::from_millis(1);
        let ack = Frame::Ack(AckFrame {
            cumulative: highest,
            window: 1 << 24,
            timestamp_echo: echo,
            ack_delay_us: 0,
            sack: vec![],
        });
        let entries: Vec<RosterEntry> = (0..32u64)
            .map(|i| RosterEntry {
                addr: if i == 0 {
                    genuine
                } else {
                    SocketAddr::from((
                        std::net::Ipv4Addr::from(0x0b00_0000 + (pages * 32 + i) as u32),
                        1,
                    ))
                },
                cumulative: u64::MAX >> 2,
            })
            .collect();
        let page = Frame::Roster(RosterFrame {
            receivers: 1 << 40,
            fan_in: 1 << 30,
            total: 1 << 40,
            first: pages * 32,
            entries,
        });
        pages += 1;
        let d = datagram(token, pn, &[ack, page]);
        pn += 1;
        net.send(hostile_addr(), sender_addr(), d);
    });
    let s = net.sender();
    assert!(pages > 1000, "{pages} pages");
    assert!(
        gap > 100_000,
        "the genuine receiver lagged by {gap} bytes at most"
    );
    assert_eq!(
        net.got[&genuine].len(),
        net.data.len(),
        "the genuine receiver completes"
    );
    assert!(net.got[&genuine] == net.data);
    assert!(s.close_reason().is_some());
    let st = s.roster_stats();
    assert!(st.entries_dropped > 0 && st.claims_clamped > 0, "{st:?}");
    assert!(
        max_entries <= MAX_SESSION_ROSTER_ENTRIES + 2,
        "{max_entries}"
    );
    assert!(s.receiver_count() <= 1 + MAX_SUBTREE_RECEIVERS, "clamped");
}
