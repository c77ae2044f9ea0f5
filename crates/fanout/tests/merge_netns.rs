//! `fanout merge` over real IP multicast (MCTCP), in a bridged LAN of network
//! namespaces this test creates (10.77.0.0/24, TTL 1; nothing reaches the root
//! namespace): a sender multicasts a 4 MiB file to a group of four receivers;
//! each receiver joins through one of two ACK mergers (`fanout recv --merger`),
//! which report to the sender. All four files are identical and verified end to
//! end, the sender sees two members (the mergers), and it receives fewer ACKs
//! than the receivers sent. The same again with every hop protected by
//! long-term keys (`docs/security.md`, "Mergers"): the sender allows the
//! mergers' keys, each merger pins the sender's and allows its receivers',
//! each receiver pins its merger's and the sender's. Every wait is bounded;
//! the LAN guard kills what runs in it and removes it. Skipped without
//! namespaces unless `FANOUT_NETNS_REQUIRED=1`.

mod common;
use common::{finish, spawn_group_sender};
use fanout_netns::{require_netns, LanTopology, NsChild};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::Duration;

const GROUP: &str = "239.77.0.9:7040";
const SENDER: &str = "10.77.0.1:6040";
const FILE_BYTES: usize = 4 << 20;
/// Hosts: 0 sender, 1 and 2 mergers, 3..=6 receivers (3, 4 under host 1;
/// 5, 6 under host 2).
const RECEIVERS: [(usize, usize); 4] = [(3, 1), (4, 1), (5, 2), (6, 2)];

fn merger_addr(lan: &LanTopology, host: usize) -> String {
    format!("{}:6041", lan.host(host).ipv4())
}

fn receiver(lan: &LanTopology, host: usize, merger: &str, out: &Path, keys: &[String]) -> NsChild {
    let extra: Vec<&str> = ["--merger", merger]
        .into_iter()
        .chain(keys.iter().map(String::as_str))
        .collect();
    common::spawn_group_receiver(lan, host, GROUP, SENDER, out, &extra)
}

#[test]
fn receivers_report_through_two_mergers_and_all_get_the_file() {
    report_through_two_mergers(false);
}

#[test]
fn protected_receivers_report_through_two_protected_mergers() {
    report_through_two_mergers(true);
}

/// A key pair from `fanout keygen` in `dir`: (private key file, .pub).
fn keygen(dir: &Path, name: &str) -> (String, String) {
    let key = dir.join(format!("{name}.key"));
    let ok = std::process::Command::new(common::BIN)
        .arg("keygen")
        .arg(&key)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("fanout keygen");
    assert!(ok.success());
    let key = key.display().to_string();
    (key.clone(), format!("{key}.pub"))
}

/// An allow-list file of `pubs` in `dir`.
fn allow_list(dir: &Path, name: &str, pubs: &[&str]) -> String {
    let lines: Vec<String> = pubs
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let path = dir.join(name);
    std::fs::write(&path, lines.concat()).unwrap();
    path.display().to_string()
}

fn report_through_two_mergers(protected: bool) {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let scratch = common::Scratch::new(if protected { "merge-keys" } else { "merge" });
    let dir = scratch.path();
    // Security flags per host (empty: unprotected).
    let mut flags: std::collections::BTreeMap<usize, Vec<String>> = Default::default();
    if protected {
        let key = |h: usize| keygen(dir, &format!("host{h}"));
        let keys: Vec<(String, String)> = (0..7).map(key).collect();
        let sender_pub = keys[0].1.clone();
        let f = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let allow = allow_list(dir, "allow-sender", &[&keys[1].1, &keys[2].1]);
        flags.insert(0, f(&["--key", &keys[0].0, "--allow-keys", &allow]));
        for m in [1, 2] {
            let children: Vec<&str> = (RECEIVERS.iter())
                .filter(|(_, p)| *p == m)
                .map(|(h, _)| keys[*h].1.as_str())
                .collect();
            let allow = allow_list(dir, &format!("allow-m{m}"), &children);
            let mine = ["--key", &keys[m].0, "--sender-key", &sender_pub];
            flags.insert(m, f(&[&mine[..], &["--allow-keys", &allow]].concat()));
        }
        for (h, m) in RECEIVERS {
            let pins = ["--sender-key", &sender_pub, "--merger-key", &keys[m].1];
            flags.insert(h, f(&[&["--key", keys[h].0.as_str()][..], &pins].concat()));
        }
    }
    let flags_of = |h: usize| flags.get(&h).cloned().unwrap_or_default();
    let src = dir.join("payload.bin");
    let mut data = vec![0u8; FILE_BYTES];
    fanout_core::Rng::new(41).fill(&mut data);
    std::fs::File::create(&src)
        .unwrap()
        .write_all(&data)
        .unwrap();
    let lan = LanTopology::new(7).expect("LAN");
    let out = |h: usize| dir.join(format!("got{h}.bin"));
    let mut mergers: Vec<(usize, NsChild)> = [1, 2]
        .iter()
        .map(|&h| {
            let listen = merger_addr(&lan, h);
            let security = flags_of(h);
            let security: Vec<&str> = security.iter().map(String::as_str).collect();
            let c = common::spawn_merger(&lan, h, &listen, SENDER, 2, &security);
            (h, c)
        })
        .collect();
    let mut receivers: Vec<(usize, NsChild)> = RECEIVERS
        .iter()
        .map(|&(h, m)| {
            let r = receiver(&lan, h, &merger_addr(&lan, m), &out(h), &flags_of(h));
            (h, r)
        })
        .collect();
    let g = IpAddr::V4(Ipv4Addr::new(239, 77, 0, 9));
    let joined = lan
        .wait_for_members(g, 4, Duration::from_secs(5))
        .expect("bridge");
    assert_eq!(joined.len(), 4, "{joined:?}");
    let security = flags_of(0);
    let security: Vec<&str> = security.iter().map(String::as_str).collect();
    let mut sender = spawn_group_sender(&lan, 0, &src, GROUP, SENDER, 2, &security);
    let sent = finish(&mut sender, "sender", Duration::from_secs(60));
    let mut receiver_acks = 0;
    for (h, c) in receivers.iter_mut() {
        let r = finish(c, &format!("receiver on host {h}"), Duration::from_secs(30));
        assert_eq!(r["verified"], true, "host {h}");
        let mode = if protected { "keys" } else { "none" };
        assert_eq!(r["protection"], mode, "host {h}");
        assert!(
            std::fs::read(out(*h)).unwrap() == data,
            "host {h}: file differs"
        );
        receiver_acks += r["transport"]["acks_sent"].as_u64().unwrap();
    }
    let mut merged = 0;
    for (h, c) in mergers.iter_mut() {
        let m = finish(c, &format!("merger on host {h}"), Duration::from_secs(40));
        assert_eq!(m["transport"]["children_joined"], 2, "host {h}: {m}");
        if protected {
            assert_eq!(m["protection"], "keys", "host {h}: {m}");
            let refused = m["drops"].as_object().unwrap();
            assert!(refused.get("unauthenticated").is_none(), "host {h}: {m}");
        }
        merged += m["transport"]["acks_out"].as_u64().unwrap();
    }
    assert_eq!(sent["transport"]["members_joined"], 2, "{sent}");
    // Each merger stands for its two receivers (its ROSTER count, carried
    // with its CONNECT); the receivers it listed are marked with it.
    for m in sent["members"].as_array().expect("members") {
        assert_eq!(m["receivers"], 2, "{m}");
        for r in m["subtree"].as_array().into_iter().flatten() {
            let via = r["via"].as_str().unwrap();
            assert!(via.contains(m["addr"].as_str().unwrap()), "{r} under {m}");
        }
    }
    let at_sender = sent["transport"]["acks_received"].as_u64().unwrap();
    eprintln!(
        "{}4 MiB through 2 mergers to 4 receivers: {:.2} s ({:.0} Mbit/s); receivers sent \
         {receiver_acks} ACKs, mergers {merged}, the sender received {at_sender}",
        if protected { "protected: " } else { "" },
        sent["seconds"].as_f64().unwrap(),
        sent["goodput_bps"].as_f64().unwrap() / 1e6,
    );
    assert!(
        at_sender <= merged && 3 * at_sender <= 2 * receiver_acks,
        "sender {at_sender}, mergers {merged}, receivers {receiver_acks}"
    );
}
