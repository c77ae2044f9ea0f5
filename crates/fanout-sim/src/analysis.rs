//! Figures from a finished run over a measurement window: per-flow goodput,
//! Jain's fairness index, and per-link utilisation.

use crate::session_flow::{BulkSession, SessionFlows};
use crate::sim::Simulator;
use crate::transfer::{goodput_bps, jain_index, TransferFlows};
use fanout_core::Instant;
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
    /// Slowest member's goodput over the window, bit/s.
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
    /// Member retransmission timeouts.
    pub rto_events: u64,
    /// Member loss-recovery episodes.
    pub recovery_episodes: u64,
    /// Datagrams arriving at the sender's node per second (feedback load).
    pub feedback_pps: f64,
    /// Bits per second arriving at the sender's node.
    pub feedback_bps: f64,
    /// Datagrams the sender's node dropped for lack of processing capacity.
    pub feedback_cpu_drops: u64,
    /// Bytes sent on the sender's first link per byte delivered to one member.
    pub sender_link_bytes_per_delivered_byte: f64,
}

/// Everything `fanout sim` reports.
#[derive(Debug, Clone, Serialize)]
pub struct RunFigures {
    /// Seed of the run.
    pub seed: u64,
    /// Trace hash (FNV-1a 64) proving determinism.
    pub trace_hash: String,
    /// Window start, seconds.
    pub window_start_s: f64,
    /// Window end, seconds.
    pub window_end_s: f64,
    /// Transfer flows.
    pub flows: Vec<FlowFigures>,
    /// Jain's index over the flows' goodputs (1 if fewer than two flows).
    pub jain_index: f64,
    /// Links that carried traffic.
    pub links: Vec<LinkFigures>,
    /// One-to-many sessions.
    pub sessions: Vec<SessionFigures>,
}

/// Computes the figures of `sim` over `[from, to]`.
pub fn figures(
    sim: &Simulator,
    flows: &TransferFlows,
    sessions: &SessionFlows,
    trace_hash: u64,
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
                retransmitted_bytes: stats.retransmitted_bytes,
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
    RunFigures {
        seed: sim.seed(),
        trace_hash: format!("{trace_hash:016x}"),
        window_start_s: from.as_secs_f64(),
        window_end_s: to.as_secs_f64(),
        jain_index: if goodputs.len() < 2 {
            1.0
        } else {
            jain_index(&goodputs)
        },
        flows: flow_figs,
        links,
        sessions: sessions
            .sessions
            .iter()
            .map(|s| session_figures(sim, s, from, to))
            .collect(),
    }
}

fn session_figures(
    sim: &Simulator,
    s: &crate::session_flow::SessionFlow,
    from: Instant,
    to: Instant,
) -> SessionFigures {
    let mut goodputs: Vec<f64> = s
        .members
        .iter()
        .map(|&m| goodput_bps(sim, m, from, to))
        .collect();
    goodputs.sort_by(f64::total_cmp);
    let (stats, members) = sim
        .app::<BulkSession>(s.sender)
        .map(|b| (b.session().stats().clone(), b.session().member_count()))
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
        .members
        .iter()
        .map(|&m| crate::transfer::delivered_at(sim, m, sim.now()))
        .max()
        .unwrap_or(0);
    SessionFigures {
        members,
        members_left: stats.members_left,
        min_goodput_bps: goodputs.first().copied().unwrap_or(0.0),
        median_goodput_bps: goodputs.get(goodputs.len() / 2).copied().unwrap_or(0.0),
        max_goodput_bps: goodputs.last().copied().unwrap_or(0.0),
        data_segments: stats.data_segments,
        multicast_repairs: stats.multicast_repairs,
        unicast_repairs: stats.unicast_repairs,
        rto_events: stats.rto_events,
        recovery_episodes: stats.recovery_episodes,
        feedback_pps: node_stats.delivered_packets as f64 / secs,
        feedback_bps: node_stats.delivered_bytes as f64 * 8.0 / secs,
        feedback_cpu_drops: node_stats.drops[crate::stats::NetDrop::CpuOverflow],
        sender_link_bytes_per_delivered_byte: sent_bytes as f64 / delivered.max(1) as f64,
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
