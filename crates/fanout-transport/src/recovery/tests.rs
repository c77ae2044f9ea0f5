use super::*;
use crate::config::TransportConfig;
use crate::wire::WireTimestamp;

const SEG: u64 = 1000;
const MS: Duration = Duration::from_millis(1);

fn at(ms: u64) -> Instant {
    Instant::ZERO + MS * ms as u32
}

fn ack(cumulative: u64, echo_ms: u64, sack: Vec<Range<u64>>) -> AckFrame {
    AckFrame {
        cumulative,
        window: 1 << 20,
        timestamp_echo: WireTimestamp::at(at(echo_ms)),
        ack_delay_us: 0,
        sack,
    }
}

fn recovery() -> Recovery {
    let t = TransportConfig::default();
    Recovery::new(0, RttEstimator::new(t.rto), t.cc.build(SEG))
}

/// `n` segments of [`SEG`] bytes, segment `k` sent at `k` ms.
fn log_of(n: u64) -> SegmentLog {
    let mut log = SegmentLog::default();
    for k in 0..n {
        log.push(k * SEG..(k + 1) * SEG, at(k));
    }
    log
}

fn on_ack(r: &mut Recovery, now: u64, a: &AckFrame, log: &SegmentLog, snd_nxt: u64) -> AckOutcome {
    r.on_ack(at(now), a, log, snd_nxt, SEG, true, Duration::ZERO)
}

/// Of 5 segments sent, an ACK at `now` ms of segment 0 with 2..5 SACKed:
/// segment 1 is the hole.
fn hole_at_1(r: &mut Recovery, now: u64, log: &SegmentLog) -> AckOutcome {
    on_ack(r, now, &ack(SEG, 0, vec![2 * SEG..5 * SEG]), log, 5 * SEG)
}

#[test]
fn cumulative_ack_advances_and_restarts_the_timer() {
    let log = log_of(4);
    let mut r = recovery();
    r.arm_rto(at(0), 4 * SEG);
    assert_eq!(r.rto_deadline(), Some(at(0) + r.rtt().rto()));
    let out = on_ack(&mut r, 50, &ack(2 * SEG, 1, vec![]), &log, 4 * SEG);
    assert!(out.progressed && out.newly_lost.is_empty());
    assert_eq!(r.cumulative(), 2 * SEG);
    assert_eq!(r.in_flight(4 * SEG), 2 * SEG);
    // RFC 6298 §5.3: restarted from this ACK, with the new estimate.
    assert_eq!(r.rto_deadline(), Some(at(50) + r.rtt().rto()));
    // Everything acknowledged: the timer stops.
    on_ack(&mut r, 60, &ack(4 * SEG, 3, vec![]), &log, 4 * SEG);
    assert_eq!(r.rto_deadline(), None);
}

#[test]
fn sack_then_rack_marks_the_hole_lost_and_opens_one_episode() {
    let log = log_of(5);
    let mut r = recovery();
    // Segment 1 lost; 2..5 SACKed: DupThresh reached, reo_wnd = 0.
    let out = hole_at_1(&mut r, 60, &log);
    assert_eq!(out.newly_lost, vec![SEG..2 * SEG]);
    assert!(r.is_lost(SEG..2 * SEG) && r.in_recovery());
    assert_eq!((r.recovery_episodes(), r.in_flight(5 * SEG)), (1, 0));
    // The repair goes out; a repeat of the same ACK loses nothing more.
    r.on_repair_sent(SEG..2 * SEG, at(61));
    assert!(!r.is_lost(SEG..2 * SEG));
    let again = hole_at_1(&mut r, 62, &log);
    assert!(again.newly_lost.is_empty());
    // The repair arrives: the episode ends (RFC 6582 §3.2 step 5).
    on_ack(&mut r, 120, &ack(5 * SEG, 4, vec![]), &log, 5 * SEG);
    assert!(!r.in_recovery());
    assert_eq!(r.recovery_episodes(), 1);
}

#[test]
fn reorder_window_defers_loss_to_the_rack_timer() {
    let log = log_of(3);
    let mut r = recovery();
    // Only segment 2 arrived: one segment SACKed, below DupThresh, so the
    // reorder window (min_rtt / 4) applies.
    let out = on_ack(
        &mut r,
        50,
        &ack(0, 2, vec![2 * SEG..3 * SEG]),
        &log,
        3 * SEG,
    );
    assert!(out.newly_lost.is_empty());
    let timer = r.rack_deadline().expect("reorder timer");
    assert!(timer > at(50));
    let fired = r.on_timeout(timer, &log, 3 * SEG, SEG);
    assert!(!fired.rto);
    assert_eq!(fired.newly_lost, vec![0..SEG]);
    // Segment 0 is known lost, segment 1 not yet: one undetected hole
    // below the highest SACKed offset.
    assert_eq!(r.highest_acked(), 3 * SEG);
    assert_eq!(r.undetected_bytes(0..3 * SEG), SEG);
    r.on_repair_sent(0..SEG, timer);
    assert_eq!(r.undetected_bytes(0..3 * SEG), SEG, "a repair is not news");
    // Segment 1 was sent 1 ms after segment 0: due 1 ms later.
    let next = r.rack_deadline().expect("re-armed for the next hole");
    assert_eq!(next - timer, MS);
    assert_eq!(
        r.on_timeout(next, &log, 3 * SEG, SEG).newly_lost,
        vec![SEG..2 * SEG]
    );
    assert_eq!(r.undetected_bytes(0..3 * SEG), 0);
}

#[test]
fn repeated_sack_costs_nothing_new() {
    let log = log_of(10);
    let mut r = recovery();
    on_ack(
        &mut r,
        30,
        &ack(0, 5, vec![3 * SEG..6 * SEG]),
        &log,
        10 * SEG,
    );
    let before = r.pipe_base();
    for _ in 0..100 {
        let out = on_ack(
            &mut r,
            31,
            &ack(0, 5, vec![3 * SEG..6 * SEG]),
            &log,
            10 * SEG,
        );
        assert!(!out.progressed);
    }
    assert_eq!(r.pipe_base(), before);
}

#[test]
fn cumulative_inside_a_segment_is_clipped_to_its_start() {
    let log = log_of(3);
    let mut r = recovery();
    let out = on_ack(&mut r, 10, &ack(SEG + SEG / 2, 0, vec![]), &log, 3 * SEG);
    assert!(out.clipped && out.progressed);
    assert_eq!(r.cumulative(), SEG);
}

#[test]
fn rto_marks_every_unsacked_segment_lost_and_backs_off() {
    let log = log_of(3);
    let mut r = recovery();
    on_ack(&mut r, 10, &ack(0, 0, vec![SEG..2 * SEG]), &log, 3 * SEG);
    let rto_at = r.rto_deadline().unwrap();
    let rto_before = r.rtt().rto();
    let out = r.on_timeout(rto_at, &log, 3 * SEG, SEG);
    assert!(out.rto);
    assert_eq!(out.newly_lost, vec![0..SEG, 2 * SEG..3 * SEG]);
    assert_eq!((r.rto_backoffs(), r.rtos()), (1, 1));
    assert_eq!(r.rtt().rto(), 2 * rto_before, "RFC 6298 §5.5");
    assert!(r.in_recovery());
    assert_eq!(r.in_flight(3 * SEG), 0);
}

/// RACK dates a delivery by the *first* transmission of a segment
/// multicast again for other members: this member may have received
/// the original, and dating it by the later copy declared the member's
/// own repairs still in flight lost (a repeat repair each time).
#[test]
fn a_segment_multicast_again_for_others_does_not_date_this_peers_delivery() {
    let mut log = log_of(20);
    let snd_nxt = 20 * SEG;
    let mut r = recovery();
    // Segments 2 and 5 lost; 0-1, 3-4, 6-7 arrived.
    let a = ack(2 * SEG, 1, vec![6 * SEG..8 * SEG, 3 * SEG..5 * SEG]);
    let out = on_ack(&mut r, 12, &a, &log, snd_nxt);
    assert_eq!(out.newly_lost, vec![2 * SEG..3 * SEG, 5 * SEG..6 * SEG]);
    r.on_repair_sent(2 * SEG..3 * SEG, at(13));
    r.on_repair_sent(5 * SEG..6 * SEG, at(14));
    // Segment 9 goes out again at 15 ms, for another member.
    log.on_multicast_repair(9 * SEG, at(15));
    // The repair of 2 and the originals of 8-12 arrived; the repair of
    // 5 (sent at 14 ms) is still on its way.
    let a = ack(5 * SEG, 13, vec![6 * SEG..13 * SEG]);
    let out = on_ack(&mut r, 17, &a, &log, snd_nxt);
    assert!(out.newly_lost.is_empty(), "{:?}", out.newly_lost);
    assert!(!r.is_lost(5 * SEG..6 * SEG));
}

#[test]
fn a_forgotten_loss_is_detected_again() {
    let log = log_of(5);
    let mut r = recovery();
    let out = hole_at_1(&mut r, 60, &log);
    assert_eq!(out.newly_lost, vec![SEG..2 * SEG]);
    r.forget_loss(SEG..2 * SEG);
    assert!(!r.is_lost(SEG..2 * SEG));
    assert_eq!(r.in_flight(5 * SEG), SEG, "back in flight");
    let again = hole_at_1(&mut r, 61, &log);
    assert_eq!(again.newly_lost, vec![SEG..2 * SEG]);
    assert_eq!(r.recovery_episodes(), 1, "still the same episode");
}

#[test]
fn an_ack_held_beyond_the_allowed_delay_gives_no_rtt_sample() {
    let log = log_of(4);
    let mut r = recovery();
    let allowed = 25 * MS;
    r.on_ack(
        at(60),
        &ack(SEG, 0, vec![]),
        &log,
        4 * SEG,
        SEG,
        true,
        allowed,
    );
    assert_eq!(r.srtt(), 60 * MS);
    // Echoing a timestamp 4 s old, and saying it was held 3.9 s of that.
    let held = AckFrame {
        ack_delay_us: 3_900_000,
        ..ack(2 * SEG, 1, vec![])
    };
    let out = r.on_ack(at(4_001), &held, &log, 4 * SEG, SEG, true, allowed);
    assert!(out.progressed, "the ACK itself is taken");
    assert_eq!(r.srtt(), 60 * MS, "but it is no RTT sample");
    // Within the allowed delay, the sample counts (minus the delay).
    let prompt = AckFrame {
        ack_delay_us: 20_000,
        ..ack(3 * SEG, 3_990, vec![])
    };
    r.on_ack(at(4_070), &prompt, &log, 4 * SEG, SEG, true, allowed);
    assert_eq!(r.rtt().latest(), 60 * MS);
}

#[test]
fn acks_that_only_sack_new_data_sample_the_rtt_while_a_hole_waits() {
    // Segment k sent at k ms. Segment 1 is lost; while its repair is on the
    // way the peer SACKs each new segment at once, and a queue builds:
    // the cumulative point stands still, the echo with it, yet the RTT
    // follows the SACKed segments' first transmissions.
    let log = log_of(20);
    let mut r = recovery();
    on_ack(&mut r, 40, &ack(SEG, 0, vec![]), &log, 20 * SEG);
    assert_eq!(r.srtt(), 40 * MS);
    on_ack(
        &mut r,
        62,
        &ack(SEG, 0, vec![2 * SEG..3 * SEG]),
        &log,
        20 * SEG,
    );
    assert_eq!(r.rtt().latest(), 60 * MS, "segment 2, sent at 2 ms");
    // The queue grows 3 ms per segment; segment 1 is deemed lost on the
    // way (RACK) and repaired by unicast, which leaves later ones sampled.
    for k in 3..6 {
        let sacked = vec![2 * SEG..(k + 1) * SEG];
        on_ack(&mut r, 60 + 4 * k, &ack(SEG, 0, sacked), &log, 20 * SEG);
        assert_eq!(r.rtt().latest(), MS * (60 + 3 * k) as u32);
    }
    assert!(r.is_lost(SEG..2 * SEG));
    r.on_repair_sent(SEG..2 * SEG, at(90));
    let sacks = vec![2 * SEG..6 * SEG, 7 * SEG..8 * SEG];
    on_ack(&mut r, 100, &ack(SEG, 0, sacks), &log, 20 * SEG);
    assert_eq!(
        r.rtt().latest(),
        93 * MS,
        "segment 7, sent at 7 ms, is the highest"
    );
    let below = vec![2 * SEG..8 * SEG];
    on_ack(&mut r, 101, &ack(SEG, 0, below), &log, 20 * SEG);
    assert_eq!(r.rtt().latest(), 93 * MS, "segment 6 is below the highest");
}

#[test]
fn sacks_of_data_sent_twice_or_acks_held_to_a_slot_give_no_rtt_sample() {
    let mut log = log_of(10);
    let mut r = recovery();
    on_ack(&mut r, 40, &ack(SEG, 0, vec![]), &log, 10 * SEG);
    // Segment 3 multicast again (another member's repair): either copy
    // may be the one SACKed (Karn's rule).
    log.on_multicast_repair(3 * SEG, at(30));
    on_ack(
        &mut r,
        70,
        &ack(SEG, 0, vec![2 * SEG..4 * SEG]),
        &log,
        10 * SEG,
    );
    assert_eq!(r.rtt().latest(), 40 * MS);
    // A peer whose ACKs wait for a feedback slot: the hold is unknown.
    let slotted = 25 * MS + 41 * MS;
    r.on_ack(
        at(90),
        &ack(SEG, 0, vec![2 * SEG..5 * SEG]),
        &log,
        10 * SEG,
        SEG,
        true,
        slotted,
    );
    assert_eq!(r.rtt().latest(), 40 * MS);
    // Segment 1 deemed lost: everything up to its end may have gone twice.
    assert!(r.is_lost(SEG..2 * SEG));
    let mut fresh = recovery();
    on_ack(&mut fresh, 40, &ack(SEG, 0, vec![]), &log, 10 * SEG);
    on_ack(
        &mut fresh,
        70,
        &ack(SEG, 0, vec![5 * SEG..6 * SEG]),
        &log,
        10 * SEG,
    );
    assert_eq!(
        fresh.rtt().latest(),
        65 * MS,
        "segment 5, sent once, at 5 ms"
    );
}

#[test]
fn an_echo_from_the_future_gives_no_rtt_sample() {
    let log = log_of(4);
    let mut r = recovery();
    on_ack(&mut r, 60, &ack(SEG, 0, vec![]), &log, 4 * SEG);
    let future = ack(2 * SEG, 1_000_000, vec![]);
    assert!(on_ack(&mut r, 70, &future, &log, 4 * SEG).progressed);
    assert_eq!(r.srtt(), 60 * MS);
}

#[test]
fn a_hole_in_a_batch_sent_at_one_instant_is_lost_once_later_ones_are_sacked() {
    // Five segments handed out in one batch share their send time; the
    // first is lost and the others SACKed. RFC 8985 §6.2 orders segments
    // of one instant by sequence: the hole was sent before them, so it is
    // lost now — not left to the retransmission timer.
    let mut log = SegmentLog::default();
    for k in 0..5 {
        log.push(k * SEG..(k + 1) * SEG, at(0));
    }
    let mut r = recovery();
    let out = on_ack(&mut r, 60, &ack(0, 0, vec![SEG..5 * SEG]), &log, 5 * SEG);
    assert_eq!(out.newly_lost, vec![0..SEG]);
}

#[test]
fn a_repair_restarts_the_retransmission_timer() {
    // Segment 1 is lost; the timer was started when segment 0 was acked.
    // The repair goes out later: the timer must give it a whole RTO.
    let log = log_of(5);
    let mut r = recovery();
    on_ack(&mut r, 50, &ack(SEG, 0, vec![]), &log, 5 * SEG);
    let started = r.rto_deadline().unwrap();
    hole_at_1(&mut r, 80, &log);
    assert!(r.is_lost(SEG..2 * SEG));
    let repair_at = started.saturating_sub(Duration::from_millis(10));
    r.on_repair_sent(SEG..2 * SEG, repair_at);
    assert_eq!(r.rto_deadline(), Some(repair_at + r.rtt().rto()));
}

#[test]
fn a_lost_repair_with_nothing_sent_after_it_is_probed_before_the_rto() {
    // RFC 8985 §7: 5 segments, the window full. Segment 1 is lost and
    // repaired; the repair is lost too, and no newer segment follows it
    // for RACK to see that by.
    let log = log_of(5);
    let mut r = recovery();
    r.arm_rto(at(0), 5 * SEG);
    let out = hole_at_1(&mut r, 60, &log);
    assert_eq!(out.newly_lost, vec![SEG..2 * SEG]);
    r.on_repair_sent(SEG..2 * SEG, at(61));
    let (tlp, rto) = (r.tlp_deadline().unwrap(), r.rto_deadline().unwrap());
    // PTO = 2·SRTT (60 ms) + the ACK hold (0 here): long before the RTO.
    assert_eq!(tlp, at(60) + 2 * r.rtt().srtt());
    assert!(tlp < rto, "{tlp:?} {rto:?}");
    let out = r.on_timeout(tlp, &log, 5 * SEG, SEG);
    assert!(out.probe && !out.rto);
    // The probe is the last segment not known delivered: the repair.
    assert_eq!(out.newly_lost, vec![SEG..2 * SEG]);
    assert_eq!(r.rtos(), 0);
    // One probe until something is acknowledged.
    assert_eq!(r.tlp_deadline(), None);
    r.on_repair_sent(SEG..2 * SEG, tlp);
    r.arm_rto(tlp, 5 * SEG);
    assert_eq!(r.tlp_deadline(), None);
    // Its ACK ends the episode.
    let done = on_ack(&mut r, 200, &ack(5 * SEG, 1, vec![]), &log, 5 * SEG);
    assert!(done.progressed && r.rto_deadline().is_none() && r.tlp_deadline().is_none());
}

#[test]
fn an_episode_ends_once_later_data_is_acknowledged_and_older_losses_open_none() {
    // Segments 0..5 sent at 0..4 ms, 5..10 at 50..54 ms.
    let mut log = SegmentLog::default();
    for k in 0..10 {
        let sent = if k < 5 { k } else { 45 + k };
        log.push(k * SEG..(k + 1) * SEG, at(sent));
    }
    let mut r = recovery();
    let out = on_ack(
        &mut r,
        50,
        &ack(SEG, 4, vec![2 * SEG..5 * SEG]),
        &log,
        5 * SEG,
    );
    assert_eq!(out.newly_lost, vec![SEG..2 * SEG]);
    assert!(r.in_recovery());
    r.on_repair_sent(SEG..2 * SEG, at(50));
    // Segments 5 and 6, sent after the episode began, arrive; the repair
    // of segment 1 (sent just before them) does not. The episode ends
    // with the hole still open (RFC 9002 §7.3.2, where RFC 6582 would
    // wait for the cumulative ACK), and the repair's loss is no new
    // congestion event: its data was sent before the episode's response.
    let out = on_ack(
        &mut r,
        100,
        &ack(SEG, 51, vec![2 * SEG..7 * SEG]),
        &log,
        10 * SEG,
    );
    assert!(!r.in_recovery());
    assert_eq!(out.newly_lost, vec![SEG..2 * SEG]);
    assert_eq!(r.recovery_episodes(), 1);
    // A loss of data sent after the episode began is a new one.
    let out = on_ack(
        &mut r,
        110,
        &ack(SEG, 59, vec![2 * SEG..7 * SEG, 8 * SEG..10 * SEG]),
        &log,
        10 * SEG,
    );
    assert_eq!(out.newly_lost, vec![7 * SEG..8 * SEG]);
    assert!(r.in_recovery());
    assert_eq!(r.recovery_episodes(), 2);
}

#[test]
fn repairs_are_settled_by_the_ack_that_covers_them_sacked_or_cumulative() {
    // Segments 0..6 sent at 0..6 ms, 6..8 at 90 and 91 ms.
    let mut log = log_of(6);
    log.push(6 * SEG..7 * SEG, at(90));
    log.push(7 * SEG..8 * SEG, at(91));
    let mut r = recovery();
    let out = on_ack(
        &mut r,
        60,
        &ack(SEG, 0, vec![3 * SEG..6 * SEG]),
        &log,
        8 * SEG,
    );
    assert_eq!(out.newly_lost, vec![SEG..2 * SEG, 2 * SEG..3 * SEG]);
    r.on_repair_sent(SEG..2 * SEG, at(61));
    r.on_repair_sent(2 * SEG..3 * SEG, at(61));
    // The second repair arrives first (SACKed), then the first: the
    // cumulative point jumps over both.
    let first = ack(SEG, 0, vec![2 * SEG..6 * SEG]);
    let out = on_ack(&mut r, 70, &first, &log, 8 * SEG);
    assert!(out.newly_lost.is_empty(), "{out:?}");
    let out = on_ack(&mut r, 75, &ack(6 * SEG, 0, vec![]), &log, 8 * SEG);
    assert!(out.newly_lost.is_empty(), "{out:?}");
    // Data sent 30 ms after the repairs is delivered: a repair still
    // counted in flight would be overdue now (RACK), and lost again.
    let later = ack(6 * SEG, 91, vec![7 * SEG..8 * SEG]);
    let out = on_ack(&mut r, 130, &later, &log, 8 * SEG);
    assert!(out.newly_lost.iter().all(|l| l.start >= 6 * SEG), "{out:?}");
    assert!(!r.is_lost(SEG..3 * SEG));
}

#[test]
fn a_lost_repair_arms_the_reorder_timer_like_any_segment() {
    // RFC 8985 §6.2 step 5, for a retransmission: segments 0..3 sent at
    // 0..2 ms; segment 0 is lost and repaired at 60 ms, segment 3 goes
    // at 61 ms and is SACKed at 70 ms while the repair is not yet
    // overdue (the reorder window). Nothing else is sent: the timer, not
    // a later ACK, must find the repair lost.
    let mut log = SegmentLog::default();
    for k in 0..3 {
        log.push(k * SEG..(k + 1) * SEG, at(k));
    }
    log.push(3 * SEG..4 * SEG, at(61));
    let mut r = recovery();
    on_ack(
        &mut r,
        50,
        &ack(0, 2, vec![2 * SEG..3 * SEG]),
        &log,
        3 * SEG,
    );
    let timer = r.rack_deadline().expect("reorder timer for segment 0");
    assert_eq!(
        r.on_timeout(timer, &log, 3 * SEG, SEG).newly_lost,
        vec![0..SEG]
    );
    r.on_repair_sent(0..SEG, at(60));
    let out = on_ack(
        &mut r,
        70,
        &ack(0, 61, vec![2 * SEG..4 * SEG]),
        &log,
        4 * SEG,
    );
    assert_eq!(
        out.newly_lost,
        vec![SEG..2 * SEG],
        "segment 1, long overdue"
    );
    assert!(!r.repair_was_lost(0..SEG));
    let due = r.rack_deadline().expect("armed for the repair in flight");
    assert!(due > at(70) && due < at(80), "{due:?}");
    assert_eq!(
        r.on_timeout(due, &log, 4 * SEG, SEG).newly_lost,
        vec![0..SEG]
    );
    assert!(r.repair_was_lost(0..SEG) && !r.repair_was_lost(SEG..2 * SEG));
    // Acknowledged at last: forgotten.
    on_ack(&mut r, 100, &ack(4 * SEG, 61, vec![]), &log, 4 * SEG);
    assert!(!r.repair_was_lost(0..SEG));
}

/// Of segments sent at 0, 1, … ms: segment 0 acknowledged at 40 ms
/// (min_rtt 40 ms), then at 45 ms 2..5 SACKed without segment 1 (DupThresh,
/// no reordering seen yet): lost at once, the window cut, repaired at 46
/// ms. Returns the recovery and its window before the cut.
fn segment_1_lost_and_repaired(log: &SegmentLog, snd_nxt: u64) -> (Recovery, u64) {
    let mut r = recovery();
    on_ack(&mut r, 40, &ack(SEG, 0, vec![]), log, snd_nxt);
    let cwnd = r.cwnd();
    let out = on_ack(
        &mut r,
        45,
        &ack(SEG, 0, vec![2 * SEG..5 * SEG]),
        log,
        snd_nxt,
    );
    assert_eq!(out.newly_lost, vec![SEG..2 * SEG]);
    assert!(r.in_recovery() && r.cwnd() < cwnd);
    r.on_repair_sent(SEG..2 * SEG, at(46));
    (r, cwnd)
}

#[test]
fn a_late_segment_called_lost_is_undone_and_the_path_then_gets_a_reordering_window() {
    let log = log_of(12);
    let (mut r, cwnd) = segment_1_lost_and_repaired(&log, 12 * SEG);
    // It arrives 1 ms after its repair went: the repair cannot be the copy
    // acknowledged. The cut is undone; the path reorders.
    let out = on_ack(&mut r, 47, &ack(5 * SEG, 1, vec![]), &log, 12 * SEG);
    assert_eq!((out.spurious_repairs, out.undone), (1, true));
    assert!(!r.in_recovery() && r.reordering_seen());
    // Back to the window before the cut, grown in slow start by what this
    // ACK acknowledged.
    assert_eq!(r.cwnd(), cwnd + 4 * SEG);
    assert_eq!((r.undone_episodes(), r.spurious_repairs()), (1, 1));
    // Segment 5 late in turn, 6..10 SACKed: now it waits the window (a
    // quarter min_rtt, widened a step by the spurious repair: 20 ms).
    let out = on_ack(
        &mut r,
        50,
        &ack(5 * SEG, 1, vec![6 * SEG..10 * SEG]),
        &log,
        12 * SEG,
    );
    assert!(out.newly_lost.is_empty() && !r.in_recovery());
    let due = r.rack_deadline().expect("reorder timer");
    assert!(due > at(60), "{due:?}");
    let out = on_ack(&mut r, 52, &ack(10 * SEG, 5, vec![]), &log, 12 * SEG);
    assert!(out.newly_lost.is_empty() && !r.in_recovery());
    assert_eq!(r.recovery_episodes(), 1);
}

#[test]
fn a_repair_acknowledged_a_round_trip_after_it_went_keeps_the_cut() {
    let log = log_of(5);
    let (mut r, cwnd) = segment_1_lost_and_repaired(&log, 5 * SEG);
    // The repair's own round trip: a real loss.
    let out = on_ack(&mut r, 87, &ack(5 * SEG, 46, vec![]), &log, 5 * SEG);
    assert_eq!((out.spurious_repairs, out.undone), (0, false));
    assert!(r.cwnd() < cwnd && !r.reordering_seen());
    assert_eq!(r.undone_episodes(), 0);
}
