//! The merge-specification abstraction of concast (MCTCP §II, Figs. 1
//! and 2) and its per-message framework.
//!
//! A specification says which messages may merge ([`MergeSpec::tag`],
//! MCTCP's `getTag`), how one more message is folded into the saved state
//! ([`MergeSpec::merge`]), whether a message should go upstream now
//! ([`MergeSpec::done`]) and what it is ([`MergeSpec::build`], MCTCP's
//! `buildMsg`). MCTCP's *flow state block* (`fsb`: state shared by all
//! tags of one flow, such as the table of children) is the specification
//! value itself, hence `&mut self`; the per-tag *merge state* is
//! [`MergeSpec::State`], kept by [`MergeTable`].

use fanout_core::time::Instant;
use std::collections::BTreeMap;
use std::fmt::Debug;

/// Most distinct tags one [`MergeTable`] keeps. Tags come from the network,
/// so their number is bounded (messages of a further tag are refused);
/// specifications should have a small fixed tag space (MCTCP has two).
pub const MAX_TAGS: usize = 16;

/// A concast merge specification (MCTCP Fig. 2).
pub trait MergeSpec {
    /// One message from a child (already authenticated as coming from a
    /// known child, or a request to become one).
    type Msg;
    /// Messages merge together iff their tags are equal (`getTag`).
    type Tag: Ord + Copy + Debug;
    /// The saved merge state of one tag.
    type State: Debug;
    /// A message to forward upstream.
    type Out;

    /// The tag of `msg`.
    fn tag(&self, msg: &Self::Msg) -> Self::Tag;

    /// A fresh state for `tag` (first message of that tag).
    fn new_state(&self, tag: Self::Tag) -> Self::State;

    /// Folds `msg` into `state` (MCTCP's `merge(s, m, fsb)`).
    fn merge(&mut self, state: &mut Self::State, msg: Self::Msg, now: Instant);

    /// Whether a message should be built and forwarded now (`done(s)`).
    fn done(&self, state: &Self::State, now: Instant) -> bool;

    /// Builds the message to forward and resets what it consumed
    /// (`buildMsg(s)`); `None` if, after all, there is nothing to send.
    fn build(&mut self, state: &mut Self::State, now: Instant) -> Option<Self::Out>;

    /// When `done` may next turn true without a new message (a timer in
    /// the state), if ever.
    fn deadline(&self, state: &Self::State) -> Option<Instant>;
}

/// Saved merge states by tag, and MCTCP's per-packet procedure (Fig. 1:
/// look up the tag, merge, and if done build and forward).
#[derive(Debug)]
pub struct MergeTable<S: MergeSpec> {
    /// The specification and its flow state.
    pub spec: S,
    states: BTreeMap<S::Tag, S::State>,
}

impl<S: MergeSpec> MergeTable<S> {
    /// A table with no saved state.
    pub fn new(spec: S) -> Self {
        MergeTable {
            spec,
            states: BTreeMap::new(),
        }
    }

    /// Processes one message (Fig. 1). `Err(msg)` if its tag is new and
    /// the table already holds [`MAX_TAGS`] tags.
    pub fn process(&mut self, msg: S::Msg, now: Instant) -> Result<Option<S::Out>, S::Msg> {
        let tag = self.spec.tag(&msg);
        if !self.states.contains_key(&tag) && self.states.len() >= MAX_TAGS {
            return Err(msg);
        }
        let state = self
            .states
            .entry(tag)
            .or_insert_with(|| self.spec.new_state(tag));
        self.spec.merge(state, msg, now);
        Ok(if self.spec.done(state, now) {
            self.spec.build(state, now)
        } else {
            None
        })
    }

    /// Re-evaluates `done` for `tag` without a new message (a timer fired,
    /// or the flow state changed, e.g. a child expired).
    pub fn poll(&mut self, tag: S::Tag, now: Instant) -> Option<S::Out> {
        let state = self.states.get_mut(&tag)?;
        if self.spec.done(state, now) {
            self.spec.build(state, now)
        } else {
            None
        }
    }

    /// The earliest [`MergeSpec::deadline`] over all tags.
    pub fn deadline(&self) -> Option<Instant> {
        self.states
            .values()
            .filter_map(|s| self.spec.deadline(s))
            .min()
    }

    /// The tags whose deadline is at or before `now`.
    pub fn due(&self, now: Instant) -> Vec<S::Tag> {
        self.states
            .iter()
            .filter(|(_, s)| self.spec.deadline(s).is_some_and(|d| d <= now))
            .map(|(t, _)| *t)
            .collect()
    }

    /// The saved state of `tag`.
    pub fn state(&self, tag: S::Tag) -> Option<&S::State> {
        self.states.get(&tag)
    }
}
