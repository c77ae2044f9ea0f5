//! The overlay's runtime over kernel TCP (ROMA: hops are ordinary TCP
//! connections, congestion control left to the kernel): nonblocking
//! sockets on one readiness loop (mio), a host's engine deciding what
//! each connection gets. A connection to a child takes frames only as
//! fast as its socket accepts them, so a slow child never holds up the
//! parent's stream or its siblings (forward-when-feasible).

use fanout_overlay::{ChildId, Children, NodeError, OverlayNode, OverlaySource};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

const LISTENER: Token = Token(0);
const UPSTREAM: Token = Token(1);
/// Bytes read from the parent at a time.
const READ_CHUNK: usize = 256 << 10;
/// A busy host's pause between wake-ups. Without it a node woke for
/// nearly every segment its parent's stream brought (about 8 600 a second
/// at 100 Mbit/s), and the system calls of each wake-up cost it more CPU
/// than checking and decoding did; 1 ms of the stream (12.5 kB at 100
/// Mbit/s, 1.25 MB at 10 Gbit/s) waits in the socket meanwhile.
const WAKE_COALESCE: Duration = Duration::from_millis(1);

/// A host the loop drives: the source or a node.
pub trait OverlayHost {
    /// Its children.
    fn children(&mut self) -> &mut Children;
    /// The bytes for child `id` next.
    fn writable(&mut self, id: ChildId) -> Option<&[u8]>;
    /// More of the parent's stream (the source has none).
    fn on_upstream(&mut self, bytes: &[u8]) -> Result<(), NodeError>;
    /// Whether it still needs a parent (a node that has not decoded).
    fn needs_parent(&self) -> bool {
        false
    }
    /// Whether to read more of the parent's stream now.
    fn wants_upstream(&mut self) -> bool {
        true
    }
    /// A new parent's stream starts.
    fn rejoin(&mut self) {}
    /// The parent went away and none is needed.
    fn parent_gone(&mut self) {}
}

impl OverlayHost for OverlaySource {
    fn children(&mut self) -> &mut Children {
        OverlaySource::children(self)
    }
    fn writable(&mut self, id: ChildId) -> Option<&[u8]> {
        OverlaySource::writable(self, id)
    }
    fn on_upstream(&mut self, _: &[u8]) -> Result<(), NodeError> {
        Ok(())
    }
}

impl OverlayHost for OverlayNode {
    fn children(&mut self) -> &mut Children {
        OverlayNode::children(self)
    }
    fn writable(&mut self, id: ChildId) -> Option<&[u8]> {
        OverlayNode::writable(self, id)
    }
    fn on_upstream(&mut self, bytes: &[u8]) -> Result<(), NodeError> {
        OverlayNode::on_upstream(self, bytes)
    }
    fn needs_parent(&self) -> bool {
        OverlayNode::needs_parent(self)
    }
    fn wants_upstream(&mut self) -> bool {
        OverlayNode::wants_upstream(self)
    }
    fn rejoin(&mut self) {
        OverlayNode::rejoin(self)
    }
    fn parent_gone(&mut self) {
        OverlayNode::parent_gone(self)
    }
}

/// What happened to a host's connections so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OverlayProgress {
    /// Children that connected.
    pub children_joined: u64,
    /// Children that hung up after greeting (done, or gone).
    pub children_left: u64,
    /// Children dropped for breaking the hop's protocol.
    pub children_refused: u64,
    /// Bytes written to children.
    pub bytes_to_children: u64,
    /// The parent closed its stream (and no other could be joined).
    pub upstream_closed: bool,
    /// Parents joined after the first went away.
    pub parent_switches: u64,
    /// Its parent went away after it decoded (its children then got its
    /// own symbols).
    pub orphaned: bool,
    /// Every child that connected, in the order they came.
    pub children: Vec<ChildProgress>,
}

/// One child connection of a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildProgress {
    /// Where it connected from.
    pub peer: std::net::SocketAddr,
    /// Bytes written to it.
    pub bytes: u64,
    /// Still connected.
    pub connected: bool,
    /// Dropped for breaking the hop's protocol.
    pub refused: bool,
}

/// Why the loop stopped early.
#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    /// A socket failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The parent's stream could not be read further.
    #[error("the parent's stream")]
    Upstream(#[from] NodeError),
    /// No parent could be joined.
    #[error("cannot join any parent of {0}")]
    NoParent(String),
}

/// How a host's connections to its children are set up.
#[derive(Debug, Clone, Default)]
pub struct ChildSockets {
    /// The kernel's congestion control on them (`cubic`, `bbr`, `reno`…;
    /// `None`: the system's default). The sending side's is the one that
    /// matters, so a host names it for the hops below it.
    pub tcp_congestion: Option<String>,
}

impl ChildSockets {
    /// Checks that the kernel takes the congestion control named (on a
    /// throwaway socket), so a bad name fails at the start, not at the
    /// first child.
    pub fn check(&self) -> io::Result<()> {
        if let Some(cc) = &self.tcp_congestion {
            let probe = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
            probe.set_tcp_congestion(cc.as_bytes()).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "the kernel does not take TCP congestion control {cc:?} ({e}; see \
                         /proc/sys/net/ipv4/tcp_available_congestion_control)"
                    ),
                )
            })?;
        }
        Ok(())
    }

    fn apply(&self, stream: &TcpStream) -> io::Result<()> {
        if let Some(cc) = &self.tcp_congestion {
            socket2::SockRef::from(stream).set_tcp_congestion(cc.as_bytes())?;
        }
        Ok(())
    }
}

/// Where a node finds a parent: addresses tried in order, the next one
/// whenever the current parent goes away before the node is done.
#[derive(Debug, Clone)]
pub struct Parents {
    /// The parents, in order of preference.
    pub addrs: Vec<SocketAddr>,
    /// How long a connection attempt may take.
    pub timeout: Duration,
}

/// Rounds over every parent before giving up.
const JOIN_ROUNDS: u32 = 3;
/// Pause between rounds.
const JOIN_PAUSE: Duration = Duration::from_millis(500);

impl Parents {
    /// Joins the first parent that answers, starting after index `after`
    /// (none: from the first): its index and stream.
    fn join_next(
        &self,
        after: Option<usize>,
    ) -> Result<(usize, std::net::TcpStream), OverlayError> {
        let n = self.addrs.len();
        let start = after.map_or(0, |a| a + 1);
        let mut last = None;
        for round in 0..JOIN_ROUNDS {
            if round > 0 {
                std::thread::sleep(JOIN_PAUSE);
            }
            for k in 0..n {
                let i = (start + k) % n;
                match join(self.addrs[i], self.timeout) {
                    Ok(s) => return Ok((i, s)),
                    Err(e) => last = Some(format!("{}: {e}", self.addrs[i])),
                }
            }
        }
        Err(OverlayError::NoParent(
            last.unwrap_or_else(|| "none given".into()),
        ))
    }
}

/// Connects to a parent at `addr` (within `timeout`) and greets it.
pub fn join(addr: SocketAddr, timeout: Duration) -> io::Result<std::net::TcpStream> {
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
    s.write_all(&fanout_overlay::hop::HELLO)?;
    Ok(s)
}

struct Child {
    stream: TcpStream,
    id: ChildId,
    /// Its entry in [`OverlayProgress::children`].
    index: usize,
}

/// Runs `host` with children arriving on `listener` and (for a node) a
/// parent from `parents`, until `done` says so (asked after every wake-up,
/// at least every 100 ms). A parent that goes away before the host is done
/// is replaced by the next that answers; the decoder keeps what it holds.
/// Dropping the upstream socket (when a node is done) tells the parent
/// this child has finished.
pub fn run_overlay<H: OverlayHost>(
    host: &mut H,
    listener: Option<(std::net::TcpListener, &ChildSockets)>,
    parents: Option<&Parents>,
    mut done: impl FnMut(&mut H, &OverlayProgress) -> bool,
) -> Result<OverlayProgress, OverlayError> {
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(256);
    let sockets = listener
        .as_ref()
        .map(|(_, s)| (*s).clone())
        .unwrap_or_default();
    let mut listener = listener
        .map(|(l, _)| -> io::Result<TcpListener> {
            l.set_nonblocking(true)?;
            let mut l = TcpListener::from_std(l);
            poll.registry()
                .register(&mut l, LISTENER, Interest::READABLE)?;
            Ok(l)
        })
        .transpose()?;
    let mut link = match parents {
        Some(p) => {
            let (i, s) = p.join_next(None)?;
            ParentLink {
                parents,
                at: Some(i),
                stream: Some(attach(&poll, s)?),
            }
        }
        None => ParentLink {
            parents: None,
            at: None,
            stream: None,
        },
    };
    let mut children: BTreeMap<Token, Child> = BTreeMap::new();
    let mut next_token = 2usize;
    let mut progress = OverlayProgress::default();
    let mut buf = vec![0u8; READ_CHUNK];
    let mut busy = false;
    while !done(host, &progress) {
        if busy {
            std::thread::sleep(WAKE_COALESCE);
        }
        busy = false;
        let sent_before = progress.bytes_to_children;
        poll.poll(&mut events, Some(Duration::from_millis(100)))?;
        let mut fresh = false;
        for event in events.iter() {
            match event.token() {
                LISTENER => {
                    let Some(l) = listener.as_mut() else { continue };
                    loop {
                        match l.accept() {
                            Ok((mut stream, peer)) => {
                                sockets.apply(&stream)?;
                                let token = Token(next_token);
                                next_token += 1;
                                poll.registry().register(
                                    &mut stream,
                                    token,
                                    Interest::READABLE | Interest::WRITABLE,
                                )?;
                                let id = host.children().add();
                                let index = progress.children.len();
                                progress.children.push(ChildProgress {
                                    peer,
                                    bytes: 0,
                                    connected: true,
                                    refused: false,
                                });
                                children.insert(token, Child { stream, id, index });
                                progress.children_joined += 1;
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
                UPSTREAM => {
                    fresh |= read_upstream(host, &poll, &mut link, &mut buf, &mut progress)?;
                    busy |= fresh;
                }
                token => {
                    let Some(c) = children.get_mut(&token) else {
                        continue;
                    };
                    let mut close = None;
                    if event.is_readable() {
                        close = read_child(host, c, &mut buf);
                    }
                    // Writable, or just greeted: whatever it can take now.
                    if close.is_none() {
                        close = flush(host, c, &mut progress).err();
                    }
                    if let Some(refused) = close {
                        let mut c = children.remove(&token).expect("present");
                        let _ = poll.registry().deregister(&mut c.stream);
                        host.children().remove(c.id);
                        let entry = &mut progress.children[c.index];
                        entry.connected = false;
                        entry.refused = refused;
                        if refused {
                            progress.children_refused += 1;
                        } else {
                            progress.children_left += 1;
                        }
                    }
                }
            }
        }
        // New frames go to every child that can take bytes; a child that
        // caught up may then want what waits in the parent's socket (its
        // readiness came while nobody wanted it), so read and hand out in
        // turn until the parent has nothing or nobody wants more.
        loop {
            if fresh {
                let mut closed = Vec::new();
                for (token, c) in children.iter_mut() {
                    if flush(host, c, &mut progress).is_err() {
                        closed.push(*token);
                    }
                }
                for token in closed {
                    let mut c = children.remove(&token).expect("present");
                    let _ = poll.registry().deregister(&mut c.stream);
                    host.children().remove(c.id);
                    progress.children[c.index].connected = false;
                    progress.children_left += 1;
                }
            }
            fresh = read_upstream(host, &poll, &mut link, &mut buf, &mut progress)?;
            busy |= fresh;
            if !fresh {
                break;
            }
        }
        busy |= progress.bytes_to_children != sent_before;
    }
    Ok(progress)
}

/// A node's parent: where to find one, which it is, its stream.
struct ParentLink<'a> {
    parents: Option<&'a Parents>,
    /// Index of the parent joined last.
    at: Option<usize>,
    stream: Option<TcpStream>,
}

/// A parent's stream, nonblocking, on the loop.
fn attach(poll: &Poll, s: std::net::TcpStream) -> io::Result<TcpStream> {
    s.set_nonblocking(true)?;
    let mut s = TcpStream::from_std(s);
    poll.registry()
        .register(&mut s, UPSTREAM, Interest::READABLE)?;
    Ok(s)
}

/// Reads the parent's stream while the host wants it; on its loss, joins
/// the next parent if the host still needs one. Whether frames came.
fn read_upstream<H: OverlayHost>(
    host: &mut H,
    poll: &Poll,
    link: &mut ParentLink<'_>,
    buf: &mut [u8],
    progress: &mut OverlayProgress,
) -> Result<bool, OverlayError> {
    let Some(s) = link.stream.as_mut() else {
        return Ok(false);
    };
    let mut fresh = false;
    let mut lost = false;
    while host.wants_upstream() {
        match s.read(buf) {
            Ok(0) => {
                lost = true;
                break;
            }
            Ok(n) => {
                host.on_upstream(&buf[..n])?;
                fresh = true;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // Reset, or any other failure: the parent is gone.
            Err(_) => {
                lost = true;
                break;
            }
        }
    }
    if lost {
        if let Some(mut s) = link.stream.take() {
            let _ = poll.registry().deregister(&mut s);
        }
        match link.parents {
            Some(p) if host.needs_parent() => {
                let (i, s) = p.join_next(link.at)?;
                link.at = Some(i);
                host.rejoin();
                link.stream = Some(attach(poll, s)?);
                progress.parent_switches += 1;
            }
            _ => {
                progress.upstream_closed = true;
                if !host.needs_parent() {
                    host.parent_gone();
                    progress.orphaned = true;
                    fresh = true;
                }
            }
        }
    }
    Ok(fresh)
}

/// Reads what a child sent: `Some(refused)` when it is to be closed (it
/// hung up, or broke the protocol).
fn read_child<H: OverlayHost>(host: &mut H, c: &mut Child, buf: &mut [u8]) -> Option<bool> {
    loop {
        match c.stream.read(&mut buf[..64]) {
            Ok(0) => return Some(false),
            Ok(n) => {
                if host.children().on_bytes(c.id, &buf[..n]).is_err() {
                    return Some(true);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Some(false),
        }
    }
}

/// Writes to a child what it can take now; `Err` when the socket failed
/// (the child is gone).
fn flush<H: OverlayHost>(
    host: &mut H,
    c: &mut Child,
    progress: &mut OverlayProgress,
) -> Result<(), bool> {
    loop {
        let Some(bytes) = host.writable(c.id) else {
            return Ok(());
        };
        match c.stream.write(bytes) {
            Ok(0) => return Err(false),
            Ok(n) => {
                host.children().wrote(c.id, n);
                progress.bytes_to_children += n as u64;
                progress.children[c.index].bytes += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(false),
        }
    }
}
