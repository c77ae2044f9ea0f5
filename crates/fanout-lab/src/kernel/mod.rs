//! The kernel-only profile: the same hosts joined by the kernel's own
//! bridge, veths, tbf and nftables instead of the user-space emulator — a
//! cross-check of the emulator with an independent implementation.
//!
//! ```text
//!   host a (ns fo-<pid>-<n>-a)                  host b
//!     fo-eth 10.78.0.1/32  [nft: loss of sw->a]   fo-eth ...
//!       | veth                                      |
//!     fo-p0 --ingress--> fo-i0 (ifb: tbf a -> sw) fo-p1 ...
//!       |  <-- re-injected --'                       |
//!   +---------------- fo-br (switch namespace, bridge) ---------------+
//!     nft bridge prerouting: IGMP drop, loss of a -> sw; static FDB and
//!     permanent MDB entries, snooping + querier, no multicast flooding;
//!     egress of fo-p0: tbf sw -> a
//! ```
//!
//! - Each direction of a host's link has its own tbf with a DropTail child
//!   in the switch namespace: router → host on the bridge port's egress,
//!   host → router on an IFB device the port's ingress is redirected to.
//!   So no shaping happens in a host's own stack (its sockets never see a
//!   full qdisc, as on a wire, and as with the emulator's TUN devices).
//! - Random loss is an nftables `numgen random` rule at the far end of
//!   each direction (after the tbf: a lost packet used the link, as in
//!   the simulator's `LinkModel`).
//! - Group membership is static, from the file, as in the emulator:
//!   permanent MDB entries, IGMP from hosts dropped at the ports, and no
//!   port floods unknown multicast. The bridge is its own IGMP querier,
//!   without which it would flood groups it has entries for.
//! - Every host has permanent neighbour entries for every other host and
//!   the bridge static FDB entries, so there is no ARP traffic and no
//!   unknown-unicast flooding (the emulator has neither).
//! - TSO/GSO/GRO are off on every veth end (`ethtool -K`), so the tbf
//!   sees MTU-sized frames.

pub mod plan;
pub mod stats;

use crate::emu::LinkReport;
use crate::error::LabError;
use crate::lab::LabHost;
use crate::topo::Topology;
use fanout_netns::Netns;
use fanout_sim::queue::QueueLimit;
use plan::{KernelPlan, Shape, ETH_HEADER, LOSS_SCALE};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The bridge, in the switch namespace.
pub const BRIDGE: &str = "fo-br";
/// Each host's interface (inside its namespace).
pub const HOST_IF: &str = "fo-eth";
/// The nftables table holding the loss and IGMP rules: family `bridge`
/// in the switch namespace, `netdev` in hosts with a lossy downlink.
const TABLE: &str = "fanout_lab";
/// The bridge's query response interval in centiseconds (see
/// `fanout_netns::LanTopology`): the querier counts as present this long
/// after it is switched on.
const QUERY_RESPONSE_CENTISECONDS: &str = "20";
/// Wait after switching the querier on: the response interval plus margin.
const QUERIER_SETTLE: Duration = Duration::from_millis(300);

/// What the kernel's counters say about a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelReport {
    /// Per directed link, in topology order (empty when unavailable):
    /// `offered` = frames the tbf sent + dropped, `tx_bytes` counts IP bytes
    /// (frame bytes less 14 per frame), drops are `queue_overflow` (tbf and
    /// its DropTail child), `random_loss` (the nftables rule) and, on
    /// uplinks, `igmp_filtered` (membership is static).
    pub links: Vec<LinkReport>,
    /// Why the counters could not be read (`None`: they were).
    pub counters_unavailable: Option<String>,
    /// TSO/GSO/GRO were turned off on every veth end.
    pub offloads_disabled: bool,
}

/// The kernel network of a lab: the switch namespace (bridge, ports, IFB
/// devices, qdiscs, rules); the hosts' namespaces belong to the `Lab`.
#[derive(Debug)]
pub struct KernelNet {
    switch: Netns,
    plan: KernelPlan,
    offloads_disabled: bool,
}

/// A host's MAC: locally administered, `02:4c:41:<side>:<index>`.
fn mac(side: u8, index: usize) -> String {
    let [hi, lo] = u16::try_from(index).unwrap_or(u16::MAX).to_be_bytes();
    format!("02:4c:41:{side:02x}:{hi:02x}:{lo:02x}")
}
const HOST_SIDE: u8 = 0x48;
const PORT_SIDE: u8 = 0x50;

fn port(i: usize) -> String {
    format!("fo-p{i}")
}
fn ifb(i: usize) -> String {
    format!("fo-i{i}")
}

impl KernelNet {
    /// Builds the bridge and joins `hosts` (namespaces already made, in
    /// topology order) to it as `topo` says. On error, what was built is
    /// removed with the switch namespace.
    pub fn build(topo: &Topology, hosts: &[LabHost]) -> Result<Self, LabError> {
        let plan = plan::plan(topo).map_err(|message| LabError::Topology {
            file: topo.origin.clone(),
            message,
        })?;
        require("nft", "nftables")?;
        require("tc", "iproute2")?;
        let switch = Netns::with_label("sw")?;
        switch.set_sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
        switch.set_sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
        let mut net = KernelNet {
            switch,
            plan,
            offloads_disabled: false,
        };
        net.wire(topo, hosts)?;
        Ok(net)
    }

    fn wire(&mut self, topo: &Topology, hosts: &[LabHost]) -> Result<(), LabError> {
        let sw = &self.switch;
        // The bridge, one veth and one IFB per host.
        let mut ip = format!(
            "link add {BRIDGE} type bridge mcast_snooping 1 mcast_igmp_version 3 \
             mcast_query_response_interval {QUERY_RESPONSE_CENTISECONDS}\n\
             link set {BRIDGE} up\n"
        );
        for (i, h) in hosts.iter().enumerate() {
            let (p, b) = (port(i), ifb(i));
            let _ = writeln!(
                ip,
                "link add {p} address {} type veth peer name {HOST_IF} address {} netns {}\n\
                 link set {p} master {BRIDGE}\nlink set {p} up\n\
                 link add {b} type ifb\nlink set {b} up",
                mac(PORT_SIDE, i),
                mac(HOST_SIDE, i),
                h.netns().name()
            );
        }
        feed(batch("ip", sw), &ip, "ip -batch (switch)")?;
        // Hosts: address, routes into the veth, every other host's MAC.
        for (i, h) in hosts.iter().enumerate() {
            let mut ip = format!(
                "link set {HOST_IF} up\naddr add {}/32 dev {HOST_IF}\n\
                 route add default dev {HOST_IF}\nroute add 224.0.0.0/4 dev {HOST_IF}\n",
                h.ip()
            );
            for (j, other) in hosts.iter().enumerate().filter(|(j, _)| *j != i) {
                let _ = writeln!(
                    ip,
                    "neigh replace {} lladdr {} dev {HOST_IF} nud permanent",
                    other.ip(),
                    mac(HOST_SIDE, j)
                );
            }
            feed(
                batch("ip", h.netns()),
                &ip,
                &format!("ip -batch ({})", h.name()),
            )?;
        }
        self.offloads_disabled = offloads_off(sw, hosts)?;
        // Shaping: downlinks on the ports, uplinks on the IFB devices.
        let mut tc = String::new();
        for (i, hp) in self.plan.hosts.iter().enumerate() {
            let (p, b) = (port(i), ifb(i));
            shape_lines(&mut tc, &p, &hp.down);
            let _ = writeln!(
                tc,
                "qdisc add dev {p} handle ffff: ingress\n\
                 filter add dev {p} parent ffff: protocol all u32 match u32 0 0 \
                 action mirred egress redirect dev {b}"
            );
            shape_lines(&mut tc, &b, &hp.up);
        }
        feed(batch("tc", sw), &tc, "tc -batch (switch)")?;
        // Static forwarding and membership.
        let mut br = String::new();
        for i in 0..hosts.len() {
            let _ = writeln!(
                br,
                "link set dev {} mcast_flood off\nfdb add {} dev {} master static",
                port(i),
                mac(HOST_SIDE, i),
                port(i)
            );
        }
        for g in &topo.groups {
            for &m in &g.members {
                let _ = writeln!(
                    br,
                    "mdb add dev {BRIDGE} port {} grp {} permanent",
                    port(m),
                    g.addr
                );
            }
        }
        feed(batch("bridge", sw), &br, "bridge -batch (switch)")?;
        // Loss and IGMP rules at each direction's far end. Uplinks: the
        // bridge family's prerouting hook, which frames reach after the
        // IFB (a netdev ingress hook on the port never sees the frames the
        // IFB re-injects) and before the bridge snoops or forwards them.
        let mut nft = format!("table bridge {TABLE} {{\n");
        let mut vmap = Vec::with_capacity(hosts.len());
        for (i, hp) in self.plan.hosts.iter().enumerate() {
            let _ = writeln!(
                nft,
                "counter igmp_p{i} {{ }}\ncounter loss_p{i} {{ }}\nchain in_p{i} {{\n\
                 ip protocol igmp counter name \"igmp_p{i}\" drop"
            );
            loss_rule(&mut nft, hp.up.loss_below, &format!("loss_p{i}"));
            nft.push_str("}\n");
            vmap.push(format!("\"{}\" : jump in_p{i}", port(i)));
        }
        let _ = writeln!(
            nft,
            "chain pre {{\ntype filter hook prerouting priority 0; policy accept;\n\
             iifname vmap {{ {} }}\n}}\n}}",
            vmap.join(", ")
        );
        feed(nft_in(sw), &nft, "nft -f (switch)")?;
        for (hp, h) in self.plan.hosts.iter().zip(hosts) {
            if hp.down.loss_below == 0 {
                continue;
            }
            let mut nft = format!(
                "table netdev {TABLE} {{\ncounter loss_in {{ }}\nchain in {{\n\
                 type filter hook ingress device \"{HOST_IF}\" priority 0; policy accept;\n"
            );
            loss_rule(&mut nft, hp.down.loss_below, "loss_in");
            nft.push_str("}\n}\n");
            feed(nft_in(h.netns()), &nft, &format!("nft -f ({})", h.name()))?;
        }
        // Forwarding to MDB ports needs a querier; it counts as present
        // one response interval after it is switched on.
        sw.ip(&[
            "link",
            "set",
            BRIDGE,
            "type",
            "bridge",
            "mcast_querier",
            "1",
        ])?;
        std::thread::sleep(QUERIER_SETTLE);
        Ok(())
    }

    /// Whether TSO/GSO/GRO were turned off on every veth end.
    pub fn offloads_disabled(&self) -> bool {
        self.offloads_disabled
    }

    /// The switch namespace.
    pub fn switch(&self) -> &Netns {
        &self.switch
    }

    /// Reads the qdisc and nftables counters of every link.
    pub fn report(&self, topo: &Topology, hosts: &[LabHost]) -> KernelReport {
        let (links, counters_unavailable) = match self.read_links(topo, hosts) {
            Ok(links) => (links, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        KernelReport {
            links,
            counters_unavailable,
            offloads_disabled: self.offloads_disabled,
        }
    }

    fn read_links(&self, topo: &Topology, hosts: &[LabHost]) -> Result<Vec<LinkReport>, LabError> {
        let mut tc = Command::new("tc");
        tc.args(["-n", self.switch.name(), "-s", "qdisc", "show"]);
        let qdiscs = stats::parse_tc(&feed(tc, "", "tc -s qdisc show (switch)")?);
        let list = |ns: &Netns, family: &str| {
            let mut c = ns.exec("nft");
            c.args(["list", "table", family, TABLE]);
            feed(c, "", &format!("nft list table in {}", ns.name()))
                .map(|t| stats::parse_nft_counters(&t))
        };
        let switch_counters = list(&self.switch, "bridge")?;
        let names = topo.node_names();
        let mut links: Vec<Option<LinkReport>> = vec![None; topo.links.len()];
        for (i, (hp, h)) in self.plan.hosts.iter().zip(hosts).enumerate() {
            let host_counters = if hp.down.loss_below > 0 {
                list(h.netns(), "netdev")?
            } else {
                BTreeMap::new()
            };
            let count = |m: &BTreeMap<String, u64>, k: &str| m.get(k).copied().unwrap_or(0);
            let sides = [
                (
                    &hp.up,
                    ifb(i),
                    count(&switch_counters, &format!("loss_p{i}")),
                    Some(count(&switch_counters, &format!("igmp_p{i}"))),
                ),
                (&hp.down, port(i), count(&host_counters, "loss_in"), None),
            ];
            for (shape, dev, lost, igmp) in sides {
                let q = qdiscs.get(&dev).copied().ok_or_else(|| LabError::Kernel {
                    what: "reading qdisc counters".into(),
                    message: format!("no root tbf on {dev}"),
                })?;
                let l = &topo.links[shape.link];
                let mut drops = BTreeMap::new();
                drops.insert("queue_overflow".to_owned(), q.dropped);
                if shape.loss_below > 0 {
                    drops.insert("random_loss".to_owned(), lost);
                }
                if let Some(n) = igmp {
                    drops.insert("igmp_filtered".to_owned(), n);
                }
                let dropped_after: u64 = lost + igmp.unwrap_or(0);
                links[shape.link] = Some(LinkReport {
                    from: names[l.from].to_owned(),
                    to: names[l.to].to_owned(),
                    offered_packets: q.sent_packets + q.dropped,
                    tx_packets: q.sent_packets,
                    tx_bytes: q.sent_bytes.saturating_sub(ETH_HEADER * q.sent_packets),
                    delivered_packets: q.sent_packets.saturating_sub(dropped_after),
                    drops,
                });
            }
        }
        // The plan covers every link (checked when it was made).
        Ok(links.into_iter().flatten().collect())
    }
}

/// tc lines for one direction: a root tbf with a DropTail child.
fn shape_lines(out: &mut String, dev: &str, s: &Shape) {
    // tc wants `limit` or `latency` for the tbf's own (replaced) queue.
    let _ = writeln!(
        out,
        "qdisc replace dev {dev} root handle 1: tbf rate {}bit burst {} limit {}",
        s.tbf_rate_bps, s.burst_bytes, s.burst_bytes
    );
    let child = match s.queue {
        QueueLimit::Packets(n) => format!("pfifo limit {n}"),
        QueueLimit::Bytes(b) => format!("bfifo limit {}", b.0),
    };
    let _ = writeln!(out, "qdisc add dev {dev} parent 1:1 handle 10: {child}");
}

/// An nftables rule dropping `loss_below / LOSS_SCALE` of the packets.
fn loss_rule(out: &mut String, loss_below: u64, counter: &str) {
    if loss_below > 0 {
        let _ = writeln!(
            out,
            "numgen random mod {LOSS_SCALE} < {loss_below} counter name \"{counter}\" drop"
        );
    }
}

/// `ethtool -K … gro off gso off tso off` on both ends of every veth;
/// `false` (with a warning) where ethtool is missing.
fn offloads_off(switch: &Netns, hosts: &[LabHost]) -> Result<bool, LabError> {
    if !on_path("ethtool") {
        eprintln!(
            "fanout-lab: warning: ethtool not found: TSO/GSO/GRO stay on, tbf shaping is \
             less accurate (install the ethtool package)"
        );
        return Ok(false);
    }
    let off = |ns: &Netns, dev: &str| {
        let mut c = ns.exec("ethtool");
        c.args(["-K", dev, "gro", "off", "gso", "off", "tso", "off"]);
        feed(c, "", &format!("ethtool -K {dev} in {}", ns.name())).map(drop)
    };
    for (i, h) in hosts.iter().enumerate() {
        off(h.netns(), HOST_IF)?;
        off(switch, &port(i))?;
    }
    Ok(true)
}

/// `program -n <ns> -batch -` (ip, tc, bridge).
fn batch(program: &str, ns: &Netns) -> Command {
    let mut c = Command::new(program);
    c.args(["-n", ns.name(), "-batch", "-"]);
    c
}

/// `nft -f -` inside `ns`.
fn nft_in(ns: &Netns) -> Command {
    let mut c = ns.exec("nft");
    c.args(["-f", "-"]);
    c
}

/// Runs `command` with `input` on stdin; its stdout, or an error with its
/// stderr.
fn feed(mut command: Command, input: &str, what: &str) -> Result<String, LabError> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|e| LabError::io(format!("starting {what}"), e))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A command that exits early closes its end; its status says why.
        let _ = stdin.write_all(input.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|e| LabError::io(format!("waiting for {what}"), e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(LabError::Kernel {
            what: what.to_owned(),
            message: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }
}

/// Whether `program` is on `PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// An error naming the Debian package when `program` is missing.
fn require(program: &str, package: &str) -> Result<(), LabError> {
    if on_path(program) {
        Ok(())
    } else {
        Err(LabError::Kernel {
            what: format!("`{program}`"),
            message: format!("needed but not found on PATH (Debian package {package})"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_are_local_and_distinct() {
        assert_eq!(mac(HOST_SIDE, 0), "02:4c:41:48:00:00");
        assert_eq!(mac(PORT_SIDE, 999), "02:4c:41:50:03:e7");
    }

    #[test]
    fn shape_lines_give_tbf_and_fifo() {
        let s = Shape {
            link: 0,
            tbf_rate_bps: 10_093_333,
            burst_bytes: 6056,
            queue: QueueLimit::Packets(100),
            loss_below: 0,
        };
        let mut out = String::new();
        shape_lines(&mut out, "fo-p0", &s);
        assert_eq!(
            out,
            "qdisc replace dev fo-p0 root handle 1: tbf rate 10093333bit burst 6056 limit 6056\n\
             qdisc add dev fo-p0 parent 1:1 handle 10: pfifo limit 100\n"
        );
        let mut rule = String::new();
        loss_rule(&mut rule, 50_000_000, "loss_in");
        assert_eq!(
            rule,
            "numgen random mod 1000000000 < 50000000 counter name \"loss_in\" drop\n"
        );
    }
}
