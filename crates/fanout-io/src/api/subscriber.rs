//! The receiving side (TCP-SMO §III: subscribe, connect, read):
//! [`Subscriber::subscribe`] binds the socket (joined to the group, if
//! any), [`Subscriber::connect`] joins the sender's session, and the
//! [`Connection`] is an ordinary [`std::io::Read`].

use super::errors;
use super::options::SubscribeOptions;
use super::runner::Runner;
use crate::{Clock, EndpointConfig, UdpEndpoint};
use fanout_transport::{CloseReason, Receiver};
use std::io::{self, ErrorKind, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// A bound receiver socket, subscribed to a group or not, not yet in a
/// session.
pub struct Subscriber {
    endpoint: UdpEndpoint,
    options: SubscribeOptions,
}

impl Subscriber {
    /// Binds `local` and, with `group` (`G:port`), joins it: the socket is
    /// then bound to the group's port on every address (`local`'s port must
    /// be 0 or that port) and joined on `local`'s IPv4 interface (the
    /// kernel's choice when unspecified). Without a group, data comes by
    /// unicast from a sender running [`super::SessionOptions::unicast`].
    pub fn subscribe(group: Option<SocketAddr>, local: SocketAddr) -> io::Result<Self> {
        Subscriber::with_options(group, local, SubscribeOptions::default())
    }

    /// [`Subscriber::subscribe`] with non-default options.
    pub fn with_options(
        group: Option<SocketAddr>,
        local: SocketAddr,
        options: SubscribeOptions,
    ) -> io::Result<Self> {
        let endpoint = match group {
            None => UdpEndpoint::bind(local).map_err(errors::setup)?,
            Some(group) => bind_group(group, local)?,
        };
        Ok(Subscriber { endpoint, options })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.endpoint.local_addr()
    }

    /// Joins the session of the sender bound at `sender` and blocks until
    /// it admitted this receiver, or fails: [`ErrorKind::TimedOut`] when
    /// nobody answered within [`SubscribeOptions::connect_timeout`],
    /// [`ErrorKind::ConnectionReset`] when the sender refused.
    ///
    /// ```
    /// use fanout_io::api::{SubscribeOptions, Subscriber};
    /// use std::time::Duration;
    ///
    /// // A port nobody listens on (bound, then closed again).
    /// let nobody = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    /// let opts = SubscribeOptions::default().connect_timeout(Duration::from_millis(200));
    /// let sub = Subscriber::with_options(None, "127.0.0.1:0".parse().unwrap(), opts).unwrap();
    /// let err = sub.connect(nobody).err().unwrap();
    /// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    /// ```
    pub fn connect(self, sender: SocketAddr) -> io::Result<Connection> {
        let clock = Clock::new();
        let receiver = Receiver::join(self.options.transport.clone(), sender, clock.now());
        let timeout = self.options.transport.handshake_timeout;
        let linger = self.options.transport.linger;
        let runner = Runner::start(
            "fanout-receiver",
            receiver,
            self.endpoint,
            clock,
            self.options.driver,
        )?;
        runner.wait_for(|r| {
            if r.peer().is_some() {
                return Some(Ok(()));
            }
            r.close_reason().map(|why| {
                Err(match why {
                    CloseReason::HandshakeTimeout => io::Error::new(
                        ErrorKind::TimedOut,
                        format!("no fanout session sender answered at {sender} within {timeout:?}"),
                    ),
                    other => errors::closed(other),
                })
            })
        })??;
        Ok(Connection {
            runner,
            sender,
            linger,
        })
    }
}

/// Binds the group's port on every address, joined to the group.
fn bind_group(group: SocketAddr, local: SocketAddr) -> io::Result<UdpEndpoint> {
    if !group.ip().is_multicast() {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            format!("{} is not a multicast address", group.ip()),
        ));
    }
    if local.port() != 0 && local.port() != group.port() {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            format!(
                "local port {} differs from the group's port {}",
                local.port(),
                group.port()
            ),
        ));
    }
    let any: IpAddr = match group {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let config = EndpointConfig {
        reuse_address: true,
        ..EndpointConfig::default()
    };
    let ep = UdpEndpoint::bind_with(SocketAddr::new(any, group.port()), &config)
        .map_err(errors::setup)?;
    match (group.ip(), local.ip()) {
        (IpAddr::V4(g), IpAddr::V4(interface)) => ep.join_multicast_v4(g, interface),
        (ip, _) => ep.join_multicast(ip),
    }
    .map_err(errors::setup)?;
    Ok(ep)
}

/// One receiver's membership in a session: read the stream with
/// [`std::io::Read`]. `read` returns 0 (EOF) after the last byte of a
/// completed stream and fails if the session was reset or timed out.
///
/// The transport keeps running between calls (acknowledging, buffering up
/// to the receive window), on the connection's own thread. Dropping the
/// connection after EOF lingers up to the transport's `linger` so the
/// sender hears the final acknowledgement; dropping it earlier resets the
/// membership (the sender evicts this receiver, the others go on).
pub struct Connection {
    pub(super) runner: Runner<Receiver>,
    sender: SocketAddr,
    /// The transport's linger after the end of the stream.
    linger: Duration,
}

/// Waited beyond the receiver's own linger on drop (its timer fires on the
/// driver thread's next step).
const LINGER_SLACK: Duration = Duration::from_millis(200);

impl Connection {
    /// The session sender.
    pub fn sender(&self) -> SocketAddr {
        self.sender
    }

    /// The local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.runner.local_addr()
    }

    /// Stream offset of the first byte this receiver gets (0 unless it
    /// joined a live session late).
    pub fn start_offset(&self) -> u64 {
        self.runner.peek(|r| r.start_offset())
    }

    /// The id the sender gave this receiver.
    pub fn member_id(&self) -> u64 {
        self.runner.peek(|r| r.member_id())
    }

    /// Stream offset of the next byte `read` returns: the bytes read so
    /// far plus [`Connection::start_offset`].
    pub fn bytes_read(&self) -> u64 {
        self.runner.peek(|r| r.bytes_read())
    }

    /// Why the session ended, once it has.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.runner.peek(|r| r.close_reason().cloned())
    }
}

impl Read for Connection {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let n = self.runner.wait_for(|r| {
            let n = r.read(buf);
            if n > 0 || r.is_finished() {
                return Some(Ok(n));
            }
            r.close_reason().map(|why| Err(errors::closed(why)))
        })??;
        // Reading may have opened the window: let the update leave now.
        self.runner.wake();
        Ok(n)
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if self.runner.peek(|r| r.is_finished()) {
            // TIME-WAIT, shortened: keep acknowledging until the sender's
            // CLOSE arrives or the receiver's own linger ends it.
            let until = self
                .runner
                .clock()
                .now()
                .saturating_add(self.linger + LINGER_SLACK);
            let _ = self
                .runner
                .wait(Some(until), |r| r.is_closed().then_some(()));
        } else {
            self.runner
                .with(|r| r.reset(3, "the receiver dropped the connection"));
        }
        // The runner then stops its thread after flushing the last datagrams.
    }
}
