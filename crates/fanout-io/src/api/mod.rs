//! A blocking, std-only library API over the session engines, in the socket
//! model of TCP-SMO §III: the sender is an ordinary listen/accept with one
//! option naming the group and the policies ([`SessionListener::bind`] +
//! [`SessionOptions`]); a receiver subscribes, connects and reads
//! ([`Subscriber::subscribe`], [`Subscriber::connect`], [`Connection`] as
//! [`std::io::Read`]). A receiver may also send bytes back on its connection
//! ([`Connection::upstream`]), which the sender's application receives with
//! [`SessionListener::recv_upstream`] (session relay, TCP-SMO §IV.B).
//! Files travel in fanout's file protocol, interoperable with the CLI:
//! [`SessionListener::send_file`], [`Connection::receive_file`] (they run
//! `fanout_app`'s file feed and intake).
//!
//! # Design
//!
//! Each handle owns one UDP socket and one background *driver thread*
//! running the ordinary [`crate::Driver::step`] loop over the engine
//! ([`fanout_transport::session::SessionSender`] or
//! [`fanout_transport::Receiver`]), which lives behind a mutex locked per
//! engine call. Blocking calls wait on a condition variable the driver
//! thread signals after every step; calls that hand the engine new work
//! wake the driver's poll. Dropping a handle stops and joins its thread.
//!
//! Why a thread rather than driving the engine inline inside the blocking
//! calls: the transport must keep acknowledging, retransmitting and
//! answering joins while the application is busy between calls (reading
//! a file, writing to disk). Inline, a receiver that pauses for longer
//! than the sender's stall timeout would be evicted, and a sender that
//! pauses would stall every receiver's repairs; with a thread the handles
//! behave like kernel sockets. The cost is one thread per handle and a
//! mutex acquisition per engine call (uncontended, tens of nanoseconds
//! against microseconds of per-datagram work).
//!
//! # Example
//!
//! One sender and two receivers in one process over loopback, by unicast
//! fan-out (no multicast route needed); with a group, pass
//! `Some("239.1.1.1:7000".parse()?)` to both sides instead of `None`.
//!
//! ```
//! use fanout_io::api::{SessionListener, SessionOptions, Subscriber};
//! use std::io::{Read, Write};
//! use std::time::Duration;
//!
//! # fn main() -> std::io::Result<()> {
//! let options = SessionOptions::group(None).wait_for(2);
//! let mut session = SessionListener::bind("127.0.0.1:0".parse().unwrap(), options)?;
//! let sender = session.local_addr();
//!
//! let receivers: Vec<_> = (0..2)
//!     .map(|_| {
//!         std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
//!             let sub = Subscriber::subscribe(None, "127.0.0.1:0".parse().unwrap())?;
//!             let mut conn = sub.connect(sender)?;
//!             let mut got = Vec::new();
//!             conn.read_to_end(&mut got)?; // EOF once the whole stream arrived
//!             Ok(got)
//!         })
//!     })
//!     .collect();
//!
//! let first = session.accept()?; // blocks until a receiver joins
//! assert_eq!(first.start, 0);
//! session.wait_for_members(2, Duration::from_secs(5))?;
//! let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
//! session.write_all(&data)?;
//! let summary = session.finish()?; // every receiver acknowledged everything
//! assert_eq!(summary.completed(), 2);
//!
//! for r in receivers {
//!     assert!(r.join().unwrap()? == data);
//! }
//! # Ok(()) }
//! ```

mod errors;
mod files;
mod listener;
mod options;
mod roster;
mod runner;
mod subscriber;
mod upstream;

pub use files::ReceivedFile;
pub use listener::{SessionListener, SessionSummary};
pub use options::{SessionOptions, SubscribeOptions};
pub use roster::{MemberInfo, MemberOutcome, Outcome};
pub use subscriber::{Connection, Subscriber};
pub use upstream::{UpstreamData, UpstreamWriter};
