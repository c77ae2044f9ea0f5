//! The sender application's stream: what it wrote, and checks that every
//! DATA and REPAIR the session sender puts on the wire carries exactly
//! those bytes, and that every honest receiver reads a prefix of them.

use fanout_transport::fec;
use fanout_transport::session::SessionSender;
use fanout_transport::wire::{accept_header, decode_frames, Frame};

/// Most bytes one script's application writes in all (keeps runs short).
pub const STREAM_CAP: usize = 192 << 10;

/// The byte the application writes at `offset` (a function of the offset,
/// so misplaced data cannot pass for the right data).
pub fn pattern(offset: u64, seed: u8) -> u8 {
    ((offset as u32).wrapping_mul(2_654_435_761) >> 24) as u8 ^ seed
}

/// The application's side of the stream.
#[derive(Debug, Default)]
pub struct Stream {
    /// Bytes the sender took, in stream order.
    pub written: Vec<u8>,
    /// Bytes still to write (the send buffer was full).
    pending: Vec<u8>,
    /// The application wants the stream ended once `pending` is written.
    finish_requested: bool,
    /// `finish()` was called.
    pub finished: bool,
}

impl Stream {
    /// Queues `n` more bytes (within [`STREAM_CAP`]), unless the stream is
    /// to end.
    pub fn queue(&mut self, n: usize, seed: u8) {
        if self.finish_requested {
            return;
        }
        let have = self.written.len() + self.pending.len();
        let n = n.min(STREAM_CAP.saturating_sub(have));
        self.pending
            .extend((have..have + n).map(|o| pattern(o as u64, seed)));
    }

    /// Ends the stream once everything queued is written.
    pub fn request_finish(&mut self) {
        self.finish_requested = true;
    }

    /// Writes what the sender takes; finishes when asked and done.
    pub fn feed(&mut self, s: &mut SessionSender) {
        if !self.pending.is_empty() {
            let n = s.write(&self.pending);
            self.written.extend(self.pending.drain(..n));
        }
        if self.finish_requested && self.pending.is_empty() && !self.finished {
            s.finish();
            self.finished = true;
        }
    }

    /// Checks one datagram of the session sender: a header of `session`,
    /// frames that decode, DATA carrying the bytes written at its offset
    /// (FIN only at the end of a finished stream), REPAIR symbols equal to
    /// the code of the written bytes of their block.
    pub fn check_sent(&self, datagram: &[u8], session: u64) {
        let (h, body) = accept_header(datagram).expect("the sender's header is valid");
        assert_eq!(h.session_id, session, "the sender names its session");
        for f in decode_frames(body) {
            match f.expect("the sender's frames decode") {
                Frame::Data(d) => {
                    let r = d.range();
                    assert!(
                        r.end <= self.written.len() as u64,
                        "DATA {r:?} beyond the {} bytes written",
                        self.written.len()
                    );
                    assert_eq!(
                        d.payload,
                        &self.written[r.start as usize..r.end as usize],
                        "DATA payload differs from the stream at {r:?}"
                    );
                    if d.fin {
                        assert!(
                            self.finished && r.end == self.written.len() as u64,
                            "FIN at {} but the stream is {} bytes (finished: {})",
                            r.end,
                            self.written.len(),
                            self.finished
                        );
                    }
                }
                Frame::Repair(f) => {
                    let b = f.block;
                    assert!(
                        b.end() <= self.written.len() as u64,
                        "REPAIR of {b:?} beyond the {} bytes written",
                        self.written.len()
                    );
                    let bytes = &self.written[b.start as usize..b.end() as usize];
                    let stripes: Vec<&[u8]> = bytes.chunks(b.symbol_len).collect();
                    assert_eq!(stripes.len(), b.k, "REPAIR block geometry");
                    let want = fec::encode_repair(&stripes, b.symbol_len, f.id)
                        .expect("a valid symbol id");
                    assert!(f.symbol == want, "REPAIR symbol {} of {b:?} is wrong", f.id);
                }
                _ => {}
            }
        }
    }

    /// Checks that `got`, read by a receiver whose delivery started at
    /// `start`, is the written stream from there.
    pub fn check_read(&self, who: &str, start: u64, got: &[u8]) {
        // A receiver admitted after the end of the stream starts past it.
        let total = self.written.len() as u64 + u64::from(self.finished);
        assert!(
            start <= total,
            "{who} starts at {start}, beyond the {total} offsets of the stream"
        );
        let start = start as usize;
        let end = start + got.len();
        assert!(
            got.is_empty() || end <= self.written.len() && got == &self.written[start..end],
            "{who} read bytes that were not written at [{start}, {end})"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fanout_transport::wire::{DataFrame, Header, HeaderFlags};

    fn data(offset: u64, payload: &[u8], fin: bool) -> Vec<u8> {
        let mut d = Vec::new();
        Header {
            flags: HeaderFlags::default(),
            session_id: 9,
            packet_number: 0,
        }
        .encode(&mut d);
        Frame::Data(DataFrame {
            offset,
            timestamp: fanout_transport::wire::WireTimestamp(0),
            fin,
            message_end: false,
            payload,
        })
        .encode(&mut d);
        d
    }

    fn stream(n: usize) -> Stream {
        let mut s = Stream::default();
        s.queue(n, 3);
        s.written = std::mem::take(&mut s.pending);
        s
    }

    #[test]
    fn data_must_carry_the_written_bytes() {
        let s = stream(100);
        s.check_sent(&data(10, &s.written[10..20], false), 9);
        let wrong =
            std::panic::catch_unwind(|| s.check_sent(&data(11, &s.written[10..20], false), 9));
        assert!(wrong.is_err(), "misplaced bytes pass");
        let beyond = std::panic::catch_unwind(|| s.check_sent(&data(95, &[0; 10], false), 9));
        assert!(beyond.is_err(), "bytes beyond the stream pass");
        let fin = std::panic::catch_unwind(|| s.check_sent(&data(90, &s.written[90..], true), 9));
        assert!(fin.is_err(), "a FIN before finish() passes");
    }

    #[test]
    fn receivers_must_read_the_stream() {
        let s = stream(100);
        s.check_read("r", 0, &s.written[..50]);
        s.check_read("r", 40, &s.written[40..60]);
        assert!(std::panic::catch_unwind(|| s.check_read("r", 1, &s.written[..50])).is_err());
        assert!(std::panic::catch_unwind(|| s.check_read("r", 102, &[])).is_err());
    }
}
