//! The replay window of one peer's packet-number space (RFC 4303 §3.4.3
//! in spirit): a datagram opened once is not accepted again, nor one older
//! than the window.

use fanout_core::codec::expand_pn;

/// Packet numbers remembered below the largest accepted one. Datagrams of
/// one space can arrive by two paths (multicast and unicast from the same
/// sender) and be reordered by a few hundred; older ones are refused (the
/// transport repairs what they carried).
pub const REPLAY_WINDOW: u64 = 1024;
const WORDS: usize = (REPLAY_WINDOW / 64) as usize;

/// Why a packet number was refused before its datagram was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// Already accepted once.
    Duplicate,
    /// Below the window.
    TooOld,
}

/// Accepted packet numbers of one space: the largest, and a bitmap of the
/// [`REPLAY_WINDOW`] below it.
#[derive(Debug, Clone, Default)]
pub struct ReplayWindow {
    largest: Option<u64>,
    /// Bit `pn % REPLAY_WINDOW` set: `pn` in the window was accepted.
    seen: [u64; WORDS],
}

impl ReplayWindow {
    /// The full packet number of a truncated one, expanded against the
    /// largest accepted (`docs/wire.md` §2).
    pub fn expand(&self, truncated: u32) -> u64 {
        expand_pn(self.largest.map_or(0, |l| l + 1), truncated)
    }

    /// The largest packet number accepted so far.
    pub fn largest(&self) -> Option<u64> {
        self.largest
    }

    /// Whether `pn` may still be accepted (checked before opening: a
    /// replay costs no decryption).
    pub fn check(&self, pn: u64) -> Result<(), Replay> {
        let Some(largest) = self.largest else {
            return Ok(());
        };
        if pn > largest {
            return Ok(());
        }
        if largest - pn >= REPLAY_WINDOW {
            return Err(Replay::TooOld);
        }
        if self.bit(pn) {
            Err(Replay::Duplicate)
        } else {
            Ok(())
        }
    }

    /// Records `pn` as accepted (after its datagram opened).
    pub fn commit(&mut self, pn: u64) {
        match self.largest {
            Some(largest) if pn <= largest => {}
            Some(largest) => {
                // Clear the bits the window slides over.
                let slide = (pn - largest).min(REPLAY_WINDOW);
                for p in largest + 1..largest + 1 + slide {
                    self.set(p, false);
                }
                self.largest = Some(pn);
            }
            None => self.largest = Some(pn),
        }
        self.set(pn, true);
    }

    fn bit(&self, pn: u64) -> bool {
        let i = pn % REPLAY_WINDOW;
        self.seen[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, pn: u64, on: bool) {
        let i = pn % REPLAY_WINDOW;
        let word = &mut self.seen[(i / 64) as usize];
        if on {
            *word |= 1 << (i % 64);
        } else {
            *word &= !(1 << (i % 64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_duplicates_and_the_too_old_and_accepts_reordering() {
        let mut w = ReplayWindow::default();
        assert_eq!(w.check(5), Ok(()));
        w.commit(5);
        assert_eq!(w.check(5), Err(Replay::Duplicate));
        assert_eq!(w.check(3), Ok(()), "reordered, inside the window");
        w.commit(3);
        assert_eq!(w.check(3), Err(Replay::Duplicate));
        w.commit(5000);
        assert_eq!(w.check(5), Err(Replay::TooOld));
        assert_eq!(w.check(5000 - REPLAY_WINDOW), Err(Replay::TooOld));
        assert_eq!(
            w.check(5001 - REPLAY_WINDOW),
            Ok(()),
            "slid-over bits were cleared"
        );
        assert_eq!(w.check(4999), Ok(()));
        w.commit(4999);
        w.commit(5001);
        assert_eq!(w.check(4999), Err(Replay::Duplicate));
        assert_eq!(w.largest(), Some(5001));
        assert_eq!(w.expand(5002), 5002);
    }

    #[test]
    fn agrees_with_a_set_of_everything_accepted() {
        use std::collections::BTreeSet;
        let mut w = ReplayWindow::default();
        let mut all = BTreeSet::new();
        let mut x: u64 = 1;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let base = all.last().copied().unwrap_or(0);
            let pn = (base + (x >> 33) % 40).saturating_sub((x >> 13) % 1200);
            let largest = w.largest();
            let expect = match largest {
                Some(l) if pn + REPLAY_WINDOW <= l => Err(Replay::TooOld),
                _ if all.contains(&pn) => Err(Replay::Duplicate),
                _ => Ok(()),
            };
            assert_eq!(w.check(pn), expect, "pn {pn} largest {largest:?}");
            if expect.is_ok() {
                w.commit(pn);
                all.insert(pn);
            }
        }
    }
}
