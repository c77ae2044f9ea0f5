//! Address validation (RFC 9000 §8.1, in spirit). A datagram's source
//! address can be forged, so until a peer proves that it receives at the
//! address it claims — by sending back the unpredictable token it was
//! given there (`docs/wire.md` §4.10) — an engine sends that address at
//! most [`AMPLIFICATION_LIMIT`] times the bytes that arrived from it. A
//! forged join then cannot turn the engine into an amplifier aimed at
//! somebody else.

/// Bytes an engine may send an unvalidated address per byte received from
/// it (RFC 9000 §8.1).
pub const AMPLIFICATION_LIMIT: u64 = 3;

/// How long a peer has, from its ACCEPT, to validate its address before
/// it is dropped, by default. An honest peer answers the ACCEPT at once
/// (one PADDING under its token), so this covers round trips and a few
/// losses.
pub const DEFAULT_VALIDATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// What one peer address was sent and sent back, until it is validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressBudget {
    validated: bool,
    /// Bytes received from the address (whole datagrams).
    received: u64,
    /// Bytes sent to it while unvalidated (whole datagrams).
    sent: u64,
}

impl AddressBudget {
    /// An address already known to be the peer's (the application named
    /// it, or it proved itself): no limit.
    pub fn validated() -> Self {
        AddressBudget {
            validated: true,
            received: 0,
            sent: 0,
        }
    }

    /// An address heard from once, with a datagram of `received` bytes.
    pub fn unvalidated(received: u64) -> Self {
        AddressBudget {
            validated: false,
            received,
            sent: 0,
        }
    }

    /// True once the address proved itself.
    pub fn is_validated(&self) -> bool {
        self.validated
    }

    /// The peer echoed its token: no limit from now on. True if it was
    /// not validated before.
    pub fn validate(&mut self) -> bool {
        !std::mem::replace(&mut self.validated, true)
    }

    /// A datagram of `bytes` arrived from the address.
    pub fn on_received(&mut self, bytes: u64) {
        self.received = self.received.saturating_add(bytes);
    }

    /// Whether a datagram of `bytes` may go to the address now; if so, it
    /// is charged.
    pub fn try_send(&mut self, bytes: u64) -> bool {
        if self.validated {
            return true;
        }
        let sent = self.sent.saturating_add(bytes);
        if sent > self.received.saturating_mul(AMPLIFICATION_LIMIT) {
            return false;
        }
        self.sent = sent;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_times_what_arrived_until_validated() {
        let mut b = AddressBudget::unvalidated(40);
        assert!(b.try_send(100));
        assert!(!b.try_send(21), "121 > 120");
        assert!(b.try_send(20));
        assert!(!b.try_send(1));
        b.on_received(10);
        assert!(b.try_send(30));
        assert!(!b.try_send(1));
        assert!(b.validate());
        assert!(!b.validate(), "once");
        assert!(b.try_send(1 << 30));
        assert!(AddressBudget::validated().try_send(u64::MAX));
    }
}
