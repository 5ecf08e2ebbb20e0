//! The sampling allocation and heap profiler.
//!
//! # Use
//!
//! ```no_run
//! use eventpipe_profiler::alloc::ProfiledAllocator;
//!
//! #[global_allocator]
//! static ALLOC: ProfiledAllocator<std::alloc::System> = ProfiledAllocator::new(std::alloc::System);
//!
//! fn main() {
//!     // Once, early: makes the provider known to eventpipe, so sessions that name it
//!     // (in-process or from `eptrace collect`) switch sampling on.
//!     eventpipe_profiler::alloc::register();
//!     eventpipe::diagnostics::start_server().ok();
//!     // ... the program ...
//! }
//! ```
//!
//! Then, from outside:
//! `eptrace collect -n PROGRAM --providers EventPipeRs-Allocations:0:5:SampleInterval=65536`
//! (or `--profile alloc`, the default 512 KiB interval) and
//! `eptrace convert -f flamegraph --samples alloc TRACE`. A session must name the provider:
//! eventpipe leaves the `EventPipeRs-*` profilers out of `*`. The mean sampling interval in
//! bytes is the session's `SampleInterval` filter argument ([`parse_sample_interval`];
//! default [`DEFAULT_SAMPLE_INTERVAL`]); with several sessions the smallest applies.
//!
//! # Why `register()` is explicit
//!
//! eventpipe tells a provider's enable callback about sessions only once one of its events
//! is registered. Registering from inside the allocator on its first use is not safe: a Rust
//! program's first allocations happen before `main`, inside the runtime's start-up (one of
//! them under the lock of std's stack-overflow thread table), and registering takes
//! eventpipe's registry lock, allocates and runs the provider's enable callbacks. So the
//! program calls [`register`] once (idempotent; cheap after the first call). Until then, and whenever no session enables the provider, the allocator only
//! forwards.
//!
//! # Cost
//!
//! While no session enables `EventPipeRs-Allocations`: one `Relaxed` load and a branch per
//! allocation, free and reallocation (`BENCHMARKS.md`). While enabled: per allocation, a
//! thread-local counter update; per free, one relaxed load of a counting filter (see
//! `table.rs`); per sample (one per `SampleInterval` bytes on average), a stack walk, two
//! exact-size stack copies, a sharded-table insert and a queue push.
//!
//! # Events (provider `EventPipeRs-Allocations`, all `Informational`, keywords 0)
//!
//! | id | name | fields (all `u64`) | stack |
//! |---|---|---|---|
//! | 1 | `AllocationSample` | `Size`, `Weight`, `Address` | the allocating stack |
//! | 2 | `FreeSample` | `Address` | none |
//! | 3 | `LiveAllocation` | `Size`, `Weight`, `Address`, `Snapshot` | the allocating stack |
//! | 4 | `HeapSnapshot` | `Snapshot`, `Allocations`, `SampleInterval` | none |
//!
//! `Weight` is the bytes the sample stands for (`Size / (1 - exp(-Size / SampleInterval))`),
//! so summing it estimates bytes allocated (`AllocationSample`) or bytes live
//! (`LiveAllocation`) without bias. A reader separates the two by event name: allocation
//! samples are `AllocationSample`; the live-heap profile is the `LiveAllocation` events with
//! the highest `Snapshot` ([`emit_heap_profile`] writes one set per call). `FreeSample` ends
//! an `AllocationSample` of the same `Address`; in a trace without `LiveAllocation` events the
//! live heap at the end of the trace is the `AllocationSample`s not ended by a `FreeSample`.
//!
//! The events are written by the profiler's emitter thread (`eventpipe-alloc`), never from
//! inside the allocator (see `emitter.rs` for why that would deadlock). `AllocationSample`
//! and `LiveAllocation` are attributed to the thread that allocated (the event's thread id /
//! V6 ThreadIndex), with the emitter as the capturing thread (CaptureThreadIndex);
//! `FreeSample` is the emitter's own.
//!
//! # At session end
//!
//! A stopping session calls the provider's callback once while it still records
//! (`EnableChange::ending`): the profiler then writes the live heap profile (a
//! `LiveAllocation` snapshot) as the session's last events; the call that follows, once it
//! has stopped, stops sampling and clears the table. A session whose output
//! failed gets no final profile; its live heap still follows from `AllocationSample` minus
//! `FreeSample` (what `eventpipe_insight::SampleSelection::LiveHeap` does when a trace has no
//! `LiveAllocation`). [`emit_heap_profile`] writes one at any other moment.
//!
//! # Heap snapshots on request
//!
//! A program that calls [`track_heap`] (or runs with `EVENTPIPE_HEAP_TRACKING=1`) keeps
//! sampling with no session, so its sampled live set is always known. A session that
//! enables the provider with the filter argument `Snapshot=1` (`eptrace heap -p PID`) is a
//! request for it: the emitter writes the live set (`LiveAllocation` under a new
//! `Snapshot`) once the session streams, then `HeapSnapshot` with the count written and the
//! interval (0: the program tracks nothing, the snapshot is empty). Such a session does not
//! sample or retune sampling, and gets no second profile when it ends. In Block mode its
//! budget paces the snapshot: nothing is lost however small the budget.

mod control;
mod emitter;
mod sampler;
mod stack;
mod state;
mod table;
mod thread;

use crate::sync::{AtomicU64, Ordering};
use std::alloc::{GlobalAlloc, Layout};
use std::time::Duration;

pub use control::{parse_sample_interval, wants_snapshot};
pub use emitter::{
    ALLOCATION_SAMPLE_ID, FREE_SAMPLE_ID, HEAP_SNAPSHOT_ID, LIVE_ALLOCATION_ID, PROVIDER_NAME,
};
pub use sampler::sample_weight;
pub use state::DEFAULT_SAMPLE_INTERVAL;

use emitter::Message;
use sampler::{next_distance, Counter, Rng};
use thread::{ThreadState, THREAD};

/// The provider, declared here, above the control (its enable callback) and the emitter (its
/// events), which both reach it.
pub(crate) static PROVIDER: eventpipe_core::Provider =
    eventpipe_core::Provider::with_callback(PROVIDER_NAME, control::on_enable_change);

/// A [`GlobalAlloc`] that forwards to `A` and, while a session enables
/// `EventPipeRs-Allocations`, samples the allocations it serves (see the [module
/// docs](self)).
#[derive(Debug, Default)]
pub struct ProfiledAllocator<A> {
    inner: A,
}

impl<A> ProfiledAllocator<A> {
    /// Wraps `inner`; usable in a `static`.
    pub const fn new(inner: A) -> Self {
        ProfiledAllocator { inner }
    }

    /// The wrapped allocator.
    pub const fn inner(&self) -> &A {
        &self.inner
    }
}

// SAFETY: every method forwards to the inner allocator with the caller's arguments unchanged
// and returns its result unchanged; the bookkeeping around it never touches the memory
// returned and never fails the allocation (a profiler failure only skips a sample).
unsafe impl<A: GlobalAlloc> GlobalAlloc for ProfiledAllocator<A> {
    // Each method is the load, the branch and a tail call to the inner allocator while no
    // session samples. While one does, the common case adds only the accounting, inline (a
    // thread-local counter on allocation, a bitset test on free), before the same tail
    // call: no call of the profiler's own, no stack frame. Everything else (a sample, the
    // profiler's own allocations, a tracked free) is out of line and cold. The bytes of an
    // allocation that then fails are counted anyway: a sample comes a little early, once,
    // when memory has run out.

    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let epoch = state::epoch();
        if epoch == 0 || take_bytes(layout.size() as u64, epoch) {
            // SAFETY: the caller's contract for `alloc` is the inner allocator's.
            return unsafe { self.inner.alloc(layout) };
        }
        // SAFETY: as above.
        unsafe { self.alloc_slow(layout, false, epoch) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let epoch = state::epoch();
        if epoch == 0 || take_bytes(layout.size() as u64, epoch) {
            // SAFETY: the caller's contract for `alloc_zeroed` is the inner allocator's.
            return unsafe { self.inner.alloc_zeroed(layout) };
        }
        // SAFETY: as above.
        unsafe { self.alloc_slow(layout, true, epoch) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if state::epoch() != 0 && table::maybe_tracked(ptr as usize) {
            // SAFETY: the caller's contract for `dealloc`, forwarded.
            return unsafe { self.dealloc_tracked(ptr, layout) };
        }
        // SAFETY: the caller's contract for `dealloc` is the inner allocator's.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    /// A reallocation is a free of the old block and an allocation of `new_size` bytes:
    /// the common case (old block not tracked, new one not sampled) counts the bytes.
    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let epoch = state::epoch();
        if epoch == 0 || (!table::maybe_tracked(ptr as usize) && take_bytes(new_size as u64, epoch))
        {
            // SAFETY: the caller's contract for `realloc` is the inner allocator's.
            return unsafe { self.inner.realloc(ptr, layout, new_size) };
        }
        // SAFETY: as above.
        unsafe { self.realloc_slow(ptr, layout, new_size, epoch) }
    }
}

impl<A: GlobalAlloc> ProfiledAllocator<A> {
    /// An allocation that may be sampled (or is the profiler's own, or the thread's first
    /// in this epoch). Its frame marks where the profiler's frames end in a captured stack:
    /// `stack::capture` keeps the frames above `marker`, starting with this function's
    /// return address (`alloc` and `alloc_zeroed` end in a call to it, which the compiler
    /// makes a tail call).
    #[cold]
    #[inline(never)]
    unsafe fn alloc_slow(&self, layout: Layout, zeroed: bool, epoch: u64) -> *mut u8 {
        let marker = 0u8;
        let marker = std::hint::black_box(&marker) as *const u8 as usize;
        let ptr = if zeroed {
            // SAFETY: forwarded from `GlobalAlloc::alloc_zeroed`.
            unsafe { self.inner.alloc_zeroed(layout) }
        } else {
            // SAFETY: forwarded from `GlobalAlloc::alloc`.
            unsafe { self.inner.alloc(layout) }
        };
        if !ptr.is_null() {
            after_alloc(ptr as usize, layout.size() as u64, epoch, marker);
        }
        ptr
    }

    /// A free of an address that may be tracked: first untracked, since once freed the
    /// address may be handed out (and sampled) again on another thread.
    #[cold]
    #[inline(never)]
    unsafe fn dealloc_tracked(&self, ptr: *mut u8, layout: Layout) {
        free_tracked(ptr as usize);
        // SAFETY: forwarded from `GlobalAlloc::dealloc`.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    /// A reallocation off the common path (see `realloc`); marks the end of the profiler's
    /// frames as [`Self::alloc_slow`] does. If the inner `realloc` fails, the old block
    /// (still live) is no longer tracked.
    #[cold]
    #[inline(never)]
    unsafe fn realloc_slow(
        &self,
        ptr: *mut u8,
        layout: Layout,
        new_size: usize,
        epoch: u64,
    ) -> *mut u8 {
        let marker = 0u8;
        let marker = std::hint::black_box(&marker) as *const u8 as usize;
        before_free(ptr as usize);
        // SAFETY: forwarded from `GlobalAlloc::realloc`.
        let new = unsafe { self.inner.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            after_alloc(new as usize, new_size as u64, epoch, marker);
        }
        new
    }
}

// Counters for `stats()`. Each is a statistic only: nothing is published through them, so
// `Relaxed` increments and loads suffice (a reader may see a count a moment late).

/// Samples taken.
static SAMPLES: AtomicU64 = AtomicU64::new(0);
/// The bytes the samples taken stand for (their weights): an unbiased estimate of the bytes
/// allocated while sampling was on.
static SAMPLED_BYTES: AtomicU64 = AtomicU64::new(0);
/// Samples not tracked (the profiler stopped or restarted meanwhile, or memory was short).
static UNTRACKED: AtomicU64 = AtomicU64::new(0);
/// Frees of tracked allocations.
static TRACKED_FREES: AtomicU64 = AtomicU64::new(0);
/// Allocations made by the profiler itself while sampling was on.
static INTERNAL: AtomicU64 = AtomicU64::new(0);
/// Allocations, frees or stack walks made while holding a table lock (a broken invariant;
/// always 0).
static UNDER_LOCK: AtomicU64 = AtomicU64::new(0);
/// Seeds the per-thread generators (`Relaxed`: only distinctness matters).
static SEEDS: AtomicU64 = AtomicU64::new(0);

/// The common case of accounting an allocation of `size` bytes made while the profiler is
/// in `epoch` (not 0): not the profiler's own, this thread's counter drawn in this epoch,
/// and the thread's next sampled byte not among these. Then the bytes are counted and it
/// returns true; otherwise it changes nothing and the allocation goes to [`after_alloc`].
#[inline(always)]
fn take_bytes(size: u64, epoch: u64) -> bool {
    THREAD
        .try_with(|t| {
            if t.guard.get() || t.epoch.get() != epoch {
                return false;
            }
            match t.remaining.get().checked_sub(size) {
                Some(remaining) => {
                    t.remaining.set(remaining);
                    true
                }
                None => false,
            }
        })
        .unwrap_or(false)
}

/// Accounts an allocation of `size` bytes at `addr` that [`take_bytes`] did not: the
/// profiler's own, a thread's first in this epoch, or one to sample. `marker` is the
/// address of a local in the allocator's frame (see `stack::capture`).
#[cold]
#[inline(never)]
fn after_alloc(addr: usize, size: u64, epoch: u64, marker: usize) {
    let _ = THREAD.try_with(|t| {
        if t.guard.get() {
            internal_alloc(t);
        } else {
            after_alloc_slow(t, addr, size, marker, epoch);
        }
    });
}

/// The profiler's own allocation: forwarded, not counted, not sampled.
#[cold]
#[inline(never)]
fn internal_alloc(t: &ThreadState) {
    INTERNAL.fetch_add(1, Ordering::Relaxed);
    if t.holding_lock.get() {
        UNDER_LOCK.fetch_add(1, Ordering::Relaxed);
    }
}

/// A thread's first allocation in this epoch, or one that is sampled.
#[cold]
#[inline(never)]
fn after_alloc_slow(t: &ThreadState, addr: usize, size: u64, marker: usize, epoch: u64) {
    if epoch == 0 {
        return;
    }
    let interval = state::INTERVAL.load(Ordering::Relaxed).max(1);
    let mut rng = Rng::from_state(t.rng.get()).unwrap_or_else(|| Rng::new(seed(t)));
    let mut counter = if t.epoch.get() == epoch {
        Counter {
            remaining: t.remaining.get(),
        }
    } else {
        // First allocation of this thread in this epoch: start from a fresh draw, which by
        // memorylessness is as good as having counted all along.
        t.epoch.set(epoch);
        Counter {
            remaining: next_distance(&mut rng, interval),
        }
    };
    let sampled = counter.account(size, &mut rng, interval);
    t.remaining.set(counter.remaining);
    t.rng.set(rng.state());
    if sampled {
        t.guard.set(true);
        sample(t, addr, size, interval, epoch, marker);
        t.guard.set(false);
    }
}

fn seed(t: &ThreadState) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t as *const ThreadState as u64)
        ^ nanos
        ^ SEEDS
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .rotate_left(17)
}

/// Takes one sample: stack, table entry, event. Runs under the re-entrancy guard, so the
/// allocations it makes (scratch buffer, stack copies, table growth) are forwarded unsampled;
/// no lock is held while it walks the stack or allocates.
#[inline(never)]
fn sample(t: &ThreadState, addr: usize, size: u64, interval: u64, epoch: u64, marker: usize) {
    SAMPLES.fetch_add(1, Ordering::Relaxed);
    if t.holding_lock.get() {
        // Cannot happen (a table lock is never held outside `table.rs`'s short critical
        // sections); counted so the tests prove it.
        UNDER_LOCK.fetch_add(1, Ordering::Relaxed);
    }
    let weight = sample_weight(size, interval);
    SAMPLED_BYTES.fetch_add(weight, Ordering::Relaxed);
    let thread = thread::os_tid(t);
    let stack = stack::capture(marker);
    // The event gets its own exact-size copy: the table's may be freed (by a free of `addr`
    // on another thread) before the emitter writes the event.
    let event_stack = stack.as_deref().and_then(copy_stack);
    let entry = table::Entry {
        size,
        weight,
        thread,
        stack,
    };
    if let Err(entry) = table::insert(addr, entry, epoch) {
        UNTRACKED.fetch_add(1, Ordering::Relaxed);
        drop(entry);
    }
    emitter::send(Message::Alloc {
        epoch,
        size,
        weight,
        addr,
        thread,
        stack: event_stack,
    });
}

fn copy_stack(frames: &[usize]) -> Option<Box<[usize]>> {
    let mut v = Vec::new();
    v.try_reserve_exact(frames.len()).ok()?;
    v.extend_from_slice(frames);
    Some(v.into_boxed_slice())
}

/// Stops tracking `addr` if it was sampled, and queues its `FreeSample`. Also on the
/// profiler's own frees (the emitter may drop the last reference to something a sampled
/// thread allocated).
#[inline]
fn before_free(addr: usize) {
    if !table::maybe_tracked(addr) {
        return;
    }
    free_tracked(addr);
}

#[cold]
#[inline(never)]
fn free_tracked(addr: usize) {
    if thread::holding_lock() {
        // Cannot happen (nothing frees under a table lock); taking the lock again would
        // deadlock, so the entry is left for `clear`.
        UNDER_LOCK.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let Some(entry) = table::remove(addr) else {
        return;
    };
    TRACKED_FREES.fetch_add(1, Ordering::Relaxed);
    let epoch = state::epoch();
    thread::with_guard(|| {
        drop(entry);
        emitter::send(Message::Free { epoch, addr });
    });
}

/// Registers the profiler's events with eventpipe, so that sessions naming
/// `EventPipeRs-Allocations` reach its enable callback (including sessions already running,
/// which are told before this returns). Call once, early in `main`; idempotent. Returns
/// whether a session records allocation samples now.
///
/// With `EVENTPIPE_HEAP_TRACKING` in the environment (`1`, or a sampling interval such as
/// `64KiB`), it also calls [`track_heap`].
pub fn register() -> bool {
    eventpipe_core::server::warn_if_unserved("eventpipe-profiler's allocation profiler");
    let samples = thread::with_guard(|| {
        ALLOC_RATE.register();
        LIVE_BYTES.register();
        let samples = emitter::ALLOCATION_SAMPLE.register();
        emitter::FREE_SAMPLE.register();
        emitter::LIVE_ALLOCATION.register();
        emitter::HEAP_SNAPSHOT.register();
        samples
    });
    if let Some(value) = std::env::var_os("EVENTPIPE_HEAP_TRACKING") {
        let value = value.to_string_lossy();
        let interval = match value.trim() {
            "1" | "true" | "on" => DEFAULT_SAMPLE_INTERVAL,
            other => parse_sample_interval(Some(&format!("SampleInterval={other}"))),
        };
        track_heap(interval);
    }
    samples
}

/// `alloc-rate` on the runtime's counters provider: the sampled estimate of the bytes
/// allocated (the samples' weights), while sampling is on (a session records
/// `EventPipeRs-Allocations`, or the heap is tracked); nothing otherwise.
static ALLOC_RATE: eventpipe_core::ObservedCounter = eventpipe_core::ObservedCounter::new(
    &eventpipe_core::counters::runtime::PROVIDER,
    eventpipe_core::CounterInfo::new("alloc-rate")
        .display_name("Allocation Rate")
        .unit("B")
        .description("Bytes allocated, estimated from the allocation profiler's samples"),
    || SAMPLED_BYTES.load(Ordering::Relaxed),
);

/// `live-bytes` on the runtime's counters provider: the sampled live set's estimate (the
/// weights of the sampled allocations not yet freed); 0 while sampling is off.
static LIVE_BYTES: eventpipe_core::Gauge = eventpipe_core::Gauge::observed(
    &eventpipe_core::counters::runtime::PROVIDER,
    eventpipe_core::CounterInfo::new("live-bytes")
        .display_name("Live Bytes")
        .unit("B")
        .description("Bytes live on the heap, estimated from the allocation profiler's samples"),
    || thread::with_guard(table::live_weight) as f64,
);

/// Keeps sampling on with no session, at a mean interval of `sample_interval` bytes, so
/// the sampled live set is always known and a heap snapshot (`eptrace heap -p PID`, a
/// session enabling `EventPipeRs-Allocations` with `Snapshot=1`) can be taken at any time.
/// Costs what sampling costs while a session runs (`BENCHMARKS.md`); the events go nowhere
/// until a session listens. Call after [`register`]; the environment variable
/// `EVENTPIPE_HEAP_TRACKING` does the same without a code change.
pub fn track_heap(sample_interval: u64) {
    control::track_always(sample_interval);
}

/// The interval the program tracks its heap at with no session, if it does.
pub fn heap_tracking() -> Option<u64> {
    control::tracking_interval()
}

/// Writes the live heap profile now: one `LiveAllocation` event per sampled allocation still
/// live, with its stack, all with the same new `Snapshot` number. Returns how many were
/// written (0 when no session enables the profiler). Writes from the calling thread, after
/// waiting (at most a second) for the samples already queued to be written.
pub fn emit_heap_profile() -> usize {
    emitter::emit_heap_profile()
}

/// Waits until the events of every sample and free taken so far are written to the
/// sessions (at most `timeout`); returns whether it got there. Call before stopping an
/// in-process session so that its last samples are in it.
pub fn flush(timeout: Duration) -> bool {
    thread::with_guard(|| emitter::flush(timeout))
}

/// Whether a session enables sampling now.
pub fn is_enabled() -> bool {
    state::enabled()
}

/// Counters of the profiler since the process started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Whether a session enables sampling now.
    pub enabled: bool,
    /// The mean sampling interval in bytes in use (or last used).
    pub sample_interval: u64,
    /// Allocations sampled.
    pub samples: u64,
    /// Sampled allocations tracked as live now (0 whenever sampling is off).
    pub tracked: usize,
    /// Frees of tracked allocations.
    pub tracked_frees: u64,
    /// Samples not tracked: sampling stopped or restarted while they were being taken, or
    /// memory for the table was short.
    pub untracked_samples: u64,
    /// `AllocationSample`/`FreeSample` events lost because the emitter's queue was full.
    pub events_dropped: u64,
    /// Allocations the profiler made for itself while sampling was on (never sampled).
    pub internal_allocations: u64,
    /// Allocations, frees or stack walks made while holding a tracking-table lock: a broken
    /// invariant, always 0 (the tests assert it).
    pub allocations_under_lock: u64,
    /// Heap profiles emitted.
    pub heap_profiles: u64,
    /// Scratch buffers for stack walks kept in the pool now (at most a few).
    pub pooled_scratch_buffers: usize,
}

/// The profiler's counters.
pub fn stats() -> Stats {
    thread::with_guard(|| Stats {
        enabled: state::enabled(),
        sample_interval: state::INTERVAL.load(Ordering::Relaxed),
        samples: SAMPLES.load(Ordering::Relaxed),
        tracked: table::len(),
        tracked_frees: TRACKED_FREES.load(Ordering::Relaxed),
        untracked_samples: UNTRACKED.load(Ordering::Relaxed),
        events_dropped: emitter::DROPPED.load(Ordering::Relaxed),
        internal_allocations: INTERNAL.load(Ordering::Relaxed),
        allocations_under_lock: UNDER_LOCK.load(Ordering::Relaxed),
        // Acquire, with the emitter's Release: a caller that sees a snapshot counted and
        // then flushes finds the emitter still busy with it, or done.
        heap_profiles: emitter::SNAPSHOTS.load(Ordering::Acquire),
        pooled_scratch_buffers: stack::pooled(),
    })
}
