//! The provider, its events, and the thread that writes them.
//!
//! The allocator never calls into eventpipe. A sampled allocation or a free of a sampled
//! address becomes a [`Message`] pushed onto a bounded lock-free queue, and one emitter
//! thread, which holds no lock of anyone's, writes the events. Writing an event from inside
//! the allocator would deadlock: eventpipe's own threads allocate while holding its locks
//! (the drain snapshots its thread list into a `Vec` under the session's lock; session start,
//! stop and event registration grow `Vec`s under the registry lock), and a first write from
//! such a thread would attach it to the session, taking those same locks again.
//!
//! The emitter writes each sample with `write_about_thread`: the trace attributes it to the
//! allocating thread (its thread id / ThreadIndex) and names the emitter as the thread that
//! captured it (CaptureThreadIndex).

use crate::sync::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use eventpipe_core::{EventDescriptor, FieldKind, FieldSpec, Level};

use super::state::{self, enabled, INTERVAL};
use super::{table, thread, PROVIDER};

/// The provider's name.
pub const PROVIDER_NAME: &str = "EventPipeRs-Allocations";

/// Event id of `AllocationSample`: one sampled allocation (`Size`, `Weight`, `Address`, all
/// `u64`), with the allocating stack, attributed to the allocating thread.
pub const ALLOCATION_SAMPLE_ID: u32 = 1;
/// Event id of `FreeSample`: a sampled allocation was freed (`Address: u64`), no stack.
pub const FREE_SAMPLE_ID: u32 = 2;
/// Event id of `LiveAllocation`: one sampled allocation still live when a heap profile was
/// taken (`Size`, `Weight`, `Address`, `Snapshot`, all `u64`), with the allocating stack,
/// attributed to the allocating thread.
pub const LIVE_ALLOCATION_ID: u32 = 3;
/// Event id of `HeapSnapshot`: the end of a snapshot a session asked for (`Snapshot`,
/// `Allocations` written, `SampleInterval` in bytes, all `u64`; `SampleInterval` 0: the
/// program tracks no heap, so the snapshot is empty).
pub const HEAP_SNAPSHOT_ID: u32 = 4;

const fn u64_field(name: &'static str) -> FieldSpec {
    FieldSpec {
        name,
        kind: FieldKind::U64,
    }
}

pub(crate) static ALLOCATION_SAMPLE: EventDescriptor = EventDescriptor::new(
    &PROVIDER,
    ALLOCATION_SAMPLE_ID,
    0,
    "AllocationSample",
    Level::Informational,
    0,
    0,
    &[u64_field("Size"), u64_field("Weight"), u64_field("Address")],
);

pub(crate) static FREE_SAMPLE: EventDescriptor = EventDescriptor::new(
    &PROVIDER,
    FREE_SAMPLE_ID,
    0,
    "FreeSample",
    Level::Informational,
    0,
    0,
    &[u64_field("Address")],
);

pub(crate) static LIVE_ALLOCATION: EventDescriptor = EventDescriptor::new(
    &PROVIDER,
    LIVE_ALLOCATION_ID,
    0,
    "LiveAllocation",
    Level::Informational,
    0,
    0,
    &[
        u64_field("Size"),
        u64_field("Weight"),
        u64_field("Address"),
        u64_field("Snapshot"),
    ],
);

pub(crate) static HEAP_SNAPSHOT: EventDescriptor = EventDescriptor::new(
    &PROVIDER,
    HEAP_SNAPSHOT_ID,
    0,
    "HeapSnapshot",
    Level::Informational,
    0,
    0,
    &[
        u64_field("Snapshot"),
        u64_field("Allocations"),
        u64_field("SampleInterval"),
    ],
);

/// A session asked for a heap snapshot; the emitter writes it next time it runs.
/// Release/Acquire: pairs the request with the emitter's swap, which then sees the state
/// the callback published before it.
static SNAPSHOT_REQUESTED: AtomicBool = AtomicBool::new(false);

/// What the allocator hands the emitter.
#[derive(Debug)]
pub(crate) enum Message {
    Alloc {
        epoch: u64,
        size: u64,
        weight: u64,
        addr: usize,
        thread: u64,
        stack: Option<Box<[usize]>>,
    },
    Free {
        epoch: u64,
        addr: usize,
    },
}

/// Messages waiting for the emitter. A full queue drops the message (counted in
/// `events_dropped`): the allocator never waits for the emitter, which may itself be waiting
/// for a Block-mode session's drain, whose allocations may be sampled.
const QUEUE_CAPACITY: usize = 8192;
/// How long a queued message may wait for the emitter when nobody wakes it: events reach
/// the session this much later (the session's drain itself runs every 100 ms by default).
const EMIT_INTERVAL: Duration = Duration::from_millis(10);

/// The hand-off from allocating threads to the emitter. Each message owns what it carries
/// (its stack included); crossbeam's `push` publishes a slot with a Release store of its
/// stamp and `pop` reads the stamp with Acquire before taking the value, so the emitter sees
/// the message fully written.
static QUEUE: OnceLock<ArrayQueue<Message>> = OnceLock::new();
static EMITTER: OnceLock<Option<Thread>> = OnceLock::new();
/// True while the emitter may hold a popped message it has not written yet (see `flush`).
static BUSY: AtomicBool = AtomicBool::new(false);
/// Messages the queue had no room for (a statistic: `Relaxed`).
pub(crate) static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Heap profiles emitted (the `Snapshot` field counts from 1). `Relaxed`: `fetch_add` alone
/// makes the numbers distinct; nothing else is published through it.
pub(crate) static SNAPSHOTS: AtomicU64 = AtomicU64::new(0);

/// Set by the emitter once its re-entrancy guard is up.
static READY: AtomicBool = AtomicBool::new(false);

/// Creates the queue and starts the emitter thread, once, and waits until the thread has
/// raised its re-entrancy guard. From the enable callback only, before sampling starts: the
/// allocations std makes on a new thread before running its closure (its name, its
/// stack-overflow bookkeeping) then happen while sampling is off, so none of the emitter's
/// allocations is ever sampled.
pub(crate) fn start() -> bool {
    QUEUE.get_or_init(|| ArrayQueue::new(QUEUE_CAPACITY));
    let spawned = EMITTER
        .get_or_init(|| {
            match std::thread::Builder::new()
                .name("eventpipe-alloc".into())
                .spawn(run)
            {
                Ok(handle) => Some(handle.thread().clone()),
                Err(e) => {
                    eprintln!("eventpipe-profiler: cannot start the emitter thread: {e}");
                    None
                }
            }
        })
        .is_some();
    if !spawned {
        return false;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    // Acquire: pairs with the emitter's Release store after raising its guard.
    while !READY.load(Ordering::Acquire) {
        if Instant::now() >= deadline {
            eprintln!("eventpipe-profiler: the emitter thread did not start");
            return false;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    true
}

/// Hands a message to the emitter; from the allocator path (no lock, no allocation, never
/// waits). Call with the re-entrancy guard raised: a dropped message frees its stack.
pub(crate) fn send(message: Message) {
    let Some(queue) = QUEUE.get() else {
        return;
    };
    match queue.push(message) {
        // The emitter looks at the queue every `EMIT_INTERVAL` anyway; waking it for each
        // sample cost a futex call (and a context switch) per sample. It is woken only once
        // the queue is half full, so a burst never fills it before it runs.
        Ok(()) => {
            if queue.len() >= QUEUE_CAPACITY / 2 {
                wake();
            }
        }
        Err(dropped) => {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            drop(dropped);
            wake();
        }
    }
}

/// Ordering: `unpark` synchronises-with the `park` it ends (std guarantees that memory
/// operations before `unpark` are visible to the thread consuming the token), and the token
/// is sticky: a push made after the emitter's last empty `pop` but before it parks leaves a
/// token, so `park` returns at once. A message pushed without a wake is not stranded either:
/// the emitter pops again at the latest `EMIT_INTERVAL` later (the queue's own SeqCst
/// operations make the push visible to that `pop`).
fn wake() {
    if let Some(Some(emitter)) = EMITTER.get() {
        emitter.unpark();
    }
}

fn run() {
    // Everything this thread allocates is the profiler's (event buffers, the writer's
    // per-thread state, freed stacks): never sampled.
    thread::guard_forever();
    READY.store(true, Ordering::Release);
    let Some(queue) = QUEUE.get() else {
        return;
    };
    loop {
        // SeqCst, with the queue's own SeqCst operations: see `flush`.
        BUSY.store(true, Ordering::SeqCst);
        while let Some(message) = queue.pop() {
            write(message);
        }
        if SNAPSHOT_REQUESTED.swap(false, Ordering::Acquire) {
            // The queue was just emptied: the samples taken before the request are written.
            // Still `BUSY`: a flush that sees the snapshot counted (`SNAPSHOTS`, Release)
            // waits until its events are written too.
            write_snapshot();
        }
        BUSY.store(false, Ordering::SeqCst);
        std::thread::park_timeout(EMIT_INTERVAL);
    }
}

fn write(message: Message) {
    // A message from an earlier epoch belongs to a profile that has ended; a later session
    // must not see it.
    match message {
        Message::Alloc {
            epoch,
            size,
            weight,
            addr,
            thread,
            stack,
        } => {
            if epoch != state::epoch() {
                return;
            }
            ALLOCATION_SAMPLE.write_about_thread(thread, stack.as_deref().unwrap_or(&[]), |p| {
                p.put(&size);
                p.put(&weight);
                p.put(&(addr as u64));
            });
        }
        Message::Free { epoch, addr } => {
            if epoch != state::epoch() {
                return;
            }
            FREE_SAMPLE.write_with(|p| p.put(&(addr as u64)));
        }
    }
}

/// Waits until every message queued before the call is written (or `timeout` passes);
/// returns whether it got there.
///
/// Ordering: the emitter stores `BUSY = true` before popping and `false` only after writing
/// everything it popped (and the snapshot asked for meanwhile), all SeqCst, as are the
/// queue's `pop` and `is_empty`. If this sees
/// the queue empty, every earlier message was popped before that, hence after a `BUSY = true`
/// that precedes this `BUSY` load in the single SeqCst order; reading `false` then means the
/// emitter stored it after writing them.
pub(crate) fn flush(timeout: Duration) -> bool {
    let Some(queue) = QUEUE.get() else {
        return true;
    };
    let deadline = Instant::now() + timeout;
    loop {
        if queue.is_empty() && !BUSY.load(Ordering::SeqCst) {
            return true;
        }
        wake();
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Asks the emitter for a snapshot (from the enable callback), starting it if need be.
pub(crate) fn request_snapshot() {
    SNAPSHOT_REQUESTED.store(true, Ordering::Release);
    if start() {
        wake();
    } else {
        SNAPSHOT_REQUESTED.store(false, Ordering::Relaxed);
    }
}

/// The snapshot a session asked for: the live set (when the program tracks one), then the
/// `HeapSnapshot` event that ends it, so the client knows it has all of it.
fn write_snapshot() {
    let (snapshot, written) = if enabled() {
        write_live_set()
    } else {
        (SNAPSHOTS.fetch_add(1, Ordering::Release) + 1, 0)
    };
    let interval = if enabled() {
        INTERVAL.load(Ordering::Relaxed)
    } else {
        0
    };
    HEAP_SNAPSHOT.write_with(|p| {
        p.put(&snapshot);
        p.put(&(written as u64));
        p.put(&interval);
    });
}

/// One `LiveAllocation` per tracked allocation under a new `Snapshot` number: (the number,
/// how many).
fn write_live_set() -> (u64, usize) {
    let mut records = Vec::new();
    let mut frames = Vec::new();
    table::snapshot(&mut records, &mut frames);
    let snapshot = SNAPSHOTS.fetch_add(1, Ordering::Release) + 1;
    for r in &records {
        let stack = frames.get(r.stack.clone()).unwrap_or(&[]);
        LIVE_ALLOCATION.write_about_thread(r.thread, stack, |p| {
            p.put(&r.size);
            p.put(&r.weight);
            p.put(&(r.addr as u64));
            p.put(&snapshot);
        });
    }
    (snapshot, records.len())
}

/// Writes one `LiveAllocation` per tracked allocation, from the calling thread; returns how
/// many. The table is copied out first (see `table::snapshot`), so no table lock is held
/// while writing.
pub(crate) fn emit_heap_profile() -> usize {
    thread::with_guard(|| {
        if !enabled() || !LIVE_ALLOCATION.is_enabled() {
            return 0;
        }
        // The samples queued so far go first, so a reader meets each allocation before the
        // profile that lists it.
        flush(Duration::from_secs(1));
        write_live_set().1
    })
}
