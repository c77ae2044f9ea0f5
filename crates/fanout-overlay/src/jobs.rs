//! A receiver's expensive work as jobs to run off its event loop: a
//! source block's RaptorQ decode (RFC 6330 §5.4; tens to hundreds of
//! milliseconds for thousands of symbols, while a relay forwards nothing
//! if it runs inline) and the whole object's BLAKE3 check against the
//! manifest.
//!
//! A [`Job`] owns everything it needs (the block's decoder and symbols,
//! or the object's bytes and the expected hash) and is `Send`: a runtime
//! runs it on any thread ([`Job::run`]) and gives the [`JobDone`] back to
//! the receiver that handed the job out
//! ([`crate::fountain::FountainSink::on_job_done`],
//! [`crate::OverlayNode::on_job_done`]). Nothing in a job depends on when
//! or where it runs, so the engine stays sans IO: a simulator may run
//! each job the moment it is handed out.

use raptorq::{EncodingPacket, SourceBlockDecoder};

/// A piece of a receiver's work, self-contained: run it anywhere with
/// [`Job::run`] and hand the result back to the receiver it came from.
pub struct Job {
    /// The object it is of, so a result is never taken for another.
    object: u64,
    work: Work,
}

enum Work {
    /// Decode source block `sbn` from what its decoder holds plus
    /// `symbols` (each of an id the decoder has not had).
    Decode {
        sbn: u8,
        decoder: Box<SourceBlockDecoder>,
        symbols: Vec<EncodingPacket>,
    },
    /// Check that `bytes`, the whole object, hash to `hash`.
    Verify { bytes: Vec<u8>, hash: blake3::Hash },
}

/// What a job is (for logs, tests and scheduling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// A source block's RaptorQ decode.
    Decode {
        /// Its source block number.
        block: u8,
        /// Symbols given to the decoder in this job (those of earlier,
        /// failed attempts not counted).
        symbols: usize,
    },
    /// The whole object's BLAKE3 check.
    Verify {
        /// The object's length, bytes.
        bytes: u64,
    },
}

/// A job's result, for the receiver that handed the job out.
pub struct JobDone {
    pub(crate) object: u64,
    pub(crate) outcome: Outcome,
}

/// What a job came to.
pub(crate) enum Outcome {
    /// Block `sbn` decoded: its bytes, padding included.
    Decoded { sbn: u8, bytes: Vec<u8> },
    /// Block `sbn` did not decode from the symbols it had (RaptorQ
    /// sometimes needs K + 1 or K + 2): its decoder, which keeps them.
    Failed {
        sbn: u8,
        decoder: Box<SourceBlockDecoder>,
    },
    /// The object's bytes, back, and whether they hash to the manifest's.
    Verified { bytes: Vec<u8>, matches: bool },
}

impl Job {
    /// A decode of block `sbn` of object `object`.
    pub(crate) fn decode(
        object: u64,
        sbn: u8,
        decoder: Box<SourceBlockDecoder>,
        symbols: Vec<EncodingPacket>,
    ) -> Self {
        Job {
            object,
            work: Work::Decode {
                sbn,
                decoder,
                symbols,
            },
        }
    }

    /// The check of object `object`'s `bytes` against `hash`.
    pub(crate) fn verify(object: u64, bytes: Vec<u8>, hash: blake3::Hash) -> Self {
        Job {
            object,
            work: Work::Verify { bytes, hash },
        }
    }

    /// What it is.
    pub fn kind(&self) -> JobKind {
        match &self.work {
            Work::Decode { sbn, symbols, .. } => JobKind::Decode {
                block: *sbn,
                symbols: symbols.len(),
            },
            Work::Verify { bytes, .. } => JobKind::Verify {
                bytes: bytes.len() as u64,
            },
        }
    }

    /// Does the work (the expensive part: call it off the event loop).
    pub fn run(self) -> JobDone {
        let outcome = match self.work {
            Work::Decode {
                sbn,
                mut decoder,
                symbols,
            } => match decoder.decode(symbols) {
                // The decoder and its symbols are dropped here, off the
                // loop too.
                Some(bytes) => Outcome::Decoded { sbn, bytes },
                None => Outcome::Failed { sbn, decoder },
            },
            Work::Verify { bytes, hash } => {
                // blake3::Hash compares in constant time.
                let matches = blake3::hash(&bytes) == hash;
                Outcome::Verified { bytes, matches }
            }
        };
        JobDone {
            object: self.object,
            outcome,
        }
    }
}

impl JobDone {
    /// Whether it is a decode that failed for want of symbols (the block
    /// went back to collecting when handed back).
    pub fn is_failed_decode(&self) -> bool {
        matches!(self.outcome, Outcome::Failed { .. })
    }
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("object", &self.object)
            .field("kind", &self.kind())
            .finish()
    }
}

impl std::fmt::Debug for JobDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("JobDone");
        d.field("object", &self.object);
        match &self.outcome {
            Outcome::Decoded { sbn, bytes } => d.field("decoded", sbn).field("bytes", &bytes.len()),
            Outcome::Failed { sbn, .. } => d.field("failed", sbn),
            Outcome::Verified { matches, .. } => d.field("verified", matches),
        };
        d.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Jobs and their results cross threads.
    #[test]
    fn jobs_and_results_are_send() {
        fn send<T: Send + 'static>() {}
        send::<Job>();
        send::<JobDone>();
    }

    #[test]
    fn a_verify_job_compares_the_whole_objects_blake3() {
        let bytes = b"the object".to_vec();
        let job = Job::verify(4, bytes.clone(), blake3::hash(&bytes));
        assert_eq!(job.kind(), JobKind::Verify { bytes: 10 });
        let done = job.run();
        assert!(matches!(
            done.outcome,
            Outcome::Verified { matches: true, .. }
        ));
        let done = Job::verify(4, bytes, blake3::hash(b"another")).run();
        assert!(matches!(
            done.outcome,
            Outcome::Verified { matches: false, .. }
        ));
    }
}
