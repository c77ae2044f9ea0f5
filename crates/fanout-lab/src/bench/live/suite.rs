//! Live suite files: a constant-rate stream raced through fanout's real-time
//! mode and through SRT on the same emulated paths, at latency budgets
//! given in round trips.
//!
//! ```toml
//! kind = "live"            # marks a live suite (`fanout lab bench` reads both kinds)
//! rate = "2Mbit"           # the stream's rate
//! message = 1316           # bytes per message (7 MPEG-TS packets; SRT's live payload)
//! duration = "20s"         # how long the stream runs
//! target_tool = "fanout"   # the tool the targets apply to
//!
//! [[tool]]
//! name = "srt"
//! kind = "srt"             # fanout | srt
//! args = []                # extra sender arguments (srt: URI options, e.g. "maxbw=-1")
//! receiver_args = []
//! about = "srt-live-transmit, live mode, one connection per receiver"
//! srt_latency = "budget"   # or "end-to-end": latency = budget − one-way delay
//! scenarios = ["random-2"] # run only in these (default: all)
//!
//! [[scenario]]
//! name = "random-2"
//! title = "2% random loss"
//! budgets_rtt = [2, 4, 6]  # latency budgets, in round trips of the path
//! start = "connected"      # or "with-sender": the stream starts with the sender (setup under loss)
//! rate = "500kbit"         # this scenario's stream rate (default: the suite's)
//! # the network, as in a file suite: receivers, sender_rate, receiver_rate,
//! # delay, receiver_delay, loss, loss_burst, competing_tcp, queue_packets
//! receivers = 1
//! sender_rate = "100Mbit"
//! receiver_rate = "10Mbit"
//! delay = "5ms"
//! loss = 0.02
//! [[scenario.target]]
//! budget_rtt = 4           # at this budget only (default: every budget)
//! max_loss = 0.001         # application loss: messages never read
//! ```

use crate::bench::suite::{Competing, ScenarioSpec};
use crate::error::LabError;
use crate::topo::check_name;
use fanout_sim::units::{parse_duration, parse_rate_bps};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Longest stream a suite may ask for.
const MAX_DURATION: Duration = Duration::from_secs(600);
/// Most receivers of a live scenario (SRT runs a sender per receiver).
const MAX_RECEIVERS: usize = 16;
/// Longest tool or scenario name.
const MAX_NAME: usize = 24;

/// Which program a live tool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LiveToolKind {
    /// `fanout stream send --latency` / `fanout stream recv --latency`.
    Fanout,
    /// `srt-live-transmit` (Debian package srt-tools), live mode: one
    /// sender process and connection per receiver.
    Srt,
}

/// One tool of a live race.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveTool {
    /// Name on the command line and in the report.
    pub name: String,
    /// The program.
    pub kind: LiveToolKind,
    /// Extra sender arguments (srt: extra URI options `key=value`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra receiver arguments (srt: extra URI options).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub receiver_args: Vec<String>,
    /// What it is and how it is set, for the report.
    pub about: String,
    /// How a budget becomes SRT's `latency` (fanout's `--latency` is the
    /// budget itself, counted from the writing).
    #[serde(default, skip_serializing_if = "SrtLatency::is_budget")]
    pub srt_latency: SrtLatency,
    /// Scenarios it runs in (empty: all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scenarios: Vec<String>,
}

impl LiveTool {
    /// Whether it runs in scenario `name`.
    pub fn runs_in(&self, name: &str) -> bool {
        self.scenarios.is_empty() || self.scenarios.iter().any(|s| s == name)
    }
}

/// How a budget becomes SRT's `latency` option. SRT delivers a packet
/// `latency` after its sending time as mapped at the handshake, which
/// already stands one one-way delay behind: its messages come out about
/// `latency` plus the one-way delay after they were written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SrtLatency {
    /// `latency` = the budget, as SRT users set it (a latency of k RTT).
    #[default]
    Budget,
    /// `latency` = the budget less the path's one-way delay (half the
    /// round trip), so SRT's messages are due when fanout's are.
    EndToEnd,
}

impl SrtLatency {
    fn is_budget(&self) -> bool {
        *self == SrtLatency::Budget
    }

    /// The latency option for a budget of `budget_ms` on a path of
    /// `rtt_ms` round trip, milliseconds.
    pub fn option_ms(self, budget_ms: u64, rtt_ms: u64) -> u64 {
        match self {
            SrtLatency::Budget => budget_ms,
            SrtLatency::EndToEnd => budget_ms.saturating_sub(rtt_ms / 2).max(1),
        }
    }
}

/// When the stream starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StreamStart {
    /// A second after the senders, once they have connected (a running
    /// encoder).
    #[default]
    Connected,
    /// Together with the senders: what the setup costs under loss.
    WithSender,
}

/// A figure the target tool must reach in a scenario.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// Only at this budget (round trips); default every budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_rtt: Option<u32>,
    /// Largest application loss (share of messages never read), every
    /// receiver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_loss: Option<f64>,
    /// Largest share of messages read after their deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_late: Option<f64>,
    /// The 99th percentile of delivery delay within the budget.
    #[serde(default)]
    pub p99_within_budget: bool,
    /// Largest retransmitted datagrams per original datagram, as a multiple
    /// of the network's loss rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retransmission_per_loss: Option<f64>,
    /// The stream's rate over the competing TCP flow's, within these bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_share: Option<[f64; 2]>,
    /// First message read within this many round trips plus one initial
    /// retransmission timeout (1 s, RFC 6298) of the stream's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_data_rtt_plus_rto: Option<f64>,
    /// Largest share of messages lost among those written after the first
    /// one read (loss beyond the setup interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_loss_after_first: Option<f64>,
}

/// One network and its budgets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveScenario {
    /// Short name (`--only`).
    pub name: String,
    /// One line for the report.
    pub title: String,
    /// Latency budgets in round trips of the path; each is a run.
    pub budgets_rtt: Vec<u32>,
    /// When the stream starts.
    #[serde(default)]
    pub start: StreamStart,
    /// The stream's rate here (default: the suite's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    /// Receivers.
    pub receivers: usize,
    /// Rate of the sender's link.
    pub sender_rate: String,
    /// Rate of each receiver's link.
    pub receiver_rate: String,
    /// One-way delay of every link.
    pub delay: String,
    /// One-way delay of the receivers' links (default `delay`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver_delay: Option<String>,
    /// Loss on every receiver link, both directions.
    #[serde(default)]
    pub loss: f64,
    /// Mean loss burst in packets (Gilbert–Elliott); default independent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_burst: Option<f64>,
    /// A competing kernel TCP flow through a shared bottleneck.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub competing_tcp: Option<Competing>,
    /// DropTail queue length of every link, packets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_packets: Option<u32>,
    /// Also measure one kernel TCP flow (CUBIC, bulk) from the sender to the first receiver over the same
    /// path for the stream's duration: the rate a TCP-friendly stream may
    /// take there, measured beside the race (when every tool runs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tcp_reference: bool,
    /// What the target tool must reach.
    #[serde(default, rename = "target", skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<Target>,
}

impl LiveScenario {
    /// The network as a file-suite scenario (one topology generator).
    pub fn network(&self) -> ScenarioSpec {
        ScenarioSpec {
            name: self.name.clone(),
            title: self.title.clone(),
            receivers: self.receivers,
            sender_rate: self.sender_rate.clone(),
            receiver_rate: self.receiver_rate.clone(),
            delay: self.delay.clone(),
            receiver_delay: self.receiver_delay.clone(),
            loss: self.loss,
            loss_burst: self.loss_burst,
            reorder: None,
            slow: None,
            hosts: Vec::new(),
            competing_tcp: self.competing_tcp.clone(),
            queue_packets: self.queue_packets,
            timeout: None,
            receive_steering: false,
            tcp_reference: self.tcp_reference,
            tcp_reference_s: None,
            profile: Default::default(),
        }
    }

    /// The path's round trip without queueing: twice the one-way delays of
    /// the sender's link, the bottleneck (if any) and a receiver's link.
    pub fn rtt(&self) -> Duration {
        let d = |s: &str| parse_duration(s).unwrap_or_default();
        let access = d(&self.delay) + d(self.receiver_delay.as_deref().unwrap_or(&self.delay));
        let shared = self
            .competing_tcp
            .as_ref()
            .map_or(Duration::ZERO, |c| d(&c.delay));
        2 * (access + shared)
    }

    /// The targets that apply at `budget_rtt`.
    pub fn targets_at(&self, budget_rtt: u32) -> impl Iterator<Item = &Target> {
        self.targets
            .iter()
            .filter(move |t| t.budget_rtt.is_none_or(|b| b == budget_rtt))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LiveSuiteFile {
    kind: String,
    rate: String,
    #[serde(default = "default_message")]
    message: usize,
    duration: String,
    #[serde(default)]
    target_tool: Option<String>,
    #[serde(rename = "tool")]
    tools: Vec<LiveTool>,
    #[serde(rename = "scenario")]
    scenarios: Vec<LiveScenario>,
}

fn default_message() -> usize {
    1316
}

/// A validated live suite.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveSuite {
    /// Where it came from.
    pub origin: String,
    /// The stream's rate, bit/s.
    pub rate_bps: u64,
    /// Bytes per message.
    pub message: usize,
    /// How long the stream runs.
    pub duration: Duration,
    /// The tool the targets apply to.
    pub target_tool: Option<String>,
    /// Tools, in file order.
    pub tools: Vec<LiveTool>,
    /// Scenarios, in file order.
    pub scenarios: Vec<LiveScenario>,
}

/// Whether suite text declares a live suite (`kind = "live"`).
pub fn is_live(text: &str) -> bool {
    #[derive(Deserialize)]
    struct Kind {
        kind: Option<String>,
    }
    toml::from_str::<Kind>(text).is_ok_and(|k| k.kind.as_deref() == Some("live"))
}

impl LiveSuite {
    /// Parses and validates suite text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, LabError> {
        let err = LabError::in_file(origin);
        let file: LiveSuiteFile = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        if file.kind != "live" {
            return Err(err(format!("kind {:?}: want \"live\"", file.kind)));
        }
        let rate_bps = parse_rate_bps(&file.rate).map_err(|e| err(format!("rate: {e}")))?;
        let duration = parse_duration(&file.duration).map_err(|e| err(format!("duration: {e}")))?;
        let suite = LiveSuite {
            origin: origin.to_owned(),
            rate_bps,
            message: file.message,
            duration,
            target_tool: file.target_tool,
            tools: file.tools,
            scenarios: file.scenarios,
        };
        suite.validate().map_err(err)?;
        Ok(suite)
    }

    /// Reads and validates a live suite file.
    pub fn load(path: &std::path::Path) -> Result<Self, LabError> {
        Self::parse(&LabError::read_text(path)?, &path.display().to_string())
    }

    /// The stream's rate in `scn`, bit/s: its own or the suite's.
    pub fn rate_in(&self, scn: &LiveScenario) -> u64 {
        scn.rate
            .as_deref()
            .and_then(|r| parse_rate_bps(r).ok())
            .unwrap_or(self.rate_bps)
    }

    /// Time between two messages in `scn`.
    pub fn interval(&self, scn: &LiveScenario) -> Duration {
        Duration::from_secs_f64(self.message as f64 * 8.0 / self.rate_in(scn) as f64)
    }

    /// Messages of the stream in `scn`.
    pub fn messages(&self, scn: &LiveScenario) -> u32 {
        let n = self.duration.as_secs_f64() / self.interval(scn).as_secs_f64();
        n.floor().min(f64::from(u32::MAX)) as u32
    }

    fn validate(&self) -> Result<(), String> {
        if !(20..=1400).contains(&self.message) {
            return Err(format!("message {}: want 20 to 1400 bytes", self.message));
        }
        if !(10_000..=1_000_000_000).contains(&self.rate_bps) {
            return Err("rate: want 10 kbit/s to 1 Gbit/s".into());
        }
        if self.duration.is_zero() || self.duration > MAX_DURATION {
            return Err(format!("duration: want up to {} s", MAX_DURATION.as_secs()));
        }
        let scenarios: Vec<&str> = self.scenarios.iter().map(|s| s.name.as_str()).collect();
        let tools: Vec<(&str, &[String])> = self
            .tools
            .iter()
            .map(|t| (t.name.as_str(), t.scenarios.as_slice()))
            .collect();
        crate::bench::suite::check_tools(&tools, &scenarios)?;
        if let Some(t) = &self.target_tool {
            if !self.tools.iter().any(|o| &o.name == t) {
                return Err(format!("target_tool {t:?} is not a [[tool]]"));
            }
        }
        for (i, s) in self.scenarios.iter().enumerate() {
            check_name("scenario", &s.name, MAX_NAME)?;
            if self.scenarios[..i].iter().any(|o| o.name == s.name) {
                return Err(format!("scenario {:?} is defined twice", s.name));
            }
            let at = format!("scenario {:?}", s.name);
            if s.receivers == 0 || s.receivers > MAX_RECEIVERS {
                return Err(format!("{at}: receivers: want 1 to {MAX_RECEIVERS}"));
            }
            if s.budgets_rtt.is_empty() || s.budgets_rtt.iter().any(|b| !(1..=100).contains(b)) {
                return Err(format!("{at}: budgets_rtt: want 1 to 100 round trips each"));
            }
            if let Some(r) = &s.rate {
                let bps = parse_rate_bps(r).map_err(|e| format!("{at}: rate: {e}"))?;
                if !(10_000..=1_000_000_000).contains(&bps) {
                    return Err(format!("{at}: rate: want 10 kbit/s to 1 Gbit/s"));
                }
            }
            if s.rtt().is_zero() {
                return Err(format!("{at}: the path needs some delay"));
            }
            if let Some(t) = s.targets.iter().find_map(|t| t.budget_rtt) {
                if !s.budgets_rtt.contains(&t) {
                    return Err(format!(
                        "{at}: a target names budget {t}, not in budgets_rtt"
                    ));
                }
            }
            let network = s.network();
            crate::bench::suite::validate_network(&network).map_err(|e| format!("{at}: {e}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_live_suite_is_valid() {
        let text = include_str!("../../../../../benchmarks/live.toml");
        assert!(is_live(text));
        assert!(!is_live(include_str!(
            "../../../../../benchmarks/suite.toml"
        )));
        let s = LiveSuite::parse(text, "benchmarks/live.toml").unwrap();
        assert_eq!(s.rate_bps, 2_000_000);
        assert_eq!(s.message, 1316);
        // 2 Mbit/s of 1316-byte messages: one every 5.264 ms.
        assert_eq!(s.interval(&s.scenarios[0]), Duration::from_micros(5264));
        let slow = s.scenarios.iter().find(|x| x.rate.is_some()).unwrap();
        assert_eq!(s.rate_in(slow), 500_000);
        // 20 s of 1316-byte messages at 0.5 Mbit/s: one every 21.056 ms.
        assert_eq!(s.messages(slow), 949);
        let tools: Vec<&str> = s.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(tools, ["fanout", "srt", "srt-e2e"]);
        assert_eq!(s.tools[2].srt_latency.option_ms(40, 20), 30);
        assert_eq!(s.tools[1].srt_latency.option_ms(40, 20), 40);
        for scn in &s.scenarios {
            assert_eq!(scn.rtt(), Duration::from_millis(20), "{}", scn.name);
        }
        let two = s.scenarios.iter().find(|x| x.name == "random-2").unwrap();
        assert_eq!(two.targets_at(4).count(), 2);
        assert_eq!(two.targets_at(2).count(), 1);
    }

    #[test]
    fn errors_name_the_problem() {
        let base = include_str!("../../../../../benchmarks/live.toml");
        let e = |t: &str| LiveSuite::parse(t, "l.toml").unwrap_err().to_string();
        assert!(e(&base.replace("kind = \"live\"", "kind = \"file\"")).contains("kind"));
        assert!(e(&base.replace("kind = \"srt\"", "kind = \"rist\"")).contains("rist"));
        assert!(
            e(&base.replace("budgets_rtt = [2, 4, 6]", "budgets_rtt = []")).contains("budgets")
        );
        assert!(e(&base.replace("duration = \"20s\"", "duration = \"2h\"")).contains("duration"));
        assert!(e(&base.replace("target_tool = \"fanout\"", "target_tool = \"x\"")).contains("x"));
    }
}
