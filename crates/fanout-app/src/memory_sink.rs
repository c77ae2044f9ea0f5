//! A [`StreamSink`] into memory: it collects what it is given, at most
//! `room` bytes per call — for tests of stream producers, and to capture
//! a stream (a file's as the file protocol frames it) without a session.

use crate::StreamSink;

/// Collects what a producer writes, `room` bytes per call.
#[derive(Debug, Default)]
pub struct MemorySink {
    /// Every byte accepted so far, messages included, in order.
    pub got: Vec<u8>,
    /// Bytes accepted per `write` call (and reported by `writable`).
    pub room: usize,
    /// Set once the feed called `finish`.
    pub finished: bool,
}

impl StreamSink for MemorySink {
    fn write_message(&mut self, msg: &[u8]) -> bool {
        self.got.extend_from_slice(msg);
        true
    }
    fn write(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.room);
        self.got.extend_from_slice(&data[..n]);
        n
    }
    fn writable(&self) -> usize {
        self.room
    }
    fn finish(&mut self) {
        self.finished = true;
    }
    fn abort(&mut self, _reason: &str) {}
}
