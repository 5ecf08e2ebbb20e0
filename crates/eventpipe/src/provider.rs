//! Providers and events: what instrumented code declares and writes.
//!
//! An event is a `static` [`EventDescriptor`] holding a cached mask with one bit per session
//! that enables it. `is_enabled` is one relaxed load and a branch; the mask is rebuilt (cold
//! path) when sessions start or stop and when an event registers itself on first use.
//!
//! The mask value `u64::MAX` doubles as "not registered yet": an unregistered event looks
//! enabled, so its first write takes the cold path and registers it. A registered event whose
//! 64 sessions all enable it also reads `u64::MAX`; the cold path then just finds it
//! registered and carries on.

use std::mem::MaybeUninit;

use crate::payload::PayloadWriter;
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Verbosity of an event (the ETW/EventPipe scale).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Level {
    /// Always logged.
    LogAlways = 0,
    /// Critical errors.
    Critical = 1,
    /// Errors.
    Error = 2,
    /// Warnings.
    Warning = 3,
    /// Informational events.
    Informational = 4,
    /// Everything.
    Verbose = 5,
}

impl Level {
    /// The level for a numeric value (values above 5 mean Verbose).
    pub fn from_u8(v: u8) -> Level {
        match v {
            0 => Level::LogAlways,
            1 => Level::Critical,
            2 => Level::Error,
            3 => Level::Warning,
            4 => Level::Informational,
            _ => Level::Verbose,
        }
    }
}

/// What a provider's enable callback is told.
#[derive(Debug, Clone)]
pub struct EnableChange<'a> {
    /// True when a session enables the provider, false when it disables it.
    pub enabled: bool,
    /// The session's keyword mask for this provider.
    pub keywords: u64,
    /// The session's level for this provider.
    pub level: Level,
    /// The session's filter arguments (`key=value;...`), if any.
    pub filter_args: Option<&'a str>,
    /// The session's slot (0..64).
    pub session_slot: usize,
    /// The provider being told (one callback may serve several providers).
    pub provider: &'a Provider,
    /// True for the first of the two calls a stopping session makes (both with `enabled:
    /// false`): this one comes while the session still records, the provider's chance to
    /// write its last events (a profiler's final heap profile) into it; the second, with
    /// `ending: false`, once it has stopped. A callback that only stops work may ignore the
    /// difference.
    pub ending: bool,
}

/// A named source of events.
#[derive(Debug)]
pub struct Provider {
    name: &'static str,
    callback: Option<fn(&EnableChange<'_>)>,
    /// Set once a counter of this provider registers (never cleared): the registry then
    /// also tells the counters' publisher of every session that enables the provider.
    has_counters: AtomicBool,
}

impl Provider {
    /// A provider called `name`. Its GUID is derived from the name the way .NET's
    /// EventSource derives it.
    pub const fn new(name: &'static str) -> Self {
        Provider {
            name,
            callback: None,
            has_counters: AtomicBool::new(false),
        }
    }

    /// A provider whose `callback` is told whenever a session enables or disables it. The
    /// callback runs on the thread that starts or stops the session, with no lock held, so
    /// it may write events: when enabling, after the session's drain thread is running.
    /// A stopping session calls it twice with `enabled: false`: first with
    /// [`EnableChange::ending`] set while it still records (what the callback writes then is
    /// the session's last word), then once it has stopped. A session whose output failed is disabled from
    /// its drain thread, with no `ending` call.
    pub const fn with_callback(name: &'static str, callback: fn(&EnableChange<'_>)) -> Self {
        Provider {
            name,
            callback: Some(callback),
            has_counters: AtomicBool::new(false),
        }
    }

    /// The provider's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The EventSource-style GUID of the name.
    pub fn guid(&self) -> nettrace::Guid {
        crate::guid::event_source_guid(self.name)
    }

    /// What to tell of a session that enables or disables this provider: its own callback
    /// and, once it has counters, the counters' publisher.
    pub(crate) fn hooks(&self) -> impl Iterator<Item = fn(&EnableChange<'_>)> {
        // Relaxed: the flag is set before the counters' descriptors register, under the
        // registry lock that every reader of this takes, which orders the two.
        let counters = self
            .has_counters
            .load(Ordering::Relaxed)
            .then_some(crate::counters::on_enable_change as fn(&EnableChange<'_>));
        self.callback.into_iter().chain(counters)
    }

    pub(crate) fn mark_has_counters(&self) {
        self.has_counters.store(true, Ordering::Relaxed);
    }
}

/// The type of one payload field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// `bool`, written as a 4-byte boolean like .NET.
    Bool,
    /// `u8`
    U8,
    /// `i8`
    I8,
    /// `u16`
    U16,
    /// `i16`
    I16,
    /// `u32`
    U32,
    /// `i32`
    I32,
    /// `u64`
    U64,
    /// `i64`
    I64,
    /// `f32`
    F32,
    /// `f64`
    F64,
    /// A string, written as NUL-terminated UTF-16 like .NET.
    Str,
    /// A GUID.
    Guid,
    /// A byte slice, written as a u16-counted array of bytes.
    Bytes,
    /// A slice of `u32`.
    U32Array,
    /// A slice of `u64`.
    U64Array,
    /// A slice of `i64`.
    I64Array,
    /// A slice of `f64`.
    F64Array,
    /// A nested struct (TypeCode Object): its fields, concatenated in the payload. Written
    /// with [`EventDescriptor::write_with`], which puts the members one after the other.
    Struct(&'static [FieldSpec]),
}

impl FieldKind {
    pub(crate) fn to_field_type(self) -> nettrace::FieldType {
        use nettrace::FieldType as T;
        let array = |t| T::Array(Box::new(t));
        match self {
            FieldKind::Bool => T::Boolean32,
            FieldKind::U8 => T::Byte,
            FieldKind::I8 => T::SByte,
            FieldKind::U16 => T::UInt16,
            FieldKind::I16 => T::Int16,
            FieldKind::U32 => T::UInt32,
            FieldKind::I32 => T::Int32,
            FieldKind::U64 => T::UInt64,
            FieldKind::I64 => T::Int64,
            FieldKind::F32 => T::Single,
            FieldKind::F64 => T::Double,
            FieldKind::Str => T::Utf16String,
            FieldKind::Guid => T::Guid,
            FieldKind::Bytes => array(T::Byte),
            FieldKind::U32Array => array(T::UInt32),
            FieldKind::U64Array => array(T::UInt64),
            FieldKind::I64Array => array(T::Int64),
            FieldKind::F64Array => array(T::Double),
            FieldKind::Struct(fields) => T::Object(field_descs(fields)),
        }
    }
}

/// The metadata's description of `fields`, nested structs included.
fn field_descs(fields: &[FieldSpec]) -> Vec<nettrace::FieldDesc> {
    fields
        .iter()
        .map(|f| nettrace::FieldDesc {
            name: f.name.to_string(),
            ty: f.kind.to_field_type(),
        })
        .collect()
}

/// One declared payload field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSpec {
    /// Field name.
    pub name: &'static str,
    /// Field type.
    pub kind: FieldKind,
}

/// Marker for "not registered yet"; see the module docs.
const UNREGISTERED: u64 = u64::MAX;

/// A declared event. Declare it as a `static` (see [`crate::define_event!`]).
#[derive(Debug)]
pub struct EventDescriptor {
    /// The provider that emits it.
    pub provider: &'static Provider,
    /// Id within the provider.
    pub id: u32,
    /// Version.
    pub version: u8,
    /// Name.
    pub name: &'static str,
    /// Level.
    pub level: Level,
    /// Keyword mask.
    pub keywords: u64,
    /// Opcode (0 = informational, 1 = start, 2 = stop, ...).
    pub opcode: u8,
    /// Payload fields, in order.
    pub fields: &'static [FieldSpec],
    /// Bit `i` set: session slot `i` records this event. Written only under the registry
    /// lock; read with Relaxed on every write, because a write that races a session
    /// starting or stopping may go either way and the session handles both.
    mask: AtomicU64,
    /// Index in the registry, valid once registered (`u32::MAX` before).
    index: AtomicU32,
}

impl EventDescriptor {
    /// Declares an event; usable in a `static`.
    #[allow(clippy::too_many_arguments)] // mirrors the manifest's event attributes
    pub const fn new(
        provider: &'static Provider,
        id: u32,
        version: u8,
        name: &'static str,
        level: Level,
        keywords: u64,
        opcode: u8,
        fields: &'static [FieldSpec],
    ) -> Self {
        EventDescriptor {
            provider,
            id,
            version,
            name,
            level,
            keywords,
            opcode,
            fields,
            mask: AtomicU64::new(UNREGISTERED),
            index: AtomicU32::new(u32::MAX),
        }
    }

    /// Whether any session records this event: one relaxed load and a branch.
    #[inline(always)]
    pub fn is_enabled(&self) -> bool {
        self.mask.load(Ordering::Relaxed) != 0
    }

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

    /// Writes the event if enabled; `fill` encodes the payload fields in declaration order.
    /// Does not allocate unless the payload exceeds 1 KiB.
    #[inline]
    pub fn write_with(&'static self, fill: impl FnOnce(&mut PayloadWriter)) {
        let mask = self.mask.load(Ordering::Relaxed);
        if mask != 0 {
            self.write_enabled(mask, None, fill);
        }
    }

    /// [`Event::write`]'s body: writes the event if enabled, with `values` as its fields. A
    /// payload whose fields all have a fixed size is encoded straight into the trace
    /// buffer. The values' types are the declared fields' by construction ([`Event`]).
    #[inline]
    fn write_values<V: crate::payload::PayloadValues>(&'static self, values: V) {
        let mask = self.mask.load(Ordering::Relaxed);
        if mask == 0 {
            return;
        }
        match V::FIXED_SIZE {
            Some(size) if size <= crate::writer::MAX_FIXED_PAYLOAD => {
                self.write_fixed(mask, values);
            }
            _ => self.write_enabled(mask, None, |w| values.encode(w)),
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
    pub fn write_with_stack(&'static self, stack: &[usize], fill: impl FnOnce(&mut PayloadWriter)) {
        let mask = self.mask.load(Ordering::Relaxed);
        if mask != 0 {
            self.write_enabled_with_stack(mask, None, stack, fill);
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
        fill: impl FnOnce(&mut PayloadWriter),
    ) {
        let mask = self.mask.load(Ordering::Relaxed);
        if mask != 0 {
            self.write_enabled_with_stack(mask, Some(subject_os_tid), stack, fill);
        }
    }

    #[inline(never)]
    fn write_enabled_with_stack(
        &'static self,
        mask: u64,
        subject: Option<u64>,
        stack: &[usize],
        fill: impl FnOnce(&mut PayloadWriter),
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
        activity: Option<(nettrace::Guid, nettrace::Guid)>,
        fill: impl FnOnce(&mut PayloadWriter),
    ) {
        self.encode(mask, fill, |mask, payload| match activity {
            None => crate::writer::write_plain_event(self, mask, payload),
            Some(_) => crate::writer::write_event(self, mask, payload, activity, None),
        });
    }

    /// Registers the event on its first write, encodes the payload on the stack and hands
    /// it to `write` with the sessions' mask.
    #[inline(always)]
    fn encode(
        &'static self,
        mut mask: u64,
        fill: impl FnOnce(&mut PayloadWriter),
        write: impl FnOnce(u64, &[u8]),
    ) {
        if mask == UNREGISTERED {
            mask = crate::registry::register_event(self);
            if mask == 0 {
                return;
            }
        }
        let mut slot = MaybeUninit::<PayloadWriter>::uninit();
        let payload = PayloadWriter::init_in(&mut slot);
        fill(payload);
        write(mask, payload.as_bytes());
        // SAFETY: `init_in` initialised the writer; it is dropped exactly once, here.
        unsafe { slot.assume_init_drop() };
    }

    /// Like [`write_with`](Self::write_with), with an activity id and related activity id.
    #[inline]
    pub fn write_with_activity(
        &'static self,
        activity: nettrace::Guid,
        related: nettrace::Guid,
        fill: impl FnOnce(&mut PayloadWriter),
    ) {
        let mask = self.mask.load(Ordering::Relaxed);
        if mask != 0 {
            self.write_enabled(mask, Some((activity, related)), fill);
        }
    }

    pub(crate) fn mask(&self) -> u64 {
        self.mask.load(Ordering::Relaxed)
    }

    pub(crate) fn set_mask(&self, mask: u64) {
        self.mask.store(mask, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn index(&self) -> Option<u32> {
        match self.index.load(Ordering::Acquire) {
            u32::MAX => None,
            i => Some(i),
        }
    }

    pub(crate) fn set_index(&self, index: u32) {
        // Release: pairs with the Acquire in `index`, so a thread that sees the index also
        // sees the registry entry that was pushed before it.
        self.index.store(index, Ordering::Release);
    }

    /// The nettrace metadata row for this event under `metadata_id`.
    pub(crate) fn metadata(&self, metadata_id: u32) -> nettrace::EventMetadata {
        nettrace::EventMetadata {
            metadata_id,
            provider: self.provider.name.to_string(),
            provider_guid: Some(self.provider.guid()),
            event_id: self.id,
            event_name: self.name.to_string(),
            keywords: self.keywords,
            version: u32::from(self.version),
            level: self.level as u32,
            opcode: (self.opcode != 0).then_some(self.opcode),
            fields: field_descs(self.fields),
            ..Default::default()
        }
    }
}

/// A declared event whose fields' types are `F`, a tuple (`(u64, &str)`): what
/// [`define_event!`](crate::define_event) declares. [`write`](Self::write) takes exactly
/// those types, so rustc rejects a value of another type and infers a literal's; everything
/// else is the [`EventDescriptor`]'s, which this derefs to.
pub struct Event<F> {
    descriptor: EventDescriptor,
    fields: std::marker::PhantomData<fn(F)>,
}

impl<F: crate::payload::EventFields> Event<F> {
    /// Types `descriptor`, whose declared fields must be `F`'s. Checked when the value is
    /// built, so in a `static` a mismatch fails to compile:
    ///
    /// ```compile_fail
    /// use eventpipe::{Event, EventDescriptor, FieldKind, FieldSpec, Level, Provider};
    /// static P: Provider = Provider::new("P");
    /// static E: Event<(u64,)> = Event::new(EventDescriptor::new(&P, 1, 0, "E",
    ///     Level::Informational, 0, 0, &[FieldSpec { name: "n", kind: FieldKind::U32 }]));
    /// ```
    pub const fn new(descriptor: EventDescriptor) -> Self {
        assert!(
            same_kinds(F::KINDS, descriptor.fields),
            "the event's declared fields are not the types it is written with"
        );
        Event {
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

    /// The untyped descriptor.
    pub const fn descriptor(&'static self) -> &'static EventDescriptor {
        &self.descriptor
    }
}

impl<F> std::ops::Deref for Event<F> {
    type Target = EventDescriptor;

    fn deref(&self) -> &EventDescriptor {
        &self.descriptor
    }
}

impl<F> std::fmt::Debug for Event<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.descriptor.fmt(f)
    }
}

/// Whether `fields` are of `kinds`, in order; a `const fn` so [`Event::new`] checks in
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
    const fn code(&self) -> u8 {
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

/// Declares a provider's event as a `static` [`Event`], whose fields have the types given.
///
/// The provider is a path to a `static` [`Provider`] (`APP`, `crate::telemetry::APP`).
/// Field types are those of [`FieldType`](crate::FieldType): integers, floats, `bool`,
/// [`nettrace::Guid`], `&str` and slices (`&[u8]`, `&[u32]`, `&[u64]`, `&[i64]`,
/// `&[f64]`).
///
/// ```
/// use eventpipe::{define_event, Provider, Level};
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
/// eventpipe::write_event!(TICK, 42, "hello");
/// ```
///
/// A value of another type than its field's does not compile:
///
/// ```compile_fail
/// use eventpipe::{define_event, Provider, Level};
/// static DEMO: Provider = Provider::new("Demo");
/// define_event! {
///     static TICK = DEMO { id: 1, name: "Tick", level: Level::Informational, keywords: 0 }
///         (count: u64);
/// }
/// eventpipe::write_event!(TICK, 7u32);
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
        $vis static $name: $crate::__private::Event<($($fty,)*)> =
            $crate::__private::Event::new($crate::__private::EventDescriptor::new(
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

#[cfg(test)]
mod tests {
    use super::*;

    static REGISTER_CALLS: AtomicU32 = AtomicU32::new(0);
    static REGISTER_ENABLED: AtomicU32 = AtomicU32::new(0);
    static REGISTER_ENDING_RECORDED: AtomicU32 = AtomicU32::new(0);
    fn count_register_callback(change: &EnableChange<'_>) {
        REGISTER_CALLS.fetch_add(1, Ordering::SeqCst);
        REGISTER_ENABLED.store(u32::from(change.enabled), Ordering::SeqCst);
        if change.ending {
            // The session still records while it ends.
            REGISTER_ENDING_RECORDED.store(u32::from(REGISTER_A.is_enabled()), Ordering::SeqCst);
        }
    }
    static REGISTER_PROVIDER: Provider =
        Provider::with_callback("Test-Unit-Register", count_register_callback);
    static REGISTER_A: EventDescriptor =
        EventDescriptor::new(&REGISTER_PROVIDER, 1, 0, "A", Level::Verbose, 0, 0, &[]);
    static REGISTER_B: EventDescriptor =
        EventDescriptor::new(&REGISTER_PROVIDER, 2, 0, "B", Level::Verbose, 0, 0, &[]);
    static UNNAMED_PROVIDER: Provider = Provider::new("Test-Unit-Register-Unnamed");
    static UNNAMED: EventDescriptor =
        EventDescriptor::new(&UNNAMED_PROVIDER, 1, 0, "C", Level::Verbose, 0, 0, &[]);

    #[test]
    fn register_makes_the_mask_and_the_enable_callback_exact_before_any_write() {
        // Unregistered: reads enabled (the sentinel) though no session names it.
        assert!(UNNAMED.is_enabled());
        assert!(!UNNAMED.register());
        assert!(!UNNAMED.is_enabled());
        assert!(!UNNAMED.register(), "idempotent");

        let path = std::env::temp_dir().join(format!(
            "eventpipe-unit-register-{}.nettrace",
            std::process::id()
        ));
        let session = crate::Session::start(crate::SessionConfig::new(
            vec![crate::ProviderConfig::new("Test-Unit-Register")],
            crate::Output::File(path.clone()),
        ))
        .unwrap();
        // The provider had no registered event when the session started: not told yet.
        assert_eq!(REGISTER_CALLS.load(Ordering::SeqCst), 0);
        assert!(REGISTER_A.register());
        assert_eq!(REGISTER_CALLS.load(Ordering::SeqCst), 1, "told on register");
        assert_eq!(REGISTER_ENABLED.load(Ordering::SeqCst), 1);
        assert!(REGISTER_B.register());
        assert_eq!(
            REGISTER_CALLS.load(Ordering::SeqCst),
            1,
            "once per provider"
        );
        assert!(!UNNAMED.is_enabled());
        let stats = session.stop().unwrap();
        std::fs::remove_file(&path).ok();
        assert_eq!(stats.events_written, 0, "registering writes nothing");
        assert_eq!(
            REGISTER_CALLS.load(Ordering::SeqCst),
            3,
            "told on stop: once ending, once stopped"
        );
        assert_eq!(REGISTER_ENABLED.load(Ordering::SeqCst), 0);
        assert_eq!(REGISTER_ENDING_RECORDED.load(Ordering::SeqCst), 1);
        assert!(!REGISTER_A.is_enabled() && !REGISTER_B.is_enabled());
        assert!(!REGISTER_A.register());
    }
}
