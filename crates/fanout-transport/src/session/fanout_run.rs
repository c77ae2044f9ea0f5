//! Unicast fan-out without a multicast group: every new segment goes to every
//! member by unicast. The sender takes a run of up to [`FANOUT_RUN_SEGMENTS`]
//! consecutive segments and emits the copies member by member, so each member's
//! copies are consecutive datagrams of equal size to one destination — which
//! the runtime packs into one UDP GSO send — instead of alternating
//! destinations datagram by datagram.

use std::net::SocketAddr;
use std::ops::Range;

/// Most segments in one fan-out run (a run to one member then fits one GSO
/// send: 16 × 1452 bytes < 64 KB).
pub const FANOUT_RUN_SEGMENTS: usize = 16;

/// The copies of one run still to send, in member-major order.
#[derive(Debug, Default)]
pub struct FanoutRun {
    ranges: Vec<Range<u64>>,
    addrs: Vec<SocketAddr>,
    /// Next copy: `addrs[next / ranges.len()]`, `ranges[next % ranges.len()]`.
    next: usize,
}

impl FanoutRun {
    /// Starts a run of `ranges` to each of `addrs` (dropping what was left
    /// of the previous run).
    pub fn start(&mut self, ranges: Vec<Range<u64>>, addrs: Vec<SocketAddr>) {
        self.ranges = ranges;
        self.addrs = addrs;
        self.next = 0;
    }

    /// The next copy to send: a segment and the member it goes to.
    pub fn next_copy(&mut self) -> Option<(Range<u64>, SocketAddr)> {
        let per_member = self.ranges.len();
        if per_member == 0 || self.next >= per_member * self.addrs.len() {
            return None;
        }
        let copy = (
            self.ranges[self.next % per_member].clone(),
            self.addrs[self.next / per_member],
        );
        self.next += 1;
        Some(copy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_go_member_by_member_over_the_run() {
        let a: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:1".parse().unwrap();
        let mut run = FanoutRun::default();
        assert_eq!(run.next_copy(), None);
        run.start(vec![0..10, 10..20, 20..25], vec![a, b]);
        let got: Vec<_> = std::iter::from_fn(|| run.next_copy()).collect();
        assert_eq!(
            got,
            [
                (0..10, a),
                (10..20, a),
                (20..25, a),
                (0..10, b),
                (10..20, b),
                (20..25, b)
            ]
        );
        run.start(vec![25..30, 30..35], Vec::new());
        assert_eq!(run.next_copy(), None, "no members, no copies");
    }
}
