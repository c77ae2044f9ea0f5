//! The cargo-fuzz targets `header`, `frames`, `sender_input` and
//! `receiver_input` as proptests (`fanout_props::unicast`), so the same
//! properties run on stable in `cargo test --workspace`. Bodies mix
//! arbitrary bytes with well-formed frames of plausible values, the ones
//! that reach deep engine logic.

use fanout_core::codec::Writer;
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use fanout_core::Engine;
use fanout_props::unicast::{
    check_frames, check_header, config, connect_datagram, control_as, drive_receiver, drive_sender,
    peer_addr, session_of_one, SenderModel,
};
use fanout_transport::session::MemberId;
use fanout_transport::wire::{
    decode_frames, AcceptFrame, AckFrame, AckFrequencyFrame, CatchUpFrame, CloseFrame,
    ConnectFrame, DataFrame, Frame, OfferFrame, SkipFrame, UpstreamAckFrame, UpstreamFrame,
    WireTimestamp, MAX_ACK_INTERVAL_US,
};
use proptest::prelude::*;
use std::time::Duration;

/// Frames with small, plausible field values: the ones that reach deep
/// engine logic. Offsets are mostly multiples of the 1200-byte segment size
/// the scripts negotiate, so ACKs land on segment boundaries and DATA frames
/// tile the stream.
fn arb_frame() -> impl Strategy<Value = Vec<u8>> {
    let off = prop_oneof![6 => (0u64..12).prop_map(|k| k * 1200), 1 => 0u64..70_000];
    let len = prop_oneof![3 => Just(1200u64), 1 => 0u64..1300];
    let frame = prop_oneof![
        12 => (off.clone(), any::<u32>(), any::<bool>(), any::<bool>(), len.clone())
            .prop_map(|(offset, timestamp, fin, message_end, len)| {
                let payload = vec![0x5a; len as usize];
                enc(Frame::Data(DataFrame { offset, timestamp: WireTimestamp(timestamp), fin, message_end, payload: &payload }))
            }),
        12 => (off.clone(), 0u64..70_000, any::<u32>(), 0u64..100_000,
              proptest::collection::vec((off.clone(), len), 0..6))
            .prop_map(|(cumulative, window, timestamp_echo, ack_delay_us, sack)| {
                let sack = sack
                    .into_iter()
                    .map(|(s, l)| s.max(cumulative)..s.max(cumulative) + l.max(1))
                    .collect();
                enc(Frame::Ack(AckFrame { cumulative, window, timestamp_echo: WireTimestamp(timestamp_echo), ack_delay_us, sack }))
            }),
        2 => (0u8..4, 0u64..2000, 0u64..100_000, any::<u32>(), 0u64..30_000)
            .prop_map(|(kind, max_payload, window, timestamp, offset)| {
                let timestamp = WireTimestamp(timestamp);
                enc(match kind {
                    0 => Frame::Connect(ConnectFrame { max_payload, window, timestamp, resume_from: offset }),
                    1 => Frame::Accept(AcceptFrame { max_payload, timestamp_echo: timestamp, member_id: 1, start_offset: offset, token: offset | 1 }),
                    2 => Frame::Offer(OfferFrame { max_payload, timestamp }),
                    _ => Frame::CatchUp(CatchUpFrame { member_id: 1, end: offset + 1, from: offset / 2 }),
                })
            }),
        2 => (off, 0u64..5000, any::<bool>()).prop_map(|(offset, len, ends_message)| enc(Frame::Skip(SkipFrame { offset, len, ends_message }))),
        2 => (0u32..=64, 0u32..=MAX_ACK_INTERVAL_US, 0u32..=MAX_ACK_INTERVAL_US).prop_map(|(every, min_interval_us, max_ack_delay_us)| enc(Frame::AckFrequency(AckFrequencyFrame { every, min_interval_us, max_ack_delay_us }))),
        2 => Just(enc(Frame::Ping)),
        2 => Just(enc(Frame::Padding)),
        // Session relay frames: neither unicast engine takes them.
        1 => (0u64..70_000, any::<u32>(), any::<bool>(), 0usize..1300)
            .prop_map(|(offset, timestamp, fin, len)| {
                let payload = vec![0x3c; len];
                enc(Frame::Upstream(UpstreamFrame { offset, timestamp: WireTimestamp(timestamp), fin, payload: &payload }))
            }),
        1 => (0u64..70_000, 0u64..70_000, any::<u32>()).prop_map(|(cumulative, window, timestamp_echo)| {
            enc(Frame::UpstreamAck(UpstreamAckFrame { cumulative, window, timestamp_echo: WireTimestamp(timestamp_echo) }))
        }),
        // Rare: they end the session.
        1 => (0u64..3, any::<bool>()).prop_map(|(code, reset)| {
            let c = CloseFrame { code, reason: "x" };
            enc(if reset { Frame::Reset(c) } else { Frame::Close(c) })
        }),
    ];
    proptest::collection::vec(frame, 1..4).prop_map(|v| v.concat())
}

fn enc(f: Frame<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    f.encode(&mut out);
    out
}

fn arb_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..48),
        arb_frame(),
        // Valid frames followed by garbage.
        (arb_frame(), proptest::collection::vec(any::<u8>(), 1..8)).prop_map(|(mut f, g)| {
            f.extend(g);
            f
        }),
    ]
}

/// One step of an engine script, encoded: kind bits (valid header,
/// stranger, application acts), the clock tick, a two-byte length, the body.
fn arb_step() -> impl Strategy<Value = Vec<u8>> {
    (any::<bool>(), 0u8..8, any::<bool>(), 0u8..16, arb_body()).prop_map(
        |(valid_header, stranger, app_acts, tick, body)| {
            let kind =
                u8::from(valid_header) | u8::from(stranger == 0) << 1 | u8::from(app_acts) << 2;
            let mut step = vec![kind | tick << 4];
            step.extend_from_slice(&(body.len() as u16).to_le_bytes());
            step.extend(body);
            step
        },
    )
}

/// A script: the configuration byte, then the steps.
fn script(first: u8, steps: Vec<Vec<u8>>) -> Vec<u8> {
    let mut v = vec![first];
    v.extend(steps.concat());
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Fuzz target `header`: decode agrees with `accept_header`, and a
    /// decoded header re-encodes to the same bytes.
    #[test]
    fn header_decode_is_consistent(bytes in proptest::collection::vec(any::<u8>(), 0..24),
                                   magic: bool) {
        let mut bytes = bytes;
        if magic && bytes.len() >= 3 {
            bytes[..3].copy_from_slice(&[b'F', b'O', fanout_transport::wire::VERSION]);
        }
        check_header(&bytes);
    }

    /// Fuzz target `frames`.
    #[test]
    fn decoded_frames_reencode(body in arb_body()) {
        check_frames(&body);
    }

    /// Fuzz target `sender_input`.
    #[test]
    fn sender_survives_hostile_datagrams(connected in prop::bool::weighted(0.9), finish: bool,
                                         steps in proptest::collection::vec(arb_step(), 0..40)) {
        drive_sender(&script(u8::from(!connected) | u8::from(finish) << 1, steps));
    }

    /// Fuzz target `receiver_input`.
    #[test]
    fn receiver_survives_hostile_datagrams(connected in prop::bool::weighted(0.9),
                                           steps in proptest::collection::vec(arb_step(), 0..40)) {
        drive_receiver(&script(u8::from(!connected), steps));
    }
}

/// Non-minimal varints are accepted (RFC 9000 §16 does not require the
/// shortest form) and re-encode minimally to the same frame.
#[test]
fn non_minimal_varints_decode_to_the_same_frame() {
    let mut long = vec![0x01]; // PING, then an ACK_FREQUENCY with an 8-byte varint
    long.push(0x08);
    long.put_u64(0xC000_0000_0000_0004);
    long.put_u8(0x40); // a 2-byte varint 0
    long.put_u8(0x00);
    long.put_u32(0x8000_0100); // a 4-byte varint 256
    let frames: Vec<_> = decode_frames(&long).collect();
    let f = AckFrequencyFrame {
        every: 4,
        min_interval_us: 0,
        max_ack_delay_us: 256,
    };
    assert_eq!(frames, vec![Ok(Frame::Ping), Ok(Frame::AckFrequency(f))]);
}

/// Regression: a cumulative ACK strictly inside a sent segment once made the
/// sender release its buffer mid-segment, so the segment's retransmission
/// read below the buffer's base. It is now clipped to the segment start and
/// counted as `invalid_ack`.
#[test]
fn mid_segment_cumulative_ack() {
    let mut now = Instant::ZERO;
    let mut s = session_of_one(now);
    let mut model = SenderModel::default();
    model.pump(&mut s, now);
    now += Duration::from_millis(10);
    s.handle_datagram(now, peer_addr(), &connect_datagram(0));
    model.write(&mut s, &[0xa5; 20_000]);
    model.pump(&mut s, now);
    // Let the RTO fire so every segment is deemed lost.
    now += Duration::from_secs(1);
    model.pump(&mut s, now);
    let token = s.member_token(MemberId(1)).unwrap();
    let ack = control_as(
        token,
        1,
        Frame::Ack(AckFrame {
            // Inside the second segment.
            cumulative: config().max_payload() + 1,
            window: 0,
            timestamp_echo: WireTimestamp(0),
            ack_delay_us: 0,
            sack: vec![],
        }),
    );
    s.handle_datagram(now, peer_addr(), &ack);
    assert_eq!(s.stats().drops.get(DropReason::InvalidAck), 1);
    model.pump(&mut s, now);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Fuzz target `protected_handshake`.
    #[test]
    fn arbitrary_handshakes_are_refused_and_spend_nothing(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
        fanout_props::protected::check_handshake_input(&bytes);
    }

    /// Fuzz target `sealed_input`.
    #[test]
    fn arbitrary_sealed_datagrams_do_not_open(bytes in proptest::collection::vec(any::<u8>(), 0..1500)) {
        fanout_props::protected::check_sealed_input(&bytes);
    }

    /// Fuzz target `merger_protected_input`.
    #[test]
    fn arbitrary_datagrams_at_a_protected_merger_change_nothing(bytes in proptest::collection::vec(any::<u8>(), 0..1500)) {
        fanout_props::protected::check_merger_protected_input(&bytes);
    }

    /// Fuzz target `listed_input`.
    #[test]
    fn arbitrary_listed_data_adds_no_byte(bytes in proptest::collection::vec(any::<u8>(), 0..1500)) {
        fanout_props::protected::check_listed_input(&bytes);
    }

    /// Fuzz target `listed_input`, on DATA frames at offsets the stream
    /// has (forged payloads under the listed-data key).
    #[test]
    fn forged_listed_data_frames_add_no_byte(offset in 0u64..70_000, len in 0usize..1400, fin: bool, fill: u8) {
        let mut frames = Vec::new();
        fanout_transport::wire::encode_data_header(&mut frames, offset, fanout_transport::wire::WireTimestamp(0), fin, false, len);
        frames.resize(frames.len() + len, fill);
        fanout_props::protected::check_listed_input(&frames);
    }
}
