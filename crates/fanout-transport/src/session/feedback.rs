//! How often each member acknowledges: thinned by count (TCP-SMO §II.D
//! adaptive ACKs) and by time (a session-wide feedback budget), so the
//! sender's feedback load stays bounded as the session grows (TCP-SMO §V.A
//! saw ACK loss stall connections at 1500 receivers).

use crate::wire::{AckFrequencyFrame, MAX_ACK_INTERVAL_US};

/// Share of the sender's link capacity its members' ACKs may take, in
/// the direction toward the sender (RFC 3550 §6.2 gives RTCP 5% of the
/// session bandwidth; ACKs carry the reliability and the congestion
/// signals, so they get more).
pub const FEEDBACK_LINK_SHARE: f64 = 0.125;

/// Size of one ACK on the wire used for the budget: IPv4 + UDP (28 B),
/// header (16 B) and an ACK frame with a SACK block or two (~20 B).
pub const ACK_WIRE_BYTES: u64 = 64;

/// Default feedback budget when the sender's link capacity is unknown:
/// the budget of a 100 Mbit/s link (the setting of TCP-SMO §V), rounded.
pub const DEFAULT_FEEDBACK_BUDGET_PPS: u32 = 25_000;

/// The feedback budget (ACKs/s) of a sender whose link carries
/// `link_bps` bits per second: [`FEEDBACK_LINK_SHARE`] of it in ACKs of
/// [`ACK_WIRE_BYTES`]. 100 Mbit/s → 24 414/s, 1 Gbit/s → 244 140/s.
pub fn budget_for_link(link_bps: u64) -> u32 {
    let pps = link_bps as f64 * FEEDBACK_LINK_SHARE / (ACK_WIRE_BYTES * 8) as f64;
    pps.clamp(1.0, f64::from(u32::MAX)) as u32
}

/// Below this the time thinning is left off: the count rule alone already
/// keeps a member far below its share of the budget.
const MIN_INTERVAL_US: u64 = 250;

/// Segments per ACK for one member (TCP-SMO §II.D): 2 in slow start or
/// recovery, `steady` otherwise, but never fewer than ~4 ACKs per congestion
/// window or the window's tail waits for the delayed-ACK timer and the ACK
/// clock stalls.
pub fn segments_per_ack(steady: u32, in_slow_start_or_recovery: bool, cwnd_segments: u64) -> u32 {
    if in_slow_start_or_recovery {
        return 2;
    }
    let per_window = (cwnd_segments / 4).clamp(2, 64) as u32;
    steady.clamp(1, 64).min(per_window)
}

/// The ACK schedule asked of one member: [`segments_per_ack`] with its
/// phase and window (in segments), spaced at least `interval_us` apart
/// ([`ack_interval_us`]).
pub fn schedule(
    steady: u32,
    in_slow_start_or_recovery: bool,
    cwnd_segments: u64,
    interval_us: u32,
) -> AckFrequencyFrame {
    let segments = if in_slow_start_or_recovery {
        0
    } else {
        cwnd_segments
    };
    AckFrequencyFrame {
        every: segments_per_ack(steady, in_slow_start_or_recovery, segments),
        min_interval_us: interval_us,
    }
}

/// Minimum spacing of one member's data-triggered ACKs, µs, so `members`
/// members together stay within `budget_pps` (0 = no time thinning).
/// Rounded up to a multiple of 1/8 of its highest power of two (at most
/// 12.5% above the exact value), so joins and leaves do not re-send
/// ACK_FREQUENCY to every member for every small change of N.
pub fn ack_interval_us(members: usize, budget_pps: u32) -> u32 {
    if budget_pps == 0 || members == 0 {
        return 0;
    }
    let exact = (members as u64 * 1_000_000).div_ceil(u64::from(budget_pps));
    if exact < MIN_INTERVAL_US {
        return 0;
    }
    let step = (1u64 << exact.ilog2()) / 8;
    let rounded = exact.div_ceil(step) * step;
    rounded.min(u64::from(MAX_ACK_INTERVAL_US)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_rule_follows_the_seed() {
        assert_eq!(segments_per_ack(8, true, 1000), 2, "slow start / loss");
        assert_eq!(segments_per_ack(8, false, 1000), 8, "steady");
        assert_eq!(segments_per_ack(8, false, 12), 3, "≥ 4 ACKs per window");
        assert_eq!(segments_per_ack(8, false, 2), 2);
    }

    #[test]
    fn budget_scales_with_the_link() {
        assert_eq!(budget_for_link(100_000_000), 24_414);
        assert_eq!(budget_for_link(1_000_000_000), 244_140);
        assert_eq!(budget_for_link(0), 1);
    }

    #[test]
    fn interval_keeps_the_total_within_budget() {
        assert_eq!(ack_interval_us(1, 25_000), 0, "one member: count rule only");
        assert_eq!(ack_interval_us(10, 0), 0, "budget off");
        for n in [10usize, 100, 999, 1000, 2300, 10_000] {
            let iv = ack_interval_us(n, 25_000);
            let exact = n as f64 * 1e6 / 25_000.0;
            assert!(f64::from(iv) >= exact, "n={n}: {iv} µs under {exact}");
            assert!(f64::from(iv) <= exact * 1.125 + 1.0, "n={n}: {iv} µs");
        }
        assert_eq!(ack_interval_us(1000, 25_000), 40_960);
        assert_eq!(
            ack_interval_us(999, 25_000),
            40_960,
            "small changes of N: same"
        );
        assert_eq!(ack_interval_us(1_000_000, 1), MAX_ACK_INTERVAL_US);
    }
}
