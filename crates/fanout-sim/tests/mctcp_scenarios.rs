//! The MCTCP simulator scenarios (`scenarios/mctcp/`), short: the topology of
//! MCTCP §VI (18 receivers, mergers on three levels, 100 Mbit/s links, every
//! merging node limited to 40 000 packets/s) with merging at the sender only
//! and at levels 0–2. The full runs and their figures are in
//! docs/experiments/mctcp.md.

use fanout_sim::Scenario;

mod common;

fn load(name: &str) -> Scenario {
    common::load("mctcp", name)
}

use common::run;

/// MCTCP §VI: with the sender merging every receiver's ACKs its processing
/// capacity caps the session; merging in the tree spreads the load and
/// the throughput roughly doubles.
#[test]
fn merging_in_the_tree_lifts_the_sender_cpu_bottleneck() {
    let flat = run(load("seed-l0.toml"), 6, 2);
    let tree = run(load("seed-l012.toml"), 6, 2);
    let (f, t) = (&flat.sessions[0], &tree.sessions[0]);
    assert_eq!(f.members, 18);
    assert_eq!(t.members, 2, "the sender hears its two level-1 mergers");
    assert_eq!(t.mergers.len(), 8);
    for m in &t.mergers {
        assert_eq!(m.children, 3, "{m:?}");
        assert!(m.acks_out < m.acks_in, "{m:?}");
    }
    assert!(
        f.feedback_cpu_drops > 0,
        "the sender is the bottleneck: {f:?}"
    );
    assert!(
        t.min_goodput_bps > 1.5 * f.min_goodput_bps,
        "tree {} vs sender-only {}",
        t.min_goodput_bps,
        f.min_goodput_bps
    );
    assert!(t.min_goodput_bps > 85e6, "{t:?}");
    assert!(
        2.0 * t.feedback_pps < f.feedback_pps,
        "sender's feedback: tree {} vs sender-only {}",
        t.feedback_pps,
        f.feedback_pps
    );
    let busiest = t.mergers.iter().map(|m| m.cpu_load).fold(0.0, f64::max);
    assert!(busiest < f.sender_cpu_load, "{busiest} vs {f:?}");
}
