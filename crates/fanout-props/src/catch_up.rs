//! [`drive_catch_up`]: a catch-up server (`fanout_app::catch_up`: a
//! multicast session whose late joiners fetch the prefix they missed over
//! a transfer of their own) with honest members and one honest late
//! joiner, under attack from strangers — the session attacks of
//! [`crate::session`], plus catch-up requests naming any member.

use crate::attack::{stranger, Attack, Attackers, View};
use crate::model::Stream;
use crate::net::{
    attack, group, pump_peer, pump_receivers, receiver_addr, run_until, sender_addr, Network, Wire,
};
use crate::script::{Cursor, Step};
use crate::session::{session_config, MAX_MEMBERS, SESSION};
use crate::{eviction_justified, honest_config, ATTACK_TIME, ONE_WAY, TAIL_TIME};
use fanout_app::catch_up::{
    CatchUpClient, CatchUpConfig, CatchUpServer, PrefixSource, PrefixStream, RawPrefix,
    MAX_CATCH_UPS,
};
use fanout_core::time::Instant;
use fanout_core::{drain, Engine, Rng};
use fanout_transport::session::{SessionEvent, SessionSender};
use fanout_transport::wire::{CatchUpFrame, Frame, Header, HeaderFlags};
use fanout_transport::{CloseReason, Receiver};
use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

/// The late joiner's catch-up socket: its host, another port.
fn catch_up_addr(late: usize) -> SocketAddr {
    SocketAddr::new(receiver_addr(late).ip(), 7001)
}

/// Largest datagram the server sends, bytes: the catch-ups' share may be
/// overrun by one (the share is checked before a send).
const MAX_DATAGRAM: u64 = 1500;

/// The stream as the application wrote it, shared with the server, which
/// serves its prefixes as the sender application would from its file.
#[derive(Clone, Default)]
struct Written(Rc<RefCell<Vec<u8>>>);

impl PrefixSource for Written {
    fn open(&self, range: std::ops::Range<u64>) -> io::Result<Box<dyn PrefixStream>> {
        let bytes = self.0.borrow();
        let at = |o: u64| usize::try_from(o).unwrap_or(usize::MAX);
        let Some(prefix) = bytes.get(at(range.start)..at(range.end)) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "beyond the stream",
            ));
        };
        Ok(Box::new(RawPrefix::new(
            io::Cursor::new(prefix.to_vec()),
            range,
        )))
    }
}

/// The honest late joiner: a member that starts where the session is, and
/// its catch-up client for the prefix before that.
struct Late {
    member: Receiver,
    got: Vec<u8>,
    client: Option<CatchUpClient>,
    prefix: Vec<u8>,
}

struct Sim {
    now: Instant,
    server: CatchUpServer,
    members: Vec<Receiver>,
    got: Vec<Vec<u8>>,
    late: Option<Late>,
    wire: Wire,
    stream: Stream,
    written: Written,
    /// `MemberLeft` events: (address, reason).
    left: Vec<(SocketAddr, String)>,
    buf: Vec<u8>,
}

impl Sim {
    fn late_index(&self) -> usize {
        self.members.len()
    }

    fn view(&self) -> View {
        let mut honest: Vec<SocketAddr> = (0..self.members.len()).map(receiver_addr).collect();
        if self.late.is_some() {
            honest.push(receiver_addr(self.late_index()));
            honest.push(catch_up_addr(self.late_index()));
        }
        View {
            now: self.now,
            session: SESSION,
            snd_nxt: self.server.snd_nxt(),
            written: self.stream.written.len() as u64,
            mss: honest_config().max_payload(),
            honest,
            tokens: View::tokens_of(&self.server),
        }
    }

    /// The bounds every step must keep.
    fn check(&self) {
        let s = &self.server;
        assert!(
            s.member_count() <= MAX_MEMBERS,
            "{} members",
            s.member_count()
        );
        assert!(s.active() <= MAX_CATCH_UPS, "{} catch-ups", s.active());
        let st = s.catch_up_stats();
        let share = CatchUpConfig::default();
        let bound = st.session_bytes / share.session_bytes_per_catch_up_byte
            + share.allowance_bytes
            + MAX_DATAGRAM;
        assert!(
            st.bytes_during_session <= bound,
            "catch-ups sent {} B during the session, more than their share {bound} B",
            st.bytes_during_session
        );
        for (id, addr, cumulative, _, _) in s.members() {
            assert!(
                cumulative <= s.snd_nxt(),
                "{id:?} {addr} acked {cumulative}"
            );
        }
    }

    /// A stranger's catch-up request naming member `id` (live or not) and
    /// a prefix end near the send position.
    fn request(c: &mut Cursor<'_>, v: &View) -> (SocketAddr, Vec<u8>) {
        let from = stranger(usize::from(c.u8()));
        let member_id = c.below(MAX_MEMBERS as u64 + 2) + 1;
        let end = crate::attack::offset(c, v);
        let mut d = Vec::new();
        Header {
            flags: HeaderFlags::default(),
            session_id: SESSION,
            packet_number: c.u32(),
        }
        .encode(&mut d);
        Frame::CatchUp(CatchUpFrame {
            member_id,
            end,
            from: c.u64() % end.max(1),
        })
        .encode(&mut d);
        (from, d)
    }

    fn step(&mut self, step: &Step<'_>, attackers: &mut Attackers) {
        let mut c = Cursor::new(step.body);
        let (from, d) = match step.kind {
            7 => Self::request(&mut c, &self.view()),
            k if k < 12 => {
                let attack = Attack::of_kind(k).expect("kinds 0-11");
                attackers.datagram(attack, &mut c, &self.view())
            }
            12 => {
                let n = usize::from(c.u16()) % (48 << 10);
                self.stream.queue(n, c.u8());
                return;
            }
            13 => {
                self.stream.request_finish();
                return;
            }
            14 => {
                let mut honest: Vec<SocketAddr> =
                    (0..self.members.len()).map(receiver_addr).collect();
                honest.push(receiver_addr(self.late_index()));
                honest.push(catch_up_addr(self.late_index()));
                let to = honest[c.below(honest.len() as u64) as usize];
                self.wire.drop_next(to, c.below(4) as u32 + 1);
                return;
            }
            _ => {
                if self.late.is_none() {
                    let member = Receiver::join(honest_config(), sender_addr(), self.now);
                    self.late = Some(Late {
                        member,
                        got: Vec::new(),
                        client: None,
                        prefix: Vec::new(),
                    });
                }
                return;
            }
        };
        self.server.handle_datagram(self.now, from, &d);
    }
}

impl Network for Sim {
    fn now(&self) -> Instant {
        self.now
    }

    fn set_now(&mut self, now: Instant) {
        self.now = self.now.max(now);
    }

    fn pump(&mut self) -> (Option<Instant>, bool) {
        let now = self.now;
        let late = self.late_index();
        self.stream.feed(&mut self.server);
        {
            let mut shared = self.written.0.borrow_mut();
            let have = shared.len();
            shared.extend_from_slice(&self.stream.written[have..]);
        }
        let mut out = Vec::new();
        let mut next = drain(&mut self.server, now, &mut self.buf, 256, |t, b| {
            out.push((t.destination, b.to_vec()))
        });
        let mut sent = !out.is_empty();
        for (to, bytes) in out {
            if to == group() {
                self.stream.check_sent(&bytes, SESSION);
                for i in 0..self.members.len() {
                    self.wire
                        .send(now, sender_addr(), receiver_addr(i), bytes.clone());
                }
                if self.late.is_some() {
                    self.wire
                        .send(now, sender_addr(), receiver_addr(late), bytes);
                }
            } else {
                // To a member, the late joiner, its catch-up socket, or an
                // attacker (who is not listening).
                self.wire.send(now, sender_addr(), to, bytes);
            }
        }
        while let Some(e) = self.server.poll_event() {
            if let SessionEvent::MemberLeft { addr, reason, .. } = e {
                self.left.push((addr, reason));
            }
        }
        let (t, s) = pump_receivers(
            &mut self.members,
            &mut self.got,
            receiver_addr,
            |i, start, got| self.stream.check_read(&format!("member {i}"), start, got),
            now,
            &mut self.wire,
            &mut self.buf,
        );
        sent |= s;
        next = [next, t].into_iter().flatten().min();
        if let Some(l) = &mut self.late {
            let (t, s) = pump_peer(
                &mut l.member,
                Receiver::read,
                &mut l.got,
                now,
                receiver_addr(late),
                &mut self.wire,
                &mut self.buf,
            );
            sent |= s;
            next = [next, t].into_iter().flatten().min();
            let start = l.member.start_offset();
            self.stream.check_read("the late joiner", start, &l.got);
            // Joined past the start: fetch the prefix, as `fanout recv`
            // does.
            if l.client.is_none() && start > 0 {
                if let Some(credential) = l.member.catch_up_credential() {
                    l.client = Some(CatchUpClient::new(
                        honest_config(),
                        sender_addr(),
                        credential,
                        l.member.member_id(),
                        0..start,
                        now,
                    ));
                }
            }
            if let Some(client) = &mut l.client {
                let (t, s) = pump_peer(
                    client,
                    |c, b| c.receiver_mut().read(b),
                    &mut l.prefix,
                    now,
                    catch_up_addr(late),
                    &mut self.wire,
                    &mut self.buf,
                );
                sent |= s;
                next = [next, t].into_iter().flatten().min();
                self.stream.check_read("the catch-up", 0, &l.prefix);
                assert!(
                    l.prefix.len() as u64 <= start,
                    "the catch-up read past its end"
                );
            }
        }
        (next, sent)
    }

    fn wire(&mut self) -> &mut Wire {
        &mut self.wire
    }

    fn deliver(&mut self, from: SocketAddr, to: SocketAddr, bytes: Vec<u8>) {
        let late = self.late_index();
        if to == sender_addr() {
            self.server.handle_datagram(self.now, from, &bytes);
        } else if let Some(i) = (0..self.members.len()).find(|&i| receiver_addr(i) == to) {
            self.members[i].handle_datagram(self.now, from, &bytes);
        } else if let Some(l) = &mut self.late {
            if to == receiver_addr(late) {
                l.member.handle_datagram(self.now, from, &bytes);
            } else if to == catch_up_addr(late) {
                if let Some(c) = &mut l.client {
                    c.handle_datagram(self.now, from, &bytes);
                }
            }
        }
    }
}

/// Hostile strangers against a catch-up server (see the module docs):
/// every step keeps the bounds (members, transfers, the catch-ups' share
/// of the link), and in the end every honest member has the whole stream,
/// and the late joiner the whole stream too — the prefix by its catch-up,
/// the rest live — or was evicted for a reason the script explains. The
/// configuration byte: bit 1 = two honest early members (else one), bit 3
/// = two transfers at once at most (else [`MAX_CATCH_UPS`]), so attackers
/// can fill the table.
pub fn drive_catch_up(data: &[u8]) {
    let Some((&first, script)) = data.split_first() else {
        return;
    };
    let honest = if first & 2 != 0 { 2 } else { 1 };
    let now = Instant::ZERO;
    let config = session_config(first | 4, honest);
    let written = Written::default();
    let server = CatchUpServer::new(
        SessionSender::new(config.clone(), SESSION, now),
        Box::new(written.clone()),
        config.transport.clone(),
        CatchUpConfig {
            max_jobs: if first & 8 != 0 { 2 } else { MAX_CATCH_UPS },
            ..CatchUpConfig::default()
        },
        Rng::new(u64::from(first)),
    );
    let members = (0..honest)
        .map(|_| Receiver::join(honest_config(), sender_addr(), now))
        .collect();
    let mut sim = Sim {
        now,
        server,
        members,
        got: vec![Vec::new(); honest],
        late: None,
        wire: Wire::new(ONE_WAY),
        stream: Stream::default(),
        written,
        left: Vec::new(),
        buf: Vec::new(),
    };
    run_until(&mut sim, now + Duration::from_secs(1), |s| {
        s.members.iter().all(|r| r.session_id().is_some())
    });
    for r in &sim.members {
        assert_eq!(r.session_id(), Some(SESSION), "honest members joined");
    }
    let attack_end = sim.now + ATTACK_TIME;
    attack(&mut sim, script, attack_end, Sim::step, |s| s.check());
    // The attack is over; the late joiner comes now if it has not yet, a
    // last piece is written and the stream ends.
    sim.wire.stop_dropping();
    if sim.late.is_none() {
        let join = Step {
            kind: 15,
            advance: Duration::ZERO,
            body: &[],
        };
        sim.step(&join, &mut Attackers::default());
    }
    sim.stream.queue(8 << 10, 0x5a);
    sim.stream.request_finish();
    let end = sim.now + TAIL_TIME;
    run_until(&mut sim, end, |s| {
        s.wire.is_empty()
            && s.members.iter().all(Receiver::is_closed)
            && s.late.as_ref().is_some_and(|l| {
                l.member.is_closed() && l.client.as_ref().is_none_or(CatchUpClient::is_done)
            })
    });
    sim.check();
    let explained = |sim: &Sim, addr: SocketAddr, r: &Receiver, also: u32| {
        let dropped = sim.wire.dropped(addr) + also;
        sim.left
            .iter()
            .filter(|(a, _)| *a == addr)
            .any(|(_, why)| eviction_justified(why, dropped))
            || matches!(r.close_reason(),
                Some(CloseReason::PeerReset { reason, .. }) if eviction_justified(reason, dropped))
    };
    for (i, r) in sim.members.iter().enumerate() {
        assert!(
            r.is_finished() && sim.got[i] == sim.stream.written
                || explained(&sim, receiver_addr(i), r, 0),
            "honest member {i} did not complete: {:?}, read {} of {} bytes; left {:?}",
            r.close_reason(),
            sim.got[i].len(),
            sim.stream.written.len(),
            sim.left,
        );
    }
    let late = sim.late_index();
    let l = sim.late.as_ref().expect("the late joiner came");
    let start = (l.member.start_offset() as usize).min(sim.stream.written.len());
    let live_done = l.member.is_finished() && l.got == sim.stream.written[start..];
    // Never admitted: the session had ended, or strangers that joined
    // first filled it (it admits at most MAX_MEMBERS without telling who
    // is honest; admission control is not this layer's).
    // Or its handshake was lost to the script's drops.
    let not_admitted = l.member.session_id().is_none()
        && (sim.server.close_reason().is_some()
            || matches!(l.member.close_reason(),
                Some(CloseReason::PeerReset { reason, .. }) if reason == "session full")
            || l.member.close_reason() == Some(&CloseReason::HandshakeTimeout)
                && sim.wire.dropped(receiver_addr(late)) > 0);
    assert!(
        live_done || not_admitted || explained(&sim, receiver_addr(late), &l.member, 0),
        "the late joiner did not complete its live part: {:?}, started at {start}, read {} of {} \
         bytes; left {:?}",
        l.member.close_reason(),
        l.got.len(),
        sim.stream.written.len() - start,
        sim.left,
    );
    if live_done && start > 0 {
        let client = l.client.as_ref().expect("a catch-up for a late start");
        let prefix_done =
            client.receiver().is_finished() && l.prefix == sim.stream.written[..start];
        // Its transfer's datagrams, and its requests, can only have been
        // lost to the script's drops.
        let dropped = sim.wire.dropped(catch_up_addr(late));
        assert!(
            prefix_done || dropped > 0,
            "the late joiner's catch-up did not complete: {:?} (timed out: {}), read {} of {start} \
             bytes; catch-ups {:?}",
            client.receiver().close_reason(),
            client.timed_out(),
            l.prefix.len(),
            sim.server.catch_up_stats(),
        );
    }
}
