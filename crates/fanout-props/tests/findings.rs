//! Findings of the `session_input` and `merger_input` fuzz targets (and of
//! the checks of the known suspicions), one deterministic test each, with
//! the minimized script as bytes and the root cause it had ("Was: ...").
//! All are fixed; each stays as a regression test.

use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use fanout_core::{drain, Engine};
use fanout_props::attack::stranger;
use fanout_props::session::{session_config, SESSION};
use fanout_props::{drive_catch_up, drive_merger, drive_session, honest_config};
use fanout_transport::session::{MemberId, SessionSender};
use fanout_transport::wire::{AckFrame, ConnectFrame, Frame, Header, HeaderFlags, WireTimestamp};

/// A stranger CONNECTs with a zero window before any data was sent and
/// never acknowledges (found by `session_input` within seconds).
const CLOSED_WINDOW: [u8; 8] = [179, 66, 50, 179, 66, 50, 179, 66];

#[test]
/// Was: a member whose window is closed and that has nothing outstanding gets
/// no timer (no persist probe, no stall timer: reindex_slot arms the stall only
/// while data is outstanding), and the session window is the minimum over
/// members: the session waits forever. Fixed: every member has a persist timer
/// while its window is closed (`MemberTimer::Persist`, zero-window probes) and
/// the stall timer while it blocks the session.
fn a_member_with_a_closed_window_freezes_the_session() {
    drive_session(&CLOSED_WINDOW);
}

/// Five strangers join and acknowledge everything sent with timestamp
/// echoes of the sender's clock now (an RTT sample of 0 ms): the median RTT
/// is theirs, and the honest members (60 ms) are evicted as RTT outliers.
const FRESH_ECHOES: [u8; 514] = [
    1, 2, 12, 1, 1, 1, 1, 1, 0, 5, 1, 1, 1, 0, 0, 2, 12, 2, 1, 1, 1, 1, 0, 5, 1, 1, 1, 0, 0, 2, 12,
    0, 1, 0, 0, 1, 0, 58, 1, 1, 1, 1, 1, 140, 3, 1, 0, 0, 58, 6, 1, 1, 1, 1, 1, 1, 140, 3, 1, 16,
    0, 58, 0, 58, 0, 58, 0, 58, 0, 140, 3, 1, 16, 0, 58, 0, 58, 6, 2, 1, 1, 1, 1, 1, 58, 0, 0, 0,
    1, 0, 1, 0, 58, 0, 0, 0, 1, 0, 1, 0, 140, 3, 1, 16, 1, 140, 3, 1, 16, 0, 140, 3, 1, 16, 1, 0,
    0, 0, 0, 140, 3, 1, 16, 0, 0, 0, 1, 0, 1, 0, 1, 0, 58, 0, 58, 0, 0, 0, 1, 0, 1, 0, 58, 0, 58,
    0, 0, 0, 1, 0, 1, 0, 140, 3, 1, 16, 0, 58, 0, 58, 0, 58, 0, 58, 0, 58, 0, 140, 3, 1, 16, 0, 58,
    0, 1, 0, 1, 0, 1, 0, 58, 0, 58, 0, 140, 16, 0, 6, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 58,
    0, 58, 0, 0, 0, 1, 0, 1, 0, 140, 3, 1, 16, 0, 58, 0, 58, 6, 1, 1, 1, 1, 1, 1, 58, 0, 58, 0, 58,
    0, 140, 3, 1, 16, 0, 58, 0, 1, 0, 1, 0, 1, 0, 58, 6, 1, 1, 1, 1, 1, 1, 58, 6, 2, 1, 1, 1, 1, 1,
    58, 0, 0, 0, 1, 0, 1, 0, 58, 0, 0, 0, 1, 0, 1, 0, 140, 3, 1, 16, 0, 58, 0, 58, 6, 1, 1, 1, 1,
    1, 1, 58, 0, 58, 0, 58, 0, 140, 3, 1, 16, 0, 58, 0, 1, 0, 1, 0, 1, 0, 58, 6, 1, 1, 1, 1, 1, 1,
    58, 6, 2, 1, 1, 1, 1, 1, 58, 0, 0, 0, 1, 0, 1, 0, 58, 0, 0, 0, 1, 0, 1, 0, 140, 3, 1, 16, 0,
    58, 0, 58, 6, 1, 1, 1, 1, 1, 1, 58, 0, 58, 0, 58, 0, 140, 3, 1, 16, 0, 58, 0, 1, 0, 1, 0, 1, 0,
    58, 6, 1, 1, 1, 1, 1, 1, 58, 6, 2, 1, 1, 1, 1, 1, 58, 0, 0, 0, 1, 0, 1, 0, 58, 0, 0, 0, 1, 0,
    1, 0, 140, 3, 1, 16, 0, 58, 0, 58, 6, 1, 1, 1, 1, 1, 1, 58, 0, 0, 0, 1, 0, 1, 0, 140, 3, 1, 16,
    0, 58, 6, 1, 1, 1, 1, 1, 1, 1, 58, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 16, 0,
    0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0,
    0, 1, 1, 1, 1, 1, 140, 3, 1, 16, 1, 58, 1, 1,
];

#[test]
/// Was: RTT samples come from peer-chosen timestamp echoes that are never
/// checked against what the sender sent (on_ack samples now - echo): strangers
/// forging fresh echoes get an RTT of 0, form the median, and outlier eviction
/// evicts every honest member. Fixed: an RTT counts as an outlier only if the
/// member's own queue makes it so (`srtt − min_rtt`, `session::eviction`);
/// members claiming tiny RTTs can lower the median but not make an honest path
/// queue.
fn strangers_with_fresh_echoes_evict_honest_members_as_outliers() {
    drive_session(&FRESH_ECHOES);
}

/// A stranger acknowledges the data sent with an echo 16.8 s in the
/// future; its RTT sample is about 4295 s (wrapping), the session RTT (the
/// maximum) and so the pacing rate follow it, and after the stranger is
/// evicted for stalling nothing recomputes the rate.
const FUTURE_ECHO: [u8; 38] = [
    1, 114, 7, 93, 0, 1, 1, 1, 0, 145, 188, 2, 1, 23, 162, 7, 1, 0, 1, 1, 1, 0, 195, 4, 13, 1, 0,
    1, 1, 1, 1, 0, 65, 55, 1, 1, 1, 1,
];

#[test]
/// Was: an unchecked timestamp echo from the future gives an RTT sample of
/// ~4295 s (wire_timestamp wraps); the session RTT (max over members) sets a
/// pacing rate of ~0, and the pacer keeps that rate after the stranger's
/// eviction (set_rate only runs after a send): the session stops. Fixed: an
/// echo from the future is no sample (`WireTimestamp::elapsed`), and the pacing
/// rate is recomputed after a member leaves.
fn an_echo_from_the_future_stops_the_pacer() {
    drive_session(&FUTURE_ECHO);
}

/// A stranger child of the merger acknowledges up to 2^62 − 1 while the
/// session is idle: the honest children are "behind a sibling" and, not
/// advancing, are evicted as stalled after `child_stall`.
const CHILD_ACK_BEYOND: [u8; 47] = [
    1, 0, 3, 0, 0, 0, 82, 12, 1, 1, 1, 1, 1, 0, 5, 1, 1, 1, 0, 0, 84, 16, 1, 1, 1, 1, 1, 10, 1, 1,
    0, 5, 2, 0, 0, 1, 0, 0, 0, 0, 255, 0, 255, 0, 255, 0, 255,
];

#[test]
/// Was: the merger takes children's cumulative ACKs for any offset (it never
/// learns what the parent sent), and ChildTable::stalled evicts every child
/// below the highest sibling that has not advanced for child_stall: one child
/// acknowledging beyond the stream gets all its honest siblings evicted. Fixed:
/// the parent answers the merger's roster with SENT (how far the stream was
/// sent) and the merger believes no claim beyond it (`ChildTable::stalled`).
fn a_child_acknowledging_unsent_data_gets_its_siblings_evicted() {
    drive_merger(&CHILD_ACK_BEYOND);
}

/// The same through a resume CONNECT: a stranger resumes at offset 1
/// before anything was sent and acknowledges 0; it is admitted at 1 (its
/// ACK covers what the parent was told), above its idle siblings.
const CHILD_RESUME_BEYOND: [u8; 45] = [
    1, 111, 0, 0, 0, 78, 0, 192, 0, 128, 0, 144, 0, 240, 0, 131, 13, 1, 168, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 0, 145, 240, 0, 58, 10, 1, 120, 1, 1, 1, 1, 1, 1, 1, 235, 240,
];

#[test]
/// Was: Merger::admit_resume takes the resume CONNECT's start_offset unchecked
/// (the session sender refuses one beyond SND.NXT), and on_resumed_ack admits
/// the child there: its position beyond the data sent puts its honest siblings
/// behind it, evicted as stalled after child_stall. Fixed by the same SENT
/// bound: a resumed child's position counts only up to what was sent.
fn a_child_resuming_beyond_the_sent_data_gets_its_siblings_evicted() {
    drive_merger(&CHILD_RESUME_BEYOND);
}

/// A stranger child SACKs a range near 2^62: an honest receiver joining
/// the merger later is admitted at that offset and never gets any data.
const LATE_START_BEYOND: [u8; 42] = [
    1, 0, 3, 0, 0, 0, 82, 12, 1, 1, 1, 1, 1, 0, 5, 1, 1, 1, 0, 0, 84, 19, 1, 1, 1, 1, 1, 1, 1, 1,
    10, 1, 0, 1, 5, 2, 0, 0, 1, 0, 0, 95,
];

#[test]
/// Was: Merger::late_start admits a late child at ChildTable::highest(), the
/// highest offset any child acknowledged cumulatively or by SACK, unchecked:
/// one child acknowledging beyond the stream sets every later joiner past its
/// end. Fixed: a late child starts at most at the larger of SENT and what the
/// last merged ACK told the parent (`Merger::late_start`).
fn a_child_acknowledging_unsent_data_sets_late_joiners_past_the_stream() {
    drive_merger(&LATE_START_BEYOND);
}

/// A stranger child joins and stays silent, holding the merged point for
/// `child_stall` (5 s) until it is evicted; a receiver joining right then
/// misses the segments in flight and is evicted as stalled itself.
const SILENT_CHILD_THEN_LATE_JOINER: [u8; 81] = [
    1, 82, 11, 1, 24, 1, 1, 1, 1, 1, 1, 1, 0, 35, 160, 0, 176, 0, 192, 0, 64, 0, 208, 0, 236, 2, 1,
    0, 144, 0, 96, 0, 176, 0, 224, 0, 64, 0, 64, 0, 48, 0, 176, 0, 224, 0, 96, 0, 208, 0, 144, 0,
    240, 0, 176, 0, 224, 0, 144, 0, 16, 0, 240, 0, 224, 0, 124, 2, 1, 6, 192, 0, 208, 0, 48, 0,
    240, 0, 176, 0, 143,
];

#[test]
/// Was: the merged ACK built after a silent child's eviction echoes its
/// siblings' last echo, seconds old (mctcp echo_at after a leave), so the
/// sender's RTT for the merger member jumps to ~child_stall and its RTO to
/// seconds; a late joiner's missed in-flight prefix is only repaired on that
/// RTO, and the merger evicts it as stalled first. Fixed: the time an echo
/// waited at the merger goes into the merged ACK's `ack_delay_us`, and the
/// sender takes no RTT sample from an ACK held longer than allowed
/// (`Recovery::on_ack`).
fn a_late_joiner_after_a_silent_child_left_is_evicted() {
    drive_merger(&SILENT_CHILD_THEN_LATE_JOINER);
}

/// Receivers behind a merger, silent while no data flows for 30 s.
const IDLE_CHILDREN: [u8; 130] = [
    1, 4, 0, 24, 0, 0, 0, 50, 5, 23, 0, 0, 0, 1, 0, 0, 174, 0, 8, 0, 0, 0, 4, 0, 0, 0, 0, 0, 14, 0,
    0, 0, 60, 2, 0, 82, 30, 0, 92, 2, 0, 68, 0, 0, 91, 1, 0, 175, 0, 0, 0, 8, 2, 0, 0, 27, 4, 50,
    48, 0, 190, 107, 8, 3, 104, 0, 0, 0, 0, 0, 55, 158, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 92, 2,
    0, 76, 0, 0, 0, 0, 7, 0, 68, 9, 39, 16, 0, 0, 7, 85, 0, 49, 0, 123, 17, 199, 112, 0, 101, 0, 0,
    2, 172, 162, 0, 12, 6, 8, 148, 130, 0, 210, 240, 0, 162, 2, 119, 8,
];

#[test]
/// Was: the merger forgot children after `child_timeout` of silence and relied
/// on the sender's keep-alive PING (relayed) to make them speak, but the sender
/// PINGs only silent members and a merger never is (its ROSTER pages go up
/// every second): an idle subtree expired whole. Fixed: the merger PINGs
/// children silent for a third of `child_timeout` (`merge/engine/probe.rs`).
fn a_merger_keeps_its_idle_children() {
    drive_merger(&IDLE_CHILDREN);
}

/// Two strangers hold a merger's point for seconds (the sender backs its RTO
/// off meanwhile); an honest receiver joins late, misses one segment, and its
/// siblings move on.
const LATE_JOINER_AFTER_BACKOFF: [u8; 63] = [
    4, 44, 2, 0, 56, 146, 5, 171, 176, 0, 0, 1, 135, 5, 15, 16, 0, 0, 1, 224, 0, 240, 0, 6, 11, 71,
    104, 0, 0, 0, 0, 0, 0, 6, 62, 5, 144, 0, 112, 0, 240, 0, 80, 0, 144, 0, 144, 0, 128, 0, 64, 0,
    208, 0, 236, 1, 1, 80, 0, 64, 0, 15, 0,
];

#[test]
/// Was: the merged ACK released by the strangers' eviction carried a seconds-
/// old echo; with that sample skipped, nothing cleared the RTO back-off (only a
/// sample did), so the repair came seconds later and the merger evicted the
/// late child as stalled. Fixed: an acknowledgement of new data clears the
/// back-off (`RttEstimator::clear_backoff`, RFC 9002 §6.2.1).
fn a_late_child_is_repaired_after_a_long_hold() {
    drive_merger(&LATE_JOINER_AFTER_BACKOFF);
}

/// A stranger child echoes a timestamp 2164 s ahead of the sender's clock:
/// modulo 2^32 µs that reads as 2131 s ago, and the merger forwards it.
const ECHO_BEYOND_THE_WRAP: [u8; 37] = [
    0, 188, 2, 0, 80, 98, 9, 72, 88, 0, 0, 0, 0, 0, 0, 1, 80, 0, 36, 17, 40, 88, 0, 0, 0, 0, 0, 0,
    0, 90, 5, 0, 31, 0, 0, 0, 129,
];

#[test]
/// Was: the sender took a 2131 s RTT sample for the merger member, and its
/// pacing rate stopped the session. Fixed: an echo older than the first
/// transmission of the data it acknowledges is no sample (`Recovery::on_ack`).
fn an_echo_from_beyond_the_wrap_is_no_sample() {
    drive_merger(&ECHO_BEYOND_THE_WRAP);
}

/// One stranger child holds the merger's window closed; another resumed at
/// offset 1 before anything was sent and holds the merged point once the first
/// is evicted.
const TURNS_AT_HOLDING: [u8; 28] = [
    0, 163, 6, 74, 24, 0, 0, 0, 0, 247, 9, 0, 48, 0, 0, 33, 0, 0, 0, 0, 122, 2, 186, 0, 76, 2, 0,
    24,
];

#[test]
/// Was: each holder got a full `child_stall` after the previous one's eviction,
/// and the resume beyond the data sent was admitted: together longer than the
/// sender's stall timeout, which evicted the whole merger. Fixed: a resume
/// beyond SENT is refused, a resumed child must reach its siblings' front, and
/// children behind evicted holders get a short grace, not a fresh stall time
/// (`ChildTable::restart_stall_clocks`).
fn strangers_taking_turns_cannot_hold_a_subtree() {
    drive_merger(&TURNS_AT_HOLDING);
}

/// A stranger child acknowledges everything sent with a zero window, and keeps
/// it closed.
const WINDOW_HOLDER: [u8; 43] = [
    0, 204, 2, 0, 50, 47, 0, 172, 2, 0, 12, 0, 0, 178, 5, 6, 240, 0, 0, 1, 59, 4, 242, 80, 0, 82,
    117, 7, 178, 112, 0, 0, 0, 0, 87, 0, 0, 0, 0, 0, 0, 0, 0,
];

#[test]
/// Was: only children behind a sibling counted as stalled; one at the front
/// with a closed window held the subtree until the sender evicted the merger.
/// Fixed: a child holding the merged window's edge with the stream sent up to
/// it is a holder too (`ChildTable::stalled`).
fn a_child_holding_the_window_closed_is_evicted() {
    drive_merger(&WINDOW_HOLDER);
}

/// A receiver joins a catch-up session after the FIN went out, while another
/// member has not acknowledged it yet.
const JOINED_AFTER_THE_FIN: [u8; 17] = [
    4, 108, 2, 0, 167, 126, 1, 55, 14, 1, 19, 45, 0, 143, 0, 96, 0,
];

#[test]
/// Was: it started past the FIN (so its catch-up asked for more than the stream
/// and was refused), then at the FIN's offset with a repair of the FIN's
/// segment, whose data the others' ACKs had released: evicted as behind the
/// quorum. Fixed: a joiner starts at most at the FIN, and a member holding
/// everything below the send buffer gets only the part of a segment above it
/// (`sender/repair.rs`).
fn a_joiner_after_the_fin_gets_the_fin() {
    drive_catch_up(&JOINED_AFTER_THE_FIN);
}

/// Checked suspicion, not a finding: a member's ACK that claims data above
/// the send edge (a forger's, or an honest receiver's fed a forged DATA) is
/// counted (`AckOfUnsent`) and clipped to the send edge; the rest of it is
/// taken (refusing it whole would silence an honest member until evicted).
#[test]
fn a_claim_above_the_send_edge_is_clipped_and_counted() {
    let now = Instant::ZERO;
    let mut s = SessionSender::new(session_config(0, 1), SESSION, now);
    let who = stranger(0);
    let mss = honest_config().max_payload();
    let datagram = |session_id, pn, f: Frame<'_>| {
        let mut d = Vec::new();
        Header {
            flags: HeaderFlags::default(),
            session_id,
            packet_number: pn,
        }
        .encode(&mut d);
        f.encode(&mut d);
        d
    };
    let connect = Frame::Connect(ConnectFrame {
        max_payload: mss,
        window: 64 << 10,
        timestamp: WireTimestamp(0),
        resume_from: 0,
    });
    s.handle_datagram(now, who, &datagram(0, 0, connect));
    assert_eq!(s.member_count(), 1);
    let token = s.member_token(MemberId(1)).unwrap();
    // The member echoes its token (address validation): data may start.
    s.handle_datagram(now, who, &datagram(token, 1, Frame::Padding));
    s.write(&[7; 20_000]);
    drain(&mut s, now, &mut Vec::new(), 256, |_, _| {});
    let sent = s.snd_nxt();
    assert!(sent >= 2 * mss, "data went out: {sent}");
    let ack = |cumulative, sack| {
        Frame::Ack(AckFrame {
            cumulative,
            window: 64 << 10,
            timestamp_echo: WireTimestamp(0),
            ack_delay_us: 0,
            sack,
        })
    };
    let cumulative = |s: &SessionSender| s.members().map(|m| m.2).next();
    for (pn, sack) in [sent..sent + mss, mss..sent + 1, sent - 1..1 << 61]
        .into_iter()
        .enumerate()
    {
        let before = s.stats().drops.get(DropReason::AckOfUnsent);
        let d = datagram(token, pn as u32 + 1, ack(0, vec![sack.clone()]));
        s.handle_datagram(now, who, &d);
        assert_eq!(
            s.stats().drops.get(DropReason::AckOfUnsent),
            before + 1,
            "SACK {sack:?} above SND.NXT {sent} counted"
        );
        assert_eq!(cumulative(&s), Some(0));
    }
    s.handle_datagram(now, who, &datagram(token, 9, ack(sent - 1, Vec::new())));
    assert_eq!(
        cumulative(&s),
        Some((sent - 1) / mss * mss),
        "whole segments"
    );
    s.handle_datagram(now, who, &datagram(token, 10, ack(sent + mss, Vec::new())));
    assert_eq!(cumulative(&s), Some(sent), "clipped to SND.NXT");
    assert_eq!(s.stats().drops.get(DropReason::AckOfUnsent), 4);
    assert_eq!(s.member_count(), 1);
}
