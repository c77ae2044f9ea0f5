//! How often each member acknowledges: thinned by count (TCP-SMO §II.D
//! adaptive ACKs) and by time (a session-wide feedback budget), so the
//! sender's feedback load stays bounded as the session grows (TCP-SMO §V.A
//! saw ACK loss stall connections at 1500 receivers).

use crate::wire::{AckFrequencyFrame, MAX_ACK_INTERVAL_US};
use fanout_core::rtt::RttEstimator;
use std::time::Duration;

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

/// The ACK schedule asked of one member: with adaptive ACKs (`thinning`:
/// the steady segments per ACK and [`ack_interval_us`]), [`segments_per_ack`]
/// with its window (in segments), spaced at least that interval apart;
/// without, `every` = 0: the member keeps its own schedule. Either way its input is
/// held at most [`max_ack_delay_us`] for its `rtt` (`previous`: the
/// schedule it was last asked for).
pub fn schedule(
    thinning: Option<(u32, u32)>,
    in_slow_start_or_recovery: bool,
    cwnd_segments: u64,
    rtt: &RttEstimator,
    previous: &AckFrequencyFrame,
) -> AckFrequencyFrame {
    let segments = if in_slow_start_or_recovery {
        0
    } else {
        cwnd_segments
    };
    let (every, min_interval_us) = match thinning {
        Some((steady, interval_us)) => (
            segments_per_ack(steady, in_slow_start_or_recovery, segments),
            interval_us,
        ),
        None => (0, 0),
    };
    AckFrequencyFrame {
        every,
        min_interval_us,
        max_ack_delay_us: max_ack_delay_us(rtt.srtt(), rtt.min_rtt(), previous.max_ack_delay_us),
    }
}

/// The share of a member's round trip by which its runtime, and the
/// sender's, may hold input: each end that sleeps through arrivals to read
/// them in one batch (timer slack, input coalescing) lengthens the ACK
/// loop by up to this much, so a window that does not fill the path (a
/// loss-limited one: rate = window / loop) loses at most ~2/8 of the rate
/// the path allows; on a 4 ms path that is 0.5 ms.
pub const INPUT_DELAY_RTT_DIVISOR: u32 = 8;

/// Below this the asked delay is 0: wake for every arrival (a loopback
/// or same-rack path, where a wake-up costs less than the loop it stalls).
const MIN_INPUT_DELAY_US: u32 = 16;

/// Longest input delay asked for, µs (a power of two): above the runtime's
/// default batching (1.5 ms of timer slack and input coalescing), so it
/// bounds nothing there, and queues that swing between 2 and 20 ms — a
/// sawtooth at a deep bottleneck buffer — send no ACK_FREQUENCY.
pub const MAX_INPUT_DELAY_US: u32 = 1 << 11;

/// How long a member with smoothed RTT `srtt` and minimum RTT `min_rtt`
/// may hold input and ACKs, µs: the larger of `srtt` /
/// [`INPUT_DELAY_RTT_DIVISOR`] and the standing queue `srtt − min_rtt`
/// (while a queue holds that much, a later ACK only drains some of it and
/// the bottleneck stays busy: a window that fills the path loses nothing),
/// rounded down to a power of two, 0 below [`MIN_INPUT_DELAY_US`]. It keeps
/// `current` while the exact value stays within [current, 4 × current), so
/// RTT noise does not re-send ACK_FREQUENCY — but moves to
/// [`MAX_INPUT_DELAY_US`] once the exact value reaches it (4 × half the cap
/// lies beyond the cap: a member that dipped to half of it would otherwise
/// stay there, waking both ends twice as often, however long its queue
/// stands); [`MAX_ACK_INTERVAL_US`] (a schedule that asked nothing) always
/// changes.
pub fn max_ack_delay_us(srtt: Duration, min_rtt: Duration, current: u32) -> u32 {
    let share = srtt / INPUT_DELAY_RTT_DIVISOR;
    let exact = share.max(srtt.saturating_sub(min_rtt)).as_micros();
    let exact = exact.min(u128::from(MAX_INPUT_DELAY_US)) as u32;
    let keep = if current == 0 {
        exact < 2 * MIN_INPUT_DELAY_US
    } else {
        let reaches_cap = exact == MAX_INPUT_DELAY_US && current < MAX_INPUT_DELAY_US;
        current <= MAX_INPUT_DELAY_US && current <= exact && exact / 4 < current && !reaches_cap
    };
    if keep {
        current
    } else if exact < MIN_INPUT_DELAY_US {
        0
    } else {
        1 << exact.ilog2()
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
    fn input_delay_is_an_eighth_of_the_rtt_or_the_queue_and_ignores_noise() {
        let us = Duration::from_micros;
        let fresh = MAX_ACK_INTERVAL_US;
        // No standing queue (srtt = min_rtt): an eighth of the RTT.
        let idle = |srtt, current| max_ack_delay_us(us(srtt), us(srtt), current);
        assert_eq!(idle(40, fresh), 0, "loopback: no holding");
        assert_eq!(idle(4_000, fresh), 256, "4 ms path");
        assert_eq!(idle(16_000, fresh), 1024);
        assert_eq!(idle(60_000_000, fresh), MAX_INPUT_DELAY_US);
        // A standing queue longer than that: the queue.
        assert_eq!(max_ack_delay_us(us(6_000), us(4_000), fresh), 1024);
        assert_eq!(max_ack_delay_us(us(30_000), us(4_000), 2048), 2048);
        assert_eq!(max_ack_delay_us(us(6_100), us(4_000), 2048), 2048);
        assert_eq!(max_ack_delay_us(us(4_300), us(4_000), fresh), 512);
        // Within [current, 4 × current) of the exact value: unchanged.
        assert_eq!(idle(2_048, 256), 256);
        assert_eq!(idle(8_000, 256), 256);
        assert_eq!(idle(8_200, 256), 1024, "grew 4×");
        assert_eq!(idle(2_000, 256), 128, "shrank below");
        // The cap is reached from half of it once the queue stands that
        // long (4 × 1024 lies beyond it), and left as soon as it does not.
        assert_eq!(max_ack_delay_us(us(12_000), us(9_000), 1024), 2048);
        assert_eq!(max_ack_delay_us(us(12_000), us(11_000), 1024), 1024);
        assert_eq!(max_ack_delay_us(us(12_000), us(11_000), 2048), 1024);
        assert_eq!(idle(200, 0), 0, "25 µs: still 0");
        assert_eq!(idle(300, 0), 32);
        assert_eq!(idle(100, 32), 0);
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
