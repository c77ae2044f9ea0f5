//! A source's RTP sequence numbers (RFC 3550 A.1): validated before the
//! source counts (two in sequence), extended to 32 bits across wraps,
//! resynchronised when a sender restarts; and what a reception report
//! states of it (A.3): packets expected, lost in all and in the last
//! interval, and the fraction lost.

/// Sequence numbers of one cycle.
const SEQ_MOD: u32 = 1 << 16;
/// Largest forward jump still taken as the same stream, packets.
const MAX_DROPOUT: u16 = 3000;
/// Largest backward step taken as reordering, packets.
const MAX_MISORDER: u32 = 100;
/// Packets in sequence before a new source is valid.
const MIN_SEQUENTIAL: u32 = 2;

/// RFC 3550 A.1's per-source state, and A.3's interval counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSequence {
    max_seq: u16,
    /// Shifted count of sequence number cycles (a multiple of 2¹⁶).
    cycles: u32,
    base_seq: u32,
    /// The last "bad" sequence number + 1 (2¹⁶ + 1: none).
    bad_seq: u32,
    /// Packets in sequence still needed before the source is valid.
    probation: u32,
    received: u32,
    expected_prior: u32,
    received_prior: u32,
}

/// What one reception report states of a source (RFC 3550 §6.4.1, A.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalLoss {
    /// Packets expected since the previous report.
    pub expected: u32,
    /// Packets lost since the previous report (negative with duplicates:
    /// then 0 here and in the fraction).
    pub lost: u32,
    /// `lost / expected` in 1/256ths, as the report carries it.
    pub fraction: u8,
}

impl IntervalLoss {
    /// The loss rate of the interval, 0–1 (0 when nothing was expected).
    pub fn rate(&self) -> f64 {
        if self.expected == 0 {
            0.0
        } else {
            f64::from(self.lost) / f64::from(self.expected)
        }
    }
}

impl SourceSequence {
    /// A source first heard with sequence number `seq`, on probation.
    pub fn new(seq: u16) -> Self {
        let mut s = SourceSequence {
            max_seq: 0,
            cycles: 0,
            base_seq: 0,
            bad_seq: 0,
            probation: MIN_SEQUENTIAL,
            received: 0,
            expected_prior: 0,
            received_prior: 0,
        };
        s.init(seq);
        s.max_seq = seq.wrapping_sub(1);
        s
    }

    fn init(&mut self, seq: u16) {
        self.base_seq = u32::from(seq);
        self.max_seq = seq;
        self.bad_seq = SEQ_MOD + 1;
        self.cycles = 0;
        self.received = 0;
        self.received_prior = 0;
        self.expected_prior = 0;
    }

    /// Takes packet `seq`; true if it counts (the source is valid and the
    /// number is in order, within a permissible gap, or a reordered or
    /// duplicate one). A very large jump counts only when the next packet
    /// follows it: the sender restarted, and the state starts over.
    pub fn update(&mut self, seq: u16) -> bool {
        let udelta = seq.wrapping_sub(self.max_seq);
        if self.probation > 0 {
            if seq == self.max_seq.wrapping_add(1) {
                self.probation -= 1;
                self.max_seq = seq;
                if self.probation == 0 {
                    self.init(seq);
                    self.received += 1;
                    return true;
                }
            } else {
                self.probation = MIN_SEQUENTIAL - 1;
                self.max_seq = seq;
            }
            return false;
        } else if udelta < MAX_DROPOUT {
            if seq < self.max_seq {
                // Wrapped: another cycle.
                self.cycles = self.cycles.wrapping_add(SEQ_MOD);
            }
            self.max_seq = seq;
        } else if u32::from(udelta) <= SEQ_MOD - MAX_MISORDER {
            if u32::from(seq) == self.bad_seq {
                // Two in sequence after the jump: a restart.
                self.init(seq);
            } else {
                self.bad_seq = (u32::from(seq) + 1) & (SEQ_MOD - 1);
                return false;
            }
        }
        // else: a duplicate or a reordered packet.
        self.received = self.received.wrapping_add(1);
        true
    }

    /// Whether the source passed probation.
    pub fn is_valid(&self) -> bool {
        self.probation == 0
    }

    /// The highest sequence number received, extended by its cycles.
    pub fn extended_max(&self) -> u32 {
        self.cycles.wrapping_add(u32::from(self.max_seq))
    }

    /// Packets expected since the first valid one.
    pub fn expected(&self) -> u32 {
        self.extended_max()
            .wrapping_sub(self.base_seq)
            .wrapping_add(1)
    }

    /// Packets received and counted.
    pub fn received(&self) -> u32 {
        self.received
    }

    /// Cumulative number lost, clamped to the report's signed 24 bits.
    pub fn cumulative_lost(&self) -> i32 {
        let lost = i64::from(self.expected()) - i64::from(self.received);
        lost.clamp(-0x80_0000, 0x7f_ffff) as i32
    }

    /// Closes a report interval: what was expected and lost since the
    /// previous one (A.3).
    pub fn close_interval(&mut self) -> IntervalLoss {
        let expected = self.expected();
        let expected_interval = expected.wrapping_sub(self.expected_prior);
        self.expected_prior = expected;
        let received_interval = self.received.wrapping_sub(self.received_prior);
        self.received_prior = self.received;
        let lost = i64::from(expected_interval) - i64::from(received_interval);
        if expected_interval == 0 || lost <= 0 {
            return IntervalLoss {
                expected: expected_interval,
                lost: 0,
                fraction: 0,
            };
        }
        let lost = lost as u32;
        IntervalLoss {
            expected: expected_interval,
            lost,
            fraction: ((u64::from(lost) << 8) / u64::from(expected_interval)).min(255) as u8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_counts_after_two_in_sequence_and_losses_are_reported() {
        let mut s = SourceSequence::new(100);
        assert!(!s.update(100), "on probation");
        assert!(s.update(101));
        assert!(s.is_valid());
        for seq in 102..200u16 {
            if seq % 10 != 0 {
                assert!(s.update(seq));
            }
        }
        // 101..=199 expected (99), 9 of them lost (110, 120, ... 190).
        assert_eq!(s.expected(), 99);
        assert_eq!(s.cumulative_lost(), 9);
        let i = s.close_interval();
        assert_eq!((i.expected, i.lost), (99, 9));
        assert_eq!(i.fraction, (9 * 256 / 99) as u8);
        // Nothing more: an empty interval.
        assert_eq!(s.close_interval().expected, 0);
    }

    #[test]
    fn sequence_numbers_wrap_into_cycles() {
        let mut s = SourceSequence::new(65_530);
        for seq in (65_530..=65_535).chain(0..10) {
            s.update(seq);
        }
        assert_eq!(s.extended_max(), (1 << 16) + 9);
        assert_eq!(s.expected(), 15, "65531..=65535 and 0..=9");
        assert_eq!(s.cumulative_lost(), 0);
    }

    #[test]
    fn a_restarted_sender_is_followed_after_two_packets_and_duplicates_do_not_count_as_loss() {
        let mut s = SourceSequence::new(10);
        for seq in 10..20 {
            s.update(seq);
        }
        // A jump of 30 000: ignored once, taken when the next follows.
        assert!(!s.update(30_000));
        assert!(s.update(30_001));
        assert_eq!(s.extended_max(), 30_001);
        assert_eq!(s.expected(), 1);
        // A duplicate counts as received: more received than expected.
        assert!(s.update(30_001));
        assert_eq!(s.cumulative_lost(), -1);
        let i = s.close_interval();
        assert_eq!((i.lost, i.fraction), (0, 0));
    }
}
