//! Figures of a live race: per receiver, what it read and when (from the
//! probes' [`Arrivals`]); per run, the worst receiver, the tool's own
//! retransmission counters, the competing flow's share; and which targets
//! a run missed.

use super::stream::{Arrivals, Schedule};
use super::suite::{LiveScenario, LiveSuite, LiveTool, Target};
use crate::bench::results::Machine;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One receiver's stream as its application saw it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveReceiver {
    /// Host name.
    pub host: String,
    /// Messages read.
    pub read: u64,
    /// Messages never read (application loss).
    pub lost: u64,
    /// Messages read after their deadline (written + budget).
    pub late: u64,
    /// Messages read twice or more.
    pub duplicates: u64,
    /// Delivery delay percentiles and maximum, milliseconds (written to
    /// read), of the messages read.
    pub delay_p50_ms: f64,
    /// See `delay_p50_ms`.
    pub delay_p99_ms: f64,
    /// See `delay_p50_ms`.
    pub delay_max_ms: f64,
    /// Seconds from the stream's start to the first message read.
    pub first_data_s: Option<f64>,
    /// Messages lost among those written after the first one read.
    pub lost_after_first: u64,
    /// Exit code of the receiver (`None`: killed or still running at the end).
    pub exit_code: Option<i32>,
    /// What went wrong, if anything (stderr's tail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Nearest-rank percentile `q` of sorted `v` (0 when empty).
fn percentile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = (q * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

impl LiveReceiver {
    /// The figures of `seen` for a stream written on `schedule` with
    /// deadlines `budget` after each message's time.
    pub fn of(host: &str, seen: &Arrivals, schedule: &Schedule, budget: Duration) -> Self {
        let mut delays = Vec::with_capacity(seen.at.len());
        let (mut late, mut first) = (0, None);
        for (seq, at) in seen.at.iter().enumerate() {
            let Some(at) = at else { continue };
            let due = schedule.at(seq as u32);
            let delay = at.saturating_duration_since(due);
            if delay > budget {
                late += 1;
            }
            delays.push(delay.as_secs_f64() * 1000.0);
            first = first.or(Some(seq));
        }
        delays.sort_by(f64::total_cmp);
        let first_at = seen.at.iter().flatten().min().copied();
        let lost = seen.at.iter().filter(|a| a.is_none()).count() as u64;
        let lost_after_first = first.map_or(lost, |f| {
            seen.at[f..].iter().filter(|a| a.is_none()).count() as u64
        });
        LiveReceiver {
            host: host.to_owned(),
            read: delays.len() as u64,
            lost,
            late,
            duplicates: seen.duplicates,
            delay_p50_ms: percentile(&delays, 0.5),
            delay_p99_ms: percentile(&delays, 0.99),
            delay_max_ms: delays.last().copied().unwrap_or(0.0),
            first_data_s: first_at
                .map(|t| t.saturating_duration_since(schedule.start).as_secs_f64()),
            lost_after_first,
            exit_code: None,
            problem: None,
        }
    }
}

/// One run of one tool at one budget.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveRun {
    /// Scenario name.
    pub scenario: String,
    /// The budget in round trips, and in milliseconds.
    pub budget_rtt: u32,
    /// See `budget_rtt`.
    pub budget_ms: u64,
    /// Tool name.
    pub tool: String,
    /// Run number (1-based).
    pub run: u32,
    /// The run went through (no error); its figures may still miss targets.
    pub ok: bool,
    /// What stopped the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether the emulator kept up.
    pub valid: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<String>,
    /// Messages written.
    pub messages: u32,
    /// Messages a sender did not take when written (counted lost).
    pub refused: u64,
    /// Per receiver.
    pub receivers: Vec<LiveReceiver>,
    /// The network's loss rate on the receivers' links toward them, as
    /// the emulator drew it.
    pub network_loss: f64,
    /// Retransmitted datagrams and original datagrams, as the senders
    /// count them (summed over SRT's senders).
    pub retransmitted: Option<(u64, u64)>,
    /// Bytes on the sender's link per message byte written (everything:
    /// headers, repairs, control; SRT: every connection).
    pub wire_per_byte: f64,
    /// The competing TCP flow's and the stream's rate over the stream's
    /// time, Mbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<(f64, f64)>,
}

impl LiveRun {
    fn worst(&self, f: impl Fn(&LiveReceiver) -> f64) -> f64 {
        self.receivers.iter().map(f).fold(0.0, f64::max)
    }

    /// Worst receiver's application loss, as a share of the messages.
    pub fn loss(&self) -> f64 {
        let n = f64::from(self.messages.max(1));
        self.worst(|r| r.lost as f64 / n)
    }

    /// Worst receiver's share of messages read late.
    pub fn late(&self) -> f64 {
        let n = f64::from(self.messages.max(1));
        self.worst(|r| r.late as f64 / n)
    }

    /// Worst receiver's p99 delay, ms.
    pub fn delay_p99_ms(&self) -> f64 {
        self.worst(|r| r.delay_p99_ms)
    }

    /// Worst receiver's loss after its first message.
    pub fn loss_after_first(&self) -> f64 {
        let n = f64::from(self.messages.max(1));
        self.worst(|r| r.lost_after_first as f64 / n)
    }

    /// Latest first message, seconds after the stream's start.
    pub fn first_data_s(&self) -> Option<f64> {
        self.receivers
            .iter()
            .map(|r| r.first_data_s)
            .try_fold(0.0, |m, f| f.map(|f| f64::max(m, f)))
    }

    /// Retransmitted datagrams per original one.
    pub fn retransmission(&self) -> Option<f64> {
        self.retransmitted
            .filter(|(_, o)| *o > 0)
            .map(|(r, o)| r as f64 / o as f64)
    }

    /// The targets of `scenario` this run misses, in words (empty: none).
    pub fn missed(&self, scenario: &LiveScenario, rtt: Duration) -> Vec<String> {
        let mut out = Vec::new();
        if !self.ok {
            out.push(format!(
                "the run failed: {}",
                self.error.as_deref().unwrap_or("?")
            ));
            return out;
        }
        for t in scenario.targets_at(self.budget_rtt) {
            self.check(t, rtt, &mut out);
        }
        out
    }

    fn check(&self, t: &Target, rtt: Duration, out: &mut Vec<String>) {
        let pct = |x: f64| format!("{:.3}%", x * 100.0);
        if let Some(m) = t.max_loss {
            if self.loss() > m {
                out.push(format!("loss {} > {}", pct(self.loss()), pct(m)));
            }
        }
        if let Some(m) = t.max_late {
            if self.late() > m {
                out.push(format!("late {} > {}", pct(self.late()), pct(m)));
            }
        }
        if t.p99_within_budget && self.delay_p99_ms() > self.budget_ms as f64 {
            out.push(format!(
                "p99 delay {:.1} ms > budget {} ms",
                self.delay_p99_ms(),
                self.budget_ms
            ));
        }
        if let Some(m) = t.max_retransmission_per_loss {
            match self.retransmission() {
                Some(r) if r > m * self.network_loss => out.push(format!(
                    "retransmission {} > {m} × loss {}",
                    pct(r),
                    pct(self.network_loss)
                )),
                Some(_) => {}
                None => out.push("no retransmission counters".into()),
            }
        }
        if let Some([lo, hi]) = t.tcp_share {
            match self.tcp {
                Some((tcp, own)) if tcp > 0.0 && (lo..=hi).contains(&(own / tcp)) => {}
                Some((tcp, own)) => out.push(format!(
                    "rate {own:.2} Mbit/s is {:.2}× the TCP flow's {tcp:.2}, outside {lo}–{hi}×",
                    own / tcp.max(1e-9)
                )),
                None => out.push("no TCP share measured".into()),
            }
        }
        if let Some(k) = t.first_data_rtt_plus_rto {
            let limit = k * rtt.as_secs_f64() + 1.0;
            match self.first_data_s() {
                Some(f) if f <= limit => {}
                Some(f) => out.push(format!("first data after {f:.3} s > {limit:.3} s")),
                None => out.push("a receiver read nothing".into()),
            }
        }
        if let Some(m) = t.max_loss_after_first {
            if self.loss_after_first() > m {
                out.push(format!(
                    "loss after the first message {} > {}",
                    pct(self.loss_after_first()),
                    pct(m)
                ));
            }
        }
    }
}

/// Everything one live bench invocation measured (`fanout lab report`
/// reads it beside file-suite results).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveResults {
    /// Always `"live"`: tells the two kinds of results files apart.
    pub kind: String,
    /// Suite file.
    pub suite: String,
    /// The command that produced it.
    pub command: String,
    /// Stream rate, bit/s.
    pub rate_bps: u64,
    /// Bytes per message.
    pub message: usize,
    /// Stream seconds.
    pub duration_s: f64,
    /// The tool the targets apply to.
    pub target_tool: Option<String>,
    /// Machine notes.
    pub machine: Machine,
    /// Tools.
    pub tools: Vec<LiveTool>,
    /// Scenarios.
    pub scenarios: Vec<LiveScenario>,
    /// Every run.
    pub runs: Vec<LiveRun>,
    /// One TCP flow on each path that asks for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tcp_references: Vec<TcpReference>,
}

/// One kernel TCP flow, bulk, over a scenario's path from the sender to
/// the first receiver (`tcp_reference`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcpReference {
    /// Scenario name.
    pub scenario: String,
    /// Its goodput, Mbit/s (`None` if it failed).
    pub mbps: Option<f64>,
    /// The loss the emulator drew on the receiver's link toward it.
    pub network_loss: f64,
    /// What stopped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl LiveResults {
    /// Results of `suite` with no runs yet.
    pub fn new(suite: &LiveSuite, command: String, machine: Machine) -> Self {
        LiveResults {
            kind: "live".into(),
            suite: suite.origin.clone(),
            command,
            rate_bps: suite.rate_bps,
            message: suite.message,
            duration_s: suite.duration.as_secs_f64(),
            target_tool: suite.target_tool.clone(),
            machine,
            tools: suite.tools.clone(),
            scenarios: suite.scenarios.clone(),
            runs: Vec::new(),
            tcp_references: Vec::new(),
        }
    }

    /// The scenario named `name`.
    pub fn scenario(&self, name: &str) -> Option<&LiveScenario> {
        self.scenarios.iter().find(|s| s.name == name)
    }

    /// Every missed target of the target tool: (run, what).
    pub fn missed(&self) -> Vec<(&LiveRun, Vec<String>)> {
        let Some(tool) = &self.target_tool else {
            return Vec::new();
        };
        self.runs
            .iter()
            .filter(|r| &r.tool == tool)
            .filter_map(|r| {
                let s = self.scenario(&r.scenario)?;
                let m = r.missed(s, s.rtt());
                (!m.is_empty()).then_some((r, m))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fanout_core::time::Instant;

    #[test]
    fn counts_loss_lateness_and_setup() {
        let start = Instant::ZERO + Duration::from_secs(1);
        let schedule = Schedule {
            clock: fanout_io::Clock::new(),
            start,
            interval: Duration::from_millis(10),
            count: 6,
        };
        let ms = Duration::from_millis;
        let seen = Arrivals {
            // 0 and 1 lost in the setup, 4 lost later, 5 late.
            at: vec![
                None,
                None,
                Some(start + ms(20 + 30)),
                Some(start + ms(30 + 35)),
                None,
                Some(start + ms(50 + 90)),
            ],
            duplicates: 2,
            foreign_bytes: 0,
        };
        let r = LiveReceiver::of("r1", &seen, &schedule, ms(80));
        assert_eq!((r.read, r.lost, r.late, r.lost_after_first), (3, 3, 1, 1));
        assert_eq!(r.duplicates, 2);
        assert!((r.delay_p50_ms - 35.0).abs() < 1e-6);
        assert!((r.delay_max_ms - 90.0).abs() < 1e-6);
        assert!((r.first_data_s.unwrap() - 0.05).abs() < 1e-9);
        let run = LiveRun {
            ok: true,
            budget_rtt: 4,
            budget_ms: 80,
            messages: 6,
            receivers: vec![r],
            network_loss: 0.02,
            retransmitted: Some((1, 6)),
            ..LiveRun::default()
        };
        let scenario: LiveScenario = toml::from_str(
            r#"name = "s"
title = "t"
budgets_rtt = [4]
receivers = 1
sender_rate = "1Gbit"
receiver_rate = "1Gbit"
delay = "5ms"
[[target]]
max_loss = 0.6
max_late = 0.0
p99_within_budget = true
max_retransmission_per_loss = 1.3
first_data_rtt_plus_rto = 3.0
"#,
        )
        .unwrap();
        let missed = run.missed(&scenario, ms(20));
        assert_eq!(missed.len(), 3, "{missed:?}");
        assert!(missed[0].starts_with("late"));
        assert!(missed[1].starts_with("p99"));
        assert!(missed[2].starts_with("retransmission"));
    }
}
