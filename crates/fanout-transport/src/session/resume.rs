//! Members re-attaching from a crashed merger (`docs/mctcp.md`, "Crashed
//! mergers"): a CONNECT whose `start_offset` P is not 0 says "I already hold
//! `[0, P)`, continue from P" (`docs/wire.md` §3.2, resume CONNECT). The sender
//! admits it at P when it still holds every byte from P on — which it does
//! while the dead merger's member, whose cumulative point is at most P, is not
//! yet evicted (release policy "slowest") — and refuses it otherwise, so a gap
//! is never silently skipped.

/// The start offset of a member resuming at `position`, given the lowest
/// offset the send buffer still holds (`base`) and the send position
/// (`snd_nxt`); `Err(reason)` for the RESET when it cannot be served.
pub fn resume_start(position: u64, base: u64, snd_nxt: u64) -> Result<u64, &'static str> {
    if position > snd_nxt {
        Err("resume point beyond the data sent")
    } else if position < base {
        Err("resume point already released")
    } else {
        Ok(position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resumes_only_inside_the_send_buffer() {
        assert_eq!(resume_start(500, 100, 900), Ok(500));
        assert_eq!(resume_start(100, 100, 900), Ok(100));
        assert_eq!(resume_start(900, 100, 900), Ok(900));
        assert!(resume_start(99, 100, 900).is_err(), "released");
        assert!(resume_start(901, 100, 900).is_err(), "never sent");
    }
}
