//! Real-time sessions in the simulator (`kind = "live"`,
//! scenarios/realtime/smo-rtm-live.toml scaled down): a live stream of 50
//! messages per second to receivers that each lose 2% of what the sender
//! sends them. The full-size runs and their figures are in
//! docs/experiments/realtime.md.

use fanout_sim::scenario::BuiltinFlows;
use fanout_sim::session_live::{live_figures, LiveFigures, LiveFlows};
use fanout_sim::Scenario;

/// The scenario with its receiver groups cut to the first `stars` (round
/// trips 20, 40, … ms) of `leaves` receivers each, `messages` messages,
/// and the latency budget `latency` (`None`: no deadlines, TCP-CM).
fn live(stars: usize, leaves: u32, messages: u32, latency: Option<&str>) -> LiveFigures {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios/realtime/smo-rtm-live.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut parts = text.split("[[star]]");
    let head = parts.next().unwrap();
    let mut toml = head.replace(
        "duration = \"110s\"",
        &format!("duration = \"{}s\"", messages / 50 + 10),
    );
    for star in parts.take(stars) {
        let star = star.split("[[flow]]").next().unwrap();
        toml.push_str("[[star]]");
        toml.push_str(&star.replace("leaves = 20", &format!("leaves = {leaves}")));
    }
    let flow = text[text.find("[[flow]]").unwrap()..]
        .replace("messages = 5000", &format!("messages = {messages}"));
    let flow = match latency {
        Some(l) => flow.replace("latency = \"400ms\"", &format!("latency = \"{l}\"")),
        None => flow.replace("latency = \"400ms\"\n", ""),
    };
    toml.push_str(&flow);
    let sc = Scenario::from_toml(&toml, "realtime test").unwrap();
    let mut flows = LiveFlows::default();
    let (sim, _) = sc.run(None, &mut [&mut BuiltinFlows, &mut flows]).unwrap();
    live_figures(&sim, &flows).remove(0)
}

/// TCP-RTM on short round trips (20 ms, 10 receivers): every loss is
/// repaired before its 400 ms deadline — nothing is lost to the
/// application, nothing is late, nothing skipped.
#[test]
fn short_round_trips_repair_every_loss_in_time() {
    let f = live(1, 10, 1000, Some("400ms"));
    assert_eq!(f.written, 1000);
    assert_eq!(f.max_perceived_loss, 0.0, "{f:?}");
    assert_eq!(f.late, 0, "{f:?}");
    assert!(f.repair_bytes > 0 && f.skips_sent == 0, "{f:?}");
    assert!(f.delay_p99_ms < 400.0, "{f:?}");
}

/// Without deadlines (TCP-CM): no lost segment is sent again; each
/// receiver misses about the share of messages the network dropped (2%),
/// and reads the rest in order.
#[test]
fn without_deadlines_losses_are_skipped_not_repaired() {
    let f = live(1, 10, 1000, None);
    assert_eq!(f.repair_bytes, 0, "{f:?}");
    assert!(f.skips_sent > 0, "{f:?}");
    assert!(
        (0.005..0.05).contains(&f.mean_perceived_loss),
        "about the drop rate: {f:?}"
    );
    assert_eq!(f.reordering_index, 0.0);
}
