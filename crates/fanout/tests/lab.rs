//! `fanout lab run` end to end, as root in namespaces it creates: a real
//! fanout transfer over an emulated lossy path, a timeout, and a run killed
//! midway (SIGTERM, as Ctrl-C would) that must leave no namespace and no
//! process behind. Skipped without namespace support unless
//! FANOUT_NETNS_REQUIRED=1.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn skip() -> bool {
    if let Some(reason) = fanout_netns::require_netns() {
        eprintln!("skipped: {reason}");
        return true;
    }
    false
}

fn fanout() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fanout"))
}

/// A fresh directory for this test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fanout-lab-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

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
    let dir = scratch("transfer");
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
    let topo = write_topology(&dir, &commands);
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
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_timeout_kills_the_commands_and_fails_the_run() {
    if skip() {
        return;
    }
    let dir = scratch("timeout");
    let topo = write_topology(
        &dir,
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
    let _ = std::fs::remove_dir_all(&dir);
}

/// PIDs of processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmdline).contains(marker) {
                pids.push(pid);
            }
        }
    }
    pids
}

#[test]
fn killing_a_run_midway_leaves_nothing_behind() {
    if skip() {
        return;
    }
    let dir = scratch("kill");
    // A unique sleep length marks our processes.
    let marker = format!("777.{}", std::process::id());
    let commands = format!(
        "[[command]]\nhost = \"a\"\ncmd = \"sleep {marker}\"\n\
         [[command]]\nhost = \"b\"\ncmd = \"sleep {marker}\"\nbackground = true\n"
    );
    let topo = write_topology(&dir, &commands);
    let mut child = fanout()
        .args(["lab", "run", "--timeout", "120"])
        .arg(&topo)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let prefix = format!("{}{}-", fanout_netns::NAME_PREFIX, child.id());
    let ours = || {
        fanout_netns::list_namespaces()
            .unwrap()
            .into_iter()
            .filter(|n| n.starts_with(&prefix))
            .collect::<Vec<_>>()
    };
    // Wait until the lab is up and both commands run.
    let mut up = false;
    for _ in 0..300 {
        if ours().len() == 2 && processes_with(&marker).len() >= 2 {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(up, "lab never came up: {:?}", ours());
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut exited = None;
    for _ in 0..600 {
        if let Some(s) = child.try_wait().unwrap() {
            exited = Some(s);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let Some(status) = exited else {
        let _ = child.kill();
        panic!("fanout lab run did not stop within 30 s of SIGTERM");
    };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!status.success(), "a cancelled run must fail");
    assert!(stdout.contains("Cancelled"), "stdout: {stdout}");
    assert_eq!(ours(), Vec::<String>::new(), "namespaces left behind");
    assert_eq!(
        processes_with(&marker),
        Vec::<u32>::new(),
        "processes left behind"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
