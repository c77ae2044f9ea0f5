//! Story tests: a transfer to one receiver — a session of one member, the
//! sender OFFERing itself to a listening receiver — over a wire with delay
//! and scripted loss.

use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use fanout_core::{drain, Engine, Rng};
use fanout_transport::session::{SessionConfig, SessionEvent, SessionSender};
use fanout_transport::{CloseReason, Event, Receiver, TransportConfig};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

const ONE_WAY: Duration = Duration::from_millis(10);

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A datagram in flight: (arrival time, sequence) → (to sender?, bytes).
type Wire = BTreeMap<(Instant, u64), (bool, Vec<u8>)>;

/// Decides per datagram (towards the sender?, bytes) whether it is lost.
type LossFn = Box<dyn FnMut(bool, &[u8]) -> bool>;

struct Pair {
    now: Instant,
    sender: SessionSender,
    receiver: Receiver,
    wire: Wire,
    seq: u64,
    loss: LossFn,
    data: Vec<u8>,
    written: usize,
    got: Vec<u8>,
    sender_events: Vec<SessionEvent>,
    receiver_events: Vec<Event>,
}

/// A session of one offered to the receiver at `R`.
fn sender(config: TransportConfig, now: Instant) -> SessionSender {
    let mut s = SessionSender::new(SessionConfig::unicast(config), 7, now);
    assert!(s.offer(now, addr(R)));
    s
}

const S: &str = "10.0.0.1:1000";
const R: &str = "10.0.0.2:2000";

impl Pair {
    fn new(config: TransportConfig, data: Vec<u8>, loss: LossFn) -> Pair {
        let now = Instant::ZERO;
        Pair {
            sender: sender(config.clone(), now),
            receiver: Receiver::listen(config, now),
            now,
            wire: Wire::new(),
            seq: 0,
            loss,
            data,
            written: 0,
            got: Vec::new(),
            sender_events: Vec::new(),
            receiver_events: Vec::new(),
        }
    }

    fn pump(&mut self) -> Option<Instant> {
        let mut buf = Vec::new();
        if self.written < self.data.len() {
            self.written += self.sender.write(&self.data[self.written..]);
            if self.written == self.data.len() {
                self.sender.finish();
            }
        }
        let mut out = Vec::new();
        let t1 = drain(&mut self.sender, self.now, &mut buf, 64, |_, b| {
            out.push((false, b.to_vec()))
        });
        let mut chunk = [0u8; 4096];
        loop {
            let n = self.receiver.read(&mut chunk);
            if n == 0 {
                break;
            }
            self.got.extend_from_slice(&chunk[..n]);
        }
        let t2 = drain(&mut self.receiver, self.now, &mut buf, 64, |_, b| {
            out.push((true, b.to_vec()))
        });
        for (to_sender, bytes) in out {
            if !(self.loss)(to_sender, &bytes) {
                self.seq += 1;
                self.wire
                    .insert((self.now + ONE_WAY, self.seq), (to_sender, bytes));
            }
        }
        while let Some(e) = self.sender.poll_event() {
            self.sender_events.push(e);
        }
        while let Some(e) = self.receiver.poll_event() {
            self.receiver_events.push(e);
        }
        [t1, t2].into_iter().flatten().min()
    }

    /// Runs until both sides closed or `limit` passes.
    fn run(&mut self, limit: Duration) {
        let end = Instant::ZERO + limit;
        while self.now < end {
            let timer = self.pump();
            if self.sender.close_reason().is_some() && self.receiver.is_closed() {
                return;
            }
            let next_wire = self.wire.keys().next().map(|k| k.0);
            let next = [timer, next_wire]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(end);
            self.now = self.now.max(next);
            while let Some(entry) = self.wire.first_entry() {
                if entry.key().0 > self.now {
                    break;
                }
                let (to_sender, bytes) = entry.remove();
                if to_sender {
                    self.sender.handle_datagram(self.now, addr(R), &bytes);
                } else {
                    self.receiver.handle_datagram(self.now, addr(S), &bytes);
                }
            }
        }
    }
}

fn data_frame_offset(datagram: &[u8]) -> Option<u64> {
    let (_, body) = fanout_transport::wire::Header::decode(datagram).ok()?;
    match fanout_transport::wire::decode_frames(body).next()? {
        Ok(fanout_transport::wire::Frame::Data(d)) => Some(d.offset),
        _ => None,
    }
}

fn random_data(n: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0; n];
    Rng::new(seed).fill(&mut v);
    v
}

#[test]
fn lossless_transfer_arrives_identical_and_closes() {
    let data = random_data(1 << 20, 1);
    let mut p = Pair::new(
        TransportConfig::default(),
        data.clone(),
        Box::new(|_, _| false),
    );
    p.run(Duration::from_secs(30));
    assert_eq!(p.got.len(), data.len());
    assert!(p.got == data, "stream corrupted");
    assert_eq!(p.sender.close_reason(), Some(&CloseReason::Completed));
    assert_eq!(p.receiver.close_reason(), Some(&CloseReason::Completed));
    assert!(matches!(
        p.sender_events[..],
        [
            SessionEvent::MemberJoined { start: 0, .. },
            SessionEvent::Finished,
            SessionEvent::Closed(CloseReason::Completed)
        ]
    ));
    assert_eq!(p.sender.stats().unicast_repairs, 0);
    assert!(p.receiver_events.contains(&Event::Finished));
}

#[test]
fn first_retransmission_lost_still_delivers_once() {
    // Drop the data segment at offset 50_000 twice: the original and the
    // first retransmission. The stream must still arrive exactly once.
    let data = random_data(400_000, 2);
    let mut drops_left = 2;
    let mut target = None;
    let loss = Box::new(move |to_sender: bool, b: &[u8]| {
        if to_sender {
            return false;
        }
        match data_frame_offset(b) {
            Some(o) if o >= 50_000 && target.is_none_or(|t| t == o) && drops_left > 0 => {
                target = Some(o);
                drops_left -= 1;
                true
            }
            _ => false,
        }
    });
    let mut p = Pair::new(TransportConfig::default(), data.clone(), loss);
    p.run(Duration::from_secs(30));
    assert!(
        p.got == data,
        "stream corrupted or incomplete ({} of {})",
        p.got.len(),
        data.len()
    );
    assert_eq!(
        p.receiver.stats().payload_bytes_received,
        data.len() as u64,
        "each byte stored once"
    );
    assert!(p.sender.stats().unicast_repairs >= 2);
    assert_eq!(p.sender.close_reason(), Some(&CloseReason::Completed));
}

#[test]
fn random_loss_both_directions_completes() {
    for seed in 0..4 {
        let data = random_data(300_000, seed);
        let mut rng = Rng::new(seed);
        let mut p = Pair::new(
            TransportConfig::default(),
            data.clone(),
            Box::new(move |_, _| rng.bernoulli(0.05)),
        );
        p.run(Duration::from_secs(120));
        assert!(
            p.got == data,
            "seed {seed}: {} of {} bytes",
            p.got.len(),
            data.len()
        );
        assert_eq!(
            p.sender.close_reason(),
            Some(&CloseReason::Completed),
            "seed {seed}"
        );
        assert!(p.sender.stats().recovery_episodes > 0, "seed {seed}");
    }
}

#[test]
fn blackout_recovers_by_rto() {
    // Every datagram to the receiver is lost from 0.1 s to 0.5 s: only the
    // retransmission timer (with back-off) can restart the transfer.
    let data = random_data(4_000_000, 3);
    let mut p = Pair::new(
        TransportConfig::default(),
        data.clone(),
        Box::new(|_, _| false),
    );
    p.run(Duration::from_millis(100));
    assert!(
        p.sender.close_reason().is_none() && p.got.len() < data.len(),
        "cut must fall mid-transfer"
    );
    p.loss = Box::new(|to_sender, _| !to_sender);
    p.run(Duration::from_millis(500));
    p.loss = Box::new(|_, _| false);
    p.run(Duration::from_secs(60));
    assert!(p.got == data);
    assert!(p.sender.stats().rto_events >= 1);
    assert_eq!(p.sender.close_reason(), Some(&CloseReason::Completed));
}

#[test]
fn silent_peer_times_out() {
    let config = TransportConfig {
        handshake_timeout: Duration::from_secs(3),
        ..TransportConfig::default()
    };
    let mut p = Pair::new(config, vec![1; 10], Box::new(|_, _| true));
    p.run(Duration::from_secs(10));
    assert_eq!(
        p.sender.close_reason(),
        Some(&CloseReason::HandshakeTimeout)
    );
}

#[test]
fn peer_reset_is_reported() {
    let data = random_data(2_000_000, 4);
    let mut p = Pair::new(TransportConfig::default(), data, Box::new(|_, _| false));
    p.run(Duration::from_millis(100));
    p.receiver.reset(9, "disk full");
    p.run(Duration::from_secs(1));
    assert!(
        p.sender_events.iter().any(|e| matches!(
            e,
            SessionEvent::MemberLeft { reason, .. } if reason == "member reset: disk full"
        )),
        "{:?}",
        p.sender_events
    );
    assert_eq!(p.sender.close_reason(), Some(&CloseReason::NoReceivers));
}

#[test]
fn garbage_never_panics_and_is_counted() {
    let mut rng = Rng::new(5);
    let mut s = sender(TransportConfig::default(), Instant::ZERO);
    let mut r = Receiver::listen(TransportConfig::default(), Instant::ZERO);
    let mut n = 0;
    for len in 0..2000usize {
        let mut b = vec![0u8; len % 300];
        rng.fill(&mut b);
        // Half of them with a valid header prefix, so frame decoders run.
        if len % 2 == 0 && b.len() >= 16 {
            b[..4].copy_from_slice(&[b'F', b'O', fanout_transport::wire::VERSION, 0]);
            b[4..12].copy_from_slice(&7u64.to_be_bytes());
        }
        s.handle_datagram(Instant::ZERO, addr(R), &b);
        r.handle_datagram(Instant::ZERO, addr(S), &b);
        n += 1;
    }
    assert_eq!(s.stats().datagrams_received, n);
    assert!(s.stats().drops.total() > n / 2, "{:?}", s.stats().drops);
    assert!(r.stats().drops.total() > n / 2, "{:?}", r.stats().drops);
}

/// One DATA datagram of session `session` carrying `payload` at `offset`.
fn data_datagram(session: u64, packet_number: u32, offset: u64, payload: &[u8]) -> Vec<u8> {
    use fanout_transport::wire::{encode_data_header, Header, HeaderFlags, WireTimestamp};
    let mut d = Vec::new();
    Header {
        flags: HeaderFlags::default(),
        session_id: session,
        packet_number,
    }
    .encode(&mut d);
    encode_data_header(
        &mut d,
        offset,
        WireTimestamp(0),
        false,
        false,
        payload.len(),
    );
    d.extend_from_slice(payload);
    d
}

#[test]
fn one_byte_pieces_at_every_other_offset_stay_within_the_range_cap() {
    // An on-path host re-slicing the genuine stream into 1-byte pieces at
    // every other offset of the window (RFC 9000 §21.7): the receiver's
    // ranges stop at the cap, the excess is counted, and the honest
    // transfer completes.
    let data = random_data(1 << 20, 12);
    let config = TransportConfig {
        recv_window_bytes: 256 << 10,
        ..TransportConfig::default()
    };
    let mut p = Pair::new(config, data.clone(), Box::new(|_, _| false));
    while p.receiver.session_id().is_none() {
        p.run(p.now.saturating_duration_since(Instant::ZERO) + Duration::from_millis(1));
    }
    let session = p.receiver.session_id().unwrap();
    let (_, cap) = p.receiver.held_ranges();
    assert_eq!(cap, (256 << 10) / 512);
    let mut most = 0;
    for (i, at) in (1..(256u64 << 10)).step_by(2).enumerate() {
        let piece = &data[at as usize..at as usize + 1];
        let forged = data_datagram(session, 1_000_000 + i as u32, at, piece);
        p.receiver.handle_datagram(p.now, addr(S), &forged);
        most = most.max(p.receiver.held_ranges().0);
    }
    assert!(most <= cap, "{most} ranges held, cap {cap}");
    let refused = p.receiver.stats().drops.get(DropReason::LimitExceeded);
    assert!(refused > 100_000, "{refused} pieces refused");
    p.run(Duration::from_secs(30));
    assert!(
        p.got == data,
        "got {} of {} bytes; sender {:?}; receiver {:?}",
        p.got.len(),
        data.len(),
        p.sender.stats(),
        p.receiver.stats()
    );
}

#[test]
fn a_forged_frame_over_held_bytes_changes_none_of_them() {
    // The first segment is held back, so the rest of the stream waits out
    // of order; a forged frame then covers the last byte of the hole and
    // everything after it with garbage. Only that missing byte takes the
    // forged value (without keys, the end-to-end hash is its check); every
    // byte already held keeps its first copy.
    use std::cell::Cell;
    use std::rc::Rc;
    let data = random_data(64 << 10, 13);
    let hold_first = Rc::new(Cell::new(true));
    let mss = Rc::new(Cell::new(0u64));
    let loss: LossFn = Box::new({
        let (hold_first, mss) = (hold_first.clone(), mss.clone());
        move |to_sender, b| match data_frame_offset(b) {
            Some(0) if !to_sender => hold_first.get(),
            Some(at) if !to_sender && mss.get() == 0 => {
                mss.set(at);
                false
            }
            _ => false,
        }
    });
    let mut p = Pair::new(TransportConfig::default(), data.clone(), loss);
    // Until the sender stops for want of the held-back segment (its RTOs
    // keep resending it; they are held back too).
    p.run(Duration::from_secs(2));
    let held = p.receiver.stats().payload_bytes_received;
    assert!(held > 16 << 10, "{held} bytes held out of order");
    let (session, hole_end) = (p.receiver.session_id().unwrap(), mss.get());
    let garbage = vec![0xA5u8; held as usize + 1];
    let forged = data_datagram(session, 2_000_000, hole_end - 1, &garbage);
    p.receiver.handle_datagram(p.now, addr(S), &forged);
    assert_eq!(p.receiver.stats().payload_bytes_received, held + 1);
    hold_first.set(false);
    p.run(Duration::from_secs(30));
    assert_eq!(p.got.len(), data.len(), "{:?}", p.receiver.stats());
    let differ: Vec<usize> = (0..data.len()).filter(|&i| p.got[i] != data[i]).collect();
    assert_eq!(
        differ,
        [hole_end as usize - 1],
        "only the missing byte took the forgery"
    );
}

#[test]
fn a_listener_ignores_offers_from_senders_it_does_not_allow() {
    use fanout_transport::AllowedSenders;
    let now = Instant::ZERO;
    let mut s = sender(TransportConfig::default(), now);
    let only = AllowedSenders::Networks(vec!["10.9.0.0/16".parse().unwrap()]);
    let mut r = Receiver::listen_from(TransportConfig::default(), only, now);
    let mut offers = Vec::new();
    drain(&mut s, now, &mut Vec::new(), 16, |_, d| {
        offers.push(d.to_vec())
    });
    assert!(!offers.is_empty());
    for d in &offers {
        r.handle_datagram(now, addr(S), d);
    }
    let mut answers = 0;
    drain(&mut r, now, &mut Vec::new(), 16, |_, _| answers += 1);
    assert_eq!(answers, 0, "no answer toward a sender it does not allow");
    assert_eq!(
        r.stats().drops.get(DropReason::UnknownPeer),
        offers.len() as u64
    );
    assert!(r.peer().is_none());
    // The same OFFER from inside the allowed network is answered.
    r.handle_datagram(now, addr("10.9.1.1:1000"), &offers[0]);
    drain(&mut r, now, &mut Vec::new(), 16, |_, _| answers += 1);
    assert_eq!(answers, 1, "a CONNECT goes out");
}
