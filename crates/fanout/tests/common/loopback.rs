//! Helpers of the CLI's loopback tests: children killed by PID when
//! dropped, bounded waits, free loopback ports.

#![allow(dead_code)] // each test crate uses its own subset
#![expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]

use std::io::Read;
use std::net::UdpSocket;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bound on any one process.
pub const LIMIT: Duration = Duration::from_secs(60);

/// A child killed (by its PID) when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// Waits (bounded by [`LIMIT`]) and returns whether it succeeded.
    pub fn wait_ok(&mut self) -> bool {
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status.success();
            }
            assert!(start.elapsed() < LIMIT, "process did not finish in time");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A loopback address with a port free right now.
pub fn free_addr() -> String {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().to_string()
}

/// Reads all of `pipe` on a thread (a child's stdout or stderr).
pub fn read_all(mut pipe: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = pipe.read_to_end(&mut out);
        out
    })
}

/// The JSON object in `text` (a report after any other lines).
pub fn json_in(text: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(text);
    let i = text
        .find('{')
        .unwrap_or_else(|| panic!("no JSON in {text}"));
    serde_json::from_str(&text[i..]).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A `fanout stream send` child: its stdin, and its stdout and stderr
/// being read.
pub struct StreamSender {
    pub proc: Proc,
    pub stdin: ChildStdin,
    pub out: JoinHandle<Vec<u8>>,
    pub err: JoinHandle<Vec<u8>>,
}

/// Starts `BIN stream send --unicast --bind BIND --json --quiet
/// --idle-timeout 20 EXTRA…` (EXTRA names `--wait-for N` to wait for
/// more than one receiver).
pub fn stream_sender(bin: &str, bind: &str, extra: &[&str]) -> StreamSender {
    let mut child = Command::new(bin)
        .args(["stream", "send", "--unicast", "--bind", bind])
        .args(["--json", "--quiet", "--idle-timeout", "20"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    StreamSender {
        stdin: child.stdin.take().unwrap(),
        out: read_all(child.stdout.take().unwrap()),
        err: read_all(child.stderr.take().unwrap()),
        proc: Proc(child),
    }
}
