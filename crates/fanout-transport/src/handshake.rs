//! Handshake retries, shared by every engine that opens something: a
//! receiver's CONNECT to its sender or merger, a merger's CONNECT upward,
//! a sender's OFFER to a listener, a late joiner's catch-up request.

use std::time::Duration;

/// First retransmission of an opening datagram (then doubling): shorter
/// than the 1 s initial RTO (RFC 6298 §2.1), because the other end is often
/// simply not up yet (receivers of a session usually start before their
/// sender binds), and waiting a whole second then idles everyone.
pub const FIRST_RETRY: Duration = Duration::from_millis(200);

/// Wait before the next attempt after `attempts` attempts: [`FIRST_RETRY`]
/// (at most the initial RTO) doubling per attempt, up to 64 initial RTOs
/// (RFC 6298 §5.5-style back-off; an opening datagram is small).
pub fn retry_wait(attempts: u32, initial_rto: Duration) -> Duration {
    FIRST_RETRY
        .min(initial_rto)
        .saturating_mul(1 << attempts.min(9))
        .min(initial_rto.saturating_mul(64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_the_first_retry_up_to_the_cap() {
        let s = Duration::from_secs(1);
        let ms = Duration::from_millis;
        let waits: Vec<_> = (0..12).map(|a| retry_wait(a, s)).collect();
        assert_eq!(waits[..4], [ms(200), ms(400), ms(800), ms(1600)]);
        assert_eq!(waits[9], ms(102_400).min(64 * s));
        assert!(waits.iter().all(|w| *w <= 64 * s));
        assert_eq!(retry_wait(0, ms(50)), ms(50), "never above the initial RTO");
    }
}
