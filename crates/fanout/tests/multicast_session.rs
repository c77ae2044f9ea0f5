//! `fanout send --group` / `fanout recv --group` over real IP multicast, in a
//! bridged LAN of network namespaces this test creates (10.77.0.0/24,
//! 239.77.0.1, TTL 1; nothing reaches the root namespace). Every wait is
//! bounded; the LAN guard kills what runs in it and removes it, panics too.
//! File size: 32 MiB, or 256 MiB with FANOUT_BIG_TESTS=1.

#![expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]

mod common;
use common::{wait_for_len, write_random};
use common::{Scratch, SmallDisk};
use fanout_netns::{require_netns, LanTopology, NsChild};
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fanout");
const GROUP: &str = "239.77.0.1:7000";
const SENDER: &str = "10.77.0.1:6000";
const RECEIVERS: usize = 8;

fn file_size() -> usize {
    if std::env::var("FANOUT_BIG_TESTS").is_ok_and(|v| v == "1") {
        256 << 20
    } else {
        32 << 20
    }
}

fn start_receiver(lan: &LanTopology, host: usize, out: &Path, extra: &[&str]) -> NsChild {
    let h = lan.host(host);
    let ip = h.ipv4().to_string();
    let mut cmd = h.netns().exec(BIN);
    cmd.args([
        "recv",
        "--group",
        GROUP,
        "--from",
        SENDER,
        "--json",
        "--quiet",
        "--interface",
        &ip,
        "--idle-timeout",
        "20",
        "-o",
    ])
    .arg(out)
    .args(extra)
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    h.netns().spawn(cmd).expect("spawn receiver")
}

/// Waits for `child` (bounded) and returns (success, stdout).
fn finish(child: &mut NsChild, limit: Duration) -> (bool, String) {
    let (code, out) = finish_with_code(child, limit);
    (code == Some(0), out)
}

/// Waits for `child` (bounded) and returns (exit code, stdout).
fn finish_with_code(child: &mut NsChild, limit: Duration) -> (Option<i32>, String) {
    let status = child.wait_timeout(limit).expect("wait").unwrap_or_else(|| {
        let _ = child.kill();
        panic!("process {} did not finish within {limit:?}", child.pid())
    });
    let mut out = String::new();
    if let Some(so) = child.child_mut().stdout.as_mut() {
        let _ = so.read_to_string(&mut out);
    }
    (status.code(), out)
}

/// Starts `fanout send SRC --group GROUP --bind SENDER --wait-for N --json`
/// on host 0 with `extra` flags; stdout piped, stderr piped if `stderr`.
fn start_sender(
    lan: &LanTopology,
    src: &Path,
    wait_for: usize,
    extra: &[&str],
    stderr: bool,
) -> NsChild {
    let mut cmd = lan.host(0).netns().exec(BIN);
    cmd.arg("send")
        .arg(src)
        .args(["--group", GROUP, "--bind", SENDER, "--json"])
        .args(["--wait-for", &wait_for.to_string()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(if stderr {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    lan.host(0).netns().spawn(cmd).expect("spawn sender")
}

struct Run {
    /// The sender's exit code.
    sender_code: Option<i32>,
    sender: serde_json::Value,
    receivers: Vec<(bool, Option<serde_json::Value>)>,
    outs: Vec<PathBuf>,
    /// Holds `outs`; removed when the run is dropped.
    _scratch: Scratch,
}

/// One session: sender on host 0, receivers on hosts 1..=8; `extra(i)` adds
/// receiver flags; `during` runs once the sender started.
fn session(
    tag: &str,
    data_len: usize,
    extra: impl Fn(usize) -> Vec<&'static str>,
    sender_extra: &[&str],
    during: impl FnOnce(&LanTopology, &mut [NsChild], &[PathBuf]),
) -> Option<(Run, Vec<u8>)> {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return None;
    }
    let scratch = Scratch::new(&format!("mc-{tag}"));
    let dir = scratch.path();
    let src = dir.join("payload.bin");
    let data = write_random(&src, data_len, 7);
    let lan = LanTopology::new(RECEIVERS + 1).expect("LAN");
    let outs: Vec<PathBuf> = (1..=RECEIVERS)
        .map(|i| dir.join(format!("got{i}.bin")))
        .collect();
    let mut rx: Vec<NsChild> = (1..=RECEIVERS)
        .map(|i| start_receiver(&lan, i, &outs[i - 1], &extra(i)))
        .collect();
    let group = IpAddr::V4(Ipv4Addr::new(239, 77, 0, 1));
    let members = lan
        .wait_for_members(group, RECEIVERS, Duration::from_secs(5))
        .expect("bridge state");
    assert_eq!(members.len(), RECEIVERS, "the bridge learned {members:?}");
    let extra = [&["--quiet"], sender_extra].concat();
    let mut tx = start_sender(&lan, &src, RECEIVERS, &extra, true);
    // The sender's stderr (quiet: errors only), read while it runs.
    let stderr = tx.child_mut().stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::BufReader::new(stderr).read_to_string(&mut text);
        text
    });
    during(&lan, &mut rx, &outs);
    let (sender_code, out) = finish_with_code(&mut tx, Duration::from_secs(120));
    let errors = errors.join().unwrap();
    let sender: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| {
        panic!("sender (exit {sender_code:?}) JSON: {e}: {out}\nstderr: {errors}")
    });
    let receivers = rx
        .iter_mut()
        .map(|c| {
            let (ok, out) = finish(c, Duration::from_secs(30));
            (ok, serde_json::from_str(&out).ok())
        })
        .collect();
    let run = Run {
        sender_code,
        sender,
        receivers,
        outs,
        _scratch: scratch,
    };
    let _ = std::fs::remove_file(&src);
    Some((run, data))
}

/// Every receiver completed with a verified file equal to `data`, and the
/// sender counted all eight as members.
fn every_receiver_verified(run: &Run, data: &[u8]) {
    for (i, (ok, report)) in run.receivers.iter().enumerate() {
        assert!(ok, "receiver {} failed", i + 1);
        assert_eq!(report.as_ref().unwrap()["verified"], true);
        assert!(
            std::fs::read(&run.outs[i]).unwrap() == data,
            "receiver {} file differs",
            i + 1
        );
    }
    assert_eq!(run.sender["transport"]["members_joined"], 8);
    assert_eq!(run.sender_code, Some(0), "{}", run.sender["receivers"]);
    let tally = &run.sender["receivers"];
    assert_eq!(
        (tally["completed"].as_u64(), tally["met"].as_bool()),
        (Some(8), Some(true))
    );
    for m in run.sender["members"].as_array().unwrap() {
        assert_eq!(m["outcome"], "completed", "{m}");
    }
}

#[test]
fn eight_receivers_get_identical_files_with_two_lossy() {
    let len = file_size();
    // Receivers 1 and 2 drop 1% of what reaches them. Per-segment repair
    // with a threshold of 1 (never multicast) makes every repair a unicast
    // one, so the unicast repair path over real sockets is exercised.
    let Some((run, data)) = session(
        "lossy",
        len,
        |i| {
            if i <= 2 {
                vec!["--inject-loss", "0.01"]
            } else {
                vec![]
            }
        },
        &["--repair", "segment", "--repair-threshold", "1"],
        |_, _, _| {},
    ) else {
        return;
    };
    every_receiver_verified(&run, &data);
    let t = &run.sender["transport"];
    let segments = t["data_segments_multicast"].as_u64().unwrap();
    assert!(
        segments < (len as u64 / 1000),
        "data multicast once, not per receiver: {segments}"
    );
    let (uni, multi) = (
        t["unicast_repairs"].as_u64().unwrap(),
        t["multicast_repairs"].as_u64().unwrap(),
    );
    assert!(uni > 0 && multi == 0, "{t}");
    eprintln!(
        "lossy session: {:.2} s, {:.0} Mbit/s, repairs {uni} unicast / {multi} multicast",
        run.sender["seconds"].as_f64().unwrap(),
        run.sender["goodput_bps"].as_f64().unwrap() / 1e6
    );
}

/// Runs a session in which receiver 5 is killed once its file is being
/// written (every host with `args` too); checks that the others complete
/// and the killed one left, and returns the sender's report.
fn run_with_a_killed_receiver(
    tag: &str,
    args: &'static [&'static str],
) -> Option<serde_json::Value> {
    let len = file_size();
    let mut sender_args = vec!["--stall-timeout", "3", "--window-mib", "2"];
    sender_args.extend_from_slice(args);
    let (run, data) = session(
        tag,
        len,
        |_| args.to_vec(),
        &sender_args,
        |_, rx, outs| {
            // Kill receiver 5 once its file is being written.
            let part = {
                let mut p = outs[4].clone().into_os_string();
                p.push(".part");
                PathBuf::from(p)
            };
            let start = Instant::now();
            while std::fs::metadata(&part).map_or(0, |m| m.len()) == 0 {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "transfer never started"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            rx[4].kill().expect("kill receiver 5");
        },
    )?;
    for (i, (ok, _)) in run.receivers.iter().enumerate() {
        if i == 4 {
            continue;
        }
        assert!(ok, "receiver {} failed", i + 1);
        assert!(
            std::fs::read(&run.outs[i]).unwrap() == data,
            "receiver {} file differs",
            i + 1
        );
    }
    assert!(
        !run.outs[4].exists(),
        "the killed receiver has no complete-looking file"
    );
    let left: Vec<_> = run.sender["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| !m["left"].is_null())
        .collect();
    assert_eq!(left.len(), 1, "{}", run.sender["members"]);
    // Killed without a word, it is evicted by the sender, which says why,
    // and `--require all` (the default) makes the sender's exit code 3.
    assert_eq!(left[0]["outcome"], "evicted", "{}", left[0]);
    assert!(!left[0]["reason"].as_str().unwrap().is_empty());
    let tally = &run.sender["receivers"];
    assert_eq!(
        (tally["joined"].as_u64(), tally["completed"].as_u64()),
        (Some(8), Some(7)),
        "{tally}"
    );
    assert_eq!(run.sender_code, Some(3), "{tally}");
    Some(run.sender)
}

#[test]
fn a_killed_receiver_is_evicted_and_the_rest_complete() {
    run_with_a_killed_receiver("killed", &[]);
}

/// Protected, the killed receiver held the group key: its eviction
/// replaces the key for the others (`docs/wire.md` §4.12, key update),
/// over real sockets and real IP multicast.
#[test]
fn a_killed_protected_receiver_is_evicted_and_the_group_key_replaced() {
    let psk = common::PskFile::new("mc-kill", 0x6b);
    let args: &'static [&'static str] =
        Box::leak(vec!["--psk-file", psk.leak_path()].into_boxed_slice());
    let Some(sender) = run_with_a_killed_receiver("killed-protected", args) else {
        return;
    };
    let updates = sender["transport"]["group_key_updates"].as_u64().unwrap();
    assert_eq!(updates, 1, "{}", sender["transport"]);
}

/// A protected session over real IP multicast: every receiver holds the
/// pre-shared key, data goes to the group sealed under the group key and
/// named by the sender's signed lists, two receivers lose 1%; all eight
/// verify identical files.
#[test]
fn a_protected_session_delivers_to_every_receiver_over_multicast() {
    let psk_file = common::PskFile::new("mc-key", 0x5a);
    let psk = psk_file.leak_path();
    let len = file_size();
    let result = session(
        "protected",
        len,
        |i| {
            let mut v = vec!["--psk-file", psk];
            if i <= 2 {
                v.extend(["--inject-loss", "0.01"]);
            }
            v
        },
        &["--psk-file", psk],
        |_, _, _| {},
    );
    drop(psk_file);
    let Some((run, data)) = result else {
        return;
    };
    every_receiver_verified(&run, &data);
    eprintln!(
        "protected session: {:.2} s, {:.0} Mbit/s",
        run.sender["seconds"].as_f64().unwrap(),
        run.sender["goodput_bps"].as_f64().unwrap() / 1e6
    );
}

/// A receiver whose disk fills mid-transfer tells the sender at once: the
/// sender prints that this receiver failed, with the receiver's reason,
/// within a second of the disk filling, lists it as `failed` in its
/// report, and exits 3 under `--require all` (the default) while the
/// others complete; with `--require 2` the same run exits 0.
#[test]
fn a_receiver_whose_disk_fills_is_reported_failed_at_once_with_its_reason() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let scratch = Scratch::new("mc-disk-full");
    let dir = scratch.path();
    let len = file_size();
    let src = dir.join("payload.bin");
    let data = write_random(&src, len, 11);
    // Room for the file and 4 MiB: the free-space check at the start
    // passes, the filler below takes the rest mid-transfer.
    let disk = SmallDisk::mount(&dir.join("small"), len + (4 << 20));
    let lan = LanTopology::new(4).expect("LAN");
    let outs = [
        dir.join("got1.bin"),
        dir.join("small").join("got2.bin"),
        dir.join("got3.bin"),
    ];
    for require in ["all", "2"] {
        for out in &outs {
            let _ = std::fs::remove_file(out);
        }
        let _ = std::fs::remove_file(dir.join("small").join("filler"));
        let mut rx: Vec<NsChild> = (1..=3)
            .map(|i| start_receiver(&lan, i, &outs[i - 1], &[]))
            .collect();
        let group = IpAddr::V4(Ipv4Addr::new(239, 77, 0, 1));
        lan.wait_for_members(group, 3, Duration::from_secs(5))
            .expect("bridge state");
        let extra = ["--window-mib", "2", "--require", require];
        let mut tx = start_sender(&lan, &src, 3, &extra, true);
        // The sender's stderr, each line stamped when it arrived.
        let stderr = tx.child_mut().stderr.take().unwrap();
        let lines = std::thread::spawn(move || {
            use std::io::BufRead;
            std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
                .map(|l| (Instant::now(), l))
                .collect::<Vec<_>>()
        });
        let part = dir.join("small").join("got2.bin.part");
        wait_for_len(&part, 1 << 20, Duration::from_secs(30));
        disk.fill();
        let full = Instant::now();
        let (code, out) = finish_with_code(&mut tx, Duration::from_secs(120));
        let lines = lines.join().unwrap();
        let report: serde_json::Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("sender JSON ({e}): {out} {lines:?}"));
        let failed_addr = lan.host(2).ipv4().to_string();
        let (told, line) = lines
            .iter()
            .find(|(_, l)| l.contains(&failed_addr) && l.contains("failed"))
            .unwrap_or_else(|| panic!("no failure line: {lines:?}"));
        assert!(line.contains("No space left"), "{line}");
        let delay = told.saturating_duration_since(full);
        assert!(delay < Duration::from_secs(1), "told after {delay:?}");
        let members = report["members"].as_array().unwrap();
        let failed: Vec<_> = members
            .iter()
            .filter(|m| m["outcome"] != "completed")
            .collect();
        assert_eq!(failed.len(), 1, "{members:?}");
        assert_eq!(failed[0]["outcome"], "failed");
        assert!(failed[0]["addr"]
            .as_str()
            .unwrap()
            .starts_with(&failed_addr));
        assert!(
            failed[0]["reason"]
                .as_str()
                .unwrap()
                .contains("No space left"),
            "{}",
            failed[0]
        );
        let want = if require == "all" { 3 } else { 0 };
        assert_eq!(
            code,
            Some(want),
            "--require {require}: {}",
            report["receivers"]
        );
        for (i, c) in rx.iter_mut().enumerate() {
            let (ok, _) = finish(c, Duration::from_secs(30));
            assert_eq!(ok, i != 1, "receiver {}", i + 1);
        }
        for i in [0, 2] {
            assert!(std::fs::read(&outs[i]).unwrap() == data);
        }
        assert!(!outs[1].exists() && !part.exists(), "no partial file left");
        eprintln!(
            "--require {require}: exit {code:?}, failure told {delay:?} after the disk filled"
        );
    }
}

/// Receivers told only the group and their interface (no `--from`) find
/// the sender by its announcements and get the file; two of them share one
/// host (each has its own address in the session, so neither is taken for
/// the other); started before the sender or after it began waiting, they
/// join all the same.
#[test]
fn receivers_told_only_the_group_find_the_sender_two_on_one_host() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let scratch = Scratch::new("mc-discovery");
    let dir = scratch.path();
    let len = 4 << 20;
    let src = dir.join("payload.bin");
    let data = write_random(&src, len, 13);
    let lan = LanTopology::new(3).expect("LAN");
    let receiver = |host: usize, n: usize| {
        let h = lan.host(host);
        let ip = h.ipv4().to_string();
        let mut cmd = h.netns().exec(BIN);
        cmd.args([
            "recv",
            "--group",
            GROUP,
            "--interface",
            &ip,
            "--json",
            "--quiet",
        ])
        .args(["--wait", "30", "-o"])
        .arg(dir.join(format!("got{n}.bin")))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        h.netns().spawn(cmd).expect("spawn receiver")
    };
    // Two receivers on host 1 before the sender, one on host 2 after the
    // sender started waiting.
    let mut rx = vec![receiver(1, 1), receiver(1, 2)];
    let group = IpAddr::V4(Ipv4Addr::new(239, 77, 0, 1));
    lan.wait_for_members(group, 1, Duration::from_secs(5))
        .expect("bridge state");
    let mut tx = start_sender(&lan, &src, 3, &["--quiet"], false);
    std::thread::sleep(Duration::from_millis(500));
    rx.push(receiver(2, 3));
    let (code, out) = finish_with_code(&mut tx, Duration::from_secs(60));
    let report: serde_json::Value = serde_json::from_str(&out).expect("sender JSON");
    assert_eq!(code, Some(0), "{}", report["receivers"]);
    assert_eq!(
        report["receivers"]["completed"], 3,
        "{}",
        report["receivers"]
    );
    let addrs: std::collections::BTreeSet<&str> = report["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["addr"].as_str().unwrap())
        .collect();
    assert_eq!(addrs.len(), 3, "three distinct members: {addrs:?}");
    for (i, c) in rx.iter_mut().enumerate() {
        let (ok, out) = finish(c, Duration::from_secs(30));
        assert!(ok, "receiver {}: {out}", i + 1);
        let got: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(got["peer"], SENDER, "joined the announcer");
        assert!(std::fs::read(dir.join(format!("got{}.bin", i + 1))).unwrap() == data);
    }
}
