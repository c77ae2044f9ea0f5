//! The driver thread behind every API handle: it owns the [`Driver`] and
//! pumps an engine that lives behind a mutex, so the application thread can
//! read, write and wait on the engine while the transport keeps running.
//!
//! The engine is locked per engine call ([`Locked`]), never across the
//! driver's sleep: an application call waits at most one datagram's worth
//! of engine work. After every step the driver thread signals a condition
//! variable; application calls wait on it for the state they need (no
//! busy-waiting). Application calls that change the engine wake the driver
//! through its [`Waker`] so new data leaves at once.

use crate::{Clock, Driver, DriverConfig, UdpEndpoint, Waker};
use fanout_core::{Engine, Instant, Transmit};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// The engine and what the driver thread reports about itself.
struct State<E> {
    engine: E,
    /// Set by the handle: leave the loop (after flushing queued datagrams).
    stop: bool,
    /// Cleared by the driver thread when it leaves its loop.
    running: bool,
    /// The runtime error that ended the driver thread, if any.
    failure: Option<String>,
}

struct Shared<E> {
    state: Mutex<State<E>>,
    /// Signalled after every driver step and when the thread ends.
    progress: Condvar,
}

impl<E> Shared<E> {
    fn lock(&self) -> MutexGuard<'_, State<E>> {
        // A panic on another thread leaves the engine as consistent as any
        // single engine call left it; keep going rather than poison every
        // later call.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The engine as the driver sees it: each call locks the shared state.
struct Locked<E>(Arc<Shared<E>>);

impl<E: Engine> Engine for Locked<E> {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.0.lock().engine.handle_datagram(now, from, datagram)
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.0.lock().engine.poll_transmit(now, buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.0.lock().engine.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.0.lock().engine.handle_timeout(now)
    }
    fn max_wake_delay(&self) -> Option<std::time::Duration> {
        self.0.lock().engine.max_wake_delay()
    }
}

/// An engine running on its own driver thread; stopping and joining the
/// thread on drop.
pub(crate) struct Runner<E: Engine + Send + 'static> {
    shared: Arc<Shared<E>>,
    waker: Waker,
    clock: Clock,
    local_addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl<E: Engine + Send + 'static> Runner<E> {
    /// Starts `engine` over `endpoint` on a new thread named `name`.
    pub fn start(
        name: &str,
        engine: E,
        endpoint: UdpEndpoint,
        clock: Clock,
        config: DriverConfig,
    ) -> io::Result<Self> {
        let local_addr = endpoint.local_addr();
        let max_wait = config.max_wait;
        let linger = config.linger;
        let driver = Driver::new(endpoint, clock, config).map_err(super::errors::setup)?;
        let waker = driver.waker();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                engine,
                stop: false,
                running: true,
                failure: None,
            }),
            progress: Condvar::new(),
        });
        let for_thread = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || drive(driver, for_thread, max_wait, linger))?;
        Ok(Runner {
            shared,
            waker,
            clock,
            local_addr,
            thread: Some(thread),
        })
    }

    /// The socket's local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The clock the driver stamps inputs with.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Runs `f` on the engine, then wakes the driver (`f` may have given it
    /// something to send).
    pub fn with<T>(&self, f: impl FnOnce(&mut E) -> T) -> T {
        let out = f(&mut self.shared.lock().engine);
        self.waker.wake();
        out
    }

    /// Cuts the driver's sleep short (the engine has something new to send).
    pub fn wake(&self) {
        self.waker.wake();
    }

    /// [`Runner::wait`] without a deadline.
    pub fn wait_for<T>(&self, ready: impl FnMut(&mut E) -> Option<T>) -> io::Result<T> {
        self.wait(None, ready)?
            .ok_or_else(|| io::Error::other("wait without a deadline timed out"))
    }

    /// Runs `f` on the engine without waking the driver (read-only use).
    pub fn peek<T>(&self, f: impl FnOnce(&mut E) -> T) -> T {
        f(&mut self.shared.lock().engine)
    }

    /// Blocks until `ready` returns `Some` (checked now and after every
    /// driver step), or `deadline` passes (`Ok(None)`). Fails if the driver
    /// thread stopped (a runtime error, or the handle is shutting down).
    pub fn wait<T>(
        &self,
        deadline: Option<Instant>,
        mut ready: impl FnMut(&mut E) -> Option<T>,
    ) -> io::Result<Option<T>> {
        let mut state = self.shared.lock();
        loop {
            if let Some(t) = ready(&mut state.engine) {
                return Ok(Some(t));
            }
            if !state.running {
                let why = state
                    .failure
                    .clone()
                    .unwrap_or_else(|| "the driver thread stopped".into());
                return Err(io::Error::other(format!("fanout runtime: {why}")));
            }
            state = match deadline {
                None => self
                    .shared
                    .progress
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let left = d.saturating_duration_since(self.clock.now());
                    if left.is_zero() {
                        return Ok(None);
                    }
                    self.shared
                        .progress
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }
}

impl<E: Engine + Send + 'static> Drop for Runner<E> {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.waker.wake();
        if let Some(t) = self.thread.take() {
            // A panic on the driver thread was already reported by the
            // panic hook; dropping must not panic in turn.
            let _ = t.join();
        }
    }
}

/// The driver thread: steps until told to stop, then pumps once more and
/// flushes what is still queued (at most `linger`) so final CLOSE, RESET
/// and ACK datagrams leave.
fn drive<E: Engine>(
    mut driver: Driver,
    shared: Arc<Shared<E>>,
    max_wait: Duration,
    linger: Duration,
) {
    let exit = Exit(Arc::clone(&shared));
    let mut engine = Locked(Arc::clone(&shared));
    let result = loop {
        if shared.lock().stop {
            // One last pump without sleeping, so datagrams the handle's
            // final call queued (a RESET, the last ACK) leave too.
            if let Err(e) = driver.step(&mut engine, Duration::ZERO) {
                break Err(e);
            }
            break driver.flush_queued(linger);
        }
        if let Err(e) = driver.step(&mut engine, max_wait) {
            break Err(e);
        }
        shared.progress.notify_all();
    };
    if let Err(e) = result {
        shared.lock().failure = Some(e.to_string());
    }
    drop(exit);
}

/// Marks the driver thread as gone and wakes every waiter when it ends,
/// by return or by panic, so no application call waits forever.
struct Exit<E>(Arc<Shared<E>>);

impl<E> Drop for Exit<E> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.running = false;
        if std::thread::panicking() && state.failure.is_none() {
            state.failure = Some("the driver thread panicked".into());
        }
        drop(state);
        self.0.progress.notify_all();
    }
}
