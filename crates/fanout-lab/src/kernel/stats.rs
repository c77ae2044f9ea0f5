//! Reading the kernel's own counters: `tc -s qdisc show` (what each link's
//! tbf sent and dropped) and `nft list table` (what the loss and IGMP
//! rules dropped).

use std::collections::BTreeMap;

/// Counters of a root qdisc, from `tc -s qdisc show`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QdiscStats {
    /// Bytes dequeued (Ethernet frames).
    pub sent_bytes: u64,
    /// Frames dequeued.
    pub sent_packets: u64,
    /// Frames dropped (the child DropTail queue was full, or larger than
    /// the bucket).
    pub dropped: u64,
}

/// The root tbf qdisc's counters per device, from `tc -s qdisc show`
/// output covering a whole namespace:
///
/// ```text
/// qdisc tbf 1: dev fo-p0 root refcnt 2 rate 10Mbit burst 5000b lat 76ms
///  Sent 3028 bytes 2 pkt (dropped 1, overlimits 0 requeues 0)
/// ```
pub fn parse_tc(text: &str) -> BTreeMap<String, QdiscStats> {
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let mut tokens = line.split_whitespace();
        match tokens.next() {
            Some("qdisc") => {
                let tokens: Vec<&str> = line.split_whitespace().collect();
                let root = tokens.contains(&"root") && tokens.get(1) == Some(&"tbf");
                current = root
                    .then(|| tokens.iter().position(|t| *t == "dev"))
                    .flatten()
                    .and_then(|i| tokens.get(i + 1))
                    .map(|d| (*d).to_owned());
            }
            Some("Sent") => {
                let Some(dev) = current.take() else { continue };
                let rest: Vec<&str> = tokens.collect();
                let num = |i: usize| {
                    rest.get(i)
                        .and_then(|t| t.trim_end_matches(',').parse::<u64>().ok())
                };
                // Sent <bytes> bytes <pkts> pkt (dropped <n>, ...
                if let (Some(bytes), Some(pkts), Some(dropped)) = (num(0), num(2), num(5)) {
                    out.insert(
                        dev,
                        QdiscStats {
                            sent_bytes: bytes,
                            sent_packets: pkts,
                            dropped,
                        },
                    );
                }
            }
            _ => {}
        }
    }
    out
}

/// Packets counted by each named counter in `nft list table` output:
///
/// ```text
/// table netdev fanout_lab {
///     counter loss_p0 {
///         packets 12 bytes 1536
///     }
/// ```
pub fn parse_nft_counters(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let tokens: Vec<&str> = line.split_whitespace().collect();
        match tokens.as_slice() {
            ["counter", name, "{"] => current = Some((*name).to_owned()),
            ["packets", n, "bytes", _] => {
                if let (Some(name), Ok(n)) = (current.take(), n.parse::<u64>()) {
                    out.insert(name, n);
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tc_root_tbf_counters_per_device() {
        let text = "qdisc noqueue 0: dev fo-br root refcnt 2 \n \
            Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n \
            backlog 0b 0p requeues 0\n\
            qdisc tbf 1: dev fo-p0 root refcnt 2 rate 10Mbit burst 5000b lat 76ms \n \
            Sent 3028 bytes 2 pkt (dropped 7, overlimits 3 requeues 0) \n \
            backlog 0b 0p requeues 0\n\
            qdisc pfifo 10: dev fo-p0 parent 1:1 limit 100p\n \
            Sent 3028 bytes 2 pkt (dropped 7, overlimits 0 requeues 0) \n\
            qdisc ingress ffff: dev fo-p0 parent ffff:fff1 ---------------- \n \
            Sent 99 bytes 1 pkt (dropped 0, overlimits 0 requeues 0) \n\
            qdisc tbf 1: dev fo-i0 root refcnt 2 rate 10Mbit burst 5000b lat 76ms \n \
            Sent 1514 bytes 1 pkt (dropped 0, overlimits 0 requeues 0) \n";
        let s = parse_tc(text);
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!(
            s["fo-p0"],
            QdiscStats {
                sent_bytes: 3028,
                sent_packets: 2,
                dropped: 7
            }
        );
        assert_eq!(s["fo-i0"].sent_packets, 1);
    }

    #[test]
    fn nft_named_counters() {
        let text = "table netdev fanout_lab {\n\
            \tcounter loss_p0 {\n\t\tpackets 12 bytes 1536\n\t}\n\
            \tcounter igmp_p0 {\n\t\tpackets 0 bytes 0\n\t}\n\
            \tchain in_p0 {\n\t\ttype filter hook ingress device \"fo-p0\" priority filter; policy accept;\n\
            \t\tip protocol igmp counter name \"igmp_p0\" drop\n\t}\n}\n";
        let c = parse_nft_counters(text);
        assert_eq!(c["loss_p0"], 12);
        assert_eq!(c["igmp_p0"], 0);
        assert_eq!(c.len(), 2);
    }
}
