//! What members send: ACKs (fed to the member's recovery; TCP-SMO §II
//! adaptive ACK frequency and the session's feedback budget steer how
//! often they come), upstream bytes, roster pages, resets — and the
//! outlier eviction the ACK path runs.

use super::transmit::Control;
use super::SessionSender;
use crate::session::eviction::MemberSample;
use crate::session::upstream;
use crate::session::{Departure, MemberId, SessionEvent};
use crate::wire::{decode_frames, AckFrame, CloseFrame, Frame, UpstreamFrame};
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;

impl SessionSender {
    /// The frames of one datagram from member `id` (packet number `pn`).
    pub(super) fn handle_member_frames(
        &mut self,
        now: Instant,
        id: MemberId,
        pn: u64,
        body: &[u8],
    ) {
        let mut heard = false;
        for frame in decode_frames(body) {
            let Ok(frame) = frame else {
                self.stats.drops.count(DropReason::MalformedFrame);
                break;
            };
            match frame {
                Frame::Ack(ack) => {
                    self.on_ack(now, id, pn, &ack);
                    heard = true;
                }
                Frame::Upstream(u) => self.on_upstream(id, &u),
                Frame::Roster(r) => self.on_roster(now, id, &r),
                Frame::Connect(c) => {
                    // ACCEPT lost: answer again.
                    if let Some(m) = self.members.get(id) {
                        let (addr, start, token) = (m.addr(), m.start(), m.token());
                        self.control(
                            addr,
                            Control::Accept {
                                member_id: id,
                                timestamp: c.timestamp,
                                start,
                                token,
                            },
                        );
                    }
                }
                Frame::Reset(CloseFrame { code, reason }) => {
                    let why = format!("member reset: {reason}");
                    self.remove(now, id, &why, Departure::MemberReset { code });
                    self.after_progress(now);
                    return;
                }
                Frame::GroupKeyAck(epoch) => self.on_group_key_ack(now, id, epoch),
                Frame::SegmentsRequest(q) => self.on_segments_request(now, id, q),
                Frame::Rekey => self.on_rekey(now, id),
                Frame::Renege(ranges) if self.keys.is_some() => self.on_renege(now, id, &ranges),
                Frame::Close(_) | Frame::Ping | Frame::Padding => {}
                _ => self.stats.drops.count(DropReason::UnexpectedFrame),
            }
        }
        if !heard {
            self.members.update(id, self.snd_nxt, |m| m.on_heard(now));
        }
    }

    fn on_ack(&mut self, now: Instant, id: MemberId, pn: u64, ack: &AckFrame) {
        self.stats.acks_received += 1;
        let snd_nxt = self.snd_nxt;
        // A claim beyond what was sent (a receiver fed forged DATA, or a
        // forger) is clipped to `SND.NXT` and counted, never a reason to
        // discard the rest of the ACK: one forged piece above the send
        // edge would otherwise silence the member until it is evicted.
        // SACK blocks are clipped by the recovery.
        if ack.cumulative > snd_nxt || ack.sack.iter().any(|r| r.end > snd_nxt) {
            self.stats.drops.count(DropReason::AckOfUnsent);
        }
        let clipped;
        let ack = if ack.cumulative > snd_nxt {
            clipped = AckFrame {
                cumulative: snd_nxt,
                ..ack.clone()
            };
            &clipped
        } else {
            ack
        };
        // TCP-SMO §II adaptive ACKs (every 2 segments in slow start or
        // recovery, thinned in loss-free congestion avoidance), plus time
        // thinning to the session's feedback budget.
        let steady = self.config.steady_ack_every;
        let clocks_session = self.controller.clocking_member() == Some(id);
        let interval = steady.map(|_| {
            if clocks_session {
                0
            } else {
                self.ack_interval_us()
            }
        });
        let (log, mss, cwnd_limited) = (&self.log, self.mss, self.cwnd_limited);
        let Some((out, episodes, schedule, addr, delay_before)) =
            self.members.update(id, snd_nxt, |m| {
                m.on_heard(now);
                let delay_before = m.ack_schedule().max_ack_delay_us;
                let episodes = m.recovery().recovery_episodes();
                let out = m.on_ack(now, pn, ack, log, snd_nxt, mss, cwnd_limited);
                let want = crate::session::feedback::schedule(
                    steady.zip(interval),
                    m.recovery().in_fast_feedback(),
                    m.recovery().cwnd() / mss.max(1),
                    m.recovery().rtt(),
                    &m.ack_schedule(),
                );
                let schedule = m.set_ack_schedule(want).then_some(want);
                let episodes = m.recovery().recovery_episodes() - episodes;
                (out, episodes, schedule, m.addr(), delay_before)
            })
        else {
            return;
        };
        if let Some(m) = self.members.get(id) {
            self.controller.on_feedback(now, m);
        }
        self.stats.recovery_episodes += episodes;
        self.stats.spurious_repairs += out.spurious_repairs;
        self.stats.recoveries_undone += u64::from(out.undone);
        if let Some(want) = schedule {
            self.input_delay_changed(delay_before, want.max_ack_delay_us);
            self.control(addr, Control::AckFrequency(want));
        }
        if out.clipped {
            self.stats.drops.count(DropReason::InvalidAck);
        }
        if out.sack_capped {
            self.stats.drops.count(DropReason::LimitExceeded);
        }
        self.queue_repairs(now, id, out.newly_lost);
        if out.progressed {
            self.after_progress(now);
        }
        self.evict_outliers(now);
    }

    /// Keeps `input_delay_us` the least any member was asked for, after
    /// one member's changed from `before` to `after` (a full look only when
    /// the least one grew).
    fn input_delay_changed(&mut self, before: u32, after: u32) {
        if after <= self.input_delay_us {
            self.input_delay_us = after;
        } else if before == self.input_delay_us {
            self.input_delay_us = self.least_input_delay();
        }
    }

    /// The least `max_ack_delay_us` asked of any member, µs.
    pub(super) fn least_input_delay(&self) -> u32 {
        self.members
            .iter()
            .map(|m| m.ack_schedule().max_ack_delay_us)
            .min()
            .unwrap_or(crate::wire::MAX_ACK_INTERVAL_US)
    }

    /// Minimum spacing of a member's ACKs for the session's feedback
    /// budget, µs, recomputed only when the member count changes.
    fn ack_interval_us(&mut self) -> u32 {
        let key = (self.feedback_sources(), self.config.feedback_budget_pps);
        if self.ack_interval.0 != key {
            self.ack_interval = (key, crate::session::feedback::ack_interval_us(key.0, key.1));
            self.controller
                .set_feedback_interval(std::time::Duration::from_micros(
                    self.ack_interval.1.into(),
                ));
        }
        self.ack_interval.1
    }

    fn on_upstream(&mut self, id: MemberId, f: &UpstreamFrame<'_>) {
        let Some(addr) = self.members.get(id).map(|m| m.addr()) else {
            return;
        };
        let table = self.upstream.get_or_insert_with(Default::default);
        if table.on_frame(id, addr, f) == (upstream::Outcome::Accepted { readable: true }) {
            self.events.push_back(SessionEvent::Upstream { id, addr });
        }
    }

    /// Outlier eviction ([`crate::session::eviction`]): at most one O(N)
    /// sweep per check interval; evicted members get RESET with the reason.
    fn evict_outliers(&mut self, now: Instant) {
        let Some(policy) = self.config.outlier_eviction else {
            return;
        };
        if !self.outliers.due(now, &policy) {
            return;
        }
        let cap = self.config.transport.send_buffer_bytes as u64;
        let samples: Vec<MemberSample> = self
            .members
            .iter()
            .map(|m| MemberSample {
                id: m.id(),
                cwnd: m.recovery().cwnd().min(cap),
                srtt: m.recovery().srtt(),
                min_rtt: m.recovery().rtt().min_rtt(),
            })
            .collect();
        let evict = self.outliers.sweep(now, &policy, &samples);
        for (id, reason) in &evict {
            self.remove(now, *id, reason, Departure::Evicted);
        }
        if !evict.is_empty() {
            self.after_progress(now);
        }
    }
}
