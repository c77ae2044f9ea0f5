//! `fanout lab run --profile kernel` end to end, as root in namespaces it
//! creates: the report says which profile ran and carries the kernel's link
//! counters; what the kernel cannot emulate is refused by name; a run
//! killed midway (SIGTERM) leaves no namespace — the switch's included —
//! and no process behind. Skipped without namespace support unless
//! FANOUT_NETNS_REQUIRED=1.

mod common;
#[path = "common/lab_cli.rs"]
mod lab_cli;

use lab_cli::{fanout, skip};
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Two hosts on one switch, zero delay; `extra` goes into link a -> sw.
fn write_topology(dir: &Path, extra: &str, commands: &str) -> PathBuf {
    let text = format!(
        r#"
        [[host]]
        name = "a"
        [[host]]
        name = "b"
        [[router]]
        name = "sw"
        [[link]]
        from = "a"
        to = "sw"
        rate = "20Mbit"
        duplex = true
        {extra}
        [[link]]
        from = "b"
        to = "sw"
        rate = "20Mbit"
        loss = {{ model = "bernoulli", p = 0.01 }}
        duplex = true
        {commands}
        "#
    );
    let path = dir.join("topo.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_report_names_the_profile_and_the_kernel_counters() {
    if skip() {
        return;
    }
    let scratch = common::Scratch::new("labk-report");
    let dir = scratch.path();
    let topo = write_topology(
        dir,
        "",
        "[[command]]\nhost = \"a\"\ncmd = \"echo from-a\"\n",
    );
    let out = fanout()
        .args(["lab", "run", "--json", "--profile", "kernel"])
        .arg(&topo)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(out.status.success(), "{report:#}");
    assert_eq!(report["profile"], "kernel");
    assert_eq!(report["emulator"], serde_json::Value::Null);
    assert_eq!(
        report["kernel"]["counters_unavailable"],
        serde_json::Value::Null
    );
    let links = report["kernel"]["links"].as_array().unwrap();
    assert_eq!(links.len(), 4, "{report:#}");
    assert_eq!(links[0]["from"], "a");
    assert!(links[2]["drops"]["random_loss"].is_u64(), "{report:#}");
    assert_eq!(report["namespaces"].as_array().unwrap().len(), 3);
    assert_eq!(report["commands"][0]["stdout"], "from-a\n");
}

#[test]
fn what_the_kernel_cannot_emulate_is_refused_by_name() {
    if skip() {
        return;
    }
    let scratch = common::Scratch::new("labk-refuse");
    let dir = scratch.path();
    let topo = write_topology(dir, "delay = \"5ms\"", "");
    let out = fanout()
        .args(["lab", "run", "--profile", "kernel"])
        .arg(&topo)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("link a -> sw: delay 5ms") && stderr.contains("netem"),
        "{stderr}"
    );
}

#[test]
fn killing_a_kernel_run_midway_leaves_nothing_behind() {
    if skip() {
        return;
    }
    let scratch = common::Scratch::new("labk-kill");
    let dir = scratch.path();
    // A unique sleep length marks our processes.
    let marker = format!("778.{}", std::process::id());
    let commands = lab_cli::sleeping_commands(&marker);
    let topo = write_topology(dir, "", &commands);
    // Up: two hosts and the switch.
    lab_cli::sigterm_midway_leaves_nothing(&["--profile", "kernel"], &topo, 3, &marker);
}
