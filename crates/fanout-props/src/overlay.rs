//! An overlay host (`fanout_overlay`) on hostile bytes from both sides:
//! a child that sends anything after (or instead of) its hello and have,
//! and a parent whose stream is arbitrary bytes behind a genuine sealed
//! manifest. Nothing panics, a child's kept have never exceeds its bound,
//! no unsealed frame reaches the decoder, and what a child is given is
//! whole frames of the object's length.

use fanout_overlay::children::MAX_HAVE_BYTES;
use fanout_overlay::fountain::Layout;
use fanout_overlay::hop::{Manifest, HELLO};
use fanout_overlay::sent::{SentSource, HAVE_HEADER};
use fanout_overlay::{OverlayNode, SymbolKey};

/// The key the hostile peers do not hold.
fn key() -> SymbolKey {
    SymbolKey::new([0x5a; 32])
}

/// A small object's manifest (3 blocks of 1 KiB symbols).
fn manifest() -> Manifest {
    let layout = Layout::new(40_000, 1024, 16 << 10).expect("a layout");
    Manifest {
        object: 7,
        layout,
        block_bytes: 16 << 10,
        hash: blake3::hash(b"x"),
        name: "o.bin".into(),
    }
}

/// `data`'s first byte picks the pieces' size and what comes before the
/// rest: nothing, a genuine hello, or a genuine hello and the header of a
/// have of the object's length (so the rest is its body). The rest is,
/// in turn, a hostile child's bytes to a node that knows the object, and a
/// hostile parent's stream after the genuine manifest.
pub fn check_overlay_input(data: &[u8]) {
    let Some((&cfg, rest)) = data.split_first() else {
        return;
    };
    let piece = usize::from(cfg % 61) + 1;
    let m = manifest();
    let frame_len = m.layout.frame_len();
    let mut child = Vec::new();
    if cfg >> 6 >= 1 {
        child.extend_from_slice(&HELLO);
    }
    if cfg >> 6 >= 2 {
        let k: Vec<u32> = m.layout.block_spans().iter().map(|&(_, k)| k).collect();
        let have = SentSource::new(&k).have_message();
        child.extend_from_slice(&have[..HAVE_HEADER]);
    }
    child.extend_from_slice(rest);

    // A node that has the manifest, with one hostile child.
    let mut node = OverlayNode::new(key(), 64 << 10);
    node.on_upstream(&m.seal(&key())).expect("its own manifest");
    let id = node.children().add();
    let mut alive = true;
    for chunk in child.chunks(piece) {
        if !alive {
            break;
        }
        alive = node.children().on_bytes(id, chunk).is_ok();
        // Whatever it sent, what it is given is the manifest record, then
        // whole frames.
        let mut given = 0usize;
        while let Some(bytes) = node.writable(id) {
            let n = bytes.len().min(frame_len);
            given += n;
            node.children().wrote(id, n);
            if given > 4 * frame_len {
                break;
            }
        }
    }
    assert!(node.children().kept_have_bytes(id) <= MAX_HAVE_BYTES);

    // A node under a hostile parent: a genuine manifest, then anything.
    let mut node = OverlayNode::new(key(), 64 << 10);
    let mut stream = m.seal(&key());
    stream.extend_from_slice(rest);
    for chunk in stream.chunks(piece) {
        if node.on_upstream(chunk).is_err() {
            break;
        }
    }
    let c = node.counts();
    assert_eq!(c.accepted, 0, "no unsealed frame reaches the decoder");
    assert!(node.object().is_none());
}
