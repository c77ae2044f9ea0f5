//! ROMA's chain model (ROMA §V). A relay copies what arrives into its
//! downstream connections only as fast as they take it, so connections in
//! a chain are loosely coupled: a hop is limited either by its own path or
//! by the rate arriving from above, and nothing downstream slows anything
//! upstream. A host below hops 1..=j gets the least of their rates
//! (equation 2), where one TCP connection over the whole path would get
//! the rate of the summed round trip and the compounded loss (equation 3,
//! the model earlier work used, which underestimates a chain).

use fanout_core::tfrc::throughput;

/// One overlay hop: the path of one TCP connection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hop {
    /// Round trip, seconds (> 0).
    pub rtt: f64,
    /// Loss event rate, 0–1.
    pub loss: f64,
    /// The most the path carries (its bottleneck, or a measured rate),
    /// bytes per second; infinite when unknown.
    pub capacity: f64,
}

impl Hop {
    /// A hop of round trip `rtt` s and loss `loss`, capacity unknown.
    pub fn new(rtt: f64, loss: f64) -> Self {
        Hop {
            rtt,
            loss,
            capacity: f64::INFINITY,
        }
    }

    /// The hop's TCP rate for segments of `segment` bytes, bytes per
    /// second: ROMA's equation 1 (Padhye et al.; the same as RFC 5348
    /// §3.1's with t_RTO = 4·RTT), no more than the capacity. Without loss
    /// the equation bounds nothing: the capacity alone.
    pub fn rate(&self, segment: f64) -> f64 {
        let equation = if self.loss > 0.0 && self.rtt > 0.0 {
            throughput(segment, self.rtt, self.loss.min(1.0))
        } else {
            f64::INFINITY
        };
        equation.min(self.capacity)
    }
}

/// ROMA's equation 2: a host below `hops` (from the source down) gets the
/// least of their rates, bytes per second (infinite for no hop).
pub fn min_hop_rate(hops: &[Hop], segment: f64) -> f64 {
    hops.iter()
        .map(|h| h.rate(segment))
        .fold(f64::INFINITY, f64::min)
}

/// ROMA's equation 3, the aggregate-path model: one TCP connection over
/// the summed round trip at loss `1 − Π(1 − pᵢ)` (losses independent), no
/// more than the least capacity; bytes per second.
pub fn aggregate_path_rate(hops: &[Hop], segment: f64) -> f64 {
    let rtt: f64 = hops.iter().map(|h| h.rtt).sum();
    let delivered: f64 = hops.iter().map(|h| 1.0 - h.loss.clamp(0.0, 1.0)).product();
    let capacity = hops
        .iter()
        .map(|h| h.capacity)
        .fold(f64::INFINITY, f64::min);
    Hop {
        rtt,
        loss: 1.0 - delivered,
        capacity,
    }
    .rate(segment)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ROMA §V-B, Figure 6, with its 1 KB packets: direct A→C (20 ms,
    /// 0.3%) about 9.0 Mbit/s; via B (10 ms, 0.1%; 10 ms, 0.2%) about
    /// 22.2 Mbit/s, the B→C hop's own rate; the aggregate-path model puts
    /// the detour no better than the direct route. (The paper rounds
    /// through the simple form s·√1.5 / (rtt·√p); the full equation gives
    /// 8.9 and 22.0.)
    #[test]
    fn the_papers_example_chain_beats_the_direct_route_as_the_model_says() {
        let mbit = |bytes_per_s: f64| bytes_per_s * 8.0 / 1e6;
        let s = 1024.0;
        let direct = Hop::new(0.020, 0.003);
        let chain = [Hop::new(0.010, 0.001), Hop::new(0.010, 0.002)];
        let d = mbit(min_hop_rate(&[direct], s));
        let c = mbit(min_hop_rate(&chain, s));
        assert!((d - 9.0).abs() / 9.0 < 0.1, "{d}");
        assert!((c - 22.2).abs() / 22.2 < 0.1, "{c}");
        assert_eq!(c, mbit(chain[1].rate(s)));
        let aggregate = mbit(aggregate_path_rate(&chain, s));
        assert!((aggregate - d).abs() / d < 0.02, "{aggregate} {d}");
        // The simple form the paper rounds with.
        let simple = |h: Hop| mbit(s * 1.5f64.sqrt() / (h.rtt * h.loss.sqrt()));
        assert!((simple(direct) - 9.16).abs() < 0.01);
        assert!((simple(chain[1]) - 22.43).abs() < 0.01);
    }

    #[test]
    fn capacity_bounds_a_hop_and_a_lossless_hop_is_its_capacity() {
        let mut h = Hop::new(0.010, 0.0);
        assert_eq!(h.rate(1448.0), f64::INFINITY);
        h.capacity = 12.5e6;
        assert_eq!(h.rate(1448.0), 12.5e6);
        let lossy = Hop {
            rtt: 0.1,
            loss: 0.05,
            capacity: 12.5e6,
        };
        assert!(lossy.rate(1448.0) < 1e6);
        assert_eq!(min_hop_rate(&[h, lossy], 1448.0), lossy.rate(1448.0));
        assert_eq!(min_hop_rate(&[], 1448.0), f64::INFINITY);
        assert_eq!(aggregate_path_rate(&[h, h], 1448.0), 12.5e6);
    }
}
