//! Helpers shared by the MCTCP merger tests (`merge_*.rs`): the test
//! networks' addresses, datagrams built by hand, and a merger established
//! over `n` children.

#![allow(dead_code)] // each test crate uses its own subset

use fanout_core::time::Instant;
use fanout_core::RangeSet;
use fanout_core::Rng;
use fanout_core::{drain, Engine};
use fanout_transport::merge::{JoinMerge, Merger, MergerConfig};
use fanout_transport::wire::{decode_frames, AckFrame, ConnectFrame, Frame, Header, HeaderFlags};
use fanout_transport::wire::{AcceptFrame, WireTimestamp};
use std::net::SocketAddr;

/// The session the sender of [`established`] accepts members into.
pub const ESTABLISHED_SESSION: u64 = 7;

/// The session sender.
pub fn sender_addr() -> SocketAddr {
    "10.0.0.1:5000".parse().unwrap()
}

/// Merger `i`.
pub fn merger_addr(i: usize) -> SocketAddr {
    format!("10.0.2.{}:6000", i + 1).parse().unwrap()
}

/// Receiver `i`.
pub fn receiver_addr(i: usize) -> SocketAddr {
    format!("10.0.1.{}:7000", i + 1).parse().unwrap()
}

/// `n` bytes of seeded pseudo-random data.
pub fn random_data(n: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0; n];
    Rng::new(seed).fill(&mut v);
    v
}

/// The offsets an ACK acknowledges.
pub fn acked_set(a: &AckFrame) -> RangeSet {
    let mut s = RangeSet::new();
    if a.cumulative > 0 {
        s.insert(0..a.cumulative);
    }
    for r in &a.sack {
        s.insert(r.clone());
    }
    s
}

/// A datagram of `frames` in session `session_id`, packet number `pn`.
pub fn datagram(session_id: u64, pn: u32, frames: &[Frame<'_>]) -> Vec<u8> {
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

/// Child `c`'s datagram to merger `m`, under the token its ACCEPT gave it.
pub fn child_datagram(m: &Merger, c: usize, pn: u32, frames: &[Frame<'_>]) -> Vec<u8> {
    let token = m.child_token(&receiver_addr(c)).expect("an accepted child");
    datagram(token, pn, frames)
}

/// The sender's (or a merger's) ACCEPT giving member id `member_id`, with
/// token [`TOKEN`].
pub fn accept(member_id: u64) -> Frame<'static> {
    Frame::Accept(AcceptFrame {
        max_payload: 1400,
        timestamp_echo: WireTimestamp(0),
        member_id,
        start_offset: 0,
        token: TOKEN,
    })
}

/// The token scripted ACCEPTs give: the joiner's header id from then on.
pub const TOKEN: u64 = 0x70_4b_e4;

/// A receiver's CONNECT (offset 0, 1400-byte segments, 1 MiB window).
pub fn connect() -> Frame<'static> {
    Frame::Connect(ConnectFrame {
        max_payload: 1400,
        window: 1 << 20,
        timestamp: WireTimestamp(0),
        resume_from: 0,
    })
}

/// An ACK of `[0, cumulative)` and `sack`, 1 MiB window, echoing 1.
pub fn ack(cumulative: u64, sack: Vec<std::ops::Range<u64>>) -> Frame<'static> {
    Frame::Ack(AckFrame {
        cumulative,
        window: 1 << 20,
        timestamp_echo: WireTimestamp(1),
        ack_delay_us: 0,
        sack,
    })
}

/// What a merger sends now: (destination, header, frames' bytes).
pub fn outputs(m: &mut Merger, now: Instant) -> Vec<(SocketAddr, Header, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    drain(m, now, &mut buf, 10_000, |t, b| {
        let (h, body) = Header::decode(b).unwrap();
        out.push((t.destination, h, body.to_vec()));
    });
    out
}

/// The ACKs among `out` sent to `to`.
pub fn acks_to(out: &[(SocketAddr, Header, Vec<u8>)], to: SocketAddr) -> Vec<AckFrame> {
    out.iter()
        .filter(|(d, _, _)| *d == to)
        .flat_map(|(_, _, body)| {
            decode_frames(body)
                .filter_map(|f| match f {
                    Ok(Frame::Ack(a)) => Some(a),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A merger under [`sender_addr`] with children `receiver_addr(0..n)`,
/// joined by count and admitted at offset 0 in [`ESTABLISHED_SESSION`].
pub fn established(n: usize) -> Merger {
    let parent = sender_addr();
    let mut m = Merger::new(
        MergerConfig {
            join: JoinMerge::Count(n),
            ..MergerConfig::new(parent)
        },
        Instant::ZERO,
    );
    let t = Instant::ZERO;
    for i in 0..n {
        m.handle_datagram(t, receiver_addr(i), &datagram(0, 0, &[connect()]));
    }
    let out = outputs(&mut m, t);
    assert_eq!(out.len(), 1, "one merged CONNECT: {out:?}");
    m.handle_datagram(t, parent, &datagram(ESTABLISHED_SESSION, 0, &[accept(3)]));
    let out = outputs(&mut m, t);
    let (up, down): (Vec<_>, Vec<_>) = out.iter().partition(|(to, _, _)| *to == parent);
    assert_eq!(down.len(), n, "ACCEPT relayed to each child");
    assert_eq!(up.len(), 1, "the token echoed to the parent: {up:?}");
    assert_eq!(up[0].1.session_id, TOKEN);
    assert!(m.is_established());
    m
}
