#![allow(clippy::single_range_in_vec_init, clippy::needless_range_loop)] // one-range lists; payload i at offset 100·i
use super::*;
use crate::wire::{decode_frames, Frame, WireTimestamp};

fn at(ms: u64) -> Instant {
    Instant::ZERO + Duration::from_millis(ms)
}

/// The frames of a listed datagram: one DATA frame.
fn frames(offset: u64, payload: &[u8], fin: bool) -> Vec<u8> {
    let mut out = Vec::new();
    Frame::Data(DataFrame {
        offset,
        timestamp: WireTimestamp(0),
        fin,
        message_end: false,
        payload,
    })
    .encode(&mut out);
    out
}

/// What `v` makes of the datagram of `frames` at `now`.
fn offer(v: &mut SegmentVerifier, now: Instant, frames: &[u8], delivered: u64) -> Listed {
    let Some(Ok(Frame::Data(d))) = decode_frames(frames).next() else {
        panic!("not a DATA frame");
    };
    v.on_data(now, &d, frames, delivered, &nothing)
}

/// A receiver that took nothing otherwise.
fn nothing(_: Range<u64>, _: &mut Vec<u8>) -> bool {
    false
}

/// Whether it was held as a segment of a run.
fn held_in_run(l: Listed) -> bool {
    matches!(l, Listed::HeldInRun { .. })
}

/// Offsets of what a release gave, in order.
fn offsets(released: &Listed) -> Vec<u64> {
    match released {
        Listed::Released(r) => r.iter().map(|(o, _, _)| *o).collect(),
        other => panic!("not released: {other:?}"),
    }
}

/// A list of `n` single segments of 100 bytes from `start`, the last
/// ending the stream if `fin`.
fn list(signer: &Signer, start: u64, n: u64, fin: bool) -> (SegmentList, Vec<Vec<u8>>) {
    let payloads: Vec<Vec<u8>> = (0..n).map(|i| vec![(start / 100 + i) as u8; 100]).collect();
    let entries = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let o = start + 100 * i as u64;
            ListEntry::single(100, segment_hash(o, fin && i as u64 == n - 1, false, p))
        })
        .collect();
    (SegmentList::sign(signer, 42, start, entries), payloads)
}

/// A list of one run of `n` segments of 100 bytes from `start`.
fn run_list(signer: &Signer, start: u64, n: u64) -> (SegmentList, Vec<Vec<u8>>) {
    let payloads: Vec<Vec<u8>> = (0..n).map(|i| vec![(start / 7 + i) as u8; 100]).collect();
    let all: Vec<u8> = payloads.concat();
    let entry = ListEntry {
        len: 100,
        count: n,
        hash: run_hash(start, 100, n, &[&all]),
    };
    (SegmentList::sign(signer, 42, start, vec![entry]), payloads)
}

/// A verifier that knows the run of `n` segments from `start` (signed by
/// the returned signer, whose list is returned too), and the run's
/// payloads.
fn knowing_run(start: u64, n: u64) -> (Signer, SegmentVerifier, SegmentList, Vec<Vec<u8>>) {
    let signer = Signer::new([1; 32], 1452);
    let mut v = SegmentVerifier::new(signer.public_key(), 42);
    let (l, payloads) = run_list(&signer, start, n);
    v.on_list(&l, 0, &nothing).unwrap();
    (signer, v, l, payloads)
}

/// The detail of the run of `payloads` from `start`: each by its own hash.
fn detail(signer: &Signer, start: u64, payloads: &[Vec<u8>]) -> SegmentList {
    let entries = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| ListEntry::single(100, segment_hash(start + 100 * i as u64, false, false, p)))
        .collect();
    SegmentList::sign(signer, 42, start, entries)
}

#[test]
fn listed_data_is_checked_on_arrival_and_forgeries_are_not() {
    let signer = Signer::new([1; 32], 1452);
    let mut v = SegmentVerifier::new(signer.public_key(), 42);
    let (l, payloads) = list(&signer, 0, 10, true);
    assert!(v.on_list(&l, 0, &nothing).unwrap().is_empty());
    for (i, p) in payloads.iter().enumerate() {
        let fin = i == 9;
        let o = 100 * i as u64;
        assert_eq!(
            offer(&mut v, at(0), &frames(o, p, fin), 0),
            Listed::Verified
        );
        // Another payload, the FIN flag flipped, another length under the
        // same offset, or a piece inside the segment: forged.
        let mut other = p.clone();
        other[3] ^= 1;
        assert_eq!(
            offer(&mut v, at(0), &frames(o, &other, fin), 0),
            Listed::Forged
        );
        assert_eq!(offer(&mut v, at(0), &frames(o, p, !fin), 0), Listed::Forged);
        assert_eq!(
            offer(&mut v, at(0), &frames(o, &p[1..], fin), 0),
            Listed::Forged
        );
        assert_eq!(
            offer(&mut v, at(0), &frames(o + 1, &p[1..], fin), 0),
            Listed::Forged
        );
    }
    // A list under another key, another session, or altered: refused.
    let other = Signer::new([2; 32], 1452);
    let (forged, _) = list(&other, 1000, 5, false);
    assert_eq!(v.on_list(&forged, 0, &nothing), None);
    let (mut altered, _) = list(&signer, 1000, 5, false);
    altered.entries[2].hash[0] ^= 1;
    assert_eq!(v.on_list(&altered, 0, &nothing), None);
    let (mut recounted, _) = run_list(&signer, 1000, 4);
    recounted.entries[0].count = 3;
    assert_eq!(
        v.on_list(&recounted, 0, &nothing),
        None,
        "the count is signed"
    );
    let mut wrong_session = SegmentVerifier::new(signer.public_key(), 43);
    assert_eq!(wrong_session.on_list(&l, 0, &nothing), None);
    assert_eq!(v.bad_signatures, 3);
    // Delivered already and forgotten: a duplicate.
    let mut fresh = SegmentVerifier::new(signer.public_key(), 42);
    let f = frames(0, &payloads[0], false);
    assert_eq!(offer(&mut fresh, at(0), &f, 100), Listed::Old);
}

#[test]
fn datagrams_ahead_of_their_list_wait_and_are_asked_for() {
    let signer = Signer::new([1; 32], 1452);
    let mut v = SegmentVerifier::new(signer.public_key(), 42);
    let (l, payloads) = list(&signer, 500, 4, false);
    assert_eq!(v.request_deadline(), None);
    let two = frames(700, &payloads[2], false);
    assert_eq!(offer(&mut v, at(0), &two, 0), Listed::Held);
    let forged = frames(600, b"forged", false);
    assert_eq!(offer(&mut v, at(1), &forged, 0), Listed::Held);
    let one = frames(600, &payloads[1], false);
    assert_eq!(offer(&mut v, at(2), &one, 0), Listed::Held);
    assert_eq!(v.held(), 3);
    // Asked for at once, then not again within the interval.
    assert_eq!(
        v.request_deadline(),
        Some(at(1)),
        "the lowest held offset arrived at 1 ms"
    );
    assert_eq!(v.take_request(at(2)), Some((600, false)));
    assert_eq!(v.take_request(at(3)), None);
    assert_eq!(v.request_deadline(), Some(at(2) + REQUEST_INTERVAL));
    let released = v.on_list(&l, 0, &nothing).unwrap();
    let got: Vec<(u64, &[u8])> = released.iter().map(|r| (r.0, &r.2[..])).collect();
    assert_eq!(got, [(600, &one[..]), (700, &two[..])]);
    assert_eq!(v.dropped, 1, "the forged one under 600");
    assert_eq!(v.held(), 0);
    assert_eq!(v.request_deadline(), None);
    // Held too long: dropped.
    offer(&mut v, at(10), &frames(5000, b"never listed", false), 0);
    assert!(v.take_request(at(10)).is_some());
    assert_eq!(v.take_request(at(10) + MAX_SEGMENT_HOLD), None);
    assert_eq!(v.held(), 0);
    assert_eq!(v.dropped, 2);
}

#[test]
fn a_run_is_held_until_complete_then_released_in_stream_order() {
    let signer = Signer::new([1; 32], 1452);
    let mut v = SegmentVerifier::new(signer.public_key(), 42);
    let (l, payloads) = run_list(&signer, 1000, 5);
    assert!(v.on_list(&l, 0, &nothing).unwrap().is_empty());
    // Out of order, and one twice: held until the last comes, each in
    // order only if all of the run before it came.
    for (i, in_order) in [
        (3usize, false),
        (0, true),
        (4, false),
        (3, false),
        (1, true),
    ] {
        let f = frames(1000 + 100 * i as u64, &payloads[i], false);
        assert_eq!(
            offer(&mut v, at(i as u64), &f, 1000),
            Listed::HeldInRun { in_order },
            "segment {i}"
        );
    }
    assert_eq!(v.held(), 4, "the same bytes twice are kept once");
    assert_eq!(v.request_deadline(), None, "nothing to ask for");
    // What is held counts as received.
    assert_eq!(v.held_ranges(), [1000..1200, 1300..1500]);
    let last = offer(&mut v, at(9), &frames(1200, &payloads[2], false), 0);
    assert_eq!(offsets(&last), [1000, 1100, 1200, 1300, 1400]);
    let Listed::Released(r) = last else {
        unreachable!()
    };
    assert_eq!((r[0].1, r[3].1), (at(0), at(3)), "each with its arrival");
    assert_eq!(r[2].2, frames(1200, &payloads[2], false));
    assert_eq!(v.held(), 0);
    assert_eq!(v.dropped, 0);
    assert!(v.held_ranges().is_empty());
    assert!(v.take_dropped().is_empty(), "nothing acknowledged in vain");
    // Settled: later copies are taken as they come (held bytes are never
    // overwritten), pieces that do not fit the run are not.
    let again = frames(1100, &payloads[1], false);
    assert_eq!(offer(&mut v, at(10), &again, 0), Listed::Settled);
    assert_eq!(
        offer(&mut v, at(10), &frames(1150, &payloads[1][..50], false), 0),
        Listed::Forged
    );
    assert_eq!(
        offer(&mut v, at(10), &frames(1100, &payloads[1][..50], false), 0),
        Listed::Forged
    );
    assert_eq!(
        offer(&mut v, at(10), &frames(1400, &payloads[4], true), 0),
        Listed::Forged
    );
    assert_eq!(
        offer(&mut v, at(10), &frames(1000, &payloads[0], false), 1500),
        Listed::Settled
    );
}

#[test]
fn a_forged_copy_in_a_run_is_settled_without_asking() {
    let (_, mut v, _, payloads) = knowing_run(0, 4);
    // A rogue member's copy of segment 1 comes first, the sender's after.
    let forged = frames(100, &[9; 100], false);
    assert!(held_in_run(offer(&mut v, at(0), &forged, 0)));
    for i in [0usize, 1, 2] {
        let f = frames(100 * i as u64, &payloads[i], false);
        assert!(held_in_run(offer(&mut v, at(1), &f, 0)));
    }
    let done = offer(&mut v, at(2), &frames(300, &payloads[3], false), 0);
    let Listed::Released(r) = done else {
        panic!("not released: {done:?}")
    };
    assert_eq!(
        r[1].2,
        frames(100, &payloads[1], false),
        "the sender's copy"
    );
    assert_eq!(v.dropped, 1, "the forged copy");
    assert_eq!(v.held(), 0);
    assert!(
        v.take_dropped().is_empty(),
        "the segment came, from the sender"
    );
}

#[test]
fn a_run_that_does_not_check_asks_for_its_detail_which_settles_it() {
    let (signer, mut v, l, payloads) = knowing_run(0, 4);
    // Forgeries of segments 0 and 2, one before the sender's copy and one
    // after: neither the first copies nor the second ones check.
    let f0 = frames(0, &[7; 100], false);
    let f2 = frames(200, &[8; 100], false);
    offer(&mut v, at(0), &f0, 0);
    for i in 0..4usize {
        let f = frames(100 * i as u64, &payloads[i], false);
        assert!(held_in_run(offer(&mut v, at(1), &f, 0)));
        if i == 2 {
            assert!(held_in_run(offer(&mut v, at(1), &f2, 0)));
        }
    }
    // A third copy of a segment is not kept.
    offer(&mut v, at(1), &frames(0, &[6; 100], false), 0);
    assert_eq!(v.dropped, 1);
    assert_eq!(v.held(), 6);
    assert_eq!(v.request_deadline(), Some(at(0)));
    assert_eq!(v.take_request(at(2)), Some((0, true)), "the run's detail");
    // The detail: each segment by its own hash.
    let released = v
        .on_list(&detail(&signer, 0, &payloads), 0, &nothing)
        .unwrap();
    let got: Vec<(u64, Vec<u8>)> = released.into_iter().map(|(o, _, f)| (o, f)).collect();
    let want: Vec<(u64, Vec<u8>)> = (0..4usize)
        .map(|i| (100 * i as u64, frames(100 * i as u64, &payloads[i], false)))
        .collect();
    assert_eq!(got, want);
    assert_eq!(v.dropped, 3, "and both forgeries");
    assert_eq!(v.held(), 0);
    assert_eq!(v.request_deadline(), None);
    // The forgeries' ranges are reported dropped; the receiver reneges
    // only what it holds no copy of (here: none, the sender's came).
    assert_eq!(v.take_dropped(), [0..100, 200..300]);
    // From now on the segments are checked one by one; the run's list
    // again changes nothing.
    assert_eq!(offer(&mut v, at(3), &f2, 0), Listed::Forged);
    assert!(v.on_list(&l, 0, &nothing).unwrap().is_empty());
    let copy = frames(200, &payloads[2], false);
    assert_eq!(
        offer(&mut v, at(3), &copy, 0),
        Listed::Verified,
        "a single now"
    );
}

#[test]
fn segments_of_a_run_held_before_its_list_go_into_the_run() {
    let signer = Signer::new([1; 32], 1452);
    let mut v = SegmentVerifier::new(signer.public_key(), 42);
    let (l, payloads) = run_list(&signer, 300, 3);
    offer(&mut v, at(0), &frames(400, &payloads[1], false), 0);
    offer(&mut v, at(0), &frames(450, b"inside a segment", false), 0);
    offer(&mut v, at(0), &frames(300, &payloads[0], false), 0);
    assert_eq!(v.take_request(at(0)), Some((300, false)));
    assert!(
        v.on_list(&l, 0, &nothing).unwrap().is_empty(),
        "not complete yet"
    );
    assert_eq!(v.dropped, 1, "the piece that does not fit");
    assert_eq!(
        offsets(&offer(&mut v, at(1), &frames(500, &payloads[2], false), 0)),
        [300, 400, 500]
    );
    // A list of one complete run releases it at once.
    let (l, payloads) = run_list(&signer, 2000, 2);
    offer(&mut v, at(0), &frames(2000, &payloads[0], false), 0);
    offer(&mut v, at(0), &frames(2100, &payloads[1], false), 0);
    let got: Vec<u64> = v
        .on_list(&l, 0, &nothing)
        .unwrap()
        .iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(got, [2000, 2100]);
}

#[test]
fn holding_and_knowing_are_bounded() {
    let signer = Signer::new([1; 32], 1452);
    let mut v = SegmentVerifier::new(signer.public_key(), 42);
    for i in 0..(MAX_HELD_SEGMENTS as u64 + 10) {
        offer(&mut v, at(0), &frames(i * 100, b"x", false), 0);
    }
    assert_eq!(v.held(), MAX_HELD_SEGMENTS);
    assert_eq!(v.dropped, 10);
    // Runs' copies count toward the same cap.
    let mut start = 1 << 40;
    for _ in 0..20 {
        let (l, _) = run_list(&signer, start, MAX_RUN);
        v.on_list(&l, 0, &nothing).unwrap();
        for i in 0..MAX_RUN - 1 {
            for b in 0..3u8 {
                offer(&mut v, at(0), &frames(start + 100 * i, &[b; 100], false), 0);
            }
        }
        start += 100 * MAX_RUN;
    }
    assert_eq!(v.held(), MAX_HELD_SEGMENTS);
    let mut start = 0;
    while start < 200 * MAX_KNOWN_ENTRIES as u64 {
        let (l, _) = list(&signer, start, 100, false);
        v.on_list(&l, 0, &nothing);
        start += 100 * 100;
    }
    assert!(v.known.len() <= MAX_KNOWN_ENTRIES);
}

#[test]
fn run_hashes_depend_on_every_field() {
    let bytes = [5u8; 300];
    let h = run_hash(0, 100, 3, &[&bytes]);
    assert_eq!(h, run_hash(0, 100, 3, &[&bytes[..120], &bytes[120..]]));
    assert_ne!(h, run_hash(1, 100, 3, &[&bytes]));
    assert_ne!(h, run_hash(0, 150, 2, &[&bytes]));
    assert_ne!(h, run_hash(0, 100, 3, &[&bytes[..299], &[4]]));
    assert_ne!(h[..], segment_hash(0, false, false, &bytes)[..]);
}

#[test]
fn lists_with_runs_round_trip_and_bad_runs_are_refused() {
    let signer = Signer::new([1; 32], 1452);
    let (mut l, _) = run_list(&signer, 7 << 30, MAX_RUN);
    l.entries.push(ListEntry::single(0, [1; 16]));
    let mut out = Vec::new();
    l.encode(&mut out);
    assert_eq!(SegmentList::decode(&mut Reader::new(&out)).unwrap(), l);
    for (len, count) in [
        (100, 0),
        (100, MAX_RUN + 1),
        (0, 2),
        ((1 << 62) - 1, MAX_RUN),
    ] {
        let mut bad = l.clone();
        bad.entries[0] = ListEntry {
            len,
            count,
            hash: [0; 16],
        };
        let mut out = Vec::new();
        bad.encode(&mut out);
        assert!(
            SegmentList::decode(&mut Reader::new(&out)).is_err(),
            "{len} × {count}"
        );
    }
}

#[test]
fn the_sender_keeps_lists_until_their_data_is_released() {
    let signer = Signer::new([1; 32], 1452);
    let mut lists = SegmentLists::new(1452);
    assert_eq!(lists.max_entries(), 70);
    let (a, _) = list(&signer, 0, 10, false);
    lists.push(a.clone(), &[(false, false); 10]);
    let (b, _) = run_list(&signer, 1000, 5);
    lists.push(b.clone(), &[(false, false); 5]);
    let (c, _) = list(&signer, 1500, 1, true);
    lists.push(c.clone(), &[(true, false)]);
    assert_eq!(lists.listed_to(), 1600);
    let listing = |len, fin, continues_run, run_start, run_end| Listing {
        len,
        fin,
        message_end: false,
        continues_run,
        run_start,
        run_end,
    };
    assert_eq!(
        lists.listed(300),
        Some(listing(100, false, false, 300, 400))
    );
    assert_eq!(
        lists.listed(1000),
        Some(listing(100, false, false, 1000, 1500))
    );
    assert_eq!(
        lists.listed(1200),
        Some(listing(100, false, true, 1000, 1500))
    );
    assert_eq!(
        lists.listed(1500),
        Some(listing(100, true, false, 1500, 1600))
    );
    assert_eq!(lists.listed(1450), None);
    assert_eq!(
        lists.listed(0),
        Some(listing(100, false, false, 0, 100)),
        "back, by bisection"
    );
    assert_eq!(lists.listed(1600), None, "past the end");
    assert_eq!(lists.take_pending(), Some(a.clone()));
    assert_eq!(lists.take_pending(), Some(b.clone()));
    assert_eq!(lists.covering(300), Some(&a));
    assert_eq!(lists.covering(1300), Some(&b), "a segment inside a run");
    assert_eq!(lists.covering(350), None, "not a segment's start");
    assert_eq!(lists.run_at(1300), Some((1000, b.entries[0])));
    assert_eq!(lists.run_at(300), None, "a single segment");
    lists.release_below(1200);
    assert_eq!(lists.listed(500), None, "released");
    assert_eq!(
        lists.listed(1100),
        Some(listing(100, false, true, 1000, 1500)),
        "a run stays listed until all of it is released"
    );
    assert_eq!(lists.covering(300), None);
    assert_eq!(lists.covering(1100), Some(&b));
    // Encoded, a full list fits its datagram.
    let entries = vec![
        ListEntry {
            len: 1400,
            count: MAX_RUN,
            hash: [0; 16]
        };
        lists.max_entries()
    ];
    let full = SegmentList::sign(&signer, 42, u64::MAX >> 3, entries);
    let mut out = Vec::new();
    crate::wire::Frame::Segments(full.clone()).encode(&mut out);
    let datagram = crate::wire::HEADER_LEN + out.len() + super::super::TAG_LEN;
    assert!(datagram <= 1452, "{datagram}");
    let mut frames = crate::wire::decode_frames(&out);
    assert!(matches!(frames.next(), Some(Ok(crate::wire::Frame::Segments(l))) if l == full));
}

#[test]
fn a_segment_held_only_as_a_forgery_is_dropped_and_reported() {
    let (signer, mut v, _, payloads) = knowing_run(0, 3);
    // Segment 1: only a rogue member's copy came (the sender's was lost).
    offer(&mut v, at(0), &frames(0, &payloads[0], false), 0);
    offer(&mut v, at(0), &frames(100, &[5; 100], false), 0);
    offer(&mut v, at(0), &frames(200, &payloads[2], false), 0);
    assert_eq!(v.held_ranges(), [0..300], "all of it counts as received");
    assert_eq!(v.take_request(at(1)), Some((0, true)), "it does not check");
    let released = v
        .on_list(&detail(&signer, 0, &payloads), 0, &nothing)
        .unwrap();
    let got: Vec<u64> = released.iter().map(|r| r.0).collect();
    assert_eq!(got, [0, 200]);
    assert_eq!(
        v.take_dropped(),
        [100..200],
        "acknowledged in vain: reneged"
    );
    assert!(v.held_ranges().is_empty());
    // The sender's copy, sent again, is checked on its own.
    assert_eq!(
        offer(&mut v, at(2), &frames(100, &payloads[1], false), 0),
        Listed::Verified
    );
}

#[test]
fn runs_dropped_to_make_room_or_held_too_long_are_reported() {
    let (_, mut v, _, payloads) = knowing_run(0, 4);
    offer(&mut v, at(0), &frames(0, &payloads[0], false), 0);
    offer(&mut v, at(0), &frames(200, &payloads[2], false), 0);
    assert_eq!(v.take_request(at(0) + MAX_SEGMENT_HOLD), None);
    assert_eq!(v.take_dropped(), [0..100, 200..300]);
    assert_eq!(v.held(), 0);
}

#[test]
fn a_run_completed_by_bytes_taken_otherwise_checks_with_them() {
    let (signer, mut v, _, payloads) = knowing_run(0, 3);
    // Segment 1 came by unicast (into the receiver's buffer), the others
    // from the group.
    let one = payloads[1].clone();
    let buffer = move |r: Range<u64>, out: &mut Vec<u8>| {
        (r == (100..200))
            .then(|| out.extend_from_slice(&one))
            .is_some()
    };
    offer(&mut v, at(0), &frames(0, &payloads[0], false), 0);
    let f = frames(200, &payloads[2], false);
    let Some(Ok(Frame::Data(d))) = decode_frames(&f).next() else {
        unreachable!()
    };
    let done = v.on_data(at(1), &d, &f, 0, &buffer);
    assert_eq!(offsets(&done), [0, 200], "released, but for what it took");
    // Or the unicast copy comes last: a recheck finds the run complete.
    let (l, payloads) = run_list(&signer, 1000, 2);
    v.on_list(&l, 0, &nothing).unwrap();
    offer(&mut v, at(2), &frames(1000, &payloads[0], false), 0);
    assert!(v.recheck(0, &nothing).is_empty());
    let two = payloads[1].clone();
    let buffer = move |r: Range<u64>, out: &mut Vec<u8>| {
        (r == (1100..1200))
            .then(|| out.extend_from_slice(&two))
            .is_some()
    };
    let got: Vec<u64> = v.recheck(0, &buffer).iter().map(|r| r.0).collect();
    assert_eq!(got, [1000]);
    // Bytes taken that are not the sender's make the run ask its detail.
    let (l, payloads) = run_list(&signer, 2000, 2);
    v.on_list(&l, 0, &nothing).unwrap();
    offer(&mut v, at(3), &frames(2000, &payloads[0], false), 0);
    let bad = |r: Range<u64>, out: &mut Vec<u8>| {
        (r == (2100..2200))
            .then(|| out.extend_from_slice(&[0; 100]))
            .is_some()
    };
    assert!(v.recheck(0, &bad).is_empty());
    assert_eq!(v.take_request(at(3)), Some((2000, true)));
}
