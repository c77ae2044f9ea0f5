//! The optional event trace: one text line per network event, folded into a
//! running FNV-1a 64 hash so determinism checks need not keep the text.

use std::fmt::{self, Write as _};

/// How much of the trace to produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceLevel {
    /// No trace (fastest).
    #[default]
    Off,
    /// Format every line and hash it, keep nothing.
    Hash,
    /// Hash and keep every line in memory.
    Full,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64-bit (Fowler, Noll, Vo).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv1a64(u64);

impl Default for Fnv1a64 {
    fn default() -> Self {
        Fnv1a64(FNV_OFFSET)
    }
}

impl Fnv1a64 {
    /// Folds `bytes` into the hash.
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        }
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// Trace lines and their running hash.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    level: TraceLevel,
    hash: Fnv1a64,
    line: String,
    text: String,
    lines: u64,
}

impl Trace {
    /// An empty trace at `level`.
    pub fn new(level: TraceLevel) -> Self {
        Trace {
            level,
            ..Trace::default()
        }
    }

    /// True unless the level is [`TraceLevel::Off`].
    #[inline]
    pub fn enabled(&self) -> bool {
        self.level != TraceLevel::Off
    }

    /// Appends one line (without its newline).
    pub fn record(&mut self, args: fmt::Arguments<'_>) {
        if !self.enabled() {
            return;
        }
        self.line.clear();
        let _ = self.line.write_fmt(args);
        self.line.push('\n');
        self.hash.write(self.line.as_bytes());
        self.lines += 1;
        if self.level == TraceLevel::Full {
            self.text.push_str(&self.line);
        }
    }

    /// FNV-1a 64 of every line recorded so far, newlines included.
    pub fn hash(&self) -> u64 {
        self.hash.finish()
    }

    /// [`Trace::hash`] if tracing is on; `None` at [`TraceLevel::Off`],
    /// where the hash is that of an empty trace and proves nothing.
    pub fn recorded_hash(&self) -> Option<u64> {
        self.enabled().then(|| self.hash())
    }

    /// Number of lines recorded.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// The kept text ([`TraceLevel::Full`] only; empty otherwise).
    pub fn text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_reference_values() {
        // Published FNV-1a 64 test vectors.
        let h = |s: &str| {
            let mut f = Fnv1a64::default();
            f.write(s.as_bytes());
            f.finish()
        };
        assert_eq!(h(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(h("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(h("foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn only_an_enabled_trace_has_a_hash() {
        let mut off = Trace::new(TraceLevel::Off);
        off.record(format_args!("1 tx"));
        assert_eq!((off.recorded_hash(), off.lines()), (None, 0));
        let mut on = Trace::new(TraceLevel::Hash);
        assert_eq!(on.recorded_hash(), Some(FNV_OFFSET), "traced, nothing yet");
        on.record(format_args!("1 tx"));
        assert_eq!(on.lines(), 1);
        assert_ne!(on.recorded_hash(), Some(FNV_OFFSET));
        assert_eq!(on.recorded_hash(), Some(on.hash()));
    }
}
