//! Hostile input against the decoders and the two ends of a session of
//! one, as plain functions of fuzz bytes: the cargo-fuzz targets `header`,
//! `frames`, `sender_input` and `receiver_input` call them, and
//! `tests/unicast.rs` runs them as proptests on stable.
//!
//! Engine scripts ([`drive_sender`], [`drive_receiver`]) are a
//! configuration byte and steps ([`crate::script::wide_steps`]: whole
//! datagrams fit in a body) whose kind bits say how
//! the step's body is delivered: bit 0 puts a valid header of the session
//! in front of it (so the frame decoder and the engine logic see it), bit 1
//! sends it from a stranger's address, bit 2 lets the application act
//! (write, or read everything) after it. Nothing may panic, every refused
//! datagram is counted in `stats().drops` under the right reason, and every
//! DATA frame the sender emits carries the written bytes at its offset.

use crate::script::{wide_steps, Step};
use fanout_core::codec::Reader;
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use fanout_core::{drain, Engine};
use fanout_transport::session::{MemberId, SessionConfig, SessionSender};
use fanout_transport::wire::{
    accept_header, decode_frames, AcceptFrame, ConnectFrame, Frame, Header, HeaderFlags,
    OfferFrame, WireTimestamp,
};
use fanout_transport::{Receiver, TransportConfig};
use std::net::SocketAddr;
use std::time::Duration;

/// The session id of every script.
pub const SESSION: u64 = 0x5e55;

/// The one peer of the session.
pub fn peer_addr() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 2], 2000))
}

/// Everyone else.
pub fn stranger_addr() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 66], 6666))
}

/// Small buffers (64 KiB) and short timers (3 s idle, 2 s handshake,
/// 500 ms linger), so scripts reach every state within a few steps.
pub fn config() -> TransportConfig {
    TransportConfig {
        send_buffer_bytes: 64 << 10,
        recv_window_bytes: 64 << 10,
        idle_timeout: Duration::from_secs(3),
        handshake_timeout: Duration::from_secs(2),
        linger: Duration::from_millis(500),
        ..TransportConfig::default()
    }
}

/// `Header::decode` / `accept_header` on arbitrary bytes: never panic,
/// agree with each other, and a decoded header re-encodes to the same bytes.
pub fn check_header(data: &[u8]) {
    let accepted = accept_header(data);
    match Header::decode(data) {
        Ok((h, rest)) => {
            let mut out = Vec::new();
            h.encode(&mut out);
            assert_eq!(out[..], data[..out.len()]);
            assert_eq!(rest, &data[out.len()..]);
            if h.flags.contains(HeaderFlags::SEALED) || h.flags.contains(HeaderFlags::LISTED) {
                assert_eq!(accepted, Err(DropReason::Unauthenticated));
            } else {
                assert!(accepted.is_ok());
            }
        }
        Err(_) => assert!(matches!(
            accepted,
            Err(DropReason::Malformed | DropReason::UnsupportedVersion)
        )),
    }
}

/// `decode_frames` on arbitrary bytes: never panics, and every decoded
/// frame re-encodes to bytes that decode to the same frame, consuming them
/// all.
pub fn check_frames(data: &[u8]) {
    for frame in decode_frames(data) {
        let Ok(frame) = frame else { break };
        let mut out = Vec::new();
        frame.encode(&mut out);
        let mut r = Reader::new(&out);
        assert_eq!(Frame::decode(&mut r), Ok(frame));
        assert!(r.is_empty(), "a re-encoded frame has trailing bytes");
    }
}

/// How a step's body is delivered (its kind bits).
struct Delivery {
    valid_header: bool,
    from_stranger: bool,
    app_acts: bool,
}

impl Delivery {
    fn of(step: &Step<'_>) -> Self {
        Delivery {
            valid_header: step.kind & 1 != 0,
            from_stranger: step.kind & 2 != 0,
            app_acts: step.kind & 4 != 0,
        }
    }

    fn from(&self) -> SocketAddr {
        if self.from_stranger {
            stranger_addr()
        } else {
            peer_addr()
        }
    }

    /// The datagram: `body`, behind the next header under `id` (the
    /// session id, or a member's token) if the step asks for one.
    fn datagram(&self, body: &[u8], pn: &mut u32, id: u64) -> Vec<u8> {
        let mut d = Vec::new();
        if self.valid_header {
            Header {
                flags: HeaderFlags::default(),
                session_id: id,
                packet_number: *pn,
            }
            .encode(&mut d);
            *pn = pn.wrapping_add(1);
        }
        d.extend_from_slice(body);
        d
    }
}

/// One datagram of the session: a header and one frame.
pub fn control(packet_number: u32, frame: Frame<'_>) -> Vec<u8> {
    control_as(SESSION, packet_number, frame)
}

/// One datagram under header id `id` (a member's token): a header and one
/// frame.
pub fn control_as(id: u64, packet_number: u32, frame: Frame<'_>) -> Vec<u8> {
    let mut d = Vec::new();
    Header {
        flags: HeaderFlags::default(),
        session_id: id,
        packet_number,
    }
    .encode(&mut d);
    frame.encode(&mut d);
    d
}

fn frames_malformed(body: &[u8]) -> bool {
    decode_frames(body).any(|f| f.is_err())
}

/// What the sender was given and what it sent.
#[derive(Default)]
pub struct SenderModel {
    written: Vec<u8>,
    finished: bool,
}

impl SenderModel {
    /// Writes `data` (what the sender takes of it).
    pub fn write(&mut self, s: &mut SessionSender, data: &[u8]) {
        let n = s.write(data);
        self.written.extend_from_slice(&data[..n]);
    }

    /// Ends the stream, unless the session is closed.
    pub fn finish(&mut self, s: &mut SessionSender) {
        if s.close_reason().is_none() {
            s.finish();
            self.finished = true;
        }
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written.len() as u64
    }

    /// Runs timers and drains the sender (bounded, as a driver would),
    /// checking that every DATA frame carries the written bytes at its
    /// offset and a FIN only at the end of a finished stream.
    pub fn pump(&mut self, s: &mut SessionSender, now: Instant) {
        let mut buf = Vec::new();
        let mut sent = Vec::new();
        drain(s, now, &mut buf, 256, |_, d| sent.push(d.to_vec()));
        for d in sent {
            let (_, body) = accept_header(&d).expect("the sender's own header");
            for f in decode_frames(body) {
                if let Frame::Data(df) = f.expect("the sender's own frames") {
                    let r = df.range();
                    assert!(r.end <= self.written(), "DATA beyond what was written");
                    assert_eq!(
                        df.payload,
                        &self.written[r.start as usize..r.end as usize],
                        "DATA differs from the stream at its offset"
                    );
                    if df.fin {
                        assert!(self.finished && r.end == self.written());
                    }
                }
            }
        }
    }
}

/// The listener's answer to the sender's OFFER: its CONNECT.
pub fn connect_datagram(packet_number: u32) -> Vec<u8> {
    control(
        packet_number,
        Frame::Connect(ConnectFrame {
            max_payload: 1200,
            window: 64 << 10,
            timestamp: WireTimestamp(0),
            resume_from: 0,
        }),
    )
}

/// A session of one ([`SessionConfig::unicast`] over [`config`]), offered
/// to [`peer_addr`] at `now`.
pub fn session_of_one(now: Instant) -> SessionSender {
    let mut s = SessionSender::new(SessionConfig::unicast(config()), SESSION, now);
    assert!(s.offer(now, peer_addr()));
    s
}

/// Arbitrary datagrams into a session of one at increasing times. The
/// configuration byte: bit 0 clear = the peer connected and 20 000 bytes
/// in flight before the script starts; bit 1 = the stream is also ended.
pub fn drive_sender(data: &[u8]) {
    let Some((&first, script)) = data.split_first() else {
        return;
    };
    let mut now = Instant::ZERO;
    let mut s = session_of_one(now);
    let mut model = SenderModel::default();
    let mut pn = 0u32;
    if first & 1 == 0 {
        model.pump(&mut s, now);
        now += Duration::from_millis(10);
        s.handle_datagram(now, peer_addr(), &connect_datagram(pn));
        pn += 1;
        assert_eq!(s.member_count(), 1);
        model.write(&mut s, &[0xa5; 20_000]);
        if first & 2 != 0 {
            model.finish(&mut s);
        }
        model.pump(&mut s, now);
        assert!(s.snd_nxt() > 0);
    }
    for step in wide_steps(script) {
        now += step.advance;
        let how = Delivery::of(&step);
        // The peer speaks under its token once it joined.
        let token = s.member_token(MemberId(1));
        let d = how.datagram(step.body, &mut pn, token.unwrap_or(SESSION));
        let before = s.stats().clone();
        let was_closed = s.close_reason().is_some();
        let was_member = s.member_count() > 0;
        s.handle_datagram(now, how.from(), &d);
        let after = s.stats();
        assert_eq!(after.datagrams_received, before.datagrams_received + 1);
        let dropped = |r: DropReason| after.drops.get(r) - before.drops.get(r);
        match accept_header(&d) {
            Err(reason) => {
                assert_eq!(dropped(reason), 1);
                assert_eq!(after.drops.total(), before.drops.total() + 1);
            }
            Ok(_) if was_closed => assert_eq!(dropped(DropReason::SessionClosed), 1),
            // A member's datagram under another id than its token.
            Ok((h, _)) if Some(h.session_id) != token && !how.from_stranger && was_member => {
                assert_eq!(dropped(DropReason::UnknownSession), 1);
            }
            // A stranger's, joins included: only the invited peer is
            // admitted.
            Ok(_) if how.from_stranger => assert_eq!(dropped(DropReason::UnknownPeer), 1),
            // (A RESET before the bad frame ends the member first.)
            Ok((_, body)) if was_member && s.member_count() > 0 && frames_malformed(body) => {
                assert_eq!(dropped(DropReason::MalformedFrame), 1);
            }
            Ok(_) => {}
        }
        if how.app_acts {
            model.write(&mut s, step.body);
            if step.body.first().is_some_and(|b| b & 1 == 1) {
                model.finish(&mut s);
            }
        }
        model.pump(&mut s, now);
        while s.poll_event().is_some() {}
        // An ACK of bytes never sent is refused (AckOfUnsent).
        assert!(s.bytes_acked_by_all() <= model.written());
        assert!(s.member_count() <= 1, "only the invited peer joins");
    }
}

/// Arbitrary datagrams into a listening [`Receiver`] at increasing times.
/// The configuration byte: bit 0 clear = the sender's OFFER and ACCEPT
/// arrived before the script starts.
pub fn drive_receiver(data: &[u8]) {
    let Some((&first, script)) = data.split_first() else {
        return;
    };
    let mut now = Instant::ZERO;
    let mut r = Receiver::listen(config(), now);
    let mut session: Option<u64> = None;
    let mut pn = 0u32;
    if first & 1 == 0 {
        let offer = Frame::Offer(OfferFrame {
            max_payload: 1200,
            timestamp: WireTimestamp(0),
        });
        r.handle_datagram(now, peer_addr(), &control(pn, offer));
        pump(&mut r, now);
        let accept = Frame::Accept(AcceptFrame {
            max_payload: 1200,
            timestamp_echo: WireTimestamp(0),
            member_id: 1,
            start_offset: 0,
            token: SESSION ^ 1,
        });
        r.handle_datagram(now, peer_addr(), &control(pn + 1, accept));
        pn += 2;
        session = Some(SESSION);
        assert_eq!(r.peer(), Some(peer_addr()));
        pump(&mut r, now);
    }
    let mut sink = vec![0u8; 4096];
    for step in wide_steps(script) {
        now += step.advance;
        let how = Delivery::of(&step);
        let d = how.datagram(step.body, &mut pn, SESSION);
        let from = how.from();
        let before = r.stats().clone();
        let peer_before = r.peer().zip(session);
        let was_closed = r.is_closed();
        r.handle_datagram(now, from, &d);
        if session.is_none() && r.peer().is_some() {
            session = accept_header(&d).ok().map(|(h, _)| h.session_id);
        }
        let after = r.stats();
        assert_eq!(after.datagrams_received, before.datagrams_received + 1);
        let total = after.drops.total() - before.drops.total();
        match accept_header(&d) {
            Err(reason) => {
                assert_eq!(after.drops.get(reason) - before.drops.get(reason), 1);
                assert_eq!(total, 1);
            }
            Ok((h, body)) => {
                let offer = matches!(decode_frames(body).next(), Some(Ok(Frame::Offer(_))));
                let ours = peer_before == Some((from, h.session_id));
                match peer_before {
                    // A stranger's OFFER is answered with a busy RESET (or
                    // counted once the refusal queue is full).
                    Some(_) if !ours && offer => {}
                    Some(_) if !ours => assert_eq!(total, 1),
                    // Listening or joining: only the first frame counts,
                    // and what is not the handshake is refused once.
                    None => assert!(total <= 1),
                    _ if !was_closed && frames_malformed(body) => {
                        let mf = DropReason::MalformedFrame;
                        assert_eq!(after.drops.get(mf) - before.drops.get(mf), 1);
                    }
                    _ => {}
                }
            }
        }
        let (held, most) = r.held_ranges();
        assert!(held <= most, "{held} reassembly ranges, cap {most}");
        if how.app_acts {
            while r.read(&mut sink) > 0 {}
        }
        pump(&mut r, now);
        while r.poll_event().is_some() {}
    }
}

/// Runs expired timers and drains transmissions (bounded), as a driver
/// would.
fn pump(engine: &mut impl Engine, now: Instant) {
    let mut buf = Vec::new();
    drain(engine, now, &mut buf, 256, |_, _| {});
}
