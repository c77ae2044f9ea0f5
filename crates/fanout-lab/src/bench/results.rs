//! What a suite run records (serialised as the results JSON that the report
//! generator reads), and the machine notes taken with it.

use super::suite::{ScenarioSpec, ToolSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One receiver of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReceiverResult {
    /// Host name (`r1`, …).
    pub host: String,
    /// Seconds from the sender's start until this receiver had the whole
    /// file (its exit, or for uftpd the final file's appearance); `None`
    /// if it never did.
    pub done_s: Option<f64>,
    /// File bits / `done_s`, Mbit/s.
    pub goodput_mbps: Option<f64>,
    /// The received file has the source's size and BLAKE3 hash (always
    /// false for a stream, which has no file to check).
    pub verified: bool,
    /// A media run: the bytes of stream it received and wrote out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_bytes: Option<u64>,
    /// Exit code (`None`: killed, e.g. uftpd stopped at the end).
    pub exit_code: Option<i32>,
    /// User + system CPU seconds of the receiver process.
    pub cpu_s: Option<f64>,
    /// Why it failed, when it did.
    pub problem: Option<String>,
    /// Its physical bound: file bits over the lesser of its link's and the
    /// sender's link's rate, seconds (`None` for a stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_s: Option<f64>,
    /// Overlay runs: its predicted rate on the planned tree, Mbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_mbps: Option<f64>,
    /// Overlay runs: the host it joined in the planned tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

/// The competing TCP flow of a fairness scenario, over the transfer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcpShare {
    /// The TCP flow's goodput while the transfer ran, Mbit/s.
    pub tcp_mbps: f64,
    /// The transfer's goodput (file bits / wall time; for a stream, the
    /// bits the receiver that got least received / the stream's
    /// duration), Mbit/s.
    pub tool_mbps: f64,
}

/// One (scenario, tool, run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Scenario name.
    pub scenario: String,
    /// Tool name.
    pub tool: String,
    /// Run number, from 1.
    pub run: u32,
    /// Every receiver verified, the sender exited 0, nothing timed out.
    pub ok: bool,
    /// The emulator kept up (p99 lateness within bound, no failure): the
    /// figures reflect the emulated network.
    pub valid: bool,
    /// Why the run is invalid.
    pub invalid_reason: Option<String>,
    /// A failure of the bench itself or of the run (timeout, sender
    /// failure); `None` when all went well.
    pub error: Option<String>,
    /// Seconds from the sender's start until the last receiver had the
    /// file (`None` unless every receiver did).
    pub wall_s: Option<f64>,
    /// Seconds from the sender's start until it exited.
    pub sender_exit_s: Option<f64>,
    /// Sender's exit code.
    pub sender_exit_code: Option<i32>,
    /// Sender's user + system CPU seconds.
    pub sender_cpu_s: Option<f64>,
    /// Sum over receivers of their CPU seconds.
    pub receiver_cpu_s: Option<f64>,
    /// Per receiver.
    pub receivers: Vec<ReceiverResult>,
    /// Bytes (IP datagrams, headers included) the sender's link carried
    /// away from the sender.
    pub sender_link_bytes: u64,
    /// Bytes the sender's link carried to the sender (feedback).
    pub feedback_bytes: u64,
    /// `sender_link_bytes` per file byte (1.0 = every byte sent once,
    /// headers free).
    pub wire_per_file_byte: f64,
    /// Emulator release lateness, 99th percentile, µs.
    pub lateness_p99_us: u64,
    /// The emulator thread ran under SCHED_FIFO.
    pub realtime: bool,
    /// The emulator had a CPU of its own and the hosts' packet input ran
    /// on the others (false in older results).
    #[serde(default)]
    pub receive_steering: bool,
    /// CPU seconds of the emulator thread (absent in older results).
    #[serde(default)]
    pub emulator_cpu_s: Option<f64>,
    /// Drops on all links, by reason.
    pub drops: BTreeMap<String, u64>,
    /// 1-, 5-, 15-minute load averages before the run.
    pub load_before: [f64; 3],
    /// … and after it.
    pub load_after: [f64; 3],
    /// The competing TCP flow, in fairness scenarios.
    pub tcp: Option<TcpShare>,
    /// Seconds a serving sender took to listen before the receivers (and
    /// the clock) started (race tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_setup_s: Option<f64>,
    /// Last lines of the sender's output (for failures).
    pub sender_log_tail: String,
}

/// The machine the suite ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Logical CPUs.
    pub cores: usize,
    /// CPU model (`/proc/cpuinfo`).
    pub cpu_model: String,
    /// Kernel release.
    pub kernel: String,
    /// Load averages when the suite started.
    pub load_start: [f64; 3],
    /// … and when it ended.
    pub load_end: [f64; 3],
    /// UTC date and time of the start (`date -u`).
    pub date: String,
    /// Versions of the peers' Debian packages and of fanout.
    pub versions: BTreeMap<String, String>,
    /// Whether the `fanout` binary was a release build.
    pub fanout_release_build: bool,
}

/// A whole suite run: the results JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// The suite file.
    pub suite: String,
    /// The command line that produced these results.
    pub command: String,
    /// File size in bytes.
    pub size: u64,
    /// Runs per (scenario, tool).
    pub runs: u32,
    /// The machine.
    pub machine: Machine,
    /// Tools compared (with their rate settings).
    pub tools: Vec<ToolSpec>,
    /// Scenarios run.
    pub scenarios: Vec<ScenarioSpec>,
    /// Every run, in execution order.
    pub results: Vec<RunResult>,
    /// One kernel CUBIC flow on each scenario that asks for it
    /// (`tcp_reference`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tcp_references: Vec<TcpReference>,
}

/// A successful run that missed its tool's `wire_target` or
/// `faster_than`.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetMiss<'a> {
    /// The run.
    pub run: &'a RunResult,
    /// What it missed, in words.
    pub what: String,
}

/// A run below its tool's target against the scenario's reference flow.
#[derive(Debug, Clone, PartialEq)]
pub struct ReferenceMiss<'a> {
    /// The run.
    pub run: &'a RunResult,
    /// Its rate over the reference flow's (0 for a run that did not
    /// finish; `None` when the reference flow gave no figure).
    pub ratio: Option<f64>,
    /// The tool's target.
    pub target: f64,
}

impl Results {
    /// Runs that failed (not `ok`).
    pub fn failures(&self) -> impl Iterator<Item = &RunResult> {
        self.results.iter().filter(|r| !r.ok)
    }

    /// The reference flow's rate in `scenario`, Mbit/s.
    pub fn reference_mbps(&self, scenario: &str) -> Option<f64> {
        self.tcp_references
            .iter()
            .find(|r| r.scenario == scenario)
            .and_then(|r| r.mbps)
    }

    /// A run's rate to every receiver (the file over the time until the
    /// last receiver had it), Mbit/s.
    pub fn run_mbps(&self, run: &RunResult) -> Option<f64> {
        run.wall_s
            .filter(|&s| s > 0.0)
            .map(|s| self.size as f64 * 8.0 / s / 1e6)
    }

    /// The mean wall time of `tool`'s successful runs in `scenario`, s.
    fn mean_wall_s(&self, scenario: &str, tool: &str) -> Option<f64> {
        let walls: Vec<f64> = self
            .results
            .iter()
            .filter(|r| r.ok && r.scenario == scenario && r.tool == tool)
            .filter_map(|r| r.wall_s)
            .collect();
        (!walls.is_empty()).then(|| walls.iter().sum::<f64>() / walls.len() as f64)
    }

    /// Successful runs above their tool's `wire_target`, or not faster
    /// than a tool it names in `faster_than` (compared only where that
    /// tool finished in the same scenario), in the scenarios that measured
    /// a reference flow (`tcp_reference`: the paths the targets are set
    /// on; a short lossless run spends a larger share on its start); and
    /// runs that missed their `share_target` or `closer_than` against a
    /// competing flow.
    pub fn target_misses(&self) -> Vec<TargetMiss<'_>> {
        let mut out = Vec::new();
        let measured = |scenario: &str| self.tcp_references.iter().any(|r| r.scenario == scenario);
        for run in self
            .results
            .iter()
            .filter(|r| r.ok && measured(&r.scenario))
        {
            let Some(tool) = self.tools.iter().find(|t| t.name == run.tool) else {
                continue;
            };
            if let Some(most) = tool.wire_target {
                if run.wire_per_file_byte > most {
                    out.push(TargetMiss {
                        run,
                        what: format!(
                            "{:.3} bytes on the wire per file byte, target at most {most:.2}",
                            run.wire_per_file_byte
                        ),
                    });
                }
            }
            for other in &tool.faster_than {
                let Some(theirs) = self.mean_wall_s(&run.scenario, other) else {
                    continue;
                };
                if run.wall_s.is_none_or(|w| w >= theirs) {
                    out.push(TargetMiss {
                        run,
                        what: format!(
                            "wall {} s, not faster than {other} ({theirs:.1} s)",
                            run.wall_s.map_or("–".into(), |w| format!("{w:.1}"))
                        ),
                    });
                }
            }
        }
        out.extend(self.share_misses());
        out.extend(self.race_misses());
        out
    }

    /// Runs of tools with a `bound_target`, `predicted_target` or
    /// `finish_within` that missed them, in every scenario they ran in (a
    /// receiver without the file misses the first two).
    fn race_misses(&self) -> Vec<TargetMiss<'_>> {
        let mut out = Vec::new();
        for run in &self.results {
            let Some(tool) = self.tools.iter().find(|t| t.name == run.tool) else {
                continue;
            };
            for r in &run.receivers {
                let done = r.done_s.filter(|_| r.verified);
                if let (Some(x), Some(bound)) = (tool.bound_target, r.bound_s) {
                    if done.is_none_or(|d| d > bound * (1.0 + x)) {
                        out.push(TargetMiss {
                            run,
                            what: format!(
                                "{} done at {}, over {:.0}% above its bound {bound:.1} s",
                                r.host,
                                done.map_or("never".into(), |d| format!("{d:.1} s")),
                                x * 100.0
                            ),
                        });
                    }
                }
                if let (Some(x), Some(want)) = (tool.predicted_target, r.predicted_mbps) {
                    let got = r.goodput_mbps.filter(|_| done.is_some());
                    if got.is_none_or(|g| g < want * (1.0 - x)) {
                        out.push(TargetMiss {
                            run,
                            what: format!(
                                "{} at {} Mbit/s, over {:.0}% below its predicted {want:.1}",
                                r.host,
                                got.map_or("–".into(), |g| format!("{g:.1}")),
                                x * 100.0
                            ),
                        });
                    }
                }
            }
            for (other, factor) in &tool.finish_within {
                let Some(theirs) = self.mean_wall_s(&run.scenario, other) else {
                    continue;
                };
                if run
                    .wall_s
                    .filter(|_| run.ok)
                    .is_none_or(|w| w > factor * theirs)
                {
                    out.push(TargetMiss {
                        run,
                        what: format!(
                            "all done at {} s, target at most {factor}× {other}'s {theirs:.1} s",
                            run.wall_s.map_or("–".into(), |w| format!("{w:.1}"))
                        ),
                    });
                }
            }
        }
        out
    }

    /// A run's rate over the competing TCP flow's while it ran.
    pub fn share(run: &RunResult) -> Option<f64> {
        run.tcp
            .as_ref()
            .filter(|t| t.tcp_mbps > 0.0)
            .map(|t| t.tool_mbps / t.tcp_mbps)
    }

    /// Runs of tools with a `share_target` or `closer_than`, in scenarios
    /// with a competing flow, that missed them (a failed run, or one with
    /// no share measured, misses its `share_target`).
    fn share_misses(&self) -> Vec<TargetMiss<'_>> {
        let mut out = Vec::new();
        let competing = |scenario: &str| {
            self.scenarios
                .iter()
                .any(|s| s.name == scenario && s.competing_tcp.is_some())
        };
        for run in self.results.iter().filter(|r| competing(&r.scenario)) {
            let Some(tool) = self.tools.iter().find(|t| t.name == run.tool) else {
                continue;
            };
            let share = Self::share(run).filter(|_| run.ok);
            let shown = share.map_or("no share measured".into(), |s| {
                format!("{s:.2}× the TCP flow")
            });
            if let Some([lo, hi]) = tool.share_target {
                if share.is_none_or(|s| !(lo..=hi).contains(&s)) {
                    out.push(TargetMiss {
                        run,
                        what: format!("{shown}, target {lo}–{hi}×"),
                    });
                }
            }
            for other in &tool.closer_than {
                // Their runs' geometric mean share.
                let logs: Vec<f64> = self
                    .results
                    .iter()
                    .filter(|r| r.ok && r.scenario == run.scenario && &r.tool == other)
                    .filter_map(Self::share)
                    .map(f64::ln)
                    .collect();
                if logs.is_empty() {
                    continue;
                }
                let theirs = logs.iter().sum::<f64>() / logs.len() as f64;
                if share.is_none_or(|s| s.ln().abs() >= theirs.abs()) {
                    out.push(TargetMiss {
                        run,
                        what: format!("{shown}, not nearer 1× than {other} ({:.2}×)", theirs.exp()),
                    });
                }
            }
        }
        out
    }

    /// Runs of tools with a `reference_target` that fell below it, in
    /// scenarios with a reference flow (one whose reference flow gave no
    /// figure cannot be checked, and counts as a miss).
    pub fn reference_misses(&self) -> Vec<ReferenceMiss<'_>> {
        let mut out = Vec::new();
        for run in &self.results {
            let target = self
                .tools
                .iter()
                .find(|t| t.name == run.tool)
                .and_then(|t| t.reference_target);
            let asked = self
                .scenarios
                .iter()
                .any(|s| s.name == run.scenario && s.tcp_reference);
            let (Some(target), true) = (target, asked) else {
                continue;
            };
            let ratio = self
                .reference_mbps(&run.scenario)
                .map(|reference| self.run_mbps(run).map_or(0.0, |r| r / reference));
            if ratio.is_none_or(|r| r < target) {
                out.push(ReferenceMiss { run, ratio, target });
            }
        }
        out
    }
}

pub use super::live::results::TcpReference;

/// The load averages from `/proc/loadavg` (zeros if unreadable).
pub fn load_average() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut out = [0.0; 3];
    for (slot, word) in out.iter_mut().zip(text.split_whitespace()) {
        *slot = word.parse().unwrap_or(0.0);
    }
    out
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// Notes on this machine; `fanout_version` and `release` describe the
/// `fanout` binary running the suite.
pub fn machine(fanout_version: &str, release: bool) -> Machine {
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into());
    let mut versions = BTreeMap::new();
    versions.insert("fanout".to_owned(), fanout_version.to_owned());
    for pkg in ["uftp", "udpcast", "srt-tools"] {
        let v = command_output("dpkg-query", &["-W", "-f", "${Version}", pkg])
            .unwrap_or_else(|| "not installed".into());
        versions.insert(pkg.to_owned(), v);
    }
    Machine {
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        cpu_model,
        kernel,
        load_start: load_average(),
        load_end: [0.0; 3],
        date: command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default(),
        versions,
        fanout_release_build: release,
    }
}
