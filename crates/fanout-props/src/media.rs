//! RTP and RTCP (`fanout_rtp`) on arbitrary bytes: reading a compound
//! RTCP packet never panics, what it accepts writes back to the same
//! parts, and fanout's APP parts (ASMP's, TFMCC's) and TFMCC's RTP header
//! extension decode or are refused; an MPEG-TS byte
//! stream cut into RTP payloads gives only whole, synchronised packets.

use fanout_rtp::app::AsmpApp;
use fanout_rtp::mp2t::{ts_packets, TsChunker, TS_PACKET};
use fanout_rtp::pgmcc;
use fanout_rtp::report::{self, Part};
use fanout_rtp::tfmcc::{DataInfo, Feedback};

/// Reads `data` as a compound RTCP packet and checks what is accepted.
pub fn check_rtcp(data: &[u8]) {
    let Ok(parts) = report::parse(data) else {
        return;
    };
    assert!(parts.len() <= report::MAX_PARTS);
    for p in &parts {
        if let Part::App {
            name,
            subtype,
            data,
            ..
        } = p
        {
            if let Ok(app) = AsmpApp::decode(*name, *subtype, data) {
                let (sub, bytes) = app.encode();
                assert_eq!(AsmpApp::decode(*name, sub, &bytes), Ok(app));
            }
            if let Ok(fb) = Feedback::decode(*name, *subtype, data) {
                let (sub, bytes) = fb.encode();
                assert_eq!(Feedback::decode(*name, sub, &bytes), Ok(fb));
            }
            if let Ok(fb) = pgmcc::Feedback::decode(*name, *subtype, data) {
                let (sub, bytes) = fb.encode();
                assert_eq!(pgmcc::Feedback::decode(*name, sub, &bytes), Ok(fb));
            }
        }
    }
    if parts.iter().any(|p| matches!(p, Part::Other(_))) {
        return;
    }
    if let Some(bytes) = report::write(&parts) {
        assert_eq!(report::parse(&bytes), Ok(parts), "written back the same");
    }
}

/// Cuts `data` into MPEG-TS payloads, in pieces, and checks each; reads
/// `data` as an RTP packet.
pub fn check_mp2t(data: &[u8]) {
    let mut chunker = TsChunker::default();
    let mut out = 0usize;
    for piece in data.chunks(211) {
        chunker.push(piece);
        while let Some(p) = chunker.next_payload(7, false) {
            assert!(ts_packets(&p).is_ok());
            assert!(p.len() <= 7 * TS_PACKET);
            out += p.len();
        }
    }
    while let Some(p) = chunker.next_payload(7, true) {
        assert!(ts_packets(&p).is_ok());
        out += p.len();
    }
    // Every byte went out, was skipped, or is the tail of a packet not
    // whole yet.
    let accounted = out as u64 + chunker.skipped();
    assert!(accounted <= data.len() as u64);
    assert!(data.len() as u64 - accounted < TS_PACKET as u64);
    if let Ok(rtp) = fanout_rtp::rtp_types::RtpPacket::parse(data) {
        assert!(rtp.payload().len() <= data.len());
        let _ = ts_packets(rtp.payload());
        if let Some(info) = rtp.extension().and_then(|(id, d)| DataInfo::decode(id, d)) {
            assert_eq!(
                DataInfo::decode(rtp.extension().unwrap().0, &info.encode()),
                Some(info)
            );
        }
        if let Some(info) = rtp
            .extension()
            .and_then(|(id, d)| pgmcc::DataInfo::decode(id, d))
        {
            assert_eq!(
                pgmcc::DataInfo::decode(pgmcc::EXTENSION_ID, &info.encode()),
                Some(info)
            );
        }
    }
}
