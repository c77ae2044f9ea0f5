//! Session relay (TCP-SMO §IV.B) end to end over real IP multicast, in a
//! bridged LAN of network namespaces this test creates (10.77.0.0/24, TTL
//! 1; nothing reaches the root namespace): a line typed into one
//! receiver's `stream recv --upstream` stdin reaches the sender on that
//! receiver's own connection, and `stream send --echo-upstream` multicasts
//! it, prefixed with the receiver's address, to every receiver's stdout,
//! between the lines of its own input; `--upstream-out` writes it to a
//! file. Every wait is bounded; the LAN guard kills what runs in it and
//! removes it. Skipped where namespaces are unavailable, unless
//! `FANOUT_NETNS_REQUIRED=1`.

#![expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]

mod common;
use common::{read_all, wait_ok, BIN};
use fanout_netns::{require_netns, LanTopology, NsChild};
use std::io::Write;
use std::process::Stdio;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);
const GROUP: &str = "239.77.1.9:7109";
const SENDER: &str = "10.77.0.1:6109";

#[test]
fn a_receivers_line_is_echoed_by_the_sender_to_every_receiver() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let lan = LanTopology::new(4).expect("LAN");
    let scratch = common::Scratch::new("upstream");
    let dir = scratch.path();
    let up_file = dir.join("upstream.txt");

    // Three receivers; the first asks a question upstream.
    type Rx = (NsChild, JoinHandle<Vec<u8>>, JoinHandle<Vec<u8>>);
    let mut receivers: Vec<Rx> = Vec::new();
    let mut asker_stdin = None;
    for i in 1..=3 {
        let h = lan.host(i);
        let mut cmd = h.netns().exec(BIN);
        cmd.args(["stream", "recv", "--group", GROUP, "--from", SENDER])
            .args(["--interface", &h.ipv4().to_string()])
            .args(["--json", "--quiet", "--idle-timeout", "20"]);
        if i == 1 {
            cmd.arg("--upstream").stdin(Stdio::piped());
        } else {
            cmd.stdin(Stdio::null());
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = h.netns().spawn(cmd).expect("spawn receiver");
        if i == 1 {
            asker_stdin = child.child_mut().stdin.take();
        }
        let out = read_all(child.child_mut().stdout.take().unwrap());
        let err = read_all(child.child_mut().stderr.take().unwrap());
        receivers.push((child, out, err));
    }
    let gip = GROUP.split(':').next().unwrap().parse().unwrap();
    let members = lan
        .wait_for_members(gip, 3, Duration::from_secs(5))
        .expect("bridge state");
    assert_eq!(members.len(), 3, "the bridge learned {members:?}");

    let mut cmd = lan.host(0).netns().exec(BIN);
    cmd.args(["stream", "send", "--group", GROUP, "--bind", SENDER])
        .args(["--wait-for", "3", "--wait-secs", "30", "--json", "--quiet"])
        .arg("--echo-upstream")
        .arg("--upstream-out")
        .arg(&up_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut tx = lan.host(0).netns().spawn(cmd).expect("spawn sender");
    let report = read_all(tx.child_mut().stdout.take().unwrap());
    let stderr = read_all(tx.child_mut().stderr.take().unwrap());
    let mut stdin = tx.child_mut().stdin.take().unwrap();
    stdin.write_all(b"lecture line 1\n").unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut asker = asker_stdin.expect("asker's stdin");
    asker.write_all(b"question from host 1?\n").unwrap();
    asker.flush().unwrap();

    // The sender wrote the line to its file: it was echoed into the stream
    // in the same turn of its loop.
    let start = Instant::now();
    let line = loop {
        let text = std::fs::read_to_string(&up_file).unwrap_or_default();
        if let Some(l) = text.lines().next() {
            break l.to_owned();
        }
        assert!(
            start.elapsed() < LIMIT,
            "no upstream line reached the sender"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let prefix = format!("[{}:", lan.host(1).ipv4());
    assert!(
        line.starts_with(&prefix) && line.ends_with("] question from host 1?"),
        "{line}"
    );
    stdin.write_all(b"lecture line 2\n").unwrap();
    drop(stdin);
    let ok = wait_ok(&mut tx, LIMIT);
    let stderr = String::from_utf8_lossy(&stderr.join().unwrap()).into_owned();
    assert!(ok, "sender failed: {stderr}");
    drop(asker);
    let sent: serde_json::Value =
        serde_json::from_slice(&report.join().unwrap()).expect("sender JSON");
    let t = &sent["transport"];
    assert_eq!(t["upstream_lines"], 1, "{t}");
    assert_eq!(t["upstream_lines_echoed"], 1, "{t}");
    assert_eq!(sent["delivery"]["mode"], "multicast", "{sent}");

    let want = format!("lecture line 1\n{line}\nlecture line 2\n");
    for (i, (mut child, out, err)) in receivers.into_iter().enumerate() {
        let ok = wait_ok(&mut child, LIMIT);
        let got = String::from_utf8_lossy(&out.join().unwrap()).into_owned();
        let err = String::from_utf8_lossy(&err.join().unwrap()).into_owned();
        assert!(ok, "receiver {} failed: {err}", i + 1);
        assert_eq!(got, want, "receiver {}: {err}", i + 1);
        if i == 0 {
            let report: serde_json::Value = err
                .find('{')
                .and_then(|at| serde_json::from_str(&err[at..]).ok())
                .unwrap_or_else(|| panic!("no JSON report: {err}"));
            let t = &report["transport"];
            assert_eq!(t["upstream_bytes_acked"], 22, "{t}");
        }
    }
}
