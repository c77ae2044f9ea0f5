//! Waiting without spinning: epoll (through mio) on the socket, plus a
//! timerfd on Linux so deadlines wake us to the microsecond rather than to
//! epoll's millisecond.

use crate::clock::Clock;
use crate::error::IoError;
use fanout_core::Instant;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

const SOCKET: Token = Token(0);
#[cfg(any(target_os = "linux", target_os = "android"))]
const TIMER: Token = Token(1);
const WAKER: Token = Token(2);
/// The second, receive-only socket ([`Poller::register_second`]).
const SECOND: Token = Token(3);

/// Readiness events collected per wait; a handful is plenty for three sources.
const EVENT_CAPACITY: usize = 8;

/// Sleeps until the socket is ready, a deadline passes, or a cap elapses.
#[derive(Debug)]
pub(crate) struct Poller {
    poll: Poll,
    events: Events,
    socket_fd: std::os::fd::RawFd,
    writable_interest: bool,
    /// Per socket (0: the main one, 1: the second): it may hold input. Set
    /// by a readiness event (or whenever no wait told otherwise), cleared
    /// by [`Poller::mark_drained`]. The registrations are edge-triggered,
    /// so a datagram arriving after the drain always brings a new event.
    readable: [bool; 2],
    /// The instant the precise timer is armed for, until it fires. A later
    /// deadline keeps it (the early wake-up finds nothing due and arms the
    /// timer anew), so a deadline that moves later at every ACK — an RTO,
    /// an idle timer — costs one wake-up per expiry instead of a
    /// `timerfd_settime` per wait.
    armed: Option<Instant>,
    waker: Arc<mio::Waker>,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    timer: nix::sys::timerfd::TimerFd,
}

/// Wakes a [`crate::Driver`] sleeping in its wait, from any thread: an
/// application thread that produced input for the engine (e.g. a stdin
/// reader) calls [`Waker::wake`] instead of waiting for the next deadline.
#[derive(Debug, Clone)]
pub struct Waker(Arc<mio::Waker>);

impl Waker {
    /// Makes the driver's current or next wait return at once. Cheap (one
    /// `eventfd` write on Linux); wake-ups coalesce.
    pub fn wake(&self) {
        // Failure means the driver (and its poll) is gone: nothing to wake.
        let _ = self.0.wake();
    }
}

impl Poller {
    /// Registers `socket` for readability (edge-triggered).
    pub fn new(socket: &UdpSocket) -> Result<Self, IoError> {
        let poll = Poll::new().map_err(IoError::Poll)?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), WAKER).map_err(IoError::Poll)?);
        let socket_fd = socket.as_raw_fd();
        poll.registry()
            .register(&mut SourceFd(&socket_fd), SOCKET, Interest::READABLE)
            .map_err(IoError::Poll)?;
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let timer = {
            use nix::sys::timerfd::{ClockId, TimerFd, TimerFlags};
            use std::os::fd::AsFd;
            let timer = TimerFd::new(
                ClockId::CLOCK_MONOTONIC,
                TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
            )
            .map_err(|e| IoError::Poll(e.into()))?;
            poll.registry()
                .register(
                    &mut SourceFd(&timer.as_fd().as_raw_fd()),
                    TIMER,
                    Interest::READABLE,
                )
                .map_err(IoError::Poll)?;
            timer
        };
        Ok(Poller {
            poll,
            events: Events::with_capacity(EVENT_CAPACITY),
            socket_fd,
            writable_interest: false,
            readable: [true; 2],
            armed: None,
            waker,
            #[cfg(any(target_os = "linux", target_os = "android"))]
            timer,
        })
    }

    /// A handle that interrupts [`Poller::wait`] from another thread.
    pub fn waker(&self) -> Waker {
        Waker(Arc::clone(&self.waker))
    }

    /// Also wake when the socket becomes writable (after a `WouldBlock` send).
    pub fn want_writable(&mut self, on: bool) -> Result<(), IoError> {
        if on == self.writable_interest {
            return Ok(());
        }
        let interest = if on {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        self.poll
            .registry()
            .reregister(&mut SourceFd(&self.socket_fd), SOCKET, interest)
            .map_err(IoError::Poll)?;
        self.writable_interest = on;
        Ok(())
    }

    /// Also waits for input on `socket` (a receive-only second socket,
    /// index 1 in [`Poller::maybe_readable`]).
    pub fn register_second(&mut self, socket: &UdpSocket) -> Result<(), IoError> {
        let fd = socket.as_raw_fd();
        self.poll
            .registry()
            .register(&mut SourceFd(&fd), SECOND, Interest::READABLE)
            .map_err(IoError::Poll)?;
        self.readable[1] = true;
        Ok(())
    }

    /// Whether socket `which` (0: main, 1: second) may hold input. `false`
    /// only after [`Poller::mark_drained`] with no readiness event since,
    /// so a receive attempt can be skipped (it would fail with
    /// `WouldBlock`).
    pub fn maybe_readable(&self, which: usize) -> bool {
        self.readable[which]
    }

    /// Records that a receive found socket `which` empty (`WouldBlock`).
    pub fn mark_drained(&mut self, which: usize) {
        self.readable[which] = false;
    }

    /// Forgets the drains: the next [`Poller::maybe_readable`] says yes
    /// (for a caller that goes on without waiting, hence without readiness
    /// news).
    pub fn assume_readable(&mut self) {
        self.readable = [true; 2];
    }

    /// Blocks until a registered event, `deadline` (precise on Linux), or
    /// `cap` from now, whichever is first. Returns at once if `deadline` passed.
    pub fn wait(
        &mut self,
        clock: &Clock,
        deadline: Option<Instant>,
        cap: Duration,
    ) -> Result<(), IoError> {
        let now = clock.now();
        let mut timeout = cap;
        if let Some(d) = deadline {
            if d <= now {
                // No wait, so no news about the sockets: assume input.
                self.readable = [true; 2];
                return Ok(());
            }
            let until = d - now;
            if until < timeout {
                timeout = self.arm(now, d, until)?;
            }
        }
        match self.poll.poll(&mut self.events, Some(timeout)) {
            Ok(()) => {
                for event in self.events.iter() {
                    match event.token() {
                        SOCKET if event.is_readable() || event.is_error() => {
                            self.readable[0] = true;
                        }
                        SECOND if event.is_readable() || event.is_error() => {
                            self.readable[1] = true;
                        }
                        #[cfg(any(target_os = "linux", target_os = "android"))]
                        TIMER => self.armed = None,
                        _ => {}
                    }
                }
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                self.readable = [true; 2];
                Ok(())
            }
            Err(e) => Err(IoError::Poll(e)),
        }
    }

    /// Arms the precise timer for `deadline`, `until` after `now` (unless
    /// it is already armed for it or for an instant between); returns the (coarser) epoll timeout to use
    /// alongside it as a safety net.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn arm(
        &mut self,
        now: Instant,
        deadline: Instant,
        until: Duration,
    ) -> Result<Duration, IoError> {
        use nix::sys::time::TimeSpec;
        use nix::sys::timerfd::{Expiration, TimerSetTimeFlags};
        if !self.armed.is_some_and(|a| a > now && a <= deadline) {
            // A zero one-shot would disarm the timer; `until` is positive here.
            self.timer
                .set(
                    Expiration::OneShot(TimeSpec::from_duration(until)),
                    TimerSetTimeFlags::empty(),
                )
                .map_err(|e| IoError::Poll(e.into()))?;
            // Re-arming resets the expiry count, so the edge-triggered
            // registration fires again without reading the fd.
            self.armed = Some(deadline);
        }
        Ok(until + Duration::from_millis(2))
    }

    /// Without a timerfd, epoll's millisecond timeout (mio rounds up).
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn arm(
        &mut self,
        _now: Instant,
        _deadline: Instant,
        until: Duration,
    ) -> Result<Duration, IoError> {
        Ok(until)
    }
}
