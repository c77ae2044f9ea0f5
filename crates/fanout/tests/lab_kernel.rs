//! `fanout lab run --profile kernel` end to end, as root in namespaces it
//! creates: the report says which profile ran and carries the kernel's link
//! counters; what the kernel cannot emulate is refused by name; a run
//! killed midway (SIGTERM) leaves no namespace — the switch's included —
//! and no process behind. Skipped without namespace support unless
//! FANOUT_NETNS_REQUIRED=1.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
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

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fanout-labk-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

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
    let dir = scratch("report");
    let topo = write_topology(
        &dir,
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
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn what_the_kernel_cannot_emulate_is_refused_by_name() {
    if skip() {
        return;
    }
    let dir = scratch("refuse");
    let topo = write_topology(&dir, "delay = \"5ms\"", "");
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
fn killing_a_kernel_run_midway_leaves_nothing_behind() {
    if skip() {
        return;
    }
    let dir = scratch("kill");
    let marker = format!("778.{}", std::process::id());
    let commands = format!(
        "[[command]]\nhost = \"a\"\ncmd = \"sleep {marker}\"\n\
         [[command]]\nhost = \"b\"\ncmd = \"sleep {marker}\"\nbackground = true\n"
    );
    let topo = write_topology(&dir, "", &commands);
    let mut child = fanout()
        .args(["lab", "run", "--profile", "kernel", "--timeout", "120"])
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
    // Up: two hosts and the switch, both commands running.
    let mut up = false;
    for _ in 0..300 {
        if ours().len() == 3 && processes_with(&marker).len() >= 2 {
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
