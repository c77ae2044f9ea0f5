//! The stream of a live race: numbered messages written at a constant rate
//! into each sender ([`run_source`]), and probes that note when each
//! message comes out of a receiver ([`Probe`]). Both run in the bench's own
//! process, on one monotonic clock, so a message's delay is the time from
//! its scheduled writing to its reading, whatever the tool.
//!
//! A message is `MAGIC`, the run's number, the message's number (both
//! little-endian `u32`) and filler up to the message size.

use fanout_core::time::Instant;
use fanout_io::Clock;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::process::{ChildStdin, ChildStdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Marks the start of every message.
pub const MAGIC: [u8; 8] = *b"fanoutLV";
/// Bytes before the filler: magic, run, sequence number.
pub const HEADER: usize = 16;
/// How often a blocked probe checks whether it should stop.
const TICK: Duration = Duration::from_millis(50);

/// Message `seq` of run `run`, `size` bytes (at least [`HEADER`]).
pub fn message(run: u32, seq: u32, size: usize) -> Vec<u8> {
    let mut m = Vec::with_capacity(size.max(HEADER));
    m.extend_from_slice(&MAGIC);
    m.extend_from_slice(&run.to_le_bytes());
    m.extend_from_slice(&seq.to_le_bytes());
    // Filler that no compressor or deduplication could shortcut.
    let mut x = u64::from(seq) << 32 | u64::from(run) | 1;
    while m.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        m.push(x as u8);
    }
    m
}

/// The sequence number of a message of run `run` starting `bytes`.
pub fn parse(bytes: &[u8], run: u32) -> Option<u32> {
    let h = bytes.get(..HEADER)?;
    if h[..8] != MAGIC || h[8..12] != run.to_le_bytes() {
        return None;
    }
    Some(u32::from_le_bytes([h[12], h[13], h[14], h[15]]))
}

/// When each message is due to be written.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// The clock of every time of the run (probes read it too).
    pub clock: Clock,
    /// Message 0's time.
    pub start: Instant,
    /// Time between messages.
    pub interval: Duration,
    /// Messages in the stream.
    pub count: u32,
}

impl Schedule {
    /// Message `seq`'s time.
    pub fn at(&self, seq: u32) -> Instant {
        self.start + self.interval * seq
    }
}

/// Where the source writes a sender's input.
#[derive(Debug)]
pub enum Inlet {
    /// A sender's stdin (non-blocking: a message the pipe cannot take at
    /// once is counted refused, never waited for).
    Pipe(ChildStdin),
    /// A UDP socket (in the sender's host) and the sender's input address.
    Udp(UdpSocket, SocketAddr),
}

impl Inlet {
    /// A pipe inlet, made non-blocking.
    pub fn pipe(stdin: ChildStdin) -> std::io::Result<Inlet> {
        set_nonblocking(&stdin)?;
        Ok(Inlet::Pipe(stdin))
    }

    /// Offers `m`; false if it was not taken whole.
    fn offer(&mut self, m: &[u8]) -> bool {
        match self {
            // A pipe write of at most PIPE_BUF (4096) bytes is atomic: all
            // or nothing.
            Inlet::Pipe(p) => p.write(m).is_ok_and(|n| n == m.len()),
            Inlet::Udp(s, to) => s.send_to(m, *to).is_ok_and(|n| n == m.len()),
        }
    }
}

fn set_nonblocking(fd: &impl AsFd) -> std::io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = fcntl(fd.as_fd(), FcntlArg::F_GETFL).map_err(std::io::Error::from)?;
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl(fd.as_fd(), FcntlArg::F_SETFL(flags)).map_err(std::io::Error::from)?;
    Ok(())
}

/// Writes every message of `schedule` into every inlet at its time (or at
/// once when behind); stops early when `stop` is set. Returns, per inlet,
/// the messages it refused. The inlets are dropped at the end (a pipe's
/// reader then sees the end of its input).
pub fn run_source(
    mut inlets: Vec<Inlet>,
    schedule: Schedule,
    run: u32,
    size: usize,
    stop: &AtomicBool,
) -> Vec<u64> {
    let mut refused = vec![0; inlets.len()];
    for seq in 0..schedule.count {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let due = schedule.at(seq);
        let now = schedule.clock.now();
        if due > now {
            std::thread::sleep(due.saturating_duration_since(now));
        }
        let m = message(run, seq, size);
        for (inlet, r) in inlets.iter_mut().zip(&mut refused) {
            if !inlet.offer(&m) {
                *r += 1;
            }
        }
    }
    refused
}

/// Where a probe reads a receiver's output.
#[derive(Debug)]
pub enum Outlet {
    /// A receiver's stdout: whole messages back to back.
    Pipe(ChildStdout),
    /// A UDP socket (in the receiver's host) the receiver sends each
    /// message to as one datagram.
    Udp(UdpSocket),
}

/// What a probe saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Arrivals {
    /// Per message number, when it was first read.
    pub at: Vec<Option<Instant>>,
    /// Messages read again.
    pub duplicates: u64,
    /// Bytes that were not part of a message of this run.
    pub foreign_bytes: u64,
}

impl Arrivals {
    fn new(count: u32) -> Self {
        Arrivals {
            at: vec![None; count as usize],
            ..Arrivals::default()
        }
    }

    fn note(&mut self, seq: u32, now: Instant) {
        match self.at.get_mut(seq as usize) {
            Some(slot @ None) => *slot = Some(now),
            Some(Some(_)) => self.duplicates += 1,
            None => self.foreign_bytes += 1,
        }
    }
}

/// Reads one receiver's output on a thread until it ends (pipe) or the
/// probe is stopped.
#[derive(Debug)]
pub struct Probe {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Arrivals>>,
}

impl Probe {
    /// Starts reading `outlet` for messages of run `run`, `size` bytes
    /// each, `count` in all, timing them on `clock`.
    pub fn start(
        outlet: Outlet,
        clock: Clock,
        run: u32,
        size: usize,
        count: u32,
    ) -> std::io::Result<Probe> {
        let stop = Arc::new(AtomicBool::new(false));
        let halt = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("live probe".into())
            .spawn(move || {
                let mut seen = Arrivals::new(count);
                match outlet {
                    Outlet::Pipe(p) => read_pipe(p, clock, run, size, &halt, &mut seen),
                    Outlet::Udp(s) => read_udp(&s, clock, run, &halt, &mut seen),
                }
                seen
            })?;
        Ok(Probe {
            stop,
            thread: Some(thread),
        })
    }

    /// Whether the reading has ended by itself (end of a pipe).
    pub fn ended(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stops reading and returns what was seen.
    pub fn finish(mut self) -> Arrivals {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Splits the bytes of a pipe into messages: each starts with the header;
/// bytes that do not are skipped up to the next magic (counted foreign).
fn read_pipe(
    mut p: ChildStdout,
    clock: Clock,
    run: u32,
    size: usize,
    stop: &AtomicBool,
    seen: &mut Arrivals,
) {
    // The pipe stays blocking: the receiver's exit ends it (the bench
    // stops receivers before finishing probes).
    let mut buf: Vec<u8> = Vec::with_capacity(64 << 10);
    let mut chunk = vec![0u8; 64 << 10];
    while !stop.load(Ordering::Relaxed) {
        let n = match p.read(&mut chunk) {
            Ok(0) => {
                // A partial message at the end is not a message.
                seen.foreign_bytes += buf.len() as u64;
                return;
            }
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let now = clock.now();
        buf.extend_from_slice(&chunk[..n]);
        let mut used = 0;
        while buf.len() - used >= size {
            let rest = &buf[used..];
            match parse(rest, run) {
                Some(seq) => {
                    seen.note(seq, now);
                    used += size;
                }
                None => {
                    // Resynchronise on the next magic.
                    let skip = rest[1..]
                        .windows(MAGIC.len())
                        .position(|w| w == MAGIC)
                        .map_or(rest.len() - (MAGIC.len() - 1), |i| i + 1);
                    seen.foreign_bytes += skip as u64;
                    used += skip;
                }
            }
        }
        buf.drain(..used);
    }
}

fn read_udp(s: &UdpSocket, clock: Clock, run: u32, stop: &AtomicBool, seen: &mut Arrivals) {
    if s.set_read_timeout(Some(TICK)).is_err() {
        return;
    }
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        match s.recv(&mut buf) {
            Ok(n) => match parse(&buf[..n], run) {
                Some(seq) => seen.note(seq, clock.now()),
                None => seen.foreign_bytes += n as u64,
            },
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn messages_carry_their_run_and_number() {
        let m = message(7, 42, 1316);
        assert_eq!(m.len(), 1316);
        assert_eq!(parse(&m, 7), Some(42));
        assert_eq!(parse(&m, 8), None);
        assert_eq!(parse(&m[..10], 7), None);
        assert_ne!(message(7, 43, 1316)[HEADER..], m[HEADER..]);
    }

    #[test]
    fn a_pipe_probe_times_whole_messages_and_resynchronises() {
        // `cat` stands for a receiver: what the source writes into its
        // stdin comes out of its stdout.
        let mut child = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let clock = Clock::new();
        let probe =
            Probe::start(Outlet::Pipe(child.stdout.take().unwrap()), clock, 3, 100, 5).unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&message(3, 0, 100)).unwrap();
        stdin.write_all(b"garbage").unwrap();
        stdin.write_all(&message(3, 2, 100)).unwrap();
        stdin.write_all(&message(3, 2, 100)).unwrap();
        stdin.write_all(&message(9, 4, 100)).unwrap();
        drop(stdin);
        child.wait().unwrap();
        while !probe.ended() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let seen = probe.finish();
        let got: Vec<bool> = seen.at.iter().map(Option::is_some).collect();
        assert_eq!(got, [true, false, true, false, false]);
        assert_eq!(seen.duplicates, 1);
        assert_eq!(seen.foreign_bytes, 7 + 100);
    }

    #[test]
    fn the_source_keeps_its_schedule_and_counts_refusals() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let clock = Clock::new();
        let probe = Probe::start(Outlet::Udp(rx.try_clone().unwrap()), clock, 1, 200, 20).unwrap();
        let schedule = Schedule {
            clock,
            start: clock.now(),
            interval: Duration::from_millis(2),
            count: 20,
        };
        let refused = run_source(
            vec![Inlet::Udp(tx, rx.local_addr().unwrap())],
            schedule,
            1,
            200,
            &AtomicBool::new(false),
        );
        assert_eq!(refused, [0]);
        assert!(clock.now() >= schedule.at(19));
        std::thread::sleep(Duration::from_millis(100));
        let seen = probe.finish();
        assert!(seen.at.iter().all(Option::is_some));
        // Nothing is read before it was written.
        for (i, t) in seen.at.iter().enumerate() {
            assert!(t.unwrap() >= schedule.at(i as u32));
        }
    }
}
