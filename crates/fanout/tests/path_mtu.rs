//! Datagram sizes fitted to the route's MTU, over real IP multicast in a
//! bridged LAN of network namespaces this test creates (10.77.0.0/24,
//! 239.77.0.3; nothing reaches the root namespace), without any size flag:
//! on links of 1280 bytes (a tunnel, a cloud network) a session stays
//! multicast with datagrams that fit; a receiver whose own link, or a link
//! in the middle of its path, is smaller than the sender's gets the
//! session's datagrams made that small before data flows; a datagram the
//! kernel refuses as too long is reported as such, not as a group that
//! cannot be used. Every wait is bounded; the LAN guard kills what runs in
//! it and removes it, panics too.

#![expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]

mod common;
use common::{finish, spawn_group_receiver, spawn_group_sender, Scratch};
use fanout_netns::{require_netns, LanTopology, NsChild};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const GROUP: &str = "239.77.0.3:7030";
const SENDER: &str = "10.77.0.1:6030";
const FILE_LEN: usize = 3 << 20;

/// A LAN of a sender (host 0) and `receivers`, each link's MTU `mtu(i)`,
/// a random file to send and the receivers' output paths.
struct Setup {
    lan: LanTopology,
    src: PathBuf,
    data: Vec<u8>,
    outs: Vec<PathBuf>,
    /// Holds `src` and `outs`; removed when dropped.
    _scratch: Scratch,
}

fn setup(tag: &str, receivers: usize, mtu: impl Fn(usize) -> u32) -> Option<Setup> {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return None;
    }
    let lan = LanTopology::new(receivers + 1).expect("LAN");
    for i in 0..=receivers {
        lan.set_mtu(i, mtu(i)).expect("MTU");
    }
    let scratch = Scratch::new(tag);
    let src = scratch.path().join("file.bin");
    let mut data = vec![0u8; FILE_LEN];
    fanout_core::Rng::new(receivers as u64).fill(&mut data);
    std::fs::File::create(&src)
        .unwrap()
        .write_all(&data)
        .unwrap();
    let outs = (1..=receivers)
        .map(|i| scratch.path().join(format!("got{i}.bin")))
        .collect();
    Some(Setup {
        lan,
        src,
        data,
        outs,
        _scratch: scratch,
    })
}

impl Setup {
    fn receiver(&self, host: usize, extra: &[&str]) -> NsChild {
        spawn_group_receiver(&self.lan, host, GROUP, SENDER, &self.outs[host - 1], extra)
    }

    /// A receiver told only the group and its interface.
    fn group_only_receiver(&self, host: usize, extra: &[&str]) -> NsChild {
        common::spawn_group_only_receiver(&self.lan, host, GROUP, &self.outs[host - 1], extra)
    }

    fn sender(&self, wait_for: usize, extra: &[&str]) -> NsChild {
        spawn_group_sender(&self.lan, 0, &self.src, GROUP, SENDER, wait_for, extra)
    }

    fn wait_for_members(&self, n: usize) {
        let group = IpAddr::V4(Ipv4Addr::new(239, 77, 0, 3));
        let members = self
            .lan
            .wait_for_members(group, n, Duration::from_secs(5))
            .expect("bridge state");
        assert_eq!(members.len(), n, "the bridge learned {members:?}");
    }
}

/// What `child` wrote on stderr (after it ended).
fn stderr_text(child: &mut NsChild) -> String {
    let mut err = String::new();
    if let Some(e) = child.child_mut().stderr.as_mut() {
        let _ = e.read_to_string(&mut err);
    }
    err
}

#[test]
fn on_1280_byte_links_a_session_stays_multicast_with_datagrams_that_fit() {
    let Some(s) = setup("mtu-1280", 2, |_| 1280) else {
        return;
    };
    let mut rx: Vec<_> = (1..=2).map(|i| s.receiver(i, &[])).collect();
    s.wait_for_members(2);
    let mut tx = s.sender(2, &[]);
    let sent = finish(&mut tx, "sender", Duration::from_secs(60));
    assert_eq!(sent["delivery"]["mode"], "multicast", "{sent}");
    assert_eq!(sent["path"]["route_mtu"], 1280, "{sent}");
    assert_eq!(sent["path"]["max_datagram"], 1232, "1280 - 48: {sent}");
    assert!(
        sent["transport"]["data_segments_multicast"]
            .as_u64()
            .unwrap()
            > 0,
        "{sent}"
    );
    for (i, r) in rx.iter_mut().enumerate() {
        let got = finish(r, "receiver", Duration::from_secs(30));
        assert_eq!(got["verified"], true, "{got}");
        assert_eq!(got["path"]["max_datagram"], 1232, "{got}");
        assert!(std::fs::read(&s.outs[i]).unwrap() == s.data, "receiver {i}");
    }
}

#[test]
fn a_receiver_behind_a_smaller_link_than_the_senders_gets_datagrams_that_fit() {
    // The sender's link carries 1500 bytes, receiver 1's only 1280: its
    // CONNECT accepts payloads of a 1232-byte datagram, and the sender,
    // before any data went out, makes every datagram that small.
    let Some(s) = setup("mtu-mixed", 2, |i| if i == 1 { 1280 } else { 1500 }) else {
        return;
    };
    let mut rx: Vec<_> = (1..=2).map(|i| s.receiver(i, &[])).collect();
    s.wait_for_members(2);
    let mut tx = s.sender(2, &[]);
    let sent = finish(&mut tx, "sender", Duration::from_secs(60));
    assert_eq!(sent["delivery"]["mode"], "multicast", "{sent}");
    assert_eq!(sent["receivers"]["completed"], 2, "{sent}");
    assert_eq!(sent["path"]["route_mtu"], 1500, "{sent}");
    assert_eq!(sent["path"]["max_datagram"], 1232, "{sent}");
    assert!(
        sent["path"]["fitted_to"]
            .as_str()
            .is_some_and(|a| a.starts_with("10.77.0.2:")),
        "receiver 1 asked: {sent}"
    );
    for (i, r) in rx.iter_mut().enumerate() {
        let got = finish(r, "receiver", Duration::from_secs(30));
        assert_eq!(got["verified"], true, "{got}");
        assert!(std::fs::read(&s.outs[i]).unwrap() == s.data, "receiver {i}");
    }
}

#[test]
fn a_datagram_too_long_for_the_route_is_an_error_that_names_the_mtu() {
    // --max-datagram above what the 1280-byte links carry, at both ends:
    // the sender warns at once, and the kernel's EMSGSIZE ends the session
    // with the MTU and the flag to change, instead of a fall-back to
    // unicast (which the build before this one did).
    let Some(s) = setup("mtu-flag", 1, |_| 1280) else {
        return;
    };
    let mut rx = s.receiver(1, &["--max-datagram", "1452"]);
    s.wait_for_members(1);
    let mut tx = s.sender(1, &["--max-datagram", "1452"]);
    let status = tx
        .wait_timeout(Duration::from_secs(30))
        .expect("wait")
        .expect("the sender ends");
    let err = stderr_text(&mut tx);
    assert!(
        err.contains("--max-datagram 1452 is more than the route toward"),
        "{err}"
    );
    assert!(!err.contains("falling back to unicast"), "{err}");
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("larger than the route carries")
            && err.contains("the route's MTU is 1280: give --max-datagram 1232 or less"),
        "{err}"
    );
    let _ = rx.kill();
}

#[test]
fn a_smaller_link_in_the_middle_of_the_path_is_found_by_the_probes_and_fitted() {
    // Every host's interface carries 1500 bytes, but the switch drops
    // packets longer than 1280 toward receiver 1 (a smaller link in the
    // middle: no host's route knows it, and multicast gets no "too big"
    // back). Receivers told only the group hear the sender's announcements
    // and their padded probes; receiver 1 hears the 1232-byte probe but not
    // the 1452-byte one, asks for 1232-byte datagrams, and the sender fits
    // the session to them: both complete, by multicast, without any flag.
    let Some(s) = setup("mtu-middle", 2, |_| 1500) else {
        return;
    };
    s.lan.drop_larger_than(1, 1280).expect("nft");
    let mut rx: Vec<_> = (1..=2).map(|i| s.group_only_receiver(i, &[])).collect();
    s.wait_for_members(2);
    let mut tx = s.sender(2, &[]);
    let sent = finish(&mut tx, "sender", Duration::from_secs(60));
    assert_eq!(sent["delivery"]["mode"], "multicast", "{sent}");
    assert_eq!(sent["receivers"]["completed"], 2, "{sent}");
    assert_eq!(sent["path"]["max_datagram"], 1232, "{sent}");
    assert!(
        sent["path"]["fitted_to"]
            .as_str()
            .is_some_and(|a| a.starts_with("10.77.0.2:")),
        "{sent}"
    );
    let got = finish(&mut rx[0], "receiver", Duration::from_secs(30));
    assert_eq!(got["verified"], true, "{got}");
    assert_eq!(got["path"]["probed"], 1232, "{got}");
    assert_eq!(got["path"]["max_datagram"], 1232, "{got}");
    let got = finish(&mut rx[1], "receiver", Duration::from_secs(30));
    assert_eq!(got["verified"], true, "{got}");
    assert!(got["path"].get("probed").is_none(), "{got}");
    for i in 0..2 {
        assert!(std::fs::read(&s.outs[i]).unwrap() == s.data, "receiver {i}");
    }
}

#[test]
fn a_receiver_told_the_sender_names_the_size_that_fits_a_middle_link() {
    // As above, but the receivers are told the sender (--from) and join at
    // once, without listening to its announcements first: the data's size
    // is not fitted, and receiver 1 leaves within seconds saying which size
    // fits, instead of waiting to be evicted.
    let Some(s) = setup("mtu-middle-from", 2, |_| 1500) else {
        return;
    };
    s.lan.drop_larger_than(1, 1280).expect("nft");
    let mut small = s.receiver(1, &[]);
    let mut full = s.receiver(2, &[]);
    s.wait_for_members(2);
    let began = Instant::now();
    let mut tx = s.sender(2, &["--require", "1"]);
    let Some(status) = small.wait_timeout(Duration::from_secs(15)).expect("wait") else {
        let _ = small.kill();
        panic!(
            "the receiver behind the small link ends within seconds: {}",
            stderr_text(&mut small)
        );
    };
    assert!(!status.success());
    let took = began.elapsed();
    let err = stderr_text(&mut small);
    assert!(
        err.contains("do not reach this host") && err.contains("--max-datagram 1232 fits"),
        "{err}"
    );
    let sent = finish(&mut tx, "sender", Duration::from_secs(60));
    assert_eq!(sent["receivers"]["failed"], 1, "{sent}");
    assert!(
        sent["members"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["reason"]
                .as_str()
                .is_some_and(|r| r.contains("--max-datagram 1232 fits"))),
        "the sender's report says why: {sent}"
    );
    let got = finish(&mut full, "receiver", Duration::from_secs(30));
    assert_eq!(got["verified"], true, "{got}");
    eprintln!("the small middle link was found after {took:?}");
}

#[test]
fn a_protected_session_fits_a_smaller_middle_link_too() {
    // As above, under a pre-shared key: the announcements and their probes
    // travel in clear, the data sealed, and the signed segment lists are
    // made to fit the smaller datagrams too.
    let Some(s) = setup("mtu-middle-psk", 1, |_| 1500) else {
        return;
    };
    s.lan.drop_larger_than(1, 1280).expect("nft");
    let psk = common::PskFile::new("mtu-middle", 0x5a);
    let keys = ["--psk-file", psk.path()];
    let mut rx = s.group_only_receiver(1, &keys);
    s.wait_for_members(1);
    let mut tx = s.sender(1, &keys);
    let sent = finish(&mut tx, "sender", Duration::from_secs(60));
    assert_eq!(sent["receivers"]["completed"], 1, "{sent}");
    assert_eq!(sent["path"]["max_datagram"], 1232, "{sent}");
    let got = finish(&mut rx, "receiver", Duration::from_secs(30));
    assert_eq!(got["verified"], true, "{got}");
    assert!(std::fs::read(&s.outs[0]).unwrap() == s.data);
}
