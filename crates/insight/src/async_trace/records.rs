//! The bytes of one `AsyncBuffer` event's `Records` field, decoded into [`Record`]s.
//!
//! The encoding (docs/async-profiler-format.md, "Records") is a run of records, each a
//! LEB128 *head* `zz(ts - prev_ts) << 3 | kind` and the kind's operands. Everything is
//! delta-encoded against the previous record of the same buffer, so a buffer decodes on its
//! own, starting from `BufferTimestamp` and from context and frame 0.
//!
//! A buffer is untrusted input. Decoding never panics and never allocates more than the
//! bytes justify:
//!
//! * a varint is at most 10 bytes; a value that does not fit its type is an error, not a
//!   silent truncation;
//! * the head is read as up to 70 bits, so a timestamp delta whose zigzag form needs all
//!   64 bits (`i64::MIN`, say) still decodes: the format does not cap it, and a writer that
//!   computes the head in 128 bits produces exactly that;
//! * a Stack record's entry count is checked against the bytes left (each entry takes at
//!   least two) before anything is reserved;
//! * context and timestamp arithmetic wraps, as the writer's two's-complement deltas do;
//!   frame ids are range-checked (they are `u32`).

use super::ids::{AsyncFrameId, ContextId};

/// One decoded record, with its timestamp resolved (ticks of the trace's clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// The future was instrumented. `parent` is the context whose poll was running on the
    /// thread at the time, if any.
    Create {
        /// When.
        ts: i64,
        /// The new context.
        ctx: ContextId,
        /// Its frame.
        frame: AsyncFrameId,
        /// Its logical caller.
        parent: Option<ContextId>,
    },
    /// A poll of `ctx` begins: pushed on the thread's poll stack.
    Resume {
        /// When.
        ts: i64,
        /// The context polled.
        ctx: ContextId,
        /// Its frame.
        frame: AsyncFrameId,
    },
    /// The innermost poll returned `Pending`.
    Suspend {
        /// When.
        ts: i64,
    },
    /// The innermost poll returned `Ready`: its context is done.
    Complete {
        /// When.
        ts: i64,
    },
    /// The innermost poll panicked: its context is done.
    Unwind {
        /// When.
        ts: i64,
    },
    /// The poll stack is replaced by these (context, frame) pairs, outermost first.
    Stack {
        /// When (the buffer's start, for the Stack record that opens a buffer).
        ts: i64,
        /// The open polls, outermost first.
        entries: Vec<(ContextId, AsyncFrameId)>,
    },
    /// The context was dropped before completing.
    Drop {
        /// When.
        ts: i64,
        /// The context dropped.
        ctx: ContextId,
    },
    /// The context (an outermost one) was woken: the first wake since its last poll began.
    /// Written by the thread that woke it.
    Wake {
        /// When.
        ts: i64,
        /// The context woken.
        ctx: ContextId,
    },
}

impl Record {
    /// The record's timestamp.
    pub fn ts(&self) -> i64 {
        match *self {
            Record::Create { ts, .. }
            | Record::Resume { ts, .. }
            | Record::Suspend { ts }
            | Record::Complete { ts }
            | Record::Unwind { ts }
            | Record::Stack { ts, .. }
            | Record::Drop { ts, .. }
            | Record::Wake { ts, .. } => ts,
        }
    }
}

/// Record kinds, the low three bits of a head.
pub(crate) mod kind {
    pub(crate) const CREATE: u8 = 0;
    pub(crate) const RESUME: u8 = 1;
    pub(crate) const SUSPEND: u8 = 2;
    pub(crate) const COMPLETE: u8 = 3;
    pub(crate) const UNWIND: u8 = 4;
    pub(crate) const STACK: u8 = 5;
    pub(crate) const DROP: u8 = 6;
    pub(crate) const WAKE: u8 = 7;
}

/// Why a buffer's records could not be decoded, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at byte {offset} of the records: {kind}")]
pub struct RecordError {
    /// Offset into the `Records` bytes of the value that failed.
    pub offset: usize,
    /// What was wrong.
    pub kind: RecordErrorKind,
}

/// What was wrong with a buffer's records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordErrorKind {
    /// The bytes end inside a value.
    #[error("the {0} is cut off")]
    Truncated(&'static str),
    /// A varint is longer than its type allows.
    #[error("the {0} overflows 64 bits")]
    Overflow(&'static str),
    /// A frame id delta leads outside `u32`.
    #[error("frame id {0} is outside 0..=4294967295")]
    FrameOutOfRange(i128),
    /// A Stack record claims more entries than the remaining bytes can hold.
    #[error("a Stack record of {count} entries cannot fit in the {remaining} bytes left")]
    StackTooLong {
        /// The count the record states.
        count: u64,
        /// Bytes left after the count.
        remaining: usize,
    },
}

/// Undoes zigzag encoding: 0, 1, 2, 3 → 0, -1, 1, -2.
pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// A bounds-checked cursor over the record bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn error(&self, at: usize, kind: RecordErrorKind) -> RecordError {
        RecordError { offset: at, kind }
    }

    /// An unsigned LEB128 of at most 10 bytes (70 bits).
    fn varint(&mut self, what: &'static str) -> Result<u128, RecordError> {
        let start = self.pos;
        let mut value = 0u128;
        for i in 0..10 {
            let Some(&byte) = self.bytes.get(self.pos) else {
                return Err(self.error(start, RecordErrorKind::Truncated(what)));
            };
            self.pos += 1;
            value |= u128::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.error(start, RecordErrorKind::Overflow(what)))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, RecordError> {
        let start = self.pos;
        let v = self.varint(what)?;
        u64::try_from(v).map_err(|_| self.error(start, RecordErrorKind::Overflow(what)))
    }

    fn zigzag(&mut self, what: &'static str) -> Result<i64, RecordError> {
        self.u64(what).map(unzigzag)
    }

    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }
}

/// The running `prev_*` values of a buffer.
struct Deltas {
    ts: i64,
    ctx: u64,
    frame: u32,
}

impl Deltas {
    fn ctx(&mut self, c: &mut Cursor<'_>) -> Result<ContextId, RecordError> {
        let delta = c.zigzag("context delta")?;
        self.ctx = self.ctx.wrapping_add(delta as u64);
        Ok(ContextId(self.ctx))
    }

    fn frame(&mut self, c: &mut Cursor<'_>) -> Result<AsyncFrameId, RecordError> {
        let at = c.pos;
        let delta = c.zigzag("frame delta")?;
        let frame = i128::from(self.frame) + i128::from(delta);
        self.frame = u32::try_from(frame)
            .map_err(|_| c.error(at, RecordErrorKind::FrameOutOfRange(frame)))?;
        Ok(AsyncFrameId(self.frame))
    }
}

/// Decodes a whole buffer. `base_ts` is its `BufferTimestamp` (as the trace's signed
/// ticks). Either every record decodes or none is returned: a reader skips a malformed
/// buffer rather than act on part of it.
///
/// # Errors
/// The first malformed value, with its offset.
pub fn decode_records(bytes: &[u8], base_ts: i64) -> Result<Vec<Record>, RecordError> {
    let mut c = Cursor { bytes, pos: 0 };
    let mut prev = Deltas {
        ts: base_ts,
        ctx: 0,
        frame: 0,
    };
    let mut out = Vec::new();
    while c.remaining() > 0 {
        let at = c.pos;
        let head = c.varint("record head")?;
        let kind = (head & 7) as u8;
        let ts_zz = u64::try_from(head >> 3)
            .map_err(|_| c.error(at, RecordErrorKind::Overflow("record head")))?;
        prev.ts = prev.ts.wrapping_add(unzigzag(ts_zz));
        let ts = prev.ts;
        out.push(match kind {
            kind::CREATE => {
                let ctx = prev.ctx(&mut c)?;
                let frame = prev.frame(&mut c)?;
                let parent_delta = c.u64("parent delta")?;
                let parent = (parent_delta != 0)
                    .then(|| ContextId(ctx.0.wrapping_sub(unzigzag(parent_delta) as u64)));
                Record::Create {
                    ts,
                    ctx,
                    frame,
                    parent,
                }
            }
            kind::RESUME => {
                let ctx = prev.ctx(&mut c)?;
                let frame = prev.frame(&mut c)?;
                Record::Resume { ts, ctx, frame }
            }
            kind::SUSPEND => Record::Suspend { ts },
            kind::COMPLETE => Record::Complete { ts },
            kind::UNWIND => Record::Unwind { ts },
            kind::STACK => {
                let count_at = c.pos;
                let count = c.u64("Stack entry count")?;
                let remaining = c.remaining();
                // Each entry is two varints of at least one byte.
                if count > (remaining / 2) as u64 {
                    return Err(
                        c.error(count_at, RecordErrorKind::StackTooLong { count, remaining })
                    );
                }
                let mut entries = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    let ctx = prev.ctx(&mut c)?;
                    let frame = prev.frame(&mut c)?;
                    entries.push((ctx, frame));
                }
                Record::Stack { ts, entries }
            }
            kind::DROP => {
                let ctx = prev.ctx(&mut c)?;
                Record::Drop { ts, ctx }
            }
            // kind::WAKE: the last of the eight kinds three bits hold.
            _ => {
                let ctx = prev.ctx(&mut c)?;
                Record::Wake { ts, ctx }
            }
        });
    }
    Ok(out)
}

/// An encoder written from the format document, independent of the profiler's writer: the
/// decoder's tests encode with it and read back, and tools and tests that synthesize traces
/// use it through [`encode_records`].
pub(crate) mod encode {
    use super::{kind, Record};

    pub(crate) fn zigzag(x: i64) -> u64 {
        ((x << 1) ^ (x >> 63)) as u64
    }

    pub(crate) fn varint(out: &mut Vec<u8>, mut v: u128) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    /// Encodes `records` as one buffer whose `BufferTimestamp` is `base_ts`.
    pub(crate) fn encode(records: &[Record], base_ts: i64) -> Vec<u8> {
        let mut out = Vec::new();
        let (mut ts, mut ctx, mut frame) = (base_ts, 0u64, 0u32);
        let mut ctx_delta = |out: &mut Vec<u8>, c: u64| {
            varint(out, u128::from(zigzag(c.wrapping_sub(ctx) as i64)));
            ctx = c;
        };
        let mut frame_delta = |out: &mut Vec<u8>, f: u32| {
            varint(out, u128::from(zigzag(i64::from(f) - i64::from(frame))));
            frame = f;
        };
        for r in records {
            let k = match r {
                Record::Create { .. } => kind::CREATE,
                Record::Resume { .. } => kind::RESUME,
                Record::Suspend { .. } => kind::SUSPEND,
                Record::Complete { .. } => kind::COMPLETE,
                Record::Unwind { .. } => kind::UNWIND,
                Record::Stack { .. } => kind::STACK,
                Record::Drop { .. } => kind::DROP,
                Record::Wake { .. } => kind::WAKE,
            };
            let delta = r.ts().wrapping_sub(ts);
            ts = r.ts();
            varint(&mut out, (u128::from(zigzag(delta)) << 3) | u128::from(k));
            match r {
                Record::Create {
                    ctx: c,
                    frame: f,
                    parent,
                    ..
                } => {
                    ctx_delta(&mut out, c.0);
                    frame_delta(&mut out, f.0);
                    let p = parent.map_or(0, |p| zigzag(c.0.wrapping_sub(p.0) as i64));
                    varint(&mut out, u128::from(p));
                }
                Record::Resume {
                    ctx: c, frame: f, ..
                } => {
                    ctx_delta(&mut out, c.0);
                    frame_delta(&mut out, f.0);
                }
                Record::Stack { entries, .. } => {
                    varint(&mut out, entries.len() as u128);
                    for (c, f) in entries {
                        ctx_delta(&mut out, c.0);
                        frame_delta(&mut out, f.0);
                    }
                }
                Record::Drop { ctx: c, .. } | Record::Wake { ctx: c, .. } => {
                    ctx_delta(&mut out, c.0)
                }
                Record::Suspend { .. } | Record::Complete { .. } | Record::Unwind { .. } => {}
            }
        }
        out
    }
}

/// The records of one `AsyncBuffer` whose `BufferTimestamp` is `base_ts`: the inverse of
/// [`decode_records`], for tools and tests that synthesize traces.
pub fn encode_records(records: &[Record], base_ts: i64) -> Vec<u8> {
    encode::encode(records, base_ts)
}

#[cfg(test)]
mod tests {
    use super::encode::{encode, varint, zigzag};
    use super::*;
    use proptest::prelude::*;

    fn ctx(v: u64) -> ContextId {
        ContextId(v)
    }
    fn frame(v: u32) -> AsyncFrameId {
        AsyncFrameId(v)
    }

    #[test]
    fn zigzag_round_trips_the_extremes() {
        for v in [
            0,
            1,
            -1,
            2,
            -2,
            i64::MAX,
            i64::MIN,
            i64::MAX - 1,
            i64::MIN + 1,
        ] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
    }

    #[test]
    fn every_kind_decodes_as_encoded() {
        let records = vec![
            Record::Stack {
                ts: 100,
                entries: vec![(ctx(7), frame(3)), (ctx(9), frame(1))],
            },
            Record::Create {
                ts: 105,
                ctx: ctx(12),
                frame: frame(4),
                parent: Some(ctx(9)),
            },
            Record::Create {
                ts: 105,
                ctx: ctx(13),
                frame: frame(4),
                parent: None,
            },
            Record::Resume {
                ts: 110,
                ctx: ctx(12),
                frame: frame(4),
            },
            Record::Suspend { ts: 120 },
            Record::Complete { ts: 121 },
            Record::Unwind { ts: 122 },
            Record::Drop {
                ts: 130,
                ctx: ctx(13),
            },
            Record::Wake {
                ts: 131,
                ctx: ctx(12),
            },
        ];
        let bytes = encode(&records, 100);
        assert_eq!(decode_records(&bytes, 100), Ok(records));
        assert_eq!(decode_records(&[], 5), Ok(vec![]));
    }

    #[test]
    fn extreme_deltas_and_ids_near_the_top_decode() {
        let records = vec![
            // A delta of i64::MIN: its zigzag form needs all 64 bits, so the head needs 67.
            Record::Suspend { ts: i64::MIN },
            Record::Complete { ts: i64::MAX },
            Record::Resume {
                ts: -5,
                ctx: ctx(u64::MAX),
                frame: frame(u32::MAX),
            },
            Record::Create {
                ts: 0,
                ctx: ctx(1),
                frame: frame(0),
                parent: Some(ctx(u64::MAX - 1)),
            },
            Record::Stack {
                ts: i64::MAX,
                entries: vec![(ctx(u64::MAX), frame(1)), (ctx(0), frame(u32::MAX))],
            },
            Record::Drop {
                ts: i64::MIN + 1,
                ctx: ctx(u64::MAX - 3),
            },
        ];
        let bytes = encode(&records, 0);
        assert_eq!(decode_records(&bytes, 0), Ok(records));
    }

    #[test]
    fn truncation_anywhere_is_an_error_not_a_panic() {
        let records = vec![
            Record::Create {
                ts: 1 << 40,
                ctx: ctx(u64::MAX),
                frame: frame(70_000),
                parent: Some(ctx(3)),
            },
            Record::Stack {
                ts: 1 << 41,
                entries: vec![(ctx(1), frame(2)); 3],
            },
        ];
        let bytes = encode(&records, 0);
        for cut in 1..bytes.len() {
            let result = decode_records(&bytes[..cut], 0);
            // A cut between records is a shorter, valid buffer.
            if let Err(e) = result {
                assert!(e.offset <= cut, "{e} at cut {cut}");
            }
        }
        let mut cut_mid_varint = Vec::new();
        varint(&mut cut_mid_varint, 1 << 20);
        cut_mid_varint.pop();
        assert_eq!(
            decode_records(&cut_mid_varint, 0).unwrap_err().kind,
            RecordErrorKind::Truncated("record head")
        );
    }

    #[test]
    fn overflowing_varints_are_rejected() {
        // Eleven continuation bytes.
        let bytes = [0xff; 11];
        assert_eq!(
            decode_records(&bytes, 0).unwrap_err().kind,
            RecordErrorKind::Overflow("record head")
        );
        // A head of exactly 70 bits: the timestamp part needs 67.
        let mut bytes = Vec::new();
        varint(&mut bytes, (1u128 << 69) | u128::from(kind::SUSPEND));
        assert_eq!(
            decode_records(&bytes, 0).unwrap_err().kind,
            RecordErrorKind::Overflow("record head")
        );
        // A 65-bit context delta.
        let mut bytes = Vec::new();
        varint(&mut bytes, u128::from(kind::DROP));
        varint(&mut bytes, 1u128 << 64);
        assert_eq!(
            decode_records(&bytes, 0).unwrap_err(),
            RecordError {
                offset: 1,
                kind: RecordErrorKind::Overflow("context delta")
            }
        );
    }

    #[test]
    fn bad_kinds_frames_and_counts_are_rejected() {
        // A frame delta of -1 from frame 0.
        let mut bytes = vec![kind::RESUME, 0];
        varint(&mut bytes, u128::from(zigzag(-1)));
        assert_eq!(
            decode_records(&bytes, 0).unwrap_err().kind,
            RecordErrorKind::FrameOutOfRange(-1)
        );
        // A Stack record claiming u64::MAX entries, and one claiming just one too many.
        let mut bytes = vec![kind::STACK];
        varint(&mut bytes, u128::from(u64::MAX));
        bytes.extend([0, 0]);
        assert_eq!(
            decode_records(&bytes, 0).unwrap_err().kind,
            RecordErrorKind::StackTooLong {
                count: u64::MAX,
                remaining: 2
            }
        );
        let bytes = [kind::STACK, 2, 0, 0, 0];
        assert!(matches!(
            decode_records(&bytes, 0).unwrap_err().kind,
            RecordErrorKind::StackTooLong { count: 2, .. }
        ));
    }

    fn any_record() -> impl Strategy<Value = Record> {
        let id = prop_oneof![any::<u64>(), 0u64..64, (u64::MAX - 64)..=u64::MAX];
        let fid = prop_oneof![any::<u32>(), 1u32..64];
        let ts = any::<i64>();
        prop_oneof![
            (
                ts,
                id.clone(),
                fid.clone(),
                proptest::option::of(id.clone())
            )
                .prop_map(|(ts, c, f, p)| Record::Create {
                    ts,
                    ctx: ContextId(c),
                    frame: AsyncFrameId(f),
                    // The format cannot say "my own parent"; that encodes as no parent.
                    parent: p.filter(|&p| p != c).map(ContextId),
                }),
            (ts, id.clone(), fid.clone()).prop_map(|(ts, c, f)| Record::Resume {
                ts,
                ctx: ContextId(c),
                frame: AsyncFrameId(f)
            }),
            ts.prop_map(|ts| Record::Suspend { ts }),
            ts.prop_map(|ts| Record::Complete { ts }),
            ts.prop_map(|ts| Record::Unwind { ts }),
            (ts, proptest::collection::vec((id.clone(), fid), 0..6)).prop_map(|(ts, e)| {
                Record::Stack {
                    ts,
                    entries: e
                        .into_iter()
                        .map(|(c, f)| (ContextId(c), AsyncFrameId(f)))
                        .collect(),
                }
            }),
            (ts, id.clone()).prop_map(|(ts, c)| Record::Drop {
                ts,
                ctx: ContextId(c)
            }),
            (ts, id).prop_map(|(ts, c)| Record::Wake {
                ts,
                ctx: ContextId(c)
            }),
        ]
    }

    proptest! {
        #[test]
        fn any_records_round_trip(
            records in proptest::collection::vec(any_record(), 0..40),
            base in any::<i64>(),
        ) {
            let bytes = encode(&records, base);
            prop_assert_eq!(decode_records(&bytes, base), Ok(records));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_records(&bytes, 0);
        }
    }
}
