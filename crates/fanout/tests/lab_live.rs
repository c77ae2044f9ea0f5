//! `fanout lab bench` on a live suite end to end, small: a 3 s stream at
//! 2 Mbit/s through fanout's real-time mode and through SRT's live mode
//! (`srt-live-transmit`) on a freshly built lab with 2% loss both ways and
//! a budget of 6 round trips; every message is timed as it leaves each
//! receiver. Then `fanout lab report` puts the race into the report. Needs
//! root (namespaces) and srt-tools (as .ci/run installs); skipped without
//! namespace support unless FANOUT_NETNS_REQUIRED=1.

mod common;

const SUITE: &str = r#"
kind = "live"
rate = "2Mbit"
message = 1316
duration = "3s"
target_tool = "fanout"

[[tool]]
name = "fanout"
kind = "fanout"
about = "fanout"

[[tool]]
name = "srt"
kind = "srt"
about = "srt"

[[scenario]]
name = "random-2"
title = "2% random loss"
budgets_rtt = [6]
receivers = 1
sender_rate = "100Mbit"
receiver_rate = "10Mbit"
delay = "5ms"
loss = 0.02
tcp_reference = true
[[scenario.target]]
max_loss = 0.005
max_late = 0.0
p99_within_budget = true
"#;

const FILE_SUITE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../benchmarks/suite.toml");

fn skip() -> bool {
    if let Some(reason) = fanout_netns::require_netns() {
        eprintln!("skipped: {reason}");
        return true;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let srt = std::env::split_paths(&path).any(|d| d.join("srt-live-transmit").is_file());
    if !srt {
        let why = "srt-tools not installed (apt-get install srt-tools)";
        assert!(std::env::var_os("FANOUT_NETNS_REQUIRED").is_none(), "{why}");
        eprintln!("skipped: {why}");
        return true;
    }
    false
}

#[test]
fn fanout_and_srt_race_on_one_lossy_path_every_message_timed() {
    if skip() {
        return;
    }
    let scratch = common::Scratch::new("lab-live-test");
    let dir = scratch.path();
    let suite = dir.join("live.toml");
    std::fs::write(&suite, SUITE).unwrap();
    let results = dir.join("live.json");
    let (status, stderr) = common::lab_bench(&suite, &[], &results, &dir.join("work"));
    assert!(status.success(), "bench failed: {stderr}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
    assert_eq!(json["kind"], "live");
    let runs = json["runs"].as_array().unwrap();
    let tools: Vec<&str> = runs.iter().map(|r| r["tool"].as_str().unwrap()).collect();
    assert_eq!(tools, ["fanout", "srt"]);
    // 3 s at 2 Mbit/s of 1316-byte messages: one every 5.264 ms.
    let messages = json["runs"][0]["messages"].as_u64().unwrap();
    assert_eq!(messages, 569);
    for r in runs {
        let tool = r["tool"].as_str().unwrap();
        assert_eq!(r["ok"], true, "{tool}: {r}");
        assert_eq!(r["budget_ms"], 120);
        let x = &r["receivers"][0];
        let read = x["read"].as_u64().unwrap();
        // Both repair 2% loss within 6 round trips (SRT: 120 ms of latency).
        assert!(
            read * 1000 >= messages * 995,
            "{tool}: read {read} of {messages}"
        );
        assert_eq!(read + x["lost"].as_u64().unwrap(), messages, "{tool}");
        // Nothing comes out before it was written plus the path's 10 ms.
        let p50 = x["delay_p50_ms"].as_f64().unwrap();
        assert!((10.0..200.0).contains(&p50), "{tool}: delay p50 {p50}");
        let net = r["network_loss"].as_f64().unwrap();
        assert!((0.005..0.05).contains(&net), "{tool}: network loss {net}");
        let (resent, sent) = (
            r["retransmitted"][0].as_u64().unwrap(),
            r["retransmitted"][1].as_u64().unwrap(),
        );
        // SRT's counters come from its last report (one per 100 packets).
        assert!(
            sent + 100 >= messages && resent > 0,
            "{tool}: {resent} of {sent}"
        );
    }
    // fanout's messages are due 120 ms after their writing and none is late.
    assert_eq!(runs[0]["receivers"][0]["late"], 0);
    // One kernel TCP flow over the same path, beside the race: something
    // got through, and no more than the receiver's 10 Mbit/s link carries.
    let tcp = &json["tcp_references"][0];
    assert_eq!(tcp["scenario"], "random-2");
    let mbps = tcp["mbps"].as_f64().unwrap_or(0.0);
    assert!(mbps > 0.1 && mbps <= 10.0, "{tcp}");
    let net = tcp["network_loss"].as_f64().unwrap();
    assert!((0.005..0.05).contains(&net), "{tcp}");
    // The race in the report, after the file suite's part.
    let file_results = dir.join("file.json");
    let (status, stderr) = common::lab_bench(
        std::path::Path::new(FILE_SUITE),
        &[
            "--only",
            "b",
            "--tools",
            "fanout",
            "--size",
            "1MiB",
            "--timeout",
            "30",
        ],
        &file_results,
        &dir.join("work-file"),
    );
    assert!(status.success(), "{stderr}");
    let text = common::lab_report(&[&file_results, &results], dir);
    assert!(
        text.contains("## Live streams: fanout against SRT"),
        "{text}"
    );
    assert!(text.contains("| 6 RTT (120 ms) | srt |"), "{text}");
    assert!(text.contains("One kernel TCP flow"), "{text}");
    assert!(text.contains("Every target of the suite holds"), "{text}");
}
