//! `fanout lab run` end to end, as root in namespaces it creates: a real
//! fanout transfer over an emulated lossy path, a timeout, and a run killed
//! midway (SIGTERM, as Ctrl-C would) that must leave no namespace and no
//! process behind. Skipped without namespace support unless
//! FANOUT_NETNS_REQUIRED=1.

mod common;
#[path = "common/lab_cli.rs"]
mod lab_cli;

use lab_cli::{fanout, skip};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

fn write_topology(dir: &Path, commands: &str) -> PathBuf {
    // This file tests the run's mechanics (commands, output, teardown), not
    // the emulator's precision (fanout-lab's selfcheck does): a loose
    // lateness bound keeps a loaded machine from failing it.
    let text = format!(
        r#"
        max_lateness_p99 = "20ms"
        [[host]]
        name = "a"
        [[host]]
        name = "b"
        [[link]]
        from = "a"
        to = "b"
        rate = "20Mbit"
        delay = "5ms"
        loss = {{ model = "bernoulli", p = 0.01 }}
        [[link]]
        from = "b"
        to = "a"
        rate = "20Mbit"
        delay = "5ms"
        {commands}
        "#
    );
    let path = dir.join("topo.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn runs_a_transfer_and_reports_every_command() {
    if skip() {
        return;
    }
    let scratch = common::Scratch::new("lab-transfer");
    let dir = scratch.path();
    let file = dir.join("payload.bin");
    let bytes: Vec<u8> = (0..2_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&file, &bytes).unwrap();
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let commands = format!(
        r#"
        [[command]]
        host = "b"
        cmd = "fanout recv --listen {{ip:b}}:7000 -o {out} --wait 20 --quiet"
        [[command]]
        host = "a"
        cmd = "sleep 0.3 && fanout send {file} --to {{ip:b}}:7000 --quiet && echo sent-ok"
        "#,
        out = out_dir.display(),
        file = file.display()
    );
    let topo = write_topology(dir, &commands);
    let out = fanout()
        .args(["lab", "run", "--json", "--timeout", "60"])
        .arg(&topo)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let report = json(&out);
    assert!(out.status.success(), "{report:#}");
    assert_eq!(report["outcome"], "completed");
    assert_eq!(report["ok"], true);
    let cmds = report["commands"].as_array().unwrap();
    assert_eq!(cmds.len(), 2);
    assert!(cmds.iter().all(|c| c["exit_code"] == 0), "{cmds:#?}");
    assert_eq!(cmds[1]["stdout"].as_str().unwrap().trim(), "sent-ok");
    let got = std::fs::read(out_dir.join("payload.bin")).unwrap();
    assert!(got == bytes, "received file differs");
    // The lossy link dropped some datagrams and the transfer recovered.
    let a_to_b = &report["emulator"]["links"][0];
    assert!(
        a_to_b["drops"]["random_loss"].as_u64().unwrap() > 0,
        "{a_to_b}"
    );
    assert_eq!(
        report["emulator"]["valid"], true,
        "{:#}",
        report["emulator"]
    );
    let live = fanout_netns::list_namespaces().unwrap();
    for ns in report["namespaces"].as_array().unwrap() {
        assert!(!live.iter().any(|l| l == ns.as_str().unwrap()), "{ns} left");
    }
}

#[test]
fn a_timeout_kills_the_commands_and_fails_the_run() {
    if skip() {
        return;
    }
    let scratch = common::Scratch::new("lab-timeout");
    let dir = scratch.path();
    let topo = write_topology(
        dir,
        "[[command]]\nhost = \"a\"\ncmd = \"sleep 30\"\n[[command]]\nhost = \"b\"\ncmd = \"true\"\n",
    );
    let out = fanout()
        .args(["lab", "run", "--json", "--timeout", "1"])
        .arg(&topo)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let report = json(&out);
    assert!(!out.status.success());
    assert_eq!(report["outcome"], "timeout");
    assert_eq!(report["commands"][0]["exit_code"], serde_json::Value::Null);
    assert_eq!(report["commands"][0]["signal"], 9);
    assert_eq!(report["commands"][1]["exit_code"], 0);
    assert!(report["wall_s"].as_f64().unwrap() < 5.0, "{report:#}");
}

#[test]
fn killing_a_run_midway_leaves_nothing_behind() {
    if skip() {
        return;
    }
    let scratch = common::Scratch::new("lab-kill");
    let dir = scratch.path();
    // A unique sleep length marks our processes.
    let marker = format!("777.{}", std::process::id());
    let commands = lab_cli::sleeping_commands(&marker);
    let topo = write_topology(dir, &commands);
    // Up: the two hosts.
    lab_cli::sigterm_midway_leaves_nothing(&[], &topo, 2, &marker);
}
