//! The static-membership check both lab profiles' tests run: hosts join a
//! group, one host sends to it, and only the file's members may receive.

use fanout_lab::Lab;
use std::net::{Ipv4Addr, UdpSocket};
use std::time::Duration;

/// Datagrams [`received_per_joiner`] sends.
pub const SENT: u32 = 20;

/// Every host of `joiners` joins `group` on `port`; after `settle` (time
/// for IGMP reports to go out), host `sender` sends [`SENT`] 64-byte
/// datagrams to the group. Returns how many each joiner received (reading
/// until 500 ms pass without one), in order.
pub fn received_per_joiner(
    lab: &Lab,
    sender: &str,
    joiners: &[&str],
    group: Ipv4Addr,
    port: u16,
    settle: Duration,
) -> Vec<u32> {
    let sockets: Vec<UdpSocket> = joiners
        .iter()
        .map(|name| {
            let h = lab.host(name).unwrap();
            let ip = h.ip();
            h.netns()
                .run_in(move || {
                    let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, port))?;
                    s.join_multicast_v4(&group, &ip)?;
                    s.set_read_timeout(Some(Duration::from_millis(500)))?;
                    Ok::<_, std::io::Error>(s)
                })
                .unwrap()
                .unwrap()
        })
        .collect();
    std::thread::sleep(settle);
    let s = lab.host(sender).unwrap();
    let s_ip = s.ip();
    let tx = s
        .netns()
        .run_in(move || UdpSocket::bind((s_ip, 0)))
        .unwrap()
        .unwrap();
    for i in 0..SENT {
        tx.send_to(&[i as u8; 64], (group, port)).unwrap();
    }
    sockets
        .iter()
        .map(|sock| {
            let mut buf = [0u8; 128];
            let mut n = 0;
            while sock.recv(&mut buf).is_ok() {
                n += 1;
            }
            n
        })
        .collect()
}
