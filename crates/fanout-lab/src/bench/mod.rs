//! The benchmark suite: fanout and the Debian peers (uftp, udpcast) on the same
//! emulated topologies, one after the other in one invocation, and the report
//! generated from the results (`docs/benchmarks.md`).
//!
//! For every selected (scenario, tool, run) the bench builds the scenario's
//! lab afresh ([`scenario::topology`]), starts the receivers, then the
//! sender, and measures (see [`measure`]): wall time from the sender's
//! start until the last receiver has the file, goodput per receiver, bytes
//! on the sender's link per file byte (the emulator's counters), sender and
//! receiver CPU seconds, and each received file's BLAKE3 hash against the
//! source. A run whose emulator fell behind is kept and marked invalid.

pub mod live;
pub mod measure;
pub mod media;
pub mod merge;
pub mod overlay_tree;
pub mod payload;
pub mod peers;
pub mod plot;
pub mod race_tools;
pub mod reference;
pub mod report;
pub mod results;
pub mod scenario;
pub mod suite;
pub mod tool;
pub mod work_dir;

use crate::error::LabError;
use measure::Context;
use results::{load_average, Machine, Results, RunResult};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use suite::Suite;

/// Seed of the payload bytes.
const PAYLOAD_SEED: u64 = 1;

/// What to run of a suite, and how.
#[derive(Debug, Clone)]
pub struct Selection {
    /// Scenario names (empty: all).
    pub scenarios: Vec<String>,
    /// Tool names (empty: all).
    pub tools: Vec<String>,
    /// File size (`None`: the suite's).
    pub size: Option<u64>,
    /// Runs per (scenario, tool), at least 1.
    pub runs: u32,
    /// Per-run timeout (`None`: the suite's).
    pub timeout: Option<Duration>,
    /// Scratch directory.
    pub work: PathBuf,
    /// Keep run directories.
    pub keep: bool,
    /// Install the selected peers' missing Debian packages with apt-get
    /// (false: fail naming them; [`peers::ensure_installed`]).
    pub install_peers: bool,
    /// Stops the suite early.
    pub cancel: Option<Arc<AtomicBool>>,
}

/// Checks that every name in `wanted` exists in `have`.
fn check_names<'a>(
    kind: &str,
    wanted: &[String],
    have: impl Iterator<Item = &'a str> + Clone,
) -> Result<(), LabError> {
    for w in wanted {
        if !have.clone().any(|h| h == w) {
            let known: Vec<&str> = have.clone().collect();
            return Err(LabError::Topology {
                file: "command line".into(),
                message: format!("unknown {kind} {w:?} (the suite has: {})", known.join(", ")),
            });
        }
    }
    Ok(())
}

/// Runs the selected part of `suite`; `progress` gets a line per step
/// (the CLI prints them on stderr), `machine` the notes to record. Each
/// run's result is passed to `on_result` as soon as it is known.
pub fn run_suite(
    suite: &Suite,
    sel: &Selection,
    mut machine: Machine,
    command: String,
    progress: &mut dyn FnMut(&str),
    on_result: &mut dyn FnMut(&RunResult),
) -> Result<Results, LabError> {
    check_names(
        "scenario",
        &sel.scenarios,
        suite.scenarios.iter().map(|s| s.name.as_str()),
    )?;
    check_names(
        "tool",
        &sel.tools,
        suite.tools.iter().map(|t| t.name.as_str()),
    )?;
    let pick = |names: &[String], n: &str| names.is_empty() || names.iter().any(|x| x == n);
    let scenarios: Vec<_> = suite
        .scenarios
        .iter()
        .filter(|s| pick(&sel.scenarios, &s.name))
        .cloned()
        .collect();
    let tools: Vec<_> = suite
        .tools
        .iter()
        .filter(|t| pick(&sel.tools, &t.name))
        .cloned()
        .collect();
    peers::ensure_installed(&tools, sel.install_peers, progress)?;
    let size = sel.size.unwrap_or(suite.size);
    std::fs::create_dir_all(&sel.work)
        .map_err(|e| LabError::io(format!("creating {}", sel.work.display()), e))?;
    let source = sel.work.join("payload.bin");
    progress(&format!(
        "generating the {size}-byte payload {}",
        source.display()
    ));
    let hash = payload::generate(&source, size, PAYLOAD_SEED)?;
    let ctx = Context {
        work: sel.work.clone(),
        source: source.clone(),
        size,
        hash,
        timeout: sel.timeout.unwrap_or(suite.timeout),
        path: crate::run::command_path(),
        cancel: sel.cancel.clone(),
        keep: sel.keep,
    };
    let runs = sel.runs.max(1);
    let pairs = scenarios
        .iter()
        .map(|s| tools.iter().filter(|t| t.runs_in(&s.name)).count())
        .sum::<usize>();
    let total = pairs * runs as usize;
    let mut results = Vec::with_capacity(total);
    let mut tcp_references = Vec::new();
    'all: for scn in &scenarios {
        // The command line's --timeout overrides the scenario's and the suite's.
        let ctx = Context {
            timeout: sel.timeout.unwrap_or_else(|| suite.timeout_for(scn)),
            ..ctx.clone()
        };
        for run in 1..=runs {
            for tool in tools.iter().filter(|t| t.runs_in(&scn.name)) {
                if ctx
                    .cancel
                    .as_ref()
                    .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
                {
                    break 'all;
                }
                progress(&format!(
                    "[{}/{total}] scenario {} ({}), {}, run {run}: running",
                    results.len() + 1,
                    scn.name,
                    scn.title,
                    tool.name
                ));
                let r = measure::run_one(scn, tool, run, &ctx);
                progress(&format!("    {}", report::one_line(&r)));
                on_result(&r);
                results.push(r);
            }
        }
        let ran = tools.iter().any(|t| t.runs_in(&scn.name));
        if scn.tcp_reference && ran && !ctx.cancelled() {
            progress(&format!(
                "scenario {}: one kernel {} flow to {} for {} s (the reference)",
                scn.name,
                reference::REFERENCE_CC,
                scenario::receiver_name(0),
                scn.reference_duration().as_secs_f64()
            ));
            let r = measure::tcp_reference(scn, &ctx);
            match (r.mbps, &r.error) {
                (Some(mbps), _) => progress(&format!("    {mbps:.2} Mbit/s")),
                (None, e) => progress(&format!("    failed: {}", e.as_deref().unwrap_or("?"))),
            }
            tcp_references.push(r);
        }
    }
    if !sel.keep {
        let _ = std::fs::remove_file(&source);
    }
    machine.load_end = load_average();
    Ok(Results {
        suite: suite.origin.clone(),
        command,
        size,
        runs,
        machine,
        tools,
        scenarios,
        results,
        tcp_references,
    })
}
