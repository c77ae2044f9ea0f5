//! Building a topology: one namespace per host, a TUN device in each, the
//! emulator between them; all of it removed on drop.
//!
//! ```text
//!   host a (ns fo-<pid>-<n>-a)          host b (ns fo-<pid>-<m>-b)
//!     fo-tun 10.78.0.1/32                 fo-tun 10.78.0.2/32
//!     default + 224/4 via fo-tun          default + 224/4 via fo-tun
//!          \                                /
//!           +-- TUN fds, held by this process: the emulator thread --+
//!               links, routers, groups of the topology (LinkModel)
//! ```
//!
//! The root namespace gets no interface at all, so nothing a host sends can
//! leave the lab.

use crate::emu::{EmuReport, Emulator};
use crate::error::LabError;
use crate::kernel::{KernelNet, KernelReport};
use crate::steering::Steering;
use crate::topo::{Host, Profile, Topology};
use crate::tun_offload::{set_offload, TUN_F_CSUM, TUN_F_USO4, TUN_F_USO6};
use fanout_netns::Netns;
use std::net::Ipv4Addr;

/// Name of each host's TUN interface (inside its namespace).
pub const TUN_IF: &str = "fo-tun";

/// Queue length of each TUN device (datagrams waiting for the emulator).
const TUN_TXQUEUELEN: &str = "1000";

/// One host of a built lab.
#[derive(Debug)]
pub struct LabHost {
    netns: Netns,
    name: String,
    ip: Ipv4Addr,
}

impl LabHost {
    /// The host's namespace.
    pub fn netns(&self) -> &Netns {
        &self.netns
    }

    /// Name from the topology.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its address.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }
}

/// A built topology: namespaces, and either TUN devices and the running
/// emulator or (profile `kernel`) a bridge of veths in a switch namespace.
/// Dropping it stops the emulator, kills every process in the hosts and
/// deletes the namespaces (their devices go with them).
#[derive(Debug)]
pub struct Lab {
    // Drop order: the links (emulator or switch namespace) first, then the hosts.
    net: Net,
    hosts: Vec<LabHost>,
    topology: Topology,
}

/// What carries the links of a lab.
#[derive(Debug)]
enum Net {
    /// `None` once stopped.
    Emulator(Option<Emulator>),
    Kernel(KernelNet),
}

impl Lab {
    /// Builds `topo` with its profile. Namespaces are named
    /// `fo-<pid>-<n>-<label>`, unique to this process; ones left by killed
    /// earlier runs are removed first.
    pub fn build(topo: &Topology) -> Result<Self, LabError> {
        fanout_netns::cleanup_stale()?;
        if topo.profile == Profile::Kernel {
            let mut hosts = Vec::with_capacity(topo.hosts.len());
            for host in &topo.hosts {
                // On error, `hosts` drops and removes what was built so far.
                hosts.push(LabHost {
                    netns: host_namespace(host)?,
                    name: host.name.clone(),
                    ip: host.ip,
                });
            }
            let net = KernelNet::build(topo, &hosts)?;
            return Ok(Lab {
                net: Net::Kernel(net),
                hosts,
                topology: topo.clone(),
            });
        }
        let mut hosts = Vec::with_capacity(topo.hosts.len());
        let mut devices = Vec::with_capacity(topo.hosts.len());
        for host in &topo.hosts {
            // On error, `hosts` drops and removes what was built so far.
            let (lab_host, device) = build_host(host)?;
            hosts.push(lab_host);
            devices.push(device);
        }
        let steering = topo.receive_steering.then(|| steer_input(&hosts)).flatten();
        let emulator = Emulator::start(topo, devices, steering)?;
        Ok(Lab {
            net: Net::Emulator(Some(emulator)),
            hosts,
            topology: topo.clone(),
        })
    }

    /// The hosts, in topology order.
    pub fn hosts(&self) -> &[LabHost] {
        &self.hosts
    }

    /// The host named `name`.
    pub fn host(&self, name: &str) -> Option<&LabHost> {
        self.hosts.iter().find(|h| h.name == name)
    }

    /// The namespace of host `name`, or an error naming it.
    pub fn netns_of(&self, name: &str) -> Result<&Netns, LabError> {
        self.host(name).map(LabHost::netns).ok_or_else(|| {
            LabError::io(
                format!("no host {name}"),
                std::io::ErrorKind::NotFound.into(),
            )
        })
    }

    /// The topology it was built from.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Names of all its namespaces: the hosts', in order, then (kernel
    /// profile) the switch's.
    pub fn namespace_names(&self) -> Vec<String> {
        let switch = match &self.net {
            Net::Kernel(k) => Some(k.switch().name().to_owned()),
            Net::Emulator(_) => None,
        };
        self.hosts
            .iter()
            .map(|h| h.netns.name().to_owned())
            .chain(switch)
            .collect()
    }

    /// The profile it was built with.
    pub fn profile(&self) -> Profile {
        self.topology.profile
    }

    /// The emulator's link counters as last published (`None` once it
    /// was stopped, and with the kernel profile).
    pub fn snapshot(&self) -> Option<crate::emu::Snapshot> {
        match &self.net {
            Net::Emulator(e) => e.as_ref().map(Emulator::snapshot),
            Net::Kernel(_) => None,
        }
    }

    /// Stops the emulator and returns its report (the namespaces stay
    /// until the lab is dropped). A second call, or a kernel-profile lab,
    /// reports nothing.
    pub fn stop_emulator(&mut self) -> Option<EmuReport> {
        match &mut self.net {
            Net::Emulator(e) => e.take().map(Emulator::stop),
            Net::Kernel(_) => None,
        }
    }

    /// The kernel's link counters (qdiscs, nftables rules) of a
    /// kernel-profile lab; `None` with the emulator profile.
    pub fn kernel_report(&self) -> Option<KernelReport> {
        match &self.net {
            Net::Kernel(k) => Some(k.report(&self.topology, &self.hosts)),
            Net::Emulator(_) => None,
        }
    }
}

/// A namespace label from a host name: lowercase letters and digits only,
/// at most 12 (the namespace name stays unique through its counter).
fn label(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .take(12)
        .collect()
}

/// The machine-wide list of congestion controls a namespace other than the
/// initial one may choose as its default.
const ALLOWED_CC: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

/// Sets the namespace's default TCP congestion control. Outside the initial
/// namespace the kernel accepts only algorithms in [`ALLOWED_CC`] (EPERM
/// otherwise; on these machines cubic is not in it by default), so on
/// failure `cc` is added to that list — a machine-wide change that only
/// widens what unprivileged sockets may select — and the write retried.
fn set_tcp_cc(netns: &Netns, cc: &str) -> Result<(), LabError> {
    const KEY: &str = "net.ipv4.tcp_congestion_control";
    if netns.set_sysctl(KEY, cc).is_ok() {
        return Ok(());
    }
    let allowed = std::fs::read_to_string(ALLOWED_CC)
        .map_err(|e| LabError::io(format!("reading {ALLOWED_CC}"), e))?;
    if !allowed.split_whitespace().any(|a| a == cc) {
        let widened = format!("{} {cc}", allowed.trim());
        std::fs::write(ALLOWED_CC, &widened)
            .map_err(|e| LabError::io(format!("writing {widened:?} to {ALLOWED_CC}"), e))?;
        eprintln!(
            "fanout-lab: note: added {cc} to {ALLOWED_CC} (namespaces may only pick listed ones)"
        );
    }
    netns.set_sysctl(KEY, cc).map_err(LabError::from)
}

/// A host's namespace: IPv6 off, its TCP congestion control set.
fn host_namespace(host: &Host) -> Result<Netns, LabError> {
    let netns = Netns::with_label(&label(&host.name))?;
    // No IPv6 chatter (router solicitations) into the emulator.
    netns.set_sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
    netns.set_sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
    if let Some(cc) = &host.tcp_cc {
        set_tcp_cc(&netns, cc).map_err(|e| LabError::Tun {
            host: host.name.clone(),
            message: format!("setting tcp_cc {cc:?} (is the module available?): {e}"),
        })?;
    }
    Ok(netns)
}

fn build_host(host: &Host) -> Result<(LabHost, tun::Device), LabError> {
    let netns = host_namespace(host)?;
    let device = netns
        .run_in(|| {
            let mut config = tun::Configuration::default();
            config.tun_name(TUN_IF).platform_config(|p| {
                // Addresses and routes are set with `ip` below.
                p.ensure_root_privileges(false);
                // Every read and write starts with a `virtio_net_hdr`.
                p.vnet_hdr(true);
            });
            let device = tun::Device::new(&config)?;
            // Like a NIC with checksum and UDP segmentation offload: the
            // emulator completes checksums and splits UDP GSO packets
            // (emu/offload.rs), not the sending process's `sendmsg`.
            set_offload(&device, TUN_F_CSUM | TUN_F_USO4 | TUN_F_USO6)?;
            Ok::<_, tun::Error>(device)
        })?
        .map_err(|e| LabError::Tun {
            host: host.name.clone(),
            message: e.to_string(),
        })?;
    netns.ip(&["link", "set", TUN_IF, "up", "txqueuelen", TUN_TXQUEUELEN])?;
    netns.ip(&["addr", "add", &format!("{}/32", host.ip), "dev", TUN_IF])?;
    netns.ip(&["route", "add", "default", "dev", TUN_IF])?;
    netns.ip(&["route", "add", "224.0.0.0/4", "dev", TUN_IF])?;
    Ok((
        LabHost {
            netns,
            name: host.name.clone(),
            ip: host.ip,
        },
        device,
    ))
}

/// Steers the hosts' packet input away from the emulator's CPU (see
/// [`Steering`]); `None` (and a note) with one CPU, or if it could not be
/// set on every host.
fn steer_input(hosts: &[LabHost]) -> Option<Steering> {
    let steering = Steering::plan()?;
    for host in hosts {
        if let Err(e) = steering.steer(&host.netns, TUN_IF) {
            eprintln!("fanout-lab: note: no receive steering ({e}); the emulator runs the hosts' packet input");
            return None;
        }
    }
    Some(steering)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_valid_namespace_suffixes() {
        assert_eq!(label("Recv-01_extra-long-name"), "recv01extral");
        assert_eq!(label("--"), "");
    }
}
