//! Figures from a finished run over a measurement window: per-flow goodput,
//! Jain's fairness index, and per-link utilisation.

use crate::session_flow::{BulkSession, SessionFlows};
use crate::sim::Simulator;
use crate::transfer::{goodput_bps, jain_index, TransferFlows};
use crate::AppId;
use fanout_core::Instant;
use fanout_transport::Receiver;
use serde::Serialize;

/// One transfer flow's figures.
#[derive(Debug, Clone, Serialize)]
pub struct FlowFigures {
    /// "from -> to".
    pub label: String,
    /// Application goodput at the receiver over the window, bit/s.
    pub goodput_bps: f64,
    /// Retransmitted payload bytes over the whole run.
    pub retransmitted_bytes: u64,
    /// Loss-recovery episodes over the whole run.
    pub recovery_episodes: u64,
    /// Retransmission timeouts over the whole run.
    pub rto_events: u64,
}

/// One link's figures.
#[derive(Debug, Clone, Serialize)]
pub struct LinkFigures {
    /// "from->to".
    pub label: String,
    /// Configured rate, bit/s.
    pub rate_bps: u64,
    /// Mean wire throughput over the window / rate.
    pub utilisation: f64,
    /// Packets dropped over the whole run (all reasons).
    pub drops: u64,
}

/// One session's figures (TCP-SMO).
#[derive(Debug, Clone, Serialize)]
pub struct SessionFigures {
    /// Members at the end of the run.
    pub members: usize,
    /// Members evicted or gone.
    pub members_left: u64,
    /// Slowest member's goodput over the window, bit/s (members present
    /// from the start, relays included: what each received).
    pub min_goodput_bps: f64,
    /// Median member goodput, bit/s.
    pub median_goodput_bps: f64,
    /// Fastest member's goodput, bit/s.
    pub max_goodput_bps: f64,
    /// New data segments multicast (once each).
    pub data_segments: u64,
    /// Repairs sent by multicast.
    pub multicast_repairs: u64,
    /// Repairs sent by unicast.
    pub unicast_repairs: u64,
    /// Coded repair symbols multicast (REPAIR frames, coded policy).
    pub coded_repairs: u64,
    /// Blocks repaired by coding (decisions).
    pub coded_blocks: u64,
    /// Member-segment losses covered by coded repair decisions.
    pub coded_repair_members: u64,
    /// Multicast repairs of a segment already multicast again before.
    pub repeat_multicast_repairs: u64,
    /// Members served per multicast repair, on average (those that had
    /// reported the segment lost when it was sent).
    pub members_per_multicast_repair: f64,
    /// Member retransmission timeouts.
    pub rto_events: u64,
    /// Member loss-recovery episodes.
    pub recovery_episodes: u64,
    /// Repairs that proved spurious (the original was late, not lost).
    pub spurious_repairs: u64,
    /// Member recovery episodes undone (all they deemed lost arrived).
    pub recoveries_undone: u64,
    /// Datagrams arriving at the sender's node per second (feedback load).
    pub feedback_pps: f64,
    /// Bits per second arriving at the sender's node.
    pub feedback_bps: f64,
    /// Datagrams the sender's node dropped for lack of processing capacity.
    pub feedback_cpu_drops: u64,
    /// Share of the run the sender node's CPU model was busy (0 without
    /// one).
    pub sender_cpu_load: f64,
    /// Datagrams per second the median member (relays included) sent to
    /// the session (its feedback load), over the whole run.
    pub member_feedback_pps: f64,
    /// MCTCP ACK mergers (empty without).
    pub mergers: Vec<MergerFigures>,
    /// Bytes sent on the sender's first link per byte delivered to one member.
    pub sender_link_bytes_per_delivered_byte: f64,
    /// Each member present from the start, in member order, relays last
    /// (evicted members included, at what they got in the window).
    pub member_figures: Vec<MemberFigures>,
    /// Late joiners.
    pub late_joiners: Vec<LateJoinerFigures>,
    /// The catch-up server around the session (its late joiners'
    /// prefixes).
    pub catch_up: CatchUpFigures,
    /// Relays and their downstream sessions.
    pub relays: Vec<RelayFigures>,
    /// Every receiver behind a relay together (`None` without relays).
    pub relayed: Option<Spread>,
}

/// Minimum, median and maximum of a set of goodputs, bit/s.
#[derive(Debug, Clone, Serialize)]
pub struct Spread {
    /// How many.
    pub count: usize,
    /// Smallest.
    pub min_bps: f64,
    /// Median.
    pub median_bps: f64,
    /// Largest.
    pub max_bps: f64,
}

impl Spread {
    fn of(mut xs: Vec<f64>) -> Spread {
        xs.sort_by(f64::total_cmp);
        Spread {
            count: xs.len(),
            min_bps: xs.first().copied().unwrap_or(0.0),
            median_bps: xs.get(xs.len() / 2).copied().unwrap_or(0.0),
            max_bps: xs.last().copied().unwrap_or(0.0),
        }
    }
}

/// One MCTCP merger's figures, over the whole run.
#[derive(Debug, Clone, Serialize)]
pub struct MergerFigures {
    /// Merger node.
    pub node: String,
    /// Children reporting to it.
    pub children: usize,
    /// ACKs received from children.
    pub acks_in: u64,
    /// Merged ACKs sent to its parent.
    pub acks_out: u64,
    /// Of those, sent at once because a child repeated its ACK (the loss
    /// signal, MCTCP Fig. 5 `retransmit`).
    pub duplicate_forwards: u64,
    /// Children's duplicate ACKs not forwarded (a duplicate at the same
    /// merged point already went up).
    pub duplicates_suppressed: u64,
    /// Receivers behind it, as its ROSTER reports them.
    pub subtree_receivers: u64,
    /// Datagrams arriving at its node per second.
    pub in_pps: f64,
    /// Share of the run its node's CPU model was busy (0 without one).
    pub cpu_load: f64,
    /// Datagrams its node dropped for lack of processing capacity.
    pub cpu_drops: u64,
}

/// Share of the run `node`'s CPU model was busy.
fn cpu_load(sim: &Simulator, node: crate::NodeId, secs: f64) -> f64 {
    let n = sim.node(node);
    n.cpu().map_or(0.0, |c| {
        (n.stats().delivered_packets as f64 * c.per_packet.as_secs_f64() / secs).min(1.0)
    })
}

/// One relay's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RelayFigures {
    /// Relay node.
    pub node: String,
    /// Its goodput as a member of the upstream session, bit/s.
    pub upstream_goodput_bps: f64,
    /// Downstream members at the end of the run.
    pub members: usize,
    /// Downstream members evicted or gone.
    pub members_left: u64,
    /// Downstream members' goodput.
    pub goodput: Spread,
}

/// One member's figures.
#[derive(Debug, Clone, Serialize)]
pub struct MemberFigures {
    /// Node name.
    pub node: String,
    /// Goodput over the window, bit/s.
    pub goodput_bps: f64,
    /// First metrics sample at which it had read the whole (bounded)
    /// stream, seconds.
    pub finished_at_s: Option<f64>,
}

/// What a session's catch-up server did (`fanout_app::catch_up`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CatchUpFigures {
    /// Transfers started.
    pub started: u64,
    /// Transfers every byte of which was acknowledged.
    pub completed: u64,
    /// Datagram bytes the session sent.
    pub session_bytes: u64,
    /// Datagram bytes the catch-ups sent while the session was open.
    pub bytes_during_session: u64,
}

/// One late joiner's figures.
#[derive(Debug, Clone, Serialize)]
pub struct LateJoinerFigures {
    /// Node name.
    pub node: String,
    /// When it joined, seconds.
    pub joined_at_s: f64,
    /// Offset at which the session admitted it (its prefix is `[0, start)`).
    pub start_offset: u64,
    /// Session bytes it read, from `start_offset` on.
    pub session_bytes: u64,
    /// Prefix bytes its catch-up transfer delivered.
    pub catch_up_bytes: u64,
    /// Its session part reached the end of the stream.
    pub session_finished: bool,
    /// Its catch-up transfer delivered the whole prefix.
    pub catch_up_finished: bool,
    /// Holds the whole stream: both parts, adding up to the stream length
    /// (false for an endless stream).
    pub complete: bool,
}

/// Everything `fanout sim` reports.
#[derive(Debug, Clone, Serialize)]
pub struct RunFigures {
    /// Seed of the run.
    pub seed: u64,
    /// Trace hash (FNV-1a 64, hex) proving determinism; `None` (JSON
    /// `null`) if the run was not traced.
    pub trace_hash: Option<String>,
    /// Window start, seconds.
    pub window_start_s: f64,
    /// Window end, seconds.
    pub window_end_s: f64,
    /// Transfer flows.
    pub flows: Vec<FlowFigures>,
    /// Jain's index over the flows' goodputs (1 if fewer than two flows).
    pub jain_index: f64,
    /// Jain's index over the flows and the sessions together, each session
    /// counted once at its slowest member's goodput (what it delivers to
    /// every member; 1 if fewer than two in all).
    pub jain_index_with_sessions: f64,
    /// Links that carried traffic.
    pub links: Vec<LinkFigures>,
    /// One-to-many sessions.
    pub sessions: Vec<SessionFigures>,
    /// Live real-time flows (filled by the caller that built them,
    /// [`crate::session_live::live_figures`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub live: Vec<crate::session_live::LiveFigures>,
    /// Media flows (filled by the caller that built them,
    /// [`crate::session_media::media_figures`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub media: Vec<crate::session_media::MediaFigures>,
    /// Overlay flows (filled by the caller that built them,
    /// [`crate::session_overlay::overlay_figures`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overlay: Vec<crate::session_overlay::OverlayFigures>,
}

/// Computes the figures of `sim` over `[from, to]`; `trace_hash` is the
/// run's ([`crate::scenario::RunReport::trace_hash`]), `None` if untraced.
pub fn figures(
    sim: &Simulator,
    flows: &TransferFlows,
    sessions: &SessionFlows,
    trace_hash: Option<u64>,
    from: Instant,
    to: Instant,
) -> RunFigures {
    let flow_figs: Vec<FlowFigures> = flows
        .flows
        .iter()
        .map(|f| {
            let stats = sim
                .app::<crate::transfer::BulkSender>(f.sender)
                .and_then(|s| s.sender())
                .map(|s| s.stats().clone())
                .unwrap_or_default();
            FlowFigures {
                label: f.label.clone(),
                goodput_bps: goodput_bps(sim, f.receiver, from, to),
                retransmitted_bytes: stats.repair_bytes,
                recovery_episodes: stats.recovery_episodes,
                rto_events: stats.rto_events,
            }
        })
        .collect();
    let goodputs: Vec<f64> = flow_figs.iter().map(|f| f.goodput_bps).collect();
    let links = sim
        .links()
        .iter()
        .filter(|l| l.stats().tx_packets > 0)
        .map(|l| {
            let series = &sim.metrics().links[l.id().index()];
            let window: Vec<f64> = series
                .samples
                .iter()
                .filter(|s| s.at > from && s.at <= to)
                .map(|s| s.throughput_bps)
                .collect();
            let mean = window.iter().sum::<f64>() / window.len().max(1) as f64;
            let rate = l.config().rate_bps;
            LinkFigures {
                label: format!("{}->{}", sim.node(l.from()).name(), sim.node(l.to()).name()),
                rate_bps: rate,
                utilisation: mean / rate as f64,
                drops: l.stats().drops.total(),
            }
        })
        .collect();
    let session_figs: Vec<SessionFigures> = sessions
        .sessions
        .iter()
        .map(|s| session_figures(sim, s, from, to))
        .collect();
    let mut all = goodputs.clone();
    all.extend(session_figs.iter().map(|s| s.min_goodput_bps));
    RunFigures {
        seed: sim.seed(),
        trace_hash: trace_hash.map(|h| format!("{h:016x}")),
        window_start_s: from.as_secs_f64(),
        window_end_s: to.as_secs_f64(),
        jain_index: if goodputs.len() < 2 {
            1.0
        } else {
            jain_index(&goodputs)
        },
        jain_index_with_sessions: if all.len() < 2 { 1.0 } else { jain_index(&all) },
        flows: flow_figs,
        links,
        sessions: session_figs,
        live: Vec::new(),
        media: Vec::new(),
        overlay: Vec::new(),
    }
}

fn session_figures(
    sim: &Simulator,
    s: &crate::session_flow::SessionFlow,
    from: Instant,
    to: Instant,
) -> SessionFigures {
    let mut goodputs: Vec<f64> = s
        .members_from_start()
        .map(|m| goodput_bps(sim, m, from, to))
        .collect();
    goodputs.sort_by(f64::total_cmp);
    let (stats, members) = sim
        .app::<BulkSession>(s.sender)
        .map(|b| (b.session().stats().clone(), b.session().member_count()))
        .unwrap_or_default();
    let catch_up = sim
        .app::<BulkSession>(s.sender)
        .map(|b| {
            let c = b.catch_up().catch_up_stats();
            CatchUpFigures {
                started: c.started,
                completed: c.completed,
                session_bytes: c.session_bytes,
                bytes_during_session: c.bytes_during_session,
            }
        })
        .unwrap_or_default();
    let secs = sim.now().as_secs_f64().max(1e-9);
    let node = sim.app_node(s.sender);
    let node_stats = sim.node(node).stats();
    let sent_bytes = sim
        .links()
        .iter()
        .find(|l| l.from() == node)
        .map_or(0, |l| l.stats().tx_bytes);
    let delivered = s
        .members_from_start()
        .map(|m| crate::transfer::delivered_at(sim, m, sim.now()))
        .max()
        .unwrap_or(0);
    let member_figures = s
        .members_from_start()
        .map(|m| MemberFigures {
            node: sim.node(sim.app_node(m)).name().to_owned(),
            goodput_bps: goodput_bps(sim, m, from, to),
            finished_at_s: s.bytes.and_then(|b| {
                sim.metrics().apps[m.index()]
                    .samples
                    .iter()
                    .find(|x| x.delivered_bytes >= b)
                    .map(|x| x.at.as_secs_f64())
            }),
        })
        .collect();
    let late_joiners = s
        .late
        .iter()
        .map(|l| late_figures(sim, l, s.bytes))
        .collect();
    let relays: Vec<RelayFigures> = s
        .relays
        .iter()
        .map(|r| {
            let (members, left) = sim
                .app::<crate::session_relay::RelayApp>(r.app)
                .map_or((0, 0), |a| {
                    (a.session().member_count(), a.session().stats().members_left)
                });
            RelayFigures {
                node: r.node.clone(),
                upstream_goodput_bps: goodput_bps(sim, r.app, from, to),
                members,
                members_left: left,
                goodput: Spread::of(
                    r.members
                        .iter()
                        .map(|&m| goodput_bps(sim, m, from, to))
                        .collect(),
                ),
            }
        })
        .collect();
    let mergers = s
        .mergers
        .iter()
        .map(|m| {
            let app = sim.app::<crate::session_merge::MergerApp>(m.app);
            let st = app.map(|a| a.merger().stats()).unwrap_or_default();
            let subtree_receivers = app.map_or(0, |a| a.merger().subtree_receivers());
            let n = sim.app_node(m.app);
            MergerFigures {
                node: m.node.clone(),
                children: m.children,
                acks_in: st.acks_in,
                acks_out: st.acks_out,
                duplicate_forwards: st.duplicate_forwards,
                duplicates_suppressed: st.duplicates_suppressed,
                subtree_receivers,
                in_pps: sim.node(n).stats().delivered_packets as f64 / secs,
                cpu_load: cpu_load(sim, n, secs),
                cpu_drops: sim.node(n).stats().drops[crate::stats::NetDrop::CpuOverflow],
            }
        })
        .collect();
    let mut member_pps: Vec<f64> = s
        .members_from_start()
        .filter_map(|m| member_receiver(sim, m))
        .map(|r| r.stats().datagrams_sent as f64 / secs)
        .collect();
    member_pps.sort_by(f64::total_cmp);
    let relayed = (!s.relays.is_empty()).then(|| {
        Spread::of(
            s.relays
                .iter()
                .flat_map(|r| r.members.iter())
                .map(|&m| goodput_bps(sim, m, from, to))
                .collect(),
        )
    });
    SessionFigures {
        relays,
        relayed,
        member_figures,
        late_joiners,
        catch_up,
        members,
        members_left: stats.members_left,
        min_goodput_bps: goodputs.first().copied().unwrap_or(0.0),
        median_goodput_bps: goodputs.get(goodputs.len() / 2).copied().unwrap_or(0.0),
        max_goodput_bps: goodputs.last().copied().unwrap_or(0.0),
        data_segments: stats.data_segments,
        multicast_repairs: stats.multicast_repairs,
        unicast_repairs: stats.unicast_repairs,
        coded_repairs: stats.coded_repairs,
        coded_blocks: stats.coded_blocks,
        coded_repair_members: stats.coded_repair_members,
        repeat_multicast_repairs: stats.repeat_multicast_repairs,
        members_per_multicast_repair: stats.multicast_repair_members as f64
            / stats.multicast_repairs.max(1) as f64,
        rto_events: stats.rto_events,
        recovery_episodes: stats.recovery_episodes,
        spurious_repairs: stats.spurious_repairs,
        recoveries_undone: stats.recoveries_undone,
        feedback_pps: node_stats.delivered_packets as f64 / secs,
        feedback_bps: node_stats.delivered_bytes as f64 * 8.0 / secs,
        feedback_cpu_drops: node_stats.drops[crate::stats::NetDrop::CpuOverflow],
        sender_cpu_load: cpu_load(sim, node, secs),
        member_feedback_pps: member_pps.get(member_pps.len() / 2).copied().unwrap_or(0.0),
        mergers,
        sender_link_bytes_per_delivered_byte: sent_bytes as f64 / delivered.max(1) as f64,
    }
}

/// The session member inside `app`: a direct member's or a relay's.
fn member_receiver(sim: &Simulator, app: AppId) -> Option<&Receiver> {
    sim.app::<crate::transfer::SinkReceiver>(app)
        .map(|r| r.receiver())
        .or_else(|| {
            sim.app::<crate::session_relay::RelayApp>(app)
                .map(|r| r.member())
        })
}

fn late_figures(
    sim: &Simulator,
    l: &crate::session_flow::LateFlow,
    total: Option<u64>,
) -> LateJoinerFigures {
    let member = sim
        .app::<crate::session_late::LateMember>(l.member)
        .and_then(|m| m.receiver());
    let catch_up = sim.app::<crate::session_late::LateCatchUp>(l.catch_up);
    let start = member.map_or(0, |r| r.start_offset());
    let session_bytes = member.map_or(0, |r| r.bytes_read().saturating_sub(start));
    let catch_up_bytes = catch_up.map_or(0, |c| c.bytes_read());
    let session_finished = member.is_some_and(|r| r.is_finished());
    // A joiner admitted at offset 0 needs no catch-up.
    let catch_up_finished = start == 0 || catch_up.is_some_and(|c| c.is_finished());
    let complete = session_finished
        && catch_up_finished
        && total.is_some_and(|t| catch_up_bytes.min(start) + session_bytes == t);
    LateJoinerFigures {
        node: l.node.clone(),
        joined_at_s: l.at.as_secs_f64(),
        start_offset: start,
        session_bytes,
        catch_up_bytes,
        session_finished,
        catch_up_finished,
        complete,
    }
}

/// TCP Reno throughput in bit/s after Padhye, Firoiu, Towsley & Kurose
/// (SIGCOMM 1998, eq. 32 without the receive-window cap):
/// `B = MSS / (RTT·√(2bp/3) + T0·min(1, 3·√(3bp/8))·p·(1 + 32p²))`.
/// `mss_bytes` payload per segment, `p` loss probability, `b` segments
/// acknowledged per window increase of one segment (1 with RFC 3465 byte
/// counting), `t0` the retransmission timeout.
pub fn padhye_bps(mss_bytes: f64, rtt_s: f64, p: f64, b: f64, t0_s: f64) -> f64 {
    let denom = rtt_s * (2.0 * b * p / 3.0).sqrt()
        + t0_s * (3.0 * (3.0 * b * p / 8.0).sqrt()).min(1.0) * p * (1.0 + 32.0 * p * p);
    mss_bytes * 8.0 / denom
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padhye_reference_values() {
        // Square-root regime: at small p the first term dominates.
        let b = padhye_bps(1000.0, 0.1, 1e-4, 1.0, 1.0);
        let mathis = 1000.0 * 8.0 / (0.1 * (2.0e-4f64 / 3.0).sqrt());
        assert!((b / mathis - 1.0).abs() < 0.01, "{b} vs {mathis}");
        // Timeouts cut throughput at high p.
        assert!(
            padhye_bps(1000.0, 0.1, 0.1, 1.0, 1.0)
                < 0.5 * 1000.0 * 8.0 / (0.1 * (0.2f64 / 3.0).sqrt())
        );
    }
}
