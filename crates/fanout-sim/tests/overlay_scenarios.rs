//! The overlay (ROMA) in the simulator: hosts joined by the session
//! engine's one-member connections (NewReno here, as the chain model's TCP
//! Reno), each running the sans-IO overlay engine. ROMA's example matches
//! its chain model (ROMA §V-B: 9.0 Mbit/s direct, 22.2 via B); on chains
//! of two to five hops every host gets the least rate of the hops above
//! it; a slow leaf leaves its sibling's rate alone. Figures and the
//! commands that print them: docs/experiments/overlay.md.

use fanout_core::Instant;
use fanout_overlay::{aggregate_path_rate, min_hop_rate, Hop};
use fanout_sim::scenario::BuiltinFlows;
use fanout_sim::session_overlay::{overlay_figures, OverlayFigures, OverlayFlows};
use fanout_sim::Scenario;
use std::fmt::Write;
use std::time::Duration;

/// Runs `sc` with `seed`; the overlay figures over `[warmup, duration]`.
fn run(mut sc: Scenario, seed: u64, warmup: Duration) -> Vec<OverlayFigures> {
    sc.seed = seed;
    let mut overlay = OverlayFlows::default();
    let (sim, _) = sc
        .run(None, &mut [&mut BuiltinFlows, &mut overlay])
        .expect("runs");
    overlay_figures(
        &sim,
        &overlay,
        Instant::ZERO + warmup,
        Instant::ZERO + sc.duration.0,
    )
}

fn mbit(bps: f64) -> f64 {
    bps / 1e6
}

/// One overlay hop of a generated chain: round trip and loss on the data's
/// way.
#[derive(Debug, Clone, Copy)]
struct HopSpec {
    rtt_ms: u64,
    loss: f64,
}

/// A scenario header: seed 1, `secs` long.
fn header(secs: u64) -> String {
    format!("seed = 1\nduration = \"{secs}s\"\nsample_interval = \"100ms\"\n")
}

fn node(t: &mut String, name: &str, ip: &str) {
    let _ = write!(t, "[[node]]\nname = \"{name}\"\nip = \"{ip}\"\n");
}

/// Links `from -> to` (`rate`, half of `h`'s round trip, its loss, 50
/// packets of queue) and back (1 Gbit/s, lossless).
fn link(t: &mut String, from: &str, to: &str, rate: &str, h: &HopSpec) {
    let delay = h.rtt_ms as f64 / 2.0;
    let _ = write!(
        t,
        "[[link]]\nfrom = \"{from}\"\nto = \"{to}\"\nrate = \"{rate}\"\ndelay = \"{delay}ms\"\n\
         loss = {{ model = \"bernoulli\", p = {} }}\nqueue = {{ kind = \"drop_tail\", packets = 50 }}\n\
         [[link]]\nfrom = \"{to}\"\nto = \"{from}\"\nrate = \"1Gbit\"\ndelay = \"{delay}ms\"\n",
        h.loss
    );
}

/// An overlay flow from `source` over `hops` (parent, child; port 7000)
/// carrying an `object`, in 1 KB symbols and segments over NewReno.
fn overlay(t: &mut String, source: &str, hops: &[(String, String)], object: &str) {
    let hops: Vec<String> = hops
        .iter()
        .map(|(p, c)| format!("[\"{p}:7000\", \"{c}:7000\"]"))
        .collect();
    let _ = write!(
        t,
        "[[flow]]\nkind = \"overlay\"\nsource = \"{source}:7000\"\nhops = [{}]\n\
         object = \"{object}\"\nsymbol = \"1KiB\"\nblock = \"16MiB\"\nsegment = \"1KiB\"\ncc = \"newreno\"\n",
        hops.join(", ")
    );
}

/// A scenario with the chain `h0 -> h1 -> … -> hN` (source h0, one overlay
/// hop per link, loss on the data's way only) and, beside it, each hop
/// alone: `xI -> yI` over a link like the chain's hop I, with its own
/// overlay (what one connection gets on that path in the same run).
/// Links are 1 Gbit/s: only loss and round trip limit a hop.
fn chain_scenario(hops: &[HopSpec], object: &str, secs: u64) -> Scenario {
    let mut t = header(secs);
    for i in 0..=hops.len() {
        node(&mut t, &format!("h{i}"), &format!("10.0.0.{}", i + 1));
    }
    for (i, h) in hops.iter().enumerate() {
        node(&mut t, &format!("x{i}"), &format!("10.0.1.{}", i + 1));
        node(&mut t, &format!("y{i}"), &format!("10.0.2.{}", i + 1));
        link(&mut t, &format!("h{i}"), &format!("h{}", i + 1), "1Gbit", h);
        link(&mut t, &format!("x{i}"), &format!("y{i}"), "1Gbit", h);
    }
    let chain: Vec<(String, String)> = (0..hops.len())
        .map(|i| (format!("h{i}"), format!("h{}", i + 1)))
        .collect();
    overlay(&mut t, "h0", &chain, object);
    for i in 0..hops.len() {
        overlay(
            &mut t,
            &format!("x{i}"),
            &[(format!("x{i}"), format!("y{i}"))],
            object,
        );
    }
    Scenario::from_toml(&t, "generated chain").expect("the generated scenario parses")
}

/// ROMA §V-B, Figure 6 (scenarios/overlay/roma-example.toml): C gets
/// within 10% of the chain model's 9.0 Mbit/s over the direct route and
/// 22.2 via B, where the aggregate-path model would put both at 9.0.
#[test]
fn romas_example_direct_and_via_b_are_at_the_chain_models_rates() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios/overlay/roma-example.toml");
    let sc = Scenario::load(&path).expect("the scenario loads");
    for seed in [1, 2] {
        let f = run(sc.clone(), seed, Duration::from_secs(3));
        let direct = mbit(f[0].hosts[0].rate_bps);
        let via_b = mbit(f[1].hosts[1].rate_bps);
        assert!(
            (direct - 9.0).abs() / 9.0 < 0.1,
            "seed {seed}: direct {direct:.2}"
        );
        assert!(
            (via_b - 22.2).abs() / 22.2 < 0.1,
            "seed {seed}: via B {via_b:.2}"
        );
        for h in f.iter().flat_map(|o| &o.hosts) {
            assert_eq!(h.refused_symbols, 0, "{h:?}");
            assert!(h.error.is_none(), "{h:?}");
        }
        // C decoded via B and checked the object.
        assert!(f[1].hosts[1].decoded_s.is_some(), "{:?}", f[1]);
    }
}

/// Chains of two to five hops with mixed round trips and loss: every host
/// gets within 10% of its min-hop prediction (ROMA's equation 2, each
/// hop's rate the one a connection gets on that hop alone in the same
/// run); the rates of hops below a host never slow it.
#[test]
fn on_chains_of_two_to_five_hops_every_host_gets_its_min_hop_rate() {
    let h = |rtt_ms, loss| HopSpec { rtt_ms, loss };
    let chains = [
        vec![h(10, 0.005), h(40, 0.01)],
        vec![h(40, 0.005), h(10, 0.01), h(20, 0.002)],
        vec![h(20, 0.01), h(10, 0.005), h(60, 0.005), h(10, 0.02)],
        vec![
            h(10, 0.01),
            h(30, 0.002),
            h(10, 0.005),
            h(20, 0.02),
            h(10, 0.005),
        ],
    ];
    let (mut report, mut worst) = (String::new(), 0.0f64);
    for hops in &chains {
        let seed = std::env::var("FANOUT_OVERLAY_SEED").map_or(1, |s| s.parse().unwrap());
        let f = run(
            chain_scenario(hops, "64MB", 120),
            seed,
            Duration::from_secs(3),
        );
        let alone: Vec<f64> = f[1..].iter().map(|o| o.hosts[0].rate_bps).collect();
        for (i, host) in f[0].hosts.iter().enumerate() {
            let predicted = alone[..=i].iter().copied().fold(f64::INFINITY, f64::min);
            let above: Vec<Hop> = hops[..=i]
                .iter()
                .map(|h| Hop::new(h.rtt_ms as f64 / 1e3, h.loss))
                .collect();
            let modelled = min_hop_rate(&above, 1024.0) * 8.0;
            let aggregate = aggregate_path_rate(&above, 1024.0) * 8.0;
            let _ = writeln!(
                report,
                "{} hops, host {}: {:.2} Mbit/s; min-hop {:.2} (hops measured alone), {:.2} (equation 1); aggregate path {:.2}",
                hops.len(),
                i + 1,
                mbit(host.rate_bps),
                mbit(predicted),
                mbit(modelled),
                mbit(aggregate)
            );
            worst = worst
                .max((host.rate_bps - predicted).abs() / predicted)
                .max((host.rate_bps - modelled).abs() / modelled);
        }
    }
    println!("{report}");
    assert!(worst < 0.1, "worst {worst:.3}\n{report}");
}

/// ROMA's multi-rate property: a relay with a fast and a slow child; the
/// slow child (a 2 Mbit/s link) leaves the fast one's rate within 5% of
/// what it is when both are fast, and still gets its own link's rate.
#[test]
fn a_slow_leaf_leaves_its_fast_siblings_rate_unchanged() {
    let topology = |slow_rate: &str| {
        let mut t = header(25);
        for (name, ip) in [("s", 1), ("r", 2), ("fast", 3), ("slow", 4)] {
            node(&mut t, name, &format!("10.0.0.{ip}"));
        }
        let h = |rtt_ms, loss| HopSpec { rtt_ms, loss };
        link(&mut t, "s", "r", "1Gbit", &h(10, 0.002));
        link(&mut t, "r", "fast", "1Gbit", &h(20, 0.005));
        link(&mut t, "r", "slow", slow_rate, &h(20, 0.0));
        let hops = [("s", "r"), ("r", "fast"), ("r", "slow")].map(|(p, c)| (p.into(), c.into()));
        overlay(&mut t, "s", &hops, "24MB");
        t
    };
    let scenario = |t: String| Scenario::from_toml(&t, "relay with two children").unwrap();
    let both_fast = run(scenario(topology("1Gbit")), 1, Duration::from_secs(3));
    let one_slow = run(scenario(topology("2Mbit")), 1, Duration::from_secs(3));
    let fast = |f: &[OverlayFigures]| f[0].hosts[1].rate_bps;
    let (alone, beside_slow) = (fast(&both_fast), fast(&one_slow));
    let slow = one_slow[0].hosts[2].rate_bps;
    println!(
        "fast child: {:.2} Mbit/s beside a fast sibling, {:.2} beside a 2 Mbit/s one (which got {:.2})",
        mbit(alone),
        mbit(beside_slow),
        mbit(slow)
    );
    assert!((beside_slow - alone).abs() / alone < 0.05);
    // The slow child gets most of its link (1 KB segments: 93% of the
    // bytes on the wire are stream bytes).
    assert!(mbit(slow) > 1.6, "{}", mbit(slow));
}
