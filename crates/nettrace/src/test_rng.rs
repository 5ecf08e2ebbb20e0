//! The small deterministic generator the unit tests draw random inputs from.

/// One xorshift64* step: advances `state` (never 0) and returns the next value.
pub(crate) fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}
