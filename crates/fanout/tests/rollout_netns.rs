//! An operator's rollout over real IP multicast in namespaces this test
//! creates (10.77.0.0/24, 239.77.0.9; nothing reaches the root namespace):
//! 16 receiver services on 8 hosts, two per host, each told only the group
//! and its interface, take two sessions — three files, then a directory
//! tree. During the first, one service's disk is made full (the sender
//! names that receiver failed, with its reason, within a second, and exits
//! 3 under `--require all`) and another service is killed and started
//! again (it resumes: it receives no more than what its `.part` lacked,
//! plus 5%). Every other copy arrives identical. Every wait is bounded;
//! the LAN guard kills what runs in it and removes it, panics too.

#![expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]

mod common;
use common::{wait_for_len, write_random};
use common::{Scratch, SmallDisk};
use fanout_netns::{require_netns, LanTopology, NsChild};
use std::io::BufRead;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fanout");
const GROUP: &str = "239.77.0.9:7090";
const SENDER: &str = "10.77.0.1:6090";
/// Receiver hosts; each runs two services.
const HOSTS: usize = 8;
const SERVICES: usize = 2 * HOSTS;
/// The service whose disk fills (host 8's first) and the one killed and
/// restarted (host 7's first), as indexes into the services.
const FULL: usize = 14;
const KILLED: usize = 12;

/// Starts service `i` (host `1 + i / 2`) writing into `out`.
fn start_service(lan: &LanTopology, i: usize, out: &Path) -> NsChild {
    let h = lan.host(1 + i / 2);
    let ip = h.ipv4().to_string();
    let mut cmd = h.netns().exec(BIN);
    cmd.args(["recv", "--serve", "--group", GROUP, "--interface", &ip])
        .arg("--quiet")
        .arg("-o")
        .arg(out)
        .arg("--events")
        .arg(out.with_extension("events"))
        .arg("--status-file")
        .arg(out.with_extension("status"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    h.netns().spawn(cmd).expect("spawn service")
}

/// Starts the sender of `paths` with `extra` flags; its stderr lines are
/// collected, each stamped when it arrived.
fn start_sender(
    lan: &LanTopology,
    paths: &[PathBuf],
    extra: &[&str],
) -> (NsChild, std::thread::JoinHandle<Vec<(Instant, String)>>) {
    let mut cmd = lan.host(0).netns().exec(BIN);
    cmd.arg("send")
        .args(paths)
        .args(["--group", GROUP, "--bind", SENDER, "--json"])
        .args(["--wait-for", &SERVICES.to_string(), "--wait-secs", "30"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut tx = lan.host(0).netns().spawn(cmd).expect("spawn sender");
    let stderr = tx.child_mut().stderr.take().unwrap();
    let lines = std::thread::spawn(move || {
        std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .map(|l| (Instant::now(), l))
            .collect()
    });
    (tx, lines)
}

/// Waits for the sender; its exit code and JSON report.
fn finish_sender(tx: &mut NsChild) -> (Option<i32>, serde_json::Value) {
    let stdout = common::read_all(tx.child_mut().stdout.take().unwrap());
    let status = tx
        .wait_timeout(Duration::from_secs(120))
        .expect("wait")
        .expect("the sender finishes");
    let out = stdout.join().unwrap();
    let report = serde_json::from_slice(&out)
        .unwrap_or_else(|e| panic!("sender JSON ({e}): {}", String::from_utf8_lossy(&out)));
    (status.code(), report)
}

/// The events a service wrote, parsed.
fn events(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.with_extension("events"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn sixteen_services_on_eight_hosts_take_files_and_a_tree_through_a_full_disk_and_a_restart() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let scratch = Scratch::new("rollout");
    let dir = scratch.path();
    // Session 1: three files; session 2: a tree.
    let src = dir.join("src");
    let files: Vec<(PathBuf, Vec<u8>)> = [("a.bin", 24 << 20), ("b.bin", 1 << 20), ("c.txt", 3000)]
        .iter()
        .enumerate()
        .map(|(i, (name, len))| {
            let p = src.join(name);
            let data = write_random(&p, *len, 90 + i as u64);
            (p, data)
        })
        .collect();
    let tree: Vec<(String, Vec<u8>)> = [
        ("release/bin/tool", 300_000),
        ("release/lib/libx.so", 1_200_000),
        ("release/share/doc/README", 2_000),
        ("release/share/empty", 0),
    ]
    .iter()
    .enumerate()
    .map(|(i, (rel, len))| {
        (
            rel.to_string(),
            write_random(&src.join(rel), *len, 95 + i as u64),
        )
    })
    .collect();
    let outs: Vec<PathBuf> = (0..SERVICES)
        .map(|i| {
            let out = dir.join(format!("host{}-{}", 1 + i / 2, i % 2));
            std::fs::create_dir_all(&out).unwrap();
            out
        })
        .collect();
    // Room for session 1 and a little: filled mid-transfer, freed after.
    let disk = SmallDisk::mount(&outs[FULL], (26 << 20) + (2 << 20));
    let lan = LanTopology::new(HOSTS + 1).expect("LAN");
    let mut services: Vec<NsChild> = (0..SERVICES)
        .map(|i| start_service(&lan, i, &outs[i]))
        .collect();
    let group = IpAddr::V4(Ipv4Addr::new(239, 77, 0, 9));
    lan.wait_for_members(group, HOSTS, Duration::from_secs(5))
        .expect("bridge state");

    // Session 1, at 100 Mbit/s so that there is time to act mid-transfer.
    let paths: Vec<PathBuf> = files.iter().map(|(p, _)| p.clone()).collect();
    let (mut tx, lines) = start_sender(&lan, &paths, &["--max-rate", "100M"]);
    let killed_part = outs[KILLED].join("a.bin.part");
    wait_for_len(
        &outs[FULL].join("a.bin.part"),
        2 << 20,
        Duration::from_secs(60),
    );
    disk.fill();
    let full = Instant::now();
    // Mid-transfer, a service's status file says what it receives.
    let status: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(outs[0].with_extension("status")).unwrap())
            .unwrap();
    assert_eq!(status["state"], "receiving", "{status}");
    assert_eq!(
        status["receiving"]["name"], "a.bin, b.bin, c.txt",
        "{status}"
    );
    assert_eq!(status["receiving"]["sender"], SENDER, "{status}");
    wait_for_len(&killed_part, 6 << 20, Duration::from_secs(60));
    services[KILLED].kill().expect("kill");
    let _ = services[KILLED].wait_timeout(Duration::from_secs(5));
    let kept = std::fs::metadata(&killed_part).unwrap().len();
    services[KILLED] = start_service(&lan, KILLED, &outs[KILLED]);
    let (code, report) = finish_sender(&mut tx);
    let lines = lines.join().unwrap();

    // The full disk: told within a second, with the receiver's reason.
    let full_addr = format!("{}:", lan.host(1 + FULL / 2).ipv4());
    let (told, line) = lines
        .iter()
        .find(|(_, l)| l.contains(&full_addr) && l.contains("failed"))
        .unwrap_or_else(|| panic!("no failure line: {lines:?}"));
    assert!(line.contains("No space left"), "{line}");
    let delay = told.saturating_duration_since(full);
    assert!(delay < Duration::from_secs(1), "told after {delay:?}");
    assert_eq!(code, Some(3), "--require all: {}", report["receivers"]);
    let members = report["members"].as_array().unwrap();
    let failed: Vec<_> = members
        .iter()
        .filter(|m| m["outcome"] == "failed")
        .collect();
    assert_eq!(failed.len(), 1, "{members:?}");
    assert!(failed[0]["addr"].as_str().unwrap().starts_with(&full_addr));
    // The killed service's old member is let go by the new process.
    let restarted: Vec<_> = members
        .iter()
        .filter(|m| m["outcome"] == "restarted")
        .collect();
    assert_eq!(restarted.len(), 1, "{members:?}");
    let killed_addr = format!("{}:", lan.host(1 + KILLED / 2).ipv4());
    assert!(restarted[0]["addr"]
        .as_str()
        .unwrap()
        .starts_with(&killed_addr));
    assert_eq!(
        report["receivers"]["completed"].as_u64(),
        Some(SERVICES as u64 - 1),
        "{}",
        report["receivers"]
    );

    // The restarted service resumed: what it received after the restart
    // is what its files lacked, plus at most 5%.
    let start = Instant::now();
    let resumed = loop {
        let done = events(&outs[KILLED])
            .into_iter()
            .find(|e| e["event"] == "completed");
        if let Some(e) = done {
            break e;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no resume");
        std::thread::sleep(Duration::from_millis(50));
    };
    let t = &resumed["transport"];
    let resumed_at = t["resumed_at"].as_u64().unwrap_or(0);
    let manifest = fanout_io::SourceTree::scan(&paths).unwrap().manifest;
    let stream = manifest.encode().len() as u64 + manifest.size + 32;
    let remainder = stream - resumed_at;
    let received = t["payload_bytes_received"].as_u64().unwrap()
        + t["catch_up_payload_bytes_received"].as_u64().unwrap();
    assert!(
        resumed_at >= kept / 2,
        "resumed at {resumed_at}, {kept} kept: {t}"
    );
    assert!(
        received as f64 <= remainder as f64 * 1.05,
        "received {received} after the restart for a remainder of {remainder}: {t}"
    );
    eprintln!(
        "disk full told after {delay:?}; resumed at {resumed_at} of {stream}: received {received} for a remainder of {remainder} ({:.4}×)",
        received as f64 / remainder as f64
    );

    // Session 2: the tree, to all 16 (the full disk has room again).
    disk.free();
    let (mut tx, _) = start_sender(&lan, &[src.join("release")], &[]);
    let (code, report) = finish_sender(&mut tx);
    assert_eq!(code, Some(0), "{}", report["receivers"]);
    assert_eq!(
        report["receivers"]["completed"].as_u64(),
        Some(SERVICES as u64)
    );

    for (i, out) in outs.iter().enumerate() {
        // Session 2 recorded before the service is stopped.
        let start = Instant::now();
        while events(out)
            .iter()
            .filter(|e| e["event"] == "completed")
            .count()
            < if i == FULL || i == KILLED { 1 } else { 2 }
            || !out.join("release/share/empty").exists()
        {
            assert!(start.elapsed() < Duration::from_secs(20), "service {i}");
            std::thread::sleep(Duration::from_millis(20));
        }
        let pid = services[i].pid().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let status = services[i]
            .wait_timeout(Duration::from_secs(10))
            .unwrap()
            .expect("the service stops on SIGTERM");
        assert!(status.success(), "service {i}: {status:?}");
        for (rel, data) in &tree {
            let got = std::fs::read(out.join(rel)).unwrap_or_else(|e| panic!("{i} {rel}: {e}"));
            assert!(got == *data, "service {i}: {rel} differs");
        }
        for (path, data) in &files {
            let got = out.join(path.file_name().unwrap());
            if i == FULL {
                assert!(!got.exists(), "service {i}: no file from the full disk");
                continue;
            }
            let bytes = std::fs::read(&got).unwrap_or_else(|e| panic!("{}: {e}", got.display()));
            assert!(bytes == *data, "{} differs", got.display());
        }
    }
}
