//! Where a session's data goes: multicast once to the group, or a unicast copy
//! to each receiver — asked for with `--unicast`, or chosen automatically, and
//! said so, when the group cannot be used (its socket options are refused or no
//! route covers it, at the start, or a send to it fails later). Also the
//! receiver's side: the socket a member joins a session on.

use anyhow::{bail, ensure, Context, Result};
use fanout_core::{Engine, Instant};
use fanout_io::{Driver, EndpointConfig, RunStats, UdpEndpoint};
use fanout_transport::session::SessionSender;
use serde::Serialize;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// How a session sender was asked to deliver.
#[derive(Debug, Clone, Copy)]
pub struct SessionSpec {
    /// Multicast group (`--group`), if any.
    pub group: Option<SocketAddr>,
    /// `--unicast`: fan out by unicast even if a group is given.
    pub unicast: bool,
    /// Local address (`--bind`), the one receivers name in `--from`.
    pub bind: SocketAddr,
    /// Multicast TTL / hop limit, hops.
    pub ttl: u32,
}

/// How the session's data actually reaches receivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Each segment is sent once, to this group.
    Multicast(SocketAddr),
    /// Each segment is sent once per receiver, to its own address.
    Unicast {
        /// Why the group was not used, for an automatic fallback; `None`
        /// when `--unicast` asked for it.
        fallback: Option<String>,
    },
}

/// [`Delivery`] as the `--json` report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryReport {
    /// "multicast" or "unicast".
    pub mode: &'static str,
    /// The group, when multicast.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Why unicast was chosen automatically (absent when asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

impl Delivery {
    /// The group to multicast to (`SessionConfig::group`); `None` fans out.
    pub fn group(&self) -> Option<SocketAddr> {
        match self {
            Delivery::Multicast(g) => Some(*g),
            Delivery::Unicast { .. } => None,
        }
    }

    /// The report form.
    pub fn report(&self) -> DeliveryReport {
        match self {
            Delivery::Multicast(g) => DeliveryReport {
                mode: "multicast",
                group: Some(g.to_string()),
                fallback: None,
            },
            Delivery::Unicast { fallback } => DeliveryReport {
                mode: "unicast",
                group: None,
                fallback: fallback.clone(),
            },
        }
    }

    /// Where the report says the data went: the group, or "unicast".
    pub fn peer_label(&self) -> String {
        self.group()
            .map_or("unicast fan-out".into(), |g| g.to_string())
    }
}

/// Chooses the delivery: `--unicast` wins; otherwise the group must be a
/// multicast address of the bind address's IP version (a mistake in the
/// flags is an error, not a reason to fall back); then `setup` prepares the
/// socket for it, and if that fails the session falls back to unicast.
pub fn decide(
    spec: &SessionSpec,
    setup: impl FnOnce(SocketAddr) -> Result<()>,
) -> Result<Delivery> {
    if spec.unicast {
        return Ok(Delivery::Unicast { fallback: None });
    }
    let Some(group) = spec.group else {
        bail!("a session needs --group GROUP:PORT or --unicast");
    };
    ensure!(
        group.ip().is_multicast(),
        "--group {group}: {} is not a multicast address",
        group.ip()
    );
    ensure!(
        group.is_ipv4() == spec.bind.is_ipv4(),
        "--group {group} and --bind {} are of different IP versions",
        spec.bind
    );
    Ok(match setup(group) {
        Ok(()) => Delivery::Multicast(group),
        Err(e) => Delivery::Unicast {
            // The outermost message only: socket errors already name their cause.
            fallback: Some(format!("cannot use multicast group {group}: {e}")),
        },
    })
}

/// Multicast socket options for sending to `group`, then a route check.
fn setup_group(ep: &UdpEndpoint, group: SocketAddr, ttl: u32) -> Result<()> {
    match ep.local_addr().ip() {
        IpAddr::V4(local) => {
            ep.set_multicast_ttl_v4(ttl)?;
            ep.set_multicast_loop_v4(true)?;
            if !local.is_unspecified() {
                ep.set_multicast_if_v4(local)?;
            }
        }
        IpAddr::V6(_) => ep.set_multicast_hops_v6(ttl)?,
    }
    ep.check_multicast_route(group).map_err(|e| {
        let cause = std::error::Error::source(&e).map_or(e.to_string(), |s| s.to_string());
        anyhow::anyhow!("no route to the group ({cause})")
    })
}

/// Binds the session sender's socket and decides the delivery; an
/// automatic fallback is announced on stderr (always: it changes what the
/// sender's link carries).
pub fn open_sender_endpoint(spec: &SessionSpec) -> Result<(UdpEndpoint, Delivery)> {
    let ep = UdpEndpoint::bind(spec.bind).with_context(|| format!("cannot bind {}", spec.bind))?;
    let delivery = decide(spec, |g| setup_group(&ep, g, spec.ttl))?;
    if let Delivery::Unicast {
        fallback: Some(why),
    } = &delivery
    {
        eprintln!(
            "fanout: warning: {why}; falling back to unicast fan-out (one copy per receiver)"
        );
    }
    Ok((ep, delivery))
}

/// Runs a session sender's event loop like [`Driver::run`], and falls back
/// to unicast fan-out — announced on stderr and recorded in `delivery` —
/// if the kernel refuses a send to the group (e.g. its route went away
/// mid-session). `session` reaches the [`SessionSender`] inside `engine`.
pub fn run_session<E: Engine>(
    driver: &mut Driver,
    engine: &mut E,
    delivery: &mut Delivery,
    session: impl Fn(&mut E) -> &mut SessionSender,
    mut stop: impl FnMut(&mut E, Instant) -> bool,
) -> Result<RunStats> {
    let max_wait = driver.config().max_wait;
    while !stop(engine, driver.clock().now()) {
        driver.step(engine, max_wait)?;
        let Some((to, error)) = driver.take_send_error() else {
            continue;
        };
        if fanout_io::is_message_too_long(&error) {
            // Too large for the route, not a group that cannot be used:
            // unicast copies would be just as large.
            let hint = match driver.endpoint().route_mtu(to) {
                Ok(mtu) => format!(
                    "the route's MTU is {mtu}: give --max-datagram {} or less",
                    crate::net_opts::datagram_for_mtu(mtu)
                ),
                Err(_) => "give --max-datagram a smaller size".into(),
            };
            bail!("sending to {to} failed: a datagram is larger than the route carries ({error}); {hint}");
        }
        if let Delivery::Multicast(group) = *delivery {
            if to == group {
                let why = format!("sending to multicast group {group} failed ({error})");
                eprintln!(
                    "fanout: warning: {why}; falling back to unicast fan-out \
                     (one copy per receiver)"
                );
                session(engine).fall_back_to_unicast();
                *delivery = Delivery::Unicast {
                    fallback: Some(why),
                };
            }
        }
    }
    driver.flush_queued(driver.config().linger)?;
    Ok(driver.stats())
}

/// How a receiver joins a session.
#[derive(Debug, Clone, Copy)]
pub struct JoinSpec {
    /// The group to join, if the sender multicasts.
    pub group: Option<SocketAddr>,
    /// The session sender (`None`: to be discovered on the group).
    pub from: Option<SocketAddr>,
    /// Local IPv4 interface address to join on (kernel's choice if absent).
    pub interface: Option<Ipv4Addr>,
    /// Local address without a group (default: any address, any port).
    pub listen: Option<SocketAddr>,
    /// Accept the group's datagrams from this source only (source-specific
    /// multicast, RFC 4607); same address family as the group.
    pub source: Option<IpAddr>,
}

/// Binds a member's socket: on the group's port, joined to the group (for
/// one source only with `source`); or,
/// without a group, on `listen` (data then comes by unicast only). A group
/// that cannot be joined is reported on stderr and the member goes on by
/// unicast — which works when the sender fans out by unicast.
pub fn open_member_endpoint(spec: &JoinSpec) -> Result<UdpEndpoint> {
    let Some(group) = spec.group else {
        let bind = spec.listen.unwrap_or(match spec.from {
            Some(SocketAddr::V6(_)) => SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), 0),
            _ => SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0),
        });
        return UdpEndpoint::bind(bind).with_context(|| format!("cannot bind {bind}"));
    };
    ensure!(
        group.ip().is_multicast(),
        "--group {group}: {} is not a multicast address",
        group.ip()
    );
    let bind = match group {
        SocketAddr::V4(_) => SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), group.port()),
        SocketAddr::V6(_) => SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), group.port()),
    };
    let config = EndpointConfig {
        reuse_address: true,
        ..EndpointConfig::default()
    };
    let ep =
        UdpEndpoint::bind_with(bind, &config).with_context(|| format!("cannot bind {bind}"))?;
    let interface = spec.interface.unwrap_or(Ipv4Addr::UNSPECIFIED);
    let joined = match (group.ip(), spec.source) {
        (IpAddr::V4(g), None) => ep.join_multicast_v4(g, interface),
        (IpAddr::V4(g), Some(IpAddr::V4(source))) => {
            ep.join_source_multicast_v4(g, source, interface)
        }
        (IpAddr::V6(g), Some(IpAddr::V6(source))) => ep.join_source_multicast_v6(g, source, 0),
        (g, Some(source)) => {
            bail!("--source {source}: not of the group {g}'s address family")
        }
        (ip @ IpAddr::V6(_), None) => ep.join_multicast(ip),
    };
    if let Err(e) = joined {
        eprintln!(
            "fanout: warning: cannot join {}: {e}; receiving by unicast only \
             (works if the sender fans out by unicast)",
            group.ip()
        );
    }
    Ok(ep)
}

/// A session member's sockets: its own unicast socket (everything it sends
/// and the sender's unicast replies), and, for a multicast session, a
/// receive-only socket on the group's port, joined to the group. Several
/// members on one host share the group's port but each has its own
/// address, so the sender tells them apart.
#[derive(Debug)]
pub struct MemberSockets {
    /// The member's own socket (its address in the session).
    pub unicast: UdpEndpoint,
    /// The group's port, joined to the group (`None` without a group).
    pub group: Option<UdpEndpoint>,
}

/// How a member finds its session sender ([`join_session`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Discovery<'a> {
    /// Give up waiting for an announcement after this long (`None`: never).
    pub wait: Option<Duration>,
    /// Always wait for an announcement, with `--from` (if given) only as a
    /// filter, and never join these sessions (a service's finished ones).
    pub skip: Option<&'a [u64]>,
    /// No lines on stderr.
    pub quiet: bool,
}

/// The session a member joins: its sender, its id if an announcement
/// named it, and what the path from it carries if its probes showed less
/// than its data needs.
#[derive(Debug, Clone, Copy)]
pub struct Found {
    /// The sender's address.
    pub sender: SocketAddr,
    /// The session id its announcement carried.
    pub session: Option<u64>,
    /// The largest of the sender's path probes that arrived, bytes of UDP
    /// payload, when none as large as its data did in
    /// [`PATH_ROUNDS`] rounds of announcements
    /// (`fanout_transport::wire::path_probe`): a link on the way takes
    /// less. `None`: the data's size arrives, or nothing is known (no
    /// announcement heard, or not even the smallest probe arrived).
    pub path_carries: Option<usize>,
}

/// Whole rounds of announcements (each an OFFER and its padded probes) a
/// joiner hears before it concludes that the sender's data-sized probe
/// does not reach it: one lost probe is not taken for a small path.
pub const PATH_ROUNDS: u32 = 2;

/// A member's sockets and the session sender it joins: the one `from`
/// (`--from`, resolved) names, or, with a group and no `from` (or with
/// [`Discovery::skip`]), the first that announces a session on the group
/// ([`discover_sender`]).
pub fn join_session(
    from: Option<&str>,
    spec: JoinSpec,
    how: Discovery<'_>,
) -> Result<(MemberSockets, Found)> {
    let from = from.map(crate::cmd_send::resolve).transpose()?;
    let spec = JoinSpec { from, ..spec };
    let sockets = open_member_sockets(&spec)?;
    if let (Some(sender), None) = (from, how.skip) {
        let found = Found {
            sender,
            session: None,
            path_carries: None,
        };
        return Ok((sockets, found));
    }
    let (group, group_ep) = spec
        .group
        .zip(sockets.group.as_ref())
        .context("--from HOST:PORT is needed without --group")?;
    if !how.quiet {
        eprintln!("fanout: waiting for a sender to announce a session on {group}");
    }
    let only = from.map(|f| f.ip());
    let found = discover_sender(group_ep, group, only, how.skip.unwrap_or(&[]), how.wait)?;
    if !how.quiet {
        eprintln!("fanout: joining the session of {}", found.sender);
    }
    Ok((sockets, found))
}

/// The datagram size a member asks for: what its route toward the sender
/// carries ([`crate::net_opts::TransportOpts::fit_path`]), or less if the
/// sender's path probes showed that a link on the way takes less
/// ([`Found::path_carries`]) — the sender then fits its datagrams to it,
/// if no data went out yet.
pub fn fit_member_path(
    net: &crate::net_opts::TransportOpts,
    endpoint: &UdpEndpoint,
    found: &Found,
    quiet: bool,
) -> crate::net_opts::PathReport {
    let mut path = net.fit_path(endpoint, found.sender);
    if let Some(carries) = found.path_carries.filter(|&c| c < path.max_datagram) {
        if !quiet {
            eprintln!(
                "fanout: the sender's data-sized datagrams do not reach this host, its \
                 {carries}-byte probes do (a link on the way takes less): asking for \
                 {carries}-byte datagrams"
            );
        }
        path.max_datagram = carries;
        path.probed = Some(carries);
    }
    path
}

/// Opens a member's sockets ([`MemberSockets`]): with a group, the group's
/// port ([`open_member_endpoint`]) and a unicast socket on the interface's
/// address (or any), any port; without, the one unicast socket.
pub fn open_member_sockets(spec: &JoinSpec) -> Result<MemberSockets> {
    let Some(group) = spec.group else {
        return Ok(MemberSockets {
            unicast: open_member_endpoint(spec)?,
            group: None,
        });
    };
    let group_ep = open_member_endpoint(spec)?;
    let ip: IpAddr = match (group, spec.interface) {
        (SocketAddr::V4(_), Some(i)) => i.into(),
        (SocketAddr::V4(_), None) => Ipv4Addr::UNSPECIFIED.into(),
        (SocketAddr::V6(_), _) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let bind = SocketAddr::new(ip, 0);
    let unicast = UdpEndpoint::bind(bind).with_context(|| match spec.interface {
        Some(i) => {
            format!("--interface {i}: cannot bind a socket there (not an address of this host?)")
        }
        None => format!("cannot bind {bind}"),
    })?;
    Ok(MemberSockets {
        unicast,
        group: Some(group_ep),
    })
}

/// Waits on `endpoint` (joined to `group`) for a session's announcement (an
/// OFFER multicast to the group, `docs/wire.md` §4.13) and returns its
/// sender: the first announcer (from `only`, if given) of a session not in
/// `skip`. Gives up after `wait` (`None`: never), or when interrupted.
/// Other datagrams on the group (a running session's data) are skipped.
pub fn discover_sender(
    endpoint: &UdpEndpoint,
    group: SocketAddr,
    only: Option<IpAddr>,
    skip: &[u64],
    wait: Option<Duration>,
) -> Result<Found> {
    use fanout_transport::wire::{decode_frames, Frame, Header};
    let clock = fanout_io::Clock::new();
    endpoint.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut buf = vec![0u8; 1 << 16];
    let mut probes: Option<ProbesHeard> = None;
    let found = loop {
        if crate::interrupt::interrupted() {
            return Err(crate::interrupt::error("no sender had been found"));
        }
        if let Some(limit) = wait {
            ensure!(
                clock.now() - fanout_core::Instant::ZERO < limit,
                "no sender announced a session on {group} within {} s \
                 (is one running with --group {group}?)",
                limit.as_secs()
            );
        }
        let (n, from) = match endpoint.recv_from(&mut buf) {
            Ok(got) => got,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("waiting for a sender's announcement"),
        };
        if only.is_some_and(|ip| ip != from.ip()) {
            continue;
        }
        let Ok((header, frames)) = Header::decode(&buf[..n]) else {
            continue;
        };
        let Some(Ok(Frame::Offer(offer))) = decode_frames(frames).next() else {
            // The session's data, as long as its announcements said: the
            // path carries it.
            if let Some(h) = probes
                .as_ref()
                .filter(|h| h.is_data_sized(from, header.session_id, n))
            {
                break Found {
                    sender: h.sender,
                    session: Some(h.session),
                    path_carries: None,
                };
            }
            continue;
        };
        if skip.contains(&header.session_id) {
            continue;
        }
        let now = clock.now();
        // The first session announced is the one joined, unless it falls
        // silent (it ended before its rounds were heard) and another
        // announces itself.
        let silent = |h: &ProbesHeard| now - h.last > CANDIDATE_SILENCE;
        if probes
            .as_ref()
            .is_none_or(|h| (from, header.session_id) != (h.sender, h.session) && silent(h))
        {
            probes = Some(ProbesHeard::new(from, header.session_id, now));
        }
        let Some(heard) = probes.as_mut() else {
            continue;
        };
        if let Some(path_carries) = heard.verdict(now, from, header.session_id, n, frames, &offer) {
            break Found {
                sender: from,
                session: Some(header.session_id),
                path_carries,
            };
        }
    };
    endpoint.set_read_timeout(None)?;
    Ok(found)
}

/// How long the session being discovered may stay silent before another
/// one announced is taken instead: three announcement intervals once data
/// flows.
const CANDIDATE_SILENCE: Duration = Duration::from_secs(3);

/// The announcements and path probes heard from the first session
/// announced, while discovering it ([`discover_sender`]).
#[derive(Debug)]
struct ProbesHeard {
    sender: SocketAddr,
    session: u64,
    /// When it was last heard.
    last: Instant,
    /// Unpadded announcements heard: each starts a round.
    announcements: u32,
    /// Largest padded announcement heard, bytes.
    largest: usize,
    /// The size of a full DATA datagram, at least, bytes: a header and the
    /// payload its announcements name.
    data: usize,
}

impl ProbesHeard {
    fn new(sender: SocketAddr, session: u64, now: Instant) -> Self {
        ProbesHeard {
            sender,
            session,
            last: now,
            announcements: 0,
            largest: 0,
            data: usize::MAX,
        }
    }

    /// Whether a datagram of `len` bytes from `from` for `session` is as
    /// long as the session's data.
    fn is_data_sized(&self, from: SocketAddr, session: u64, len: usize) -> bool {
        (from, session) == (self.sender, self.session) && len >= self.data
    }

    /// An announcement `offer` of `len` bytes (frames `frames`) from
    /// `from` for `session`: `Some` once the session can be joined, with
    /// what the path carries if less than the data needs
    /// ([`Found::path_carries`]). Another session's announcements are not
    /// counted.
    fn verdict(
        &mut self,
        now: Instant,
        from: SocketAddr,
        session: u64,
        len: usize,
        frames: &[u8],
        offer: &fanout_transport::wire::OfferFrame,
    ) -> Option<Option<usize>> {
        use fanout_transport::wire::{path_probe, HEADER_LEN};
        if (from, session) != (self.sender, self.session) {
            return None;
        }
        self.last = now;
        let data =
            HEADER_LEN.saturating_add(usize::try_from(offer.max_payload).unwrap_or(usize::MAX));
        self.data = data;
        if len >= data {
            return Some(None);
        }
        match path_probe::announcement(frames) {
            Some(true) => self.largest = self.largest.max(len),
            _ => self.announcements += 1,
        }
        // The first announcement heard may come in the middle of a round:
        // whole rounds end at the second and later ones.
        (self.announcements > PATH_ROUNDS).then_some((self.largest > 0).then_some(self.largest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An announcement of a session of 1400-byte payloads, padded to
    /// `padded_to` bytes if given: its bytes and its OFFER.
    fn announcement(padded_to: Option<usize>) -> (Vec<u8>, fanout_transport::wire::OfferFrame) {
        use fanout_transport::wire::{path_probe, Frame, OfferFrame, WireTimestamp};
        let offer = OfferFrame {
            max_payload: 1400,
            timestamp: WireTimestamp(0),
        };
        let mut buf = Vec::new();
        let mut numbers = fanout_transport::PacketNumbers::default();
        let mut p = fanout_transport::PacketBuilder::new(&mut buf, &mut numbers, 7, true);
        p.frame(&Frame::Offer(offer));
        p.finish();
        if let Some(len) = padded_to {
            path_probe::pad(&mut buf, 0, len);
        }
        (buf, offer)
    }

    #[test]
    fn discovery_learns_what_a_path_carries_from_whole_rounds_of_probes() {
        use fanout_transport::wire::HEADER_LEN;
        let sender: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let other: SocketAddr = "10.0.0.9:5000".parse().unwrap();
        let hear = |h: &mut ProbesHeard, from, session, padded: Option<usize>| {
            let (d, offer) = announcement(padded);
            h.verdict(
                Instant::ZERO,
                from,
                session,
                d.len(),
                &d[HEADER_LEN..],
                &offer,
            )
        };
        // Only the probes up to 1352 bytes arrive (the 1452-byte one, as
        // large as the data, never does): known after two whole rounds,
        // the first announcement having come mid-round.
        let mut h = ProbesHeard::new(sender, 7, Instant::ZERO);
        for round in 0..PATH_ROUNDS {
            assert_eq!(hear(&mut h, sender, 7, None), None, "round {round}");
            // Another session's, even a full-sized one, does not count.
            assert_eq!(hear(&mut h, other, 8, Some(1452)), None);
            assert_eq!(hear(&mut h, sender, 7, Some(1232)), None);
            assert_eq!(hear(&mut h, sender, 7, Some(1352)), None);
        }
        assert_eq!(hear(&mut h, sender, 7, None), Some(Some(1352)));
        // A data-sized probe arrives: the path carries the data, at once
        // (one lost in an earlier round is not taken for a small path).
        let mut h = ProbesHeard::new(sender, 7, Instant::ZERO);
        assert_eq!(hear(&mut h, sender, 7, None), None);
        assert_eq!(hear(&mut h, sender, 7, Some(1232)), None);
        assert_eq!(hear(&mut h, sender, 7, None), None);
        assert_eq!(hear(&mut h, sender, 7, Some(1452)), Some(None));
        // Or the session's data does, as long as its announcements said.
        let mut h = ProbesHeard::new(sender, 7, Instant::ZERO);
        assert!(!h.is_data_sized(sender, 7, 1452), "no announcement yet");
        assert_eq!(hear(&mut h, sender, 7, None), None);
        assert!(h.is_data_sized(sender, 7, HEADER_LEN + 1400));
        assert!(!h.is_data_sized(sender, 7, HEADER_LEN + 1399));
        assert!(!h.is_data_sized(other, 7, 1452));
        // Not even the smallest probe arrives: nothing is known.
        let mut h = ProbesHeard::new(sender, 7, Instant::ZERO);
        let verdicts: Vec<_> = (0..=PATH_ROUNDS)
            .map(|_| hear(&mut h, sender, 7, None))
            .collect();
        assert_eq!(verdicts.last(), Some(&Some(None)), "{verdicts:?}");
    }

    fn spec(group: Option<&str>, unicast: bool, bind: &str) -> SessionSpec {
        SessionSpec {
            group: group.map(|g| g.parse().unwrap()),
            unicast,
            bind: bind.parse().unwrap(),
            ttl: 1,
        }
    }

    #[test]
    fn unicast_flag_wins_without_touching_the_group() {
        let d = decide(&spec(Some("239.1.1.1:7000"), true, "10.0.0.1:6000"), |_| {
            panic!("no group setup when --unicast")
        })
        .unwrap();
        assert_eq!(d, Delivery::Unicast { fallback: None });
        assert_eq!(d.group(), None);
        let d = decide(&spec(None, true, "10.0.0.1:6000"), |_| unreachable!()).unwrap();
        assert_eq!(d.report().mode, "unicast");
    }

    #[test]
    fn a_usable_group_is_multicast_and_a_failing_one_falls_back() {
        let s = spec(Some("239.1.1.1:7000"), false, "10.0.0.1:6000");
        let d = decide(&s, |_| Ok(())).unwrap();
        assert_eq!(d, Delivery::Multicast("239.1.1.1:7000".parse().unwrap()));
        let d = decide(&s, |_| bail!("Network is unreachable (os error 101)")).unwrap();
        let Delivery::Unicast {
            fallback: Some(why),
        } = &d
        else {
            panic!("{d:?}")
        };
        assert!(
            why.contains("239.1.1.1:7000") && why.contains("unreachable"),
            "{why}"
        );
        assert!(d.report().fallback.is_some());
    }

    #[test]
    fn flag_mistakes_are_errors_not_fallbacks() {
        let ok = |_| Ok(());
        assert!(decide(&spec(None, false, "10.0.0.1:6000"), ok).is_err());
        assert!(decide(&spec(Some("10.0.0.9:7000"), false, "10.0.0.1:6000"), ok).is_err());
        assert!(decide(&spec(Some("[ff15::1]:7000"), false, "10.0.0.1:6000"), ok).is_err());
    }

    #[test]
    fn real_socket_setup_on_loopback_multicasts() {
        // Bound to a specific address, Linux routes multicast out of its
        // interface: the real setup succeeds and no fallback happens.
        let s = spec(Some("239.255.77.2:7000"), false, "127.0.0.1:0");
        let (_ep, d) = open_sender_endpoint(&s).unwrap();
        assert_eq!(d, Delivery::Multicast("239.255.77.2:7000".parse().unwrap()));
    }
}
