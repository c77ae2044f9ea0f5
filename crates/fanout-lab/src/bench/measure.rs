//! One measured run: build the scenario's lab, start the receivers, then
//! the sender, watch for completion, tear down, verify every file, and
//! turn the network's counters (the emulator's, or with the kernel profile
//! the kernel's) into figures.
//!
//! Each program runs under a small `sh` wrapper in its host that sends its
//! output to files and records the program's CPU time with the shell's
//! `times` builtin once it has been reaped (children's user and system
//! seconds). A receiver still running at the end (uftpd is a daemon) gets
//! SIGTERM, which the wrapper forwards before recording the times.

use super::media::{received_bytes, TsSource};
use super::payload;
use super::reference;
use super::results::{load_average, ReceiverResult, RunResult, TcpReference, TcpShare};
use super::scenario::{self, receiver_name, SENDER, TCP_SINK, TCP_SOURCE};
use super::suite::{Competing, ScenarioSpec, ToolKind, ToolSpec};
use super::tool::{plan, shell_words, DoneBy, Endpoints};
use crate::emu::LinkReport;
use crate::error::LabError;
use crate::lab::Lab;
use crate::tcp::{TcpSink, TcpSource};
use fanout_io::Clock;
use fanout_netns::NsChild;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often completion is checked.
const POLL: Duration = Duration::from_millis(5);
/// Time the receivers get to start listening before the sender starts.
const RECEIVER_HEAD_START: Duration = Duration::from_millis(500);
/// Time a media sender gets to open its input before the stream starts.
const SENDER_HEAD_START: Duration = Duration::from_millis(300);
/// How long receivers may take to finish once the sender has exited.
const AFTER_SENDER: Duration = Duration::from_secs(10);
/// How long a receiver gets to exit after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(3);
/// Port of the competing TCP flow's sink.
const TCP_PORT: u16 = 5001;
/// Lines of the sender's output kept in the results.
const LOG_TAIL_LINES: usize = 12;

/// What every run of a suite shares.
#[derive(Debug, Clone)]
pub struct Context {
    /// Scratch directory (run directories are created and removed in it).
    pub work: PathBuf,
    /// The file to send.
    pub source: PathBuf,
    /// Its size.
    pub size: u64,
    /// Its BLAKE3 hash.
    pub hash: blake3::Hash,
    /// Longest a run may take.
    pub timeout: Duration,
    /// `PATH` for the commands (the running `fanout` first).
    pub path: std::ffi::OsString,
    /// Set to stop early (Ctrl-C); the run is torn down and reported failed.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Keep run directories (received files, logs) instead of removing them.
    pub keep: bool,
}

impl Context {
    pub(crate) fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
    }
}

/// The wrapper: run `argv` in `dir` with output to files, forward SIGTERM
/// to it, record its CPU time in `times.txt`, exit with its status.
fn wrapper(dir: &Path, argv: &[String]) -> String {
    let dir = shell_words(&[dir.display().to_string()]);
    format!(
        "cd {dir} || exit 97\n\
         {} >stdout.log 2>stderr.log </dev/null &\n\
         p=$!\n\
         trap 'kill -TERM $p 2>/dev/null' TERM\n\
         wait $p; s=$?\n\
         if kill -0 $p 2>/dev/null; then wait $p; s=$?; fi\n\
         times >times.txt\n\
         exit $s\n",
        shell_words(argv)
    )
}

/// User + system seconds of the waited-for children, from the second line
/// of `times` output (`0m1.230000s 0m0.450000s`).
pub fn parse_times(text: &str) -> Option<f64> {
    let line = text.lines().nth(1)?;
    let mut total = 0.0;
    let mut fields = 0;
    for word in line.split_whitespace() {
        let (m, s) = word.strip_suffix('s')?.split_once('m')?;
        total += m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?;
        fields += 1;
    }
    (fields == 2).then_some(total)
}

fn cpu_of(dir: &Path) -> Option<f64> {
    parse_times(&std::fs::read_to_string(dir.join("times.txt")).ok()?)
}

/// What a receiver left instead of `out`: the largest file in its
/// directory (a partial download), if any.
fn partial(out: &Path) -> String {
    let largest = out
        .parent()
        .and_then(|d| std::fs::read_dir(d).ok())
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            Some((e.metadata().ok()?.len(), e.file_name()))
        })
        .max();
    match largest {
        Some((n, name)) => format!("no complete file; {n} bytes in {}", name.to_string_lossy()),
        None => "no file at all".into(),
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

struct Proc {
    child: NsChild,
    dir: PathBuf,
    exit: Option<(ExitStatus, f64)>,
}

impl Proc {
    fn poll(&mut self, now: f64) -> Result<(), LabError> {
        if self.exit.is_none() {
            if let Some(st) = self
                .child
                .child_mut()
                .try_wait()
                .map_err(|e| LabError::io("waiting for a command", e))?
            {
                self.exit = Some((st, now));
            }
        }
        Ok(())
    }

    /// SIGTERM (forwarded by the wrapper), then SIGKILL after a grace.
    fn stop(&mut self, clock: &Clock) {
        if self.exit.is_some() {
            return;
        }
        if let Ok(pid) = i32::try_from(self.child.pid()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let status = match self.child.wait_timeout(TERM_GRACE) {
            Ok(Some(st)) => Some(st),
            _ => self.child.kill().ok(),
        };
        self.exit = status.map(|s| (s, clock.now().as_secs_f64()));
    }
}

/// `sh -c script` in `host`'s namespace with `PATH` = `path` and
/// `FANOUT_LAB_HOST` set, `dir` created; the caller sets stdio and spawns
/// it with the namespace returned.
pub(crate) fn shell_in<'l>(
    lab: &'l Lab,
    host: &str,
    dir: &Path,
    path: &std::ffi::OsStr,
    script: &str,
) -> Result<(&'l fanout_netns::Netns, std::process::Command), LabError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| LabError::io(format!("creating {}", dir.display()), e))?;
    let ns = lab.netns_of(host)?;
    let mut command = ns.exec("sh");
    command
        .env("PATH", path)
        .env("FANOUT_LAB_HOST", host)
        .arg("-c")
        .arg(script);
    Ok((ns, command))
}

fn spawn(
    lab: &Lab,
    host: &str,
    dir: &Path,
    argv: &[String],
    ctx: &Context,
) -> Result<Proc, LabError> {
    let (ns, mut command) = shell_in(lab, host, dir, &ctx.path, &wrapper(dir, argv))?;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Ok(Proc {
        child: ns.spawn(command)?,
        dir: dir.to_owned(),
        exit: None,
    })
}

/// Runs `tool` once on `scn`; never fails as a whole: problems are in the
/// result (`error`, `ok`, `valid`).
pub fn run_one(scn: &ScenarioSpec, tool: &ToolSpec, run: u32, ctx: &Context) -> RunResult {
    let dir = ctx
        .work
        .join(format!("run-{}-{}-{run}", scn.name, tool.name));
    let load_before = load_average();
    let mut result = measure(scn, tool, &dir, ctx).unwrap_or_else(|e| failed(e.to_string()));
    result.scenario = scn.name.clone();
    result.tool = tool.name.clone();
    result.run = run;
    result.load_before = load_before;
    result.load_after = load_average();
    if !ctx.keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

pub(crate) fn failed(error: String) -> RunResult {
    RunResult {
        scenario: String::new(),
        tool: String::new(),
        run: 0,
        ok: false,
        valid: false,
        invalid_reason: None,
        error: Some(error),
        wall_s: None,
        sender_exit_s: None,
        sender_exit_code: None,
        sender_cpu_s: None,
        receiver_cpu_s: None,
        receivers: Vec::new(),
        sender_link_bytes: 0,
        feedback_bytes: 0,
        wire_per_file_byte: 0.0,
        lateness_p99_us: 0,
        realtime: false,
        receive_steering: false,
        emulator_cpu_s: None,
        drops: BTreeMap::new(),
        load_before: [0.0; 3],
        load_after: [0.0; 3],
        tcp: None,
        sender_setup_s: None,
        sender_log_tail: String::new(),
    }
}

/// A fresh pre-shared key file (`fanout keygen --psk`'s format) at `path`.
fn write_psk(path: &Path) -> Result<(), LabError> {
    let key: String = fanout_io::random_seed()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::write(path, format!("{key}\n"))
        .map_err(|e| LabError::io(format!("writing {}", path.display()), e))
}

fn measure(
    scn: &ScenarioSpec,
    tool: &ToolSpec,
    dir: &Path,
    ctx: &Context,
) -> Result<RunResult, LabError> {
    let _ = std::fs::remove_dir_all(dir);
    let topo = scenario::topology(scn)?;
    let mut lab = Lab::build(&topo)?;
    let clock = Clock::new();
    let names: Vec<String> = (0..scn.receivers).map(receiver_name).collect();
    let ips: Vec<_> = names
        .iter()
        .filter_map(|n| lab.host(n).map(crate::LabHost::ip))
        .collect();
    let sender_ip = lab.host(SENDER).map(crate::LabHost::ip);
    let (Some(sender_ip), true) = (sender_ip, ips.len() == names.len()) else {
        return Err(LabError::io(
            "scenario hosts missing",
            std::io::ErrorKind::NotFound.into(),
        ));
    };
    let out_dirs: Vec<PathBuf> = names.iter().map(|n| dir.join(n).join("out")).collect();
    for d in &out_dirs {
        std::fs::create_dir_all(d)
            .map_err(|e| LabError::io(format!("creating {}", d.display()), e))?;
    }
    let psk = dir.join("session.psk");
    if tool.uses_psk() || tool.kind == ToolKind::Overlay {
        write_psk(&psk)?;
    }
    let receiver_bps = scenario::receiver_rates_bps(scn);
    let plan = plan(
        tool,
        &Endpoints {
            source: &ctx.source,
            sender_ip,
            receiver_ips: &ips,
            receiver_dirs: &out_dirs,
            psk: &psk,
            run_dir: dir,
            links: &scenario::star_links(scn),
        },
    );
    if let Some(script) = &plan.setup {
        run_setup(dir, script, ctx)?;
    }
    let flow = start_competing(&lab, scn.competing_tcp.as_ref())?;
    let tcp_bytes = || flow.as_ref().map_or(0, |(_, sink)| sink.bytes());
    let mut tcp_at_start;
    let t0;
    let mut sender_setup_s = None;
    let mut sender;
    let mut started: Vec<Option<Proc>> = (0..names.len()).map(|_| None).collect();
    if let Some(port) = plan.sender_port {
        // A server: up and listening before the receivers (and the clock)
        // start.
        let spawned = clock.now().as_secs_f64();
        sender = spawn(&lab, SENDER, &dir.join(SENDER), &plan.sender, ctx)?;
        wait_listening(&lab, &mut sender, port, &clock, ctx)?;
        t0 = clock.now().as_secs_f64();
        sender_setup_s = Some(t0 - spawned);
        tcp_at_start = tcp_bytes();
        for &i in &plan.start_order {
            started[i] = Some(spawn(
                &lab,
                &names[i],
                &dir.join(&names[i]),
                &plan.receivers[i].argv,
                ctx,
            )?);
        }
    } else {
        for (i, (name, cmd)) in names.iter().zip(&plan.receivers).enumerate() {
            started[i] = Some(spawn(&lab, name, &dir.join(name), &cmd.argv, ctx)?);
        }
        std::thread::sleep(RECEIVER_HEAD_START);
        t0 = clock.now().as_secs_f64();
        tcp_at_start = tcp_bytes();
        sender = spawn(&lab, SENDER, &dir.join(SENDER), &plan.sender, ctx)?;
    }
    let mut receivers: Vec<Proc> = started.into_iter().flatten().collect();
    if receivers.len() != names.len() {
        return Err(LabError::io(
            "a receiver the plan never started",
            std::io::ErrorKind::NotFound.into(),
        ));
    }
    // A media run: the stream, and when it started and ended.
    let mut stream = None;
    if tool.kind == ToolKind::Media {
        std::thread::sleep(SENDER_HEAD_START);
        tcp_at_start = tcp_bytes();
        let source = TsSource::start(&lab, SENDER, tool.input_bps(), tool.stream_duration())?;
        stream = Some((source, clock.now().as_secs_f64(), None));
    }
    let mut done: Vec<Option<f64>> = vec![None; receivers.len()];
    let mut tcp_at_end = None;
    let error = loop {
        let now = clock.now().as_secs_f64();
        sender.poll(now)?;
        if let Some((source, _, end @ None)) = &mut stream {
            // The competing flow's share is taken over the stream.
            if source.finished() {
                *end = Some(now);
                tcp_at_end = Some(tcp_bytes());
            }
        }
        for ((r, cmd), d) in receivers
            .iter_mut()
            .zip(&plan.receivers)
            .zip(done.iter_mut())
        {
            r.poll(now)?;
            if d.is_some() {
                continue;
            }
            match (&cmd.done_by, r.exit) {
                (DoneBy::Exit, Some((st, at))) if st.success() => *d = Some(at - t0),
                (DoneBy::FileAppears, _) if cmd.output.exists() => *d = Some(now - t0),
                (DoneBy::Marker(m), _) if m.exists() => *d = Some(now - t0),
                _ => {}
            }
        }
        if stream.is_none() && tcp_at_end.is_none() && done.iter().all(Option::is_some) {
            tcp_at_end = Some(tcp_bytes());
        }
        let receivers_over = receivers
            .iter()
            .zip(&done)
            .all(|(r, d)| d.is_some() || r.exit.is_some());
        if plan.sender_serves && sender.exit.is_none() && done.iter().all(Option::is_some) {
            // The server has served everyone; the bench stops it.
            break None;
        }
        if let Some((_, at)) = sender.exit {
            if receivers_over {
                break None;
            }
            if !plan.sender_may_leave && now - at > AFTER_SENDER.as_secs_f64() {
                break Some(format!(
                    "receivers not done {:.0} s after the sender exited",
                    AFTER_SENDER.as_secs_f64()
                ));
            }
        } else if receivers_over && done.iter().any(Option::is_none) {
            // Every receiver gave up; the sender has nobody left.
            sender.stop(&clock);
            break Some("every receiver exited, some without the file".into());
        }
        if ctx.cancelled() {
            break Some("cancelled".into());
        }
        if now - t0 > ctx.timeout.as_secs_f64() {
            break Some(format!(
                "timed out after {:.0} s",
                ctx.timeout.as_secs_f64()
            ));
        }
        std::thread::sleep(POLL);
    };
    for r in &mut receivers {
        r.stop(&clock);
    }
    sender.stop(&clock);
    if plan.sender_port.is_some() {
        // Whatever the race tools' scripts left behind in the lab's
        // namespaces (a tracker, a seed) goes with them.
        for host in names.iter().map(String::as_str).chain([SENDER]) {
            if let Ok(ns) = lab.netns_of(host) {
                let _ = ns.kill_processes();
            }
        }
    }
    let stream_s = stream.and_then(|(source, start, end)| {
        drop(source);
        end.map(|end: f64| end - start)
    });
    let tcp = flow
        .is_some()
        .then(|| tcp_at_end.map(|end| end.saturating_sub(tcp_at_start)))
        .flatten();
    drop(flow_stop(flow));
    let net = NetReport::take(&mut lab);
    drop(lab);
    Ok(figures(
        Figures {
            scn,
            ctx,
            t0,
            media: tool.kind == ToolKind::Media,
            stream_s,
            done: &done,
            sender: &sender,
            receivers: &receivers,
            outputs: plan.receivers.iter().map(|c| c.output.as_path()).collect(),
            names: &names,
            net,
            tcp,
            sender_serves: plan.sender_serves,
            sender_setup_s,
            predicted_bps: plan.tree.as_ref().map(|t| t.predicted_bps[1..].to_vec()),
            parents: plan.tree.as_ref().map(|t| {
                t.tree.parent[1..]
                    .iter()
                    .map(|p| match p {
                        Some(0) | None => SENDER.to_owned(),
                        Some(h) => receiver_name(h - 1),
                    })
                    .collect()
            }),
            bound_bps: receiver_bps
                .iter()
                .map(|&r| r.min(scenario::sender_rate_bps(scn)))
                .collect(),
        },
        error,
    ))
}

/// Longest a serving sender may take to listen.
const SENDER_READY: Duration = Duration::from_secs(60);

/// Waits until `sender`, in the sender's namespace, listens on TCP `port`
/// (asked of `ss` there), failing if it exits first or takes longer than
/// [`SENDER_READY`].
fn wait_listening(
    lab: &Lab,
    sender: &mut Proc,
    port: u16,
    clock: &Clock,
    ctx: &Context,
) -> Result<(), LabError> {
    let start = clock.now();
    let ns = lab.netns_of(SENDER)?;
    loop {
        let out = ns
            .exec("ss")
            .args(["-ltnH", &format!("sport = :{port}")])
            .output()
            .map_err(|e| LabError::io("running ss in the sender's namespace", e))?;
        if out.status.success() && !out.stdout.is_empty() {
            return Ok(());
        }
        sender.poll(clock.now().as_secs_f64())?;
        let gave_up = if sender.exit.is_some() {
            Some("exited")
        } else if clock.now() - start > SENDER_READY || ctx.cancelled() {
            Some("timed out")
        } else {
            None
        };
        if let Some(why) = gave_up {
            sender.stop(clock);
            return Err(LabError::io(
                format!(
                    "the sender {why} before listening on port {port}; stderr: {}",
                    tail(&sender.dir.join("stderr.log"), 3)
                ),
                std::io::ErrorKind::TimedOut.into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs a plan's setup script in `dir` (outside the clock and the lab's
/// namespaces), failing with its stderr.
fn run_setup(dir: &Path, script: &str, ctx: &Context) -> Result<(), LabError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| LabError::io(format!("creating {}", dir.display()), e))?;
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("PATH", &ctx.path)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::io("running the setup script", e))?;
    if out.status.success() {
        return Ok(());
    }
    Err(LabError::io(
        format!(
            "the setup script failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        std::io::ErrorKind::Other.into(),
    ))
}

/// One kernel CUBIC flow over `scn`'s topology from the sender to the
/// first receiver ([`super::reference`]), with the loss the emulator drew
/// toward that receiver.
pub fn tcp_reference(scn: &ScenarioSpec, ctx: &Context) -> TcpReference {
    let mut out = TcpReference {
        scenario: scn.name.clone(),
        mbps: None,
        network_loss: 0.0,
        error: None,
    };
    let measured = scenario::topology(scn)
        .and_then(|topo| Lab::build(&topo))
        .and_then(|mut lab| {
            let mbps =
                reference::one_flow(&lab, reference::FILE_SUITE_REFERENCE, ctx.cancel.as_deref())?;
            let loss = NetReport::take(&mut lab).map_or(0.0, |net| {
                reference::loss_toward(&net.links, &[receiver_name(0)])
            });
            Ok((mbps, loss))
        });
    match measured {
        Ok((mbps, loss)) => {
            out.mbps = Some(mbps);
            out.network_loss = loss;
        }
        Err(e) => out.error = Some(e.to_string()),
    }
    out
}

/// Starts the scenario's competing TCP flow, if it has one, and lets it
/// run alone for its warm-up.
pub(crate) fn start_competing(
    lab: &Lab,
    competing: Option<&Competing>,
) -> Result<Option<(TcpSource, TcpSink)>, LabError> {
    let Some(c) = competing else {
        return Ok(None);
    };
    let (Some(src), Some(dst)) = (lab.host(TCP_SOURCE), lab.host(TCP_SINK)) else {
        return Err(LabError::io(
            "TCP hosts missing",
            std::io::ErrorKind::NotFound.into(),
        ));
    };
    let sink = TcpSink::start(dst, TCP_PORT)?;
    let source = TcpSource::start(src, sink.addr())?;
    std::thread::sleep(Duration::from_secs_f64(c.warmup_s));
    Ok(Some((source, sink)))
}

/// Stops the competing flow (source first, so the sink sees a clean end).
fn flow_stop(flow: Option<(TcpSource, TcpSink)>) -> Option<TcpSink> {
    flow.map(|(source, sink)| {
        drop(source);
        sink
    })
}

/// The network's account of a run: the emulator's report, or with the
/// kernel profile the kernel's qdisc and nftables counters.
struct NetReport {
    /// Per directed link, in topology order.
    links: Vec<LinkReport>,
    /// False when the emulator fell behind or failed, or the kernel's
    /// counters could not be read.
    valid: bool,
    /// Why the run is invalid.
    invalid_reason: Option<String>,
    /// Emulator release lateness, 99th percentile, µs (0 for the kernel).
    lateness_p99_us: u64,
    /// The emulator ran under SCHED_FIFO (the kernel's qdiscs always do
    /// their own timing: true).
    realtime: bool,
    /// The emulator steered the hosts' packet input to other CPUs.
    receive_steering: bool,
    /// CPU seconds of the emulator thread (`None` for the kernel, whose
    /// forwarding is charged to whichever process sent or received).
    emulator_cpu_s: Option<f64>,
}

impl NetReport {
    /// Stops the emulator, or reads the kernel's counters, of `lab`.
    fn take(lab: &mut Lab) -> Option<Self> {
        if let Some(k) = lab.kernel_report() {
            return Some(NetReport {
                links: k.links,
                valid: k.counters_unavailable.is_none(),
                invalid_reason: k
                    .counters_unavailable
                    .map(|e| format!("the kernel's link counters: {e}")),
                lateness_p99_us: 0,
                realtime: true,
                receive_steering: false,
                emulator_cpu_s: None,
            });
        }
        lab.stop_emulator().map(|emu| NetReport {
            links: emu.links,
            valid: emu.valid,
            invalid_reason: emu.invalid_reason,
            lateness_p99_us: emu.lateness.p99_us,
            realtime: emu.realtime,
            receive_steering: emu.steering.is_some(),
            emulator_cpu_s: Some(emu.cpu_s),
        })
    }
}

struct Figures<'a> {
    scn: &'a ScenarioSpec,
    ctx: &'a Context,
    t0: f64,
    /// A media run (a stream, not a file).
    media: bool,
    /// A media run's stream duration (`None` for a file, or a stream that
    /// never ended).
    stream_s: Option<f64>,
    done: &'a [Option<f64>],
    sender: &'a Proc,
    receivers: &'a [Proc],
    outputs: Vec<&'a Path>,
    names: &'a [String],
    net: Option<NetReport>,
    tcp: Option<u64>,
    /// The sender served until stopped (its exit status says nothing).
    sender_serves: bool,
    /// Seconds the sender took to listen, where it started first.
    sender_setup_s: Option<f64>,
    /// The overlay's predicted rate per receiver, bit/s.
    predicted_bps: Option<Vec<f64>>,
    /// The overlay's parent per receiver.
    parents: Option<Vec<String>>,
    /// Per receiver, the lesser of its link's and the sender's link's
    /// rate, bit/s.
    bound_bps: Vec<u64>,
}

/// A media run's receiver: the bytes of stream it reported, over the
/// stream's duration.
fn stream_receiver(
    r: &Proc,
    done: Option<f64>,
    stream_s: Option<f64>,
    host: &str,
) -> ReceiverResult {
    let bytes = received_bytes(&r.dir.join("stdout.log"));
    let problem = match (bytes, done) {
        (None, _) => Some("no --json summary".to_owned()),
        (Some(0), _) => Some("no stream received".to_owned()),
        (Some(_), None) => Some("did not exit cleanly".to_owned()),
        (Some(_), Some(_)) => None,
    }
    .map(|p| format!("{p}; stderr: {}", tail(&r.dir.join("stderr.log"), 3)));
    ReceiverResult {
        host: host.to_owned(),
        done_s: done,
        goodput_mbps: bytes
            .zip(stream_s.filter(|s| *s > 0.0))
            .map(|(b, s)| b as f64 * 8.0 / s / 1e6),
        verified: false,
        stream_bytes: bytes,
        exit_code: r.exit.and_then(|(st, _)| st.code()),
        cpu_s: cpu_of(&r.dir),
        problem,
        bound_s: None,
        predicted_mbps: None,
        parent: None,
    }
}

fn figures(f: Figures<'_>, mut error: Option<String>) -> RunResult {
    let size = f.ctx.size;
    let bits = size as f64 * 8.0;
    let mut receivers = Vec::with_capacity(f.receivers.len());
    for (((r, d), out), name) in f.receivers.iter().zip(f.done).zip(&f.outputs).zip(f.names) {
        if f.media {
            receivers.push(stream_receiver(r, *d, f.stream_s, name));
            continue;
        }
        let check = payload::verify(out, size, &f.ctx.hash);
        let problem = match (&check, d) {
            (Err(_), _) if !out.exists() => Some(partial(out)),
            (Err(e), _) => Some(e.clone()),
            (Ok(()), None) => Some(format!(
                "file complete but no completion seen; stderr: {}",
                tail(&r.dir.join("stderr.log"), 3)
            )),
            (Ok(()), Some(_)) => None,
        };
        let problem = problem.map(|p| {
            let log = tail(&r.dir.join("stderr.log"), 3);
            if log.is_empty() || p.contains("stderr") {
                p
            } else {
                format!("{p}; stderr: {log}")
            }
        });
        let i = receivers.len();
        receivers.push(ReceiverResult {
            host: name.clone(),
            done_s: *d,
            goodput_mbps: d.filter(|d| *d > 0.0).map(|d| bits / d / 1e6),
            verified: check.is_ok(),
            stream_bytes: None,
            exit_code: r.exit.and_then(|(st, _)| st.code()),
            cpu_s: cpu_of(&r.dir),
            problem,
            bound_s: f
                .bound_bps
                .get(i)
                .filter(|b| **b > 0)
                .map(|b| bits / *b as f64),
            predicted_mbps: f
                .predicted_bps
                .as_ref()
                .and_then(|p| p.get(i))
                .map(|p| p / 1e6),
            parent: f.parents.as_ref().and_then(|p| p.get(i)).cloned(),
        });
    }
    let all_done = f.done.iter().all(Option::is_some);
    let wall_s = if f.media {
        // A stream lasts as long as it is written.
        f.stream_s.filter(|_| all_done)
    } else {
        all_done
            .then(|| f.done.iter().flatten().copied().fold(0.0, f64::max))
            .filter(|_| !f.done.is_empty())
    };
    // Bits delivered to every receiver: the file, or the least of the
    // stream any receiver got.
    let bits = if f.media {
        receivers
            .iter()
            .map(|r| r.stream_bytes.unwrap_or(0))
            .min()
            .unwrap_or(0) as f64
            * 8.0
    } else {
        bits
    };
    let sender_exit_code = f.sender.exit.and_then(|(st, _)| st.code());
    if error.is_none() && sender_exit_code != Some(0) && !f.sender_serves {
        error = Some(format!(
            "sender exited with {:?}",
            f.sender.exit.map(|(st, _)| st)
        ));
    }
    let (mut sender_link_bytes, mut feedback_bytes, mut drops) = (0, 0, BTreeMap::new());
    let (mut valid, mut invalid_reason, mut p99, mut realtime) =
        (false, Some("no network report".to_owned()), 0, false);
    let mut receive_steering = false;
    if let Some(net) = &f.net {
        for l in &net.links {
            if l.from == SENDER {
                sender_link_bytes += l.tx_bytes;
            }
            if l.to == SENDER {
                feedback_bytes += l.tx_bytes;
            }
            for (k, v) in &l.drops {
                *drops.entry(k.clone()).or_insert(0) += v;
            }
        }
        valid = net.valid;
        invalid_reason.clone_from(&net.invalid_reason);
        p99 = net.lateness_p99_us;
        realtime = net.realtime;
        receive_steering = net.receive_steering;
    }
    let tcp = match (f.scn.competing_tcp.as_ref(), f.tcp, wall_s) {
        (Some(_), Some(bytes), Some(w)) if w > 0.0 => Some(TcpShare {
            tcp_mbps: bytes as f64 * 8.0 / w / 1e6,
            tool_mbps: bits / w / 1e6,
        }),
        _ => None,
    };
    let receiver_cpu_s = receivers.iter().map(|r| r.cpu_s).sum::<Option<f64>>();
    // A stream is judged by its bytes on the wire per byte a receiver got
    // (on average); a file by its size.
    let delivered = if f.media {
        let got: u64 = receivers.iter().filter_map(|r| r.stream_bytes).sum();
        got as f64 / receivers.len().max(1) as f64
    } else {
        size as f64
    };
    RunResult {
        ok: error.is_none()
            && receivers
                .iter()
                .all(|r| (r.verified || f.media) && r.problem.is_none()),
        valid,
        invalid_reason,
        error,
        wall_s,
        sender_exit_s: f.sender.exit.map(|(_, at)| at - f.t0),
        sender_exit_code,
        sender_cpu_s: cpu_of(&f.sender.dir),
        receiver_cpu_s,
        receivers,
        sender_link_bytes,
        feedback_bytes,
        wire_per_file_byte: if delivered > 0.0 {
            sender_link_bytes as f64 / delivered
        } else {
            0.0
        },
        lateness_p99_us: p99,
        realtime,
        receive_steering,
        emulator_cpu_s: f.net.as_ref().and_then(|n| n.emulator_cpu_s),
        drops,
        tcp,
        sender_setup_s: f.sender_setup_s,
        sender_log_tail: format!(
            "{}\n{}",
            tail(&f.sender.dir.join("stdout.log"), LOG_TAIL_LINES),
            tail(&f.sender.dir.join("stderr.log"), LOG_TAIL_LINES)
        )
        .trim()
        .to_owned(),
        ..failed(String::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dash_and_bash_times() {
        let near = |x: Option<f64>, want: f64| x.is_some_and(|x| (x - want).abs() < 1e-9);
        assert!(near(
            parse_times("0m0.000000s 0m0.000000s\n0m1.250000s 1m0.500000s\n"),
            61.75
        ));
        assert!(near(
            parse_times("0m0.001s 0m0.000s\n0m0.030s 0m0.120s"),
            0.15
        ));
        assert_eq!(parse_times("0m0.0s 0m0.0s\n"), None);
        assert_eq!(parse_times("x\nbogus words"), None);
    }
}
