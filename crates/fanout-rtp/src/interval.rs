//! When RTCP reports go out (RFC 3550 §6.2, §6.3, A.7). All participants
//! together send RTCP at 5% of the session's bandwidth; when senders are
//! at most a quarter of the members they share a quarter of it and the
//! receivers the rest. Each participant's interval is the average compound
//! size times the participants sharing its part, over that part — at
//! least a minimum: 5 s, or with the reduced minimum 360 s divided by the
//! session bandwidth in kbit/s (§6.2), halved before the first report —
//! then drawn uniformly from 0.5–1.5 times that and divided by e − 3/2 to
//! make up for timer reconsideration (§6.3.1).

use fanout_core::Rng;
use std::time::Duration;

/// RTCP's share of the session bandwidth (§6.2).
pub const RTCP_FRACTION: f64 = 0.05;
/// The senders' share of RTCP when they are few (§6.2).
pub const SENDER_FRACTION: f64 = 0.25;
/// The fixed minimum interval (§6.2).
pub const MIN_INTERVAL: Duration = Duration::from_secs(5);
/// Reconsideration's compensation, e − 3/2 (§6.3.1, A.7).
const COMPENSATION: f64 = std::f64::consts::E - 1.5;
/// Bytes of IPv4 and UDP headers counted in a compound's size (§6.2).
pub const UDP_IP_OVERHEAD: usize = 28;

/// A participant's RTCP timing: the session bandwidth, the minimum it
/// uses and the average compound size it has seen.
#[derive(Debug, Clone, PartialEq)]
pub struct RtcpTiming {
    /// Session bandwidth, bytes per second (all RTP traffic expected).
    session_bandwidth: f64,
    /// Use the reduced minimum interval (§6.2).
    reduced_minimum: bool,
    /// Average compound RTCP packet size, bytes with UDP and IP headers
    /// (§6.3.3: a 1/16 moving average of those sent and received).
    avg_size: f64,
}

/// Who shares the RTCP bandwidth when an interval is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Participants {
    /// Members of the session (at least 1: this one).
    pub members: usize,
    /// Of them, those that sent RTP lately.
    pub senders: usize,
    /// This participant is one of the senders.
    pub we_sent: bool,
    /// No report was sent yet (the minimum is halved).
    pub initial: bool,
}

impl RtcpTiming {
    /// Timing for a session of `session_bandwidth` bytes per second, whose
    /// first compound packets are about `first_size` bytes (with headers).
    pub fn new(session_bandwidth: f64, reduced_minimum: bool, first_size: usize) -> Self {
        RtcpTiming {
            session_bandwidth: session_bandwidth.max(1.0),
            reduced_minimum,
            avg_size: first_size as f64,
        }
    }

    /// The session bandwidth changed (a sender's rate), bytes per second.
    pub fn set_session_bandwidth(&mut self, bytes_per_second: f64) {
        self.session_bandwidth = bytes_per_second.max(1.0);
    }

    /// RTCP's bandwidth, bytes per second.
    pub fn rtcp_bandwidth(&self) -> f64 {
        self.session_bandwidth * RTCP_FRACTION
    }

    /// A compound packet of `size` bytes (its UDP payload) was sent or
    /// received.
    pub fn on_compound(&mut self, size: usize) {
        let size = (size + UDP_IP_OVERHEAD) as f64;
        self.avg_size += (size - self.avg_size) / 16.0;
    }

    /// The average compound size, bytes with headers.
    pub fn average_size(&self) -> f64 {
        self.avg_size
    }

    /// The minimum interval in force (before the halving of the first).
    pub fn minimum(&self) -> Duration {
        if self.reduced_minimum {
            let kbps = self.session_bandwidth * 8.0 / 1000.0;
            Duration::from_secs_f64(360.0 / kbps).min(MIN_INTERVAL)
        } else {
            MIN_INTERVAL
        }
    }

    /// The deterministic interval `Td` (A.7 before randomisation).
    pub fn deterministic(&self, p: Participants) -> Duration {
        let mut min = self.minimum().as_secs_f64();
        if p.initial {
            min /= 2.0;
        }
        let mut bandwidth = self.rtcp_bandwidth();
        let mut n = p.members.max(1) as f64;
        if (p.senders as f64) <= p.members as f64 * SENDER_FRACTION {
            if p.we_sent {
                bandwidth *= SENDER_FRACTION;
                n = p.senders.max(1) as f64;
            } else {
                bandwidth *= 1.0 - SENDER_FRACTION;
                n = (p.members.saturating_sub(p.senders)).max(1) as f64;
            }
        }
        Duration::from_secs_f64((self.avg_size * n / bandwidth).max(min))
    }

    /// The interval until the next report: `Td` times a uniform draw from
    /// [0.5, 1.5), over e − 3/2 (A.7).
    pub fn interval(&self, p: Participants, rng: &mut Rng) -> Duration {
        let td = self.deterministic(p).as_secs_f64();
        Duration::from_secs_f64(td * (rng.next_f64() + 0.5) / COMPENSATION)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(d: Duration) -> f64 {
        d.as_secs_f64()
    }

    #[test]
    fn the_interval_keeps_rtcp_at_five_percent_shared_by_its_participants() {
        // 1 Mbit/s of media: RTCP gets 6250 B/s, receivers 75% of it.
        let t = RtcpTiming::new(125_000.0, false, 100);
        assert!((t.rtcp_bandwidth() - 6250.0).abs() < 1e-9);
        let receivers = |members| Participants {
            members,
            senders: 1,
            we_sent: false,
            initial: false,
        };
        // Few members: the 5 s minimum.
        assert_eq!(t.deterministic(receivers(10)), MIN_INTERVAL);
        // 1000 members: 999 × 100 B over 4687.5 B/s = 21.3 s.
        let td = secs(t.deterministic(receivers(1000)));
        assert!((td - 999.0 * 100.0 / 4687.5).abs() < 1e-9, "{td}");
        // The one sender shares a quarter: 100 B over 1562.5 B/s, at least 5 s.
        let sender = Participants {
            we_sent: true,
            ..receivers(1000)
        };
        assert_eq!(t.deterministic(sender), MIN_INTERVAL);
        // What all of them send: 999 receivers at 1/td, the sender at 1/5 s.
        let sent = 999.0 * 100.0 / td + 100.0 / 5.0;
        assert!(sent <= t.rtcp_bandwidth() * 1.0001, "{sent} B/s");
    }

    #[test]
    fn the_reduced_minimum_scales_with_the_session_bandwidth() {
        // 2 Mbit/s: 360 / 2000 = 0.18 s; the first report half that.
        let t = RtcpTiming::new(250_000.0, true, 100);
        assert_eq!(t.minimum(), Duration::from_millis(180));
        let p = Participants {
            members: 2,
            senders: 1,
            we_sent: false,
            initial: true,
        };
        assert!((secs(t.deterministic(p)) - 0.09).abs() < 1e-9);
        // Below 72 kbit/s the fixed 5 s applies.
        assert_eq!(RtcpTiming::new(8000.0, true, 100).minimum(), MIN_INTERVAL);
    }

    #[test]
    fn intervals_are_randomised_and_compensated_and_sizes_averaged() {
        let mut t = RtcpTiming::new(125_000.0, false, 100);
        let p = Participants {
            members: 10,
            senders: 1,
            we_sent: false,
            initial: false,
        };
        let mut rng = Rng::new(3);
        let draws: Vec<f64> = (0..10_000).map(|_| secs(t.interval(p, &mut rng))).collect();
        let (lo, hi) = (2.5 / COMPENSATION, 7.5 / COMPENSATION);
        assert!(draws.iter().all(|&d| (lo..hi).contains(&d)));
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 5.0 / COMPENSATION).abs() < 0.05, "{mean}");
        // Sizes: a 1/16 moving average, headers counted.
        t.on_compound(372);
        assert!((t.average_size() - (100.0 + (400.0 - 100.0) / 16.0)).abs() < 1e-9);
    }
}
