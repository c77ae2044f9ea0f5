//! Merged-duplicate suppression (issue 4): when a loss above a merger
//! makes all its children repeat their ACK for the same hole, the merger
//! forwards the loss signal once, at once, and then one merged ACK per
//! round of repeats (when the ranges held in common grow), not one per
//! child. The [`Merger`] engine is fed real datagrams.

#![allow(clippy::single_range_in_vec_init)] // one SACK block is the common case

use fanout_core::time::Instant;
use fanout_core::{drain, Engine};
use fanout_transport::merge::{JoinMerge, Merger, MergerConfig};
use fanout_transport::wire::{decode_frames, AckFrame, ConnectFrame, Frame, Header, HeaderFlags};
use std::net::SocketAddr;

const SESSION: u64 = 7;

fn parent() -> SocketAddr {
    "10.0.0.1:5000".parse().unwrap()
}

fn child(i: usize) -> SocketAddr {
    format!("10.0.1.{}:7000", i + 1).parse().unwrap()
}

fn datagram(session_id: u64, pn: u32, frames: &[Frame<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    Header {
        flags: HeaderFlags::default(),
        session_id,
        packet_number: pn,
    }
    .encode(&mut out);
    for f in frames {
        f.encode(&mut out);
    }
    out
}

fn ack(cumulative: u64, sack: Vec<std::ops::Range<u64>>) -> Frame<'static> {
    Frame::Ack(AckFrame {
        cumulative,
        window: 1 << 20,
        timestamp_echo: 1,
        ack_delay_us: 0,
        sack,
    })
}

/// Merged ACKs the merger sends its parent now.
fn acks_up(m: &mut Merger, now: Instant) -> Vec<AckFrame> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    drain(m, now, &mut buf, 10_000, |t, b| {
        if t.destination != parent() {
            return;
        }
        let (_, body) = Header::decode(b).unwrap();
        for f in decode_frames(body).flatten() {
            if let Frame::Ack(a) = f {
                out.push(a);
            }
        }
    });
    out
}

/// A merger with `n` children, established in session [`SESSION`].
fn established(n: usize) -> Merger {
    let t = Instant::ZERO;
    let mut m = Merger::new(
        MergerConfig {
            join: JoinMerge::Count(n),
            ..MergerConfig::new(parent())
        },
        t,
    );
    let connect = Frame::Connect(ConnectFrame {
        sends_data: false,
        max_payload: 1400,
        window: 1 << 20,
        timestamp: 0,
        member_id: 0,
        start_offset: 0,
    });
    for i in 0..n {
        m.handle_datagram(t, child(i), &datagram(0, 0, std::slice::from_ref(&connect)));
    }
    acks_up(&mut m, t);
    let accept = Frame::Accept(ConnectFrame {
        sends_data: true,
        max_payload: 1400,
        window: 0,
        timestamp: 0,
        member_id: 3,
        start_offset: 0,
    });
    m.handle_datagram(t, parent(), &datagram(SESSION, 0, &[accept]));
    acks_up(&mut m, t);
    assert!(m.is_established());
    m
}

#[test]
fn a_hole_all_children_share_goes_up_once_per_round() {
    const N: usize = 8;
    let mut m = established(N);
    let t = Instant::ZERO;
    let mut pn = 1u32;
    let mut send = |m: &mut Merger, c: usize, f: Frame<'static>| {
        m.handle_datagram(t, child(c), &datagram(SESSION, pn, &[f]));
        pn += 1;
    };
    for c in 0..N {
        send(&mut m, c, ack(10_000, vec![]));
    }
    assert_eq!(acks_up(&mut m, t).len(), 1, "the merged point moved once");
    // Segment [10 000, 11 000) is lost above the merger: every child gets
    // each later segment and repeats its ACK with a growing SACK range.
    let mut up = Vec::new();
    let rounds = 6u64;
    for round in 1..=rounds {
        for c in 0..N {
            send(&mut m, c, ack(10_000, vec![11_000..11_000 + round * 1000]));
            let now = acks_up(&mut m, t);
            if round == 1 && c == 0 {
                assert_eq!(now.len(), 1, "the first repeat goes at once");
                assert_eq!(now[0].cumulative, 10_000);
            }
            up.extend(now.into_iter().map(|a| (round, c, a)));
        }
    }
    // The first repeat, then the last child of each round (the range every
    // child now holds grew): 1 + rounds, where forwarding every repeat sent
    // N · rounds = 48.
    assert_eq!(up.len() as u64, 1 + rounds, "{up:?}");
    for (round, c, a) in up.iter().skip(1) {
        assert_eq!(*c, N - 1);
        assert_eq!(a.sack, vec![11_000..11_000 + round * 1000]);
    }
    let st = m.stats();
    assert_eq!(st.duplicate_forwards, 1);
    assert_eq!(st.duplicates_suppressed, N as u64 * rounds - 1);
    // The repair arrives: the merged point moves, and a new hole's repeat
    // goes at once again.
    for c in 0..N {
        send(&mut m, c, ack(20_000, vec![]));
    }
    assert_eq!(acks_up(&mut m, t).len(), 1);
    send(&mut m, 4, ack(20_000, vec![21_000..22_000]));
    assert_eq!(acks_up(&mut m, t).len(), 1, "a new hole is signalled");
    assert_eq!(m.stats().duplicate_forwards, 2);
}
