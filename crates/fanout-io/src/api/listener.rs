//! The sending side: `bind` with one [`SessionOptions`], `accept` members,
//! write the stream, `finish` (TCP-SMO §III: the server is an ordinary
//! listen/accept plus one option naming the group, port and policies).

use super::errors;
use super::options::SessionOptions;
use super::roster::{MemberInfo, MemberOutcome, Outcome, RosterEngine};
use super::runner::Runner;
use crate::{Clock, UdpEndpoint};
use fanout_core::Instant;
use fanout_transport::session::{SessionSender, SessionStats};
use fanout_transport::CloseReason;
use std::io::{self, ErrorKind, Write};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// How a session ended: the reason and every member's outcome.
#[derive(Debug, Clone)]
pub struct SessionSummary {
    /// Why the session ended (`None` while it runs).
    pub close: Option<CloseReason>,
    /// Stream bytes written by the application.
    pub bytes: u64,
    /// Members ever admitted.
    pub members_joined: u64,
    /// Each member's outcome, by id (members that left long ago may be
    /// missing: see `forgotten`).
    pub members: Vec<MemberOutcome>,
    /// Left members whose record was dropped to bound memory.
    pub forgotten: u64,
    /// The session's counters.
    pub stats: SessionStats,
}

impl SessionSummary {
    /// Members that received the whole stream (every one still in the
    /// session when it completed).
    pub fn completed(&self) -> usize {
        if self.close != Some(CloseReason::Completed) {
            return 0;
        }
        self.members
            .iter()
            .filter(|m| m.outcome == Outcome::Active)
            .count()
    }
}

/// A one-to-many session sender: receivers join it, every byte written is
/// delivered to each of them (multicast once, or one unicast copy each).
///
/// Blocking calls that need a receiver fail with [`ErrorKind::TimedOut`]
/// when none is in the session [`SessionOptions::wait_at_most`] after
/// `bind`. Dropping the listener before [`SessionListener::finish`]
/// completed aborts the session (members get a RESET).
///
/// Streaming any reader to the session, then each member's outcome:
///
/// ```
/// use fanout_io::api::{Outcome, SessionListener, SessionOptions, Subscriber};
/// use std::io::Read;
///
/// # fn main() -> std::io::Result<()> {
/// let mut session = SessionListener::bind("127.0.0.1:0".parse().unwrap(), SessionOptions::unicast())?;
/// let at = session.local_addr();
/// let reader = std::thread::spawn(move || -> std::io::Result<usize> {
///     let mut conn = Subscriber::subscribe(None, "127.0.0.1:0".parse().unwrap())?.connect(at)?;
///     std::io::copy(&mut conn, &mut std::io::sink()).map(|n| n as usize)
/// });
/// let member = session.accept()?;
/// let mut source = std::io::repeat(7).take(100_000); // a file, a pipe, ...
/// std::io::copy(&mut source, &mut session)?;
/// let summary = session.finish()?;
/// assert_eq!(summary.members[0].member, member);
/// assert_eq!(summary.members[0].outcome, Outcome::Active); // got everything
/// assert_eq!(reader.join().unwrap()?, 100_000);
/// # Ok(()) }
/// ```
pub struct SessionListener {
    pub(super) runner: Runner<RosterEngine>,
    group: Option<SocketAddr>,
    /// Receivers must show up by then (see the type's doc).
    first_member_by: Instant,
    written: u64,
    /// `finish` was called: the stream has ended.
    finished: bool,
}

impl SessionListener {
    /// Binds `addr` (the address receivers connect to) and opens the
    /// session. With a group, sets the multicast options (TTL, loopback,
    /// the bound interface) and fails if no route covers the group; use
    /// [`SessionOptions::unicast`] where multicast is unavailable.
    pub fn bind(addr: SocketAddr, options: SessionOptions) -> io::Result<Self> {
        let (mut config, ttl, session_id, driver) = options.parts();
        // Member tokens need a secret no peer can guess.
        config.token_key = crate::random_token_key();
        let endpoint = UdpEndpoint::bind(addr).map_err(errors::setup)?;
        if let Some(group) = config.group {
            setup_group(&endpoint, group, ttl)?;
        }
        let session_id = match session_id {
            Some(id) => id,
            None => random_id()?,
        };
        let clock = Clock::new();
        let now = clock.now();
        let first_member_by = now.saturating_add(config.wait_at_most);
        let max_members = config.max_members;
        let engine = RosterEngine::new(
            SessionSender::new(config.clone(), session_id, now),
            max_members,
        );
        let runner = Runner::start("fanout-session", engine, endpoint, clock, driver)?;
        Ok(SessionListener {
            runner,
            group: config.group,
            first_member_by,
            written: 0,
            finished: false,
        })
    }

    /// The bound address (with the port the OS chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.runner.local_addr()
    }

    /// The multicast group, or `None` for unicast fan-out.
    pub fn group(&self) -> Option<SocketAddr> {
        self.group
    }

    /// Blocks until a receiver joins (or joined since the last call) and
    /// returns it. Fails once the session ended.
    pub fn accept(&mut self) -> io::Result<MemberInfo> {
        self.runner.wait_for(|e| {
            if let Some(m) = e.backlog.pop_front() {
                return Some(Ok(m));
            }
            e.session.close_reason().map(|r| Err(errors::closed(r)))
        })?
    }

    /// [`SessionListener::accept`], giving up after `timeout` (`Ok(None)`).
    pub fn accept_timeout(&mut self, timeout: Duration) -> io::Result<Option<MemberInfo>> {
        let deadline = self.runner.clock().now().saturating_add(timeout);
        let got = self.runner.wait(Some(deadline), |e| {
            if let Some(m) = e.backlog.pop_front() {
                return Some(Ok(m));
            }
            e.session.close_reason().map(|r| Err(errors::closed(r)))
        })?;
        got.transpose()
    }

    /// Blocks until at least `n` receivers are in the session; returns how
    /// many are. Fails with [`ErrorKind::TimedOut`] after `timeout`.
    pub fn wait_for_members(&mut self, n: usize, timeout: Duration) -> io::Result<usize> {
        let deadline = self.runner.clock().now().saturating_add(timeout);
        let got = self.runner.wait(Some(deadline), |e| {
            let count = e.session.member_count();
            (count >= n).then_some(count)
        })?;
        got.ok_or_else(|| {
            let count = self.member_count();
            io::Error::new(
                ErrorKind::TimedOut,
                format!("{count} of {n} receivers joined within {timeout:?}"),
            )
        })
    }

    /// Receivers in the session now.
    pub fn member_count(&self) -> usize {
        self.runner.peek(|e| e.session.member_count())
    }

    /// Ends the stream and blocks until every receiver acknowledged all of
    /// it or left. `Ok` when the session completed (members that left on
    /// the way show in the summary); otherwise the error says why, and
    /// [`SessionListener::summary`] still tells each member's outcome.
    pub fn finish(&mut self) -> io::Result<SessionSummary> {
        self.finished = true;
        self.runner.with(|e| e.session.finish());
        let clock = self.runner.clock();
        let first_member_by = self.first_member_by;
        self.runner.wait_for(|e| match e.session.close_reason() {
            Some(CloseReason::Completed) => Some(Ok(())),
            Some(r) => Some(Err(errors::closed(r))),
            None => no_receiver(e, clock, first_member_by).map(Err),
        })??;
        Ok(self.summary())
    }

    /// Runs `feed` on the session (it writes what fits now and says whether
    /// it is done), waiting between calls until the session has room; true
    /// once `feed` is done. Fails once the session ended, or when no
    /// receiver came in time.
    pub(super) fn feed_with(
        &mut self,
        mut feed: impl FnMut(&mut SessionSender) -> bool,
    ) -> io::Result<bool> {
        if self.finished {
            return Err(io::Error::new(
                ErrorKind::BrokenPipe,
                "write after SessionListener::finish",
            ));
        }
        let clock = self.runner.clock();
        let first_member_by = self.first_member_by;
        let done = self.runner.wait_for(|e| {
            if let Some(r) = e.session.close_reason() {
                return Some(Err(errors::closed(r)));
            }
            let room = e.session.writable();
            if feed(&mut e.session) {
                return Some(Ok(true));
            }
            if e.session.writable() < room {
                return Some(Ok(false));
            }
            no_receiver(e, clock, first_member_by).map(Err)
        })??;
        self.runner.wake();
        Ok(done)
    }

    /// Counts `n` stream bytes written other than through `write`.
    pub(super) fn add_written(&mut self, n: u64) {
        self.written += n;
    }

    /// Aborts the session: every receiver gets a RESET carrying `reason`.
    pub fn abort(&mut self, reason: &str) {
        self.runner.with(|e| e.session.abort(reason));
    }

    /// The session's state now: members and their outcomes, counters.
    pub fn summary(&self) -> SessionSummary {
        let bytes = self.written;
        self.runner.peek(|e| {
            e.absorb();
            SessionSummary {
                close: e.session.close_reason().cloned(),
                bytes,
                members_joined: e.joined,
                members: e.records.values().cloned().collect(),
                forgotten: e.forgotten,
                stats: e.session.stats().clone(),
            }
        })
    }
}

/// The error of a blocking call when no receiver is in the session past
/// the first-member deadline.
fn no_receiver(e: &RosterEngine, clock: Clock, by: Instant) -> Option<io::Error> {
    (e.session.member_count() == 0 && clock.now() >= by).then(|| {
        io::Error::new(
            ErrorKind::TimedOut,
            "no receiver in the session (SessionOptions::wait_at_most passed)",
        )
    })
}

impl Write for SessionListener {
    /// Blocks until the send buffer takes at least one byte; returns how
    /// many it took. The driver thread sends them as windows allow.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut n = 0;
        self.feed_with(|s| {
            n = s.write(buf);
            n > 0
        })?;
        self.written += n as u64;
        Ok(n)
    }

    /// Nothing to do: written bytes are already the engine's to send
    /// (delivery is confirmed by [`SessionListener::finish`]).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for SessionListener {
    fn drop(&mut self) {
        let open = self.runner.peek(|e| e.session.close_reason().is_none());
        if open {
            self.abort("the sender dropped the session");
        }
        // The runner then stops its thread after flushing the RESETs.
    }
}

/// Multicast socket options for sending to `group`, then a route check.
fn setup_group(ep: &UdpEndpoint, group: SocketAddr, ttl: u32) -> io::Result<()> {
    if !group.ip().is_multicast() || group.is_ipv4() != ep.local_addr().is_ipv4() {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{group} is not a multicast group of the bound address's IP version ({})",
                ep.local_addr()
            ),
        ));
    }
    match ep.local_addr().ip() {
        IpAddr::V4(local) => {
            ep.set_multicast_ttl_v4(ttl).map_err(errors::setup)?;
            ep.set_multicast_loop_v4(true).map_err(errors::setup)?;
            if !local.is_unspecified() {
                ep.set_multicast_if_v4(local).map_err(errors::setup)?;
            }
        }
        IpAddr::V6(_) => ep.set_multicast_hops_v6(ttl).map_err(errors::setup)?,
    }
    ep.check_multicast_route(group).map_err(|e| {
        io::Error::new(
            ErrorKind::NetworkUnreachable,
            format!("cannot multicast to {group}: {e} (use SessionOptions::unicast())"),
        )
    })
}

/// A session id from the OS's random source.
fn random_id() -> io::Result<u64> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|e| io::Error::other(format!("OS random source: {e}")))?;
    Ok(u64::from_ne_bytes(b))
}
