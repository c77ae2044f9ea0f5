//! Benchmark suite files: the tools to compare (with their rate settings,
//! stated in the report) and the scenarios to run them on.
//!
//! ```toml
//! size = "200MiB"          # file size (overridable on the command line)
//! timeout = "300s"         # per run; a run still going is killed and failed
//!
//! [[tool]]
//! name = "uftp"            # as named on the command line and in the report
//! kind = "uftp"            # fanout | uftp | udpcast | media
//! args = ["-R", "95000"]   # extra sender arguments
//! receiver_args = []       # extra receiver arguments
//!                          # ("{psk}" in either: a fresh pre-shared key file per run)
//! rate = "fixed 95 Mbit/s (-R 95000)"   # how its rate is set, for the report
//! scenarios = ["d"]        # run only in these scenarios (default: all)
//!
//! [[tool]]                 # the overlay race (kinds overlay, tcp_unicast, bittorrent)
//! name = "overlay"
//! kind = "overlay"         # fanout overlay source / node, a tree planned from the links
//! max_children = 1         # children per host in the tree (default: the best of 1-4)
//! bound_target = 0.1       # every receiver within 1.1× file bits / its link rate
//! predicted_target = 0.1   # … and at least 0.9× its predicted rate on the tree
//! finish_within = { bittorrent = 1.0, "tcp-unicast" = 0.5 }   # all done by then
//!
//! [[tool]]                 # a live stream instead of a file
//! name = "media-asmp"
//! kind = "media"           # fanout media send / recv
//! args = ["--cc", "asmp"]
//! rate = "ASMP"
//! stream_s = 60.0          # seconds of stream (default 60)
//! input_rate = "200Mbit"   # the stream's rate into the sender (default 200 Mbit/s)
//! share_target = [0.5, 2.0]     # its rate over the competing flow's, in
//!                               # scenarios with one (else the bench fails)
//! closer_than = ["uftp-tfmcc"]  # … and nearer 1× than these tools'
//!
//! [[scenario]]
//! name = "b"
//! title = "each receiver behind its own 100 Mbit/s link"
//! receivers = 4
//! sender_rate = "1Gbit"
//! receiver_rate = "100Mbit"
//! delay = "1ms"            # one-way, every link (default 1 ms)
//! receiver_delay = "10ms"  # one-way, the receivers' links (default: delay)
//! loss = 0.01              # Bernoulli loss on every receiver link, both ways
//! loss_burst = 3.0         # … in bursts of 3 packets on average (Gilbert–Elliott)
//! reorder = { p = 0.01, extra = "2ms" }   # 1% of packets 2 ms late, receiver links, both ways
//! slow = { receivers = 1, rate = "20Mbit" }   # the first receivers' links
//! # … or each receiver's link in groups, in order (r1.. first), instead of
//! # receiver_rate and slow; delay and loss default to the scenario's:
//! hosts = [{ count = 4, rate = "100Mbit" }, { count = 1, rate = "20Mbit", delay = "40ms" },
//!          { count = 1, rate = "50Mbit", loss = 0.02 }]
//! competing_tcp = { bottleneck_rate = "100Mbit", delay = "10ms", cc = "cubic" }
//! queue_packets = 100      # DropTail length of every link (default 100)
//! timeout = "900s"         # this scenario's per-run timeout (default: the suite's)
//! profile = "kernel"       # links by the kernel's bridge + tbf, no emulator (delay 0)
//! ```

use crate::error::LabError;
use crate::topo::{check_name, Profile};
use fanout_sim::units::{parse_bytes, parse_duration, parse_rate_bps};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Largest file a suite may ask for (each receiver writes a copy).
pub const MAX_SIZE: u64 = 8 << 30;
/// Most receivers per scenario (each a namespace and a file copy).
pub const MAX_RECEIVERS: usize = 64;
/// Longest tool or scenario name.
const MAX_NAME: usize = 24;
/// Default per-run timeout.
pub const DEFAULT_RUN_TIMEOUT: Duration = Duration::from_secs(300);
/// Default file size.
pub const DEFAULT_SIZE: u64 = 200 << 20;

/// Which program a tool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// `fanout send` / `fanout recv` (this project).
    Fanout,
    /// `uftp` / `uftpd` (Debian package uftp).
    Uftp,
    /// `udp-sender` / `udp-receiver` (Debian package udpcast).
    Udpcast,
    /// `fanout media send` / `fanout media recv`: a live MPEG-TS stream
    /// over RTP instead of a file ([`super::media`]).
    Media,
    /// `fanout overlay source` / `fanout overlay node` (ROMA): a tree of
    /// TCP hops planned from the scenario's link rates
    /// ([`super::overlay_tree`]).
    Overlay,
    /// One kernel TCP download per receiver from the sender, all at once
    /// (`python3 -m http.server` and `curl`).
    TcpUnicast,
    /// BitTorrent: `opentracker` and a seeding `aria2c` on the sender,
    /// `aria2c` on every receiver (torrent made with `mktorrent`).
    Bittorrent,
}

impl ToolKind {
    /// Whether its sender serves until the bench stops it (once every
    /// receiver is done) rather than exiting by itself.
    pub fn sender_serves(self) -> bool {
        matches!(self, ToolKind::TcpUnicast | ToolKind::Bittorrent)
    }
}

/// One tool of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// Name on the command line and in the report (`uftp-tfmcc`).
    pub name: String,
    /// The program.
    pub kind: ToolKind,
    /// Extra sender arguments (rate settings and the like).
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra receiver arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub receiver_args: Vec<String>,
    /// How its sending rate is set, in words, for the report.
    pub rate: String,
    /// Scenarios it runs in (empty: all), e.g. a variant meant for one
    /// network only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scenarios: Vec<String>,
    /// The least rate it must reach in a scenario with a reference flow
    /// (`tcp_reference`), as a fraction of that flow's: the bench exits
    /// non-zero below it (`None`: no target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_target: Option<f64>,
    /// The most bytes its runs may put on the sender's link per file byte
    /// in a scenario with a reference flow: the bench exits non-zero above
    /// it (`None`: no target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_target: Option<f64>,
    /// Tools it must finish before, in each scenario with a reference
    /// flow: each of its runs must take less wall time than the mean of the
    /// named tool's successful runs in the same scenario of the same
    /// invocation (where that tool did not run or never finished, nothing
    /// is compared).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faster_than: Vec<String>,
    /// Media tools: seconds of stream the bench writes into the sender
    /// (default [`super::media::DEFAULT_STREAM_S`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_s: Option<f64>,
    /// Media tools: the rate the stream is written at (default
    /// [`super::media::DEFAULT_INPUT_BPS`]); above what the network
    /// allows, so that the rate control, not the source, sets the rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_rate: Option<String>,
    /// In scenarios with a competing TCP flow: the least and the most of
    /// its rate over the flow's while it ran; the bench exits non-zero
    /// outside (`None`: no target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_target: Option<[f64; 2]>,
    /// In scenarios with a competing TCP flow: tools whose rate over the
    /// flow's it must be nearer 1× than (by |ln ratio|, so 2× and 0.5× are
    /// equally far), each of its runs against the named tool's runs in the
    /// same scenario of the same invocation (their geometric mean; not
    /// compared where that tool never finished).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closer_than: Vec<String>,
    /// Overlay tools: children per host at most in the planned tree
    /// (`None`: the best bound of 1 to
    /// [`super::overlay_tree::MAX_CHILDREN_TRIED`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_children: Option<usize>,
    /// Every receiver must be done within this fraction above its physical
    /// bound (file bits over the lesser of its link's and the sender's
    /// link's rate; 0.1: within 1.1× the bound), in every scenario it runs
    /// in: the bench exits non-zero otherwise (`None`: no target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_target: Option<f64>,
    /// Overlay tools: every receiver's rate (file bits over its time) must
    /// be at least this fraction below its predicted rate on the planned
    /// tree (0.1: at least 0.9× the prediction), else non-zero exit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_target: Option<f64>,
    /// Tools whose time until every receiver is done it must match: each
    /// of its runs at most the factor times the mean of the named tool's
    /// successful runs in the same scenario of the same invocation (not
    /// compared where that tool did not finish), in every scenario it
    /// runs in; `{ bittorrent = 1.0, "tcp-unicast" = 0.5 }`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub finish_within: BTreeMap<String, f64>,
}

/// Stands, in a tool's arguments, for a pre-shared key file the lab writes
/// afresh for each run (`fanout --psk-file {psk}`).
pub const PSK_PLACEHOLDER: &str = "{psk}";

impl ToolSpec {
    /// A tool with no arguments, targets or scenario list.
    pub fn new(name: &str, kind: ToolKind, rate: &str) -> ToolSpec {
        ToolSpec {
            name: name.to_owned(),
            kind,
            args: Vec::new(),
            receiver_args: Vec::new(),
            rate: rate.to_owned(),
            scenarios: Vec::new(),
            reference_target: None,
            wire_target: None,
            faster_than: Vec::new(),
            stream_s: None,
            input_rate: None,
            share_target: None,
            closer_than: Vec::new(),
            max_children: None,
            bound_target: None,
            predicted_target: None,
            finish_within: BTreeMap::new(),
        }
    }

    /// Seconds of stream a media tool's runs write.
    pub fn stream_duration(&self) -> Duration {
        self.stream_s
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .unwrap_or(Duration::from_secs_f64(super::media::DEFAULT_STREAM_S))
    }

    /// The rate a media tool's stream is written at, bit/s.
    pub fn input_bps(&self) -> u64 {
        self.input_rate
            .as_deref()
            .and_then(|r| parse_rate_bps(r).ok())
            .unwrap_or(super::media::DEFAULT_INPUT_BPS)
    }

    /// Checks the media keys: given only for media tools, in range.
    fn validate_media(&self) -> Result<(), String> {
        let at = format!("tool {:?}", self.name);
        if self.kind != ToolKind::Media && (self.stream_s.is_some() || self.input_rate.is_some()) {
            return Err(format!(
                "{at}: stream_s and input_rate are for kind = \"media\""
            ));
        }
        if let Some(s) = self.stream_s {
            if !(1.0..=3600.0).contains(&s) {
                return Err(format!("{at}: stream_s: want 1 to 3600 seconds"));
            }
        }
        if let Some(r) = &self.input_rate {
            let bps = parse_rate_bps(r).map_err(|e| format!("{at}: input_rate: {e}"))?;
            if !(100_000..=super::media::MAX_INPUT_BPS).contains(&bps) {
                return Err(format!("{at}: input_rate: want 100 kbit/s to 1 Gbit/s"));
            }
        }
        if let Some([lo, hi]) = self.share_target {
            if !(lo > 0.0 && lo <= hi && hi.is_finite()) {
                return Err(format!(
                    "{at}: share_target: want [least, most], 0 < least <= most"
                ));
            }
        }
        Ok(())
    }

    /// Checks the race keys: `max_children` for overlay tools only, at
    /// least 1; fractions in [0, 1); factors positive.
    fn validate_race(&self) -> Result<(), String> {
        let at = format!("tool {:?}", self.name);
        if self.kind != ToolKind::Overlay
            && (self.max_children.is_some() || self.predicted_target.is_some())
        {
            return Err(format!(
                "{at}: max_children and predicted_target are for kind = \"overlay\""
            ));
        }
        if self.max_children == Some(0) {
            return Err(format!("{at}: max_children: want at least 1"));
        }
        for (key, v) in [
            ("bound_target", self.bound_target),
            ("predicted_target", self.predicted_target),
        ] {
            if v.is_some_and(|v| !(0.0..1.0).contains(&v)) {
                return Err(format!("{at}: {key}: want a fraction in [0, 1)"));
            }
        }
        if let Some((o, f)) = self
            .finish_within
            .iter()
            .find(|(_, f)| !(f.is_finite() && **f > 0.0))
        {
            return Err(format!(
                "{at}: finish_within.{o}: want a positive factor, not {f}"
            ));
        }
        Ok(())
    }

    /// Whether its arguments name a pre-shared key ([`PSK_PLACEHOLDER`]).
    pub fn uses_psk(&self) -> bool {
        self.args
            .iter()
            .chain(&self.receiver_args)
            .any(|a| a.contains(PSK_PLACEHOLDER))
    }

    /// Whether this tool runs in scenario `name`.
    pub fn runs_in(&self, name: &str) -> bool {
        self.scenarios.is_empty() || self.scenarios.iter().any(|s| s == name)
    }
}

/// A slower group of receivers in a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slow {
    /// How many (the first ones: r1, r2, …).
    pub receivers: usize,
    /// Their links' rate.
    pub rate: String,
}

/// Reordering on the receivers' links: `p` of the packets arrive `extra`
/// late (the emulator's `reorder` link key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reorder {
    /// Probability in [0, 1] that a packet is held back.
    pub p: f64,
    /// How much later it arrives: `"2ms"`.
    pub extra: String,
}

/// A group of receivers whose links are alike (`hosts = [...]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostGroup {
    /// How many receivers (the next ones in order: r1, r2, …).
    pub count: usize,
    /// Their links' rate, both directions.
    pub rate: String,
    /// Their links' one-way delay (default: the scenario's
    /// `receiver_delay`, else `delay`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<String>,
    /// Their links' loss probability, both directions (default: the
    /// scenario's `loss`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
}

/// A kernel TCP flow sharing a bottleneck with the transfer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Competing {
    /// Rate of the shared link between the two switches.
    pub bottleneck_rate: String,
    /// One-way delay of the shared link.
    #[serde(default = "default_bottleneck_delay")]
    pub delay: String,
    /// TCP congestion control of the flow's hosts.
    #[serde(default = "default_cc")]
    pub cc: String,
    /// Seconds the TCP flow runs alone before the transfer starts.
    #[serde(default = "default_warmup")]
    pub warmup_s: f64,
}

fn default_bottleneck_delay() -> String {
    "10ms".into()
}
fn default_cc() -> String {
    "cubic".into()
}
fn default_warmup() -> f64 {
    2.0
}
fn default_delay() -> String {
    "1ms".into()
}

/// One network setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioSpec {
    /// Short name (`a`, `b`, …) used by `--only`.
    pub name: String,
    /// One line for the report.
    pub title: String,
    /// Number of receivers.
    pub receivers: usize,
    /// Rate of the sender's link to its switch.
    pub sender_rate: String,
    /// Rate of each receiver's link to its switch (required unless `hosts`
    /// gives every receiver's).
    #[serde(default)]
    pub receiver_rate: String,
    /// One-way delay of every link.
    #[serde(default = "default_delay")]
    pub delay: String,
    /// One-way delay of the receivers' links (default: `delay`).
    #[serde(default)]
    pub receiver_delay: Option<String>,
    /// Loss probability on every receiver link (both directions):
    /// independent (Bernoulli) draws, or bursts with `loss_burst`.
    #[serde(default)]
    pub loss: f64,
    /// Mean length of a loss burst, in packets: with it, `loss` comes from
    /// a Gilbert–Elliott chain (lose every packet in the bad state, leave
    /// it with probability 1 / `loss_burst` per packet) whose long-run loss
    /// rate is `loss`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_burst: Option<f64>,
    /// Reordering on every receiver link (both directions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reorder: Option<Reorder>,
    /// Slower receivers.
    #[serde(default)]
    pub slow: Option<Slow>,
    /// Each receiver's link, in groups in receiver order (instead of
    /// `receiver_rate` and `slow`); their counts add up to `receivers`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostGroup>,
    /// A competing TCP flow over a shared bottleneck (a dumbbell topology).
    #[serde(default)]
    pub competing_tcp: Option<Competing>,
    /// DropTail queue length of every link, in packets (default: the
    /// simulator's 100).
    #[serde(default)]
    pub queue_packets: Option<u32>,
    /// Per-run timeout of this scenario (default: the suite's), e.g. for a
    /// lossy path where TCP-friendly tools need minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Receive steering in this scenario's lab ([`crate::Steering`]).
    /// Off by default here: the emulator then runs every host's packet
    /// input itself, so each tool's CPU time is its own. Steered, that
    /// input runs in softirq context on the other CPUs and is charged to
    /// whichever process is running there, the sender's included.
    #[serde(default)]
    pub receive_steering: bool,
    /// After the tools, run one kernel CUBIC flow from the sender to the
    /// first receiver over the same topology ([`super::reference`]): what
    /// one TCP-friendly flow gets on that path.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tcp_reference: bool,
    /// How long that flow runs, seconds (default
    /// [`super::reference::FILE_SUITE_REFERENCE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_reference_s: Option<f64>,
    /// What carries the links: the user-space emulator (default), or the
    /// kernel's bridge, tbf and nftables (`"kernel"`: zero delay and
    /// Bernoulli loss only, one switch; no emulator thread to share the
    /// machine's CPUs with the tools).
    #[serde(default, skip_serializing_if = "is_emulator")]
    pub profile: Profile,
}

fn is_emulator(p: &Profile) -> bool {
    *p == Profile::Emulator
}

impl ScenarioSpec {
    /// How long its reference flow runs.
    pub fn reference_duration(&self) -> std::time::Duration {
        self.tcp_reference_s
            .and_then(|s| std::time::Duration::try_from_secs_f64(s).ok())
            .filter(|d| !d.is_zero())
            .unwrap_or(super::reference::FILE_SUITE_REFERENCE)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteFile {
    #[serde(default)]
    size: Option<String>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default, rename = "tool")]
    tools: Vec<ToolSpec>,
    #[serde(default, rename = "scenario")]
    scenarios: Vec<ScenarioSpec>,
}

/// A validated suite.
#[derive(Debug, Clone, PartialEq)]
pub struct Suite {
    /// Where it came from.
    pub origin: String,
    /// File size in bytes.
    pub size: u64,
    /// Per-run timeout.
    pub timeout: Duration,
    /// Tools, in file order.
    pub tools: Vec<ToolSpec>,
    /// Scenarios, in file order.
    pub scenarios: Vec<ScenarioSpec>,
}

impl Suite {
    /// The per-run timeout of `scenario`: its own, else the suite's.
    pub fn timeout_for(&self, scenario: &ScenarioSpec) -> Duration {
        scenario
            .timeout
            .as_deref()
            .and_then(|t| parse_duration(t).ok())
            .unwrap_or(self.timeout)
    }

    /// Reads and validates a suite file.
    pub fn load(path: &std::path::Path) -> Result<Self, LabError> {
        Self::parse(&LabError::read_text(path)?, &path.display().to_string())
    }

    /// Parses and validates suite text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, LabError> {
        let err = LabError::in_file(origin);
        let file: SuiteFile = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        let size = match &file.size {
            Some(s) => parse_size(s).map_err(err)?,
            None => DEFAULT_SIZE,
        };
        let timeout = match &file.timeout {
            Some(t) => parse_duration(t).map_err(|e| err(format!("timeout: {e}")))?,
            None => DEFAULT_RUN_TIMEOUT,
        };
        let suite = Suite {
            origin: origin.to_owned(),
            size,
            timeout,
            tools: file.tools,
            scenarios: file.scenarios,
        };
        suite.validate().map_err(err)?;
        Ok(suite)
    }

    fn validate(&self) -> Result<(), String> {
        let scenarios: Vec<&str> = self.scenarios.iter().map(|s| s.name.as_str()).collect();
        let tools: Vec<(&str, &[String])> = self
            .tools
            .iter()
            .map(|t| (t.name.as_str(), t.scenarios.as_slice()))
            .collect();
        check_tools(&tools, &scenarios)?;
        for t in &self.tools {
            t.validate_media()?;
            t.validate_race()?;
            if let Some(o) = t.finish_within.keys().find(|o| self.tool(o).is_none()) {
                return Err(format!(
                    "tool {:?}: finish_within names no tool {o:?}",
                    t.name
                ));
            }
            if let Some(o) = t.closer_than.iter().find(|o| self.tool(o).is_none()) {
                return Err(format!(
                    "tool {:?}: closer_than names no tool {o:?}",
                    t.name
                ));
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
            if let Some(t) = &s.timeout {
                parse_duration(t).map_err(|e| format!("{at}: timeout: {e}"))?;
            }
            validate_network(s).map_err(|e| format!("{at}: {e}"))?;
        }
        Ok(())
    }

    /// The tool named `name`.
    pub fn tool(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.iter().find(|t| t.name == name)
    }
}

/// Checks a suite's tools, given as (name, scenarios it runs in), against
/// its scenario names: at least one of each, names valid and unique, every
/// listed scenario defined.
pub(crate) fn check_tools(tools: &[(&str, &[String])], scenarios: &[&str]) -> Result<(), String> {
    if tools.is_empty() || scenarios.is_empty() {
        return Err("a suite needs at least one [[tool]] and one [[scenario]]".into());
    }
    for (i, (name, runs_in)) in tools.iter().enumerate() {
        check_name("tool", name, MAX_NAME)?;
        if tools[..i].iter().any(|(o, _)| o == name) {
            return Err(format!("tool {name:?} is defined twice"));
        }
        if let Some(s) = runs_in.iter().find(|s| !scenarios.contains(&s.as_str())) {
            return Err(format!("tool {name:?}: no scenario {s:?}"));
        }
    }
    Ok(())
}

/// Checks the network of a scenario: loss, slow receivers, the competing
/// flow, and (through the generated topology) rates and delays.
pub fn validate_network(s: &ScenarioSpec) -> Result<(), String> {
    if !(0.0..1.0).contains(&s.loss) {
        return Err(format!("loss {} outside [0, 1)", s.loss));
    }
    if s.loss_burst.is_some_and(|b| !(1.0..=1000.0).contains(&b)) {
        return Err("loss_burst: want 1 to 1000 packets".into());
    }
    if let Some(r) = &s.reorder {
        let extra = fanout_sim::units::parse_duration(&r.extra)
            .map_err(|e| format!("reorder.extra: {e}"))?;
        fanout_sim::ReorderSpec::new(r.p, extra)
            .validate()
            .map_err(|e| format!("reorder: {e}"))?;
    }
    validate_hosts(s)?;
    if let Some(slow) = &s.slow {
        if slow.receivers > s.receivers {
            return Err("more slow receivers than receivers".into());
        }
        parse_rate_bps(&slow.rate).map_err(|e| format!("slow.rate: {e}"))?;
    }
    if let Some(c) = &s.competing_tcp {
        if !(0.0..=60.0).contains(&c.warmup_s) {
            return Err("competing_tcp.warmup_s: want 0 to 60".into());
        }
    }
    // The generated topology validates rates, delays and the rest.
    super::scenario::topology(s)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Checks the `hosts` groups against the rest of the scenario.
fn validate_hosts(s: &ScenarioSpec) -> Result<(), String> {
    if s.hosts.is_empty() {
        if s.receiver_rate.is_empty() {
            return Err("receiver_rate: required unless hosts gives each receiver's".into());
        }
        return Ok(());
    }
    if s.slow.is_some() {
        return Err("hosts and slow: give the slow receivers as a group of hosts instead".into());
    }
    let total: usize = s.hosts.iter().map(|g| g.count).sum();
    if total != s.receivers {
        return Err(format!(
            "hosts: the groups' counts add up to {total}, receivers = {}",
            s.receivers
        ));
    }
    for (i, g) in s.hosts.iter().enumerate() {
        let at = format!("hosts[{i}]");
        if g.count == 0 {
            return Err(format!("{at}: count: want at least 1"));
        }
        parse_rate_bps(&g.rate).map_err(|e| format!("{at}: rate: {e}"))?;
        if let Some(d) = &g.delay {
            parse_duration(d).map_err(|e| format!("{at}: delay: {e}"))?;
        }
        if g.loss.is_some_and(|l| !(0.0..1.0).contains(&l)) {
            return Err(format!("{at}: loss outside [0, 1)"));
        }
    }
    Ok(())
}

/// A file size: `"200MiB"`, `"4MiB"`, `"1GB"`, at least 1 byte and at
/// most [`MAX_SIZE`].
pub fn parse_size(s: &str) -> Result<u64, String> {
    let size = parse_bytes(s).map_err(|e| format!("size: {e}"))?;
    if size == 0 || size > MAX_SIZE {
        return Err(format!("size {s:?}: want 1 byte to {} GiB", MAX_SIZE >> 30));
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_suite_is_valid() {
        let text = include_str!("../../../../benchmarks/suite.toml");
        let s = Suite::parse(text, "benchmarks/suite.toml").unwrap();
        assert_eq!(s.size, 200 << 20);
        let names: Vec<&str> = s.scenarios.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(
            names,
            ["a", "b", "c", "d", "e", "f", "g", "o", "o5", "ol", "ok", "ok4", "r"]
        );
        // The overlay race runs on its own stars only, with its targets.
        let overlay = s.tool("overlay").unwrap();
        assert!(overlay.runs_in("o5") && !overlay.runs_in("b"));
        assert_eq!(overlay.finish_within["tcp-unicast"], 0.5);
        assert_eq!(s.scenarios[8].hosts.len(), 5);
        // (ol) adds a lossy and a distant host; (ok) is (o) on the kernel
        // profile.
        assert_eq!(s.scenarios[9].hosts[4].loss, Some(0.01));
        assert_eq!(s.scenarios[10].profile, Profile::Kernel);
        assert_eq!(s.scenarios[10].hosts, s.scenarios[7].hosts);
        assert!(overlay.runs_in("ok") && overlay.runs_in("ol") && overlay.runs_in("ok4"));
        assert!(s.tool("uftp-tfmcc").is_some() && s.tool("udpcast").is_some());
        assert!(s.scenarios[5].competing_tcp.is_some());
        // (d)'s TCP-friendly runs need minutes; the fair-window variant of
        // fanout runs there only.
        assert!(s.timeout_for(&s.scenarios[3]) > s.timeout);
        let fair = s.tool("fanout-fair").unwrap();
        assert!(fair.runs_in("d") && !fair.runs_in("b"));
        // The lossy paths measure one CUBIC flow, the default has a target
        // against it; the seed's minimum window runs there for comparison.
        let with_reference: Vec<&str> = s
            .scenarios
            .iter()
            .filter(|x| x.tcp_reference)
            .map(|x| x.name.as_str())
            .collect();
        assert_eq!(with_reference, ["d", "g", "r"]);
        // (r) reorders on the receivers' links.
        let r = s.scenarios.last().unwrap();
        assert_eq!(r.reorder.as_ref().map(|x| x.p), Some(0.01));
        assert!(super::super::scenario::topology(r)
            .unwrap()
            .links
            .iter()
            .any(|l| !l.config.reorder.is_none()));
        assert_eq!(s.tool("fanout").unwrap().reference_target, Some(0.9));
        let min = s.tool("fanout-min").unwrap();
        assert!(min.runs_in("g") && min.reference_target.is_none());
        // The media controllers stream on the shared bottleneck (f); the
        // default has its share targets there.
        let media = s.tool("media-asmp").unwrap();
        assert!(media.kind == ToolKind::Media && media.runs_in("f") && !media.runs_in("b"));
        assert_eq!(media.share_target, Some([0.5, 2.0]));
        assert_eq!(media.closer_than, ["uftp-tfmcc"]);
        assert_eq!(media.input_bps(), 200_000_000);
        assert_eq!(media.stream_duration(), Duration::from_secs(120));
    }

    #[test]
    fn errors_name_the_problem() {
        let base = include_str!("../../../../benchmarks/suite.toml");
        let e = |t: &str| Suite::parse(t, "s.toml").unwrap_err().to_string();
        assert!(e(&base.replace("receivers = 16", "receivers = 0")).contains("receivers"));
        assert!(e(&base.replace("\"20Mbit\"", "\"20Mbyte\"")).contains("rate"));
        assert!(e(&base.replace("kind = \"uftp\"", "kind = \"ftp\"")).contains("ftp"));
        assert!(e(&base.replace("size = \"200MiB\"", "size = \"0\"")).contains("size"));
        assert!(e(&base.replace("loss = 0.01", "loss = 1.5")).contains("loss"));
        assert!(e("").contains("at least one"));
        assert!(e(&base.replace("scenarios = [\"d\"]", "scenarios = [\"z\"]")).contains("\"z\""));
        assert!(e(&base.replace("timeout = \"1200s\"", "timeout = \"soon\"")).contains("timeout"));
        assert!(e(&base.replace("stream_s = 120.0", "stream_s = 0.1")).contains("stream_s"));
        assert!(
            e(&base.replace("input_rate = \"200Mbit\"", "input_rate = \"9Gbit\""))
                .contains("input_rate")
        );
        assert!(e(&base.replace("[0.5, 2.0]", "[2.0, 0.5]")).contains("share_target"));
        assert!(
            e(&base.replace("closer_than = [\"uftp-tfmcc\"]", "closer_than = [\"ftp\"]"))
                .contains("\"ftp\"")
        );
        let file_tool_with_stream = base.replace(
            "name = \"udpcast\"\nkind = \"udpcast\"",
            "name = \"udpcast\"\nkind = \"udpcast\"\nstream_s = 5.0",
        );
        assert!(e(&file_tool_with_stream).contains("media"));
    }

    #[test]
    fn host_groups_are_checked_against_the_scenario() {
        let suite = |scenario: &str| {
            format!(
                "[[tool]]\nname = \"t\"\nkind = \"fanout\"\nrate = \"r\"\n\
                 [[scenario]]\nname = \"h\"\ntitle = \"t\"\nsender_rate = \"100Mbit\"\n{scenario}"
            )
        };
        let ok = suite(
            "receivers = 3\nhosts = [{ count = 2, rate = \"100Mbit\" }, \
             { count = 1, rate = \"10Mbit\", delay = \"20ms\", loss = 0.01 }]",
        );
        let s = Suite::parse(&ok, "s.toml").unwrap();
        assert_eq!(s.scenarios[0].hosts[1].delay.as_deref(), Some("20ms"));
        let e = |t: &str| Suite::parse(&suite(t), "s.toml").unwrap_err().to_string();
        assert!(
            e("receivers = 3\nhosts = [{ count = 2, rate = \"100Mbit\" }]")
                .contains("add up to 2, receivers = 3")
        );
        assert!(
            e("receivers = 1\nhosts = [{ count = 1, rate = \"fast\" }]").contains("hosts[0]: rate")
        );
        assert!(
            e("receivers = 1\nhosts = [{ count = 1, rate = \"1Mbit\", loss = 2.0 }]")
                .contains("hosts[0]: loss")
        );
        assert!(
            e("receivers = 1\nhosts = [{ count = 1, rate = \"1Mbit\", delay = \"x\" }]")
                .contains("hosts[0]: delay")
        );
        assert!(e("receivers = 1").contains("receiver_rate: required"));
        assert!(e(
            "receivers = 1\nslow = { receivers = 1, rate = \"1Mbit\" }\n\
                   hosts = [{ count = 1, rate = \"1Mbit\" }]"
        )
        .contains("hosts and slow"));
    }
}
