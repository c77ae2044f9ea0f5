//! MPEG-TS carried in plain UDP datagrams, as ffmpeg (`udp://`) and
//! srt-live-transmit read and write it: a [`Read`] over a bound socket for
//! `media send --input udp://ADDR:PORT`, and a [`Write`] that sends whole
//! TS packets, seven to a datagram, for `media recv -o udp://HOST:PORT`.

use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// TS packets per datagram written (1316 bytes: what UDP carriers of
/// MPEG-TS send).
const PACKETS_PER_DATAGRAM: usize = 7;

/// The address of a `udp://ADDR:PORT` argument, if it is one.
pub fn udp_target(arg: &std::path::Path) -> Option<Result<SocketAddr>> {
    let s = arg.to_str()?;
    let rest = s.strip_prefix("udp://")?;
    Some(
        rest.parse()
            .with_context(|| format!("{s}: expected udp://ADDR:PORT")),
    )
}

/// Datagrams arriving on a socket, read as one byte stream; the stream
/// ends once `idle` passes without a datagram after the first.
pub struct UdpInput {
    socket: UdpSocket,
    idle: Duration,
    started: bool,
    /// The last datagram, and how much of it was read: a caller's buffer
    /// smaller than a datagram must not truncate it.
    held: Vec<u8>,
    at: usize,
}

impl UdpInput {
    /// Binds `addr` (a group's address joins nothing: give the local
    /// address and port the encoder sends to).
    pub fn bind(addr: SocketAddr, idle: Duration) -> Result<Self> {
        let socket =
            UdpSocket::bind(addr).with_context(|| format!("cannot listen on udp://{addr}"))?;
        Ok(UdpInput {
            socket,
            idle,
            started: false,
            held: Vec::new(),
            at: 0,
        })
    }
}

impl Read for UdpInput {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Empty datagrams are skipped, in a loop (never recursion).
        while self.at == self.held.len() {
            // Before the first datagram: wait as long as it takes.
            let timeout = self.started.then_some(self.idle);
            self.socket.set_read_timeout(timeout)?;
            self.held.resize(65_536, 0);
            match self.socket.recv(&mut self.held) {
                Ok(n) => {
                    self.started = true;
                    self.held.truncate(n);
                    self.at = 0;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    self.held.clear();
                    self.at = 0;
                    return Ok(0);
                }
                Err(e) => return Err(e),
            }
        }
        let n = buf.len().min(self.held.len() - self.at);
        buf[..n].copy_from_slice(&self.held[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Whole TS packets sent as UDP datagrams to one address.
pub struct UdpOutput {
    socket: UdpSocket,
    to: SocketAddr,
    pending: Vec<u8>,
}

impl UdpOutput {
    /// Sends to `to` from an unbound socket of its family.
    pub fn connect(to: SocketAddr) -> Result<Self> {
        let any: SocketAddr = if to.is_ipv4() {
            "0.0.0.0:0".parse().expect("literal")
        } else {
            "[::]:0".parse().expect("literal")
        };
        let socket = UdpSocket::bind(any).context("cannot open a UDP socket")?;
        Ok(UdpOutput {
            socket,
            to,
            pending: Vec::new(),
        })
    }

    fn send_whole(&mut self, flush: bool) -> std::io::Result<()> {
        let full = fanout_rtp::mp2t::TS_PACKET * PACKETS_PER_DATAGRAM;
        let mut at = 0;
        while self.pending.len() - at >= full
            || (flush && self.pending.len() - at >= fanout_rtp::mp2t::TS_PACKET)
        {
            let n = (self.pending.len() - at).min(full);
            let n = n - n % fanout_rtp::mp2t::TS_PACKET;
            self.socket.send_to(&self.pending[at..at + n], self.to)?;
            at += n;
        }
        self.pending.drain(..at);
        Ok(())
    }
}

impl Write for UdpOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        self.send_whole(false)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send_whole(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ts_goes_out_seven_packets_to_a_datagram_and_comes_back_as_a_stream() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = UdpOutput::connect(rx.local_addr().unwrap()).unwrap();
        let ts: Vec<u8> = (0..10)
            .flat_map(|i| {
                let mut p = vec![i as u8; 188];
                p[0] = 0x47;
                p
            })
            .collect();
        out.write_all(&ts[..1000]).unwrap();
        out.write_all(&ts[1000..]).unwrap();
        out.flush().unwrap();
        let mut buf = [0u8; 2048];
        assert_eq!(rx.recv(&mut buf).unwrap(), 7 * 188);
        assert_eq!(rx.recv(&mut buf).unwrap(), 3 * 188, "the rest at the flush");
        // And read back as a stream, ending when the sender falls silent.
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut input = UdpInput::bind(addr, Duration::from_millis(200)).unwrap();
        let to = input.socket.local_addr().unwrap();
        out = UdpOutput::connect(to).unwrap();
        out.write_all(&ts).unwrap();
        out.flush().unwrap();
        let mut got = Vec::new();
        input.read_to_end(&mut got).unwrap();
        assert!(got == ts);
        assert!(udp_target(std::path::Path::new("udp://127.0.0.1:5000")).is_some());
        assert!(udp_target(std::path::Path::new("out.ts")).is_none());
        assert!(udp_target(std::path::Path::new("udp://nonsense"))
            .unwrap()
            .is_err());
    }
}
