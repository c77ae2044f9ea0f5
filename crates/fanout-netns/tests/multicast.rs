//! Real IPv4 multicast across a bridged LAN of network namespaces: one
//! sender, eight receivers and one bystander that never joins.
//!
//! Only addresses inside namespaces this test creates are used (10.77.0.0/24
//! and 239.77.0.1, TTL 1); nothing is connected to the root namespace. Every
//! wait is bounded; the topology is torn down by its guard, panics included.

use fanout_io::{Clock, EndpointConfig, UdpEndpoint};
use fanout_netns::{list_namespaces, require_netns, LanTopology, HOST_IF};
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const GROUP: Ipv4Addr = Ipv4Addr::new(239, 77, 0, 1);
const PORT: u16 = 9000;
const DATAGRAMS: u32 = 2000;
const SIZE: usize = 1200;
const RECEIVERS: usize = 8;
/// Host 0 sends, hosts 1..=8 receive, host 9 is the bystander.
const HOSTS: usize = RECEIVERS + 2;
const BYSTANDER: usize = RECEIVERS + 1;
/// Datagrams sent back to back before a short pause (light pacing keeps
/// the per-CPU backlog, 1000 packets, far from full: each datagram becomes
/// 1 + 8 queued packets on the way through the bridge).
const BURST: u32 = 50;
const PAUSE: Duration = Duration::from_micros(500);
/// Receivers read with this timeout and stop at the first one after the sender is done.
const READ_TIMEOUT: Duration = Duration::from_millis(100);
/// Hard upper bound on receiving, whatever happens.
const RECEIVE_LIMIT: Duration = Duration::from_secs(10);

/// What one receiver saw.
#[derive(Debug, Default)]
struct Tally {
    distinct: u32,
    duplicates: u32,
    malformed: u32,
}

fn payload(seq: u32) -> Vec<u8> {
    let mut d = vec![0u8; SIZE];
    d[..4].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in d.iter_mut().enumerate().skip(4) {
        *b = (seq as usize).wrapping_add(i) as u8;
    }
    d
}

fn check(datagram: &[u8]) -> Option<u32> {
    if datagram.len() != SIZE {
        return None;
    }
    let seq = u32::from_be_bytes(datagram[..4].try_into().ok()?);
    (seq < DATAGRAMS && datagram == payload(seq).as_slice()).then_some(seq)
}

/// Names of interfaces in the root namespace.
fn root_links() -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .expect("ip link show");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap_or("").to_owned())
        .collect()
}

fn receive(ep: UdpEndpoint, done: Arc<AtomicBool>, clock: Clock) -> Tally {
    let mut seen = vec![false; DATAGRAMS as usize];
    let mut tally = Tally::default();
    let mut buf = vec![0u8; 2048];
    let limit = clock.now() + RECEIVE_LIMIT;
    while tally.distinct < DATAGRAMS && clock.now() < limit {
        match ep.recv_from(&mut buf) {
            Ok((n, _from)) => match check(&buf[..n]) {
                Some(seq) if seen[seq as usize] => tally.duplicates += 1,
                Some(seq) => {
                    seen[seq as usize] = true;
                    tally.distinct += 1;
                }
                None => tally.malformed += 1,
            },
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if done.load(Ordering::Acquire) {
                    break;
                }
            }
            Err(e) => panic!("recv: {e}"),
        }
    }
    tally
}

#[test]
fn multicast_reaches_every_receiver_on_the_lan() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let clock = Clock::new();
    let root_before = root_links();
    let lan = LanTopology::new(HOSTS).expect("topology");
    let names = lan.namespace_names();
    let setup = clock.now();

    // Isolation by construction: no interface of ours is in the root namespace,
    // and each host has exactly lo + its veth end.
    let root_during = root_links();
    assert_eq!(root_during, root_before, "root namespace links changed");
    assert!(!root_during.iter().any(|n| n.starts_with("fo-")));
    for host in lan.hosts() {
        let links = host.netns().ip(&["-o", "link", "show"]).unwrap();
        assert_eq!(links.lines().count(), 2, "{}: {links}", host.netns().name());
        assert!(links.contains(&format!("{HOST_IF}@")));
    }

    // Receivers: bind and join inside their namespaces; the sockets stay there.
    let config = EndpointConfig {
        reuse_address: true,
        ..EndpointConfig::default()
    };
    let wildcard = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), PORT);
    let done = Arc::new(AtomicBool::new(false));
    let mut receivers = Vec::new();
    for host in &lan.hosts()[1..=RECEIVERS] {
        let ep = host
            .netns()
            .run_in(|| {
                let ep = UdpEndpoint::bind_with(wildcard, &config)?;
                ep.join_multicast_v4(GROUP, host.ipv4())?;
                ep.set_read_timeout(Some(READ_TIMEOUT))?;
                Ok::<_, fanout_io::IoError>(ep)
            })
            .expect("enter namespace")
            .expect("receiver socket");
        let done = Arc::clone(&done);
        receivers.push(std::thread::spawn(move || receive(ep, done, clock)));
    }
    // The bystander listens on the port but never joins: the kernel would
    // drop the datagrams anyway, so its interface counters tell whether the
    // bridge filtered (snooping) or flooded.
    let bystander = lan.host(BYSTANDER);
    let _idle = bystander
        .netns()
        .run_in(|| UdpEndpoint::bind_with(wildcard, &config))
        .unwrap()
        .unwrap();

    // IGMP snooping must have learned all eight members before sending, or
    // the bridge (querier present, group unknown) would drop the traffic.
    let members = lan
        .wait_for_members(IpAddr::V4(GROUP), RECEIVERS, Duration::from_secs(5))
        .expect("bridge mdb");
    assert_eq!(members, (1..=RECEIVERS).collect::<Vec<_>>(), "mdb members");

    let sender = lan.host(0);
    let tx = sender
        .netns()
        .run_in(|| {
            let ep = UdpEndpoint::bind(SocketAddr::new(sender.ipv4().into(), 0))?;
            ep.set_multicast_if_v4(sender.ipv4())?;
            ep.set_multicast_ttl_v4(1)?;
            ep.set_multicast_loop_v4(false)?;
            Ok::<_, fanout_io::IoError>(ep)
        })
        .unwrap()
        .expect("sender socket");
    let by_before = bystander.netns().link_stats(HOST_IF).unwrap();
    let tx_before = sender.netns().link_stats(HOST_IF).unwrap();

    let send_start = clock.now();
    let destination = SocketAddr::new(GROUP.into(), PORT);
    let mut send_retries = 0u32;
    for seq in 0..DATAGRAMS {
        let d = payload(seq);
        loop {
            match tx.send_to(&d, destination) {
                Ok(n) => {
                    assert_eq!(n, SIZE);
                    break;
                }
                // ENOBUFS / EAGAIN: the kernel pushed back; retry shortly.
                Err(e) if send_retries < 10_000 => {
                    send_retries += 1;
                    if send_retries == 1 {
                        eprintln!("send pushed back ({e}), retrying");
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
                Err(e) => panic!("send: {e}"),
            }
        }
        if (seq + 1) % BURST == 0 {
            std::thread::sleep(PAUSE);
        }
    }
    let send_time = clock.now() - send_start;
    done.store(true, Ordering::Release);

    let tallies: Vec<Tally> = receivers
        .into_iter()
        .map(|h| h.join().expect("receiver thread"))
        .collect();
    let tx_after = sender.netns().link_stats(HOST_IF).unwrap();
    let by_after = bystander.netns().link_stats(HOST_IF).unwrap();
    let tx_packets = tx_after.tx_packets - tx_before.tx_packets;
    let bystander_packets = by_after.rx_packets - by_before.rx_packets;

    let mut total = 0u64;
    for (i, t) in tallies.iter().enumerate() {
        eprintln!(
            "receiver h{}: {}/{DATAGRAMS} distinct, {} duplicates, {} malformed",
            i + 1,
            t.distinct,
            t.duplicates,
            t.malformed
        );
        total += u64::from(t.distinct);
    }
    eprintln!(
        "sent {DATAGRAMS} x {SIZE} B in {:.1} ms ({send_retries} retries, {tx_packets} packets on the wire); \
         delivered {total}/{} copies; bystander saw {bystander_packets} packets; \
         offloads off: {}; setup {:.0} ms, total {:.0} ms",
        send_time.as_secs_f64() * 1e3,
        u64::from(DATAGRAMS) * RECEIVERS as u64,
        lan.offloads_disabled(),
        setup.as_secs_f64() * 1e3,
        clock.now().as_secs_f64() * 1e3,
    );
    for (i, t) in tallies.iter().enumerate() {
        assert!(
            t.distinct * 100 >= DATAGRAMS * 99,
            "receiver h{} got only {}/{DATAGRAMS}",
            i + 1,
            t.distinct
        );
        assert_eq!(t.duplicates, 0, "receiver h{} saw duplicates", i + 1);
        assert_eq!(
            t.malformed,
            0,
            "receiver h{} saw malformed datagrams",
            i + 1
        );
    }
    assert!(
        tx_packets >= u64::from(DATAGRAMS),
        "sender put {tx_packets} packets on the wire"
    );
    // Snooping: the non-member port gets at most stray IGMP, not the group's traffic.
    assert!(
        bystander_packets < u64::from(DATAGRAMS / 10),
        "bridge flooded the bystander with {bystander_packets} packets"
    );

    drop(lan);
    let left = list_namespaces().unwrap();
    for name in &names {
        assert!(!left.contains(name), "{name} survived teardown");
    }
    assert_eq!(root_links(), root_before, "root namespace links changed");
}

#[test]
fn ipv6_multicast_reaches_receivers() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    const V6_DATAGRAMS: u32 = 200;
    let group: std::net::Ipv6Addr = "ff15::77:1".parse().unwrap();
    let config = fanout_netns::LanConfig {
        ipv6: true,
        ..fanout_netns::LanConfig::default()
    };
    let lan = LanTopology::with_config(3, &config).expect("topology");
    let names = lan.namespace_names();
    let wildcard: SocketAddr = SocketAddr::new(std::net::Ipv6Addr::UNSPECIFIED.into(), PORT);
    let endpoint_config = EndpointConfig {
        only_v6: true,
        reuse_address: true,
        ..EndpointConfig::default()
    };
    let receivers: Vec<UdpEndpoint> = lan.hosts()[1..]
        .iter()
        .map(|host| {
            host.netns()
                .run_in(|| {
                    let ep = UdpEndpoint::bind_with(wildcard, &endpoint_config)?;
                    ep.join_multicast_v6(group, host.ifindex())?;
                    ep.set_read_timeout(Some(READ_TIMEOUT))?;
                    Ok::<_, fanout_io::IoError>(ep)
                })
                .unwrap()
                .expect("receiver socket")
        })
        .collect();
    let members = lan
        .wait_for_members(IpAddr::V6(group), 2, Duration::from_secs(3))
        .unwrap();
    let sender = lan.host(0);
    let tx = sender
        .netns()
        .run_in(|| {
            let source = SocketAddr::new(sender.ipv6().expect("ipv6 address").into(), 0);
            let ep = UdpEndpoint::bind_with(source, &endpoint_config)?;
            ep.set_multicast_if_v6(sender.ifindex())?;
            ep.set_multicast_hops_v6(1)?;
            ep.set_multicast_loop_v6(false)?;
            Ok::<_, fanout_io::IoError>(ep)
        })
        .unwrap()
        .expect("sender socket");
    let destination = SocketAddr::new(group.into(), PORT);
    for seq in 0..V6_DATAGRAMS {
        tx.send_to(&payload(seq), destination).expect("send");
    }
    let mut buf = vec![0u8; 2048];
    for (i, rx) in receivers.iter().enumerate() {
        let mut got = 0u32;
        while let Ok((n, from)) = rx.recv_from(&mut buf) {
            assert_eq!(from.ip(), IpAddr::V6(sender.ipv6().unwrap()));
            assert!(check(&buf[..n]).is_some_and(|seq| seq < V6_DATAGRAMS));
            got += 1;
        }
        eprintln!("ipv6 receiver h{}: {got}/{V6_DATAGRAMS}", i + 1);
        assert_eq!(got, V6_DATAGRAMS, "ipv6 receiver h{}", i + 1);
    }
    eprintln!("ipv6 mdb members of {group}: {members:?}");
    drop(lan);
    let left = list_namespaces().unwrap();
    assert!(names.iter().all(|n| !left.contains(n)), "{left:?}");
}
