//! Feedback thinning (issue 3): with every member's ACKs paced into
//! staggered slots, the ACK rate at the sender stays within the session's
//! feedback budget, even where all feedback shares the sender's 100 Mbit/s
//! link (the seed's setting), and the session still runs near line rate.

use fanout_core::Instant;
use fanout_sim::analysis::{figures, SessionFigures};
use fanout_sim::scenario::BuiltinFlows;
use fanout_sim::session_flow::SessionFlows;
use fanout_sim::transfer::TransferFlows;
use fanout_sim::units::HumanDuration;
use fanout_sim::Scenario;
use std::path::PathBuf;
use std::time::Duration;

/// Runs `scenarios/smo/NAME.toml` for `secs`, with `extra` appended to its
/// session flow, and returns the session's figures over the last 3 s.
fn run(name: &str, secs: u64, extra: &str) -> SessionFigures {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios/smo")
        .join(format!("{name}.toml"));
    let text = std::fs::read_to_string(&path).expect("scenario file") + extra;
    let mut sc = Scenario::from_toml(&text, &path.display().to_string()).expect("scenario parses");
    sc.duration = HumanDuration(Duration::from_secs(secs));
    let (mut t, mut s) = (TransferFlows::default(), SessionFlows::default());
    let (sim, report) = sc
        .run(None, &mut [&mut BuiltinFlows, &mut t, &mut s])
        .expect("runs");
    let f = figures(
        &sim,
        &t,
        &s,
        report.trace_hash,
        Instant::ZERO + Duration::from_secs(secs - 3),
        Instant::ZERO + Duration::from_secs(secs),
    );
    f.sessions[0].clone()
}

#[test]
fn feedback_stays_within_budget_on_a_shared_100_mbit_link() {
    // 100 members: by count alone (every 8 segments at ~8 000 segments/s)
    // they would send ~100 000 ACKs/s; the budget allows 5 000.
    let s = run("shared-100", 7, "feedback_budget = 5000\n");
    assert_eq!(s.members, 100);
    assert!(s.feedback_pps <= 5_000.0 * 1.05, "{s:?}");
    assert!(s.min_goodput_bps >= 80e6, "{s:?}");
}

#[test]
fn without_a_budget_the_same_session_sends_far_more_feedback() {
    let s = run("shared-100", 7, "feedback_budget = 0\n");
    assert!(s.feedback_pps > 20_000.0, "{s:?}");
}
