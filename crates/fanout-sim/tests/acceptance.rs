//! Foundation acceptance scenarios, run from the repository's `scenarios/`
//! files with the real transport engines.

use fanout_core::Instant;
use fanout_sim::analysis::{figures, padhye_bps, RunFigures};
use fanout_sim::scenario::BuiltinFlows;
use fanout_sim::session_flow::SessionFlows;
use fanout_sim::transfer::TransferFlows;
use fanout_sim::Scenario;
use std::path::PathBuf;
use std::time::Duration;

fn scenario_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name)
}

/// Runs a scenario; figures over [5 s, end].
fn run(name: &str, seed: Option<u64>) -> RunFigures {
    let mut sc = Scenario::load(&scenario_path(name)).expect("scenario loads");
    if let Some(s) = seed {
        sc.seed = s;
    }
    let mut transfers = TransferFlows::default();
    let (sim, report) = sc
        .run(None, &mut [&mut BuiltinFlows, &mut transfers])
        .unwrap_or_else(|e| panic!("{name} seed {}: {e}", sc.seed));
    let end = Instant::ZERO + sc.duration.0;
    figures(
        &sim,
        &transfers,
        &SessionFlows::default(),
        report.trace_hash,
        Instant::ZERO + Duration::from_secs(5),
        end,
    )
}

fn link<'a>(f: &'a RunFigures, label: &str) -> &'a fanout_sim::analysis::LinkFigures {
    f.links
        .iter()
        .find(|l| l.label == label)
        .expect("link present")
}

#[test]
fn one_flow_fills_a_bdp_buffered_link() {
    let f = run("utilisation-10m.toml", None);
    let u = link(&f, "r1->r2").utilisation;
    assert!(u >= 0.95, "seed {}: utilisation {u:.4}", f.seed);
    // Payload goodput: at most the wire rate minus headers (16+15+28 of 1480 B).
    assert!(
        f.flows[0].goodput_bps >= 0.93 * 10e6,
        "seed {}: {:?}",
        f.seed,
        f.flows
    );
}

#[test]
fn goodput_follows_padhye_under_random_loss() {
    let mss = (fanout_transport::TransportConfig::default().max_payload()) as f64;
    for (file, p) in [
        ("padhye-loss-0.1pct.toml", 0.001),
        ("padhye-loss-1pct.toml", 0.01),
        ("padhye-loss-3pct.toml", 0.03),
    ] {
        // RTT 50 ms base; T0 = the 200 ms minimum RTO; b = 1 (byte counting).
        let model = padhye_bps(mss, 0.050, p, 1.0, 0.2);
        let f = run(file, None);
        let got = f.flows[0].goodput_bps;
        let ratio = got / model;
        assert!(
            (0.7..=1.3).contains(&ratio),
            "{file} seed {}: goodput {got:.0} vs Padhye {model:.0} (ratio {ratio:.3})",
            f.seed
        );
    }
}

#[test]
fn two_newreno_flows_share_droptail_fairly() {
    let f = run("fairness-droptail-newreno.toml", None);
    assert!(
        f.jain_index >= 0.95,
        "seed {}: Jain {:.4} {:?}",
        f.seed,
        f.jain_index,
        f.flows
    );
    assert!(link(&f, "r1->r2").utilisation >= 0.9);
}

#[test]
fn two_cubic_flows_share_droptail_fairly() {
    let f = run("fairness-droptail-cubic.toml", None);
    assert!(
        f.jain_index >= 0.95,
        "seed {}: Jain {:.4} {:?}",
        f.seed,
        f.jain_index,
        f.flows
    );
    assert!(link(&f, "r1->r2").utilisation >= 0.9);
}

#[test]
fn two_flows_fill_a_red_bottleneck() {
    let f = run("red-4m5.toml", None);
    let u = link(&f, "r1->r2").utilisation;
    assert!(u >= 0.90, "seed {}: utilisation {u:.4}", f.seed);
    assert!(
        f.jain_index >= 0.9,
        "seed {}: Jain {:.4}",
        f.seed,
        f.jain_index
    );
}

#[test]
fn transport_runs_are_reproducible_by_seed() {
    let a = run("padhye-loss-1pct.toml", Some(11));
    let b = run("padhye-loss-1pct.toml", Some(11));
    let c = run("padhye-loss-1pct.toml", Some(12));
    assert!(a.trace_hash.is_some(), "the scenario is traced");
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(a.flows[0].goodput_bps, b.flows[0].goodput_bps);
    assert_ne!(a.trace_hash, c.trace_hash);
}
