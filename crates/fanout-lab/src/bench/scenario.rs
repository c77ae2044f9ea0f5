//! A scenario's lab topology, generated as topology-file text and parsed
//! by [`Topology::parse`] (so it gets the same validation as a hand-written
//! file).
//!
//! ```text
//!  star (no competing flow):          dumbbell (competing_tcp):
//!    snd --sender_rate-- sw             snd  --\                 /-- r1..rN
//!    r_i --receiver_rate-- sw           tsrc --- sw1 ==bn== sw2 ---- tsink
//! ```
//!
//! Every link is duplex with the scenario's delay; the receivers' links
//! carry its loss in both directions; in the dumbbell the shared link
//! `sw1 – sw2` has the bottleneck rate and delay, the TCP hosts' links the
//! sender's and receivers' rates.

use super::overlay_tree::StarLink;
use super::suite::ScenarioSpec;
use crate::error::LabError;
use crate::topo::Topology;
use fanout_sim::units::{parse_duration, parse_rate_bps};
use std::fmt::Write as _;
use std::net::Ipv4Addr;

/// Multicast groups every tool may use; members are the sender and the
/// receivers (the emulator never returns a datagram to its source).
pub const GROUPS: [Ipv4Addr; 5] = [
    FANOUT_GROUP,
    UDPCAST_RDV,
    UDPCAST_DATA,
    UFTP_PUBLIC,
    UFTP_PRIVATE,
];
/// fanout's session group.
pub const FANOUT_GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 3);
/// udpcast's rendez-vous group (its default, broadcast or 224.0.0.1, is not
/// forwarded by the emulator).
pub const UDPCAST_RDV: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 4);
/// udpcast's data group.
pub const UDPCAST_DATA: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 5);
/// uftp's announcement group (`-M`).
pub const UFTP_PUBLIC: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 6);
/// uftp's data group (`-P`).
pub const UFTP_PRIVATE: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 7);

/// Name of the sending host.
pub const SENDER: &str = "snd";
/// Name of the competing flow's source and sink hosts.
pub const TCP_SOURCE: &str = "tsrc";
/// See [`TCP_SOURCE`].
pub const TCP_SINK: &str = "tsink";

/// Name of receiver `i` (0-based): `r1`, `r2`, ….
pub fn receiver_name(i: usize) -> String {
    format!("r{}", i + 1)
}

/// One receiver's link to its switch (both directions).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReceiverLink<'a> {
    /// Rate, as written in the suite (`"100Mbit"`).
    pub rate: &'a str,
    /// One-way delay, as written.
    pub delay: &'a str,
    /// Loss probability.
    pub loss: f64,
}

/// Receiver `i`'s link (0-based): its `hosts` group's, else `slow`'s rate
/// for the first slow receivers, else the scenario's.
pub fn receiver_link(s: &ScenarioSpec, i: usize) -> ReceiverLink<'_> {
    let delay = s.receiver_delay.as_deref().unwrap_or(&s.delay);
    let mut first = 0;
    for g in &s.hosts {
        if i < first + g.count {
            return ReceiverLink {
                rate: &g.rate,
                delay: g.delay.as_deref().unwrap_or(delay),
                loss: g.loss.unwrap_or(s.loss),
            };
        }
        first += g.count;
    }
    let rate = match &s.slow {
        Some(slow) if i < slow.receivers => slow.rate.as_str(),
        _ => s.receiver_rate.as_str(),
    };
    ReceiverLink {
        rate,
        delay,
        loss: s.loss,
    }
}

/// Each receiver's link rate, bit/s (0 where it does not parse; the
/// suite's validation rejects those).
pub fn receiver_rates_bps(s: &ScenarioSpec) -> Vec<u64> {
    (0..s.receivers)
        .map(|i| parse_rate_bps(receiver_link(s, i).rate).unwrap_or(0))
        .collect()
}

/// Each host's link, the sender's first, then every receiver's (rates 0
/// and delays 0 where they do not parse; the suite's validation rejects
/// those).
pub fn star_links(s: &ScenarioSpec) -> Vec<StarLink> {
    let secs = |d: &str| parse_duration(d).map_or(0.0, |d| d.as_secs_f64());
    let sender = StarLink {
        bps: sender_rate_bps(s),
        one_way_s: secs(&s.delay),
        loss: 0.0,
    };
    std::iter::once(sender)
        .chain((0..s.receivers).map(|i| {
            let l = receiver_link(s, i);
            StarLink {
                bps: parse_rate_bps(l.rate).unwrap_or(0),
                one_way_s: secs(l.delay),
                loss: l.loss,
            }
        }))
        .collect()
}

/// The sender's link rate, bit/s (0 where it does not parse).
pub fn sender_rate_bps(s: &ScenarioSpec) -> u64 {
    parse_rate_bps(&s.sender_rate).unwrap_or(0)
}

/// The scenario's topology (no commands; the bench starts them itself).
pub fn topology(s: &ScenarioSpec) -> Result<Topology, LabError> {
    Topology::parse(&text(s), &format!("scenario {}", s.name))
}

fn link(out: &mut String, from: &str, to: &str, rate: &str, delay: &str, extra: &str) {
    let _ = writeln!(
        out,
        "[[link]]\nfrom = \"{from}\"\nto = \"{to}\"\nrate = \"{rate}\"\ndelay = \"{delay}\"\nduplex = true\n{extra}"
    );
}

/// The `loss` key of a link losing `loss` of its packets, independently or
/// in bursts of `burst` packets on average: a Gilbert–Elliott chain that
/// loses every packet in its bad state and leaves it with probability
/// 1 / `burst`, entered with the probability that makes its long-run loss
/// rate `loss` (p_gb / (p_gb + p_bg) = loss).
fn loss_text(loss: f64, burst: Option<f64>) -> String {
    if loss <= 0.0 {
        return String::new();
    }
    match burst {
        None => format!("loss = {{ model = \"bernoulli\", p = {loss} }}\n"),
        Some(b) => {
            let p_bg = 1.0 / b.max(1.0);
            let p_gb = (loss * p_bg / (1.0 - loss)).min(1.0);
            format!("loss = {{ model = \"gilbert_elliott\", p_gb = {p_gb}, p_bg = {p_bg} }}\n")
        }
    }
}

/// The topology file text of `s`.
pub fn text(s: &ScenarioSpec) -> String {
    let mut out = String::new();
    // Seed of the link models' loss draws: the same for every tool.
    out.push_str("seed = 1\n");
    let _ = writeln!(out, "profile = \"{}\"", s.profile);
    let _ = writeln!(out, "receive_steering = {}", s.receive_steering);
    let mut hosts = vec![SENDER.to_owned()];
    hosts.extend((0..s.receivers).map(receiver_name));
    for h in &hosts {
        let _ = writeln!(out, "[[host]]\nname = \"{h}\"");
    }
    if let Some(c) = &s.competing_tcp {
        for h in [TCP_SOURCE, TCP_SINK] {
            let _ = writeln!(out, "[[host]]\nname = \"{h}\"\ntcp_cc = {:?}", c.cc);
        }
    }
    let queue = s
        .queue_packets
        .map(|p| format!("queue = {{ kind = \"drop_tail\", packets = {p} }}\n"))
        .unwrap_or_default();
    let (near, far) = match &s.competing_tcp {
        None => {
            out.push_str("[[router]]\nname = \"sw\"\n");
            ("sw", "sw")
        }
        Some(c) => {
            out.push_str("[[router]]\nname = \"sw1\"\n[[router]]\nname = \"sw2\"\n");
            link(&mut out, "sw1", "sw2", &c.bottleneck_rate, &c.delay, &queue);
            link(
                &mut out,
                TCP_SOURCE,
                "sw1",
                &s.sender_rate,
                &s.delay,
                &queue,
            );
            link(
                &mut out,
                TCP_SINK,
                "sw2",
                &s.receiver_rate,
                &s.delay,
                &queue,
            );
            ("sw1", "sw2")
        }
    };
    link(&mut out, SENDER, near, &s.sender_rate, &s.delay, &queue);
    for i in 0..s.receivers {
        let l = receiver_link(s, i);
        let mut extra = format!("{queue}{}", loss_text(l.loss, s.loss_burst));
        if let Some(r) = &s.reorder {
            let _ = writeln!(extra, "reorder = {{ p = {}, extra = {:?} }}", r.p, r.extra);
        }
        link(&mut out, &receiver_name(i), far, l.rate, l.delay, &extra);
    }
    let members = hosts
        .iter()
        .map(|h| format!("{h:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    for g in GROUPS {
        let _ = writeln!(out, "[[group]]\naddr = \"{g}\"\nmembers = [{members}]");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::suite::{Competing, HostGroup, Slow};
    use crate::topo::Profile;

    fn spec() -> ScenarioSpec {
        ScenarioSpec {
            name: "x".into(),
            title: "t".into(),
            receivers: 3,
            sender_rate: "1Gbit".into(),
            receiver_rate: "100Mbit".into(),
            delay: "1ms".into(),
            receiver_delay: None,
            loss: 0.01,
            loss_burst: None,
            reorder: None,
            slow: Some(Slow {
                receivers: 1,
                rate: "20Mbit".into(),
            }),
            hosts: Vec::new(),
            competing_tcp: None,
            queue_packets: Some(50),
            timeout: None,
            receive_steering: false,
            tcp_reference: false,
            tcp_reference_s: None,
            profile: Default::default(),
        }
    }

    #[test]
    fn bursty_loss_keeps_its_long_run_rate() {
        let mut s = spec();
        s.loss = 0.05;
        s.loss_burst = Some(4.0);
        let t = topology(&s).unwrap();
        let r1 = t.host_by_name("r1").unwrap();
        let to_r1 = t.links.iter().find(|l| l.to == r1).unwrap();
        assert!((to_r1.config.loss.stationary_loss_rate() - 0.05).abs() < 1e-9);
        assert!(loss_text(0.05, Some(4.0)).contains("gilbert_elliott"));
        assert!(loss_text(0.0, Some(4.0)).is_empty());
    }

    #[test]
    fn the_kernel_profile_is_asked_for_and_refuses_delay() {
        assert_eq!(topology(&spec()).unwrap().profile, Profile::Emulator);
        let mut s = spec();
        s.profile = Profile::Kernel;
        s.slow = None;
        let e = topology(&s).unwrap_err().to_string();
        assert!(e.contains("delay"), "{e}");
        s.delay = "0ms".into();
        assert_eq!(topology(&s).unwrap().profile, Profile::Kernel);
    }

    #[test]
    fn steering_is_off_unless_the_scenario_asks() {
        assert!(!topology(&spec()).unwrap().receive_steering);
        let mut s = spec();
        s.receive_steering = true;
        assert!(topology(&s).unwrap().receive_steering);
    }

    #[test]
    fn star_has_the_configured_links() {
        let t = topology(&spec()).unwrap();
        assert_eq!(t.hosts.len(), 4);
        assert_eq!(t.links.len(), 8);
        let r1 = t.host_by_name("r1").unwrap();
        let to_r1 = t.links.iter().find(|l| l.to == r1).unwrap();
        assert_eq!(to_r1.config.rate_bps, 20_000_000);
        let r2 = t.host_by_name("r2").unwrap();
        let to_r2 = t.links.iter().find(|l| l.to == r2).unwrap();
        assert_eq!(to_r2.config.rate_bps, 100_000_000);
        assert!(to_r2.config.loss.stationary_loss_rate() > 0.009);
        let snd = t.host_by_name(SENDER).unwrap();
        let from_snd = t.links.iter().find(|l| l.from == snd).unwrap();
        assert_eq!(from_snd.config.loss.stationary_loss_rate(), 0.0);
        assert_eq!(t.groups.len(), GROUPS.len());
        assert_eq!(t.groups[0].members.len(), 4);
    }

    #[test]
    fn host_groups_give_each_receiver_its_link() {
        let mut s = spec();
        s.slow = None;
        s.receivers = 4;
        s.hosts = vec![
            HostGroup {
                count: 2,
                rate: "100Mbit".into(),
                delay: None,
                loss: Some(0.0),
            },
            HostGroup {
                count: 1,
                rate: "10Mbit".into(),
                delay: Some("40ms".into()),
                loss: None,
            },
            HostGroup {
                count: 1,
                rate: "50Mbit".into(),
                delay: None,
                loss: Some(0.05),
            },
        ];
        assert_eq!(
            receiver_rates_bps(&s),
            [100_000_000, 100_000_000, 10_000_000, 50_000_000]
        );
        assert_eq!(receiver_link(&s, 2).delay, "40ms");
        assert_eq!(receiver_link(&s, 1).delay, "1ms");
        let t = topology(&s).unwrap();
        let into = |h: &str| {
            let h = t.host_by_name(h).unwrap();
            t.links.iter().find(|l| l.to == h).unwrap().config
        };
        assert_eq!(into("r3").rate_bps, 10_000_000);
        assert_eq!(into("r1").loss.stationary_loss_rate(), 0.0);
        // The scenario's loss where the group names none.
        assert!((into("r3").loss.stationary_loss_rate() - 0.01).abs() < 1e-9);
        assert!((into("r4").loss.stationary_loss_rate() - 0.05).abs() < 1e-9);
        assert_eq!(sender_rate_bps(&s), 1_000_000_000);
    }

    #[test]
    fn dumbbell_puts_tcp_hosts_outside_the_groups() {
        let mut s = spec();
        s.competing_tcp = Some(Competing {
            bottleneck_rate: "100Mbit".into(),
            delay: "10ms".into(),
            cc: "cubic".into(),
            warmup_s: 2.0,
        });
        let t = topology(&s).unwrap();
        let src = t.host_by_name(TCP_SOURCE).unwrap();
        assert_eq!(t.hosts[src].tcp_cc.as_deref(), Some("cubic"));
        assert!(t.groups.iter().all(|g| !g.members.contains(&src)));
        assert_eq!(t.routers, ["sw1", "sw2"]);
    }
}
