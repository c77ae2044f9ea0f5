//! A node's decoding jobs ([`fanout_overlay::jobs`]: a block's RaptorQ
//! decode, the object's BLAKE3 check) on threads beside the event loop,
//! so the loop keeps relaying to the children meanwhile and a node's
//! blocks decode on all its cores. At most as many run at once as the
//! machine has cores ([`std::thread::available_parallelism`]); the rest
//! wait their turn in the order the host handed them out. A job that
//! finishes wakes the loop through a [`mio::Waker`].

use super::{OverlayError, OverlayHost};
use fanout_overlay::{Job, JobDone};
use mio::{Poll, Token, Waker};
use std::collections::VecDeque;
use std::io;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long [`Workers::finish`] waits for a result before it checks that
/// no worker died.
const FINISH_POLL: Duration = Duration::from_millis(50);

/// The jobs a host handed out, queued or running.
pub(super) struct Workers {
    /// Jobs running at once, at most.
    limit: usize,
    /// Jobs waiting for a thread, oldest first.
    queued: VecDeque<Job>,
    /// Jobs started whose results have not been handed back.
    running: usize,
    /// The threads started, until they are seen to have ended.
    threads: Vec<JoinHandle<()>>,
    results: Receiver<JobDone>,
    sender: Sender<JobDone>,
    waker: Arc<Waker>,
}

impl Workers {
    /// Workers that wake `poll` with `token` when a job finishes.
    pub(super) fn new(poll: &Poll, token: Token) -> io::Result<Self> {
        let (sender, results) = mpsc::channel();
        Ok(Workers {
            limit: std::thread::available_parallelism().map_or(1, |n| n.get()),
            queued: VecDeque::new(),
            running: 0,
            threads: Vec::new(),
            results,
            sender,
            waker: Arc::new(Waker::new(poll.registry(), token)?),
        })
    }

    /// Whether jobs are queued or running.
    pub(super) fn busy(&self) -> bool {
        self.running > 0 || !self.queued.is_empty()
    }

    /// Takes the jobs `host` has to hand out and starts as many as may
    /// run.
    pub(super) fn take<H: OverlayHost>(&mut self, host: &mut H) -> io::Result<()> {
        while let Some(job) = host.take_job() {
            self.queued.push_back(job);
        }
        while self.running < self.limit {
            let Some(job) = self.queued.pop_front() else {
                break;
            };
            let (sender, waker) = (self.sender.clone(), Arc::clone(&self.waker));
            let handle = std::thread::Builder::new()
                .name("fanout-decode".into())
                .spawn(move || {
                    let kind = job.kind();
                    let clock = crate::Clock::new();
                    let done = job.run();
                    tracing::debug!(
                        "overlay job {kind:?}: {:.1} ms{}",
                        clock.now().as_secs_f64() * 1e3,
                        if done.is_failed_decode() {
                            " (too few symbols yet)"
                        } else {
                            ""
                        }
                    );
                    // The loop may have ended (its host done or failed):
                    // nobody then wants the result.
                    if sender.send(done).is_ok() {
                        let _ = waker.wake();
                    }
                })?;
            self.threads.push(handle);
            self.running += 1;
        }
        Ok(())
    }

    /// Hands the results of finished jobs back to `host` and starts jobs
    /// waiting for a thread: whether any result came. An error when the
    /// host refuses the object (its hash is not the manifest's) or a
    /// worker died.
    pub(super) fn deliver<H: OverlayHost>(&mut self, host: &mut H) -> Result<bool, OverlayError> {
        let mut any = false;
        while let Ok(done) = self.results.try_recv() {
            self.running -= 1;
            any = true;
            host.on_job_done(done)?;
        }
        self.reap()?;
        if any {
            self.take(host)?;
        }
        Ok(any)
    }

    /// Runs every job to its end, waiting (and those that results bring,
    /// such as the check after the last decode), handing results back:
    /// for when the loop cannot go on without them.
    pub(super) fn finish<H: OverlayHost>(&mut self, host: &mut H) -> Result<(), OverlayError> {
        self.take(host)?;
        while self.busy() {
            match self.results.recv_timeout(FINISH_POLL) {
                Ok(done) => {
                    self.running -= 1;
                    host.on_job_done(done)?;
                    self.take(host)?;
                }
                Err(_) => self.reap()?,
            }
        }
        Ok(())
    }

    /// Forgets threads that ended; an error if one ended without handing
    /// its result over (it panicked).
    fn reap(&mut self) -> Result<(), OverlayError> {
        let mut i = 0;
        while i < self.threads.len() {
            if !self.threads[i].is_finished() {
                i += 1;
                continue;
            }
            if self.threads.swap_remove(i).join().is_err() {
                return Err(OverlayError::Job);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fanout_overlay::fountain::{FountainSource, Layout};
    use fanout_overlay::hop::Manifest;
    use fanout_overlay::{OverlayNode, SymbolKey};
    use mio::Events;

    /// A node in job mode given a lossy stream in memory: its decodes and
    /// its check run on the workers, each result wakes the poll, and the
    /// object comes out whole and checked.
    #[test]
    fn jobs_run_beside_the_loop_and_their_results_wake_it() {
        let data: Vec<u8> = (0..3_000_000).map(|i| (i * 7 + i / 101) as u8).collect();
        let key = SymbolKey::derive(&[1; 32]);
        let layout = Layout::new(data.len() as u64, 8192, 1 << 20).unwrap();
        let m = Manifest {
            object: 3,
            layout,
            block_bytes: 1 << 20,
            hash: blake3::hash(&data),
            name: "x".into(),
        };
        let mut node = OverlayNode::new(key.clone(), 1 << 20).with_jobs();
        node.on_upstream(&m.seal(&key)).unwrap();
        let mut source = FountainSource::new(data.clone(), layout, 3, key);
        let mut poll = Poll::new().unwrap();
        let mut workers = Workers::new(&poll, Token(9)).unwrap();
        let mut sent = 0u32;
        while node.jobs_out() < 3 {
            let frame = source.next_frame();
            sent += 1;
            if !sent.is_multiple_of(7) {
                node.on_upstream(&frame).unwrap();
            }
            assert!(sent < 2000);
        }
        workers.take(&mut node).unwrap();
        assert!(workers.running <= workers.limit);
        assert_eq!(workers.running + workers.queued.len(), 3);
        let mut events = Events::with_capacity(4);
        let mut wakes = 0;
        while node.object().is_none() {
            poll.poll(&mut events, Some(Duration::from_secs(10)))
                .unwrap();
            assert!(!events.is_empty(), "a result wakes the loop");
            wakes += 1;
            workers.deliver(&mut node).unwrap();
            assert!(wakes < 100);
        }
        assert_eq!(node.object(), Some(&data[..]));
        assert!(!workers.busy());
        assert_eq!(node.jobs_out(), 0);
    }
}
