//! Session relay (TCP-SMO §IV.B: each receiver can send data back to the
//! source through its own connection): a member's upstream stream is any
//! producer writing into [`crate::UpstreamSink`]; the sender's
//! [`UpstreamRelay`] re-multicasts each complete line a receiver sent,
//! prefixed with `[ADDR] `, into the session (`fanout stream send
//! --echo-upstream`), and/or hands the same lines to an output the caller
//! drains (`--upstream-out FILE`).
//!
//! Echoed lines enter the stream only between lines of the sender's own
//! input (when the last input byte written was a newline, or none was),
//! so a text stream stays line-structured. Bounds: a line longer than
//! [`MAX_LINE_BYTES`] is cut there; at most [`MAX_QUEUED_BYTES`] of lines
//! wait for the stream or the file — beyond, members' upstream bytes stay
//! at the sender, whose upstream windows then close (the members slow
//! down; nothing is lost).

use fanout_transport::session::{MemberId, SessionSender};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

/// Longest upstream line relayed whole, bytes (a longer one is cut into
/// lines of this length).
pub const MAX_LINE_BYTES: usize = 4096;
/// Lines waiting for the stream or the output file at most, bytes.
pub const MAX_QUEUED_BYTES: usize = 1 << 20;

/// Upstream news from the session's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayEvent {
    /// A member's upstream bytes (or end) became readable.
    Readable(MemberId, SocketAddr),
    /// A member left (its partial line is relayed as it is).
    Left(MemberId),
}

/// Counters of the sender's relay.
#[derive(Debug, Clone, Copy, Default)]
pub struct RelayCounters {
    /// Upstream bytes read from members.
    pub bytes: u64,
    /// Complete lines (or cut pieces) relayed.
    pub lines: u64,
    /// Lines written into the session's stream.
    pub echoed: u64,
    /// Lines that could not be echoed because the stream had ended.
    pub not_echoed: u64,
}

/// The sender's side: reads members' upstream bytes, cuts them into
/// prefixed lines, echoes them into the stream and/or queues them for an
/// output ([`UpstreamRelay::pop_output`]).
pub struct UpstreamRelay {
    echo: bool,
    /// Lines are queued for an output.
    output: bool,
    /// Members with unread upstream bytes (or an unread end).
    ready: BTreeMap<MemberId, SocketAddr>,
    /// Each member's line so far (`[ADDR] ` included).
    partial: BTreeMap<MemberId, Vec<u8>>,
    to_echo: VecDeque<Vec<u8>>,
    to_file: VecDeque<Vec<u8>>,
    queued: usize,
    counters: RelayCounters,
}

impl UpstreamRelay {
    /// A relay echoing lines into the stream (`echo`) and/or queueing them
    /// for an output (`output`).
    pub fn new(echo: bool, output: bool) -> Self {
        UpstreamRelay {
            echo,
            output,
            ready: BTreeMap::new(),
            partial: BTreeMap::new(),
            to_echo: VecDeque::new(),
            to_file: VecDeque::new(),
            queued: 0,
            counters: RelayCounters::default(),
        }
    }

    /// Counters so far.
    pub fn counters(&self) -> RelayCounters {
        self.counters
    }

    /// One turn of the event loop: takes the session's upstream `events`,
    /// reads what the queues have room for, and echoes lines into `s` if
    /// the input is between lines (`at_line_start`) and the stream is
    /// still open (`!ended`). Lines for the output wait in
    /// [`UpstreamRelay::pop_output`].
    pub fn pump(
        &mut self,
        s: &mut SessionSender,
        events: Vec<RelayEvent>,
        at_line_start: bool,
        ended: bool,
    ) {
        for e in events {
            match e {
                RelayEvent::Readable(id, addr) => {
                    self.ready.insert(id, addr);
                }
                RelayEvent::Left(id) => {
                    self.ready.remove(&id);
                    self.end_line(id);
                }
            }
        }
        let mut chunk = [0u8; 4096];
        while self.queued < MAX_QUEUED_BYTES {
            let Some((&id, &addr)) = self.ready.iter().next() else {
                break;
            };
            let n = s.read_upstream(id, &mut chunk);
            if n == 0 {
                self.ready.remove(&id);
                if s.upstream_finished(id) {
                    self.end_line(id);
                }
                continue;
            }
            self.counters.bytes += n as u64;
            for &b in &chunk[..n] {
                let line = self
                    .partial
                    .entry(id)
                    .or_insert_with(|| format!("[{addr}] ").into_bytes());
                line.push(b);
                if b == b'\n' || line.len() >= MAX_LINE_BYTES {
                    self.end_line(id);
                }
            }
        }
        if self.echo && at_line_start {
            while let Some(line) = self.to_echo.front() {
                if ended {
                    self.counters.not_echoed += self.to_echo.len() as u64;
                    self.queued -= self.to_echo.iter().map(Vec::len).sum::<usize>();
                    self.to_echo.clear();
                    break;
                }
                if !s.write_message(line) {
                    break;
                }
                self.queued -= line.len();
                self.counters.echoed += 1;
                self.to_echo.pop_front();
            }
        }
    }

    /// The next line for the output, if any (the caller writes it out when
    /// its output has room; until then lines count against the bound).
    pub fn pop_output(&mut self) -> Option<Vec<u8>> {
        let line = self.to_file.pop_front()?;
        self.queued -= line.len();
        Some(line)
    }

    /// Completes member `id`'s line (adding the newline it lacks) and
    /// queues it.
    fn end_line(&mut self, id: MemberId) {
        let Some(mut line) = self.partial.remove(&id) else {
            return;
        };
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        self.counters.lines += 1;
        if self.echo {
            self.queued += line.len();
            self.to_echo.push_back(line.clone());
        }
        if self.output {
            self.queued += line.len();
            self.to_file.push_back(line);
        }
    }

    /// At the end of the session: completes every partial line; the
    /// output's lines then wait in [`UpstreamRelay::pop_output`].
    pub fn finish(&mut self) {
        let ids: Vec<MemberId> = self.partial.keys().copied().collect();
        for id in ids {
            self.end_line(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fanout_core::{Engine, Instant};
    use fanout_transport::session::{SessionConfig, SessionEvent};
    use fanout_transport::wire::{
        ConnectFrame, Frame, Header, HeaderFlags, UpstreamFrame, WireTimestamp,
    };

    fn datagram(session_id: u64, frame: Frame<'_>) -> Vec<u8> {
        let mut d = Vec::new();
        Header {
            flags: HeaderFlags::default(),
            session_id,
            packet_number: 1,
        }
        .encode(&mut d);
        frame.encode(&mut d);
        d
    }

    fn events(s: &mut SessionSender) -> Vec<RelayEvent> {
        std::iter::from_fn(|| s.poll_event())
            .filter_map(|e| match e {
                SessionEvent::Upstream { id, addr } => Some(RelayEvent::Readable(id, addr)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn lines_are_prefixed_cut_completed_and_wait_for_a_line_start() {
        let now = Instant::ZERO;
        let mut s = SessionSender::new(SessionConfig::default(), 9, now);
        let member: SocketAddr = "10.0.0.2:7000".parse().unwrap();
        let connect = ConnectFrame {
            max_payload: 1200,
            window: 1 << 20,
            timestamp: WireTimestamp(0),
            resume_from: 0,
        };
        s.handle_datagram(now, member, &datagram(0, Frame::Connect(connect)));
        // "abc\n", a 5000-byte line, and the end of the upstream stream.
        let mut up = b"abc\n".to_vec();
        up.extend(std::iter::repeat_n(b'x', 5000));
        for (k, piece) in up.chunks(1000).enumerate() {
            let f = Frame::Upstream(UpstreamFrame {
                offset: (k * 1000) as u64,
                timestamp: WireTimestamp(0),
                fin: (k + 1) * 1000 >= up.len(),
                payload: piece,
            });
            let token = s.member_token(MemberId(1)).unwrap();
            s.handle_datagram(now, member, &datagram(token, f));
        }
        let mut relay = UpstreamRelay::new(true, true);
        let free = s.writable();
        // Mid-line in the sender's own input: nothing is echoed yet.
        let news = events(&mut s);
        relay.pump(&mut s, news, false, false);
        assert_eq!(relay.counters().bytes, up.len() as u64);
        assert_eq!(relay.counters().lines, 3, "abc, a cut piece, the rest");
        assert_eq!(relay.counters().echoed, 0);
        assert_eq!(s.writable(), free);
        relay.pump(&mut s, Vec::new(), true, false);
        assert_eq!(relay.counters().echoed, 3);
        let prefix = "[10.0.0.2:7000] ".len();
        // Each line carries the prefix; the cut piece and the last one
        // gained a newline.
        let cut = MAX_LINE_BYTES - prefix;
        let echoed = (prefix + 4) + (MAX_LINE_BYTES + 1) + (prefix + 5000 - cut + 1);
        assert_eq!(free - s.writable(), echoed);
        assert!(s.upstream_finished(s.members().next().unwrap().0));
        // The same lines wait for the output, in order.
        let out: Vec<Vec<u8>> = std::iter::from_fn(|| relay.pop_output()).collect();
        assert_eq!(out.len(), 3);
        assert_eq!(out[0], b"[10.0.0.2:7000] abc\n");
        assert_eq!(out.iter().map(Vec::len).sum::<usize>(), echoed);
    }
}
