//! REPAIR (`docs/wire.md` §4.9): one coded repair symbol of a block of
//! stream bytes, multicast by a session sender ([`crate::fec`]).
//!
//! Layout after the type byte: `block_start:varint` `k:u8` `id:u8`
//! `last_len:varint` `length:varint` `symbol[length]`. The block is `k`
//! stripes of `length` bytes from `block_start`, the last `last_len` long.
//! Its worst-case overhead (1 + 8 + 1 + 1 + 2 + 2 = 15 bytes for symbols of
//! 128 B … 16 KiB) equals a DATA frame's, so a symbol as long as a full
//! segment fits the same datagram.

use crate::fec::{BlockGeometry, MAX_REPAIR_ID, MAX_SOURCE_SYMBOLS};
use fanout_core::codec::{DecodeError, Reader, Writer, VARINT_MAX};

/// One repair symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairFrame<'a> {
    /// The block it repairs (checked: `1 ≤ k ≤ 64`, `1 ≤ last_len ≤
    /// symbol length`, end within 2^62 − 1).
    pub block: BlockGeometry,
    /// Repair symbol id, `0 ..= 191` ([`MAX_REPAIR_ID`]).
    pub id: u8,
    /// The symbol, `block.symbol_len` bytes.
    pub symbol: &'a [u8],
}

impl<'a> RepairFrame<'a> {
    /// Decodes the fields after the type byte.
    pub(super) fn decode(r: &mut Reader<'a>) -> Result<RepairFrame<'a>, DecodeError> {
        let start = r.varint()?;
        let k = r.u8()? as usize;
        let id = r.u8()?;
        let last_len = r.varint()?;
        let len = r.varint_len("repair.len", r.remaining())?;
        if k > MAX_SOURCE_SYMBOLS || id > MAX_REPAIR_ID {
            return Err(DecodeError::Invalid("repair.block"));
        }
        let last = usize::try_from(last_len).map_err(|_| DecodeError::Invalid("repair.last"))?;
        let block = BlockGeometry::new(start, k, len, last, VARINT_MAX)
            .ok_or(DecodeError::Invalid("repair.block"))?;
        Ok(RepairFrame {
            block,
            id,
            symbol: r.bytes(len)?,
        })
    }

    /// Appends the fields after the type byte.
    pub(super) fn encode_fields(&self, out: &mut Vec<u8>) {
        out.put_varint(self.block.start);
        out.put_u8(self.block.k as u8);
        out.put_u8(self.id);
        out.put_varint(self.block.last_len as u64);
        out.put_varint(self.symbol.len() as u64);
        out.put_bytes(self.symbol);
    }
}
