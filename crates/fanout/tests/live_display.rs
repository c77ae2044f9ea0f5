//! The sender's live display in a real terminal (tmux, on a private
//! server this test starts and kills): what a person reads while a session
//! waits for its receivers, while it runs, and at the end.

#![expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]

#[path = "common/loopback.rs"]
mod loopback;

use loopback::{free_addr, Proc};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fanout");

/// A private tmux server (its own socket name), killed when dropped.
struct Tmux(String);

impl Tmux {
    /// Starts `command` in a detached 160×40 terminal; `None` without tmux.
    fn start(command: &str) -> Option<Tmux> {
        let name = format!("fanout-display-{}", std::process::id());
        let ok = Command::new("tmux")
            .args(["-L", &name, "new-session", "-d", "-x", "160", "-y", "40"])
            .arg(command)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmux(name))
    }

    /// What the terminal shows now.
    fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.0, "capture-pane", "-p"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits (bounded) until the screen satisfies `want`; returns it.
    fn wait_for(&self, what: &str, want: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if want(&s) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "never showed {what}; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.0, "kill-server"])
            .status();
    }
}

fn write_random(path: &Path, len: usize) {
    let mut v = vec![0u8; len];
    fanout_core::Rng::new(21).fill(&mut v);
    std::fs::write(path, v).unwrap();
}

#[test]
fn the_live_table_reads_right_in_a_terminal() {
    if Command::new("tmux").arg("-V").output().is_err() {
        assert!(
            std::env::var_os("FANOUT_NETNS_REQUIRED").is_none(),
            "tmux is missing (apt-get install tmux)"
        );
        eprintln!("skipped: no tmux");
        return;
    }
    let scratch = std::env::temp_dir().join(format!("fanout-display-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let src = scratch.join("payload.bin");
    write_random(&src, 12 << 20);
    let bind = free_addr();
    // Capped so that the table stays up for a few seconds; the shell keeps
    // the pane open after the sender exits, with its exit code.
    let sender = format!(
        "{BIN} send {} --unicast --bind {bind} --wait-for 2 --max-rate 25M; echo EXIT=$?; sleep 60",
        src.display()
    );
    let tmux = Tmux::start(&sender).expect("tmux starts");
    let waiting = tmux.wait_for("the waiting state", |s| {
        s.contains("waiting for receivers: 0 of 2 joined")
    });
    assert!(
        !waiting.contains("eta"),
        "no rate or ETA while waiting:\n{waiting}"
    );
    let receivers: Vec<Proc> = (1..=2)
        .map(|i| {
            Proc(
                Command::new(BIN)
                    .args(["recv", "--quiet", "--from", &bind, "-o"])
                    .arg(scratch.join(format!("got{i}.bin")))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    let table = tmux.wait_for("the receiver table", |s| {
        s.contains("state") && s.matches("127.0.0.1:").count() >= 2
    });
    // The summary line counts both, the header names the columns, and each
    // receiver has a row with its address and a progress percentage.
    assert!(table.contains("2 receivers"), "{table}");
    for column in ["address", "Mbit/s", "RTT ms", "progress"] {
        assert!(table.contains(column), "no `{column}` column:\n{table}");
    }
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.contains("127.0.0.1:") && l.trim_end().ends_with('%'))
        .collect();
    assert_eq!(rows.len(), 2, "{table}");
    let end = tmux.wait_for("the end", |s| s.contains("EXIT="));
    assert!(end.contains("EXIT=0"), "{end}");
    assert!(end.contains("2 of 2 receivers completed"), "{end}");
    assert!(
        !end.contains('\u{1b}'),
        "no raw escape codes on screen:\n{end}"
    );
    eprintln!("while running:\n{table}\nat the end:\n{end}");
    drop(receivers);
    drop(tmux);
    let _ = std::fs::remove_dir_all(&scratch);
}
