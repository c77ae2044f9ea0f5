//! fanout's real runtime, the only crate that touches the OS: the clock
//! ([`Clock`]), UDP sockets with multicast controls ([`UdpEndpoint`]), the
//! event loop ([`Driver`]) that pumps any [`fanout_core::Engine`] with the
//! same [`fanout_core::drain`] as the simulator, and user-space loss/delay
//! injection ([`impair`]) for tests on hosts without netem; and [`api`],
//! the blocking socket-like library API over the session engines
//! (`SessionListener` / `Subscriber`), for applications; and
//! [`OutputFile`], where a received file lands (never over an existing
//! file unless asked, never through a planted link).
//!
//! ```no_run
//! # fn demo<E: fanout_core::Engine>(engine: &mut E, done: impl Fn(&E) -> bool) -> Result<(), fanout_io::IoError> {
//! use fanout_io::{Clock, Driver, DriverConfig, UdpEndpoint};
//! let endpoint = UdpEndpoint::bind("0.0.0.0:9000".parse().unwrap())?;
//! let mut driver = Driver::new(endpoint, Clock::new(), DriverConfig::default())?;
//! let stats = driver.run(engine, |e, _now| done(e))?;
//! println!("sent {} datagrams", stats.datagrams_sent);
//! # Ok(()) }
//! ```

pub mod api;
mod clock;
mod driver;
mod entropy;
mod error;
pub mod impair;
mod outbox;
mod output_file;
mod output_tree;
pub mod overlay;
mod poller;
mod socket;
mod socket_tuning;
mod source_tree;
#[cfg(target_os = "linux")]
mod ssm_v6;
mod stats;

pub use clock::{unix_time, Clock};
pub use driver::{run, Driver, DriverConfig, DEFAULT_TIMER_SLACK};
pub use entropy::{random_seed, random_token_key};
pub use error::IoError;
pub use impair::{ImpairConfig, ImpairStats, Impairment};
pub use output_file::{target_paths, Existing, OutputFile};
pub use output_tree::{files_label, OutputTree};
pub use poller::Waker;
pub use socket::{is_message_too_long, EndpointConfig, UdpEndpoint, DEFAULT_BUFFER_BYTES};
pub use socket_tuning::{parse_dscp, set_socket_buffers, BufferGrant};
pub use source_tree::{SourceTree, TreeReader};
pub use stats::RunStats;
