//! Decoding fuzz bytes into a script: a configuration byte, then steps
//! `ctl:u8 len:u8 body[len]` (`len:u16` for [`wide_steps`]). `ctl & 0x0f` is the step's kind, `ctl >> 4`
//! advances the clock before it (15 = 1.5 s; otherwise `tick²` ms, 0 to
//! 196 ms). Each kind reads its fields from `body` through a [`Cursor`],
//! which yields zeros once the body runs out, so every byte string is a
//! valid script.

use std::time::Duration;

/// One step of a script.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// What the step does (0–15; its meaning is the driver's).
    pub kind: u8,
    /// Clock advance before the step.
    pub advance: Duration,
    /// The step's fields.
    pub body: &'a [u8],
}

/// The steps of `data` (the configuration byte already taken off).
pub fn steps(data: &[u8]) -> impl Iterator<Item = Step<'_>> {
    steps_with(data, 1)
}

/// [`steps`] with a two-byte (little-endian) `len`, for bodies that carry
/// whole datagrams (up to 64 KiB).
pub fn wide_steps(data: &[u8]) -> impl Iterator<Item = Step<'_>> {
    steps_with(data, 2)
}

fn steps_with(mut data: &[u8], len_bytes: usize) -> impl Iterator<Item = Step<'_>> {
    std::iter::from_fn(move || {
        let (&ctl, rest) = data.split_first()?;
        let mut len = Cursor::new(rest);
        let len = (0..len_bytes).fold(0, |v, i| v | usize::from(len.u8()) << (8 * i));
        let rest = &rest[len_bytes.min(rest.len())..];
        let len = len.min(rest.len());
        let (body, rest) = rest.split_at(len);
        data = rest;
        let tick = u64::from(ctl >> 4);
        Some(Step {
            kind: ctl & 0x0f,
            advance: if tick == 15 {
                Duration::from_millis(1500)
            } else {
                Duration::from_millis(tick * tick)
            },
            body,
        })
    })
}

/// Reads fields off a step's body; zeros once it is exhausted.
#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    /// A cursor over `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes }
    }

    /// The next byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((&b, rest)) => {
                self.bytes = rest;
                b
            }
            None => 0,
        }
    }

    /// The next `n ≤ 8` bytes, little-endian.
    fn le(&mut self, n: usize) -> u64 {
        (0..n).fold(0, |v, i| v | u64::from(self.u8()) << (8 * i))
    }

    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        self.le(2) as u16
    }

    /// The next four bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        self.le(4) as u32
    }

    /// The next eight bytes, little-endian.
    pub fn u64(&mut self) -> u64 {
        self.le(8)
    }

    /// A number below `n` (0 if `n` is 0) from the next byte.
    pub fn below(&mut self, n: u64) -> u64 {
        u64::from(self.u8()) % n.max(1)
    }

    /// True with odds 1 in `n` (the next byte is a multiple of `n`).
    pub fn one_in(&mut self, n: u8) -> bool {
        self.u8().is_multiple_of(n.max(1))
    }

    /// What is left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.bytes)
    }
}
