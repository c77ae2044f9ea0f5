//! Story tests: a transfer to one receiver — a session of one member, the
//! sender OFFERing itself to a listening receiver — over a wire with delay
//! and scripted loss.

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
