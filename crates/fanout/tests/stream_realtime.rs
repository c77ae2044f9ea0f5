//! `fanout stream` in real time, the real binary over real UDP on
//! loopback (127.0.0.1 only; every child killed by PID on drop, every
//! wait bounded): with 2% of datagrams dropped at the receiver, a pushed
//! queue without deadlines skips every loss and the receiver writes the
//! other messages whole and in order; with a latency budget the losses are
//! repaired in time; a receiver of every byte refuses a real-time sender
//! with a reason.

#[path = "common/loopback.rs"]
mod loopback;
use loopback::{free_addr, json_in, read_all, stream_sender, Proc, StreamSender};

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_fanout");
const MESSAGE: usize = 1316;

/// Starts `fanout ARGS --json --quiet`, its stdout and stderr read.
fn spawn(
    args: &[&str],
) -> (
    Proc,
    std::thread::JoinHandle<Vec<u8>>,
    std::thread::JoinHandle<Vec<u8>>,
) {
    let mut c = Command::new(BIN)
        .args(args)
        .args(["--json", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, err) = (
        read_all(c.stdout.take().unwrap()),
        read_all(c.stderr.take().unwrap()),
    );
    (Proc(c), out, err)
}

/// Starts `stream send --unicast --bind BIND <send>` and, `lead` later,
/// writes `msgs` into it one every 2 ms (stopping early if it ended: a
/// sender whose only receiver left does), then ends its input.
fn write_stream(
    bind: &str,
    send: &[&str],
    lead: Duration,
    msgs: &[Vec<u8>],
) -> (
    Proc,
    std::thread::JoinHandle<Vec<u8>>,
    std::thread::JoinHandle<Vec<u8>>,
) {
    let StreamSender {
        proc,
        mut stdin,
        out,
        err,
    } = stream_sender(BIN, bind, send);
    std::thread::sleep(lead);
    for m in msgs {
        if stdin.write_all(m).and_then(|()| stdin.flush()).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    drop(stdin);
    (proc, out, err)
}

/// `count` distinct messages of [`MESSAGE`] bytes.
fn messages(count: usize) -> Vec<Vec<u8>> {
    let mut all = vec![0u8; count * MESSAGE];
    fanout_core::Rng::new(7).fill(&mut all);
    all.chunks(MESSAGE).map(<[u8]>::to_vec).collect()
}

struct Run {
    sender_ok: bool,
    /// The sender's report (null if it failed).
    sent: serde_json::Value,
    sender_err: String,
    /// The receiver's report, or its error as a JSON string.
    received: serde_json::Value,
    receiver_ok: bool,
    out: Vec<u8>,
    stats_lines: Vec<serde_json::Value>,
}

/// Streams `msgs` (one every 2 ms) from `stream send --unicast <send>` to
/// one `stream recv <recv>` that drops 2% of what arrives.
fn run(send: &[&str], recv: &[&str], msgs: &[Vec<u8>]) -> Run {
    let bind = free_addr();
    let dir = std::env::temp_dir().join(format!(
        "fanout-rt-{}-{}",
        std::process::id(),
        bind.replace([':', '.'], "-")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let stats = dir.join("recv-stats.jsonl");
    let stats_path = stats.to_str().unwrap();
    let recv_args = [
        &["stream", "recv", "--from", &bind, "--listen", "127.0.0.1:0"][..],
        &["--idle-timeout", "20", "--inject-loss", "0.02"],
        &["--stats", stats_path, "--stats-interval", "200"],
        recv,
    ]
    .concat();
    let (mut rx, rx_out, rx_err) = spawn(&recv_args);
    // Give the receiver time to join before the first message (the
    // queue's messages would otherwise wait, and expire under --latency).
    let (mut tx, tx_out, tx_err) = write_stream(&bind, send, Duration::from_millis(300), msgs);
    let sender_ok = tx.wait_ok();
    let receiver_ok = rx.wait_ok();
    let stats_lines = std::fs::read_to_string(&stats)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    let rx_err = rx_err.join().unwrap();
    Run {
        sender_ok,
        sent: if sender_ok {
            json_in(&tx_out.join().unwrap())
        } else {
            serde_json::Value::Null
        },
        sender_err: String::from_utf8_lossy(&tx_err.join().unwrap()).into_owned(),
        received: if receiver_ok {
            json_in(&rx_err)
        } else {
            String::from_utf8_lossy(&rx_err).into()
        },
        receiver_ok,
        out: rx_out.join().unwrap(),
        stats_lines,
    }
}

/// The positions in `msgs` of the messages `out` is made of (panics on a
/// piece that is no whole message).
fn positions(out: &[u8], msgs: &[Vec<u8>]) -> Vec<usize> {
    assert_eq!(out.len() % MESSAGE, 0, "whole messages only");
    out.chunks(MESSAGE)
        .map(|m| {
            msgs.iter()
                .position(|x| x == m)
                .expect("a message of the input")
        })
        .collect()
}

#[test]
fn a_pushed_queue_skips_every_loss_and_the_rest_arrives_whole_in_order() {
    let msgs = messages(1000);
    let r = run(&["--queue", "fifo"], &["--latency", "200"], &msgs);
    assert!(r.sender_ok && r.receiver_ok, "failed: {}", r.received);
    let t = &r.sent["transport"];
    assert_eq!(t["messages_written"], 1000);
    assert_eq!(t["repair_bytes"], 0, "no stale retransmission: {t}");
    assert!(t["skips_sent"].as_u64().unwrap() > 0, "{t}");
    let at = positions(&r.out, &msgs);
    assert!(at.windows(2).all(|w| w[0] < w[1]), "in order, none twice");
    let rt = &r.received["transport"];
    assert_eq!(rt["messages_read"].as_u64().unwrap() as usize, at.len());
    let dropped = rt["messages_dropped"].as_u64().unwrap();
    assert!(dropped > 0 && dropped < 100, "{rt}");
    assert_eq!(
        rt["messages_read"].as_u64().unwrap() + dropped,
        t["messages_sent"].as_u64().unwrap()
    );
    // Statistics lines while it ran, the last one the final counts.
    assert!(r.stats_lines.len() >= 3, "{:?}", r.stats_lines);
    let last = r.stats_lines.last().unwrap();
    assert_eq!(last["messages_read"], rt["messages_read"]);
}

#[test]
fn with_a_latency_budget_losses_are_repaired_in_time() {
    let msgs = messages(600);
    let r = run(&["--latency", "500"], &["--latency", "500"], &msgs);
    assert!(r.sender_ok && r.receiver_ok, "failed: {}", r.received);
    let t = &r.sent["transport"];
    assert!(t["repair_bytes"].as_u64().unwrap() > 0, "{t}");
    assert_eq!(t["skips_sent"], 0, "{t}");
    let at = positions(&r.out, &msgs);
    assert_eq!(at.len() as u64, t["messages_sent"].as_u64().unwrap());
    assert!(at.windows(2).all(|w| w[0] < w[1]));
    // Nothing came too late; the receiver reports its delivery delay and
    // jitter (loopback: well inside the 500 ms budget), in its report and
    // its statistics lines.
    let rt = &r.received["transport"];
    assert_eq!(rt["messages_late"], 0, "{rt}");
    let p99 = rt["delay_p99_us"].as_u64().unwrap();
    assert!(p99 < 500_000, "{rt}");
    assert!(rt["jitter_us"].as_u64().is_some(), "{rt}");
    let last = r.stats_lines.last().unwrap();
    assert!(last["delay_p99_ms"].as_f64().unwrap() < 500.0, "{last}");
    assert!(last["jitter_ms"].as_f64().is_some(), "{last}");
}

#[test]
fn a_receiver_of_every_byte_refuses_a_real_time_sender_with_the_reason() {
    let msgs = messages(600);
    let r = run(&["--queue", "fifo"], &[], &msgs);
    assert!(
        !r.receiver_ok,
        "a reliable receiver cannot take skipped data"
    );
    let err = r.received.as_str().unwrap();
    assert!(err.contains("real time"), "{err}");
    // The sender saw its only receiver leave, and says why.
    assert!(!r.sender_ok);
    assert!(r.sender_err.contains("real time"), "{}", r.sender_err);
}

/// What a stream through a relay and a merger did.
struct Chain {
    sent: serde_json::Value,
    relay: serde_json::Value,
    received: serde_json::Value,
    out: Vec<u8>,
}

/// Streams `msgs` (one every 2 ms) from `stream send --unicast <send>`
/// through `relay --latency 500` (dropping 2% of what reaches it) to one
/// `stream recv --latency 500` that reports through a merger (`fanout
/// merge`) and drops 2% too.
fn through_relay_and_merger(send: &[&str], msgs: &[Vec<u8>]) -> Chain {
    let (source, relay_at, merger_at) = (free_addr(), free_addr(), free_addr());
    // Each receiving hop: a 500 ms budget, 2% of its input dropped.
    let hop = [
        "--latency",
        "500",
        "--inject-loss",
        "0.02",
        "--idle-timeout",
        "20",
    ];
    let relay_args = ["relay", "--from", &source, "--bind", &relay_at, "--unicast"];
    let (mut relay, relay_out, relay_err) = spawn(&[&relay_args[..], &hop].concat());
    let (mut merger, _, merger_err) = spawn(&[
        "merge",
        "--listen",
        &merger_at,
        "--parent",
        &relay_at,
        "--children",
        "1",
        "--wait",
        "20",
    ]);
    let recv_args = [
        "stream",
        "recv",
        "--from",
        &relay_at,
        "--merger",
        &merger_at,
        "--listen",
        "127.0.0.1:0",
    ];
    let (mut rx, rx_out, rx_err) = spawn(&[&recv_args[..], &hop].concat());
    // Every hop joins before the first message (a message written before
    // would wait in a queue and expire).
    let (mut tx, tx_out, tx_err) = write_stream(&source, send, Duration::from_secs(1), msgs);
    let text = |h: std::thread::JoinHandle<Vec<u8>>| {
        String::from_utf8_lossy(&h.join().unwrap()).into_owned()
    };
    assert!(tx.wait_ok(), "sender: {}", text(tx_err));
    assert!(relay.wait_ok(), "relay: {}", text(relay_err));
    assert!(rx.wait_ok(), "receiver: {}", text(rx_err));
    // The merger ends with its parent's session.
    assert!(merger.wait_ok(), "merger: {}", text(merger_err));
    Chain {
        sent: json_in(&tx_out.join().unwrap()),
        relay: json_in(&relay_out.join().unwrap()),
        received: json_in(&rx_err.join().unwrap()),
        out: rx_out.join().unwrap(),
    }
}

#[test]
fn a_stream_with_deadlines_goes_through_a_relay_and_a_merger() {
    let msgs = messages(600);
    let c = through_relay_and_merger(&["--latency", "500"], &msgs);
    // Each hop repaired its own losses in time: every message arrived,
    // whole, in order, none late.
    let up = &c.relay["upstream_transport"];
    assert_eq!(up["messages_read"], 600, "{up}");
    let down = &c.relay["transport"];
    assert_eq!(down["messages_written"], 600, "{down}");
    assert!(down["repair_bytes"].as_u64().unwrap() > 0, "{down}");
    assert_eq!(positions(&c.out, &msgs), (0..600).collect::<Vec<_>>());
    let rt = &c.received["transport"];
    assert_eq!(rt["messages_late"], 0, "{rt}");
    assert!(rt["delay_p99_us"].as_u64().unwrap() < 500_000, "{rt}");
    assert!(c.sent["transport"]["repair_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn what_the_source_skipped_a_relay_leaves_out_and_each_hop_repairs_its_own() {
    // A pushed queue without deadlines at the source: its losses at the
    // relay are skipped, never repaired; the relay's own session (with
    // the relay's deadlines) repairs the receiver's.
    let msgs = messages(600);
    let c = through_relay_and_merger(&["--queue", "fifo"], &msgs);
    assert!(c.sent["transport"]["skips_sent"].as_u64().unwrap() > 0);
    let up = &c.relay["upstream_transport"];
    let (read, dropped) = (
        up["messages_read"].as_u64().unwrap(),
        up["messages_dropped"].as_u64().unwrap(),
    );
    assert!(dropped > 0 && read + dropped == 600, "{up}");
    let down = &c.relay["transport"];
    assert!(down["repair_bytes"].as_u64().unwrap() > 0, "{down}");
    assert_eq!(down["skips_sent"], 0, "{down}");
    let at = positions(&c.out, &msgs);
    assert_eq!(at.len() as u64, read, "all the relay forwarded");
    assert!(at.windows(2).all(|w| w[0] < w[1]), "in order, none twice");
    assert_eq!(c.received["transport"]["messages_late"], 0);
}
