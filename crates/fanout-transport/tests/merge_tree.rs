//! Story and hostile-input tests of MCTCP mergers: a session sender, trees of
//! [`Merger`]s and real [`Receiver`]s over an in-memory wire with per-hop delay
//! and loss. The sender runs unchanged in unicast fan-out mode: a merger is one
//! member standing for its subtree.

#[path = "common/merge.rs"]
mod merge;

use fanout_core::time::Instant;
use fanout_core::{drain, Engine, RangeSet, Rng};
use fanout_transport::merge::{JoinMerge, Merger, MergerConfig, MergerStats};
use fanout_transport::protection::{Credentials, Protection};
use fanout_transport::session::{SessionConfig, SessionSender, SessionStats};
use fanout_transport::wire::WireTimestamp;
use fanout_transport::wire::{
    decode_frames, CloseFrame, ConnectFrame, DataFrame, Frame, Header, SentFrame,
};
use fanout_transport::{CloseReason, Receiver};
use merge::{
    accept, ack, acked_set, acks_to, child_datagram, connect, datagram, established, merger_addr,
    outputs, random_data, receiver_addr, sender_addr,
};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

const HOP: Duration = Duration::from_millis(5);
/// The session's multicast group: every receiver listens on it (mergers
/// do not: they would relay each segment to children that lack it).
const GROUP: &str = "239.1.1.1:7000";

enum Node {
    Sender(Box<SessionSender>),
    Merger(Box<Merger>),
    Receiver(Box<Receiver>),
}

impl Node {
    fn engine(&mut self) -> &mut dyn Engine {
        match self {
            Node::Sender(s) => s.as_mut(),
            Node::Merger(m) => m.as_mut(),
            Node::Receiver(r) => r.as_mut(),
        }
    }
}

/// Decides whether a datagram from → to is lost.
type Loss = Box<dyn FnMut(SocketAddr, SocketAddr, &[u8]) -> bool>;

struct Net {
    now: Instant,
    nodes: BTreeMap<SocketAddr, Node>,
    /// Nodes that stopped (crashed): they neither send nor receive.
    dead: Vec<SocketAddr>,
    wire: BTreeMap<(Instant, u64), (SocketAddr, SocketAddr, Vec<u8>)>,
    seq: u64,
    loss: Loss,
    data: Vec<u8>,
    written: usize,
    got: BTreeMap<SocketAddr, Vec<u8>>,
    /// Datagrams that arrived at the sender.
    at_sender: u64,
    /// Acknowledged sets of the ACKs that reached the sender, by source.
    acked_at_sender: Vec<(SocketAddr, RangeSet)>,
    /// Credentials of the mergers and receivers added (a protected
    /// session), each node with randomness of its own.
    credentials: Option<Credentials>,
}

impl Net {
    fn new(config: SessionConfig, data: Vec<u8>, loss: Loss) -> Net {
        let mut nodes = BTreeMap::new();
        let sender = SessionSender::new(config, 42, Instant::ZERO);
        nodes.insert(sender_addr(), Node::Sender(Box::new(sender)));
        Net {
            now: Instant::ZERO,
            nodes,
            dead: Vec::new(),
            wire: BTreeMap::new(),
            seq: 0,
            loss,
            data,
            written: 0,
            got: BTreeMap::new(),
            at_sender: 0,
            acked_at_sender: Vec::new(),
            credentials: None,
        }
    }

    /// Protection for the node at `at` under the net's credentials.
    fn protection(&self, at: SocketAddr) -> Option<Protection> {
        let seed = blake3::hash(at.to_string().as_bytes());
        (self.credentials.clone()).map(|c| Protection::new(c, *seed.as_bytes()))
    }

    fn merger(&mut self, at: SocketAddr, mut config: MergerConfig) {
        config.protection = config.protection.or_else(|| self.protection(at));
        let m = Merger::new(config, self.now);
        self.nodes.insert(at, Node::Merger(Box::new(m)));
    }

    fn receiver(&mut self, at: SocketAddr, parent: SocketAddr) {
        let mut cfg = SessionConfig::default().transport;
        cfg.protection = self.protection(at);
        let r = Receiver::join(cfg, parent, self.now);
        self.nodes.insert(at, Node::Receiver(Box::new(r)));
        self.got.insert(at, Vec::new());
    }

    /// A receiver joining the sender's session (data from the sender and
    /// the group) with its feedback through the merger `via`.
    fn receiver_via(&mut self, at: SocketAddr, via: SocketAddr) {
        let mut cfg = SessionConfig::default().transport;
        cfg.feedback_via = Some(via);
        cfg.protection = self.protection(at);
        let r = Receiver::join(cfg, sender_addr(), self.now);
        self.nodes.insert(at, Node::Receiver(Box::new(r)));
        self.got.insert(at, Vec::new());
    }

    fn sender(&mut self) -> &mut SessionSender {
        match self.nodes.get_mut(&sender_addr()) {
            Some(Node::Sender(s)) => s,
            _ => unreachable!(),
        }
    }

    fn sender_stats(&self) -> SessionStats {
        match self.nodes.get(&sender_addr()) {
            Some(Node::Sender(s)) => s.stats().clone(),
            _ => unreachable!(),
        }
    }

    fn merger_stats(&self, at: SocketAddr) -> MergerStats {
        match self.nodes.get(&at) {
            Some(Node::Merger(m)) => m.stats(),
            _ => unreachable!(),
        }
    }

    fn acks_sent_by_receivers(&self) -> u64 {
        self.nodes
            .values()
            .filter_map(|n| match n {
                Node::Receiver(r) => Some(r.stats().acks_sent),
                _ => None,
            })
            .sum()
    }

    fn pump(&mut self) -> Option<Instant> {
        if self.written < self.data.len() {
            let data = std::mem::take(&mut self.data);
            let from = self.written;
            self.written += self.sender().write(&data[from..]);
            if self.written == data.len() {
                self.sender().finish();
            }
            self.data = data;
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
                    self.got
                        .get_mut(&addr)
                        .unwrap()
                        .extend_from_slice(&chunk[..n]);
                }
            }
            let t = drain(node.engine(), self.now, &mut buf, 256, |t, b| {
                out.push((addr, t.destination, b.to_vec()))
            });
            next = [next, t].into_iter().flatten().min();
        }
        // A datagram to the group reaches every receiver, from the sender.
        let group: SocketAddr = GROUP.parse().unwrap();
        let receivers: Vec<SocketAddr> = self
            .nodes
            .iter()
            .filter(|(_, n)| matches!(n, Node::Receiver(_)))
            .map(|(a, _)| *a)
            .collect();
        let out = out.into_iter().flat_map(|(from, to, bytes)| {
            let to: Vec<SocketAddr> = if to == group {
                receivers.clone()
            } else {
                vec![to]
            };
            to.into_iter().map(move |to| (from, to, bytes.clone()))
        });
        for (from, to, bytes) in out {
            if (self.loss)(from, to, &bytes) {
                continue;
            }
            self.seq += 1;
            self.wire
                .insert((self.now + HOP, self.seq), (from, to, bytes));
        }
        next
    }

    fn sender_closed(&self) -> bool {
        matches!(self.nodes.get(&sender_addr()), Some(Node::Sender(s)) if s.close_reason().is_some())
    }

    fn run(&mut self, limit: Duration, mut at: impl FnMut(&mut Net)) {
        let end = Instant::ZERO + limit;
        while self.now < end {
            at(self);
            let timer = self.pump();
            if self.sender_closed() && self.wire.is_empty() {
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
                    self.at_sender += 1;
                    if let Ok((_, body)) = Header::decode(&bytes) {
                        for f in decode_frames(body) {
                            if let Ok(Frame::Ack(a)) = f {
                                self.acked_at_sender.push((from, acked_set(&a)));
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

    /// Every live receiver holds the stream and the sender completed.
    fn check_completed(&self) {
        self.check_delivery();
        assert!(
            matches!(self.nodes.get(&sender_addr()),
                Some(Node::Sender(s)) if s.close_reason() == Some(&CloseReason::Completed)),
            "the sender completed"
        );
    }

    fn check_delivery(&self) {
        for (addr, g) in &self.got {
            if self.dead.contains(addr) {
                continue;
            }
            assert!(
                *g == self.data,
                "{addr}: {} of {} bytes",
                g.len(),
                self.data.len()
            );
        }
    }
}

fn merger_config(parent: SocketAddr, children: usize) -> MergerConfig {
    MergerConfig {
        join: JoinMerge::CountOrTimer(children, Duration::from_millis(500)),
        ..MergerConfig::new(parent)
    }
}

/// Sender → M0 → {M1, M2} → 4 receivers each (two merger levels).
fn two_level_tree(net: &mut Net) {
    net.merger(merger_addr(0), merger_config(sender_addr(), 2));
    for m in 1..=2 {
        net.merger(merger_addr(m), merger_config(merger_addr(0), 4));
        for r in 0..4 {
            net.receiver(receiver_addr((m - 1) * 4 + r), merger_addr(m));
        }
    }
}

#[test]
fn a_two_level_tree_delivers_and_the_sender_hears_one_member() {
    let data = random_data(1 << 20, 1);
    let mut tree = Net::new(
        SessionConfig::default(),
        data.clone(),
        Box::new(|_, _, _| false),
    );
    two_level_tree(&mut tree);
    tree.run(Duration::from_secs(60), |_| {});
    tree.check_delivery();
    let st = tree.sender_stats();
    assert_eq!(
        tree.nodes.get(&sender_addr()).and_then(|n| match n {
            Node::Sender(s) => s.close_reason().cloned(),
            _ => None,
        }),
        Some(CloseReason::Completed)
    );
    assert_eq!(st.members_joined, 1, "the tree is one member");
    let m0 = tree.merger_stats(merger_addr(0));
    let (m1, m2) = (
        tree.merger_stats(merger_addr(1)),
        tree.merger_stats(merger_addr(2)),
    );
    assert_eq!(m0.children_joined, 2);
    assert_eq!(m1.children_joined + m2.children_joined, 8);
    assert_eq!(m0.connects_out, 1, "one merged CONNECT, no retry");
    assert_eq!(m0.acks_in, m1.acks_out + m2.acks_out);
    assert_eq!(st.acks_received, m0.acks_out);
    // RTT through mergers: the merged echo is the subtree's oldest, so the
    // sender's estimate for the tree spans the whole path (6 hops of 5 ms,
    // plus the receivers' ACK delay), not one hop.
    let srtt = match tree.nodes.get(&sender_addr()) {
        Some(Node::Sender(s)) => s.members().map(|m| m.4).max().unwrap(),
        _ => unreachable!(),
    };
    assert!(
        srtt >= 6 * HOP && srtt < 6 * HOP + Duration::from_millis(50),
        "{srtt:?}"
    );

    // The same 8 receivers straight on the sender.
    let mut flat = Net::new(
        SessionConfig {
            wait_for_members: 8,
            ..SessionConfig::default()
        },
        data.clone(),
        Box::new(|_, _, _| false),
    );
    for r in 0..8 {
        flat.receiver(receiver_addr(r), sender_addr());
    }
    flat.run(Duration::from_secs(60), |_| {});
    flat.check_delivery();
    let fs = flat.sender_stats();
    eprintln!(
        "1 MiB to 8 receivers: flat: sender got {} datagrams ({} ACKs) in {:.3} s; \
         tree: sender got {} ({} ACKs) in {:.3} s; receivers sent {} ACKs; \
         M1/M2 in {}/{} out {}/{}; M0 in {} out {} (duplicates forwarded {}); \
         sender's srtt for the tree {:?}",
        flat.at_sender,
        fs.acks_received,
        flat.now.as_secs_f64(),
        tree.at_sender,
        st.acks_received,
        tree.now.as_secs_f64(),
        tree.acks_sent_by_receivers(),
        m1.acks_in,
        m2.acks_in,
        m1.acks_out,
        m2.acks_out,
        m0.acks_in,
        m0.acks_out,
        m0.duplicate_forwards,
        srtt,
    );
    // Each level forwards about one ACK per ACK of its slowest child: the
    // sender hears no more than one receiver says, whatever the number of
    // receivers, and less than from the flat session.
    let busiest = tree
        .nodes
        .values()
        .filter_map(|n| match n {
            Node::Receiver(r) => Some(r.stats().acks_sent),
            _ => None,
        })
        .max()
        .unwrap();
    assert!(
        st.acks_received <= busiest,
        "{} > {busiest}",
        st.acks_received
    );
    assert!(
        3 * st.acks_received <= fs.acks_received,
        "tree {} vs flat {}",
        st.acks_received,
        fs.acks_received
    );
    assert!(3 * m1.acks_out <= m1.acks_in, "{m1:?}");
}

/// [`two_level_tree`] in a multicast session: the receivers take DATA from
/// the sender's group and send their feedback to their merger
/// (`TransportConfig::feedback_via`).
fn two_level_multicast_tree(net: &mut Net) {
    net.merger(merger_addr(0), merger_config(sender_addr(), 2));
    for m in 1..=2 {
        net.merger(merger_addr(m), merger_config(merger_addr(0), 4));
        for r in 0..4 {
            net.receiver_via(receiver_addr((m - 1) * 4 + r), merger_addr(m));
        }
    }
}

#[test]
fn a_multicast_session_completes_through_a_two_level_tree() {
    let data = random_data(1 << 20, 6);
    let multicast = SessionConfig {
        group: Some(GROUP.parse().unwrap()),
        ..SessionConfig::default()
    };
    let mut tree = Net::new(multicast.clone(), data.clone(), Box::new(|_, _, _| false));
    two_level_multicast_tree(&mut tree);
    tree.run(Duration::from_secs(60), |_| {});
    tree.check_completed();
    let st = tree.sender_stats();
    assert_eq!(st.members_joined, 1, "the tree is one member");
    let mss = SessionConfig::default().transport.max_payload();
    let segments = (data.len() as u64).div_ceil(mss);
    assert!(
        st.data_segments >= segments && st.fanout_copies == 0,
        "DATA went to the group, not by unicast fan-out: {st:?}"
    );
    let (m0, m1, m2) = (
        tree.merger_stats(merger_addr(0)),
        tree.merger_stats(merger_addr(1)),
        tree.merger_stats(merger_addr(2)),
    );
    assert_eq!(st.acks_received, m0.acks_out);
    assert_eq!(m0.acks_in, m1.acks_out + m2.acks_out);
    // The subtree is one member: every receiver has the member id the
    // sender gave M0, so their ACK schedules run in phase.
    let ids: Vec<u64> = tree
        .nodes
        .values()
        .filter_map(|n| match n {
            Node::Receiver(r) => Some(r.member_id()),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 8);
    assert!(ids.iter().all(|&id| id == ids[0]), "{ids:?}");

    // The same 8 receivers straight on the sender, same group.
    let mut flat = Net::new(
        SessionConfig {
            wait_for_members: 8,
            ..multicast
        },
        data.clone(),
        Box::new(|_, _, _| false),
    );
    for r in 0..8 {
        flat.receiver(receiver_addr(r), sender_addr());
    }
    flat.run(Duration::from_secs(60), |_| {});
    flat.check_delivery();
    let fs = flat.sender_stats();
    eprintln!(
        "1 MiB multicast to 8 receivers: flat: sender got {} ACKs, done at {:.3} s; \
         tree: sender got {} ACKs, done at {:.3} s ({} segments, {} unicast + {} multicast \
         repairs, {} recoveries, {} RTOs); receivers sent {} ACKs; \
         M1/M2 in {}/{} out {}/{} relayed {}/{}; M0 in {} out {}",
        fs.acks_received,
        flat.now.as_secs_f64(),
        st.acks_received,
        tree.now.as_secs_f64(),
        st.data_segments,
        st.unicast_repairs,
        st.multicast_repairs,
        st.recovery_episodes,
        st.rto_events,
        tree.acks_sent_by_receivers(),
        m1.acks_in,
        m2.acks_in,
        m1.acks_out,
        m2.acks_out,
        m1.relayed,
        m2.relayed,
        m0.acks_in,
        m0.acks_out,
    );
    // The merging itself: 8 receivers' ACKs reach the sender as one
    // merged flow (two levels, each at least halving it). Against the
    // flat session (printed above) the ratio depends on timing: that
    // session thins its 8 members' ACKs to its feedback budget, and the
    // tree's sender gets one merged ACK per round of its receivers' ACKs.
    assert!(
        4 * st.acks_received <= tree.acks_sent_by_receivers(),
        "tree: sender {} vs receivers {}",
        st.acks_received,
        tree.acks_sent_by_receivers()
    );
    assert!(
        st.acks_received <= fs.acks_received,
        "tree {} vs flat {}",
        st.acks_received,
        fs.acks_received
    );
}

/// A flood of forged joins at a merger (unprotected): the first 16 are
/// admitted unvalidated (each holds the merged ACK at its start until it
/// is evicted unanswered, 3 s), every later unproven join gets a stateless
/// RETRY (or nothing, beyond 100 per 100 ms) and leaves no state, so the
/// subtree is held once, not for the whole flood, and the sender does not
/// evict it as stalled; an honest receiver joining during the flood comes
/// back with the token and gets in.
#[test]
fn a_join_flood_at_a_merger_gets_stateless_retries_and_the_subtree_completes() {
    let data = random_data(8 << 20, 15);
    let multicast = SessionConfig {
        group: Some(GROUP.parse().unwrap()),
        ..SessionConfig::default()
    };
    let mut tree = Net::new(multicast, data.clone(), Box::new(|_, _, _| false));
    let m = merger_addr(0);
    tree.merger(m, merger_config(sender_addr(), 2));
    for r in 0..2 {
        tree.receiver_via(receiver_addr(r), m);
    }
    let late = receiver_addr(2);
    let mut forged = 0u32;
    tree.run(Duration::from_secs(60), |net| {
        let t = net.now.saturating_duration_since(Instant::ZERO);
        if t < Duration::from_millis(40) || forged >= 4000 {
            return;
        }
        if forged == 100 {
            net.receiver_via(late, m);
        }
        // Ten joins a step from addresses that never answer.
        for _ in 0..10 {
            forged += 1;
            let from = SocketAddr::from(([10, 9, (forged >> 8) as u8, forged as u8], 7000));
            net.seq += 1;
            let at = net.now + HOP;
            net.wire
                .insert((at, net.seq), (from, m, datagram(0, forged, &[connect()])));
        }
    });
    // The late receiver starts where the subtree stood when it joined.
    let late_got = tree.got.remove(&late).unwrap();
    assert!(
        !late_got.is_empty() && data.ends_with(&late_got),
        "the late receiver got in and holds the stream from its start"
    );
    tree.check_completed();
    let st = tree.merger_stats(m);
    // Every unproven join after the first 16 got a RETRY, or nothing once
    // 100 went out within 100 ms.
    let limited = st.drops.get(fanout_core::stats::DropReason::LimitExceeded);
    assert!(st.retries_sent >= 100, "{st:?}");
    assert!(
        st.retries_sent + limited + 16 >= u64::from(forged),
        "{st:?}"
    );
    // The two, the late one, and the 16 forged joins admitted before the
    // RETRYs began, evicted unvalidated.
    assert!(st.children_joined <= 19, "{st:?}");
    assert_eq!(st.unvalidated_evicted, st.children_joined - 3, "{st:?}");
    assert_eq!(tree.sender_stats().members_left, 0, "the subtree stayed");
    eprintln!(
        "8 MiB through a merger under {forged} forged joins: done at {:.3} s, {} RETRYs, \
         {} joined",
        tree.now.as_secs_f64(),
        st.retries_sent,
        st.children_joined
    );
}

#[test]
fn losses_below_the_mergers_are_repaired() {
    let data = random_data(400_000, 2);
    let mut rng = Rng::new(9);
    // 2% of what reaches any receiver is lost, independently.
    let loss: Loss =
        Box::new(move |_, to, _| to.ip().to_string().starts_with("10.0.1.") && rng.bernoulli(0.02));
    let mut net = Net::new(SessionConfig::default(), data, loss);
    two_level_tree(&mut net);
    // The sender's RTT for the tree once samples flow (the first 2 s hold a
    // lost ACCEPT's retry): stale echoes of idle children must not leak in.
    let mut worst_srtt = Duration::ZERO;
    net.run(Duration::from_secs(120), |n| {
        if n.now >= Instant::ZERO + Duration::from_secs(2) {
            if let Some(Node::Sender(s)) = n.nodes.get(&sender_addr()) {
                let srtt = s.members().map(|m| m.4).max().unwrap_or_default();
                worst_srtt = worst_srtt.max(srtt);
            }
        }
    });
    assert!(worst_srtt < Duration::from_millis(100), "{worst_srtt:?}");
    net.check_delivery();
    let m0 = net.merger_stats(merger_addr(0));
    assert!(m0.duplicate_forwards > 0, "loss signalled upward: {m0:?}");
    let st = net.sender_stats();
    // Losses are found from the merged SACK ranges (RACK), not by timeouts.
    assert!(
        st.recovery_episodes > 2 * st.rto_events,
        "recoveries {} vs RTOs {}",
        st.recovery_episodes,
        st.rto_events
    );
    assert!(st.unicast_repairs > 0, "{st:?}");
    assert_eq!(st.members_joined, 1);
    let mut rng = Rng::new(9);
    let loss: Loss =
        Box::new(move |_, to, _| to.ip().to_string().starts_with("10.0.1.") && rng.bernoulli(0.02));
    let flat_cfg = SessionConfig {
        wait_for_members: 8,
        ..SessionConfig::default()
    };
    let mut flat = Net::new(flat_cfg, net.data.clone(), loss);
    for r in 0..8 {
        flat.receiver(receiver_addr(r), sender_addr());
    }
    flat.run(Duration::from_secs(120), |_| {});
    flat.check_delivery();
    let fs = flat.sender_stats();
    eprintln!(
        "400 kB, 2% loss at each of 8 receivers: two merger levels: done at {:.3} s, \
         sender got {} ACKs ({} merged ACKs forced by duplicates at M0), \
         {} recoveries, {} RTOs, {} unicast + {} multicast repairs; \
         flat: done at {:.3} s, {} ACKs, {} recoveries, {} RTOs, {} unicast repairs",
        net.now.as_secs_f64(),
        st.acks_received,
        m0.duplicate_forwards,
        st.recovery_episodes,
        st.rto_events,
        st.unicast_repairs,
        st.multicast_repairs,
        flat.now.as_secs_f64(),
        fs.acks_received,
        fs.recovery_episodes,
        fs.rto_events,
        fs.unicast_repairs,
    );
}

#[test]
fn a_crashed_receiver_expires_and_its_siblings_complete() {
    let data = random_data(2 << 20, 3);
    let mut net = Net::new(SessionConfig::default(), data, Box::new(|_, _, _| false));
    let cfg = |parent, n| MergerConfig {
        child_timeout: Duration::from_secs(2),
        ..merger_config(parent, n)
    };
    net.merger(merger_addr(0), cfg(sender_addr(), 4));
    for r in 0..4 {
        net.receiver(receiver_addr(r), merger_addr(0));
    }
    let victim = receiver_addr(2);
    net.run(Duration::from_secs(60), |n| {
        let half = n.got.get(&victim).is_some_and(|g| g.len() > 1 << 20);
        if half && !n.dead.contains(&victim) {
            n.dead.push(victim);
        }
    });
    assert!(
        net.dead.contains(&victim),
        "the victim crashed mid-transfer"
    );
    net.check_delivery();
    let m0 = net.merger_stats(merger_addr(0));
    assert_eq!(m0.children_expired, 1, "{m0:?}");
    assert_eq!(net.sender_stats().members_left, 0, "the merger stayed");
    eprintln!(
        "2 MiB to 4 receivers under one merger, one crashing at 1 MiB: \
         the other 3 done at {:.3} s (child timeout 2 s)",
        net.now.as_secs_f64()
    );
}

#[test]
fn merged_and_unmerged_members_coexist() {
    // Partial deployment: 4 receivers behind a merger, 4 straight on the
    // sender, in one session.
    let data = random_data(600_000, 4);
    let mut net = Net::new(
        SessionConfig {
            wait_for_members: 5,
            ..SessionConfig::default()
        },
        data,
        Box::new(|_, _, _| false),
    );
    net.merger(merger_addr(0), merger_config(sender_addr(), 4));
    for r in 0..4 {
        net.receiver(receiver_addr(r), merger_addr(0));
        net.receiver(receiver_addr(4 + r), sender_addr());
    }
    net.run(Duration::from_secs(60), |_| {});
    net.check_delivery();
    assert_eq!(net.sender_stats().members_joined, 5);
}

#[test]
fn a_late_child_starts_at_the_subtree_position_and_nothing_is_reneged() {
    let data = random_data(3 << 20, 5);
    let mut rng = Rng::new(11);
    // Some loss, so that SACK ranges are in play when the late child joins.
    let loss: Loss =
        Box::new(move |_, to, _| to.ip().to_string().starts_with("10.0.1.") && rng.bernoulli(0.01));
    let mut net = Net::new(SessionConfig::default(), data.clone(), loss);
    net.merger(merger_addr(0), merger_config(sender_addr(), 3));
    for r in 0..3 {
        net.receiver(receiver_addr(r), merger_addr(0));
    }
    let late = receiver_addr(3);
    net.run(Duration::from_secs(120), |n| {
        let progressed = n.got[&receiver_addr(0)].len() > 1 << 20;
        // Join while the sender has been told of SACK ranges above a hole.
        let holes = matches!(n.nodes.get(&merger_addr(0)),
            Some(Node::Merger(m)) if m.merged().is_some_and(|a| !a.sack.is_empty()));
        if progressed && holes && !n.got.contains_key(&late) {
            n.receiver(late, merger_addr(0));
        }
    });
    let Some(Node::Receiver(r)) = net.nodes.get(&late) else {
        panic!("the late child never joined");
    };
    let start = r.start_offset() as usize;
    assert!(start > 1 << 20, "started at {start}");
    assert!(net.got[&late] == data[start..], "late child's suffix");
    for i in 0..3 {
        assert!(net.got[&receiver_addr(i)] == data, "child {i}");
    }
    // What the sender was told about the subtree only ever grew: the late
    // child never made the merger take back a SACK range.
    let from_merger: Vec<&RangeSet> = net
        .acked_at_sender
        .iter()
        .filter(|(a, _)| *a == merger_addr(0))
        .map(|(_, s)| s)
        .collect();
    assert!(from_merger.len() > 10);
    let mut told = RangeSet::new();
    let mut reneged = 0;
    for s in from_merger {
        for r in told.iter() {
            if !s.contains_range(r) {
                reneged += 1;
            }
        }
        for r in s.iter() {
            told.insert(r);
        }
    }
    assert_eq!(reneged, 0);
}

#[test]
fn a_bogus_child_is_evicted_before_it_stalls_the_subtree() {
    // A CONNECT from an address where nobody listens (spoofed): admitted,
    // it never echoes its token nor acknowledges. Without eviction it would
    // hold the merged point until the 30 s soft-state expiry, and the
    // sender would evict the whole merger after its 10 s stall timeout;
    // its address never validated, it is dropped 3 s after its ACCEPT
    // (before the 5 s stall eviction), without a RESET.
    let data = random_data(1 << 20, 6);
    let mut net = Net::new(SessionConfig::default(), data, Box::new(|_, _, _| false));
    net.merger(merger_addr(0), merger_config(sender_addr(), 5));
    for r in 0..4 {
        net.receiver(receiver_addr(r), merger_addr(0));
    }
    let phantom: SocketAddr = "10.0.9.9:7000".parse().unwrap();
    net.seq += 1;
    net.wire.insert(
        (Instant::ZERO + HOP, net.seq),
        (phantom, merger_addr(0), datagram(0, 0, &[connect()])),
    );
    net.run(Duration::from_secs(60), |_| {});
    net.check_delivery();
    let m0 = net.merger_stats(merger_addr(0));
    assert_eq!(m0.children_joined, 5);
    assert_eq!(m0.unvalidated_evicted, 1, "{m0:?}");
    assert!(m0.amplification_limited > 0, "{m0:?}");
    let st = net.sender_stats();
    assert_eq!(st.members_left, 0, "{st:?}");
    eprintln!(
        "1 MiB to 4 receivers + 1 phantom child: evicted, done at {:.3} s",
        net.now.as_secs_f64()
    );
}

// ---- the engine alone, fed datagrams by hand -------------------------------

#[test]
fn joins_merge_by_count_into_one_connect_with_the_smallest_options() {
    let parent = sender_addr();
    let mut m = Merger::new(
        MergerConfig {
            join: JoinMerge::Count(3),
            ..MergerConfig::new(parent)
        },
        Instant::ZERO,
    );
    let t = Instant::ZERO;
    let small = Frame::Connect(ConnectFrame {
        max_payload: 1200,
        window: 1 << 16,
        timestamp: WireTimestamp(0),
        resume_from: 0,
    });
    m.handle_datagram(t, receiver_addr(0), &datagram(0, 0, &[connect()]));
    m.handle_datagram(t, receiver_addr(1), &datagram(0, 0, &[small]));
    assert!(outputs(&mut m, t).is_empty(), "two of three");
    // A repeated CONNECT is not a new child.
    m.handle_datagram(t, receiver_addr(1), &datagram(0, 1, &[connect()]));
    assert!(outputs(&mut m, t).is_empty());
    m.handle_datagram(t, receiver_addr(2), &datagram(0, 0, &[connect()]));
    let out = outputs(&mut m, t);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, parent);
    match decode_frames(&out[0].2).next() {
        Some(Ok(Frame::Connect(c))) => {
            assert_eq!((c.max_payload, c.window), (1200, 1 << 16));
            assert_eq!(c.resume_from, 0);
        }
        other => panic!("{other:?}"),
    }
    // No ACCEPT: the CONNECT is repeated after the retry interval.
    let later = t + Duration::from_secs(1);
    m.handle_timeout(later);
    assert_eq!(acks_to(&outputs(&mut m, later), parent).len(), 0);
    assert_eq!(m.stats().connects_out, 2);
}

#[test]
fn joins_merge_by_timer_and_late_children_are_admitted_locally() {
    let parent = sender_addr();
    let hold = Duration::from_millis(300);
    let mut m = Merger::new(
        MergerConfig {
            join: JoinMerge::Timer(hold),
            ..MergerConfig::new(parent)
        },
        Instant::ZERO,
    );
    let t0 = Instant::ZERO + Duration::from_millis(50);
    m.handle_datagram(t0, receiver_addr(0), &datagram(0, 0, &[connect()]));
    let t1 = t0 + Duration::from_millis(100);
    m.handle_datagram(t1, receiver_addr(1), &datagram(0, 0, &[connect()]));
    assert_eq!(
        m.poll_timeout(),
        Some(t0 + hold),
        "timer from the first join"
    );
    assert!(outputs(&mut m, t0 + (hold - Duration::from_millis(1))).is_empty());
    let out = outputs(&mut m, t0 + hold);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, parent);
    assert!(matches!(
        decode_frames(&out[0].2).next(),
        Some(Ok(Frame::Connect(_)))
    ));
    let t2 = t0 + hold + Duration::from_millis(10);
    m.handle_datagram(t2, parent, &datagram(9, 0, &[accept(1)]));
    let out = outputs(&mut m, t2);
    let accepts: Vec<_> = out.iter().filter(|(to, _, _)| *to != parent).collect();
    assert_eq!(accepts.len(), 2);
    assert!(accepts.iter().all(|(_, h, _)| h.session_id == 9));
    // Each echo is the child's CONNECT timestamp (0) plus how long the
    // merger held that CONNECT, so the child measures its path, not the
    // wait: 310 ms for the first, 210 ms for the second.
    for (to, _, body) in &accepts {
        let Some(Ok(Frame::Accept(a))) = decode_frames(body).next() else {
            panic!("an ACCEPT to {to}");
        };
        let held = if *to == receiver_addr(0) {
            310_000
        } else {
            210_000
        };
        assert_eq!(a.timestamp_echo.0, held, "{to}");
    }
    assert_eq!(out.len(), 3, "and the token echoed to the parent");
    // The parent answers the merger's roster: it sent 8000 bytes.
    let sent = Frame::Sent(SentFrame { end: 8000 });
    m.handle_datagram(t2, parent, &datagram(9, 1, &[sent]));
    // Children acknowledge; then a third joins and is answered at once,
    // starting where its siblings are, without a CONNECT upstream.
    let d = child_datagram(&m, 0, 1, &[ack(5000, vec![])]);
    m.handle_datagram(t2, receiver_addr(0), &d);
    let d = child_datagram(&m, 1, 1, &[ack(7000, vec![])]);
    m.handle_datagram(t2, receiver_addr(1), &d);
    outputs(&mut m, t2);
    m.handle_datagram(t2, receiver_addr(2), &datagram(0, 0, &[connect()]));
    let out = outputs(&mut m, t2);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, receiver_addr(2));
    match decode_frames(&out[0].2).next() {
        Some(Ok(Frame::Accept(a))) => {
            assert_eq!(a.start_offset, 7000);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(m.stats().connects_out, 1);
    assert_eq!(m.children(), 3);
}

#[test]
#[allow(clippy::single_range_in_vec_init)] // one SACK block
fn forged_and_stranger_acks_cannot_advance_the_merged_ack() {
    let mut m = established(2);
    let (honest, forger, stranger) = (receiver_addr(0), receiver_addr(1), receiver_addr(9));
    let t = Instant::ZERO;
    let d = child_datagram(&m, 0, 1, &[ack(1000, vec![2000..3000])]);
    m.handle_datagram(t, honest, &d);
    // The forger (a child, under its own token) claims the whole stream,
    // and then some SACK.
    let d = child_datagram(&m, 1, 1, &[ack(1 << 40, vec![(1 << 41)..(1 << 42)])]);
    m.handle_datagram(t, forger, &d);
    // A stranger (never joined) acknowledges on the session's id.
    m.handle_datagram(t, stranger, &datagram(7, 1, &[ack(1 << 40, vec![])]));
    let out = outputs(&mut m, t);
    let up = acks_to(&out, sender_addr());
    assert!(!up.is_empty());
    for a in &up {
        assert!(a.cumulative <= 1000, "{a:?}");
        assert!(
            a.sack.iter().all(|r| r.start >= 2000 && r.end <= 3000),
            "{a:?}"
        );
    }
    assert_eq!(m.stats().unknown_children, 1);
    // The session id, not its token, from a real child: dropped.
    m.handle_datagram(t, honest, &datagram(7, 2, &[ack(5000, vec![])]));
    assert!(acks_to(&outputs(&mut m, t), sender_addr()).is_empty());
}

#[test]
fn the_last_child_leaving_resets_the_membership_upstream() {
    let mut m = established(2);
    let t = Instant::ZERO;
    let bye = Frame::Reset(CloseFrame {
        code: 1,
        reason: "receiver aborted",
    });
    let d = child_datagram(&m, 0, 1, std::slice::from_ref(&bye));
    m.handle_datagram(t, receiver_addr(0), &d);
    assert_eq!(m.children(), 1);
    let d = child_datagram(&m, 1, 1, &[bye]);
    m.handle_datagram(t, receiver_addr(1), &d);
    assert_eq!(m.children(), 0);
    let out = outputs(&mut m, t);
    let resets: Vec<_> = out
        .iter()
        .filter(|(d, h, body)| {
            // Under the token of its ACCEPT.
            *d == sender_addr()
                && h.session_id == merge::TOKEN
                && matches!(decode_frames(body).next(), Some(Ok(Frame::Reset(_))))
        })
        .collect();
    assert_eq!(resets.len(), 1, "{out:?}");
    assert!(!m.is_established(), "gathering again");
    assert_eq!(m.stats().children_left, 2);
}

#[test]
fn the_children_table_is_bounded() {
    let mut m = Merger::new(
        MergerConfig {
            max_children: 3,
            ..MergerConfig::new(sender_addr())
        },
        Instant::ZERO,
    );
    for i in 0..10 {
        m.handle_datagram(
            Instant::ZERO,
            receiver_addr(i),
            &datagram(0, 0, &[connect()]),
        );
    }
    assert_eq!(m.children(), 3);
    assert_eq!(m.stats().children_refused, 7);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Whatever three children send — advancing, going backwards, forged,
    /// SACK ranges anywhere — every merged ACK the merger emits
    /// acknowledges only offsets each child has acknowledged.
    #[test]
    fn merged_acks_never_exceed_any_child(
        acks in proptest::collection::vec(
            (0usize..3, 0u64..600, proptest::collection::vec((0u64..300, 1u64..50), 0..6)),
            1..60,
        )
    ) {
        let mut m = established(3);
        let mut claimed = vec![RangeSet::new(); 3];
        let t = Instant::ZERO;
        for (pn, (child, cum, blocks)) in acks.into_iter().enumerate() {
            let sack: Vec<_> = blocks.iter().map(|&(s, l)| cum + s..cum + s + l).collect();
            if cum > 0 {
                claimed[child].insert(0..cum);
            }
            for r in &sack {
                claimed[child].insert(r.clone());
            }
            m.handle_datagram(t, receiver_addr(child), &datagram(7, pn as u32 + 1, &[ack(cum, sack)]));
            for a in acks_to(&outputs(&mut m, t), sender_addr()) {
                let mut merged = RangeSet::new();
                if a.cumulative > 0 {
                    merged.insert(0..a.cumulative);
                }
                for r in &a.sack {
                    merged.insert(r.clone());
                }
                for c in &claimed {
                    for r in merged.iter() {
                        prop_assert!(c.contains_range(r.clone()), "{:?} not in {:?}", r, c);
                    }
                }
            }
        }
    }

    /// Arbitrary bytes from the parent, a child or a stranger never panic.
    #[test]
    fn garbage_never_panics(
        inputs in proptest::collection::vec((0usize..3, proptest::collection::vec(any::<u8>(), 0..64)), 0..40)
    ) {
        let mut m = established(2);
        let from = [sender_addr(), receiver_addr(0), receiver_addr(9)];
        for (i, (who, mut bytes)) in inputs.into_iter().enumerate() {
            // Half of them get a valid header, so the frames are parsed.
            if i % 2 == 0 {
                let mut d = datagram(7, i as u32, &[]);
                d.append(&mut bytes);
                bytes = d;
            }
            m.handle_datagram(Instant::ZERO, from[who], &bytes);
            outputs(&mut m, Instant::ZERO);
        }
    }
}

/// A receiver reporting through a merger holds the sender's datagrams that
/// beat the merger's ACCEPT, bounded, and takes only those of the session
/// the ACCEPT names; a stranger's are never held.
#[test]
fn early_data_from_the_sender_is_held_bounded_and_checked() {
    let now = Instant::ZERO;
    let mut cfg = SessionConfig::default().transport;
    cfg.feedback_via = Some(merger_addr(0));
    let mut r = Receiver::join(cfg, sender_addr(), now);
    let mut buf = Vec::new();
    let t = r.poll_transmit(now, &mut buf).expect("CONNECT");
    assert_eq!(t.destination, merger_addr(0), "the join goes to the merger");
    let data = |session: u64, offset: u64, payload: &[u8]| {
        datagram(
            session,
            offset as u32,
            &[Frame::Data(DataFrame {
                offset,
                timestamp: WireTimestamp(1),
                fin: false,
                message_end: false,
                payload,
            })],
        )
    };
    let chunk = vec![7u8; 1000];
    // Of the session: 200 datagrams of 1 kB, beyond the 128 KiB bound.
    for i in 0..200u64 {
        r.handle_datagram(now, sender_addr(), &data(7, i * 1000, &chunk));
    }
    // Forged: another session id from the sender's address, and the right
    // session id from a stranger.
    r.handle_datagram(now, sender_addr(), &data(9, 200_000, &chunk));
    r.handle_datagram(now, receiver_addr(9), &data(7, 201_000, &chunk));
    r.handle_datagram(now, merger_addr(0), &datagram(7, 0, &[accept(3)]));
    assert_eq!(r.session_id(), Some(7));
    assert_eq!(r.peer(), Some(merger_addr(0)));
    let held = r.stats().payload_bytes_received;
    assert!(
        (100_000..128 << 10).contains(&held),
        "held {held} bytes of the session's early data"
    );
    assert_eq!(r.readable(), held, "in order from offset 0");
    // After the ACCEPT: DATA from the sender is taken, from a stranger not.
    r.handle_datagram(now, sender_addr(), &data(7, held, &chunk));
    r.handle_datagram(now, receiver_addr(9), &data(7, held + 1000, &chunk));
    assert_eq!(r.readable(), held + 1000);
    // Its ACKs go to the merger.
    let mut saw_ack = false;
    while let Some(t) = r.poll_transmit(now + Duration::from_millis(50), &mut buf) {
        assert_eq!(t.destination, merger_addr(0));
        saw_ack = true;
        buf.clear();
    }
    assert!(saw_ack);
}

mod protected {
    //! Protected merger hops (`docs/security.md`, "Mergers"): every hop's
    //! handshake and keys, group keys passed down the tree, and the
    //! attacks a merger's children and strangers can try.

    use super::*;
    use fanout_core::stats::DropReason;
    use fanout_transport::protection::noise::public_key;
    use fanout_transport::wire::HeaderFlags;
    use std::cell::RefCell;
    use std::rc::Rc;

    const PSK: [u8; 32] = [9; 32];

    fn multicast(credentials: Credentials) -> SessionConfig {
        let mut c = SessionConfig {
            group: Some(GROUP.parse().unwrap()),
            ..SessionConfig::default()
        };
        c.transport.protection = Some(Protection::new(credentials, [200; 32]));
        c
    }

    /// A multicast net whose every node holds the pre-shared key `PSK`.
    fn psk_net(data: Vec<u8>, loss: Loss) -> Net {
        let psk = Credentials::with_psk(PSK);
        let mut net = Net::new(multicast(psk.clone()), data, loss);
        net.credentials = Some(psk);
        net
    }

    /// Datagrams seen on the wire in the clear that are not handshakes,
    /// by sender (a protected tree sends none).
    type Clear = Rc<RefCell<Vec<SocketAddr>>>;

    fn watch_clear(clear: &Clear) -> Loss {
        let clear = clear.clone();
        Box::new(move |from, _, bytes| {
            let Ok((h, body)) = Header::decode(bytes) else {
                return false;
            };
            let sealed =
                h.flags.contains(HeaderFlags::SEALED) || h.flags.contains(HeaderFlags::LISTED);
            let handshake = matches!(decode_frames(body).next(), Some(Ok(Frame::Handshake(_))));
            if !sealed && !handshake {
                clear.borrow_mut().push(from);
            }
            false
        })
    }

    fn receiver_at(net: &Net, at: SocketAddr) -> &Receiver {
        match net.nodes.get(&at) {
            Some(Node::Receiver(r)) => r,
            _ => panic!("no receiver at {at}"),
        }
    }

    #[test]
    fn a_protected_multicast_session_completes_through_a_two_level_tree() {
        let data = random_data(400_000, 11);
        let clear = Clear::default();
        let mut tree = psk_net(data.clone(), watch_clear(&clear));
        two_level_multicast_tree(&mut tree);
        tree.run(Duration::from_secs(60), |_| {});
        tree.check_completed();
        let st = tree.sender_stats();
        assert_eq!(st.members_joined, 1, "the tree is one member");
        assert!(st.fanout_copies == 0, "DATA went to the group: {st:?}");
        assert!(
            clear.borrow().is_empty(),
            "in the clear: {:?}",
            clear.borrow()
        );
        let m1 = tree.merger_stats(merger_addr(1));
        assert_eq!(m1.children_joined, 4);
        assert!(m1.acks_in > 0 && m1.acks_out > 0);
        for m in 0..=2 {
            let s = tree.merger_stats(merger_addr(m));
            assert_eq!(s.drops.get(DropReason::Unauthenticated), 0, "M{m}: {s:?}");
        }
    }

    #[test]
    fn long_term_keys_pin_each_hop_and_a_stranger_is_refused_by_its_merger() {
        let data = random_data(200_000, 12);
        let key = |i: u8| [i; 32];
        let (sender, m0, m1) = (key(1), key(2), key(3));
        let receivers = [key(4), key(5)];
        // Each hop pins the key of the host it joins and allows its
        // children's keys.
        let sender_creds = Credentials::default()
            .identity(sender)
            .allow(public_key(&m0));
        let mut tree = Net::new(
            multicast(sender_creds),
            data.clone(),
            Box::new(|_, _, _| false),
        );
        let merger = |at: SocketAddr, me, parent: SocketAddr, pin, allow: &[[u8; 32]]| {
            let mut c = Credentials::default()
                .identity(me)
                .sender_key(public_key(&sender))
                .pin_at(parent, public_key(&pin));
            for a in allow {
                c = c.allow(public_key(a));
            }
            MergerConfig {
                protection: Some(Protection::new(c, [at.port() as u8; 32])),
                ..merger_config(parent, allow.len())
            }
        };
        tree.merger(
            merger_addr(0),
            merger(merger_addr(0), m0, sender_addr(), sender, &[m1]),
        );
        tree.merger(
            merger_addr(1),
            merger(merger_addr(1), m1, merger_addr(0), m0, &receivers),
        );
        let stranger = key(6);
        for (i, k) in receivers.iter().chain([&stranger]).enumerate() {
            let at = receiver_addr(i);
            let mut cfg = SessionConfig::default().transport;
            cfg.feedback_via = Some(merger_addr(1));
            let c = Credentials::default()
                .identity(*k)
                .sender_key(public_key(&sender))
                .pin_at(merger_addr(1), public_key(&m1));
            cfg.protection = Some(Protection::new(c, [i as u8 + 50; 32]));
            let r = Receiver::join(cfg, sender_addr(), tree.now);
            tree.nodes.insert(at, Node::Receiver(Box::new(r)));
            if i < receivers.len() {
                tree.got.insert(at, Vec::new());
            }
        }
        tree.run(Duration::from_secs(60), |_| {});
        tree.check_delivery();
        let m1s = tree.merger_stats(merger_addr(1));
        assert_eq!(m1s.children_joined, 2, "{m1s:?}");
        assert!(m1s.drops.get(DropReason::NotAllowed) > 0, "{m1s:?}");
        let s = receiver_at(&tree, receiver_addr(2));
        assert!(s.peer().is_none(), "the stranger never joined");
    }

    #[test]
    fn forged_and_unsealed_datagrams_at_a_merger_change_nothing() {
        let data = random_data(300_000, 13);
        let mut tree = psk_net(data.clone(), Box::new(|_, _, _| false));
        two_level_multicast_tree(&mut tree);
        let victim = receiver_addr(0);
        let m1 = merger_addr(1);
        let mut injected = 0;
        tree.run(Duration::from_secs(60), |net| {
            if net.now < Instant::ZERO + Duration::from_millis(400) || injected >= 40 {
                return;
            }
            injected += 1;
            let t = net.now + HOP;
            let at = |net: &mut Net, from, to, bytes| {
                net.seq += 1;
                net.wire.insert((t, net.seq), (from, to, bytes));
            };
            // From the victim's address to its merger: an unsealed ACK
            // claiming everything, a RESET, a CLOSE; a datagram flagged
            // sealed that is not; and a stranger's unprotected CONNECT.
            let everything = ack(1 << 40, vec![]);
            let reset = Frame::Reset(CloseFrame {
                code: 1,
                reason: "forged",
            });
            let pn = injected;
            for f in [&everything, &reset] {
                at(net, victim, m1, datagram(0, pn, std::slice::from_ref(f)));
            }
            let mut sealed = datagram(0, pn, std::slice::from_ref(&everything));
            sealed[3] |= HeaderFlags::SEALED;
            at(net, victim, m1, sealed);
            let stranger: SocketAddr = "10.9.9.9:7000".parse().unwrap();
            at(net, stranger, m1, datagram(0, pn, &[connect()]));
            // To the victim as if from its merger and from the sender.
            at(
                net,
                m1,
                victim,
                datagram(0, pn, std::slice::from_ref(&reset)),
            );
            at(
                net,
                sender_addr(),
                victim,
                datagram(0, pn, std::slice::from_ref(&reset)),
            );
        });
        tree.check_delivery();
        let st = tree.sender_stats();
        assert_eq!(st.members_left, 0, "{st:?}");
        let m = tree.merger_stats(m1);
        assert_eq!(m.children_joined, 4);
        assert_eq!(
            m.children_left + m.children_evicted + m.children_expired,
            0,
            "{m:?}"
        );
        assert!(m.drops.get(DropReason::Unauthenticated) >= 3 * 40, "{m:?}");
        let r = receiver_at(&tree, victim).stats();
        assert!(r.drops.get(DropReason::Unauthenticated) >= 2 * 40, "{r:?}");
    }

    #[test]
    fn a_child_lost_below_a_merger_replaces_the_group_key_everywhere() {
        let data = random_data(600_000, 14);
        let mut tree = psk_net(data.clone(), Box::new(|_, _, _| false));
        // The lower mergers forget a silent child before the top one
        // would evict their stalled subtree.
        tree.merger(merger_addr(0), merger_config(sender_addr(), 2));
        for m in 1..=2 {
            let cfg = MergerConfig {
                child_timeout: Duration::from_secs(2),
                ..merger_config(merger_addr(0), 4)
            };
            tree.merger(merger_addr(m), cfg);
            for r in 0..4 {
                tree.receiver_via(receiver_addr((m - 1) * 4 + r), merger_addr(m));
            }
        }
        let lost = receiver_addr(5);
        tree.run(Duration::from_secs(90), |net| {
            if net.now >= Instant::ZERO + Duration::from_millis(300) && !net.dead.contains(&lost) {
                net.dead.push(lost);
            }
        });
        tree.check_delivery();
        let m2 = tree.merger_stats(merger_addr(2));
        assert_eq!(m2.children_expired, 1, "{m2:?}");
        assert!(m2.rekeys_sent >= 1, "{m2:?}");
        assert!(tree.merger_stats(merger_addr(0)).rekeys_sent >= 1);
        let st = tree.sender_stats();
        assert!(st.group_key_updates >= 1, "{st:?}");
        for m in 0..=2 {
            let s = tree.merger_stats(merger_addr(m));
            assert!(s.group_keys_passed >= 1, "M{m}: {s:?}");
        }
    }

    /// A datagram of `frames` from a peer holding `key`, sealed under it
    /// with packet number `pn` (header id `id`).
    fn sealed(
        key: &fanout_transport::protection::PacketKey,
        id: u64,
        pn: u32,
        frames: &[Frame],
    ) -> Vec<u8> {
        let mut d = datagram(id, pn, frames);
        key.seal(&mut d, 0, u64::from(pn));
        d
    }

    /// Appends what `r` has to read to `got`.
    fn read_into(r: &mut Receiver, got: &mut Vec<u8>) {
        let mut chunk = [0u8; 65536];
        loop {
            let n = r.read(&mut chunk);
            if n == 0 {
                return;
            }
            got.extend_from_slice(&chunk[..n]);
        }
    }

    /// The first frame of a clear datagram, if it is a HANDSHAKE.
    fn handshake_in(d: &[u8]) -> Option<Vec<u8>> {
        let (h, body) = Header::decode(d).ok()?;
        if h.flags.contains(HeaderFlags::SEALED) {
            return None;
        }
        match decode_frames(body).next()? {
            Ok(Frame::Handshake(m)) => Some(m.to_vec()),
            _ => None,
        }
    }

    /// A rogue merger holding the key: it joins the sender as a member
    /// (learning the group keys and the source key), answers a receiver's
    /// handshake with them, then sends it DATA and a coded REPAIR of its
    /// own making under their pair key. The receiver takes data only from the group: every
    /// forged DATA is dropped and counted, and what it reads is the
    /// sender's stream.
    #[test]
    fn a_rogue_merger_cannot_feed_its_child_data() {
        use fanout_transport::protection::answering::{Clear as Joined, Joiners};
        use fanout_transport::protection::joining::JoinHandshake;
        use fanout_transport::wire::AcceptFrame;
        let now = Instant::ZERO;
        let creds = Credentials::with_psk(PSK);
        let stream: Vec<u8> = (0..60_000u32).map(|i| (i % 251) as u8).collect();
        let mut sender = SessionSender::new(multicast(creds.clone()), 42, now);
        sender.write(&stream);
        let rogue = merger_addr(0);
        let child_at = receiver_addr(0);
        let mut cfg = SessionConfig::default().transport;
        cfg.feedback_via = Some(rogue);
        cfg.protection = Some(Protection::new(creds.clone(), [31; 32]));
        let mut child = Receiver::join(cfg, sender_addr(), now);
        let mut buf = Vec::new();
        let mut out = |e: &mut dyn Engine| {
            let mut v = Vec::new();
            drain(e, now, &mut buf, 256, |t, d| {
                v.push((t.destination, d.to_vec()))
            });
            v
        };
        // The rogue joins the sender.
        let mut connect_frames = Vec::new();
        connect().encode(&mut connect_frames);
        let up = JoinHandshake::start(&creds, [32; 32], &connect_frames).unwrap();
        sender.handle_datagram(now, rogue, &datagram(0, 0, &[Frame::Handshake(up.first())]));
        let answer = out(&mut sender)
            .into_iter()
            .find_map(|(to, d)| (to == rogue).then(|| handshake_in(&d)).flatten())
            .expect("the sender answered the rogue");
        let a = up.finish(&creds, &answer).expect("the rogue holds the key");
        let accept = decode_frames(&a.frames).find_map(|f| match f {
            Ok(Frame::Accept(acc)) => Some(acc),
            _ => None,
        });
        let token = accept.expect("admitted").token;
        // Its address proven, so data flows.
        let confirm = sealed(&a.pair.joiner_to_sender, token, 1, &[Frame::Padding]);
        sender.handle_datagram(now, rogue, &confirm);
        // It answers the child's handshake with what the sender handed it.
        let first = out(&mut child)
            .into_iter()
            .find_map(|(to, d)| (to == rogue).then(|| handshake_in(&d)).flatten())
            .expect("the child's handshake");
        let mut joiners = Joiners::new(std::sync::Arc::new(creds.clone()), [33; 32]);
        let mut hello = datagram(0, 0, &[Frame::Handshake(&first)]);
        let body = hello.split_off(fanout_transport::wire::HEADER_LEN);
        assert!(matches!(
            joiners.on_clear(now, child_at, &body),
            Ok(Joined::Join(_))
        ));
        joiners.admitted(child_at);
        let mut acc = Vec::new();
        Frame::Accept(AcceptFrame {
            max_payload: 1400,
            timestamp_echo: WireTimestamp(0),
            member_id: 1,
            start_offset: 0,
            token: 77,
        })
        .encode(&mut acc);
        let group: Vec<_> = a.group.iter().flatten().map(|g| g.frame()).collect();
        let source = a.source.expect("the source key");
        let child_keys = joiners.get_mut(&child_at).unwrap();
        let ans = child_keys
            .answer_join(&acc, &group, source)
            .unwrap()
            .to_vec();
        child.handle_datagram(now, rogue, &datagram(42, 0, &[Frame::Handshake(&ans)]));
        assert_eq!(child.member_id(), 1, "the child took the rogue's answer");
        let to_child = &joiners
            .get(&child_at)
            .unwrap()
            .keys()
            .unwrap()
            .sender_to_joiner;
        // The sender's multicast reaches the child; the rogue's forgeries
        // (the stream's first bytes and bytes ahead of it) come between.
        let mut got = Vec::new();
        let forged = [0xEEu8; 1000];
        for (i, offset) in [0u64, 5_000, 50_000].into_iter().enumerate() {
            let f = Frame::Data(DataFrame {
                offset,
                timestamp: WireTimestamp(0),
                fin: false,
                message_end: false,
                payload: &forged,
            });
            child.handle_datagram(now, rogue, &sealed(to_child, 42, 10 + i as u32, &[f]));
            for (to, d) in out(&mut sender) {
                if to.ip().is_multicast() {
                    child.handle_datagram(now, sender_addr(), &d);
                }
            }
            read_into(&mut child, &mut got);
        }
        // And a coded repair symbol of its making for the stream's start.
        let block = fanout_transport::fec::BlockGeometry::new(0, 4, 1000, 1000, 1 << 40).unwrap();
        let symbol = [0xEEu8; 1000];
        let repair = Frame::Repair(fanout_transport::wire::RepairFrame {
            block,
            id: 0,
            symbol: &symbol,
        });
        child.handle_datagram(now, rogue, &sealed(to_child, 42, 20, &[repair]));
        read_into(&mut child, &mut got);
        assert!(!got.is_empty(), "the sender's data arrived");
        assert!(got == stream[..got.len()], "nothing but the sender's bytes");
        let drops = child.stats().drops.get(DropReason::Unauthenticated);
        assert!(drops >= 4, "every forged DATA and REPAIR counted: {drops}");
        assert!(!child.is_closed());
    }

    /// Losses below a merger of a protected multicast session are repaired
    /// from the group (where the sender's lists vouch for the data), never
    /// by unicast to the merger, whose children would have to take its
    /// word for the bytes — even where the repair policy would send one
    /// member's loss by unicast (below 5% of the receivers): here twenty
    /// receivers join the sender directly and one through a merger, and
    /// only that one loses.
    #[test]
    fn a_protected_tree_repairs_from_the_group() {
        let data = random_data(400_000, 16);
        let mut rng = Rng::new(17);
        let lossy_one = receiver_addr(30);
        let lossy: Loss = Box::new(move |_, to, _| to == lossy_one && rng.bernoulli(0.03));
        let mut tree = psk_net(data.clone(), lossy);
        let mut config = multicast(Credentials::with_psk(PSK));
        config.wait_for_members = 21;
        let sender = SessionSender::new(config, 42, Instant::ZERO);
        tree.nodes
            .insert(sender_addr(), Node::Sender(Box::new(sender)));
        for r in 0..20 {
            tree.receiver(receiver_addr(r), sender_addr());
        }
        tree.merger(merger_addr(0), merger_config(sender_addr(), 1));
        tree.receiver_via(lossy_one, merger_addr(0));
        tree.run(Duration::from_secs(60), |_| {});
        tree.check_completed();
        let st = tree.sender_stats();
        assert!(st.multicast_repairs > 0, "{st:?}");
        assert_eq!(st.unicast_repairs, 0, "{st:?}");
    }
}
