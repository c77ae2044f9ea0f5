//! `max_rate`: a cap on the sending rate on top of congestion control
//! (`send --max-rate`). Capped below what the path carries, a session and a
//! transfer run at the cap, not above it and not far below; uncapped, the
//! same scenario runs near the path's rate.

use fanout_sim::Scenario;

mod common;

use common::run;

/// `scenarios/smo/star-10.toml` (10 members, each behind 100 Mbit/s)
/// with `edit` applied.
fn star(edit: impl Fn(String) -> String) -> Scenario {
    let file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/smo/star-10.toml");
    let text = edit(std::fs::read_to_string(&file).expect("scenario reads"));
    Scenario::from_toml(&text, "smo/star-10.toml").expect("scenario parses")
}

fn capped(rate: &str) -> impl Fn(String) -> String + '_ {
    move |t| {
        t.replace(
            "window = \"1MiB\"",
            &format!("window = \"1MiB\"\nmax_rate = \"{rate}\""),
        )
    }
}

#[test]
fn a_capped_session_runs_at_its_cap() {
    let (secs, warmup) = (8, 3);
    let free = run(star(|t| t), secs, warmup).sessions[0].min_goodput_bps / 1e6;
    let f = run(star(capped("20Mbit")), secs, warmup);
    let s = &f.sessions[0];
    let got = s.min_goodput_bps / 1e6;
    // The cap counts stream bytes, as goodput does (the CLI's --max-rate
    // converts from IP packets).
    assert!(
        (18.0..=20.05).contains(&got),
        "capped at 20 Mbit/s: {got:.2}"
    );
    assert!(free > 80.0, "uncapped: {free:.2}");
    assert_eq!(s.members_left, 0);
}

#[test]
fn a_capped_transfer_runs_at_its_cap() {
    let one_flow = |cap: &'static str| {
        move |t: String| {
            let at = t.find("[[flow]]").expect("a flow");
            format!(
                "{}[[flow]]\nkind = \"transfer\"\nfrom = \"s:5000\"\nto = \"d1:6000\"\n{cap}",
                &t[..at]
            )
        }
    };
    let f = run(star(one_flow("max_rate = \"5Mbit\"\n")), 8, 3);
    let got = f.flows[0].goodput_bps / 1e6;
    assert!((4.5..=5.02).contains(&got), "capped at 5 Mbit/s: {got:.2}");
    let free = run(star(one_flow("")), 8, 3).flows[0].goodput_bps / 1e6;
    assert!(free > 80.0, "uncapped: {free:.2}");
}
