//! The emulated network without I/O: the simulator's [`LinkModel`]s joined
//! by static routes, driven by instants the caller reads from a real clock.
//!
//! Packets enter at their sending host's node ([`Core::ingress`]), cross
//! links (queue, serializer, delay, loss: exactly the simulator's code) and
//! routers, and leave through [`Core::advance`]'s `deliver` callback at the
//! instant the model schedules. Events are processed in (time, sequence)
//! order with the model's own scheduled time as `now`, so the models see the
//! same timeline they would in the simulator; how late the caller actually
//! releases a packet is the caller's measurement.

use super::packet::{classify, Classified, EmuPacket};
use crate::routing::Routes;
use crate::topo::Topology;
use fanout_core::{Instant, Rng};
use fanout_sim::stats::LinkStats;
use fanout_sim::{LinkModel, Offer};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

/// Counters of the emulator itself (links keep their own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CoreCounters {
    /// Datagrams read from hosts' TUN devices.
    pub ingress_packets: u64,
    /// Their bytes.
    pub ingress_bytes: u64,
    /// IGMP, link-local multicast and IPv6: not forwarded.
    pub control_packets: u64,
    /// Not well-formed IPv4.
    pub malformed_packets: u64,
    /// To an address no host has, a group not in the topology, or an
    /// unreachable host.
    pub no_route_packets: u64,
    /// Copies handed to hosts.
    pub delivered_packets: u64,
    /// Their bytes.
    pub delivered_bytes: u64,
}

#[derive(Debug)]
enum Event {
    TxDone(usize),
    Arrive(usize, EmuPacket),
}

/// The network state.
#[derive(Debug)]
pub struct Core {
    hosts: usize,
    link_to: Vec<usize>,
    links: Vec<LinkModel<EmuPacket>>,
    routes: Routes,
    by_ip: BTreeMap<Ipv4Addr, usize>,
    groups: BTreeMap<Ipv4Addr, Vec<usize>>,
    events: BTreeMap<(Instant, u64), Event>,
    seq: u64,
    /// Latest event time processed: ingress is never stamped earlier.
    clock_floor: Instant,
    counters: CoreCounters,
}

impl Core {
    /// The network of `topo`, links seeded from `topo.seed` (one fork per
    /// directed link, in file order, like the simulator).
    pub fn new(topo: &Topology) -> Self {
        let mut rng = Rng::new(topo.seed);
        let links = topo
            .links
            .iter()
            .map(|l| LinkModel::new(l.config, rng.fork()))
            .collect();
        Core {
            hosts: topo.hosts.len(),
            link_to: topo.links.iter().map(|l| l.to).collect(),
            links,
            routes: Routes::new(topo.hosts.len(), topo.node_count(), &topo.links),
            by_ip: topo
                .hosts
                .iter()
                .enumerate()
                .map(|(i, h)| (h.ip, i))
                .collect(),
            groups: topo
                .groups
                .iter()
                .map(|g| (g.addr, g.members.clone()))
                .collect(),
            events: BTreeMap::new(),
            seq: 0,
            clock_floor: Instant::ZERO,
            counters: CoreCounters::default(),
        }
    }

    /// The emulator's counters.
    pub fn counters(&self) -> &CoreCounters {
        &self.counters
    }

    /// Counters of directed link `i` (topology order).
    pub fn link_stats(&self, i: usize) -> Option<&LinkStats> {
        self.links.get(i).map(LinkModel::stats)
    }

    /// Number of directed links.
    pub fn link_count(&self) -> usize {
        self.links.len()
    }

    /// When the next event is due.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.events.keys().next().map(|&(t, _)| t)
    }

    /// A datagram host `host` sent, read at `now`; `csum_valid` travels
    /// with it to [`Core::advance`]'s `deliver`.
    pub fn ingress(&mut self, host: usize, bytes: &[u8], csum_valid: bool, now: Instant) {
        let now = now.max(self.clock_floor);
        self.counters.ingress_packets += 1;
        self.counters.ingress_bytes += bytes.len() as u64;
        let (targets, len) = match classify(bytes) {
            Classified::Unicast { dst, len } => match self.by_ip.get(&dst) {
                Some(&h) if h != host => (vec![h], len),
                _ => {
                    self.counters.no_route_packets += 1;
                    return;
                }
            },
            Classified::Multicast { group, len } => match self.groups.get(&group) {
                Some(members) => {
                    let t: Vec<usize> = members.iter().copied().filter(|&m| m != host).collect();
                    if t.is_empty() {
                        return;
                    }
                    (t, len)
                }
                None => {
                    self.counters.no_route_packets += 1;
                    return;
                }
            },
            Classified::Control => {
                self.counters.control_packets += 1;
                return;
            }
            Classified::Malformed => {
                self.counters.malformed_packets += 1;
                return;
            }
        };
        let packet = EmuPacket {
            bytes: Arc::from(&bytes[..len]),
            targets,
            csum_valid,
        };
        self.forward(host, packet, now);
    }

    /// Processes every event due at or before `now`, in order, each at its
    /// scheduled time; `deliver(host, datagram, csum_valid, scheduled)`
    /// releases a packet to a host.
    pub fn advance(&mut self, now: Instant, mut deliver: impl FnMut(usize, &[u8], bool, Instant)) {
        while let Some(entry) = self.events.first_entry() {
            let (t, _) = *entry.key();
            if t > now {
                break;
            }
            let event = entry.remove();
            self.clock_floor = t;
            match event {
                Event::TxDone(l) => {
                    let done = self.links[l].finish_tx(t);
                    if let Some(at) = done.arrival {
                        self.schedule(at, Event::Arrive(l, done.packet));
                    }
                    if let Some(next) = done.next_done {
                        self.schedule(next, Event::TxDone(l));
                    }
                }
                Event::Arrive(l, packet) => {
                    self.links[l].arrived();
                    let node = self.link_to[l];
                    self.arrive(node, packet, t, &mut deliver);
                }
            }
        }
    }

    fn arrive(
        &mut self,
        node: usize,
        mut packet: EmuPacket,
        t: Instant,
        deliver: &mut impl FnMut(usize, &[u8], bool, Instant),
    ) {
        if node < self.hosts {
            if let Some(pos) = packet.targets.iter().position(|&h| h == node) {
                packet.targets.swap_remove(pos);
                self.counters.delivered_packets += 1;
                self.counters.delivered_bytes += packet.bytes.len() as u64;
                deliver(node, &packet.bytes, packet.csum_valid, t);
            }
        }
        if !packet.targets.is_empty() {
            self.forward(node, packet, t);
        }
    }

    /// Sends `packet` on from `node`: one copy per distinct next hop, each
    /// carrying the targets behind that hop.
    fn forward(&mut self, node: usize, packet: EmuPacket, now: Instant) {
        let mut by_hop: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &h in &packet.targets {
            match self.routes.next_hop(node, h) {
                Some(l) => by_hop.entry(l).or_default().push(h),
                None => self.counters.no_route_packets += 1,
            }
        }
        for (l, targets) in by_hop {
            let copy = EmuPacket {
                bytes: Arc::clone(&packet.bytes),
                targets,
                csum_valid: packet.csum_valid,
            };
            if let Offer::Started(done) = self.links[l].offer(copy, now) {
                self.schedule(done, Event::TxDone(l));
            }
        }
    }

    fn schedule(&mut self, at: Instant, event: Event) {
        self.events.insert((at, self.seq), event);
        self.seq += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn udp(src: [u8; 4], dst: [u8; 4], total: u16) -> Vec<u8> {
        let mut p = vec![0u8; usize::from(total)];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p[9] = 17;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p
    }

    const STAR: &str = r#"
        [[host]]
        name = "s"
        [[host]]
        name = "a"
        [[host]]
        name = "b"
        [[router]]
        name = "sw"
        [[link]]
        from = "s"
        to = "sw"
        rate = "8Mbit"
        delay = "10ms"
        duplex = true
        [[link]]
        from = "sw"
        to = "a"
        rate = "8Mbit"
        delay = "1ms"
        [[link]]
        from = "sw"
        to = "b"
        rate = "8Mbit"
        delay = "2ms"
        [[link]]
        from = "a"
        to = "sw"
        rate = "8Mbit"
        [[link]]
        from = "b"
        to = "sw"
        rate = "8Mbit"
        [[group]]
        addr = "239.1.1.1"
        members = ["a", "b", "s"]
    "#;

    fn run_all(core: &mut Core) -> Vec<(usize, usize, Instant)> {
        let mut out = Vec::new();
        core.advance(Instant::from_nanos(u64::MAX), |h, b, _, t| {
            out.push((h, b.len(), t))
        });
        out
    }

    #[test]
    fn unicast_follows_the_model_timeline() {
        let topo = Topology::parse(STAR, "star").unwrap();
        let mut core = Core::new(&topo);
        // 1000 bytes at 8 Mbit/s = 1 ms per link; 10 ms + 1 ms delays.
        core.ingress(
            0,
            &udp([10, 78, 0, 1], [10, 78, 0, 2], 1000),
            false,
            Instant::ZERO,
        );
        let out = run_all(&mut core);
        let expect = Instant::ZERO + Duration::from_millis(1 + 10 + 1 + 1);
        assert_eq!(out, [(1, 1000, expect)]);
        assert_eq!(core.counters().delivered_packets, 1);
    }

    #[test]
    fn multicast_copies_once_per_branch_and_skips_the_sender() {
        let topo = Topology::parse(STAR, "star").unwrap();
        let mut core = Core::new(&topo);
        core.ingress(
            0,
            &udp([10, 78, 0, 1], [239, 1, 1, 1], 500),
            false,
            Instant::ZERO,
        );
        let mut out = run_all(&mut core);
        out.sort();
        let at = |ms: u64| Instant::ZERO + Duration::from_micros(500 + 10_000 + 500 + ms * 1000);
        assert_eq!(out, [(1, 500, at(1)), (2, 500, at(2))]);
        // The sender's uplink carried one copy.
        assert_eq!(core.link_stats(0).unwrap().tx_packets, 1);
    }

    #[test]
    fn unknown_destinations_and_control_are_counted() {
        let topo = Topology::parse(STAR, "star").unwrap();
        let mut core = Core::new(&topo);
        core.ingress(
            1,
            &udp([10, 78, 0, 2], [10, 9, 9, 9], 100),
            false,
            Instant::ZERO,
        );
        core.ingress(
            1,
            &udp([10, 78, 0, 2], [239, 9, 9, 9], 100),
            false,
            Instant::ZERO,
        );
        core.ingress(
            1,
            &udp([10, 78, 0, 2], [224, 0, 0, 22], 100),
            false,
            Instant::ZERO,
        );
        core.ingress(1, &[1, 2, 3], false, Instant::ZERO);
        let c = *core.counters();
        assert_eq!(
            (c.no_route_packets, c.control_packets, c.malformed_packets),
            (2, 1, 1)
        );
        assert!(run_all(&mut core).is_empty());
    }

    #[test]
    fn the_checksum_flag_reaches_every_copy() {
        let topo = Topology::parse(STAR, "star").unwrap();
        let mut core = Core::new(&topo);
        let to_group = udp([10, 78, 0, 1], [239, 1, 1, 1], 500);
        core.ingress(0, &to_group, true, Instant::ZERO);
        core.ingress(0, &to_group, false, Instant::from_nanos(1_000_000_000));
        let mut flags = Vec::new();
        core.advance(Instant::from_nanos(u64::MAX), |h, _, valid, _| {
            flags.push((h, valid))
        });
        flags.sort();
        assert_eq!(flags, [(1, false), (1, true), (2, false), (2, true)]);
    }
}
