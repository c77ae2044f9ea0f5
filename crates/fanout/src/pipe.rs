//! Byte pipes between the event loop and blocking I/O (stdin, stdout):
//! each blocking end runs on its own thread and talks to the loop through a
//! bounded channel, so a slow or idle pipe never blocks the engine, and the
//! thread wakes the loop ([`fanout_io::Waker`]) when it has news.

use anyhow::{anyhow, Result};
use fanout_app::StreamSink;
use fanout_core::time::Instant;
use fanout_io::{Clock, Waker};
use std::io::{Read, Write};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::thread::JoinHandle;

/// Bytes per read from the input, and per chunk handed to the output.
pub const CHUNK_BYTES: usize = 64 << 10;
/// Chunks in flight between a pipe thread and the loop (at most
/// `CHUNK_BYTES × PIPE_CHUNKS` = 1 MiB buffered beyond the session's own
/// buffers).
pub const PIPE_CHUNKS: usize = 16;

enum Input {
    /// Bytes, and when the read returned them.
    Data(Vec<u8>, Instant),
    End,
    Failed(std::io::Error),
}

/// An input stream (stdin) read on its own thread and written into a
/// stream as the stream takes it; at end of input the stream is finished.
pub struct InputFeed {
    rx: Receiver<Input>,
    chunk: Vec<u8>,
    /// When `chunk` was read.
    chunk_read_at: Instant,
    used: usize,
    hasher: blake3::Hasher,
    bytes: u64,
    /// The last byte written into the stream.
    last: Option<u8>,
    ended: bool,
    error: Option<anyhow::Error>,
}

impl InputFeed {
    /// Starts reading `input` on a thread that wakes the loop via `waker`
    /// after each chunk, noting on `clock` when each read returned. The thread ends at end of input, on a read error,
    /// or when the feed is dropped.
    pub fn spawn(mut input: impl Read + Send + 'static, waker: Waker, clock: Clock) -> InputFeed {
        let (tx, rx) = mpsc::sync_channel(PIPE_CHUNKS);
        std::thread::spawn(move || loop {
            let mut buf = vec![0u8; CHUNK_BYTES];
            let msg = match input.read(&mut buf) {
                Ok(0) => Input::End,
                Ok(n) => {
                    buf.truncate(n);
                    Input::Data(buf, clock.now())
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => Input::Failed(e),
            };
            let last = !matches!(msg, Input::Data(..));
            if tx.send(msg).is_err() {
                return; // the loop is gone
            }
            waker.wake();
            if last {
                return;
            }
        });
        InputFeed {
            rx,
            chunk: Vec::new(),
            chunk_read_at: Instant::ZERO,
            used: 0,
            hasher: blake3::Hasher::new(),
            bytes: 0,
            last: None,
            ended: false,
            error: None,
        }
    }

    /// Moves what is available into `s` as far as it takes it now; never
    /// blocks. At end of input, finishes `s`; on a read error, aborts it.
    pub fn feed(&mut self, s: &mut impl StreamSink) {
        if self.used < self.chunk.len() {
            s.input_read_at(self.chunk_read_at);
        }
        while !self.ended && self.error.is_none() {
            if self.used == self.chunk.len() {
                match self.rx.try_recv() {
                    Ok(Input::Data(d, at)) => {
                        (self.chunk, self.used, self.chunk_read_at) = (d, 0, at);
                        s.input_read_at(at);
                    }
                    Ok(Input::End) | Err(TryRecvError::Disconnected) => {
                        self.ended = true;
                        s.finish();
                    }
                    Ok(Input::Failed(e)) => {
                        self.error = Some(anyhow!(e).context("cannot read the input"));
                        s.abort("sender's input failed");
                    }
                    Err(TryRecvError::Empty) => return,
                }
                continue;
            }
            let n = s.write(&self.chunk[self.used..]);
            if n == 0 {
                return;
            }
            self.hasher.update(&self.chunk[self.used..self.used + n]);
            self.last = Some(self.chunk[self.used + n - 1]);
            self.used += n;
            self.bytes += n as u64;
        }
    }

    /// Bytes written into the stream so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether the stream is between lines of the input: nothing written
    /// yet, or the last byte written was a newline (where the session
    /// relay may insert a line, [`fanout_app::upstream_relay`]).
    pub fn at_line_start(&self) -> bool {
        self.last.is_none_or(|b| b == b'\n')
    }

    /// Whether the input ended and the stream was finished.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The read error that aborted the stream, if any.
    pub fn take_error(&mut self) -> Option<anyhow::Error> {
        self.error.take()
    }

    /// BLAKE3 of the bytes written so far, hex.
    pub fn blake3_hex(&self) -> String {
        self.hasher.finalize().to_hex().to_string()
    }
}

/// An output stream (stdout) written on its own thread. The loop offers
/// chunks; when the thread lags, offers are refused and the loop stops
/// reading from the transport, whose receive window then closes — the
/// sender slows down instead of the loop blocking.
pub struct OutputDrain {
    tx: Option<SyncSender<Vec<u8>>>,
    held: Option<Vec<u8>>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
    hasher: blake3::Hasher,
    bytes: u64,
}

impl OutputDrain {
    /// Starts writing to `output` on a thread that wakes the loop via
    /// `waker` after each chunk (room for more).
    pub fn spawn(mut output: impl Write + Send + 'static, waker: Waker) -> OutputDrain {
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(PIPE_CHUNKS);
        let thread = std::thread::spawn(move || {
            for chunk in rx {
                let written = output.write_all(&chunk).and_then(|()| output.flush());
                waker.wake();
                written?;
            }
            output.flush()
        });
        OutputDrain {
            tx: Some(tx),
            held: None,
            thread: Some(thread),
            hasher: blake3::Hasher::new(),
            bytes: 0,
        }
    }

    /// Whether a new chunk would be taken now (nothing is held back).
    pub fn has_room(&mut self) -> Result<bool> {
        let Some(chunk) = self.held.take() else {
            return Ok(true);
        };
        self.offer(chunk)?;
        Ok(self.held.is_none())
    }

    /// Hands `chunk` to the writer thread, or holds it until
    /// [`OutputDrain::has_room`] finds room. Fails if the writer failed.
    pub fn push(&mut self, chunk: Vec<u8>) -> Result<()> {
        debug_assert!(self.held.is_none(), "check has_room first");
        self.hasher.update(&chunk);
        self.bytes += chunk.len() as u64;
        self.offer(chunk)
    }

    fn offer(&mut self, chunk: Vec<u8>) -> Result<()> {
        let tx = self.tx.as_ref().ok_or_else(|| anyhow!("output closed"))?;
        match tx.try_send(chunk) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(c)) => {
                self.held = Some(c);
                Ok(())
            }
            Err(TrySendError::Disconnected(_)) => Err(self
                .finish()
                .err()
                .unwrap_or_else(|| anyhow!("the output writer stopped"))),
        }
    }

    /// Bytes handed to the output so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// BLAKE3 of the bytes handed to the output, hex.
    pub fn blake3_hex(&self) -> String {
        self.hasher.finalize().to_hex().to_string()
    }

    /// Writes what is held, waits for the writer to finish, reports its error.
    pub fn finish(&mut self) -> Result<()> {
        if let (Some(tx), Some(chunk)) = (self.tx.as_ref(), self.held.take()) {
            // Blocking is fine now: the transfer is over.
            let _ = tx.send(chunk);
        }
        self.tx = None;
        match self.thread.take().map(|t| t.join()) {
            None => Ok(()),
            Some(Ok(r)) => r.map_err(|e| anyhow!(e).context("cannot write the output")),
            Some(Err(_)) => Err(anyhow!("the output writer panicked")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fanout_app::MemorySink as Sink;
    use fanout_io::{Clock, Driver, DriverConfig, UdpEndpoint};

    fn waker() -> (Driver, Waker) {
        let ep = UdpEndpoint::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let d = Driver::new(ep, Clock::new(), DriverConfig::default()).unwrap();
        let w = d.waker();
        (d, w)
    }

    #[test]
    fn input_arrives_whole_through_a_small_window_and_finishes() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let (_d, w) = waker();
        let mut feed = InputFeed::spawn(std::io::Cursor::new(data.clone()), w, Clock::new());
        let mut sink = Sink {
            room: 1000,
            ..Sink::default()
        };
        for _ in 0..100_000 {
            feed.feed(&mut sink);
            if sink.finished {
                break;
            }
            std::thread::yield_now();
        }
        assert!(sink.finished && feed.ended());
        assert!(sink.got == data);
        assert_eq!(feed.bytes(), data.len() as u64);
        assert_eq!(feed.blake3_hex(), blake3::hash(&data).to_hex().to_string());
    }

    /// Records when the bytes it gets were read.
    #[derive(Default)]
    struct Timed {
        read_at: Vec<Instant>,
        bytes: usize,
        finished: bool,
    }

    impl StreamSink for Timed {
        fn write_message(&mut self, msg: &[u8]) -> bool {
            self.bytes += msg.len();
            true
        }
        fn write(&mut self, data: &[u8]) -> usize {
            self.bytes += data.len();
            data.len()
        }
        fn writable(&self) -> usize {
            usize::MAX
        }
        fn finish(&mut self) {
            self.finished = true;
        }
        fn abort(&mut self, _: &str) {}
        fn input_read_at(&mut self, at: Instant) {
            self.read_at.push(at);
        }
    }

    #[test]
    fn the_sink_learns_when_its_bytes_were_read() {
        // A real-time sender counts deadlines from the read, not from
        // when its loop got round to the bytes.
        let (_d, w) = waker();
        let clock = Clock::new();
        let mut feed = InputFeed::spawn(std::io::Cursor::new(vec![7u8; 1000]), w, clock);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let fed_at = clock.now();
        let mut sink = Timed::default();
        while !sink.finished {
            feed.feed(&mut sink);
            std::thread::yield_now();
        }
        assert_eq!(sink.bytes, 1000);
        let read_at = *sink.read_at.first().expect("a read time");
        assert!(fed_at.saturating_duration_since(read_at) >= std::time::Duration::from_millis(15));
    }

    #[test]
    fn output_keeps_order_and_reports_a_failing_writer() {
        let (_d, w) = waker();
        let path = std::env::temp_dir().join(format!("fanout-pipe-{}", std::process::id()));
        let mut out = OutputDrain::spawn(std::fs::File::create(&path).unwrap(), w.clone());
        let mut want = Vec::new();
        for i in 0..100u8 {
            while !out.has_room().unwrap() {
                std::thread::yield_now();
            }
            let chunk = vec![i; 1000 + usize::from(i)];
            want.extend_from_slice(&chunk);
            out.push(chunk).unwrap();
        }
        out.finish().unwrap();
        assert!(std::fs::read(&path).unwrap() == want);
        assert_eq!(out.bytes(), want.len() as u64);
        let _ = std::fs::remove_file(&path);

        // A real pipe whose reading end is closed: writes fail (EPIPE).
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut out = OutputDrain::spawn(writer, w);
        out.push(vec![1; 10]).unwrap();
        let mut failed = false;
        for _ in 0..1000 {
            let offered =
                out.has_room()
                    .and_then(|room| if room { out.push(vec![2; 10]) } else { Ok(()) });
            if offered.is_err() {
                failed = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(failed || out.finish().is_err());
    }
}
