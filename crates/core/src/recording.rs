//! What a session's writers, its drain and its handle share: the session's configuration
//! as the write path reads it, its one lock (the [`BufferManager`]), the drain's wake-up
//! and the drain's progress. The runtime (`eventpipe`) starts and stops sessions; this is
//! the part the write path needs.

use crate::buffer::Buffer;
use crate::config::ProviderConfig;
use crate::manager::{BufferManager, NoBuffer};
use crate::provider::EventDescriptor;
use crate::sync::{lock, Arc, AtomicBool, AtomicU64, Condvar, Mutex, Ordering};
use crate::threads::ThreadSessionState;

/// The parts of a session that writers, the drain and the handle share.
#[derive(Debug)]
pub struct SessionShared {
    id: u64,
    slot: usize,
    /// What the session asked of each provider.
    pub(crate) providers: Vec<ProviderConfig>,
    /// The largest buffer a thread grows to.
    pub(crate) buffer_size: usize,
    /// Whether events carry the writer's stack.
    pub(crate) stacks: bool,
    /// False once the session starts stopping: writers stop writing to it.
    pub(crate) active: AtomicBool,
    /// The session's one lock, the thread states and buffers it guards, and the budget.
    manager: BufferManager,
    /// Wakes the drain early (a writer is waiting, or the session is stopping).
    wake: Mutex<bool>,
    wake_signal: Condvar,
    stop_requested: AtomicBool,
    /// What the drain has moved to the output so far.
    progress: Arc<Progress>,
}

/// Size of a thread's first buffer.
const FIRST_BUFFER: usize = 4 << 10;

static NEXT_SESSION_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl SessionShared {
    /// A new session's shared state, in `slot`, with a fresh id.
    pub fn new(
        slot: usize,
        providers: Vec<ProviderConfig>,
        buffer_size: usize,
        stacks: bool,
        manager: BufferManager,
        progress: Arc<Progress>,
    ) -> Self {
        SessionShared {
            id: NEXT_SESSION_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            slot,
            providers,
            buffer_size,
            stacks,
            active: AtomicBool::new(true),
            manager,
            wake: Mutex::new(false),
            wake_signal: Condvar::new(),
            stop_requested: AtomicBool::new(false),
            progress,
        }
    }

    /// The session's id, unique in this process.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The session's slot: its bit in each event's mask.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The session's one lock and budget.
    pub fn manager(&self) -> &BufferManager {
        &self.manager
    }

    /// What the drain has moved to the output so far.
    pub fn progress(&self) -> &Arc<Progress> {
        &self.progress
    }

    /// Ends the session for writers: from now on they write nothing to it (a write racing
    /// this may still land, and the drain takes it).
    pub fn deactivate(&self) {
        self.active.store(false, Ordering::Relaxed);
    }

    /// Asks the drain to finish (its last passes write everything committed) and wakes it.
    pub fn request_stop(&self) {
        // Release: pairs with the drain's Acquire, so it sees everything done before.
        self.stop_requested.store(true, Ordering::Release);
        self.wake_drain();
    }

    /// Whether [`request_stop`](Self::request_stop) was called.
    pub fn stop_requested(&self) -> bool {
        self.stop_requested.load(Ordering::Acquire)
    }

    /// The drain's wait between passes: up to `timeout`, or not at all when it has a
    /// `backlog`, a wake-up is pending or a stop was requested. Consumes the wake-up.
    pub fn wait_for_work(&self, timeout: std::time::Duration, backlog: bool) {
        let mut woken = lock(&self.wake);
        if !backlog && !*woken && !self.stop_requested() {
            woken = self
                .wake_signal
                .wait_timeout(woken, timeout)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        *woken = false;
    }

    /// The configuration naming `name`, or else the session's `*` entry, which stands for
    /// every provider not named except this project's own `EventPipeRs-*` providers: those
    /// are profilers (a CPU sampler, an allocation sampler) that cost something the moment
    /// they are enabled, so a session turns them on only by naming them.
    pub fn provider_config(&self, name: &str) -> Option<&ProviderConfig> {
        self.providers
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name))
            .or_else(|| {
                if is_opt_in_provider(name) {
                    return None;
                }
                self.providers.iter().find(|p| p.name == "*")
            })
    }

    /// Counters so far: the drain's progress and the manager's usage.
    pub fn stats(&self) -> SessionStats {
        let usage = self.manager.usage();
        let mut s = self.progress.snapshot();
        s.live_thread_states = usage.thread_states;
        s.live_buffers = usage.buffers;
        s.buffer_bytes = usage.bytes;
        s.spare_buffers = usage.spare_buffers;
        s
    }

    /// Whether the session records `event` (its provider's level and keywords).
    pub fn enables(&self, event: &EventDescriptor) -> bool {
        self.provider_config(event.provider.name())
            .is_some_and(|p| p.enables(event.level, event.keywords))
    }

    /// Wakes the drain for a pass now.
    pub fn wake_drain(&self) {
        *lock(&self.wake) = true;
        self.wake_signal.notify_one();
    }

    /// Registers the calling thread with the manager.
    pub fn add_thread(&self, os_tid: u64, name: Option<String>) -> Arc<ThreadSessionState> {
        self.manager.add_thread(os_tid, name)
    }

    /// Gets a buffer of at least `min_len` bytes for `thread` within the budget (see
    /// [`BufferManager::acquire_buffer`]; a parked Block-mode writer wakes the drain). A
    /// thread's buffers start at 4 KiB and double up to the session's buffer size, so
    /// short-lived threads that write a few events do not each pin a full-size buffer.
    pub fn acquire_buffer(
        &self,
        thread: &ThreadSessionState,
        min_len: usize,
        acquired_before: u32,
        seq: u32,
    ) -> Result<Arc<Buffer>, NoBuffer> {
        let grown = (FIRST_BUFFER << acquired_before.min(16)).min(self.buffer_size);
        let least = min_len.next_power_of_two().max(FIRST_BUFFER);
        let size = grown.max(least);
        self.manager
            .acquire_buffer_at_least(thread, size, least, seq, || self.wake_drain())
    }
}

/// Counters a running or finished session reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Events moved to the output.
    pub events_written: u64,
    /// Events dropped because the budget was exhausted (Drop mode, or a record larger than
    /// the whole budget). Equals the losses a reader counts in the trace. Block mode never
    /// drops: a writer still parked when the session stops is released and its event is
    /// treated like one written after the stop.
    pub events_dropped: u64,
    /// Bytes of trace written.
    pub bytes_written: u64,
    /// Per-thread states currently held (threads that wrote and have not been reclaimed).
    pub live_thread_states: usize,
    /// Buffers currently allocated.
    pub live_buffers: usize,
    /// Bytes of buffers currently allocated.
    pub buffer_bytes: usize,
    /// Emptied buffers kept for reuse: 16, or as many as fit in a quarter of the budget
    /// when that is more. With the buffers in use they stay within the budget; they are
    /// freed with the session.
    pub spare_buffers: usize,
    /// Per-thread states reclaimed after their thread exited and was drained.
    pub threads_reclaimed: u64,
    /// Passes the drain made over the threads' buffers.
    pub drain_passes: u64,
    /// Times a pass found a writer mid-record and yielded before reading its buffers.
    pub in_flight_waits: u64,
    /// `write` calls on the output.
    pub output_writes: u64,
}

/// What the drain has moved to the output so far; the drain adds, anyone reads.
#[derive(Debug, Default)]
pub struct Progress {
    /// Events written to the output.
    pub events_written: AtomicU64,
    /// Events lost (Drop mode), as the trace reports them.
    pub events_dropped: AtomicU64,
    /// Bytes written to the output.
    pub bytes_written: AtomicU64,
    /// Per-thread states reclaimed.
    pub threads_reclaimed: AtomicU64,
    /// Drain passes.
    pub drain_passes: AtomicU64,
    /// Yields waiting for a writer mid-record.
    pub in_flight_waits: AtomicU64,
    /// `write` calls on the output.
    pub output_writes: AtomicU64,
}

impl Progress {
    /// The counters now (the usage fields left at zero).
    pub fn snapshot(&self) -> SessionStats {
        // Relaxed: each counter is a statistic read on its own.
        SessionStats {
            events_written: self.events_written.load(Ordering::Relaxed),
            events_dropped: self.events_dropped.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            threads_reclaimed: self.threads_reclaimed.load(Ordering::Relaxed),
            drain_passes: self.drain_passes.load(Ordering::Relaxed),
            in_flight_waits: self.in_flight_waits.load(Ordering::Relaxed),
            output_writes: self.output_writes.load(Ordering::Relaxed),
            ..SessionStats::default()
        }
    }
}

/// Whether a provider is left out of `*`: this project's own profiler providers.
fn is_opt_in_provider(name: &str) -> bool {
    name.get(..12)
        .is_some_and(|p| p.eq_ignore_ascii_case("EventPipeRs-"))
}
