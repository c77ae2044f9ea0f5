//! `fanout recv --serve`: a receiver that stays up and takes session after
//! session into one directory. Each round waits for a session announced on
//! the group (`--from` only filters the announcers) that it has not taken
//! part in yet, receives its file (named by the sender, sanitised, never
//! replacing a file unless `--overwrite`), runs `--exec` on success, and
//! records what happened in `--status-file` and `--events`. A session that
//! failed with what arrived kept (see `crate::resume`) is joined again
//! while it runs, to resume. SIGINT or SIGTERM ends it cleanly (exit 0),
//! telling a sender it is receiving from.

use crate::cmd_recv::{recv_session, Progress, RecvArgs};
use crate::report::TransferReport;
use anyhow::{ensure, Context, Result};
use clap::Args;
use serde_json::json;
use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Sessions remembered as taken part in (the oldest forgotten first).
const MAX_SEEN_SESSIONS: usize = 1024;

/// Pause after a failed round before waiting for the next session.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Times one session is joined again to resume what a failed attempt kept.
const MAX_RESUMES: u32 = 3;

/// The service flags of `fanout recv`.
#[derive(Debug, Clone, Default, Args)]
pub struct ServiceOpts {
    /// Stay up and receive session after session (announced on --group;
    /// --from only filters the senders) into the -o directory.
    #[arg(long, requires = "group")]
    pub serve: bool,
    /// With --serve: after each verified file, run this with `sh -c`;
    /// FANOUT_FILE (its path; a tree's: the -o directory), FANOUT_FILES
    /// (every file's path, one per line), FANOUT_BYTES, FANOUT_BLAKE3 and
    /// FANOUT_SENDER are set. The service waits for it to end.
    #[arg(long, value_name = "COMMAND", requires = "serve")]
    pub exec: Option<String>,
    /// With --serve: keep the service's state in this JSON file (rewritten
    /// whole at every change): waiting or receiving, counts, the last
    /// transfer.
    #[arg(long, value_name = "FILE", requires = "serve")]
    pub status_file: Option<PathBuf>,
    /// With --serve: append one JSON line per event (waiting, completed,
    /// failed, exec) to this file; `-` for stdout.
    #[arg(long, value_name = "FILE", requires = "serve")]
    pub events: Option<PathBuf>,
}

/// Seconds since the Unix epoch, to the millisecond.
fn unix_now() -> f64 {
    (fanout_io::unix_time() * 1000.0).round() / 1000.0
}

/// Where the service writes its status (`state`: `waiting` for a session,
/// or `stopped`; counts; the last transfer) and its events.
struct Journal {
    status: Option<PathBuf>,
    events: Option<Box<dyn Write>>,
    completed: u64,
    failed: u64,
    last: serde_json::Value,
    /// The state last written, and since when (Unix seconds).
    state: &'static str,
    since: f64,
}

impl Journal {
    fn open(opts: &ServiceOpts) -> Result<Self> {
        let events: Option<Box<dyn Write>> = match &opts.events {
            None => None,
            Some(p) if p.as_os_str() == "-" => Some(Box::new(std::io::stdout())),
            Some(p) => Some(Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .with_context(|| format!("cannot open {}", p.display()))?,
            )),
        };
        Ok(Journal {
            status: opts.status_file.clone(),
            events,
            completed: 0,
            failed: 0,
            last: serde_json::Value::Null,
            state: "waiting",
            since: unix_now(),
        })
    }

    /// Appends `event` (stamped) to the events and rewrites the status.
    fn record(&mut self, state: &str, mut event: serde_json::Value) -> Result<()> {
        event["time"] = json!(unix_now());
        if let Some(w) = self.events.as_mut() {
            writeln!(w, "{event}")
                .and_then(|()| w.flush())
                .context("cannot write an event")?;
        }
        self.since = unix_now();
        self.write_status(state, serde_json::Value::Null)
    }

    /// Rewrites the status: `state`, and what is being received if any.
    fn write_status(&self, state: &str, receiving: serde_json::Value) -> Result<()> {
        if let Some(path) = &self.status {
            let mut status = json!({
                "state": state,
                "since": self.since,
                "pid": std::process::id(),
                "completed": self.completed,
                "failed": self.failed,
                "last": self.last,
            });
            if !receiving.is_null() {
                status["receiving"] = receiving;
            }
            write_atomically(path, &format!("{status:#}\n"))?;
        }
        Ok(())
    }

    /// The status while a session is received: its sender, id, name and
    /// progress (written about every second; a failed write only warns).
    fn receiving(&mut self, p: &Progress) {
        if self.state != "receiving" {
            self.since = unix_now();
            self.state = "receiving";
        }
        let receiving = json!({
            "sender": p.sender.to_string(),
            "session": p.session.map(|id| format!("{id:016x}")),
            "name": p.name,
            "bytes": p.size,
            "done": p.done,
            "updated": unix_now(),
        });
        if let Err(e) = self.write_status("receiving", receiving) {
            tracing::warn!("{e:#}");
        }
    }
}

/// Replaces `path` with `text` at once (a reader never sees half of it).
fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", path.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// The files a session delivered, one path per line.
fn files_list(report: &TransferReport) -> String {
    if report.files.is_empty() {
        report.file.clone()
    } else {
        report.files.join("\n")
    }
}

/// Runs `--exec` for a received file; its outcome as an event.
fn run_exec(command: &str, report: &TransferReport) -> serde_json::Value {
    let status = Command::new("sh")
        .arg("-c")
        .arg(command)
        .env("FANOUT_FILE", &report.file)
        .env("FANOUT_FILES", files_list(report))
        .env("FANOUT_BYTES", report.bytes.to_string())
        .env("FANOUT_BLAKE3", &report.blake3)
        .env("FANOUT_SENDER", &report.peer)
        .status();
    match status {
        Ok(s) => json!({"event": "exec", "file": report.file, "exit_code": s.code()}),
        Err(e) => json!({"event": "exec", "file": report.file, "error": e.to_string()}),
    }
}

/// Runs the service until SIGINT or SIGTERM.
pub fn serve(args: &RecvArgs) -> Result<()> {
    ensure!(
        args.output.is_dir(),
        "--serve: -o {} must be an existing directory (files are named by their senders)",
        args.output.display()
    );
    crate::interrupt::watch();
    let mut journal = Journal::open(&args.service)?;
    let mut seen: VecDeque<u64> = VecDeque::new();
    let group = args.group.map(|g| g.to_string()).unwrap_or_default();
    let mut resumed: Option<(u64, u32)> = None;
    loop {
        journal.state = "waiting";
        journal.record("waiting", json!({"event": "waiting", "group": group}))?;
        let skip: Vec<u64> = seen.iter().copied().collect();
        let mut joined = None;
        let result = recv_session(args, None, Some(&skip), &mut joined, &mut |p| {
            journal.receiving(p)
        });
        if let Some(id) = joined {
            // A session that failed with what arrived kept (the sender
            // evicted this receiver, or went quiet) is joined again while
            // it runs, to resume, a few times; any other is never joined
            // again, whatever came of it.
            let attempts = match resumed {
                Some((s, n)) if s == id => n + 1,
                _ => 1,
            };
            let resumable = result.is_err()
                && !crate::interrupt::interrupted()
                && attempts <= MAX_RESUMES
                && crate::resume::ResumeRecord::load(&args.output, id).is_some();
            if resumable {
                resumed = Some((id, attempts));
            } else {
                if seen.len() >= MAX_SEEN_SESSIONS {
                    seen.pop_front();
                }
                seen.push_back(id);
            }
        }
        let session = joined.map(|id| format!("{id:016x}"));
        let stopped = crate::interrupt::interrupted();
        match result {
            Ok(report) => {
                journal.completed += 1;
                let event = json!({
                    "event": "completed",
                    "session": session,
                    "sender": report.peer,
                    "file": report.file,
                    "bytes": report.bytes,
                    "seconds": report.seconds,
                    "blake3": report.blake3,
                    "files": report.files,
                    "transport": report.transport,
                });
                journal.last = event.clone();
                journal.record("waiting", event)?;
                if !args.out.quiet {
                    report.print(false);
                }
                if let Some(command) = &args.service.exec {
                    let outcome = run_exec(command, &report);
                    journal.record("waiting", outcome)?;
                }
            }
            // Stopped while waiting or receiving: not a failed session.
            Err(_) if stopped => {}
            Err(e) => {
                journal.failed += 1;
                let event = json!({
                    "event": "failed",
                    "session": session,
                    "reason": format!("{e:#}"),
                });
                journal.last = event.clone();
                journal.record("waiting", event)?;
                eprintln!("fanout: a session failed: {e:#}");
                if !crate::interrupt::interrupted() {
                    std::thread::sleep(RETRY_PAUSE);
                }
            }
        }
        if stopped || crate::interrupt::interrupted() {
            journal.record("stopped", json!({"event": "stopped"}))?;
            return Ok(());
        }
    }
}
