//! The overlay over kernel TCP on loopback, real processes: a source, a
//! relay and two leaves; every host ends with the verified file, and a
//! host without the key gets nothing. Every child is killed by PID on
//! drop.

#![expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]

mod common;
use common::write_random;

use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fanout");

/// A child process killed when dropped.
struct Proc(Child, mpsc::Receiver<String>);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `fanout` with `args`, its stderr lines on a channel.
fn start(args: &[&str]) -> Proc {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = common::lines_of(child.stderr.take().unwrap());
    Proc(child, rx)
}

/// The address after `marker` in the first stderr line that has it
/// (within 60 s).
fn address(p: &Proc, marker: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(line) = p.1.recv_timeout(Duration::from_millis(200)) {
            if let Some(rest) = line.split(marker).nth(1) {
                return rest
                    .split([';', ' '])
                    .next()
                    .unwrap()
                    .trim_end_matches(',')
                    .to_owned();
            }
        }
    }
    panic!("no line with {marker:?}");
}

/// Starts `overlay node --join JOIN --psk-file PSK` with `extra`.
fn start_node(join: &str, psk: &str, extra: &[&str]) -> Proc {
    let mut args = vec!["overlay", "node", "--join", join, "--psk-file", psk];
    args.extend_from_slice(extra);
    start(&args)
}

/// Writes a pre-shared key to `path`.
fn keygen(path: &std::path::Path) {
    let out = Command::new(BIN)
        .args(["keygen", "--psk"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success());
}

/// Starts a source serving `file` to `children` children in symbols of
/// 4096 bytes, on an ephemeral port: it and its address.
fn start_source(file: &std::path::Path, psk: &str, children: &str) -> (Proc, String) {
    let source = start(&[
        "overlay",
        "source",
        file.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--psk-file",
        psk,
        "--children",
        children,
        "--symbol-size",
        "4096",
        "--json",
    ]);
    let addr = address(&source, " on ");
    (source, addr)
}

/// A parent that hangs up: it relays the first `bytes` of the source's
/// stream (at `src_addr`) to the one node that joins it, then closes both
/// connections, as a relay killed at that point would. Its address, and
/// the thread (joined: the bytes it relayed).
fn parent_that_hangs_up(src_addr: &str, bytes: usize) -> (String, std::thread::JoinHandle<usize>) {
    use std::io::{Read, Write};
    let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = proxy.local_addr().unwrap().to_string();
    let upstream: std::net::SocketAddr = src_addr.parse().unwrap();
    let thread = std::thread::spawn(move || {
        let (mut node, _) = proxy.accept().unwrap();
        let mut hello = [0u8; 8];
        node.read_exact(&mut hello).unwrap();
        let mut up = std::net::TcpStream::connect(upstream).unwrap();
        up.write_all(&hello).unwrap();
        let mut buf = vec![0u8; 64 << 10];
        let mut sent = 0;
        while sent < bytes {
            let n = up.read(&mut buf).unwrap();
            assert!(n > 0);
            node.write_all(&buf[..n]).unwrap();
            sent += n;
        }
        sent
    });
    (addr, thread)
}

/// Waits for `p` to exit (within 60 s): its success and stdout.
fn finish(mut p: Proc) -> (bool, String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = p.0.try_wait().unwrap() {
            let mut out = String::new();
            std::io::Read::read_to_string(p.0.stdout.as_mut().unwrap(), &mut out).unwrap();
            let err: Vec<String> = p.1.try_iter().collect();
            if !status.success() {
                eprintln!("stderr: {err:?}");
            }
            return (status.success(), out);
        }
        assert!(Instant::now() < deadline, "still running after 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_source_a_relay_and_two_leaves_all_end_with_the_verified_file_and_a_keyless_host_gets_nothing()
{
    let dir = common::Scratch::new("test-overlay");
    let d = dir.path();
    let file = d.join("payload.bin");
    let data = write_random(&file, 3_000_000, 7);
    let psk = d.join("k.psk");
    let other = d.join("other.psk");
    keygen(&psk);
    keygen(&other);
    let (psk, other) = (psk.to_str().unwrap(), other.to_str().unwrap());
    for sub in ["r", "a", "b", "x"] {
        std::fs::create_dir(d.join(sub)).unwrap();
    }
    let path = |s: &str| d.join(s).to_str().unwrap().to_owned();
    let (source, src_addr) = start_source(&file, psk, "2");
    // A host with another key: refused at the manifest, nothing written.
    let keyless = start_node(&src_addr, other, &["-o", &path("x")]);
    let (ok, _) = finish(keyless);
    assert!(!ok, "a host without the key must fail");
    assert_eq!(std::fs::read_dir(d.join("x")).unwrap().count(), 0);
    let relay = start_node(
        &src_addr,
        psk,
        &[
            "-o",
            &path("r"),
            "--listen",
            "127.0.0.1:0",
            "--children",
            "2",
            "--json",
        ],
    );
    let relay_addr = address(&relay, "relaying on ");
    let leaves: Vec<Proc> = ["a", "b"]
        .iter()
        .map(|s| start_node(&relay_addr, psk, &["-o", &path(s), "--json"]))
        .collect();
    for (leaf, sub) in leaves.into_iter().zip(["a", "b"]) {
        let (ok, out) = finish(leaf);
        assert!(ok, "leaf {sub}");
        let summary: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        let per_byte = summary["received_per_byte"].as_f64().unwrap();
        // 44 bytes of header and tag a 4096-byte symbol, the padded last
        // symbol, a symbol or two over K: about 1.012.
        assert!(per_byte < 1.02, "{summary}");
        assert_eq!(
            std::fs::read(d.join(sub).join("payload.bin")).unwrap(),
            data
        );
    }
    let (ok, out) = finish(relay);
    assert!(ok);
    let summary: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(summary["children_left"], 2, "{summary}");
    assert_eq!(summary["orphaned"], false, "{summary}");
    assert_eq!(
        std::fs::read(d.join("r").join("payload.bin")).unwrap(),
        data
    );
    let (ok, out) = finish(source);
    assert!(ok);
    let summary: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(summary["children_refused"], 0, "{summary}");
    assert_eq!(summary["children_left"], 2, "{summary}");
}

/// A parent that goes away mid-transfer: the test relays the first 40%
/// of the source's stream to the leaf, then hangs up on both (as a relay
/// killed at that point would); the leaf joins the next parent it was
/// given (the source) and finishes with what it held, so the bytes it read
/// in all are those of the file plus the frames' overhead.
#[test]
fn a_leaf_whose_parent_goes_away_finishes_from_the_next_with_what_it_held() {
    let dir = common::Scratch::new("test-overlay-switch");
    let d = dir.path();
    let file = d.join("payload.bin");
    let len = 4_000_000;
    let data = write_random(&file, len, 11);
    let psk = d.join("k.psk");
    keygen(&psk);
    let psk = psk.to_str().unwrap();
    std::fs::create_dir(d.join("a")).unwrap();
    let (source, src_addr) = start_source(&file, psk, "2");
    let (proxy_addr, relayed) = parent_that_hangs_up(&src_addr, len * 2 / 5);
    let leaf = start(&[
        "overlay",
        "node",
        "--join",
        &proxy_addr,
        "--join",
        &src_addr,
        "--psk-file",
        psk,
        "-o",
        d.join("a").to_str().unwrap(),
        "--json",
    ]);
    let before = relayed.join().unwrap();
    assert!(before < len / 2);
    let (ok, out) = finish(leaf);
    assert!(ok);
    let summary: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(summary["parent_switches"], 1, "{summary}");
    // 44 bytes a 4096-byte symbol, two manifests, a symbol or two over K.
    let per_byte = summary["received_per_byte"].as_f64().unwrap();
    assert!(per_byte < 1.02, "{summary}");
    assert_eq!(
        std::fs::read(d.join("a").join("payload.bin")).unwrap(),
        data
    );
    let (ok, _) = finish(source);
    assert!(ok);
}

/// A slow hop to the source (at `src_addr`): it passes the one node that
/// joins it its hello and relays it the source's stream at `rate` bytes a
/// second, until the node hangs up. Its address, a signal once bytes
/// went, and the thread (joined: the bytes it relayed).
fn slow_hop(
    src_addr: &str,
    rate: usize,
) -> (String, mpsc::Receiver<()>, std::thread::JoinHandle<usize>) {
    use std::io::{Read, Write};
    let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = proxy.local_addr().unwrap().to_string();
    let upstream: std::net::SocketAddr = src_addr.parse().unwrap();
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let (mut node, _) = proxy.accept().unwrap();
        let mut up = std::net::TcpStream::connect(upstream).unwrap();
        let (mut from_node, mut to_up) = (node.try_clone().unwrap(), up.try_clone().unwrap());
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from_node, &mut to_up);
            let _ = to_up.shutdown(std::net::Shutdown::Write);
        });
        let chunk = 16 << 10;
        let mut buf = vec![0u8; chunk];
        let mut sent = 0;
        loop {
            let n = match up.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if node.write_all(&buf[..n]).is_err() {
                break;
            }
            sent += n;
            let _ = tx.send(());
            std::thread::sleep(Duration::from_secs_f64(n as f64 / rate as f64));
        }
        sent
    });
    (addr, rx, thread)
}

/// Joins that follow the plan: the source is given the topology, whose
/// widest-path tree puts A under the source and B under A. B starts first
/// and joins the source, which sends it to A; A is not up yet, so B is
/// served by the source (over a slow hop) meanwhile, then moves to A once
/// A is up and serves the same file, keeping what it held. B reads from
/// the source well under a copy of the file, and both verify.
#[test]
fn a_node_joined_at_the_source_moves_to_its_planned_parent_once_it_appears() {
    let dir = common::Scratch::new("test-overlay-plan");
    let d = dir.path();
    let file = d.join("payload.bin");
    let len = 4_000_000;
    let data = write_random(&file, len, 13);
    let psk = d.join("k.psk");
    keygen(&psk);
    let psk = psk.to_str().unwrap();
    for sub in ["a", "b"] {
        std::fs::create_dir(d.join(sub)).unwrap();
    }
    let path = |s: &str| d.join(s).to_str().unwrap().to_owned();
    let a_addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let plan = d.join("plan.toml");
    std::fs::write(
        &plan,
        format!(
            r#"
            source = "S"
            [[hop]]
            from = "S"
            to = "A"
            rate = "1Gbit"
            [[hop]]
            from = "A"
            to = "B"
            rate = "1Gbit"
            [[hop]]
            from = "S"
            to = "B"
            rate = "10Mbit"
            [[host]]
            name = "A"
            addr = "{a_addr}"
            "#
        ),
    )
    .unwrap();
    let source = start(&[
        "overlay",
        "source",
        file.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--psk-file",
        psk,
        "--children",
        "2",
        "--symbol-size",
        "4096",
        "--plan",
        plan.to_str().unwrap(),
        "--json",
    ]);
    let src_addr = address(&source, " on ");
    // B reaches the source over a hop of 256 KiB/s.
    let (hop_addr, flowing, hop) = slow_hop(&src_addr, 256 << 10);
    let b = start_node(&hop_addr, psk, &["--name", "B", "-o", &path("b"), "--json"]);
    flowing.recv_timeout(Duration::from_secs(30)).unwrap();
    let a = start_node(
        &src_addr,
        psk,
        &[
            "--name",
            "A",
            "--listen",
            &a_addr,
            "--children",
            "1",
            "-o",
            &path("a"),
            "--json",
        ],
    );
    let (ok, out) = finish(b);
    assert!(ok, "B");
    let summary: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(summary["moves"], 1, "{summary}");
    let parents = summary["parents"].as_array().unwrap();
    assert_eq!(parents.len(), 2, "{summary}");
    assert_eq!(parents[0]["addr"], hop_addr.as_str());
    assert_eq!(parents[0]["suggested"], false);
    assert_eq!(parents[1]["addr"], a_addr.as_str());
    assert_eq!(parents[1]["suggested"], true);
    let from_source = parents[0]["bytes"].as_u64().unwrap() as usize;
    assert!(from_source < len / 3, "{summary}");
    // It told A what it held: the move cost next to nothing.
    let read = summary["received_per_byte"].as_f64().unwrap();
    eprintln!("B read {read:.3} bytes per file byte across the move");
    assert!(read < 1.05, "{summary}");
    assert_eq!(
        std::fs::read(d.join("b").join("payload.bin")).unwrap(),
        data
    );
    let (ok, out) = finish(a);
    assert!(ok, "A");
    let a_summary: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(a_summary["moves"], 0, "{a_summary}");
    assert_eq!(a_summary["children_left"], 1, "{a_summary}");
    assert_eq!(
        std::fs::read(d.join("a").join("payload.bin")).unwrap(),
        data
    );
    let relayed = hop.join().unwrap();
    assert!(relayed < len / 3, "{relayed}");
    let (ok, out) = finish(source);
    assert!(ok);
    let summary: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    // (What it wrote is no measure here: on loopback the kernel buffers
    // megabytes that a host that decoded never reads.)
    assert_eq!(summary["redirected"], 1, "{summary}");
}

/// A node that dies mid-transfer keeps what it held in a journal beside
/// its output; run again, it replays it and reads only what it lacks.
#[test]
fn a_restarted_node_resumes_from_its_journal_and_reads_only_what_it_lacks() {
    let dir = common::Scratch::new("test-overlay-resume");
    let d = dir.path();
    let file = d.join("payload.bin");
    let len = 4_000_000;
    let data = write_random(&file, len, 12);
    let psk = d.join("k.psk");
    keygen(&psk);
    let psk = psk.to_str().unwrap();
    let out = d.join("a");
    std::fs::create_dir(&out).unwrap();
    let (source, src_addr) = start_source(&file, psk, "2");
    // The first run's only parent hangs up after half the file.
    let (proxy_addr, relayed) = parent_that_hangs_up(&src_addr, len / 2);
    let node = |parent: &str| start_node(parent, psk, &["-o", out.to_str().unwrap(), "--json"]);
    let first = node(&proxy_addr);
    relayed.join().unwrap();
    let (ok, _) = finish(first);
    assert!(!ok, "no parent left: the first run fails");
    assert!(out.join(".fanout-overlay.journal").exists());
    assert!(!out.join("payload.bin").exists());
    let (ok, summary) = finish(node(&src_addr));
    assert!(ok);
    let summary: serde_json::Value = serde_json::from_str(summary.trim()).unwrap();
    let resumed = summary["resumed_bytes"].as_u64().unwrap() as f64 / len as f64;
    let read = summary["received_per_byte"].as_f64().unwrap();
    assert!(resumed > 0.45, "{summary}");
    assert!(read < 0.6 && resumed + read < 1.02, "{summary}");
    assert_eq!(std::fs::read(out.join("payload.bin")).unwrap(), data);
    assert!(
        !out.join(".fanout-overlay.journal").exists(),
        "removed once in place"
    );
    let (ok, _) = finish(source);
    assert!(ok);
}

/// A congestion control the kernel does not have is refused at the start,
/// with where to look.
#[test]
fn an_unknown_tcp_congestion_control_is_refused_at_the_start() {
    let dir = common::Scratch::new("test-overlay-cc");
    let file = dir.path().join("f.bin");
    write_random(&file, 1000, 1);
    let psk = dir.path().join("k.psk");
    keygen(&psk);
    let out = Command::new(BIN)
        .args(["overlay", "source"])
        .arg(&file)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--psk-file",
            psk.to_str().unwrap(),
        ])
        .args(["--tcp-cc", "nonesuch"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tcp_available_congestion_control"), "{err}");
}

/// `overlay node --relay-only`: a relay that keeps no file forwards the
/// checked stream; its leaf ends with the verified file, the relay's
/// summary counts what it forwarded, and `-o` with `--relay-only` or
/// `--relay-only` without `--listen` are refused at the command line.
#[test]
fn a_relay_only_node_forwards_to_a_leaf_that_verifies_and_keeps_nothing_itself() {
    let dir = common::Scratch::new("test-overlay-relay-only");
    let d = dir.path();
    let file = d.join("payload.bin");
    let data = write_random(&file, 2_000_000, 11);
    let psk = d.join("k.psk");
    keygen(&psk);
    let psk = psk.to_str().unwrap();
    std::fs::create_dir(d.join("leaf")).unwrap();
    for bad in [
        &["--relay-only", "--listen", "127.0.0.1:0", "-o", "x"][..],
        &["--relay-only"][..],
    ] {
        let mut args = vec![
            "overlay",
            "node",
            "--join",
            "127.0.0.1:9",
            "--psk-file",
            psk,
        ];
        args.extend_from_slice(bad);
        let (ok, _) = finish(start(&args));
        assert!(!ok, "{bad:?} must be refused");
    }
    let (source, src_addr) = start_source(&file, psk, "1");
    let relay = start_node(
        &src_addr,
        psk,
        &[
            "--relay-only",
            "--listen",
            "127.0.0.1:0",
            "--children",
            "1",
            "--json",
        ],
    );
    let relay_addr = address(&relay, "relaying on ");
    let leaf_dir = d.join("leaf");
    let leaf = start_node(
        &relay_addr,
        psk,
        &["-o", leaf_dir.to_str().unwrap(), "--json"],
    );
    assert!(finish(leaf).0, "the leaf decodes through the relay");
    assert_eq!(std::fs::read(leaf_dir.join("payload.bin")).unwrap(), data);
    let (ok, out) = finish(relay);
    assert!(ok, "the relay ends once its child hung up");
    let summary: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let forwarded = summary["bytes_to_children"].as_u64().unwrap();
    assert!(forwarded as usize >= data.len(), "{summary}");
    assert_eq!(summary["refused_symbols"], 0, "{summary}");
    assert_eq!(summary["children"][0]["bytes"], forwarded, "{summary}");
    // The source's summary names each child and what it sent it.
    let (ok, out) = finish(source);
    assert!(ok);
    let summary: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let child = &summary["children"][0];
    assert!(
        child["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{summary}"
    );
    assert!(child["copies"].as_f64().unwrap() >= 1.0, "{summary}");
    assert_eq!(child["refused"], false, "{summary}");
    // Nothing but the leaf's file was written.
    let written: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(written.len(), 3, "{written:?}");
}

/// `overlay probe`: a host serving probes streams to a key holder, whose
/// hop line `overlay plan` takes; a host with another key is refused and
/// measures nothing.
#[test]
fn a_probe_measures_a_hop_that_plan_takes_and_a_keyless_prober_gets_nothing() {
    let dir = common::Scratch::new("test-overlay-probe");
    let d = dir.path();
    let (psk, other) = (d.join("k.psk"), d.join("other.psk"));
    keygen(&psk);
    keygen(&other);
    let (psk, other) = (psk.to_str().unwrap(), other.to_str().unwrap());
    let server = start(&[
        "overlay",
        "probe",
        "--serve",
        "127.0.0.1:0",
        "--psk-file",
        psk,
        "--count",
        "2",
    ]);
    let addr = address(&server, "serving on ");
    let probe = |key: &str| {
        finish(start(&[
            "overlay",
            "probe",
            "--from",
            &addr,
            "--psk-file",
            key,
            "--seconds",
            "0.5",
            "--name",
            "n1",
        ]))
    };
    let (ok, _) = probe(other);
    assert!(!ok, "a prober without the key measures nothing");
    let (ok, hops) = probe(psk);
    assert!(ok);
    assert!(
        hops.contains("from = \"127.0.0.1\"\nto = \"n1\"\nrate = \""),
        "{hops}"
    );
    let topo = d.join("hops.toml");
    std::fs::write(&topo, format!("source = \"127.0.0.1\"\n{hops}")).unwrap();
    let plan = Command::new(BIN)
        .args(["overlay", "plan", topo.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(plan.status.success(), "{plan:?}");
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let n1 = plan["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "n1")
        .expect("n1 in the plan");
    assert_eq!(n1["parent"], "127.0.0.1", "{plan}");
    assert!(n1["predicted_bps"].as_f64().unwrap() > 1e6, "{plan}");
    assert!(finish(server).0);
}
