//! Payload decoding precompiled per metadata row.
//!
//! The generic decoder ([`crate::payload`]) walks the row's `FieldType` tree for every
//! event: a `match` on the type, a `Result` per field and a cursor that re-checks what
//! remains. A row's field list never changes, so when the row is read the reader turns it
//! into a flat list of [`Op`]s, one per top-level field, and [`FieldPlan::for_each_field`]
//! runs that instead. Each op's arm reads a fixed number of bytes (or a UTF-16 string) and
//! hands a value whose variant is known in that arm to the caller's closure: once the
//! closure is inlined, its own `match` on the value folds away, so an event costs one
//! dispatch per field instead of two.
//!
//! The plan covers the common field types only. Anything it does not decode itself, and
//! any payload that is too short for the next field, is handed to the generic decoder from
//! that field on, which produces the same values and the same errors.

use crate::model::{FieldDesc, FieldType, Guid};
use crate::payload::{self, DecodeError, ValueRef};

/// How one top-level field is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Bool32,
    Bool8,
    Char16,
    Char8,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
    Decimal,
    DateTime,
    FileTime,
    SystemTime,
    Guid,
    Pointer4,
    Pointer8,
    Utf16,
    /// Decoded by the generic decoder, with every field after it.
    Generic,
}

impl Op {
    fn of(ty: &FieldType, pointer_size: u32) -> Op {
        match ty {
            FieldType::Boolean32 => Op::Bool32,
            FieldType::Boolean8 => Op::Bool8,
            FieldType::Char16 => Op::Char16,
            FieldType::Char8 => Op::Char8,
            FieldType::SByte => Op::I8,
            FieldType::Byte => Op::U8,
            FieldType::Int16 => Op::I16,
            FieldType::UInt16 => Op::U16,
            FieldType::Int32 => Op::I32,
            FieldType::UInt32 => Op::U32,
            FieldType::Int64 => Op::I64,
            FieldType::UInt64 => Op::U64,
            FieldType::Single => Op::F32,
            FieldType::Double => Op::F64,
            FieldType::Decimal => Op::Decimal,
            FieldType::DateTime => Op::DateTime,
            FieldType::FileTime => Op::FileTime,
            FieldType::SystemTime => Op::SystemTime,
            FieldType::Guid => Op::Guid,
            // The generic decoder reads 4 bytes for pointer size 4 and 8 for any other.
            FieldType::Pointer if pointer_size == 4 => Op::Pointer4,
            FieldType::Pointer => Op::Pointer8,
            FieldType::Utf16String => Op::Utf16,
            _ => Op::Generic,
        }
    }
}

/// A metadata row's fields, precompiled for one pointer size.
#[derive(Debug, Clone, Default)]
pub(crate) struct FieldPlan {
    /// One op per top-level field; `None` when the row has counted arrays (their lengths
    /// come from earlier fields, which only the generic decoder keeps).
    ops: Option<Box<[Op]>>,
}

impl FieldPlan {
    pub(crate) fn new(fields: &[FieldDesc], pointer_size: u32) -> Self {
        let counted = fields.iter().any(|f| {
            matches!(
                f.ty,
                FieldType::CountedArray(..) | FieldType::CountedBytes(_)
            )
        });
        let ops = (!counted).then(|| fields.iter().map(|f| Op::of(&f.ty, pointer_size)).collect());
        FieldPlan { ops }
    }

    /// [`payload::for_each_field`] for the row this plan was built from (`fields`, with
    /// the same pointer size): the same values, the same errors and the same count.
    #[inline]
    pub(crate) fn for_each_field<'m, 'a>(
        &self,
        fields: &'m [FieldDesc],
        payload: &'a [u8],
        pointer_size: u32,
        mut visit: impl FnMut(&'m FieldDesc, ValueRef<'a>),
    ) -> Result<usize, DecodeError>
    where
        'm: 'a,
    {
        let Some(ops) = self.ops.as_deref() else {
            return payload::for_each_field(fields, payload, pointer_size, visit);
        };
        let mut rest = payload;
        for (i, (&op, f)) in ops.iter().zip(fields).enumerate() {
            // A payload that ends cleanly between two fields stops the row there. A fixed-size
            // field does not fit then, so `resume` sees to that; only a string needs a check.
            macro_rules! fixed {
                ($n:literal, $b:ident => $value:expr) => {{
                    let Some(($b, tail)) = rest.split_first_chunk::<$n>() else {
                        let pos = payload.len() - rest.len();
                        return resume(fields, payload, pointer_size, i, pos, visit);
                    };
                    rest = tail;
                    let $b = *$b;
                    visit(f, $value);
                }};
            }
            match op {
                Op::Bool32 => fixed!(4, b => ValueRef::Bool(u32::from_le_bytes(b) != 0)),
                Op::Bool8 => fixed!(1, b => ValueRef::Bool(b[0] != 0)),
                Op::Char16 => fixed!(2, b => ValueRef::Char(payload::char16(b))),
                Op::Char8 => fixed!(1, b => ValueRef::Char(char::from(b[0]))),
                Op::I8 => fixed!(1, b => ValueRef::I8(i8::from_le_bytes(b))),
                Op::U8 => fixed!(1, b => ValueRef::U8(b[0])),
                Op::I16 => fixed!(2, b => ValueRef::I16(i16::from_le_bytes(b))),
                Op::U16 => fixed!(2, b => ValueRef::U16(u16::from_le_bytes(b))),
                Op::I32 => fixed!(4, b => ValueRef::I32(i32::from_le_bytes(b))),
                Op::U32 => fixed!(4, b => ValueRef::U32(u32::from_le_bytes(b))),
                Op::I64 => fixed!(8, b => ValueRef::I64(i64::from_le_bytes(b))),
                Op::U64 => fixed!(8, b => ValueRef::U64(u64::from_le_bytes(b))),
                Op::F32 => fixed!(4, b => ValueRef::F32(f32::from_le_bytes(b))),
                Op::F64 => fixed!(8, b => ValueRef::F64(f64::from_le_bytes(b))),
                Op::Decimal => fixed!(16, b => ValueRef::Decimal(b)),
                Op::DateTime => fixed!(8, b => ValueRef::DateTime(i64::from_le_bytes(b))),
                Op::FileTime => fixed!(8, b => ValueRef::FileTime(u64::from_le_bytes(b))),
                Op::SystemTime => fixed!(16, b => ValueRef::SystemTime(payload::system_time(b))),
                Op::Guid => fixed!(16, b => ValueRef::Guid(Guid(b))),
                Op::Pointer4 => fixed!(4, b => ValueRef::Pointer(u64::from(u32::from_le_bytes(b)))),
                Op::Pointer8 => fixed!(8, b => ValueRef::Pointer(u64::from_le_bytes(b))),
                Op::Utf16 => {
                    if rest.is_empty() && i > 0 {
                        return Ok(i);
                    }
                    let (s, used) = payload::utf16_field(rest);
                    rest = rest.get(used..).unwrap_or(&[]);
                    visit(f, ValueRef::Utf16(s));
                }
                Op::Generic => {
                    let pos = payload.len() - rest.len();
                    return resume(fields, payload, pointer_size, i, pos, visit);
                }
            }
        }
        Ok(ops.len().min(fields.len()))
    }
}

/// The generic decoder from field `first` at payload offset `pos` on; kept out of line so
/// that the plan's loop stays small.
#[inline(never)]
fn resume<'m, 'a>(
    fields: &'m [FieldDesc],
    payload: &'a [u8],
    pointer_size: u32,
    first: usize,
    pos: usize,
    visit: impl FnMut(&'m FieldDesc, ValueRef<'a>),
) -> Result<usize, DecodeError>
where
    'm: 'a,
{
    payload::for_each_from(fields, payload, pointer_size, first, pos, visit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::Value;

    use crate::test_rng::next as rng;

    fn types() -> Vec<FieldType> {
        vec![
            FieldType::Boolean32,
            FieldType::Boolean8,
            FieldType::Char16,
            FieldType::Char8,
            FieldType::SByte,
            FieldType::Byte,
            FieldType::Int16,
            FieldType::UInt16,
            FieldType::Int32,
            FieldType::UInt32,
            FieldType::Int64,
            FieldType::UInt64,
            FieldType::Single,
            FieldType::Double,
            FieldType::Decimal,
            FieldType::DateTime,
            FieldType::FileTime,
            FieldType::SystemTime,
            FieldType::Guid,
            FieldType::Pointer,
            FieldType::Utf16String,
            FieldType::Utf16String,
            FieldType::VarUInt,
            FieldType::AnsiString,
            FieldType::Array(Box::new(FieldType::UInt16)),
            FieldType::CountedBytes(0),
        ]
    }

    type Decoded = (Vec<(String, Value)>, Result<usize, DecodeError>);

    fn decode_with(
        f: impl FnOnce(&mut dyn FnMut(&FieldDesc, ValueRef<'_>)) -> Result<usize, DecodeError>,
    ) -> Decoded {
        let mut seen = Vec::new();
        let result = f(&mut |fd, v| seen.push((fd.name.clone(), v.to_value())));
        (seen, result)
    }

    /// The plan and the generic decoder agree on random rows and payloads, including
    /// payloads that end early or inside a field and rows with fields the plan hands over.
    #[test]
    fn plan_agrees_with_the_generic_decoder() {
        let types = types();
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut planned_fields = 0;
        for round in 0..20_000 {
            let n = 1 + (rng(&mut x) % 6) as usize;
            let fields: Vec<FieldDesc> = (0..n)
                .map(|i| {
                    // Counted arrays are rare, so most rows get a plan.
                    let pick = rng(&mut x) as usize % types.len();
                    let pick = if pick == types.len() - 1 && round % 8 != 0 {
                        pick - 1
                    } else {
                        pick
                    };
                    FieldDesc {
                        name: format!("f{i}"),
                        ty: types[pick].clone(),
                    }
                })
                .collect();
            let len = (rng(&mut x) % 64) as usize;
            let payload: Vec<u8> = (0..len)
                .map(|_| {
                    let r = rng(&mut x);
                    // Plenty of zero bytes, so that strings end inside the payload.
                    if r % 3 == 0 {
                        0
                    } else {
                        (r >> 8) as u8
                    }
                })
                .collect();
            let pointer_size = if round % 2 == 0 { 8 } else { 4 };
            let plan = FieldPlan::new(&fields, pointer_size);
            let planned = decode_with(|v| plan.for_each_field(&fields, &payload, pointer_size, v));
            let generic =
                decode_with(|v| payload::for_each_field(&fields, &payload, pointer_size, v));
            // Compared as text: NaN is not equal to itself.
            assert_eq!(
                format!("{planned:?}"),
                format!("{generic:?}"),
                "round {round}: {fields:?} {payload:?}"
            );
            if plan.ops.is_some() {
                planned_fields += planned.0.len();
            }
        }
        assert!(planned_fields > 10_000, "{planned_fields}");
    }

    #[test]
    fn short_payloads_take_the_generic_path_and_fail_the_same_way() {
        let fields = vec![
            FieldDesc {
                name: "a".into(),
                ty: FieldType::Int32,
            },
            FieldDesc {
                name: "b".into(),
                ty: FieldType::Guid,
            },
        ];
        let plan = FieldPlan::new(&fields, 8);
        // Shorter than the plan: the GUID does not fit.
        let payload = [1u8, 0, 0, 0, 9, 9, 9];
        let planned = decode_with(|v| plan.for_each_field(&fields, &payload, 8, v));
        let err = planned.1.clone().unwrap_err();
        assert_eq!(err.field, "b");
        assert_eq!(planned.0, vec![("a".to_string(), Value::I32(1))]);
        assert_eq!(
            planned,
            decode_with(|v| payload::for_each_field(&fields, &payload, 8, v))
        );
        // Ending cleanly after the first field is not an error.
        let planned = decode_with(|v| plan.for_each_field(&fields, &payload[..4], 8, v));
        assert_eq!(planned.1, Ok(1));
    }
}
