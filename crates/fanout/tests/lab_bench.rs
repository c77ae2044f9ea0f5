//! `fanout lab bench` end to end on a small file: scenario (b) of the
//! repository's suite with fanout, uftp and udpcast, each on a freshly
//! built lab; every received file must verify and the figures must be
//! present and physically plausible; then `fanout lab report` turns the
//! results into Markdown and plots. Needs root (namespaces) and the peers
//! (`apt-get install uftp udpcast`, as .ci/run does); skipped without
//! namespace support unless FANOUT_NETNS_REQUIRED=1.

mod common;

use std::process::Command;

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
fn scratch() -> common::Scratch {
    common::Scratch::new("lab-bench-test")
}

#[test]
fn fanout_uftp_and_udpcast_side_by_side_every_file_verified() {
    if skip() {
        return;
    }
    let scratch = scratch();
    let dir = scratch.path();
    let results = dir.join("results.json");
    let out = Command::new(env!("CARGO_BIN_EXE_fanout"))
        .args([
            "lab",
            "bench",
            SUITE,
            "--only",
            "b",
            "--tools",
            "fanout,uftp,udpcast",
        ])
        .args(["--size", "4MiB", "--timeout", "40", "--out"])
        .arg(&results)
        .arg("--work-dir")
        .arg(dir.join("work"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    assert!(out.status.success(), "bench failed: {stderr}");
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
    let md = dir.join("benchmarks.md");
    let img = dir.join("img");
    let out = Command::new(env!("CARGO_BIN_EXE_fanout"))
        .args(["lab", "report"])
        .arg(&results)
        .arg("--out")
        .arg(&md)
        .arg("--img-dir")
        .arg(&img)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&md).unwrap();
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
