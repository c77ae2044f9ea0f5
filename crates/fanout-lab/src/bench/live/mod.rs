//! The live race: fanout's real-time stream against SRT's live mode
//! (`srt-live-transmit`) on the same emulated paths, at latency budgets of
//! a few round trips, with random and bursty loss, a competing CUBIC flow,
//! loss from the first packet, and a group of receivers.
//!
//! For every selected (scenario, budget, tool, run) the bench builds the
//! scenario's lab afresh, writes a constant-rate stream of numbered
//! messages into the tool's sender(s) and times each message as it comes
//! out of each receiver ([`stream`]): application loss, messages read
//! after their deadline, delivery delay, time to the first message; the
//! senders' own retransmission counters; the competing flow's rate.

pub mod plan;
pub mod report;
pub mod results;
pub mod run;
pub mod stream;
pub mod suite;

use crate::bench::peers;
use crate::bench::results::{load_average, Machine};
use crate::error::LabError;
use results::{LiveResults, LiveRun};
use run::LiveContext;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use suite::{LiveSuite, LiveToolKind};

/// What to run of a live suite, and how.
#[derive(Debug, Clone)]
pub struct LiveSelection {
    /// Scenario names (empty: all).
    pub scenarios: Vec<String>,
    /// Tool names (empty: all).
    pub tools: Vec<String>,
    /// Runs per (scenario, budget, tool), at least 1.
    pub runs: u32,
    /// Scratch directory.
    pub work: PathBuf,
    /// Keep run directories.
    pub keep: bool,
    /// Install SRT's Debian package when missing.
    pub install_peers: bool,
    /// Stops the suite early.
    pub cancel: Option<Arc<AtomicBool>>,
}

fn check_names(kind: &str, wanted: &[String], have: &[&str]) -> Result<(), LabError> {
    match wanted.iter().find(|w| !have.contains(&w.as_str())) {
        Some(w) => Err(LabError::Topology {
            file: "command line".into(),
            message: format!("unknown {kind} {w:?} (the suite has: {})", have.join(", ")),
        }),
        None => Ok(()),
    }
}

/// Runs the selected part of `suite`; `progress` gets a line per step.
pub fn run_live_suite(
    suite: &LiveSuite,
    sel: &LiveSelection,
    machine: Machine,
    command: String,
    progress: &mut dyn FnMut(&str),
) -> Result<LiveResults, LabError> {
    let scenario_names: Vec<&str> = suite.scenarios.iter().map(|s| s.name.as_str()).collect();
    let tool_names: Vec<&str> = suite.tools.iter().map(|t| t.name.as_str()).collect();
    check_names("scenario", &sel.scenarios, &scenario_names)?;
    check_names("tool", &sel.tools, &tool_names)?;
    let pick = |names: &[String], n: &str| names.is_empty() || names.iter().any(|x| x == n);
    let tools: Vec<_> = suite
        .tools
        .iter()
        .filter(|t| pick(&sel.tools, &t.name))
        .collect();
    let scenarios: Vec<_> = suite
        .scenarios
        .iter()
        .filter(|s| pick(&sel.scenarios, &s.name))
        .collect();
    if tools.iter().any(|t| t.kind == LiveToolKind::Srt) {
        peers::ensure_programs(
            &[(&["srt-live-transmit"][..], "srt-tools")],
            sel.install_peers,
            progress,
        )?;
    }
    std::fs::create_dir_all(&sel.work)
        .map_err(|e| LabError::io(format!("creating {}", sel.work.display()), e))?;
    let ctx = LiveContext {
        work: sel.work.clone(),
        path: crate::run::command_path(),
        cancel: sel.cancel.clone(),
        keep: sel.keep,
    };
    let runs = sel.runs.max(1);
    let total: usize = scenarios
        .iter()
        .map(|s| s.budgets_rtt.len() * tools.iter().filter(|t| t.runs_in(&s.name)).count())
        .sum::<usize>()
        * runs as usize;
    let mut out = LiveResults::new(suite, command, machine);
    let cancelled = || {
        sel.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
    };
    'all: for scn in &scenarios {
        if scn.tcp_reference && sel.tools.is_empty() && !cancelled() {
            progress(&format!(
                "{}: one TCP flow on the path, {:.0} s",
                scn.name,
                suite.duration.as_secs_f64()
            ));
            let r = run::tcp_reference(suite, scn, &ctx);
            progress(&match (r.mbps, &r.error) {
                (Some(m), _) => format!(
                    "    TCP {m:.2} Mbit/s, network loss {:.2}%",
                    r.network_loss * 100.0
                ),
                (None, e) => format!("    FAILED: {}", e.as_deref().unwrap_or("?")),
            });
            out.tcp_references.push(r);
        }
        for &budget in &scn.budgets_rtt {
            for run in 1..=runs {
                for tool in tools.iter().filter(|t| t.runs_in(&scn.name)) {
                    if cancelled() {
                        break 'all;
                    }
                    progress(&format!(
                        "[{}/{total}] {} ({}), budget {budget} RTT, {}, run {run}",
                        out.runs.len() + 1,
                        scn.name,
                        scn.title,
                        tool.name
                    ));
                    let r = run::run_one(suite, scn, budget, tool, run, &ctx);
                    progress(&format!("    {}", one_line(&r)));
                    out.runs.push(r);
                }
            }
        }
    }
    out.machine.load_end = load_average();
    Ok(out)
}

/// A run in one line for progress output.
pub fn one_line(r: &LiveRun) -> String {
    if !r.ok {
        return format!("FAILED: {}", r.error.as_deref().unwrap_or("?"));
    }
    let mut line = format!(
        "loss {:.3}%, late {:.3}%, delay p50 {:.1} / p99 {:.1} ms (budget {} ms), network loss {:.2}%",
        r.loss() * 100.0,
        r.late() * 100.0,
        r.receivers.iter().map(|x| x.delay_p50_ms).fold(0.0, f64::max),
        r.delay_p99_ms(),
        r.budget_ms,
        r.network_loss * 100.0
    );
    if let Some(x) = r.retransmission() {
        line.push_str(&format!(", retransmitted {:.2}%", x * 100.0));
    }
    if let Some(f) = r.first_data_s() {
        line.push_str(&format!(", first data {:.3} s", f));
    }
    if let Some((tcp, own)) = r.tcp {
        line.push_str(&format!(", stream {own:.2} / TCP {tcp:.2} Mbit/s"));
    }
    if !r.valid {
        line.push_str(" [INVALID: emulator fell behind]");
    }
    line
}
