//! `fanout lab`: emulated networks of real processes on one machine.
//!
//! A [`Topology`] (TOML) names hosts, routers, links and multicast groups.
//! [`Lab::build`] gives every host its own network namespace whose only
//! interface is a TUN device; a user-space link emulator reads the
//! datagrams the hosts' kernels send, carries them across the emulated
//! links and routers, and writes them into the destination hosts' TUN
//! devices. Each link is the simulator's own [`fanout_sim::LinkModel`]
//! (queue — DropTail or RED —, serializer, propagation delay, Bernoulli or
//! Gilbert–Elliott loss), here driven by the real clock instead of virtual
//! time: one implementation, two clocks. The emulator measures how late it
//! releases each packet and marks a run invalid when it falls behind.
//!
//! With `profile = "kernel"` ([`Profile::Kernel`], module [`kernel`]) the
//! same hosts are joined by the kernel alone — one bridge, veths, tbf
//! qdiscs, nftables random loss — as a cross-check of the emulator; what
//! the kernel cannot emulate (delay, RED, Gilbert–Elliott) is refused.
//!
//! [`run`] builds a lab, runs the topology's commands in their hosts,
//! collects exit codes and output, and tears everything down — also on
//! timeout, cancellation (Ctrl-C in the CLI) and errors. Needs root
//! (namespaces, TUN); Linux only.

pub mod bench;
mod emu;
mod error;
pub mod kernel;
mod lab;
mod probe;
mod routing;
mod run;
mod steering;
mod tcp;
pub mod topo;
mod tun_offload;

pub use emu::{
    classify, Classified, Core, CoreCounters, EmuPacket, EmuReport, Emulator, Lateness,
    LatenessSummary, LinkReport, OffloadCounters, Snapshot,
};
pub use error::LabError;
pub use kernel::KernelReport;
pub use lab::{Lab, LabHost, TUN_IF};
pub use probe::{expected_one_way, ProbeConfig, ProbeReport, IP_UDP_OVERHEAD, MAX_PROBES};
pub use routing::Routes;
pub use run::{run, CommandReport, Outcome, RunOptions, RunReport};
pub use steering::Steering;
pub use tcp::{TcpSink, TcpSource};
pub use topo::{Profile, Topology};
