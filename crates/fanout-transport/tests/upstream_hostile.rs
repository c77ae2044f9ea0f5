//! Session relay under hostile or arbitrary input, as property tests:
//!
//! * a session sender fed UPSTREAM frames with arbitrary offsets, lengths
//!   and FIN flags (overlapping, out of order, beyond every window) from a
//!   member delivers to its application only the member's true bytes, in
//!   order, never more than the window ahead of what it read, and never
//!   holds more than the window;
//! * a member fed arbitrary UPSTREAM_ACKs (acknowledging too much, windows
//!   of any size) never panics, never sends a byte other than the one
//!   written at that offset, and never sends beyond the largest window it
//!   was offered.

use fanout_core::{drain, Engine, Instant};
use fanout_transport::session::{SessionConfig, SessionEvent, SessionSender, MAX_UPSTREAM_WINDOW};
use fanout_transport::wire::{
    accept_header, decode_frames, ConnectFrame, Frame, Header, HeaderFlags, UpstreamAckFrame,
    UpstreamFrame,
};
use fanout_transport::wire::{AcceptFrame, WireTimestamp};
use fanout_transport::{Receiver, TransportConfig};
use proptest::prelude::*;
use std::net::SocketAddr;
use std::time::Duration;

const SESSION: u64 = 0x5e55;

fn sender_addr() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], 5000))
}

fn member_addr() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 2], 2000))
}

/// The member's true upstream byte at `offset`.
fn truth(offset: u64) -> u8 {
    (offset.wrapping_mul(2_654_435_761) >> 7) as u8
}

fn datagram(pn: u32, frame: Frame<'_>) -> Vec<u8> {
    datagram_as(SESSION, pn, frame)
}

/// A datagram under header id `id` (a member speaks under its token).
fn datagram_as(id: u64, pn: u32, frame: Frame<'_>) -> Vec<u8> {
    let mut d = Vec::new();
    Header {
        flags: HeaderFlags::default(),
        session_id: id,
        packet_number: pn,
    }
    .encode(&mut d);
    frame.encode(&mut d);
    d
}

/// The token of the member at `addr`.
fn token_of(s: &SessionSender, addr: SocketAddr) -> u64 {
    s.members()
        .find(|m| m.1 == addr)
        .and_then(|m| s.member_token(m.0))
        .expect("a member")
}

/// One UPSTREAM frame: (offset, length, fin, app reads after it).
type Piece = (u64, usize, bool, bool);

fn arb_piece() -> impl Strategy<Value = Piece> {
    // Mostly 1000-byte tiles, so the stream advances and is read; some
    // arbitrary offsets and lengths; a few far beyond any window.
    let offset = prop_oneof![
        6 => (0u64..140).prop_map(|k| k * 1000),
        3 => 0u64..(2 * MAX_UPSTREAM_WINDOW as u64),
        1 => 0u64..(1 << 40),
    ];
    let len = prop_oneof![3 => Just(1000usize), 1 => 0usize..1400];
    (offset, len, prop::bool::weighted(0.02), any::<bool>())
}

fn drive_sender(pieces: &[Piece]) -> Result<(), TestCaseError> {
    let now = Instant::ZERO;
    let mut s = SessionSender::new(SessionConfig::default(), SESSION, now);
    let connect = Frame::Connect(ConnectFrame {
        max_payload: 1200,
        window: 1 << 20,
        timestamp: WireTimestamp(0),
        resume_from: 0,
    });
    s.handle_datagram(now, member_addr(), &datagram(0, connect));
    prop_assert_eq!(s.member_count(), 1);
    let id = s.members().next().unwrap().0;
    let mut read: Vec<u8> = Vec::new();
    let mut fin: Option<u64> = None;
    let mut buf = vec![0u8; 3000];
    for (k, &(offset, len, want_fin, app_reads)) in pieces.iter().enumerate() {
        let payload: Vec<u8> = (offset..offset + len as u64).map(truth).collect();
        let f = Frame::Upstream(UpstreamFrame {
            offset,
            timestamp: WireTimestamp(k as u32),
            fin: want_fin,
            payload: &payload,
        });
        let dropped = |s: &SessionSender| {
            let st = s.upstream_stats();
            st.dropped_invalid + st.dropped_beyond_window
        };
        let before = dropped(&s);
        let token = token_of(&s, member_addr());
        s.handle_datagram(now, member_addr(), &datagram_as(token, k as u32 + 1, f));
        if want_fin && dropped(&s) == before {
            // A consistent FIN inside the window fixes the length (one
            // beyond it is dropped and fixes nothing), and a later one
            // must agree.
            prop_assert!(fin.is_none_or(|f| f == offset + len as u64));
            fin = Some(offset + len as u64);
        }
        prop_assert!(s.upstream_memory_bytes() <= MAX_UPSTREAM_WINDOW + 4096);
        if app_reads {
            loop {
                let n = s.read_upstream(id, &mut buf);
                if n == 0 {
                    break;
                }
                // In order, each byte once: the true stream from 0.
                let at = read.len() as u64;
                for (i, &b) in buf[..n].iter().enumerate() {
                    prop_assert_eq!(b, truth(at + i as u64));
                }
                read.extend_from_slice(&buf[..n]);
            }
        }
        // Answers go to the member only, each a sane acknowledgement.
        let mut out = Vec::new();
        let mut sent = Vec::new();
        drain(&mut s, now, &mut out, 64, |t, d| {
            sent.push((t.destination, d.to_vec()))
        });
        for (to, d) in sent {
            prop_assert_eq!(to, member_addr());
            let (_, body) = accept_header(&d).expect("own header");
            for f in decode_frames(body) {
                if let Ok(Frame::UpstreamAck(a)) = f {
                    prop_assert!(a.cumulative >= read.len() as u64);
                    prop_assert!(
                        a.cumulative + a.window
                            <= read.len() as u64 + MAX_UPSTREAM_WINDOW as u64 + 1
                    );
                }
            }
        }
        while let Some(e) = s.poll_event() {
            if let SessionEvent::Upstream { id: who, addr } = e {
                prop_assert_eq!((who, addr), (id, member_addr()));
            }
        }
    }
    if s.upstream_finished(id) {
        prop_assert_eq!(Some(read.len() as u64), fin);
    }
    let st = s.upstream_stats();
    prop_assert_eq!(st.bytes_delivered, read.len() as u64);
    prop_assert!(st.bytes_received >= st.bytes_delivered);
    Ok(())
}

/// A member established with the sender, with `written` bytes upstream.
fn drive_member(
    written: usize,
    finish: bool,
    acks: &[(u64, u64, u64)],
) -> Result<(), TestCaseError> {
    let cfg = TransportConfig::default();
    let mut now = Instant::ZERO;
    let mut r = Receiver::join(cfg, sender_addr(), now);
    let data: Vec<u8> = (0..written as u64).map(truth).collect();
    let n = r.write_upstream(&data);
    prop_assert_eq!(n, written.min(fanout_transport::UPSTREAM_SEND_BUFFER));
    if finish {
        r.finish_upstream();
    }
    let mut out = Vec::new();
    drain(&mut r, now, &mut out, 8, |_, _| {});
    let accept = Frame::Accept(AcceptFrame {
        max_payload: 1200,
        timestamp_echo: WireTimestamp(0),
        member_id: 7,
        start_offset: 0,
        token: SESSION ^ 1,
    });
    r.handle_datagram(now, sender_addr(), &datagram(0, accept));
    prop_assert!(r.peer().is_some());
    let mut limit = fanout_transport::UPSTREAM_INITIAL_WINDOW;
    for (k, &(cumulative, window, advance_ms)) in acks.iter().enumerate() {
        let mut sent = Vec::new();
        drain(&mut r, now, &mut out, 256, |_, d| sent.push(d.to_vec()));
        for d in sent {
            let (_, body) = accept_header(&d).expect("own header");
            for f in decode_frames(body) {
                if let Ok(Frame::Upstream(u)) = f {
                    let range = u.range();
                    prop_assert!(range.end <= n as u64);
                    prop_assert!(range.end <= limit, "{range:?} beyond the window {limit}");
                    for (i, &b) in u.payload.iter().enumerate() {
                        prop_assert_eq!(b, truth(range.start + i as u64));
                    }
                    if u.fin {
                        prop_assert!(finish && range.end == n as u64);
                    }
                }
            }
        }
        now += Duration::from_millis(advance_ms);
        let ack = Frame::UpstreamAck(UpstreamAckFrame {
            cumulative,
            window,
            timestamp_echo: WireTimestamp(k as u32),
        });
        let before = r.stats().drops.total();
        r.handle_datagram(now, sender_addr(), &datagram(k as u32 + 1, ack));
        if r.stats().drops.total() == before {
            limit = limit.max(cumulative + window);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn sender_delivers_only_the_true_upstream_in_order(
        pieces in proptest::collection::vec(arb_piece(), 0..300)
    ) {
        drive_sender(&pieces)?;
    }

    #[test]
    fn member_sends_only_written_bytes_within_the_window(
        written in 0usize..100_000,
        finish: bool,
        acks in proptest::collection::vec((0u64..120_000, 0u64..100_000, 0u64..3000), 0..60)
    ) {
        drive_member(written, finish, &acks)?;
    }
}

/// A sender that always answers: a member's whole upstream arrives, in
/// order, through small windows, and its status ends Finished.
#[test]
fn a_member_completes_its_upstream_through_a_small_window() {
    use fanout_transport::UpstreamStatus;
    let cfg = TransportConfig::default();
    let mut now = Instant::ZERO;
    let mut r = Receiver::join(cfg, sender_addr(), now);
    let data: Vec<u8> = (0..50_000u64).map(truth).collect();
    assert_eq!(r.write_upstream(&data), data.len());
    r.finish_upstream();
    let accept = Frame::Accept(AcceptFrame {
        max_payload: 1200,
        timestamp_echo: WireTimestamp(0),
        member_id: 7,
        start_offset: 0,
        token: SESSION ^ 1,
    });
    r.handle_datagram(now, sender_addr(), &datagram(0, accept));
    let mut got: Vec<u8> = Vec::new();
    let mut fin = false;
    let mut out = Vec::new();
    for k in 0..10_000u32 {
        let mut sent = Vec::new();
        drain(&mut r, now, &mut out, 256, |_, d| sent.push(d.to_vec()));
        let mut echo = None;
        for d in sent {
            let (_, body) = accept_header(&d).unwrap();
            for f in decode_frames(body) {
                if let Ok(Frame::Upstream(u)) = f {
                    if u.offset == got.len() as u64 {
                        got.extend_from_slice(u.payload);
                        fin |= u.fin;
                    }
                    echo = Some(u.timestamp);
                }
            }
        }
        if let Some(ts) = echo {
            // A 3000-byte window beyond what arrived in order.
            let ack = Frame::UpstreamAck(UpstreamAckFrame {
                cumulative: got.len() as u64 + u64::from(fin),
                window: 3000,
                timestamp_echo: ts,
            });
            r.handle_datagram(now, sender_addr(), &datagram(k + 1, ack));
        }
        if r.upstream_status() == UpstreamStatus::Finished {
            break;
        }
        now += Duration::from_millis(5);
        r.handle_timeout(now);
    }
    assert!(got == data, "{} of {}", got.len(), data.len());
    assert_eq!(r.upstream_status(), UpstreamStatus::Finished);
    assert_eq!(r.upstream_stats().bytes_acked, data.len() as u64);
}

#[test]
fn members_holding_gaps_cannot_pin_the_upstream_buffers() {
    // More members than the session has upstream buffers each send one
    // in-order byte and one beyond a gap they never fill, and the
    // application reads what it can; a later member's in-order bytes must
    // still be taken (a gap once kept its buffer, and 64 such members
    // refused everyone else's upstream for the rest of the session).
    let now = Instant::ZERO;
    let mut s = SessionSender::new(SessionConfig::default(), SESSION, now);
    let addr = |i: u16| SocketAddr::from(([10, 0, 1, (i % 250) as u8 + 1], 2000 + i));
    let connect = Frame::Connect(ConnectFrame {
        max_payload: 1200,
        window: 1 << 20,
        timestamp: WireTimestamp(0),
        resume_from: 0,
    });
    let members = fanout_transport::session::MAX_UPSTREAM_BUFFERS as u16 + 2;
    for i in 0..=members {
        s.handle_datagram(now, addr(i), &datagram(0, connect.clone()));
        // Beyond 16 unvalidated members the session answers a RETRY: the
        // member joins again under its token, as a receiver does.
        let mut out = Vec::new();
        let mut retry = None;
        drain(&mut s, now, &mut out, 64, |t, d| {
            let (_, body) = fanout_transport::wire::Header::decode(d).unwrap();
            if let Some(Ok(Frame::Retry(token))) =
                fanout_transport::wire::decode_frames(body).next()
            {
                if t.destination == addr(i) {
                    retry = Some(token);
                }
            }
        });
        if let Some(token) = retry {
            s.handle_datagram(now, addr(i), &datagram_as(token, 0, connect.clone()));
        }
    }
    assert_eq!(s.member_count(), usize::from(members) + 1);
    let piece = |offset: u64| {
        let payload: Vec<u8> = (offset..offset + 10).map(truth).collect();
        payload
    };
    let mut buf = [0u8; 64];
    for i in 0..members {
        for (pn, offset) in [(1, 0u64), (2, 5000)] {
            let p = piece(offset);
            let f = Frame::Upstream(UpstreamFrame {
                offset,
                timestamp: WireTimestamp(0),
                fin: false,
                payload: &p,
            });
            let token = token_of(&s, addr(i));
            s.handle_datagram(now, addr(i), &datagram_as(token, pn, f));
        }
        let ids: Vec<_> = s.members().map(|m| m.0).collect();
        for id in ids {
            while s.read_upstream(id, &mut buf) > 0 {}
        }
    }
    let before = s.upstream_stats().dropped_limit;
    let p = piece(0);
    let f = Frame::Upstream(UpstreamFrame {
        offset: 0,
        timestamp: WireTimestamp(0),
        fin: false,
        payload: &p,
    });
    let token = token_of(&s, addr(members));
    s.handle_datagram(now, addr(members), &datagram_as(token, 1, f));
    assert_eq!(
        s.upstream_stats().dropped_limit,
        before,
        "{:?}",
        s.upstream_stats()
    );
    let last = s.members().map(|m| m.0).max().unwrap();
    assert_eq!(s.read_upstream(last, &mut buf), 10);
}
