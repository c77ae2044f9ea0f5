//! Address validation (RFC 9000 §8.1 in spirit, `docs/security.md`): for
//! every request an address that never proved itself can send a session
//! sender or a listening receiver, the bytes sent back to that address are
//! at most three times the bytes received from it — counted over 10 s of
//! the session going on, timers, repairs and probes included.
//!
//! The forged address is the victim's: an attacker sends these requests
//! with its source address, and whatever the engine answers lands there.

#[path = "common/merge.rs"]
mod merge;

use fanout_core::time::Instant;
use fanout_core::Engine;
use fanout_transport::address_budget::AMPLIFICATION_LIMIT;
use fanout_transport::merge::{JoinMerge, Merger, MergerConfig};
use fanout_transport::session::{JoinPolicy, MemberId, SessionConfig, SessionSender};
use fanout_transport::wire::{
    AckFrame, CloseFrame, ConnectFrame, Frame, OfferFrame, UpstreamFrame, WireTimestamp,
};
use fanout_transport::Receiver;
use merge::{accept, ack, child_datagram, connect, datagram, receiver_addr, sender_addr};
use std::net::SocketAddr;
use std::time::Duration;

const SESSION: u64 = 0x5e55;
const STEP: Duration = Duration::from_millis(5);
const HORIZON: Duration = Duration::from_secs(10);
/// Stream bytes the application writes every [`STEP`] (3.2 MB/s).
const CHUNK: usize = 16 << 10;

fn honest() -> SocketAddr {
    "10.0.0.2:7000".parse().unwrap()
}

fn victim() -> SocketAddr {
    "192.0.2.66:7000".parse().unwrap()
}

fn group() -> SocketAddr {
    "239.1.1.1:7000".parse().unwrap()
}

/// A session sender with one honest member that acknowledges everything
/// it is sent, and a count of what goes to and comes from the victim.
struct Lab {
    sender: SessionSender,
    now: Instant,
    pn: u32,
    from_victim: u64,
    to_victim: u64,
    /// What the honest member was sent (it acknowledges up to here).
    honest_end: u64,
    /// What it acknowledged last: released, and the lowest offset the
    /// sender still holds.
    honest_acked: u64,
}

impl Lab {
    fn new(config: SessionConfig) -> Lab {
        let mut lab = Lab {
            sender: SessionSender::new(config, SESSION, Instant::ZERO),
            now: Instant::ZERO,
            pn: 0,
            from_victim: 0,
            to_victim: 0,
            honest_end: 0,
            honest_acked: 0,
        };
        let d = datagram(0, 0, &[connect()]);
        lab.sender.handle_datagram(lab.now, honest(), &d);
        let token = lab.sender.member_token(MemberId(1)).unwrap();
        let d = datagram(token, 1, &[Frame::Padding]);
        lab.sender.handle_datagram(lab.now, honest(), &d);
        lab.pump();
        lab
    }

    /// Sends what the sender sends now, counting the victim's share.
    fn pump(&mut self) {
        let mut buf = Vec::new();
        for _ in 0..100_000 {
            buf.clear();
            let Some(t) = self.sender.poll_transmit(self.now, &mut buf) else {
                return;
            };
            if t.destination == victim() {
                self.to_victim += buf.len() as u64;
            }
            if t.destination == group() || t.destination == honest() {
                self.honest_end = self.sender.snd_nxt();
            }
        }
        panic!("the sender never stopped sending");
    }

    /// The honest member acknowledges all it was sent.
    fn honest_ack(&mut self) {
        self.pn += 1;
        let token = self.sender.member_token(MemberId(1)).unwrap_or(0);
        let ack = Frame::Ack(AckFrame {
            cumulative: self.honest_end,
            window: 64 << 20,
            timestamp_echo: WireTimestamp::at(self.now),
            ack_delay_us: 0,
            sack: Vec::new(),
        });
        let d = datagram(token, self.pn, &[ack]);
        self.sender.handle_datagram(self.now, honest(), &d);
        self.honest_acked = self.honest_end;
    }

    /// The attacker sends `d` with the victim's address.
    fn forge(&mut self, d: &[u8]) {
        self.from_victim += d.len() as u64;
        self.sender.handle_datagram(self.now, victim(), d);
        self.pump();
    }

    /// The session goes on for `d`.
    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.now += STEP;
            self.sender.write(&[7u8; CHUNK]);
            self.honest_ack();
            self.sender.handle_timeout(self.now);
            self.pump();
        }
    }

    /// Runs the session past the point where data flows.
    fn started(config: SessionConfig) -> Lab {
        let mut lab = Lab::new(config);
        lab.run(Duration::from_millis(100));
        assert!(lab.sender.snd_nxt() > 100_000, "data flows");
        lab
    }
}

fn multicast(join: JoinPolicy) -> SessionConfig {
    SessionConfig {
        group: Some(group()),
        join,
        // Keep the start in the buffer, so a resume is admitted.
        transport: fanout_transport::TransportConfig {
            send_buffer_bytes: 8 << 20,
            ..Default::default()
        },
        ..SessionConfig::default()
    }
}

fn connect_at(resume_from: u64, window: u64) -> Frame<'static> {
    Frame::Connect(ConnectFrame {
        max_payload: 1400,
        window,
        timestamp: WireTimestamp(0),
        resume_from,
    })
}

/// The datagrams of one request type, given the lowest offset the sender
/// still holds (where a resume is admitted).
type Forge = Box<dyn Fn(u64) -> Vec<Vec<u8>>>;

/// One request type: a name, the session it meets, the datagrams forged.
struct Case {
    name: &'static str,
    config: SessionConfig,
    datagrams: Forge,
}

/// The same datagrams whatever the session holds.
fn fixed(d: Vec<Vec<u8>>) -> Forge {
    Box::new(move |_| d.clone())
}

/// One datagram carrying `frame` under the public session id.
fn under_session_id(frame: Frame<'_>) -> Forge {
    fixed(vec![datagram(SESSION, 0, &[frame])])
}

fn cases() -> Vec<Case> {
    let mut cases = vec![
        Case {
            name: "CONNECT (joins at the send position)",
            config: multicast(JoinPolicy::CatchUp),
            datagrams: fixed(vec![datagram(0, 0, &[connect()])]),
        },
        Case {
            name: "resume CONNECT from an offset the sender still holds",
            config: multicast(JoinPolicy::CatchUp),
            datagrams: Box::new(|held| vec![datagram(0, 0, &[connect_at(held, 1 << 20)])]),
        },
        Case {
            name: "resume CONNECT under the public session id",
            config: multicast(JoinPolicy::CatchUp),
            datagrams: Box::new(|held| vec![datagram(SESSION, 0, &[connect_at(held, 1 << 20)])]),
        },
        Case {
            name: "CONNECT repeated (as a lost ACCEPT would make it)",
            config: multicast(JoinPolicy::CatchUp),
            datagrams: fixed((0..10).map(|i| datagram(0, i, &[connect()])).collect()),
        },
        Case {
            name: "CONNECT refused: window below two segments",
            config: multicast(JoinPolicy::CatchUp),
            datagrams: fixed(vec![datagram(0, 0, &[connect_at(0, 100)])]),
        },
        Case {
            name: "CONNECT refused: file start already released",
            config: SessionConfig {
                transport: fanout_transport::TransportConfig {
                    send_buffer_bytes: 64 << 10,
                    ..Default::default()
                },
                ..multicast(JoinPolicy::FromStart)
            },
            datagrams: fixed(vec![datagram(0, 0, &[connect()])]),
        },
        Case {
            name: "CONNECT refused: session full",
            config: SessionConfig {
                max_members: 1,
                ..multicast(JoinPolicy::CatchUp)
            },
            datagrams: fixed(vec![datagram(0, 0, &[connect()])]),
        },
        Case {
            name: "resume CONNECT beyond the data sent",
            config: multicast(JoinPolicy::CatchUp),
            datagrams: fixed(vec![datagram(0, 0, &[connect_at(1 << 40, 1 << 20)])]),
        },
        Case {
            name: "ACK as if a member",
            config: multicast(JoinPolicy::CatchUp),
            datagrams: under_session_id(Frame::Ack(AckFrame {
                cumulative: 0,
                window: 1 << 20,
                timestamp_echo: WireTimestamp(0),
                ack_delay_us: 0,
                sack: std::iter::once(0..1400).collect(),
            })),
        },
        Case {
            name: "UPSTREAM data",
            config: multicast(JoinPolicy::CatchUp),
            datagrams: under_session_id(Frame::Upstream(UpstreamFrame {
                offset: 0,
                fin: false,
                timestamp: WireTimestamp(0),
                payload: &[1; 200],
            })),
        },
        Case {
            name: "PING, RESET and CLOSE",
            config: multicast(JoinPolicy::CatchUp),
            datagrams: fixed(vec![
                datagram(SESSION, 0, &[Frame::Ping]),
                datagram(
                    SESSION,
                    1,
                    &[Frame::Reset(CloseFrame {
                        code: 1,
                        reason: "x",
                    })],
                ),
                datagram(
                    SESSION,
                    2,
                    &[Frame::Close(CloseFrame {
                        code: 0,
                        reason: "",
                    })],
                ),
            ]),
        },
        Case {
            name: "garbage",
            config: multicast(JoinPolicy::CatchUp),
            datagrams: fixed(vec![vec![0xff; 64], vec![0; 3]]),
        },
    ];
    // A unicast transfer invites one receiver; a stranger's join is
    // refused.
    let mut invited = SessionConfig::unicast(Default::default());
    invited.join = JoinPolicy::CatchUp;
    cases.push(Case {
        name: "CONNECT to a transfer that invited someone else",
        config: invited,
        datagrams: fixed(vec![datagram(0, 0, &[connect()])]),
    });
    cases
}

#[test]
fn a_session_sender_sends_an_unvalidated_address_at_most_three_times_what_it_sent() {
    for case in cases() {
        let unicast = case.config.group.is_none();
        let mut lab = if unicast {
            let mut l = Lab::new(case.config);
            l.sender.offer(l.now, honest());
            l.pump();
            l.run(Duration::from_millis(50));
            l
        } else {
            Lab::started(case.config)
        };
        for d in (case.datagrams)(lab.honest_acked) {
            lab.forge(&d);
            lab.run(Duration::from_millis(100));
        }
        lab.run(HORIZON);
        // The honest member was served all along (the application's
        // writes, less what the sender holds at any moment).
        let steps = (lab.now - Instant::ZERO).as_millis() as u64 / STEP.as_millis() as u64;
        assert!(
            lab.sender.snd_nxt() >= steps * CHUNK as u64 * 9 / 10,
            "{}: {} of {} bytes sent",
            case.name,
            lab.sender.snd_nxt(),
            steps * CHUNK as u64
        );
        let st = lab.sender.stats();
        eprintln!(
            "{}: received {} B, sent back {} B; amplification_limited {}, \
             unvalidated_evicted {}",
            case.name,
            lab.from_victim,
            lab.to_victim,
            st.amplification_limited,
            st.unvalidated_evicted
        );
        assert!(
            lab.to_victim <= AMPLIFICATION_LIMIT * lab.from_victim,
            "{}: {} B sent for {} B received",
            case.name,
            lab.to_victim,
            lab.from_victim
        );
        assert!(
            lab.sender.members().all(|m| m.1 != victim()),
            "{}: the forged member is gone",
            case.name
        );
    }
}

#[test]
fn a_forged_resume_is_evicted_unvalidated_and_never_holds_the_window() {
    let mut lab = Lab::started(multicast(JoinPolicy::CatchUp));
    let before = lab.sender.snd_nxt();
    let held = lab.honest_acked;
    assert!(held < before, "a gap to repair");
    lab.forge(&datagram(0, 0, &[connect_at(held, 1 << 20)]));
    assert_eq!(lab.sender.member_count(), 2, "admitted, unvalidated");
    // The session goes on at the honest member's pace meanwhile.
    lab.run(Duration::from_secs(1));
    assert!(
        lab.sender.snd_nxt() >= before + 190 * CHUNK as u64,
        "{} -> {}",
        before,
        lab.sender.snd_nxt()
    );
    lab.run(Duration::from_secs(3));
    let st = lab.sender.stats();
    assert_eq!(st.unvalidated_evicted, 1, "{st:?}");
    assert_eq!(lab.sender.member_count(), 1);
    assert_eq!(
        st.unicast_repairs, 0,
        "no repair went to the forged address"
    );
}

#[test]
fn a_forged_join_that_echoes_its_token_is_a_member() {
    // The address really is the joiner's: the token comes back, the gap
    // it resumed over is repaired, and it counts.
    let mut lab = Lab::started(multicast(JoinPolicy::CatchUp));
    let held = lab.honest_acked;
    lab.forge(&datagram(0, 0, &[connect_at(held, 1 << 20)]));
    let token = lab.sender.member_token(MemberId(2)).unwrap();
    lab.forge(&datagram(token, 1, &[Frame::Padding]));
    lab.run(Duration::from_millis(200));
    let st = lab.sender.stats();
    assert_eq!(st.unvalidated_evicted, 0);
    assert!(st.unicast_repairs + st.multicast_repairs > 0, "{st:?}");
}

#[test]
fn a_listener_answers_each_offer_with_at_most_one_connect() {
    // An OFFER forged with the victim's address: the listener's CONNECTs
    // go to the victim. It answers each OFFER once and does not retry on
    // its own, so it sends no more than it was sent.
    let mut r = Receiver::listen(Default::default(), Instant::ZERO);
    let offer = datagram(
        SESSION,
        0,
        &[Frame::Offer(OfferFrame {
            max_payload: 1400,
            timestamp: WireTimestamp(0),
        })],
    );
    let (mut from_victim, mut to_victim) = (0u64, 0u64);
    let mut now = Instant::ZERO;
    let mut buf = Vec::new();
    for i in 0..400u32 {
        if i % 100 == 0 {
            r.handle_datagram(now, victim(), &offer);
            from_victim += offer.len() as u64;
        }
        r.handle_timeout(now);
        loop {
            buf.clear();
            let Some(t) = r.poll_transmit(now, &mut buf) else {
                break;
            };
            assert_eq!(t.destination, victim());
            to_victim += buf.len() as u64;
        }
        now += Duration::from_millis(50);
    }
    eprintln!("listener: received {from_victim} B of OFFERs, sent back {to_victim} B");
    assert!(to_victim > 0, "it answered");
    assert!(to_victim <= AMPLIFICATION_LIMIT * from_victim);
}

/// A merger as `fanout merge` runs it (keep-alives every 250 ms, silent
/// children evicted after 2 s) with two honest children acknowledging
/// every 5 ms, then `forged` from the victim's address, then 10 s more.
/// Returns (bytes from the victim, bytes to it).
fn merger_answer(forged: &[Vec<u8>]) -> (u64, u64) {
    let parent = sender_addr();
    let mut m = Merger::new(
        MergerConfig {
            join: JoinMerge::Count(2),
            keepalive: Some(Duration::from_millis(250)),
            child_silence: Some(Duration::from_secs(2)),
            ..MergerConfig::new(parent)
        },
        Instant::ZERO,
    );
    let mut now = Instant::ZERO;
    let (mut from_victim, mut to_victim) = (0u64, 0u64);
    let mut buf = Vec::new();
    let mut pump = |m: &mut Merger, now: Instant, to_victim: &mut u64| {
        for _ in 0..10_000 {
            buf.clear();
            let Some(t) = m.poll_transmit(now, &mut buf) else {
                return;
            };
            if t.destination == victim() {
                *to_victim += buf.len() as u64;
            }
        }
        panic!("the merger never stopped sending");
    };
    for c in 0..2 {
        m.handle_datagram(now, receiver_addr(c), &datagram(0, 0, &[connect()]));
    }
    m.handle_datagram(now, parent, &datagram(SESSION, 0, &[accept(3)]));
    pump(&mut m, now, &mut to_victim);
    let mut pn = 1;
    let step = |m: &mut Merger, now: Instant, pn: &mut u32| {
        *pn += 1;
        let cum = u64::from(*pn) * 1000;
        for c in 0..2 {
            let d = child_datagram(m, c, *pn, &[ack(cum, vec![])]);
            m.handle_datagram(now, receiver_addr(c), &d);
        }
        // The parent is heard too (it sends data to the group).
        m.handle_datagram(now, parent, &datagram(SESSION, *pn, &[Frame::Ping]));
        m.handle_timeout(now);
    };
    for d in forged {
        from_victim += d.len() as u64;
        m.handle_datagram(now, victim(), d);
        pump(&mut m, now, &mut to_victim);
        now += STEP;
        step(&mut m, now, &mut pn);
        pump(&mut m, now, &mut to_victim);
    }
    let end = now + HORIZON;
    while now < end {
        now += STEP;
        step(&mut m, now, &mut pn);
        pump(&mut m, now, &mut to_victim);
    }
    assert_eq!(
        m.children(),
        2,
        "the honest children stay, the forged one is gone"
    );
    (from_victim, to_victim)
}

#[test]
fn a_merger_sends_an_unvalidated_child_address_at_most_three_times_what_it_sent() {
    let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("CONNECT", vec![datagram(0, 0, &[connect()])]),
        (
            "CONNECT repeated",
            (0..10).map(|i| datagram(0, i, &[connect()])).collect(),
        ),
        (
            "resume CONNECT",
            vec![datagram(SESSION, 0, &[connect_at(1000, 1 << 20)])],
        ),
        (
            "ACK under the session id",
            vec![datagram(SESSION, 0, &[ack(1 << 30, vec![])])],
        ),
        ("PING", vec![datagram(SESSION, 0, &[Frame::Ping])]),
        ("garbage", vec![vec![0xff; 64]]),
    ];
    for (name, forged) in cases {
        let (from, to) = merger_answer(&forged);
        eprintln!("merger, {name}: received {from} B, sent back {to} B");
        assert!(
            to <= AMPLIFICATION_LIMIT * from,
            "{name}: {to} B for {from} B"
        );
    }
}

mod protected {
    //! The same for a protected session sender and merger (`docs/wire.md`
    //! §4.12, mergers): a real protected session sender, a merger, two
    //! receivers reporting through it; an attacker without the key can only replay
    //! what it captured or send junk, and a rogue member with the key can
    //! make fresh handshakes, all with the victim's address.

    use super::*;
    use fanout_core::drain;
    use fanout_transport::protection::joining::JoinHandshake;
    use fanout_transport::protection::{Credentials, Protection};
    use fanout_transport::wire::{Header, HeaderFlags};

    const PSK: [u8; 32] = [4; 32];

    fn merger_addr() -> SocketAddr {
        "10.0.2.1:6000".parse().unwrap()
    }

    fn protection(seed: u8) -> Option<Protection> {
        Some(Protection::new(Credentials::with_psk(PSK), [seed; 32]))
    }

    struct Tree {
        sender: SessionSender,
        merger: Merger,
        receivers: Vec<Receiver>,
        now: Instant,
        /// Every clear datagram a receiver sent the merger (first
        /// handshake messages), for the attacker to replay.
        captured: Vec<Vec<u8>>,
        to_victim: u64,
        buf: Vec<u8>,
    }

    impl Tree {
        fn new() -> Tree {
            let now = Instant::ZERO;
            let mut config = multicast(JoinPolicy::Live);
            config.transport.protection = protection(1);
            let merger = Merger::new(
                MergerConfig {
                    join: JoinMerge::Count(2),
                    keepalive: Some(Duration::from_millis(250)),
                    child_silence: Some(Duration::from_secs(2)),
                    protection: protection(2),
                    ..MergerConfig::new(sender_addr())
                },
                now,
            );
            let receivers = (0..2)
                .map(|i| {
                    let mut cfg = SessionConfig::default().transport;
                    cfg.protection = protection(10 + i);
                    cfg.feedback_via = Some(merger_addr());
                    Receiver::join(cfg, sender_addr(), now)
                })
                .collect();
            let mut t = Tree {
                sender: SessionSender::new(config, SESSION, now),
                merger,
                receivers,
                now,
                captured: Vec::new(),
                to_victim: 0,
                buf: Vec::new(),
            };
            for _ in 0..20 {
                t.step();
            }
            assert!(t.merger.is_established());
            assert_eq!(t.merger.children(), 2);
            t
        }

        /// One step of 5 ms: data written, timers run, every datagram
        /// delivered at once; what goes to the victim is counted.
        fn step(&mut self) {
            self.now += STEP;
            let now = self.now;
            self.sender.write(&[7u8; CHUNK]);
            let mut out: Vec<(SocketAddr, SocketAddr, Vec<u8>)> = Vec::new();
            let buf = &mut self.buf;
            self.sender.handle_timeout(now);
            drain(&mut self.sender, now, buf, 10_000, |t, d| {
                out.push((sender_addr(), t.destination, d.to_vec()))
            });
            self.merger.handle_timeout(now);
            drain(&mut self.merger, now, buf, 10_000, |t, d| {
                out.push((merger_addr(), t.destination, d.to_vec()))
            });
            for (i, r) in self.receivers.iter_mut().enumerate() {
                r.handle_timeout(now);
                let mut sink = [0u8; 1 << 16];
                while r.read(&mut sink) > 0 {}
                drain(r, now, buf, 10_000, |t, d| {
                    out.push((receiver_addr(i), t.destination, d.to_vec()))
                });
            }
            for (from, to, d) in out {
                if to == victim() {
                    self.to_victim += d.len() as u64;
                } else if to == sender_addr() {
                    self.sender.handle_datagram(now, from, &d);
                } else if to == merger_addr() {
                    let clear = Header::decode(&d)
                        .is_ok_and(|(h, _)| !h.flags.contains(HeaderFlags::SEALED));
                    if clear {
                        self.captured.push(d.clone());
                    }
                    self.merger.handle_datagram(now, from, &d);
                } else if to == group() {
                    for r in &mut self.receivers {
                        r.handle_datagram(now, from, &d);
                    }
                } else if let Some(i) = (0..2).find(|&i| receiver_addr(i) == to) {
                    self.receivers[i].handle_datagram(now, from, &d);
                }
            }
        }
    }

    /// A fresh first handshake message under the key (what a member
    /// holding it can make), carrying a CONNECT.
    fn fresh_handshake(seed: u8) -> Vec<u8> {
        let mut inner = Vec::new();
        connect().encode(&mut inner);
        let creds = Credentials::with_psk(PSK);
        let j = JoinHandshake::start(&creds, [seed; 32], &inner).unwrap();
        datagram(0, 0, &[Frame::Handshake(j.first())])
    }

    #[test]
    fn protected_senders_and_mergers_send_an_unvalidated_address_at_most_three_times_what_it_sent()
    {
        let captured = Tree::new().captured;
        assert!(!captured.is_empty(), "the children's handshakes were seen");
        let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
            (
                "a child's first message replayed",
                vec![captured[0].clone()],
            ),
            (
                "a child's first message replayed 10 times",
                vec![captured[0].clone(); 10],
            ),
            (
                "a fresh handshake (a key holder)",
                vec![fresh_handshake(77)],
            ),
            (
                "fresh handshakes, 10",
                (0..10).map(|i| fresh_handshake(100 + i)).collect(),
            ),
            (
                "HANDSHAKE of junk",
                vec![datagram(0, 0, &[Frame::Handshake(&[0x55; 96])])],
            ),
            ("an unsealed CONNECT", vec![datagram(0, 0, &[connect()])]),
            ("garbage", vec![vec![0xff; 64]]),
        ];
        for (name, forged) in cases {
            for at_sender in [false, true] {
                let mut t = Tree::new();
                let mut from_victim = 0u64;
                for d in &forged {
                    from_victim += d.len() as u64;
                    let now = t.now;
                    if at_sender {
                        t.sender.handle_datagram(now, victim(), d);
                    } else {
                        t.merger.handle_datagram(now, victim(), d);
                    }
                    t.step();
                }
                let end = t.now + HORIZON;
                while t.now < end {
                    t.step();
                }
                let who = if at_sender { "sender" } else { "merger" };
                eprintln!(
                    "protected {who}, {name}: received {from_victim} B, sent back {} B",
                    t.to_victim
                );
                assert!(
                    t.to_victim <= AMPLIFICATION_LIMIT * from_victim,
                    "{who}, {name}: {} B for {from_victim} B",
                    t.to_victim
                );
                assert_eq!(t.merger.children(), 2, "{name}: the forged child is gone");
                assert_eq!(
                    t.sender.member_count(),
                    1,
                    "{name}: the forged member is gone"
                );
            }
        }
    }
}
