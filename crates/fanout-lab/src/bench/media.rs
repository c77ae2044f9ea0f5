//! Media runs of the bench (`kind = "media"`): instead of a file, a live
//! MPEG-TS stream is written at a set rate into `fanout media send`'s UDP
//! input for a set time ([`TsSource`], a thread of the bench in the
//! sender's namespace, over its loopback), and each `fanout media recv`
//! reports the bytes it received in its `--json` summary
//! ([`received_bytes`]). The stream's rate is set above what the network
//! allows, so the rate control, not the source, decides what is sent (the
//! sender's queue drops the oldest of the rest).
//!
//! A run's goodput is a receiver's bytes over the stream's duration; in a
//! scenario with a competing TCP flow, that flow's rate is measured over
//! the same span, from the source's first datagram to its last.

use crate::error::LabError;
use crate::lab::Lab;
use fanout_io::Clock;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The sender's UDP input port, on its loopback.
pub const INPUT_PORT: u16 = 4000;
/// The group's RTP port (RTCP on the next).
pub const MEDIA_PORT: u16 = 5004;
/// Seconds without input that end the sender's stream (`--input-idle`).
pub const INPUT_IDLE_S: &str = "1";
/// Default stream duration, seconds.
pub const DEFAULT_STREAM_S: f64 = 60.0;
/// Default rate the stream is written at, bit/s.
pub const DEFAULT_INPUT_BPS: u64 = 200_000_000;
/// Fastest stream the source writes, bit/s.
pub const MAX_INPUT_BPS: u64 = 1_000_000_000;
/// TS packet size, bytes (ISO/IEC 13818-1).
const TS_PACKET: usize = 188;
/// TS packets per input datagram: large datagrams over the loopback keep
/// the source's and the sender's per-datagram cost small at 100 Mbit/s
/// and more (the sender cuts RTP payloads of its own size from them).
const PACKETS_PER_DATAGRAM: usize = 56;
/// The stream's one elementary PID.
const PID: u16 = 0x0100;
/// How long the source sleeps between bursts.
const TICK: Duration = Duration::from_millis(1);

/// Datagram `n` of the stream: `PACKETS_PER_DATAGRAM` TS packets of
/// `PID` with continuity counters running on from the previous datagram
/// and pseudo-random payload (nothing along the path can compress it).
pub fn datagram(n: u64) -> Vec<u8> {
    let mut d = Vec::with_capacity(PACKETS_PER_DATAGRAM * TS_PACKET);
    let mut x = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for i in 0..PACKETS_PER_DATAGRAM as u64 {
        let counter = ((n * PACKETS_PER_DATAGRAM as u64 + i) % 16) as u8;
        let [pid_hi, pid_lo] = PID.to_be_bytes();
        // Sync byte; PID; payload only, with the continuity counter.
        d.extend_from_slice(&[0x47, pid_hi & 0x1f, pid_lo, 0x10 | counter]);
        while d.len() % TS_PACKET != 0 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            d.push(x as u8);
        }
    }
    d
}

/// Writes the stream into a sender's UDP input at a constant rate for a
/// set time, from a thread of the bench inside the sender's namespace.
/// Dropping it stops the stream.
#[derive(Debug)]
pub struct TsSource {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    written: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl TsSource {
    /// Starts writing to `127.0.0.1:`[`INPUT_PORT`] in `host` at `bps` for
    /// `duration`.
    pub fn start(lab: &Lab, host: &str, bps: u64, duration: Duration) -> Result<Self, LabError> {
        let socket = lab
            .netns_of(host)?
            .run_in(|| UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)))?
            .map_err(|e| LabError::io(format!("binding the stream source in {host}"), e))?;
        let to = SocketAddr::from((Ipv4Addr::LOCALHOST, INPUT_PORT));
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicU64::new(0));
        let (halt, finished, count) = (Arc::clone(&stop), Arc::clone(&done), Arc::clone(&written));
        let thread = std::thread::Builder::new()
            .name("ts source".into())
            .spawn(move || {
                write_stream(&socket, to, bps, duration, &halt, &count);
                finished.store(true, Ordering::Release);
            })
            .map_err(|e| LabError::io("spawning the stream source", e))?;
        Ok(TsSource {
            stop,
            done,
            written,
            thread: Some(thread),
        })
    }

    /// Whether the whole stream has been written.
    pub fn finished(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Bytes written so far (those the sender's socket refused included).
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }
}

impl Drop for TsSource {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The source's loop: whole datagrams, as many as the rate owes, every
/// [`TICK`].
fn write_stream(
    socket: &UdpSocket,
    to: SocketAddr,
    bps: u64,
    duration: Duration,
    stop: &AtomicBool,
    written: &AtomicU64,
) {
    let clock = Clock::new();
    let start = clock.now();
    let size = (PACKETS_PER_DATAGRAM * TS_PACKET) as f64;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let elapsed = clock.now().saturating_duration_since(start).min(duration);
        let owed = (elapsed.as_secs_f64() * bps as f64 / 8.0 / size) as u64;
        while n < owed {
            // A datagram the sender did not take (it is busy, or not yet
            // listening) is lost, as from an encoder.
            let _ = socket.send_to(&datagram(n), to);
            n += 1;
            written.fetch_add(size as u64, Ordering::Relaxed);
        }
        if elapsed >= duration {
            break;
        }
        std::thread::sleep(TICK);
    }
}

/// The bytes of stream a receiver wrote out, from the `--json` summary
/// `fanout media recv` printed to `stdout_log` (its last JSON line).
pub fn received_bytes(stdout_log: &Path) -> Option<u64> {
    summary_bytes(&std::fs::read_to_string(stdout_log).ok()?)
}

/// `output_bytes` of the last JSON line of `text`.
fn summary_bytes(text: &str) -> Option<u64> {
    text.lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .and_then(|v| v.get("output_bytes")?.as_u64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagrams_are_ts_packets_with_running_counters() {
        let mut counters = Vec::new();
        for n in 0..3 {
            let d = datagram(n);
            assert_eq!(d.len(), PACKETS_PER_DATAGRAM * TS_PACKET);
            for p in d.chunks(TS_PACKET) {
                assert_eq!(p[0], 0x47);
                assert_eq!(u16::from_be_bytes([p[1], p[2]]) & 0x1fff, PID);
                counters.push(p[3] & 0x0f);
            }
        }
        assert!(counters.windows(2).all(|w| w[1] == (w[0] + 1) % 16));
        assert_ne!(datagram(0)[4..188], datagram(1)[4..188]);
    }

    #[test]
    fn received_bytes_come_from_the_last_json_line() {
        let text = "noise\n{\"output_bytes\": 1316, \"packets\": 1}\nmore noise\n";
        assert_eq!(summary_bytes(text), Some(1316));
        assert_eq!(summary_bytes("{\"packets\": 1}\n"), None);
        assert_eq!(received_bytes(Path::new("/nonexistent/stdout.log")), None);
    }
}
