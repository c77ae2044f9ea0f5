//! Drives a [`SessionSender`] with many synthetic members, for benchmarks
//! and memory reports (not used by the engine itself).

use super::{SessionConfig, SessionSender};
use crate::wire::{AckFrame, ConnectFrame, Frame, Header, HeaderFlags};
use fanout_core::time::Instant;
use fanout_core::Engine;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// A session sender with `n` admitted members and the ACK each would send.
#[derive(Debug)]
pub struct SyntheticSession {
    /// The engine under test.
    pub session: SessionSender,
    /// Member addresses, in admission order.
    pub members: Vec<SocketAddr>,
    /// Virtual now.
    pub now: Instant,
    session_id: u64,
    pn: u32,
    buf: Vec<u8>,
}

/// The address of synthetic member `i` (10.0.0.0/8, port 7000).
pub fn member_addr(i: usize) -> SocketAddr {
    let ip = Ipv4Addr::from(0x0A00_0000u32 + i as u32 + 1);
    SocketAddr::new(ip.into(), 7000)
}

impl SyntheticSession {
    /// A session with `n` members that all joined at time zero.
    pub fn new(n: usize) -> Self {
        let config = SessionConfig {
            group: Some("239.1.1.1:7000".parse().expect("literal")),
            wait_for_members: n,
            max_members: n,
            ..SessionConfig::default()
        };
        let mut s = SyntheticSession {
            session: SessionSender::new(config, 7, Instant::ZERO),
            members: (0..n).map(member_addr).collect(),
            now: Instant::ZERO,
            session_id: 7,
            pn: 0,
            buf: Vec::with_capacity(2048),
        };
        for i in 0..n {
            let mut d = Vec::new();
            Header {
                flags: HeaderFlags::default(),
                session_id: 0,
                packet_number: 0,
            }
            .encode(&mut d);
            Frame::Connect(ConnectFrame {
                sends_data: false,
                max_payload: 1400,
                window: 64 << 20,
                timestamp: 0,
                member_id: 0,
                start_offset: 0,
            })
            .encode(&mut d);
            s.session.handle_datagram(Instant::ZERO, member_addr(i), &d);
        }
        s.drain();
        s
    }

    /// Sends whatever the session sends now; returns the datagram count.
    pub fn drain(&mut self) -> usize {
        let mut n = 0;
        loop {
            self.buf.clear();
            if self
                .session
                .poll_transmit(self.now, &mut self.buf)
                .is_none()
            {
                return n;
            }
            n += 1;
        }
    }

    /// Writes `bytes` of data, advances time by `step` and lets the session
    /// send what its window allows. Returns the new send position.
    pub fn send_more(&mut self, bytes: usize, step: Duration) -> u64 {
        let zeros = vec![0u8; bytes];
        self.session.write(&zeros);
        self.now += step;
        self.session.handle_timeout(self.now);
        self.drain();
        self.session.snd_nxt()
    }

    /// An ACK datagram acknowledging everything below `cumulative`.
    pub fn ack(&mut self, cumulative: u64) -> Vec<u8> {
        self.ack_with(cumulative, Vec::new())
    }

    /// An ACK datagram with a cumulative point and SACK ranges (which may be
    /// hostile: unaligned, overlapping the window edge, too many).
    pub fn ack_with(&mut self, cumulative: u64, sack: Vec<std::ops::Range<u64>>) -> Vec<u8> {
        self.pn = self.pn.wrapping_add(1);
        let mut d = Vec::with_capacity(64);
        Header {
            flags: HeaderFlags::default(),
            session_id: self.session_id,
            packet_number: self.pn,
        }
        .encode(&mut d);
        Frame::Ack(AckFrame {
            cumulative,
            window: 64 << 20,
            timestamp_echo: (self.now.as_nanos() / 1_000) as u32,
            ack_delay_us: 0,
            sack,
        })
        .encode(&mut d);
        d
    }
}
