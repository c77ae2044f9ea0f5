//! The properties behind the fuzz targets, as plain functions so each target
//! is one line. `crates/fanout-transport/tests/hostile_input.rs` runs the
//! same properties as proptests in the normal test suite.
//!
//! Engine scripts: the input is a sequence of steps
//! `ctl:u8 len:u8 body[len]`. `ctl` bit 0 prefixes `body` with a valid
//! header of the session (so the frame decoder and the engine see it),
//! bit 1 sends it from a stranger's address, bit 2 lets the application act
//! (read / write), and `ctl >> 3` advances the clock (31 = jump 1.5 s, enough
//! to cross idle and linger timeouts within a few steps).

use fanout_core::codec::Reader;
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use fanout_core::Engine;
use fanout_transport::wire::{
    accept_header, decode_frames, ConnectFrame, Frame, Header, HeaderFlags,
};
use fanout_transport::{Receiver, Sender, TransportConfig};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;


/// Known findings `session_input` and `merger_input` avoid: none, unless
/// built with the `avoid-known-findings` feature (to fuzz past findings not
/// fixed yet).
pub const AVOID: fanout_props::Avoid = if cfg!(feature = "avoid-known-findings") {
    fanout_props::Avoid::KNOWN_FINDINGS
} else {
    fanout_props::Avoid::NOTHING
};

/// The session id of every script.
pub const SESSION: u64 = 0x5e55;

fn peer_addr() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 2], 2000))
}

fn stranger_addr() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 66], 6666))
}

/// Small buffers and short timers, so scripts reach every state quickly.
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
/// agree with each other, and a decoded header re-encodes to the same 16
/// bytes.
pub fn check_header(data: &[u8]) {
    let decoded = Header::decode(data);
    let accepted = accept_header(data);
    match decoded {
        Ok((h, rest)) => {
            let mut out = Vec::new();
            h.encode(&mut out);
            assert_eq!(out[..], data[..out.len()]);
            assert_eq!(rest, &data[out.len()..]);
            let sealed = h.flags.contains(HeaderFlags::SEALED);
            assert_eq!(accepted.is_ok(), !sealed);
            if sealed {
                assert_eq!(accepted, Err(DropReason::Unauthenticated));
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
        let again = Frame::decode(&mut r).expect("a re-encoded frame decodes");
        assert_eq!(again, frame);
        assert!(r.is_empty(), "re-encoded frame has trailing bytes");
    }
}

/// One step of an engine script.
struct Step<'a> {
    valid_header: bool,
    from_stranger: bool,
    app_acts: bool,
    advance: Duration,
    body: &'a [u8],
}

fn steps(mut data: &[u8]) -> impl Iterator<Item = Step<'_>> {
    std::iter::from_fn(move || {
        let (&ctl, rest) = data.split_first()?;
        let (&len, rest) = rest.split_first().unwrap_or((&0, &[]));
        let len = usize::from(len).min(rest.len());
        let (body, rest) = rest.split_at(len);
        data = rest;
        let tick = u64::from(ctl >> 3);
        Some(Step {
            valid_header: ctl & 1 != 0,
            from_stranger: ctl & 2 != 0,
            app_acts: ctl & 4 != 0,
            advance: if tick == 31 {
                Duration::from_millis(1500)
            } else {
                Duration::from_micros(tick * tick * 100)
            },
            body,
        })
    })
}

fn datagram(step: &Step<'_>, pn: &mut u32) -> Vec<u8> {
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
    d.extend_from_slice(step.body);
    d
}

/// Runs expired timers and drains transmissions (bounded), as a driver
/// would.
fn pump(engine: &mut impl Engine, now: Instant) {
    let mut buf = Vec::new();
    fanout_core::drain(engine, now, &mut buf, 256, |_, _| {});
}

fn frames_malformed(body: &[u8]) -> bool {
    decode_frames(body).any(|f| f.is_err())
}

/// What the sender was given and what it sent: checks that every DATA
/// frame carries exactly the bytes written at its offset.
#[derive(Default)]
struct SenderModel {
    written: Vec<u8>,
    finished: bool,
    /// Segments sent: start → end, the FIN's offset included.
    segments: BTreeMap<u64, u64>,
}

impl SenderModel {
    fn write(&mut self, s: &mut Sender, data: &[u8]) {
        let n = s.write(data);
        self.written.extend_from_slice(&data[..n]);
    }

    fn finish(&mut self, s: &mut Sender) {
        if !s.is_closed() {
            s.finish();
            self.finished = true;
        }
    }

    /// Runs timers and drains the sender, checking every DATA frame.
    fn pump(&mut self, s: &mut Sender, now: Instant) {
        let mut buf = Vec::new();
        let mut sent = Vec::new();
        fanout_core::drain(s, now, &mut buf, 256, |_, d| sent.push(d.to_vec()));
        for d in sent {
            let (_, body) = accept_header(&d).expect("the sender's own header");
            for f in decode_frames(body) {
                if let Frame::Data(df) = f.expect("the sender's own frames") {
                    let r = df.range();
                    assert!(
                        r.end <= self.written.len() as u64,
                        "DATA beyond what was written"
                    );
                    assert_eq!(
                        df.payload,
                        &self.written[r.start as usize..r.end as usize],
                        "DATA payload differs from the stream at its offset"
                    );
                    if df.fin {
                        assert!(self.finished && r.end == self.written.len() as u64);
                    }
                    self.segments.insert(r.start, r.end + u64::from(df.fin));
                }
            }
        }
    }
}

/// Arbitrary datagrams into a live [`Sender`] (connected, data in flight
/// unless the first byte's bit 0 is set, which leaves it connecting) at
/// increasing times: never panics, and every refused datagram is counted.
pub fn drive_sender(data: &[u8]) {
    let Some((&first, script)) = data.split_first() else {
        return;
    };
    let mut now = Instant::ZERO;
    let mut s = Sender::connect(config(), peer_addr(), SESSION, now);
    let mut model = SenderModel::default();
    let mut pn = 0u32;
    if first & 1 == 0 {
        model.pump(&mut s, now);
        let mut accept = Vec::new();
        Header {
            flags: HeaderFlags::default(),
            session_id: SESSION,
            packet_number: pn,
        }
        .encode(&mut accept);
        pn += 1;
        Frame::Accept(ConnectFrame {
            sends_data: false,
            max_payload: 1200,
            window: 64 << 10,
            timestamp: 0,
            member_id: 1,
                start_offset: 0,
        })
        .encode(&mut accept);
        now += Duration::from_millis(10);
        s.handle_datagram(now, peer_addr(), &accept);
        model.write(&mut s, &[0xa5; 20_000]);
        if first & 2 != 0 {
            model.finish(&mut s);
        }
        model.pump(&mut s, now);
    }
    for step in steps(script) {
        now += step.advance;
        let d = datagram(&step, &mut pn);
        let from = if step.from_stranger {
            stranger_addr()
        } else {
            peer_addr()
        };
        let before = s.stats().clone();
        let was_closed = s.is_closed();
        s.handle_datagram(now, from, &d);
        let after = s.stats();
        assert_eq!(after.datagrams_received, before.datagrams_received + 1);
        let dropped = |r: DropReason| after.drops.get(r) - before.drops.get(r);
        match accept_header(&d) {
            Err(reason) => {
                assert_eq!(dropped(reason), 1);
                assert_eq!(after.drops.total(), before.drops.total() + 1);
            }
            Ok((h, _)) if h.session_id != SESSION => {
                assert_eq!(dropped(DropReason::UnknownSession), 1);
            }
            Ok(_) if step.from_stranger => assert_eq!(dropped(DropReason::UnknownPeer), 1),
            Ok((_, body)) if !was_closed && frames_malformed(body) => {
                assert_eq!(dropped(DropReason::MalformedFrame), 1);
            }
            Ok(_) => {}
        }
        if step.app_acts {
            model.write(&mut s, step.body);
            if step.body.first().is_some_and(|b| b & 1 == 1) {
                model.finish(&mut s);
            }
        }
        model.pump(&mut s, now);
        while s.poll_event().is_some() {}
        // An ACK of bytes never sent is refused (AckOfUnsent).
        assert!(s.bytes_acked() <= model.written.len() as u64);
        let _ = (s.in_flight(), s.cwnd(), s.srtt());
    }
}

/// Arbitrary datagrams into a [`Receiver`] (a sender connected unless the
/// first byte's bit 0 is set) at increasing times: never panics, and every
/// refused datagram is counted.
pub fn drive_receiver(data: &[u8]) {
    let Some((&first, script)) = data.split_first() else {
        return;
    };
    let mut now = Instant::ZERO;
    let mut r = Receiver::listen(config(), now);
    let mut session: Option<u64> = None;
    let mut pn = 0u32;
    if first & 1 == 0 {
        let mut connect = Vec::new();
        Header {
            flags: HeaderFlags::default(),
            session_id: SESSION,
            packet_number: pn,
        }
        .encode(&mut connect);
        pn += 1;
        Frame::Connect(ConnectFrame {
            sends_data: true,
            max_payload: 1200,
            window: 0,
            timestamp: 0,
            member_id: 0,
                start_offset: 0,
        })
        .encode(&mut connect);
        r.handle_datagram(now, peer_addr(), &connect);
        session = Some(SESSION);
        pump(&mut r, now);
    }
    let mut sink = vec![0u8; 4096];
    for step in steps(script) {
        now += step.advance;
        let d = datagram(&step, &mut pn);
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
        assert_eq!(after.datagrams_received, before.datagrams_received + 1);
        let total = after.drops.total() - before.drops.total();
        match accept_header(&d) {
            Err(reason) => {
                assert_eq!(after.drops.get(reason) - before.drops.get(reason), 1);
                assert_eq!(total, 1);
            }
            Ok((h, body)) => {
                let connect = matches!(
                    decode_frames(body).next(),
                    Some(Ok(Frame::Connect(c))) if c.sends_data
                );
                let ours = peer_before == Some((from, h.session_id));
                match peer_before {
                    // A stranger's CONNECT is answered with a busy RESET
                    // (or counted once the refusal queue is full).
                    Some(_) if !ours && connect => {}
                    Some(_) if !ours => assert_eq!(total, 1),
                    None if !connect => assert_eq!(total, 1),
                    _ if !was_closed && frames_malformed(body) => {
                        let mf = DropReason::MalformedFrame;
                        assert_eq!(after.drops.get(mf) - before.drops.get(mf), 1);
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
        let _ = (
            r.readable(),
            r.bytes_read(),
            r.stream_len(),
            r.is_finished(),
        );
    }
}
