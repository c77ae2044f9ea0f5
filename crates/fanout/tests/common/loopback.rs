//! Helpers of the CLI's loopback tests: children killed by PID when
//! dropped, bounded waits, free loopback ports.

#![allow(dead_code)] // each test crate uses its own subset
#![expect(
    clippy::disallowed_methods,
    reason = "real-process tests bound their waits by the wall clock"
)]

use std::net::UdpSocket;
use std::process::Child;
use std::time::{Duration, Instant};

/// Bound on any one process.
pub const LIMIT: Duration = Duration::from_secs(60);

/// A child killed (by its PID) when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// Waits (bounded by [`LIMIT`]) and returns whether it succeeded.
    pub fn wait_ok(&mut self) -> bool {
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status.success();
            }
            assert!(start.elapsed() < LIMIT, "process did not finish in time");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A loopback address with a port free right now.
pub fn free_addr() -> String {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().to_string()
}
