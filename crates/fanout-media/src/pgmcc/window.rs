//! PGMCC's TCP-like window with the acker (pgmcc §3.4): a window `W` and
//! tokens `T` (packets the window lets out now). Sending spends a token;
//! each packet the acker's ACKs newly cover gives one back, and one more
//! each (slow start) or `1/W` (congestion avoidance) as the window grows.
//! A hole the ACK bitmap shows [`DUPLICATE_THRESHOLD`] packets below the
//! highest ACKed halves the window and takes the halved share from the
//! tokens; further holes in packets sent before the cut are ignored (one
//! cut a round trip). A timeout restarts from one packet.
//!
//! The tokens are kept as what they always equal, `W` less the packets
//! sent after the highest ACKed: so a new acker, whose first ACK covers
//! packets the old one never ACKed, does not leave the count astray.

use super::DUPLICATE_THRESHOLD;

/// `a` is after `b` in packet numbers that wrap.
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// The window and its tokens.
#[derive(Debug, Clone)]
pub struct Window {
    /// The window, packets (at least 1).
    window: f64,
    /// The number the next packet sent carries.
    next: u32,
    /// Slow start below this window.
    ssthresh: f64,
    /// The highest packet number the acker ACKed, once one did.
    highest: Option<u32>,
    /// The number of the first packet that named the acker.
    named: u32,
    /// Packets up to this one were looked at for holes.
    examined: u32,
    /// Holes in packets before this one belong to the last cut.
    recover: u32,
    /// The window was full at the last send: only then does it grow (an
    /// application-limited stream does not inflate it; RFC 7661).
    limited: bool,
    cuts: u64,
}

impl Window {
    /// A window of `packets`, all tokens free, in slow start.
    pub fn new(packets: f64) -> Self {
        let w = packets.max(1.0);
        Window {
            window: w,
            next: 0,
            ssthresh: f64::INFINITY,
            highest: None,
            named: 0,
            examined: 0,
            recover: 0,
            limited: false,
            cuts: 0,
        }
    }

    /// Starts again from a window of `packets`, in slow start, packet
    /// numbers going on.
    pub fn restart(&mut self, packets: f64) {
        *self = Window {
            next: self.next,
            named: self.next,
            cuts: self.cuts,
            ..Window::new(packets)
        };
    }

    /// The window, packets.
    pub fn packets(&self) -> f64 {
        self.window
    }

    /// Whether it is in slow start.
    pub fn slow_start(&self) -> bool {
        self.window < self.ssthresh
    }

    /// Packets sent after the highest ACKed (before the acker's first
    /// ACK: those that named it).
    fn in_flight(&self) -> u32 {
        self.highest
            .map_or(self.next.wrapping_sub(self.named), |h| {
                self.next.wrapping_sub(h).wrapping_sub(1)
            })
    }

    /// Packets the window lets out now (below 0 after a cut).
    pub fn tokens(&self) -> f64 {
        self.window - f64::from(self.in_flight())
    }

    /// Whether a packet may go now.
    pub fn may_send(&self) -> bool {
        self.tokens() >= 1.0
    }

    /// Whether packets are waiting for ACKs.
    pub fn has_in_flight(&self) -> bool {
        self.in_flight() > 0
    }

    /// Times it was cut for a loss.
    pub fn cuts(&self) -> u64 {
        self.cuts
    }

    /// Packet `number` went (numbers go up by one).
    pub fn on_send(&mut self, number: u32) {
        self.next = number.wrapping_add(1);
        self.limited = !self.may_send();
    }

    /// A new acker, named from the next packet on: its ACKs are counted
    /// from its first, and packets still flying to the old one are let go
    /// (waiting for ACKs that will not come would stall until a timeout).
    pub fn new_acker(&mut self) {
        self.highest = None;
        self.named = self.next;
    }

    /// An ACK from the acker: `rx_max` the highest packet it has, `bitmap`
    /// bit `i` set if it has `rx_max − i`. True if it covered new packets.
    pub fn on_ack(&mut self, rx_max: u32, bitmap: u32) -> bool {
        if !after(self.next, rx_max) || self.in_flight() == 0 {
            // An ACK for a packet never sent, or nothing to ACK.
            return false;
        }
        let Some(highest) = self.highest else {
            // The first ACK from this acker.
            self.highest = Some(rx_max);
            self.examined = rx_max;
            return true;
        };
        if !after(rx_max, highest) {
            return false;
        }
        // Packets newly covered, received or lost: each left the network.
        let covered = rx_max.wrapping_sub(highest);
        if self.limited {
            for _ in 0..covered.min(4096) {
                self.window += if self.slow_start() {
                    1.0
                } else {
                    1.0 / self.window
                };
            }
        }
        self.highest = Some(rx_max);
        self.limited = !self.may_send();
        self.look_for_holes(rx_max, bitmap);
        true
    }

    /// Packets from `examined` to `rx_max −` [`DUPLICATE_THRESHOLD`] that
    /// the bitmap shows missing: the first after the last cut cuts.
    fn look_for_holes(&mut self, rx_max: u32, bitmap: u32) {
        let last = rx_max.wrapping_sub(DUPLICATE_THRESHOLD);
        if rx_max.wrapping_sub(self.examined) > 31 {
            self.examined = rx_max.wrapping_sub(31);
        }
        let mut m = self.examined.wrapping_add(1);
        while !after(m, last) {
            let i = rx_max.wrapping_sub(m);
            if bitmap & (1 << i) == 0 && !after(self.recover, m) {
                self.cut();
            }
            m = m.wrapping_add(1);
        }
        if after(last, self.examined) {
            self.examined = last;
        }
    }

    fn cut(&mut self) {
        self.window = (self.window / 2.0).max(1.0);
        self.ssthresh = self.window;
        self.recover = self.next;
        self.cuts += 1;
    }

    /// No ACK for a timeout: what was in flight is taken as gone; one
    /// packet, slow start to half the window; holes in what was sent so
    /// far are the timeout's.
    pub fn on_timeout(&mut self) {
        self.ssthresh = (self.window / 2.0).max(2.0);
        self.window = 1.0;
        self.highest = Some(self.next.wrapping_sub(1));
        self.examined = self.next.wrapping_sub(1);
        self.recover = self.next;
        self.limited = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends until the window closes; the number after the last sent.
    fn fill(w: &mut Window, mut next: u32) -> u32 {
        while w.may_send() {
            w.on_send(next);
            next = next.wrapping_add(1);
        }
        next
    }

    #[test]
    fn slow_start_doubles_a_full_window_each_round_trip() {
        let mut w = Window::new(2.0);
        let mut next = fill(&mut w, 0);
        assert_eq!(next, 2);
        assert!(w.on_ack(0, 1), "the first ACK");
        assert!(w.on_ack(1, 0b11));
        next = fill(&mut w, next);
        for n in 2..next {
            w.on_ack(n, u32::MAX);
        }
        assert!(w.slow_start());
        assert!(w.packets() >= 4.0, "{}", w.packets());
    }

    #[test]
    fn a_hole_halves_the_window_once_and_a_timeout_restarts_it() {
        let mut w = Window::new(16.0);
        let mut next = fill(&mut w, 100);
        w.on_ack(100, 1);
        // 105 and 106 lost: ACKs of 107.. show them missing.
        let mut bitmap = 1u32;
        for n in 101..116u32 {
            bitmap <<= 1;
            if n != 105 && n != 106 {
                bitmap |= 1;
                w.on_ack(n, bitmap);
            }
            next = fill(&mut w, next);
        }
        assert_eq!(w.cuts(), 1, "two holes in one flight: one cut");
        assert!(w.packets() < 16.0);
        assert!(!w.slow_start());
        w.on_timeout();
        assert_eq!(w.packets(), 1.0);
        assert!(w.may_send());
    }

    #[test]
    fn an_application_limited_stream_does_not_grow_the_window() {
        let mut w = Window::new(10.0);
        for n in 0..200u32 {
            w.on_send(n);
            w.on_ack(n, u32::MAX);
        }
        assert_eq!(w.packets(), 10.0);
        // ACKs for packets never sent are ignored.
        w.on_send(200);
        assert!(!w.on_ack(10_000, u32::MAX));
        assert_eq!(w.tokens(), 9.0);
    }

    #[test]
    fn a_new_ackers_first_ack_counts_what_is_in_flight_after_it() {
        let mut w = Window::new(10.0);
        let next = fill(&mut w, 0);
        w.on_ack(0, 1);
        w.new_acker();
        assert!(w.may_send(), "the old acker's flight is let go");
        let next = fill(&mut w, next);
        assert_eq!(next, 20);
        // The new acker's first ACK is for packet 17: 18 and 19 still fly.
        assert!(w.on_ack(17, 1));
        assert_eq!(w.tokens(), 8.0);
    }
}
