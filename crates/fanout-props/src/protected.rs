//! Protected sessions fed arbitrary bytes (`fanout_transport::protection`):
//! as raw datagrams, as a joiner's first handshake message, as a sealed
//! datagram, and as the answer to a receiver's handshake. Nothing panics,
//! nobody without the key is admitted, nothing opens, and every refusal is
//! counted.

use fanout_core::time::Instant;
use fanout_core::{drain, Engine};
use fanout_transport::protection::noise::MAX_HANDSHAKE_MESSAGE;
use fanout_transport::protection::{Credentials, Protection};
use fanout_transport::session::{SessionConfig, SessionSender};
use fanout_transport::wire::{Frame, Header, HeaderFlags};
use fanout_transport::{Receiver, TransportConfig};
use std::net::SocketAddr;

fn protected(seed: u8) -> TransportConfig {
    TransportConfig {
        protection: Some(Protection::new(Credentials::with_psk([7; 32]), [seed; 32])),
        ..TransportConfig::default()
    }
}

/// `data` three ways: as it is, as the only frame (HANDSHAKE) of a clear
/// datagram, and behind a header with `SEALED` set.
fn variants(data: &[u8], session_id: u64) -> [Vec<u8>; 3] {
    let header = |flags: HeaderFlags| {
        let mut out = Vec::new();
        Header {
            flags,
            session_id,
            packet_number: u32::from_le_bytes([
                data.first().copied().unwrap_or(0),
                data.get(1).copied().unwrap_or(0),
                0,
                0,
            ]),
        }
        .encode(&mut out);
        out
    };
    let mut handshake = header(HeaderFlags::default());
    Frame::Handshake(&data[..data.len().min(MAX_HANDSHAKE_MESSAGE)]).encode(&mut handshake);
    let mut sealed = header(HeaderFlags::default().with(HeaderFlags::SEALED));
    sealed.extend_from_slice(data);
    [data.to_vec(), handshake, sealed]
}

/// Fuzz target `protected_input`.
pub fn check_protected_input(data: &[u8]) {
    let now = Instant::ZERO;
    let sender_addr: SocketAddr = "10.0.0.1:5000".parse().expect("literal");
    let stranger: SocketAddr = "10.0.9.9:7000".parse().expect("literal");
    let mut sender = SessionSender::new(
        SessionConfig {
            transport: protected(1),
            ..SessionConfig::default()
        },
        42,
        now,
    );
    let member: SocketAddr = "10.0.1.1:7000".parse().expect("literal");
    let mut receiver = Receiver::join(protected(2), sender_addr, now);
    let mut buf = Vec::new();
    // The receiver's first handshake message, held back until the junk
    // has been refused.
    let mut first = Vec::new();
    drain(&mut receiver, now, &mut buf, 4, |_, d| {
        first.push(d.to_vec())
    });
    let inputs = variants(data, 42);
    for d in &inputs {
        sender.handle_datagram(now, stranger, d);
        receiver.handle_datagram(now, sender_addr, d);
    }
    drain(&mut sender, now, &mut buf, 16, |_, _| {});
    drain(&mut receiver, now, &mut buf, 16, |_, _| {});
    // Random bytes never hold a handshake that authenticates under the
    // key (a forgery of ChaCha20-Poly1305 or AES-GCM).
    assert_eq!(sender.stats().members_joined, 0);
    assert_eq!(receiver.member_id(), 0, "never accepted");
    let st = sender.stats();
    assert_eq!(st.datagrams_received, 3);
    assert_eq!(st.drops.total(), 3, "every input refused and counted");
    assert_eq!(receiver.stats().drops.total(), 3);
    // The honest handshake still completes: the junk spent nothing of it.
    for d in &first {
        sender.handle_datagram(now, member, d);
    }
    let mut answers = Vec::new();
    drain(&mut sender, now, &mut buf, 16, |_, d| {
        answers.push(d.to_vec())
    });
    for d in &answers {
        receiver.handle_datagram(now, sender_addr, d);
    }
    assert_eq!(sender.stats().members_joined, 1);
    assert_ne!(receiver.member_id(), 0, "the honest answer opened");
}
