//! The sender side of file catch-up: a composite engine on the session's
//! own UDP socket. Datagrams from a catch-up peer go to that peer's
//! transfer (a session of one, offered to the requesting address); a
//! catch-up request (see [`super::request`]) from a session member opens
//! one; everything else goes to the [`SessionSender`]. One
//! socket means one port to open, one address the joiner already knows, and
//! one event loop — no second port to announce.

use super::prefix::{PrefixSource, PrefixStream};
use super::request::{parse_request, Request};
use crate::StreamSink;
use fanout_core::time::Instant;
use fanout_core::{Engine, Rng, Transmit};
use fanout_transport::session::{SessionConfig, SessionSender};
use fanout_transport::{CloseReason, TransportConfig};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::ops::{Bound, Deref, DerefMut};

/// Most catch-up transfers served at once, whatever the configuration
/// (each holds a send buffer of at most [`CatchUpConfig::send_buffer_bytes`]);
/// further requests are ignored until one ends (the joiner retries).
pub const MAX_CATCH_UPS: usize = 16;

/// How a catch-up server shares the sender's link with its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUpConfig {
    /// Transfers served at once (at most [`MAX_CATCH_UPS`]).
    pub max_jobs: usize,
    /// Send buffer of one transfer, bytes.
    pub send_buffer_bytes: usize,
    /// While the session runs, catch-ups together may send at most one
    /// byte per this many bytes the session sent (plus `allowance_bytes`):
    /// the prefix crosses the sender's link too, and at a fair share it
    /// would slow every member for as long as it runs
    /// (`docs/experiments/smo.md`, "Late joiners of a file"). Once the
    /// session has ended they run at full speed.
    pub session_bytes_per_catch_up_byte: u64,
    /// Catch-up bytes allowed regardless of the share, so a joiner always
    /// gets the manifest (it reads no live bytes before it) and the
    /// handshake.
    pub allowance_bytes: u64,
}

impl Default for CatchUpConfig {
    fn default() -> Self {
        CatchUpConfig {
            max_jobs: MAX_CATCH_UPS,
            send_buffer_bytes: 4 << 20,
            session_bytes_per_catch_up_byte: 32,
            allowance_bytes: 256 << 10,
        }
    }
}
/// Peers whose catch-up completed, remembered so a late duplicate request
/// does not start the prefix again (FIFO, bounded). A failed one is not
/// remembered: its joiner may ask again.
const MAX_REMEMBERED: usize = 256;

/// Catch-up outcomes kept by member id for [`CatchUpServer::catch_up_outcome`]
/// (the oldest ids are forgotten first).
const MAX_OUTCOMES: usize = 4096;

/// Catch-up counters.
#[derive(Debug, Clone, Default)]
pub struct CatchUpStats {
    /// Catch-up transfers started.
    pub started: u64,
    /// Catch-up transfers every byte of which was acknowledged.
    pub completed: u64,
    /// Catch-up transfers that failed (peer gone, timeout, read error).
    pub failed: u64,
    /// Stream bytes acknowledged by catch-up receivers.
    pub bytes: u64,
    /// Requests refused (not a member, bad range, table full, repeat).
    pub refused: u64,
    /// Datagram bytes the session sent.
    pub session_bytes: u64,
    /// Datagram bytes the catch-ups sent while the session was still open
    /// (at most `session_bytes / share + allowance`, see
    /// [`CatchUpConfig::session_bytes_per_catch_up_byte`]).
    pub bytes_during_session: u64,
}

struct Job {
    sender: SessionSender,
    feed: Box<dyn PrefixStream>,
    /// The requester's member id in the session.
    member_id: u64,
}

/// A [`SessionSender`] plus the catch-up transfers of its late joiners.
/// Derefs to the session, so the application drives it like one.
pub struct CatchUpServer {
    session: SessionSender,
    session_id: u64,
    source: Box<dyn PrefixSource>,
    transport: TransportConfig,
    config: CatchUpConfig,
    /// Session ids of the transfers.
    rng: Rng,
    jobs: BTreeMap<SocketAddr, Job>,
    done: VecDeque<SocketAddr>,
    /// Datagram bytes the session sent.
    session_sent: u64,
    /// Datagram bytes the catch-ups sent.
    catch_up_sent: u64,
    /// The catch-up peer that sent last (round robin among them).
    cursor: SocketAddr,
    stats: CatchUpStats,
    /// Member id → whether its latest catch-up completed (bounded by
    /// [`MAX_OUTCOMES`]).
    outcomes: BTreeMap<u64, bool>,
}

impl CatchUpServer {
    /// Wraps `session`, serving prefixes of its stream from `source`;
    /// transfers use `transport` (with the send buffer `config` allows)
    /// and session ids drawn from `rng`.
    pub fn new(
        session: SessionSender,
        source: Box<dyn PrefixSource>,
        mut transport: TransportConfig,
        config: CatchUpConfig,
        rng: Rng,
    ) -> Self {
        transport.send_buffer_bytes = transport.send_buffer_bytes.min(config.send_buffer_bytes);
        CatchUpServer {
            session_id: session.session_id(),
            session,
            source,
            transport,
            config: CatchUpConfig {
                max_jobs: config.max_jobs.min(MAX_CATCH_UPS),
                ..config
            },
            rng,
            jobs: BTreeMap::new(),
            done: VecDeque::new(),
            session_sent: 0,
            catch_up_sent: 0,
            cursor: SocketAddr::from(([0, 0, 0, 0], 0)),
            stats: CatchUpStats::default(),
            outcomes: BTreeMap::new(),
        }
    }

    /// Whether the latest catch-up of member `member_id` completed (`None`:
    /// it never ended one, or it ended long ago among many).
    pub fn catch_up_outcome(&self, member_id: u64) -> Option<bool> {
        self.outcomes.get(&member_id).copied()
    }

    /// Catch-up transfers still running.
    pub fn active(&self) -> usize {
        self.jobs.len()
    }

    /// Counters.
    pub fn catch_up_stats(&self) -> &CatchUpStats {
        &self.stats
    }

    fn on_request(&mut self, now: Instant, from: SocketAddr, request: Request) {
        let Request {
            credential,
            member_id,
            range,
        } = request;
        let end = range.end;
        // The credential is a live member's id and its token (which only
        // a host receiving at its address learned), asked from that
        // member's host — or, for an ACK merger's id, the session id from
        // any host: a receiver behind the merger carries the merger's
        // member id, asks from its own host and holds no token of this
        // sender's (`docs/mctcp.md`, "Late joins through mergers").
        // Reflection is not possible: the catch-up transfer OFFERs itself
        // to the requesting address once per request and sends data only
        // once that address joined and echoed its token, and at most
        // MAX_CATCH_UPS run.
        let session = &self.session;
        let member = session.members().find(|(id, addr, ..)| {
            id.0 == member_id
                && if session.is_merger(*id) {
                    credential == self.session_id
                } else {
                    addr.ip() == from.ip() && session.member_token(*id) == Some(credential)
                }
        });
        // One transfer at a time per member (from any of its ports), so a
        // member cannot take every slot; receivers behind an ACK merger
        // share its member id, so a merger's id takes any number.
        let busy = member.is_some_and(|(id, ..)| {
            !session.is_merger(id) && self.jobs.values().any(|j| j.member_id == member_id)
        });
        let ok = member.is_some()
            && !busy
            && range.start < end
            && end <= self.session.snd_nxt()
            && self.jobs.len() < self.config.max_jobs
            && !self.done.contains(&from);
        if !ok {
            self.stats.refused += 1;
            tracing::debug!(%from, member_id, end, busy, "catch-up request refused");
            return;
        }
        let feed = match self.source.open(range.clone()) {
            Ok(f) => f,
            Err(e) => {
                self.stats.refused += 1;
                tracing::warn!(%from, "catch-up refused: {e}");
                return;
            }
        };
        let id = self.rng.next_u64();
        let config = SessionConfig {
            token_key: self.session.token_key().derive(id),
            ..SessionConfig::unicast(self.transport.clone())
        };
        let mut sender = SessionSender::new(config, id, now);
        sender.answer_with_offer(now, from);
        let mut job = Job {
            sender,
            feed,
            member_id,
        };
        job.feed.feed(&mut job.sender);
        tracing::info!(%from, member_id, ?range, "catch-up started");
        self.stats.started += 1;
        self.jobs.insert(from, job);
    }

    /// True while the catch-ups used up their share of the sender's link
    /// (see [`CatchUpConfig::session_bytes_per_catch_up_byte`]).
    fn throttled(&self) -> bool {
        let share = self.config.session_bytes_per_catch_up_byte.max(1);
        self.session.close_reason().is_none()
            && self.catch_up_sent >= self.session_sent / share + self.config.allowance_bytes
    }

    /// Refills catch-up senders and retires the ones that ended.
    fn service(&mut self) {
        let mut ended = Vec::new();
        for (addr, job) in &mut self.jobs {
            job.feed.feed(&mut job.sender);
            if job.sender.close_reason().is_some() {
                ended.push(*addr);
            }
        }
        for addr in ended {
            let Some(job) = self.jobs.remove(&addr) else {
                continue;
            };
            let reason = job.sender.close_reason().cloned();
            let completed = reason == Some(CloseReason::Completed) && !job.feed.failed();
            self.outcomes.insert(job.member_id, completed);
            if self.outcomes.len() > MAX_OUTCOMES {
                self.outcomes.pop_first();
            }
            if completed {
                self.stats.completed += 1;
                self.stats.bytes += job.feed.written();
                tracing::info!(%addr, bytes = job.feed.written(), "catch-up completed");
                if self.done.len() >= MAX_REMEMBERED {
                    self.done.pop_front();
                }
                self.done.push_back(addr);
            } else {
                // Forgotten: the joiner may ask again.
                self.stats.failed += 1;
                tracing::warn!(%addr, ?reason, "catch-up failed");
            }
        }
    }

    fn poll_jobs(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.jobs.is_empty() {
            return None;
        }
        // Round robin over the jobs, starting after the last one that sent.
        let order: Vec<SocketAddr> = self
            .jobs
            .range((Bound::Excluded(self.cursor), Bound::Unbounded))
            .chain(self.jobs.range(..=self.cursor))
            .map(|(a, _)| *a)
            .collect();
        for addr in order {
            let job = self.jobs.get_mut(&addr)?;
            buf.clear();
            if let Some(t) = job.sender.poll_transmit(now, buf) {
                self.cursor = addr;
                return Some(t);
            }
        }
        None
    }
}

impl Deref for CatchUpServer {
    type Target = SessionSender;
    fn deref(&self) -> &SessionSender {
        &self.session
    }
}

impl DerefMut for CatchUpServer {
    fn deref_mut(&mut self) -> &mut SessionSender {
        &mut self.session
    }
}

impl StreamSink for CatchUpServer {
    fn write_message(&mut self, msg: &[u8]) -> bool {
        self.session.write_message(msg)
    }
    fn write(&mut self, data: &[u8]) -> usize {
        self.session.write(data)
    }
    fn writable(&self) -> usize {
        self.session.writable()
    }
    fn finish(&mut self) {
        self.session.finish()
    }
    fn abort(&mut self, reason: &str) {
        self.session.abort(reason)
    }
}

impl Engine for CatchUpServer {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if let Some(job) = self.jobs.get_mut(&from) {
            // A repeated request (its OFFER was lost): one more OFFER.
            if job.sender.member_count() == 0 && parse_request(datagram).is_some() {
                job.sender.answer_with_offer(now, from);
                return;
            }
            job.sender.handle_datagram(now, from, datagram);
            self.service();
            return;
        }
        if let Some(request) = parse_request(datagram) {
            self.on_request(now, from, request);
            return;
        }
        self.session.handle_datagram(now, from, datagram);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        // The session first; catch-ups get what is left, within their share.
        if let Some(t) = self.session.poll_transmit(now, buf) {
            self.session_sent += buf.len() as u64;
            self.stats.session_bytes = self.session_sent;
            return Some(t);
        }
        if self.throttled() {
            return None;
        }
        buf.clear();
        let t = self.poll_jobs(now, buf)?;
        self.catch_up_sent += buf.len() as u64;
        if self.session.close_reason().is_none() {
            self.stats.bytes_during_session = self.catch_up_sent;
        }
        Some(t)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        // Throttled catch-ups wait for the session's next event (their
        // timers would otherwise fire with nothing allowed to send).
        let jobs = (!self.throttled())
            .then(|| {
                self.jobs
                    .values()
                    .filter_map(|j| j.sender.poll_timeout())
                    .min()
            })
            .flatten();
        [jobs, self.session.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    fn max_wake_delay(&self) -> Option<std::time::Duration> {
        let jobs = self.jobs.values().filter_map(|j| j.sender.max_wake_delay());
        jobs.chain(self.session.max_wake_delay()).min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.session.poll_timeout().is_some_and(|t| t <= now) {
            self.session.handle_timeout(now);
        }
        for job in self.jobs.values_mut() {
            if job.sender.poll_timeout().is_some_and(|t| t <= now) {
                job.sender.handle_timeout(now);
            }
        }
        self.service();
    }
}

#[cfg(test)]
mod tests {
    use super::super::prefix::FileInMemory;
    use super::super::request::encode_request;
    use super::*;
    use crate::Manifest;
    use fanout_core::drain;
    use fanout_transport::session::{JoinPolicy, SessionConfig};
    use fanout_transport::wire::{accept_header, decode_frames, Frame};
    use fanout_transport::Receiver;

    const SENDER: &str = "10.0.0.1:6000";
    const MEMBER: &str = "10.0.0.2:7000";

    fn request(credential: u64, member_id: u64, end: u64) -> Vec<u8> {
        let mut d = Vec::new();
        let r = Request {
            credential,
            member_id,
            range: 0..end,
        };
        encode_request(&r, &mut Default::default(), &mut d);
        d
    }

    /// Destinations of what `e` sends now.
    fn sent(e: &mut CatchUpServer, now: Instant) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        drain(e, now, &mut buf, 1000, |t, b| {
            out.push((t.destination, b.to_vec()))
        });
        out
    }

    #[test]
    fn only_members_get_a_bounded_number_of_catch_ups() {
        let bytes: std::sync::Arc<[u8]> = vec![5u8; 1 << 20].into();
        let manifest = Manifest::file("f.bin", 1 << 20);
        let file = FileInMemory {
            manifest: manifest.clone(),
            bytes: bytes.clone(),
        };
        let config = SessionConfig {
            join: JoinPolicy::CatchUp,
            ..SessionConfig::default()
        };
        let now = Instant::ZERO;
        let (sid, sender, member) = (77, SENDER.parse().unwrap(), MEMBER.parse().unwrap());
        let session = SessionSender::new(config.clone(), sid, now);
        let mut s = CatchUpServer::new(
            session,
            Box::new(file),
            config.transport.clone(),
            CatchUpConfig::default(),
            Rng::new(1),
        );
        // A real member joins, then the session sends the manifest and data.
        let mut r = Receiver::join(config.transport.clone(), sender, now);
        let mut buf = Vec::new();
        drain(&mut r, now, &mut buf, 10, |_, b| {
            s.handle_datagram(now, member, b)
        });
        assert_eq!(s.member_count(), 1);
        let mut feed = crate::FileFeed::new(&bytes[..], manifest);
        feed.feed(&mut s);
        let out = sent(&mut s, now);
        let accept = out.iter().find_map(|(_, d)| {
            let (_, body) = accept_header(d).ok()?;
            match decode_frames(body).next()? {
                Ok(Frame::Accept(a)) => Some(a.member_id),
                _ => None,
            }
        });
        let id = accept.expect("accepted");
        // The member echoes its token (address validation): data starts.
        for (_, d) in &out {
            r.handle_datagram(now, sender, d);
        }
        drain(&mut r, now, &mut buf, 10, |_, b| {
            s.handle_datagram(now, member, b)
        });
        sent(&mut s, now);
        let snd_nxt = s.snd_nxt();
        assert!(snd_nxt > 0, "data went out");
        let at = |port: u16| SocketAddr::new(member.ip(), port);
        // Its credential: the token its ACCEPT gave it.
        let token = r.catch_up_credential().expect("connected");
        assert_ne!(token, sid);
        // Refused: a stranger's IP (the member is a receiver, not an ACK
        // merger), another member id, a range beyond what was sent, the
        // public session id instead of its token. (An empty range is not
        // even a request: the frame is malformed.)
        let stranger: SocketAddr = "10.0.0.66:9000".parse().unwrap();
        s.handle_datagram(now, stranger, &request(token, id, snd_nxt));
        s.handle_datagram(now, at(9001), &request(token, id + 1, snd_nxt));
        s.handle_datagram(now, at(9002), &request(token, id, snd_nxt + 1));
        s.handle_datagram(now, at(9003), &request(token, id, 0));
        s.handle_datagram(now, at(9004), &request(sid, id, snd_nxt));
        assert_eq!(s.active(), 0);
        assert_eq!(s.catch_up_stats().refused, 4);
        // Accepted: the member, from its catch-up port; a repeat is absorbed
        // by the running catch-up.
        s.handle_datagram(now, at(9100), &request(token, id, snd_nxt));
        s.handle_datagram(now, at(9100), &request(token, id, snd_nxt));
        assert_eq!((s.active(), s.catch_up_stats().started), (1, 1));
        let to_catch_up = sent(&mut s, now)
            .into_iter()
            .filter(|(to, _)| *to == at(9100))
            .count();
        assert!(to_catch_up >= 1, "the catch-up sender connects back");
        // A flood of requests from its other ports: one transfer per member.
        for port in 10_000..10_100 {
            s.handle_datagram(now, at(port), &request(token, id, snd_nxt));
        }
        assert_eq!(s.active(), 1);
        assert_eq!(s.catch_up_stats().refused, 4 + 100);
    }
}
