//! Crashed mergers (`docs/mctcp.md`, "Crashed mergers"): the merger's side of
//! [`crate::reattach`].
//!
//! * **Keep-alives down**: every admitted child gets a PADDING datagram every
//!   [`MergerConfig::keepalive`](super::MergerConfig::keepalive), so a child
//!   with a fallback chain can tell a crashed merger from a quiet one.
//! * **Children re-attaching here** (resume CONNECT: `resume_from` = P > 0,
//!   the header naming the session): accepted only while this merger is a
//!   member upstream and P is not beyond what the parent said it sent
//!   (SENT); the child gets ACCEPT {start P} but joins the merged ACK only
//!   with its first ACK, and only if that ACK acknowledges everything the
//!   last merged ACK told the parent and reaches the siblings' front (at
//!   most what was sent) — so a re-attaching child can neither move the
//!   merged cumulative ACK backwards, nor make it take back a SACK range,
//!   nor hold the subtree behind the others for its stall time (strangers
//!   resuming one after another would hold it until the parent evicted the
//!   merger). A child that is behind gets RESET ("behind the subtree") and
//!   tries its next ancestor (eventually the sender, which still holds
//!   what it lacks while the dead merger's member pins it).
//! * **This merger re-attaching** when its own parent (a merger, not the
//!   last ancestor) falls silent: CLOSE to the old parent, resume CONNECT
//!   with P = the subtree's merged cumulative point to the next ancestor,
//!   merged ACKs held meanwhile, then one at once to the new parent.

use super::{Merger, Up};
use crate::event::CloseReason;
use crate::merge::ack_meet::AckSummary;
use crate::merge::mctcp::ChildMsg;
use crate::wire::{
    decode_frames, AckFrame, CloseFrame, ConnectFrame, Frame, Header, WireTimestamp,
};
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use fanout_core::Transmit;
use std::net::SocketAddr;
use std::sync::Arc;

impl Merger {
    /// A resume CONNECT from a new child (`c.resume_from` > 0). Returns
    /// false if `c` is an ordinary join.
    pub(super) fn admit_resume(
        &mut self,
        now: Instant,
        from: SocketAddr,
        header_session: u64,
        c: &ConnectFrame,
    ) -> bool {
        if c.resume_from == 0 {
            return false;
        }
        let joined = self.up == Up::Established && header_session == self.session_id;
        // Beyond what the parent said it sent: not believed (the sender
        // refuses such a resume too; a child whose bound is merely stale
        // tries its next ancestor).
        let beyond = c.resume_from > self.sent.end();
        if !joined || beyond || self.table.spec.children.is_full() {
            self.stats.children_refused += 1;
            self.stats.drops.count(DropReason::LimitExceeded);
            let why = if !joined {
                "merger not joined"
            } else if beyond {
                "resume beyond the stream"
            } else {
                "merger full"
            };
            tracing::debug!(child = %from, why, "merger: refusing a resume");
            self.refuse_join(from, header_session, why);
            return true;
        }
        let summary = crate::merge::join::ConnectSummary::of(c);
        let ts = c.timestamp;
        self.table.spec.children.insert(from, summary, ts, now);
        self.table.spec.children.set_start(&from, c.resume_from);
        self.queue_accept(from, now);
        true
    }

    /// The first ACK of a re-attaching child (`start` set, not yet in the
    /// merged ACK): admits it if it acknowledges all the parent was told,
    /// else resets it.
    pub(super) fn on_resumed_ack(&mut self, now: Instant, from: SocketAddr, ack: AckFrame) {
        let Some(start) = self.table.spec.children.get(&from).and_then(|c| c.start) else {
            return;
        };
        let told = self.merged().cloned();
        let base = self.accept.map_or(0, |a| a.start_offset);
        let mine = AckSummary::from_frame(&ack);
        // Nor behind any sibling (as far as the stream was sent): a child
        // admitted behind the others would hold the subtree for its whole
        // stall time, and strangers resuming one after another could hold
        // it until the parent evicts the merger.
        let front = self.table.spec.children.front(self.sent.end());
        let covers = mine.cumulative >= front.unwrap_or(0)
            && match &told {
                Some(t) => {
                    mine.cumulative >= t.cumulative
                        && t.sack.iter().all(|r| mine.acknowledges(r.clone()))
                }
                None => mine.cumulative >= base,
            };
        if !covers {
            self.table.spec.children.remove(&from);
            self.stats.children_refused += 1;
            self.queue(
                from,
                self.session_id,
                Self::reset_body("behind the subtree"),
            );
            self.after_leave(now);
            return;
        }
        self.stats.children_resumed += 1;
        self.table.spec.children.admit(&from, start, now);
        self.stats.acks_in += 1;
        self.process(ChildMsg::Ack { child: from, ack }, now);
    }

    /// PADDING to every admitted child, when due.
    pub(super) fn keepalive_due(&mut self, now: Instant) {
        let Some(every) = self.config.keepalive else {
            return;
        };
        if self.up != Up::Established || now < self.next_keepalive {
            return;
        }
        self.next_keepalive = now + every;
        let mut b = Vec::new();
        Frame::Padding.encode(&mut b);
        let body: Arc<[u8]> = b.into();
        let to: Vec<SocketAddr> = self
            .table
            .spec
            .children
            .iter()
            .filter(|(_, c)| c.start.is_some())
            .map(|(a, _)| *a)
            .collect();
        for a in to {
            self.stats.keepalives += 1;
            self.queue(a, self.session_id, body.clone());
        }
        let Some(silence) = self.config.child_silence else {
            return;
        };
        let silent = self
            .table
            .spec
            .children
            .silent_behind(now, silence, &self.sent);
        if silent.is_empty() {
            return;
        }
        let body = Self::reset_body("silent");
        for addr in silent {
            tracing::debug!(child = %addr, "merger: evicting a silent child");
            self.evict(addr, &body);
        }
        self.after_leave(now);
    }

    /// When the keep-alive timer next fires.
    pub(super) fn keepalive_deadline(&self) -> Option<Instant> {
        self.config.keepalive?;
        (self.up == Up::Established).then_some(self.next_keepalive)
    }

    /// Silence and back-off timers of this merger's fallback chain.
    pub(super) fn chain_timeout(&mut self, now: Instant) {
        if self.up != Up::Established {
            return;
        }
        let before = self.chain.reattaches;
        let hs = self.config.handshake_timeout;
        if !self.chain.on_timeout(now, self.config.parent, hs) {
            self.close(CloseReason::IdleTimeout, Some("no ancestor took over"));
            return;
        }
        if self.chain.reattaches > before {
            self.stats.reattaches += 1;
        }
    }

    /// An ACCEPT or RESET from the ancestor being asked; true if consumed.
    pub(super) fn on_rejoin_reply(&mut self, now: Instant, header: Header, body: &[u8]) -> bool {
        let hs = self.config.handshake_timeout;
        match decode_frames(body).next() {
            Some(Ok(Frame::Accept(a))) if header.session_id == self.session_id => {
                let Some(target) = self.chain.accepted(now) else {
                    return false;
                };
                let position = self.table.spec.children.meet().map_or(0, |m| m.cumulative);
                if a.start_offset > position {
                    self.close(
                        CloseReason::PeerReset {
                            code: 1,
                            reason: "re-attached past the subtree's position".into(),
                        },
                        Some("re-attached past the subtree's position"),
                    );
                    return true;
                }
                self.config.parent = target;
                self.parent_heard = now;
                self.retry_token = 0;
                if let Some(old) = self.accept.as_mut() {
                    old.member_id = a.member_id;
                    old.token = a.token;
                }
                // Tell the new parent where the subtree stands at once.
                if let Some(m) = self.table.spec.children.meet() {
                    self.pending_ack = Some(m.to_frame(WireTimestamp(0)));
                }
                true
            }
            // The ancestor is under a join flood: the next resume CONNECT
            // goes under its token.
            Some(Ok(Frame::Retry(token))) => {
                self.retry_token = token;
                true
            }
            Some(Ok(Frame::Reset(CloseFrame { code, reason }))) => {
                if !self.chain.refused(now, hs) {
                    let reason = reason.to_string();
                    self.close(
                        CloseReason::PeerReset { code, reason },
                        Some("no ancestor took over"),
                    );
                }
                true
            }
            _ => false,
        }
    }

    /// The ancestor a resume CONNECT is waiting on.
    pub(super) fn rejoin_target(&self) -> Option<SocketAddr> {
        self.chain.rejoin().map(|r| r.target)
    }

    /// The CLOSE to the abandoned parent, then resume CONNECTs, when due.
    pub(super) fn poll_rejoin(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.up != Up::Established {
            return None;
        }
        if let Some(old) = self.chain.take_leave() {
            let close = Frame::Close(CloseFrame {
                code: 0,
                reason: "re-attached to an ancestor",
            });
            return Some(self.send(buf, self.up_id(), old, |p| {
                p.frame(&close);
            }));
        }
        let target = self.chain.due_connect(now, self.config.connect_rto)?;
        let children = &self.table.spec.children;
        let position = children.meet().map_or(0, |m| m.cumulative);
        let window = children
            .min_window_end()
            .map_or(0, |w| w.saturating_sub(position));
        let max_payload = self.connect.map_or(0, |c| c.max_payload);
        self.stats.connects_out += 1;
        let connect = Frame::Connect(ConnectFrame {
            max_payload,
            window,
            timestamp: WireTimestamp::at(now),
            resume_from: position,
        });
        if let Some(keys) = self.keys.as_mut() {
            // Protected: a new handshake with the ancestor, the resume
            // CONNECT inside it.
            let mut inner = Vec::new();
            connect.encode(&mut inner);
            let mut first = Vec::new();
            Frame::Handshake(keys.first_message(target, &inner)?).encode(&mut first);
            return Some(self.send(buf, 0, target, |p| {
                p.frames_with(|out| out.extend_from_slice(&first));
            }));
        }
        let id = if self.retry_token != 0 {
            self.retry_token
        } else {
            self.session_id
        };
        Some(self.send(buf, id, target, |p| {
            p.frame(&connect);
        }))
    }
}
