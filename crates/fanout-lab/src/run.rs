//! One lab run: build the topology, run its commands, collect their exit
//! codes and output, tear everything down.

use crate::emu::EmuReport;
use crate::error::LabError;
use crate::kernel::KernelReport;
use crate::lab::Lab;
use crate::topo::{Profile, Topology};
use fanout_io::Clock;
use fanout_netns::NsChild;
use serde::Serialize;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Bytes of each command's stdout and stderr kept for the report (the
/// rest is read and discarded, so a chatty command never blocks).
pub const OUTPUT_KEEP: usize = 64 << 10;
/// How often the run checks its commands, timeout and cancellation.
const POLL: Duration = Duration::from_millis(10);

/// How a run is bounded.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Overrides the topology's timeout.
    pub timeout: Option<Duration>,
    /// Set from elsewhere (a Ctrl-C handler) to stop the run early; the lab
    /// is torn down as usual.
    pub cancel: Option<Arc<AtomicBool>>,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every foreground command exited.
    Completed,
    /// The timeout passed first; remaining commands were killed.
    Timeout,
    /// Cancelled (Ctrl-C); remaining commands were killed.
    Cancelled,
}

/// One command's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandReport {
    /// Host name.
    pub host: String,
    /// The command line as run (`sh -c`).
    pub cmd: String,
    /// Background commands are killed at the end and do not count.
    pub background: bool,
    /// Exit code, if it exited by itself.
    pub exit_code: Option<i32>,
    /// Signal that ended it (ours when killed at the end).
    pub signal: Option<i32>,
    /// Seconds from the start of the commands to its exit (or kill).
    pub wall_s: f64,
    /// First 64 KiB of stdout (lossy UTF-8).
    pub stdout: String,
    /// First 64 KiB of stderr.
    pub stderr: String,
}

impl CommandReport {
    /// Exited with status 0 by itself.
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0)
    }
}

/// The result of [`run`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// The topology file.
    pub topology: String,
    /// Which implementation carried the links.
    pub profile: Profile,
    /// How it ended.
    pub outcome: Outcome,
    /// Completed, every foreground command exited 0, and (emulator
    /// profile) the emulator kept up.
    pub ok: bool,
    /// Seconds the commands ran.
    pub wall_s: f64,
    /// Namespaces used (all removed by the time the report is returned).
    pub namespaces: Vec<String>,
    /// Per command, in file order.
    pub commands: Vec<CommandReport>,
    /// The emulator's counters and lateness (emulator profile).
    pub emulator: Option<EmuReport>,
    /// The kernel's qdisc and nftables counters (kernel profile).
    pub kernel: Option<KernelReport>,
}

struct Running {
    child: NsChild,
    out: Option<JoinHandle<String>>,
    err: Option<JoinHandle<String>>,
    status: Option<(ExitStatus, f64)>,
}

/// Builds `topo`, runs its commands (all started at once), waits for the
/// foreground ones, kills the background ones, and tears the lab down.
pub fn run(topo: &Topology, options: &RunOptions) -> Result<RunReport, LabError> {
    let timeout = options.timeout.unwrap_or(topo.timeout);
    let mut lab = Lab::build(topo)?;
    let namespaces = lab.namespace_names();
    let clock = Clock::new();
    let path = command_path();
    let mut running = Vec::with_capacity(topo.commands.len());
    for spec in &topo.commands {
        let ns = lab.hosts()[spec.host].netns();
        let mut command = ns.exec("sh");
        command
            .env("FANOUT_LAB_HOST", &topo.hosts[spec.host].name)
            .env("PATH", &path)
            .arg("-c")
            .arg(&spec.cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = ns.spawn(command)?;
        let out = child.child_mut().stdout.take().map(collect);
        let err = child.child_mut().stderr.take().map(collect);
        running.push(Running {
            child,
            out,
            err,
            status: None,
        });
    }
    let cancelled = || {
        options
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
    };
    let outcome = loop {
        let now = clock.now().as_secs_f64();
        let mut pending = false;
        for (r, spec) in running.iter_mut().zip(&topo.commands) {
            if r.status.is_none() {
                if let Some(status) = r
                    .child
                    .child_mut()
                    .try_wait()
                    .map_err(|e| LabError::io("waiting for a command", e))?
                {
                    r.status = Some((status, now));
                }
            }
            pending |= r.status.is_none() && !spec.background;
        }
        if !pending {
            break Outcome::Completed;
        }
        if cancelled() {
            break Outcome::Cancelled;
        }
        if clock.now().as_secs_f64() >= timeout.as_secs_f64() {
            break Outcome::Timeout;
        }
        std::thread::sleep(POLL);
    };
    let wall_s = clock.now().as_secs_f64();
    let mut commands = Vec::with_capacity(running.len());
    let mut pipes = Vec::with_capacity(running.len());
    for (mut r, spec) in running.into_iter().zip(&topo.commands) {
        let (status, at) = match r.status {
            Some(s) => s,
            None => {
                let status = r
                    .child
                    .kill()
                    .map_err(|e| LabError::io("killing a command", e))?;
                (status, clock.now().as_secs_f64())
            }
        };
        pipes.push((r.out.take(), r.err.take()));
        commands.push(CommandReport {
            host: topo.hosts[spec.host].name.clone(),
            cmd: spec.cmd.clone(),
            background: spec.background,
            exit_code: status.code(),
            signal: status.signal(),
            wall_s: at,
            stdout: String::new(),
            stderr: String::new(),
        });
    }
    let emulator = lab.stop_emulator();
    let kernel = lab.kernel_report();
    // Teardown kills whatever the commands left running (their children may
    // hold the pipes open), so the output is complete only after it.
    drop(lab);
    let text = |h: Option<JoinHandle<String>>| h.and_then(|h| h.join().ok()).unwrap_or_default();
    for (c, (out, err)) in commands.iter_mut().zip(pipes) {
        c.stdout = text(out);
        c.stderr = text(err);
    }
    let links_ok = match topo.profile {
        Profile::Emulator => emulator.as_ref().is_some_and(|e| e.valid),
        Profile::Kernel => true,
    };
    let ok = outcome == Outcome::Completed
        && links_ok
        && commands.iter().all(|c| c.background || c.succeeded());
    Ok(RunReport {
        topology: topo.origin.clone(),
        profile: topo.profile,
        outcome,
        ok,
        wall_s,
        namespaces,
        commands,
        emulator,
        kernel,
    })
}

/// `PATH` for commands: this program's directory first, so `fanout` in a
/// topology's commands is the binary running the lab.
pub(crate) fn command_path() -> std::ffi::OsString {
    let inherited = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<std::path::PathBuf> = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(std::path::Path::to_path_buf))
        .into_iter()
        .collect();
    dirs.extend(std::env::split_paths(&inherited));
    std::env::join_paths(dirs).unwrap_or(inherited)
}

/// Reads a pipe to its end on a thread, keeping the first [`OUTPUT_KEEP`] bytes.
fn collect(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = OUTPUT_KEEP.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            }
        }
        String::from_utf8_lossy(&kept).into_owned()
    })
}
