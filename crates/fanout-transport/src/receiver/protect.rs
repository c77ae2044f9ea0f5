//! Packet protection at a receiver (`crate::protection`, `docs/wire.md`
//! §4.12): the handshake its CONNECT rides in, its pair of keys and the
//! session's group key from the answer, sealing what it sends and opening
//! what comes.

use crate::protection::joining::Joining;
use crate::protection::segments::{Listed, SegmentList, SegmentVerifier, Taken};
use crate::protection::source::{Held, Verifier};
use crate::protection::{open_sealed, GroupKey, PairKeys, Protection, ReplayWindow, SeedStream};
use crate::wire::{decode_frames, Frame, GroupKeyFrame, Header, HeaderFlags};
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;

/// What to do with a multicast datagram under source authentication.
pub(super) enum Source {
    /// Named by a verified list (or no lists are kept): process it.
    Process,
    /// Held until a list names it (or a list that did not verify).
    Hold,
    /// A verified list: process these held datagrams' frames (with their
    /// arrival), in order.
    Release(Vec<(Instant, Vec<u8>)>),
}

/// What became of a listed datagram that was not dropped.
pub(super) enum Opened<'a> {
    /// Its list names it: process its frames.
    Process(&'a [u8]),
    /// Held for its list.
    Hold,
    /// A segment of a run, held until the rest came (acknowledged as
    /// received meanwhile): its stream range, and whether nothing before
    /// it is missing.
    HoldInRun(std::ops::Range<u64>, bool),
    /// It (of stream range `completing`) completed a run that checks:
    /// process these held datagrams' frames (itself among them, with their
    /// arrival), in order; all but itself were counted on arrival.
    ReleaseRun {
        held: Vec<(Instant, Vec<u8>)>,
        /// It came in order: after all of the run before it, all of the
        /// stream before the run taken (else it filled a hole).
        in_order: bool,
    },
    /// A copy of a segment of a settled run: process it only if it equals
    /// the bytes taken (a duplicate), else it is forged.
    Settled(&'a [u8]),
}

/// A receiver's protection state.
pub(super) struct ReceiverKeys {
    protection: Protection,
    seeds: SeedStream,
    /// The join under way (to the sender, a merger, or an ancestor taking
    /// over from a silent merger) and where it goes.
    joining: Joining,
    pair: Option<PairKeys>,
    /// Group keys by phase (epoch's low bit) with their epochs: the one in
    /// use and, during a key update, the next (or the last).
    group: [Option<GroupKey>; 2],
    /// A GROUP_KEY to confirm (its epoch).
    key_ack: Option<u64>,
    /// Verifies the sender's signed lists of multicast datagrams.
    verifier: Option<Verifier>,
    /// Verifies listed DATA against the sender's segment lists.
    segments: Option<SegmentVerifier>,
    /// Packet numbers accepted from the session sender's multicast.
    group_replay: ReplayWindow,
    /// Packet numbers accepted from the peer this receiver joined (the
    /// sender, or its merger: another number space).
    pair_replay: ReplayWindow,
}

impl std::fmt::Debug for ReceiverKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiverKeys")
            .field("established", &self.pair.is_some())
            .finish()
    }
}

impl ReceiverKeys {
    pub(super) fn new(protection: Protection) -> Self {
        ReceiverKeys {
            seeds: SeedStream::new(protection.seed),
            protection,
            joining: Joining::default(),
            pair: None,
            group: [None, None],
            key_ack: None,
            verifier: None,
            segments: None,
            group_replay: ReplayWindow::default(),
            pair_replay: ReplayWindow::default(),
        }
    }

    /// The first handshake message to `target` carrying `connect`
    /// (encoded frames): made on the first attempt, repeated as is after.
    /// `None` if the credentials cannot start a handshake with `target`.
    pub(super) fn first_message(
        &mut self,
        target: std::net::SocketAddr,
        connect: &[u8],
    ) -> Option<&[u8]> {
        let seeds = &mut self.seeds;
        let creds = &self.protection.credentials;
        (self.joining).first_message(creds, || seeds.next_seed(), target, connect)
    }

    /// The answer to our handshake (session `session_id`) from `from`:
    /// installs the keys; returns the frames it carried (an ACCEPT, or the
    /// refusal), the group and source keys taken out. An answer that does
    /// not open changes nothing. A new pair (an ancestor taking over from
    /// a silent merger) keeps the group keys and the lists already
    /// verified when the source key is the same.
    pub(super) fn on_answer(
        &mut self,
        from: std::net::SocketAddr,
        answer: &[u8],
        session_id: u64,
    ) -> Result<Vec<u8>, DropReason> {
        let a = (self.joining).finish(&self.protection.credentials, from, answer)?;
        let same_source =
            a.source.is_some() && self.verifier.as_ref().map(|v| *v.key()) == a.source;
        if !same_source {
            self.group = a.group;
            self.verifier = a.source.map(|k| Verifier::new(k, session_id));
            self.segments = a.source.map(|k| SegmentVerifier::new(k, session_id));
            self.group_replay = ReplayWindow::default();
        } else {
            for g in a.group.into_iter().flatten() {
                self.install(g);
            }
        }
        self.pair = Some(a.pair);
        self.pair_replay = ReplayWindow::default();
        Ok(a.frames)
    }

    /// Installs group key `g`: a newer epoch replaces the key of its phase.
    fn install(&mut self, g: GroupKey) {
        let slot = &mut self.group[(g.epoch & 1) as usize];
        if slot.as_ref().is_none_or(|old| old.epoch < g.epoch) {
            *slot = Some(g);
        }
    }

    /// Whether the session's group keys were handed over (a multicast
    /// session).
    pub(super) fn has_group(&self) -> bool {
        self.group.iter().any(Option::is_some)
    }

    /// Whether an answer to a handshake is awaited.
    pub(super) fn is_joining(&self) -> bool {
        self.joining.is_under_way()
    }

    /// The frames of a sealed datagram from the sender, opened into
    /// `scratch`: under the group key if it was multicast, else under the
    /// pair's.
    pub(super) fn open<'a>(
        &mut self,
        header: &Header,
        datagram: &[u8],
        scratch: &'a mut Vec<u8>,
    ) -> Result<(u64, &'a [u8]), DropReason> {
        let multicast = header.flags.contains(HeaderFlags::MULTICAST);
        let (key, replay) = if multicast {
            let phase = usize::from(header.flags.contains(HeaderFlags::KEY_PHASE));
            (
                self.group[phase].as_ref().map(|g| &g.key),
                &mut self.group_replay,
            )
        } else {
            (
                self.pair.as_ref().map(|p| &p.sender_to_joiner),
                &mut self.pair_replay,
            )
        };
        let key = key.ok_or(DropReason::Unauthenticated)?;
        // A multicast datagram's number is settled once a signed list
        // names it (a rogue member may have used it first).
        let commit = !(multicast && self.verifier.is_some());
        open_sealed(key, replay, header.packet_number, datagram, scratch, commit)
    }

    /// A multicast datagram opened (`pn`, `sealed` as it arrived at `now`,
    /// its `frames`; the stream delivered below `delivered`): what to do
    /// with it under source authentication, and how many datagrams or
    /// lists were refused on the way.
    pub(super) fn authenticate(
        &mut self,
        now: Instant,
        pn: u64,
        sealed: &[u8],
        frames: &[u8],
        delivered: u64,
        taken: Taken<'_>,
    ) -> (Source, u64) {
        let (Some(v), Some(sv)) = (self.verifier.as_mut(), self.segments.as_mut()) else {
            return (Source::Process, 0);
        };
        let before = v.dropped + v.bad_signatures + sv.dropped + sv.bad_signatures;
        let outcome = match decode_frames(frames).next() {
            Some(Ok(Frame::Signature(list))) => match v.on_list(&list) {
                Some(released) => {
                    self.group_replay.commit(pn);
                    for (p, _, _) in &released {
                        self.group_replay.commit(*p);
                    }
                    Source::Release(released.into_iter().map(|(_, a, f)| (a, f)).collect())
                }
                None => Source::Hold,
            },
            Some(Ok(Frame::Segments(list))) => match sv.on_list(&list, delivered, taken) {
                Some(released) => {
                    self.group_replay.commit(pn);
                    Source::Release(released.into_iter().map(|(_, a, f)| (a, f)).collect())
                }
                None => Source::Hold,
            },
            _ => match v.on_datagram(now, pn, sealed, frames) {
                Held::Verified => {
                    self.group_replay.commit(pn);
                    Source::Process
                }
                Held::Waiting => Source::Hold,
            },
        };
        let after = v.dropped + v.bad_signatures + sv.dropped + sv.bad_signatures;
        (outcome, after - before)
    }

    /// A listed datagram (`LISTED`: one DATA frame under the listed-data
    /// key, no tag) as it arrived at `now`, decrypted into `scratch`; the
    /// stream delivered below `delivered`. [`Opened::Process`] if its
    /// segment list names it, [`Opened::Hold`] if it is held for its list
    /// or the rest of its run, [`Opened::Release`] if it completed a run
    /// that checks, else why it is dropped; and how many held datagrams were
    /// dropped on the way. Not in the replay window: a copy of a listed
    /// segment is harmless (held bytes are never overwritten), and a rogue
    /// member must not spend packet numbers the sender uses.
    pub(super) fn open_listed<'a>(
        &mut self,
        now: Instant,
        header: &Header,
        datagram: &[u8],
        scratch: &'a mut Vec<u8>,
        delivered: u64,
        taken: Taken<'_>,
    ) -> (Result<Opened<'a>, DropReason>, u64) {
        let phase = usize::from(header.flags.contains(HeaderFlags::KEY_PHASE));
        let (Some(g), Some(sv)) = (self.group[phase].as_ref(), self.segments.as_mut()) else {
            return (Err(DropReason::Unauthenticated), 0);
        };
        let multicast = header.flags.contains(HeaderFlags::MULTICAST);
        if !multicast || header.flags.contains(HeaderFlags::SEALED) {
            return (Err(DropReason::Unauthenticated), 0);
        }
        let pn = self.group_replay.expand(header.packet_number);
        scratch.clear();
        scratch.extend_from_slice(datagram);
        g.data.apply(scratch, pn);
        let frames = &scratch[crate::wire::HEADER_LEN..];
        let mut it = decode_frames(frames);
        let (Some(Ok(Frame::Data(d))), None) = (it.next(), it.next()) else {
            return (Err(DropReason::Unauthenticated), 0);
        };
        let before = sv.dropped;
        let range = d.offset..d.offset + d.payload.len() as u64;
        let outcome = match sv.on_data(now, &d, frames, delivered, taken) {
            Listed::Verified => Ok(Opened::Process(frames)),
            Listed::Held => Ok(Opened::Hold),
            Listed::HeldInRun { in_order } => Ok(Opened::HoldInRun(range, in_order)),
            Listed::Released(r) => {
                let first = r.first().map_or(range.start, |(o, _, _)| *o);
                let last = r.last().map_or(range.start, |(o, _, _)| *o);
                Ok(Opened::ReleaseRun {
                    in_order: last == range.start && first <= delivered,
                    held: r.into_iter().map(|(_, a, f)| (a, f)).collect(),
                })
            }
            Listed::Settled => Ok(Opened::Settled(frames)),
            Listed::Old => Err(DropReason::Duplicate),
            Listed::Forged => Err(DropReason::Unauthenticated),
        };
        (outcome, sv.dropped - before)
    }

    /// A segment list that came under our pair key (asked for): the held
    /// datagrams it releases, if it verifies.
    fn on_segments(
        &mut self,
        list: &SegmentList,
        delivered: u64,
        taken: Taken<'_>,
    ) -> Vec<(Instant, Vec<u8>)> {
        self.segments
            .as_mut()
            .and_then(|sv| sv.on_list(list, delivered, taken))
            .map(|r| r.into_iter().map(|(_, a, f)| (a, f)).collect())
            .unwrap_or_default()
    }

    /// Held runs the receiver has now taken all of (what they lacked came
    /// otherwise: by unicast, decoded) that check: their held datagrams.
    pub(super) fn recheck_runs(
        &mut self,
        delivered: u64,
        taken: Taken<'_>,
    ) -> Vec<(Instant, Vec<u8>)> {
        let Some(sv) = self.segments.as_mut() else {
            return Vec::new();
        };
        sv.recheck(delivered, taken)
            .into_iter()
            .map(|(_, a, f)| (a, f))
            .collect()
    }

    /// Hands back the buffer of a released datagram once it is processed
    /// ([`SegmentVerifier::recycle`]).
    pub(super) fn recycle(&mut self, buf: Vec<u8>) {
        if let Some(sv) = self.segments.as_mut() {
            sv.recycle(buf);
        }
    }

    /// Whether runs are held (waiting for segments).
    pub(super) fn holds_runs(&self) -> bool {
        self.segments.as_ref().is_some_and(|s| s.held() > 0)
    }

    /// Stream ranges of segments held in runs not complete yet (they count
    /// as received, [`SegmentVerifier::held_ranges`]).
    pub(super) fn held_ranges(&self) -> Vec<std::ops::Range<u64>> {
        self.segments
            .as_ref()
            .map(SegmentVerifier::held_ranges)
            .unwrap_or_default()
    }

    /// Ranges of held datagrams dropped unreleased since the last call
    /// ([`SegmentVerifier::take_dropped`]).
    pub(super) fn take_dropped(&mut self) -> Vec<std::ops::Range<u64>> {
        self.segments
            .as_mut()
            .map(SegmentVerifier::take_dropped)
            .unwrap_or_default()
    }

    /// What to ask the sender now about listed data, if anything: the
    /// offset whose segment list is missing, or whose run's detail is
    /// wanted.
    pub(super) fn take_segments_request(&mut self, now: Instant) -> Option<(u64, bool)> {
        self.segments.as_mut()?.take_request(now)
    }

    /// When a missing segment list is to be asked for.
    pub(super) fn segments_request_deadline(&self) -> Option<Instant> {
        self.segments.as_ref()?.request_deadline()
    }

    /// The frames of a datagram sealed under our pair key: a GROUP_KEY
    /// among them is installed (a newer epoch replaces the key of its
    /// phase) and confirmed; a SEGMENTS list (asked for) is checked.
    /// Only the sender holds the pair key, so no member can hand out a
    /// key. Returns the held datagrams a list released.
    pub(super) fn on_pair_frames(
        &mut self,
        frames: &[u8],
        delivered: u64,
        taken: Taken<'_>,
    ) -> Vec<(Instant, Vec<u8>)> {
        let mut released = Vec::new();
        if self.group.iter().all(Option::is_none) {
            return released; // unicast delivery: no group key, no lists
        }
        for f in decode_frames(frames) {
            match f {
                Ok(Frame::GroupKey(GroupKeyFrame { epoch, key })) => {
                    self.install(GroupKey::new(epoch, key));
                    let slot = &self.group[(epoch & 1) as usize];
                    if slot.as_ref().is_some_and(|g| g.epoch == epoch) {
                        self.key_ack = Some(epoch);
                    }
                }
                Ok(Frame::Segments(list)) => {
                    released.extend(self.on_segments(&list, delivered, taken))
                }
                _ => {}
            }
        }
        released
    }

    /// A GROUP_KEY_ACK due (the epoch confirmed).
    pub(super) fn take_key_ack(&mut self) -> Option<u64> {
        self.key_ack.take()
    }

    /// Seals the datagram just built at `out[start..]`; false if it may not
    /// go (no keys yet). The handshake goes in the clear.
    pub(super) fn seal(
        &self,
        out: &mut Vec<u8>,
        start: usize,
        numbers: &crate::PacketNumbers,
    ) -> bool {
        let key = self.pair.as_ref().map(|p| &p.joiner_to_sender);
        crate::packet::seal_unless_clear(out, start, numbers, key)
    }
}
