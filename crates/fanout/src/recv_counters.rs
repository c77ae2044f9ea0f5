//! The receiver side of an end-of-run report, shared by `fanout recv`, its
//! late-joiner path (`catch_up::late_recv`), `fanout stream recv` and the
//! upstream side of `fanout relay`.

use fanout_transport::{Receiver, ReceiverStats};
use std::collections::BTreeMap;

/// A receiver's transport counters as label → count (datagrams, bytes,
/// acknowledgements); callers add their socket and catch-up counters.
pub fn receiver_counters(st: &ReceiverStats) -> BTreeMap<&'static str, u64> {
    [
        ("datagrams_received", st.datagrams_received),
        ("datagrams_sent", st.datagrams_sent),
        ("acks_sent", st.acks_sent),
        ("payload_bytes_received", st.payload_bytes_received),
        ("duplicate_bytes", st.duplicate_bytes),
        ("reattaches", st.reattaches),
    ]
    .into_iter()
    .collect()
}

/// Why the receiver's session ended, or "finished" if it has no reason.
pub fn close_label(receiver: &Receiver) -> String {
    receiver
        .close_reason()
        .map_or("finished".into(), |r| r.to_string())
}
