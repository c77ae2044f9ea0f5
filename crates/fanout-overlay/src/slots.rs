//! Handles to entries that come and go (connections): a freed slot is
//! taken again, so the table grows only to the most entries at once.

/// Puts `item` in the first free slot of `slots` (or a new one): its index.
pub(crate) fn insert<T>(slots: &mut Vec<Option<T>>, item: T) -> usize {
    match slots.iter().position(Option::is_none) {
        Some(i) => {
            slots[i] = Some(item);
            i
        }
        None => {
            slots.push(Some(item));
            slots.len() - 1
        }
    }
}
