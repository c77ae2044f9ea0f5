//! Random Early Detection (Floyd & Jacobson, "Random Early Detection
//! Gateways for Congestion Avoidance", IEEE/ACM ToN 1993), with the gentle
//! variant (Floyd 2000) and byte mode, as in ns-2's `REDQueue`.

use super::droptail::QueueLimit;
use crate::stats::NetDrop;
use fanout_core::{Instant, Rng};

/// RED parameters. Thresholds are in packets, or in bytes when `byte_mode`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RedConfig {
    /// Lower threshold of the average queue (packets or bytes).
    pub min_th: f64,
    /// Upper threshold of the average queue (packets or bytes).
    pub max_th: f64,
    /// Drop probability reached at `max_th`.
    pub max_p: f64,
    /// EWMA weight of the average queue size.
    pub w_q: f64,
    /// Gentle mode: between `max_th` and `2·max_th` the probability rises
    /// linearly from `max_p` to 1 instead of jumping to 1.
    pub gentle: bool,
    /// Byte mode: queue measured in bytes and the drop probability scaled by
    /// packet size / `mean_packet_bytes`.
    pub byte_mode: bool,
    /// Typical packet size (bytes), for idle decay and byte mode.
    pub mean_packet_bytes: u64,
    /// Physical queue capacity.
    pub limit: QueueLimit,
}

impl Default for RedConfig {
    /// ns-2-like defaults: min_th 5, max_th 15 packets, max_p 0.1,
    /// w_q 0.002, gentle, 1000-byte mean packet, 50-packet limit.
    fn default() -> Self {
        RedConfig {
            min_th: 5.0,
            max_th: 15.0,
            max_p: 0.1,
            w_q: 0.002,
            gentle: true,
            byte_mode: false,
            mean_packet_bytes: 1000,
            limit: QueueLimit::Packets(50),
        }
    }
}

/// Where an average queue size falls on RED's drop curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RedRegion {
    /// Below `min_th`: never drop.
    Below,
    /// Early region with base drop probability `p_b`.
    Early(f64),
    /// Above the forced-drop threshold: always drop.
    Forced,
}

impl RedConfig {
    /// Checks the parameters; the error names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.min_th >= 0.0 && self.max_th > self.min_th) {
            return Err(format!(
                "need 0 <= min_th < max_th (min_th = {}, max_th = {})",
                self.min_th, self.max_th
            ));
        }
        if !(0.0..=1.0).contains(&self.max_p) {
            return Err(format!("max_p = {} is not in [0, 1]", self.max_p));
        }
        if !(self.w_q > 0.0 && self.w_q <= 1.0) {
            return Err(format!("w_q = {} is not in (0, 1]", self.w_q));
        }
        if self.mean_packet_bytes == 0 {
            return Err("mean_packet must be positive".into());
        }
        Ok(())
    }

    /// The drop curve: base probability `p_b` as a function of the average
    /// queue `avg` (before the count correction and byte-mode scaling).
    pub fn region(&self, avg: f64) -> RedRegion {
        if avg < self.min_th {
            RedRegion::Below
        } else if avg < self.max_th {
            // F&J 1993 §4: p_b = max_p (avg - min_th) / (max_th - min_th)
            RedRegion::Early(self.max_p * (avg - self.min_th) / (self.max_th - self.min_th))
        } else if self.gentle && avg < 2.0 * self.max_th {
            // Gentle RED (Floyd 2000): p_b = max_p + (1 - max_p)(avg - max_th) / max_th
            RedRegion::Early(self.max_p + (1.0 - self.max_p) * (avg - self.max_th) / self.max_th)
        } else {
            RedRegion::Forced
        }
    }
}

/// RED state: the average queue, the count since the last drop and the
/// start of the current idle period.
#[derive(Debug, Clone)]
pub struct Red {
    config: RedConfig,
    avg: f64,
    /// Packets since the last early drop; -1 after leaving the early region.
    count: i64,
    idle_since: Option<Instant>,
}

impl Red {
    /// Fresh state (avg 0, not idle).
    pub fn new(config: RedConfig) -> Self {
        Red {
            config,
            avg: 0.0,
            count: -1,
            idle_since: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RedConfig {
        &self.config
    }

    /// Current average queue size (packets, or bytes in byte mode).
    pub fn avg(&self) -> f64 {
        self.avg
    }

    /// The instantaneous queue in RED's unit (packets or bytes).
    pub fn measure(&self, packets: usize, bytes: u64) -> f64 {
        if self.config.byte_mode {
            bytes as f64
        } else {
            packets as f64
        }
    }

    /// The link went idle at `now`.
    pub fn on_idle(&mut self, now: Instant) {
        self.idle_since = Some(now);
    }

    /// Updates the average for an arrival seeing instantaneous queue `q` and
    /// decides whether to drop it. `link_rate_bps` converts idle time into
    /// the number of packets the link could have sent.
    pub fn on_arrival(
        &mut self,
        now: Instant,
        q: f64,
        packet_bytes: u64,
        link_rate_bps: u64,
        rng: &mut Rng,
    ) -> Option<NetDrop> {
        let c = &self.config;
        if let Some(idle) = self.idle_since.take() {
            // F&J 1993 §4: after an idle period, m = idle_time / s (s = typical
            // transmission time of a packet); avg ← (1 - w_q)^m · avg.
            let s_ns = c.mean_packet_bytes as f64 * 8.0 * 1e9 / link_rate_bps as f64;
            let m = (now - idle).as_nanos() as f64 / s_ns;
            self.avg *= (1.0 - c.w_q).powf(m);
        }
        // F&J 1993 §4: avg ← (1 - w_q) avg + w_q q
        self.avg = (1.0 - c.w_q) * self.avg + c.w_q * q;
        match c.region(self.avg) {
            RedRegion::Below => {
                self.count = -1;
                None
            }
            RedRegion::Forced => {
                self.count = 0;
                Some(NetDrop::RedForced)
            }
            RedRegion::Early(mut p_b) => {
                self.count += 1;
                if c.byte_mode {
                    // F&J 1993 §4 (byte mode): p_b ← p_b · size / mean size
                    p_b = (p_b * packet_bytes as f64 / c.mean_packet_bytes as f64).min(1.0);
                }
                // F&J 1993 §4: count-based uniform drop, p_a = p_b / (1 - count·p_b)
                let denom = 1.0 - self.count as f64 * p_b;
                let p_a = if denom <= 0.0 { 1.0 } else { p_b / denom };
                if rng.bernoulli(p_a) {
                    self.count = 0;
                    Some(NetDrop::RedEarly)
                } else {
                    None
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_curve_table() {
        let mut c = RedConfig {
            min_th: 5.0,
            max_th: 15.0,
            max_p: 0.1,
            gentle: false,
            ..RedConfig::default()
        };
        let table: [(f64, RedRegion); 5] = [
            (0.0, RedRegion::Below),
            (4.99, RedRegion::Below),
            (5.0, RedRegion::Early(0.0)),
            (10.0, RedRegion::Early(0.05)),
            (15.0, RedRegion::Forced),
        ];
        for (avg, want) in table {
            assert_eq!(c.region(avg), want, "avg {avg}");
        }
        c.gentle = true;
        let gentle: [(f64, RedRegion); 4] = [
            (10.0, RedRegion::Early(0.05)),
            (15.0, RedRegion::Early(0.1)),
            (22.5, RedRegion::Early(0.55)),
            (30.0, RedRegion::Forced),
        ];
        for (avg, want) in gentle {
            match (c.region(avg), want) {
                (RedRegion::Early(a), RedRegion::Early(b)) => {
                    assert!((a - b).abs() < 1e-12, "avg {avg}: {a} vs {b}")
                }
                (got, want) => assert_eq!(got, want, "avg {avg}"),
            }
        }
    }

    #[test]
    fn average_tracks_and_idle_decays() {
        let cfg = RedConfig {
            w_q: 0.5,
            min_th: 100.0,
            max_th: 200.0,
            ..RedConfig::default()
        };
        let mut red = Red::new(cfg);
        let mut rng = Rng::new(1);
        let t = Instant::from_nanos(0);
        for _ in 0..20 {
            assert_eq!(red.on_arrival(t, 10.0, 1000, 8_000_000, &mut rng), None);
        }
        let before = red.avg();
        assert!((before - 10.0).abs() < 1e-3);
        // 1000-byte packets at 8 Mbit/s: s = 1 ms. Idle for 3 ms → m = 3,
        // avg · 0.5^3, then the arrival's own update with q = 0 (· 0.5).
        red.on_idle(Instant::from_nanos(1_000_000));
        red.on_arrival(
            Instant::from_nanos(4_000_000),
            0.0,
            1000,
            8_000_000,
            &mut rng,
        );
        assert!((red.avg() - before / 16.0).abs() < 1e-9, "{}", red.avg());
    }

    #[test]
    fn count_correction_spreads_drops() {
        // Fixed avg in the early region with p_b = 0.05: drops are at most
        // 1/p_b = 20 packets apart (p_a reaches 1 when count·p_b ≥ 1).
        let cfg = RedConfig {
            w_q: 1.0,
            gentle: false,
            ..RedConfig::default()
        };
        let mut red = Red::new(cfg);
        let mut rng = Rng::new(9);
        let mut since = 0;
        let mut drops = 0;
        for _ in 0..10_000 {
            since += 1;
            if red
                .on_arrival(Instant::ZERO, 10.0, 1000, 1_000_000, &mut rng)
                .is_some()
            {
                assert!(since <= 21, "gap {since}");
                since = 0;
                drops += 1;
            }
        }
        // Uniform gaps on 1..=20 → mean ≈ 10.5 → ≈ 950 drops.
        assert!((850..1050).contains(&drops), "seed 9: {drops}");
    }
}
