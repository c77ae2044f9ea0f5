//! A receiver reporting through a merger re-attaches to the next ancestor
//! of its fallback chain when the merger falls silent ([`crate::reattach`],
//! `docs/mctcp.md` "Crashed mergers"): it keeps taking DATA from the session
//! sender meanwhile, sends a resume CONNECT naming its position
//! (`resume_from` = its next expected offset: it holds `[0, resume_from)`),
//! sends no ACK until the ancestor accepts, then acknowledges at once. In a
//! protected session the resume CONNECT rides in a new handshake with the
//! ancestor, which gives the pair new keys; the group keys and the lists
//! verified so far stay.

use super::{Receiver, State};
use crate::event::CloseReason;
use crate::wire::{decode_frames, CloseFrame, ConnectFrame, Frame, WireTimestamp};
use fanout_core::time::Instant;
use fanout_core::Transmit;
use std::net::SocketAddr;

impl Receiver {
    /// The ancestor a resume CONNECT is waiting on, if any.
    pub(super) fn rejoin_target(&self) -> Option<SocketAddr> {
        self.chain()?.rejoin().map(|r| r.target)
    }

    /// While joining: the parent never answered or refused; asks the next
    /// ancestor instead. False when none is left.
    pub(super) fn join_next(&mut self, now: Instant) -> bool {
        let Some(next) = self.chain_mut().and_then(|c| c.skip()) else {
            return false;
        };
        tracing::debug!(to = %next, "join: parent never answered or refused; asking the next ancestor");
        self.retry_token = 0; // another sender's
        self.state = State::Joining {
            target: next,
            invited: false,
            attempts: 0,
            next_try: now,
            deadline: now + self.config.handshake_timeout,
        };
        true
    }

    /// Silence and back-off timers of the fallback chain.
    pub(super) fn chain_timeout(&mut self, now: Instant) {
        let (hs, peer) = (self.config.handshake_timeout, self.peer);
        let (Some(chain), Some((parent, _))) = (self.chain_mut(), peer) else {
            return;
        };
        let before = chain.reattaches;
        if !chain.on_timeout(now, parent, hs) {
            self.close(CloseReason::PeerReset {
                code: 1,
                reason: "no ancestor took over from the silent merger".into(),
            });
            return;
        }
        let reattached = chain.reattaches > before;
        if reattached {
            self.stats.reattaches += 1;
            tracing::debug!(from = %parent, to = ?self.rejoin_target(), "re-attaching");
        }
    }

    /// An ACCEPT or RESET from the ancestor asked to take over; true if the
    /// datagram was that (and is consumed). Anything else from it (e.g.
    /// DATA when the ancestor is the session sender) goes the usual way.
    pub(super) fn on_rejoin_reply(&mut self, now: Instant, session_id: u64, body: &[u8]) -> bool {
        let Some((_, session)) = self.peer else {
            return false;
        };
        let hs = self.config.handshake_timeout;
        match decode_frames(body).next() {
            Some(Ok(Frame::Accept(a))) if session_id == session => {
                let Some(chain) = self.chain_mut() else {
                    return false;
                };
                let Some(target) = chain.accepted(now) else {
                    return false;
                };
                if a.start_offset > self.buffer.rcv_nxt() {
                    // The ancestor would start past what this receiver
                    // holds: the gap would never arrive.
                    self.close(CloseReason::PeerReset {
                        code: 1,
                        reason: "re-attached past this receiver's position".into(),
                    });
                    return true;
                }
                self.peer = Some((target, session));
                self.token = a.token;
                self.retry_token = 0;
                self.member_id = a.member_id;
                self.last_heard = now;
                self.acks.request_immediate();
                true
            }
            // The ancestor is under a join flood: the next resume CONNECT
            // goes under its token.
            Some(Ok(Frame::Retry(token))) => {
                self.retry_token = token;
                true
            }
            Some(Ok(Frame::Reset(CloseFrame { code, reason }))) => {
                let reason = reason.to_string();
                if !self.chain_mut().is_some_and(|c| c.refused(now, hs)) {
                    self.close(CloseReason::PeerReset { code, reason });
                }
                true
            }
            _ => false,
        }
    }

    /// The CLOSE to the abandoned merger, then resume CONNECTs to the
    /// ancestor asked, when due.
    pub(super) fn poll_rejoin(
        &mut self,
        now: Instant,
        session_id: u64,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let chain = self.chain_mut()?;
        if let Some(old) = chain.take_leave() {
            let close = Frame::Close(CloseFrame {
                code: 0,
                reason: "re-attached to an ancestor",
            });
            return Some(self.send_frame(buf, self.token, old, &close));
        }
        let initial_rto = self.config.rto.initial;
        let target = self.chain_mut()?.due_connect(now, initial_rto)?;
        let position = self.buffer.rcv_nxt();
        let connect = Frame::Connect(ConnectFrame {
            max_payload: self.config.max_payload(),
            window: self.buffer.window_end() - position,
            timestamp: WireTimestamp::at(now),
            resume_from: position,
        });
        if let Some(keys) = self.keys.as_mut() {
            // Protected: a new handshake with the ancestor, the resume
            // CONNECT inside it (the same first message on every retry).
            let mut inner = Vec::new();
            connect.encode(&mut inner);
            let first = keys.first_message(target, &inner)?.to_vec();
            return Some(self.send_frame(buf, 0, target, &Frame::Handshake(&first)));
        }
        let id = if self.retry_token != 0 {
            self.retry_token
        } else {
            session_id
        };
        Some(self.send_frame(buf, id, target, &connect))
    }
}
