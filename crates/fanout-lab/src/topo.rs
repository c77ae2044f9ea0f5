//! Lab topology files: hosts (each a network namespace), routers (nodes of
//! the emulator only), links with the simulator's rate, delay, loss and
//! queue models, static multicast groups, and the commands to run.
//!
//! ```toml
//! seed = 1                 # RNG seed of the link models (loss, RED)
//! timeout = "60s"          # whole run; commands still running are killed
//! tcp_cc = "cubic"         # TCP congestion control in every host namespace
//! profile = "emulator"     # or "kernel": bridge + tbf + nftables (crate::kernel)
//!
//! [[host]]
//! name = "snd"             # ip defaults to 10.78.<i / 250>.<i % 250 + 1>
//! [[host]]
//! name = "rcv"
//! ip = "10.78.0.9"
//! tcp_cc = "reno"          # per-host override
//!
//! [[router]]
//! name = "sw"
//!
//! [[link]]                 # same keys as the simulator's `[[link]]`
//! from = "snd"
//! to = "sw"
//! rate = "100Mbit"
//! delay = "5ms"
//! duplex = true            # also sw -> snd with the same parameters
//! loss = { model = "bernoulli", p = 0.01 }
//! queue = { kind = "red", min_th = 15000, max_th = 45000, max_p = 0.4, byte_mode = true, bytes = "60KB" }
//! reorder = { p = 0.01, extra = "3ms" }   # 1% of packets arrive 3 ms late
//!
//! [[group]]                # multicast to 239.1.1.1 reaches these hosts
//! addr = "239.1.1.1"
//! members = ["rcv"]
//!
//! [[command]]              # run by `sh -c` inside the host's namespace
//! host = "rcv"
//! cmd = "ping -c 3 {ip:snd}"   # {ip:NAME} is replaced by NAME's address
//! background = false       # true: killed when the others are done
//! ```

use crate::error::LabError;
use fanout_sim::units::{HumanDuration, Rate};
use fanout_sim::{LinkConfig, LossSpec, QueueConfig, ReorderSpec};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

/// Most hosts one lab may have (one namespace and TUN device each).
pub const MAX_HOSTS: usize = 1000;
/// Most nodes (hosts and routers) and directed links.
pub const MAX_NODES: usize = 2000;
/// Most directed links.
pub const MAX_LINKS: usize = 8000;
/// Default run timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// Default bound on the emulator's p99 lateness: a run whose releases are
/// later than this at the 99th percentile is marked invalid.
pub const DEFAULT_MAX_LATENESS_P99: Duration = Duration::from_millis(1);

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyFile {
    #[serde(default = "default_seed")]
    seed: u64,
    #[serde(default)]
    timeout: Option<HumanDuration>,
    #[serde(default)]
    tcp_cc: Option<String>,
    #[serde(default)]
    max_lateness_p99: Option<HumanDuration>,
    #[serde(default = "default_receive_steering")]
    receive_steering: bool,
    #[serde(default)]
    profile: Profile,
    #[serde(default, rename = "host")]
    hosts: Vec<HostFile>,
    #[serde(default, rename = "router")]
    routers: Vec<RouterFile>,
    #[serde(default, rename = "link")]
    links: Vec<LinkFile>,
    #[serde(default, rename = "group")]
    groups: Vec<GroupFile>,
    #[serde(default, rename = "command")]
    commands: Vec<CommandFile>,
}

fn default_receive_steering() -> bool {
    true
}

fn default_seed() -> u64 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostFile {
    name: String,
    #[serde(default)]
    ip: Option<Ipv4Addr>,
    #[serde(default)]
    tcp_cc: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouterFile {
    name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkFile {
    from: String,
    to: String,
    rate: Rate,
    #[serde(default)]
    delay: Option<HumanDuration>,
    #[serde(default)]
    duplex: bool,
    #[serde(default)]
    loss: LossSpec,
    #[serde(default)]
    queue: Option<QueueConfig>,
    #[serde(default)]
    reorder: ReorderSpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupFile {
    addr: Ipv4Addr,
    members: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandFile {
    host: String,
    cmd: String,
    #[serde(default)]
    background: bool,
}

/// Which implementation carries a lab's links.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// The user-space emulator over TUN devices, with the simulator's link
    /// models: any topology, delay, RED, Gilbert–Elliott loss.
    #[default]
    Emulator,
    /// The kernel alone: one bridge, veths, tbf with a DropTail child,
    /// nftables random loss ([`crate::kernel`]); a cross-check of the
    /// emulator. Only one router, no delay, no RED, Bernoulli loss only.
    Kernel,
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Profile::Emulator => "emulator",
            Profile::Kernel => "kernel",
        })
    }
}

impl std::str::FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "emulator" => Ok(Profile::Emulator),
            "kernel" => Ok(Profile::Kernel),
            other => Err(format!(
                "profile {other:?}: want \"emulator\" or \"kernel\""
            )),
        }
    }
}

/// One host: a namespace with a TUN device `fo-tun` holding `ip`/32 and
/// default and multicast routes into the emulator.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    /// Name from the file.
    pub name: String,
    /// The host's address.
    pub ip: Ipv4Addr,
    /// TCP congestion control to set in its namespace (`None`: the kernel's).
    pub tcp_cc: Option<String>,
}

/// One directed link between nodes (indices into [`Topology::node_names`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DirLink {
    /// Sending node.
    pub from: usize,
    /// Receiving node.
    pub to: usize,
    /// The simulator's link parameters.
    pub config: LinkConfig,
}

/// A static multicast group.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Group address (in 224.0.0.0/4, outside the link-local 224.0.0.0/24).
    pub addr: Ipv4Addr,
    /// Member hosts (indices into [`Topology::hosts`]), sorted, no repeats.
    pub members: Vec<usize>,
}

/// A command to run in a host's namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandSpec {
    /// Host index.
    pub host: usize,
    /// Shell command line (`sh -c`), placeholders already replaced.
    pub cmd: String,
    /// Killed once every foreground command has exited; its exit status
    /// does not count.
    pub background: bool,
}

/// A validated lab topology. Nodes are the hosts (indices `0..hosts.len()`)
/// followed by the routers.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// Where it came from, for messages.
    pub origin: String,
    /// Seed of the link models' random number generators.
    pub seed: u64,
    /// Run timeout.
    pub timeout: Duration,
    /// A run whose p99 lateness exceeds this is invalid.
    pub max_lateness_p99: Duration,
    /// Whether the emulator keeps a CPU of its own and the hosts' packet
    /// input runs on the others ([`crate::Steering`]; default true).
    pub receive_steering: bool,
    /// What carries the links (checked to fit the topology).
    pub profile: Profile,
    /// Hosts.
    pub hosts: Vec<Host>,
    /// Router names.
    pub routers: Vec<String>,
    /// Directed links (a duplex entry gives two, forward first).
    pub links: Vec<DirLink>,
    /// Multicast groups.
    pub groups: Vec<Group>,
    /// Commands, in file order.
    pub commands: Vec<CommandSpec>,
}

impl Topology {
    /// Reads and validates a topology file.
    pub fn load(path: &std::path::Path) -> Result<Self, LabError> {
        Self::parse(&LabError::read_text(path)?, &path.display().to_string())
    }

    /// Parses and validates topology text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, LabError> {
        let err = LabError::in_file(origin);
        let file: TopologyFile = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        resolve(file, origin).map_err(err)
    }

    /// This topology under another profile (`fanout lab run --profile`),
    /// checked to fit it.
    pub fn with_profile(mut self, profile: Profile) -> Result<Self, LabError> {
        self.profile = profile;
        if profile == Profile::Kernel {
            crate::kernel::plan::plan(&self).map_err(|message| LabError::Topology {
                file: self.origin.clone(),
                message,
            })?;
        }
        Ok(self)
    }

    /// Node names: hosts, then routers.
    pub fn node_names(&self) -> Vec<&str> {
        self.hosts
            .iter()
            .map(|h| h.name.as_str())
            .chain(self.routers.iter().map(String::as_str))
            .collect()
    }

    /// Number of nodes (hosts and routers).
    pub fn node_count(&self) -> usize {
        self.hosts.len() + self.routers.len()
    }

    /// The host with address `ip`.
    pub fn host_by_ip(&self, ip: Ipv4Addr) -> Option<usize> {
        self.hosts.iter().position(|h| h.ip == ip)
    }

    /// The host named `name`.
    pub fn host_by_name(&self, name: &str) -> Option<usize> {
        self.hosts.iter().position(|h| h.name == name)
    }
}

/// The default address of host `index`.
fn default_ip(index: usize) -> Ipv4Addr {
    let hi = u8::try_from(index / 250).unwrap_or(u8::MAX);
    let lo = u8::try_from(index % 250 + 1).unwrap_or(u8::MAX);
    Ipv4Addr::new(10, 78, hi, lo)
}

/// Longest host or router name.
const MAX_NODE_NAME: usize = 32;

/// Checks that `name` (of a `kind`: host, tool, …) is 1 to `max_len` of
/// `[A-Za-z0-9_-]`.
pub(crate) fn check_name(kind: &str, name: &str, max_len: usize) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= max_len
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{kind} name {name:?}: want 1 to {max_len} of [A-Za-z0-9_-]"
        ))
    }
}

fn check_cc(where_: &str, cc: &Option<String>) -> Result<(), String> {
    match cc {
        Some(cc) if cc.is_empty() || !cc.bytes().all(|b| b.is_ascii_alphanumeric()) => Err(
            format!("{where_}: tcp_cc {cc:?} is not a congestion control name (e.g. \"reno\", \"cubic\")"),
        ),
        _ => Ok(()),
    }
}

fn resolve(file: TopologyFile, origin: &str) -> Result<Topology, String> {
    if file.hosts.is_empty() {
        return Err("no [[host]]: a lab needs at least one host".into());
    }
    if file.hosts.len() > MAX_HOSTS {
        return Err(format!("{} hosts: at most {MAX_HOSTS}", file.hosts.len()));
    }
    if file.hosts.len() + file.routers.len() > MAX_NODES {
        return Err(format!("more than {MAX_NODES} hosts and routers"));
    }
    check_cc("top level", &file.tcp_cc)?;
    let mut nodes: BTreeMap<String, usize> = BTreeMap::new();
    let mut addrs: BTreeMap<Ipv4Addr, String> = BTreeMap::new();
    let mut hosts = Vec::with_capacity(file.hosts.len());
    for (i, h) in file.hosts.into_iter().enumerate() {
        check_name("host", &h.name, MAX_NODE_NAME)?;
        check_cc(&format!("host {:?}", h.name), &h.tcp_cc)?;
        let ip = h.ip.unwrap_or_else(|| default_ip(i));
        if ip.is_multicast() || ip.is_loopback() || ip.is_unspecified() || ip.is_broadcast() {
            return Err(format!(
                "host {:?}: ip {ip} is not a unicast address",
                h.name
            ));
        }
        if let Some(other) = addrs.insert(ip, h.name.clone()) {
            return Err(format!("hosts {other:?} and {:?} share ip {ip}", h.name));
        }
        if nodes.insert(h.name.clone(), i).is_some() {
            return Err(format!("host {:?} is defined twice", h.name));
        }
        hosts.push(Host {
            name: h.name,
            ip,
            tcp_cc: h.tcp_cc.or_else(|| file.tcp_cc.clone()),
        });
    }
    let mut routers = Vec::with_capacity(file.routers.len());
    for r in file.routers {
        check_name("router", &r.name, MAX_NODE_NAME)?;
        if nodes
            .insert(r.name.clone(), hosts.len() + routers.len())
            .is_some()
        {
            return Err(format!("node {:?} is defined twice", r.name));
        }
        routers.push(r.name);
    }
    let node = |name: &str, what: &str| {
        nodes
            .get(name)
            .copied()
            .ok_or_else(|| format!("{what}: no host or router named {name:?}"))
    };
    let mut links = Vec::new();
    for (i, l) in file.links.iter().enumerate() {
        let at = format!("link #{} ({} -> {})", i + 1, l.from, l.to);
        let (from, to) = (node(&l.from, &at)?, node(&l.to, &at)?);
        if from == to {
            return Err(format!("{at}: a link needs two different nodes"));
        }
        let mut config = LinkConfig::new(l.rate.0, l.delay.map_or(Duration::ZERO, |d| d.0))
            .with_loss(l.loss)
            .with_reorder(l.reorder);
        if let Some(q) = l.queue {
            config = config.with_queue(q);
        }
        config
            .loss
            .validate()
            .map_err(|e| format!("{at}: loss: {e}"))?;
        config.queue.validate().map_err(|e| format!("{at}: {e}"))?;
        config
            .reorder
            .validate()
            .map_err(|e| format!("{at}: reorder: {e}"))?;
        links.push(DirLink { from, to, config });
        if l.duplex {
            links.push(DirLink {
                from: to,
                to: from,
                config,
            });
        }
    }
    if links.len() > MAX_LINKS {
        return Err(format!(
            "{} directed links: at most {MAX_LINKS}",
            links.len()
        ));
    }
    for (i, h) in hosts.iter().enumerate() {
        if !links.iter().any(|l| l.from == i) {
            return Err(format!("host {:?} has no outgoing link", h.name));
        }
    }
    let mut groups: Vec<Group> = Vec::with_capacity(file.groups.len());
    for g in file.groups {
        let octets = g.addr.octets();
        if !g.addr.is_multicast() || octets[..3] == [224, 0, 0] {
            return Err(format!(
                "group {}: want a multicast address outside 224.0.0.0/24",
                g.addr
            ));
        }
        if groups.iter().any(|o| o.addr == g.addr) {
            return Err(format!("group {} is defined twice", g.addr));
        }
        let mut members = Vec::with_capacity(g.members.len());
        for m in &g.members {
            let at = format!("group {}", g.addr);
            let i = node(m, &at)?;
            if i >= hosts.len() {
                return Err(format!("{at}: member {m:?} is a router, not a host"));
            }
            members.push(i);
        }
        members.sort_unstable();
        members.dedup();
        groups.push(Group {
            addr: g.addr,
            members,
        });
    }
    let mut commands = Vec::with_capacity(file.commands.len());
    for (i, c) in file.commands.into_iter().enumerate() {
        let at = format!("command #{}", i + 1);
        let host = node(&c.host, &at)?;
        if host >= hosts.len() {
            return Err(format!("{at}: {:?} is a router, not a host", c.host));
        }
        let cmd = substitute(&c.cmd, &hosts).map_err(|e| format!("{at}: {e}"))?;
        commands.push(CommandSpec {
            host,
            cmd,
            background: c.background,
        });
    }
    let topo = Topology {
        origin: origin.to_owned(),
        seed: file.seed,
        timeout: file.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0),
        max_lateness_p99: file
            .max_lateness_p99
            .map_or(DEFAULT_MAX_LATENESS_P99, |d| d.0),
        receive_steering: file.receive_steering,
        profile: file.profile,
        hosts,
        routers,
        links,
        groups,
        commands,
    };
    if topo.profile == Profile::Kernel {
        crate::kernel::plan::plan(&topo)?;
    }
    Ok(topo)
}

/// Replaces every `{ip:NAME}` in `cmd` with host NAME's address.
fn substitute(cmd: &str, hosts: &[Host]) -> Result<String, String> {
    let mut out = String::with_capacity(cmd.len());
    let mut rest = cmd;
    while let Some(start) = rest.find("{ip:") {
        out.push_str(&rest[..start]);
        let tail = &rest[start + 4..];
        let end = tail
            .find('}')
            .ok_or_else(|| format!("unclosed `{{ip:` in {cmd:?}"))?;
        let name = &tail[..end];
        let host = hosts
            .iter()
            .find(|h| h.name == name)
            .ok_or_else(|| format!("`{{ip:{name}}}`: no host named {name:?}"))?;
        out.push_str(&host.ip.to_string());
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = r#"
        seed = 7
        timeout = "5s"
        tcp_cc = "reno"
        [[host]]
        name = "a"
        [[host]]
        name = "b"
        ip = "10.78.0.9"
        tcp_cc = "cubic"
        [[router]]
        name = "r"
        [[link]]
        from = "a"
        to = "r"
        rate = "10Mbit"
        delay = "5ms"
        duplex = true
        loss = { model = "bernoulli", p = 0.01 }
        [[link]]
        from = "r"
        to = "b"
        rate = "4.5Mbit"
        queue = { kind = "red", min_th = 15000, max_th = 45000, max_p = 0.4, byte_mode = true, bytes = "60KB" }
        [[link]]
        from = "b"
        to = "r"
        rate = "4.5Mbit"
        [[group]]
        addr = "239.1.1.1"
        members = ["b", "a", "b"]
        [[command]]
        host = "a"
        cmd = "echo {ip:b} {ip:a}"
    "#;

    #[test]
    fn parses_a_full_file() {
        let t = Topology::parse(TWO, "two.toml").unwrap();
        assert_eq!(t.seed, 7);
        assert_eq!(t.timeout, Duration::from_secs(5));
        assert_eq!(t.hosts[0].ip, Ipv4Addr::new(10, 78, 0, 1));
        assert_eq!(t.hosts[0].tcp_cc.as_deref(), Some("reno"));
        assert_eq!(t.hosts[1].tcp_cc.as_deref(), Some("cubic"));
        assert_eq!(t.node_names(), ["a", "b", "r"]);
        assert_eq!(t.links.len(), 4);
        assert_eq!((t.links[1].from, t.links[1].to), (2, 0));
        assert_eq!(t.links[2].config.rate_bps, 4_500_000);
        assert!(matches!(t.links[2].config.queue, QueueConfig::Red(_)));
        assert_eq!(t.groups[0].members, [0, 1]);
        assert_eq!(t.commands[0].cmd, "echo 10.78.0.9 10.78.0.1");
        assert_eq!(t.max_lateness_p99, DEFAULT_MAX_LATENESS_P99);
        assert!(t.receive_steering);
        let off = Topology::parse(&format!("receive_steering = false\n{TWO}"), "x").unwrap();
        assert!(!off.receive_steering);
    }

    fn error_of(text: &str) -> String {
        Topology::parse(text, "t.toml").unwrap_err().to_string()
    }

    #[test]
    fn errors_name_the_problem() {
        let e = error_of(&TWO.replace("to = \"b\"", "to = \"nope\""));
        assert!(e.contains("no host or router named \"nope\""), "{e}");
        let e = error_of(&TWO.replace("p = 0.01", "p = 1.5"));
        assert!(e.contains("p = 1.5"), "{e}");
        let e = error_of(&TWO.replace("rate = \"10Mbit\"", "rate = \"10Mbyte\""));
        assert!(e.contains("unknown rate unit"), "{e}");
        let e = error_of(&TWO.replace("239.1.1.1", "10.0.0.1"));
        assert!(e.contains("multicast address"), "{e}");
        let e = error_of(&TWO.replace("{ip:b}", "{ip:zz}"));
        assert!(e.contains("no host named \"zz\""), "{e}");
        let e = error_of(&TWO.replace("seed = 7", "seed = 7\nbogus = 1"));
        assert!(e.contains("unknown field `bogus`"), "{e}");
        let e = error_of(&TWO.replace("ip = \"10.78.0.9\"", "ip = \"10.78.0.1\""));
        assert!(e.contains("share ip"), "{e}");
        let e = error_of("[[host]]\nname = \"x\"\n");
        assert!(e.contains("no outgoing link"), "{e}");
        assert!(error_of("").contains("no [[host]]"));
    }
}
