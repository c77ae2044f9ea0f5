//! One throw-away network namespace: [`Netns`], and processes started in it
//! ([`NsChild`]).

use crate::cmd;
use crate::error::NetnsError;
use nix::sched::{setns, CloneFlags};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Every namespace this crate creates is named `fo-<pid>-<n>[-<label>]`, with
/// the creating process's PID and a per-process counter.
pub const NAME_PREFIX: &str = "fo-";

/// Where `ip netns add` pins named namespaces.
const NETNS_DIR: &str = "/var/run/netns";

/// Longest label accepted by [`Netns::with_label`].
const MAX_LABEL: usize = 16;

/// How often teardown re-checks that killed processes are gone, and how many times.
const KILL_POLL: Duration = Duration::from_millis(10);
const KILL_POLLS: u32 = 200;

static NEXT_ID: AtomicU32 = AtomicU32::new(0);

/// A named network namespace that exists exactly as long as this guard.
///
/// [`Netns::new`] runs `ip netns add fo-<pid>-<n>` and brings `lo` up; `Drop`
/// kills every process still inside (they can only have been started by
/// this process or its children: the name is unique to it), then runs
/// `ip netns delete`. Drop runs on panics too (unwinding); only a killed or
/// aborted test process leaves a namespace behind, which
/// [`crate::cleanup_stale`] removes later.
#[derive(Debug)]
pub struct Netns {
    name: String,
    /// PIDs started through [`Netns::spawn`], for diagnostics and teardown.
    spawned: Mutex<Vec<u32>>,
}

impl Netns {
    /// Creates a fresh namespace named `fo-<pid>-<n>` with `lo` up.
    pub fn new() -> Result<Self, NetnsError> {
        Self::with_label("")
    }

    /// Like [`Netns::new`], with `-<label>` appended to the name for
    /// readability (`fo-4242-3-sw`). `label` is at most 16 lowercase ASCII
    /// letters or digits (empty: no suffix).
    pub fn with_label(label: &str) -> Result<Self, NetnsError> {
        if label.len() > MAX_LABEL
            || !label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            return Err(NetnsError::Invalid(format!(
                "namespace label {label:?}: want at most {MAX_LABEL} of [a-z0-9]"
            )));
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let mut name = format!("{NAME_PREFIX}{}-{id}", std::process::id());
        if !label.is_empty() {
            name.push('-');
            name.push_str(label);
        }
        cmd::run_args("ip", &["netns", "add", &name])?;
        // From here on the guard owns the namespace: any later error deletes it.
        let ns = Netns::adopt(name);
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Takes ownership of an existing namespace (teardown only).
    pub(crate) fn adopt(name: String) -> Self {
        Netns {
            name,
            spawned: Mutex::new(Vec::new()),
        }
    }

    /// The namespace's name, as `ip netns list` shows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace's pin file (`/var/run/netns/<name>`), usable with `setns(2)`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(NETNS_DIR).join(&self.name)
    }

    /// Runs `ip -n <name> <args>` to completion and returns its stdout.
    pub fn ip(&self, args: &[&str]) -> Result<String, NetnsError> {
        cmd::run(Command::new("ip").arg("-n").arg(&self.name).args(args))
    }

    /// A [`Command`] that runs `program` inside the namespace (as
    /// `ip netns exec <name> <program>`); add arguments, stdio and so on,
    /// then start it with [`Netns::spawn`] so teardown knows about it (or
    /// with [`Command::output`] for short commands).
    pub fn exec(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new("ip");
        command
            .arg("netns")
            .arg("exec")
            .arg(&self.name)
            .arg(program);
        command
    }

    /// Starts `command`, which must come from [`Netns::exec`] on this
    /// namespace, and records its PID. The returned guard kills the process
    /// when dropped; teardown of the namespace kills it too.
    pub fn spawn(&self, mut command: Command) -> Result<NsChild, NetnsError> {
        let args: Vec<&OsStr> = command.get_args().take(3).collect();
        let ours = command.get_program() == "ip"
            && args.len() == 3
            && args[0] == "netns"
            && args[1] == "exec"
            && args[2] == self.name.as_str();
        if !ours {
            return Err(NetnsError::Invalid(format!(
                "`{}` was not built by Netns::exec on {}",
                cmd::describe(&command),
                self.name
            )));
        }
        let child = command.spawn().map_err(|source| NetnsError::Spawn {
            command: cmd::describe(&command),
            source,
        })?;
        self.spawned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(child.id());
        Ok(NsChild { child })
    }

    /// PIDs started with [`Netns::spawn`] so far (some may have exited).
    pub fn spawned_pids(&self) -> Vec<u32> {
        self.spawned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Runs `f` on a fresh thread that has entered this namespace with
    /// `setns(2)`, waits for it, and returns its result. Sockets created in
    /// `f` stay in the namespace wherever they are used afterwards, so the
    /// usual pattern is to bind in `f` and return the socket. A panic in `f`
    /// is resumed on the caller's thread.
    pub fn run_in<R: Send>(&self, f: impl FnOnce() -> R + Send) -> Result<R, NetnsError> {
        let file = self.open()?;
        let name = &self.name;
        std::thread::scope(|scope| {
            let handle = std::thread::Builder::new()
                .name(format!("netns {name}"))
                .spawn_scoped(scope, move || {
                    enter(&file, name)?;
                    Ok(f())
                })
                .map_err(|source| NetnsError::Io {
                    what: "spawning a thread".into(),
                    source,
                })?;
            match handle.join() {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Starts `f` on a new thread inside this namespace and returns its
    /// handle once the thread has entered the namespace. The thread keeps
    /// the namespace alive (nameless) if it outlives this guard.
    pub fn spawn_in<R, F>(&self, f: F) -> Result<JoinHandle<R>, NetnsError>
    where
        R: Send + 'static,
        F: FnOnce() -> R + Send + 'static,
    {
        let file = self.open()?;
        let name = self.name.clone();
        let (entered_tx, entered_rx) = mpsc::sync_channel(1);
        let handle = std::thread::Builder::new()
            .name(format!("netns {name}"))
            .spawn(move || {
                let entered = enter(&file, &name);
                let ok = entered.is_ok();
                // The receiver waits for this message; it cannot be gone.
                let _ = entered_tx.send(entered);
                if !ok {
                    // Never run `f` outside the namespace.
                    std::panic::resume_unwind(Box::new("setns failed"));
                }
                drop(file);
                f()
            })
            .map_err(|source| NetnsError::Io {
                what: "spawning a thread".into(),
                source,
            })?;
        match entered_rx.recv() {
            Ok(Ok(())) => Ok(handle),
            Ok(Err(e)) => {
                let _ = handle.join();
                Err(e)
            }
            Err(_) => Err(NetnsError::Invalid("namespace thread vanished".into())),
        }
    }

    /// Writes a network sysctl of this namespace, e.g.
    /// `set_sysctl("net.ipv6.conf.default.accept_dad", "0")` (dots or
    /// slashes). Only `net.*` keys are per namespace.
    pub fn set_sysctl(&self, key: &str, value: &str) -> Result<(), NetnsError> {
        if !key.starts_with("net.") && !key.starts_with("net/") || key.contains("..") {
            return Err(NetnsError::Invalid(format!(
                "sysctl {key:?}: want a net.* key"
            )));
        }
        let path = PathBuf::from("/proc/sys").join(key.replace('.', "/"));
        self.run_in(|| std::fs::write(&path, value))?
            .map_err(|source| NetnsError::Io {
                what: format!("writing {value:?} to {} in {}", path.display(), self.name),
                source,
            })
    }

    /// Interface counters as the namespace's `/proc/net/dev` reports them.
    pub fn link_stats(&self, ifname: &str) -> Result<LinkStats, NetnsError> {
        let text = self.run_in(|| std::fs::read_to_string("/proc/thread-self/net/dev"))?;
        let text = text.map_err(|source| NetnsError::Io {
            what: "reading /proc/thread-self/net/dev".into(),
            source,
        })?;
        LinkStats::parse(&text, ifname).ok_or_else(|| NetnsError::Parse {
            command: format!("/proc/net/dev in {}", self.name),
            detail: format!("no interface {ifname}"),
        })
    }

    /// PIDs of processes whose network namespace is this one (never this
    /// process itself, even if one of its threads entered via `setns`).
    pub fn pids(&self) -> Result<Vec<u32>, NetnsError> {
        let inode = std::fs::metadata(self.path())
            .map_err(|source| NetnsError::Io {
                what: format!("stat {}", self.path().display()),
                source,
            })?
            .ino();
        let wanted = format!("net:[{inode}]");
        let me = std::process::id();
        let entries = std::fs::read_dir("/proc").map_err(|source| NetnsError::Io {
            what: "listing /proc".into(),
            source,
        })?;
        let mut pids = Vec::new();
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if pid == me {
                continue;
            }
            // Exited processes (and zombies) have no readable link: skip them.
            if let Ok(link) = std::fs::read_link(entry.path().join("ns/net")) {
                if link.as_os_str() == wanted.as_str() {
                    pids.push(pid);
                }
            }
        }
        pids.sort_unstable();
        Ok(pids)
    }

    /// Sends `SIGKILL` to every process inside the namespace (see
    /// [`Netns::pids`]) and waits up to 2 s for them to be gone; returns how
    /// many were signalled.
    pub fn kill_processes(&self) -> Result<usize, NetnsError> {
        let victims = self.pids()?;
        for &pid in &victims {
            if let Ok(raw) = i32::try_from(pid) {
                // ESRCH (already gone) is fine.
                let _ = kill(Pid::from_raw(raw), Signal::SIGKILL);
            }
        }
        for _ in 0..KILL_POLLS {
            if self.pids()?.is_empty() {
                return Ok(victims.len());
            }
            std::thread::sleep(KILL_POLL);
        }
        Err(NetnsError::Invalid(format!(
            "processes {:?} still in {} after SIGKILL",
            self.pids()?,
            self.name
        )))
    }

    fn open(&self) -> Result<File, NetnsError> {
        File::open(self.path()).map_err(|source| NetnsError::Io {
            what: format!("opening {}", self.path().display()),
            source,
        })
    }
}

/// Moves the calling thread into the namespace pinned at `file`.
fn enter(file: &File, name: &str) -> Result<(), NetnsError> {
    setns(file, CloneFlags::CLONE_NEWNET).map_err(|errno| NetnsError::Setns {
        name: name.to_owned(),
        source: errno.into(),
    })
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = self.kill_processes() {
            eprintln!("fanout-netns: teardown of {}: {e}", self.name);
        }
        if let Err(e) = cmd::run_args("ip", &["netns", "delete", &self.name]) {
            eprintln!("fanout-netns: teardown of {}: {e}", self.name);
        }
    }
}

/// A process started with [`Netns::spawn`]; killed (`SIGKILL`) and reaped
/// when dropped unless it already exited.
#[derive(Debug)]
pub struct NsChild {
    child: Child,
}

impl NsChild {
    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The underlying [`Child`], e.g. to take its stdout.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Waits at most `timeout` for the process to exit; `None` if it is
    /// still running then.
    pub fn wait_timeout(&mut self, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
        let step = Duration::from_millis(5);
        let mut waited = Duration::ZERO;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(Some(status));
            }
            if waited >= timeout {
                return Ok(None);
            }
            std::thread::sleep(step);
            waited += step;
        }
    }

    /// Kills the process (if still running) and reaps it.
    pub fn kill(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        self.child.kill()?;
        self.child.wait()
    }
}

impl Drop for NsChild {
    fn drop(&mut self) {
        if let Err(e) = self.kill() {
            eprintln!("fanout-netns: killing pid {}: {e}", self.child.id());
        }
    }
}

/// Counters of one interface, from `/proc/net/dev`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Received packets dropped by the interface.
    pub rx_dropped: u64,
    /// Multicast packets received.
    pub rx_multicast: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Outgoing packets dropped by the interface.
    pub tx_dropped: u64,
}

impl LinkStats {
    /// Finds `ifname`'s line in `/proc/net/dev` text.
    fn parse(text: &str, ifname: &str) -> Option<Self> {
        text.lines().find_map(|line| {
            let (name, rest) = line.split_once(':')?;
            if name.trim() != ifname {
                return None;
            }
            let v: Vec<u64> = rest
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            (v.len() >= 16).then(|| LinkStats {
                rx_bytes: v[0],
                rx_packets: v[1],
                rx_dropped: v[3],
                rx_multicast: v[7],
                tx_bytes: v[8],
                tx_packets: v[9],
                tx_dropped: v[11],
            })
        })
    }
}

/// Names of all named namespaces on the machine (`ip netns list`).
pub fn list_namespaces() -> Result<Vec<String>, NetnsError> {
    let out = cmd::run_args("ip", &["netns", "list"])?;
    Ok(out
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect())
}

/// Removes namespaces left by earlier processes of this crate that died
/// without unwinding (SIGKILL, abort): those named `fo-<pid>-…` whose
/// `<pid>` no longer runs. Kills what still runs inside them first.
/// Returns the names removed.
pub fn cleanup_stale() -> Result<Vec<String>, NetnsError> {
    let mut removed = Vec::new();
    for name in list_namespaces()? {
        let Some(pid) = owner_pid(&name) else {
            continue;
        };
        if pid == std::process::id() || PathBuf::from(format!("/proc/{pid}")).exists() {
            continue;
        }
        drop(Netns::adopt(name.clone()));
        removed.push(name);
    }
    Ok(removed)
}

/// The creator's PID of a name shaped `fo-<pid>-<n>[-<label>]`.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(NAME_PREFIX)?;
    let mut parts = rest.splitn(3, '-');
    let pid = parts.next()?.parse().ok()?;
    parts.next()?.parse::<u32>().ok()?;
    Some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_net_dev() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
            face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
            lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n\
            fo-eth: 2400 2 0 1 0 0 0 2 1200 1 0 3 0 0 0 0\n";
        let s = LinkStats::parse(text, "fo-eth").unwrap();
        assert_eq!(
            s,
            LinkStats {
                rx_bytes: 2400,
                rx_packets: 2,
                rx_dropped: 1,
                rx_multicast: 2,
                tx_bytes: 1200,
                tx_packets: 1,
                tx_dropped: 3,
            }
        );
        assert!(LinkStats::parse(text, "eth0").is_none());
    }

    #[test]
    fn owner_pid_only_for_our_names() {
        assert_eq!(owner_pid("fo-123-4"), Some(123));
        assert_eq!(owner_pid("fo-123-4-sw"), Some(123));
        assert_eq!(owner_pid("fo-abc-4"), None);
        assert_eq!(owner_pid("fo-123"), None);
        assert_eq!(owner_pid("other-1-2"), None);
    }

    #[test]
    fn exec_builds_ip_netns_exec() {
        let ns = Netns::adopt("fo-0-0".into());
        let c = ns.exec("true");
        assert_eq!(cmd::describe(&c), "ip netns exec fo-0-0 true");
        // Do not run teardown for a namespace that does not exist.
        std::mem::forget(ns);
    }
}
