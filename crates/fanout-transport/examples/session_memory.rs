//! Sender memory per member: resident set growth while a session admits N
//! members and runs a few rounds of data and ACKs, divided by N.
//! `cargo run --release -p fanout-transport --example session_memory -- 1000 10000`

use fanout_core::Engine;
use fanout_transport::session::bench_support::SyntheticSession;
use std::time::Duration;

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    for arg in std::env::args().skip(1) {
        let n: usize = arg.parse().expect("member count");
        let before = rss_bytes();
        let mut s = SyntheticSession::new(n);
        for _ in 0..20 {
            let cum = s.send_more(64 << 10, Duration::from_millis(1));
            for i in 0..n {
                let a = s.ack(i, cum);
                let now = s.now;
                s.session.handle_datagram(now, s.members[i], &a);
            }
        }
        let after = rss_bytes();
        println!(
            "members {n}: resident growth {:.1} MiB, {:.0} bytes per member (send buffer {} MiB included once; {} members in session)",
            (after - before) as f64 / (1 << 20) as f64,
            (after - before) as f64 / n as f64,
            8,
            s.session.member_count()
        );
    }
}
