//! `fanout stream` and unicast fan-out sessions, the real binary over real
//! UDP on loopback (127.0.0.1 only; every child killed by PID on drop,
//! every wait bounded): bytes piped into `stream send` arrive identical at
//! every receiver's stdout; a receiver joining a live stream late gets
//! exactly the suffix from its start offset; `send --unicast` delivers a
//! file to several receivers joined with `recv --from`.

#![expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]

#[path = "common/loopback.rs"]
mod loopback;
use loopback::{free_addr, stream_sender, Proc, StreamSender, LIMIT};

mod common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fanout");

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fanout_core::Rng::new(seed).fill(&mut v);
    v
}

/// Collects a pipe on a thread; `count` follows its length as it grows.
fn collect(mut pipe: impl Read + Send + 'static) -> (JoinHandle<Vec<u8>>, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    let t = std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
            seen.store(out.len(), Ordering::SeqCst);
        }
        out
    });
    (t, count)
}

/// A `fanout stream recv` child: stdout (the stream) and stderr (the JSON
/// report) collected on threads.
struct StreamReceiver {
    proc: Proc,
    stdout: JoinHandle<Vec<u8>>,
    received: Arc<AtomicUsize>,
    stderr: JoinHandle<Vec<u8>>,
}

fn stream_recv(from: &str) -> StreamReceiver {
    let mut child = Command::new(BIN)
        .args(["stream", "recv", "--from", from, "--listen", "127.0.0.1:0"])
        .args(["--json", "--quiet", "--idle-timeout", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (stdout, received) = collect(child.stdout.take().unwrap());
    let (stderr, _) = collect(child.stderr.take().unwrap());
    StreamReceiver {
        proc: Proc(child),
        stdout,
        received,
        stderr,
    }
}

impl StreamReceiver {
    /// Waits for it; returns (success, stream bytes, JSON report).
    fn finish(mut self) -> (bool, Vec<u8>, serde_json::Value) {
        let ok = self.proc.wait_ok();
        let data = self.stdout.join().unwrap();
        let err = String::from_utf8_lossy(&self.stderr.join().unwrap()).into_owned();
        let report = err
            .find('{')
            .and_then(|i| serde_json::from_str(&err[i..]).ok())
            .unwrap_or_else(|| panic!("no JSON report on stderr: {err}"));
        (ok, data, report)
    }
}

fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < LIMIT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn piped_bytes_arrive_identical_at_every_receiver() {
    let bind = free_addr();
    let data = random(6 << 20, 11);
    let receivers: Vec<StreamReceiver> = (0..3).map(|_| stream_recv(&bind)).collect();
    let StreamSender {
        proc: mut tx,
        mut stdin,
        out: report,
        ..
    } = stream_sender(BIN, &bind, &["--wait-for", "3"]);
    stdin.write_all(&data).unwrap();
    drop(stdin); // end of input finishes the session
    assert!(tx.wait_ok(), "sender failed");
    let sent: serde_json::Value = serde_json::from_slice(&report.join().unwrap()).unwrap();
    assert_eq!(sent["bytes"], data.len() as u64);
    assert_eq!(sent["delivery"]["mode"], "unicast");
    assert_eq!(sent["members"].as_array().unwrap().len(), 3);
    let t = &sent["transport"];
    let (segments, copies) = (
        t["data_segments"].as_u64().unwrap(),
        t["fanout_copies"].as_u64().unwrap(),
    );
    assert_eq!(copies, 3 * segments, "one copy per receiver: {t}");
    // Each receiver's copies leave in runs, packed into GSO sends.
    let (datagrams, syscalls) = (
        t["datagrams_sent_by_driver"].as_u64().unwrap(),
        t["send_syscalls"].as_u64().unwrap(),
    );
    assert!(syscalls * 2 < datagrams, "batched sends: {t}");
    eprintln!("unicast fan-out: {datagrams} datagrams in {syscalls} send calls");
    for (i, r) in receivers.into_iter().enumerate() {
        let (ok, got, report) = r.finish();
        assert!(ok, "receiver {i} failed: {report}");
        assert_eq!(got.len(), data.len(), "receiver {i}");
        assert!(got == data, "receiver {i}: bytes differ");
        assert_eq!(report["transport"]["start_offset"], 0);
        assert_eq!(report["blake3"], sent["blake3"]);
    }
}

#[test]
fn a_late_joiner_gets_the_suffix_from_its_start() {
    let bind = free_addr();
    let data = random(8 << 20, 12);
    let half = data.len() / 2;
    let early: Vec<StreamReceiver> = (0..2).map(|_| stream_recv(&bind)).collect();
    let StreamSender {
        proc: mut tx,
        mut stdin,
        out: report,
        ..
    } = stream_sender(BIN, &bind, &["--wait-for", "2"]);
    stdin.write_all(&data[..half]).unwrap();
    // The first half is live at the early receivers before the third joins.
    wait_until("the first half at receiver 0", || {
        early[0].received.load(Ordering::SeqCst) >= half
    });
    let late = stream_recv(&bind);
    // Keep the stream flowing while the late receiver joins.
    for chunk in data[half..].chunks(64 << 10) {
        stdin.write_all(chunk).unwrap();
        std::thread::sleep(Duration::from_millis(15));
    }
    drop(stdin);
    assert!(tx.wait_ok(), "sender failed");
    let sent: serde_json::Value = serde_json::from_slice(&report.join().unwrap()).unwrap();
    assert_eq!(sent["transport"]["members_joined"], 3, "{sent}");
    for (i, r) in early.into_iter().enumerate() {
        let (ok, got, _) = r.finish();
        assert!(ok && got == data, "early receiver {i}");
    }
    let (ok, got, report) = late.finish();
    assert!(ok, "late receiver failed: {report}");
    let start = report["transport"]["start_offset"].as_u64().unwrap() as usize;
    assert!(
        start >= half && start < data.len(),
        "joined at {start} of {}",
        data.len()
    );
    assert_eq!(got.len(), data.len() - start);
    assert!(
        got == data[start..],
        "the late receiver's bytes are not the suffix"
    );
    eprintln!(
        "late joiner started at {start} of {} bytes; got {} bytes",
        data.len(),
        got.len()
    );
}

#[test]
fn a_file_goes_to_several_receivers_by_unicast_fan_out() {
    let scratch = common::Scratch::new("unicast");
    let dir = scratch.path();
    let src = dir.join("payload.bin");
    let data = random(5 << 20, 13);
    std::fs::write(&src, &data).unwrap();
    let bind = free_addr();
    let outs: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("got{i}.bin"))).collect();
    let mut rx: Vec<Proc> = outs
        .iter()
        .map(|o| {
            let child = Command::new(BIN)
                .args(["recv", "--from", &bind, "--listen", "127.0.0.1:0"])
                .args(["--quiet", "--idle-timeout", "20", "-o"])
                .arg(o)
                .spawn()
                .unwrap();
            Proc(child)
        })
        .collect();
    let child = Command::new(BIN)
        .arg("send")
        .arg(&src)
        .args(["--unicast", "--bind", &bind, "--wait-for", "3", "--json"])
        .args(["--idle-timeout", "20"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut tx = Proc(child);
    let (report, _) = collect(tx.0.stdout.take().unwrap());
    assert!(tx.wait_ok(), "sender failed");
    let sent: serde_json::Value = serde_json::from_slice(&report.join().unwrap()).unwrap();
    assert_eq!(sent["delivery"]["mode"], "unicast");
    assert!(
        sent["delivery"]["fallback"].is_null(),
        "asked, not fallen back"
    );
    assert_eq!(sent["verified"], true);
    for (i, r) in rx.iter_mut().enumerate() {
        assert!(r.wait_ok(), "receiver {i} failed");
        assert!(std::fs::read(&outs[i]).unwrap() == data, "receiver {i}");
    }
}
