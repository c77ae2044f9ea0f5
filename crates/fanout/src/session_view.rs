//! What a session sender shows while it runs and reports at the end: on a
//! terminal, a progress line and a live per-receiver table (redrawn at most
//! [`TABLE_HZ`] times a second); elsewhere nothing until the report. Shared
//! by `fanout send --group` and `fanout stream send`.

use crate::net_opts::PathReport;
use crate::outcome::Outcome;
use crate::report::{MemberReport, OutputOpts, SubtreeReceiverReport};
use fanout_app::upstream_relay::RelayEvent;
use fanout_core::time::Instant;
use fanout_transport::session::{Departure, MemberId, MemberSnapshot, SessionEvent, SessionSender};
use fanout_transport::CloseReason;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::time::Duration;

/// Table redraws per second at most.
pub const TABLE_HZ: u8 = 4;
/// Receivers listed at most (the slowest first); the rest are counted.
pub const TABLE_ROWS: usize = 16;
/// Departed receivers kept in the table (the most recent).
const TABLE_LEFT_ROWS: usize = 4;
/// Departed receivers kept for the report at most (a churning session
/// cannot grow this without bound).
const MAX_LEFT_REPORTS: usize = 4096;
/// Weight of the newest sample in a receiver's smoothed rate.
const RATE_GAIN: f64 = 0.5;

/// One receiver's last figures and its goodput estimate (from its
/// cumulative ACK over time).
#[derive(Debug, Clone)]
struct Sample {
    snap: MemberSnapshot,
    at: Instant,
    bps: f64,
}

/// The live table (a terminal only).
struct Table {
    multi: MultiProgress,
    lines: ProgressBar,
    label: String,
}

/// Progress display and member bookkeeping of one session sender.
pub struct SessionView {
    bar: ProgressBar,
    table: Option<Table>,
    total: Option<u64>,
    quiet: bool,
    /// Every member's figures, refreshed at most [`TABLE_HZ`] times a
    /// second (O(N) each time): the table's rows, and what the report says
    /// of a member after it left.
    samples: BTreeMap<MemberId, Sample>,
    last_sample: Option<Instant>,
    left: Vec<MemberReport>,
    left_dropped: u64,
    /// Upstream news for the session relay, kept only once asked for
    /// ([`SessionView::watch_upstream`]); at most one entry per event.
    relay: Option<Vec<RelayEvent>>,
    /// Receivers the session waits for before it starts, while it waits
    /// (the bar says so instead of showing a rate of 0).
    waiting_for: Option<usize>,
    /// The receiver whose path made the session's datagrams smaller, and
    /// their size ([`SessionEvent::DatagramsFitted`]).
    fitted: Option<(SocketAddr, usize)>,
}

impl SessionView {
    /// A view of a session carrying `total` bytes (`None`: a stream of
    /// unknown length); `label` names the session (group or "unicast").
    /// `--quiet` shows nothing while running; `--json` shows no progress but
    /// still tells of departures on stderr, as they happen.
    pub fn new(total: Option<u64>, label: &str, out: OutputOpts) -> Self {
        let quiet = out.quiet;
        let terminal = !quiet && !out.json && std::io::stderr().is_terminal();
        // Drawn only through the table's MultiProgress (a terminal), or not
        // at all.
        let bar = crate::progress::undrawn_bar(total, "send");
        let table = terminal.then(|| {
            let multi =
                MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(TABLE_HZ));
            let bar = multi.add(bar.clone());
            let lines = multi.insert_after(&bar, ProgressBar::hidden());
            lines.set_style(ProgressStyle::with_template("{msg}").expect("valid template"));
            Table {
                multi,
                lines,
                label: label.to_owned(),
            }
        });
        SessionView {
            bar,
            table,
            total,
            quiet,
            samples: BTreeMap::new(),
            last_sample: None,
            left: Vec::new(),
            left_dropped: 0,
            relay: None,
            waiting_for: None,
            fitted: None,
        }
    }

    /// `path` as the session ended up using it: the datagram size it
    /// fitted to a receiver's path, if it did.
    pub fn fitted_path(&self, path: Option<PathReport>) -> Option<PathReport> {
        let mut path = path?;
        if let Some((addr, max_datagram)) = self.fitted {
            path.max_datagram = max_datagram;
            path.fitted_to = Some(addr.to_string());
        }
        Some(path)
    }

    /// Shows "waiting for receivers: J of `n` joined" until data moves.
    pub fn wait_for(&mut self, n: usize) {
        self.waiting_for = Some(n);
        crate::progress::waiting(&self.bar);
    }

    /// Takes the session's events: departures are kept (with the member's
    /// last figures) for the table and the report, and announced.
    pub fn poll_events(&mut self, s: &mut SessionSender) {
        while let Some(e) = s.poll_event() {
            if let (Some(relay), SessionEvent::Upstream { id, addr }) = (self.relay.as_mut(), &e) {
                relay.push(RelayEvent::Readable(*id, *addr));
            }
            if let SessionEvent::DatagramsFitted { addr, max_datagram } = e {
                self.fitted = Some((addr, max_datagram));
                if !self.quiet {
                    self.println(&format!(
                        "receiver {addr}'s path takes no more than {max_datagram}-byte \
                         datagrams: the session's are now that size"
                    ));
                }
            }
            if let SessionEvent::MemberLeft {
                id,
                addr,
                reason,
                departure,
                merger,
            } = e
            {
                if let Some(relay) = self.relay.as_mut() {
                    relay.push(RelayEvent::Left(id));
                }
                let outcome = match departure {
                    Departure::MemberReset {
                        code: crate::outcome::reset_code::RESTARTED,
                    } => Outcome::Restarted,
                    Departure::MemberReset { .. } => Outcome::Failed,
                    Departure::Evicted => Outcome::Evicted,
                };
                if !self.quiet {
                    self.println(&format!("receiver {addr} {}: {reason}", outcome.label()));
                }
                let last = self.samples.remove(&id);
                if self.left.len() >= MAX_LEFT_REPORTS {
                    self.left_dropped += 1;
                    continue;
                }
                let mut report = last.map_or_else(MemberReport::default, |l| report(&l.snap));
                report.id = id.0;
                report.addr = addr.to_string();
                report.outcome = outcome;
                // A merger's receivers are counted where they re-attach.
                report.receivers = u64::from(!merger);
                report.reason = Some(
                    reason
                        .strip_prefix("member reset: ")
                        .unwrap_or(&reason)
                        .to_owned(),
                );
                report.left = Some(reason);
                self.left.push(report);
            }
        }
    }

    /// Keeps upstream events (members' upstream bytes readable, members
    /// leaving) for [`SessionView::take_upstream`] (session relay).
    pub fn watch_upstream(&mut self) {
        self.relay.get_or_insert_with(Vec::new);
    }

    /// The upstream events since the last call (empty unless watched).
    pub fn take_upstream(&mut self) -> Vec<RelayEvent> {
        self.relay.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Prints a line above the display (or plainly on stderr).
    pub fn println(&self, msg: &str) {
        if self.bar.is_hidden() {
            eprintln!("fanout: {msg}");
        } else {
            self.bar.println(msg);
        }
    }

    /// Updates the display: `position` is the progress bar's byte count.
    pub fn update(&mut self, s: &SessionSender, now: Instant, position: u64) {
        if let Some(n) = self.waiting_for {
            if s.snd_nxt() == 0 {
                self.bar.set_message(format!(
                    "waiting for receivers: {} of {n} joined",
                    s.receiver_count()
                ));
                self.bar.tick();
                return;
            }
            self.waiting_for = None;
            crate::progress::moving(&self.bar, self.total);
        }
        self.bar
            .set_message(format!("{} receivers", s.receiver_count()));
        self.bar.set_position(position);
        let due = self
            .last_sample
            .is_none_or(|l| now - l >= Duration::from_secs(1) / u32::from(TABLE_HZ));
        if !due {
            return;
        }
        self.last_sample = Some(now);
        self.sample(s, now);
        if let Some(t) = &self.table {
            t.lines
                .set_message(t.render(s, self.total, &self.samples, &self.left));
        }
    }

    /// Refreshes each receiver's figures and smoothed goodput.
    fn sample(&mut self, s: &SessionSender, now: Instant) {
        let mut next = BTreeMap::new();
        for snap in s.member_snapshots() {
            let bps = match self.samples.get(&snap.id) {
                Some(prev) if now > prev.at => {
                    let dt = (now - prev.at).as_secs_f64();
                    let bps =
                        snap.cumulative.saturating_sub(prev.snap.cumulative) as f64 * 8.0 / dt;
                    RATE_GAIN * bps + (1.0 - RATE_GAIN) * prev.bps
                }
                Some(prev) => prev.bps,
                None => 0.0,
            };
            next.insert(snap.id, Sample { snap, at: now, bps });
        }
        self.samples = next;
    }

    /// Clears the display.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
        if let Some(t) = &self.table {
            t.lines.finish_and_clear();
            let _ = t.multi.clear();
        }
    }

    /// Every receiver for the report: those still in the session (completed
    /// if the session did), then those that left (with why and their last
    /// figures).
    pub fn member_reports(&self, s: &SessionSender) -> Vec<MemberReport> {
        let completed = s.close_reason() == Some(&CloseReason::Completed);
        let mut subtrees: BTreeMap<MemberId, Vec<SubtreeReceiverReport>> = BTreeMap::new();
        for r in s.receivers() {
            if let Some((id, merger)) = r.via {
                subtrees.entry(id).or_default().push(SubtreeReceiverReport {
                    addr: r.addr.to_string(),
                    acked_bytes: r.cumulative,
                    via: format!("via merger {merger} (member {})", id.0),
                });
            }
        }
        let mut out: Vec<MemberReport> = s
            .member_snapshots()
            .map(|m| MemberReport {
                receivers: s.member_weight(m.id),
                subtree: subtrees.remove(&m.id).unwrap_or_default(),
                outcome: if completed {
                    Outcome::Completed
                } else {
                    Outcome::Incomplete
                },
                reason: (!completed).then(|| match s.close_reason() {
                    Some(why) => format!("the session ended: {why}"),
                    None => "the session did not end".to_owned(),
                }),
                ..report(&m)
            })
            .collect();
        out.extend(self.left.iter().cloned());
        out
    }

    /// Departures not kept (beyond the report's bound).
    pub fn left_dropped(&self) -> u64 {
        self.left_dropped
    }

    /// The last receiver that left and why (`ADDR: reason`), if any did.
    pub fn last_left(&self) -> Option<String> {
        let m = self.left.last()?;
        Some(format!("{}: {}", m.addr, m.left.as_deref().unwrap_or("")))
    }

    /// `e` (a session that failed) with the last departure, so the error
    /// says why and not only that everyone left.
    pub fn explain(&self, e: anyhow::Error) -> anyhow::Error {
        match self.last_left() {
            Some(last) => anyhow::anyhow!("{e:#}; the last receiver to leave, {last}"),
            None => e,
        }
    }
}

/// The report entry of a member still in the session.
fn report(m: &MemberSnapshot) -> MemberReport {
    MemberReport {
        id: m.id.0,
        addr: m.addr.to_string(),
        start_offset: m.start,
        acked_bytes: m.cumulative,
        srtt_ms: m.srtt.as_secs_f64() * 1e3,
        cwnd_bytes: m.cwnd,
        acks: m.acks,
        recovery_episodes: m.recovery_episodes,
        rtos: m.rtos,
        repaired_bytes: m.repaired_bytes,
        outcome: Outcome::Incomplete,
        reason: None,
        left: None,
        receivers: 1,
        subtree: Vec::new(),
    }
}

impl Table {
    /// The table's text: a summary line, a header, the slowest receivers
    /// first, and the most recent departures.
    fn render(
        &self,
        s: &SessionSender,
        total: Option<u64>,
        samples: &BTreeMap<MemberId, Sample>,
        left: &[MemberReport],
    ) -> String {
        let st = s.stats();
        let rate_sum: f64 = samples.values().map(|r| r.bps).sum();
        let mut out = format!(
            "session {} · {} receivers{} ({} left) · all acked {} · {:.1} Mbit/s summed · \
             repairs {} multicast / {} unicast · {} RTOs",
            self.label,
            s.receiver_count(),
            if s.receiver_count() == s.member_count() as u64 {
                String::new()
            } else {
                format!(" in {} members", s.member_count())
            },
            st.members_left,
            human_bytes(s.bytes_acked_by_all()),
            rate_sum / 1e6,
            st.multicast_repairs,
            st.unicast_repairs,
            st.rto_events,
        );
        out.push_str(&format!(
            "\n{:>5} {:<22} {:<10} {:>8} {:>8} {:>9} {:>6} {:>5} {:>10} {:>9}",
            "id",
            "address",
            "state",
            "Mbit/s",
            "RTT ms",
            "cwnd KiB",
            "losses",
            "RTOs",
            "repaired",
            "progress"
        ));
        let mut rows: Vec<&Sample> = samples.values().collect();
        rows.sort_by_key(|r| (r.snap.cumulative, r.snap.id));
        for r in rows.iter().take(TABLE_ROWS) {
            let m = &r.snap;
            let progress = match total {
                Some(e) if e > 0 => {
                    format!("{:.1}%", m.cumulative.min(e) as f64 * 100.0 / e as f64)
                }
                _ => human_bytes(m.cumulative - m.start),
            };
            out.push_str(&format!(
                "\n{:>5} {:<22} {:<10} {:>8.1} {:>8.2} {:>9.0} {:>6} {:>5} {:>10} {:>9}",
                m.id.0,
                m.addr.to_string(),
                if s.is_merger(m.id) {
                    format!("merger×{}", s.member_weight(m.id))
                } else {
                    state(m, s.snd_nxt()).to_owned()
                },
                r.bps / 1e6,
                m.srtt.as_secs_f64() * 1e3,
                m.cwnd as f64 / 1024.0,
                m.recovery_episodes,
                m.rtos,
                human_bytes(m.repaired_bytes),
                progress
            ));
        }
        if rows.len() > TABLE_ROWS {
            out.push_str(&format!("\n      ... {} more", rows.len() - TABLE_ROWS));
        }
        for m in left.iter().rev().take(TABLE_LEFT_ROWS) {
            out.push_str(&format!(
                "\n{:>5} {:<22} left: {}",
                m.id,
                m.addr,
                m.left.as_deref().unwrap_or("")
            ));
        }
        out
    }
}

/// A member's state in one word: `idle` (it acknowledged everything sent
/// so far), `recovery` (repairing a loss), `slow-start`, or `steady`.
fn state(m: &MemberSnapshot, snd_nxt: u64) -> &'static str {
    if m.cumulative >= snd_nxt {
        "idle"
    } else if m.in_recovery {
        "recovery"
    } else if m.slow_start {
        "slow-start"
    } else {
        "steady"
    }
}

/// `n` bytes in binary units, one decimal.
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;

    use fanout_core::Engine;
    use fanout_transport::session::bench_support::SyntheticSession;

    const QUIET: OutputOpts = OutputOpts {
        json: false,
        quiet: true,
    };

    #[test]
    fn the_table_lists_the_slowest_receivers_first_and_counts_the_rest() {
        let n = TABLE_ROWS + 4;
        let mut syn = SyntheticSession::new(n);
        let sent = syn.send_more(200_000, Duration::from_millis(1));
        assert!(sent > 10_000, "sent {sent}");
        let mut view = SessionView::new(Some(sent), "239.1.1.1:7000", QUIET);
        view.sample(&syn.session, syn.now);
        // Member i acknowledges i × 500 bytes (member 0 nothing; the
        // sender counts whole segments only).
        syn.now += Duration::from_millis(250);
        for i in 1..n {
            let ack = syn.ack(i, (i as u64) * 500);
            let from = syn.members[i];
            syn.session.handle_datagram(syn.now, from, &ack);
        }
        view.sample(&syn.session, syn.now);
        let table = Table {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::hidden()),
            lines: ProgressBar::hidden(),
            label: "239.1.1.1:7000".into(),
        };
        let text = table.render(&syn.session, Some(sent), &view.samples, &view.left);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains(&format!("{n} receivers")), "{}", lines[0]);
        assert_eq!(lines.len(), 2 + TABLE_ROWS + 1, "{text}");
        assert!(lines[2 + TABLE_ROWS].contains("4 more"), "{text}");
        // Slowest first: the progress column never decreases down the rows,
        // and the first row is a member that acknowledged the least.
        let progress: Vec<f64> = lines[2..2 + TABLE_ROWS]
            .iter()
            .map(|l| {
                l.split_whitespace()
                    .last()
                    .unwrap()
                    .trim_end_matches('%')
                    .parse()
                    .unwrap()
            })
            .collect();
        assert!(progress.windows(2).all(|w| w[0] <= w[1]), "{text}");
        let least = syn.session.member_snapshots().map(|m| m.cumulative).min();
        let first_id: u64 = lines[2].split_whitespace().next().unwrap().parse().unwrap();
        let first = syn.session.member_snapshots().find(|m| m.id.0 == first_id);
        assert_eq!(first.map(|m| m.cumulative), least, "{text}");
        // Goodput: acknowledged bytes over the 250 ms between samples,
        // smoothed once (half weight) from zero.
        let moved = syn
            .session
            .member_snapshots()
            .filter(|m| m.cumulative > 0)
            .count();
        assert!(moved >= n / 2, "ACKs advanced {moved} members");
        for m in syn.session.member_snapshots() {
            let want = 0.5 * m.cumulative as f64 * 8.0 / 0.25;
            let got = view.samples[&m.id].bps;
            assert!(
                (got - want).abs() < 1.0,
                "member {}: {got} vs {want}",
                m.id.0
            );
        }
        let reports = view.member_reports(&syn.session);
        assert_eq!(reports.len(), n);
        assert!(reports
            .iter()
            .all(|r| r.left.is_none() && r.start_offset == 0));
    }

    /// A member that is an ACK merger (it sent a ROSTER page) is reported
    /// with its subtree count and its receivers, marked with the merger.
    #[test]
    fn a_merger_member_is_reported_with_its_receivers() {
        use fanout_transport::wire::{Frame, Header, HeaderFlags, RosterEntry, RosterFrame};
        let mut syn = SyntheticSession::new(2);
        let merger = syn.members[1];
        let receiver = |i: u8| std::net::SocketAddr::from(([10, 9, 0, i], 7000));
        let mut d = Vec::new();
        let token = syn
            .session
            .member_token(fanout_transport::session::MemberId(2))
            .unwrap();
        Header {
            flags: HeaderFlags::default(),
            session_id: token,
            packet_number: 1000,
        }
        .encode(&mut d);
        Frame::Roster(RosterFrame {
            receivers: 3,
            fan_in: 3,
            total: 3,
            first: 0,
            entries: (1..=3)
                .map(|i| RosterEntry {
                    addr: receiver(i),
                    cumulative: u64::from(i) * 100,
                })
                .collect(),
        })
        .encode(&mut d);
        syn.session.handle_datagram(syn.now, merger, &d);
        assert_eq!(syn.session.receiver_count(), 4);
        let view = SessionView::new(None, "unicast", QUIET);
        let reports = view.member_reports(&syn.session);
        let m = reports
            .iter()
            .find(|r| r.addr == merger.to_string())
            .unwrap();
        assert_eq!(m.receivers, 3);
        assert_eq!(m.subtree.len(), 3);
        assert_eq!(m.subtree[1].addr, receiver(2).to_string());
        assert_eq!(m.subtree[1].acked_bytes, 200);
        assert!(m.subtree[1].via.contains(&merger.to_string()), "{m:?}");
        let other = reports.iter().find(|r| r.addr != m.addr).unwrap();
        assert_eq!((other.receivers, other.subtree.len()), (1, 0));
        let json = serde_json::to_string(&reports).unwrap();
        assert!(json.contains("via merger"), "{json}");
    }

    #[test]
    fn human_bytes_picks_units() {
        assert_eq!(human_bytes(0), "0.0 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
