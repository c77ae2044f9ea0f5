//! Helpers shared by the CLI's network-namespace tests: run the `fanout`
//! binary on a host of a [`LanTopology`] and collect its `--json` report.

#![allow(dead_code)] // each test crate uses its own subset

use fanout_netns::{LanTopology, NsChild};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::thread::JoinHandle;
use std::time::Duration;

/// The CLI under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_fanout");

/// A pre-shared key file (`byte` 32 times, hex) in the temporary
/// directory, named by `tag` and this process; removed when dropped, also
/// when the test fails.
pub struct PskFile(String);

impl PskFile {
    pub fn new(tag: &str, byte: u8) -> Self {
        let path = std::env::temp_dir().join(format!("fanout-{tag}-{}.psk", std::process::id()));
        std::fs::write(&path, format!("{}\n", format!("{byte:02x}").repeat(32))).unwrap();
        PskFile(path.display().to_string())
    }

    /// Its path, for `--psk-file`.
    pub fn path(&self) -> &str {
        &self.0
    }

    /// Its path, for arguments that must live as long as the test.
    pub fn leak_path(&self) -> &'static str {
        Box::leak(self.0.clone().into_boxed_str())
    }
}

impl Drop for PskFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Starts `fanout ARGS` in host `host`'s namespace, stdout and stderr piped.
pub fn spawn(lan: &LanTopology, host: usize, args: &[&str]) -> NsChild {
    let h = lan.host(host);
    let mut cmd = h.netns().exec(BIN);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(dir) = std::env::var_os("FANOUT_TEST_LOG_DIR") {
        // Diagnostics: debug logs of every process, one file per host.
        let path = Path::new(&dir).join(format!("host{host}-{}.log", args[0]));
        let file = std::fs::File::create(path).expect("log file");
        cmd.arg("--log").arg("fanout_transport=debug").stderr(file);
    }
    h.netns().spawn(cmd).expect("spawn")
}

/// Starts `fanout send SRC --group GROUP --bind BIND --wait-for N --json
/// --quiet EXTRA...` on host `host`.
pub fn spawn_group_sender(
    lan: &LanTopology,
    host: usize,
    src: &Path,
    group: &str,
    bind: &str,
    wait_for: usize,
    extra: &[&str],
) -> NsChild {
    let wait_for = wait_for.to_string();
    let src = src.to_str().expect("UTF-8 path");
    let args = [
        "send",
        src,
        "--group",
        group,
        "--bind",
        bind,
        "--wait-for",
        &wait_for,
        "--json",
        "--quiet",
    ];
    spawn(lan, host, &[&args[..], extra].concat())
}

/// Starts `fanout merge --listen LISTEN --parent PARENT --children N
/// --join-ms 10000 --json --quiet EXTRA...` on host `host`: it joins
/// upstream once its `children` asked (by count: a child arriving after
/// the join would be a late joiner, which a slow spawn must not cause).
pub fn spawn_merger(
    lan: &LanTopology,
    host: usize,
    listen: &str,
    parent: &str,
    children: usize,
    extra: &[&str],
) -> NsChild {
    let children = children.to_string();
    let args = [
        "merge",
        "--listen",
        listen,
        "--parent",
        parent,
        "--children",
        &children,
        "--join-ms",
        "10000",
        "--json",
        "--quiet",
    ];
    spawn(lan, host, &[&args[..], extra].concat())
}

/// Starts `fanout recv --group GROUP --from FROM --interface IP --json
/// --quiet --idle-timeout 20 -o OUT EXTRA...` on host `host` (IP: the
/// host's address).
pub fn spawn_group_receiver(
    lan: &LanTopology,
    host: usize,
    group: &str,
    from: &str,
    out: &Path,
    extra: &[&str],
) -> NsChild {
    spawn_group_only_receiver(
        lan,
        host,
        group,
        out,
        &[&["--from", from][..], extra].concat(),
    )
}

/// Starts `fanout recv --group GROUP --interface IP --json --quiet
/// --idle-timeout 20 -o OUT EXTRA...` on host `host`: a receiver told only
/// the group and its interface, which finds the sender by its
/// announcements.
pub fn spawn_group_only_receiver(
    lan: &LanTopology,
    host: usize,
    group: &str,
    out: &Path,
    extra: &[&str],
) -> NsChild {
    let ip = lan.host(host).ipv4().to_string();
    let out = out.to_str().expect("UTF-8 path");
    let args = [
        "recv",
        "--group",
        group,
        "--interface",
        &ip,
        "--json",
        "--quiet",
        "--idle-timeout",
        "20",
        "-o",
        out,
    ];
    spawn(lan, host, &[&args[..], extra].concat())
}

/// Waits for `child` (at most `limit`; killed after) and returns its JSON
/// report, or panics with its stderr.
pub fn finish(child: &mut NsChild, what: &str, limit: Duration) -> serde_json::Value {
    let status = child.wait_timeout(limit).expect("wait");
    if status.is_none() {
        let _ = child.kill();
    }
    let (mut out, mut err) = (String::new(), String::new());
    if let Some(so) = child.child_mut().stdout.as_mut() {
        let _ = so.read_to_string(&mut out);
    }
    if let Some(se) = child.child_mut().stderr.as_mut() {
        let _ = se.read_to_string(&mut err);
    }
    let Some(status) = status else {
        panic!("{what} did not finish within {limit:?}; stderr: {err}; stdout: {out}")
    };
    assert!(status.success(), "{what} failed: {err}; stdout: {out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{what} JSON ({e}): {out}"))
}

/// A thread sending `pipe`'s lines (a child's stderr) down a channel, so a
/// test can wait for one line with a timeout.
pub fn lines_of(pipe: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// Reads a child's pipe to its end on a thread (so a full pipe never
/// blocks the child); join for the bytes.
pub fn read_all(mut pipe: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = pipe.read_to_end(&mut v);
        v
    })
}

/// Waits for `child` (at most `limit`; killed and panics after); returns
/// whether it exited successfully.
pub fn wait_ok(child: &mut NsChild, limit: Duration) -> bool {
    let status = child.wait_timeout(limit).expect("wait").unwrap_or_else(|| {
        let _ = child.kill();
        panic!("process {} did not finish within {limit:?}", child.pid())
    });
    status.success()
}

/// A fresh scratch directory `$TMPDIR/fanout-LABEL-PID`, removed when
/// dropped — also when the test panics, so a failed run of a 256 MiB test
/// leaves nothing behind.
pub struct Scratch(PathBuf);

impl Scratch {
    /// Creates it (emptied first if a killed run left it).
    pub fn new(label: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("fanout-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        Scratch(dir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `fanout lab bench SUITE ARGS --out RESULTS --work-dir WORK`: its
/// exit status and stderr (also printed, for a failing test's log).
pub fn lab_bench(
    suite: &Path,
    args: &[&str],
    results: &Path,
    work: &Path,
) -> (std::process::ExitStatus, String) {
    let out = std::process::Command::new(BIN)
        .args(["lab", "bench"])
        .arg(suite)
        .args(args)
        .arg("--out")
        .arg(results)
        .arg("--work-dir")
        .arg(work)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("{stderr}");
    (out.status, stderr)
}

/// `fanout lab report RESULTS… --out DIR/benchmarks.md --img-dir DIR/img`
/// (which must succeed): the report's text.
pub fn lab_report(results: &[&Path], dir: &Path) -> String {
    let md = dir.join("benchmarks.md");
    let out = std::process::Command::new(BIN)
        .args(["lab", "report"])
        .args(results)
        .arg("--out")
        .arg(&md)
        .arg("--img-dir")
        .arg(dir.join("img"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&md).unwrap()
}

/// A tmpfs of `bytes` mounted at a directory; unmounted when dropped (a
/// failing test too).
pub struct SmallDisk(PathBuf);

impl SmallDisk {
    pub fn mount(dir: &Path, bytes: usize) -> SmallDisk {
        std::fs::create_dir_all(dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cannot mount a tmpfs at {}", dir.display());
        SmallDisk(dir.to_path_buf())
    }

    /// Writes a filler file until the disk is full; returns when it is.
    pub fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.0.join("filler")).unwrap();
        let chunk = vec![0u8; 1 << 20];
        while f.write_all(&chunk).is_ok() {}
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

impl SmallDisk {
    /// Removes the filler: the disk has room again.
    pub fn free(&self) {
        let _ = std::fs::remove_file(self.0.join("filler"));
    }
}

/// Writes `len` random bytes (from `seed`) to `path`, its directory
/// created; returns them.
pub fn write_random(path: &Path, len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fanout_core::Rng::new(seed).fill(&mut v);
    std::fs::create_dir_all(path.parent().expect("a file path")).unwrap();
    std::fs::write(path, &v).unwrap();
    v
}

/// Waits until `path` holds at least `len` bytes, at most `limit`.
#[expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]
pub fn wait_for_len(path: &Path, len: u64, limit: Duration) {
    let start = std::time::Instant::now();
    while std::fs::metadata(path).map_or(0, |m| m.len()) < len {
        assert!(
            start.elapsed() < limit,
            "{} never reached {len} bytes within {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}
