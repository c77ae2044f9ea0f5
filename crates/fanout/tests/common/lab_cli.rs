//! Helpers of both lab profiles' CLI tests (`lab.rs`, `lab_kernel.rs`),
//! among them the teardown check: a `fanout lab run` killed with SIGTERM
//! midway must fail its run and leave no namespace and no process behind.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// True (after saying why) when namespaces are unavailable and not
/// required (FANOUT_NETNS_REQUIRED=1).
pub fn skip() -> bool {
    if let Some(reason) = fanout_netns::require_netns() {
        eprintln!("skipped: {reason}");
        return true;
    }
    false
}

/// The CLI under test.
pub fn fanout() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fanout"))
}

/// PIDs of processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
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

/// Two `[[command]]`s running `sleep MARKER` on hosts `a` (foreground) and
/// `b` (background); `marker` must be a unique, valid sleep length.
pub fn sleeping_commands(marker: &str) -> String {
    format!(
        "[[command]]\nhost = \"a\"\ncmd = \"sleep {marker}\"\n\
         [[command]]\nhost = \"b\"\ncmd = \"sleep {marker}\"\nbackground = true\n"
    )
}

/// Starts `fanout lab run EXTRA_ARGS --timeout 120 TOPO` (whose commands
/// come from [`sleeping_commands`] with `marker`), waits until its
/// `namespaces` namespaces exist and both commands run, sends SIGTERM, and
/// checks the run failed as cancelled and left nothing behind.
pub fn sigterm_midway_leaves_nothing(
    extra_args: &[&str],
    topo: &Path,
    namespaces: usize,
    marker: &str,
) {
    let mut child = fanout()
        .args(["lab", "run"])
        .args(extra_args)
        .args(["--timeout", "120"])
        .arg(topo)
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
    let mut up = false;
    for _ in 0..300 {
        if ours().len() == namespaces && processes_with(marker).len() >= 2 {
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
        processes_with(marker),
        Vec::<u32>::new(),
        "processes left behind"
    );
}
