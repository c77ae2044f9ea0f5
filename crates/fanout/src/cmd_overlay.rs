//! `fanout overlay plan TOPOLOGY.toml`: the overlay tree and each host's
//! predicted rate (ROMA §V's chain model over ROMA §VI-C's widest-path
//! tree), from per-hop round trips and losses or measured rates.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fanout_overlay::{aggregate_path_rate, widest_path_tree, Hop, Tree};
use fanout_sim::units::{Bytes, HumanDuration, Rate};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Arguments of `fanout overlay`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fanout overlay plan scenarios/overlay/chain.toml    # the tree and each host's predicted rate
  fanout overlay source big.iso --listen 0.0.0.0:7000 --psk-file overlay.psk --plan hops.toml
  fanout overlay node --join SOURCE:7000 --name B --psk-file overlay.psk -o /data

With --plan the source sends each node that joins it to the parent the
plan's widest-path tree gives it (see `overlay source --help`).")]
pub struct OverlayArgs {
    #[command(subcommand)]
    command: OverlayCommand,
}

#[derive(Debug, Subcommand)]
enum OverlayCommand {
    /// Serve a file to overlay nodes that join over TCP: each gets the
    /// file's manifest, then an endless RaptorQ fountain of it, as fast as
    /// its connection takes it.
    Source(SourceArgs),
    /// Join an overlay (--join the source or another node), decode and
    /// verify the file, and relay it to nodes that join this one
    /// (--listen).
    Node(NodeArgs),
    /// Plan an overlay tree: the widest-path tree from the source over the
    /// hops a topology file lists, and each host's predicted rate (the
    /// least hop rate above it) beside the older aggregate-path model's
    /// and a direct connection's.
    Plan(PlanArgs),
    /// Measure what one TCP connection gets from candidate parents, as
    /// hop lines for `plan` (--from), or serve such probes (--serve).
    Probe(crate::cmd_overlay_probe::ProbeArgs),
}

/// Arguments of `fanout overlay plan`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fanout overlay plan scenarios/overlay/chain.toml          # ROMA's example: 9.0 vs 22.2 Mbit/s
  fanout overlay plan hops.toml --max-children 4 --json | jq '.hosts[] | {name, predicted_bps}'

A topology file names the source and lists hops (one TCP connection's
path each, data flowing from -> to):

  source = \"A\"
  segment = \"1KiB\"              # TCP segment size (default 1448 B)
  [[hop]]
  from = \"A\"
  to = \"B\"
  rtt = \"10ms\"                  # with loss: the TCP equation's rate
  loss = 0.001
  capacity = \"100Mbit\"          # optional: the path's bottleneck
  duplex = true                 # the same hop the other way too
  [[hop]]
  from = \"B\"
  to = \"C\"
  rate = \"22Mbit\"               # or a measured rate instead
  [[host]]                      # optional, for `overlay source --plan`:
  name = \"B\"                    # where a host listens for children
  addr = \"10.0.0.2:7000\"")]
pub struct PlanArgs {
    /// Topology file (TOML): the source and the hops between hosts.
    pub topology: PathBuf,
    /// Children per host at most (the file's `max_children`, else no
    /// bound): a bound keeps the source's uplink from being a hot spot.
    #[arg(long, value_name = "N")]
    pub max_children: Option<usize>,
    /// Print the plan as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// A topology file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Topology {
    source: String,
    /// TCP segment size for the equation (default 1448 B, Ethernet's MSS
    /// with timestamps).
    segment: Option<Bytes>,
    max_children: Option<usize>,
    #[serde(default, rename = "hop")]
    hops: Vec<HopSpec>,
    /// Where hosts listen, for a source that sends nodes to their planned
    /// parents (`overlay source --plan`).
    #[serde(default, rename = "host")]
    hosts: Vec<HostSpec>,
}

/// A host of a topology file and where it listens for children.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostSpec {
    name: String,
    /// Its `overlay node --listen` address as others reach it.
    addr: Option<std::net::SocketAddr>,
}

/// One hop of a topology file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HopSpec {
    from: String,
    to: String,
    rtt: Option<HumanDuration>,
    #[serde(default)]
    loss: f64,
    capacity: Option<Rate>,
    /// A measured rate (a probe's), used as it is.
    rate: Option<Rate>,
    #[serde(default)]
    duplex: bool,
}

/// One host of a plan.
#[derive(Debug, Serialize)]
struct PlannedHost {
    name: String,
    parent: Option<String>,
    depth: usize,
    /// The hop from the parent, bit/s.
    hop_bps: Option<f64>,
    /// The least hop rate from the source (ROMA eq. 2), bit/s.
    predicted_bps: Option<f64>,
    /// One TCP connection over the tree path (ROMA eq. 3), bit/s, where
    /// every hop on it has a round trip.
    aggregate_path_bps: Option<f64>,
    /// A direct connection from the source, bit/s, where one is listed.
    direct_bps: Option<f64>,
    /// The TCP buffer each end of the hop from the parent needs for the
    /// hop to run at its rate: twice its bandwidth-delay product, bytes,
    /// where the hop's round trip is listed.
    hop_buffer_bytes: Option<u64>,
}

/// A plan: the tree and its hosts, source first, in tree order.
#[derive(Debug, Serialize)]
struct Plan {
    source: String,
    segment_bytes: u64,
    max_children: Option<usize>,
    hosts: Vec<PlannedHost>,
}

/// Runs `fanout overlay`.
pub fn run(args: OverlayArgs) -> Result<()> {
    match args.command {
        OverlayCommand::Source(a) => source_command(a),
        OverlayCommand::Node(a) => node_command(a),
        OverlayCommand::Plan(a) => plan_command(a),
        OverlayCommand::Probe(a) => crate::cmd_overlay_probe::run(a),
    }
}

/// Arguments of `fanout overlay source`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fanout keygen --psk overlay.psk                       # copy it to every host
  fanout overlay source big.iso --listen 0.0.0.0:7000 --psk-file overlay.psk --children 2
  # on two hosts:   fanout overlay node --join SOURCE:7000 --psk-file overlay.psk -o /data --listen 0.0.0.0:7000 --children 2
  # below them:     fanout overlay node --join RELAY:7000 --psk-file overlay.psk -o /data

  # joins that follow the plan: every node joins the source and is sent on
  fanout overlay source big.iso --listen 0.0.0.0:7000 --psk-file overlay.psk --plan hops.toml --children 3
  fanout overlay node --join SOURCE:7000 --name r1 --listen 0.0.0.0:7000 --children 1 --psk-file overlay.psk -o /data
  fanout overlay node --join SOURCE:7000 --name leaf --psk-file overlay.psk -o /data   # moves below r1

With --plan, each [[host]] of the topology file may give where it listens
(addr = \"10.0.0.2:7000\"); a node is known by its --name, else by its
address's IP when no other host has that IP. A node planned under the
source, or under a host without an addr, stays here.

Every symbol and the manifest carry a keyed BLAKE3 tag under the
pre-shared key; the file's BLAKE3 is checked after decoding.")]
pub struct SourceArgs {
    /// The file to serve (read into memory).
    pub file: PathBuf,
    /// Where nodes join (TCP).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: std::net::SocketAddr,
    /// The pre-shared key (`fanout keygen --psk FILE`) that authenticates
    /// the manifest and every symbol.
    #[arg(long, value_name = "FILE", value_parser = crate::security_opts::read_secret)]
    pub psk_file: crate::security_opts::Secret,
    /// Exit once this many children have joined and hung up (a node hangs
    /// up when it and its subtree are done, or when it moved to the parent
    /// the plan gives it); 0: serve until interrupted.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub children: u64,
    /// Follow this topology's widest-path tree (the file `overlay plan`
    /// reads, with `[[host]]` addresses): a node that joins here but is
    /// planned under another host is sent there (it moves once that host
    /// serves it, and stays here until then).
    #[arg(long, value_name = "TOPOLOGY.toml")]
    pub plan: Option<PathBuf>,
    #[command(flatten)]
    pub coding: CodingArgs,
    /// The kernel's TCP congestion control on connections to children
    /// (cubic, bbr, reno, …; default: the system's).
    #[arg(long, value_name = "NAME")]
    pub tcp_cc: Option<String>,
    /// Kernel buffers of each connection to a child, each way, e.g.
    /// `16MiB` (default: the kernel's autotuning); `overlay plan` prints
    /// each hop's need. With CAP_NET_ADMIN the sysctl limits are passed.
    #[arg(long, value_name = "BYTES", value_parser = crate::net_opts::parse_buffer)]
    pub socket_buffer: Option<usize>,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    pub json: bool,
}

/// How the source codes the file.
#[derive(Debug, Args)]
pub struct CodingArgs {
    /// Bytes per symbol (a multiple of 8): larger symbols carry the 44
    /// bytes of each frame's header and tag at less cost.
    #[arg(long, default_value_t = 8192, value_name = "BYTES")]
    pub symbol_size: u16,
    /// Largest RaptorQ block, bytes: fewer, larger blocks waste fewer
    /// symbols at the end; smaller ones decode faster.
    #[arg(long, default_value = "64MiB", value_name = "SIZE", value_parser = parse_size)]
    pub block_size: u64,
    /// Each host's relay buffer, bytes (ROMA's 1 MB).
    #[arg(long, default_value = "1MiB", value_name = "SIZE", value_parser = parse_size)]
    pub buffer: u64,
}

/// The largest buffer the kernel's autotuning gives a TCP socket: the
/// third field of `sysctl` `name` (`net.ipv4.tcp_wmem` or `tcp_rmem`).
fn autotune_max(name: &str) -> Option<usize> {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

fn parse_size(s: &str) -> Result<u64, String> {
    fanout_sim::units::parse_bytes(s).map_err(|e| e.to_string())
}

/// Arguments of `fanout overlay node`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fanout overlay node --join 10.0.0.1:7000 --psk-file overlay.psk -o /data
  fanout overlay node --join 10.0.0.1:7000 --psk-file overlay.psk -o /data \\
      --listen 0.0.0.0:7000 --children 3     # relay to three nodes below
  fanout overlay node --join 10.0.0.1:7000 --psk-file overlay.psk \
      --relay-only --listen 0.0.0.0:7000 --children 3   # relay, keep nothing
  fanout overlay node --join 10.0.0.1:7000 --name r1 --psk-file overlay.psk -o /data \\
      --listen 0.0.0.0:7000 --children 2     # host r1 of the source's --plan

A node relays only symbols whose tag checks; it hangs up on its parent
once it has the file and its own --children have hung up. With
--relay-only it keeps no file and decodes nothing: it holds only its
relay buffer, and reads its parent only while a child waits.

A source that follows a plan (overlay source --plan) may suggest another
parent: the node keeps its parent, connects to the suggested one, and
moves once it serves the same file (keeping every symbol held); one not
reachable yet is tried again every 2 s. --name says which host of the plan
this is (else the source goes by this host's IP).")]
pub struct NodeArgs {
    /// The parent to join: the source or another node (TCP). Repeat it
    /// for parents to fall back on, in order: when one goes away before
    /// the file is complete, the node joins the next, keeping every symbol
    /// it holds.
    #[arg(long, value_name = "HOST:PORT", required = true)]
    pub join: Vec<std::net::SocketAddr>,
    /// This host's name in the source's plan (`overlay source --plan`),
    /// sent when joining: a source that plans it under another host sends
    /// it there, and it moves once that host serves it.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The pre-shared key of the overlay.
    #[arg(long, value_name = "FILE", value_parser = crate::security_opts::read_secret)]
    pub psk_file: crate::security_opts::Secret,
    /// Where the file goes: a directory (the source's name is used) or a
    /// file path.
    #[arg(
        short,
        long,
        value_name = "PATH",
        required_unless_present = "relay_only"
    )]
    pub output: Option<PathBuf>,
    /// Replace an existing file (once the new one is verified).
    #[arg(long)]
    pub overwrite: bool,
    /// Only relay (with --listen): check every symbol's tag and forward
    /// it; keep no file, decode nothing, hold nothing but the relay
    /// buffer.
    #[arg(long, requires = "listen", conflicts_with_all = ["output", "overwrite"])]
    pub relay_only: bool,
    /// Relay to nodes that join here (TCP).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<std::net::SocketAddr>,
    /// With --listen: stay until this many children have joined and hung
    /// up.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub children: u64,
    /// Relay buffer, bytes (ROMA's 1 MB).
    #[arg(long, default_value = "1MiB", value_name = "SIZE", value_parser = parse_size)]
    pub buffer: u64,
    /// The kernel's TCP congestion control on connections to children
    /// (cubic, bbr, reno, …; default: the system's).
    #[arg(long, value_name = "NAME")]
    pub tcp_cc: Option<String>,
    /// Kernel buffers of the connection to the parent and of each to a
    /// child, each way, e.g. `16MiB` (default: the kernel's autotuning);
    /// `overlay plan` prints each hop's need. With CAP_NET_ADMIN the
    /// sysctl limits are passed.
    #[arg(long, value_name = "BYTES", value_parser = crate::net_opts::parse_buffer)]
    pub socket_buffer: Option<usize>,
    /// Give up joining after this many seconds.
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub connect_timeout: f64,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    pub json: bool,
}

/// What a host has said about its connections so far: it says each
/// change once, on stderr.
#[derive(Debug, Default)]
struct Seen {
    joined: u64,
    left: u64,
    refused: u64,
    switches: u64,
    moves: u64,
}

impl Seen {
    fn report(&mut self, who: &str, p: &fanout_io::overlay::OverlayProgress) {
        let connected = p.children_joined - p.children_left - p.children_refused;
        if p.children_joined > self.joined {
            self.joined = p.children_joined;
            eprintln!(
                "{who}: child {} joined ({connected} connected)",
                p.children_joined
            );
        }
        if p.children_left > self.left {
            self.left = p.children_left;
            eprintln!(
                "{who}: {} children done or gone ({connected} connected)",
                p.children_left
            );
        }
        if p.children_refused > self.refused {
            self.refused = p.children_refused;
            eprintln!(
                "{who}: {} children refused (not speaking the overlay's protocol)",
                p.children_refused
            );
        }
        if p.parent_switches > self.switches {
            self.switches = p.parent_switches;
            eprintln!(
                "{who}: the parent went away; joined another ({} switches)",
                p.parent_switches
            );
        }
        if p.moves > self.moves {
            self.moves = p.moves;
            let to = p.parents.last().map(|x| x.addr.to_string());
            eprintln!(
                "{who}: moved to {}, the parent the source's plan gives it",
                to.unwrap_or_default()
            );
        }
    }
}

/// Puts a decoded node's object in place under `output`: its sanitised
/// name and path.
/// Where a node writes the decoded file: `object` named `name` (the
/// source's, sanitised) under `output`, synced, then put in place.
fn write_object(
    name: &str,
    object: &[u8],
    output: &std::path::Path,
    overwrite: bool,
) -> Result<(String, PathBuf)> {
    let name = fanout_app::manifest::sanitize_name(name)
        .map_err(|e| anyhow::anyhow!("the source's file name: {e}"))?;
    let existing = if overwrite {
        fanout_io::Existing::Replace
    } else {
        fanout_io::Existing::Refuse
    };
    let (out, mut file) =
        fanout_io::OutputFile::create(output, &name, object.len() as u64, existing)?;
    let wrote = std::io::Write::write_all(&mut file, object).and_then(|_| file.sync_all());
    drop(file);
    if let Err(e) = wrote {
        out.discard();
        return Err(anyhow::Error::new(e).context(format!("cannot write {}", out.part().display())));
    }
    out.commit()
        .with_context(|| format!("cannot put {} in place", out.path().display()))?;
    Ok((name, out.path().to_path_buf()))
}

/// The decoded file on its way to disk in a thread of its own, so a relay
/// goes on forwarding to its children while the file is written and
/// synced (seconds for a large file; each relay of a chain stalled its
/// subtree that long when it wrote in its event loop).
struct FileWriter {
    handle: Option<std::thread::JoinHandle<Result<(String, PathBuf)>>>,
    result: Option<Result<(String, PathBuf)>>,
}

impl FileWriter {
    fn idle() -> Self {
        FileWriter {
            handle: None,
            result: None,
        }
    }

    /// Writes `node`'s decoded object: a relay (`relays`) a copy of it in
    /// the thread, a leaf (which has nobody to stall) at once, without
    /// the copy.
    fn start(
        &mut self,
        node: &fanout_overlay::OverlayNode,
        output: &std::path::Path,
        overwrite: bool,
        relays: bool,
    ) {
        let name = node.manifest().expect("decoded").name.clone();
        if !relays {
            let object = node.object().expect("decoded");
            self.result = Some(write_object(&name, object, output, overwrite));
            return;
        }
        let object = node.object().expect("decoded").to_vec();
        let output = output.to_owned();
        self.handle = Some(std::thread::spawn(move || {
            write_object(&name, &object, &output, overwrite)
        }));
    }

    /// The outcome once the file is written (waiting for it if `wait`).
    fn poll(&mut self, wait: bool) -> Option<&Result<(String, PathBuf)>> {
        if self
            .handle
            .as_ref()
            .is_some_and(|h| wait || h.is_finished())
        {
            let h = self.handle.take().expect("checked");
            self.result = Some(
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("the file writer panicked"))),
            );
        }
        self.result.as_ref()
    }
}

/// Bytes of journal a node gathers before it writes them.
const JOURNAL_BATCH: usize = 1 << 20;

/// A node's journal: the manifest and the symbols it accepted, kept beside
/// its output until the file is in place, so a restarted node reads only
/// what it lacks.
struct Journal {
    path: PathBuf,
    /// Open for appending once the first bytes came.
    file: std::cell::RefCell<Option<std::fs::File>>,
}

impl Journal {
    /// The journal of a node writing to `output` (a directory, or a file
    /// path whose directory holds it).
    fn at(output: &std::path::Path) -> Self {
        let path = if output.is_dir() {
            output.join(".fanout-overlay.journal")
        } else {
            let name = output
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            output.with_file_name(format!(".{name}.fanout-overlay.journal"))
        };
        Journal {
            path,
            file: std::cell::RefCell::new(None),
        }
    }

    /// Replays the journal an earlier run left, if any: the bytes of it
    /// replayed (0 without one; a journal that does not read is removed).
    fn resume(&self, node: &mut fanout_overlay::OverlayNode) -> u64 {
        let Ok(meta) = self.path.symlink_metadata() else {
            return 0;
        };
        let bytes = match meta
            .file_type()
            .is_file()
            .then(|| std::fs::read(&self.path))
        {
            Some(Ok(b)) => b,
            _ => {
                eprintln!(
                    "overlay node: {} is not a journal; ignoring it",
                    self.path.display()
                );
                return 0;
            }
        };
        match node.resume(&bytes) {
            Ok(()) => {
                eprintln!(
                    "overlay node: resuming with {} bytes of symbols from {}",
                    bytes.len(),
                    self.path.display()
                );
                bytes.len() as u64
            }
            Err(e) => {
                eprintln!(
                    "overlay node: the journal {} does not read ({e}); starting afresh",
                    self.path.display()
                );
                let _ = std::fs::remove_file(&self.path);
                *node = fanout_overlay::OverlayNode::new(node.key().clone(), node.buffer_bytes())
                    .journaling()
                    .with_jobs();
                0
            }
        }
    }

    /// Appends `bytes` (nothing to do when empty). Never follows a link:
    /// the file is checked when first opened, then kept open.
    fn append(&self, bytes: &[u8]) -> std::io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let mut file = self.file.borrow_mut();
        if file.is_none() {
            if self
                .path
                .symlink_metadata()
                .is_ok_and(|m| !m.file_type().is_file())
            {
                return Err(std::io::Error::other("not a regular file"));
            }
            *file = Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)?,
            );
        }
        let f = file.as_mut().expect("opened above");
        std::io::Write::write_all(f, bytes)
    }

    /// Says where the symbols held are kept, for an error.
    fn kept_note(&self, node: &fanout_overlay::OverlayNode) -> String {
        if node.manifest().is_some() && self.path.exists() {
            format!(
                "the symbols held are kept in {}: run the same command again to resume",
                self.path.display()
            )
        } else {
            "nothing was kept".into()
        }
    }

    fn remove(&self) {
        self.file.borrow_mut().take();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What `overlay source` reports at the end.
#[derive(Debug, Serialize)]
struct SourceSummary {
    name: String,
    bytes: u64,
    symbol_size: u16,
    blocks: u16,
    children_joined: u64,
    children_left: u64,
    children_refused: u64,
    bytes_to_children: u64,
    seconds: f64,
    /// Children sent to their planned parent (--plan).
    redirected: u64,
    /// Every child that connected, in order.
    children: Vec<ChildSummary>,
}

/// What a host sent one child.
#[derive(Debug, Serialize)]
struct ChildSummary {
    peer: String,
    bytes: u64,
    /// `bytes` per file byte.
    copies: f64,
    /// Dropped for breaking the hop's protocol.
    refused: bool,
}

/// A parent a node joined.
#[derive(Debug, Serialize)]
struct ParentSummary {
    addr: String,
    /// Bytes read from it.
    bytes: u64,
    /// The source suggested it (a move), rather than --join.
    suggested: bool,
}

/// A node's parents, in the order it joined them.
fn parents_summary(p: &fanout_io::overlay::OverlayProgress) -> Vec<ParentSummary> {
    p.parents
        .iter()
        .map(|x| ParentSummary {
            addr: x.addr.to_string(),
            bytes: x.bytes,
            suggested: x.suggested,
        })
        .collect()
}

/// Per-child figures of a host's run.
fn children_summary(p: &fanout_io::overlay::OverlayProgress, file_bytes: u64) -> Vec<ChildSummary> {
    p.children
        .iter()
        .map(|c| ChildSummary {
            peer: c.peer.to_string(),
            bytes: c.bytes,
            copies: c.bytes as f64 / file_bytes.max(1) as f64,
            refused: c.refused,
        })
        .collect()
}

fn source_command(args: SourceArgs) -> Result<()> {
    use fanout_overlay::fountain::Layout;
    let data = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let name = args
        .file
        .file_name()
        .and_then(|n| n.to_str())
        .context("the file needs a UTF-8 name")?
        .to_owned();
    let layout = Layout::new(
        data.len() as u64,
        args.coding.symbol_size,
        args.coding.block_size,
    )
    .with_context(|| format!("{}", args.file.display()))?;
    let key = fanout_overlay::SymbolKey::derive(&args.psk_file.0);
    let redirects = match &args.plan {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let topology: Topology = toml::from_str(&text)
                .with_context(|| format!("{}: not a topology file", path.display()))?;
            let plan = plan(&topology, None).with_context(|| format!("{}", path.display()))?;
            let (r, notes) = redirects(&topology, &plan);
            for n in notes {
                eprintln!("overlay source: {}: {n}", path.display());
            }
            eprintln!(
                "overlay source: following the plan of {}: {} hosts, {} of them below another host",
                path.display(),
                plan.hosts.len(),
                plan.hosts
                    .iter()
                    .filter(|h| h.parent.as_ref().is_some_and(|p| *p != topology.source))
                    .count()
            );
            r
        }
        None => fanout_overlay::Redirects::new(),
    };
    let object = u64::from_be_bytes(fanout_io::random_seed()[..8].try_into()?);
    let sockets = fanout_io::overlay::ChildSockets {
        tcp_congestion: args.tcp_cc.clone(),
        buffer: args.socket_buffer,
    };
    if let Some(grant) = sockets.check()? {
        crate::net_opts::warn_if_clamped(&grant);
    }
    // The address is taken now, so a bad one fails before the file is
    // hashed; children are let in once the source can serve them.
    let bound = bind_unlistened(args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let file_bytes = data.len() as u64;
    let mut source = fanout_overlay::OverlaySource::new(
        data,
        &name,
        object,
        (layout, args.coding.block_size),
        key,
        args.coding.buffer as usize,
    )
    .with_redirects(redirects);
    bound
        .listen(LISTEN_BACKLOG)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let listener = std::net::TcpListener::from(bound);
    eprintln!(
        "overlay source: {name} ({} bytes, {} blocks of {}-byte symbols) on {}; waiting for {} {}",
        file_bytes,
        layout.blocks(),
        layout.symbol_size(),
        listener.local_addr()?,
        args.children,
        if args.children == 1 {
            "child"
        } else {
            "children"
        }
    );
    crate::interrupt::watch();
    let clock = fanout_io::Clock::new();
    let want = args.children;
    let mut seen = Seen::default();
    let mut bars = crate::overlay_progress::HostBars::new(Some(file_bytes));
    let progress =
        fanout_io::overlay::run_overlay(&mut source, Some((listener, &sockets)), None, |_, p| {
            bars.suspend(|| seen.report("overlay source", p));
            bars.update(None, p);
            crate::interrupt::interrupted()
                || (want > 0 && p.children_left + p.children_refused >= want)
        })?;
    bars.clear();
    let per_child = children_summary(&progress, file_bytes);
    let summary = SourceSummary {
        name,
        bytes: file_bytes,
        symbol_size: layout.symbol_size(),
        blocks: layout.blocks(),
        children_joined: progress.children_joined,
        children_left: progress.children_left,
        children_refused: progress.children_refused,
        bytes_to_children: progress.bytes_to_children,
        seconds: clock.now().as_secs_f64(),
        redirected: source.redirected(),
        children: per_child,
    };
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        eprintln!(
            "overlay source: {} children served ({} refused), {:.2} copies of the file sent in {:.2} s",
            summary.children_left,
            summary.children_refused,
            summary.bytes_to_children as f64 / summary.bytes.max(1) as f64,
            summary.seconds
        );
    }
    Ok(())
}

/// Connections a listening source queues before it accepts them.
const LISTEN_BACKLOG: i32 = 128;

/// A TCP socket bound to `addr` (address reuse as `std`'s listeners have
/// it) that does not listen yet.
fn bind_unlistened(addr: std::net::SocketAddr) -> std::io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    Ok(socket)
}

/// What `overlay node` reports at the end.
#[derive(Debug, Serialize)]
struct NodeSummary {
    name: String,
    path: String,
    bytes: u64,
    /// Seconds from joining until the file was decoded and verified.
    decoded_s: f64,
    /// Bytes of the parent's stream it took (manifest and frames).
    bytes_to_decode: u64,
    /// `bytes_to_decode` per file byte.
    received_per_byte: f64,
    goodput_bps: f64,
    refused_symbols: u64,
    /// Parents joined after the first went away.
    parent_switches: u64,
    /// Moves to the parent the source's plan gives it.
    moves: u64,
    /// Every parent joined, in order.
    parents: Vec<ParentSummary>,
    /// Bytes of symbols an earlier run kept, replayed from its journal.
    resumed_bytes: u64,
    /// Its parent went away after it decoded; its children got its own
    /// symbols after.
    orphaned: bool,
    /// It hung up on its parent once decoded (its children needed nothing
    /// more from above).
    left_parent: bool,
    children_joined: u64,
    children_left: u64,
    bytes_to_children: u64,
    /// Every child that connected, in order.
    children: Vec<ChildSummary>,
}

fn node_command(args: NodeArgs) -> Result<()> {
    let key = fanout_overlay::SymbolKey::derive(&args.psk_file.0);
    let sockets = fanout_io::overlay::ChildSockets {
        tcp_congestion: args.tcp_cc.clone(),
        buffer: args.socket_buffer,
    };
    if let Some(grant) = sockets.check()? {
        crate::net_opts::warn_if_clamped(&grant);
    }
    let listener = args
        .listen
        .map(|a| std::net::TcpListener::bind(a).with_context(|| format!("cannot listen on {a}")))
        .transpose()?;
    if let Some(l) = &listener {
        eprintln!("overlay node: relaying on {}", l.local_addr()?);
    }
    crate::interrupt::watch();
    let clock = fanout_io::Clock::new();
    let parents = fanout_io::overlay::Parents {
        addrs: args.join.clone(),
        timeout: std::time::Duration::from_secs_f64(args.connect_timeout.max(0.1)),
        hello: fanout_overlay::hop::hello(args.name.as_deref().unwrap_or_default()).with_context(
            || {
                format!(
                    "--name: at most {} bytes",
                    fanout_overlay::hop::MAX_HELLO_NAME
                )
            },
        )?,
        own: listener.as_ref().map(|l| l.local_addr()).transpose()?,
        buffer: args.socket_buffer,
    };
    if args.relay_only {
        return relay_command(&args, key, listener, &sockets, &parents);
    }
    let output = args
        .output
        .clone()
        .expect("clap requires -o without --relay-only");
    // Decodes and the final check on worker threads: the loop keeps
    // relaying meanwhile.
    let mut node = fanout_overlay::OverlayNode::new(key, args.buffer as usize)
        .journaling()
        .with_jobs();
    let journal = Journal::at(&output);
    let resumed_bytes = journal.resume(&mut node);
    let mut decoded_at = None;
    let want = args.children;
    let relays = listener.is_some();
    let mut seen = Seen::default();
    let mut journal_error = None;
    let mut writer = FileWriter::idle();
    let mut bars = crate::overlay_progress::HostBars::new(None);
    let run = fanout_io::overlay::run_overlay(
        &mut node,
        listener.map(|l| (l, &sockets)),
        Some(&parents),
        |n, p| {
            bars.suspend(|| seen.report("overlay node", p));
            let own = n
                .manifest()
                .map(|m| (n.upstream_bytes(), m.layout.length()));
            bars.update(own, p);
            // In batches: a write per wake-up cost more than the rest of
            // a node's work; a node killed loses at most a batch.
            if decoded_at.is_none() && n.journal_len() >= JOURNAL_BATCH {
                if let Err(e) = n.drain_journal(|b| journal.append(b)) {
                    journal_error.get_or_insert(e);
                }
            }
            if decoded_at.is_none() && n.object().is_some() {
                decoded_at = Some(clock.now().as_secs_f64());
                // The file goes in place at once; a relay stays for its
                // children after.
                writer.start(n, &output, args.overwrite, relays);
            }
            let written = match writer.poll(false) {
                Some(Ok(_)) => {
                    journal.remove();
                    true
                }
                Some(Err(_)) => return true,
                None => false,
            };
            let children_done = !relays || p.children_left + p.children_refused >= want;
            crate::interrupt::interrupted()
                || (written && children_done)
                || (p.upstream_closed && decoded_at.is_none())
        },
    );
    bars.clear();
    if let Some(e) = journal_error {
        eprintln!(
            "overlay node: warning: cannot keep the journal {}: {e}",
            journal.path.display()
        );
    }
    let progress = match run {
        Ok(p) => p,
        Err(e) => {
            let _ = node.drain_journal(|b| journal.append(b));
            return Err(match node.manifest() {
                Some(_) => {
                    anyhow::anyhow!("{:#}; {}", anyhow::Error::new(e), journal.kept_note(&node))
                }
                None => e.into(),
            });
        }
    };
    let Some(decoded_at) = decoded_at else {
        let _ = node.drain_journal(|b| journal.append(b));
        if crate::interrupt::interrupted() {
            return Err(crate::interrupt::error(&journal.kept_note(&node)));
        }
        bail!(
            "the parent closed its stream before the file was complete ({} bytes read), and no other parent could be joined; {}",
            node.upstream_bytes(),
            journal.kept_note(&node)
        );
    };
    let (name, path) = match writer.poll(true).expect("started once decoded") {
        Ok(w) => {
            journal.remove();
            w.clone()
        }
        Err(e) => bail!("{e:#}"),
    };
    let object = node.object().expect("decoded");
    let bytes_to_decode = node.bytes_to_decode().unwrap_or(node.upstream_bytes());
    let summary = NodeSummary {
        name,
        path: path.display().to_string(),
        bytes: object.len() as u64,
        decoded_s: decoded_at,
        bytes_to_decode,
        received_per_byte: bytes_to_decode as f64 / object.len().max(1) as f64,
        goodput_bps: object.len() as f64 * 8.0 / decoded_at.max(1e-9),
        refused_symbols: node.counts().refused,
        parent_switches: progress.parent_switches,
        moves: progress.moves,
        parents: parents_summary(&progress),
        resumed_bytes,
        orphaned: progress.orphaned,
        left_parent: progress.left_parent,
        children_joined: progress.children_joined,
        children_left: progress.children_left,
        bytes_to_children: progress.bytes_to_children,
        children: children_summary(&progress, object.len() as u64),
    };
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        eprintln!(
            "overlay node: {} ({} bytes) decoded and verified in {:.2} s ({:.1} Mbit/s), {:.4} bytes read per byte, {} forged or corrupted symbols refused",
            summary.path,
            summary.bytes,
            summary.decoded_s,
            summary.goodput_bps / 1e6,
            summary.received_per_byte,
            summary.refused_symbols
        );
    }
    Ok(())
}

/// What `overlay node --relay-only` reports at the end.
#[derive(Debug, Serialize)]
struct RelaySummary {
    /// Bytes read from parents.
    bytes_from_parent: u64,
    bytes_to_children: u64,
    refused_symbols: u64,
    parent_switches: u64,
    /// Moves to the parent the source's plan gives it.
    moves: u64,
    /// Every parent joined, in order.
    parents: Vec<ParentSummary>,
    children_joined: u64,
    children_left: u64,
    /// Seconds it ran.
    elapsed_s: f64,
    /// Every child that connected, in order.
    children: Vec<ChildSummary>,
}

/// `overlay node --relay-only`: relays until its --children have hung up
/// (or Ctrl-C, or no parent is left).
fn relay_command(
    args: &NodeArgs,
    key: fanout_overlay::SymbolKey,
    listener: Option<std::net::TcpListener>,
    sockets: &fanout_io::overlay::ChildSockets,
    parents: &fanout_io::overlay::Parents,
) -> Result<()> {
    let clock = fanout_io::Clock::new();
    let mut node = fanout_overlay::OverlayNode::relay_only(key, args.buffer as usize);
    let listener = listener.expect("clap requires --listen with --relay-only");
    let want = args.children;
    let mut seen = Seen::default();
    let mut bars = crate::overlay_progress::HostBars::new(None);
    let progress = fanout_io::overlay::run_overlay(
        &mut node,
        Some((listener, sockets)),
        Some(parents),
        |n, p| {
            bars.suspend(|| seen.report("overlay relay", p));
            let own = n
                .manifest()
                .map(|m| (n.upstream_bytes(), m.layout.length()));
            bars.update(own, p);
            crate::interrupt::interrupted()
                || (want > 0 && p.children_left + p.children_refused >= want)
                || p.upstream_closed
        },
    )?;
    bars.clear();
    let file_bytes = node.manifest().map_or(0, |m| m.layout.length());
    let summary = RelaySummary {
        bytes_from_parent: node.upstream_bytes(),
        bytes_to_children: progress.bytes_to_children,
        refused_symbols: node.counts().refused,
        parent_switches: progress.parent_switches,
        moves: progress.moves,
        parents: parents_summary(&progress),
        children_joined: progress.children_joined,
        children_left: progress.children_left,
        elapsed_s: clock.now().as_secs_f64(),
        children: children_summary(&progress, file_bytes),
    };
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        eprintln!(
            "overlay relay: read {} bytes, wrote {} to {} children in {:.2} s, {} forged or corrupted symbols refused",
            summary.bytes_from_parent,
            summary.bytes_to_children,
            summary.children_joined,
            summary.elapsed_s,
            summary.refused_symbols
        );
    }
    if progress.upstream_closed && !(want > 0 && progress.children_left >= want) {
        bail!("the parent closed its stream and no other parent could be joined");
    }
    Ok(())
}

fn plan_command(args: PlanArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.topology)
        .with_context(|| format!("cannot read {}", args.topology.display()))?;
    let topology: Topology = toml::from_str(&text)
        .with_context(|| format!("{}: not a topology file", args.topology.display()))?;
    let plan = plan(&topology, args.max_children)
        .with_context(|| format!("{}", args.topology.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print!("{}", render(&plan));
    }
    Ok(())
}

/// The hops of a topology by (from, to) host index, as the model sees them.
fn hop_table(t: &Topology, index: &BTreeMap<&str, usize>) -> Result<BTreeMap<(usize, usize), Hop>> {
    let mut table = BTreeMap::new();
    for (i, h) in t.hops.iter().enumerate() {
        let what = format!("hop {} ({} -> {})", i + 1, h.from, h.to);
        if h.from == h.to {
            bail!("{what}: a hop joins two hosts");
        }
        if !(0.0..1.0).contains(&h.loss) {
            bail!("{what}: loss {} is not in [0, 1)", h.loss);
        }
        let rtt = h.rtt.map(|d| d.0.as_secs_f64());
        if h.loss > 0.0 && rtt.is_none_or(|r| r <= 0.0) {
            bail!("{what}: a lossy hop needs its round trip (rtt = \"20ms\")");
        }
        let capacity = h
            .rate
            .or(h.capacity)
            .map_or(f64::INFINITY, |r| r.0 as f64 / 8.0);
        let hop = Hop {
            // A measured rate stands for the hop; the models' round trip
            // is only for hops they compute (eq. 3 skips paths without).
            rtt: if h.rate.is_some() {
                0.0
            } else {
                rtt.unwrap_or(0.0)
            },
            loss: if h.rate.is_some() { 0.0 } else { h.loss },
            capacity,
        };
        if !hop.rate(1.0).is_finite() {
            bail!("{what}: without loss the equation bounds nothing: give its capacity or a measured rate");
        }
        let (a, b) = (index[h.from.as_str()], index[h.to.as_str()]);
        for key in std::iter::once((a, b)).chain(h.duplex.then_some((b, a))) {
            if table.insert(key, hop).is_some() {
                bail!("{what}: listed twice");
            }
        }
    }
    Ok(table)
}

/// The plan of a topology.
fn plan(t: &Topology, max_children: Option<usize>) -> Result<Plan> {
    let mut names: Vec<&str> = vec![t.source.as_str()];
    for h in &t.hops {
        for n in [h.from.as_str(), h.to.as_str()] {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    if t.hops.is_empty() {
        bail!(
            "no hops: list [[hop]] entries from the source {:?}",
            t.source
        );
    }
    let index: BTreeMap<&str, usize> = names.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    for (i, h) in t.hosts.iter().enumerate() {
        if !index.contains_key(h.name.as_str()) {
            bail!("host {} ({}): in no hop", i + 1, h.name);
        }
        if t.hosts[..i].iter().any(|o| o.name == h.name) {
            bail!("host {} ({}): listed twice", i + 1, h.name);
        }
    }
    let segment = t.segment.map_or(1448, |b| b.0);
    if segment == 0 {
        bail!("segment must be at least 1 byte");
    }
    let s = segment as f64;
    let hops = hop_table(t, &index)?;
    let max_children = max_children.or(t.max_children);
    if max_children == Some(0) {
        bail!("max_children must be at least 1");
    }
    let rate = |a: usize, b: usize| hops.get(&(a, b)).map_or(0.0, |h| h.rate(s));
    // Round trips as listed (a measured rate's too, which the models leave
    // out), for the hops' buffers.
    let mut rtts = BTreeMap::new();
    for h in &t.hops {
        let (a, b) = (index[h.from.as_str()], index[h.to.as_str()]);
        if let Some(rtt) = h.rtt {
            rtts.insert((a, b), rtt.0.as_secs_f64());
            if h.duplex {
                rtts.insert((b, a), rtt.0.as_secs_f64());
            }
        }
    }
    let tree = widest_path_tree(names.len(), 0, rate, max_children);
    let unreached = tree.unreached();
    if !unreached.is_empty() {
        let list: Vec<&str> = unreached.iter().map(|&h| names[h]).collect();
        bail!(
            "no path from the source {:?} reaches {} (hops carry data from -> to; `duplex = true` adds the way back)",
            t.source,
            list.join(", ")
        );
    }
    let bps = |bytes_per_s: f64| bytes_per_s * 8.0;
    let hosts = tree
        .order
        .iter()
        .map(|&h| {
            let path_hops: Vec<Hop> = tree
                .path(h)
                .windows(2)
                .map(|w| hops[&(w[0], w[1])])
                .collect();
            let modelled = !path_hops.is_empty() && path_hops.iter().all(|x| x.rtt > 0.0);
            PlannedHost {
                name: names[h].to_owned(),
                parent: tree.parent[h].map(|p| names[p].to_owned()),
                depth: tree.depth[h],
                hop_bps: tree.parent[h].map(|p| bps(rate(p, h))),
                predicted_bps: (h != 0).then(|| bps(tree.width[h])),
                aggregate_path_bps: modelled.then(|| bps(aggregate_path_rate(&path_hops, s))),
                direct_bps: (h != 0)
                    .then(|| hops.get(&(0, h)).map(|d| bps(d.rate(s))))
                    .flatten(),
                hop_buffer_bytes: tree.parent[h]
                    .and_then(|p| rtts.get(&(p, h)).map(|rtt| 2.0 * rate(p, h) * rtt))
                    .map(|b| b.ceil() as u64),
            }
        })
        .collect();
    Ok(Plan {
        source: t.source.clone(),
        segment_bytes: segment,
        max_children,
        hosts: reorder_depth_first(&tree, hosts),
    })
}

/// Where a source following `plan` (of `t`) sends each node the plan
/// puts under another host: by the name in the node's hello, and by the
/// IP of its own `addr` where no other host listed has that IP; and a note
/// for each node that stays under the source since its planned parent has
/// no `addr`.
fn redirects(t: &Topology, plan: &Plan) -> (fanout_overlay::Redirects, Vec<String>) {
    let addr = |name: &str| t.hosts.iter().find(|h| h.name == name).and_then(|h| h.addr);
    let mut r = fanout_overlay::Redirects::new();
    let mut notes = Vec::new();
    for h in &plan.hosts {
        let Some(parent) = h.parent.as_deref().filter(|&p| p != t.source) else {
            continue;
        };
        let Some(to) = addr(parent) else {
            notes.push(format!(
                "{} is planned under {parent}, whose addr is not given: it stays under the source",
                h.name
            ));
            continue;
        };
        r.name(&h.name, to);
        if let Some(own) = addr(&h.name) {
            let sharing = t
                .hosts
                .iter()
                .filter(|o| o.addr.is_some_and(|a| a.ip() == own.ip()))
                .count();
            if sharing == 1 {
                r.ip(own.ip(), to);
            }
        }
    }
    (r, notes)
}

/// The hosts in depth-first order (each subtree under its parent), for
/// printing the tree.
fn reorder_depth_first(tree: &Tree, hosts: Vec<PlannedHost>) -> Vec<PlannedHost> {
    let mut by_host: BTreeMap<usize, PlannedHost> = tree.order.iter().copied().zip(hosts).collect();
    let mut out = Vec::with_capacity(by_host.len());
    let mut stack = vec![tree.order[0]];
    while let Some(h) = stack.pop() {
        out.extend(by_host.remove(&h));
        stack.extend(tree.children(h).into_iter().rev());
    }
    out
}

/// The plan as an indented tree with each host's figures.
fn render(plan: &Plan) -> String {
    let mbit = |b: Option<f64>| b.map_or("-".to_owned(), |b| format!("{:.1}", b / 1e6));
    let mut out = String::new();
    let bound = plan
        .max_children
        .map_or("no bound on children".to_owned(), |m| {
            format!("at most {m} children a host")
        });
    let _ = writeln!(
        out,
        "overlay plan from {}: {} hosts, {}-byte segments, {bound}",
        plan.source,
        plan.hosts.len(),
        plan.segment_bytes
    );
    let width = plan
        .hosts
        .iter()
        .map(|h| 2 * h.depth + h.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let _ = writeln!(
        out,
        "{:width$}  {:>9}  {:>9}  {:>9}  {:>9}   (Mbit/s)  {:>9}",
        "host", "predicted", "hop", "aggregate", "direct", "buffer"
    );
    for h in &plan.hosts {
        let label = format!("{}{}", "  ".repeat(h.depth), h.name);
        let _ = writeln!(
            out,
            "{label:width$}  {:>9}  {:>9}  {:>9}  {:>9}            {:>9}",
            mbit(h.predicted_bps),
            mbit(h.hop_bps),
            mbit(h.aggregate_path_bps),
            mbit(h.direct_bps),
            h.hop_buffer_bytes
                .map_or("-".to_owned(), crate::session_view::human_bytes)
        );
    }
    let _ = writeln!(
        out,
        "predicted: the least hop rate from the source (ROMA eq. 2); aggregate: one TCP connection \
         over the tree path (eq. 3); direct: a connection from the source; buffer: twice the hop's \
         bandwidth-delay product, the TCP buffer each end needs"
    );
    let largest = plan.hosts.iter().filter_map(|h| h.hop_buffer_bytes).max();
    let reach = autotune_max("net.ipv4.tcp_wmem")
        .into_iter()
        .chain(autotune_max("net.ipv4.tcp_rmem"))
        .min();
    if let (Some(largest), Some(reach)) = (largest, reach) {
        if largest > reach as u64 {
            let _ = writeln!(
                out,
                "note: a hop needs {} of buffer, more than this kernel's autotuning gives ({}, \
                 net.ipv4.tcp_wmem / tcp_rmem): give its hosts --socket-buffer {largest}",
                crate::session_view::human_bytes(largest),
                crate::session_view::human_bytes(reach as u64)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology(text: &str) -> Topology {
        toml::from_str(text).expect("a topology")
    }

    /// The shipped example (ROMA §V-B, Figure 6).
    const EXAMPLE: &str = include_str!("../../../scenarios/overlay/chain.toml");

    #[test]
    fn the_papers_example_routes_c_through_b() {
        let p = plan(&topology(EXAMPLE), None).unwrap();
        let c = p.hosts.iter().find(|h| h.name == "C").unwrap();
        assert_eq!(c.parent.as_deref(), Some("B"));
        assert_eq!(c.depth, 2);
        let mbit = |b: Option<f64>| b.unwrap() / 1e6;
        assert!((mbit(c.predicted_bps) - 22.2).abs() / 22.2 < 0.1);
        assert!((mbit(c.direct_bps) - 9.0).abs() / 9.0 < 0.1);
        assert!((mbit(c.aggregate_path_bps) - 9.0).abs() / 9.0 < 0.1);
        let names: Vec<&str> = p.hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["A", "B", "C"]);
        let text = render(&p);
        assert!(text.contains("    C"), "{text}");
        assert!(text.contains("22.0"), "{text}");
    }

    #[test]
    fn bad_topologies_say_what_is_wrong() {
        let err = |text: &str| plan(&topology(text), None).unwrap_err().to_string();
        assert!(err(r#"source = "A""#).contains("no hops"));
        let lossless = r#"
            source = "A"
            [[hop]]
            from = "A"
            to = "B"
            rtt = "5ms"
        "#;
        assert!(err(lossless).contains("capacity"), "{}", err(lossless));
        let unreached = r#"
            source = "A"
            [[hop]]
            from = "B"
            to = "A"
            rate = "10Mbit"
        "#;
        assert!(err(unreached).contains("reaches B"), "{}", err(unreached));
        let twice = r#"
            source = "A"
            [[hop]]
            from = "A"
            to = "B"
            rate = "10Mbit"
            duplex = true
            [[hop]]
            from = "B"
            to = "A"
            rate = "10Mbit"
        "#;
        assert!(err(twice).contains("listed twice"));
        let no_rtt = r#"
            source = "A"
            [[hop]]
            from = "A"
            to = "B"
            loss = 0.01
        "#;
        assert!(err(no_rtt).contains("round trip"));
        assert!(toml::from_str::<Topology>("source = \"A\"\nbogus = 1").is_err());
    }

    #[test]
    fn measured_rates_and_a_bound_on_children() {
        let t = topology(
            r#"
            source = "s"
            max_children = 1
            [[hop]]
            from = "s"
            to = "a"
            rate = "100Mbit"
            [[hop]]
            from = "s"
            to = "b"
            rate = "100Mbit"
            [[hop]]
            from = "a"
            to = "b"
            rate = "40Mbit"
            "#,
        );
        let p = plan(&t, None).unwrap();
        let b = p.hosts.iter().find(|h| h.name == "b").unwrap();
        assert_eq!(b.parent.as_deref(), Some("a"));
        assert_eq!(b.predicted_bps, Some(40e6));
        assert_eq!(b.aggregate_path_bps, None, "no round trips given");
        let free = plan(&t, Some(2)).unwrap();
        let b = free.hosts.iter().find(|h| h.name == "b").unwrap();
        assert_eq!(b.parent.as_deref(), Some("s"));
    }

    #[test]
    fn each_hop_is_given_twice_its_bandwidth_delay_product_of_buffer() {
        let t = topology(
            r#"
            source = "s"
            [[hop]]
            from = "s"
            to = "a"
            rate = "100Mbit"
            rtt = "20ms"
            [[hop]]
            from = "a"
            to = "b"
            capacity = "40Mbit"
            rtt = "10ms"
            [[hop]]
            from = "s"
            to = "c"
            rate = "10Mbit"
            "#,
        );
        let p = plan(&t, None).unwrap();
        let buffer = |n: &str| {
            p.hosts
                .iter()
                .find(|h| h.name == n)
                .unwrap()
                .hop_buffer_bytes
        };
        // 100 Mbit/s × 20 ms = 250 kB in flight; a measured rate's round
        // trip counts too.
        assert_eq!(buffer("a"), Some(500_000));
        assert_eq!(buffer("b"), Some(100_000));
        assert_eq!(buffer("c"), None, "no round trip given");
        assert_eq!(buffer("s"), None, "the source has no hop in");
        assert_eq!(
            buffer("a").map(|_| p.hosts[1].predicted_bps),
            Some(Some(100e6)),
            "the round trip leaves a measured rate as it is"
        );
        assert!(render(&p).contains("488.3 KiB"), "{}", render(&p));
    }

    #[test]
    fn the_plan_sends_each_host_below_another_to_its_planned_parent() {
        let t = topology(
            r#"
            source = "s"
            [[hop]]
            from = "s"
            to = "a"
            rate = "100Mbit"
            [[hop]]
            from = "a"
            to = "b"
            rate = "100Mbit"
            [[hop]]
            from = "b"
            to = "c"
            rate = "100Mbit"
            [[hop]]
            from = "s"
            to = "b"
            rate = "1Mbit"
            [[host]]
            name = "a"
            addr = "10.0.0.2:7000"
            [[host]]
            name = "b"
            addr = "10.0.0.3:7000"
            "#,
        );
        let p = plan(&t, None).unwrap();
        let (r, notes) = redirects(&t, &p);
        let g = |name: Option<&str>, peer: Option<&str>| fanout_overlay::Greeting {
            name: name.map(str::to_owned),
            peer: peer.map(|p| p.parse().unwrap()),
        };
        let to = |s: &str| Some(s.parse().unwrap());
        assert_eq!(r.lookup(&g(Some("a"), None)), None, "a is the source's");
        assert_eq!(r.lookup(&g(Some("b"), None)), to("10.0.0.2:7000"));
        assert_eq!(r.lookup(&g(None, Some("10.0.0.3"))), to("10.0.0.2:7000"));
        assert_eq!(r.lookup(&g(Some("c"), None)), to("10.0.0.3:7000"));
        assert!(notes.is_empty(), "{notes:?}");
        // Without b's address, c stays under the source, and says so.
        let mut t = t;
        t.hosts.pop();
        let (r, notes) = redirects(&t, &plan(&t, None).unwrap());
        assert_eq!(r.lookup(&g(Some("c"), None)), None);
        assert!(notes[0].contains("c is planned under b"), "{notes:?}");
        t.hosts.push(HostSpec {
            name: "z".into(),
            addr: None,
        });
        assert!(plan(&t, None)
            .unwrap_err()
            .to_string()
            .contains("in no hop"));
    }
}
