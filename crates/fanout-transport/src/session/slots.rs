//! Members stored by dense slot number (reused after a member leaves), so
//! per-member indexes can be plain arrays, while [`MemberId`]s stay the
//! public, never-reused names.
//!
//! Lookup by id is O(log N), or O(1) for the member whose datagram is
//! being handled (the table remembers it as a hint). Iteration is in id
//! order, as with a map keyed by id.

use super::MemberId;
use std::collections::BTreeMap;

/// Values of type `T`, one per member, at dense slots.
#[derive(Debug)]
pub struct SlotTable<T> {
    entries: Vec<Option<(MemberId, T)>>,
    /// Vacant slots, reused last-freed first.
    free: Vec<u32>,
    by_id: BTreeMap<MemberId, u32>,
    /// Slot of the member being served (checked before `by_id`).
    hint: u32,
}

impl<T> Default for SlotTable<T> {
    fn default() -> Self {
        SlotTable {
            entries: Vec::new(),
            free: Vec::new(),
            by_id: BTreeMap::new(),
            hint: 0,
        }
    }
}

impl<T> SlotTable<T> {
    /// Adds `value` for the new member `id`; returns its slot.
    pub fn insert(&mut self, id: MemberId, value: T) -> u32 {
        let slot = match self.free.pop() {
            Some(s) => {
                self.entries[s as usize] = Some((id, value));
                s
            }
            None => {
                self.entries.push(Some((id, value)));
                (self.entries.len() - 1) as u32
            }
        };
        self.by_id.insert(id, slot);
        slot
    }

    /// Removes member `id`; returns its former slot and value.
    pub fn remove(&mut self, id: &MemberId) -> Option<(u32, T)> {
        let slot = self.by_id.remove(id)?;
        let (_, value) = self.entries[slot as usize].take()?;
        self.free.push(slot);
        Some((slot, value))
    }

    /// Remembers `slot` as the member being served.
    pub fn set_hint(&mut self, slot: u32) {
        self.hint = slot;
    }

    /// The slot of member `id`.
    pub fn slot_of(&self, id: &MemberId) -> Option<u32> {
        match self.entries.get(self.hint as usize) {
            Some(Some((h, _))) if h == id => Some(self.hint),
            _ => self.by_id.get(id).copied(),
        }
    }

    /// Member `id`'s value.
    pub fn get(&self, id: &MemberId) -> Option<&T> {
        self.at(self.slot_of(id)?)
    }

    /// The value at `slot`.
    pub fn at(&self, slot: u32) -> Option<&T> {
        self.entries.get(slot as usize)?.as_ref().map(|(_, v)| v)
    }

    /// The value at `slot`, mutably.
    pub fn at_mut(&mut self, slot: u32) -> Option<&mut T> {
        self.entries
            .get_mut(slot as usize)?
            .as_mut()
            .map(|(_, v)| v)
    }

    /// Values in id order.
    pub fn values(&self) -> impl Iterator<Item = &T> + '_ {
        self.by_id.values().filter_map(|&s| self.at(s))
    }

    /// Members held.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// True if no member is held.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_ids_are_not() {
        let mut t = SlotTable::default();
        let a = t.insert(MemberId(1), "a");
        let b = t.insert(MemberId(2), "b");
        assert_eq!((a, b), (0, 1));
        assert_eq!(t.remove(&MemberId(1)), Some((0, "a")));
        assert_eq!(t.get(&MemberId(1)), None);
        let c = t.insert(MemberId(3), "c");
        assert_eq!(c, 0);
        t.set_hint(0);
        assert_eq!(t.slot_of(&MemberId(3)), Some(0));
        assert_eq!(t.slot_of(&MemberId(1)), None);
        assert_eq!(t.get(&MemberId(2)), Some(&"b"));
        assert_eq!(t.values().copied().collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(t.len(), 2);
    }
}
