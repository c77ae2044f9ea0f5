//! `fanout lab bench` (fanout, uftp and udpcast side by side on the same
//! emulated topologies) and `fanout lab report` (docs/benchmarks.md and
//! its plots from the results JSON).

use anyhow::{bail, Context, Result};
use clap::Args;
use fanout_lab::bench::live::results::LiveResults;
use fanout_lab::bench::live::suite::{is_live, LiveSuite};
use fanout_lab::bench::live::{run_live_suite, LiveSelection};
use fanout_lab::bench::results::{machine, Results};
use fanout_lab::bench::suite::{parse_size, Suite};
use fanout_lab::bench::{merge, plot, report, run_suite, work_dir, Selection};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `fanout lab bench`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  # the file-distribution suite (fanout, uftp, udpcast), 3 runs each
  sudo fanout lab bench benchmarks/suite.toml --runs 3 --out results.json
  # the media controllers and uftp's TFMCC beside a kernel CUBIC flow
  sudo fanout lab bench --only f --tools uftp-tfmcc,media-asmp,media-tfmcc,media-pgmcc
  # the live race against SRT (exits non-zero when fanout misses a target)
  sudo fanout lab bench benchmarks/live.toml --out live.json
  # both in docs/benchmarks.md
  fanout lab report results.json live.json")]
pub struct BenchArgs {
    /// Suite file (TOML): tools with their rate settings, and scenarios; a
    /// file with `kind = \"live\"` is a live race (benchmarks/live.toml).
    #[arg(default_value = "benchmarks/suite.toml")]
    suite: PathBuf,
    /// Run only these scenarios (comma-separated names, e.g. `a,b`).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    only: Vec<String>,
    /// Run only these tools (comma-separated, e.g. `fanout,uftp,udpcast`).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    tools: Vec<String>,
    /// File size, e.g. `200MiB` or `4MiB` (default: the suite's).
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
    /// Runs per scenario and tool (the report shows median and spread).
    #[arg(long, default_value_t = 1, value_name = "N")]
    runs: u32,
    /// Longest one run may take, in seconds (default: the suite's).
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
    /// Print the results as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Write the results JSON to this file (input of `fanout lab report`).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Scratch directory for the payload and the received files (default:
    /// a fresh one in memory under /dev/shm when it has room, else under the
    /// temporary directory; removed at the end).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// Keep each run's directory (received files, every program's output).
    #[arg(long)]
    keep: bool,
    /// Fail when a peer (uftp, udpcast) is not installed instead of
    /// installing its Debian package with apt-get.
    #[arg(long)]
    no_install: bool,
}

/// Arguments of `fanout lab report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Results JSON written by `fanout lab bench --out`; several are merged
    /// into one report (e.g. a slow scenario run once, the others twice).
    #[arg(required = true, num_args = 1..)]
    results: Vec<PathBuf>,
    /// The Markdown report to write.
    #[arg(long, default_value = "docs/benchmarks.md", value_name = "FILE")]
    out: PathBuf,
    /// Directory for the SVG plots.
    #[arg(long, default_value = "docs/benchmarks", value_name = "DIR")]
    img_dir: PathBuf,
    /// A Markdown file of explanations (why a target was missed, what was
    /// unusual about the run) to include in the report as "Notes".
    #[arg(long, value_name = "FILE")]
    notes: Option<PathBuf>,
}

/// The command line as typed, with the program named `fanout`.
fn command_line() -> String {
    let mut words = vec!["fanout".to_owned()];
    words.extend(std::env::args().skip(1));
    words.join(" ")
}

/// fanout's version and, when the suite lies in a checkout, its commit.
fn fanout_version(suite: &Path) -> String {
    let dir = suite
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let commit = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["describe", "--always", "--dirty"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match commit {
        Some(c) if !c.is_empty() => format!("{} (git {c})", env!("CARGO_PKG_VERSION")),
        _ => env!("CARGO_PKG_VERSION").to_owned(),
    }
}

/// Runs `fanout lab bench`.
pub fn bench(args: BenchArgs, cancel: Arc<AtomicBool>) -> Result<()> {
    if args.runs == 0 {
        bail!("--runs: want at least 1");
    }
    let text = std::fs::read_to_string(&args.suite)
        .with_context(|| format!("reading {}", args.suite.display()))?;
    if is_live(&text) {
        return bench_live(&args, &text, cancel);
    }
    let suite = Suite::load(&args.suite)?;
    let size = match &args.size {
        Some(s) => Some(parse_size(s).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let timeout = match args.timeout {
        Some(s) => Some(Duration::try_from_secs_f64(s).context("--timeout: want seconds ≥ 0")?),
        None => None,
    };
    let temp = args.work_dir.is_none();
    let work = match &args.work_dir {
        Some(dir) => dir.clone(),
        None => {
            let peak = work_dir::peak_bytes(&suite, &args.only, size);
            let (dir, why) = work_dir::default_work_dir(args.keep, peak);
            eprintln!("fanout lab bench: work directory {} ({why})", dir.display());
            dir
        }
    };
    let selection = Selection {
        scenarios: args.only.clone(),
        tools: args.tools.clone(),
        size,
        runs: args.runs,
        timeout,
        work: work.clone(),
        keep: args.keep,
        install_peers: !args.no_install,
        cancel: Some(cancel),
    };
    let machine = machine(&fanout_version(&args.suite), !cfg!(debug_assertions));
    if machine.load_start[0] > machine.cores as f64 * 0.5 {
        eprintln!(
            "fanout lab bench: note: load average {:.2} on {} cores; figures will be marked as taken on a loaded machine",
            machine.load_start[0], machine.cores
        );
    }
    let results = run_suite(
        &suite,
        &selection,
        machine,
        command_line(),
        &mut |line| eprintln!("fanout lab bench: {line}"),
        &mut |_| {},
    );
    if temp && !args.keep {
        let _ = std::fs::remove_dir_all(&work);
    }
    let results = results?;
    emit(&args, &results)?;
    let failed = results.failures().count();
    let invalid = results.results.iter().filter(|r| !r.valid).count();
    if invalid > 0 {
        eprintln!(
            "fanout lab bench: {invalid} run(s) INVALID (the emulator fell behind): see the report"
        );
    }
    let misses = results.reference_misses();
    for m in &misses {
        let got = m
            .ratio
            .map_or("no reference figure to compare with".into(), |r| {
                format!("{r:.2}× the reference TCP flow")
            });
        eprintln!(
            "fanout lab bench: target missed: {} in scenario {}, run {}: {got}, target {:.2}",
            m.run.tool, m.run.scenario, m.run.run, m.target
        );
    }
    let other_misses = results.target_misses();
    for m in &other_misses {
        eprintln!(
            "fanout lab bench: target missed: {} in scenario {}, run {}: {}",
            m.run.tool, m.run.scenario, m.run.run, m.what
        );
    }
    let missed = misses.len() + other_misses.len();
    if failed > 0 || missed > 0 {
        bail!(
            "{failed} of {} runs failed; {missed} target(s) missed",
            results.results.len(),
        );
    }
    Ok(())
}

/// Writes `results` to `--out` and, with `--json`, to stdout.
fn emit(args: &BenchArgs, results: &impl serde::Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(results)?;
    if let Some(out) = &args.out {
        std::fs::write(out, format!("{text}\n"))
            .with_context(|| format!("writing {}", out.display()))?;
        eprintln!("fanout lab bench: results in {}", out.display());
    }
    if args.json {
        println!("{text}");
    }
    Ok(())
}

/// Runs a live suite (`kind = "live"`): fails when the target tool misses
/// a target, after writing the results.
fn bench_live(args: &BenchArgs, text: &str, cancel: Arc<AtomicBool>) -> Result<()> {
    if args.size.is_some() || args.timeout.is_some() {
        bail!("--size and --timeout apply to file suites; a live suite sets its stream's duration");
    }
    let suite = LiveSuite::parse(text, &args.suite.display().to_string())?;
    let temp = args.work_dir.is_none();
    let work = args.work_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("fanout-live-{}", std::process::id()))
    });
    let selection = LiveSelection {
        scenarios: args.only.clone(),
        tools: args.tools.clone(),
        runs: args.runs,
        work: work.clone(),
        keep: args.keep,
        install_peers: !args.no_install,
        cancel: Some(cancel),
    };
    let machine = machine(&fanout_version(&args.suite), !cfg!(debug_assertions));
    let results = run_live_suite(&suite, &selection, machine, command_line(), &mut |line| {
        eprintln!("fanout lab bench: {line}");
    });
    if temp && !args.keep {
        let _ = std::fs::remove_dir_all(&work);
    }
    let results = results?;
    emit(args, &results)?;
    let failed = results.runs.iter().filter(|r| !r.ok).count();
    let missed = results.missed();
    for (r, what) in &missed {
        eprintln!(
            "fanout lab bench: target missed: {} at {} RTT, {} run {}: {}",
            r.scenario,
            r.budget_rtt,
            r.tool,
            r.run,
            what.join("; ")
        );
    }
    if failed > 0 || !missed.is_empty() {
        bail!(
            "{failed} of {} runs failed; {} run(s) missed a target",
            results.runs.len(),
            missed.len()
        );
    }
    Ok(())
}

/// `path` relative to `base` when it lies below it.
fn relative(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Runs `fanout lab report`.
pub fn report_cmd(args: ReportArgs) -> Result<()> {
    let mut parts = Vec::with_capacity(args.results.len());
    let mut live = Vec::new();
    for path in &args.results {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let kind = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_owned));
        if kind.as_deref() == Some("live") {
            let part: LiveResults = serde_json::from_str(&text).with_context(|| {
                format!(
                    "{}: not a `fanout lab bench` live results file",
                    path.display()
                )
            })?;
            live.push(part);
            continue;
        }
        let part: Results = serde_json::from_str(&text).with_context(|| {
            format!("{}: not a `fanout lab bench` results file", path.display())
        })?;
        parts.push(part);
    }
    if parts.is_empty() {
        bail!("no file-suite results among the inputs (the report's main part comes from `fanout lab bench benchmarks/suite.toml --out FILE`)");
    }
    let results = merge::merge(parts).map_err(anyhow::Error::msg)?;
    let base = args.out.parent().unwrap_or(Path::new(""));
    plot::write_all(&results, &args.img_dir)
        .with_context(|| format!("writing plots into {}", args.img_dir.display()))?;
    let regen = format!(
        "fanout lab report {} --out {} --img-dir {}",
        args.results
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" "),
        args.out.display(),
        args.img_dir.display()
    );
    let notes = match &args.notes {
        Some(p) => {
            Some(std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?)
        }
        None => None,
    };
    let regen = match &args.notes {
        Some(p) => format!("{regen} --notes {}", p.display()),
        None => regen,
    };
    let mut md = report::markdown(
        &results,
        &relative(&args.img_dir, base),
        &regen,
        notes.as_deref(),
    );
    for l in &live {
        md.push('\n');
        md.push_str(&fanout_lab::bench::live::report::markdown(l));
    }
    std::fs::write(&args.out, md).with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!(
        "fanout lab report: wrote {} and plots in {}",
        args.out.display(),
        args.img_dir.display()
    );
    Ok(())
}
