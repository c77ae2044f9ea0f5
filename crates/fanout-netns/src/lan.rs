//! A switched LAN of namespaces: [`LanTopology`].
//!
//! ```text
//!   host h0 (10.77.0.1)   host h1 (10.77.0.2)  ...  host hN-1
//!        fo-eth                fo-eth                 fo-eth
//!          |  veth               |                      |
//!        fo-p0                 fo-p1       ...        fo-pN-1
//!   +------------------- fo-br (switch namespace) --------------+
//!     bridge, IGMP/MLD snooping on, the bridge itself is querier
//! ```
//!
//! Every interface lives in a namespace the topology created; the root
//! namespace gets none, so nothing sent on the LAN can reach it.
//!
//! Snooping details that matter for tests: the bridge queries with IGMPv3 /
//! MLDv2 (v2 hosts suppress their reports when they hear another member's,
//! and the bridge would never learn them), its query response interval is
//! 200 ms, and [`LanTopology::with_config`] returns only after the querier
//! counts as present (until then the bridge floods all multicast). From
//! then on a group's traffic reaches only ports the bridge learned a report
//! on, so after joining wait with [`LanTopology::wait_for_members`] before
//! sending.

use crate::cmd;
use crate::error::NetnsError;
use crate::netns::Netns;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Once;
use std::time::Duration;

/// Name of the bridge in the switch namespace.
pub const BRIDGE: &str = "fo-br";
/// Name of each host's interface (in its own namespace).
pub const HOST_IF: &str = "fo-eth";
/// Most hosts one LAN can have (addresses 10.77.0.1 to 10.77.0.250).
pub const MAX_HOSTS: usize = 250;
/// The IPv4 multicast range routed out of each host's interface.
pub const MULTICAST_V4: &str = "224.0.0.0/4";

/// The bridge's query response interval (`mcast_query_response_interval`,
/// centiseconds): the Max Resp Time of its queries and the time after
/// `mcast_querier 1` before snooping filters (kernel default 10 s).
const QUERY_RESPONSE_CENTISECONDS: &str = "20";
/// How long [`LanTopology::with_config`] waits after switching the querier on:
/// the response interval plus a margin.
const QUERIER_SETTLE: Duration = Duration::from_millis(300);

/// Options of [`LanTopology::with_config`].
#[derive(Debug, Clone, PartialEq)]
pub struct LanConfig {
    /// Also give host `i` the address `fd77::<i+1>/64` (no DAD wait).
    pub ipv6: bool,
    /// Shape every host link, both directions, with a tbf qdisc.
    pub rate_limit: Option<RateLimit>,
    /// Turn TSO/GSO/GRO off on every veth end (needs `ethtool`; without it
    /// a warning is printed once and offloads stay on).
    pub disable_offloads: bool,
}

impl Default for LanConfig {
    fn default() -> Self {
        LanConfig {
            ipv6: false,
            rate_limit: None,
            disable_offloads: true,
        }
    }
}

/// A token-bucket (`tc qdisc … tbf`) limit on one direction of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Sustained rate, in bits per second.
    pub rate_bits_per_sec: u64,
    /// Bucket size, in bytes: the longest burst at line rate.
    pub burst_bytes: u32,
    /// Longest a packet may wait in the qdisc before it is dropped.
    pub latency: Duration,
}

impl RateLimit {
    /// `mbit` Mbit/s with a 10 ms burst (at least 16 KiB) and 50 ms of queue.
    pub fn mbit(mbit: u64) -> Self {
        let rate_bits_per_sec = mbit.saturating_mul(1_000_000);
        let ten_ms_bytes = rate_bits_per_sec / 8 / 100;
        RateLimit {
            rate_bits_per_sec,
            burst_bytes: u32::try_from(ten_ms_bytes.max(16 << 10)).unwrap_or(u32::MAX),
            latency: Duration::from_millis(50),
        }
    }
}

/// Which side of a host link a [`RateLimit`] applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkDirection {
    /// Host to switch: the host interface's egress.
    Uplink,
    /// Switch to host: the switch port's egress.
    Downlink,
    /// Both of the above.
    Both,
}

/// One host of a [`LanTopology`]: its namespace, interface and addresses.
#[derive(Debug)]
pub struct LanHost {
    netns: Netns,
    index: usize,
    ipv4: Ipv4Addr,
    ipv6: Option<Ipv6Addr>,
    ifindex: u32,
    port: String,
}

impl LanHost {
    /// The host's namespace: run code there with [`Netns::run_in`] or
    /// programs with [`Netns::exec`].
    pub fn netns(&self) -> &Netns {
        &self.netns
    }

    /// Position in [`LanTopology::hosts`], from 0.
    pub fn index(&self) -> usize {
        self.index
    }

    /// `10.77.0.<index+1>`.
    pub fn ipv4(&self) -> Ipv4Addr {
        self.ipv4
    }

    /// `fd77::<index+1>` when [`LanConfig::ipv6`] was set.
    pub fn ipv6(&self) -> Option<Ipv6Addr> {
        self.ipv6
    }

    /// The host's interface name ([`HOST_IF`]), inside its namespace.
    pub fn ifname(&self) -> &str {
        HOST_IF
    }

    /// The interface index inside the host namespace (for IPv6 multicast joins).
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The peer interface on the bridge, in the switch namespace (`fo-p<index>`).
    pub fn switch_port(&self) -> &str {
        &self.port
    }
}

/// `n` hosts on one bridge with IGMP/MLD snooping and a querier, each in its
/// own namespace; everything is removed on drop (processes inside killed
/// first), also when a test panics.
#[derive(Debug)]
pub struct LanTopology {
    // Field order is drop order: hosts go before the switch.
    hosts: Vec<LanHost>,
    switch: Netns,
    offloads_disabled: bool,
}

impl LanTopology {
    /// `n_hosts` hosts with [`LanConfig::default`] (IPv4 only, no shaping,
    /// offloads off where `ethtool` exists).
    pub fn new(n_hosts: usize) -> Result<Self, NetnsError> {
        Self::with_config(n_hosts, &LanConfig::default())
    }

    /// `n_hosts` hosts (1 to [`MAX_HOSTS`]) configured by `config`.
    pub fn with_config(n_hosts: usize, config: &LanConfig) -> Result<Self, NetnsError> {
        if n_hosts == 0 || n_hosts > MAX_HOSTS {
            return Err(NetnsError::Invalid(format!(
                "{n_hosts} hosts: want 1 to {MAX_HOSTS}"
            )));
        }
        let switch = Netns::with_label("sw")?;
        if config.ipv6 {
            // The bridge's link-local address is the source of its MLD queries.
            switch.set_sysctl("net.ipv6.conf.default.accept_dad", "0")?;
        }
        // IGMPv3/MLDv2 queries keep hosts in v3 mode, which has no report
        // suppression (in v2 mode a host that hears another member's report
        // stays silent, and while no querier is established the bridge
        // floods reports to every port, so the bridge never learns it).
        switch.ip(&[
            "link",
            "add",
            BRIDGE,
            "type",
            "bridge",
            "mcast_snooping",
            "1",
            "mcast_igmp_version",
            "3",
            "mcast_mld_version",
            "2",
            "mcast_query_response_interval",
            QUERY_RESPONSE_CENTISECONDS,
        ])?;
        switch.ip(&["link", "set", BRIDGE, "up"])?;
        let offloads = config.disable_offloads && ethtool_available();
        let mut hosts = Vec::with_capacity(n_hosts);
        for index in 0..n_hosts {
            hosts.push(add_host(&switch, index, config.ipv6, offloads)?);
        }
        // The bridge counts its own querier as present only a query response
        // interval after it is switched on, and floods every multicast
        // frame until then; the interval is short, so wait it out here.
        switch.ip(&[
            "link",
            "set",
            BRIDGE,
            "type",
            "bridge",
            "mcast_querier",
            "1",
        ])?;
        std::thread::sleep(QUERIER_SETTLE);
        let lan = LanTopology {
            hosts,
            switch,
            offloads_disabled: offloads,
        };
        if let Some(limit) = config.rate_limit {
            for index in 0..n_hosts {
                lan.set_rate_limit(index, LinkDirection::Both, Some(limit))?;
            }
        }
        Ok(lan)
    }

    /// The hosts, in address order.
    pub fn hosts(&self) -> &[LanHost] {
        &self.hosts
    }

    /// Host `index`.
    ///
    /// # Panics
    ///
    /// If `index` is out of range.
    pub fn host(&self, index: usize) -> &LanHost {
        &self.hosts[index]
    }

    /// The switch namespace, holding the bridge [`BRIDGE`] and all ports.
    pub fn switch(&self) -> &Netns {
        &self.switch
    }

    /// Whether TSO/GSO/GRO were turned off on every veth end.
    pub fn offloads_disabled(&self) -> bool {
        self.offloads_disabled
    }

    /// Names of all namespaces of this topology (switch first).
    pub fn namespace_names(&self) -> Vec<String> {
        std::iter::once(self.switch.name().to_owned())
            .chain(self.hosts.iter().map(|h| h.netns.name().to_owned()))
            .collect()
    }

    /// Sets the MTU of host `index`'s link, both ends (its interface and
    /// its switch port), as a tunnel or a cloud network would have it. A
    /// frame larger than the host's end is dropped on the way in; the
    /// bridge's other ports keep theirs.
    pub fn set_mtu(&self, index: usize, mtu: u32) -> Result<(), NetnsError> {
        let host = self.host(index);
        let mtu = mtu.to_string();
        host.netns.ip(&["link", "set", HOST_IF, "mtu", &mtu])?;
        self.switch.ip(&["link", "set", &host.port, "mtu", &mtu])?;
        Ok(())
    }

    /// Makes the switch drop IPv4 packets longer than `bytes` on their
    /// way to host `index` (an nftables rule in the bridge family), as a
    /// smaller link in the middle of a path would: the hosts' interfaces
    /// and routes keep their MTU, and nobody is told "too big". Every
    /// host's UDP segmentation offload is turned off first, so that the
    /// switch sees datagrams as a wire carries them, not the kernel's
    /// unsegmented batches (which a host's socket takes apart either way).
    pub fn drop_larger_than(&self, index: usize, bytes: u32) -> Result<(), NetnsError> {
        for h in &self.hosts {
            let mut off = h.netns.exec("ethtool");
            off.args(["-K", HOST_IF, "tx-udp-segmentation", "off"]);
            cmd::run(&mut off)?;
        }
        let host = self.host(index);
        let nft = |args: &[&str]| cmd::run(self.switch.exec("nft").args(args));
        nft(&["add", "table", "bridge", "fanout_mtu"])?;
        nft(&[
            "add",
            "chain",
            "bridge",
            "fanout_mtu",
            "forward",
            "{ type filter hook forward priority 0; policy accept; }",
        ])?;
        nft(&[
            "add",
            "rule",
            "bridge",
            "fanout_mtu",
            "forward",
            "oifname",
            &host.port,
            "ip",
            "length",
            ">",
            &bytes.to_string(),
            "drop",
        ])?;
        Ok(())
    }

    /// Installs (`Some`) or removes (`None`) a tbf limit on host `index`'s
    /// link in `direction`.
    pub fn set_rate_limit(
        &self,
        index: usize,
        direction: LinkDirection,
        limit: Option<RateLimit>,
    ) -> Result<(), NetnsError> {
        let host = self
            .hosts
            .get(index)
            .ok_or_else(|| NetnsError::Invalid(format!("no host {index}")))?;
        let ends: &[(&Netns, &str)] = match direction {
            LinkDirection::Uplink => &[(&host.netns, HOST_IF)],
            LinkDirection::Downlink => &[(&self.switch, &host.port)],
            LinkDirection::Both => &[(&host.netns, HOST_IF), (&self.switch, &host.port)],
        };
        for (ns, dev) in ends {
            shape(ns, dev, limit)?;
        }
        Ok(())
    }

    /// Indices of hosts whose switch port the bridge's multicast database
    /// lists as a member of `group` (what IGMP/MLD snooping learned).
    pub fn group_members(&self, group: IpAddr) -> Result<Vec<usize>, NetnsError> {
        let mdb = cmd::run_args("bridge", &["-n", self.switch.name(), "mdb", "show"])?;
        let mut members: Vec<usize> = parse_mdb(&mdb, group)
            .iter()
            .filter_map(|port| self.hosts.iter().position(|h| &h.port == port))
            .collect();
        members.sort_unstable();
        members.dedup();
        Ok(members)
    }

    /// Polls [`LanTopology::group_members`] until at least `count` hosts are
    /// members of `group` or `timeout` passed; returns the last member list.
    pub fn wait_for_members(
        &self,
        group: IpAddr,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<usize>, NetnsError> {
        let step = Duration::from_millis(20);
        let mut waited = Duration::ZERO;
        loop {
            let members = self.group_members(group)?;
            if members.len() >= count || waited >= timeout {
                return Ok(members);
            }
            std::thread::sleep(step);
            waited += step;
        }
    }
}

/// Creates host `index`: namespace, veth into the bridge, addresses, route.
fn add_host(
    switch: &Netns,
    index: usize,
    ipv6: bool,
    offloads_off: bool,
) -> Result<LanHost, NetnsError> {
    let netns = Netns::with_label(&format!("h{index}"))?;
    if ipv6 {
        // Addresses usable at once, link-local included (MLD reports need it).
        netns.set_sysctl("net.ipv6.conf.default.accept_dad", "0")?;
    }
    let port = format!("fo-p{index}");
    // Both ends are created directly in our namespaces: the root namespace
    // never holds either of them, not even for a moment.
    switch.ip(&[
        "link",
        "add",
        &port,
        "type",
        "veth",
        "peer",
        "name",
        HOST_IF,
        "netns",
        netns.name(),
    ])?;
    switch.ip(&["link", "set", &port, "master", BRIDGE, "up"])?;
    let host_octet = u8::try_from(index + 1)
        .map_err(|_| NetnsError::Invalid(format!("host index {index} too large")))?;
    let ipv4 = Ipv4Addr::new(10, 77, 0, host_octet);
    netns.ip(&["link", "set", HOST_IF, "up"])?;
    netns.ip(&["addr", "add", &format!("{ipv4}/24"), "dev", HOST_IF])?;
    netns.ip(&["route", "add", MULTICAST_V4, "dev", HOST_IF])?;
    let ipv6 = if ipv6 {
        let addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, u16::from(host_octet));
        netns.ip(&[
            "addr",
            "add",
            &format!("{addr}/64"),
            "dev",
            HOST_IF,
            "nodad",
        ])?;
        Some(addr)
    } else {
        None
    };
    if offloads_off {
        offloads(&netns, HOST_IF)?;
        offloads(switch, &port)?;
    }
    let ifindex =
        parse_ifindex(&netns.ip(&["-o", "link", "show", "dev", HOST_IF])?).ok_or_else(|| {
            NetnsError::Parse {
                command: format!("ip -n {} -o link show dev {HOST_IF}", netns.name()),
                detail: "no interface index".into(),
            }
        })?;
    Ok(LanHost {
        netns,
        index,
        ipv4,
        ipv6,
        ifindex,
        port,
    })
}

/// Whether `ethtool` is installed; warns once when it is not.
fn ethtool_available() -> bool {
    static WARN: Once = Once::new();
    let found = cmd::on_path("ethtool");
    if !found {
        WARN.call_once(|| {
            eprintln!(
                "fanout-netns: warning: ethtool not found, TSO/GSO/GRO stay on for veth \
                 links (tbf shaping is less accurate); install the `ethtool` package"
            );
        });
    }
    found
}

/// `ethtool -K dev gro off gso off tso off` inside `ns`.
fn offloads(ns: &Netns, dev: &str) -> Result<(), NetnsError> {
    let mut command = ns.exec("ethtool");
    command.args(["-K", dev, "gro", "off", "gso", "off", "tso", "off"]);
    cmd::run(&mut command).map(drop)
}

/// Installs or removes the root tbf qdisc of `dev` in `ns`.
fn shape(ns: &Netns, dev: &str, limit: Option<RateLimit>) -> Result<(), NetnsError> {
    let mut command = std::process::Command::new("tc");
    command.args(["-n", ns.name(), "qdisc"]);
    match limit {
        Some(l) => {
            if l.rate_bits_per_sec == 0 || l.burst_bytes == 0 {
                return Err(NetnsError::Invalid(format!("rate limit {l:?}")));
            }
            command.args([
                "replace",
                "dev",
                dev,
                "root",
                "tbf",
                "rate",
                &format!("{}bit", l.rate_bits_per_sec),
                "burst",
                &l.burst_bytes.to_string(),
                "latency",
                &format!("{}us", l.latency.as_micros()),
            ]);
            cmd::run(&mut command).map(drop)
        }
        None => {
            command.args(["del", "dev", dev, "root"]);
            match cmd::run(&mut command) {
                // Nothing installed: veth's default is noqueue, which cannot be deleted.
                Err(NetnsError::Command { stderr, .. })
                    if stderr.contains("handle of zero") || stderr.contains("No such file") =>
                {
                    Ok(())
                }
                other => other.map(drop),
            }
        }
    }
}

/// The switch ports listed for `group` in `bridge mdb show` output.
fn parse_mdb(text: &str, group: IpAddr) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let mut tokens = line.split_whitespace();
            let mut port = None;
            let mut grp = None;
            while let Some(token) = tokens.next() {
                match token {
                    "port" => port = tokens.next(),
                    "grp" => grp = tokens.next(),
                    _ => {}
                }
            }
            let grp: IpAddr = grp?.parse().ok()?;
            (grp == group).then(|| port.map(str::to_owned))?
        })
        .collect()
}

/// The index from `ip -o link show` output (`2: fo-eth@if3: <…> …`).
fn parse_ifindex(text: &str) -> Option<u32> {
    text.split(':').next()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mdb_lines_parse() {
        let text = "dev fo-br port fo-p1 grp 239.77.0.1 temp\n\
                    dev fo-br port fo-p2 grp 239.77.0.2 temp\n\
                    dev fo-br port fo-p3 grp 239.77.0.1 temp filter_mode exclude proto kernel\n\
                    router ports on fo-br: fo-p0\n";
        let group: IpAddr = "239.77.0.1".parse().unwrap();
        assert_eq!(parse_mdb(text, group), ["fo-p1", "fo-p3"]);
    }

    #[test]
    fn ifindex_parses() {
        assert_eq!(
            parse_ifindex("2: fo-eth@if3: <BROADCAST,MULTICAST,UP> mtu 1500"),
            Some(2)
        );
        assert_eq!(parse_ifindex("garbage"), None);
    }

    #[test]
    fn rate_limit_defaults() {
        let l = RateLimit::mbit(100);
        assert_eq!(l.rate_bits_per_sec, 100_000_000);
        assert_eq!(l.burst_bytes, 125_000);
        assert_eq!(RateLimit::mbit(1).burst_bytes, 16 << 10);
    }
}
