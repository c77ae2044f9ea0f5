//! Golden vectors: the exact bytes of one DATA and one ACK datagram, of
//! one UPSTREAM and one UPSTREAM_ACK datagram, and of the handshake and
//! SKIP and DEADLINE frames, as printed in `docs/wire.md` §6. A change here is a wire format change.

use super::{
    AcceptFrame, AckFrame, CatchUpFrame, ConnectFrame, DataFrame, Frame, Header, HeaderFlags,
    OfferFrame, SentFrame, SkipFrame, UpstreamAckFrame, UpstreamFrame, WireTimestamp,
};

const SESSION_ID: u64 = 0x0123_4567_89ab_cdef;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The last 5 bytes of a 1205-byte stream, with the FIN, sent 1 s after
/// the sender's epoch in its packet number 7.
#[test]
fn data_datagram() {
    let mut out = Vec::new();
    Header {
        flags: HeaderFlags::default(),
        session_id: SESSION_ID,
        packet_number: 7,
    }
    .encode(&mut out);
    Frame::Data(DataFrame {
        offset: 1200,
        timestamp: WireTimestamp(1_000_000),
        fin: true,
        message_end: false,
        payload: b"hello",
    })
    .encode(&mut out);
    let expected = concat!(
        "464f",             // magic "FO"
        "06",               // version 6
        "00",               // flags: none
        "0123456789abcdef", // session id
        "00000007",         // packet number 7
        "11",               // DATA | FIN
        "44b0",             // offset 1200 (2-byte varint)
        "000f4240",         // timestamp 1 000 000 µs
        "05",               // payload length 5
        "68656c6c6f",       // "hello"
    );
    assert_eq!(hex(&out), expected);
    assert_eq!(out.len(), 29);
}

/// The receiver's answer when bytes 1000..1200 are missing: cumulative
/// 1000, one SACK block 1200..1206 (the five bytes and the FIN), a 64 KiB
/// window, and the echo of the timestamp of the last in-order segment.
#[test]
#[allow(clippy::single_range_in_vec_init)] // one SACK block
fn ack_datagram() {
    let mut out = Vec::new();
    Header {
        flags: HeaderFlags::default(),
        session_id: SESSION_ID,
        packet_number: 3,
    }
    .encode(&mut out);
    Frame::Ack(AckFrame {
        cumulative: 1000,
        window: 65_536,
        timestamp_echo: WireTimestamp(999_500),
        ack_delay_us: 0,
        sack: vec![1200..1206],
    })
    .encode(&mut out);
    let expected = concat!(
        "464f",             // magic "FO"
        "06",               // version 6
        "00",               // flags: none
        "0123456789abcdef", // session id
        "00000003",         // packet number 3 (the receiver's own space)
        "04",               // ACK
        "43e8",             // cumulative 1000
        "80010000",         // window 65 536 (4-byte varint)
        "000f404c",         // timestamp echo 999 500 µs
        "00",               // ack delay 0 µs
        "01",               // one SACK block
        "44b0",             // block start 1200
        "06",               // block length 6 (5 bytes + FIN)
    );
    assert_eq!(hex(&out), expected);
    assert_eq!(out.len(), 32);
}

/// A member's whole upstream stream, "why?\n" with its FIN, sent 2 s after
/// its epoch in its packet number 4 (session relay, `docs/wire.md` §6).
#[test]
fn upstream_datagram() {
    let mut out = Vec::new();
    Header {
        flags: HeaderFlags::default(),
        session_id: SESSION_ID,
        packet_number: 4,
    }
    .encode(&mut out);
    Frame::Upstream(UpstreamFrame {
        offset: 0,
        timestamp: WireTimestamp(2_000_000),
        fin: true,
        payload: b"why?\n",
    })
    .encode(&mut out);
    let expected = concat!(
        "464f",             // magic "FO"
        "06",               // version 6
        "00",               // flags: none
        "0123456789abcdef", // session id
        "00000004",         // packet number 4 (the member's own space)
        "15",               // UPSTREAM | FIN
        "00",               // upstream offset 0
        "001e8480",         // timestamp 2 000 000 µs
        "05",               // payload length 5
        "7768793f0a",       // "why?\n"
    );
    assert_eq!(hex(&out), expected);
    assert_eq!(out.len(), 28);
}

/// The sender's answer: all 5 bytes and the FIN (cumulative 6), a window of
/// 65 530 bytes beyond it, the member's timestamp echoed.
#[test]
fn upstream_ack_datagram() {
    let mut out = Vec::new();
    Header {
        flags: HeaderFlags::default(),
        session_id: SESSION_ID,
        packet_number: 9,
    }
    .encode(&mut out);
    Frame::UpstreamAck(UpstreamAckFrame {
        cumulative: 6,
        window: 65_530,
        timestamp_echo: WireTimestamp(2_000_000),
    })
    .encode(&mut out);
    let expected = concat!(
        "464f",             // magic "FO"
        "06",               // version 6
        "00",               // flags: none
        "0123456789abcdef", // session id
        "00000009",         // packet number 9 (the sender's space)
        "16",               // UPSTREAM_ACK
        "06",               // cumulative 6 (5 bytes + FIN)
        "8000fffa",         // window 65 530 (4-byte varint)
        "001e8480",         // timestamp echo 2 000 000 µs
    );
    assert_eq!(hex(&out), expected);
    assert_eq!(out.len(), 26);
}

/// The handshake frames, each behind a header: a join (CONNECT), its
/// admission (ACCEPT), a sender's invitation to a listener (OFFER) and a
/// late joiner's prefix request (CATCH_UP).
#[test]
fn handshake_frames() {
    let frame = |f: Frame<'_>| {
        let mut out = Vec::new();
        f.encode(&mut out);
        hex(&out)
    };
    assert_eq!(
        frame(Frame::Connect(ConnectFrame {
            max_payload: 1421,
            window: 65_536,
            timestamp: WireTimestamp(1_000_000),
            resume_from: 0,
        })),
        concat!(
            "02",       // CONNECT
            "458d",     // max payload 1421
            "80010000", // window 65 536
            "000f4240", // timestamp 1 000 000 µs
            "00",       // resume from 0: a fresh join
        )
    );
    assert_eq!(
        frame(Frame::Accept(AcceptFrame {
            max_payload: 1421,
            timestamp_echo: WireTimestamp(1_000_000),
            member_id: 5,
            start_offset: 1200,
            token: 0x0123_4567_89ab_cdef,
        })),
        concat!(
            "03",               // ACCEPT
            "458d",             // max payload 1421
            "000f4240",         // timestamp echo
            "05",               // member id 5
            "44b0",             // start offset 1200
            "0123456789abcdef", // token
        )
    );
    assert_eq!(
        frame(Frame::Offer(OfferFrame {
            max_payload: 1421,
            timestamp: WireTimestamp(7),
        })),
        concat!(
            "0b",       // OFFER
            "458d",     // max payload 1421
            "00000007", // timestamp 7 µs
        )
    );
    assert_eq!(
        frame(Frame::CatchUp(CatchUpFrame {
            member_id: 5,
            end: 1200,
            from: 0,
        })),
        concat!(
            "0c",   // CATCH_UP
            "05",   // member id 5
            "44b0", // end 1200
            "00",   // from 0
        )
    );
    assert_eq!(
        frame(Frame::Sent(SentFrame { end: 1200 })),
        concat!(
            "0d",   // SENT
            "44b0", // end 1200
        )
    );
}

/// A real-time sender gives up a lost message: bytes 1200..2600, at whose
/// end the message ends (`docs/wire.md` §4.5).
#[test]
fn skip_frame() {
    let mut out = Vec::new();
    Frame::Skip(SkipFrame {
        offset: 1200,
        len: 1400,
        ends_message: true,
    })
    .encode(&mut out);
    assert_eq!(
        hex(&out),
        concat!(
            "05",   // SKIP
            "44b0", // offset 1200
            "4578", // length 1400
            "01",   // a message ends at its end
        )
    );
}

/// The message of the DATA after it is due 1.3 s after the sender's epoch
/// (`docs/wire.md` §4.5).
#[test]
fn deadline_frame() {
    let mut out = Vec::new();
    Frame::Deadline(WireTimestamp(1_300_000)).encode(&mut out);
    assert_eq!(
        hex(&out),
        concat!(
            "1e",       // DEADLINE
            "0013d620", // 1 300 000 µs
        )
    );
}
