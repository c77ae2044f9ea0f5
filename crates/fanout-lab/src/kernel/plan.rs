//! What the kernel profile can build from a topology, and what it refuses.
//!
//! The kernel profile maps a star — one router, every link between a host
//! and it — onto one Linux bridge: each host gets a veth pair whose two
//! directions are the host's uplink (host → router) and downlink (router →
//! host). Each direction is shaped by its own tbf qdisc with a DropTail
//! child (`pfifo`/`bfifo`), and loses packets at random with an nftables
//! `numgen random` rule at its far end (after serialization, as the
//! simulator's `LinkModel` does). What the kernel here cannot do — delay
//! (no netem), RED (no `sch_red`), Gilbert–Elliott loss (no state in a
//! stateless rule) — is rejected with the link named: never approximated.

use crate::topo::Topology;
use fanout_sim::queue::QueueLimit;
use fanout_sim::{LossSpec, QueueConfig};

/// Ethernet header bytes each frame carries on a veth on top of the IP
/// datagram (no VLAN tag, no FCS on veth).
pub const ETH_HEADER: u64 = 14;
/// A full-size frame: 1500-byte IP datagram plus [`ETH_HEADER`].
pub const FULL_FRAME: u64 = 1500 + ETH_HEADER;
/// The loss rule draws `numgen random mod LOSS_SCALE`: probabilities are
/// rounded to multiples of 1/`LOSS_SCALE` (1e-9).
pub const LOSS_SCALE: u64 = 1_000_000_000;
/// tbf bucket: this much time at the link's rate …
pub const BURST_NANOS: u64 = 2_000_000;
/// … but at least this many full-size frames.
pub const BURST_MIN_FRAMES: u64 = 4;

/// The shaping of one directed link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// Index of the link in [`Topology::links`].
    pub link: usize,
    /// tbf rate in bit/s of Ethernet frames: the configured rate (which
    /// counts IP bytes, like the emulator) times `FULL_FRAME / 1500`, so
    /// full-size datagrams get the configured IP rate.
    pub tbf_rate_bps: u64,
    /// tbf bucket, bytes: [`BURST_NANOS`] at `tbf_rate_bps`, at least
    /// [`BURST_MIN_FRAMES`] full frames (the qdisc's timer may fire late on
    /// a loaded machine; a bucket this deep keeps the long-run rate).
    pub burst_bytes: u64,
    /// The DropTail queue behind the bucket.
    pub queue: QueueLimit,
    /// `numgen random mod LOSS_SCALE < loss_below` drops; 0: no rule.
    pub loss_below: u64,
}

/// The build plan for one host: its two link directions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostPlan {
    /// Host → router.
    pub up: Shape,
    /// Router → host.
    pub down: Shape,
}

/// The kernel profile's reading of a topology.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelPlan {
    /// Per host, in topology order.
    pub hosts: Vec<HostPlan>,
}

/// Checks that `topo` fits the kernel profile and says how to build it;
/// the error names the first entry that does not fit.
pub fn plan(topo: &Topology) -> Result<KernelPlan, String> {
    const WHY: &str = "the kernel profile builds one bridge";
    let router = match topo.routers.as_slice() {
        [only] => only,
        other => {
            return Err(format!(
                "profile \"kernel\": {WHY}, so it needs exactly one [[router]] with every \
                 link between a host and it; found {} routers (use profile = \"emulator\")",
                other.len()
            ))
        }
    };
    let r = topo.hosts.len();
    let names = topo.node_names();
    let mut up: Vec<Option<Shape>> = vec![None; topo.hosts.len()];
    let mut down: Vec<Option<Shape>> = vec![None; topo.hosts.len()];
    for (i, l) in topo.links.iter().enumerate() {
        let at = format!("link {} -> {}", names[l.from], names[l.to]);
        let (host, slot) = match (l.from == r, l.to == r) {
            (false, true) => (l.from, &mut up),
            (true, false) => (l.to, &mut down),
            _ => {
                return Err(format!(
                    "profile \"kernel\": {at}: {WHY}, every link must join a host and \
                     router {router:?}"
                ))
            }
        };
        let shape = shape(i, &topo.links[i].config)
            .map_err(|e| format!("profile \"kernel\": {at}: {e} (use profile = \"emulator\")"))?;
        if slot[host].replace(shape).is_some() {
            return Err(format!(
                "profile \"kernel\": {at} is given twice (one veth per host: one link each way)"
            ));
        }
    }
    let hosts = up
        .into_iter()
        .zip(down)
        .enumerate()
        .map(|(h, pair)| match pair {
            (Some(up), Some(down)) => Ok(HostPlan { up, down }),
            (_, missing) => {
                let (from, to) = if missing.is_none() {
                    (router.as_str(), names[h])
                } else {
                    (names[h], router.as_str())
                };
                Err(format!(
                    "profile \"kernel\": no link {from} -> {to}: a veth carries both \
                     directions, so give both (or `duplex = true`)"
                ))
            }
        })
        .collect::<Result<_, _>>()?;
    Ok(KernelPlan { hosts })
}

/// The shaping of link `index`, or why the kernel cannot emulate it.
fn shape(index: usize, c: &fanout_sim::LinkConfig) -> Result<Shape, String> {
    if !c.delay.is_zero() {
        return Err(format!(
            "delay {:?}: the kernel profile has no delay (this kernel has no netem)",
            c.delay
        ));
    }
    if !c.reorder.is_none() {
        return Err(
            "reorder: the kernel profile cannot hold packets back (this kernel has no netem)"
                .into(),
        );
    }
    let loss_below = match c.loss {
        LossSpec::None => 0,
        LossSpec::Bernoulli { p } => (p * LOSS_SCALE as f64).round() as u64,
        LossSpec::GilbertElliott { .. } => {
            return Err(
                "Gilbert-Elliott loss: the kernel profile has Bernoulli loss only \
                 (a stateless nftables rule)"
                    .into(),
            )
        }
    };
    let queue = match c.queue {
        QueueConfig::DropTail { limit } => limit,
        QueueConfig::Red(_) => {
            return Err("RED queue: this kernel has no RED qdisc (sch_red)".into());
        }
    };
    if matches!(queue, QueueLimit::Packets(0)) || matches!(queue, QueueLimit::Bytes(b) if b.0 == 0)
    {
        return Err("queue limit 0: a qdisc needs room for one packet".into());
    }
    let tbf_rate_bps = u64::try_from(u128::from(c.rate_bps) * u128::from(FULL_FRAME) / 1500)
        .unwrap_or(u64::MAX)
        .max(1);
    let burst_time =
        u64::try_from(u128::from(tbf_rate_bps) * u128::from(BURST_NANOS) / 8 / 1_000_000_000)
            .unwrap_or(u64::MAX);
    Ok(Shape {
        link: index,
        tbf_rate_bps,
        burst_bytes: burst_time.max(BURST_MIN_FRAMES * FULL_FRAME),
        queue,
        loss_below,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAR: &str = r#"
        [[host]]
        name = "a"
        [[host]]
        name = "b"
        [[router]]
        name = "sw"
        [[link]]
        from = "a"
        to = "sw"
        rate = "100Mbit"
        duplex = true
        [[link]]
        from = "sw"
        to = "b"
        rate = "10Mbit"
        loss = { model = "bernoulli", p = 0.05 }
        queue = { kind = "drop_tail", packets = 30 }
        [[link]]
        from = "b"
        to = "sw"
        rate = "10Mbit"
        queue = { kind = "drop_tail", bytes = "20KB" }
    "#;

    fn plan_of(text: &str) -> Result<KernelPlan, String> {
        plan(&Topology::parse(text, "t.toml").map_err(|e| e.to_string())?)
    }

    #[test]
    fn a_star_maps_to_shapes() {
        let p = plan_of(STAR).unwrap();
        let a = p.hosts[0];
        assert_eq!((a.up.link, a.down.link), (0, 1));
        assert_eq!(a.up.tbf_rate_bps, 100_933_333);
        // 2 ms at ~100.9 Mbit/s.
        assert_eq!(a.up.burst_bytes, 25_233);
        assert_eq!(a.up.queue, QueueLimit::Packets(100));
        assert_eq!(a.up.loss_below, 0);
        let b = p.hosts[1];
        assert_eq!((b.up.link, b.down.link), (3, 2));
        assert_eq!(b.down.loss_below, 50_000_000);
        assert_eq!(b.down.queue, QueueLimit::Packets(30));
        // 2 ms at 10 Mbit/s is less than 4 frames.
        assert_eq!(b.down.burst_bytes, 4 * FULL_FRAME);
        assert!(matches!(b.up.queue, QueueLimit::Bytes(x) if x.0 == 20_000));
    }

    #[test]
    fn the_file_key_and_the_override_both_check_the_topology() {
        use crate::topo::Profile;
        let delayed = STAR.replace("rate = \"100Mbit\"", "rate = \"100Mbit\"\ndelay = \"1ms\"");
        let e = Topology::parse(&format!("profile = \"kernel\"\n{delayed}"), "t.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("t.toml: profile \"kernel\": link a -> sw: delay 1ms"),
            "{e}"
        );
        let t = Topology::parse(&delayed, "t.toml").unwrap();
        assert_eq!(t.profile, Profile::Emulator);
        assert!(t.with_profile(Profile::Kernel).is_err());
        let t = Topology::parse(&format!("profile = \"kernel\"\n{STAR}"), "t.toml").unwrap();
        assert_eq!(t.profile, Profile::Kernel);
        let e = Topology::parse(&format!("profile = \"netem\"\n{STAR}"), "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown variant `netem`"), "{e}");
        assert_eq!("kernel".parse::<Profile>(), Ok(Profile::Kernel));
        assert!("fast".parse::<Profile>().is_err());
    }

    fn error_of(text: &str) -> String {
        plan_of(text).unwrap_err()
    }

    #[test]
    fn what_the_kernel_cannot_do_is_refused_by_name() {
        let e =
            error_of(&STAR.replace("rate = \"100Mbit\"", "rate = \"100Mbit\"\ndelay = \"5ms\""));
        assert!(
            e.contains("link a -> sw: delay 5ms") && e.contains("netem"),
            "{e}"
        );
        let e = error_of(&STAR.replace(
            "queue = { kind = \"drop_tail\", packets = 30 }",
            "queue = { kind = \"red\", min_th = 1000, max_th = 3000, bytes = \"10KB\" }",
        ));
        assert!(e.contains("link sw -> b: RED"), "{e}");
        let e = error_of(&STAR.replace(
            "{ model = \"bernoulli\", p = 0.05 }",
            "{ model = \"gilbert_elliott\", p_gb = 0.01, p_bg = 0.5 }",
        ));
        assert!(e.contains("link sw -> b: Gilbert-Elliott"), "{e}");
        let e =
            error_of(&STAR.replace("name = \"sw\"", "name = \"sw\"\n[[router]]\nname = \"r2\""));
        assert!(
            e.contains("exactly one [[router]]") && e.contains("found 2"),
            "{e}"
        );
        let e = error_of(&STAR.replace(
            "from = \"sw\"\n        to = \"b\"",
            "from = \"a\"\n        to = \"b\"",
        ));
        assert!(
            e.contains("link a -> b") && e.contains("join a host"),
            "{e}"
        );
        let e = error_of(&format!(
            "{STAR}\n[[link]]\nfrom = \"a\"\nto = \"sw\"\nrate = \"1Mbit\"\n"
        ));
        assert!(e.contains("link a -> sw is given twice"), "{e}");
        let three = STAR.replacen("[[host]]", "[[host]]\nname = \"c\"\n[[host]]", 1);
        let e = error_of(&three.replacen(
            "[[link]]",
            "[[link]]\nfrom = \"c\"\nto = \"sw\"\nrate = \"1Mbit\"\n[[link]]",
            1,
        ));
        assert!(e.contains("no link sw -> c"), "{e}");
    }
}
