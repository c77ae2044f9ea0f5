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

/// Runs the bench on the suite `text` in a fresh scratch directory: the
/// bench must fail on a target `missed` missed and no target of `kept`
/// (both tool names). Returns the results and the scratch directory.
fn bench_missing_a_target(
    text: &str,
    missed: &str,
    kept: &str,
) -> (serde_json::Value, common::Scratch) {
    let scratch = scratch();
    let dir = scratch.path();
    let suite = dir.join("suite.toml");
    std::fs::write(&suite, text).unwrap();
    let results = dir.join("results.json");
    let (status, stderr) = common::lab_bench(&suite, &[], &results, &dir.join("work"));
    assert!(!status.success(), "a missed target must fail the bench");
    assert!(
        stderr.contains(&format!("target missed: {missed}"))
            && !stderr.contains(&format!("target missed: {kept}")),
        "{stderr}"
    );
    let json = serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
    (json, scratch)
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
    let (json, scratch) = bench_missing_a_target(
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
        "fanout-impossible",
        "fanout-acker",
    );
    let dir = scratch.path();
    let results = dir.join("results.json");
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

/// A media tool streams instead of sending a file: the bench writes the
/// stream into `fanout media send` and reads each receiver's bytes from its
/// summary; beside a competing CUBIC flow it measures both rates over the
/// stream, and a share outside a tool's `share_target` fails the bench.
#[test]
fn a_stream_shares_a_bottleneck_with_cubic_and_a_missed_share_fails_the_bench() {
    if skip() {
        return;
    }
    let _serial = one_at_a_time();
    let (json, scratch) = bench_missing_a_target(
        r#"size = "1MiB"
timeout = "40s"

[[tool]]
name = "media-asmp"
kind = "media"
rate = "fanout's ASMP"
stream_s = 6.0
input_rate = "20Mbit"
share_target = [0.001, 1000.0]

[[tool]]
name = "media-impossible"
kind = "media"
args = ["--cc", "tfmcc"]
rate = "TFMCC, asked for 100 to 1000 times the TCP flow"
stream_s = 4.0
input_rate = "10Mbit"
share_target = [100.0, 1000.0]

[[scenario]]
name = "f"
title = "a 20 Mbit/s bottleneck shared with CUBIC"
receivers = 2
sender_rate = "1Gbit"
receiver_rate = "1Gbit"
competing_tcp = { bottleneck_rate = "20Mbit", delay = "5ms", cc = "cubic", warmup_s = 1.0 }
"#,
        "media-impossible",
        "media-asmp",
    );
    let dir = scratch.path();
    let results = dir.join("results.json");
    let runs = json["results"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for (r, seconds) in runs.iter().zip([6.0, 4.0]) {
        let tool = r["tool"].as_str().unwrap();
        assert_eq!(r["ok"], true, "{tool}: {r}");
        // The stream's duration, as the source wrote it.
        let wall = r["wall_s"].as_f64().unwrap();
        assert!((wall - seconds).abs() < 0.5, "{tool}: wall {wall}");
        for x in r["receivers"].as_array().unwrap() {
            let bytes = x["stream_bytes"].as_u64().unwrap();
            assert!(bytes > 0 && bytes % 188 == 0, "{tool}: {x}");
            let goodput = x["goodput_mbps"].as_f64().unwrap();
            // Never more than the bottleneck or the stream's rate.
            assert!(goodput > 0.0 && goodput < 20.0, "{tool}: {x}");
        }
        let tcp = &r["tcp"];
        let (tcp_mbps, tool_mbps) = (
            tcp["tcp_mbps"].as_f64().unwrap(),
            tcp["tool_mbps"].as_f64().unwrap(),
        );
        assert!(
            tcp_mbps > 0.5 && tcp_mbps + tool_mbps < 21.0,
            "{tool}: {tcp}"
        );
    }
    let text = common::lab_report(&[&results], dir);
    assert!(
        text.contains("| media-asmp |") && text.contains("| stream |"),
        "{text}"
    );
}
