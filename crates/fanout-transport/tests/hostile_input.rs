//! Hostile input, as property tests: the properties of the cargo-fuzz
//! targets in `fuzz/` (`header`, `frames`, `sender_input`,
//! `receiver_input`) run here too, so something always runs on stable.
//!
//! Engine scripts feed arbitrary datagrams — half of them behind a valid
//! header of the session, so the frame decoder and the engine logic see
//! them — into a live session of one ([`SessionSender`] offered to one
//! receiver) or [`Receiver`] at increasing times, run their timers and
//! drain their output. Nothing may panic, and every refused datagram must
//! be counted in `stats().drops` under the right reason.

use fanout_core::codec::{Reader, Writer};
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use fanout_core::{drain, Engine};
use fanout_transport::session::{SessionConfig, SessionSender};
use fanout_transport::wire::{
    accept_header, decode_frames, AcceptFrame, AckFrame, AckFrequencyFrame, CatchUpFrame,
    CloseFrame, ConnectFrame, DataFrame, Frame, Header, HeaderFlags, OfferFrame, SkipFrame,
    UpstreamAckFrame, UpstreamFrame, WireTimestamp, MAX_ACK_INTERVAL_US,
};
use fanout_transport::{Receiver, TransportConfig};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

const SESSION: u64 = 0x5e55;

fn peer_addr() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 2], 2000))
}

fn stranger_addr() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 66], 6666))
}

/// Small buffers and short timers, so scripts reach every state quickly.
fn config() -> TransportConfig {
    TransportConfig {
        send_buffer_bytes: 64 << 10,
        recv_window_bytes: 64 << 10,
        idle_timeout: Duration::from_secs(3),
        handshake_timeout: Duration::from_secs(2),
        linger: Duration::from_millis(500),
        ..TransportConfig::default()
    }
}

/// One injected datagram.
#[derive(Debug, Clone)]
struct Step {
    valid_header: bool,
    from_stranger: bool,
    app_acts: bool,
    advance: Duration,
    body: Vec<u8>,
}

/// Frames with small, plausible field values: the ones that reach deep
/// engine logic. Offsets are mostly multiples of the 1200-byte segment size
/// the scripts negotiate, so ACKs land on segment boundaries and DATA frames
/// tile the stream.
fn arb_frame() -> impl Strategy<Value = Vec<u8>> {
    let off = prop_oneof![6 => (0u64..12).prop_map(|k| k * 1200), 1 => 0u64..70_000];
    let len = prop_oneof![3 => Just(1200u64), 1 => 0u64..1300];
    let frame = prop_oneof![
        12 => (off.clone(), any::<u32>(), any::<bool>(), any::<bool>(), len.clone())
            .prop_map(|(offset, timestamp, fin, message_end, len)| {
                let payload = vec![0x5a; len as usize];
                enc(Frame::Data(DataFrame { offset, timestamp: WireTimestamp(timestamp), fin, message_end, payload: &payload }))
            }),
        12 => (off.clone(), 0u64..70_000, any::<u32>(), 0u64..100_000,
              proptest::collection::vec((off.clone(), len), 0..6))
            .prop_map(|(cumulative, window, timestamp_echo, ack_delay_us, sack)| {
                let sack = sack
                    .into_iter()
                    .map(|(s, l)| s.max(cumulative)..s.max(cumulative) + l.max(1))
                    .collect();
                enc(Frame::Ack(AckFrame { cumulative, window, timestamp_echo: WireTimestamp(timestamp_echo), ack_delay_us, sack }))
            }),
        2 => (0u8..4, 0u64..2000, 0u64..100_000, any::<u32>(), 0u64..30_000)
            .prop_map(|(kind, max_payload, window, timestamp, offset)| {
                let timestamp = WireTimestamp(timestamp);
                enc(match kind {
                    0 => Frame::Connect(ConnectFrame { max_payload, window, timestamp, resume_from: offset }),
                    1 => Frame::Accept(AcceptFrame { max_payload, timestamp_echo: timestamp, member_id: 1, start_offset: offset }),
                    2 => Frame::Offer(OfferFrame { max_payload, timestamp }),
                    _ => Frame::CatchUp(CatchUpFrame { member_id: 1, end: offset }),
                })
            }),
        2 => (off, 0u64..5000).prop_map(|(offset, len)| enc(Frame::Skip(SkipFrame { offset, len }))),
        2 => (1u32..=64, 0u32..=MAX_ACK_INTERVAL_US).prop_map(|(every, min_interval_us)| enc(Frame::AckFrequency(AckFrequencyFrame { every, min_interval_us }))),
        2 => Just(enc(Frame::Ping)),
        2 => Just(enc(Frame::Padding)),
        // Session relay frames: neither unicast engine takes them.
        1 => (0u64..70_000, any::<u32>(), any::<bool>(), 0usize..1300)
            .prop_map(|(offset, timestamp, fin, len)| {
                let payload = vec![0x3c; len];
                enc(Frame::Upstream(UpstreamFrame { offset, timestamp: WireTimestamp(timestamp), fin, payload: &payload }))
            }),
        1 => (0u64..70_000, 0u64..70_000, any::<u32>()).prop_map(|(cumulative, window, timestamp_echo)| {
            enc(Frame::UpstreamAck(UpstreamAckFrame { cumulative, window, timestamp_echo: WireTimestamp(timestamp_echo) }))
        }),
        // Rare: they end the session.
        1 => (0u64..3, any::<bool>()).prop_map(|(code, reset)| {
            let c = CloseFrame { code, reason: "x" };
            enc(if reset { Frame::Reset(c) } else { Frame::Close(c) })
        }),
    ];
    proptest::collection::vec(frame, 1..4).prop_map(|v| v.concat())
}

fn enc(f: Frame<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    f.encode(&mut out);
    out
}

fn arb_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..48),
        arb_frame(),
        // Valid frames followed by garbage.
        (arb_frame(), proptest::collection::vec(any::<u8>(), 1..8)).prop_map(|(mut f, g)| {
            f.extend(g);
            f
        }),
    ]
}

fn arb_step() -> impl Strategy<Value = Step> {
    (any::<bool>(), 0u8..8, any::<bool>(), 0u64..32, arb_body()).prop_map(
        |(valid_header, stranger, app_acts, tick, body)| Step {
            valid_header,
            from_stranger: stranger == 0,
            app_acts,
            advance: if tick == 31 {
                Duration::from_millis(1500)
            } else {
                Duration::from_micros(tick * tick * 100)
            },
            body,
        },
    )
}

fn datagram(step: &Step, pn: &mut u32) -> Vec<u8> {
    let mut d = Vec::new();
    if step.valid_header {
        Header {
            flags: HeaderFlags::default(),
            session_id: SESSION,
            packet_number: *pn,
        }
        .encode(&mut d);
        *pn = pn.wrapping_add(1);
    }
    d.extend_from_slice(&step.body);
    d
}

fn pump(engine: &mut impl Engine, now: Instant) {
    let mut buf = Vec::new();
    drain(engine, now, &mut buf, 256, |_, _| {});
}

fn frames_malformed(body: &[u8]) -> bool {
    decode_frames(body).any(|f| f.is_err())
}

fn control(pn: u32, frame: Frame<'_>) -> Vec<u8> {
    let mut d = Vec::new();
    Header {
        flags: HeaderFlags::default(),
        session_id: SESSION,
        packet_number: pn,
    }
    .encode(&mut d);
    frame.encode(&mut d);
    d
}

/// What the sender was given and what it sent: every DATA frame must carry
/// exactly the bytes written at its offset.
#[derive(Default)]
struct SenderModel {
    written: Vec<u8>,
    finished: bool,
    /// Segments sent: start → end, the FIN's offset included.
    segments: BTreeMap<u64, u64>,
}

impl SenderModel {
    fn write(&mut self, s: &mut SessionSender, data: &[u8]) {
        let n = s.write(data);
        self.written.extend_from_slice(&data[..n]);
    }

    fn finish(&mut self, s: &mut SessionSender) {
        if s.close_reason().is_none() {
            s.finish();
            self.finished = true;
        }
    }

    /// Runs timers and drains the sender, checking every DATA frame.
    fn pump(&mut self, s: &mut SessionSender, now: Instant) -> Result<(), TestCaseError> {
        let mut buf = Vec::new();
        let mut sent = Vec::new();
        drain(s, now, &mut buf, 256, |_, d| sent.push(d.to_vec()));
        for d in sent {
            let (_, body) = accept_header(&d).expect("the sender's own header");
            for f in decode_frames(body) {
                if let Frame::Data(df) = f.expect("the sender's own frames") {
                    let r = df.range();
                    prop_assert!(r.end <= self.written.len() as u64);
                    prop_assert_eq!(df.payload, &self.written[r.start as usize..r.end as usize]);
                    if df.fin {
                        prop_assert!(self.finished && r.end == self.written.len() as u64);
                    }
                    self.segments.insert(r.start, r.end + u64::from(df.fin));
                }
            }
        }
        Ok(())
    }
}

/// The listener's answer to the sender's OFFER: its CONNECT.
fn connect_datagram(pn: u32) -> Vec<u8> {
    control(
        pn,
        Frame::Connect(ConnectFrame {
            max_payload: 1200,
            window: 64 << 10,
            timestamp: WireTimestamp(0),
            resume_from: 0,
        }),
    )
}

/// A session of one, offered to the peer.
fn session_of_one(now: Instant) -> SessionSender {
    let mut s = SessionSender::new(SessionConfig::unicast(config()), SESSION, now);
    assert!(s.offer(now, peer_addr()));
    s
}

fn drive_sender(connected: bool, finish: bool, script: &[Step]) -> Result<(), TestCaseError> {
    let mut now = Instant::ZERO;
    let mut s = session_of_one(now);
    let mut model = SenderModel::default();
    let mut pn = 0u32;
    if connected {
        model.pump(&mut s, now)?;
        now += Duration::from_millis(10);
        s.handle_datagram(now, peer_addr(), &connect_datagram(pn));
        pn += 1;
        prop_assert_eq!(s.member_count(), 1);
        model.write(&mut s, &[0xa5; 20_000]);
        if finish {
            model.finish(&mut s);
        }
        model.pump(&mut s, now)?;
        prop_assert!(s.snd_nxt() > 0);
    }
    for step in script {
        now += step.advance;
        let d = datagram(step, &mut pn);
        let from = if step.from_stranger {
            stranger_addr()
        } else {
            peer_addr()
        };
        let before = s.stats().clone();
        let was_closed = s.close_reason().is_some();
        let was_member = s.member_count() > 0;
        s.handle_datagram(now, from, &d);
        let after = s.stats();
        prop_assert_eq!(after.datagrams_received, before.datagrams_received + 1);
        let dropped = |r: DropReason| after.drops.get(r) - before.drops.get(r);
        match accept_header(&d) {
            Err(reason) => {
                prop_assert_eq!(dropped(reason), 1);
                prop_assert_eq!(after.drops.total(), before.drops.total() + 1);
            }
            Ok(_) if was_closed => prop_assert_eq!(dropped(DropReason::SessionClosed), 1),
            // A member's datagram of another session; a stranger's (joins
            // included: only the invited peer is admitted).
            Ok((h, _))
                if h.session_id != SESSION && !step.from_stranger && s.member_count() > 0 =>
            {
                prop_assert_eq!(dropped(DropReason::UnknownSession), 1);
            }
            Ok(_) if step.from_stranger => {
                prop_assert_eq!(dropped(DropReason::UnknownPeer), 1);
            }
            // (A RESET before the bad frame ends the member first.)
            Ok((_, body)) if was_member && s.member_count() > 0 && frames_malformed(body) => {
                prop_assert_eq!(dropped(DropReason::MalformedFrame), 1);
            }
            Ok(_) => {}
        }
        if step.app_acts {
            model.write(&mut s, &step.body);
            if step.body.first().is_some_and(|b| b & 1 == 1) {
                model.finish(&mut s);
            }
        }
        model.pump(&mut s, now)?;
        while s.poll_event().is_some() {}
        // An ACK of bytes never sent is refused (AckOfUnsent).
        prop_assert!(s.bytes_acked_by_all() <= model.written.len() as u64);
        prop_assert!(s.member_count() <= 1, "only the invited peer joins");
    }
    Ok(())
}

fn drive_receiver(connected: bool, script: &[Step]) -> Result<(), TestCaseError> {
    let mut now = Instant::ZERO;
    let mut r = Receiver::listen(config(), now);
    let mut session: Option<u64> = None;
    let mut pn = 0u32;
    if connected {
        // The sender's OFFER, then (after the listener's CONNECT) its ACCEPT.
        let offer = control(
            pn,
            Frame::Offer(OfferFrame {
                max_payload: 1200,
                timestamp: WireTimestamp(0),
            }),
        );
        r.handle_datagram(now, peer_addr(), &offer);
        pump(&mut r, now);
        let accept = control(
            pn + 1,
            Frame::Accept(AcceptFrame {
                max_payload: 1200,
                timestamp_echo: WireTimestamp(0),
                member_id: 1,
                start_offset: 0,
            }),
        );
        pn += 2;
        r.handle_datagram(now, peer_addr(), &accept);
        session = Some(SESSION);
        prop_assert_eq!(r.peer(), Some(peer_addr()));
        pump(&mut r, now);
    }
    let mut sink = vec![0u8; 4096];
    for step in script {
        now += step.advance;
        let d = datagram(step, &mut pn);
        let from = if step.from_stranger {
            stranger_addr()
        } else {
            peer_addr()
        };
        let before = r.stats().clone();
        let peer_before = r.peer().zip(session);
        let was_closed = r.is_closed();
        r.handle_datagram(now, from, &d);
        if session.is_none() && r.peer().is_some() {
            session = accept_header(&d).ok().map(|(h, _)| h.session_id);
        }
        let after = r.stats();
        prop_assert_eq!(after.datagrams_received, before.datagrams_received + 1);
        let total = after.drops.total() - before.drops.total();
        match accept_header(&d) {
            Err(reason) => {
                prop_assert_eq!(after.drops.get(reason) - before.drops.get(reason), 1);
                prop_assert_eq!(total, 1);
            }
            Ok((h, body)) => {
                let offer = matches!(decode_frames(body).next(), Some(Ok(Frame::Offer(_))));
                let ours = peer_before == Some((from, h.session_id));
                match peer_before {
                    // A stranger's OFFER is answered with a busy RESET (or
                    // counted once the refusal queue is full).
                    Some(_) if !ours && offer => {}
                    Some(_) if !ours => prop_assert_eq!(total, 1),
                    // Listening or joining: only the first frame counts,
                    // and what is not the handshake is refused once.
                    None => prop_assert!(total <= 1),
                    _ if !was_closed && frames_malformed(body) => {
                        let mf = DropReason::MalformedFrame;
                        prop_assert_eq!(after.drops.get(mf) - before.drops.get(mf), 1);
                    }
                    _ => {}
                }
            }
        }
        if step.app_acts {
            while r.read(&mut sink) > 0 {}
        }
        pump(&mut r, now);
        while r.poll_event().is_some() {}
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Fuzz target `header`: decode agrees with `accept_header`, and a
    /// decoded header re-encodes to the same bytes.
    #[test]
    fn header_decode_is_consistent(bytes in proptest::collection::vec(any::<u8>(), 0..24),
                                   magic: bool) {
        let mut bytes = bytes;
        if magic && bytes.len() >= 3 {
            bytes[..3].copy_from_slice(&[b'F', b'O', fanout_transport::wire::VERSION]);
        }
        match Header::decode(&bytes) {
            Ok((h, rest)) => {
                let mut out = Vec::new();
                h.encode(&mut out);
                prop_assert_eq!(&out[..], &bytes[..out.len()]);
                prop_assert_eq!(rest, &bytes[out.len()..]);
                let sealed = h.flags.contains(HeaderFlags::SEALED);
                prop_assert_eq!(accept_header(&bytes).is_ok(), !sealed);
            }
            Err(_) => prop_assert!(matches!(
                accept_header(&bytes),
                Err(DropReason::Malformed | DropReason::UnsupportedVersion)
            )),
        }
    }

    /// Fuzz target `frames`: every frame decoded from arbitrary bytes
    /// re-encodes to bytes that decode to the same frame.
    #[test]
    fn decoded_frames_reencode(body in arb_body()) {
        for frame in decode_frames(&body) {
            let Ok(frame) = frame else { break };
            let mut out = Vec::new();
            frame.encode(&mut out);
            let mut r = Reader::new(&out);
            prop_assert_eq!(Frame::decode(&mut r), Ok(frame));
            prop_assert!(r.is_empty());
        }
    }

    /// Fuzz target `sender_input`.
    #[test]
    fn sender_survives_hostile_datagrams(connected in prop::bool::weighted(0.9), finish: bool,
                                         script in proptest::collection::vec(arb_step(), 0..40)) {
        drive_sender(connected, finish, &script)?;
    }

    /// Fuzz target `receiver_input`.
    #[test]
    fn receiver_survives_hostile_datagrams(connected in prop::bool::weighted(0.9),
                                           script in proptest::collection::vec(arb_step(), 0..40)) {
        drive_receiver(connected, &script)?;
    }
}

/// Non-minimal varints are accepted (RFC 9000 §16 does not require the
/// shortest form) and re-encode minimally to the same frame.
#[test]
fn non_minimal_varints_decode_to_the_same_frame() {
    let mut long = vec![0x01]; // PING, then an ACK_FREQUENCY with an 8-byte varint
    long.push(0x08);
    long.put_u64(0xC000_0000_0000_0004);
    long.put_u8(0x40); // a 2-byte varint 0
    long.put_u8(0x00);
    let frames: Vec<_> = decode_frames(&long).collect();
    let f = AckFrequencyFrame {
        every: 4,
        min_interval_us: 0,
    };
    assert_eq!(frames, vec![Ok(Frame::Ping), Ok(Frame::AckFrequency(f))]);
}

/// Regression: a cumulative ACK strictly inside a sent segment once made the
/// sender release its buffer mid-segment, so the segment's retransmission
/// read below the buffer's base. It is now clipped to the segment start and
/// counted as `invalid_ack`.
#[test]

fn mid_segment_cumulative_ack() {
    let mut now = Instant::ZERO;
    let mut s = session_of_one(now);
    let mut model = SenderModel::default();
    model.pump(&mut s, now).unwrap();
    now += Duration::from_millis(10);
    s.handle_datagram(now, peer_addr(), &connect_datagram(0));
    model.write(&mut s, &[0xa5; 20_000]);
    model.pump(&mut s, now).unwrap();
    // Let the RTO fire so every segment is deemed lost.
    now += Duration::from_secs(1);
    model.pump(&mut s, now).unwrap();
    let ack = control(
        1,
        Frame::Ack(AckFrame {
            // Inside the second segment.
            cumulative: config().max_payload() + 1,
            window: 0,
            timestamp_echo: WireTimestamp(0),
            ack_delay_us: 0,
            sack: vec![],
        }),
    );
    s.handle_datagram(now, peer_addr(), &ack);
    assert_eq!(s.stats().drops.get(DropReason::InvalidAck), 1);
    model.pump(&mut s, now).unwrap();
}
