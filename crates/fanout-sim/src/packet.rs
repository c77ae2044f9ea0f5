//! A datagram in flight through the simulated network.
//!
//! A [`Packet`] is a shared, immutable [`Datagram`] plus the one field that
//! changes per hop (the hop limit). Multicast copies share the datagram, so
//! duplication at a branch point copies 16 bytes, and a packet waiting in a
//! queue or propagating on a link costs 16 bytes of simulator memory — which
//! matters when 10⁵ packets are in flight at once.

use crate::ids::{GroupId, NodeId};
use std::net::SocketAddr;
use std::ops::Deref;
use std::rc::Rc;

/// Where a packet is headed, resolved once when it is emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// A unicast destination host.
    Unicast(NodeId),
    /// A multicast group.
    Group(GroupId),
}

/// The immutable part of a datagram, shared by all its copies.
#[derive(Debug)]
pub struct Datagram {
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
}

/// One copy of a datagram on its way through the network. Dereferences to
/// the shared [`Datagram`]; cloning it (a multicast copy) copies no bytes.
#[derive(Debug, Clone)]
pub struct Packet {
    /// The shared datagram.
    pub datagram: Rc<Datagram>,
    /// Remaining hop limit; a packet arriving with 0 is dropped.
    pub ttl: u8,
}

impl Deref for Packet {
    type Target = Datagram;
    fn deref(&self) -> &Datagram {
        &self.datagram
    }
}
