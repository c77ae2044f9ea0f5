//! A datagram in flight through the simulated network.

use crate::ids::{GroupId, NodeId};
use std::net::SocketAddr;
use std::rc::Rc;

/// Where a packet is headed, resolved once when it is emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// A unicast destination host.
    Unicast(NodeId),
    /// A multicast group.
    Group(GroupId),
}

/// One datagram. Multicast copies share the payload (`Rc<[u8]>`), so
/// duplication at a branch point costs no byte copy.
#[derive(Debug, Clone)]
pub struct Packet {
    /// Unique id, for traces (copies of a multicast packet share it).
    pub uid: u64,
    /// Sending engine's address.
    pub src: SocketAddr,
    /// Destination address (a unicast peer or `group:port`).
    pub dst: SocketAddr,
    /// Node of the sending engine (selects the multicast tree).
    pub src_node: NodeId,
    /// Resolved destination.
    pub dest: Dest,
    /// UDP payload as handed to `Engine::handle_datagram`.
    pub payload: Rc<[u8]>,
    /// Bytes on the wire: payload plus IP/UDP header overhead.
    pub wire_bytes: u32,
    /// Remaining hop limit; a packet arriving with 0 is dropped.
    pub ttl: u8,
}
