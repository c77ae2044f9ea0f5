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

/// Readiness events collected per wait; a handful is plenty for three sources.
const EVENT_CAPACITY: usize = 8;

/// Sleeps until the socket is ready, a deadline passes, or a cap elapses.
#[derive(Debug)]
pub(crate) struct Poller {
    poll: Poll,
    events: Events,
    socket_fd: std::os::fd::RawFd,
    writable_interest: bool,
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
                return Ok(());
            }
            let until = d - now;
            if until < timeout {
                timeout = self.arm(until)?;
            }
        }
        match self.poll.poll(&mut self.events, Some(timeout)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(IoError::Poll(e)),
        }
    }

    /// Arms the precise timer for `until` from now; returns the (coarser)
    /// epoll timeout to use alongside it as a safety net.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn arm(&mut self, until: Duration) -> Result<Duration, IoError> {
        use nix::sys::time::TimeSpec;
        use nix::sys::timerfd::{Expiration, TimerSetTimeFlags};
        // A zero one-shot would disarm the timer; `until` is positive here.
        self.timer
            .set(
                Expiration::OneShot(TimeSpec::from_duration(until)),
                TimerSetTimeFlags::empty(),
            )
            .map_err(|e| IoError::Poll(e.into()))?;
        // Re-arming resets the expiry count, so the edge-triggered
        // registration fires again without reading the fd.
        Ok(until + Duration::from_millis(2))
    }

    /// Without a timerfd, epoll's millisecond timeout (mio rounds up).
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn arm(&mut self, until: Duration) -> Result<Duration, IoError> {
        Ok(until)
    }
}
