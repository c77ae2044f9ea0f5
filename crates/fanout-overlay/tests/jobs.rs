//! A node in job mode, sans IO: its decodes and its final check are
//! handed out as jobs, and while they are out it relays every frame to
//! its child as it would without them; results given back complete and
//! verify the object; a wrong hash is still refused.

use fanout_overlay::fountain::{FountainSource, Layout};
use fanout_overlay::hop::{Manifest, HELLO};
use fanout_overlay::{ChildId, Job, JobKind, NodeError, OverlayNode, SymbolKey};

fn object(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 11 + i / 89) as u8).collect()
}

/// 2 MB in symbols of 8 KiB and blocks of 1 MiB (two blocks).
fn layout(data: &[u8]) -> Layout {
    Layout::new(data.len() as u64, 8192, 1 << 20).unwrap()
}

/// The manifest of `data` as object 5, with BLAKE3 `hash`.
fn manifest(data: &[u8], hash: blake3::Hash) -> Manifest {
    Manifest {
        object: 5,
        layout: layout(data),
        block_bytes: 1 << 20,
        hash,
        name: "x.bin".into(),
    }
}

/// Everything `node` has for child `id` now.
fn from_node(node: &mut OverlayNode, id: ChildId) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(bytes) = node.writable(id) {
        let n = bytes.len();
        out.extend_from_slice(bytes);
        node.children().wrote(id, n);
    }
    out
}

/// Feeds `relay` (in job mode, with one child) the manifest and then the
/// source's frames, one in five lost, until no block collects any more;
/// holds its jobs back meanwhile. Returns the relay, its child's id, the
/// child's bytes so far, the jobs held, and the source.
fn relay_with_jobs_out(
    data: &[u8],
    hash: blake3::Hash,
) -> (OverlayNode, ChildId, Vec<u8>, Vec<Job>, FountainSource) {
    let key = SymbolKey::derive(&[4; 32]);
    let m = manifest(data, hash);
    let mut source = FountainSource::new(data.to_vec(), m.layout, m.object, key.clone());
    let mut relay = OverlayNode::new(key.clone(), 1 << 20).with_jobs();
    let child = relay.children().add();
    relay.children().on_bytes(child, &HELLO).unwrap();
    relay.on_upstream(&m.seal(&key)).unwrap();
    let mut to_child = from_node(&mut relay, child);
    let mut jobs = Vec::new();
    let mut sent = 0u32;
    while jobs.len() < 2 {
        let frame = source.next_frame();
        sent += 1;
        if sent.is_multiple_of(5) {
            continue;
        }
        relay.on_upstream(&frame).unwrap();
        to_child.extend(from_node(&mut relay, child));
        jobs.extend(std::iter::from_fn(|| relay.take_job()));
        assert!(sent < 1000);
    }
    (relay, child, to_child, jobs, source)
}

#[test]
fn a_node_in_job_mode_relays_while_its_decodes_are_out_and_verifies_when_they_come_back() {
    let data = object(2_000_000);
    let (mut relay, child, mut to_child, jobs, mut source) =
        relay_with_jobs_out(&data, blake3::hash(&data));
    assert!(jobs
        .iter()
        .all(|j| matches!(j.kind(), JobKind::Decode { .. })));
    assert_eq!(relay.jobs_out(), 2);
    assert!(relay.object().is_none() && relay.needs_parent());
    // The decodes are out: every frame that comes is still relayed.
    let frame_len = relay.manifest().unwrap().layout.frame_len();
    let before = to_child.len();
    for _ in 0..20 {
        relay.on_upstream(&source.next_frame()).unwrap();
        let out = from_node(&mut relay, child);
        assert_eq!(out.len(), frame_len, "each frame relayed as it came");
        to_child.extend(out);
    }
    assert_eq!(to_child.len(), before + 20 * frame_len);
    // Results come back (on another thread, as a runtime would run them).
    let done: Vec<_> = std::thread::spawn(move || jobs.into_iter().map(Job::run).collect())
        .join()
        .unwrap();
    for d in done {
        relay.on_job_done(d).unwrap();
    }
    assert!(relay.object().is_none(), "decoded, not yet checked");
    let check = relay.take_job().expect("the check");
    assert!(matches!(check.kind(), JobKind::Verify { .. }));
    relay.on_job_done(check.run()).unwrap();
    assert_eq!(relay.object(), Some(&data[..]));
    assert_eq!(relay.jobs_out(), 0);
    let to_decode = relay.bytes_to_decode().expect("decoded");
    assert!(
        to_decode < relay.upstream_bytes(),
        "the frames after the last needed one do not count: {to_decode}"
    );
    // Its child, decoding inline from what was relayed, has it too.
    let mut leaf = OverlayNode::new(SymbolKey::derive(&[4; 32]), 1 << 20);
    leaf.on_upstream(&to_child).unwrap();
    assert_eq!(leaf.object(), Some(&data[..]));
}

#[test]
fn a_node_in_job_mode_refuses_an_object_whose_hash_is_not_the_manifests() {
    let data = object(2_000_000);
    let (mut relay, _, _, jobs, _) = relay_with_jobs_out(&data, blake3::hash(b"another"));
    for job in jobs {
        relay.on_job_done(job.run()).unwrap();
    }
    let check = relay.take_job().expect("the check");
    assert_eq!(relay.on_job_done(check.run()), Err(NodeError::Corrupt));
    assert_eq!(relay.object(), None);
}

/// A node whose every block is decoding (or decoded) reads its parent
/// only for a child waiting for frames while its jobs are out; a decode
/// that fails sets it reading for itself again.
#[test]
fn a_node_waiting_for_its_jobs_reads_its_parent_only_for_its_children() {
    let data = object(2_000_000);
    let (mut relay, child, _, jobs, _) = relay_with_jobs_out(&data, blake3::hash(&data));
    // The child had every frame: it waits for more.
    assert!(relay.wants_upstream());
    relay.children().remove(child);
    assert!(!relay.wants_upstream(), "nothing to read for itself");
    for job in jobs {
        relay.on_job_done(job.run()).unwrap();
    }
    let check = relay.take_job().unwrap();
    relay.on_job_done(check.run()).unwrap();
    assert!(relay.object().is_some() && !relay.wants_upstream());
    // A node still collecting reads.
    let mut fresh = OverlayNode::new(SymbolKey::derive(&[4; 32]), 1 << 20).with_jobs();
    assert!(fresh.wants_upstream());
}
