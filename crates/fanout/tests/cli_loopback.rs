//! The real binary over real UDP on loopback: transfers under injected loss,
//! hostile datagrams at live endpoints, a sender killed mid-transfer, and
//! bad input on the command line. Every child is killed by PID on drop.

#![expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]

mod common;
use common::{wait_for_len, write_random};

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fanout");

/// A child process killed when dropped, so failing tests leave nothing behind.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A fresh directory for a test, removed when dropped (panics included).
fn temp_dir(tag: &str) -> common::Scratch {
    common::Scratch::new(&format!("test-{tag}"))
}

/// Starts `fanout recv` on an ephemeral port; returns it and its address.
fn start_recv(out: &Path, extra: &[&str]) -> (Proc, SocketAddr, mpsc::Receiver<String>) {
    let mut child = Command::new(BIN)
        .args(["recv", "--listen", "127.0.0.1:0", "--json", "-o"])
        .arg(out)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = common::lines_of(child.stderr.take().unwrap());
    let line = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("recv prints its address");
    let addr = line
        .strip_prefix("fanout: listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .parse()
        .unwrap();
    (Proc(child), addr, rx)
}

/// Waits for a child with a time limit; returns its output.
fn finish(mut p: Proc, limit: Duration) -> Output {
    let start = Instant::now();
    while p.0.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < limit,
            "process did not finish within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut out = Vec::new();
    std::io::Read::read_to_end(p.0.stdout.as_mut().unwrap(), &mut out).unwrap();
    let status = p.0.wait().unwrap();
    Output {
        status,
        stdout: out,
        stderr: Vec::new(),
    }
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn transfer_with_loss(loss: &str, len: usize, seed: u64) {
    let scratch = temp_dir(&format!("loss{loss}"));
    let dir = scratch.path();
    let src = dir.join("payload.bin");
    let data = write_random(&src, len, seed);
    let out = dir.join("got");
    std::fs::create_dir_all(&out).unwrap();
    let (recv, addr, log) = start_recv(&out, &["--inject-loss", loss, "--loss-seed", "3"]);
    let send = Command::new(BIN)
        .args(["send", "--json", "--quiet", "--inject-loss", loss, "--to"])
        .arg(addr.to_string())
        .arg(&src)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let send = finish(Proc(send), Duration::from_secs(120));
    let recv = finish(recv, Duration::from_secs(30));
    if !(send.status.success() && recv.status.success()) {
        // The receiver's side of the story.
        for line in log.try_iter() {
            eprintln!("receiver: {line}");
        }
    }
    assert!(send.status.success() && recv.status.success());
    let (s, r) = (json(&send), json(&recv));
    assert_eq!(r["verified"], true);
    assert_eq!(s["blake3"], r["blake3"]);
    assert_eq!(std::fs::read(out.join("payload.bin")).unwrap(), data);
    assert!(!out.join("payload.bin.part").exists());
    if loss != "0" {
        assert!(r["injected_drops"].as_u64().unwrap() > 0, "{r}");
        assert!(
            s["transport"]["retransmitted_bytes"].as_u64().unwrap() > 0,
            "{s}"
        );
    }
}

#[test]
fn transfer_completes_under_one_percent_loss() {
    transfer_with_loss("0.01", 8 << 20, 1);
}

#[test]
fn transfer_completes_under_ten_percent_loss() {
    transfer_with_loss("0.10", 4 << 20, 2);
}

#[test]
fn hostile_datagrams_at_live_endpoints_are_counted_not_fatal() {
    let scratch = temp_dir("hostile");
    let dir = scratch.path();
    let src = dir.join("payload.bin");
    let data = write_random(&src, 16 << 20, 4);
    let out = dir.join("got.bin");
    let (recv, addr, _log) = start_recv(&out, &[]);
    let sender_port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let sender_addr: SocketAddr = format!("127.0.0.1:{sender_port}").parse().unwrap();
    let send = Proc(
        Command::new(BIN)
            .args(["send", "--json", "--quiet", "--window-mib", "1", "--bind"])
            .arg(sender_addr.to_string())
            .arg("--to")
            .arg(addr.to_string())
            .arg(&src)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Garbage, truncated headers and wrong-session datagrams at both ends.
    let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut rng = fanout_core::Rng::new(9);
    for i in 0..3000u32 {
        let mut b = vec![0u8; (rng.below(200)) as usize];
        rng.fill(&mut b);
        if i % 3 == 0 && b.len() >= 16 {
            b[..4].copy_from_slice(&[b'F', b'O', 1, 0]);
        }
        if i % 7 == 0 {
            b.truncate(5);
        }
        let _ = attacker.send_to(&b, addr);
        let _ = attacker.send_to(&b, sender_addr);
        if i % 100 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let send = finish(send, Duration::from_secs(60));
    let recv = finish(recv, Duration::from_secs(30));
    assert!(send.status.success() && recv.status.success());
    let (s, r) = (json(&send), json(&recv));
    assert_eq!(std::fs::read(&out).unwrap(), data);
    let drops = |v: &serde_json::Value| -> u64 {
        v["drops"]
            .as_object()
            .unwrap()
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum()
    };
    // Of 3000 sent, what the receiver counts depends on how many arrive
    // while it runs and on the kernel's buffer on a loaded machine (955 on
    // one CI run): a tenth is far from chance.
    assert!(drops(&r) > 300, "receiver drops {}", r["drops"]);
    assert!(drops(&s) > 100, "sender drops {}", s["drops"]);
    assert!(r["drops"].get("malformed").is_some(), "{}", r["drops"]);
}

#[test]
fn killed_sender_leaves_no_complete_looking_file() {
    let scratch = temp_dir("killed");
    let dir = scratch.path();
    let src = dir.join("payload.bin");
    write_random(&src, 64 << 20, 5);
    let out = dir.join("got.bin");
    let (recv, addr, _log) = start_recv(&out, &["--idle-timeout", "2"]);
    let mut send = Proc(
        Command::new(BIN)
            .args(["send", "--quiet", "--window-mib", "1", "--to"])
            .arg(addr.to_string())
            .arg(&src)
            .spawn()
            .unwrap(),
    );
    // Let some data flow, then kill the sender.
    let start = Instant::now();
    while !dir.join("got.bin.part").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no transfer started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    send.0.kill().unwrap();
    let recv = finish(recv, Duration::from_secs(20));
    assert!(!recv.status.success(), "an incomplete transfer must fail");
    assert!(!out.exists(), "no final file");
    assert!(!dir.join("got.bin.part").exists(), "partial file removed");
}

/// A receiver stopped with Ctrl-C (SIGINT) mid-transfer tells the sender
/// before it exits (code 130): the sender fails at once, naming the
/// interruption, instead of waiting out a stall or its idle timeout.
#[test]
fn an_interrupted_receiver_tells_the_sender_at_once() {
    let scratch = temp_dir("interrupted");
    let dir = scratch.path();
    let src = dir.join("payload.bin");
    write_random(&src, 64 << 20, 6);
    let out = dir.join("got.bin");
    // Injected loss keeps the transfer going long enough to interrupt.
    let (recv, addr, _log) = start_recv(&out, &["--inject-loss", "0.05"]);
    let send = Command::new(BIN)
        .args(["send", "--quiet", "--window-mib", "1", "--to"])
        .arg(addr.to_string())
        .arg(&src)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut send = Proc(send);
    let sender_log = read_lines(send.0.stderr.take().unwrap());
    wait_for_len(&dir.join("got.bin.part"), 1 << 20, Duration::from_secs(10));
    let pid = recv.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let interrupted = Instant::now();
    let recv = finish(recv, Duration::from_secs(5));
    assert_eq!(recv.status.code(), Some(130), "the receiver's exit code");
    let send = finish(send, Duration::from_secs(5));
    let took = interrupted.elapsed();
    let err = sender_log.join().unwrap().join("\n");
    assert!(!send.status.success());
    assert!(err.contains("interrupted by its operator"), "{err}");
    assert!(
        took < Duration::from_secs(2),
        "the sender ended {took:?} after"
    );
    assert!(!out.exists() && !dir.join("got.bin.part").exists());
}

/// The output path is checked before anything is joined: a missing
/// directory, or an existing file without --overwrite, is an error at
/// once, not after a sender connected.
#[test]
fn a_bad_output_path_fails_before_listening() {
    let scratch = temp_dir("preflight");
    let dir = scratch.path();
    std::fs::write(dir.join("taken.bin"), b"mine").unwrap();
    for (out, says) in [
        (dir.join("no-such-dir").join("x.bin"), "does not exist"),
        (dir.join("taken.bin"), "--overwrite"),
    ] {
        let started = Instant::now();
        let o = Command::new(BIN)
            .args(["recv", "--listen", "127.0.0.1:0", "--wait", "20", "-o"])
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(says) && !err.contains("listening"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    assert_eq!(std::fs::read(dir.join("taken.bin")).unwrap(), b"mine");
}

/// `--max-rate` caps the sender below what loopback carries (several
/// Gbit/s): the goodput stays under the cap (which counts IP packets, so
/// the file's bytes arrive a few percent below it), with `--dscp` and
/// `--socket-buffer` accepted on both sides.
#[test]
fn max_rate_caps_the_sender() {
    let scratch = temp_dir("max-rate");
    let dir = scratch.path();
    let src = dir.join("payload.bin");
    let data = write_random(&src, 6 << 20, 12);
    let out = dir.join("got.bin");
    let tuning = ["--dscp", "af41", "--socket-buffer", "4MiB"];
    let stats = dir.join("stats.jsonl");
    let stats_arg = stats.to_str().unwrap();
    let mut send_extra = vec![
        "--max-rate",
        "40M",
        "--stats",
        stats_arg,
        "--stats-interval",
        "100",
    ];
    send_extra.extend(tuning);
    let (send, recv, err) = send_to_recv_with(&src, &out, &tuning, &send_extra);
    assert!(send.status.success() && recv.status.success(), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), data);
    let mbps = json(&send)["goodput_bps"].as_f64().unwrap() / 1e6;
    assert!((15.0..=40.0).contains(&mbps), "{mbps:.1} Mbit/s");
    // Statistics lines while it ran: the receiver's acknowledged bytes
    // grow, every ~100 ms, to the whole stream.
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&stats)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let acked: Vec<u64> = (lines.iter())
        .filter(|l| l["kind"] == "receiver")
        .map(|l| l["acked_bytes"].as_u64().unwrap())
        .collect();
    assert!(acked.len() >= 8, "{} receiver lines", acked.len());
    assert!(acked.windows(2).all(|w| w[0] <= w[1]), "{acked:?}");
    assert!(*acked.last().unwrap() > data.len() as u64, "{acked:?}");
    assert!(lines.iter().any(|l| l["kind"] == "session"));
    // Bad values are refused by name.
    for (flag, value) in [
        ("--max-rate", "fast"),
        ("--dscp", "64"),
        ("--socket-buffer", "1B"),
    ] {
        let o = Command::new(BIN)
            .args(["send", "--to", "127.0.0.1:9", flag, value])
            .arg(&src)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(e.contains(flag), "{e}");
    }
}

/// Collects a pipe's lines on a thread until it closes.
fn read_lines(pipe: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || BufReader::new(pipe).lines().map_while(Result::ok).collect())
}

/// Sends `src` to a `fanout recv -o out` started with `extra`; returns
/// both outputs and the receiver's stderr.
fn send_to_recv(src: &Path, out: &Path, extra: &[&str]) -> (Output, Output, String) {
    send_to_recv_with(src, out, extra, &[])
}

/// [`send_to_recv`] with flags for each side.
fn send_to_recv_with(
    src: &Path,
    out: &Path,
    recv_extra: &[&str],
    send_extra: &[&str],
) -> (Output, Output, String) {
    let (recv, addr, log) = start_recv(out, recv_extra);
    let send = Command::new(BIN)
        .args(["send", "--json", "--quiet", "--to"])
        .arg(addr.to_string())
        .arg(src)
        .args(send_extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let send = finish(Proc(send), Duration::from_secs(60));
    let recv = finish(recv, Duration::from_secs(30));
    let stderr: Vec<String> = log.iter().collect(); // to its end: the process exited
    (send, recv, stderr.join("\n"))
}

/// Keys from `fanout keygen`: a transfer protected by a pre-shared key or
/// by key pairs arrives whole; a sender without the receiver's key, or
/// not the one it pins, is never answered; an unprotected one says so.
#[test]
fn protected_transfers_need_the_right_keys() {
    let scratch = temp_dir("keys");
    let dir = scratch.path();
    let src = dir.join("payload.bin");
    let data = write_random(&src, 300_000, 11);
    let keygen = |args: &[&str]| {
        let o = Command::new(BIN)
            .arg("keygen")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    keygen(&["--psk", "a.psk"]);
    keygen(&["--psk", "b.psk"]);
    keygen(&["sender.key"]);
    keygen(&["recv.key"]);
    keygen(&["other.key"]);
    let p = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    std::fs::copy(p("recv.key.pub"), p("allowed")).unwrap();
    let run = |case: &str, recv: &[&str], send: &[&str]| {
        let out = dir.join(case);
        std::fs::create_dir_all(&out).unwrap();
        let (s, r, err) = send_to_recv_with(&src, &out, recv, send);
        let got = std::fs::read(out.join("payload.bin")).ok();
        // Both reports name the protection they ran under.
        let mode = |o: &Output| {
            serde_json::from_slice::<serde_json::Value>(&o.stdout)
                .ok()
                .map(|v| v["protection"].as_str().unwrap_or("").to_owned())
        };
        if s.status.success() && r.status.success() {
            assert_eq!(mode(&s), mode(&r), "{err}");
        }
        (s.status.success() && r.status.success(), got, err, mode(&s))
    };
    let psk = ["--psk-file", &p("a.psk")];
    let (ok, got, err, mode) = run("psk", &psk, &psk);
    assert!(ok && got.as_ref() == Some(&data), "{err}");
    assert!(!err.contains("unprotected"), "{err}");
    assert_eq!(mode.as_deref(), Some("psk"));
    let recv_keys = [
        "--key",
        &p("recv.key"),
        "--sender-key",
        &p("sender.key.pub"),
    ];
    let send_keys = ["--key", &p("sender.key"), "--allow-keys", &p("allowed")];
    let (ok, got, err, mode) = run("pairs", &recv_keys, &send_keys);
    assert!(ok && got.as_ref() == Some(&data), "{err}");
    assert_eq!(mode.as_deref(), Some("keys"));
    // Another pre-shared key, or a sender the receiver does not pin: no
    // handshake completes and nothing is written.
    let wait = ["--wait", "2"];
    let other_psk = ["--psk-file", &p("b.psk")];
    let (ok, got, _, _) = run("wrong-psk", &[&psk[..], &wait].concat(), &other_psk);
    assert!(!ok && got.is_none());
    let impostor = ["--key", &p("other.key"), "--allow-keys", &p("allowed")];
    let (ok, got, _, _) = run("impostor", &[&recv_keys[..], &wait].concat(), &impostor);
    assert!(!ok && got.is_none());
    // No keys: it works, and says it is unprotected.
    let (ok, got, err, mode) = run("clear", &[], &[]);
    assert!(ok && got.as_ref() == Some(&data), "{err}");
    assert!(err.contains("warning: unprotected session"), "{err}");
    assert_eq!(mode.as_deref(), Some("none"));
}

#[test]
fn an_existing_file_is_replaced_only_with_overwrite() {
    let scratch = temp_dir("existing");
    let dir = scratch.path();
    let src = dir.join("payload.bin");
    let data = write_random(&src, 300_000, 8);
    let out = dir.join("got");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("payload.bin"), b"mine").unwrap();
    // A link planted at the .part name is not followed.
    std::os::unix::fs::symlink(&src, out.join("payload.bin.part")).unwrap();
    let (send, recv, err) = send_to_recv(&src, &out, &[]);
    assert!(!recv.status.success() && !send.status.success());
    assert!(
        err.contains("exists") && err.contains("--overwrite"),
        "{err}"
    );
    assert_eq!(std::fs::read(out.join("payload.bin")).unwrap(), b"mine");
    let (send, recv, _) = send_to_recv(&src, &out, &["--overwrite"]);
    assert!(send.status.success() && recv.status.success());
    assert_eq!(std::fs::read(out.join("payload.bin")).unwrap(), data);
    assert_eq!(
        std::fs::read(&src).unwrap(),
        data,
        "the link's target untouched"
    );
    assert!(out.join("payload.bin.part").symlink_metadata().is_err());
}

#[test]
fn allow_from_admits_only_the_senders_it_names() {
    let scratch = temp_dir("allow");
    let dir = scratch.path();
    let src = dir.join("payload.bin");
    let data = write_random(&src, 200_000, 9);
    let out = dir.join("got");
    std::fs::create_dir_all(&out).unwrap();
    let (send, recv, _) = send_to_recv(&src, &out, &["--allow-from", "10.0.0.0/8,127.0.0.1"]);
    assert!(send.status.success() && recv.status.success());
    assert_eq!(std::fs::read(out.join("payload.bin")).unwrap(), data);
    // A sender outside the list is never answered: the receiver gives up.
    std::fs::remove_file(out.join("payload.bin")).unwrap();
    let (recv, addr, log) = start_recv(&out, &["--allow-from", "192.0.2.0/24", "--wait", "2"]);
    let _send = Proc(
        Command::new(BIN)
            .args(["send", "--quiet", "--to"])
            .arg(addr.to_string())
            .arg(&src)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let recv = finish(recv, Duration::from_secs(20));
    let err: Vec<String> = log.iter().collect(); // to its end: the process exited
    assert!(!recv.status.success());
    assert!(err.join("\n").contains("no sender connected"), "{err:?}");
    assert!(!out.join("payload.bin").exists() && !out.join("payload.bin.part").exists());
    // A malformed network is a clear error.
    let bad = Command::new(BIN)
        .args([
            "recv",
            "--listen",
            "127.0.0.1:0",
            "--allow-from",
            "10.0.0/33",
            "-o",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let msg = String::from_utf8_lossy(&bad.stderr);
    assert!(msg.contains("neither an address nor a network"), "{msg}");
}

#[test]
fn bad_input_gets_clear_errors() {
    let run = |args: &[&str]| {
        let o = Command::new(BIN).args(args).output().unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (ok, err) = run(&["send", "/nonexistent/file", "--to", "127.0.0.1:9"]);
    assert!(
        !ok && err.contains("cannot open /nonexistent/file"),
        "{err}"
    );
    let (ok, err) = run(&["send", "Cargo.toml", "--to", "not-an-address"]);
    assert!(!ok && err.contains("cannot resolve"), "{err}");
    let (ok, err) = run(&[
        "recv",
        "--listen",
        "127.0.0.1:0",
        "-o",
        "/nonexistent/dir/x",
    ]);
    assert!(!ok && err.contains("does not exist"), "{err}");
    let (ok, err) = run(&["send", "x", "--to", "127.0.0.1:9", "--inject-loss", "2"]);
    assert!(!ok && err.contains("not a probability"), "{err}");
    let (ok, err) = run(&["sim", "/nonexistent.toml"]);
    assert!(!ok && err.contains("nonexistent.toml"), "{err}");
    // Typos fail instead of degrading: a TTL beyond 255, an unknown log
    // level, a session flag on a transfer to one receiver.
    let (ok, err) = run(&[
        "send",
        "Cargo.toml",
        "--group",
        "239.1.1.1:7000",
        "--bind",
        "127.0.0.1:0",
        "--ttl",
        "300",
    ]);
    assert!(!ok && err.contains("--ttl"), "{err}");
    let (ok, err) = run(&["--log", "verbose", "demo"]);
    assert!(!ok && err.contains("verbose"), "{err}");
    let (ok, err) = run(&[
        "send",
        "Cargo.toml",
        "--to",
        "127.0.0.1:9",
        "--wait-for",
        "3",
    ]);
    assert!(!ok && err.contains("--wait-for apply to sessions"), "{err}");
    let (ok, _) = run(&["--help"]);
    assert!(ok);
}

/// `fanout demo` (the README's first command): one sender and four
/// receivers, over real IP multicast in namespaces where it can create them
/// (and says so), otherwise on loopback by unicast fan-out (and says so);
/// every receiver verifies the file and the table lists them.
#[test]
fn the_demo_shows_one_sender_and_four_receivers() {
    let multicast = fanout_netns::require_netns().is_none();
    let o = Command::new(BIN)
        .args(["demo", "--mib", "4"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let label = if multicast {
        "4 receivers over real IP multicast"
    } else {
        "4 receivers on loopback by UNICAST fan-out"
    };
    assert!(text.contains(label), "{text}");
    let rows = text
        .lines()
        .filter(|l| l.contains(" verified ") && !l.contains("Mbit"))
        .count();
    assert_eq!(rows, 4, "{text}");
    assert!(text.contains("Jain fairness index"), "{text}");
}

/// Shell completions and man pages come from the CLI itself: they know
/// every command and flag.
#[test]
fn completions_and_man_pages_are_generated_from_the_cli() {
    let out = |args: &[&str]| {
        let o = Command::new(BIN).args(args).output().unwrap();
        assert!(o.status.success(), "{args:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    let bash = out(&["completions", "bash"]);
    assert!(bash.contains("_fanout()") && bash.contains("--max-rate"));
    assert!(out(&["completions", "zsh"]).contains("#compdef fanout"));
    let man = out(&["man"]);
    assert!(man.contains(".TH fanout 1") && man.contains("recv"));
    let dir = temp_dir("man");
    out(&["man", "--dir", dir.path().to_str().unwrap()]);
    let page = std::fs::read_to_string(dir.path().join("fanout-send.1")).unwrap();
    assert!(page.contains("require"), "{page}");
    // Every command's help ends with examples.
    for cmd in [
        "send", "recv", "relay", "merge", "sim", "demo", "lab", "keygen", "overlay",
    ] {
        assert!(out(&[cmd, "--help"]).contains("Example"), "{cmd} --help");
    }
}

/// A sender of wire version 1 (before the handshake frames were split)
/// is never misread: its CONNECT is dropped as `unsupported_version`, the
/// receiver waits out `--wait`, and its error says why.
#[test]
fn a_peer_of_another_wire_version_gets_a_clear_error() {
    let dir = temp_dir("version");
    let (p, addr, log) = start_recv(dir.path(), &["--wait", "2"]);
    let v1_connect: Vec<u8> = [
        &b"FO"[..],
        &[1, 0],                   // version 1, no flags
        &7u64.to_be_bytes(),       // session id
        &0u32.to_be_bytes(),       // packet number
        &[0x02, 1, 0x45, 0x8d, 0], // v1 CONNECT: sends_data 1, max payload 1421, window 0
        &[0, 0, 0, 0, 0, 0],       // timestamp, member id, start offset
    ]
    .concat();
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..3 {
        s.send_to(&v1_connect, addr).unwrap();
    }
    let out = finish(p, Duration::from_secs(20));
    assert!(!out.status.success());
    let err: Vec<String> = log.iter().collect(); // to its end: the process exited
    assert!(
        err.iter()
            .any(|l| l.contains("3 datagrams of another fanout wire version")),
        "{err:?}"
    );
}

/// The library API and the CLI speak the same file protocol (both run
/// `fanout_app`): a file sent with `SessionListener::send_file` arrives
/// through `fanout recv --from` verified, under its name.
#[test]
fn a_file_sent_through_the_library_api_arrives_through_the_cli() {
    use fanout_io::api::{SessionListener, SessionOptions};
    let dir = temp_dir("api-file");
    let data = {
        let mut v = vec![0u8; 3 << 20];
        fanout_core::Rng::new(21).fill(&mut v);
        v
    };
    let mut session =
        SessionListener::bind("127.0.0.1:0".parse().unwrap(), SessionOptions::unicast()).unwrap();
    let recv = Proc(
        Command::new(BIN)
            .args(["recv", "--json", "--quiet", "--from"])
            .arg(session.local_addr().to_string())
            .arg("-o")
            .arg(dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let manifest = fanout_app::Manifest::file("from-api.bin", data.len() as u64);
    let summary = session.send_file(&data[..], manifest).unwrap();
    assert_eq!(summary.completed(), 1);
    let out = finish(recv, Duration::from_secs(30));
    assert!(out.status.success());
    let report = json(&out);
    assert_eq!(report["verified"], true, "{report}");
    assert!(std::fs::read(dir.path().join("from-api.bin")).unwrap() == data);
}

/// And back: `fanout send --unicast` to a receiver of the library API,
/// which keeps the file only once its hash matched.
#[test]
fn a_file_sent_by_the_cli_arrives_through_the_library_api() {
    use fanout_io::api::Subscriber;
    let scratch = temp_dir("cli-file");
    let src = scratch.path().join("from-cli.bin");
    let data = write_random(&src, 2 << 20, 22);
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let sender: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let send = Proc(
        Command::new(BIN)
            .args(["send", "--json", "--quiet", "--unicast", "--bind"])
            .arg(sender.to_string())
            .arg(&src)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let out_dir = scratch.path().join("got");
    std::fs::create_dir_all(&out_dir).unwrap();
    let sub = Subscriber::subscribe(None, "127.0.0.1:0".parse().unwrap()).unwrap();
    let got = sub
        .connect(sender)
        .unwrap()
        .receive_file(&out_dir, fanout_io::Existing::Refuse)
        .unwrap();
    assert_eq!(got.path, out_dir.join("from-cli.bin"));
    assert!(std::fs::read(&got.path).unwrap() == data);
    let out = finish(send, Duration::from_secs(30));
    assert!(out.status.success());
    assert_eq!(
        json(&out)["blake3"],
        blake3::Hash::from(got.blake3).to_hex().to_string()
    );
}

/// A tree of files `[(relative path, bytes)]` under `root`, with an empty
/// directory and an executable file.
fn write_tree(root: &Path, seed: u64) -> Vec<(String, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt;
    let files = [
        ("tree/bin/run.sh", 2_000),
        ("tree/data/big.bin", 1_500_000),
        ("tree/data/empty.txt", 0),
        ("tree/data/nested/deep.bin", 70_000),
        ("one.bin", 400_000),
    ];
    std::fs::create_dir_all(root.join("tree/empty-dir")).unwrap();
    let mut out = Vec::new();
    for (i, (rel, len)) in files.into_iter().enumerate() {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        out.push((rel.to_owned(), write_random(&path, len, seed + i as u64)));
    }
    std::fs::set_permissions(
        root.join("tree/bin/run.sh"),
        std::fs::Permissions::from_mode(0o750),
    )
    .unwrap();
    out
}

/// Checks that `out` holds every file of `tree` (and the empty directory,
/// and the executable bit) and no `.part` file.
fn assert_tree_arrived(out: &Path, tree: &[(String, Vec<u8>)]) {
    use std::os::unix::fs::PermissionsExt;
    for (rel, data) in tree {
        let got = std::fs::read(out.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert!(got == *data, "{rel} differs");
    }
    assert!(out.join("tree/empty-dir").is_dir());
    let mode = std::fs::metadata(out.join("tree/bin/run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o750);
    let parts = walk(out)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "part"))
        .count();
    assert_eq!(parts, 0);
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

/// `fanout send FILE DIR --to`: the receiver gets the file and the whole
/// tree under its -o directory, modes kept; a second time it refuses
/// (the files exist) unless --overwrite; an -o that is a file path is
/// refused with a clear error, and nothing is written.
#[test]
fn several_files_and_a_directory_tree_arrive_in_one_transfer() {
    let scratch = temp_dir("tree");
    let dir = scratch.path();
    let src = dir.join("src");
    let tree = write_tree(&src, 40);
    let out = dir.join("got");
    std::fs::create_dir_all(&out).unwrap();
    let send_tree = |out: &Path, recv_extra: &[&str]| {
        let (recv, addr, log) = start_recv(out, recv_extra);
        let send = Command::new(BIN)
            .args(["send", "--json", "--quiet", "--to"])
            .arg(addr.to_string())
            .arg(src.join("one.bin"))
            .arg(src.join("tree"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let send = finish(Proc(send), Duration::from_secs(60));
        let recv = finish(recv, Duration::from_secs(30));
        (send, recv, log.iter().collect::<Vec<_>>().join("\n"))
    };
    let (send, recv, err) = send_tree(&out, &[]);
    assert!(send.status.success() && recv.status.success(), "{err}");
    assert_tree_arrived(&out, &tree);
    let report = json(&recv);
    assert_eq!(
        report["files"].as_array().map(Vec::len),
        Some(5),
        "{report}"
    );
    assert_eq!(report["verified"], true);
    let total: usize = tree.iter().map(|(_, d)| d.len()).sum();
    assert_eq!(report["bytes"], total as u64);
    // Again: every file exists, so the transfer is refused before a byte.
    let (send, recv, err) = send_tree(&out, &[]);
    assert!(!send.status.success() && !recv.status.success());
    assert!(
        err.contains("exists") && err.contains("--overwrite"),
        "{err}"
    );
    assert_tree_arrived(&out, &tree);
    let (send, recv, err) = send_tree(&out, &["--overwrite"]);
    assert!(send.status.success() && recv.status.success(), "{err}");
    assert_tree_arrived(&out, &tree);
    // A file path cannot hold a tree.
    let (_, recv, err) = send_tree(&dir.join("one-file.bin"), &[]);
    assert!(!recv.status.success());
    assert!(err.contains("must be a directory"), "{err}");
    assert!(!dir.join("one-file.bin").exists());
}

/// A loopback address with a port free now.
fn free_loopback_addr() -> String {
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

/// `fanout send PATHS --unicast --bind BIND --wait-for 1` with `extra`
/// flags, its JSON report piped.
fn start_session_sender(bind: &str, extra: &[&str], paths: &[std::path::PathBuf]) -> Proc {
    let send = Command::new(BIN)
        .args(["send", "--json", "--quiet", "--unicast", "--bind", bind])
        .args(["--wait-for", "1"])
        .args(extra)
        .args(paths)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Proc(send)
}

/// `fanout recv --from BIND -o OUT --json --quiet` with `extra` flags.
fn start_session_recv(bind: &str, out: &Path, extra: &[&str]) -> Proc {
    let child = Command::new(BIN)
        .args([
            "recv", "--json", "--quiet", "--wait", "20", "--from", bind, "-o",
        ])
        .arg(out)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Proc(child)
}

/// Checks that a resumed receiver (report transport `t`) of a one-file
/// session of `len` bytes named payload.bin received no more than what
/// its files lacked, plus 5%; returns (received, remainder).
fn assert_received_only_the_remainder(t: &serde_json::Value, len: u64) -> (u64, u64) {
    let header = fanout_app::Manifest::file("payload.bin", len)
        .encode()
        .len() as u64;
    let remainder = header + len + 32 - t["resumed_at"].as_u64().unwrap();
    let received = t["payload_bytes_received"].as_u64().unwrap()
        + t["catch_up_payload_bytes_received"].as_u64().unwrap();
    assert!(
        received as f64 <= remainder as f64 * 1.05,
        "received {received} after the restart for a remainder of {remainder}: {t}"
    );
    (received, remainder)
}

/// A session of a tree to two receivers by unicast fan-out, the second
/// joining after the first bytes went out: it gets the missed prefix of
/// the tree by catch-up, and both trees arrive whole.
#[test]
fn a_late_joiner_gets_a_whole_tree_by_catch_up() {
    let scratch = temp_dir("tree-late");
    let dir = scratch.path();
    let src = dir.join("src");
    let tree = write_tree(&src, 50);
    let bind = free_loopback_addr();
    // 2 MB at 8 Mbit/s: about 2 s, so the second receiver joins late.
    let send = start_session_sender(
        &bind,
        &["--max-rate", "8M"],
        &[src.join("one.bin"), src.join("tree")],
    );
    let recv = |name: &str| {
        let out = dir.join(name);
        std::fs::create_dir_all(&out).unwrap();
        let child = Command::new(BIN)
            .args([
                "recv", "--json", "--quiet", "--wait", "20", "--from", &bind, "-o",
            ])
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        (Proc(child), out)
    };
    let (first, first_out) = recv("first");
    std::thread::sleep(Duration::from_millis(800));
    let (late, late_out) = recv("late");
    let first = finish(first, Duration::from_secs(60));
    let late = finish(late, Duration::from_secs(60));
    let send = finish(send, Duration::from_secs(60));
    assert!(send.status.success(), "sender failed");
    assert!(first.status.success() && late.status.success());
    assert_tree_arrived(&first_out, &tree);
    assert_tree_arrived(&late_out, &tree);
    let report = json(&late);
    assert!(
        report["transport"]["start_offset"].as_u64().unwrap_or(0) > 0,
        "the second receiver joined late: {report}"
    );
}

/// A session receiver killed (SIGKILL) mid-transfer and started again
/// with the same output resumes: it keeps what its `.part` holds, fetches
/// the gap by catch-up and the rest live, and receives no more than the
/// remainder plus 5%; the file arrives whole. The sender lets the old
/// member go as "restarted" (not counted against `--require all`).
#[test]
fn a_killed_receiver_resumes_where_its_file_ends() {
    let scratch = temp_dir("resume");
    let dir = scratch.path();
    let src = dir.join("payload.bin");
    let len = 24 << 20;
    let data = write_random(&src, len, 77);
    let out = dir.join("got");
    std::fs::create_dir_all(&out).unwrap();
    let bind = free_loopback_addr();
    // 24 MiB at 40 Mbit/s: about 5 s.
    let send = start_session_sender(&bind, &["--max-rate", "40M"], &[src]);
    let recv = || start_session_recv(&bind, &out, &[]);
    let mut first = recv();
    let part = out.join("payload.bin.part");
    wait_for_len(&part, 8 << 20, Duration::from_secs(30));
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    let kept = std::fs::metadata(&part).unwrap().len();
    assert!(kept < len as u64, "killed before the end");
    let second = finish(recv(), Duration::from_secs(60));
    let send = finish(send, Duration::from_secs(60));
    assert!(second.status.success(), "the restarted receiver failed");
    assert!(send.status.success(), "the sender failed");
    assert!(std::fs::read(out.join("payload.bin")).unwrap() == data);
    let t = &json(&second)["transport"];
    let resumed_at = t["resumed_at"].as_u64().unwrap();
    let header = fanout_app::Manifest::file("payload.bin", len as u64)
        .encode()
        .len() as u64;
    let stream = header + len as u64 + 32;
    assert!(
        resumed_at > header + (4 << 20),
        "resumed at {resumed_at}: {t}"
    );
    assert_eq!(
        stream - resumed_at,
        assert_received_only_the_remainder(t, len as u64).1
    );
    let outcomes: Vec<String> = json(&send)["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["outcome"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        outcomes.iter().filter(|o| *o == "restarted").count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| *o == "completed").count(),
        1,
        "{outcomes:?}"
    );
    // The record is gone once the file is complete.
    let records = std::fs::read_dir(&out)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".fanout-resume")
        })
        .count();
    assert_eq!(records, 0);
}

/// A session sender killed (SIGKILL) mid-transfer and started again with
/// its `--restart-file` resumes the same session where its receiver had
/// acknowledged: the receiver, started again too, keeps what its `.part`
/// holds and gets only the rest; the file arrives whole and the restart
/// file is removed.
#[test]
fn a_killed_sender_resumes_its_session_from_its_restart_file() {
    let scratch = temp_dir("restart-file");
    let dir = scratch.path();
    let src = dir.join("payload.bin");
    let len = 24 << 20;
    let data = write_random(&src, len, 78);
    let out = dir.join("got");
    std::fs::create_dir_all(&out).unwrap();
    let restart = dir.join("send.restart");
    let restart_arg = restart.to_str().unwrap();
    let bind = free_loopback_addr();
    let extra = ["--max-rate", "40M", "--restart-file", restart_arg];
    let recv = || start_session_recv(&bind, &out, &["--idle-timeout", "2"]);
    let mut first_send = start_session_sender(&bind, &extra, std::slice::from_ref(&src));
    let first_recv = recv();
    // Kill the sender once the restart file says 8 MiB were acknowledged.
    let start = Instant::now();
    let acked = loop {
        let acked = std::fs::read(&restart)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["acked"].as_u64())
            .unwrap_or(0);
        if acked >= 8 << 20 {
            break acked;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no progress");
        std::thread::sleep(Duration::from_millis(5));
    };
    first_send.0.kill().unwrap();
    first_send.0.wait().unwrap();
    let first_recv = finish(first_recv, Duration::from_secs(30));
    assert!(!first_recv.status.success(), "the sender died");
    // Both again: the session resumes.
    let send = start_session_sender(&bind, &extra, std::slice::from_ref(&src));
    let second = finish(recv(), Duration::from_secs(60));
    let send = finish(send, Duration::from_secs(60));
    assert!(second.status.success() && send.status.success());
    assert!(std::fs::read(out.join("payload.bin")).unwrap() == data);
    let sent = json(&send);
    let resumed_at = sent["transport"]["resumed_at"].as_u64().unwrap();
    assert!(
        resumed_at >= acked,
        "resumed at {resumed_at}, {acked} acknowledged"
    );
    let t = &json(&second)["transport"];
    assert_eq!(t["start_offset"].as_u64(), Some(resumed_at), "{t}");
    let (received, remainder) = assert_received_only_the_remainder(t, len as u64);
    assert!(!restart.exists(), "the restart file is removed once done");
    eprintln!(
        "sender resumed at {resumed_at} ({acked} acknowledged when killed); the receiver kept {} and received {received} for a remainder of {remainder} ({:.4}x)",
        t["resumed_at"],
        received as f64 / remainder as f64
    );
}
