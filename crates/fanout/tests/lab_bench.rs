//! `fanout lab bench` end to end on a small file: scenario (b) of the
//! repository's suite with fanout, uftp and udpcast, each on a freshly
//! built lab; every received file must verify and the figures must be
//! present and physically plausible; then `fanout lab report` turns the
//! results into Markdown and plots. Needs root (namespaces) and the peers
//! (`apt-get install uftp udpcast`, as .ci/run does); skipped without
//! namespace support unless FANOUT_NETNS_REQUIRED=1.

mod common;

const SUITE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../benchmarks/suite.toml");
const SIZE: u64 = 4 << 20;

fn skip() -> bool {
    if let Some(reason) = fanout_netns::require_netns() {
        eprintln!("skipped: {reason}");
        return true;
    }
    let suite = fanout_lab::bench::suite::Suite::load(std::path::Path::new(SUITE)).unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let missing = fanout_lab::bench::peers::missing_packages(&suite.tools, &path);
    if !missing.is_empty() {
        let why = format!("peers not installed: {missing:?} (apt-get install uftp udpcast)");
        assert!(std::env::var_os("FANOUT_NETNS_REQUIRED").is_none(), "{why}");
        eprintln!("skipped: {why}");
        return true;
    }
    false
}

/// A fresh directory, removed when dropped (panics included).
/// One lab at a time: the bench's labs use the same host names and
/// addresses, so two at once would take each other's packets.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LABS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LABS.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn scratch() -> common::Scratch {
    common::Scratch::new("lab-bench-test")
}

#[test]
fn fanout_uftp_and_udpcast_side_by_side_every_file_verified() {
    if skip() {
        return;
    }
    let _serial = one_at_a_time();
    let scratch = scratch();
    let dir = scratch.path();
    let results = dir.join("results.json");
    let (status, stderr) = common::lab_bench(
        std::path::Path::new(SUITE),
        &[
            "--only",
            "b",
            "--tools",
            "fanout,uftp,udpcast",
            "--size",
            "4MiB",
            "--timeout",
            "40",
        ],
        &results,
        &dir.join("work"),
    );
    assert!(status.success(), "bench failed: {stderr}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
    assert_eq!(json["size"], SIZE);
    let runs = json["results"].as_array().unwrap();
    let tools: Vec<&str> = runs.iter().map(|r| r["tool"].as_str().unwrap()).collect();
    assert_eq!(tools, ["fanout", "uftp", "udpcast"]);
    for r in runs {
        let tool = r["tool"].as_str().unwrap();
        assert_eq!(r["ok"], true, "{tool}: {r}");
        let receivers = r["receivers"].as_array().unwrap();
        assert_eq!(receivers.len(), 4, "{tool}");
        for x in receivers {
            assert_eq!(x["verified"], true, "{tool}: {x}");
            let goodput = x["goodput_mbps"].as_f64().unwrap();
            // Each receiver is behind its own 100 Mbit/s link.
            assert!(
                goodput > 0.0 && goodput < 100.0,
                "{tool}: goodput {goodput}"
            );
            assert!(
                x["cpu_s"].as_f64().is_some(),
                "{tool}: receiver CPU missing: {x}"
            );
        }
        let wall = r["wall_s"].as_f64().unwrap();
        // 4 MiB through 100 Mbit/s takes at least 0.33 s.
        assert!(wall > 0.3 && wall < 40.0, "{tool}: wall {wall}");
        let wire = r["wire_per_file_byte"].as_f64().unwrap();
        assert!((1.0..10.0).contains(&wire), "{tool}: wire/file byte {wire}");
        let cpu = r["sender_cpu_s"].as_f64().unwrap();
        assert!((0.0..wall * 2.0).contains(&cpu), "{tool}: sender CPU {cpu}");
        assert!(
            r["feedback_bytes"].as_u64().unwrap() > 0,
            "{tool}: no feedback"
        );
        if r["valid"] != true {
            eprintln!("note: {tool}'s run was invalid: {}", r["invalid_reason"]);
        }
    }
    // The report: a table row per tool, the plots, the target section.
    let text = common::lab_report(&[&results], dir);
    let img = dir.join("img");
    for tool in ["| fanout |", "| uftp |", "| udpcast |"] {
        assert!(text.contains(tool), "no row {tool} in:\n{text}");
    }
    assert!(
        text.contains("Not evaluated: this run used 4194304 bytes"),
        "{text}"
    );
    for svg in ["wall.svg", "wire.svg", "sender_cpu.svg"] {
        let body = std::fs::read_to_string(img.join(svg)).unwrap();
        assert!(body.contains("<svg") && body.contains("udpcast"), "{svg}");
    }
}

/// A scenario with `tcp_reference` measures one kernel CUBIC flow after the
/// tools; the report sets each tool against it, and a tool below its
/// `reference_target` makes the bench exit non-zero (after writing the
/// results).
#[test]
fn the_reference_flow_is_measured_and_a_missed_target_fails_the_bench() {
    if skip() {
        return;
    }
    let _serial = one_at_a_time();
    let scratch = scratch();
    let dir = scratch.path();
    let suite = dir.join("suite.toml");
    std::fs::write(
        &suite,
        r#"size = "4MiB"
timeout = "40s"

[[tool]]
name = "fanout-acker"
kind = "fanout"
args = ["--window-policy", "acker"]
rate = "the acker's window"
reference_target = 0.01

[[tool]]
name = "fanout-impossible"
kind = "fanout"
rate = "the default, asked for 100 times one TCP flow"
reference_target = 100.0

[[scenario]]
name = "g"
title = "2% loss"
receivers = 2
sender_rate = "1Gbit"
receiver_rate = "100Mbit"
loss = 0.02
tcp_reference = true
tcp_reference_s = 3
"#,
    )
    .unwrap();
    let results = dir.join("results.json");
    let (status, stderr) = common::lab_bench(&suite, &[], &results, &dir.join("work"));
    assert!(!status.success(), "an impossible target must fail");
    assert!(
        stderr.contains("target missed: fanout-impossible")
            && !stderr.contains("target missed: fanout-acker"),
        "{stderr}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
    let runs = json["results"].as_array().unwrap();
    assert!(runs.iter().all(|r| r["ok"] == true), "{runs:?}");
    let reference = &json["tcp_references"][0];
    assert_eq!(reference["scenario"], "g");
    let mbps = reference["mbps"].as_f64().unwrap();
    assert!(mbps > 0.5 && mbps < 100.0, "{reference}");
    let loss = reference["network_loss"].as_f64().unwrap();
    assert!((0.005..0.05).contains(&loss), "{reference}");
    let text = common::lab_report(&[&results], dir);
    assert!(
        text.contains("One kernel cubic flow from snd to r1"),
        "{text}"
    );
    assert!(
        text.contains("| fanout-impossible |") && text.contains("≥ 100.00"),
        "{text}"
    );
}
