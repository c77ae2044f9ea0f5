//! Interarrival jitter exactly as RFC 3550 A.8 computes it, in the
//! integer form: `J += |D| − (J + 8) >> 4` with `J` kept 16 times larger,
//! reported as `J >> 4`, in RTP timestamp units. `D` is the difference of
//! two packets' transits, each the arrival time (in timestamp units, from
//! any origin) less the packet's RTP timestamp, modulo 2³².

/// One source's jitter estimator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Jitter {
    /// The previous packet's transit; `None` before the first packet.
    transit: Option<u32>,
    /// Jitter × 16, timestamp units.
    scaled: u32,
}

impl Jitter {
    /// A packet with RTP timestamp `timestamp` arrived at `arrival`, both
    /// in the stream's timestamp units (the arrival's origin is arbitrary
    /// but fixed).
    pub fn on_packet(&mut self, arrival: u32, timestamp: u32) {
        let transit = arrival.wrapping_sub(timestamp);
        if let Some(prev) = self.transit.replace(transit) {
            let d = (transit.wrapping_sub(prev) as i32).unsigned_abs();
            self.scaled = self
                .scaled
                .wrapping_add(d)
                .wrapping_sub((self.scaled + 8) >> 4);
        }
    }

    /// The jitter a report block carries, timestamp units.
    pub fn value(&self) -> u32 {
        self.scaled >> 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_follows_rfc_3550_a8_to_the_unit() {
        let mut j = Jitter::default();
        // Evenly spaced packets: no jitter.
        for i in 0..10u32 {
            j.on_packet(1000 + i * 90, i * 90);
        }
        assert_eq!(j.value(), 0);
        // One arrives 160 units late, then the rest on time again.
        j.on_packet(1000 + 10 * 90 + 160, 10 * 90);
        // Scaled: 0 + 160 − (0 + 8) >> 4 = 160 → reported 10.
        assert_eq!(j.value(), 10);
        j.on_packet(1000 + 11 * 90, 11 * 90);
        // 160 + 160 − (160 + 8) >> 4 = 310 → 19.
        assert_eq!(j.value(), 19);
        // The floating form of A.8 (J += (|D| − J) / 16) agrees to within
        // a unit: 10 then 10 + (160 − 10) / 16 = 19.375.
    }

    #[test]
    fn transits_wrap_and_jitter_decays() {
        let mut j = Jitter::default();
        j.on_packet(5, u32::MAX - 10);
        j.on_packet(5 + 90 + 48, (u32::MAX - 10).wrapping_add(90));
        assert_eq!(j.value(), 3, "48 >> 4");
        for i in 2..200u32 {
            j.on_packet(
                5u32.wrapping_add(i * 90 + 48),
                (u32::MAX - 10).wrapping_add(i * 90),
            );
        }
        assert_eq!(j.value(), 0);
    }
}
