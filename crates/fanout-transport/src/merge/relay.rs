//! What a merger relays from its parent to its children.
//!
//! The parent addresses the merger as one member, so the merger passes its
//! control frames on to every admitted child (PING, ACK_FREQUENCY, SKIP,
//! CLOSE, RESET, and in a protected session the SEGMENTS lists children
//! asked for), and DATA (with the DEADLINE before it) the parent sends it (its unicast fan-out copy,
//! or a repair the subtree reported missing) only to the children whose
//! acknowledgement state does not already cover it — the local repair
//! scoping that per-child state makes possible.

use super::children::ChildTable;
use crate::event::CloseReason;
use crate::wire::{decode_frames, CloseFrame, Frame};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;

/// The relay of one datagram from the parent.
#[derive(Debug, Default)]
pub struct RelayPlan {
    /// Frames to send, per child (children needing the same frames share
    /// one body).
    pub out: Vec<(SocketAddr, Arc<[u8]>)>,
    /// The parent ended the session (CLOSE or RESET): why.
    pub end: Option<CloseReason>,
    /// A frame did not parse; it and the rest were dropped.
    pub malformed: bool,
    /// Frames not meant for children (CONNECT, ACK, other extensions).
    pub unexpected: u64,
    /// The highest SENT in the datagram: for the merger itself, not
    /// relayed (a child merger gets its own from this merger).
    pub sent: Option<u64>,
}

/// Plans the relay of the frames `body` to the admitted `children`.
pub fn plan(children: &ChildTable, body: &[u8]) -> RelayPlan {
    let mut plan = RelayPlan::default();
    let mut common = Vec::new();
    // (stream range including the FIN's offset, encoded frame)
    let mut data: Vec<(Range<u64>, Vec<u8>)> = Vec::new();
    // A DEADLINE goes with the DATA after it.
    let mut deadline = Vec::new();
    for frame in decode_frames(body) {
        let Ok(frame) = frame else {
            plan.malformed = true;
            break;
        };
        match &frame {
            Frame::Data(d) => {
                let len = d.payload.len() as u64 + u64::from(d.fin);
                let mut enc = std::mem::take(&mut deadline);
                frame.encode(&mut enc);
                data.push((d.offset..d.offset + len, enc));
            }
            // A segment list a child asked for (signed by the session
            // sender: every child checks it) goes to all.
            Frame::Ping | Frame::AckFrequency(_) | Frame::Skip(_) | Frame::Segments(_) => {
                frame.encode(&mut common)
            }
            Frame::Close(_) => {
                frame.encode(&mut common);
                plan.end = Some(CloseReason::Completed);
            }
            Frame::Reset(CloseFrame { code, reason }) => {
                frame.encode(&mut common);
                plan.end = Some(CloseReason::PeerReset {
                    code: *code,
                    reason: reason.to_string(),
                });
            }
            Frame::Deadline(_) => {
                deadline.clear();
                frame.encode(&mut deadline);
            }
            Frame::Sent(f) => plan.sent = plan.sent.max(Some(f.end)),
            // A repeated ACCEPT: the children already have theirs.
            Frame::Accept(_) | Frame::Padding => {}
            // CONNECT, ACK, and frames of other extensions (e.g. a member's
            // upstream stream, which cannot be merged) are not for children.
            _ => plan.unexpected += 1,
        }
    }
    let mut bodies: BTreeMap<Vec<usize>, Arc<[u8]>> = BTreeMap::new();
    for (addr, c) in children.iter() {
        let Some(ack) = &c.ack else { continue };
        let need: Vec<usize> = (0..data.len())
            .filter(|&i| !ack.acknowledges(data[i].0.clone()))
            .collect();
        if need.is_empty() && common.is_empty() {
            continue;
        }
        let body = bodies
            .entry(need)
            .or_insert_with_key(|need| {
                let mut b = common.clone();
                for &i in need {
                    b.extend_from_slice(&data[i].1);
                }
                b.into()
            })
            .clone();
        plan.out.push((*addr, body));
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::ack_meet::AckSummary;
    use crate::merge::join::ConnectSummary;
    use crate::wire::{AckFrame, DataFrame, WireTimestamp};
    use fanout_core::time::Instant;
    use std::time::Duration;

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 1, i], 7000))
    }

    #[test]
    fn data_goes_only_to_children_lacking_it_and_control_to_all() {
        let opts = ConnectSummary {
            max_payload: 1400,
            window: 1 << 20,
        };
        let mut c = ChildTable::new(Duration::from_secs(30), 8);
        for i in 1..=3 {
            c.insert(addr(i), opts, WireTimestamp(0), Instant::ZERO)
                .unwrap();
        }
        c.admit(&addr(1), 0, Instant::ZERO);
        c.admit(&addr(2), 0, Instant::ZERO);
        // Child 2 already holds [100, 200); child 3 is not admitted yet.
        c.set_ack(
            &addr(2),
            AckSummary::from_frame(&AckFrame {
                cumulative: 200,
                window: 1 << 20,
                timestamp_echo: WireTimestamp(0),
                ack_delay_us: 0,
                sack: vec![],
            }),
            Instant::ZERO,
        );
        let payload = [7u8; 100];
        let mut body = Vec::new();
        Frame::Data(DataFrame {
            offset: 100,
            timestamp: WireTimestamp(5),
            fin: false,
            message_end: false,
            payload: &payload,
        })
        .encode(&mut body);
        let p = plan(&c, &body);
        assert_eq!(p.out.len(), 1);
        assert_eq!(p.out[0].0, addr(1));
        assert_eq!(&p.out[0].1[..], &body[..]);
        // A PING goes to every admitted child; CLOSE ends the merger.
        let mut ctl = Vec::new();
        Frame::Ping.encode(&mut ctl);
        Frame::Close(CloseFrame {
            code: 0,
            reason: "",
        })
        .encode(&mut ctl);
        let p = plan(&c, &ctl);
        assert_eq!(p.out.len(), 2);
        assert_eq!(p.end, Some(CloseReason::Completed));
        assert!(Arc::ptr_eq(&p.out[0].1, &p.out[1].1), "one shared body");
    }
}
