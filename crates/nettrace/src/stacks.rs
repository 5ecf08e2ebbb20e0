//! The stacks of the current sequence-point region, arranged so that resolving an event's
//! stack id costs no unpredictable branch.
//!
//! Whether an event has a stack is close to random from one event to the next (sampled and
//! unsampled events interleave), so a look-up that branches on "id 0" or "id unknown" pays
//! a mispredicted branch on a large share of events. Here every id, 0 and unknown ones
//! included, indexes the slot vector (clamped to a sentinel slot at its end that holds the
//! empty range), so the common case is a load and a compare with no data-dependent branch.

use crate::idmap::{fill_gap, may_extend, IdMap};

/// One stack's bytes in the arena; `known` tells a stack that is empty from an id that names
/// none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Slot {
    start: usize,
    end: usize,
    known: bool,
}

/// Stack id to stack bytes. Ids handed out in sequence (the common case) live in a vector
/// indexed by `id - base`; the rest in a hash map. It grows by the rule of
/// [`crate::idmap::DenseMap`] ([`may_extend`], [`fill_gap`]): its own slot layout (a
/// sentinel hole at the end, read with no branch) is what it keeps apart.
#[derive(Debug, Clone)]
pub(crate) struct StackTable {
    /// The bytes of every stack of the region.
    arena: Vec<u8>,
    base: u32,
    /// Slot `i` is id `base + i`; the last slot is always the empty, unknown sentinel.
    slots: Vec<Slot>,
    live: usize,
    sparse: IdMap<u32, (usize, usize)>,
}

impl Default for StackTable {
    fn default() -> Self {
        StackTable {
            arena: Vec::new(),
            base: 0,
            slots: vec![Slot::default()],
            live: 0,
            sparse: IdMap::default(),
        }
    }
}

impl StackTable {
    /// Stack `id`'s bytes (empty for id 0, for an unknown id and for an empty stack) and
    /// whether the id resolved (id 0, "no stack", always does).
    #[inline]
    pub(crate) fn get(&self, id: u32) -> (&[u8], bool) {
        let sentinel = self.slots.len() - 1;
        // Ids below `base` wrap to large indexes and clamp to the sentinel like ids above.
        let i = (id.wrapping_sub(self.base) as usize).min(sentinel);
        let slot = self.slots.get(i).copied().unwrap_or_default();
        if !self.sparse.is_empty() && !slot.known && id != 0 {
            return self.get_sparse(id);
        }
        let bytes = self.arena.get(slot.start..slot.end).unwrap_or(&[]);
        (bytes, slot.known | (id == 0))
    }

    #[inline(never)]
    fn get_sparse(&self, id: u32) -> (&[u8], bool) {
        match self.sparse.get(&id) {
            Some(&(s, e)) => (self.arena.get(s..e).unwrap_or(&[]), true),
            None => (&[], false),
        }
    }

    /// Adds (or replaces) stack `id`. Id 0 means "no stack" in event headers, so a stack
    /// block's id 0 can never be referred to and is not kept.
    pub(crate) fn insert(&mut self, id: u32, bytes: &[u8]) {
        if id == 0 {
            return;
        }
        let start = self.arena.len();
        self.arena.extend_from_slice(bytes);
        let slot = Slot {
            start,
            end: self.arena.len(),
            known: true,
        };
        let dense = self.slots.len() - 1;
        if dense == 0 {
            self.base = id;
        }
        let i = id.wrapping_sub(self.base) as usize;
        if i < dense {
            self.live += usize::from(!self.slots[i].known);
            self.slots[i] = slot;
            return;
        }
        if !may_extend(dense, self.live, (i - dense) as u64) {
            self.sparse.insert(id, (slot.start, slot.end));
            return;
        }
        // Grow over the gap (if any), moving the ids it covers out of `sparse`.
        self.slots.pop();
        let base = self.base;
        self.live += fill_gap(
            &mut self.slots,
            i,
            &mut self.sparse,
            |len| base.wrapping_add(len as u32),
            |moved| match moved {
                Some((start, end)) => Slot {
                    start,
                    end,
                    known: true,
                },
                None => Slot::default(),
            },
        );
        if !self.sparse.is_empty() {
            self.sparse.remove(&id);
        }
        self.slots.push(slot);
        self.live += 1;
        self.slots.push(Slot::default());
    }

    /// Forgets every stack (at a sequence point).
    pub(crate) fn clear(&mut self) {
        self.arena.clear();
        self.slots.clear();
        self.slots.push(Slot::default());
        self.live = 0;
        self.sparse.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn stack_table_agrees_with_a_hash_map() {
        let mut table = StackTable::default();
        let mut model: HashMap<u32, Vec<u8>> = HashMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..20_000u32 {
            let r = crate::test_rng::next(&mut x);
            let id = match r % 8 {
                0..=3 => step % 300,
                4 => (r >> 40) as u32,
                5 => u32::MAX - (r % 5) as u32,
                6 => 0,
                _ => ((r >> 8) % 400) as u32,
            };
            match (r >> 4) % 10 {
                0..=6 => {
                    let bytes = vec![step as u8; ((r >> 16) % 4) as usize];
                    table.insert(id, &bytes);
                    if id != 0 {
                        model.insert(id, bytes);
                    }
                }
                7 if step % 1000 == 0 => {
                    table.clear();
                    model.clear();
                }
                _ => {}
            }
            for probe in [id, id.wrapping_add(1), id.wrapping_sub(1), 0] {
                let expected = match model.get(&probe) {
                    Some(b) => (b.as_slice(), true),
                    None => (&[][..], probe == 0),
                };
                assert_eq!(table.get(probe), expected, "id {probe} at step {step}");
            }
        }
        assert!(table.slots.len() <= 4 * table.live + 64 + crate::idmap::MAX_GAP as usize + 2);
    }
}
