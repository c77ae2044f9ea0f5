//! Property tests of the MCTCP ACK merge: the merge is a meet — commutative,
//! associative, idempotent — and a merged ACK never acknowledges (cumulatively
//! or by SACK) an offset some child has not.

use fanout_transport::merge::older_timestamp;
use fanout_transport::merge::AckSummary;
use fanout_transport::wire::{AckFrame, WireTimestamp, MAX_SACK_RANGES};
use proptest::prelude::*;

/// Offsets are drawn from a small space so that children's ranges overlap,
/// touch and nest often.
const SPACE: u64 = 400;

fn arb_frame(base_ts: u32) -> impl Strategy<Value = AckFrame> {
    (
        0u64..SPACE,
        0u64..SPACE,
        0u32..1_000_000,
        0u64..10_000,
        proptest::collection::vec((0u64..SPACE, 1u64..40), 0..MAX_SACK_RANGES),
    )
        .prop_map(move |(cumulative, window, ts, delay, blocks)| AckFrame {
            cumulative,
            window,
            // Echoes within one half of the 32-bit circle (RFC 7323 §5.2),
            // possibly across the wrap.
            timestamp_echo: WireTimestamp(base_ts.wrapping_add(ts)),
            ack_delay_us: delay,
            // As the decoder admits them: start >= cumulative, any order,
            // possibly overlapping or touching the cumulative point.
            sack: blocks
                .into_iter()
                .map(|(s, l)| cumulative + s..cumulative + s + l)
                .collect(),
        })
}

fn arb_summary(base_ts: u32) -> impl Strategy<Value = AckSummary> {
    prop_oneof![
        4 => arb_frame(base_ts).prop_map(|f| AckSummary::from_frame(&f)),
        1 => (0u64..SPACE, 0u64..SPACE).prop_map(|(s, w)| AckSummary::at_start(s, w)),
    ]
}

fn three() -> impl Strategy<Value = (AckSummary, AckSummary, AckSummary)> {
    any::<u32>().prop_flat_map(|base| (arb_summary(base), arb_summary(base), arb_summary(base)))
}

/// Offsets a summary acknowledges, checked one by one.
fn acked(s: &AckSummary, v: u64) -> bool {
    s.acknowledges(v..v + 1)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn commutative((a, b, _) in three()) {
        prop_assert_eq!(a.meet(&b), b.meet(&a));
    }

    #[test]
    fn associative((a, b, c) in three()) {
        prop_assert_eq!(a.meet(&b).meet(&c), a.meet(&b.meet(&c)));
    }

    #[test]
    fn idempotent((a, _, _) in three()) {
        prop_assert_eq!(a.meet(&a), a);
    }

    /// The merged set is exactly the intersection: nothing some child
    /// lacks (soundness), and everything all children hold (no needless
    /// retransmission).
    #[test]
    fn acknowledges_exactly_what_every_child_holds((a, b, c) in three()) {
        let m = a.meet(&b).meet(&c);
        for v in 0..3 * SPACE {
            let all = acked(&a, v) && acked(&b, v) && acked(&c, v);
            prop_assert_eq!(acked(&m, v), all, "offset {}", v);
        }
        prop_assert_eq!(m.cumulative, a.cumulative.min(b.cumulative).min(c.cumulative));
        prop_assert_eq!(m.window_end, a.window_end.min(b.window_end).min(c.window_end));
        prop_assert!(m.sack.iter().all(|r| r.start > m.cumulative));
    }

    /// The bounded frame (at most 32 SACK ranges) still acknowledges
    /// nothing a child lacks, and carries the meet's cumulative point and
    /// window.
    #[test]
    fn the_frame_is_sound((a, b, c) in three()) {
        let m = a.meet(&b).meet(&c);
        let f = m.to_frame(WireTimestamp(0));
        prop_assert!(f.sack.len() <= MAX_SACK_RANGES);
        prop_assert_eq!(f.cumulative, m.cumulative);
        prop_assert_eq!(f.cumulative + f.window, m.window_end);
        let back = AckSummary::from_frame(&f);
        for v in 0..3 * SPACE {
            if acked(&back, v) {
                prop_assert!(acked(&a, v) && acked(&b, v) && acked(&c, v), "offset {}", v);
            }
        }
    }

    /// The merged echo is the oldest of the children's (RFC 7323 order),
    /// so the sender's RTT sample is the largest of the subtree.
    #[test]
    fn the_echo_is_the_oldest((a, b, c) in three()) {
        let m = a.meet(&b).meet(&c);
        let echoes: Vec<WireTimestamp> = [&a, &b, &c].iter().filter_map(|s| s.timestamp_echo).collect();
        match m.timestamp_echo {
            None => prop_assert!(echoes.is_empty()),
            Some(t) => {
                prop_assert!(echoes.contains(&t));
                for e in echoes {
                    prop_assert_eq!(older_timestamp(t, e), t);
                }
            }
        }
    }
}
