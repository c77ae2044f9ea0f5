//! Fuzz targets `rtcp` and `mp2t` as proptests: valid compounds with
//! random bytes overwritten or cut, and arbitrary bytes.

use fanout_props::media::{check_mp2t, check_rtcp};
use fanout_rtp::app::{AsmpApp, RateReport};
use fanout_rtp::report::{self, Block, Part, SenderInfo};
use proptest::prelude::*;

fn valid_compound() -> Vec<u8> {
    let (subtype, data) = AsmpApp::Rate(RateReport {
        rate: 250_000,
        loss_ppm: 1000,
        rtt_us: 20_000,
    })
    .encode();
    report::write(&[
        Part::Report {
            ssrc: 1,
            sender: Some(SenderInfo {
                ntp: 1 << 40,
                rtp_timestamp: 3,
                packets: 4,
                octets: 5,
            }),
            blocks: vec![Block {
                ssrc: 2,
                fraction_lost: 3,
                cumulative_lost: -4,
                extended_max: 5,
                jitter: 6,
                lsr: 7,
                dlsr: 8,
            }],
        },
        Part::Sdes(vec![(1, "a@b".into())]),
        Part::App {
            ssrc: 1,
            name: fanout_rtp::app::NAME,
            subtype,
            data,
        },
        Part::Bye {
            ssrcs: vec![1],
            reason: None,
        },
    ])
    .expect("writable")
}

fn ts_stream() -> Vec<u8> {
    (0..12u8)
        .flat_map(|i| {
            let mut p = vec![i; 188];
            p[0] = 0x47;
            p
        })
        .collect()
}

proptest! {
    #[test]
    fn mutated_compounds_read_safely(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        cut in any::<usize>(),
    ) {
        let mut bytes = valid_compound();
        for (at, b) in edits {
            let n = bytes.len();
            bytes[at % n] = b;
        }
        let cut = cut % (bytes.len() + 1);
        check_rtcp(&bytes[..cut]);
        check_rtcp(&bytes);
    }

    #[test]
    fn arbitrary_bytes_read_safely(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        check_rtcp(&data);
        check_mp2t(&data);
    }

    #[test]
    fn mutated_ts_streams_cut_safely(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..16),
    ) {
        let mut bytes = ts_stream();
        for (at, b) in edits {
            let n = bytes.len();
            bytes[at % n] = b;
        }
        check_mp2t(&bytes);
    }
}

#[test]
fn the_valid_compound_is_read_whole() {
    let parts = report::parse(&valid_compound()).expect("valid");
    assert_eq!(parts.len(), 4);
    check_rtcp(&valid_compound());
    check_mp2t(&ts_stream());
}
