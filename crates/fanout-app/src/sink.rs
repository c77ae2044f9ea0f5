//! What a stream producer writes into: a session sender (of one member or
//! many), or a member's upstream stream.

use fanout_transport::session::SessionSender;
use fanout_transport::Receiver;

/// A stream that takes bytes and messages without blocking.
pub trait StreamSink {
    /// Queues one whole message, or nothing (false) if it does not fit now.
    fn write_message(&mut self, msg: &[u8]) -> bool;
    /// Queues what fits of `data`; returns the count.
    fn write(&mut self, data: &[u8]) -> usize;
    /// Bytes `write` would take now.
    fn writable(&self) -> usize;
    /// Ends the stream.
    fn finish(&mut self);
    /// Aborts, telling the peer(s) why.
    fn abort(&mut self, reason: &str);
    /// The bytes `write` gets next were read from the application's input
    /// at `at`: a real-time sink counts their messages' deadlines from
    /// then, not from when the event loop got to them. Others ignore it.
    fn input_read_at(&mut self, _at: fanout_core::time::Instant) {}
}

impl StreamSink for SessionSender {
    fn write_message(&mut self, msg: &[u8]) -> bool {
        SessionSender::write_message(self, msg)
    }
    fn write(&mut self, data: &[u8]) -> usize {
        SessionSender::write(self, data)
    }
    fn writable(&self) -> usize {
        SessionSender::writable(self)
    }
    fn finish(&mut self) {
        SessionSender::finish(self)
    }
    fn abort(&mut self, reason: &str) {
        SessionSender::abort(self, reason)
    }
}

/// A member's receiver as the sink of its upstream stream (session relay,
/// TCP-SMO §IV.B: what the member sends back to the source).
pub struct UpstreamSink<'a>(pub &'a mut Receiver);

impl StreamSink for UpstreamSink<'_> {
    fn write_message(&mut self, msg: &[u8]) -> bool {
        msg.len() <= self.0.upstream_writable() && self.0.write_upstream(msg) == msg.len()
    }
    fn write(&mut self, data: &[u8]) -> usize {
        self.0.write_upstream(data)
    }
    fn writable(&self) -> usize {
        self.0.upstream_writable()
    }
    fn finish(&mut self) {
        self.0.finish_upstream();
    }
    /// The input failed: end the upstream stream there (the session
    /// itself goes on).
    fn abort(&mut self, _reason: &str) {
        self.0.finish_upstream();
    }
}
