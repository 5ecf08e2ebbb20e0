//! The record encoding of `docs/async-profiler-format.md`: LEB128 varints, zigzag deltas,
//! a head varint that carries the record kind in its low three bits.
//!
//! The encoder writes into a fixed byte buffer and never grows it: a record that does not fit
//! is refused whole (the caller flushes and starts a new buffer), so a buffer never ends in
//! half a record.

/// Record kinds (the head's low three bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Create = 0,
    Resume = 1,
    Suspend = 2,
    Complete = 3,
    Unwind = 4,
    Stack = 5,
    Drop = 6,
    Wake = 7,
}

/// The largest record other than Stack: a head and three deltas of at most ten bytes each.
pub(crate) const MAX_RECORD: usize = 40;
/// The most poll-stack entries a Stack record carries (the outermost ones are kept).
pub(crate) const MAX_STACK_ENTRIES: usize = 64;

#[inline]
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Appends `v` as LEB128 at `out[at..]`; returns the new end. `out` must have room for ten
/// bytes past `at` (callers check [`MAX_RECORD`] once per record).
#[inline]
fn put_varint(out: &mut [u8], mut at: usize, mut v: u64) -> usize {
    while v >= 0x80 {
        out[at] = (v as u8) | 0x80;
        v >>= 7;
        at += 1;
    }
    out[at] = v as u8;
    at + 1
}

/// The delta state of one buffer; reset whenever a buffer starts.
#[derive(Debug, Default, Clone)]
pub(crate) struct Encoder {
    pub(crate) len: usize,
    prev_ts: i64,
    prev_ctx: u64,
    prev_frame: u32,
}

impl Encoder {
    /// Starts an empty buffer whose first record's timestamp is relative to `base_ts`.
    pub(crate) fn reset(&mut self, base_ts: i64) {
        *self = Encoder {
            len: 0,
            prev_ts: base_ts,
            prev_ctx: 0,
            prev_frame: 0,
        };
    }

    #[inline]
    fn head(&mut self, out: &mut [u8], ts: i64, kind: Kind) {
        let delta = ts.wrapping_sub(self.prev_ts);
        self.prev_ts = ts;
        // The zigzagged delta loses its top three bits to the kind: deltas beyond ±2^60
        // ticks (years) are not representable and wrap, which no real clock produces.
        self.len = put_varint(out, self.len, (zigzag(delta) << 3) | kind as u64);
    }

    #[inline]
    fn ctx(&mut self, out: &mut [u8], ctx: u64) {
        let delta = ctx.wrapping_sub(self.prev_ctx) as i64;
        self.prev_ctx = ctx;
        self.len = put_varint(out, self.len, zigzag(delta));
    }

    #[inline]
    fn frame(&mut self, out: &mut [u8], frame: u32) {
        let delta = i64::from(frame) - i64::from(self.prev_frame);
        self.prev_frame = frame;
        self.len = put_varint(out, self.len, zigzag(delta));
    }

    /// Whether a record of at most `bytes` fits.
    #[inline]
    pub(crate) fn fits(&self, out: &[u8], bytes: usize) -> bool {
        self.len + bytes <= out.len()
    }

    /// Create, Resume, Drop, Wake, Suspend, Complete or Unwind. The caller has checked
    /// `fits(out, MAX_RECORD)`.
    #[inline]
    pub(crate) fn record(&mut self, out: &mut [u8], ts: i64, event: Event) {
        match event {
            Event::Create { ctx, frame, parent } => {
                self.head(out, ts, Kind::Create);
                self.ctx(out, ctx);
                self.frame(out, frame);
                let parent = if parent == 0 { ctx } else { parent };
                self.len = put_varint(out, self.len, zigzag(ctx.wrapping_sub(parent) as i64));
            }
            Event::Resume { ctx, frame } => {
                self.head(out, ts, Kind::Resume);
                self.ctx(out, ctx);
                self.frame(out, frame);
            }
            Event::Drop { ctx } => {
                self.head(out, ts, Kind::Drop);
                self.ctx(out, ctx);
            }
            Event::Wake { ctx } => {
                self.head(out, ts, Kind::Wake);
                self.ctx(out, ctx);
            }
            Event::Suspend => self.head(out, ts, Kind::Suspend),
            Event::Complete => self.head(out, ts, Kind::Complete),
            Event::Unwind => self.head(out, ts, Kind::Unwind),
        }
    }

    /// Bytes one Stack entry needs at most (two deltas).
    pub(crate) const STACK_ENTRY_BYTES: usize = 20;

    /// Bytes a Stack record of `entries` needs at most.
    pub(crate) fn stack_bytes(entries: usize) -> usize {
        20 + entries.min(MAX_STACK_ENTRIES) * Self::STACK_ENTRY_BYTES
    }

    /// A Stack record with the outermost [`MAX_STACK_ENTRIES`] of `stack`. The caller has
    /// checked `fits(out, stack_bytes(stack.len()))`.
    pub(crate) fn stack(&mut self, out: &mut [u8], ts: i64, stack: &[(u64, u32)]) {
        let stack = &stack[..stack.len().min(MAX_STACK_ENTRIES)];
        self.head(out, ts, Kind::Stack);
        self.len = put_varint(out, self.len, stack.len() as u64);
        for &(ctx, frame) in stack {
            self.ctx(out, ctx);
            self.frame(out, frame);
        }
    }
}

/// One record's content, for [`Encoder::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    Create { ctx: u64, frame: u32, parent: u64 },
    Resume { ctx: u64, frame: u32 },
    Suspend,
    Complete,
    Unwind,
    Drop { ctx: u64 },
    Wake { ctx: u64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(bytes: &[u8], at: &mut usize) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = bytes[*at];
            *at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return v;
            }
            shift += 7;
        }
    }

    fn unzigzag(v: u64) -> i64 {
        ((v >> 1) as i64) ^ -((v & 1) as i64)
    }

    #[test]
    fn zigzag_maps_small_magnitudes_to_small_codes() {
        assert_eq!(zigzag(0), 0);
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
        assert_eq!(zigzag(i64::MAX), u64::MAX - 1);
        assert_eq!(zigzag(i64::MIN), u64::MAX);
        for v in [0, 1, -1, 63, -64, 1 << 40, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    #[test]
    fn records_decode_back_with_extreme_ids() {
        let mut out = vec![0u8; 256];
        let mut enc = Encoder::default();
        enc.reset(1_000);
        let big = u64::MAX - 3;
        enc.record(
            &mut out,
            1_005,
            Event::Create {
                ctx: big,
                frame: u32::MAX,
                parent: 1,
            },
        );
        enc.record(&mut out, 1_004, Event::Resume { ctx: 1, frame: 1 });
        enc.record(&mut out, 2_000_000_000_000, Event::Suspend);
        let mut at = 0;
        let head = varint(&out, &mut at);
        assert_eq!((head & 7, unzigzag(head >> 3)), (0, 5));
        let ctx = unzigzag(varint(&out, &mut at)) as u64;
        assert_eq!(ctx, big);
        assert_eq!(unzigzag(varint(&out, &mut at)), i64::from(u32::MAX));
        assert_eq!(ctx.wrapping_sub(unzigzag(varint(&out, &mut at)) as u64), 1);
        let head = varint(&out, &mut at);
        assert_eq!((head & 7, unzigzag(head >> 3)), (1, -1));
        assert_eq!(big.wrapping_add(unzigzag(varint(&out, &mut at)) as u64), 1);
        assert_eq!(i64::from(u32::MAX) + unzigzag(varint(&out, &mut at)), 1);
        let head = varint(&out, &mut at);
        assert_eq!(
            (head & 7, unzigzag(head >> 3)),
            (2, 2_000_000_000_000 - 1_004)
        );
        assert_eq!(at, enc.len);
    }

    #[test]
    fn a_resume_suspend_pair_a_microsecond_apart_takes_a_few_bytes() {
        let mut out = vec![0u8; 64];
        let mut enc = Encoder::default();
        enc.reset(0);
        enc.record(&mut out, 3_000, Event::Resume { ctx: 7, frame: 2 });
        let resume = enc.len;
        enc.record(&mut out, 6_000, Event::Suspend);
        // 3000 ticks zigzagged and shifted fits three bytes; ids one byte each.
        assert_eq!(resume, 5);
        assert_eq!(enc.len - resume, 3);
    }

    #[test]
    fn stack_records_keep_the_outermost_entries() {
        let stack: Vec<(u64, u32)> = (1..=100).map(|i| (i, i as u32)).collect();
        let mut out = vec![0u8; Encoder::stack_bytes(stack.len())];
        let mut enc = Encoder::default();
        enc.reset(0);
        enc.stack(&mut out, 0, &stack);
        let mut at = 0;
        assert_eq!(varint(&out, &mut at) & 7, Kind::Stack as u64);
        assert_eq!(varint(&out, &mut at), MAX_STACK_ENTRIES as u64);
        assert_eq!(unzigzag(varint(&out, &mut at)), 1);
    }
}
