//! Statistics lines while a transfer runs (`--stats FILE --stats-interval
//! MS`): one JSON object per line, for `jq` and log collectors. The lines'
//! content is each command's own (a file session's here; a real-time
//! stream's in [`crate::realtime_opts`]).

use anyhow::{Context, Result};
use clap::Args;
use fanout_core::Instant;
use fanout_transport::session::SessionSender;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Where and how often statistics lines go.
#[derive(Debug, Args)]
pub struct StatsOpts {
    /// Write one JSON object per line of statistics to FILE every
    /// --stats-interval (created or truncated; `-` for stderr).
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
    /// Milliseconds between statistics lines.
    #[arg(long, default_value_t = 1000, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub stats_interval: u64,
}

/// Statistics lines, one JSON object each, every interval.
pub struct StatsLines {
    out: Box<dyn Write + Send>,
    every: Duration,
    next: Option<Instant>,
    started: Option<Instant>,
}

impl StatsLines {
    /// Lines to `opts.stats` (`None` if not asked for).
    pub fn open(opts: &StatsOpts) -> Result<Option<StatsLines>> {
        let Some(path) = &opts.stats else {
            return Ok(None);
        };
        let out: Box<dyn Write + Send> = if path.as_os_str() == "-" {
            Box::new(std::io::stderr())
        } else {
            Box::new(std::io::BufWriter::new(
                std::fs::File::create(path)
                    .with_context(|| format!("cannot create {}", path.display()))?,
            ))
        };
        Ok(Some(StatsLines {
            out,
            every: Duration::from_millis(opts.stats_interval),
            next: None,
            started: None,
        }))
    }

    /// Writes a line made by `line` (given the seconds since the first
    /// call) if one is due at `now`.
    pub fn tick(
        &mut self,
        now: Instant,
        line: impl FnOnce(f64) -> serde_json::Value,
    ) -> Result<()> {
        self.tick_lines(now, |t| vec![line(t)])
    }

    /// Writes the lines made by `lines` (given the seconds since the first
    /// call) if they are due at `now`.
    pub fn tick_lines(
        &mut self,
        now: Instant,
        lines: impl FnOnce(f64) -> Vec<serde_json::Value>,
    ) -> Result<()> {
        let started = *self.started.get_or_insert(now);
        if self.next.is_some_and(|n| now < n) {
            return Ok(());
        }
        self.next = Some(now + self.every);
        let t = now.saturating_duration_since(started).as_secs_f64();
        for line in lines(t) {
            writeln!(self.out, "{line}").context("cannot write statistics")?;
        }
        self.out.flush().context("cannot write statistics")
    }

    /// Writes the last line (at the end, whatever the interval).
    pub fn last(
        &mut self,
        now: Instant,
        line: impl FnOnce(f64) -> serde_json::Value,
    ) -> Result<()> {
        self.next = None;
        self.tick(now, line)
    }

    /// Writes the last lines (at the end, whatever the interval).
    pub fn last_lines(
        &mut self,
        now: Instant,
        lines: impl FnOnce(f64) -> Vec<serde_json::Value>,
    ) -> Result<()> {
        self.next = None;
        self.tick_lines(now, lines)
    }
}

/// A file sender's statistics lines ([`file_session_lines`]) while it
/// runs: a write error is kept for the end rather than stopping the
/// transfer.
pub struct FileSessionLines {
    lines: Option<StatsLines>,
    error: Option<anyhow::Error>,
    /// Stream bytes: the file and its header.
    total: u64,
}

impl FileSessionLines {
    /// Lines to `opts.stats` (nothing if not asked for) of a stream of
    /// `total` bytes.
    pub fn open(opts: &StatsOpts, total: u64) -> Result<Self> {
        Ok(FileSessionLines {
            lines: StatsLines::open(opts)?,
            error: None,
            total,
        })
    }

    /// Writes the lines due at `now`.
    pub fn tick(&mut self, now: Instant, s: &SessionSender) {
        let total = self.total;
        if let Some(Err(e)) =
            (self.lines.as_mut()).map(|l| l.tick_lines(now, |t| file_session_lines(t, s, total)))
        {
            self.error.get_or_insert(e);
        }
    }

    /// Writes the last lines; the first write error, if any.
    pub fn finish(mut self, now: Instant, s: &SessionSender) -> Result<()> {
        let total = self.total;
        if let Some(l) = self.lines.as_mut() {
            l.last_lines(now, |t| file_session_lines(t, s, total))?;
        }
        self.error.map_or(Ok(()), Err)
    }
}

/// Statistics lines of a file session's sender: one for the session, then
/// one per receiver (`"kind": "receiver"`), so `jq` can follow each.
pub fn file_session_lines(t: f64, s: &SessionSender, total: u64) -> Vec<serde_json::Value> {
    let t = (t * 1000.0).round() / 1000.0;
    let st = s.stats();
    let mut lines = vec![serde_json::json!({
        "t": t,
        "kind": "session",
        "bytes": total,
        "bytes_acked_by_all": s.bytes_acked_by_all(),
        "bytes_sent": s.snd_nxt(),
        "receivers": s.receiver_count(),
        "members_joined": st.members_joined,
        "members_left": st.members_left,
        "multicast_repairs": st.multicast_repairs,
        "unicast_repairs": st.unicast_repairs,
        "rto_events": st.rto_events,
        "spurious_repairs": st.spurious_repairs,
        "recoveries_undone": st.recoveries_undone,
        "rtt_ms": s.session_rtt().as_secs_f64() * 1000.0,
    })];
    lines.extend(s.member_snapshots().map(|m| {
        serde_json::json!({
            "t": t,
            "kind": "receiver",
            "id": m.id.0,
            "addr": m.addr.to_string(),
            "acked_bytes": m.cumulative,
            "start_offset": m.start,
            "srtt_ms": m.srtt.as_secs_f64() * 1000.0,
            "cwnd_bytes": m.cwnd,
            "in_recovery": m.in_recovery,
            "recovery_episodes": m.recovery_episodes,
            "rtos": m.rtos,
            "repaired_bytes": m.repaired_bytes,
        })
    }));
    lines
}
