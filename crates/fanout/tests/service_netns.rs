//! `fanout recv --serve` over real IP multicast in namespaces this test
//! creates (10.77.0.0/24, 239.77.0.1): receiver services, two per host,
//! told only the group and their interface, take two sessions in a row;
//! each file arrives whole, the post-receive command runs, the status file
//! and the event lines say what happened, and SIGTERM stops them cleanly.

#![expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]

mod common;
use common::Scratch;
use common::{wait_for_len, write_random};
use fanout_netns::{require_netns, LanTopology, NsChild};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_fanout");
const GROUP: &str = "239.77.0.1:7000";
const SENDER: &str = "10.77.0.1:6000";
/// Receiver hosts; each runs two services.
const HOSTS: usize = 3;

/// Starts a service on `host` writing into `out` (created), with its
/// status file and events there, and `extra` flags.
fn start_service(lan: &LanTopology, host: usize, out: &Path, extra: &[&str]) -> NsChild {
    std::fs::create_dir_all(out).unwrap();
    let h = lan.host(host);
    let ip = h.ipv4().to_string();
    let mut cmd = h.netns().exec(BIN);
    cmd.args(["recv", "--serve", "--group", GROUP, "--interface", &ip])
        .arg("--quiet")
        .arg("-o")
        .arg(out)
        .arg("--status-file")
        .arg(out.join("status.json"))
        .arg("--events")
        .arg(out.join("events.jsonl"))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    h.netns().spawn(cmd).expect("spawn service")
}

/// One session: `file` to every service, all of which must complete.
fn send(lan: &LanTopology, file: &Path, services: usize) {
    let mut cmd = lan.host(0).netns().exec(BIN);
    cmd.arg("send")
        .arg(file)
        .args(["--group", GROUP, "--bind", SENDER, "--json", "--quiet"])
        .args(["--wait-for", &services.to_string(), "--wait-secs", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut tx = lan.host(0).netns().spawn(cmd).expect("spawn sender");
    let out = common::finish(&mut tx, "sender", Duration::from_secs(60));
    assert_eq!(
        out["receivers"]["completed"].as_u64(),
        Some(services as u64),
        "{}",
        out["receivers"]
    );
}

#[test]
fn receiver_services_take_session_after_session() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let scratch = Scratch::new("service");
    let dir = scratch.path();
    let files: Vec<(PathBuf, Vec<u8>)> = [("first.bin", 3 << 20), ("second.bin", 1 << 20)]
        .iter()
        .enumerate()
        .map(|(i, (name, len))| {
            let p = dir.join("src").join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            let data = write_random(&p, *len, 30 + i as u64);
            (p, data)
        })
        .collect();
    let lan = LanTopology::new(HOSTS + 1).expect("LAN");
    let mut services: Vec<(NsChild, PathBuf)> = Vec::new();
    for host in 1..=HOSTS {
        for n in 0..2 {
            let out = dir.join(format!("host{host}-{n}"));
            let extra = ["--exec", "touch \"$FANOUT_FILE.done\""];
            services.push((start_service(&lan, host, &out, &extra), out));
        }
    }
    let group = IpAddr::V4(Ipv4Addr::new(239, 77, 0, 1));
    lan.wait_for_members(group, HOSTS, Duration::from_secs(5))
        .expect("bridge state");
    for (file, _) in &files {
        send(&lan, file, 2 * HOSTS);
    }
    for (service, out) in &mut services {
        // The last file verified and in place before the service is stopped.
        let status = out.join("status.json");
        let start = std::time::Instant::now();
        while !std::fs::read_to_string(&status).is_ok_and(|s| s.contains("\"completed\": 2")) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "second file never recorded"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let pid = service.pid().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let status = service
            .wait_timeout(Duration::from_secs(10))
            .unwrap()
            .expect("the service stops on SIGTERM");
        assert!(status.success(), "{status:?}");
        for (file, data) in &files {
            let name = file.file_name().unwrap();
            let got = out.join(name);
            let listing: Vec<_> = std::fs::read_dir(&*out)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            let events = std::fs::read_to_string(out.join("events.jsonl")).unwrap_or_default();
            let bytes = std::fs::read(&got).unwrap_or_else(|e| {
                panic!("{}: {e}; in {listing:?}; events {events}", got.display())
            });
            assert!(bytes == *data, "{}", got.display());
            let mut done = got.into_os_string();
            done.push(".done");
            assert!(Path::new(&done).exists(), "--exec ran for {name:?}");
        }
        let status: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("status.json")).unwrap())
                .unwrap();
        assert_eq!(status["state"], "stopped", "{status}");
        assert_eq!(
            (status["completed"].as_u64(), status["failed"].as_u64()),
            (Some(2), Some(0))
        );
        assert_eq!(
            status["last"]["file"],
            out.join("second.bin").display().to_string()
        );
        let events: Vec<serde_json::Value> = std::fs::read_to_string(out.join("events.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let kinds: Vec<&str> = events
            .iter()
            .map(|e| e["event"].as_str().unwrap())
            .collect();
        assert_eq!(kinds[0], "waiting", "{events:?}");
        // SIGTERM may come before or after it began waiting again.
        let kinds: Vec<&str> = kinds.into_iter().filter(|k| *k != "waiting").collect();
        assert_eq!(
            kinds,
            ["completed", "exec", "completed", "exec", "stopped"],
            "{events:?}"
        );
        let done: Vec<&serde_json::Value> = (events.iter())
            .filter(|e| e["event"] == "completed")
            .collect();
        assert_eq!(done[0]["sender"], SENDER);
        assert_ne!(done[0]["session"], done[1]["session"]);
    }
}

/// A service paused (SIGSTOP) long enough for the sender to evict it
/// resumes by itself once it continues: it joins the same session again,
/// keeps what its `.part` holds and completes the file, while the other
/// service on its host completes without a pause.
#[test]
fn an_evicted_service_joins_again_and_resumes() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let scratch = Scratch::new("service-resume");
    let dir = scratch.path();
    let src = dir.join("big.bin");
    let data = write_random(&src, 24 << 20, 44);
    let lan = LanTopology::new(2).expect("LAN");
    let outs: Vec<PathBuf> = (0..2).map(|n| dir.join(format!("svc{n}"))).collect();
    let mut services: Vec<NsChild> = outs
        .iter()
        .map(|out| start_service(&lan, 1, out, &[]))
        .collect();
    let group = IpAddr::V4(Ipv4Addr::new(239, 77, 0, 1));
    lan.wait_for_members(group, 1, Duration::from_secs(5))
        .expect("bridge state");
    let mut cmd = lan.host(0).netns().exec(BIN);
    cmd.arg("send")
        .arg(&src)
        .args(["--group", GROUP, "--bind", SENDER, "--json", "--quiet"])
        .args([
            "--wait-for",
            "2",
            "--max-rate",
            "40M",
            "--stall-timeout",
            "2",
        ])
        .args(["--require", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut tx = lan.host(0).netns().spawn(cmd).expect("spawn sender");
    let part = outs[1].join("big.bin.part");
    wait_for_len(&part, 4 << 20, Duration::from_secs(30));
    let pid = services[1].pid().to_string();
    let signal = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success())
    };
    signal("-STOP");
    std::thread::sleep(Duration::from_secs(4));
    signal("-CONT");
    let report = common::finish(&mut tx, "sender", Duration::from_secs(90));
    let members = report["members"].as_array().unwrap();
    let outcomes: Vec<&str> = members
        .iter()
        .map(|m| m["outcome"].as_str().unwrap())
        .collect();
    assert!(outcomes.contains(&"evicted"), "{outcomes:?}");
    assert_eq!(
        outcomes.iter().filter(|o| **o == "completed").count(),
        2,
        "both services complete (one after joining again): {outcomes:?}"
    );
    for (n, out) in outs.iter().enumerate() {
        let start = std::time::Instant::now();
        while !out.join("big.bin").exists() {
            assert!(start.elapsed() < Duration::from_secs(20), "service {n}");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            std::fs::read(out.join("big.bin")).unwrap() == data,
            "service {n}"
        );
    }
    let events = std::fs::read_to_string(outs[1].join("events.jsonl")).unwrap();
    let done: serde_json::Value = events
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["event"] == "completed")
        .expect("completed");
    assert!(
        done["transport"]["resumed_at"].as_u64().unwrap_or(0) >= 4 << 20,
        "{done}"
    );
    for s in &mut services {
        let pid = s.pid().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        assert!(s.wait_timeout(Duration::from_secs(10)).unwrap().is_some());
    }
}
