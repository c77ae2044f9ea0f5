//! The overlay's runtime over kernel TCP (ROMA: hops are ordinary TCP
//! connections, congestion control left to the kernel): nonblocking
//! sockets on one readiness loop (mio), a host's engine deciding what
//! each connection gets. A connection to a child takes frames only as
//! fast as its socket accepts them, so a slow child never holds up the
//! parent's stream or its siblings (forward-when-feasible).
//!
//! A node the source redirects (its plan puts the node under another
//! host, [`fanout_overlay::redirect`]) keeps its parent, connects to the
//! suggested one beside it, and moves once that one's manifest announces
//! the same object; until then it tries again every [`REDIRECT_RETRY`],
//! so a planned parent that starts later still takes its children over.
//!
//! A host that hands its decoding work out as jobs (a node in job mode,
//! [`OverlayNode::with_jobs`]) has them run on worker threads beside the
//! loop (at most one per core at once), so it keeps relaying while its
//! blocks decode, on every core.

use fanout_overlay::hop::{Manifest, UpstreamReader};
use fanout_overlay::{
    ChildId, Children, Job, JobDone, NodeError, OverlayNode, OverlaySource, SymbolKey,
};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;
use workers::Workers;

mod workers;

const LISTENER: Token = Token(0);
const UPSTREAM: Token = Token(1);
const CANDIDATE: Token = Token(2);
/// A job finished.
const WAKER: Token = Token(3);
/// Children's tokens start here.
const FIRST_CHILD: usize = 4;
/// Pause between attempts to reach a parent the source suggested.
pub const REDIRECT_RETRY: Duration = Duration::from_secs(2);
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
    /// The parent its source suggested, once (see
    /// [`OverlayNode::take_redirect`]).
    fn take_redirect(&mut self) -> Option<SocketAddr> {
        None
    }
    /// Whether `m` announces the object it is getting.
    fn same_object(&self, _m: &Manifest) -> bool {
        false
    }
    /// The key its parents' streams are sealed with (none for the source).
    fn key(&self) -> Option<&SymbolKey> {
        None
    }
    /// What it tells a new parent it holds, after its hello (see
    /// [`OverlayNode::have`]; empty: nothing).
    fn have(&self) -> Vec<u8> {
        Vec::new()
    }
    /// The next job to run off the loop (see [`OverlayNode::take_job`]).
    fn take_job(&mut self) -> Option<Job> {
        None
    }
    /// A job's result, back (see [`OverlayNode::on_job_done`]).
    fn on_job_done(&mut self, _done: JobDone) -> Result<(), NodeError> {
        Ok(())
    }
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
    fn take_redirect(&mut self) -> Option<SocketAddr> {
        OverlayNode::take_redirect(self)
    }
    fn same_object(&self, m: &Manifest) -> bool {
        OverlayNode::same_object(self, m)
    }
    fn key(&self) -> Option<&SymbolKey> {
        Some(OverlayNode::key(self))
    }
    fn have(&self) -> Vec<u8> {
        OverlayNode::have(self)
    }
    fn take_job(&mut self) -> Option<Job> {
        OverlayNode::take_job(self)
    }
    fn on_job_done(&mut self, done: JobDone) -> Result<(), NodeError> {
        OverlayNode::on_job_done(self, done)
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
    /// It hung up on its parent once it had decoded and no child waited
    /// for more than its own copy gives (ROMA §IV: a host that decoded may
    /// leave its parent and generate symbols of its own).
    pub left_parent: bool,
    /// Every child that connected, in the order they came.
    pub children: Vec<ChildProgress>,
    /// Every parent joined, in order.
    pub parents: Vec<ParentProgress>,
    /// Moves to a parent the source suggested.
    pub moves: u64,
    /// Redirects ignored: to its own address or to its parent already.
    pub redirects_ignored: u64,
}

/// One parent a node joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentProgress {
    /// Its address.
    pub addr: SocketAddr,
    /// Bytes read from it.
    pub bytes: u64,
    /// The source suggested it (a move), rather than the --join list.
    pub suggested: bool,
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
    /// A decoding job's thread died without a result.
    #[error("a decoding job failed (its thread panicked)")]
    Job,
}

/// How a host's connections to its children are set up.
#[derive(Debug, Clone, Default)]
pub struct ChildSockets {
    /// The kernel's congestion control on them (`cubic`, `bbr`, `reno`…;
    /// `None`: the system's default). The sending side's is the one that
    /// matters, so a host names it for the hops below it.
    pub tcp_congestion: Option<String>,
    /// Each connection's kernel buffers, bytes each way (`None`: the
    /// kernel's autotuning, up to `net.ipv4.tcp_wmem` / `tcp_rmem`'s
    /// largest). A hop runs at its rate only with about twice its
    /// bandwidth-delay product in flight or queued; `fanout overlay plan`
    /// prints each hop's.
    pub buffer: Option<usize>,
}

impl ChildSockets {
    /// Checks that the kernel takes the congestion control named (on a
    /// throwaway socket), so a bad name fails at the start, not at the
    /// first child.
    /// What a connection's buffers would be granted is returned (`None`
    /// without [`ChildSockets::buffer`]), for the caller to report a
    /// clamped size.
    pub fn check(&self) -> io::Result<Option<crate::BufferGrant>> {
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
        self.buffer
            .map(|bytes| {
                let probe =
                    socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
                crate::set_socket_buffers(&probe, bytes).map_err(io::Error::other)
            })
            .transpose()
    }

    fn apply(&self, stream: &TcpStream) -> io::Result<()> {
        let socket = socket2::SockRef::from(stream);
        if let Some(cc) = &self.tcp_congestion {
            socket.set_tcp_congestion(cc.as_bytes())?;
        }
        if let Some(bytes) = self.buffer {
            crate::set_socket_buffers(stream, bytes).map_err(io::Error::other)?;
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
    /// The hello it greets a parent with ([`fanout_overlay::hop::hello`]:
    /// its name in the source's plan, or anonymous).
    pub hello: Vec<u8>,
    /// Where it listens for children itself: a redirect there is ignored.
    pub own: Option<SocketAddr>,
    /// Each parent connection's kernel buffers, bytes each way (`None`:
    /// the kernel's autotuning), set before it connects so the window
    /// scale they need is agreed (see [`ChildSockets::buffer`]).
    pub buffer: Option<usize>,
}

/// Pauses between rounds over every parent, before giving up: short at
/// first, since the hosts of a tree start at about the same time and a
/// parent is usually listening within milliseconds of its child's first
/// try (a pause of 500 ms cost each such child half a second of its
/// transfer); 1.55 s in all.
const JOIN_PAUSES: [Duration; 5] = [
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(200),
    Duration::from_millis(400),
    Duration::from_millis(800),
];

impl Parents {
    /// Joins the first parent that answers, starting after index `after`
    /// (none: from the first): its index and stream.
    fn join_next(
        &self,
        after: Option<usize>,
        have: &[u8],
    ) -> Result<(usize, std::net::TcpStream), OverlayError> {
        let n = self.addrs.len();
        let start = after.map_or(0, |a| a + 1);
        let mut last = None;
        // Parents that time out rather than refuse: as many rounds as fit
        // in three connection timeouts.
        let patience = self.timeout * 3;
        let began = crate::Clock::new();
        let pauses = std::iter::once(Duration::ZERO).chain(JOIN_PAUSES);
        for pause in pauses {
            if Duration::from_nanos(began.now().as_nanos()) + pause > patience {
                break;
            }
            std::thread::sleep(pause);
            for k in 0..n {
                let i = (start + k) % n;
                let greeting = [&self.hello, have].concat();
                match join(self.addrs[i], self.timeout, self.buffer, &greeting) {
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

/// A TCP socket towards `addr` with its buffers set (if given) before it
/// connects.
fn parent_socket(addr: SocketAddr, buffer: Option<usize>) -> io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    if let Some(bytes) = buffer {
        crate::set_socket_buffers(&socket, bytes).map_err(io::Error::other)?;
    }
    Ok(socket)
}

/// Connects to a parent at `addr` (within `timeout`, with `buffer` as in
/// [`Parents`]) and greets it with `hello` (and what it holds), written
/// within `timeout` too.
pub fn join(
    addr: SocketAddr,
    timeout: Duration,
    buffer: Option<usize>,
    hello: &[u8],
) -> io::Result<std::net::TcpStream> {
    let socket = parent_socket(addr, buffer)?;
    socket.connect_timeout(&addr.into(), timeout)?;
    let mut s = std::net::TcpStream::from(socket);
    // A have of a large object may not fit the socket's buffer: a parent
    // that does not read it within the timeout is not one to wait for.
    s.set_write_timeout(Some(timeout))?;
    s.write_all(hello)?;
    s.set_write_timeout(None)?;
    Ok(s)
}

/// Starts connecting to `addr` without waiting (the socket reports
/// writable once connected), buffers as in [`Parents`].
fn connect_nonblocking(addr: SocketAddr, buffer: Option<usize>) -> io::Result<TcpStream> {
    let socket = parent_socket(addr, buffer)?;
    socket.set_nonblocking(true)?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(TcpStream::from_std(socket.into()))
}

/// Forgets the child at `token`: it hung up, or is dropped for breaking
/// the hop's protocol (`refused`).
fn close_child<H: OverlayHost>(
    host: &mut H,
    poll: &Poll,
    children: &mut BTreeMap<Token, Child>,
    token: Token,
    refused: bool,
    progress: &mut OverlayProgress,
) {
    let Some(mut c) = children.remove(&token) else {
        return;
    };
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
/// A node hangs up on its parent once it has decoded and its children
/// need nothing its own copy cannot give ([`OverlayProgress::left_parent`]),
/// which tells the parent this child has finished. A parent the source suggests is taken as
/// described in the module's documentation. The host's jobs run on worker
/// threads, their results handed back as they come (the loop wakes for
/// them).
pub fn run_overlay<H: OverlayHost>(
    host: &mut H,
    listener: Option<(std::net::TcpListener, &ChildSockets)>,
    parents: Option<&Parents>,
    mut done: impl FnMut(&mut H, &OverlayProgress) -> bool,
) -> Result<OverlayProgress, OverlayError> {
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(256);
    let mut workers = Workers::new(&poll, WAKER)?;
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
    let clock = crate::Clock::new();
    let mut progress = OverlayProgress::default();
    let mut link = ParentLink {
        parents,
        at: None,
        stream: None,
        suggested: None,
        redirected: false,
        candidate: None,
        next_try: Duration::ZERO,
    };
    if let Some(p) = parents {
        let (i, s) = p.join_next(None, &host.have())?;
        link.joined(&poll, i, s, &mut progress)?;
    }
    let mut children: BTreeMap<Token, Child> = BTreeMap::new();
    let mut next_token = FIRST_CHILD;
    let mut buf = vec![0u8; READ_CHUNK];
    let mut busy = false;
    // Jobs a resumed journal left.
    workers.take(host)?;
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
                // Results are taken below, whatever woke the loop.
                WAKER => {}
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
                                host.children().set_peer(id, peer.ip());
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
                    fresh |= read_upstream(
                        host,
                        &poll,
                        &mut link,
                        &mut buf,
                        &mut progress,
                        &mut workers,
                    )?;
                    busy |= fresh;
                }
                CANDIDATE => {
                    fresh |= link.on_candidate(host, &poll, &mut buf, &mut progress)?;
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
                        close_child(host, &poll, &mut children, token, refused, &mut progress);
                    }
                }
            }
        }
        // A result may complete the object: its children may then be
        // served from it.
        fresh |= workers.deliver(host)?;
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
                    close_child(host, &poll, &mut children, token, false, &mut progress);
                }
            }
            fresh = read_upstream(
                host,
                &poll,
                &mut link,
                &mut buf,
                &mut progress,
                &mut workers,
            )?;
            busy |= fresh;
            // Jobs the frames read brought start at once, and results are
            // taken as they come: under a fast parent the loop goes round
            // here for as long as its stream does not pause, and a node
            // waiting for its results reads on (it still needs its
            // parent) until they are in.
            workers.take(host)?;
            fresh |= workers.deliver(host)?;
            if !fresh {
                break;
            }
        }
        if link.stream.is_some() && !host.needs_parent() && !host.wants_upstream() {
            // Decoded, and nobody below waits for more than its own copy
            // gives: the parent's stream is not wanted again, and each
            // byte the parent pushed into this socket's buffers would be
            // taken from its other children.
            if let Some(mut s) = link.stream.take() {
                let _ = poll.registry().deregister(&mut s);
            }
            host.parent_gone();
            progress.left_parent = true;
        }
        let now = Duration::from_secs_f64(clock.now().as_secs_f64());
        link.follow(host, &poll, now, &mut progress);
        busy |= progress.bytes_to_children != sent_before;
    }
    Ok(progress)
}

/// A node's parent: where to find one, which it is, its stream; and the
/// parent its source suggested, while it is not yet the parent.
struct ParentLink<'a> {
    parents: Option<&'a Parents>,
    /// Index in the --join list of the parent joined from it last.
    at: Option<usize>,
    stream: Option<TcpStream>,
    /// The parent the source suggested, until the node moved there.
    suggested: Option<SocketAddr>,
    /// The parent now is the suggested one (on its loss the --join list
    /// is tried from its start).
    redirected: bool,
    /// A connection to the suggested parent, until its manifest came.
    candidate: Option<Candidate>,
    /// When (on the loop's clock) to try the suggested parent next.
    next_try: Duration,
}

/// A connection to a suggested parent, before the node moves to it.
struct Candidate {
    addr: SocketAddr,
    stream: TcpStream,
    /// Connected and greeted: its hello and have written whole.
    greeted: bool,
    /// Its hello and what it holds, once connected, and the bytes of it
    /// written so far (a have of a large object takes more than a fresh
    /// socket's buffer: it goes out as the socket takes it).
    greeting: Option<(Vec<u8>, usize)>,
    reader: UpstreamReader,
    /// Its bytes so far (the manifest, and what came with it), handed to
    /// the host when it moves.
    bytes: Vec<u8>,
}

impl ParentLink<'_> {
    /// The parent's address now.
    fn current(&self, progress: &OverlayProgress) -> Option<SocketAddr> {
        self.stream.as_ref()?;
        progress.parents.last().map(|p| p.addr)
    }

    /// Joined `s`, parent `i` of the --join list.
    fn joined(
        &mut self,
        poll: &Poll,
        i: usize,
        s: std::net::TcpStream,
        progress: &mut OverlayProgress,
    ) -> io::Result<()> {
        let addr = s.peer_addr()?;
        self.at = Some(i);
        self.redirected = false;
        self.stream = Some(attach(poll, s)?);
        progress.parents.push(ParentProgress {
            addr,
            bytes: 0,
            suggested: false,
        });
        Ok(())
    }

    /// Takes a redirect the host holds, and tries the suggested parent
    /// when it is time.
    fn follow<H: OverlayHost>(
        &mut self,
        host: &mut H,
        poll: &Poll,
        now: Duration,
        progress: &mut OverlayProgress,
    ) {
        let Some(parents) = self.parents else {
            return;
        };
        if let Some(to) = host.take_redirect() {
            let local = self
                .stream
                .as_ref()
                .and_then(|s| s.local_addr().ok())
                .map(|a| a.ip());
            if is_own(parents.own, local, to) || self.current(progress) == Some(to) {
                progress.redirects_ignored += 1;
            } else if self.suggested != Some(to) {
                self.suggested = Some(to);
                self.drop_candidate(poll);
                self.next_try = now;
            }
        }
        if !host.needs_parent() {
            self.suggested = None;
            self.drop_candidate(poll);
            return;
        }
        let Some(to) = self.suggested else { return };
        if self.candidate.is_some() || now < self.next_try {
            return;
        }
        self.next_try = now + REDIRECT_RETRY;
        let Some(key) = host.key() else { return };
        let Ok(mut stream) = connect_nonblocking(to, parents.buffer) else {
            return;
        };
        if poll
            .registry()
            .register(
                &mut stream,
                CANDIDATE,
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            return;
        }
        self.candidate = Some(Candidate {
            addr: to,
            stream,
            greeted: false,
            greeting: None,
            reader: UpstreamReader::new(key.clone()),
            bytes: Vec::new(),
        });
    }

    fn drop_candidate(&mut self, poll: &Poll) {
        if let Some(mut c) = self.candidate.take() {
            let _ = poll.registry().deregister(&mut c.stream);
        }
    }

    /// The suggested parent's connection is ready: greets it, reads it
    /// up to its manifest, and moves there if it serves the same object
    /// (whether frames came). A parent that cannot be reached is tried
    /// again later; one that serves something else is forgotten.
    fn on_candidate<H: OverlayHost>(
        &mut self,
        host: &mut H,
        poll: &Poll,
        buf: &mut [u8],
        progress: &mut OverlayProgress,
    ) -> Result<bool, OverlayError> {
        let Some(c) = self.candidate.as_mut() else {
            return Ok(false);
        };
        if !c.greeted {
            if !matches!(c.stream.take_error(), Ok(None)) {
                self.drop_candidate(poll);
                return Ok(false);
            }
            match c.stream.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(false),
                Err(_) => {
                    self.drop_candidate(poll);
                    return Ok(false);
                }
            }
            let (greeting, sent) = c.greeting.get_or_insert_with(|| {
                let mut g = self.parents.expect("a node's link").hello.clone();
                g.extend_from_slice(&host.have());
                (g, 0)
            });
            while *sent < greeting.len() {
                match c.stream.write(&greeting[*sent..]) {
                    Ok(0) => {
                        self.drop_candidate(poll);
                        return Ok(false);
                    }
                    Ok(n) => *sent += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        self.drop_candidate(poll);
                        return Ok(false);
                    }
                }
            }
            c.greeting = None;
            c.greeted = true;
        }
        let manifest = loop {
            // Up to the manifest only: the rest stays in the socket for
            // the host, once it moved.
            match c.stream.read(&mut buf[..64 << 10]) {
                Ok(0) => {
                    self.drop_candidate(poll);
                    return Ok(false);
                }
                Ok(n) => {
                    c.bytes.extend_from_slice(&buf[..n]);
                    match c.reader.on_bytes(&buf[..n]) {
                        Ok(r) => {
                            if let Some(m) = r.manifest {
                                break m;
                            }
                        }
                        Err(_) => {
                            // Not a parent of this overlay: forget it.
                            self.suggested = None;
                            self.drop_candidate(poll);
                            return Ok(false);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.drop_candidate(poll);
                    return Ok(false);
                }
            }
        };
        if !host.same_object(&manifest) {
            self.suggested = None;
            self.drop_candidate(poll);
            return Ok(false);
        }
        // Move: the old parent is dropped, the new one's stream starts
        // with the bytes read from it so far.
        let mut c = self.candidate.take().expect("present");
        if let Some(mut old) = self.stream.take() {
            let _ = poll.registry().deregister(&mut old);
        }
        poll.registry()
            .reregister(&mut c.stream, UPSTREAM, Interest::READABLE)?;
        host.rejoin();
        host.on_upstream(&c.bytes)?;
        progress.parents.push(ParentProgress {
            addr: c.addr,
            bytes: c.bytes.len() as u64,
            suggested: true,
        });
        progress.moves += 1;
        self.stream = Some(c.stream);
        self.redirected = true;
        self.suggested = None;
        Ok(true)
    }
}

/// Whether `to` is the node's own listening address `own` (also when it
/// listens on every address and `to` is a loopback one or `local`, the
/// address its parent connection leaves from).
fn is_own(own: Option<SocketAddr>, local: Option<std::net::IpAddr>, to: SocketAddr) -> bool {
    own.is_some_and(|o| {
        o.port() == to.port()
            && (o.ip() == to.ip()
                || (o.ip().is_unspecified() && (to.ip().is_loopback() || Some(to.ip()) == local)))
    })
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
    workers: &mut Workers,
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
                if let Some(p) = progress.parents.last_mut() {
                    p.bytes += n as u64;
                }
                host.on_upstream(&buf[..n])?;
                fresh = true;
                // A parent that sends as fast as this host reads keeps
                // it here: its jobs start and their results come in
                // meanwhile (the last one may end its need to read).
                workers.take(host)?;
                workers.deliver(host)?;
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
        if host.needs_parent() && workers.busy() {
            // What it needs may all be in hand, its decodes out: their
            // results say whether another parent is needed.
            workers.finish(host)?;
        }
        match link.parents {
            Some(p) if host.needs_parent() => {
                // After a suggested parent, the list from its start.
                let after = if link.redirected { None } else { link.at };
                let (i, s) = p.join_next(after, &host.have())?;
                host.rejoin();
                link.joined(poll, i, s, progress)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_sockets_take_the_buffers_asked_for() {
        let asked = 96 << 10;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let to_parent = join(addr, Duration::from_secs(5), Some(asked), b"hello").unwrap();
        let (from_child, _) = l.accept().unwrap();
        from_child.set_nonblocking(true).unwrap();
        let from_child = TcpStream::from_std(from_child);
        let sockets = ChildSockets {
            tcp_congestion: None,
            buffer: Some(asked),
        };
        let grant = sockets.check().unwrap().unwrap();
        assert!(!grant.clamped(), "{grant}");
        sockets.apply(&from_child).unwrap();
        // Linux reports twice what was set (the defaults are other sizes).
        let nonblocking = connect_nonblocking(addr, Some(asked)).unwrap();
        for s in [
            socket2::SockRef::from(&to_parent),
            socket2::SockRef::from(&from_child),
            socket2::SockRef::from(&nonblocking),
        ] {
            assert_eq!(s.recv_buffer_size().unwrap(), 2 * asked);
            assert_eq!(s.send_buffer_size().unwrap(), 2 * asked);
        }
        let autotuned = ChildSockets::default();
        assert_eq!(autotuned.check().unwrap(), None);
    }

    #[test]
    fn a_redirect_to_its_own_listening_address_is_known_as_such() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let local = Some("10.0.0.5".parse().unwrap());
        assert!(is_own(Some(a("10.0.0.5:7000")), None, a("10.0.0.5:7000")));
        assert!(is_own(Some(a("0.0.0.0:7000")), local, a("10.0.0.5:7000")));
        assert!(is_own(Some(a("0.0.0.0:7000")), None, a("127.0.0.1:7000")));
        assert!(!is_own(Some(a("0.0.0.0:7000")), local, a("10.0.0.6:7000")));
        assert!(!is_own(Some(a("10.0.0.5:7000")), local, a("10.0.0.5:7001")));
        assert!(!is_own(None, local, a("10.0.0.5:7000")));
    }
}
