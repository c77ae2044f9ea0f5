//! Story tests of one-to-many sessions (TCP-SMO): a sender, N members that
//! joined by CONNECT, a multicast wire with per-member and shared loss.

use fanout_core::time::Instant;
use fanout_core::{drain, Engine, Rng};
use fanout_transport::session::{
    JoinPolicy, ReleasePolicy, SessionConfig, SessionEvent, SessionSender,
};
use fanout_transport::wire::WireTimestamp;
use fanout_transport::{CloseReason, Receiver};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

#[path = "common/fixed_rate.rs"]
mod fixed_rate;

const ONE_WAY: Duration = Duration::from_millis(10);
const GROUP: &str = "239.1.1.1:7000";
const SENDER: &str = "10.0.0.1:5000";

fn member_addr(i: usize) -> SocketAddr {
    format!("10.0.1.{}:7000", i + 1).parse().unwrap()
}

/// Decides whether a datagram is lost: (member index or None for the sender
/// side, datagram bytes, was it multicast) → lost?
type Loss = Box<dyn FnMut(Option<usize>, &[u8], bool) -> bool>;

/// Datagrams in flight: (arrival, sequence) → (member or None for the sender, source, bytes).
type Wire = BTreeMap<(Instant, u64), (Option<usize>, SocketAddr, Vec<u8>)>;

struct Net {
    now: Instant,
    sender: SessionSender,
    members: Vec<Receiver>,
    /// Members that stopped hearing anything (killed).
    dead: Vec<bool>,
    got: Vec<Vec<u8>>,
    wire: Wire,
    seq: u64,
    loss: Loss,
    data: Vec<u8>,
    written: usize,
    events: Vec<SessionEvent>,
    /// Session relay: per member, upstream bytes still to write and
    /// whether to finish the upstream stream once they are written.
    up: Vec<(Vec<u8>, bool)>,
    /// Upstream bytes the sender's application read, by member id.
    up_in: BTreeMap<u64, Vec<u8>>,
    /// The sender's application reads upstream bytes as they come.
    reads_upstream: bool,
    /// Hold the end of the session's stream back (it is written, not
    /// finished) while this is set.
    hold_fin: bool,
    /// What the sender sent to addresses that are not members'.
    elsewhere: Vec<(SocketAddr, Vec<u8>)>,
}

impl Net {
    fn new(config: SessionConfig, n: usize, data: Vec<u8>, loss: Loss) -> Net {
        let now = Instant::ZERO;
        let members = (0..n)
            .map(|_| Receiver::join(config.transport.clone(), SENDER.parse().unwrap(), now))
            .collect();
        Net {
            sender: SessionSender::new(config, 42, now),
            members,
            dead: vec![false; n],
            got: vec![Vec::new(); n],
            now,
            wire: BTreeMap::new(),
            seq: 0,
            loss,
            data,
            written: 0,
            events: Vec::new(),
            up: vec![(Vec::new(), false); n],
            up_in: BTreeMap::new(),
            reads_upstream: true,
            hold_fin: false,
            elsewhere: Vec::new(),
        }
    }

    fn send(
        &mut self,
        to_member: Option<usize>,
        from: SocketAddr,
        bytes: Vec<u8>,
        multicast: bool,
    ) {
        if (self.loss)(to_member, &bytes, multicast) {
            return;
        }
        self.seq += 1;
        self.wire
            .insert((self.now + ONE_WAY, self.seq), (to_member, from, bytes));
    }

    fn pump(&mut self) -> Option<Instant> {
        let mut buf = Vec::new();
        if self.written < self.data.len() {
            self.written += self.sender.write(&self.data[self.written..]);
        }
        if self.written == self.data.len() && !self.hold_fin {
            self.sender.finish();
        }
        let mut out = Vec::new();
        let mut next = drain(&mut self.sender, self.now, &mut buf, 256, |t, b| {
            out.push((t.destination, b.to_vec()))
        });
        let group: SocketAddr = GROUP.parse().unwrap();
        for (dest, bytes) in out {
            if dest == group {
                for i in 0..self.members.len() {
                    self.send(Some(i), SENDER.parse().unwrap(), bytes.clone(), true);
                }
            } else if let Some(i) = (0..self.members.len()).find(|&i| member_addr(i) == dest) {
                self.send(Some(i), SENDER.parse().unwrap(), bytes, false);
            } else {
                self.elsewhere.push((dest, bytes));
            }
        }
        for i in 0..self.members.len() {
            let (pending, finish) = &mut self.up[i];
            let n = self.members[i].write_upstream(pending);
            pending.drain(..n);
            if pending.is_empty() && *finish {
                self.members[i].finish_upstream();
            }
            let mut chunk = [0u8; 8192];
            loop {
                let n = self.members[i].read(&mut chunk);
                if n == 0 {
                    break;
                }
                self.got[i].extend_from_slice(&chunk[..n]);
            }
            let mut out = Vec::new();
            let t = drain(&mut self.members[i], self.now, &mut buf, 64, |_, b| {
                out.push(b.to_vec())
            });
            for bytes in out {
                if !self.dead[i] {
                    self.send(None, member_addr(i), bytes, false);
                }
            }
            next = [next, t].into_iter().flatten().min();
        }
        let mut readable = Vec::new();
        while let Some(e) = self.sender.poll_event() {
            if let SessionEvent::Upstream { id, .. } = e {
                readable.push(id);
            }
            self.events.push(e);
        }
        if self.reads_upstream {
            // As an application would: on the event, read until empty.
            let mut chunk = [0u8; 1000];
            for id in readable {
                loop {
                    let n = self.sender.read_upstream(id, &mut chunk);
                    if n == 0 {
                        break;
                    }
                    self.up_in.entry(id.0).or_default().extend(&chunk[..n]);
                }
            }
        }
        next
    }

    /// A new member joins now.
    fn join(&mut self, transport: &fanout_transport::TransportConfig) {
        self.members.push(Receiver::join(
            transport.clone(),
            SENDER.parse().unwrap(),
            self.now,
        ));
        self.dead.push(false);
        self.got.push(Vec::new());
        self.up.push((Vec::new(), false));
    }

    fn run(&mut self, limit: Duration) {
        let end = Instant::ZERO + limit;
        while self.now < end {
            let timer = self.pump();
            if self.sender.close_reason().is_some() && self.wire.is_empty() {
                return;
            }
            let wire = self.wire.keys().next().map(|k| k.0);
            // Never past `end`: a later call resumes from there.
            let next = [timer, wire].into_iter().flatten().min().unwrap_or(end);
            self.now = self.now.max(next.min(end));
            while let Some(e) = self.wire.first_entry() {
                if e.key().0 > self.now {
                    break;
                }
                let (to, from, bytes) = e.remove();
                match to {
                    Some(i) if !self.dead[i] => {
                        self.members[i].handle_datagram(self.now, from, &bytes)
                    }
                    Some(_) => {}
                    None => self.sender.handle_datagram(self.now, from, &bytes),
                }
            }
        }
    }
}

fn config() -> SessionConfig {
    SessionConfig {
        group: Some(GROUP.parse().unwrap()),
        ..SessionConfig::default()
    }
}

fn random_data(n: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0; n];
    Rng::new(seed).fill(&mut v);
    v
}

fn is_data(bytes: &[u8]) -> bool {
    let Ok((_, body)) = fanout_transport::wire::Header::decode(bytes) else {
        return false;
    };
    matches!(
        fanout_transport::wire::decode_frames(body).next(),
        Some(Ok(fanout_transport::wire::Frame::Data(_)))
    )
}

/// Whether `bytes` is a datagram whose frames `pick` accepts (all of them
/// decoded).
fn frames_are(bytes: &[u8], pick: impl Fn(&[fanout_transport::wire::Frame<'_>]) -> bool) -> bool {
    fanout_transport::wire::Header::decode(bytes).is_ok_and(|(_, body)| {
        let frames: Result<Vec<_>, _> = fanout_transport::wire::decode_frames(body).collect();
        frames.is_ok_and(|f| pick(&f))
    })
}

/// A loss that drops the first datagram `which` picks (destination member,
/// or `None` for the sender; bytes), and how many it dropped.
fn lose_first(
    which: impl Fn(Option<usize>, &[u8]) -> bool + 'static,
) -> (Loss, std::rc::Rc<std::cell::Cell<u32>>) {
    let dropped = std::rc::Rc::new(std::cell::Cell::new(0));
    let count = dropped.clone();
    let loss: Loss = Box::new(move |to, b, _| {
        let drop = count.get() == 0 && which(to, b);
        count.set(count.get() + u32::from(drop));
        drop
    });
    (loss, dropped)
}

fn is_accept(b: &[u8]) -> bool {
    use fanout_transport::wire::Frame;
    frames_are(b, |f| f.iter().any(|f| matches!(f, Frame::Accept(_))))
}

#[test]
fn every_member_gets_the_stream_and_data_is_multicast_once() {
    let data = random_data(1 << 20, 1);
    let cfg = SessionConfig {
        wait_for_members: 5,
        ..config()
    };
    let mut net = Net::new(cfg, 5, data.clone(), Box::new(|_, _, _| false));
    net.run(Duration::from_secs(30));
    for (i, g) in net.got.iter().enumerate() {
        assert!(
            *g == data,
            "member {i}: {} of {} bytes",
            g.len(),
            data.len()
        );
    }
    assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
    let st = net.sender.stats();
    let segments = data
        .len()
        .div_ceil(config().transport.max_payload() as usize) as u64;
    // The FIN rides on the last data segment.
    assert_eq!(st.data_segments, segments, "each segment multicast once");
    assert_eq!(st.multicast_repairs + st.unicast_repairs, 0);
    assert_eq!(st.members_joined, 5);
    assert!(net.events.contains(&SessionEvent::Finished));
    assert!(net.members.iter().all(|m| m.is_finished()));
}

/// The sender asks each member (ACK_FREQUENCY) to hold input no longer
/// than an eighth of its round trip, rounded down to a power of two, and
/// holds its own no longer than the least it asked: on a 20 ms path
/// without a queue, 2 048 µs; before any ACK, nothing is asked.
#[test]
fn runtimes_may_hold_input_an_eighth_of_the_round_trip() {
    let mut net = Net::new(
        config(),
        3,
        random_data(3_000_000, 11),
        Box::new(|_, _, _| false),
    );
    assert_eq!(net.sender.max_wake_delay(), None);
    assert!(net.members.iter().all(|m| m.max_wake_delay().is_none()));
    net.run(Duration::from_millis(300));
    let bound = Some(Duration::from_micros(2048));
    assert_eq!(net.sender.max_wake_delay(), bound);
    for m in &net.members {
        assert_eq!(m.max_wake_delay(), bound);
    }
    net.run(Duration::from_secs(30));
    assert!(net.got.iter().all(|g| *g == net.data));
}

/// A REPAIR symbol for a block the member already holds means the sender
/// missed the ACK that said so: the member acknowledges at once, as for a
/// duplicate segment (RFC 5681 §4.2). Without it, a sender blocked at its
/// window's edge after that ACK was lost resent symbols at every RTO and
/// evicted the member as stalled (seen in the lab with 2% loss both ways).
#[test]
fn a_repair_of_a_block_already_held_is_acknowledged_at_once() {
    use fanout_transport::fec::BlockGeometry;
    use fanout_transport::wire::{decode_frames, Frame, Header, RepairFrame};
    let mut net = Net::new(
        config(),
        1,
        random_data(30_000_000, 5),
        Box::new(|_, _, _| false),
    );
    net.run(Duration::from_millis(150));
    let got = net.got[0].len();
    assert!((8_000..30_000_000).contains(&got), "{got} bytes so far");
    let is_ack = |d: &[u8]| {
        let Ok((_, body)) = Header::decode(d) else {
            return false;
        };
        decode_frames(body).any(|f| matches!(f, Ok(Frame::Ack(_))))
    };
    let member = &mut net.members[0];
    let mut buf = Vec::new();
    drain(member, net.now, &mut buf, 64, |_, _| {});
    let symbol = [0u8; 1000];
    let repair = plain_datagram(
        42,
        1 << 20,
        &Frame::Repair(RepairFrame {
            block: BlockGeometry::covering(0..4_000, 1_000).unwrap(),
            id: 0,
            symbol: &symbol,
        }),
    );
    member.handle_datagram(net.now, SENDER.parse().unwrap(), &repair);
    let mut acks = 0;
    drain(member, net.now, &mut buf, 64, |_, d| {
        acks += usize::from(is_ack(d))
    });
    assert_eq!(
        acks,
        1,
        "no ACK for a repair of held data: {:?}",
        member.stats()
    );
}

#[test]
fn independent_losses_are_repaired_by_unicast() {
    let data = random_data(600_000, 2);
    let mut rng = Rng::new(7);
    // 5 of 20 members lose 3% of what reaches them, independently.
    let loss: Loss =
        Box::new(move |to, _, _| matches!(to, Some(i) if i < 5) && rng.bernoulli(0.03));
    let cfg = SessionConfig {
        wait_for_members: 20,
        ..config()
    };
    let mut net = Net::new(cfg, 20, data.clone(), loss);
    net.run(Duration::from_secs(60));
    for (i, g) in net.got.iter().enumerate() {
        assert!(
            *g == data,
            "member {i}: {} of {} bytes",
            g.len(),
            data.len()
        );
    }
    let st = net.sender.stats();
    // A segment missed by one member in 20 (= the 5% threshold) is repaired
    // by unicast; only coincident losses at two or more go by multicast.
    assert!(st.unicast_repairs > 0, "{st:?}");
    assert!(st.unicast_repairs > 5 * st.multicast_repairs, "{st:?}");
}

#[test]
fn a_loss_shared_by_all_is_repaired_by_multicast() {
    let data = random_data(300_000, 3);
    // The group copy of every 50th multicast DATA datagram is lost for all.
    let mut count = 0u64;
    let mut dropping = false;
    let loss: Loss = Box::new(move |to, b, multicast| {
        if to == Some(0) && multicast && is_data(b) {
            count += 1;
            dropping = count.is_multiple_of(50);
        }
        multicast && dropping && to.is_some()
    });
    let cfg = SessionConfig {
        wait_for_members: 8,
        ..config()
    };
    let mut net = Net::new(cfg, 8, data.clone(), loss);
    net.run(Duration::from_secs(60));
    for (i, g) in net.got.iter().enumerate() {
        assert!(*g == data, "member {i}");
    }
    let st = net.sender.stats();
    assert!(st.multicast_repairs > 0, "{st:?}");
}

#[test]
fn a_silent_member_is_evicted_and_the_rest_complete() {
    let data = random_data(4 << 20, 4);
    let cfg = SessionConfig {
        wait_for_members: 6,
        stall_timeout: Duration::from_secs(2),
        ..config()
    };
    let mut net = Net::new(cfg, 6, data.clone(), Box::new(|_, _, _| false));
    net.run(Duration::from_millis(70));
    assert!(
        net.got[3].len() < data.len() / 4,
        "kill must fall early in the transfer"
    );
    net.dead[3] = true;
    net.run(Duration::from_secs(60));
    for i in [0, 1, 2, 4, 5] {
        assert!(
            net.got[i] == data,
            "member {i}: {} of {}; events {:?}; stats {:?}; now {:?}",
            net.got[i].len(),
            data.len(),
            net.events,
            net.sender.stats(),
            net.now
        );
    }
    assert!(net.events.iter().any(|e| matches!(e, SessionEvent::MemberLeft { reason, .. } if reason.contains("stalled") || reason.contains("unreachable"))), "{:?}", net.events);
    assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
}

#[test]
fn a_live_late_joiner_starts_at_the_current_position() {
    let data = random_data(8 << 20, 5);
    let cfg = SessionConfig {
        wait_for_members: 2,
        join: JoinPolicy::Live,
        ..config()
    };
    let mut net = Net::new(cfg.clone(), 2, data.clone(), Box::new(|_, _, _| false));
    net.run(Duration::from_millis(80));
    assert!(
        net.got[0].len() < data.len() / 2,
        "join must fall mid-stream"
    );
    net.join(&cfg.transport);
    net.run(Duration::from_secs(60));
    let start = net
        .events
        .iter()
        .find_map(|e| match e {
            SessionEvent::MemberJoined { id, start, .. } if id.0 == 3 => Some(*start),
            _ => None,
        })
        .expect("third member joined");
    assert!(start > 0);
    assert!(
        net.got[2] == data[start as usize..],
        "late joiner gets the stream from {start}"
    );
    assert!(net.got[0] == data && net.got[1] == data);
}

#[test]
fn catch_up_admits_a_late_joiner_at_the_current_position() {
    let data = random_data(8 << 20, 6);
    let cfg = SessionConfig {
        wait_for_members: 2,
        join: JoinPolicy::CatchUp,
        transport: fanout_transport::TransportConfig {
            send_buffer_bytes: 1 << 20,
            ..config().transport
        },
        ..config()
    };
    let mut net = Net::new(cfg.clone(), 2, data.clone(), Box::new(|_, _, _| false));
    // Members 1 and 2 join at once (start 0) and the data starts (once
    // their addresses are validated); member 3 arrives just after the
    // first segments went out: it starts at the send position (small but
    // > 0) instead of waiting for data never in flight to it.
    let mut t = Duration::ZERO;
    while net.sender.snd_nxt() == 0 && t < Duration::from_secs(1) {
        t += Duration::from_millis(1);
        net.run(t);
    }
    net.join(&cfg.transport);
    // Run until every member read past the 1 MiB send buffer (so offset 0
    // was released), in 10 ms steps of virtual time.
    while net.got.iter().map(Vec::len).min().unwrap() < (3 << 19) && t < Duration::from_secs(30) {
        t += Duration::from_millis(10);
        net.run(t);
    }
    let released = net.got[0].len();
    assert!(
        released > (1 << 20) && released < data.len() / 2,
        "offset 0 left the 1 MiB send buffer mid-stream ({released} bytes read)"
    );
    // Member 4 joins now: admitted (FromStart would refuse it) at the
    // current send position, which its ACCEPT tells it.
    let before = net.sender.snd_nxt();
    net.join(&cfg.transport);
    net.run(Duration::from_secs(60));
    let starts: BTreeMap<u64, u64> = net
        .events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::MemberJoined { id, start, .. } => Some((id.0, *start)),
            _ => None,
        })
        .collect();
    assert_eq!(starts.len(), 4, "{starts:?}");
    assert_eq!((starts[&1], starts[&2]), (0, 0));
    assert!(starts[&3] > 0 && starts[&3] < 1 << 20, "{starts:?}");
    let start = starts[&4];
    assert!(
        start >= before && start > released as u64,
        "late joiner starts at the send position: {start} (snd_nxt was {before})"
    );
    for (i, &s) in starts.values().enumerate() {
        assert_eq!(net.members[i].start_offset(), s);
        assert!(
            net.got[i] == data[s as usize..],
            "member {} gets the stream from {s}",
            i + 1
        );
    }
    assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
}

/// Regression: a member whose ACCEPT is lost retries its CONNECT under
/// session id 0; the sender once dropped the retry as `unknown_session`,
/// the member never joined and was evicted as stalled.
#[test]
fn a_member_whose_accept_was_lost_still_joins() {
    let data = random_data(1 << 20, 8);
    let (loss, accepts_dropped) = lose_first(|to, b| to == Some(1) && is_accept(b));
    let mut net = Net::new(config(), 3, data.clone(), loss);
    net.run(Duration::from_secs(30));
    assert_eq!(accepts_dropped.get(), 1);
    for (i, got) in net.got.iter().enumerate() {
        assert!(*got == data, "member {} has the whole stream", i + 1);
    }
    assert_eq!(net.sender.stats().members_left, 0);
    assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
}

/// The datagram that confirms a member's ACCEPT (echoing its token, which
/// validates its address) is lost: the member sends it again until data
/// comes, so the session, which sends nothing before a member is
/// validated, starts within a few round trips, not at the first keepalive
/// seconds later.
#[test]
fn a_member_whose_confirmation_was_lost_confirms_again() {
    let data = random_data(64 << 10, 9);
    let (loss, confirms_dropped) = lose_first(|to, b| {
        use fanout_transport::wire::Frame;
        to.is_none() && frames_are(b, |f| f.iter().all(|f| matches!(f, Frame::Padding)))
    });
    let mut net = Net::new(config(), 1, data.clone(), loss);
    // The join's round trip (20 ms), the first retry's wait (200 ms) and
    // the first data's way.
    net.run(Duration::from_millis(300));
    assert_eq!(confirms_dropped.get(), 1);
    assert!(!net.got[0].is_empty(), "data flows within 300 ms");
    net.run(Duration::from_secs(30));
    assert!(net.got[0] == data);
    assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
}

/// A receiver that started a second before its sender has backed its
/// CONNECTs off (0.2, 0.4, 0.8 s); when the ACCEPT of the first to arrive
/// is lost, the next would come 1.6 s later. The sender's announcements
/// say it is up: the receiver joins again within the first retry's wait.
#[test]
fn a_receiver_started_first_joins_again_soon_once_the_sender_announces() {
    let data = random_data(64 << 10, 10);
    let clock = std::rc::Rc::new(std::cell::Cell::new(0u64));
    let seen = clock.clone();
    let (mut lose_accept, accepts_dropped) = lose_first(|to, b| to.is_some() && is_accept(b));
    let loss: Loss = Box::new(move |to, b, multicast| {
        // Nobody listens for the first second.
        (to.is_none() && seen.get() < 1000) || lose_accept(to, b, multicast)
    });
    let config = SessionConfig {
        announce_every: Some(Duration::from_secs(1)), // as the CLI's
        ..config()
    };
    let mut net = Net::new(config, 1, data.clone(), loss);
    let mut first_data = None;
    for ms in (0..4000).step_by(10) {
        clock.set(ms);
        net.run(Duration::from_millis(ms));
        if !net.got[0].is_empty() {
            first_data = Some(ms);
            break;
        }
    }
    assert_eq!(accepts_dropped.get(), 1);
    // CONNECT at 1.4 s, its ACCEPT lost; an announcement comes within
    // 0.25 s, the CONNECT 0.2 s after it.
    assert!(first_data.is_some_and(|t| t < 2000), "{first_data:?}");
    net.run(Duration::from_secs(30));
    assert!(net.got[0] == data);
}

/// Regression: a bulk (`FromStart`) member admitted after data went out,
/// while offset 0 is still buffered, starts at 0; what it missed was once
/// counted in flight to it with no timer — repaired only after an RTO armed
/// by a later send, or never when no new data followed. It is now repaired
/// at once like any loss.
#[test]
fn from_start_joiner_after_the_first_sends_gets_the_missed_prefix() {
    let data = random_data(6 << 20, 7);
    let cfg = SessionConfig {
        wait_for_members: 2,
        join: JoinPolicy::FromStart,
        ..config()
    };
    // Hold the first two members' ACKs back once data flows, so offset 0
    // stays buffered while the third member joins.
    let hold = std::rc::Rc::new(std::cell::Cell::new(false));
    let held = hold.clone();
    let is_ack = |b: &[u8]| {
        fanout_transport::wire::Header::decode(b).is_ok_and(|(_, body)| {
            fanout_transport::wire::decode_frames(body)
                .any(|f| matches!(f, Ok(fanout_transport::wire::Frame::Ack(_))))
        })
    };
    let loss: Loss = Box::new(move |to, b, _| to.is_none() && held.get() && is_ack(b));
    let mut net = Net::new(cfg.clone(), 2, data.clone(), loss);
    let mut t = Duration::ZERO;
    while net.sender.snd_nxt() == 0 && t < Duration::from_secs(1) {
        t += Duration::from_micros(100);
        net.run(t);
    }
    assert!(net.sender.snd_nxt() > 0, "data went out before the join");
    hold.set(true);
    net.join(&cfg.transport);
    net.run(t + Duration::from_millis(20));
    hold.set(false);
    net.run(Duration::from_secs(30));
    let joined: Vec<u64> = net
        .events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::MemberJoined { start, .. } => Some(*start),
            _ => None,
        })
        .collect();
    assert_eq!(joined, [0, 0, 0], "all three start at offset 0");
    // Repaired at once, not after a retransmission timeout.
    assert_eq!(net.sender.stats().rto_events, 0);
    for (i, got) in net.got.iter().enumerate() {
        assert!(
            *got == data,
            "member {} has the whole stream ({} of {} bytes; {:?})",
            i + 1,
            got.len(),
            data.len(),
            net.sender.close_reason()
        );
    }
    assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
}

/// A crowd of receivers started together (a rollout to hundreds of
/// hosts) is admitted in its first round trips: past 16 unvalidated joins
/// each join gets a stateless RETRY, and the RETRY budget's burst answers
/// all of them at once. Counted per 100 ms instead, a tenth were answered,
/// the rest came back together at their handshake timer, and a session
/// waiting for all of them started with half.
#[test]
fn two_hundred_fifty_receivers_started_together_are_all_admitted_at_once() {
    let data = random_data(256 << 10, 32);
    let cfg = SessionConfig {
        wait_for_members: 250,
        ..config()
    };
    let mut net = Net::new(cfg, 250, data.clone(), Box::new(|_, _, _| false));
    // Three round trips of 20 ms: CONNECT, RETRY, CONNECT under its token.
    net.run(Duration::from_millis(100));
    let st = net.sender.stats();
    assert_eq!(st.members_joined, 250, "{st:?}");
    assert!(st.retries_sent >= 250 - 16, "{st:?}");
    net.run(Duration::from_secs(30));
    assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
    assert!(net.got.iter().all(|g| *g == data));
}

/// A join flood on an unprotected session: once 16 members are
/// unvalidated, unproven joins get a stateless RETRY (no longer than the
/// CONNECT) and leave no state; honest joiners answer it with a CONNECT
/// under its token, are admitted with their address validated at once,
/// and get the whole stream.
#[test]
fn a_join_flood_gets_stateless_retries_and_honest_joiners_still_get_in() {
    let data = random_data(1 << 20, 30);
    let cfg = SessionConfig {
        wait_for_members: 2,
        ..config()
    };
    let mut net = Net::new(cfg.clone(), 2, data.clone(), Box::new(|_, _, _| false));
    let mut buf = Vec::new();
    let mut connect_len = 0;
    for i in 0..100 {
        let forged: SocketAddr = format!("10.9.0.{}:1", i + 1).parse().unwrap();
        let mut r = Receiver::join(cfg.transport.clone(), SENDER.parse().unwrap(), net.now);
        buf.clear();
        r.poll_transmit(net.now, &mut buf).unwrap();
        connect_len = buf.len();
        net.sender.handle_datagram(net.now, forged, &buf);
    }
    net.run(Duration::from_secs(60));
    assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
    assert!(net.got.iter().all(|g| *g == data));
    let st = net.sender.stats();
    assert_eq!(st.members_joined, 16 + 2, "16 forged joins, then retries");
    assert_eq!(
        st.retries_sent,
        84 + 2,
        "the rest of the flood, and the honest two"
    );
    assert_eq!(st.unvalidated_evicted, 16);
    let retries: Vec<usize> = net
        .elsewhere
        .iter()
        .filter(|(_, d)| {
            let (_, body) = fanout_transport::wire::Header::decode(d).unwrap();
            matches!(
                fanout_transport::wire::decode_frames(body).next(),
                Some(Ok(fanout_transport::wire::Frame::Retry(_)))
            )
        })
        .map(|(_, d)| d.len())
        .collect();
    assert_eq!(retries.len(), 84, "one RETRY per CONNECT of the flood");
    assert!(
        retries.iter().all(|n| *n <= connect_len),
        "{retries:?} vs {connect_len}"
    );
}

#[test]
fn hostile_joins_and_acks_are_bounded_and_counted() {
    let cfg = SessionConfig {
        max_members: 10,
        ..config()
    };
    let mut s = SessionSender::new(cfg.clone(), 42, Instant::ZERO);
    let mut buf = Vec::new();
    let now = Instant::ZERO;
    for i in 0..200 {
        let addr: SocketAddr = format!("10.9.{}.{}:1", i / 200, i % 200 + 1)
            .parse()
            .unwrap();
        let mut r = Receiver::join(cfg.transport.clone(), SENDER.parse().unwrap(), now);
        buf.clear();
        r.poll_transmit(now, &mut buf).unwrap();
        s.handle_datagram(now, addr, &buf);
    }
    assert_eq!(s.member_count(), 10);
    assert_eq!(
        s.stats()
            .drops
            .get(fanout_core::stats::DropReason::LimitExceeded),
        190
    );
    // An ACK from a stranger.
    let mut ack = plain_datagram(
        42,
        1,
        &fanout_transport::wire::Frame::Ack(fanout_transport::wire::AckFrame {
            cumulative: 1 << 30,
            window: 0,
            timestamp_echo: WireTimestamp(0),
            ack_delay_us: 0,
            sack: vec![],
        }),
    );
    s.handle_datagram(now, "10.200.0.1:1".parse().unwrap(), &ack);
    assert_eq!(
        s.stats()
            .drops
            .get(fanout_core::stats::DropReason::UnknownPeer),
        1
    );
    // ... one from a member under the public session id instead of its
    // token: anybody could send that ...
    let member: SocketAddr = "10.9.0.1:1".parse().unwrap();
    s.handle_datagram(now, member, &ack);
    assert_eq!(
        s.stats()
            .drops
            .get(fanout_core::stats::DropReason::UnknownSession),
        1
    );
    // ... and one from a member under its token, for data never sent.
    let token = token_of(&s, member);
    ack[4..12].copy_from_slice(&token.to_be_bytes());
    s.handle_datagram(now, member, &ack);
    assert_eq!(
        s.stats()
            .drops
            .get(fanout_core::stats::DropReason::AckOfUnsent),
        1
    );
}

#[test]
fn a_join_with_a_window_below_two_segments_is_refused_with_a_reason() {
    let cfg = config();
    let mut s = SessionSender::new(cfg.clone(), 42, Instant::ZERO);
    let now = Instant::ZERO;
    let mss = cfg.transport.max_payload();
    for (i, window) in [0, 1, 2 * mss - 1, 2 * mss].into_iter().enumerate() {
        let connect = plain_datagram(
            0,
            0,
            &fanout_transport::wire::Frame::Connect(fanout_transport::wire::ConnectFrame {
                max_payload: mss,
                window,
                timestamp: WireTimestamp(0),
                resume_from: 0,
            }),
        );
        s.handle_datagram(now, member_addr(i), &connect);
    }
    assert_eq!(s.member_count(), 1, "only the two-segment window joins");
    assert_eq!(
        s.stats()
            .drops
            .get(fanout_core::stats::DropReason::LimitExceeded),
        3
    );
    let mut refusals = Vec::new();
    fanout_core::drain(&mut s, now, &mut Vec::new(), 64, |t, d| {
        if let Ok((_, body)) = fanout_transport::wire::Header::decode(d) {
            if let Some(Ok(fanout_transport::wire::Frame::Reset(r))) =
                fanout_transport::wire::decode_frames(body).next()
            {
                refusals.push((t.destination, r.reason.to_string()));
            }
        }
    });
    assert_eq!(refusals.len(), 3, "{refusals:?}");
    assert!(refusals
        .iter()
        .all(|(_, why)| why == "receive window below two segments"));
}

#[test]
fn nobody_without_a_members_token_can_speak_for_it() {
    // A host that knows the public session id (every multicast datagram
    // carries it) but cannot receive at a member's address forges, from
    // that address, a RESET, an ACK claiming everything with a closed
    // window, and a resume CONNECT: all dropped, the member unaffected.
    let mut net = Net::new(
        config(),
        2,
        random_data(400_000, 21),
        Box::new(|_, _, _| false),
    );
    net.run(Duration::from_millis(50));
    assert_eq!(net.sender.member_count(), 2);
    let victim = member_addr(0);
    let forged = |frame: fanout_transport::wire::Frame<'_>| plain_datagram(42, 1 << 20, &frame);
    let reset = forged(fanout_transport::wire::Frame::Reset(
        fanout_transport::wire::CloseFrame {
            code: 0,
            reason: "forged",
        },
    ));
    let ack = forged(fanout_transport::wire::Frame::Ack(
        fanout_transport::wire::AckFrame {
            cumulative: 0,
            window: 0,
            timestamp_echo: WireTimestamp(0),
            ack_delay_us: 0,
            sack: vec![],
        },
    ));
    let before = net.sender.stats().drops.clone();
    let now = net.now;
    for d in [&reset, &ack] {
        net.sender.handle_datagram(now, victim, d);
    }
    let unknown = fanout_core::stats::DropReason::UnknownSession;
    assert_eq!(
        net.sender.stats().drops.get(unknown) - before.get(unknown),
        2
    );
    assert_eq!(net.sender.member_count(), 2, "the RESET evicted nobody");
    net.run(Duration::from_secs(10));
    assert!(net.got.iter().all(|g| g.len() == 400_000), "both completed");
    // The same RESET under the member's own token is the member's: taken.
    let mut net = Net::new(
        config(),
        2,
        random_data(400_000, 22),
        Box::new(|_, _, _| false),
    );
    net.run(Duration::from_millis(50));
    let mut own = reset.clone();
    own[4..12].copy_from_slice(&token_of(&net.sender, victim).to_be_bytes());
    let now = net.now;
    net.sender.handle_datagram(now, victim, &own);
    assert_eq!(net.sender.member_count(), 1);
}

#[test]
fn quorum_release_evicts_members_below_the_released_data() {
    // 5 members, quorum 60%: a member that hears nothing cannot hold the
    // buffer; once three acknowledged data it is evicted, never repaired
    // from freed memory.
    let data = random_data(2 << 20, 6);
    let cfg = SessionConfig {
        wait_for_members: 5,
        release: fanout_transport::session::ReleasePolicy::Quorum(0.6),
        stall_timeout: Duration::from_secs(30),
        ..config()
    };
    let mut net = Net::new(cfg, 5, data.clone(), Box::new(|_, _, _| false));
    net.run(Duration::from_millis(50));
    net.dead[4] = true;
    net.run(Duration::from_secs(60));
    for i in 0..4 {
        assert!(net.got[i] == data, "member {i}");
    }
    assert!(
        net.events.iter().any(
            |e| matches!(e, SessionEvent::MemberLeft { reason, .. } if reason.contains("quorum"))
        ),
        "{:?}",
        net.events
    );
}

#[test]
fn buffer_limited_release_never_blocks_the_writer_on_a_silent_member() {
    // 4 members, 1 MiB send buffer, 6 MiB of data: a member that goes
    // silent cannot hold the buffer; the writer goes on, the three others
    // get everything, and the silent one is evicted for falling behind the
    // buffer long before its 30 s stall timeout. Under slowest-receiver
    // release the same run waits for the stall timeout.
    let data = random_data(6 << 20, 9);
    let run = |release| {
        let mut transport = config().transport;
        transport.send_buffer_bytes = 1 << 20;
        let cfg = SessionConfig {
            wait_for_members: 4,
            release,
            stall_timeout: Duration::from_secs(30),
            transport,
            ..config()
        };
        let mut net = Net::new(cfg, 4, data.clone(), Box::new(|_, _, _| false));
        net.run(Duration::from_millis(50));
        net.dead[3] = true;
        net.run(Duration::from_secs(20));
        net
    };
    let limited = run(ReleasePolicy::BufferLimited);
    for i in 0..3 {
        assert!(limited.got[i] == data, "member {i}");
    }
    assert!(
        limited.events.iter().any(|e| matches!(
            e,
            SessionEvent::MemberLeft { reason, .. } if reason.contains("send buffer")
        )),
        "{:?}",
        limited.events
    );
    assert!(limited.sender.stats().buffer_limited_release_bytes > 0);
    let slowest = run(ReleasePolicy::SlowestReceiver);
    assert!(
        slowest.got[0].len() < data.len(),
        "slowest-receiver release waits for the silent member"
    );
}

#[test]
fn a_session_whose_every_member_left_ends() {
    let data = random_data(4 << 20, 8);
    let cfg = SessionConfig {
        wait_for_members: 2,
        stall_timeout: Duration::from_secs(1),
        ..config()
    };
    let mut net = Net::new(cfg, 2, data, Box::new(|_, _, _| false));
    net.run(Duration::from_millis(60));
    net.dead = vec![true, true];
    net.run(Duration::from_secs(30));
    assert_eq!(net.sender.close_reason(), Some(&CloseReason::NoReceivers));
    assert!(
        net.now < Instant::ZERO + Duration::from_secs(10),
        "ended promptly"
    );
}

#[test]
fn a_sack_flood_from_a_member_is_bounded_and_the_session_runs_on() {
    use fanout_transport::session::bench_support::SyntheticSession;
    use fanout_transport::wire::MAX_SACK_RANGES;
    let mut s = SyntheticSession::new(3);
    // Grow the windows with honest ACKs, then leave one flight unacknowledged.
    let mut base = 0;
    for _ in 0..30 {
        base = s.send_more(1 << 20, Duration::from_millis(1));
        for i in 0..3 {
            let a = s.ack(i, base);
            let now = s.now;
            s.session.handle_datagram(now, s.members[i], &a);
        }
    }
    let top = s.send_more(2 << 20, Duration::from_millis(1));
    let mss = fanout_transport::TransportConfig::default().max_payload();
    assert!(
        top - base > 600 * mss,
        "over 600 segments in the air: {base}..{top}"
    );
    // Member 0 floods: first every other segment SACKed (352 disjoint
    // ranges, above the per-member cap of 256), then 2000 ACKs of 32
    // disjoint, unaligned random ranges each.
    for round in 0..11u64 {
        let sack = (0..MAX_SACK_RANGES as u64)
            .map(|m| {
                let j = 2 * (32 * round + m);
                base + j * mss..base + (j + 1) * mss
            })
            .filter(|r| r.end <= top)
            .collect();
        let d = s.ack_with(0, 0, sack);
        let now = s.now;
        s.session.handle_datagram(now, s.members[0], &d);
    }
    let mut rng = Rng::new(11);
    for _ in 0..2000 {
        let mut at = base + 1 + rng.below((top - base) / 4);
        let sack = (0..MAX_SACK_RANGES)
            .map(|_| {
                let r = at..at + 1 + rng.below(3000);
                at = r.end + 1 + rng.below(3000);
                r
            })
            .filter(|r| r.end <= top)
            .collect();
        let d = s.ack_with(0, 0, sack);
        let now = s.now;
        s.session.handle_datagram(now, s.members[0], &d);
    }
    let drops = &s.session.stats().drops;
    assert!(
        drops.get(fanout_core::stats::DropReason::LimitExceeded) > 0,
        "range cap reached and counted: {drops:?}"
    );
    // Honest members still advance the session.
    for i in 1..3 {
        let a = s.ack(i, top);
        let now = s.now;
        s.session.handle_datagram(now, s.members[i], &a);
    }
    assert_eq!(s.session.member_count(), 3);
    assert!(s.send_more(64 << 10, Duration::from_millis(1)) >= top);
}

#[test]
fn unicast_fan_out_sends_each_member_its_copies_in_runs() {
    let data = random_data(1 << 20, 31);
    let cfg = SessionConfig {
        group: None,
        wait_for_members: 3,
        ..SessionConfig::default()
    };
    // Records which member each data copy went to, in emission order.
    let order = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let seen = order.clone();
    let mut net = Net::new(
        cfg,
        3,
        data.clone(),
        Box::new(move |to, bytes, multicast| {
            assert!(!multicast, "no group: nothing is multicast");
            if let (Some(i), true) = (to, is_data(bytes)) {
                seen.borrow_mut().push(i);
            }
            false
        }),
    );
    net.run(Duration::from_secs(30));
    assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
    for (i, g) in net.got.iter().enumerate() {
        assert!(*g == data, "member {i}: {} bytes", g.len());
    }
    let st = net.sender.stats();
    assert_eq!(
        st.fanout_copies,
        3 * st.data_segments,
        "one copy per member"
    );
    let order = order.borrow();
    assert_eq!(order.len() as u64, st.fanout_copies);
    // Consecutive copies to one member form runs (one GSO send each at the
    // runtime), not a datagram-by-datagram alternation.
    let runs = 1 + order.windows(2).filter(|w| w[0] != w[1]).count();
    let mean = order.len() as f64 / runs as f64;
    eprintln!("fan-out: mean run {mean:.1} copies over {runs} runs");
    assert!(mean >= 2.0, "mean run {mean:.1} copies over {runs} runs");
    assert!(
        mean <= fanout_transport::session::FANOUT_RUN_SEGMENTS as f64,
        "{mean}"
    );
}

/// An UPSTREAM datagram from a member (its own packet numbers are not
/// checked by the sender).
/// The header id of the member at `addr`: its token (the session id, 42,
/// for a stranger).
fn token_of(s: &SessionSender, addr: SocketAddr) -> u64 {
    s.members()
        .find(|m| m.1 == addr)
        .and_then(|m| s.member_token(m.0))
        .unwrap_or(42)
}

/// An unsealed datagram of one frame in session `session_id`.
fn plain_datagram(
    session_id: u64,
    packet_number: u32,
    frame: &fanout_transport::wire::Frame<'_>,
) -> Vec<u8> {
    let mut d = Vec::new();
    fanout_transport::wire::Header {
        flags: Default::default(),
        session_id,
        packet_number,
    }
    .encode(&mut d);
    frame.encode(&mut d);
    d
}

fn upstream_datagram(id: u64, offset: u64, fin: bool, payload: &[u8]) -> Vec<u8> {
    let frame = fanout_transport::wire::Frame::Upstream(fanout_transport::wire::UpstreamFrame {
        offset,
        timestamp: WireTimestamp(0),
        fin,
        payload,
    });
    plain_datagram(id, 1, &frame)
}

fn is_upstream(bytes: &[u8]) -> bool {
    let Ok((_, body)) = fanout_transport::wire::Header::decode(bytes) else {
        return false;
    };
    matches!(
        fanout_transport::wire::decode_frames(body).next(),
        Some(Ok(fanout_transport::wire::Frame::Upstream(_)
            | fanout_transport::wire::Frame::UpstreamAck(_)))
    )
}

#[test]
fn upstream_arrives_once_in_order_under_loss_and_the_session_goes_on() {
    use fanout_transport::UpstreamStatus;
    let data = random_data(400_000, 11);
    let mut rng = Rng::new(12);
    // 15% of upstream frames and upstream acks lost, 1% of everything else.
    let loss: Loss = Box::new(move |_, b, _| {
        let p = if is_upstream(b) { 0.15 } else { 0.01 };
        rng.bernoulli(p)
    });
    let cfg = SessionConfig {
        wait_for_members: 4,
        ..config()
    };
    let mut net = Net::new(cfg, 4, data.clone(), loss);
    net.hold_fin = true;
    // Three members ask (more than one upstream window each: flow control
    // and the sender's reads are exercised); the fourth stays silent.
    let asked: Vec<Vec<u8>> = (0..3)
        .map(|i| random_data(150_000 + i * 7, 20 + i as u64))
        .collect();
    for (i, q) in asked.iter().enumerate() {
        net.up[i] = (q.clone(), true);
    }
    let mut t = 1;
    while t < 120 && !(0..3).all(|i| net.members[i].upstream_status() == UpstreamStatus::Finished) {
        net.run(Duration::from_secs(t));
        t += 1;
    }
    net.hold_fin = false;
    net.run(Duration::from_secs(t + 60));
    for (i, q) in asked.iter().enumerate() {
        let id = net.members[i].member_id();
        let got = net.up_in.get(&id).map_or(0, Vec::len);
        assert!(
            net.up_in.get(&id) == Some(q),
            "member {i}: {got} of {} upstream bytes, status {:?}, stats {:?}",
            q.len(),
            net.members[i].upstream_status(),
            net.members[i].upstream_stats()
        );
        assert_eq!(net.members[i].upstream_status(), UpstreamStatus::Finished);
        assert!(
            net.members[i].upstream_stats().rto_events > 0,
            "loss was recovered by timeouts"
        );
    }
    assert!(!net.up_in.contains_key(&net.members[3].member_id()));
    let up = net.sender.upstream_stats();
    eprintln!(
        "upstream done by {t} s (simulated); sender {up:?}; member 0 {:?}",
        net.members[0].upstream_stats()
    );
    assert_eq!(up.streams_finished, 3, "{up:?}");
    assert_eq!(
        up.bytes_delivered,
        asked.iter().map(|q| q.len() as u64).sum::<u64>()
    );
    // Every byte was stored once (retransmissions were counted as
    // duplicates), or again after a drained buffer let it go unread.
    assert_eq!(
        up.bytes_received,
        up.bytes_delivered + up.bytes_released_unread,
        "{up:?}"
    );
    assert!(up.dropped_duplicate > 0, "{up:?}");
    // One event per readable burst, not one per frame.
    let events = net
        .events
        .iter()
        .filter(|e| matches!(e, SessionEvent::Upstream { .. }))
        .count() as u64;
    assert!(
        events > 0 && events < up.frames_received,
        "{events} events, {up:?}"
    );
    // The session's own stream was delivered to all meanwhile.
    for (i, g) in net.got.iter().enumerate() {
        assert!(*g == data, "member {i}: {} of {}", g.len(), data.len());
    }
    assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
}

#[test]
fn a_flooding_member_cannot_grow_upstream_memory_and_strangers_are_dropped() {
    use fanout_transport::session::{MAX_UPSTREAM_BUFFERS, MAX_UPSTREAM_WINDOW};
    let n = MAX_UPSTREAM_BUFFERS + 6;
    let data = random_data(300_000, 13);
    let cfg = SessionConfig {
        wait_for_members: n,
        ..config()
    };
    let mut net = Net::new(cfg, n, data.clone(), Box::new(|_, _, _| false));
    // The application never reads upstream: windows stay closed.
    net.reads_upstream = false;
    net.hold_fin = true;
    net.run(Duration::from_millis(200));
    assert_eq!(net.sender.member_count(), n);
    let now = net.now;
    let mut rng = Rng::new(14);
    for round in 0..20u64 {
        for i in 0..n {
            let from = member_addr(i);
            let id = token_of(&net.sender, from);
            // In-window pieces, a hole pattern (out of order), far beyond
            // the window, and a huge offset.
            let off = rng.below(2 * MAX_UPSTREAM_WINDOW as u64);
            let d = upstream_datagram(id, off, false, &[round as u8; 700]);
            net.sender.handle_datagram(now, from, &d);
            let d = upstream_datagram(id, round * 3000 + 1, false, b"x");
            net.sender.handle_datagram(now, from, &d);
            let d = upstream_datagram(id, 1 << 40, false, b"far");
            net.sender.handle_datagram(now, from, &d);
        }
    }
    // A stranger's upstream is dropped and counted, and creates nothing.
    let before = net.sender.upstream_memory_bytes();
    for k in 0..100u64 {
        let d = upstream_datagram(42, k, false, b"spam");
        net.sender
            .handle_datagram(now, "10.200.0.7:9".parse().unwrap(), &d);
    }
    assert_eq!(net.sender.upstream_memory_bytes(), before);
    let up = net.sender.upstream_stats();
    assert_eq!(up.dropped_non_member, 100, "{up:?}");
    assert!(up.dropped_beyond_window >= 20 * n as u64, "{up:?}");
    assert!(
        up.dropped_limit > 0,
        "buffers and pieces are bounded: {up:?}"
    );
    // Never more than the bound: the buffers' rings plus small entries.
    let bound = MAX_UPSTREAM_BUFFERS * MAX_UPSTREAM_WINDOW + n * 256 + 4096;
    assert!(
        net.sender.upstream_memory_bytes() <= bound,
        "{} > {bound}",
        net.sender.upstream_memory_bytes()
    );
    assert!(up.bytes_received <= (MAX_UPSTREAM_BUFFERS * MAX_UPSTREAM_WINDOW) as u64);
    // The session's data flow goes on for everyone.
    net.hold_fin = false;
    net.run(Duration::from_secs(60));
    for (i, g) in net.got.iter().enumerate() {
        assert!(*g == data, "member {i}: {} of {}", g.len(), data.len());
    }
    let left: Vec<_> = net
        .events
        .iter()
        .filter(|e| matches!(e, SessionEvent::MemberLeft { .. }))
        .collect();
    assert_eq!(
        net.sender.close_reason(),
        Some(&CloseReason::Completed),
        "{left:?}"
    );
}

/// A listener is no member until a sender's OFFER made it join: no
/// upstream yet; and a session counts an UPSTREAM frame from a non-member
/// (the invited peer included, before it joined) and goes on.
#[test]
fn a_listener_has_no_upstream_before_it_joined() {
    use fanout_core::stats::DropReason;
    use fanout_transport::{TransportConfig, UpstreamStatus};
    let cfg = TransportConfig::default();
    let mut r = Receiver::listen(cfg.clone(), Instant::ZERO);
    assert_eq!(r.write_upstream(b"question"), 0);
    assert_eq!(r.upstream_writable(), 0);
    assert_eq!(r.upstream_status(), UpstreamStatus::Failed);
    let peer: SocketAddr = "10.0.1.1:7000".parse().unwrap();
    let mut s = SessionSender::new(SessionConfig::unicast(cfg), 42, Instant::ZERO);
    assert!(s.offer(Instant::ZERO, peer));
    s.handle_datagram(Instant::ZERO, peer, &upstream_datagram(42, 0, true, b"hi"));
    assert_eq!(s.stats().drops.get(DropReason::UnknownPeer), 1);
    assert_eq!(s.upstream_stats().dropped_non_member, 1);
    assert!(s.close_reason().is_none());
}

/// An OFFER answering a request goes once per request, never repeated on
/// a timer: an address that asked once gets one OFFER (no amplification
/// toward an address that may be forged), and a repeated request gets one
/// more; nobody answering ends the session at the handshake timeout.
#[test]
fn an_answering_offer_goes_once_per_request() {
    use fanout_transport::TransportConfig;
    let cfg = TransportConfig::default();
    let timeout = cfg.handshake_timeout;
    let peer: SocketAddr = "10.0.1.1:7001".parse().unwrap();
    let mut s = SessionSender::new(SessionConfig::unicast(cfg), 42, Instant::ZERO);
    let sent_until = |s: &mut SessionSender, secs: f64| {
        let mut n = 0;
        let mut now = Instant::ZERO;
        let end = Instant::ZERO + Duration::from_secs_f64(secs);
        loop {
            drain(s, now, &mut Vec::new(), 64, |t, _| {
                assert_eq!(t.destination, peer);
                n += 1;
            });
            match s.poll_timeout() {
                Some(t) if t <= end => now = now.max(t),
                _ => return n,
            }
            s.handle_timeout(now);
        }
    };
    assert!(s.answer_with_offer(Instant::ZERO, peer));
    assert_eq!(sent_until(&mut s, 1.0), 1, "one OFFER, not repeated");
    assert!(s.answer_with_offer(Instant::ZERO + Duration::from_secs(1), peer));
    assert_eq!(s.stats().offers_sent, 1);
    let n = sent_until(&mut s, timeout.as_secs_f64() + 2.0);
    assert_eq!(
        (n, s.stats().offers_sent),
        (1, 2),
        "one more for the repeat"
    );
    assert_eq!(s.close_reason(), Some(&CloseReason::HandshakeTimeout));
}

/// A controller plugged in from outside the crate ([`fixed_rate`]): the
/// session sends at its rate — 4 MiB to three members takes the 2 s that
/// 2 MiB/s gives — where the default controller, on the same lossless
/// wire, is limited only by the windows and finishes far sooner.
#[test]
fn a_plugged_in_controller_sets_the_rate() {
    let data = random_data(4 << 20, 9);
    let cfg = SessionConfig {
        wait_for_members: 3,
        ..config()
    };
    let finish = |controller: Option<fixed_rate::FixedRate>| {
        let mut net = Net::new(cfg.clone(), 3, data.clone(), Box::new(|_, _, _| false));
        if let Some(c) = controller {
            net.sender =
                SessionSender::with_controller(cfg.clone(), 42, Instant::ZERO, Box::new(c));
        }
        net.run(Duration::from_secs(60));
        assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
        assert!(net.got.iter().all(|g| *g == data));
        net.now.as_secs_f64()
    };
    let fixed = finish(Some(fixed_rate::FixedRate {
        bytes_per_sec: 2 << 20,
    }));
    let default = finish(None);
    eprintln!("4 MiB to 3 members: fixed rate {fixed:.3} s, default controller {default:.3} s");
    // 4 MiB at 2 MiB/s: 2 s, plus the join and the last ACK's round trip.
    assert!((2.0..2.3).contains(&fixed), "fixed rate: {fixed:.3} s");
    assert!(default < 1.0, "default controller: {default:.3} s");
}

mod protected {
    //! Protected sessions (`docs/security.md`): every datagram after the
    //! handshake is sealed; forged, mutated and replayed ones change
    //! nothing; a joiner without the key is never admitted.

    use super::*;
    use fanout_core::stats::DropReason;
    use fanout_transport::protection::{Credentials, Protection};
    use fanout_transport::wire::{Frame, Header, HeaderFlags};
    use std::cell::RefCell;
    use std::rc::Rc;

    const PSK: [u8; 32] = [7; 32];

    fn protected(psk: [u8; 32], seed: u8) -> fanout_transport::TransportConfig {
        fanout_transport::TransportConfig {
            protection: Some(Protection::new(Credentials::with_psk(psk), [seed; 32])),
            ..Default::default()
        }
    }

    /// A net whose sender and members hold `keys[i]` (the sender `PSK`),
    /// each with randomness of its own.
    fn net(keys: &[[u8; 32]], data: Vec<u8>, loss: Loss) -> Net {
        net_with(config(), keys, data, loss)
    }

    /// [`net`] with the sender's session settings from `base`.
    fn net_with(base: SessionConfig, keys: &[[u8; 32]], data: Vec<u8>, loss: Loss) -> Net {
        let cfg = SessionConfig {
            wait_for_members: keys.iter().filter(|k| **k == PSK).count(),
            transport: protected(PSK, 200),
            ..base
        };
        let mut net = Net::new(cfg, keys.len(), data, loss);
        for (i, k) in keys.iter().enumerate() {
            net.members[i] = Receiver::join(
                protected(*k, i as u8),
                SENDER.parse().unwrap(),
                Instant::ZERO,
            );
        }
        net
    }

    /// A datagram of one frame (unsealed).
    fn datagram(flags: HeaderFlags, session_id: u64, packet_number: u32, frame: &Frame) -> Vec<u8> {
        let mut out = Vec::new();
        Header {
            flags,
            session_id,
            packet_number,
        }
        .encode(&mut out);
        frame.encode(&mut out);
        out
    }

    fn frames_in_clear(bytes: &[u8]) -> Option<Frame<'_>> {
        let (h, body) = Header::decode(bytes).ok()?;
        if h.flags.contains(HeaderFlags::SEALED) || h.flags.contains(HeaderFlags::LISTED) {
            return None;
        }
        fanout_transport::wire::decode_frames(body).next()?.ok()
    }

    #[test]
    fn every_datagram_after_the_handshake_is_sealed_and_the_stream_arrives() {
        let data = random_data(1 << 20, 21);
        let clear = Rc::new(RefCell::new(Vec::new()));
        let seen = clear.clone();
        let mut x = 1u64;
        let loss: Loss = Box::new(move |_, bytes, _| {
            if let Some(f) = frames_in_clear(bytes) {
                seen.borrow_mut().push(format!("{f:?}"));
            }
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            (x >> 33) % 100 < 2 // 2% loss both ways
        });
        let mut net = net(&[PSK; 3], data.clone(), loss);
        net.run(Duration::from_secs(60));
        assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
        assert!(net.got.iter().all(|g| *g == data));
        // Only handshakes travel in the clear: no byte of the stream.
        let clear = clear.borrow();
        assert!(!clear.is_empty());
        assert!(
            clear.iter().all(|f| f.starts_with("Handshake")),
            "{clear:?}"
        );
        let drops = &net.sender.stats().drops;
        assert_eq!(drops.get(DropReason::Unauthenticated), 0);
        // Every ACK decodes: runs held for a lost segment whose other
        // segments came again by unicast report only what lies above the
        // cumulative point.
        assert_eq!(drops.get(DropReason::MalformedFrame), 0);
        for m in &net.members {
            assert_eq!(m.stats().drops.get(DropReason::Unauthenticated), 0);
        }
    }

    #[test]
    fn a_joiner_without_the_key_is_never_admitted() {
        let data = random_data(256 << 10, 22);
        let mut net = net(
            &[PSK, [9; 32], PSK],
            data.clone(),
            Box::new(|_, _, _| false),
        );
        net.run(Duration::from_secs(30));
        assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
        assert_eq!(net.got[0], data);
        assert_eq!(net.got[2], data);
        assert!(net.got[1].is_empty());
        assert_eq!(net.sender.stats().members_joined, 2);
        assert!(net.sender.stats().drops.get(DropReason::Unauthenticated) > 0);
    }

    /// An outsider that sees every datagram (on the LAN) forges RESET,
    /// CLOSE and FIN in the clear under the session id, flips bits of
    /// sealed datagrams, and replays sealed ones to members and sender:
    /// everything is dropped and counted, and the stream arrives whole.
    #[test]
    fn forged_mutated_and_replayed_datagrams_change_nothing() {
        let data = random_data(1 << 20, 23);
        let captured = Rc::new(RefCell::new(Vec::<(Option<usize>, Vec<u8>)>::new()));
        let tap = captured.clone();
        let loss: Loss = Box::new(move |to, bytes, _| {
            let mut t = tap.borrow_mut();
            if t.len() < 4000 {
                t.push((to, bytes.to_vec()));
            }
            false
        });
        let mut net = net(&[PSK; 2], data.clone(), loss);
        net.hold_fin = true; // the session stays open during the attack
        net.run(Duration::from_millis(200));
        let sender: SocketAddr = SENDER.parse().unwrap();
        let forge = |frame: Frame<'_>, session_id: u64| {
            datagram(HeaderFlags::default(), session_id, 1 << 20, &frame)
        };
        let reset = fanout_transport::wire::CloseFrame {
            code: 1,
            reason: "forged",
        };
        let fin = Frame::Data(fanout_transport::wire::DataFrame {
            offset: 1000,
            timestamp: WireTimestamp(0),
            fin: true,
            message_end: false,
            payload: b"x",
        });
        let mut forged = 0;
        for session_id in [0, 42] {
            for f in [
                Frame::Reset(reset.clone()),
                Frame::Close(reset.clone()),
                fin.clone(),
            ] {
                for i in 0..2 {
                    net.members[i].handle_datagram(net.now, sender, &forge(f.clone(), session_id));
                    net.sender.handle_datagram(
                        net.now,
                        member_addr(i),
                        &forge(f.clone(), session_id),
                    );
                    forged += 1;
                }
            }
        }
        let mut mutated = 0;
        let mut replayed = 0;
        let mut listed = 0;
        let mut listed_forged = 0;
        for (to, bytes) in captured.borrow().iter() {
            let (i, from) = match to {
                Some(i) => (*i, sender),
                None => continue, // the tap does not tell which member sent it
            };
            let flags = Header::decode(bytes).map(|(h, _)| h.flags).unwrap();
            if flags.contains(HeaderFlags::LISTED) && bytes.len() > 200 {
                // Listed data (no tag): a flipped payload byte no longer
                // matches its list's hash, or the bytes its settled run
                // gave — refused as forged, or as a duplicate once those
                // bytes are read and gone; a copy as is only repeats data
                // the member holds.
                let drops = |m: &Receiver| {
                    let d = &m.stats().drops;
                    (
                        d.get(DropReason::Unauthenticated),
                        d.get(DropReason::Duplicate),
                    )
                };
                let (u0, d0) = drops(&net.members[i]);
                let mut bad = bytes.clone();
                bad[bytes.len() / 2] ^= 0x40;
                net.members[i].handle_datagram(net.now, from, &bad);
                let (u1, d1) = drops(&net.members[i]);
                assert_eq!(u1 - u0 + d1 - d0, 1, "a mutated listed copy is refused");
                listed_forged += u1 - u0;
                net.members[i].handle_datagram(net.now, from, bytes);
                listed += 1;
                continue;
            }
            if !flags.contains(HeaderFlags::SEALED) {
                continue;
            }
            // Mutated, under a packet number not seen yet: the seal fails.
            let mut bad = bytes.clone();
            let pn = u32::from_be_bytes(bad[12..16].try_into().unwrap());
            bad[12..16].copy_from_slice(&pn.wrapping_add(100_000).to_be_bytes());
            let at = bytes.len() / 2;
            bad[at] ^= 0x40;
            net.members[i].handle_datagram(net.now, from, &bad);
            mutated += 1;
            // Mutated under its own number, or replayed as is: refused
            // before it is opened.
            bad.copy_from_slice(bytes);
            bad[at] ^= 0x40;
            net.members[i].handle_datagram(net.now, from, &bad);
            net.members[i].handle_datagram(net.now, from, bytes);
            replayed += 2;
        }
        // Lists name runs of segments: a few sealed datagrams, many listed.
        assert!(mutated >= 8, "{mutated} sealed datagrams captured");
        assert!(listed > 100, "{listed} listed datagrams captured");
        assert!(
            listed_forged > 0,
            "some mutated while their bytes were held"
        );
        net.hold_fin = false;
        net.run(Duration::from_secs(60));
        assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
        assert!(net.got.iter().all(|g| *g == data));
        let unauthenticated: u64 = net
            .members
            .iter()
            .map(|m| m.stats().drops.get(DropReason::Unauthenticated))
            .sum::<u64>()
            + net.sender.stats().drops.get(DropReason::Unauthenticated);
        let replays: u64 = net
            .members
            .iter()
            .map(|m| m.stats().drops.get(DropReason::Replayed))
            .sum();
        assert_eq!(unauthenticated, 2 * forged + mutated + listed_forged);
        assert_eq!(replays, replayed);
    }

    /// Runs `net` for `d` more (`Net::run` takes the time to stop at).
    fn run_for(net: &mut Net, d: Duration) {
        let until = net.now.saturating_duration_since(Instant::ZERO) + d;
        net.run(until);
    }

    /// A member joined by hand (the test plays it): what its handshake's
    /// answer carried.
    struct HandJoined {
        addr: SocketAddr,
        /// The answer's frames (ACCEPT, GROUP_KEY, SOURCE_KEY).
        payload: Vec<u8>,
        pair: fanout_transport::protection::PairKeys,
        /// Packet numbers it used.
        sent: u32,
    }

    impl HandJoined {
        /// The group key of `epoch` its answer handed out: its AEAD key and
        /// its listed-data key.
        fn group_key(
            &self,
            epoch: u64,
        ) -> (
            fanout_transport::protection::PacketKey,
            fanout_transport::protection::DataKey,
        ) {
            use fanout_transport::protection::{DataKey, PacketKey};
            fanout_transport::wire::decode_frames(&self.payload)
                .find_map(|f| match f {
                    Ok(Frame::GroupKey(k)) if k.epoch == epoch => {
                        Some((PacketKey::new(&k.key), DataKey::from_group_secret(&k.key)))
                    }
                    _ => None,
                })
                .expect("the answer hands out the group key")
        }

        /// Its token, from the ACCEPT.
        fn token(&self) -> u64 {
            fanout_transport::wire::decode_frames(&self.payload)
                .find_map(|f| match f {
                    Ok(Frame::Accept(a)) => Some(a.token),
                    _ => None,
                })
                .expect("admitted")
        }

        /// Sends `frame` to the sender, sealed under its pair key.
        fn send(&mut self, net: &mut Net, frame: &Frame) {
            self.sent += 1;
            let mut d = datagram(HeaderFlags::default(), self.token(), self.sent, frame);
            self.pair
                .joiner_to_sender
                .seal(&mut d, 0, u64::from(self.sent));
            net.sender.handle_datagram(net.now, self.addr, &d);
        }
    }

    /// Joins `net`'s sender from `addr` with the key (handshake seeded by
    /// `seed`), the test playing the member.
    fn join_by_hand(net: &mut Net, addr: SocketAddr, seed: u8) -> HandJoined {
        use fanout_transport::protection::noise::Initiator;
        use fanout_transport::wire::{decode_frames, ConnectFrame};
        let mut connect = Vec::new();
        Frame::Connect(ConnectFrame {
            max_payload: 1400,
            window: 8 << 20,
            timestamp: WireTimestamp(0),
            resume_from: 0,
        })
        .encode(&mut connect);
        let mut first = Vec::new();
        let creds = Credentials::with_psk(PSK);
        let i = Initiator::start(&creds, [seed; 32], &connect, &mut first).unwrap();
        let d = datagram(HeaderFlags::default(), 0, 0, &Frame::Handshake(&first));
        net.sender.handle_datagram(net.now, addr, &d);
        run_for(net, Duration::from_millis(40));
        let answer = net
            .elsewhere
            .iter()
            .find_map(|(to, d)| {
                let (_, body) = Header::decode(d).ok()?;
                match decode_frames(body).next()? {
                    Ok(Frame::Handshake(a)) if *to == addr => Some(a.to_vec()),
                    _ => None,
                }
            })
            .expect("the sender answered the handshake");
        let (payload, pair) = i.finish(&answer).unwrap();
        HandJoined {
            addr,
            payload,
            pair,
            sent: 0,
        }
    }

    /// A member holding the group key sends its own copies of segments of
    /// the sender's runs to the group, ahead of the sender's: where the
    /// sender's copy comes too, the run checks with it; where it is lost
    /// (here to member 0, one run in five), neither copy settles the run,
    /// its detail does, the member reneges what it acknowledged of the
    /// forgery and the sender repairs it. No forged byte is read, every
    /// forgery is counted, the session completes.
    #[test]
    fn a_rogue_members_copies_inside_runs_change_nothing() {
        use fanout_transport::wire::{decode_frames, DataFrame};
        let data = random_data(2 << 20, 31);
        // Listed datagrams to the group, and which of member 0's were lost.
        let seen = Rc::new(RefCell::new(Vec::<Vec<u8>>::new()));
        let tap = seen.clone();
        let mut n = 0u64;
        let loss: Loss = Box::new(move |to, bytes, is_multicast| {
            let listed =
                Header::decode(bytes).is_ok_and(|(h, _)| h.flags.contains(HeaderFlags::LISTED));
            if !(is_multicast && listed) {
                return false;
            }
            if to == Some(1) {
                tap.borrow_mut().push(bytes.to_vec());
            }
            n += 1;
            to == Some(0) && n.is_multiple_of(97)
        });
        let mut net = net(&[PSK; 2], data.clone(), loss);
        net.hold_fin = true;
        run_for(&mut net, Duration::from_millis(20));
        let rogue: SocketAddr = "10.0.9.9:7000".parse().unwrap();
        let joined = join_by_hand(&mut net, rogue, 98);
        let (_, data_key) = joined.group_key(0);
        net.hold_fin = false;
        let mut forged = 0u64;
        let end = net.now + Duration::from_secs(60);
        while net.sender.close_reason().is_none() && net.now < end {
            // Each listed datagram just sent, altered, reaches both members
            // at once: ahead of the sender's copy (one way: 10 ms).
            for bytes in std::mem::take(&mut *seen.borrow_mut()) {
                let pn = u64::from(Header::decode(&bytes).unwrap().0.packet_number);
                let mut d = bytes.clone();
                data_key.apply(&mut d, pn);
                let (h, body) = Header::decode(&d).unwrap();
                let Some(Ok(Frame::Data(f))) = decode_frames(body).next() else {
                    continue;
                };
                if f.fin || f.message_end || f.payload.len() < 1000 {
                    continue;
                }
                let mut payload = f.payload.to_vec();
                payload[7] ^= 0x55;
                let forgery = Frame::Data(DataFrame {
                    payload: &payload,
                    ..f
                });
                let mut out = datagram(h.flags, h.session_id, h.packet_number, &forgery);
                data_key.apply(&mut out, pn);
                for m in 0..2 {
                    net.members[m].handle_datagram(net.now, SENDER.parse().unwrap(), &out);
                }
                forged += 1;
            }
            run_for(&mut net, Duration::from_millis(1));
        }
        assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
        assert!(
            net.got.iter().all(|g| *g == data),
            "no forged byte was read"
        );
        assert!(forged > 500, "{forged} forgeries");
        let st = net.sender.stats();
        assert!(st.segment_details_sent > 0, "runs settled by their detail");
        assert!(
            st.reneged_segments > 0,
            "forged copies acknowledged, then reneged"
        );
        for (i, m) in net.members.iter().enumerate() {
            let refused = m.stats().drops.get(DropReason::Unauthenticated)
                + m.stats().drops.get(DropReason::Duplicate);
            assert!(
                refused >= forged,
                "member {i}: {refused} of {forged} refused"
            );
        }
    }

    /// A member that misses the sender's segment lists (here: every
    /// AEAD-sealed multicast datagram to it is lost, lists included) holds
    /// the listed data it cannot check yet, asks the sender for the lists
    /// under its pair key, gets them by unicast, and ends with every byte.
    #[test]
    fn a_member_that_misses_segment_lists_asks_for_them() {
        let data = random_data(2 << 20, 29);
        let loss: Loss = Box::new(move |to, bytes, is_multicast| {
            let sealed =
                Header::decode(bytes).is_ok_and(|(h, _)| h.flags.contains(HeaderFlags::SEALED));
            to == Some(0) && is_multicast && sealed
        });
        let mut net = net(&[PSK; 2], data.clone(), loss);
        net.run(Duration::from_secs(60));
        assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
        assert!(net.got.iter().all(|g| *g == data));
        // Every list multicast was lost to member 0, which needed each.
        let st = net.sender.stats();
        assert!(st.segment_lists_sent > 0);
        assert!(
            st.segment_lists_resent >= st.segment_lists_sent,
            "{} of {} lists resent",
            st.segment_lists_resent,
            st.segment_lists_sent
        );
    }

    /// A member that leaves before the end still knows the group key: the
    /// sender hands every remaining member a new one (under 2% loss both
    /// ways, so some hand-outs are lost and sent again), and no multicast
    /// datagram after that opens under the departed member's key, while
    /// the others get every byte.
    #[test]
    fn a_member_that_leaves_early_cannot_open_what_follows() {
        use fanout_transport::wire::CloseFrame;
        let data = random_data(4 << 20, 27);
        let multicast = Rc::new(RefCell::new(Vec::<Vec<u8>>::new()));
        let tap = multicast.clone();
        let mut x = 5u64;
        let loss: Loss = Box::new(move |_, bytes, is_multicast| {
            if is_multicast {
                tap.borrow_mut().push(bytes.to_vec());
            }
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            (x >> 33) % 100 < 2
        });
        let mut net = net(&[PSK; 3], data.clone(), loss);
        net.hold_fin = true;
        net.run(Duration::from_millis(30));
        let mut leaver = join_by_hand(&mut net, "10.0.9.9:7000".parse().unwrap(), 98);
        let (old, old_data) = leaver.group_key(0);
        run_for(&mut net, Duration::from_millis(100));
        assert_eq!(net.sender.stats().group_key_updates, 0);
        let reset = CloseFrame {
            code: 1,
            reason: "bye",
        };
        leaver.send(&mut net, &Frame::Reset(reset));
        run_for(&mut net, Duration::from_millis(500));
        assert_eq!(net.sender.stats().group_key_updates, 1);
        multicast.borrow_mut().clear();
        net.hold_fin = false;
        run_for(&mut net, Duration::from_secs(60));
        assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
        assert!(net.got.iter().all(|g| *g == data));
        let after = multicast.borrow();
        assert!(after.len() > 1000, "{} multicast datagrams", after.len());
        let mut listed = 0;
        for d in after.iter() {
            let (h, _) = Header::decode(d).unwrap();
            assert!(
                h.flags.contains(HeaderFlags::KEY_PHASE),
                "sealed under epoch 1"
            );
            let pn = u64::from(h.packet_number);
            let mut d = d.clone();
            if h.flags.contains(HeaderFlags::LISTED) {
                // Under the old listed-data key: no byte of the stream.
                old_data.apply(&mut d, pn);
                let (_, body) = Header::decode(&d).unwrap();
                if let Some(Ok(Frame::Data(f))) = fanout_transport::wire::decode_frames(body).next()
                {
                    let at = f.offset as usize;
                    // (Garbage may parse as an empty frame: no byte.)
                    let bytes = data.get(at..at + f.payload.len());
                    assert!(f.payload.is_empty() || bytes != Some(f.payload));
                }
                listed += 1;
            } else {
                assert!(old.open(&mut d, pn).is_err());
            }
        }
        assert!(listed > 1000, "{listed} listed datagrams");
        // Members that leave having received everything change no key.
        assert_eq!(net.sender.stats().group_key_updates, 1);
    }

    /// A member killed early holds the whole session until it is evicted
    /// (the window waits for it). When the window shut inside a run, the
    /// others hold the part of it sent, which cannot be checked as a run:
    /// its detail comes unasked, they take those segments, and nothing of
    /// theirs is outstanding while they wait. Only the dead one is
    /// evicted, and the key it held is replaced. (Killed at three moments,
    /// so that the window shuts both inside runs and between them.)
    #[test]
    fn a_killed_member_holds_the_session_but_only_it_is_evicted() {
        let data = random_data(4 << 20, 27);
        let mut details = 0;
        for kill_ms in [100, 140, 160] {
            let cfg = SessionConfig {
                stall_timeout: Duration::from_secs(2),
                ..config()
            };
            let mut net = net_with(cfg, &[PSK; 6], data.clone(), Box::new(|_, _, _| false));
            net.run(Duration::from_millis(kill_ms));
            assert!(net.got[3].len() < data.len() / 2, "killed early");
            net.dead[3] = true;
            net.run(Duration::from_secs(60));
            let left: Vec<_> = (net.events.iter())
                .filter_map(|e| match e {
                    SessionEvent::MemberLeft { addr, reason, .. } => Some((*addr, reason.clone())),
                    _ => None,
                })
                .collect();
            assert_eq!(left.len(), 1, "killed at {kill_ms} ms: {left:?}");
            assert_eq!(left[0].0, member_addr(3), "{left:?}");
            for i in [0, 1, 2, 4, 5] {
                assert!(net.got[i] == data, "member {i}: {}", net.got[i].len());
            }
            assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
            let st = net.sender.stats();
            assert_eq!(st.group_key_updates, 1);
            details += st.segment_details_sent;
        }
        assert!(details >= 1, "the window shut inside a run at least once");
    }

    /// A member that does not confirm a new group key (here: one that
    /// went silent) is evicted after the update's timeout (3 s), so it
    /// cannot keep a departed member reading; the others go on under the
    /// new key.
    #[test]
    fn a_member_that_does_not_take_the_new_key_is_evicted() {
        use fanout_transport::wire::CloseFrame;
        let data = random_data(4 << 20, 28);
        let mut net = net(&[PSK; 2], data.clone(), Box::new(|_, _, _| false));
        net.hold_fin = true;
        net.run(Duration::from_millis(30));
        let mut silent = join_by_hand(&mut net, "10.0.9.8:7000".parse().unwrap(), 97);
        // Its address proves itself (the token comes back), then it says
        // nothing more.
        silent.send(&mut net, &Frame::Padding);
        let mut leaver = join_by_hand(&mut net, "10.0.9.9:7000".parse().unwrap(), 98);
        leaver.send(&mut net, &Frame::Padding);
        run_for(&mut net, Duration::from_millis(100));
        let reset = CloseFrame {
            code: 1,
            reason: "bye",
        };
        leaver.send(&mut net, &Frame::Reset(reset));
        run_for(&mut net, Duration::from_millis(2900));
        assert_eq!(
            net.sender.stats().group_key_updates,
            0,
            "waits for the silent one"
        );
        run_for(&mut net, Duration::from_millis(200));
        assert!(net.sender.stats().group_key_updates >= 1);
        let evicted: Vec<&str> = net
            .events
            .iter()
            .filter_map(|e| match e {
                SessionEvent::MemberLeft { addr, reason, .. } if *addr == silent.addr => {
                    Some(reason.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(evicted, ["did not confirm the new group key"]);
        net.hold_fin = false;
        run_for(&mut net, Duration::from_secs(60));
        assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
        assert!(net.got.iter().all(|g| *g == data));
        // It may hold the key it did not confirm: that one was replaced too.
        assert_eq!(net.sender.stats().group_key_updates, 2);
    }

    /// A rogue member: it joins with the key (so it holds the group key),
    /// then, from the sender's address, multicasts sealed datagrams of its
    /// own to the other members under packet numbers the sender is about
    /// to use — DATA over the whole stream, an early FIN, CLOSE, RESET —
    /// and a list with a forged signature. None is ever processed (no
    /// list of the sender names it), the real datagrams under the same
    /// numbers are, and every member ends with the sender's bytes.
    #[test]
    fn a_member_holding_the_group_key_cannot_forge_the_senders_data() {
        use fanout_transport::protection::source::SignedList;
        use fanout_transport::wire::{CloseFrame, DataFrame};
        let data = random_data(2 << 20, 24);
        let multicast = Rc::new(RefCell::new(Vec::<u32>::new()));
        let tap = multicast.clone();
        let loss: Loss = Box::new(move |_, bytes, is_multicast| {
            if is_multicast {
                tap.borrow_mut()
                    .push(Header::decode(bytes).unwrap().0.packet_number);
            }
            false
        });
        let mut net = net(&[PSK; 2], data.clone(), loss);
        net.hold_fin = true;
        net.run(Duration::from_millis(30));
        // The rogue joins with the key.
        let rogue: SocketAddr = "10.0.9.9:7000".parse().unwrap();
        let joined = join_by_hand(&mut net, rogue, 99);
        let (group, data_key) = joined.group_key(0);
        // Forgeries under the next 300 packet numbers of the sender.
        let next = u64::from(*multicast.borrow().iter().max().unwrap()) + 1;
        let garbage = vec![0xEE; 1000];
        let reset = CloseFrame {
            code: 1,
            reason: "forged",
        };
        let mut forged = 0;
        for pn in next..next + 300 {
            let frame = match pn % 4 {
                0 => Frame::Reset(reset.clone()),
                1 => Frame::Close(reset.clone()),
                _ => Frame::Data(DataFrame {
                    offset: (pn - next) * 1000 % (2 << 20),
                    timestamp: WireTimestamp(0),
                    fin: pn % 4 == 2,
                    message_end: false,
                    payload: &garbage,
                }),
            };
            let multicast = HeaderFlags::default().with(HeaderFlags::MULTICAST);
            let mut d = datagram(multicast, 42, pn as u32, &frame);
            group.seal(&mut d, 0, pn);
            for m in 0..2 {
                net.members[m].handle_datagram(net.now, SENDER.parse().unwrap(), &d);
            }
            forged += 1;
            // The same DATA as listed data (no tag, the listed-data key):
            // below the lists sent so far, and beyond them.
            if let Frame::Data(_) = frame {
                let listed = multicast.with(HeaderFlags::LISTED);
                let mut d = datagram(listed, 42, pn as u32, &frame);
                data_key.apply(&mut d, pn);
                for m in 0..2 {
                    net.members[m].handle_datagram(net.now, SENDER.parse().unwrap(), &d);
                }
                forged += 1;
            }
        }
        // Lists that name forged hashes, under signatures of their own: a
        // segment list and a datagram list.
        let segments = Frame::Segments(fanout_transport::protection::segments::SegmentList {
            start: 0,
            entries: vec![
                fanout_transport::protection::segments::ListEntry::single(1000, [0; 16]);
                40
            ],
            signature: [7; 64],
        });
        let datagrams = Frame::Signature(SignedList {
            entries: (next..next + 40).map(|p| (p, [0; 16])).collect(),
            signature: [7; 64],
        });
        for (pn, list) in [(next + 999, segments), (next + 1000, datagrams)] {
            let multicast = HeaderFlags::default().with(HeaderFlags::MULTICAST);
            let mut d = datagram(multicast, 42, pn as u32, &list);
            group.seal(&mut d, 0, pn);
            for m in 0..2 {
                net.members[m].handle_datagram(net.now, SENDER.parse().unwrap(), &d);
            }
        }
        net.hold_fin = false;
        net.run(Duration::from_secs(60));
        assert!(forged > 0);
        assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
        assert!(net.got.iter().all(|g| *g == data), "no forged byte arrived");
        for m in &net.members {
            assert!(m.stats().drops.get(DropReason::Unauthenticated) >= 1);
        }
    }

    /// Receivers hold multicast data until its signed list arrives (up to
    /// the signing interval); they report the hold as ACK delay, so the
    /// sender's RTT estimate stays the path's (20 ms here), not the path's
    /// plus the hold.
    #[test]
    fn the_wait_for_signed_lists_does_not_inflate_the_senders_rtt() {
        let data = random_data(4 << 20, 25);
        let mut net = net(&[PSK; 3], data.clone(), Box::new(|_, _, _| false));
        net.hold_fin = true;
        net.run(Duration::from_millis(1500));
        let srtts: Vec<f64> = net
            .sender
            .member_snapshots()
            .map(|m| m.srtt.as_secs_f64() * 1e3)
            .collect();
        assert_eq!(srtts.len(), 3);
        for srtt in &srtts {
            assert!((19.9..20.5).contains(srtt), "srtt {srtt:.3} ms: {srtts:?}");
        }
        net.hold_fin = false;
        net.run(Duration::from_secs(30));
        assert!(net.got.iter().all(|g| *g == data));
    }

    /// A flood of junk first messages is read only within the handshake
    /// budget (1024 at once, then 2 000 a second; each read may cost X25519
    /// work), the rest dropped unread and counted; honest joiners retry
    /// and complete.
    #[test]
    fn junk_handshakes_are_read_within_a_budget_and_joiners_still_get_in() {
        let data = random_data(256 << 10, 26);
        let mut net = net(&[PSK; 2], data.clone(), Box::new(|_, _, _| false));
        for i in 0..1824u32 {
            let junk = vec![(i % 251) as u8; 80];
            let d = datagram(HeaderFlags::default(), 0, i, &Frame::Handshake(&junk));
            let from = SocketAddr::from(([10, 0, 9, (i % 200) as u8], 7000 + i as u16));
            net.sender.handle_datagram(net.now, from, &d);
        }
        let drops = &net.sender.stats().drops;
        assert_eq!(drops.get(DropReason::Unauthenticated), 1024);
        assert_eq!(drops.get(DropReason::LimitExceeded), 800);
        net.run(Duration::from_secs(30));
        assert_eq!(net.sender.close_reason(), Some(&CloseReason::Completed));
        assert!(net.got.iter().all(|g| *g == data));
    }
}

/// A session started at an offset (a restarted sender resuming its
/// stream): members are admitted there and get the stream from it on;
/// once data went out, or a member joined, the start cannot move.
#[test]
fn a_stream_started_at_an_offset_is_delivered_from_it() {
    let full = random_data(4 << 20, 12);
    let s0 = 3_000_001u64;
    let cfg = SessionConfig {
        wait_for_members: 2,
        join: JoinPolicy::CatchUp,
        ..config()
    };
    let mut net = Net::new(
        cfg,
        2,
        full[s0 as usize..].to_vec(),
        Box::new(|_, _, _| false),
    );
    assert!(net.sender.start_stream_at(s0));
    assert_eq!(net.sender.snd_nxt(), s0);
    net.run(Duration::from_secs(60));
    for (i, m) in net.members.iter().enumerate() {
        assert_eq!(m.start_offset(), s0, "member {i}");
        assert!(net.got[i] == full[s0 as usize..], "member {i}");
        assert_eq!(m.close_reason(), Some(&CloseReason::Completed));
    }
    assert_eq!(net.sender.bytes_acked_by_all(), full.len() as u64);
    assert!(!net.sender.start_stream_at(0), "too late to move the start");
}

/// The largest DATA datagram the loss hook saw multicast, shared with it.
fn largest_multicast_data() -> (Loss, std::rc::Rc<std::cell::Cell<usize>>) {
    let largest = std::rc::Rc::new(std::cell::Cell::new(0));
    let seen = largest.clone();
    let loss: Loss = Box::new(move |to, bytes, multicast| {
        if to.is_some() && multicast && is_data(bytes) {
            seen.set(seen.get().max(bytes.len()));
        }
        false
    });
    (loss, largest)
}

#[test]
fn a_joiner_with_a_smaller_path_shrinks_the_sessions_datagrams_before_data_flows() {
    let data = random_data(8 << 20, 21);
    let cfg = SessionConfig {
        wait_for_members: 3,
        join: JoinPolicy::Live,
        ..config()
    };
    let (loss, largest) = largest_multicast_data();
    let mut net = Net::new(cfg.clone(), 2, data.clone(), loss);
    // The third joiner's path carries 1300-byte datagrams (a smaller link
    // somewhere; it says so by the payload its CONNECT accepts).
    let small = fanout_transport::TransportConfig {
        max_datagram: 1300,
        ..cfg.transport.clone()
    };
    net.join(&small);
    net.run(Duration::from_millis(80));
    assert!(net.got[0].len() < data.len() / 2, "joins before the end");
    // After data flowed, a joiner cannot shrink it: told the session's
    // size, it leaves saying why.
    let smaller = fanout_transport::TransportConfig {
        max_datagram: 1250,
        ..cfg.transport.clone()
    };
    net.join(&smaller);
    net.run(Duration::from_secs(30));
    for i in 0..3 {
        assert!(net.got[i] == data, "member {i}");
    }
    assert_eq!(net.sender.max_datagram(), 1300);
    assert!(largest.get() <= 1300, "{}", largest.get());
    assert!(largest.get() > 1290, "full segments: {}", largest.get());
    let fitted: Vec<_> = net
        .events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::DatagramsFitted { addr, max_datagram } => Some((*addr, *max_datagram)),
            _ => None,
        })
        .collect();
    assert_eq!(fitted, [(member_addr(2), 1300)]);
    let left = net.events.iter().find_map(|e| match e {
        SessionEvent::MemberLeft { addr, reason, .. } if *addr == member_addr(3) => Some(reason),
        _ => None,
    });
    assert!(
        left.is_some_and(|r| r.contains("more than this receiver's route takes")),
        "{left:?}"
    );
    assert!(net.got[3].is_empty());
}

#[test]
fn a_joiner_below_the_smallest_path_cannot_shrink_the_session() {
    // 600-byte datagrams are below any path IPv6 allows: such a joiner (or
    // a hostile one) would multiply the session's datagrams; it is told
    // the session's size and leaves, and the others go on at full size.
    let data = random_data(1 << 20, 22);
    let cfg = SessionConfig {
        wait_for_members: 2,
        ..config()
    };
    let (loss, largest) = largest_multicast_data();
    let mut net = Net::new(cfg.clone(), 1, data.clone(), loss);
    let tiny = fanout_transport::TransportConfig {
        max_datagram: 600,
        ..cfg.transport.clone()
    };
    net.join(&tiny);
    net.run(Duration::from_secs(30));
    assert!(net.got[0] == data);
    assert!(net.got[1].is_empty());
    assert_eq!(net.sender.max_datagram(), cfg.transport.max_datagram);
    let full = cfg.transport.max_datagram;
    assert!(
        largest.get() <= full && largest.get() > full - 8,
        "{}",
        largest.get()
    );
    assert!(!net
        .events
        .iter()
        .any(|e| matches!(e, SessionEvent::DatagramsFitted { .. })));
}
