//! A late joiner of a file session gets the whole file: over real IP multicast
//! in a bridged LAN of network namespaces this test creates (10.77.0.0/24,
//! 239.77.0.2, TTL 1; every host link shaped to 100 Mbit/s so the transfer
//! lasts long enough to join mid-way), seven receivers start with the session
//! and an eighth joins after the others' `.part` files passed the send buffer;
//! it gets the live part by multicast and the missed prefix by unicast
//! catch-up, and all eight files are identical. Every wait is bounded; the LAN
//! guard removes everything.

#![expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]

mod common;

use fanout_netns::{require_netns, LanConfig, LanTopology, NsChild, RateLimit};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fanout");
const GROUP: &str = "239.77.0.2:7010";
const SENDER: &str = "10.77.0.1:6010";
const RECEIVERS: usize = 8;
const FILE_BYTES: usize = 32 << 20;
/// `--window-mib` of the sender: its send buffer, which the late joiner's
/// start must be beyond.
const WINDOW_MIB: u64 = 2;

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
    .stderr(Stdio::piped());
    h.netns().spawn(cmd).expect("spawn receiver")
}

/// Waits for `child` (bounded) and returns (success, stdout, stderr).
fn finish(child: &mut NsChild, limit: Duration) -> (bool, String, String) {
    let status = child.wait_timeout(limit).expect("wait").unwrap_or_else(|| {
        let _ = child.kill();
        panic!("process {} did not finish within {limit:?}", child.pid())
    });
    let (mut out, mut err) = (String::new(), String::new());
    if let Some(so) = child.child_mut().stdout.as_mut() {
        let _ = so.read_to_string(&mut out);
    }
    if let Some(se) = child.child_mut().stderr.as_mut() {
        let _ = se.read_to_string(&mut err);
    }
    (status.success(), out, err)
}

fn part_len(out: &Path) -> u64 {
    let mut p = out.to_path_buf().into_os_string();
    p.push(".part");
    std::fs::metadata(PathBuf::from(p)).map_or(0, |m| m.len())
}

/// Mean `seconds` of the receivers that started with the session.
fn early_mean_seconds(reports: &[serde_json::Value], early: usize) -> f64 {
    reports[..early]
        .iter()
        .map(|r| r["seconds"].as_f64().unwrap())
        .sum::<f64>()
        / early as f64
}

/// One session of a 32 MiB file to 8 receivers on 100 Mbit/s links; with
/// `late`, receiver 8 starts only once the others passed the send buffer.
/// Checks that all 8 files are identical; returns the sender's and the
/// receivers' reports and the others' progress when receiver 8 started.
/// `keys` go to the sender and every receiver.
fn session(
    tag: &str,
    late: bool,
    sender_args: &[&str],
    keys: &[&str],
) -> Option<(serde_json::Value, Vec<serde_json::Value>, u64)> {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return None;
    }
    let scratch = common::Scratch::new(&format!("late-{tag}"));
    let dir = scratch.path();
    let src = dir.join("payload.bin");
    let mut data = vec![0u8; FILE_BYTES];
    fanout_core::Rng::new(11).fill(&mut data);
    std::fs::File::create(&src)
        .unwrap()
        .write_all(&data)
        .unwrap();
    let config = LanConfig {
        rate_limit: Some(RateLimit::mbit(100)),
        ..LanConfig::default()
    };
    let lan = LanTopology::with_config(RECEIVERS + 1, &config).expect("LAN");
    let outs: Vec<PathBuf> = (1..=RECEIVERS)
        .map(|i| dir.join(format!("got{i}.bin")))
        .collect();
    let early = if late { RECEIVERS - 1 } else { RECEIVERS };
    let mut rx: Vec<NsChild> = (1..=early)
        .map(|i| start_receiver(&lan, i, &outs[i - 1], keys))
        .collect();
    let group = IpAddr::V4(Ipv4Addr::new(239, 77, 0, 2));
    let members = lan
        .wait_for_members(group, early, Duration::from_secs(5))
        .expect("bridge state");
    assert_eq!(members.len(), early, "the bridge learned {members:?}");
    let mut cmd = lan.host(0).netns().exec(BIN);
    cmd.arg("send")
        .arg(&src)
        .args([
            "--group",
            GROUP,
            "--bind",
            SENDER,
            "--wait-for",
            &early.to_string(),
            "--window-mib",
            &WINDOW_MIB.to_string(),
            "--json",
            "--quiet",
        ])
        .args(sender_args)
        .args(keys)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut tx = lan.host(0).netns().spawn(cmd).expect("spawn sender");
    // Join once every early receiver wrote past the send buffer: offset 0
    // has been released, so only a catch-up can give the joiner the start.
    let beyond = (2 * WINDOW_MIB) << 20;
    let t0 = Instant::now();
    while outs[..early].iter().map(|o| part_len(o)).min().unwrap() < beyond {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the early receivers never got past {beyond} bytes"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let progress_at_join = outs[..early].iter().map(|o| part_len(o)).min().unwrap();
    if late {
        assert!(
            progress_at_join < FILE_BYTES as u64 * 3 / 4,
            "transfer nearly over before the join: {progress_at_join}"
        );
        rx.push(start_receiver(&lan, RECEIVERS, &outs[RECEIVERS - 1], keys));
    }
    let (ok, out, err) = finish(&mut tx, Duration::from_secs(120));
    assert!(ok, "sender failed: {out} {err}");
    let sender: serde_json::Value = serde_json::from_str(&out).expect("sender JSON");
    let reports: Vec<serde_json::Value> = rx
        .iter_mut()
        .enumerate()
        .map(|(i, c)| {
            let (ok, out, err) = finish(c, Duration::from_secs(30));
            assert!(ok, "receiver {} failed: {err}", i + 1);
            serde_json::from_str(&out).expect("receiver JSON")
        })
        .collect();
    for (i, out) in outs.iter().enumerate() {
        assert_eq!(reports[i]["verified"], true);
        assert!(
            std::fs::read(out).unwrap() == data,
            "receiver {} file differs",
            i + 1
        );
    }
    Some((sender, reports, progress_at_join))
}

#[test]
fn a_late_joiner_gets_the_whole_file_by_catch_up() {
    late_joiner("late", &[]);
}

/// The same with every host holding a pre-shared key: the catch-up
/// transfer runs its own handshake under it.
#[test]
fn a_protected_late_joiner_gets_the_whole_file_by_catch_up() {
    let psk = common::PskFile::new("late-key", 0xa7);
    late_joiner("late-psk", &["--psk-file", psk.path()]);
}

/// One session with a late joiner, `keys` given to every host: the joiner
/// starts beyond the send buffer and gets its prefix by catch-up.
fn late_joiner(tag: &str, keys: &[&str]) {
    let Some((sender, reports, progress_at_join)) = session(tag, true, &[], keys) else {
        return;
    };
    let late = &reports[RECEIVERS - 1]["transport"];
    let start = late["start_offset"].as_u64().expect("late joiner report");
    assert!(
        start > WINDOW_MIB << 20,
        "the joiner started beyond the send buffer: {late}"
    );
    assert_eq!(late["catch_up_bytes"].as_u64(), Some(start), "{late}");
    let t = &sender["transport"];
    assert_eq!(t["members_joined"], RECEIVERS as u64, "{t}");
    assert_eq!(t["catch_ups_completed"], 1, "{t}");
    assert_eq!(t["catch_up_bytes"].as_u64(), Some(start), "{t}");
    let during = t["catch_up_bytes_during_session"].as_u64().unwrap();
    assert!(during <= share_bound(t, 32), "{t}");
    eprintln!(
        "late joiner: joined at {:.1} MiB of the others' progress, start offset {start}, \
         sender {:.2} s; the 7 others {:.2} s on average; joiner {:.2} s",
        progress_at_join as f64 / (1 << 20) as f64,
        sender["seconds"].as_f64().unwrap(),
        early_mean_seconds(&reports, RECEIVERS - 1),
        reports[RECEIVERS - 1]["seconds"].as_f64().unwrap(),
    );
}

/// The same session without a late joiner: the reference for what the
/// joiner costs the others (printed; compare with the test above, run with
/// `--test-threads=1`).
#[test]
fn the_same_session_without_a_late_joiner() {
    let Some((sender, reports, _)) = session("base", false, &[], &[]) else {
        return;
    };
    assert_eq!(sender["transport"]["catch_ups_completed"], 0);
    eprintln!(
        "no late joiner: sender {:.2} s; the first 7 receivers {:.2} s on average",
        sender["seconds"].as_f64().unwrap(),
        early_mean_seconds(&reports, RECEIVERS - 1),
    );
}

/// What catch-ups may send while the session runs with `--catch-up-share
/// share`: one byte per `share` of the session's, plus the allowance, plus
/// one datagram sent before the bound is checked again.
fn share_bound(transport: &serde_json::Value, share: u64) -> u64 {
    let session = transport["session_datagram_bytes"].as_u64().unwrap();
    let allowance = fanout_app::catch_up::CatchUpConfig::default().allowance_bytes;
    session / share + allowance + 1500
}

/// `--catch-up-share` sets the share of the catch-up server the simulator
/// runs too (`fanout_app::catch_up`, checked there in
/// `crates/fanout-sim/tests/smo_scenarios.rs`): at 2, the joiner's
/// catch-up sends more while the session runs than the default share of
/// 32 would ever allow, and still within its own bound.
#[test]
fn the_catch_up_share_flag_sets_what_catch_ups_send_during_the_session() {
    let Some((sender, reports, _)) = session("share", true, &["--catch-up-share", "2"], &[]) else {
        return;
    };
    let t = &sender["transport"];
    let during = t["catch_up_bytes_during_session"].as_u64().unwrap();
    assert!(during <= share_bound(t, 2), "{t}");
    assert!(during > share_bound(t, 32), "{t}");
    let start = reports[RECEIVERS - 1]["transport"]["start_offset"].as_u64();
    eprintln!(
        "--catch-up-share 2: {during} B of catch-up while the session ran \
         ({} B of session datagrams; prefix {start:?} B)",
        t["session_datagram_bytes"]
    );
}
