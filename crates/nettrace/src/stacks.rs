//! The stacks of the current sequence-point region, arranged so that resolving an event's
//! stack id costs no unpredictable branch.
//!
//! Whether an event has a stack is close to random from one event to the next (sampled and
//! unsampled events interleave), so a look-up that branches on "id 0" or "id unknown" pays
//! a mispredicted branch on a large share of events. Here every id, 0 and unknown ones
//! included, indexes the slot vector (clamped to a sentinel slot at its end that holds the
//! empty range), so the common case is a load and a compare with no data-dependent branch.

use crate::idmap::{DenseTable, Slot};

/// One stack's bytes in the arena; `known` tells a stack that is empty from an id that names
/// none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
    known: bool,
}

impl Slot for Span {
    /// The stack's bytes: `arena[start..end]`.
    type Value = (usize, usize);
    #[inline]
    fn holding((start, end): (usize, usize)) -> Self {
        Span {
            start,
            end,
            known: true,
        }
    }
    #[inline]
    fn is_live(&self) -> bool {
        self.known
    }
    #[inline]
    fn take(&mut self) -> Option<(usize, usize)> {
        let taken = std::mem::take(self);
        taken.known.then_some((taken.start, taken.end))
    }
}

/// Stack id to stack bytes: the bytes in one arena, their places in a [`DenseTable`] (ids
/// handed out in sequence, the common case, in its vector; the rest in its hash map).
#[derive(Debug, Clone, Default)]
pub(crate) struct StackTable {
    /// The bytes of every stack of the region.
    arena: Vec<u8>,
    spans: DenseTable<Span>,
}

impl StackTable {
    /// Stack `id`'s bytes (empty for id 0, for an unknown id and for an empty stack) and
    /// whether the id resolved (id 0, "no stack", always does).
    #[inline]
    pub(crate) fn get(&self, id: u32) -> (&[u8], bool) {
        // Every id has a slot to read (the table's sentinel hole for ids outside its
        // vector), so this is a load with no data-dependent branch.
        let span = *self.spans.slot(u64::from(id));
        if self.spans.has_sparse() && !span.known && id != 0 {
            return self.get_sparse(id);
        }
        let bytes = self.arena.get(span.start..span.end).unwrap_or(&[]);
        (bytes, span.known | (id == 0))
    }

    #[inline(never)]
    fn get_sparse(&self, id: u32) -> (&[u8], bool) {
        match self.spans.get_sparse(u64::from(id)) {
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
        self.spans.insert(u64::from(id), (start, self.arena.len()));
    }

    /// Forgets every stack (at a sequence point).
    pub(crate) fn clear(&mut self) {
        self.arena.clear();
        self.spans.clear();
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
        assert!(table.spans.bounded());
    }
}
