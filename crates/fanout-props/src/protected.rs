//! Protected sessions fed arbitrary bytes (`fanout_transport::protection`):
//! as raw datagrams, as a joiner's first handshake message, as a sealed
//! datagram, and as the answer to a receiver's handshake. Nothing panics,
//! nobody without the key is admitted, nothing opens, and every refusal is
//! counted.

use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use fanout_core::{drain, Engine};
use fanout_transport::protection::noise::{first_ephemeral, MAX_HANDSHAKE_MESSAGE};
use fanout_transport::protection::{Credentials, Protection};
use fanout_transport::session::{SessionConfig, SessionSender};
use fanout_transport::wire::{Frame, Header, HeaderFlags};
use fanout_transport::{Receiver, TransportConfig};
use std::net::SocketAddr;

fn protected(seed: u8) -> TransportConfig {
    TransportConfig {
        protection: Some(Protection::new(Credentials::with_psk([7; 32]), [seed; 32])),
        ..TransportConfig::default()
    }
}

/// A header with `flags` and `session_id` whose packet number comes from
/// the first two bytes of `data`.
fn header_for(data: &[u8], flags: HeaderFlags, session_id: u64) -> Vec<u8> {
    let mut out = Vec::new();
    Header {
        flags,
        session_id,
        packet_number: u32::from_le_bytes([
            data.first().copied().unwrap_or(0),
            data.get(1).copied().unwrap_or(0),
            0,
            0,
        ]),
    }
    .encode(&mut out);
    out
}

/// `data` three ways: as it is, as the only frame (HANDSHAKE) of a clear
/// datagram, and behind a header with `SEALED` set.
fn variants(data: &[u8], session_id: u64) -> [Vec<u8>; 3] {
    let header = |flags| header_for(data, flags, session_id);
    let mut handshake = header(HeaderFlags::default());
    Frame::Handshake(&data[..data.len().min(MAX_HANDSHAKE_MESSAGE)]).encode(&mut handshake);
    let mut sealed = header(HeaderFlags::default().with(HeaderFlags::SEALED));
    sealed.extend_from_slice(data);
    [data.to_vec(), handshake, sealed]
}

/// A protected sender and a receiver that joined it (the handshake done
/// over a lossless wire), and the addresses they use.
struct Pair {
    sender: SessionSender,
    receiver: Receiver,
    sender_addr: SocketAddr,
    member: SocketAddr,
    buf: Vec<u8>,
}

impl Pair {
    fn new() -> Pair {
        Pair::with(SessionConfig::default())
    }

    /// A pair whose sender multicasts to `group`.
    fn new_multicast(group: SocketAddr) -> Pair {
        Pair::with(SessionConfig {
            group: Some(group),
            ..SessionConfig::default()
        })
    }

    fn with(config: SessionConfig) -> Pair {
        let now = Instant::ZERO;
        let sender_addr: SocketAddr = "10.0.0.1:5000".parse().expect("literal");
        let sender = SessionSender::new(
            SessionConfig {
                transport: protected(1),
                ..config
            },
            42,
            now,
        );
        let receiver = Receiver::join(protected(2), sender_addr, now);
        Pair {
            sender,
            receiver,
            sender_addr,
            member: "10.0.1.1:7000".parse().expect("literal"),
            buf: Vec::new(),
        }
    }

    /// Datagrams the receiver has to send now.
    fn receiver_output(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        drain(
            &mut self.receiver,
            Instant::ZERO,
            &mut self.buf,
            16,
            |_, d| out.push(d.to_vec()),
        );
        out
    }

    /// Carries what each side has to send to the other, `rounds` times.
    fn exchange(&mut self, rounds: usize) {
        self.exchange_with(rounds, |_, _| {});
    }

    /// As [`Pair::exchange`], showing `seen` what the sender sends
    /// elsewhere than to the member or the group.
    fn exchange_with(&mut self, rounds: usize, mut seen: impl FnMut(SocketAddr, &[u8])) {
        for _ in 0..rounds {
            for d in self.receiver_output() {
                self.sender.handle_datagram(Instant::ZERO, self.member, &d);
            }
            let mut out = Vec::new();
            drain(
                &mut self.sender,
                Instant::ZERO,
                &mut self.buf,
                256,
                |t, d| out.push((t.destination, d.to_vec())),
            );
            for (to, d) in out {
                if to == self.member || to.ip().is_multicast() {
                    self.receiver
                        .handle_datagram(Instant::ZERO, self.sender_addr, &d);
                } else {
                    seen(to, &d);
                }
            }
        }
    }

    /// Appends what the receiver has to read to `out`.
    fn read_into(&mut self, out: &mut Vec<u8>) {
        let mut chunk = [0u8; 4096];
        loop {
            let n = self.receiver.read(&mut chunk);
            if n == 0 {
                return;
            }
            out.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Fuzz target `protected_handshake`: arbitrary bytes as a joiner's first
/// handshake message at a protected sender, and as the answer to a
/// receiver's handshake (each raw, as a HANDSHAKE frame, behind a sealed
/// header). Nothing is admitted or accepted, every input is counted, and
/// the honest handshake that follows still completes (the junk spent none
/// of its state).
pub fn check_handshake_input(data: &[u8]) {
    let now = Instant::ZERO;
    let stranger: SocketAddr = "10.0.9.9:7000".parse().expect("literal");
    let mut p = Pair::new();
    // The receiver's first message, held back until the junk is refused.
    let first = p.receiver_output();
    for d in &variants(data, 42) {
        p.sender.handle_datagram(now, stranger, d);
        p.receiver.handle_datagram(now, p.sender_addr, d);
    }
    p.exchange(1);
    // Random bytes never hold a handshake that authenticates under the
    // key (a forgery of ChaCha20-Poly1305).
    assert_eq!(p.sender.stats().members_joined, 0);
    assert_eq!(p.receiver.member_id(), 0, "never accepted");
    assert_eq!(p.sender.stats().drops.total(), 3, "every input counted");
    assert_eq!(p.receiver.stats().drops.total(), 3);
    for d in &first {
        p.sender.handle_datagram(now, p.member, d);
    }
    p.exchange(1);
    assert_eq!(p.sender.stats().members_joined, 1);
    assert_ne!(p.receiver.member_id(), 0, "the honest answer opened");
}

/// Fuzz target `sealed_input`: once a receiver has joined, arbitrary bytes
/// behind a sealed header (unicast and multicast, under the member's token
/// and the session id) go to both ends from each other's address: each is
/// opened and refused — `unauthenticated`, or `replayed` when its packet
/// number was accepted already — and the membership stands.
pub fn check_sealed_input(data: &[u8]) {
    let now = Instant::ZERO;
    let mut p = Pair::new();
    p.exchange(3);
    assert_eq!(p.sender.stats().members_joined, 1);
    assert_ne!(p.receiver.token(), 0, "the receiver holds its keys");
    let before = (
        p.sender.stats().drops.total(),
        p.receiver.stats().drops.total(),
    );
    let multicast = HeaderFlags::default()
        .with(HeaderFlags::SEALED)
        .with(HeaderFlags::MULTICAST);
    let mut n = 0;
    for flags in [HeaderFlags::default().with(HeaderFlags::SEALED), multicast] {
        for session_id in [42, p.receiver.token()] {
            let mut d = header_for(data, flags, session_id);
            d.extend_from_slice(data);
            p.sender.handle_datagram(now, p.member, &d);
            p.receiver.handle_datagram(now, p.sender_addr, &d);
            n += 1;
        }
    }
    let refused = |drops: &fanout_core::stats::DropCounters| {
        drops.get(DropReason::Unauthenticated) + drops.get(DropReason::Replayed)
    };
    assert_eq!(p.sender.stats().drops.total() - before.0, n);
    assert_eq!(p.receiver.stats().drops.total() - before.1, n);
    assert!(refused(&p.sender.stats().drops) >= n);
    assert!(refused(&p.receiver.stats().drops) >= n);
    assert_eq!(p.sender.stats().members_left, 0);
    assert!(!p.receiver.is_closed());
}

/// Fuzz target `listed_input`: a receiver of a protected multicast session
/// (data flowing, segment lists arriving) gets arbitrary bytes as listed
/// data: raw behind a `LISTED` header, and as frames encrypted under the
/// group's listed-data key — what a rogue member holding the group key can
/// send, so the fuzzer reaches the frame and list checks behind the
/// cipher. Nothing reaches the stream but the sender's bytes, nothing
/// panics, and the membership stands.
pub fn check_listed_input(data: &[u8]) {
    use fanout_transport::protection::noise::Initiator;
    use fanout_transport::protection::DataKey;
    use fanout_transport::wire::{decode_frames, ConnectFrame, WireTimestamp};
    let now = Instant::ZERO;
    let group: SocketAddr = "239.1.1.1:7000".parse().expect("literal");
    let mut p = Pair::new_multicast(group);
    // A rogue member joins by hand to learn the group key.
    let rogue: SocketAddr = "10.0.9.9:7000".parse().expect("literal");
    let mut connect = Vec::new();
    Frame::Connect(ConnectFrame {
        max_payload: 1400,
        window: 1 << 20,
        timestamp: WireTimestamp(0),
        resume_from: 0,
    })
    .encode(&mut connect);
    let mut first = Vec::new();
    let creds = Credentials::with_psk([7; 32]);
    let i = Initiator::start(&creds, [9; 32], &connect, &mut first).expect("a handshake starts");
    let mut hello = header_for(&[], HeaderFlags::default(), 0);
    Frame::Handshake(&first).encode(&mut hello);
    p.sender.handle_datagram(now, rogue, &hello);
    let stream: Vec<u8> = (0..64 * 1024u32).map(|i| (i * 7) as u8).collect();
    p.sender.write(&stream);
    let mut answer = None;
    p.exchange_with(3, |to, d| {
        if to == rogue {
            if let Ok((_, body)) = Header::decode(d) {
                if let Some(Ok(Frame::Handshake(a))) = decode_frames(body).next() {
                    answer = Some(a.to_vec());
                }
            }
        }
    });
    let (payload, _) = i
        .finish(&answer.expect("the sender answered the rogue"))
        .expect("the answer opens");
    let key = decode_frames(&payload)
        .find_map(|f| match f {
            Ok(Frame::GroupKey(k)) => Some(DataKey::from_group_secret(&k.key)),
            _ => None,
        })
        .expect("the answer hands out the group key");
    let mut got = Vec::new();
    p.read_into(&mut got);
    assert!(!got.is_empty(), "listed data flowed before the forgeries");
    let received = p.receiver.stats().payload_bytes_received;
    let listed = HeaderFlags::default()
        .with(HeaderFlags::MULTICAST)
        .with(HeaderFlags::LISTED);
    for (pn, encrypt) in [(1u32 << 20, false), ((1 << 20) + 1, true)] {
        let mut d = header_for(&[], listed, 42);
        d[12..16].copy_from_slice(&pn.to_be_bytes());
        d.extend_from_slice(data);
        if encrypt {
            key.apply(&mut d, u64::from(pn));
        }
        p.receiver.handle_datagram(now, p.sender_addr, &d);
    }
    p.exchange(2);
    p.read_into(&mut got);
    assert!(!p.receiver.is_closed());
    // Whatever arrived is the sender's stream, byte for byte.
    assert_eq!(got[..], stream[..got.len()]);
    assert!(p.receiver.stats().payload_bytes_received >= received);
}

/// A protected sender, a merger and a receiver reporting through it (all
/// holding the key; the handshakes done over a lossless wire).
struct Tree {
    sender: SessionSender,
    merger: fanout_transport::merge::Merger,
    receiver: Receiver,
    buf: Vec<u8>,
    /// The ephemeral key of the receiver's first handshake message.
    child_ephemeral: Option<[u8; 32]>,
}

const TREE_SENDER: &str = "10.0.0.1:5000";
const TREE_MERGER: &str = "10.0.2.1:6000";
const TREE_RECEIVER: &str = "10.0.1.1:7000";

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("literal")
}

impl Tree {
    fn new() -> Tree {
        use fanout_transport::merge::{JoinMerge, Merger, MergerConfig};
        let now = Instant::ZERO;
        let sender = SessionSender::new(
            SessionConfig {
                transport: protected(1),
                group: Some(addr("239.1.1.1:7000")),
                ..SessionConfig::default()
            },
            42,
            now,
        );
        let merger = Merger::new(
            MergerConfig {
                join: JoinMerge::Count(1),
                protection: protected(3).protection,
                ..MergerConfig::new(addr(TREE_SENDER))
            },
            now,
        );
        let mut cfg = protected(2);
        cfg.feedback_via = Some(addr(TREE_MERGER));
        let receiver = Receiver::join(cfg, addr(TREE_SENDER), now);
        Tree {
            sender,
            merger,
            receiver,
            buf: Vec::new(),
            child_ephemeral: None,
        }
    }

    /// Carries every node's datagrams to their destinations, `rounds`
    /// times (the group reaches the receiver).
    fn exchange(&mut self, rounds: usize) {
        let now = Instant::ZERO;
        for _ in 0..rounds {
            let mut out = Vec::new();
            let from = [TREE_SENDER, TREE_MERGER, TREE_RECEIVER].map(addr);
            let engines: [&mut dyn Engine; 3] =
                [&mut self.sender, &mut self.merger, &mut self.receiver];
            for (e, at) in engines.into_iter().zip(from) {
                drain(e, now, &mut self.buf, 256, |t, d| {
                    out.push((at, t.destination, d.to_vec()))
                });
            }
            for (from, to, d) in out {
                if to == addr(TREE_SENDER) {
                    self.sender.handle_datagram(now, from, &d);
                } else if to == addr(TREE_MERGER) {
                    if from == addr(TREE_RECEIVER) && self.child_ephemeral.is_none() {
                        self.child_ephemeral = handshake_of(&d).and_then(first_ephemeral);
                    }
                    self.merger.handle_datagram(now, from, &d);
                } else if to == addr(TREE_RECEIVER) || to.ip().is_multicast() {
                    self.receiver.handle_datagram(now, from, &d);
                }
            }
        }
    }
}

/// The handshake message of a clear datagram whose one frame is HANDSHAKE.
fn handshake_of(d: &[u8]) -> Option<&[u8]> {
    let (h, body) = Header::decode(d).ok()?;
    if h.flags.contains(HeaderFlags::SEALED) {
        return None;
    }
    match fanout_transport::wire::decode_frames(body).next()? {
        Ok(Frame::Handshake(m)) => Some(m),
        _ => None,
    }
}

/// Fuzz target `merger_protected_input`: once a receiver has joined a
/// protected session through a protected merger, arbitrary bytes (raw, as
/// a HANDSHAKE frame, behind a sealed header under the session id and the
/// child's token) reach the merger from a stranger, from the child's
/// address and from the parent's, and reach the receiver from the
/// merger's. Nothing panics, nobody is admitted, every input is counted
/// (but a handshake from the child's address that starts with its own
/// first message's ephemeral key, which the merger takes for a
/// retransmission and answers again, as a session sender does), and the
/// tree stands: the child stays, the merger stays a member.
pub fn check_merger_protected_input(data: &[u8]) {
    let now = Instant::ZERO;
    let mut t = Tree::new();
    t.exchange(6);
    assert!(t.merger.is_established(), "the merger joined");
    assert_eq!(t.merger.children(), 1);
    let token = t.receiver.token();
    assert_ne!(token, 0, "the receiver holds its keys");
    let before = (
        t.merger.stats().drops.total(),
        t.receiver.stats().drops.total(),
    );
    let sealed = HeaderFlags::default().with(HeaderFlags::SEALED);
    let mut inputs: Vec<Vec<u8>> = variants(data, 42).into();
    let mut under_token = header_for(data, sealed, token);
    under_token.extend_from_slice(data);
    inputs.push(under_token);
    let stranger = addr("10.0.9.9:7000");
    let mut n = 0;
    let child_ephemeral = t.child_ephemeral.expect("the child's first message");
    for d in &inputs {
        for from in [stranger, addr(TREE_RECEIVER), addr(TREE_SENDER)] {
            t.merger.handle_datagram(now, from, d);
            let repeat = handshake_of(d).and_then(first_ephemeral) == Some(child_ephemeral);
            n += u64::from(!(repeat && from == addr(TREE_RECEIVER)));
        }
        t.receiver.handle_datagram(now, addr(TREE_MERGER), d);
    }
    let merger = t.merger.stats();
    // A well-formed first message from a stranger may be read and fail to
    // authenticate, or be a retransmission from the child's address: all
    // are counted; none admits anyone.
    assert_eq!(merger.drops.total() - before.0, n, "{merger:?}");
    assert_eq!(
        t.receiver.stats().drops.total() - before.1,
        inputs.len() as u64
    );
    assert_eq!(t.merger.children(), 1, "nobody admitted, nobody evicted");
    assert_eq!(merger.children_joined, 1);
    t.exchange(3);
    assert!(t.merger.is_established());
    assert!(!t.receiver.is_closed());
    assert_eq!(t.sender.stats().members_left, 0);
}
