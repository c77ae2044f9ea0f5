//! `docs/guide.md` followed step by step, its own command lines run as
//! written (the addresses of its examples mapped to a LAN of namespaces
//! this test creates, 10.77.0.0/24; absolute paths mapped into a scratch
//! directory; `--wait-for 100` to the receivers there are): install
//! (completions, man pages), two hosts (one file, then files and a tree),
//! a hundred hosts (receiver services told only the group, the sender's
//! exit code and report), the systemd unit's command line with its
//! settings file, the statistics read with the guide's `jq` line, and the
//! security section's keys. If the guide changes, this test reads the new
//! lines. Every wait is bounded; the LAN guard kills what runs in it and
//! removes it, panics too.

#![expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]

mod common;
use common::write_random;
use common::Scratch;
use fanout_netns::{require_netns, LanTopology, NsChild};
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fanout");
/// Receiver hosts (hosts 1..=RECEIVERS; host 0 sends).
const RECEIVERS: usize = 3;

/// The guide's `sh` blocks, each as its command lines (continuation
/// lines joined, comment lines dropped).
fn guide_blocks() -> Vec<Vec<String>> {
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/guide.md"))
            .expect("docs/guide.md");
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    let mut pending = String::new();
    for line in guide.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.push(current.take().unwrap()),
            (Some(cmds), l) => {
                let l = l.trim();
                if l.starts_with('#') || l.is_empty() {
                    continue;
                }
                match l.strip_suffix('\\') {
                    Some(part) => pending.push_str(part),
                    None => {
                        pending.push_str(l);
                        cmds.push(std::mem::take(&mut pending));
                    }
                }
            }
            (None, _) => {}
        }
    }
    blocks
}

/// The one block with a line containing `needle`.
fn block(blocks: &[Vec<String>], needle: &str) -> Vec<String> {
    let found: Vec<_> = blocks
        .iter()
        .filter(|b| b.iter().any(|l| l.contains(needle)))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one guide block with {needle:?}: {blocks:?}"
    );
    found[0].clone()
}

/// The line of `block` containing `needle`.
fn line(block: &[String], needle: &str) -> String {
    block
        .iter()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in {block:?}"))
        .clone()
}

/// How the guide's example names map onto this test's LAN and scratch.
struct Place<'a> {
    lan: &'a LanTopology,
    dir: &'a Path,
}

impl Place<'_> {
    /// `cmd` as run on host `host`: the receiver's address for 192.0.2.7
    /// (its own on a receiver host; the first receiver's on the sender's),
    /// the sender's for 192.0.2.1, absolute paths inside the scratch.
    fn localise(&self, cmd: &str, host: usize) -> String {
        let d = self.dir.display();
        let receiver = host.max(1);
        let mut c = format!(" {cmd}")
            .replace("192.0.2.7", &self.lan.host(receiver).ipv4().to_string())
            .replace("192.0.2.1", &self.lan.host(0).ipv4().to_string())
            .replace("/srv/in", &format!("{d}/in-{receiver}"))
            .replace("/etc/bash_completion.d/", &format!("{d}/"))
            .replace("/usr/local/share/man/", &format!("{d}/"))
            .replace("/etc/fanout/", &format!("{d}/"))
            .replace("--wait-for 100", &format!("--wait-for {RECEIVERS}"));
        for lead in [" fanout ", "&& fanout ", "| fanout "] {
            c = c.replace(lead, &lead.replace("fanout ", &format!("{BIN} ")));
        }
        c.trim_start().to_owned()
    }

    /// Starts `cmd` with `sh -c` on `host`, in the scratch directory,
    /// its output piped (or discarded).
    fn spawn(&self, host: usize, cmd: &str, piped: bool) -> NsChild {
        let netns = self.lan.host(host).netns();
        let out = || if piped { Stdio::piped() } else { Stdio::null() };
        let mut c = netns.exec("sh");
        c.arg("-c")
            .arg(self.localise(cmd, host))
            .current_dir(self.dir)
            .stdout(out())
            .stderr(out());
        netns.spawn(c).expect("spawn")
    }

    /// Runs `cmd` on `host` to its end; its exit status and output.
    fn run(&self, host: usize, cmd: &str) -> (bool, String) {
        let mut child = self.spawn(host, cmd, true);
        let out = common::read_all(child.child_mut().stdout.take().unwrap());
        let err = common::read_all(child.child_mut().stderr.take().unwrap());
        let status = child
            .wait_timeout(Duration::from_secs(90))
            .unwrap()
            .unwrap_or_else(|| panic!("`{cmd}` did not finish"));
        let text = String::from_utf8_lossy(&out.join().unwrap()).into_owned()
            + &String::from_utf8_lossy(&err.join().unwrap());
        (status.success(), text)
    }

    /// Starts a receiver `cmd` on `host` and waits until it listens or
    /// waits for an announcement (its first line on stderr).
    fn start_receiver(&self, host: usize, cmd: &str) -> NsChild {
        let mut child = self.spawn(host, cmd, true);
        let stderr = child.child_mut().stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let first = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("`{cmd}` printed nothing"));
        assert!(first.contains("listening"), "{first}");
        child
    }
}

fn same(a: &Path, b: &Path) {
    let (x, y) = (std::fs::read(a), std::fs::read(b));
    assert!(
        x.is_ok() && x.as_ref().ok() == y.as_ref().ok(),
        "{} and {} differ",
        a.display(),
        b.display()
    );
}

/// Waits for `child` to exit; true if it exited 0.
fn exited_ok(child: &mut NsChild, what: &str) -> bool {
    child
        .wait_timeout(Duration::from_secs(60))
        .unwrap()
        .unwrap_or_else(|| panic!("{what} did not finish"))
        .success()
}

/// SIGTERM to a service; it must stop with exit code 0.
fn stop(child: &mut NsChild) {
    let pid = child.pid().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    assert!(exited_ok(child, "a service after SIGTERM"));
}

#[test]
fn the_operators_guide_works_as_written() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let blocks = guide_blocks();
    let scratch = Scratch::new("guide");
    let dir = scratch.path();
    let lan = LanTopology::new(RECEIVERS + 1).expect("LAN");
    let at = Place { lan: &lan, dir };

    // 1. Install: the binary is the one built; completions and man pages.
    for cmd in block(&blocks, "fanout completions") {
        if !cmd.starts_with("cargo install") {
            let (ok, out) = at.run(0, &cmd);
            assert!(ok, "`{cmd}`: {out}");
        }
    }
    assert!(std::fs::metadata(dir.join("fanout")).unwrap().len() > 1000);
    assert!(dir.join("man1/fanout-send.1").exists());

    // 2. Two hosts: one file, then files and a tree.
    write_random(&dir.join("model.bin"), 3 << 20, 1);
    write_random(&dir.join("notes.txt"), 2_000, 2);
    write_random(&dir.join("release/bin/tool"), 200_000, 3);
    write_random(&dir.join("release/doc/README"), 1_000, 4);
    std::fs::create_dir_all(dir.join("downloads")).unwrap();
    let two = block(&blocks, "fanout send model.bin --to");
    let recv = line(&two, "fanout recv --listen");
    let mut r = at.start_receiver(1, &recv);
    let (ok, out) = at.run(0, &line(&two, "fanout send"));
    assert!(ok && exited_ok(&mut r, "the receiver"), "{out}");
    same(&dir.join("model.bin"), &dir.join("downloads/model.bin"));
    let trees = block(&blocks, "fanout send release/");
    let mut r = at.start_receiver(1, &recv);
    let (ok, out) = at.run(0, &line(&trees, "fanout send"));
    assert!(ok && exited_ok(&mut r, "the receiver"), "{out}");
    same(&dir.join("notes.txt"), &dir.join("downloads/notes.txt"));
    same(
        &dir.join("release/bin/tool"),
        &dir.join("downloads/release/bin/tool"),
    );
    same(
        &dir.join("release/doc/README"),
        &dir.join("downloads/release/doc/README"),
    );

    // 3. A hundred hosts (three here): services told only the group and
    // their interface; the sender's block as written, its exit code echoed.
    write_random(&dir.join("release.tar"), 5 << 20, 5);
    let service = line(
        &block(&blocks, "fanout recv --serve"),
        "fanout recv --serve",
    );
    let mut services: Vec<NsChild> = (1..=RECEIVERS)
        .map(|h| {
            std::fs::create_dir_all(dir.join(format!("in-{h}"))).unwrap();
            // `exec`: SIGTERM reaches the service, not its shell.
            at.spawn(h, &format!("exec {service}"), false)
        })
        .collect();
    let group: Ipv4Addr = "239.1.1.1".parse().unwrap();
    lan.wait_for_members(IpAddr::V4(group), RECEIVERS, Duration::from_secs(5))
        .expect("bridge state");
    let rollout = block(&blocks, "echo \"exit $?\"").join("\n");
    let (ok, out) = at.run(0, &rollout);
    assert!(ok && out.contains("exit 0"), "{out}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(
        report["receivers"]["completed"], RECEIVERS as u64,
        "{report}"
    );
    let start = Instant::now();
    for h in 1..=RECEIVERS {
        while !dir.join(format!("in-{h}/release.tar")).exists() {
            assert!(start.elapsed() < Duration::from_secs(10), "host {h}");
            std::thread::sleep(Duration::from_millis(20));
        }
        same(
            &dir.join("release.tar"),
            &dir.join(format!("in-{h}/release.tar")),
        );
    }
    for s in &mut services {
        stop(s);
    }

    // 6. The service's unit: its command line with its settings file,
    // paths mapped into the scratch directory.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let unit = std::fs::read_to_string(repo.join("contrib/systemd/fanout-recv.service")).unwrap();
    let env = std::fs::read_to_string(repo.join("contrib/systemd/fanout-recv.env")).unwrap();
    let exec = unit
        .replace("\\\n", " ")
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart")
        .replace("/usr/local/bin/fanout", "fanout")
        .replace("/run/fanout-recv/", &format!("{}/unit-", dir.display()))
        .replace("/var/log/fanout-recv/", &format!("{}/unit-", dir.display()));
    let settings: String = env
        .lines()
        .filter(|l| l.starts_with("FANOUT_"))
        .map(|l| {
            l.replace(
                "/var/lib/fanout-recv",
                &format!("{}/unit-in", dir.display()),
            ) + "\n"
        })
        .collect();
    std::fs::create_dir_all(dir.join("unit-in")).unwrap();
    // As systemd would: the settings, then the command (`${VAR}` and
    // `$VAR` expanded, $FANOUT_ARGS split into words).
    let as_systemd = format!("{settings}exec {exec}");
    let mut unit_service = at.spawn(1, &as_systemd, false);
    lan.wait_for_members(IpAddr::V4(group), 1, Duration::from_secs(5))
        .expect("bridge state");
    let one = rollout.replace("--wait-for 100", "--wait-for 1");
    let (ok, out) = at.run(0, &one);
    assert!(ok && out.contains("exit 0"), "{out}");
    let start = Instant::now();
    while !std::fs::read_to_string(dir.join("unit-status.json"))
        .is_ok_and(|s| s.contains("\"completed\": 1"))
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the unit's status file"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    same(&dir.join("release.tar"), &dir.join("unit-in/release.tar"));
    assert!(std::fs::read_to_string(dir.join("unit-events.jsonl"))
        .unwrap()
        .contains("completed"));
    stop(&mut unit_service);

    // 7. Watching a transfer: --stats, read with the guide's jq line.
    let mut r = at.start_receiver(1, &recv.replace("downloads/", "stats-out/"));
    std::fs::create_dir_all(dir.join("stats-out")).unwrap();
    let stats_send = line(&two, "fanout send") + " --stats stats.jsonl --stats-interval 100";
    let (ok, out) = at.run(0, &stats_send);
    assert!(ok && exited_ok(&mut r, "the receiver"), "{out}");
    let jq = line(&block(&blocks, "jq -c"), "jq");
    let (ok, out) = at.run(0, &jq);
    assert!(ok, "{out}");
    let receivers: Vec<serde_json::Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        !receivers.is_empty() && receivers.iter().all(|r| r["addr"].is_string()),
        "{out}"
    );

    // 9. Security: the guide's keys, then a transfer under each.
    for cmd in block(&blocks, "fanout keygen --psk") {
        let (ok, out) = at.run(0, &cmd);
        assert!(ok, "`{cmd}`: {out}");
    }
    std::fs::copy(dir.join("recv.key.pub"), dir.join("receivers.txt")).unwrap();
    for (case, recv_keys, send_keys) in [
        ("psk", "--psk-file psk", "--psk-file psk"),
        (
            "pairs",
            "--key recv.key --sender-key sender.key.pub",
            "--key sender.key --allow-keys receivers.txt",
        ),
    ] {
        let out_dir = format!("keys-{case}/");
        std::fs::create_dir_all(dir.join(&out_dir)).unwrap();
        let mut r = at.start_receiver(
            1,
            &format!("{} {recv_keys}", recv.replace("downloads/", &out_dir)),
        );
        let (ok, out) = at.run(0, &format!("{} {send_keys}", line(&two, "fanout send")));
        assert!(ok && exited_ok(&mut r, "the receiver"), "{case}: {out}");
        assert!(!out.contains("unprotected"), "{case}: {out}");
        same(&dir.join("model.bin"), &dir.join(out_dir).join("model.bin"));
    }
}

#[test]
fn the_guide_parses_into_its_blocks() {
    let blocks = guide_blocks();
    // The lines the walkthrough runs are there, whole.
    let joined = block(&blocks, "echo \"exit $?\"").join(" ");
    assert!(joined.contains("--wait-for 100 --wait-secs 30"), "{joined}");
    for needle in [
        "fanout completions",
        "fanout send release/",
        "fanout recv --serve",
        "jq -c",
        "fanout keygen --psk",
        "--restart-file",
    ] {
        block(&blocks, needle);
    }
}
