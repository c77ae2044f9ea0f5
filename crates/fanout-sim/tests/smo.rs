//! TCP-SMO sessions in the simulator (issue 3, first increment).

use fanout_core::Instant;
use fanout_sim::analysis::figures;
use fanout_sim::scenario::BuiltinFlows;
use fanout_sim::session_flow::SessionFlows;
use fanout_sim::transfer::TransferFlows;
use fanout_sim::units::HumanDuration;
use fanout_sim::Scenario;
use std::path::PathBuf;
use std::time::Duration;

#[test]
fn ten_members_each_get_line_rate_from_one_multicast_stream() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/smo/star-10.toml");
    let mut sc = Scenario::load(&path).expect("scenario loads");
    sc.duration = HumanDuration(Duration::from_secs(6));
    let (mut t, mut s) = (TransferFlows::default(), SessionFlows::default());
    let (sim, report) = sc
        .run(None, &mut [&mut BuiltinFlows, &mut t, &mut s])
        .expect("runs");
    let f = figures(
        &sim,
        &t,
        &s,
        report.trace_hash,
        Instant::ZERO + Duration::from_secs(2),
        Instant::ZERO + Duration::from_secs(6),
    );
    let session = &f.sessions[0];
    assert_eq!(session.members, 10);
    // 100 Mbit/s leaf links carry 1421 payload bytes per 1480 on the wire.
    assert!(
        session.min_goodput_bps >= 90e6,
        "seed {}: {session:?}",
        f.seed
    );
    // Data crosses the sender's link once, not ten times.
    assert!(
        session.sender_link_bytes_per_delivered_byte < 1.1,
        "{session:?}"
    );
}
