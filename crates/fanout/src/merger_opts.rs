//! The flags of a receiver that reports through an ACK merger (`fanout
//! recv` and `fanout stream recv`, MCTCP): where its join and feedback go,
//! the merger's key, and the ancestors to re-attach to.

use crate::security_opts::{pin_at, PeerArg, SecurityOpts};
use anyhow::{ensure, Result};
use clap::Args;
use fanout_transport::protection::PublicKey;
use fanout_transport::TransportConfig;
use std::net::SocketAddr;

/// A receiver's merger flags.
#[derive(Debug, Args)]
pub struct MergerOpts {
    /// Send the join and all feedback to this ACK merger (`fanout merge
    /// --listen`) instead of the sender; data still comes from the sender
    /// named by --from.
    #[arg(long, value_name = "HOST:PORT", requires = "from")]
    pub merger: Option<String>,
    /// With --key: the --merger's public key (64 hex digits or its .pub
    /// file), pinned when joining it (--sender-key pins the sender).
    #[arg(long, value_name = "KEY|FILE", requires = "merger",
          value_parser = crate::security_opts::parse_public)]
    pub merger_key: Option<PublicKey>,
    /// Ancestors of the --merger to re-attach to, in order, if it falls
    /// silent (no keep-alive for 1 s): e.g. its parent merger. The sender
    /// (--from) always ends the chain. The receiver continues from its
    /// position; nothing is fetched twice (`docs/mctcp.md`). With --key,
    /// `HOST:PORT=KEY` gives each merger's public key.
    #[arg(
        long,
        value_name = "HOST:PORT[=KEY],...",
        value_delimiter = ',',
        requires = "merger",
        value_parser = crate::security_opts::parse_peer
    )]
    pub merger_fallback: Vec<PeerArg>,
}

impl MergerOpts {
    /// Points `transport`'s feedback at the merger (pinning its key under
    /// `security`) with the fallback chain ending at `sender` (the sender
    /// the receiver joins; `None` for one that waits to be contacted, which
    /// has no chain).
    pub fn apply(
        &self,
        transport: &mut TransportConfig,
        security: &SecurityOpts,
        sender: Option<SocketAddr>,
    ) -> Result<()> {
        let Some(merger) = &self.merger else {
            return Ok(());
        };
        let via = crate::cmd_send::resolve(merger)?;
        ensure!(
            security.key.is_none() || self.merger_key.is_some(),
            "with --key, a receiver reporting through a merger pins its key: add --merger-key"
        );
        transport.feedback_via = Some(via);
        pin_at(&mut transport.protection, via, self.merger_key);
        if let Some(sender) = sender {
            let mut chain = Vec::new();
            for a in &self.merger_fallback {
                let addr = crate::cmd_send::resolve(&a.addr)?;
                pin_at(&mut transport.protection, addr, a.key);
                chain.push(addr);
            }
            if chain.last() != Some(&sender) {
                chain.push(sender);
            }
            transport.feedback_fallback = chain;
        }
        Ok(())
    }
}
