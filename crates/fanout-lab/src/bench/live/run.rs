//! One live run: build the scenario's lab, start the competing flow (if
//! any), the receivers with their probes, then the senders; write the
//! stream; let the last messages drain; stop everything and turn the
//! probes, the senders' counters and the emulator's into a [`LiveRun`].

use super::plan::{plan, retransmissions, Io, Plan, Process};
use super::results::{LiveReceiver, LiveRun, TcpReference};
use super::stream::{run_source, Inlet, Outlet, Probe, Schedule};
use super::suite::{LiveScenario, LiveSuite, LiveTool, LiveToolKind, StreamStart};
use crate::bench::measure::{shell_in, start_competing};
use crate::bench::reference;
use crate::bench::scenario::{self, receiver_name, SENDER};
use crate::bench::tool::shell_words;
use crate::error::LabError;
use crate::lab::Lab;
use fanout_io::Clock;
use fanout_netns::NsChild;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Time the receivers get to start listening before the senders start.
const RECEIVER_HEAD_START: Duration = Duration::from_millis(500);
/// With [`StreamStart::Connected`], time between the senders' start and
/// the stream's.
const CONNECTED_LEAD: Duration = Duration::from_secs(1);
/// Time after the last message (beyond its budget) for the last messages
/// to come out.
const DRAIN: Duration = Duration::from_secs(1);
/// How long a process that ends with its stream (fanout's) gets to exit by
/// itself at the end; SRT's never does and is stopped at once.
const EXIT_GRACE: Duration = Duration::from_secs(3);
/// How long after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// What every run of a live suite shares.
#[derive(Debug, Clone)]
pub struct LiveContext {
    /// Scratch directory.
    pub work: PathBuf,
    /// `PATH` for the commands.
    pub path: std::ffi::OsString,
    /// Stops early.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Keep run directories.
    pub keep: bool,
}

/// A started process of a run.
struct Running {
    child: NsChild,
    dir: PathBuf,
}

impl Running {
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.child_mut().try_wait().ok().flatten()
    }

    /// Waits up to `grace` for it to exit by itself, then SIGTERM, then
    /// SIGKILL; the exit code if it exited by itself.
    fn stop(&mut self, grace: Duration) -> Option<i32> {
        if let Ok(Some(st)) = self.child.wait_timeout(grace) {
            return st.code();
        }
        if let Ok(pid) = i32::try_from(self.child.pid()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        if !matches!(self.child.wait_timeout(TERM_GRACE), Ok(Some(_))) {
            let _ = self.child.kill();
        }
        None
    }

    fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(3)..].join(" / ")
    }
}

/// The wrapper: run `argv` in `dir` with the stream on the wrapper's own
/// stdin and stdout and diagnostics in `stderr.log`.
fn wrapper(dir: &Path, argv: &[String]) -> String {
    let dir = shell_words(&[dir.display().to_string()]);
    format!(
        "cd {dir} || exit 97\nexec {} 2>stderr.log\n",
        shell_words(argv)
    )
}

fn spawn(
    lab: &Lab,
    host: &str,
    dir: &Path,
    p: &Process,
    ctx: &LiveContext,
) -> Result<Running, LabError> {
    let (ns, mut command) = shell_in(lab, host, dir, &ctx.path, &wrapper(dir, &p.argv))?;
    let (stdin, stdout) = match p.io {
        Io::Pipe => (Stdio::piped(), Stdio::piped()),
        Io::Udp(_) => (Stdio::null(), Stdio::null()),
    };
    command.stdin(stdin).stdout(stdout).stderr(Stdio::null());
    Ok(Running {
        child: ns.spawn(command)?,
        dir: dir.to_owned(),
    })
}

/// A UDP socket bound in `host` at `addr`.
fn bind_in(lab: &Lab, host: &str, addr: SocketAddr) -> Result<UdpSocket, LabError> {
    lab.netns_of(host)?
        .run_in(|| UdpSocket::bind(addr))?
        .map_err(|e| LabError::io(format!("binding {addr} in {host}"), e))
}

/// One kernel TCP flow, bulk, from the sender to the first receiver over
/// `scn`'s path for the stream's duration
/// ([`LiveScenario::tcp_reference`]).
pub fn tcp_reference(suite: &LiveSuite, scn: &LiveScenario, ctx: &LiveContext) -> TcpReference {
    let mut out = TcpReference {
        scenario: scn.name.clone(),
        mbps: None,
        network_loss: 0.0,
        error: None,
    };
    match measure_tcp(suite, scn, ctx) {
        Ok((mbps, loss)) => {
            out.mbps = Some(mbps);
            out.network_loss = loss;
        }
        Err(e) => out.error = Some(e.to_string()),
    }
    out
}

/// The reference flow's goodput (Mbit/s) and the loss drawn toward it.
fn measure_tcp(
    suite: &LiveSuite,
    scn: &LiveScenario,
    ctx: &LiveContext,
) -> Result<(f64, f64), LabError> {
    let mut lab = Lab::build(&scenario::topology(&scn.network())?)?;
    let mbps = reference::one_flow(&lab, suite.duration, ctx.cancel.as_deref())?;
    let loss = lab.stop_emulator().map_or(0.0, |emu| {
        reference::loss_toward(&emu.links, &[receiver_name(0)])
    });
    Ok((mbps, loss))
}

/// One run of `tool` on `scn` at `budget_rtt` round trips.
pub fn run_one(
    suite: &LiveSuite,
    scn: &LiveScenario,
    budget_rtt: u32,
    tool: &LiveTool,
    run: u32,
    ctx: &LiveContext,
) -> LiveRun {
    let rtt = scn.rtt();
    let budget = rtt * budget_rtt;
    let mut result = LiveRun {
        scenario: scn.name.clone(),
        budget_rtt,
        budget_ms: budget.as_millis() as u64,
        tool: tool.name.clone(),
        run,
        messages: suite.messages(scn),
        ..LiveRun::default()
    };
    let dir = ctx.work.join(format!(
        "live-{}-{budget_rtt}rtt-{}-{run}",
        scn.name, tool.name
    ));
    let _ = std::fs::remove_dir_all(&dir);
    // Each run's messages carry a number of their own, so nothing left
    // over from an earlier run is ever counted.
    let run_id = (std::process::id() << 8) ^ (budget_rtt << 4) ^ run;
    if let Err(e) = measure(suite, scn, tool, budget, run_id, &dir, ctx, &mut result) {
        result.ok = false;
        result.error = Some(e.to_string());
    }
    if !ctx.keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

#[allow(clippy::too_many_arguments)]
fn measure(
    suite: &LiveSuite,
    scn: &LiveScenario,
    tool: &LiveTool,
    budget: Duration,
    run_id: u32,
    dir: &Path,
    ctx: &LiveContext,
    result: &mut LiveRun,
) -> Result<(), LabError> {
    let network = scn.network();
    let mut lab = Lab::build(&scenario::topology(&network)?)?;
    let names: Vec<String> = (0..scn.receivers).map(receiver_name).collect();
    let ip = |n: &str| lab.host(n).map(crate::LabHost::ip);
    let ips: Vec<Ipv4Addr> = names.iter().filter_map(|n| ip(n)).collect();
    let (Some(sender_ip), true) = (ip(SENDER), ips.len() == names.len()) else {
        return Err(LabError::io(
            "scenario hosts missing",
            std::io::ErrorKind::NotFound.into(),
        ));
    };
    let Plan { senders, receivers } = plan(
        tool,
        sender_ip,
        &ips,
        (budget.as_millis() as u64, scn.rtt().as_millis() as u64),
        suite.message,
    );
    let flow = start_competing(&lab, scn.competing_tcp.as_ref())?;
    let count = suite.messages(scn);
    let clock = Clock::new();
    let mut probes = Vec::with_capacity(names.len());
    let mut receiving = Vec::with_capacity(names.len());
    for (name, p) in names.iter().zip(&receivers) {
        let outlet = match p.io {
            Io::Udp(port) => Some(Outlet::Udp(bind_in(
                &lab,
                name,
                SocketAddr::from(([127, 0, 0, 1], port)),
            )?)),
            Io::Pipe => None,
        };
        let mut r = spawn(&lab, name, &dir.join(name), p, ctx)?;
        let outlet = match outlet {
            Some(o) => o,
            None => Outlet::Pipe(r.child.child_mut().stdout.take().ok_or_else(|| {
                LabError::io("a receiver's stdout", std::io::ErrorKind::BrokenPipe.into())
            })?),
        };
        probes.push(
            Probe::start(outlet, clock, run_id, suite.message, count)
                .map_err(|e| LabError::io("starting a probe", e))?,
        );
        receiving.push(r);
    }
    std::thread::sleep(RECEIVER_HEAD_START);
    let mut inlets = Vec::with_capacity(senders.len());
    let mut sending = Vec::with_capacity(senders.len());
    for (i, p) in senders.iter().enumerate() {
        let at = if senders.len() == 1 {
            dir.join(SENDER)
        } else {
            dir.join(format!("{SENDER}{}", i + 1))
        };
        let mut s = spawn(&lab, SENDER, &at, p, ctx)?;
        inlets.push(match p.io {
            Io::Pipe => {
                let stdin = s.child.child_mut().stdin.take().ok_or_else(|| {
                    LabError::io("a sender's stdin", std::io::ErrorKind::BrokenPipe.into())
                })?;
                Inlet::pipe(stdin).map_err(|e| LabError::io("a sender's stdin", e))?
            }
            Io::Udp(port) => Inlet::Udp(
                bind_in(&lab, SENDER, SocketAddr::from(([127, 0, 0, 1], 0)))?,
                SocketAddr::from(([127, 0, 0, 1], port)),
            ),
        });
        sending.push(s);
    }
    let lead = match scn.start {
        StreamStart::Connected => CONNECTED_LEAD,
        StreamStart::WithSender => Duration::ZERO,
    };
    let schedule = Schedule {
        clock,
        start: clock.now() + lead,
        interval: suite.interval(scn),
        count,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let source = {
        let (stop, size) = (Arc::clone(&stop), suite.message);
        std::thread::Builder::new()
            .name("live source".into())
            .spawn(move || run_source(inlets, schedule, run_id, size, &stop))
            .map_err(|e| LabError::io("starting the source", e))?
    };
    std::thread::sleep(lead);
    let tcp_at_start = flow.as_ref().map(|(_, sink)| (sink.bytes(), clock.now()));
    let end = schedule.at(count) + budget + DRAIN;
    let mut error = None;
    while clock.now() < end {
        if ctx
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            error = Some("cancelled".to_owned());
            break;
        }
        if let Some((i, st)) = sending
            .iter_mut()
            .enumerate()
            .find_map(|(i, s)| s.exited().map(|st| (i, st)))
        {
            if !source.is_finished() {
                error = Some(format!(
                    "sender {} exited early ({st}): {}",
                    i + 1,
                    sending[i].stderr_tail()
                ));
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let refused = source.join().unwrap_or_default();
    let tcp_at_end = flow.as_ref().map(|(_, sink)| (sink.bytes(), clock.now()));
    // The source has dropped the senders' inputs: fanout's sender ends its
    // session and its receivers exit; SRT's processes are stopped.
    let grace = match tool.kind {
        LiveToolKind::Fanout => EXIT_GRACE,
        LiveToolKind::Srt => Duration::ZERO,
    };
    for s in &mut sending {
        s.stop(grace);
    }
    let mut codes = Vec::with_capacity(receiving.len());
    for r in &mut receiving {
        codes.push(r.stop(grace));
    }
    drop(flow);
    let emu = lab.stop_emulator();
    drop(lab);
    result.refused = refused.iter().sum();
    for (((name, probe), r), code) in names.iter().zip(probes).zip(&receiving).zip(codes) {
        let seen = probe.finish();
        let mut fig = LiveReceiver::of(name, &seen, &schedule, budget);
        fig.exit_code = code;
        let tail = r.stderr_tail();
        if fig.read == 0 || !tail.is_empty() {
            fig.problem = Some(if tail.is_empty() {
                "read nothing".to_owned()
            } else {
                tail
            });
        }
        result.receivers.push(fig);
    }
    let counters: Option<Vec<(u64, u64)>> = sending
        .iter()
        .map(|s| retransmissions(tool.kind, &s.dir.join(super::plan::STATS_FILE)))
        .collect();
    result.retransmitted = counters.map(|c| c.iter().fold((0, 0), |(a, b), (r, o)| (a + r, b + o)));
    if let (Some((b0, t0)), Some((b1, t1))) = (tcp_at_start, tcp_at_end) {
        let secs = t1.saturating_duration_since(t0).as_secs_f64().max(1e-3);
        let tcp = b1.saturating_sub(b0) as f64 * 8.0 / secs / 1e6;
        let read = result.receivers.iter().map(|r| r.read).min().unwrap_or(0);
        let own = read as f64 * suite.message as f64 * 8.0 / suite.duration.as_secs_f64() / 1e6;
        result.tcp = Some((tcp, own));
    }
    if let Some(emu) = &emu {
        let wire: u64 = (emu.links.iter())
            .filter(|l| l.from == SENDER)
            .map(|l| l.tx_bytes)
            .sum();
        result.network_loss = reference::loss_toward(&emu.links, &names);
        let written = u64::from(count) * suite.message as u64;
        result.wire_per_byte = wire as f64 / written.max(1) as f64;
        result.valid = emu.valid;
        result.invalid_reason.clone_from(&emu.invalid_reason);
    } else {
        result.invalid_reason = Some("no emulator report".into());
    }
    result.ok = error.is_none();
    result.error = error;
    Ok(())
}
