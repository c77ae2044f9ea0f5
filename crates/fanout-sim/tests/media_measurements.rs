//! Media receivers' measurements against the simulator's ground truth
//! (`scenarios/asmp/measurements.toml`): the loss event rate each
//! receiver's controller computes, its round trip, and its RFC 3550
//! interarrival jitter, each recomputed here from the simulator's full
//! trace — which packets the sender sent when, and which reached each
//! receiver when — with the definitions written out independently of the
//! code under test.

mod common;

use fanout_core::Instant;
use fanout_sim::scenario::{BuiltinFlows, TraceSpec};
use fanout_sim::session_media::{MediaFlows, MediaMember};
use fanout_sim::Simulator;
use std::collections::BTreeMap;
use std::time::Duration;

/// RTP payload clock, Hz (MPEG-TS, RFC 2250).
const CLOCK: u128 = 90_000;

/// What the trace says about one receiver: the sender's RTP packets in
/// the order sent (send time, ns), and for each, when it reached the
/// receiver, if it did.
struct Truth {
    sent: Vec<(u64, Option<u64>)>,
}

/// Reads the sender's RTP packets (its datagrams to the group of at least
/// `min_bytes`; RTCP compounds are far smaller) and the receptions by
/// the app at `receiver` from a full trace.
fn truth(trace: &str, sender: &str, receiver: &str, min_bytes: u32) -> Truth {
    let mut order = Vec::new();
    let mut rx = BTreeMap::new();
    for line in trace.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            [t, "send", _, uid, route, bytes] if route.starts_with(sender) => {
                let b: u32 = bytes.trim_end_matches('B').parse().unwrap();
                if b >= min_bytes {
                    order.push((uid.to_string(), t.parse::<u64>().unwrap()));
                }
            }
            [t, "rx", _, uid, addr] if *addr == receiver => {
                rx.insert(uid.to_string(), t.parse::<u64>().unwrap());
            }
            _ => {}
        }
    }
    Truth {
        sent: order
            .into_iter()
            .map(|(uid, t)| (t, rx.get(&uid).copied()))
            .collect(),
    }
}

impl Truth {
    /// RFC 5348 §5's loss event rate over the packets the receiver could
    /// judge by `at` (up to the last that reached it): losses within `span`
    /// round trips (`rtt`) of an event's first are one event; the interval
    /// between two events' first losses is counted in packets; the mean of
    /// the newest `n` closed intervals, weighted 1 for the newer half and
    /// then falling linearly (§5.4), or, if larger, with the open interval
    /// counted too; the rate is one over that mean. Only intervals between
    /// losses: the receiver seeds a first interval from its receive rate
    /// (§6.3.1), which weighs in until it ages out of the history (a small
    /// difference early in a long history).
    fn loss_event_rate(&self, at: u64, rtt: Duration, span: f64, n: usize) -> f64 {
        let last = self
            .sent
            .iter()
            .rposition(|(_, r)| r.is_some_and(|r| r <= at))
            .expect("something arrived");
        let window = (rtt.as_nanos() as f64 * span) as u64;
        let mut starts: Vec<usize> = Vec::new();
        let mut event_at: Option<u64> = None;
        for (i, (t, r)) in self.sent[..=last].iter().enumerate() {
            if r.is_none() && event_at.is_none_or(|e| t - e > window) {
                starts.push(i);
                event_at = Some(*t);
            }
        }
        let closed: Vec<f64> = starts
            .windows(2)
            .rev()
            .map(|w| (w[1] - w[0]) as f64)
            .collect();
        let open = (last + 1 - starts.last().copied().unwrap_or(0)) as f64;
        let weight = |i: usize| {
            if i < n / 2 {
                1.0
            } else {
                2.0 * (n - i) as f64 / (n + 2) as f64
            }
        };
        let mean = |xs: &mut dyn Iterator<Item = f64>| {
            let (mut s, mut w) = (0.0, 0.0);
            for (i, x) in xs.take(n).enumerate() {
                s += x * weight(i);
                w += weight(i);
            }
            s / w
        };
        let without = mean(&mut closed.iter().copied());
        let with = mean(&mut std::iter::once(open).chain(closed.iter().copied()));
        1.0 / without.max(with)
    }

    /// RFC 3550 A.8's interarrival jitter over the packets that arrived,
    /// in arrival order, as the report block carries it (timestamp
    /// units): with transit `D = R − S` in the payload clock, `J += |ΔD| −
    /// (J + 8)/16` in sixteenths (the integer form). The sender's clock
    /// and random timestamp offset start with the run, so `S` is its send
    /// time in the payload clock.
    fn jitter(&self) -> u32 {
        let ticks = |ns: u64| (u128::from(ns) * CLOCK / 1_000_000_000) as u32;
        let mut arrivals: Vec<(u64, u64)> = self
            .sent
            .iter()
            .filter_map(|&(t, r)| r.map(|r| (r, t)))
            .collect();
        arrivals.sort_unstable();
        let (mut jitter, mut prev): (u32, Option<u32>) = (0, None);
        for (r, s) in arrivals {
            let transit = ticks(r).wrapping_sub(ticks(s));
            if let Some(p) = prev {
                let d = (transit.wrapping_sub(p) as i32).unsigned_abs();
                jitter = jitter.wrapping_add(d).wrapping_sub((jitter + 8) >> 4);
            }
            prev = Some(transit);
        }
        jitter >> 4
    }
}

/// A receiver of the scenario: node name, its round trip from the
/// scenario's links (5 ms + its link's delay, twice, with a data packet's
/// serialisation at 100 and 10 Mbit/s), its app and address.
struct Receiver {
    node: &'static str,
    rtt: Duration,
}

const RECEIVERS: [Receiver; 2] = [
    Receiver {
        node: "r1",
        rtt: Duration::from_micros(2 * (5_000 + 20_000) + 108 + 1085),
    },
    Receiver {
        node: "r2",
        rtt: Duration::from_micros(2 * (5_000 + 40_000) + 108 + 1085),
    },
];

/// Per stop, per receiver: (loss event rate, round trip) as measured.
type Seen = Vec<Vec<(f64, Option<Duration>)>>;

/// Runs the scenario with `cc`, fully traced, stopping at each of `at`
/// (s) to read the receivers' estimates: the simulator, the media flows
/// and what the receivers measured at each stop.
fn run(cc: &str, at: &[u64]) -> (Simulator, MediaFlows, Seen) {
    let mut sc = common::load("asmp", "measurements.toml");
    sc.trace = TraceSpec::Full;
    for f in sc.flows.iter_mut().filter(|f| f.kind == "media") {
        f.params.insert("cc".into(), toml::Value::String(cc.into()));
    }
    let mut media = MediaFlows::default();
    let mut sim = sc
        .build(&mut [&mut BuiltinFlows, &mut media])
        .expect("the scenario builds");
    let mut seen = Vec::new();
    for &t in at {
        sim.run_until(Instant::ZERO + Duration::from_secs(t));
        seen.push(
            media.flows[0]
                .members
                .iter()
                .map(|(_, id)| {
                    let e = sim.app::<MediaMember>(*id).unwrap().receiver().estimates();
                    (e.loss, e.rtt)
                })
                .collect(),
        );
    }
    (sim, media, seen)
}

/// fanout's ASMP (the default: events within half a round trip, 64
/// intervals) and TFMCC (RFC 5348's: a round trip, 8 intervals) measure
/// the loss event rate within 10% of the truth; they and the paper's ASMP
/// measure the round trip within 5 ms + 10%, and the jitter exactly as
/// RFC 3550 A.8 computes it from the true send and arrival times.
#[test]
fn receivers_measure_loss_events_round_trips_and_jitter_as_the_simulator_saw_them() {
    let stops = [120, 140, 160, 180, 200];
    for (cc, events) in [
        (
            "asmp",
            Some((
                fanout_media::asmp::EVENT_SPAN,
                fanout_media::asmp::LOSS_INTERVALS,
            )),
        ),
        ("tfmcc", Some((1.0, fanout_core::tfrc::LOSS_INTERVALS))),
        // The paper's ASMP measures the fraction of packets lost, not
        // loss events: its round trip and jitter only.
        ("asmp-paper", None),
    ] {
        let (sim, media, seen) = run(cc, &stops);
        let trace = sim.trace().text();
        for (k, r) in RECEIVERS.iter().enumerate() {
            let (node, id) = &media.flows[0].members[k];
            assert_eq!(node, r.node);
            let addr = sim.app_addr(*id).to_string();
            let t = truth(trace, "10.0.0.1:5004->", &addr, 1000);
            let lost = t.sent.iter().filter(|(_, r)| r.is_none()).count();
            assert!(lost > 50, "{cc} {node}: {lost} losses");
            for (i, &stop) in stops.iter().enumerate() {
                let (loss, rtt) = seen[i][k];
                eprintln!(
                    "{cc} {node} at {stop} s: round trip {rtt:?} (truth {:?})",
                    r.rtt
                );
                if let Some((span, n)) = events {
                    let truth = t.loss_event_rate(stop * 1_000_000_000, r.rtt, span, n);
                    eprintln!("  loss event rate {loss:.5} (truth {truth:.5})");
                    assert!(
                        (loss - truth).abs() <= 0.1 * truth,
                        "{cc} {node}: {loss} vs {truth}"
                    );
                }
                let rtt = rtt.expect("a round trip").as_secs_f64();
                let want = r.rtt.as_secs_f64();
                assert!(
                    (rtt - want).abs() <= 0.005 + 0.1 * want,
                    "{cc} {node}: {rtt} vs {want}"
                );
            }
            let jitter = sim.app::<MediaMember>(*id).unwrap().receiver().jitter();
            let truth = t.jitter();
            eprintln!("{cc} {node}: jitter {jitter} (truth {truth}) timestamp units");
            assert_eq!(jitter, truth, "{cc} {node}");
            if node == "r1" {
                assert!(truth > 0, "cross traffic makes r1's packets wait");
            }
        }
    }
}
