//! A minimal kernel-TCP bulk source and sink for lab checks (no external
//! tools needed): the source writes as fast as the connection takes, the
//! sink counts what arrives. Both run on threads inside a host's namespace,
//! so the host's TCP congestion control (`tcp_cc`) applies.

use crate::error::LabError;
use crate::lab::LabHost;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Bytes per write and read.
const CHUNK: usize = 64 << 10;
/// How often blocked calls return to check the stop flag.
const TICK: Duration = Duration::from_millis(100);

/// Accepts one connection on `host`'s address and counts the bytes it
/// receives until stopped or the peer closes.
#[derive(Debug)]
pub struct TcpSink {
    bytes: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl TcpSink {
    /// Listens on `host`'s address, port `port`.
    pub fn start(host: &LabHost, port: u16) -> Result<Self, LabError> {
        let addr = SocketAddr::from((host.ip(), port));
        let listener = host
            .netns()
            .run_in(|| TcpListener::bind(addr))?
            .map_err(|e| LabError::io(format!("listening on {addr}"), e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| LabError::io("sink listener", e))?;
        let bytes = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, halt) = (Arc::clone(&bytes), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name(format!("tcp sink {addr}"))
            .spawn(move || sink(&listener, &count, &halt))
            .map_err(|e| LabError::io("spawning a sink thread", e))?;
        Ok(TcpSink {
            bytes,
            stop,
            thread: Some(thread),
            addr,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Payload bytes received so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

fn sink(listener: &TcpListener, count: &AtomicU64, stop: &AtomicBool) {
    let mut stream = loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    if stream.set_nonblocking(false).is_err() || stream.set_read_timeout(Some(TICK)).is_err() {
        return;
    }
    let mut buf = vec![0u8; CHUNK];
    while !stop.load(Ordering::Relaxed) {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

impl Drop for TcpSink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Connects from `host` to a sink and sends zeros as fast as TCP allows
/// until stopped (dropped).
#[derive(Debug)]
pub struct TcpSource {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TcpSource {
    /// Connects from `host` to `to` and starts sending, under the host's
    /// congestion control (`tcp_cc`, else the kernel's default).
    pub fn start(host: &LabHost, to: SocketAddr) -> Result<Self, LabError> {
        Self::start_with(host, to, None)
    }

    /// As [`TcpSource::start`], under congestion control `cc` (e.g.
    /// `"cubic"`) if given: the kernel's default may be another (BBR, which
    /// does not slow down for random loss).
    pub fn start_with(host: &LabHost, to: SocketAddr, cc: Option<&str>) -> Result<Self, LabError> {
        let stream = host
            .netns()
            .run_in(|| TcpStream::connect_timeout(&to, Duration::from_secs(5)))?
            .map_err(|e| LabError::io(format!("connecting to {to} from {}", host.name()), e))?;
        if let Some(cc) = cc {
            nix::sys::socket::setsockopt(
                &stream,
                nix::sys::socket::sockopt::TcpCongestion,
                &std::ffi::OsString::from(cc),
            )
            .map_err(|e| {
                LabError::io(
                    format!("TCP congestion control {cc:?} (is its module loaded?)"),
                    e.into(),
                )
            })?;
        }
        stream
            .set_write_timeout(Some(TICK))
            .map_err(|e| LabError::io("source socket", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let halt = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(format!("tcp source {to}"))
            .spawn(move || source(stream, &halt))
            .map_err(|e| LabError::io("spawning a source thread", e))?;
        Ok(TcpSource {
            stop,
            thread: Some(thread),
        })
    }
}

fn source(mut stream: TcpStream, stop: &AtomicBool) {
    let buf = vec![0u8; CHUNK];
    while !stop.load(Ordering::Relaxed) {
        match stream.write(&buf) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

impl Drop for TcpSource {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
