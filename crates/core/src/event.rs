//! Writing events: the typed [`TypedEvent`] that [`define_event!`](crate::define_event)
//! declares, [`write_event!`](crate::write_event), and [`EventDescriptor`]'s write
//! methods. Each checks the event's mask (one relaxed load), encodes the payload
//! (`payload.rs`) and hands it to the write path (`writer.rs`); an event registers itself
//! on its first write.

use std::mem::MaybeUninit;

use crate::payload::{PayloadBuffer, PayloadValues};
use crate::payload_writer::{PayloadWriter, UncheckedPayloadWriter};
use crate::provider::{EventDescriptor, FieldKind, FieldSpec, UNREGISTERED};

impl EventDescriptor {
    /// Registers the event now rather than on its first write, and returns whether a
    /// session records it.
    ///
    /// An event registers itself lazily: until then [`is_enabled`](Self::is_enabled) reads
    /// true (so the first write takes the cold path) and its provider is unknown to the
    /// registry, so the provider's enable callback hears of no session. Registering makes
    /// both exact from now on: `is_enabled` follows the sessions, and the provider's callback
    /// is told of every session that names it, running ones included (before this returns,
    /// on this thread, with no lock held). Code that declares events at run time and relies
    /// on the callback or on `is_enabled` before writing (a bridge from another tracing
    /// API, say) calls this once per event. Idempotent; the cold path (the registry lock)
    /// is taken only until the event is registered.
    pub fn register(&'static self) -> bool {
        if self.index().is_some() {
            return self.is_enabled();
        }
        crate::registry::register_event(self) != 0
    }

    /// Writes the event if enabled; `fill` puts the payload fields in declaration order.
    /// Does not allocate unless the payload exceeds 1 KiB.
    ///
    /// A fill that breaks the declared layout (a value of another kind than its field, too
    /// many values or too few) writes nothing: readers would misparse every field after the
    /// break. A debug build panics there instead, naming the event and the field.
    #[inline]
    pub fn write_with(&'static self, fill: impl FnOnce(&mut PayloadWriter<'_>)) {
        let mask = self.mask();
        if mask != 0 {
            self.write_enabled(mask, None, |buffer| self.checked(buffer, fill));
        }
    }

    /// Like [`write_with`](Self::write_with), without checking the payload against the
    /// declared fields: for code that declares its events' fields at run time and writes
    /// each payload from the same description, where the check would repeat what the
    /// caller's own construction guarantees (the `tracing` layer, on every event it records).
    ///
    /// # Safety
    ///
    /// `fill` must put exactly the declared fields, in order, each as its declared kind (a
    /// struct's members one after the other). Nothing in this process depends on it for
    /// memory safety; every reader of the trace does: a payload that breaks its layout makes
    /// them misparse each field after the break, so a broken promise corrupts the recording
    /// for everyone who reads it. That is the guarantee `unsafe` hands to the caller here.
    #[inline]
    pub unsafe fn write_unchecked(
        &'static self,
        fill: impl FnOnce(&mut UncheckedPayloadWriter<'_>),
    ) {
        let mask = self.mask();
        if mask != 0 {
            self.write_enabled(mask, None, |buffer| {
                let mut writer = UncheckedPayloadWriter::new(buffer, self.fields);
                fill(&mut writer);
                self.kept_layout(writer.finish())
            });
        }
    }

    /// Runs an untyped write's `fill` over `buffer`; whether its payload keeps the layout.
    #[inline(always)]
    fn checked(
        &'static self,
        buffer: &mut PayloadBuffer,
        fill: impl FnOnce(&mut PayloadWriter<'_>),
    ) -> bool {
        let mut writer = PayloadWriter::new(buffer, self.fields);
        fill(&mut writer);
        self.kept_layout(writer.finish())
    }

    /// Whether a payload kept the declared layout; a debug build panics at a break, naming
    /// the event and the field.
    #[inline]
    fn kept_layout(&'static self, check: Result<(), crate::payload_check::Mismatch>) -> bool {
        match check {
            Ok(()) => true,
            Err(mismatch) => {
                if cfg!(debug_assertions) {
                    panic!(
                        "event {}/{} not written: {mismatch}",
                        self.provider.name(),
                        self.name
                    );
                }
                false
            }
        }
    }

    /// [`TypedEvent::write`]'s body: writes the event if enabled, with `values` as its fields. A
    /// payload whose fields all have a fixed size is encoded straight into the trace
    /// buffer. The values' types are the declared fields' by construction ([`TypedEvent`]).
    #[inline]
    fn write_values<V: crate::payload::PayloadValues>(&'static self, values: V) {
        let mask = self.mask();
        if mask == 0 {
            return;
        }
        match V::FIXED_SIZE {
            Some(size) if size <= crate::writer::MAX_FIXED_PAYLOAD => {
                self.write_fixed(mask, values);
            }
            _ => self.write_enabled(mask, None, |buffer| {
                values.encode(buffer);
                true
            }),
        }
    }

    /// One copy per payload type, so the payload's size is a constant to the compiler and
    /// every field is a fixed-size store, not a `memcpy` of a length known at run time.
    /// Only the short path is here; everything else (registration on first use, a new
    /// buffer, several sessions, stacks) is in `write_fixed_general`, so this function
    /// needs no stack frame for the general path's staging buffer.
    #[inline(never)]
    fn write_fixed<V: crate::payload::PayloadValues>(&'static self, mask: u64, values: V) {
        // An unregistered event's mask (all ones) is never taken by the short path.
        let size = Self::fixed_size::<V>();
        if !crate::writer::write_fixed_short(self, mask, size, |dst| values.encode_fixed(dst)) {
            self.write_fixed_general(mask, values);
        }
    }

    #[cold]
    #[inline(never)]
    fn write_fixed_general<V: crate::payload::PayloadValues>(
        &'static self,
        mut mask: u64,
        values: V,
    ) {
        if mask == UNREGISTERED {
            mask = crate::registry::register_event(self);
            if mask == 0 {
                return;
            }
        }
        let size = Self::fixed_size::<V>();
        crate::writer::write_fixed_general(self, mask, size, |dst| values.encode_fixed(dst));
    }

    fn fixed_size<V: crate::payload::PayloadValues>() -> usize {
        V::FIXED_SIZE
            .unwrap_or(0)
            .min(crate::writer::MAX_FIXED_PAYLOAD)
    }

    /// Like [`write_with`](Self::write_with), with a stack the caller captured (instruction
    /// pointers, leaf first) instead of one the runtime would capture. Every session that
    /// records the event gets this stack, whether or not it asked for stacks: the stack is
    /// the point of such events (a profiler's samples).
    #[inline]
    pub fn write_with_stack(
        &'static self,
        stack: &[usize],
        fill: impl FnOnce(&mut PayloadWriter<'_>),
    ) {
        let mask = self.mask();
        if mask != 0 {
            self.write_enabled_with_stack(mask, None, stack, |buffer| self.checked(buffer, fill));
        }
    }

    /// Like [`write_with_stack`](Self::write_with_stack), for an event about another
    /// thread: a sampler's sample of thread `subject_os_tid`. The trace attributes the
    /// event to that thread (its ThreadIndex / thread id) while naming the calling thread
    /// as the one that captured it (CaptureThreadIndex), and sequence numbers stay the
    /// capturing thread's, so loss accounting is unchanged.
    #[inline]
    pub fn write_about_thread(
        &'static self,
        subject_os_tid: u64,
        stack: &[usize],
        fill: impl FnOnce(&mut PayloadWriter<'_>),
    ) {
        let mask = self.mask();
        if mask != 0 {
            self.write_enabled_with_stack(mask, Some(subject_os_tid), stack, |buffer| {
                self.checked(buffer, fill)
            });
        }
    }

    #[inline(never)]
    fn write_enabled_with_stack(
        &'static self,
        mask: u64,
        subject: Option<u64>,
        stack: &[usize],
        fill: impl FnOnce(&mut PayloadBuffer) -> bool,
    ) {
        let given = crate::writer::GivenStack {
            stack: crate::stack::encode_ips(stack),
            subject,
        };
        self.encode(mask, fill, |mask, payload| {
            crate::writer::write_event(self, mask, payload, None, Some(given));
        });
    }

    #[inline(never)]
    fn write_enabled(
        &'static self,
        mask: u64,
        activity: Option<(crate::Guid, crate::Guid)>,
        fill: impl FnOnce(&mut PayloadBuffer) -> bool,
    ) {
        self.encode(mask, fill, |mask, payload| match activity {
            None => crate::writer::write_plain_event(self, mask, payload),
            Some(_) => crate::writer::write_event(self, mask, payload, activity, None),
        });
    }

    /// Registers the event on its first write, encodes the payload on the stack and hands
    /// it to `write` with the sessions' mask, unless `fill` says the payload is spoilt.
    #[inline(always)]
    fn encode(
        &'static self,
        mut mask: u64,
        fill: impl FnOnce(&mut PayloadBuffer) -> bool,
        write: impl FnOnce(u64, &[u8]),
    ) {
        if mask == UNREGISTERED {
            mask = crate::registry::register_event(self);
            if mask == 0 {
                return;
            }
        }
        let mut slot = MaybeUninit::<PayloadBuffer>::uninit();
        let payload = PayloadBuffer::init_in(&mut slot);
        if fill(payload) {
            write(mask, payload.as_bytes());
        }
        // SAFETY: `init_in` initialised the writer; it is dropped exactly once, here.
        unsafe { slot.assume_init_drop() };
    }

    /// Like [`write_with`](Self::write_with), with an activity id and related activity id.
    #[inline]
    pub fn write_with_activity(
        &'static self,
        activity: impl Into<crate::Guid>,
        related: impl Into<crate::Guid>,
        fill: impl FnOnce(&mut PayloadWriter<'_>),
    ) {
        let mask = self.mask();
        if mask != 0 {
            let activity = Some((activity.into(), related.into()));
            self.write_enabled(mask, activity, |buffer| self.checked(buffer, fill));
        }
    }
}

/// A declared event whose fields' types are `F`, a tuple (`(u64, &str)`): what
/// [`define_event!`](crate::define_event) declares. [`write`](Self::write) takes exactly
/// those types, so rustc rejects a value of another type and infers a literal's. It offers
/// no untyped write (the [`descriptor`](Self::descriptor)'s are checked as they run):
///
/// ```compile_fail
/// use eventpipe_core::{define_event, Level, Provider};
/// static P: Provider = Provider::new("P");
/// define_event! {
///     static TICK = P { id: 1, name: "Tick", level: Level::Informational, keywords: 0 } (n: u64);
/// }
/// TICK.write_with(|w| w.put(&7u32));
/// ```
pub struct TypedEvent<F> {
    descriptor: EventDescriptor,
    fields: std::marker::PhantomData<fn(F)>,
}

impl<F: crate::payload::EventFields> TypedEvent<F> {
    /// Types `descriptor`, whose declared fields must be `F`'s. Checked when the value is
    /// built, so in a `static` a mismatch fails to compile:
    ///
    /// ```compile_fail
    /// use eventpipe_core::{TypedEvent, EventDescriptor, FieldKind, FieldSpec, Level, Provider};
    /// static P: Provider = Provider::new("P");
    /// static E: TypedEvent<(u64,)> = TypedEvent::new(EventDescriptor::new(&P, 1, 0, "E",
    ///     Level::Informational, 0, 0, &[FieldSpec { name: "n", kind: FieldKind::U32 }]));
    /// ```
    pub const fn new(descriptor: EventDescriptor) -> Self {
        assert!(
            same_kinds(F::KINDS, descriptor.fields),
            "the event's declared fields are not the types it is written with"
        );
        TypedEvent {
            descriptor,
            fields: std::marker::PhantomData,
        }
    }

    /// Writes the event if any session records it, with `values` as its fields in
    /// declaration order. [`write_event!`](crate::write_event) calls this only when the
    /// event is enabled, so its arguments are not evaluated otherwise.
    #[inline]
    pub fn write(&'static self, values: F::Args<'_>) {
        self.descriptor.write_values(values);
    }

    /// Like [`write`](Self::write), with a stack the caller captured (instruction pointers,
    /// leaf first); see [`EventDescriptor::write_with_stack`].
    #[inline]
    pub fn write_with_stack(&'static self, stack: &[usize], values: F::Args<'_>) {
        let mask = self.descriptor.mask();
        if mask != 0 {
            self.descriptor
                .write_enabled_with_stack(mask, None, stack, |buffer| {
                    values.encode(buffer);
                    true
                });
        }
    }

    /// Like [`write_with_stack`](Self::write_with_stack), for an event about thread
    /// `subject_os_tid`; see [`EventDescriptor::write_about_thread`].
    #[inline]
    pub fn write_about_thread(
        &'static self,
        subject_os_tid: u64,
        stack: &[usize],
        values: F::Args<'_>,
    ) {
        let mask = self.descriptor.mask();
        if mask != 0 {
            self.descriptor
                .write_enabled_with_stack(mask, Some(subject_os_tid), stack, |buffer| {
                    values.encode(buffer);
                    true
                });
        }
    }

    /// Like [`write`](Self::write), with an activity id and related activity id.
    #[inline]
    pub fn write_with_activity(
        &'static self,
        activity: impl Into<crate::Guid>,
        related: impl Into<crate::Guid>,
        values: F::Args<'_>,
    ) {
        let mask = self.descriptor.mask();
        if mask != 0 {
            let activity = Some((activity.into(), related.into()));
            self.descriptor.write_enabled(mask, activity, |buffer| {
                values.encode(buffer);
                true
            });
        }
    }

    /// Whether any session records this event: one relaxed load and a branch.
    #[inline(always)]
    pub fn is_enabled(&self) -> bool {
        self.descriptor.is_enabled()
    }

    /// Registers the event now rather than on its first write; see
    /// [`EventDescriptor::register`].
    pub fn register(&'static self) -> bool {
        self.descriptor.register()
    }

    /// The untyped descriptor: what the event declares.
    pub const fn descriptor(&'static self) -> &'static EventDescriptor {
        &self.descriptor
    }
}

impl<F> std::fmt::Debug for TypedEvent<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.descriptor.fmt(f)
    }
}

/// Whether `fields` are of `kinds`, in order; a `const fn` so [`TypedEvent::new`] checks in
/// a `static`'s initialiser (`PartialEq` is not const).
const fn same_kinds(kinds: &[FieldKind], fields: &[FieldSpec]) -> bool {
    if kinds.len() != fields.len() {
        return false;
    }
    let mut i = 0;
    while i < kinds.len() {
        if kinds[i].code() != fields[i].kind.code() {
            return false;
        }
        i += 1;
    }
    true
}

impl FieldKind {
    /// A number per kind, comparable in a `const fn`; a struct has none a declared field
    /// type could match.
    pub(crate) const fn code(&self) -> u8 {
        match self {
            FieldKind::Bool => 0,
            FieldKind::U8 => 1,
            FieldKind::I8 => 2,
            FieldKind::U16 => 3,
            FieldKind::I16 => 4,
            FieldKind::U32 => 5,
            FieldKind::I32 => 6,
            FieldKind::U64 => 7,
            FieldKind::I64 => 8,
            FieldKind::F32 => 9,
            FieldKind::F64 => 10,
            FieldKind::Str => 11,
            FieldKind::Guid => 12,
            FieldKind::Bytes => 13,
            FieldKind::U32Array => 14,
            FieldKind::U64Array => 15,
            FieldKind::I64Array => 16,
            FieldKind::F64Array => 17,
            FieldKind::Struct(_) => u8::MAX,
        }
    }
}

/// Declares a provider's event as a `static` [`TypedEvent`], whose fields have the types given.
///
/// The provider is a path to a `static` [`Provider`](crate::Provider) (`APP`, `crate::telemetry::APP`).
/// Field types are those of [`DeclaredType`](crate::DeclaredType): integers, floats, `bool`,
/// [`Guid`](crate::Guid), `&str` and slices (`&[u8]`, `&[u32]`, `&[u64]`, `&[i64]`,
/// `&[f64]`).
///
/// ```
/// use eventpipe_core::{define_event, Provider, Level};
///
/// static DEMO: Provider = Provider::new("Demo");
/// define_event! {
///     /// One tick of the demo loop.
///     pub static TICK = DEMO { id: 1, name: "Tick", level: Level::Informational, keywords: 0x1 }
///         (count: u64, message: &str);
/// }
///
/// // Costs one relaxed load and a branch while no session listens. `42` is a `u64`: the
/// // field says so.
/// eventpipe_core::write_event!(TICK, 42, "hello");
/// ```
///
/// A value of another type than its field's does not compile:
///
/// ```compile_fail
/// use eventpipe_core::{define_event, Provider, Level};
/// static DEMO: Provider = Provider::new("Demo");
/// define_event! {
///     static TICK = DEMO { id: 1, name: "Tick", level: Level::Informational, keywords: 0 }
///         (count: u64);
/// }
/// eventpipe_core::write_event!(TICK, 7u32);
/// ```
#[macro_export]
macro_rules! define_event {
    (
        $(#[$attr:meta])*
        $vis:vis static $name:ident = $provider:path {
            id: $id:expr, name: $ename:expr, level: $level:expr, keywords: $kw:expr
            $(, version: $version:expr)? $(, opcode: $opcode:expr)? $(,)?
        } ( $($field:ident : $fty:ty),* $(,)? );
    ) => {
        $(#[$attr])*
        $vis static $name: $crate::__private::TypedEvent<($($fty,)*)> =
            $crate::__private::TypedEvent::new($crate::__private::EventDescriptor::new(
                &$provider,
                $id,
                $crate::__private::or_zero(&[$($version)?]),
                $ename,
                $level,
                $kw,
                $crate::__private::or_zero(&[$($opcode)?]),
                &[$($crate::__private::FieldSpec {
                    name: stringify!($field),
                    kind: <$fty as $crate::__private::PayloadField>::KIND,
                }),*],
            ));
    };
}

/// Writes an event declared with [`define_event!`](crate::define_event) if any session
/// records it. The values are its fields, in order and of their declared types (checked by
/// the compiler). Each argument is evaluated once, and the values only when the event is
/// enabled.
#[macro_export]
macro_rules! write_event {
    ($event:expr $(, $value:expr)* $(,)?) => {{
        let event = &$event;
        if event.is_enabled() {
            event.write(($($value,)*));
        }
    }};
}
