//! Session relay in the blocking API (TCP-SMO §IV.B: "each receiver can send
//! any data back to the source server through the individual connection"; the
//! paper's example is a remote student asking a question in a live lecture): a
//! receiver writes upstream on its [`Connection`], the sender's application
//! receives each member's bytes with [`SessionListener::recv_upstream`] and
//! decides what to do with them — for example write them into the session, to
//! every receiver.

use super::errors;
use super::listener::SessionListener;
use super::subscriber::Connection;
use fanout_transport::session::{MemberId, MAX_UPSTREAM_WINDOW};
use fanout_transport::{CloseReason, Receiver, UpstreamStatus};
use std::io::{self, ErrorKind, Write};
use std::net::SocketAddr;
use std::time::Duration;

/// Upstream bytes of one member, as [`SessionListener::recv_upstream`]
/// returns them (in order; each byte once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamData {
    /// The member that sent them.
    pub member: MemberId,
    /// Its address.
    pub addr: SocketAddr,
    /// The bytes (at most one upstream window; empty when only the end
    /// arrived).
    pub bytes: Vec<u8>,
    /// The member's upstream stream ended after these bytes (reported
    /// once per member).
    pub finished: bool,
}

impl SessionListener {
    /// Blocks until some member's upstream bytes (or the end of its
    /// upstream stream) arrived, and returns them; `Ok(None)` after
    /// `timeout`, or once the session completed. Members are served in id
    /// order, each up to one window per call. Until the application calls
    /// this, a member's bytes wait at the sender and its upstream window
    /// closes (it slows down, nothing is lost).
    ///
    /// A student's question in a live lecture, repeated to everyone:
    ///
    /// ```
    /// use fanout_io::api::{SessionListener, SessionOptions, Subscriber};
    /// use std::io::{Read, Write};
    /// use std::time::Duration;
    ///
    /// # fn main() -> std::io::Result<()> {
    /// let mut session = SessionListener::bind("127.0.0.1:0".parse().unwrap(), SessionOptions::unicast())?;
    /// let at = session.local_addr();
    /// let student = std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
    ///     let mut conn = Subscriber::subscribe(None, "127.0.0.1:0".parse().unwrap())?.connect(at)?;
    ///     conn.upstream().write_all(b"what is a multicast group?\n")?;
    ///     conn.finish_upstream();
    ///     let mut lecture = Vec::new();
    ///     conn.read_to_end(&mut lecture)?;
    ///     Ok(lecture)
    /// });
    /// let member = session.accept()?;
    /// // The lecturer hears the question and repeats it to everyone.
    /// let mut question = Vec::new();
    /// while let Some(up) = session.recv_upstream(Duration::from_secs(10))? {
    ///     assert_eq!(up.member, member.id);
    ///     question.extend_from_slice(&up.bytes);
    ///     if up.finished {
    ///         break;
    ///     }
    /// }
    /// session.write_all(b"Q: ")?;
    /// session.write_all(&question)?;
    /// session.finish()?;
    /// assert_eq!(student.join().unwrap()?, b"Q: what is a multicast group?\n");
    /// # Ok(()) }
    /// ```
    pub fn recv_upstream(&mut self, timeout: Duration) -> io::Result<Option<UpstreamData>> {
        let deadline = self.runner.clock().now().saturating_add(timeout);
        let got = self.runner.wait(Some(deadline), |e| {
            while let Some((&id, &addr)) = e.upstream_ready.iter().next() {
                let mut bytes = vec![0; MAX_UPSTREAM_WINDOW];
                let n = e.session.read_upstream(id, &mut bytes);
                bytes.truncate(n);
                let finished = e.session.upstream_finished(id);
                if n < MAX_UPSTREAM_WINDOW || finished {
                    e.upstream_ready.remove(&id);
                }
                if n > 0 || finished {
                    return Some(Ok(Some(UpstreamData {
                        member: id,
                        addr,
                        bytes,
                        finished,
                    })));
                }
            }
            match e.session.close_reason() {
                None => None,
                Some(CloseReason::Completed) => Some(Ok(None)),
                Some(r) => Some(Err(errors::closed(r))),
            }
        })?;
        // Reading opened the member's window: let the update leave now.
        self.runner.wake();
        got.unwrap_or(Ok(None))
    }
}

/// The error of an upstream call on a receiver whose upstream is gone.
fn upstream_failed(r: &Receiver) -> io::Error {
    match r.close_reason() {
        Some(reason) => errors::closed(reason),
        None => io::Error::new(
            ErrorKind::TimedOut,
            "the session sender stopped acknowledging upstream data",
        ),
    }
}

impl Connection {
    /// Sends `data` upstream to the session sender on this receiver's own
    /// connection: blocks until the bounded upstream buffer took at least
    /// one byte and returns how many it took. Fails once the session
    /// ended, after [`Connection::finish_upstream`], or when the sender
    /// stopped acknowledging upstream data.
    pub fn write_upstream(&mut self, data: &[u8]) -> io::Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        let n = self.runner.wait_for(|r| {
            match r.upstream_status() {
                UpstreamStatus::Failed => return Some(Err(upstream_failed(r))),
                UpstreamStatus::Finished => {
                    return Some(Err(io::Error::new(
                        ErrorKind::BrokenPipe,
                        "write after Connection::finish_upstream",
                    )))
                }
                _ => {}
            }
            let n = r.write_upstream(data);
            (n > 0).then_some(Ok(n))
        })??;
        self.runner.wake();
        Ok(n)
    }

    /// Ends the upstream stream after what was written: the sender's
    /// [`SessionListener::recv_upstream`] reports `finished` once all of it
    /// arrived.
    pub fn finish_upstream(&mut self) {
        self.runner.with(|r| r.finish_upstream());
    }

    /// Blocks until the sender acknowledged every upstream byte written
    /// so far (and the end, if finished).
    pub fn flush_upstream(&mut self) -> io::Result<()> {
        self.runner.wait_for(|r| match r.upstream_status() {
            UpstreamStatus::Idle | UpstreamStatus::Acked | UpstreamStatus::Finished => Some(Ok(())),
            UpstreamStatus::Failed => Some(Err(upstream_failed(r))),
            UpstreamStatus::Sending => None,
        })?
    }

    /// The upstream direction as a [`std::io::Write`]: `write` is
    /// [`Connection::write_upstream`], `flush` is
    /// [`Connection::flush_upstream`].
    pub fn upstream(&mut self) -> UpstreamWriter<'_> {
        UpstreamWriter { conn: self }
    }
}

/// A receiver's upstream direction as [`std::io::Write`]
/// ([`Connection::upstream`]).
pub struct UpstreamWriter<'a> {
    conn: &'a mut Connection,
}

impl Write for UpstreamWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.conn.write_upstream(buf)
    }

    /// Waits until the sender acknowledged everything written.
    fn flush(&mut self) -> io::Result<()> {
        self.conn.flush_upstream()
    }
}
