//! Merged-duplicate suppression: when a loss above a merger makes all its
//! children repeat their ACK for the same hole, the merger forwards the loss
//! signal once, at once, and then one merged ACK per round of repeats (when the
//! ranges held in common grow), not one per child. The [`Merger`] engine is fed
//! real datagrams.

#![allow(clippy::single_range_in_vec_init)] // one SACK block is the common case

#[path = "common/merge.rs"]
mod merge;

use fanout_core::time::Instant;
use fanout_core::Engine;
use fanout_transport::merge::Merger;
use fanout_transport::wire::{AckFrame, Frame};
use merge::{ack, acks_to, child_datagram, established, outputs, receiver_addr, sender_addr};

/// Merged ACKs the merger sends its parent now.
fn acks_up(m: &mut Merger, now: Instant) -> Vec<AckFrame> {
    acks_to(&outputs(m, now), sender_addr())
}

#[test]
fn a_hole_all_children_share_goes_up_once_per_round() {
    const N: usize = 8;
    let mut m = established(N);
    let t = Instant::ZERO;
    let mut pn = 1u32;
    let mut send = |m: &mut Merger, c: usize, f: Frame<'static>| {
        let d = child_datagram(m, c, pn, &[f]);
        m.handle_datagram(t, receiver_addr(c), &d);
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
