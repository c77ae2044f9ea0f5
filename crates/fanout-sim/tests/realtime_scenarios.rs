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
    live_with(stars, leaves, messages, latency, "p = 0.02")
}

/// [`live`] with every receiver's drop rate given as `loss` (`p = 0.05`).
fn live_with(
    stars: usize,
    leaves: u32,
    messages: u32,
    latency: Option<&str>,
    loss: &str,
) -> LiveFigures {
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
        let star = star
            .replace("leaves = 20", &format!("leaves = {leaves}"))
            .replace("p = 0.02", loss);
        toml.push_str(&star);
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

/// TCP-CM §5 (scenarios/realtime/tcp-cm-4tcp-lan.toml, 5 simulated minutes
/// instead of 30): two 1 Mbit/s media flows and four NewReno flows through
/// a 4.5 Mbit/s RED bottleneck. The media flows get between 0.8 and 1.25
/// times the TCP flows' mean rate; under this congestion P-FIFO's messages
/// take over 2 s on average (its 300 KB queue), P-LIFO's under 0.2 s (the
/// paper's averages: 2.30–4.81 s and 0.092–0.162 s).
#[test]
fn tcp_cm_shares_a_red_bottleneck_and_lifo_keeps_delay_low() {
    use fanout_core::Instant;
    use fanout_sim::analysis::figures;
    use fanout_sim::transfer::TransferFlows;
    use std::time::Duration;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios/realtime/tcp-cm-4tcp-lan.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("duration = \"1800s\"", "duration = \"300s\"");
    let mut mean = Vec::new();
    for order in ["fifo", "lifo"] {
        let text = text.replace("queue = \"fifo\"", &format!("queue = \"{order}\""));
        let sc = Scenario::from_toml(&text, "tcp-cm").unwrap();
        let (mut transfers, mut live) = (TransferFlows::default(), LiveFlows::default());
        let (sim, report) = sc
            .run(None, &mut [&mut BuiltinFlows, &mut transfers, &mut live])
            .unwrap();
        let sessions = fanout_sim::session_flow::SessionFlows::default();
        let f = figures(
            &sim,
            &transfers,
            &sessions,
            report.trace_hash,
            Instant::ZERO + Duration::from_secs(60),
            Instant::ZERO + Duration::from_secs(300),
        );
        let tcp = f.flows.iter().map(|x| x.goodput_bps).sum::<f64>() / f.flows.len() as f64;
        let media = live_figures(&sim, &live);
        assert_eq!((f.flows.len(), media.len()), (4, 2));
        for m in &media {
            let ratio = m.delivered_bps / tcp;
            assert!(
                (0.8..=1.25).contains(&ratio),
                "{order}: media {m:?}, TCP {tcp}"
            );
            assert_eq!(m.repair_bytes, 0, "no stale retransmission");
        }
        mean.push(media.iter().map(|m| m.delay_mean_ms).fold(0.0, f64::max));
    }
    assert!(mean[0] > 2000.0, "P-FIFO mean delay {} ms", mean[0]);
    assert!(mean[1] < 200.0, "P-LIFO mean delay {} ms", mean[1]);
}

/// The shipped default for messages with deadlines (the equation rate,
/// RFC 5348 at the receiver's loss event rate) on
/// scenarios/realtime/srt-bar.toml: a 2 Mbit/s stream over 20 ms with 2%
/// loss and a 4-RTT budget loses nothing and delivers nothing late; TCP's
/// window (`window_policy = "min"`), whose sawtooth dips below the stream's
/// rate after each loss, loses about 2% (docs/experiments/realtime.md).
#[test]
fn the_default_rate_carries_a_stream_through_two_percent_loss_in_four_round_trips() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios/realtime/srt-bar.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let run = |extra: &str| {
        let sc = Scenario::from_toml(&format!("{text}{extra}"), "srt-bar").unwrap();
        let mut flows = LiveFlows::default();
        let (sim, _) = sc.run(None, &mut [&mut BuiltinFlows, &mut flows]).unwrap();
        live_figures(&sim, &flows).remove(0)
    };
    let default = run("");
    assert!(default.mean_perceived_loss <= 0.001, "{default:?}");
    assert_eq!(default.late, 0, "{default:?}");
    let window = run("window_policy = \"min\"\n");
    assert!(
        window.mean_perceived_loss > 0.01
            && window.mean_perceived_loss > default.mean_perceived_loss,
        "{window:?}"
    );
}

/// scenarios/realtime/setup-10-fits.toml: 10% loss each way, one message
/// per 22.7 ms, 6-RTT budgets. A lost repair is found by the reorder timer
/// rather than the next message's ACK, a repair lost once goes twice when
/// no later one could arrive in time, and an ACK that reports a hole goes
/// again a quarter round trip later: over six seeds at most 0.15% of the
/// messages are lost (0.44% without any of the three, 0.19% without the
/// ACK's repeat), none read late.
#[test]
fn a_sparse_stream_losing_a_tenth_each_way_loses_few_messages_in_six_round_trips() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios/realtime/setup-10-fits.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let (mut lost, mut copies) = (0.0, 0);
    for seed in 1..=6 {
        let sc =
            Scenario::from_toml(&text.replace("seed = 1", &format!("seed = {seed}")), "s").unwrap();
        let mut flows = LiveFlows::default();
        let (sim, _) = sc.run(None, &mut [&mut BuiltinFlows, &mut flows]).unwrap();
        let f = live_figures(&sim, &flows).remove(0);
        assert_eq!((f.late, f.dropped_late), (0, 0), "seed {seed}: {f:?}");
        lost += f.mean_perceived_loss / 6.0;
        copies += f.second_copies;
    }
    assert!(lost <= 0.0015, "{:.3}% lost", lost * 100.0);
    assert!(copies > 0);
}

/// TCP-SMO §V.C at full size (scenarios/realtime/smo-rtm-live.toml: 100
/// receivers, round trips 20–100 ms, 400 ms budget, 5000 messages), with
/// the shipped defaults: at 2, 5 and 7% drop per receiver nearly every
/// drop is repaired in time, as the paper reports below 8% — at most 0.1%
/// of messages lost on average, 0.5% at the worst receiver, and none read
/// after its deadline. A TCP-friendly
/// rate to the worst receiver alone could not carry the stream from 4% on
/// (docs/experiments/realtime.md); the group takes the best receiver's
/// rate within 1 + log2 N times the worst's (TCP-SMO §II.F).
#[test]
fn a_live_group_recovers_nearly_every_drop_below_eight_percent() {
    for p in ["0.02", "0.05", "0.07"] {
        let f = live_with(5, 20, 5000, Some("400ms"), &format!("p = {p}"));
        assert_eq!(f.members, 100);
        assert!(f.mean_perceived_loss <= 0.001, "{p}: {f:?}");
        assert!(f.max_perceived_loss <= 0.005, "{p}: {f:?}");
        assert!(f.repair_bytes > 0, "{p}: {f:?}");
        // The deadlines travel with the data: nothing is read after its
        // deadline, so no delay exceeds the budget.
        assert_eq!(f.late, 0, "{p}: {f:?}");
        assert!(f.delay_max_ms <= 400.0, "{p}: {f:?}");
    }
}

/// scenarios/realtime/cubic-share.toml with a 3 Mbit/s stream, more than
/// its share beside the CUBIC flow: the queue that builds behind CUBIC
/// after the receiver joined is all on the data's way, so the sender
/// counts it whole when it decides whether a message can still arrive in
/// time (`realtime::deadline::forward_delay`, which counts the whole round
/// trip on the data's way). Messages it sends then
/// arrive before the receiver's deadline: at most 0.1% are dropped as
/// complete too late (counting half the round trip each way: 375 of
/// 31 515, 1.2%), and the stream loses under 1.5% (2.0%).
#[test]
fn a_queue_built_after_the_join_does_not_make_sent_messages_arrive_late() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios/realtime/cubic-share.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let flow = "interval = \"5664us\"\nmessage";
    assert!(text.contains(flow));
    let text = text.replace(flow, "interval = \"3776us\"\nmessage");
    let sc = Scenario::from_toml(&text, "cubic-share-3m").unwrap();
    let mut flows = LiveFlows::default();
    let mut transfers = fanout_sim::transfer::TransferFlows::default();
    let (sim, _) = sc
        .run(None, &mut [&mut BuiltinFlows, &mut transfers, &mut flows])
        .unwrap();
    let f = live_figures(&sim, &flows).remove(0);
    assert!(f.written > 30_000, "{f:?}");
    assert!(f.dropped_late * 1000 <= f.written, "{f:?}");
    assert!(f.mean_perceived_loss < 0.015, "{f:?}");
}
