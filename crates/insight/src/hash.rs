//! The hasher of the maps built per event.

/// A fast hasher for the per-event maps: the keys come from one trace, not from an
/// adversary who could aim collisions at it.
pub(crate) type FastHash = foldhash::fast::RandomState;
