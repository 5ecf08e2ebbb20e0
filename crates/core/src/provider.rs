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

/// The counters' publisher's hook (there is one publisher for the process).
static COUNTERS_HOOK: std::sync::OnceLock<fn(&EnableChange<'_>)> = std::sync::OnceLock::new();

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
    pub fn guid(&self) -> crate::Guid {
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
            .then(|| COUNTERS_HOOK.get().copied())
            .flatten();
        self.callback.into_iter().chain(counters)
    }

    /// Marks the provider as having counters, whose publisher `hook` is then told of
    /// every session that enables or disables it. Counters sit above the registry, so they
    /// hand it their hook rather than the registry naming them.
    pub(crate) fn mark_has_counters(&self, hook: fn(&EnableChange<'_>)) {
        let _ = COUNTERS_HOOK.set(hook);
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

/// One declared payload field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSpec {
    /// Field name.
    pub name: &'static str,
    /// Field type.
    pub kind: FieldKind,
}

/// Marker for "not registered yet"; see the module docs.
pub(crate) const UNREGISTERED: u64 = u64::MAX;

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

    #[inline(always)]
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
}
