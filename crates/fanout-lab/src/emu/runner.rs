//! The emulator thread: reads datagrams from every host's TUN device, runs
//! them through [`Core`] on the real clock, writes them out when due, and
//! measures its own lateness.

use super::core::{Core, CoreCounters};
use super::lateness::{Lateness, LatenessSummary};
use super::offload::{Offload, OffloadCounters, RX_HDR_PLAIN, RX_HDR_VALID, VNET_HDR_LEN};
use crate::error::LabError;
use crate::steering::Steering;
use crate::topo::Topology;
use fanout_core::Instant;
use fanout_io::Clock;
use fanout_sim::stats::LinkStats;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use serde::Serialize;
use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Token of the precise timer; host `i`'s device is token `i`.
const TIMER: Token = Token(usize::MAX - 1);
/// Token of the stop waker.
const WAKER: Token = Token(usize::MAX - 2);
/// Most datagrams read from one device per loop iteration (round-robin
/// passes over the devices with data, releasing due packets between passes).
const READ_BURST: usize = 64;
/// Longest the loop sleeps without an event (stop checks are wake-ups).
const IDLE_CAP: Duration = Duration::from_millis(100);
/// Read buffer: the `virtio_net_hdr`, then an IPv4 datagram (or UDP GSO
/// super-packet) of at most 64 KiB.
const BUF: usize = VNET_HDR_LEN + 65_536;
/// How often the loop publishes link counters for [`Emulator::snapshot`].
const SNAPSHOT_EVERY: Duration = Duration::from_millis(20);
/// SCHED_FIFO priority of the emulator thread (1–99; low, so kernel
/// threads that also run real-time keep precedence).
const RT_PRIORITY: &str = "10";

/// Counters of one directed link, for reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkReport {
    /// Sending node's name.
    pub from: String,
    /// Receiving node's name.
    pub to: String,
    /// Packets offered (before queue and loss).
    pub offered_packets: u64,
    /// Packets serialized.
    pub tx_packets: u64,
    /// Bytes serialized.
    pub tx_bytes: u64,
    /// Packets that reached the far end.
    pub delivered_packets: u64,
    /// Drops by reason (`queue_overflow`, `red_early`, `random_loss`, …).
    pub drops: BTreeMap<String, u64>,
}

/// What the emulator did during a run, and whether it kept up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmuReport {
    /// Seconds the emulator ran.
    pub wall_s: f64,
    /// Its own counters.
    pub counters: CoreCounters,
    /// Writes into a TUN device that failed (the packet is lost).
    pub write_errors: u64,
    /// Times the emulator set its wake-up timer.
    pub timer_sets: u64,
    /// The NIC offloads the emulator performed (UDP GSO splits, checksums)
    /// and the reads it dropped for malformed offload headers.
    pub offload: OffloadCounters,
    /// Release lateness (actual minus scheduled delivery time).
    pub lateness: LatenessSummary,
    /// Whether the emulator thread ran under SCHED_FIFO (`chrt`); without
    /// it, other load on the machine delays releases more.
    pub realtime: bool,
    /// CPU seconds (user + system) of the emulator thread. Its writes into
    /// the hosts' TUN devices carry the receiving kernels' IP/UDP input
    /// path too, so this is the machine's cost of the emulated network.
    pub cpu_s: f64,
    /// The emulator's CPU and the CPUs running the hosts' packet input
    /// (receive steering); `None` when the emulator ran that input itself.
    pub steering: Option<Steering>,
    /// False when p99 lateness exceeded the topology's bound, or the
    /// emulator failed.
    pub valid: bool,
    /// Why the run is invalid.
    pub invalid_reason: Option<String>,
    /// Per directed link, in topology order.
    pub links: Vec<LinkReport>,
}

/// Link counters at one instant of a running emulator.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Seconds since the emulator started, when the counters were read.
    pub at_s: f64,
    /// Per directed link, in topology order.
    pub links: Vec<LinkStats>,
}

/// A running emulator; [`Emulator::stop`] ends it and returns its report.
#[derive(Debug)]
pub struct Emulator {
    stop: Arc<AtomicBool>,
    snapshot: Arc<Mutex<Snapshot>>,
    waker: Arc<mio::Waker>,
    thread: Option<JoinHandle<EmuReport>>,
}

impl Emulator {
    /// Starts the emulator thread over `devices` (one per host, in host
    /// order), which it owns and closes when it ends.
    /// With `steering`, the thread pins itself to the emulator's CPU.
    pub fn start(
        topo: &Topology,
        devices: Vec<tun::Device>,
        steering: Option<Steering>,
    ) -> Result<Self, LabError> {
        let poll = Poll::new().map_err(|e| LabError::io("creating epoll", e))?;
        let waker = Arc::new(
            mio::Waker::new(poll.registry(), WAKER)
                .map_err(|e| LabError::io("creating waker", e))?,
        );
        for (i, dev) in devices.iter().enumerate() {
            dev.set_nonblock()
                .map_err(|e| LabError::io("setting a TUN device non-blocking", e))?;
            poll.registry()
                .register(
                    &mut SourceFd(&dev.as_raw_fd()),
                    Token(i),
                    Interest::READABLE,
                )
                .map_err(|e| LabError::io("registering a TUN device", e))?;
        }
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(|e| LabError::io("creating a timerfd", e.into()))?;
        poll.registry()
            .register(
                &mut SourceFd(&timer.as_fd().as_raw_fd()),
                TIMER,
                Interest::READABLE,
            )
            .map_err(|e| LabError::io("registering the timerfd", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let snapshot = Arc::new(Mutex::new(Snapshot::default()));
        let mut looper = Loop {
            snapshot: Arc::clone(&snapshot),
            published: Instant::ZERO,
            core: Core::new(topo),
            devices,
            poll,
            timer,
            clock: Clock::new(),
            lateness: Lateness::default(),
            write_errors: 0,
            offload: Offload::default(),
            out: Vec::with_capacity(BUF),
            stop: Arc::clone(&stop),
            names: topo.node_names().iter().map(|s| (*s).to_owned()).collect(),
            ends: topo.links.iter().map(|l| (l.from, l.to)).collect(),
            bound: topo.max_lateness_p99,
            realtime: false,
            armed: None,
            arms: 0,
            steering,
        };
        let thread = std::thread::Builder::new()
            .name("lab emulator".into())
            .spawn(move || looper.run())
            .map_err(|e| LabError::io("spawning the emulator thread", e))?;
        Ok(Emulator {
            stop,
            snapshot,
            waker,
            thread: Some(thread),
        })
    }

    /// The link counters as last published (at most ~20 ms old while the
    /// emulator runs), with the emulator-clock time they were read at.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Stops the thread and returns its report.
    pub fn stop(mut self) -> EmuReport {
        self.finish()
            .unwrap_or_else(|| failed("emulator thread panicked"))
    }

    fn finish(&mut self) -> Option<EmuReport> {
        self.stop.store(true, Ordering::Relaxed);
        // The thread may already be gone; then there is nothing to wake.
        let _ = self.waker.wake();
        self.thread.take()?.join().ok()
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// CPU seconds the calling thread has used (0 if the clock is unavailable).
fn thread_cpu_seconds() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map_or(0.0, |t| t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9)
}

fn failed(reason: &str) -> EmuReport {
    EmuReport {
        wall_s: 0.0,
        counters: CoreCounters::default(),
        write_errors: 0,
        timer_sets: 0,
        offload: OffloadCounters::default(),
        lateness: Lateness::default().summary(),
        realtime: false,
        cpu_s: 0.0,
        steering: None,
        valid: false,
        invalid_reason: Some(reason.to_owned()),
        links: Vec::new(),
    }
}

struct Loop {
    snapshot: Arc<Mutex<Snapshot>>,
    published: Instant,
    core: Core,
    devices: Vec<tun::Device>,
    poll: Poll,
    timer: TimerFd,
    clock: Clock,
    lateness: Lateness,
    write_errors: u64,
    offload: Offload,
    /// A datagram with its `virtio_net_hdr`, as written to a device.
    out: Vec<u8>,
    stop: Arc<AtomicBool>,
    names: Vec<String>,
    ends: Vec<(usize, usize)>,
    bound: Duration,
    realtime: bool,
    /// The deadline the timer is set for (it has fired once it is past).
    armed: Option<Instant>,
    /// Times the timer was set.
    arms: u64,
    /// Set on start; cleared if the thread could not be pinned.
    steering: Option<Steering>,
}

/// Puts the calling thread under SCHED_FIFO with `chrt` (util-linux); false
/// if that failed.
fn set_realtime() -> bool {
    let Ok(link) = std::fs::read_link("/proc/thread-self") else {
        return false;
    };
    // "<pid>/task/<tid>"
    let Some(tid) = link.file_name().and_then(|t| t.to_str()) else {
        return false;
    };
    std::process::Command::new("chrt")
        .args(["--fifo", "-p", RT_PRIORITY, tid])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Loop {
    fn run(&mut self) -> EmuReport {
        self.realtime = set_realtime();
        if self.steering.as_ref().is_some_and(|s| !s.pin_emulator()) {
            self.steering = None;
        }
        let error = self.pump().err();
        self.report(error)
    }

    fn pump(&mut self) -> std::io::Result<()> {
        let mut events = Events::with_capacity(256);
        let mut buf = vec![0u8; BUF];
        // Devices that may still hold datagrams (edge-triggered readiness).
        let mut hot: Vec<usize> = (0..self.devices.len()).collect();
        let mut is_hot = vec![true; self.devices.len()];
        while !self.stop.load(Ordering::Relaxed) {
            self.release();
            self.publish();
            // Round-robin, one datagram per device per pass, the first
            // device rotating: datagrams that waited in different devices
            // enter interleaved, and no host's burst always goes first.
            if !hot.is_empty() {
                hot.rotate_left(1);
            }
            for _ in 0..READ_BURST {
                if hot.is_empty() {
                    break;
                }
                let mut k = 0;
                while k < hot.len() {
                    if self.read_one(hot[k], &mut buf) {
                        k += 1;
                    } else {
                        is_hot[hot.remove(k)] = false;
                    }
                }
                self.release();
            }
            let timeout = if hot.is_empty() {
                self.arm()?
            } else {
                Some(Duration::ZERO)
            };
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            for event in &events {
                let i = event.token().0;
                if is_hot.get(i) == Some(&false) {
                    is_hot[i] = true;
                    hot.push(i);
                }
            }
        }
        Ok(())
    }

    /// Publishes the link counters if the last snapshot is old enough.
    fn publish(&mut self) {
        let now = self.clock.now();
        if now.saturating_duration_since(self.published) < SNAPSHOT_EVERY {
            return;
        }
        self.published = now;
        let links = (0..self.core.link_count())
            .filter_map(|i| self.core.link_stats(i).copied())
            .collect();
        *self.snapshot.lock().unwrap_or_else(PoisonError::into_inner) = Snapshot {
            at_s: now.as_secs_f64(),
            links,
        };
    }

    /// Delivers everything due now.
    fn release(&mut self) {
        let (clock, devices, out) = (&self.clock, &self.devices, &mut self.out);
        let (lateness, errors) = (&mut self.lateness, &mut self.write_errors);
        self.core
            .advance(clock.now(), |host, bytes, csum_valid, due| {
                let late = clock.now().saturating_duration_since(due);
                lateness.record(late);
                out.clear();
                out.extend_from_slice(if csum_valid {
                    &RX_HDR_VALID
                } else {
                    &RX_HDR_PLAIN
                });
                out.extend_from_slice(bytes);
                if devices[host].send(out).is_err() {
                    *errors += 1;
                }
            });
    }

    /// Reads one packet from device `i` into the core (a UDP GSO
    /// super-packet as its datagrams, all stamped with the read time);
    /// false when the device had none (or failed).
    fn read_one(&mut self, i: usize, buf: &mut [u8]) -> bool {
        match self.devices[i].recv(buf) {
            Ok(n) => {
                let now = self.clock.now();
                let core = &mut self.core;
                // A malformed read is counted by `offload` and dropped.
                let _ = self.offload.process(&mut buf[..n], |datagram, csum_valid| {
                    core.ingress(i, datagram, csum_valid, now);
                });
                true
            }
            Err(_) => false,
        }
    }

    /// Arms the timer for the next event; returns the epoll timeout.
    fn arm(&mut self) -> std::io::Result<Option<Duration>> {
        let Some(deadline) = self.core.next_deadline() else {
            return Ok(Some(IDLE_CAP));
        };
        let now: Instant = self.clock.now();
        if deadline <= now {
            return Ok(Some(Duration::ZERO));
        }
        let until = deadline - now;
        if until >= IDLE_CAP {
            return Ok(Some(IDLE_CAP));
        }
        // Reprogramming the timer costs a hypervisor exit in a VM: skip it
        // when it is already set for this deadline and has not fired.
        if self.armed != Some(deadline) {
            self.timer
                .set(
                    Expiration::OneShot(TimeSpec::from_duration(until)),
                    TimerSetTimeFlags::empty(),
                )
                .map_err(std::io::Error::from)?;
            self.armed = Some(deadline);
            self.arms += 1;
        }
        // The timer wakes us precisely; epoll's own timeout is a safety net.
        Ok(Some(until + Duration::from_millis(2)))
    }

    fn report(&self, error: Option<std::io::Error>) -> EmuReport {
        let lateness = self.lateness.summary();
        let p99 = self.lateness.quantile(0.99);
        let invalid_reason = match error {
            Some(e) => Some(format!("emulator failed: {e}")),
            None if p99 > self.bound => Some(format!(
                "fell behind: p99 lateness {} us > {} us",
                p99.as_micros(),
                self.bound.as_micros()
            )),
            None => None,
        };
        let links = (0..self.core.link_count())
            .filter_map(|i| {
                let s = self.core.link_stats(i)?;
                let (from, to) = self.ends[i];
                Some(LinkReport {
                    from: self.names[from].clone(),
                    to: self.names[to].clone(),
                    offered_packets: s.offered_packets,
                    tx_packets: s.tx_packets,
                    tx_bytes: s.tx_bytes,
                    delivered_packets: s.delivered_packets,
                    drops: s
                        .drops
                        .nonzero()
                        .map(|(r, c)| (r.label().to_owned(), c))
                        .collect(),
                })
            })
            .collect();
        EmuReport {
            wall_s: self.clock.now().as_secs_f64(),
            counters: *self.core.counters(),
            write_errors: self.write_errors,
            timer_sets: self.arms,
            offload: *self.offload.counters(),
            lateness,
            realtime: self.realtime,
            cpu_s: thread_cpu_seconds(),
            steering: self.steering.clone(),
            valid: invalid_reason.is_none(),
            invalid_reason,
            links,
        }
    }
}
