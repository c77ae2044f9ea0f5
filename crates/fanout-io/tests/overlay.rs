//! The overlay's runtime over loopback TCP with nodes in job mode: their
//! decodes and checks run on worker threads beside the loop, and every
//! host ends with the object. Only 127.0.0.1 is used; every run is
//! bounded.

use fanout_io::overlay::{run_overlay, ChildSockets, OverlayProgress, Parents};
use fanout_overlay::fountain::{FountainSource, Layout};
use fanout_overlay::hop::hello;
use fanout_overlay::{OverlayNode, OverlaySource, SymbolKey};
use std::net::{SocketAddr, TcpListener};
use std::thread::JoinHandle;
use std::time::Duration;

/// Upper bound on any one run; the runs here take well under a second.
const LIMIT: Duration = Duration::from_secs(30);

fn object(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 13 + i / 83) as u8).collect()
}

fn key() -> SymbolKey {
    SymbolKey::derive(&[8; 32])
}

/// 3 MB in symbols of 8 KiB and blocks of 1 MiB (three blocks).
fn layout(data: &[u8]) -> Layout {
    Layout::new(data.len() as u64, 8192, 1 << 20).unwrap()
}

fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

fn parents(addr: SocketAddr) -> Parents {
    Parents {
        addrs: vec![addr],
        timeout: Duration::from_secs(5),
        hello: hello("").unwrap(),
        own: None,
        buffer: None,
    }
}

/// The source of `data` on a thread, until `children` children left.
fn source(data: &[u8], children: u64) -> (SocketAddr, JoinHandle<OverlayProgress>) {
    let (l, addr) = listener();
    let mut src = OverlaySource::new(
        data.to_vec(),
        "x.bin",
        5,
        (layout(data), 1 << 20),
        key(),
        256 << 10,
    );
    let handle = std::thread::spawn(move || {
        let clock = fanout_io::Clock::new();
        run_overlay(
            &mut src,
            Some((l, &ChildSockets::default())),
            None,
            |_, p| p.children_left >= children || clock.now().as_secs_f64() > LIMIT.as_secs_f64(),
        )
        .unwrap()
    });
    (addr, handle)
}

/// Runs `node` under the parent at `parent` (listening on `l` for
/// `children` children, if given) until it has the object and its
/// children left.
fn run_node(
    node: &mut OverlayNode,
    parent: SocketAddr,
    l: Option<TcpListener>,
    children: u64,
) -> OverlayProgress {
    let clock = fanout_io::Clock::new();
    let sockets = ChildSockets::default();
    run_overlay(
        node,
        l.map(|l| (l, &sockets)),
        Some(&parents(parent)),
        |n, p| {
            (n.object().is_some() && p.children_left >= children)
                || clock.now().as_secs_f64() > LIMIT.as_secs_f64()
        },
    )
    .unwrap()
}

#[test]
fn a_chain_of_nodes_in_job_mode_each_ends_with_the_object() {
    let data = object(3_000_000);
    let (src_addr, src) = source(&data, 1);
    let (l, relay_addr) = listener();
    let relay = std::thread::spawn(move || {
        let mut relay = OverlayNode::new(key(), 1 << 20).with_jobs();
        let p = run_node(&mut relay, src_addr, Some(l), 1);
        (relay.object().map(<[u8]>::to_vec), p)
    });
    let mut leaf = OverlayNode::new(key(), 1 << 20).with_jobs();
    run_node(&mut leaf, relay_addr, None, 0);
    assert_eq!(leaf.object(), Some(&data[..]));
    let (relayed, p) = relay.join().unwrap();
    assert_eq!(relayed.as_deref(), Some(&data[..]));
    assert_eq!(p.children_left, 1);
    src.join().unwrap();
}

/// A node that resumes from a journal missing one symbol in five has
/// real decodes to do before it joins: they run on the workers once the
/// loop starts, and it finishes with its parent's help if need be.
#[test]
fn decode_jobs_a_resumed_journal_left_run_in_the_loop() {
    let data = object(3_000_000);
    let layout = layout(&data);
    let (src_addr, src) = source(&data, 1);
    let manifest = fanout_overlay::hop::Manifest {
        object: 5,
        layout,
        block_bytes: 1 << 20,
        hash: blake3::hash(&data),
        name: "x.bin".into(),
    };
    let mut journal = manifest.seal(&key());
    let mut fountain = FountainSource::new(data.clone(), layout, 5, key());
    let k = data.len().div_ceil(8192);
    for i in 0..k + k / 4 + 20 {
        let frame = fountain.next_frame();
        if i % 5 != 4 {
            journal.extend_from_slice(&frame);
        }
    }
    let mut node = OverlayNode::new(key(), 1 << 20).with_jobs();
    node.resume(&journal).unwrap();
    assert!(node.jobs_out() > 0, "decodes to do");
    assert!(node.object().is_none());
    run_node(&mut node, src_addr, None, 0);
    assert_eq!(node.object(), Some(&data[..]));
    assert_eq!(node.jobs_out(), 0);
    src.join().unwrap();
}

/// A node that decoded, with no child waiting for more, hangs up on its
/// parent at once rather than when it exits: the parent (here the source,
/// whose only child it is) sees it leave while it still runs, and stops
/// filling its socket's buffers.
#[test]
fn a_node_that_decoded_hangs_up_on_its_parent_while_it_runs_on() {
    let data = object(3_000_000);
    let (src_addr, src) = source(&data, 1);
    let mut node = OverlayNode::new(key(), 1 << 20).with_jobs();
    let clock = fanout_io::Clock::new();
    let sockets = ChildSockets::default();
    let (l, _) = listener();
    let p = run_overlay(
        &mut node,
        Some((l, &sockets)),
        Some(&parents(src_addr)),
        |n, _| {
            (n.object().is_some() && src.is_finished())
                || clock.now().as_secs_f64() > LIMIT.as_secs_f64()
        },
    )
    .unwrap();
    assert_eq!(node.object(), Some(&data[..]));
    assert!(p.left_parent && !p.orphaned, "{p:?}");
    let served = src.join().unwrap();
    assert_eq!(served.children_left, 1);
}
