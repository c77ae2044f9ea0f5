//! A source, a relay and two leaves, sans IO: each step every connection
//! takes at most its capacity in bytes, as a socket's buffer would. Every
//! leaf decodes the object; a slow leaf does not slow its fast sibling;
//! forged bytes injected at the relay never reach a decoder.

use fanout_overlay::fountain::Layout;
use fanout_overlay::hop::HELLO;
use fanout_overlay::{ChildId, OverlayNode, OverlaySource, SymbolKey};

fn object(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 13 + i / 97) as u8).collect()
}

/// The source of `data` named `name`, object id `object`, in symbols of
/// 8 KiB and blocks of 1 MiB, through a buffer of 256 KiB; and its layout.
fn source_of(data: &[u8], name: &str, object: u64, key: &SymbolKey) -> (OverlaySource, Layout) {
    let layout = Layout::new(data.len() as u64, 8192, 1 << 20).unwrap();
    let src = OverlaySource::new(
        data.to_vec(),
        name,
        object,
        (layout, 1 << 20),
        key.clone(),
        256 << 10,
    );
    (src, layout)
}

/// Up to `room` bytes from the source to child `id`.
fn from_source(src: &mut OverlaySource, id: ChildId, mut room: usize) -> Vec<u8> {
    let mut out = Vec::new();
    while room > 0 {
        let Some(bytes) = src.writable(id) else { break };
        let n = bytes.len().min(room);
        out.extend_from_slice(&bytes[..n]);
        src.children().wrote(id, n);
        room -= n;
    }
    out
}

/// Up to `room` bytes from a relay node to child `id` (relayed frames,
/// or its own once it lost its parent after decoding).
fn from_node(node: &mut OverlayNode, id: ChildId, mut room: usize) -> Vec<u8> {
    let mut out = Vec::new();
    while room > 0 {
        let Some(bytes) = node.writable(id) else {
            break;
        };
        let n = bytes.len().min(room);
        out.extend_from_slice(&bytes[..n]);
        node.children().wrote(id, n);
        room -= n;
    }
    out
}

struct Run {
    /// Steps until each leaf decoded (fast, slow).
    done_at: (Option<usize>, Option<usize>),
    /// Bytes each leaf read per object byte.
    bytes_per_byte: (f64, f64),
    /// Frames the relay refused (forgeries).
    refused: u64,
}

/// The chain source -> relay -> {fast, slow} carrying 2 MB in symbols of
/// 8 KiB (two blocks); per step the source sends 40 000 bytes, the fast
/// leaf takes 20 000, the slow one `slow_room`;
/// `forge` injects a corrupted copy of a frame into the relay's stream
/// every so often.
fn run(slow_room: usize, forge: bool) -> Run {
    let data = object(2_000_000);
    let key = SymbolKey::derive(&[4; 32]);
    let (mut src, layout) = source_of(&data, "x.bin", 5, &key);
    assert_eq!(layout.blocks(), 2);
    let mut relay = OverlayNode::new(key.clone(), 256 << 10);
    let (mut fast, mut slow) = (
        OverlayNode::new(key.clone(), 256 << 10),
        OverlayNode::new(key, 256 << 10),
    );
    let to_relay = src.children().add();
    src.children().on_bytes(to_relay, &HELLO).unwrap();
    let (to_fast, to_slow) = (relay.children().add(), relay.children().add());
    relay.children().on_bytes(to_fast, &HELLO).unwrap();
    relay.children().on_bytes(to_slow, &HELLO).unwrap();
    let mut done_at = (None, None);
    let mut read = (0, 0);
    for step in 0..2000 {
        let mut bytes = from_source(&mut src, to_relay, 40_000);
        if forge && step % 3 == 1 && bytes.len() > 2000 {
            // A rogue on the path flips a byte in the middle of the stream.
            bytes[1500] ^= 0xff;
        }
        relay.on_upstream(&bytes).unwrap();
        fast.on_upstream(&from_node(&mut relay, to_fast, 20_000))
            .unwrap();
        slow.on_upstream(&from_node(&mut relay, to_slow, slow_room))
            .unwrap();
        // A leaf that decoded hangs up: its bytes so far are what it cost.
        if done_at.0.is_none() && fast.object().is_some() {
            done_at.0 = Some(step);
            read.0 = fast.bytes_to_decode().unwrap();
        }
        if done_at.1.is_none() && slow.object().is_some() {
            done_at.1 = Some(step);
            read.1 = slow.bytes_to_decode().unwrap();
        }
        if done_at.0.is_some() && done_at.1.is_some() {
            break;
        }
    }
    for leaf in [&fast, &slow] {
        if let Some(o) = leaf.object() {
            assert_eq!(o, &data[..]);
            assert_eq!(leaf.manifest().unwrap().name, "x.bin");
        }
    }
    let per = |n: u64| n as f64 / data.len() as f64;
    Run {
        done_at,
        bytes_per_byte: (per(read.0), per(read.1)),
        refused: relay.counts().refused,
    }
}

#[test]
fn a_slow_leaf_never_slows_its_fast_sibling_and_both_decode() {
    let alone = run(usize::MAX, false);
    let with_slow = run(2_000, false);
    let (fast_alone, fast_with) = (alone.done_at.0.unwrap(), with_slow.done_at.0.unwrap());
    eprintln!(
        "steps to decode (fast, slow): alone {:?}, with the slow leaf {:?}; \
         bytes read per object byte {:?}, {:?}",
        alone.done_at, with_slow.done_at, alone.bytes_per_byte, with_slow.bytes_per_byte
    );
    // 2 MB at 20 kB a step: about 100 steps.
    assert!(fast_alone <= 103, "{fast_alone}");
    assert_eq!(fast_with, fast_alone, "the slow sibling changed nothing");
    // The slow leaf takes about ten times as long, and finishes.
    let slow = with_slow.done_at.1.expect("the slow leaf decodes");
    assert!(slow > 8 * fast_with && slow < 12 * fast_with, "{slow}");
    // Frames of 8 KiB symbols carry 44 bytes more (0.5%), the last symbol
    // is padded, RaptorQ needs K or K + 1 or 2 symbols a block, and a leaf
    // that skips frames gets its blocks unevenly.
    let (f, s) = with_slow.bytes_per_byte;
    assert!(alone.bytes_per_byte.1 < 1.01, "{:?}", alone.bytes_per_byte);
    assert!(f < 1.025, "{f}");
    assert!(s < 1.04, "{s}");
}

#[test]
fn forged_bytes_at_a_relay_are_dropped_before_any_decoder() {
    let r = run(10_000, true);
    assert!(r.refused > 10, "{}", r.refused);
    // Both leaves still decode (asserted against the data in `run`).
    assert!(r.done_at.0.is_some() && r.done_at.1.is_some());
}

#[test]
fn a_leaf_that_loses_its_parent_finishes_from_another_with_what_it_held() {
    let data = object(1_000_000);
    let key = SymbolKey::derive(&[6; 32]);
    let layout = Layout::new(data.len() as u64, 4096, 1 << 20).unwrap();
    let mut src = OverlaySource::new(
        data.clone(),
        "y.bin",
        8,
        (layout, 1 << 20),
        key.clone(),
        256 << 10,
    );
    let mut leaf = OverlayNode::new(key.clone(), 64 << 10);
    // The first parent serves 40% of the file, then goes away.
    let first = src.children().add();
    src.children().on_bytes(first, &HELLO).unwrap();
    leaf.on_upstream(&from_source(&mut src, first, 400_000))
        .unwrap();
    src.children().remove(first);
    assert!(leaf.object().is_none());
    // The second parent starts with the manifest again; what the leaf held
    // still counts.
    leaf.rejoin();
    let second = src.children().add();
    src.children().on_bytes(second, &HELLO).unwrap();
    while leaf.object().is_none() {
        leaf.on_upstream(&from_source(&mut src, second, 10_000))
            .unwrap();
    }
    assert_eq!(leaf.object(), Some(&data[..]));
    let per_byte = leaf.bytes_to_decode().unwrap() as f64 / data.len() as f64;
    assert!(per_byte < 1.02, "{per_byte}");
    // A parent of another object is refused.
    let other = object(5000);
    let l2 = Layout::new(5000, 4096, 1 << 20).unwrap();
    let mut wrong = OverlaySource::new(other.clone(), "z.bin", 9, (l2, 1 << 20), key, 64 << 10);
    let c = wrong.children().add();
    wrong.children().on_bytes(c, &HELLO).unwrap();
    leaf.rejoin();
    assert_eq!(
        leaf.on_upstream(&from_source(&mut wrong, c, 100_000)),
        Err(fanout_overlay::NodeError::OtherObject)
    );
}

#[test]
fn a_restarted_leaf_replays_its_journal_and_reads_only_what_it_lacks() {
    let data = object(1_000_000);
    let key = SymbolKey::derive(&[7; 32]);
    let layout = Layout::new(data.len() as u64, 4096, 1 << 20).unwrap();
    let mut src = OverlaySource::new(
        data.clone(),
        "j.bin",
        4,
        (layout, 1 << 20),
        key.clone(),
        256 << 10,
    );
    // The first run reads half the file, keeping a journal, and dies.
    let mut first = OverlayNode::new(key.clone(), 64 << 10).journaling();
    let c = src.children().add();
    src.children().on_bytes(c, &HELLO).unwrap();
    first
        .on_upstream(&from_source(&mut src, c, 500_000))
        .unwrap();
    src.children().remove(c);
    let mut journal = first.drain_journal(<[u8]>::to_vec);
    assert!(journal.len() > 450_000, "{}", journal.len());
    assert!(first.drain_journal(<[u8]>::is_empty), "drained");
    // A journal cut mid-frame (the run died writing it) reads to its last
    // whole frame.
    journal.truncate(journal.len() - 100);
    // The second run replays it, then reads from the source.
    let mut second = OverlayNode::new(key, 64 << 10).journaling();
    second.resume(&journal).unwrap();
    assert_eq!(second.upstream_bytes(), 0);
    let c = src.children().add();
    src.children().on_bytes(c, &HELLO).unwrap();
    while second.object().is_none() {
        second
            .on_upstream(&from_source(&mut src, c, 10_000))
            .unwrap();
    }
    assert_eq!(second.object(), Some(&data[..]));
    let read = second.bytes_to_decode().unwrap() as f64 / data.len() as f64;
    assert!((0.45..0.6).contains(&read), "{read}");
}

#[test]
fn a_relay_whose_parent_goes_after_it_decoded_feeds_its_children_its_own_symbols() {
    let data = object(300_000);
    let key = SymbolKey::derive(&[8; 32]);
    let layout = Layout::new(data.len() as u64, 2048, 1 << 20).unwrap();
    let mut src = OverlaySource::new(
        data.clone(),
        "o.bin",
        6,
        (layout, 1 << 20),
        key.clone(),
        64 << 10,
    );
    let mut relay = OverlayNode::new(key.clone(), 64 << 10);
    let c = src.children().add();
    src.children().on_bytes(c, &HELLO).unwrap();
    while relay.object().is_none() {
        relay
            .on_upstream(&from_source(&mut src, c, 20_000))
            .unwrap();
    }
    assert!(!relay.needs_parent());
    // A child joins once the relay decoded; the parent goes away.
    let mut leaf = OverlayNode::new(key, 64 << 10);
    let to_leaf = relay.children().add();
    relay.children().on_bytes(to_leaf, &HELLO).unwrap();
    relay.parent_gone();
    let mut steps = 0;
    while leaf.object().is_none() {
        leaf.on_upstream(&from_node(&mut relay, to_leaf, 20_000))
            .unwrap();
        steps += 1;
        assert!(steps < 100, "the leaf never decoded");
    }
    assert_eq!(leaf.object(), Some(&data[..]));
    let per_byte = leaf.bytes_to_decode().unwrap() as f64 / data.len() as f64;
    assert!(per_byte < 1.05, "{per_byte}");
}

/// A relay that decoded gives its slow child the source symbols the
/// child was never given from its own copy, and stops reading its parent:
/// the source sends about one copy, not one for as long as the slowest
/// host below is at it.
#[test]
fn a_relay_that_decoded_finishes_its_slow_child_itself_and_stops_reading_its_parent() {
    let data = object(2_000_000);
    let key = SymbolKey::derive(&[6; 32]);
    let (mut src, _) = source_of(&data, "s.bin", 9, &key);
    let mut relay = OverlayNode::new(key.clone(), 256 << 10);
    let mut leaf = OverlayNode::new(key, 256 << 10);
    let c = src.children().add();
    src.children().on_bytes(c, &HELLO).unwrap();
    let to_leaf = relay.children().add();
    relay.children().on_bytes(to_leaf, &HELLO).unwrap();
    let (mut steps, mut decoded_at) = (0, None);
    while leaf.object().is_none() {
        // The relay reads its parent only when it wants to, as the
        // runtime does; the leaf takes a tenth of the relay's rate.
        if relay.wants_upstream() {
            relay
                .on_upstream(&from_source(&mut src, c, 40_000))
                .unwrap();
        }
        if decoded_at.is_none() && relay.object().is_some() {
            decoded_at = Some((steps, leaf.upstream_bytes(), relay.upstream_bytes()));
        }
        leaf.on_upstream(&from_node(&mut relay, to_leaf, 4_000))
            .unwrap();
        steps += 1;
        assert!(steps < 2_000, "the leaf never decoded");
    }
    assert_eq!(leaf.object(), Some(&data[..]));
    let (at, leaf_then, relay_then) = decoded_at.unwrap();
    let per = |n: u64| n as f64 / data.len() as f64;
    eprintln!(
        "relay decoded at step {at} (leaf then at {:.3} of the object), leaf at step {steps}; \
         source sent {:.3}, leaf read {:.3} per object byte",
        per(leaf_then),
        per(relay.upstream_bytes()),
        per(leaf.bytes_to_decode().unwrap())
    );
    // The relay read about one copy (frames of 8 KiB symbols carry 0.5%
    // more, the last symbol is padded, and its last read of 40 kB is 2% of
    // the object) and nothing once it decoded.
    assert!(per(relay_then) < 1.03, "{}", per(relay_then));
    assert_eq!(relay.upstream_bytes(), relay_then);
    // The leaf, done, hangs up: nobody below waits.
    relay.children().remove(to_leaf);
    assert!(!relay.wants_upstream());
    // The leaf needed no more than a copy and its frames' overhead, at
    // its own pace throughout: 2 MB at 4 kB a step.
    assert!(per(leaf.bytes_to_decode().unwrap()) < 1.02);
    assert!(steps < 520, "{steps}");
}

/// A leaf whose parent goes mid-transfer moves to a relay that has the
/// file. It says what it holds (its have), so the new parent gives it only
/// what it lacks: its bytes after the move are the remainder and the
/// frames' overhead. Without the have, the new parent gives every source
/// symbol the leaf was not given by it, most of them held already.
#[test]
fn a_leaf_that_moves_to_a_parent_with_the_file_reads_only_what_it_lacks() {
    let data = object(2_000_000);
    let key = SymbolKey::derive(&[5; 32]);
    let source = || source_of(&data, "m.bin", 3, &key).0;
    let frame = source().manifest().layout.frame_len() as f64;
    let after_move = |tell: bool| {
        let mut src = source();
        // The relay decodes the whole object from the source first.
        let mut relay = OverlayNode::new(key.clone(), 256 << 10);
        let c = src.children().add();
        src.children().on_bytes(c, &HELLO).unwrap();
        while relay.object().is_none() {
            relay
                .on_upstream(&from_source(&mut src, c, 40_000))
                .unwrap();
        }
        // The leaf gets 40% from a parent of its own, which then goes.
        let mut first = source();
        let mut leaf = OverlayNode::new(key.clone(), 256 << 10);
        let l = first.children().add();
        first.children().on_bytes(l, &HELLO).unwrap();
        while leaf.upstream_bytes() < 800_000 {
            leaf.on_upstream(&from_source(&mut first, l, 20_000))
                .unwrap();
        }
        let before = leaf.upstream_bytes();
        leaf.rejoin();
        let id = relay.children().add();
        relay.children().on_bytes(id, &HELLO).unwrap();
        if tell {
            relay.children().on_bytes(id, &leaf.have()).unwrap();
        }
        let mut steps = 0;
        while leaf.object().is_none() {
            leaf.on_upstream(&from_node(&mut relay, id, 20_000))
                .unwrap();
            steps += 1;
            assert!(steps < 1_000, "the leaf never decoded");
        }
        assert_eq!(leaf.object(), Some(&data[..]));
        // The manifest record and the frames read before, in symbols.
        let held = (before as f64 / frame).floor() * 8192.0;
        let remainder = data.len() as f64 - held;
        (leaf.upstream_bytes() - before) as f64 / remainder
    };
    let (told, untold) = (after_move(true), after_move(false));
    eprintln!(
        "bytes after the move per byte lacking: with the have {told:.3}, without {untold:.3}"
    );
    // Frames carry 0.5% more; the last symbol is padded; and the new
    // parent's 20 kB steps overshoot by at most a step.
    assert!(told < 1.02 + 20_000.0 / 1.2e6, "{told}");
    assert!(untold > 1.3, "{untold}");
}

/// A relay that only relays: its leaf decodes the object through it,
/// corrupted frames stop at the relay (counted), it decodes nothing, and
/// it reads its parent only while its child waits.
#[test]
fn a_relay_only_host_forwards_checked_frames_and_decodes_nothing() {
    let data = object(1_000_000);
    let key = SymbolKey::derive(&[6; 32]);
    let (mut src, _) = source_of(&data, "y.bin", 9, &key);
    let mut relay = OverlayNode::relay_only(key.clone(), 256 << 10);
    let mut leaf = OverlayNode::new(key, 256 << 10);
    let to_relay = src.children().add();
    src.children().on_bytes(to_relay, &HELLO).unwrap();
    // No child yet: the relay wants the manifest only.
    assert!(relay.wants_upstream());
    relay
        .on_upstream(&from_source(&mut src, to_relay, 4096))
        .unwrap();
    assert!(relay.manifest().is_some());
    assert!(!relay.wants_upstream(), "no child waits");
    let to_leaf = relay.children().add();
    relay.children().on_bytes(to_leaf, &HELLO).unwrap();
    for step in 0..200 {
        let mut bytes = if relay.wants_upstream() {
            from_source(&mut src, to_relay, 40_000)
        } else {
            Vec::new()
        };
        if step % 4 == 1 && bytes.len() > 2000 {
            bytes[1500] ^= 0xff;
        }
        relay.on_upstream(&bytes).unwrap();
        leaf.on_upstream(&from_node(&mut relay, to_leaf, 30_000))
            .unwrap();
        if leaf.object().is_some() {
            break;
        }
    }
    assert_eq!(leaf.object(), Some(&data[..]));
    assert!(relay.object().is_none() && relay.needs_parent());
    assert!(relay.counts().refused > 0, "{:?}", relay.counts());
    assert_eq!(leaf.counts().refused, 0, "{:?}", leaf.counts());
}
