//! Story tests of real-time sessions (TCP-CM, TCP-RTM; `fanout_transport::realtime`):
//! messages through a pushed queue, lost ones skipped instead of repaired
//! (or repaired only while in time), receivers reading whole messages.

use fanout_core::time::Instant;
use fanout_core::{drain, Engine, Rng};
use fanout_transport::realtime::{QueueLimit, QueueOrder, RealtimeSend};
use fanout_transport::session::{SessionConfig, SessionSender};
use fanout_transport::wire::{decode_frames, Frame, Header};
use fanout_transport::{Receiver, TransportConfig};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

const ONE_WAY: Duration = Duration::from_millis(10);
const GROUP: &str = "239.1.1.1:7000";
const SENDER: &str = "10.0.0.1:5000";

fn member_addr(i: usize) -> SocketAddr {
    format!("10.0.1.{}:7000", i + 1).parse().unwrap()
}

fn at(ms: u64) -> Instant {
    Instant::ZERO + Duration::from_millis(ms)
}

/// A message: its number, then bytes that depend on it, `len` in all.
fn message(id: u32, len: usize) -> Vec<u8> {
    let mut m: Vec<u8> = (0..len)
        .map(|i| (i as u32 ^ id.wrapping_mul(31)) as u8)
        .collect();
    m[..4].copy_from_slice(&id.to_be_bytes());
    m
}

fn id_of(m: &[u8]) -> u32 {
    u32::from_be_bytes(m[..4].try_into().unwrap())
}

/// What the sender's application writes: at `at`, a message of `len`
/// bytes, its deadline `budget` later (none without).
struct Schedule {
    every: Duration,
    count: u32,
    len: fn(u32) -> usize,
    budget: Option<Duration>,
}

/// Datagrams in flight, by arrival: `(to member, or None for the sender;
/// the member that sent it, if to the sender; bytes)`.
type Wire = BTreeMap<(Instant, u64), (Option<usize>, usize, Vec<u8>)>;

struct Net {
    now: Instant,
    sender: SessionSender,
    members: Vec<Receiver>,
    got: Vec<Vec<Vec<u8>>>,
    wire: Wire,
    seq: u64,
    rng: Rng,
    /// Probability (per mille) that a datagram from the sender to a member
    /// is lost, independently per member.
    loss_per_mille: u64,
    /// Probability (per mille) that a datagram from a member to the
    /// sender is lost.
    feedback_loss_per_mille: u64,
    /// Every ACK sent at or after this time is lost.
    feedback_cut_at: Option<Instant>,
    /// DATA datagrams that carried bytes sent before (repairs), and SKIPs,
    /// as seen on the wire.
    resent_data: u64,
    skip_datagrams: u64,
    /// Repairs and SKIPs never reach this member.
    no_repairs_to: Option<usize>,
    /// One past the highest stream byte sent.
    sent_end: u64,
    /// The first datagram with a FIN and no data to this member is lost,
    /// and every CLOSE: it must see the end of the stream by itself.
    drop_first_fin_to: Option<usize>,
    fins_dropped: u64,
    /// This member's application reads nothing during this time.
    reads_paused: Option<(usize, std::ops::Range<Instant>)>,
    /// The first `n` DATA datagrams starting at this offset are lost to
    /// every member: `(offset, n)`.
    lose_first_sends_of: Option<(u64, u32)>,
    /// DATA datagrams starting at that offset, as sent.
    sends_of_lost: u32,
    /// When each of them was sent.
    sends_of_lost_at: Vec<Instant>,
    /// The first ACK that reports a hole (SACK blocks) is lost.
    lose_first_hole_ack: bool,
    /// ACKs that reported a hole, as sent.
    hole_acks: u32,
}

fn realtime_receiver(latency: Option<Duration>) -> TransportConfig {
    TransportConfig {
        realtime: true,
        realtime_latency: latency,
        ..TransportConfig::default()
    }
}

impl Net {
    fn new(n: usize, mode: RealtimeSend, loss_per_mille: u64, seed: u64) -> Net {
        Self::with_latency(n, mode, loss_per_mille, seed, None)
    }

    fn with_latency(
        n: usize,
        mode: RealtimeSend,
        loss_per_mille: u64,
        seed: u64,
        latency: Option<Duration>,
    ) -> Net {
        let config = SessionConfig {
            group: Some(GROUP.parse().unwrap()),
            wait_for_members: n,
            realtime: Some(mode),
            ..SessionConfig::default()
        };
        Net {
            now: Instant::ZERO,
            sender: SessionSender::new(config, 42, Instant::ZERO),
            members: (0..n)
                .map(|_| {
                    Receiver::join(
                        realtime_receiver(latency),
                        SENDER.parse().unwrap(),
                        Instant::ZERO,
                    )
                })
                .collect(),
            got: vec![Vec::new(); n],
            wire: BTreeMap::new(),
            seq: 0,
            rng: Rng::new(seed),
            loss_per_mille,
            feedback_loss_per_mille: 0,
            feedback_cut_at: None,
            resent_data: 0,
            skip_datagrams: 0,
            no_repairs_to: None,
            sent_end: 0,
            drop_first_fin_to: None,
            fins_dropped: 0,
            reads_paused: None,
            lose_first_sends_of: None,
            sends_of_lost: 0,
            sends_of_lost_at: Vec::new(),
            lose_first_hole_ack: false,
            hole_acks: 0,
        }
    }

    fn pump(&mut self) -> Option<Instant> {
        let mut buf = Vec::new();
        let mut out = Vec::new();
        let mut next = drain(&mut self.sender, self.now, &mut buf, 256, |t, b| {
            out.push((t.destination, b.to_vec()))
        });
        let group: SocketAddr = GROUP.parse().unwrap();
        for (dest, bytes) in out {
            let kind = first_frame(&bytes);
            let mut lost_to_all = false;
            if let (Some(Kind::Data(range)), Some((offset, n))) = (&kind, self.lose_first_sends_of)
            {
                if range.start == offset {
                    self.sends_of_lost += 1;
                    self.sends_of_lost_at.push(self.now);
                    lost_to_all = self.sends_of_lost <= n;
                }
            }
            let resent = match &kind {
                Some(Kind::Data(range)) => {
                    let again = range.start < self.sent_end;
                    self.resent_data += u64::from(again);
                    self.sent_end = self.sent_end.max(range.end);
                    again
                }
                Some(Kind::Skip) => {
                    self.skip_datagrams += 1;
                    true
                }
                Some(Kind::Fin | Kind::Close) | None => false,
            };
            for i in 0..self.members.len() {
                if dest != group && dest != member_addr(i) {
                    continue;
                }
                if lost_to_all
                    || self.rng.below(1000) < self.loss_per_mille
                    || (resent && self.no_repairs_to == Some(i))
                {
                    continue;
                }
                if self.drop_first_fin_to == Some(i) {
                    match kind {
                        Some(Kind::Fin) if self.fins_dropped == 0 => {
                            self.fins_dropped += 1;
                            continue;
                        }
                        Some(Kind::Close) => continue,
                        _ => {}
                    }
                }
                self.seq += 1;
                self.wire
                    .insert((self.now + ONE_WAY, self.seq), (Some(i), 0, bytes.clone()));
            }
        }
        for i in 0..self.members.len() {
            let mut m = Vec::new();
            let paused = self
                .reads_paused
                .as_ref()
                .is_some_and(|(p, during)| *p == i && during.contains(&self.now));
            while !paused && self.members[i].read_message(self.now, &mut m).is_some() {
                self.got[i].push(std::mem::take(&mut m));
            }
            let mut acks = Vec::new();
            let t = drain(&mut self.members[i], self.now, &mut buf, 64, |_, b| {
                acks.push(b.to_vec())
            });
            for bytes in acks {
                if reports_a_hole(&bytes) {
                    self.hole_acks += 1;
                    if self.lose_first_hole_ack && self.hole_acks == 1 {
                        continue;
                    }
                }
                if self.rng.below(1000) < self.feedback_loss_per_mille
                    || self.feedback_cut_at.is_some_and(|t| self.now >= t)
                {
                    continue;
                }
                self.seq += 1;
                self.wire
                    .insert((self.now + ONE_WAY, self.seq), (None, i, bytes));
            }
            next = [next, t].into_iter().flatten().min();
        }
        next
    }

    /// Runs the schedule, then until every member finished (or `limit`).
    fn run(&mut self, s: &Schedule, limit: Duration) {
        let end = Instant::ZERO + limit;
        let mut written = 0u32;
        // Messages start once every member joined (a lost CONNECT is sent
        // again a second later).
        let mut start = None;
        while self.now < end {
            if start.is_none() && self.sender.stats().members_joined == self.members.len() as u64 {
                start = Some(self.now + Duration::from_millis(50));
            }
            let start = start.unwrap_or(end);
            while written < s.count && start + s.every * written <= self.now {
                let id = written;
                let deadline = s.budget.map(|b| self.now + b);
                assert!(self
                    .sender
                    .send_message(self.now, &message(id, (s.len)(id)), deadline));
                written += 1;
                if written == s.count {
                    self.sender.finish();
                }
            }
            let timer = self.pump();
            if self.members.iter().all(|m| m.is_finished()) && self.wire.is_empty() {
                return;
            }
            let next_write = (written < s.count).then(|| start + s.every * written);
            let wire = self.wire.keys().next().map(|k| k.0);
            let next = [timer, wire, next_write]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(end);
            self.now = self.now.max(next.min(end));
            while let Some(e) = self.wire.first_entry() {
                if e.key().0 > self.now {
                    break;
                }
                let (to, from_member, bytes) = e.remove();
                match to {
                    Some(i) => {
                        self.members[i].handle_datagram(self.now, SENDER.parse().unwrap(), &bytes)
                    }
                    None => {
                        let from = member_addr(from_member);
                        self.sender.handle_datagram(self.now, from, &bytes)
                    }
                }
            }
        }
    }

    /// Every member's messages are whole and in the order `ordered` allows,
    /// none twice; returns how many each got.
    fn check_messages(&self, len: fn(u32) -> usize, increasing: bool) -> Vec<usize> {
        self.got
            .iter()
            .map(|msgs| {
                let mut last: Option<u32> = None;
                for m in msgs {
                    let id = id_of(m);
                    assert_eq!(m, &message(id, len(id)), "message {id} whole and intact");
                    if let Some(l) = last {
                        assert!(
                            if increasing { id > l } else { id < l },
                            "message {id} after {l}"
                        );
                    }
                    last = Some(id);
                }
                msgs.len()
            })
            .collect()
    }
}

enum Kind {
    Data(std::ops::Range<u64>),
    /// A FIN without data.
    Fin,
    Skip,
    Close,
}

fn first_frame(bytes: &[u8]) -> Option<Kind> {
    let (_, body) = Header::decode(bytes).ok()?;
    let first = decode_frames(body).find(|f| !matches!(f, Ok(Frame::Deadline(_))));
    match first?.ok()? {
        Frame::Data(d) if !d.payload.is_empty() => Some(Kind::Data(d.range())),
        Frame::Data(d) if d.fin => Some(Kind::Fin),
        Frame::Skip(_) => Some(Kind::Skip),
        Frame::Close(_) => Some(Kind::Close),
        _ => None,
    }
}

/// Whether a member's datagram holds an ACK with SACK blocks.
fn reports_a_hole(bytes: &[u8]) -> bool {
    let Ok((_, body)) = Header::decode(bytes) else {
        return false;
    };
    decode_frames(body).any(|f| matches!(f, Ok(Frame::Ack(a)) if !a.sack.is_empty()))
}

/// Messages of 300 to 3000 bytes: some shorter than a segment, some split.
fn mixed_len(id: u32) -> usize {
    300 + (id as usize * 677) % 2700
}

#[test]
fn without_deadlines_no_lost_segment_is_sent_again_and_every_other_message_arrives_whole() {
    // TCP-CM: 4 members losing 2% each; 1000 messages at 100 per second.
    let mut net = Net::new(4, RealtimeSend::with_defaults(1452), 20, 1);
    let s = Schedule {
        every: Duration::from_millis(10),
        count: 1000,
        len: mixed_len,
        budget: None,
    };
    net.run(&s, Duration::from_secs(30));
    assert!(
        net.members.iter().all(|m| m.is_finished()),
        "every member read to the end"
    );
    let counts = net.check_messages(mixed_len, true);
    let st = net.sender.stats();
    assert_eq!(st.repair_bytes, 0, "no stale retransmission");
    assert_eq!(net.resent_data, 0, "no data on the wire twice");
    assert!(st.skips_sent > 0 && net.skip_datagrams >= st.skips_sent);
    for (i, m) in net.members.iter().enumerate() {
        let rs = m.stats();
        assert_eq!(rs.messages_read as usize, counts[i]);
        assert_eq!(
            rs.messages_read + rs.messages_dropped,
            1000,
            "member {i}: every message read or dropped"
        );
        // 5% of datagrams lost; a message of up to 3 segments.
        assert!(
            rs.messages_dropped > 10 && rs.messages_dropped < 200,
            "member {i}: {rs:?}"
        );
    }
    let q = net.sender.realtime_stats().unwrap();
    assert_eq!(q.queue.discarded, 0, "the queue never filled: {q:?}");
}

#[test]
fn with_deadlines_a_loss_is_repaired_while_in_time() {
    // TCP-RTM: RTT 20 ms, each message's deadline 300 ms after it was
    // written: every loss can be repaired in time, so nothing is skipped.
    let mut net = Net::new(4, RealtimeSend::with_defaults(1452), 20, 2);
    let s = Schedule {
        every: Duration::from_millis(10),
        count: 1000,
        len: mixed_len,
        budget: Some(Duration::from_millis(300)),
    };
    net.run(&s, Duration::from_secs(30));
    assert!(net.members.iter().all(|m| m.is_finished()));
    let counts = net.check_messages(mixed_len, true);
    assert!(counts.iter().all(|&c| c == 1000), "{counts:?}");
    let st = net.sender.stats();
    assert!(st.repair_bytes > 0 && net.resent_data > 0);
    assert_eq!(st.skips_sent, 0);
    // Each receiver measures its delivery delay from the sender's clock:
    // most messages take the 10 ms one way; the repaired ones a round trip
    // or two more, none near the budget.
    for m in &net.members {
        let d = m.delivery_delays().unwrap();
        assert_eq!(d.count(), 1000);
        let p50 = d.percentile(0.5).unwrap();
        assert!((9..=12).contains(&p50.as_millis()), "{p50:?}");
        assert!(d.max() < Duration::from_millis(300), "{:?}", d.max());
        assert!(m.jitter() < Duration::from_millis(2), "{:?}", m.jitter());
    }
}

#[test]
fn a_deadline_shorter_than_a_repair_takes_is_never_repaired() {
    // Deadline 25 ms after writing: a message arrives in time (10 ms one
    // way; the sender and the receiver count the whole 20 ms round trip
    // as the way there, and 4 ms of margin), a repair never could (the
    // loss shows a round trip later), so every loss is skipped.
    let mut net = Net::new(2, RealtimeSend::with_defaults(1452), 20, 3);
    let s = Schedule {
        every: Duration::from_millis(10),
        count: 400,
        len: mixed_len,
        budget: Some(Duration::from_millis(25)),
    };
    net.run(&s, Duration::from_secs(30));
    assert!(net.members.iter().all(|m| m.is_finished()));
    net.check_messages(mixed_len, true);
    let st = net.sender.stats();
    assert_eq!(st.repair_bytes, 0);
    assert!(st.skips_sent > 0);
    // Messages that waited past their deadline in the queue never went.
    let q = net.sender.realtime_stats().unwrap().queue;
    assert_eq!(q.taken + q.expired, 400);
    for m in &net.members {
        assert!(m.stats().messages_dropped > 0);
        assert_eq!(
            m.stats().messages_read + m.stats().messages_dropped,
            q.taken
        );
    }
}

#[test]
fn a_receiver_with_a_latency_budget_skips_a_hole_the_sender_does_not() {
    // Deadlines 10 s out: the sender repairs every loss, but no repair
    // reaches member 0. With a 100 ms budget it gives up each hole
    // itself once the data behind it waited 100 ms, and reads on.
    let mut net = Net::with_latency(
        2,
        RealtimeSend::with_defaults(1452),
        20,
        5,
        Some(Duration::from_millis(100)),
    );
    net.no_repairs_to = Some(0);
    let s = Schedule {
        every: Duration::from_millis(10),
        count: 500,
        len: mixed_len,
        budget: Some(Duration::from_secs(10)),
    };
    net.run(&s, Duration::from_secs(60));
    net.check_messages(mixed_len, true);
    let r0 = net.members[0].stats();
    assert!(r0.late_skipped_bytes > 0, "{r0:?}");
    assert!(r0.messages_dropped > 0);
    assert!(
        net.members[0].is_finished(),
        "member 0 read to the end: {r0:?}"
    );
}

#[test]
fn losses_both_ways_never_stall_a_stream_with_deadlines() {
    // 5% of the datagrams lost each way, budgets of 4 round trips, a
    // 1 Mbit/s stream with deadlines (about half the TCP-friendly rate
    // there): an ACK saying that the member skipped a hole itself may be
    // lost, and the sender then skips that range again; the member must
    // answer such a SKIP even though it is long past it, or a sender with
    // a full window waits until it evicts the member for stalling.
    for seed in 1..=4 {
        let mode = RealtimeSend {
            deadlines: true,
            ..RealtimeSend::with_defaults(1452)
        };
        let mut net = Net::with_latency(1, mode, 50, seed, Some(Duration::from_millis(80)));
        net.feedback_loss_per_mille = 50;
        let s = Schedule {
            every: Duration::from_millis(10),
            count: 2000,
            len: |_| 1316,
            budget: Some(Duration::from_millis(80)),
        };
        net.run(&s, Duration::from_secs(60));
        let st = net.sender.stats();
        assert_eq!(st.members_left, 0, "seed {seed}: nobody evicted: {st:?}");
        assert!(net.members[0].is_finished(), "seed {seed}: read to the end");
        let read = net.check_messages(|_| 1316, true)[0];
        // A few messages still expire in the queue after a timeout (both
        // ACKs of a round trip lost); what must never happen is the
        // eviction.
        assert!(read > 1900, "seed {seed}: {read} of 2000 read");
    }
}

/// One member, 40 messages of 1316 bytes one every 22 ms, each due 120 ms
/// after it is written, on a 20 ms round trip, `lose` set on the network
/// first; run until the member finished.
fn sparse_stream(lose: impl FnOnce(&mut Net)) -> Net {
    let mode = RealtimeSend {
        deadlines: true,
        ..RealtimeSend::with_defaults(1452)
    };
    let mut net = Net::with_latency(1, mode, 0, 1, Some(Duration::from_millis(120)));
    lose(&mut net);
    let s = Schedule {
        every: Duration::from_millis(22),
        count: 40,
        len: |_| 1316,
        budget: Some(Duration::from_millis(120)),
    };
    net.run(&s, Duration::from_secs(10));
    assert!(net.members[0].is_finished());
    net
}

#[test]
fn a_repair_lost_once_goes_twice_when_no_later_one_could_arrive_in_time() {
    // One message every 22 ms, each due 120 ms after it is written, on a
    // 20 ms round trip. Message 10's segment is lost, then its repair;
    // the second repair is the last that can arrive in time (its loss
    // would be known only after the next message's round trip), so it
    // goes twice, and the message arrives although one copy is lost too.
    // A loss whose first repair arrives costs one repair only.
    let run = |lost_sends: u32| {
        let net = sparse_stream(|net| net.lose_first_sends_of = Some((10 * 1316, lost_sends)));
        let read: Vec<u32> = net.got[0].iter().map(|m| id_of(m)).collect();
        (read, net.sends_of_lost, net.sender.stats().second_copies)
    };
    let (read, sends, st) = run(3);
    assert!(read.contains(&10), "message 10 read: {read:?}");
    assert_eq!(read.len(), 40);
    assert_eq!((sends, st), (4, 1), "copies: {st}");
    // Lost only once: repaired once, no second copy.
    let (read, sends, st) = run(1);
    assert_eq!(read.len(), 40);
    assert_eq!((sends, st), (2, 0), "copies: {st}");
}

#[test]
fn an_ack_reporting_a_hole_goes_again_so_its_loss_costs_no_message_interval() {
    // One message every 22 ms on a 20 ms round trip. Message 10 is lost,
    // and so is the ACK that reports it (sent when message 11 arrives,
    // 32 ms after message 10 went). The ACK goes again a quarter round
    // trip later: the repair goes about 47 ms after the message, not with
    // message 12's ACK at 64 ms.
    let net = sparse_stream(|net| {
        net.lose_first_sends_of = Some((10 * 1316, 1));
        net.lose_first_hole_ack = true;
    });
    assert_eq!(net.got[0].len(), 40);
    let at = &net.sends_of_lost_at;
    assert_eq!(at.len(), 2, "sent, then repaired once");
    let waited = at[1] - at[0];
    assert!(
        waited >= Duration::from_millis(42) && waited <= Duration::from_millis(52),
        "repaired {waited:?} after"
    );
}

#[test]
fn lifo_sends_the_newest_first_and_a_full_queue_drops_the_oldest() {
    // 100 messages written before the members joined: P-LIFO with room
    // for 20 keeps the newest 20 and sends them newest first.
    let mode = RealtimeSend {
        order: QueueOrder::Lifo,
        limit: QueueLimit::Bytes(20 * 1000),
        deadlines: false,
    };
    let mut net = Net::new(2, mode, 0, 4);
    for id in 0..100 {
        assert!(net
            .sender
            .send_message(Instant::ZERO, &message(id, 1000), None));
    }
    net.sender.finish();
    let s = Schedule {
        every: Duration::from_millis(1),
        count: 0,
        len: |_| 1000,
        budget: None,
    };
    net.run(&s, Duration::from_secs(10));
    assert!(net.members.iter().all(|m| m.is_finished()));
    let counts = net.check_messages(|_| 1000, false);
    assert_eq!(counts, vec![20, 20]);
    assert_eq!(id_of(&net.got[0][0]), 99);
    let q = net.sender.realtime_stats().unwrap();
    assert_eq!(q.queue.discarded, 80);
}

#[test]
fn a_fin_lost_after_the_last_message_was_read_still_ends_the_stream() {
    // Member 0 read every message, then its FIN was lost, and no CLOSE
    // reaches it: the FIN's repair (it is never skipped) ends its stream.
    let mut net = Net::new(2, RealtimeSend::with_defaults(1452), 0, 6);
    net.drop_first_fin_to = Some(0);
    let s = Schedule {
        every: Duration::from_millis(10),
        count: 50,
        len: mixed_len,
        budget: None,
    };
    net.run(&s, Duration::from_secs(30));
    assert!(
        net.fins_dropped > 0,
        "the FIN went in a datagram of its own"
    );
    assert!(net.members.iter().all(|m| m.is_finished()));
    assert_eq!(net.check_messages(mixed_len, true), vec![50, 50]);
}

#[test]
fn a_reliable_receiver_refuses_a_skip() {
    use fanout_core::stats::DropReason;
    use fanout_transport::wire::SkipFrame;
    // A member of a reliable session must never get a hole: a SKIP from
    // its own sender is dropped and counted.
    let mut r = Receiver::join(
        TransportConfig::default(),
        SENDER.parse().unwrap(),
        Instant::ZERO,
    );
    let mut out = Vec::new();
    Header {
        flags: Default::default(),
        session_id: 0,
        packet_number: 1,
    }
    .encode(&mut out);
    Frame::Skip(SkipFrame {
        offset: 0,
        len: 100,
        ends_message: true,
    })
    .encode(&mut out);
    r.handle_datagram(at(1), SENDER.parse().unwrap(), &out);
    assert_eq!(r.stats().skipped_bytes, 0);
    let drops = &r.stats().drops;
    assert!(
        drops.get(DropReason::UnexpectedFrame) + drops.get(DropReason::UnknownPeer) > 0,
        "{drops:?}"
    );
}

/// The same with packet protection: SKIPs multicast under the group key
/// and signed like every control datagram, DATA checked against the
/// sender's signed lists; 2% loss.
#[test]
fn a_protected_session_skips_losses_and_delivers_whole_messages() {
    use fanout_transport::protection::{Credentials, Protection};
    let prot = |seed: u8| Some(Protection::new(Credentials::with_psk([7; 32]), [seed; 32]));
    let mut net = Net::new(3, RealtimeSend::with_defaults(1452), 20, 9);
    let config = SessionConfig {
        group: Some(GROUP.parse().unwrap()),
        wait_for_members: 3,
        realtime: Some(RealtimeSend::with_defaults(1452)),
        transport: TransportConfig {
            protection: prot(200),
            ..TransportConfig::default()
        },
        ..SessionConfig::default()
    };
    net.sender = SessionSender::new(config, 42, Instant::ZERO);
    for (i, m) in net.members.iter_mut().enumerate() {
        let mut t = realtime_receiver(None);
        t.protection = prot(i as u8);
        *m = Receiver::join(t, SENDER.parse().unwrap(), Instant::ZERO);
    }
    let s = Schedule {
        every: Duration::from_millis(10),
        count: 500,
        len: mixed_len,
        budget: None,
    };
    net.run(&s, Duration::from_secs(30));
    assert!(net.members.iter().all(|m| m.is_finished()));
    net.check_messages(mixed_len, true);
    assert_eq!(net.sender.stats().repair_bytes, 0);
    assert!(net.sender.stats().skips_sent > 0);
    for m in &net.members {
        let st = m.stats();
        assert_eq!(st.messages_read + st.messages_dropped, 500, "{st:?}");
        assert!(
            st.messages_dropped > 0
                && st
                    .drops
                    .get(fanout_core::stats::DropReason::Unauthenticated)
                    == 0,
            "{st:?}"
        );
    }
}

#[test]
fn a_message_is_never_read_after_the_deadline_the_sender_named() {
    // Deadlines 100 ms after writing, named on the wire (DEADLINE); member
    // 0's application stops reading from 1 s to 1.5 s. When it reads
    // again, the messages that came due meanwhile are dropped as late, not
    // delivered; every other message is read, in time, by both members.
    let mode = RealtimeSend {
        deadlines: true,
        ..RealtimeSend::with_defaults(1452)
    };
    let mut net = Net::new(2, mode, 0, 7);
    net.reads_paused = Some((0, at(1000)..at(1500)));
    let s = Schedule {
        every: Duration::from_millis(10),
        count: 300,
        len: mixed_len,
        budget: Some(Duration::from_millis(100)),
    };
    net.run(&s, Duration::from_secs(30));
    assert!(net.members.iter().all(|m| m.is_finished()));
    let counts = net.check_messages(mixed_len, true);
    let (r0, r1) = (net.members[0].stats(), net.members[1].stats());
    assert_eq!(counts[1], 300, "{r1:?}");
    assert_eq!(r1.messages_late, 0);
    // About 40 of the 50 written during the pause came due before it
    // ended (those written in its last 100 ms had not).
    assert!((30..=50).contains(&r0.messages_late), "{r0:?}");
    assert_eq!(counts[0] as u64 + r0.messages_late, 300, "{r0:?}");
    assert_eq!(r0.messages_dropped, 0);
}

#[test]
fn a_message_that_cannot_arrive_in_time_is_not_sent() {
    // Deadline 5 ms after writing, 10 ms one way: once the round trip is
    // known, every message expires in the queue instead of arriving late.
    let mut net = Net::new(2, RealtimeSend::with_defaults(1452), 0, 4);
    let s = Schedule {
        every: Duration::from_millis(10),
        count: 200,
        len: mixed_len,
        budget: Some(Duration::from_millis(5)),
    };
    net.run(&s, Duration::from_secs(30));
    assert!(net.members.iter().all(|m| m.is_finished()));
    let q = net.sender.realtime_stats().unwrap().queue;
    assert!(q.expired > 190, "{q:?}");
    assert_eq!(q.taken + q.expired, 200);
}

#[test]
fn a_message_waits_for_a_shut_window_in_the_queue_where_it_expires() {
    // From 500 ms on no ACK comes back: the window shuts. Messages written
    // after that wait in the queue and expire there when their deadline
    // comes; none is moved into the send buffer to wait for the window
    // unchecked, so every message taken from the queue was sent.
    let mut net = Net::new(1, RealtimeSend::with_defaults(1452), 0, 5);
    net.feedback_cut_at = Some(at(500));
    let s = Schedule {
        every: Duration::from_millis(5),
        count: 400,
        len: |_| 1000,
        budget: Some(Duration::from_millis(100)),
    };
    net.run(&s, Duration::from_millis(2500));
    let q = net.sender.realtime_stats().unwrap().queue;
    let sent = net.sender.stats().data_segments;
    assert!(q.expired > 100, "the window shut: {q:?}");
    assert_eq!(q.taken, sent, "{q:?}, {sent} segments sent");
}
