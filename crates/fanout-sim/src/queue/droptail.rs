//! DropTail: accept while under the limit, drop arrivals beyond it.

/// A queue's capacity, in packets or in wire bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueLimit {
    /// At most this many waiting packets.
    Packets(u32),
    /// At most this many waiting wire bytes (`"64KB"` or an integer).
    Bytes(crate::units::Bytes),
}

impl QueueLimit {
    /// True if adding a `size`-byte packet to a queue holding `packets`
    /// packets and `bytes` bytes would exceed the limit.
    pub fn would_overflow(self, packets: usize, bytes: u64, size: u64) -> bool {
        match self {
            QueueLimit::Packets(n) => packets >= n as usize,
            QueueLimit::Bytes(b) => bytes + size > b.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Bytes;

    #[test]
    fn limits() {
        let p = QueueLimit::Packets(2);
        assert!(!p.would_overflow(1, 3000, 1500));
        assert!(p.would_overflow(2, 3000, 1500));
        let b = QueueLimit::Bytes(Bytes(3000));
        assert!(!b.would_overflow(1, 1500, 1500));
        assert!(b.would_overflow(2, 3000, 1));
    }
}
