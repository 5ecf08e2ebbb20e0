//! Payload encoding: the typed fields an event carries, as the trace stores them (integers
//! and floats little-endian, bool as a u32, strings NUL-terminated UTF-16, GUIDs as 16 bytes,
//! arrays a u16 count then their elements).

use std::mem::MaybeUninit;

use crate::provider::FieldKind;

/// A payload's bytes as they are encoded: a 1 KiB stack buffer that spills to the heap only
/// for larger payloads. Only this crate writes into one: code outside it puts fields through
/// a [`PayloadWriter`](crate::PayloadWriter), which holds them to the declared layout. The inline buffer is left uninitialised: zeroing 1 KiB per write cost a
/// fifth of an enabled write.
pub struct PayloadBuffer {
    inline: [MaybeUninit<u8>; INLINE],
    /// Bytes of `inline` written so far; `inline[..len]` is initialised.
    len: usize,
    spill: Vec<u8>,
}

const INLINE: usize = 1024;

impl std::fmt::Debug for PayloadBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PayloadBuffer")
            .field("bytes", &self.as_bytes())
            .finish()
    }
}

impl PayloadBuffer {
    /// Initialises a writer in place. Building one by value and moving it made the
    /// compiler zero the whole 1 KiB inline buffer on every write; in place, only `len` and
    /// `spill` are written and the buffer stays uninitialised.
    #[inline]
    pub(crate) fn init_in(slot: &mut MaybeUninit<PayloadBuffer>) -> &mut PayloadBuffer {
        let p = slot.as_mut_ptr();
        // `inline` holds `MaybeUninit<u8>`, for which any contents (including none) are
        // valid, so the whole value is initialised once both fields are written here.
        // SAFETY: `p` points to writable memory for a `PayloadBuffer`.
        unsafe {
            std::ptr::addr_of_mut!((*p).len).write(0);
            std::ptr::addr_of_mut!((*p).spill).write(Vec::new());
            slot.assume_init_mut()
        }
    }

    /// Appends raw bytes.
    #[inline]
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        if self.spill.is_empty() && self.len + b.len() <= INLINE {
            // SAFETY: `len + b.len() <= INLINE`, so the destination is inside `inline`; the
            // source is a distinct borrowed slice, so they do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    b.as_ptr(),
                    self.inline.as_mut_ptr().add(self.len).cast::<u8>(),
                    b.len(),
                );
            }
            self.len += b.len();
        } else {
            self.spill_slow(b);
        }
    }

    #[cold]
    fn spill_slow(&mut self, b: &[u8]) {
        if self.spill.is_empty() {
            let written = self.inline_bytes().to_vec();
            self.spill = written;
        }
        self.spill.extend_from_slice(b);
    }

    #[inline]
    fn inline_bytes(&self) -> &[u8] {
        // SAFETY: `inline[..len]` was initialised by `bytes`, and `MaybeUninit<u8>` has the
        // layout of `u8`.
        unsafe { std::slice::from_raw_parts(self.inline.as_ptr().cast::<u8>(), self.len) }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        if self.spill.is_empty() {
            self.inline_bytes()
        } else {
            &self.spill
        }
    }
}

/// Closes [`PayloadField`] to this crate: an implementation decides the bytes a field
/// puts in the trace, and one that disagreed with its `KIND` would write a trace readers
/// misparse from that field on.
mod sealed {
    pub trait Sealed {}
}

/// A value that can be a payload field. Sealed: implemented for the field types the
/// format has (integers, floats, `bool`, strings, GUIDs, slices of them), not outside
/// this crate:
///
/// ```compile_fail
/// struct Celsius(f64);
/// impl eventpipe_core::PayloadField for Celsius {
///     const KIND: eventpipe_core::FieldKind = eventpipe_core::FieldKind::F64;
///     fn encode(&self, w: &mut eventpipe_core::PayloadBuffer) {
///         eventpipe_core::PayloadField::encode(&self.0, w)
///     }
/// }
/// ```
pub trait PayloadField: sealed::Sealed {
    /// The field type this value encodes as.
    const KIND: FieldKind;
    /// The encoded size, when every value of the type encodes to that many bytes. Such
    /// fields let `write_event!` encode straight into the trace buffer. A type that sets it
    /// also implements [`encode_fixed`](Self::encode_fixed).
    #[doc(hidden)]
    const FIXED_SIZE: Option<usize> = None;
    /// Appends the encoded value. Only this crate can call it: the buffer is not reachable
    /// from outside, where fields go through a [`PayloadWriter`](crate::PayloadWriter).
    #[doc(hidden)]
    fn encode(&self, w: &mut PayloadBuffer);
    /// Writes the encoded value into `dst`, which is `FIXED_SIZE` bytes long; called only
    /// when `FIXED_SIZE` is set.
    #[doc(hidden)]
    #[inline]
    fn encode_fixed(&self, dst: &mut [u8]) {
        let _ = dst;
    }
}

/// Copies `bytes` to the front of `dst` (which its caller sized to match).
#[inline(always)]
fn put_fixed(dst: &mut [u8], bytes: &[u8]) {
    let n = dst.len().min(bytes.len());
    dst[..n].copy_from_slice(&bytes[..n]);
}

macro_rules! le_field {
    ($($t:ty => $k:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl PayloadField for $t {
            const KIND: FieldKind = FieldKind::$k;
            const FIXED_SIZE: Option<usize> = Some(std::mem::size_of::<$t>());
            #[inline]
            fn encode(&self, w: &mut PayloadBuffer) {
                w.bytes(&self.to_le_bytes());
            }
            #[inline(always)]
            fn encode_fixed(&self, dst: &mut [u8]) {
                put_fixed(dst, &self.to_le_bytes());
            }
        }
    )*};
}
le_field!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64, i64 => I64, f32 => F32, f64 => F64);

impl sealed::Sealed for bool {}
impl PayloadField for bool {
    const KIND: FieldKind = FieldKind::Bool;
    const FIXED_SIZE: Option<usize> = Some(4);
    #[inline]
    fn encode(&self, w: &mut PayloadBuffer) {
        w.bytes(&u32::from(*self).to_le_bytes());
    }
    #[inline(always)]
    fn encode_fixed(&self, dst: &mut [u8]) {
        put_fixed(dst, &u32::from(*self).to_le_bytes());
    }
}

impl sealed::Sealed for str {}
impl PayloadField for str {
    const KIND: FieldKind = FieldKind::Str;
    #[inline]
    fn encode(&self, w: &mut PayloadBuffer) {
        let mut units = [0u8; 64];
        if self.is_ascii() {
            // Each byte is its own UTF-16 unit: widen 32 at a time, no decoding.
            let bytes = self.as_bytes();
            let mut chunks = bytes.chunks_exact(32);
            for chunk in &mut chunks {
                for (pair, &b) in units.chunks_exact_mut(2).zip(chunk) {
                    pair[0] = b;
                    pair[1] = 0;
                }
                w.bytes(&units);
            }
            let rest = chunks.remainder();
            for (pair, &b) in units.chunks_exact_mut(2).zip(rest) {
                pair[0] = b;
                pair[1] = 0;
            }
            // The terminator: two more zero bytes.
            let n = 2 * rest.len();
            units[n] = 0;
            units[n + 1] = 0;
            w.bytes(&units[..n + 2]);
            return;
        }
        let mut n = 0;
        for unit in self.encode_utf16().chain(std::iter::once(0)) {
            if n == units.len() {
                w.bytes(&units);
                n = 0;
            }
            units[n..n + 2].copy_from_slice(&unit.to_le_bytes());
            n += 2;
        }
        w.bytes(&units[..n]);
    }
}

impl sealed::Sealed for &str {}
impl PayloadField for &str {
    const KIND: FieldKind = FieldKind::Str;
    #[inline]
    fn encode(&self, w: &mut PayloadBuffer) {
        (**self).encode(w);
    }
}

impl sealed::Sealed for String {}
impl PayloadField for String {
    const KIND: FieldKind = FieldKind::Str;
    #[inline]
    fn encode(&self, w: &mut PayloadBuffer) {
        self.as_str().encode(w);
    }
}

macro_rules! guid_field {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl PayloadField for $t {
            const KIND: FieldKind = FieldKind::Guid;
            const FIXED_SIZE: Option<usize> = Some(16);
            #[inline]
            fn encode(&self, w: &mut PayloadBuffer) {
                w.bytes(&self.0);
            }
            #[inline(always)]
            fn encode_fixed(&self, dst: &mut [u8]) {
                put_fixed(dst, &self.0);
            }
        }
    )*};
}
guid_field!(crate::Guid);

/// Slices are written as u16-counted arrays; longer slices are truncated to 65535 elements.
macro_rules! slice_field {
    ($($t:ty => $k:ident),*) => {$(
        impl sealed::Sealed for [$t] {}
        impl PayloadField for [$t] {
            const KIND: FieldKind = FieldKind::$k;
            #[inline]
            fn encode(&self, w: &mut PayloadBuffer) {
                let n = self.len().min(usize::from(u16::MAX));
                w.bytes(&(n as u16).to_le_bytes());
                // Staged through a stack chunk: one `bytes` call per element made a 16 KiB
                // array cost ~17 ns a byte.
                let mut chunk = [0u8; 512];
                let mut len = 0;
                for v in &self[..n] {
                    let b = v.to_le_bytes();
                    if len + b.len() > chunk.len() {
                        w.bytes(&chunk[..len]);
                        len = 0;
                    }
                    chunk[len..len + b.len()].copy_from_slice(&b);
                    len += b.len();
                }
                w.bytes(&chunk[..len]);
            }
        }
        impl sealed::Sealed for &[$t] {}
        impl PayloadField for &[$t] {
            const KIND: FieldKind = FieldKind::$k;
            #[inline]
            fn encode(&self, w: &mut PayloadBuffer) {
                (**self).encode(w);
            }
        }
    )*};
}

impl sealed::Sealed for [u8] {}
impl PayloadField for [u8] {
    const KIND: FieldKind = FieldKind::Bytes;
    #[inline]
    fn encode(&self, w: &mut PayloadBuffer) {
        let n = self.len().min(usize::from(u16::MAX));
        w.bytes(&(n as u16).to_le_bytes());
        w.bytes(&self[..n]);
    }
}

impl sealed::Sealed for &[u8] {}
impl PayloadField for &[u8] {
    const KIND: FieldKind = FieldKind::Bytes;
    #[inline]
    fn encode(&self, w: &mut PayloadBuffer) {
        (**self).encode(w);
    }
}
slice_field!(u32 => U32Array, u64 => U64Array, i64 => I64Array, f64 => F64Array);

/// The values of one typed write, as a tuple: their encoder, and their total size when
/// every field has a fixed one. Support for [`TypedEvent::write`](crate::TypedEvent::write); not part
/// of the API.
#[doc(hidden)]
pub trait PayloadValues: sealed::Sealed {
    /// The payload's size when every field's is fixed.
    const FIXED_SIZE: Option<usize>;
    /// Appends every field in order.
    fn encode(&self, w: &mut PayloadBuffer);
    /// Writes every field in order into `dst`, `FIXED_SIZE` bytes long.
    fn encode_fixed(&self, dst: &mut [u8]);
}

/// A type a field can be declared as in [`define_event!`](crate::define_event): the
/// integers, floats, `bool`, [`Guid`](crate::Guid), `&str` and slices of bytes and numbers.
/// `Arg<'a>` is what [`TypedEvent::write`](crate::TypedEvent::write) takes for the field: the type
/// itself, with a reference's lifetime left free, so a `&str` field takes a string borrowed
/// for just the call. Sealed, as [`PayloadField`] is.
pub trait DeclaredType: PayloadField {
    /// The value a write takes for a field of this type.
    type Arg<'a>: DeclaredType;
}

/// The declared field types of one event, as a tuple ([`TypedEvent`](crate::TypedEvent)'s type
/// parameter): what a write takes, and each field's [`FieldKind`]. Implemented for tuples
/// of up to 16 [`DeclaredType`]s.
pub trait EventFields: sealed::Sealed {
    /// The values a write takes, in declaration order.
    type Args<'a>: PayloadValues;
    /// Each field's type, in order.
    const KINDS: &'static [FieldKind];
}

macro_rules! field_type {
    ($($t:ty),*) => {$(
        impl DeclaredType for $t {
            type Arg<'a> = $t;
        }
    )*};
}
field_type!(
    u8,
    i8,
    u16,
    i16,
    u32,
    i32,
    u64,
    i64,
    f32,
    f64,
    bool,
    crate::Guid
);

impl DeclaredType for &str {
    type Arg<'a> = &'a str;
}

macro_rules! slice_field_type {
    ($($t:ty),*) => {$(
        impl DeclaredType for &[$t] {
            type Arg<'a> = &'a [$t];
        }
    )*};
}
slice_field_type!(u8, u32, u64, i64, f64);

const fn add_sizes(total: Option<usize>, field: Option<usize>) -> Option<usize> {
    match (total, field) {
        (Some(total), Some(field)) => total.checked_add(field),
        _ => None,
    }
}

macro_rules! payload_values {
    ($($field:ident)*) => {
        impl<$($field: DeclaredType),*> PayloadValues for ($($field,)*) {
            const FIXED_SIZE: Option<usize> = {
                let size = Some(0);
                $(let size = add_sizes(size, <$field as PayloadField>::FIXED_SIZE);)*
                size
            };

            #[inline(always)]
            #[allow(non_snake_case, unused_variables)]
            fn encode(&self, w: &mut PayloadBuffer) {
                let ($($field,)*) = self;
                $($field.encode(w);)*
            }

            #[inline(always)]
            #[allow(non_snake_case)]
            fn encode_fixed(&self, dst: &mut [u8]) {
                let ($($field,)*) = self;
                let rest = dst;
                $(
                    let size = <$field as PayloadField>::FIXED_SIZE.unwrap_or(0);
                    let (head, rest) = rest.split_at_mut(size.min(rest.len()));
                    $field.encode_fixed(head);
                )*
                let _ = rest;
            }
        }

        impl<$($field: DeclaredType),*> sealed::Sealed for ($($field,)*) {}
        impl<$($field: DeclaredType),*> EventFields for ($($field,)*) {
            type Args<'a> = ($($field::Arg<'a>,)*);
            const KINDS: &'static [FieldKind] = &[$(<$field as PayloadField>::KIND),*];
        }
    };
}

payload_values!();
payload_values!(A);
payload_values!(A B);
payload_values!(A B C);
payload_values!(A B C D);
payload_values!(A B C D E);
payload_values!(A B C D E F);
payload_values!(A B C D E F G);
payload_values!(A B C D E F G H);
payload_values!(A B C D E F G H I);
payload_values!(A B C D E F G H I J);
payload_values!(A B C D E F G H I J K);
payload_values!(A B C D E F G H I J K L);
payload_values!(A B C D E F G H I J K L M);
payload_values!(A B C D E F G H I J K L M N);
payload_values!(A B C D E F G H I J K L M N O);
payload_values!(A B C D E F G H I J K L M N O P);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_past_the_inline_buffer_spill_intact() {
        let mut slot = MaybeUninit::uninit();
        let w = PayloadBuffer::init_in(&mut slot);
        let a: Vec<u8> = (0..700u32).map(|i| i as u8).collect();
        let b: Vec<u8> = (0..700u32).map(|i| (i * 7) as u8).collect();
        w.bytes(&a);
        assert_eq!(w.as_bytes(), &a[..]);
        w.bytes(&b);
        assert_eq!(w.as_bytes(), [a, b].concat());
        // SAFETY: initialised by `init_in`, dropped once.
        unsafe { slot.assume_init_drop() };
        let mut slot = MaybeUninit::uninit();
        let s = PayloadBuffer::init_in(&mut slot);
        PayloadField::encode("x".repeat(2000).as_str(), s);
        assert_eq!(s.as_bytes().len(), 2 * 2001);
        // SAFETY: as above.
        unsafe { slot.assume_init_drop() };
    }

    fn encoded<T: PayloadField + ?Sized>(value: &T) -> Vec<u8> {
        let mut slot = MaybeUninit::uninit();
        let w = PayloadBuffer::init_in(&mut slot);
        PayloadField::encode(value, w);
        let out = w.as_bytes().to_vec();
        // SAFETY: initialised by `init_in`, dropped once.
        unsafe { slot.assume_init_drop() };
        out
    }

    /// The bytes of `values` through the staging encoder and through the in-place one.
    fn both_encodings<V: PayloadValues>(values: V) -> (Vec<u8>, Option<Vec<u8>>) {
        let mut slot = MaybeUninit::uninit();
        let w = PayloadBuffer::init_in(&mut slot);
        values.encode(w);
        let staged = w.as_bytes().to_vec();
        // SAFETY: initialised by `init_in`, dropped once.
        unsafe { slot.assume_init_drop() };
        let in_place = V::FIXED_SIZE.map(|size| {
            // Filled with a marker, so a byte the encoder skipped shows.
            let mut dst = vec![0xAA; size];
            values.encode_fixed(&mut dst);
            dst
        });
        (staged, in_place)
    }

    #[test]
    fn fixed_size_fields_encode_the_same_in_place_as_staged() {
        let guid = crate::Guid([7; 16]);
        let (staged, in_place) = both_encodings((
            1u8,
            -2i8,
            0xBEEFu16,
            -3i16,
            0xDEAD_BEEFu32,
            -4i32,
            u64::MAX,
            i64::MIN,
            1.5f32,
            -2.25f64,
            true,
            false,
            guid,
        ));
        assert_eq!(in_place.as_ref(), Some(&staged));
        assert_eq!(
            staged.len(),
            1 + 1 + 2 + 2 + 4 + 4 + 8 + 8 + 4 + 8 + 4 + 4 + 16
        );
        assert_eq!(&staged[..4], &[1, 0xFE, 0xEF, 0xBE]);
        assert_eq!(
            &staged[staged.len() - 24..staged.len() - 16],
            &[1, 0, 0, 0, 0, 0, 0, 0]
        );
        // No fields: an empty payload, written in place.
        assert_eq!(both_encodings(()), (Vec::new(), Some(Vec::new())));
    }

    #[test]
    fn one_variable_size_field_makes_the_whole_payload_staged() {
        let (staged, in_place) = both_encodings((5u32, "ab", 6u64));
        assert_eq!(in_place, None);
        assert_eq!(
            staged,
            [
                &5u32.to_le_bytes()[..],
                &[b'a', 0, b'b', 0, 0, 0],
                &6u64.to_le_bytes()
            ]
            .concat()
        );
        let bytes = [1u8, 2, 3];
        assert_eq!(both_encodings((1u8, &bytes[..])).1, None);
    }

    #[test]
    fn strings_encode_as_nul_terminated_utf16_at_every_length() {
        for len in [0, 1, 5, 31, 32, 33, 63, 64, 65, 100, 1000] {
            for text in [
                "abcdefghij".repeat(100)[..len].to_string(),
                "é€𝄞x".repeat(len),
            ] {
                let expected: Vec<u8> = text
                    .encode_utf16()
                    .chain(std::iter::once(0))
                    .flat_map(u16::to_le_bytes)
                    .collect();
                assert_eq!(encoded(text.as_str()), expected, "{text:?}");
            }
        }
    }

    #[test]
    fn arrays_encode_as_a_count_then_their_little_endian_elements() {
        // Long enough to cross the staging chunk and the inline buffer several times.
        let bytes: Vec<u8> = (0..20_000u32).map(|i| (i * 31) as u8).collect();
        let words: Vec<u64> = (0..3_000u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let floats: Vec<f64> = (0..777).map(|i| f64::from(i) * 0.5 - 100.0).collect();
        let count = |n: usize| (n as u16).to_le_bytes().to_vec();
        assert_eq!(encoded(&bytes[..]), [count(20_000), bytes.clone()].concat());
        let le_words: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(encoded(&words[..]), [count(3_000), le_words].concat());
        let le_floats: Vec<u8> = floats.iter().flat_map(|f| f.to_le_bytes()).collect();
        assert_eq!(encoded(&floats[..]), [count(777), le_floats].concat());
        // Longer than a u16 count can say: cut at 65535 elements.
        let huge = vec![7u8; 70_000];
        assert_eq!(encoded(&huge[..]).len(), 2 + 65_535);
        assert_eq!(encoded(&[0u32; 0][..]), count(0));
    }
}
