//! Guards clean up: namespaces, links and processes started inside are gone
//! after drop, also when the code holding them panics.

use fanout_netns::{
    list_namespaces, require_netns, LanConfig, LanTopology, LinkDirection, Netns, RateLimit,
    HOST_IF, NAME_PREFIX,
};
use std::io::{BufRead, BufReader};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

/// Whether `pid` is a live process (zombies count as dead: they hold no namespace).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

fn assert_gone(names: &[String]) {
    let left = list_namespaces().unwrap();
    for name in names {
        assert!(!left.contains(name), "{name} survived teardown: {left:?}");
    }
}

#[test]
fn netns_guard_runs_code_inside_and_deletes_itself() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let ns = Netns::new().unwrap();
    let name = ns.name().to_owned();
    assert!(name.starts_with(&format!("{NAME_PREFIX}{}-", std::process::id())));
    assert!(list_namespaces().unwrap().contains(&name));

    // A process inside sees only lo, and it is up.
    let out = ns.exec("ip").args(["-o", "link", "show"]).output().unwrap();
    assert!(out.status.success());
    let links = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(links.lines().count(), 1, "{links}");
    assert!(links.contains("lo:") && links.contains(",UP"), "{links}");

    // So does a thread inside, and loopback works there.
    let devs = ns
        .run_in(|| std::fs::read_to_string("/proc/thread-self/net/dev").unwrap())
        .unwrap();
    assert!(devs.contains("lo:") && !devs.contains("eth"), "{devs}");
    let echoed = ns
        .run_in(|| {
            let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            a.send_to(b"ping", b.local_addr().unwrap()).unwrap();
            let mut buf = [0u8; 8];
            let (n, _) = b.recv_from(&mut buf).unwrap();
            buf[..n].to_vec()
        })
        .unwrap();
    assert_eq!(echoed, b"ping");
    let from_thread = ns.spawn_in(|| 7).unwrap().join().unwrap();
    assert_eq!(from_thread, 7);
    assert!(ns.link_stats("lo").is_ok());

    // A panic inside run_in reaches the caller.
    let caught = catch_unwind(AssertUnwindSafe(|| ns.run_in(|| panic!("inside"))));
    assert!(caught.is_err());

    // Commands not built by exec() are refused by spawn().
    assert!(ns.spawn(Command::new("true")).is_err());

    drop(ns);
    assert_gone(&[name]);
}

#[test]
fn topology_is_torn_down_when_a_test_panics() {
    if let Some(reason) = require_netns() {
        eprintln!("skipped: {reason}");
        return;
    }
    let root_links_before = Command::new("ip")
        .args(["-o", "link"])
        .output()
        .unwrap()
        .stdout;
    let names = Mutex::new(Vec::<String>::new());
    let pids = Mutex::new(Vec::<u32>::new());
    // Untracked: started with exec().spawn(), not Netns::spawn.
    let untracked = Mutex::new(None::<Child>);
    let result = catch_unwind(AssertUnwindSafe(|| {
        let config = LanConfig {
            ipv6: true,
            rate_limit: Some(RateLimit::mbit(50)),
            ..LanConfig::default()
        };
        let lan = LanTopology::with_config(3, &config).unwrap();
        names.lock().unwrap().extend(lan.namespace_names());

        // What the config asked for is there.
        let h1 = lan.host(1);
        let addrs = h1
            .netns()
            .ip(&["-o", "addr", "show", "dev", HOST_IF])
            .unwrap();
        assert!(
            addrs.contains("10.77.0.2/24") && addrs.contains("fd77::2/64"),
            "{addrs}"
        );
        let qdisc = Command::new("tc")
            .args(["-n", h1.netns().name(), "qdisc", "show", "dev", HOST_IF])
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&qdisc.stdout).contains("tbf"));

        // Shaping can be removed again (twice: the second finds nothing to remove).
        for _ in 0..2 {
            lan.set_rate_limit(0, LinkDirection::Both, None).unwrap();
        }
        let qdisc = Command::new("tc")
            .args([
                "-n",
                lan.switch().name(),
                "qdisc",
                "show",
                "dev",
                lan.host(0).switch_port(),
            ])
            .output()
            .unwrap();
        assert!(!String::from_utf8_lossy(&qdisc.stdout).contains("tbf"));

        if lan.offloads_disabled() {
            let features = h1
                .netns()
                .exec("ethtool")
                .args(["-k", HOST_IF])
                .output()
                .unwrap();
            let features = String::from_utf8_lossy(&features.stdout).into_owned();
            for feature in [
                "tcp-segmentation-offload: off",
                "generic-segmentation-offload: off",
                "generic-receive-offload: off",
            ] {
                assert!(features.contains(feature), "{feature}: {features}");
            }
        } else {
            eprintln!("offloads stay on: no ethtool");
        }

        // A tracked child whose guard is leaked, and an untracked grandchild.
        let mut sleeper = h1.netns().exec("sleep");
        sleeper.arg("30");
        let tracked = h1.netns().spawn(sleeper).unwrap();
        pids.lock().unwrap().push(tracked.pid());
        assert_eq!(h1.netns().spawned_pids(), [tracked.pid()]);
        std::mem::forget(tracked);
        let mut shell = lan
            .host(2)
            .netns()
            .exec("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        pids.lock().unwrap().push(shell.id());
        let mut line = String::new();
        BufReader::new(shell.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let grandchild: u32 = line.trim().parse().unwrap();
        *untracked.lock().unwrap() = Some(shell);
        pids.lock().unwrap().push(grandchild);
        assert!(lan.host(2).netns().pids().unwrap().contains(&grandchild));
        for &pid in pids.lock().unwrap().iter() {
            assert!(alive(pid), "pid {pid} should run");
        }
        panic!("simulated test failure with the LAN up");
    }));
    assert!(result.is_err(), "the closure panics");

    let names = names.into_inner().unwrap();
    assert_eq!(names.len(), 4, "switch + 3 hosts: {names:?}");
    assert_gone(&names);
    for pid in pids.into_inner().unwrap() {
        assert!(!alive(pid), "pid {pid} survived teardown");
    }
    // Reap the killed shell (the leaked `sleep` stays a zombie until exit).
    if let Some(mut shell) = untracked.into_inner().unwrap() {
        assert!(!shell.wait().unwrap().success(), "shell was killed");
    }
    let root_links_after = Command::new("ip")
        .args(["-o", "link"])
        .output()
        .unwrap()
        .stdout;
    assert_eq!(
        String::from_utf8_lossy(&root_links_after),
        String::from_utf8_lossy(&root_links_before),
        "root namespace links changed"
    );
}
