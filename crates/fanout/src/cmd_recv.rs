//! `fanout recv --listen ADDR:PORT -o PATH`.

use crate::net_opts::TransportOpts;
use crate::outcome::tell_sender_of_failure;
use crate::progress::bytes_bar;
use crate::recv_counters::{close_label, receiver_counters};
use crate::report::{
    drops_map, goodput_bps, peak_rss_bytes, version_hint, OutputOpts, TransferReport,
};
use crate::resume::{retire_old_member, RecordKeeper, ResumeRecord};
use crate::security_opts::Side;
use crate::session_net::MemberSockets;
use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use fanout_app::{FileIntake, Manifest, Piece};
use fanout_io::{Clock, Existing, OutputTree, UdpEndpoint};
use fanout_transport::{AllowedSenders, Receiver};
use ipnet::IpNet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

/// Arguments of `fanout recv`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  # one file from one sender (`fanout send FILE --to THIS-HOST:7000`)
  fanout recv --listen 0.0.0.0:7000 -o downloads/
  # join a multicast session on a given interface
  fanout recv --group 239.1.1.1:7000 --from 192.0.2.1:6000 \\
      --interface 192.0.2.7 -o downloads/
  # only from a sender holding the key whose .pub this is
  fanout recv --group 239.1.1.1:7000 --from 192.0.2.1:6000 \\
      --key recv.key --sender-key sender.key.pub -o downloads/

Exit codes: 0 received and verified; 1 failed; 2 bad command line;
130 interrupted (the sender is told).")]
pub struct RecvArgs {
    /// Address to listen on for one unicast sender, e.g. `0.0.0.0:7000` or `[::]:7000`.
    /// With --from (no --group): the local address to join from.
    #[arg(long, value_name = "ADDR:PORT", required_unless_present_any = ["group", "from"])]
    pub listen: Option<SocketAddr>,
    /// Join this multicast group and the session of the first sender that
    /// announces one on it (`fanout send --group`), or of the sender --from
    /// names.
    #[arg(long, value_name = "GROUP:PORT", conflicts_with = "listen")]
    pub group: Option<SocketAddr>,
    /// The session sender (its `--bind` address), e.g. `192.0.2.1:6000`:
    /// with --group, joins it without waiting for its announcement (and
    /// whatever else announces on the group); alone, joins its session by
    /// unicast (a sender run with `--unicast`, or fallen back to it).
    #[arg(long, value_name = "HOST:PORT")]
    pub from: Option<String>,
    /// With --group: the local IPv4 address of the interface to join on
    /// (default: the kernel's choice).
    #[arg(long, value_name = "ADDR")]
    pub interface: Option<std::net::Ipv4Addr>,
    /// With --group: accept its datagrams from this source only
    /// (source-specific multicast: IGMPv3 for IPv4, MLDv2 for IPv6; the
    /// address family of the group), usually the sender's address.
    #[arg(long, value_name = "ADDR", requires = "group")]
    pub source: Option<std::net::IpAddr>,
    #[command(flatten)]
    pub merger: crate::merger_opts::MergerOpts,
    /// Where to write: a file path, or an existing directory (the sender's
    /// file name is used inside it). Several files or a directory tree
    /// from the sender need a directory; they arrive by their names in it.
    #[arg(short, long, value_name = "PATH")]
    pub output: PathBuf,
    /// With --listen: answer only senders at these addresses or inside
    /// these networks (e.g. `192.0.2.10,198.51.100.0/24,2001:db8::/32`);
    /// other senders' offers are dropped unanswered. Only as strong as the
    /// network's protection against forged source addresses.
    #[arg(
        long,
        value_name = "ADDR|NET,...",
        value_delimiter = ',',
        requires = "listen",
        conflicts_with_all = ["group", "from"],
        value_parser = parse_network
    )]
    pub allow_from: Vec<IpNet>,
    /// Replace an existing file at the output path (by default the transfer
    /// is refused before any byte is written). Only a verified file
    /// replaces it.
    #[arg(long)]
    pub overwrite: bool,
    /// Give up if no sender connects within this many seconds (0 = wait forever).
    #[arg(long, default_value_t = 0, value_name = "SECS")]
    pub wait: u64,
    #[command(flatten)]
    pub out: OutputOpts,
    #[command(flatten, next_help_heading = "Service")]
    pub service: crate::cmd_serve::ServiceOpts,
    #[command(flatten)]
    pub net: TransportOpts,
}

/// One incoming session: the file protocol's intake ([`FileIntake`])
/// writing into `.part` files ([`OutputTree`]), moved into place once the
/// hash matched.
struct Incoming {
    output: PathBuf,
    existing: Existing,
    intake: FileIntake,
    target: Option<OutputTree>,
    /// The body's BLAKE3, once verified.
    blake3: Option<[u8; 32]>,
}

impl Incoming {
    fn new(output: PathBuf, existing: Existing) -> Self {
        Incoming {
            output,
            existing,
            intake: FileIntake::new(),
            target: None,
            blake3: None,
        }
    }

    fn manifest(&self) -> Option<&Manifest> {
        self.intake.manifest()
    }

    fn consume(&mut self, data: &[u8]) -> Result<()> {
        let (output, existing) = (&self.output, self.existing);
        let target = &mut self.target;
        let mut at = self.intake.body_done();
        self.intake
            .consume(data, &mut |piece| match piece {
                Piece::Manifest(m) => {
                    *target = Some(OutputTree::create(output, m, existing)?);
                    Ok(())
                }
                Piece::Body(b) => {
                    let r = match target.as_mut() {
                        Some(t) => t.write_at(at, b),
                        None => Ok(()),
                    };
                    at += b.len() as u64;
                    r
                }
            })
            .context("cannot write the output")?;
        Ok(())
    }

    /// Checks the hash and moves the `.part` files into place; or removes
    /// them.
    fn complete(&mut self) -> Result<()> {
        let target = self
            .target
            .as_mut()
            .context("the stream ended before the file's manifest")?;
        let hash = match self.intake.finish() {
            Ok(h) => h,
            Err(e) => {
                target.discard();
                bail!("{e}: {} discarded", target.path().display());
            }
        };
        target
            .commit()
            .context("cannot move the files into place")?;
        self.blake3 = Some(hash);
        Ok(())
    }

    fn abandon(&mut self, keeper: &RecordKeeper) {
        if let Some(target) = &mut self.target {
            target.discard();
        }
        keeper.remove();
    }

    /// Keeps what arrived for a later attempt to resume (the record says
    /// how much); discards it if it cannot be kept or resumed.
    fn keep(&mut self, keeper: &mut RecordKeeper) {
        if !keeper.is_kept() {
            return self.abandon(keeper);
        }
        let (Some(m), Some(t)) = (self.intake.manifest(), self.target.as_mut()) else {
            return;
        };
        match t.keep() {
            Ok(()) => keeper.save(m, t),
            Err(_) => self.abandon(keeper),
        }
    }

    /// Records how much arrived, now and then.
    fn record(&self, keeper: &mut RecordKeeper, now: fanout_core::time::Instant) {
        if let (Some(m), Some(t)) = (self.intake.manifest(), self.target.as_ref()) {
            keeper.update(now, m, t);
        }
    }
}

/// An address (a network of one) or a network in CIDR notation.
fn parse_network(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("{s:?} is neither an address nor a network (ADDR/PREFIX)"))
}

impl RecvArgs {
    /// The senders a listening receiver answers.
    fn allowed_senders(&self) -> AllowedSenders {
        if self.allow_from.is_empty() {
            AllowedSenders::Any
        } else {
            AllowedSenders::Networks(self.allow_from.clone())
        }
    }

    /// What to do with an existing file at the output path.
    pub(crate) fn existing(&self) -> Existing {
        if self.overwrite {
            Existing::Replace
        } else {
            Existing::Refuse
        }
    }
}

/// Checks, before joining anything, that a file can be written at
/// `output` (a file path, or a directory to write the sender's file name
/// into): its directory exists and takes a new file, and an existing file
/// is not there to be replaced without `--overwrite`. The free space is
/// checked once the file's size is known.
pub(crate) fn check_output(output: &Path, existing: Existing) -> Result<()> {
    let dir = if output.is_dir() {
        output.to_path_buf()
    } else {
        let parent = match output.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        ensure!(
            parent.is_dir(),
            "output directory {} does not exist",
            parent.display()
        );
        ensure!(
            existing == Existing::Replace || output.symlink_metadata().is_err(),
            "{} exists; refusing to replace it (--overwrite allows it)",
            output.display()
        );
        parent
    };
    // A probe file, created and removed at once: a read-only or
    // unwritable directory fails here and not after the sender started.
    let probe = dir.join(format!(".fanout-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        // A stale probe of an earlier process with this id: not ours to remove.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot write into {}", dir.display())),
    }
}

/// Binds the socket: `--listen` for a unicast sender, or a session
/// member's socket (`--from`, joined to `--group` if given). Returns it and,
/// for a session, the sender to join.
fn open_endpoint(
    args: &RecvArgs,
    skip: Option<&[u64]>,
    joined: &mut Option<u64>,
) -> Result<(MemberSockets, Option<crate::session_net::Found>)> {
    if args.from.is_none() && args.group.is_none() {
        let listen = args
            .listen
            .context("--listen, --group or --from is required")?;
        let ep = UdpEndpoint::bind(listen).with_context(|| format!("cannot listen on {listen}"))?;
        let sockets = MemberSockets {
            unicast: ep,
            group: None,
        };
        return Ok((sockets, None));
    }
    let (sockets, found) = crate::session_net::join_session(
        args.from.as_deref(),
        crate::session_net::JoinSpec {
            group: args.group,
            from: None,
            interface: args.interface,
            listen: args.listen,
            source: args.source,
        },
        crate::session_net::Discovery {
            wait: (args.wait > 0).then(|| std::time::Duration::from_secs(args.wait)),
            skip,
            quiet: args.out.quiet || args.out.json,
        },
    )?;
    *joined = found.session;
    Ok((sockets, Some(found)))
}

/// Receives one file; returns the report. `bound` (if given) learns the
/// local address once the socket is bound (port 0 → chosen port).
pub fn recv(args: &RecvArgs, bound: Option<mpsc::Sender<SocketAddr>>) -> Result<TransferReport> {
    recv_session(args, bound, None, &mut None, &mut |_| {})
}

/// How far a transfer is, for a service's status file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Progress<'a> {
    /// The session's sender.
    pub sender: SocketAddr,
    /// The session's id.
    pub session: Option<u64>,
    /// What is being received (the manifest's name), once known.
    pub name: Option<&'a str>,
    /// Body bytes in all, once known.
    pub size: Option<u64>,
    /// Body bytes written so far.
    pub done: u64,
}

impl Progress<'_> {
    /// Tells `progress` how far `r` is (once a sender admitted it): the
    /// manifest, if known, and `done` body bytes written.
    pub fn report(
        progress: &mut dyn FnMut(&Progress),
        r: &Receiver,
        manifest: Option<&Manifest>,
        done: u64,
    ) {
        if let Some(sender) = r.peer() {
            progress(&Progress {
                sender,
                session: r.session_id(),
                name: manifest.map(|m| m.name.as_str()),
                size: manifest.map(|m| m.size),
                done,
            });
        }
    }
}

/// Least time between two [`Progress`] reports.
pub(crate) const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// When the next [`Progress`] report is due: at once when the transfer
/// starts and when its manifest arrives, then every [`PROGRESS_EVERY`].
#[derive(Default)]
pub(crate) struct ProgressTicker {
    next: Option<fanout_core::time::Instant>,
    named: bool,
}

impl ProgressTicker {
    /// True (and the next one scheduled) if a report is due at `now`;
    /// `named`: the manifest is known.
    pub fn due(&mut self, now: fanout_core::time::Instant, named: bool) -> bool {
        let news = named && !self.named;
        if !news && self.next.is_some_and(|t| now < t) {
            return false;
        }
        self.named = named;
        self.next = Some(now + PROGRESS_EVERY);
        true
    }
}

/// [`recv`], finding the sender by its announcement of a session not in
/// `skip` when `skip` is given (`--from` then only filters); `joined`
/// learns the session's id as soon as it is found, even if the transfer
/// then fails; `progress` hears how far it is, about every second.
pub(crate) fn recv_session(
    args: &RecvArgs,
    bound: Option<mpsc::Sender<SocketAddr>>,
    skip: Option<&[u64]>,
    joined: &mut Option<u64>,
    progress: &mut dyn FnMut(&Progress),
) -> Result<TransferReport> {
    check_output(&args.output, args.existing())?;
    let (sockets, found) = open_endpoint(args, skip, joined)?;
    let join = found.map(|f| f.sender);
    let endpoint = &sockets.unicast;
    let local_port = endpoint.local_addr().port();
    if !args.out.quiet {
        eprintln!("fanout: listening on {}", endpoint.local_addr());
    }
    args.net.security.warn_if_unprotected(args.out.quiet);
    if let Some(tx) = bound {
        let _ = tx.send(endpoint.local_addr());
    }
    // A joiner tells the sender the largest payload its route carries
    // (CONNECT's max_payload); a listener learns its peer only later.
    let quiet = args.out.quiet || args.out.json;
    let path = found.map(|f| crate::session_net::fit_member_path(&args.net, endpoint, &f, quiet));
    let clock = Clock::new();
    let mut driver = args.net.member_driver(sockets, clock)?;
    let mut transport = args.net.transport_on(Side::Receiver, path.as_ref())?;
    args.merger
        .apply(&mut transport, &args.net.security, join)?;
    let mut receiver = match join {
        Some(sender) => Receiver::join(transport, sender, clock.now()),
        None => Receiver::listen_from(
            args.net.transport(Side::Receiver)?,
            args.allowed_senders(),
            clock.now(),
        ),
    };
    let mut inc = Incoming::new(args.output.clone(), args.existing());
    let mut keeper = RecordKeeper::new(&args.output, None);
    let mut ticker = ProgressTicker::default();
    let mut buf = vec![0u8; 1 << 20];
    let mut app_error: Option<anyhow::Error> = None;
    let mut bar = None;
    let mut started = None;
    let give_up = (args.wait > 0).then(|| clock.now() + std::time::Duration::from_secs(args.wait));
    crate::interrupt::watch();
    let stats = driver.run(&mut receiver, |r, now| {
        if crate::interrupt::reset_if_interrupted(r) {
            return true;
        }
        if r.peer().is_none() {
            // Not admitted yet: a refusal ends the wait as a timeout does.
            return r.is_closed() || give_up.is_some_and(|t| now >= t);
        }
        if started.is_none() {
            started = Some(now);
            // Only a session member can come back to its session.
            let session = join.and(r.session_id());
            keeper = RecordKeeper::new(&args.output, session);
            keeper.set_member(r, local_port, args.net.security.mode() == "none");
            // Back in a session this output took part in: the old member,
            // if it can be named, is let go at once (`crate::resume`).
            let old = session.and_then(|s| ResumeRecord::load(&args.output, s));
            if let (Some((port, token)), Some(sender)) = (old.and_then(|o| o.member), r.peer()) {
                if port != local_port {
                    retire_old_member(sender, args.interface, (port, token));
                }
            }
        }
        if r.start_offset() > 0 {
            // Joined after the file's start was released: the missed
            // prefix comes by catch-up (`catch_up`).
            return true;
        }
        while app_error.is_none() {
            let n = r.read(&mut buf);
            if n == 0 {
                break;
            }
            if let Err(e) = inc.consume(&buf[..n]) {
                tell_sender_of_failure(r, &e);
                app_error = Some(e);
            }
        }
        inc.record(&mut keeper, now);
        if ticker.due(now, inc.manifest().is_some()) {
            Progress::report(progress, r, inc.manifest(), inc.intake.body_done());
        }
        if let Some(m) = inc.manifest() {
            let b = bar
                .get_or_insert_with(|| bytes_bar(m.size, "recv", args.out.quiet || args.out.json));
            b.set_position(inc.intake.body_done());
        }
        r.is_closed() || (r.is_finished() && app_error.is_some())
    });
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let stats = stats?;
    if crate::interrupt::interrupted() && !receiver.is_finished() {
        inc.keep(&mut keeper);
        return Err(crate::interrupt::error(if receiver.peer().is_some() {
            "the sender was told; what arrived is kept to resume"
        } else {
            "no sender had admitted this receiver"
        }));
    }
    if receiver.start_offset() > 0 && !receiver.is_closed() {
        let started = started.unwrap_or_else(|| clock.now());
        return crate::catch_up::receive_rest(
            args,
            &mut driver,
            &mut receiver,
            clock,
            started,
            progress,
        );
    }
    let Some(peer) = receiver.peer() else {
        if let Some(why) = receiver.close_reason() {
            bail!("the sender did not admit this receiver: {why}");
        }
        bail!(
            "no sender connected within {} s{}",
            args.wait,
            version_hint(&receiver.stats().drops)
        );
    };
    if let Some(e) = app_error {
        inc.abandon(&keeper);
        return Err(e);
    }
    if !receiver.is_finished() {
        // The sender went away or gave up on this receiver: what arrived
        // is kept, and a receiver joining this session again resumes.
        inc.keep(&mut keeper);
        let why = receiver
            .close_reason()
            .map_or("unknown".into(), |r| r.to_string());
        bail!(
            "transfer from {peer} incomplete: {why}{}",
            version_hint(&receiver.stats().drops)
        );
    }
    let completed = inc.complete();
    keeper.remove();
    completed?;
    let m = inc.manifest().cloned().context("no manifest")?;
    let seconds = started.map_or(0.0, |t| (clock.now() - t).as_secs_f64());
    let st = receiver.stats();
    let mut transport = receiver_counters(st);
    transport.insert("recv_syscalls", stats.recv_syscalls);
    Ok(TransferReport {
        role: "recv",
        files: match (&inc.target, m.is_tree()) {
            (Some(t), true) => t.files().iter().map(|p| p.display().to_string()).collect(),
            _ => Vec::new(),
        },
        peer: peer.to_string(),
        file: inc
            .target
            .as_ref()
            .map_or(m.name.clone(), |t| t.path().display().to_string()),
        bytes: m.size,
        seconds,
        goodput_bps: goodput_bps(m.size, seconds),
        blake3: inc
            .blake3
            .map(|h| blake3::Hash::from(h).to_hex().to_string())
            .unwrap_or_default(),
        verified: inc.blake3.is_some(),
        close: close_label(&receiver),
        transport,
        drops: drops_map(&st.drops),
        injected_drops: stats.impair_rx.dropped(),
        peak_rss_bytes: peak_rss_bytes(),
        members: Vec::new(),
        delivery: None,
        path,
        protection: args.net.security.mode(),
        receivers: None,
    })
}

/// Runs `fanout recv` (`--serve`: [`crate::cmd_serve::serve`]).
pub fn run(args: RecvArgs) -> Result<()> {
    if args.service.serve {
        return crate::cmd_serve::serve(&args);
    }
    recv(&args, None)?.print(args.out.json);
    Ok(())
}
