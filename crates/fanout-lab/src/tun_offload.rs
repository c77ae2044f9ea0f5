//! `TUNSETOFFLOAD` on a TUN device: which offloads the host's kernel may
//! hand the emulator (see `emu/offload.rs`, which performs them).
//!
//! This is fanout-lab's only `unsafe` code: the `tun` crate opens the
//! device with `IFF_VNET_HDR` but has no call for this ioctl, neither nix
//! nor rustix wraps it, and `tun-rs` (which does) would replace the device
//! crate and always turns TCP segmentation offload on too. It is one `ioctl` whose argument is a plain
//! integer passed by value (`_IOW('T', 208, unsigned int)`, read by the
//! kernel as the `unsigned long` argument itself, not through a pointer).

#![allow(unsafe_code)]

use nix::libc;
use std::io;
use std::os::fd::AsRawFd;

/// `TUN_F_CSUM`: the device takes packets with partial checksums.
pub(crate) const TUN_F_CSUM: u32 = libc::TUN_F_CSUM;
/// `TUN_F_USO4`: the device takes UDP GSO packets over IPv4 (Linux ≥ 6.2).
pub(crate) const TUN_F_USO4: u32 = libc::TUN_F_USO4;
/// `TUN_F_USO6`: the same over IPv6. The kernel accepts USO only as both
/// (one feature, `NETIF_F_GSO_UDP_L4`); IPv6 is off in the lab's hosts, and
/// an IPv6 GSO packet would be dropped as malformed by the emulator.
pub(crate) const TUN_F_USO6: u32 = libc::TUN_F_USO6;

/// Offers the `TUN_F_*` offloads in `flags` on `device` (replacing any
/// earlier set); fails with the kernel's error (EINVAL for an unknown flag
/// on an older kernel).
pub(crate) fn set_offload(device: &impl AsRawFd, flags: u32) -> io::Result<()> {
    // SAFETY: TUNSETOFFLOAD takes its argument by value (no pointer is
    // passed or kept); an invalid descriptor or flag yields an error code.
    let rc = unsafe {
        libc::ioctl(
            device.as_raw_fd(),
            libc::TUNSETOFFLOAD,
            libc::c_ulong::from(flags),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
