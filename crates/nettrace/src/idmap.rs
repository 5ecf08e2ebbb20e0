//! Hash maps keyed by small integer ids, with a multiplicative hash: SipHash's DoS
//! resistance buys nothing for ids that only index caches bounded by the input size.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// How many unused slots an insert may skip to keep an id in the vector.
pub(crate) const MAX_GAP: u64 = 64;

/// The growth rule of the id tables that keep ids handed out in sequence in a vector
/// ([`DenseMap`], and `stacks::StackTable` with its own slot layout): whether an id
/// `past_end` slots past the end of a vector of `len` slots, `live` of them holding a
/// value, goes into the vector. An empty vector takes any id; otherwise the id may skip at
/// most [`MAX_GAP`] slots, and a vector that is mostly holes stops growing, so its length
/// stays below `4 * live + 64 + MAX_GAP + 1`.
#[inline(always)]
pub(crate) fn may_extend(len: usize, live: usize, past_end: u64) -> bool {
    len == 0 || (past_end <= MAX_GAP && len < 4 * live + 64)
}

/// Grows a table's vector over the gap before a new id: pushes a slot for each id from
/// the vector's end up to `target_len` slots, moving that id's entry out of `sparse` (an id
/// lives in one of the two); returns how many entries it moved. `id_at(len)` is the id of
/// slot `len`, `slot_of` makes a slot from the moved entry or a hole.
#[inline(always)]
pub(crate) fn fill_gap<K: std::hash::Hash + Eq, V, S>(
    slots: &mut Vec<S>,
    target_len: usize,
    sparse: &mut IdMap<K, V>,
    id_at: impl Fn(usize) -> K,
    slot_of: impl Fn(Option<V>) -> S,
) -> usize {
    let mut moved_count = 0;
    while slots.len() < target_len {
        let moved = if sparse.is_empty() {
            None
        } else {
            sparse.remove(&id_at(slots.len()))
        };
        moved_count += usize::from(moved.is_some());
        slots.push(slot_of(moved));
    }
    moved_count
}

/// A map from integer ids to values that indexes a vector for ids handed out in sequence
/// (the common case: metadata, stack, thread and label-list ids count up from where the
/// previous block stopped) and falls back to an [`IdMap`] for the rest.
///
/// Scheme: `dense[i]` holds id `base + i`. An insert that starts an empty vector, or
/// extends it by at most [`MAX_GAP`] empty slots plus its own, goes there; any other id
/// outside the vector goes to `sparse`. An id lives in at most one of the two: when the
/// vector grows over an id, that id's sparse entry moves into it. The vector stops growing
/// once fewer than a quarter of its slots are live (gaps and removed ids leave holes), so
/// its length stays below `4 * live + 64 + MAX_GAP + 1` for the most entries it held live:
/// a trace that keeps adding and removing threads, or spreads its ids out, cannot grow it
/// past what it holds.
#[derive(Debug, Clone)]
pub(crate) struct DenseMap<V> {
    base: u64,
    dense: Vec<Option<V>>,
    /// Live entries in `dense`.
    dense_live: usize,
    sparse: IdMap<u64, V>,
}

impl<V> Default for DenseMap<V> {
    fn default() -> Self {
        DenseMap {
            base: 0,
            dense: Vec::new(),
            dense_live: 0,
            sparse: IdMap::default(),
        }
    }
}

impl<V> DenseMap<V> {
    #[inline]
    fn slot(&self, id: u64) -> Option<usize> {
        let i = id.wrapping_sub(self.base);
        if i < self.dense.len() as u64 {
            Some(i as usize)
        } else {
            None
        }
    }

    #[inline]
    pub(crate) fn get(&self, id: u64) -> Option<&V> {
        match self.slot(id) {
            Some(i) => self.dense.get(i).and_then(Option::as_ref),
            None => self.get_sparse(id),
        }
    }

    /// The value of `id` when it has a slot in the vector.
    #[inline]
    pub(crate) fn get_dense_mut(&mut self, id: u64) -> Option<&mut V> {
        let i = self.slot(id)?;
        self.dense.get_mut(i).and_then(Option::as_mut)
    }

    /// Whether an insert of `id` would go to the vector (it has a slot there already, or
    /// extends it).
    pub(crate) fn has_dense_slot(&self, id: u64) -> bool {
        self.slot(id).is_some() || self.extends(id)
    }

    /// Whether `id` may extend the vector: it lies at most [`MAX_GAP`] slots past its end
    /// (or the vector is empty), and the vector is not mostly holes.
    fn extends(&self, id: u64) -> bool {
        let past_end = id
            .wrapping_sub(self.base)
            .wrapping_sub(self.dense.len() as u64);
        may_extend(self.dense.len(), self.dense_live, past_end)
    }

    #[inline(never)]
    fn get_sparse(&self, id: u64) -> Option<&V> {
        if self.sparse.is_empty() {
            None
        } else {
            self.sparse.get(&id)
        }
    }

    pub(crate) fn insert(&mut self, id: u64, value: V) {
        if let Some(i) = self.slot(id) {
            if let Some(slot) = self.dense.get_mut(i) {
                if slot.is_none() {
                    self.dense_live += 1;
                }
                *slot = Some(value);
            }
            return;
        }
        if !self.extends(id) {
            self.sparse.insert(id, value);
            return;
        }
        if self.dense.is_empty() {
            self.base = id;
        }
        // Grow over the gap (if any), moving the ids it covers out of `sparse`.
        let base = self.base;
        let target = id.wrapping_sub(base) as usize;
        self.dense_live += fill_gap(
            &mut self.dense,
            target,
            &mut self.sparse,
            |len| base.wrapping_add(len as u64),
            |moved| moved,
        );
        if !self.sparse.is_empty() {
            self.sparse.remove(&id);
        }
        self.dense.push(Some(value));
        self.dense_live += 1;
    }

    pub(crate) fn remove(&mut self, id: u64) -> Option<V> {
        match self.slot(id) {
            Some(i) => {
                let old = self.dense.get_mut(i).and_then(Option::take);
                if old.is_some() {
                    self.dense_live -= 1;
                }
                old
            }
            None => self.sparse.remove(&id),
        }
    }

    pub(crate) fn clear(&mut self) {
        self.dense.clear();
        self.dense_live = 0;
        self.sparse.clear();
    }

    /// Every value, dense ids first (in id order), then the rest in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.dense
            .iter()
            .filter_map(Option::as_ref)
            .chain(self.sparse.values())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_map_agrees_with_a_hash_map() {
        // A deterministic mix of sequential, scattered, repeated and removed ids.
        let mut dense = DenseMap::default();
        let mut model: HashMap<u64, u64> = HashMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..20_000u64 {
            let r = crate::test_rng::next(&mut x);
            let id = match r % 8 {
                0..=3 => step % 300,
                4 => r >> 40,
                5 => u64::MAX - (r % 5),
                _ => (r >> 8) % 400,
            };
            match (r >> 4) % 10 {
                0..=5 => {
                    dense.insert(id, step);
                    model.insert(id, step);
                }
                6..=7 => assert_eq!(dense.remove(id), model.remove(&id)),
                8 if step % 1000 == 0 => {
                    dense.clear();
                    model.clear();
                }
                _ => {}
            }
            assert_eq!(dense.get(id), model.get(&id));
            assert_eq!(
                dense.get(id.wrapping_add(1)),
                model.get(&id.wrapping_add(1))
            );
        }
        let mut a: Vec<u64> = dense.values().copied().collect();
        let mut b: Vec<u64> = model.values().copied().collect();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
    }
}
