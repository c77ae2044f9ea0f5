//! Drives a [`SessionSender`] with many synthetic members, for benchmarks
//! and memory reports (not used by the engine itself).

use super::{MemberId, SessionConfig, SessionSender};
use crate::wire::{
    decode_frames, AckFrame, ConnectFrame, Frame, Header, HeaderFlags, WireTimestamp, HEADER_LEN,
};
use fanout_core::time::Instant;
use fanout_core::Engine;
use std::net::{Ipv4Addr, SocketAddr};
use std::ops::Range;
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
    /// Stream ranges of the data datagrams sent by the last
    /// [`SyntheticSession::drain`] (new segments and repairs).
    pub sent: Vec<Range<u64>>,
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
        // Members accept the session's payloads (a smaller size would
        // make it fit its datagrams to them).
        let max_payload = config.transport.max_payload();
        let mut s = SyntheticSession {
            session: SessionSender::new(config, 7, Instant::ZERO),
            members: (0..n).map(member_addr).collect(),
            now: Instant::ZERO,
            sent: Vec::new(),
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
                max_payload,
                window: 64 << 20,
                timestamp: WireTimestamp(0),
                resume_from: 0,
            })
            .encode(&mut d);
            s.session.handle_datagram(Instant::ZERO, member_addr(i), &d);
            // As a receiver does on ACCEPT: echo the token at once, which
            // validates the member's address.
            let confirm = s.member_datagram(i, &Frame::Padding);
            s.session
                .handle_datagram(Instant::ZERO, member_addr(i), &confirm);
        }
        s.drain();
        s
    }

    /// Sends whatever the session sends now; returns the datagram count.
    pub fn drain(&mut self) -> usize {
        let mut n = 0;
        self.sent.clear();
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
            let body = self.buf.get(HEADER_LEN..).unwrap_or_default();
            if let Some(Ok(Frame::Data(d))) = decode_frames(body).next() {
                self.sent.push(d.range());
            }
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

    /// Member `i`'s ACK datagram acknowledging everything below
    /// `cumulative`.
    pub fn ack(&mut self, i: usize, cumulative: u64) -> Vec<u8> {
        self.ack_with(i, cumulative, Vec::new())
    }

    /// Member `i`'s ACK datagram with a cumulative point and SACK ranges
    /// (which may be hostile: unaligned, overlapping the window edge, too
    /// many), under its token.
    pub fn ack_with(&mut self, i: usize, cumulative: u64, sack: Vec<Range<u64>>) -> Vec<u8> {
        let ack = Frame::Ack(AckFrame {
            cumulative,
            window: 64 << 20,
            timestamp_echo: WireTimestamp::at(self.now),
            ack_delay_us: 0,
            sack,
        });
        self.member_datagram(i, &ack)
    }

    /// Member `i`'s datagram carrying `frame`, under its token.
    fn member_datagram(&mut self, i: usize, frame: &Frame<'_>) -> Vec<u8> {
        self.pn = self.pn.wrapping_add(1);
        let mut d = Vec::with_capacity(64);
        // Members joined in order: member i has id i + 1.
        let token = self
            .session
            .member_token(MemberId(i as u64 + 1))
            .unwrap_or(0);
        Header {
            flags: HeaderFlags::default(),
            session_id: token,
            packet_number: self.pn,
        }
        .encode(&mut d);
        frame.encode(&mut d);
        d
    }
}

/// One member's side of an [`AckMix`].
#[derive(Debug, Clone, Default)]
struct MixMember {
    /// Cumulative point and SACK ranges of its last ACK.
    cumulative: u64,
    sack: Vec<Range<u64>>,
    /// A segment it misses, and the rounds until it arrives.
    hole: Option<(Range<u64>, u32)>,
}

/// A realistic mix of ACKs from every member of a [`SyntheticSession`],
/// deterministic (seeded xorshift). A round sends 64 KiB at a time, 1 ms
/// apart, until at least two new segments went out at once (as the
/// members' windows allow; at most 10 ms; RTTs are zero as in
/// [`SyntheticSession::ack`]), then every member acknowledges. Of the
/// members not missing a segment:
///
/// * [`AckMix::REORDER_PER_MILLE`] miss one of the new segments (not the
///   last) until the next round: they acknowledge up to it and SACK all
///   above it (reordering; RACK waits, nothing sent after it was SACKed);
/// * [`AckMix::LOSS_PER_MILLE`] lose one: they SACK above it for
///   [`AckMix::HOLE_ROUNDS`] rounds (RACK marks it lost once later data is
///   SACKed, its repair is queued, the member's window is cut);
/// * the others acknowledge everything sent (advancing ACKs);
///
/// and [`AckMix::DUPLICATE_PER_MILLE`] of all members send their ACK twice
/// (the second with a new packet number and no progress: a duplicate ACK,
/// as for a duplicated data segment or a window update).
#[derive(Debug)]
pub struct AckMix {
    members: Vec<MixMember>,
    rng: u64,
}

impl AckMix {
    /// Members per thousand seeing a segment reordered, per round.
    pub const REORDER_PER_MILLE: u64 = 50;
    /// Members per thousand losing a segment, per round.
    pub const LOSS_PER_MILLE: u64 = 1;
    /// Rounds a lost segment stays missing.
    pub const HOLE_ROUNDS: u32 = 50;
    /// Members per thousand sending a duplicate ACK, per round.
    pub const DUPLICATE_PER_MILLE: u64 = 80;

    /// A mix for the `n` members of a session, seeded with `seed`.
    pub fn new(n: usize, seed: u64) -> Self {
        AckMix {
            members: vec![MixMember::default(); n],
            rng: seed | 1,
        }
    }

    fn next(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Sends the next round's data and returns the round's ACK datagrams
    /// (one or two per member, in member order) with the index of the
    /// member sending each.
    pub fn round(&mut self, s: &mut SyntheticSession) -> Vec<(usize, Vec<u8>)> {
        // Never more than 10 ms without ACKs (far below any RTO).
        let from = s.session.snd_nxt();
        for _ in 0..10 {
            s.send_more(64 << 10, Duration::from_millis(1));
            if s.sent.iter().filter(|r| r.start >= from).count() >= 2 {
                break;
            }
        }
        // Holes are taken among segments sent at the same instant: with
        // zero RTTs, RACK's reordering window is zero, and a hole sent
        // before a segment SACKed is lost at once.
        let new: Vec<Range<u64>> = s.sent.iter().filter(|r| r.start >= from).cloned().collect();
        let top = s.session.snd_nxt();
        let mut acks = Vec::with_capacity(self.members.len());
        for i in 0..self.members.len() {
            let roll = self.next() % 1000;
            let pick = self.next();
            let m = &mut self.members[i];
            if m.hole.is_none() && new.len() >= 2 {
                let rounds = match roll {
                    r if r < Self::REORDER_PER_MILLE => 1,
                    r if r < Self::REORDER_PER_MILLE + Self::LOSS_PER_MILLE => Self::HOLE_ROUNDS,
                    _ => 0,
                };
                if rounds > 0 {
                    // One new segment, not the last (something above it
                    // arrives).
                    let hole = new[(pick % (new.len() as u64 - 1)) as usize].clone();
                    m.hole = Some((hole, rounds));
                }
            }
            match &mut m.hole {
                Some((hole, left)) if *left > 0 => {
                    *left -= 1;
                    m.cumulative = hole.start;
                    m.sack.clear();
                    m.sack.push(hole.end..top);
                }
                _ => {
                    m.hole = None;
                    m.cumulative = top;
                    m.sack.clear();
                }
            }
            let (cumulative, sack) = (m.cumulative, m.sack.clone());
            acks.push((i, s.ack_with(i, cumulative, sack.clone())));
            if roll >= 1000 - Self::DUPLICATE_PER_MILLE {
                acks.push((i, s.ack_with(i, cumulative, sack)));
            }
        }
        acks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mix is honest work: every ACK is accepted (none refused as
    /// malformed, clipped or acknowledging unsent data), losses are
    /// detected and repaired, and the session keeps moving.
    #[test]
    fn the_ack_mix_is_accepted_and_exercises_loss_recovery() {
        const N: usize = 1000;
        const ROUNDS: u64 = 150;
        let mut s = SyntheticSession::new(N);
        let mut mix = AckMix::new(N, 3);
        let mut sacks = 0;
        let mut n_acks = 0;
        for _ in 0..ROUNDS {
            let acks = mix.round(&mut s);
            sacks += mix.members.iter().filter(|m| !m.sack.is_empty()).count();
            for (i, a) in &acks {
                let now = s.now;
                s.session.handle_datagram(now, s.members[*i], a);
            }
            n_acks += acks.len() as u64;
        }
        let st = s.session.stats();
        assert_eq!(st.drops.total(), 0, "{:?}", st.drops);
        assert_eq!(st.acks_received, n_acks);
        assert!(n_acks > ROUNDS * N as u64 * 105 / 100, "{n_acks} ACKs");
        assert_eq!(s.session.member_count(), N);
        assert!(
            sacks as u64 > ROUNDS * N as u64 / 25,
            "SACKs in {sacks} ACKs"
        );
        assert!(st.recovery_episodes > 0 && st.unicast_repairs > 0, "{st:?}");
        // Data keeps flowing (a segment or two a round), and the slowest
        // member (a hole lasts 50 rounds) keeps up.
        let mss = crate::TransportConfig::default().max_payload();
        assert!(s.session.snd_nxt() >= ROUNDS * mss, "{st:?}");
        assert!(s.session.bytes_acked_by_all() >= ROUNDS / 2 * mss);
    }
}
