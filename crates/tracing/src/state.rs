//! Process-wide state: one eventpipe provider per target, one state per callsite, the
//! descriptors declared for them at run time, and the flag that says whether any session
//! records any of them.
//!
//! `eventpipe_core::Provider` and `eventpipe_core::EventDescriptor` must be `&'static`, and tracing
//! declares its callsites only at run time, so both are leaked. That is bounded: callsites are
//! `static`s in the program (finitely many), every target is a callsite's `&'static str`, and
//! each callsite gets at most [`MAX_SIGNATURES`] + 1 descriptors. Nothing here grows with
//! the number of events, spans or sessions.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError, RwLock};

use eventpipe_core::{EnableChange, EventDescriptor, FieldKind, FieldSpec, Level, Provider};
use tracing_core::Metadata;

use crate::fields::Sig;

/// True while some session records at least one event of ours. The only thing read when
/// nothing listens. Written under [`OURS`]'s lock only (see [`recompute_active`]).
pub(crate) static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Every descriptor this crate declared, to recompute [`ACTIVE`].
static OURS: Mutex<Vec<&'static EventDescriptor>> = Mutex::new(Vec::new());

/// Providers by lower-cased name (sessions match names case-insensitively, and two targets
/// can map to one name, `a::b` and `a-b`: they share the provider and its event ids).
static PROVIDERS: Mutex<Option<HashMap<String, &'static ProviderState>>> = Mutex::new(None);

/// Callsite states by the address of the callsite's `&'static Metadata`.
static CALLSITES: RwLock<Option<HashMap<usize, &'static CallsiteState, PtrHash>>> =
    RwLock::new(None);

/// Serialises adding a signature to any callsite (the cold path).
static SIGNATURES: Mutex<()> = Mutex::new(());

/// A callsite recorded with more distinct type signatures than this writes every further
/// one with all fields as strings, under one more descriptor.
pub(crate) const MAX_SIGNATURES: u32 = 16;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The enable callback of every provider of ours: a session started or stopped.
fn on_enable_change(change: &EnableChange<'_>) {
    // A session's `ending` call changes no mask; the call after it does.
    if !change.ending {
        recompute_active();
    }
}

/// Sets [`ACTIVE`] from the descriptors' masks. Eventpipe updates the masks before it runs
/// the callbacks, and this runs under [`OURS`]'s lock, so whichever recomputation runs last
/// sees every change that preceded it: concurrent starts and stops cannot leave a stale
/// value behind.
fn recompute_active() {
    let ours = lock(&OURS);
    let any = ours.iter().any(|d| d.is_enabled());
    ACTIVE.store(any, Ordering::Relaxed);
}

/// Registers a descriptor of ours with eventpipe (so its provider's callback hears of
/// sessions and its mask is exact) and counts it in [`ACTIVE`].
fn track(d: &'static EventDescriptor) {
    d.register();
    let mut ours = lock(&OURS);
    ours.push(d);
    // Read under the lock: a session that stopped since `register` already cleared the
    // mask; one stopping after recomputes after us.
    if d.is_enabled() {
        ACTIVE.store(true, Ordering::Relaxed);
    }
}

/// Eventpipe's levels for tracing's, by index: ERROR, WARN, INFO, DEBUG and TRACE.
pub(crate) const LEVELS: [Level; 4] = [
    Level::Error,
    Level::Warning,
    Level::Informational,
    Level::Verbose,
];

/// The index into [`LEVELS`] of a tracing level.
pub(crate) fn level_index(level: &tracing_core::Level) -> usize {
    match *level {
        tracing_core::Level::ERROR => 0,
        tracing_core::Level::WARN => 1,
        tracing_core::Level::INFO => 2,
        _ => 3,
    }
}

static SPAN_FIELDS: [FieldSpec; 2] = [
    FieldSpec {
        name: "SpanId",
        kind: FieldKind::U64,
    },
    FieldSpec {
        name: "Name",
        kind: FieldKind::Str,
    },
];

static CLOSE_FIELDS: [FieldSpec; 1] = [FieldSpec {
    name: "SpanId",
    kind: FieldKind::U64,
}];

/// One provider's fixed events at one level.
pub(crate) struct LevelEvents {
    pub(crate) span_start: EventDescriptor,
    pub(crate) span_stop: EventDescriptor,
    pub(crate) span_close: EventDescriptor,
    /// Never written: enabled exactly when an event of this level and the events keyword
    /// would be, so a recording can be skipped before its fields are visited.
    pub(crate) events_probe: EventDescriptor,
}

impl LevelEvents {
    fn new(provider: &'static Provider, level: Level) -> Self {
        use crate::{
            EVENTS_PROBE_ID, KEYWORD_EVENTS, KEYWORD_SPANS, SPAN_CLOSE_ID, SPAN_START_ID,
            SPAN_STOP_ID,
        };
        let span = |id, name, opcode, fields| {
            EventDescriptor::new(provider, id, 0, name, level, KEYWORD_SPANS, opcode, fields)
        };
        LevelEvents {
            span_start: span(SPAN_START_ID, "SpanStart", 1, &SPAN_FIELDS),
            span_stop: span(SPAN_STOP_ID, "SpanStop", 2, &SPAN_FIELDS),
            span_close: span(SPAN_CLOSE_ID, "SpanClose", 0, &CLOSE_FIELDS),
            events_probe: EventDescriptor::new(
                provider,
                EVENTS_PROBE_ID,
                0,
                "EventsProbe",
                level,
                KEYWORD_EVENTS,
                0,
                &[],
            ),
        }
    }
}

/// A provider of ours (one per distinct provider name).
pub(crate) struct ProviderState {
    pub(crate) provider: &'static Provider,
    pub(crate) levels: [LevelEvents; 4],
    /// The next id for a per-callsite event; advanced under [`SIGNATURES`]'s lock.
    next_id: AtomicU32,
}

/// The provider for `target`, created (and its fixed events registered) on first use.
fn provider_for(target: &str) -> &'static ProviderState {
    let name = crate::provider_name(target);
    let key = name.to_ascii_lowercase();
    let mut map = lock(&PROVIDERS);
    let map = map.get_or_insert_with(HashMap::new);
    if let Some(p) = map.get(&key) {
        return p;
    }
    // Leaked once per provider name; bounded, see the module docs.
    let name: &'static str = Box::leak(name.into_boxed_str());
    let provider: &'static Provider =
        Box::leak(Box::new(Provider::with_callback(name, on_enable_change)));
    let state: &'static ProviderState = Box::leak(Box::new(ProviderState {
        provider,
        levels: LEVELS.map(|level| LevelEvents::new(provider, level)),
        next_id: AtomicU32::new(crate::FIRST_CALLSITE_ID),
    }));
    map.insert(key, state);
    // Registered now, not on a first write: only a registered provider hears of sessions
    // through its callback, and that is what turns `ACTIVE` on.
    for level in &state.levels {
        track(&level.span_start);
        track(&level.span_stop);
        track(&level.span_close);
        track(&level.events_probe);
    }
    state
}

/// One link of a callsite's list of signatures and their descriptors. Links are only ever
/// appended, so readers walk the list without a lock.
struct SigNode {
    sig: Sig,
    desc: EventDescriptor,
    next: OnceLock<&'static SigNode>,
}

/// What the layer keeps per callsite.
pub(crate) struct CallsiteState {
    pub(crate) provider: &'static ProviderState,
    /// Index into [`LEVELS`].
    pub(crate) level: usize,
    is_span: bool,
    /// The per-callsite event's name: `SpanNew` for spans, see [`event_name`] for events.
    event_name: &'static str,
    sigs: OnceLock<&'static SigNode>,
    /// Signatures added so far; changed under [`SIGNATURES`]'s lock.
    sig_count: AtomicU32,
}

impl CallsiteState {
    /// The fixed events of this callsite's provider at its level.
    pub(crate) fn level_events(&self) -> &'static LevelEvents {
        &self.provider.levels[self.level]
    }

    /// The descriptor for recordings of layout `sig`, declared on first use.
    #[inline]
    pub(crate) fn descriptor(
        &'static self,
        sig: &Sig,
        meta: &'static Metadata<'static>,
    ) -> (&'static EventDescriptor, &'static Sig) {
        let mut link = self.sigs.get();
        while let Some(node) = link {
            if node.sig == *sig {
                return (&node.desc, &node.sig);
            }
            link = node.next.get();
        }
        self.add_signature(sig, meta)
    }

    #[cold]
    fn add_signature(
        &'static self,
        sig: &Sig,
        meta: &'static Metadata<'static>,
    ) -> (&'static EventDescriptor, &'static Sig) {
        let _serial = lock(&SIGNATURES);
        let wanted = if self.sig_count.load(Ordering::Relaxed) >= MAX_SIGNATURES {
            sig.all_strings()
        } else {
            *sig
        };
        // Walk again under the lock: another thread may have added it; find the tail.
        let mut tail: &OnceLock<&'static SigNode> = &self.sigs;
        while let Some(node) = tail.get() {
            if node.sig == wanted {
                return (&node.desc, &node.sig);
            }
            tail = &node.next;
        }
        let fields = self.field_specs(&wanted, meta);
        let id = self.provider.next_id.fetch_add(1, Ordering::Relaxed);
        let keywords = if self.is_span {
            crate::KEYWORD_SPANS
        } else {
            crate::KEYWORD_EVENTS
        };
        // Leaked once per (callsite, signature); bounded by MAX_SIGNATURES + 1 per
        // callsite, see the module docs.
        let node: &'static SigNode = Box::leak(Box::new(SigNode {
            sig: wanted,
            desc: EventDescriptor::new(
                self.provider.provider,
                id,
                0,
                self.event_name,
                LEVELS[self.level],
                keywords,
                0,
                fields,
            ),
            next: OnceLock::new(),
        }));
        track(&node.desc);
        self.sig_count.fetch_add(1, Ordering::Relaxed);
        // Published last, with the descriptor registered: `set` cannot fail, the lock
        // keeps other writers out and the tail had no successor.
        let _ = tail.set(node);
        (&node.desc, &node.sig)
    }

    fn field_specs(&self, sig: &Sig, meta: &'static Metadata<'static>) -> &'static [FieldSpec] {
        let mut specs = Vec::with_capacity(sig.slots().len() + 3);
        if self.is_span {
            specs.push(FieldSpec {
                name: "SpanId",
                kind: FieldKind::U64,
            });
            specs.push(FieldSpec {
                name: "ParentSpanId",
                kind: FieldKind::U64,
            });
            specs.push(FieldSpec {
                name: "Name",
                kind: FieldKind::Str,
            });
        }
        for &(index, kind) in sig.slots() {
            let name = meta
                .fields()
                .iter()
                .find(|f| f.index() == usize::from(index))
                .map_or("Field", |f| f.name());
            let name = if name == "message" { "Message" } else { name };
            specs.push(FieldSpec {
                name,
                kind: kind.field_kind(),
            });
        }
        Box::leak(specs.into_boxed_slice())
    }
}

/// The name of a `tracing` event's eventpipe event: the name given with `name:` in the
/// macro, else `Event <file name>:<line>` (tracing's own default, `event src/x/y.rs:12`,
/// would put `/` into `Provider/Event` names).
fn event_name(meta: &'static Metadata<'static>) -> &'static str {
    let name = meta.name();
    let (file, line) = match (meta.file(), meta.line()) {
        (Some(file), Some(line)) => (file, line),
        _ => {
            return if name.starts_with("event ") {
                "Event"
            } else {
                name
            }
        }
    };
    let is_default = name
        .strip_prefix("event ")
        .and_then(|rest| rest.strip_prefix(file))
        .and_then(|rest| rest.strip_prefix(':'))
        .is_some_and(|rest| rest.parse::<u32>() == Ok(line));
    if !is_default {
        return name;
    }
    let base = file.rsplit(['/', '\\']).next().unwrap_or(file);
    // Leaked once per callsite; bounded, see the module docs.
    Box::leak(format!("Event {base}:{line}").into_boxed_str())
}

#[cold]
fn create_callsite(meta: &'static Metadata<'static>) -> &'static CallsiteState {
    let key = meta as *const Metadata<'static> as usize;
    let mut map = CALLSITES.write().unwrap_or_else(PoisonError::into_inner);
    let map = map.get_or_insert_with(HashMap::default);
    if let Some(state) = map.get(&key) {
        return state;
    }
    let is_span = meta.is_span();
    // Leaked once per callsite; bounded, see the module docs.
    let state: &'static CallsiteState = Box::leak(Box::new(CallsiteState {
        provider: provider_for(meta.target()),
        level: level_index(meta.level()),
        is_span,
        event_name: if is_span { "SpanNew" } else { event_name(meta) },
        sigs: OnceLock::new(),
        sig_count: AtomicU32::new(0),
    }));
    map.insert(key, state);
    state
}

fn lookup_callsite(key: usize) -> Option<&'static CallsiteState> {
    let map = CALLSITES.read().unwrap_or_else(PoisonError::into_inner);
    map.as_ref().and_then(|m| m.get(&key).copied())
}

/// Hashes a callsite address (already unique; spread its bits a little).
#[derive(Default)]
struct PtrHasher(u64);

impl Hasher for PtrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type PtrHash = BuildHasherDefault<PtrHasher>;

// ---- per thread: the re-entrancy guard and a small callsite cache ----------------------

const CACHE_BITS: u32 = 6;
const CACHE: usize = 1 << CACHE_BITS;

struct Local {
    /// Inside the layer on this thread: a tracing event emitted meanwhile (by eventpipe, a
    /// `Debug` impl being formatted...) is not recorded.
    busy: Cell<bool>,
    /// 0 = not yet known, 1 = an ordinary thread, 2 = one of eventpipe's own threads.
    kind: Cell<u8>,
    /// Direct-mapped: callsite address → state.
    cache: [Cell<(usize, Option<&'static CallsiteState>)>; CACHE],
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            busy: Cell::new(false),
            kind: Cell::new(0),
            cache: [const { Cell::new((0, None)) }; CACHE],
        }
    };
}

/// Held while the layer works on this thread; see [`enter`].
pub(crate) struct Busy(());

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = LOCAL.try_with(|l| l.busy.set(false));
    }
}

/// Marks this thread as inside the layer, or `None` when the layer must not record here:
/// it is already inside the layer (a re-entrant call: eventpipe, a listener or a `Debug`
/// impl emitted a tracing event while the layer was recording), or this is one of
/// eventpipe's own threads (named `eventpipe-...`: drain, in-process listener, diagnostics
/// server), whose tracing events would feed back into the sessions they serve.
#[inline]
pub(crate) fn enter() -> Option<Busy> {
    LOCAL
        .try_with(|l| {
            if l.busy.get() {
                return None;
            }
            if l.kind.get() == 0 {
                let ours = std::thread::current()
                    .name()
                    .is_some_and(|n| n.starts_with("eventpipe-"));
                l.kind.set(if ours { 2 } else { 1 });
            }
            if l.kind.get() == 2 {
                return None;
            }
            l.busy.set(true);
            Some(Busy(()))
        })
        .ok()
        .flatten()
}

/// The state of the callsite `meta` belongs to, created on first use.
#[inline]
pub(crate) fn callsite(meta: &'static Metadata<'static>) -> &'static CallsiteState {
    let key = meta as *const Metadata<'static> as usize;
    let slot = key.wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize) >> (usize::BITS - CACHE_BITS);
    if let Ok(Some(state)) = LOCAL.try_with(|l| match l.cache[slot].get() {
        (k, Some(state)) if k == key => Some(state),
        _ => None,
    }) {
        return state;
    }
    let state = lookup_callsite(key).unwrap_or_else(|| create_callsite(meta));
    let _ = LOCAL.try_with(|l| l.cache[slot].set((key, Some(state))));
    state
}
