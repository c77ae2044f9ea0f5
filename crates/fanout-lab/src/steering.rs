//! Receive steering: the emulator thread keeps one CPU, and the kernel's
//! input path of the packets it writes runs on the others.
//!
//! A write into a TUN device runs the receiving namespace's IP and UDP
//! input (up to waking the receiving process) inside the `write` call, so
//! without steering the one emulator thread pays for every host's packet
//! reception: at 16 receivers × 100 Mbit/s (~120 000 deliveries/s) that
//! is most of a core, and its releases slip. With Receive Packet Steering
//! (RPS, the kernel's `Documentation/networking/scaling.rst`) set on each
//! host's TUN device to the CPUs the emulator does not use, the write only
//! queues the packet to another CPU's backlog, as a NIC's interrupt handler
//! would; the input path runs there in softirq context.
//!
//! On this project's 2-vCPU VMs the win is the receivers' wake-ups: a tool
//! whose receivers sleep in `recvfrom` for every datagram (udpcast, uftp)
//! is woken by the writer, and a cross-CPU wake-up is an inter-processor
//! interrupt, a hypervisor exit: 28% of the emulator's profile in scenario
//! (e) with udpcast. Steered, the emulator's p99 lateness there fell from
//! 2.0–5.5 ms to 0.11–0.22 ms (docs/lab.md, "Capacity").
//!
//! Needs at least two CPUs; with one, nothing is changed. A topology can
//! turn it off with `receive_steering = false`.

use crate::error::LabError;
use fanout_netns::Netns;
use serde::Serialize;

/// Where the emulator and the hosts' packet input run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Steering {
    /// The CPU the emulator thread is pinned to.
    pub emulator_cpu: usize,
    /// The CPUs that run the hosts' packet input (RPS), ascending.
    pub input_cpus: Vec<usize>,
}

impl Steering {
    /// The plan for this process: the emulator on the highest CPU it may
    /// run on, input on all the others; `None` with fewer than two CPUs.
    pub fn plan() -> Option<Steering> {
        let allowed = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()?;
        let cpus: Vec<usize> = (0..nix::sched::CpuSet::count())
            .filter(|&c| allowed.is_set(c).unwrap_or(false))
            .collect();
        let (&emulator_cpu, input) = cpus.split_last()?;
        (!input.is_empty()).then(|| Steering {
            emulator_cpu,
            input_cpus: input.to_vec(),
        })
    }

    /// The `rps_cpus` bitmap of [`Steering::input_cpus`]: hex, in 32-bit
    /// groups separated by commas, most significant first (the kernel's
    /// `bitmap_parse` format).
    pub fn rps_mask(&self) -> String {
        let words = self.input_cpus.iter().max().map_or(1, |&c| c / 32 + 1);
        let mut bits = vec![0u32; words];
        for &c in &self.input_cpus {
            bits[c / 32] |= 1 << (c % 32);
        }
        bits.iter()
            .rev()
            .map(|w| format!("{w:08x}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Steers the input of `device` in `netns` to the input CPUs. `sysfs`
    /// shows a namespace's devices only when mounted from inside it, which
    /// `ip netns exec` does.
    pub fn steer(&self, netns: &Netns, device: &str) -> Result<(), LabError> {
        let path = format!("/sys/class/net/{device}/queues/rx-0/rps_cpus");
        let output = netns
            .exec("sh")
            .args(["-c", &format!("printf %s {} > {path}", self.rps_mask())])
            .output()
            .map_err(|e| LabError::io(format!("setting {path} in {}", netns.name()), e))?;
        if output.status.success() {
            return Ok(());
        }
        Err(LabError::io(
            format!("setting {path} in {}", netns.name()),
            std::io::Error::other(String::from_utf8_lossy(&output.stderr).trim().to_owned()),
        ))
    }

    /// Pins the calling thread to [`Steering::emulator_cpu`].
    pub fn pin_emulator(&self) -> bool {
        let mut set = nix::sched::CpuSet::new();
        set.set(self.emulator_cpu).is_ok()
            && nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask(input_cpus: &[usize]) -> String {
        Steering {
            emulator_cpu: 0,
            input_cpus: input_cpus.to_vec(),
        }
        .rps_mask()
    }

    #[test]
    fn masks_are_hex_in_32_bit_groups() {
        assert_eq!(mask(&[0]), "00000001");
        assert_eq!(mask(&[0, 2, 3]), "0000000d");
        assert_eq!(mask(&[31]), "80000000");
        assert_eq!(mask(&[1, 32]), "00000001,00000002");
        assert_eq!(mask(&[70]), "00000040,00000000,00000000");
    }

    #[test]
    fn the_plan_leaves_the_emulator_cpu_out_of_the_input_cpus() {
        if let Some(plan) = Steering::plan() {
            assert!(!plan.input_cpus.contains(&plan.emulator_cpu));
            assert!(plan.input_cpus.iter().all(|&c| c < plan.emulator_cpu));
        }
    }
}
