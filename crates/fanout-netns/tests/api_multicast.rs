//! The library API (`fanout_io::api`) over real IP multicast: a
//! `SessionListener` bound with a group on one host of a bridged LAN of
//! namespaces, three `Subscriber`s joined to it on the others.
//!
//! Only addresses inside namespaces this test creates are used (the LAN's
//! 10.77.0.0/24 and 239.77.0.9, TTL 1). Every wait is bounded; the
//! topology is torn down by its guard, panics included.

use fanout_io::api::{SessionListener, SessionOptions, SubscribeOptions, Subscriber};
use fanout_io::Clock;
use fanout_netns::{require_netns, LanTopology, HOST_IF};
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

const GROUP: Ipv4Addr = Ipv4Addr::new(239, 77, 0, 9);
const PORT: u16 = 9100;
const RECEIVERS: usize = 3;
const BYTES: usize = 2 << 20;

/// A checkable pattern (an LCG), different at every offset.
fn data() -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..BYTES)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 56) as u8
        })
        .collect()
}

#[test]
fn a_multicast_session_reaches_every_subscriber_once_on_the_wire() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let lan = LanTopology::new(RECEIVERS + 1).expect("topology");
    let group = SocketAddr::new(GROUP.into(), PORT);
    let sender_host = lan.host(0);
    let sender_addr = SocketAddr::new(sender_host.ipv4().into(), 6000);

    let mut session = sender_host
        .netns()
        .run_in(|| {
            let opts = SessionOptions::group(Some(group))
                .wait_for(RECEIVERS)
                .wait_at_most(Duration::from_secs(10));
            SessionListener::bind(sender_addr, opts)
        })
        .expect("enter namespace")
        .expect("bind the session");
    assert_eq!(session.group(), Some(group));

    // Subscribe (bind + IGMP join) inside each receiver's namespace.
    let subs: Vec<Subscriber> = lan.hosts()[1..]
        .iter()
        .map(|h| {
            h.netns()
                .run_in(|| {
                    let opts = SubscribeOptions::default().connect_timeout(Duration::from_secs(5));
                    Subscriber::with_options(Some(group), SocketAddr::new(h.ipv4().into(), 0), opts)
                })
                .expect("enter namespace")
                .expect("subscribe")
        })
        .collect();
    // IGMP snooping must know the members before data flows.
    let members = lan
        .wait_for_members(IpAddr::V4(GROUP), RECEIVERS, Duration::from_secs(5))
        .expect("bridge mdb");
    assert_eq!(members.len(), RECEIVERS, "mdb members: {members:?}");

    let readers: Vec<_> = subs
        .into_iter()
        .map(|sub| {
            std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
                let mut conn = sub.connect(sender_addr)?;
                let mut got = Vec::new();
                conn.read_to_end(&mut got)?;
                Ok(got)
            })
        })
        .collect();

    session
        .wait_for_members(RECEIVERS, Duration::from_secs(5))
        .expect("every subscriber joined");
    let tx_before = sender_host.netns().link_stats(HOST_IF).unwrap();
    let clock = Clock::new();
    let t0 = clock.now();
    let data = data();
    std::io::Write::write_all(&mut session, &data).unwrap();
    let summary = session.finish().expect("session completed");
    let secs = (clock.now() - t0).as_secs_f64();
    let tx_bytes = sender_host.netns().link_stats(HOST_IF).unwrap().tx_bytes - tx_before.tx_bytes;

    for (i, r) in readers.into_iter().enumerate() {
        let got = r.join().expect("reader thread").expect("read the stream");
        assert!(got == data, "receiver h{} got different bytes", i + 1);
    }
    eprintln!(
        "{BYTES} B to {RECEIVERS} subscribers by multicast in {secs:.2} s; sender link carried \
         {tx_bytes} B ({:.2}x the data); {} data segments, {} fan-out copies, \
         {} multicast + {} unicast repairs",
        tx_bytes as f64 / BYTES as f64,
        summary.stats.data_segments,
        summary.stats.fanout_copies,
        summary.stats.multicast_repairs,
        summary.stats.unicast_repairs,
    );
    assert_eq!(summary.completed(), RECEIVERS, "{summary:?}");
    assert_eq!(summary.stats.fanout_copies, 0, "multicast, not fan-out");
    // Multicast once: the sender's link carries the data about once (plus
    // headers and repairs), far below the three copies of unicast fan-out.
    assert!(
        (tx_bytes as f64) < 1.5 * BYTES as f64,
        "sender link carried {tx_bytes} B for {BYTES} B of data"
    );
}
