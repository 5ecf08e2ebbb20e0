//! Sessions: what a session's writers, drain thread and handle share, and its lifecycle.
//!
//! Each session has exactly one lock, inside its [`BufferManager`] (`manager.rs`), which
//! guards the per-thread states and their buffer lists (`threads.rs`) and the memory budget.
//! A writer takes the lock only to get a new buffer; the drain takes it to snapshot the
//! lists and again to free what it drained. Block-mode writers park on the manager's
//! condition, which the drain signals every time it frees buffers and which stopping the
//! session signals after raising its abort flag.

use std::thread::JoinHandle;

use crate::buffer::Buffer;
use crate::config::{BufferingMode, ProviderConfig, SessionConfig};
use crate::manager::{BufferManager, NoBuffer};
use crate::provider::EventDescriptor;
use crate::sync::{lock, Arc, AtomicBool, Condvar, Mutex, Ordering};
use crate::threads::ThreadSessionState;
use crate::{registry, Error};

/// The parts of a session that writers, the drain and the handle share.
#[derive(Debug)]
pub(crate) struct SessionShared {
    id: u64,
    slot: usize,
    pub(crate) providers: Vec<ProviderConfig>,
    pub(crate) buffer_size: usize,
    /// Whether events carry the writer's stack.
    pub(crate) stacks: bool,
    /// False once the session starts stopping: writers stop writing to it.
    pub(crate) active: AtomicBool,
    /// The session's one lock, the thread states and buffers it guards, and the budget.
    pub(crate) manager: BufferManager,
    /// Wakes the drain early (a writer is waiting, or the session is stopping).
    pub(crate) wake: Mutex<bool>,
    pub(crate) wake_signal: Condvar,
    pub(crate) stop_requested: AtomicBool,
    /// What the drain has moved to the output so far.
    pub(crate) progress: Arc<crate::drain::Progress>,
}

/// Size of a thread's first buffer.
const FIRST_BUFFER: usize = 4 << 10;

static NEXT_SESSION_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl SessionShared {
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn slot(&self) -> usize {
        self.slot
    }

    /// The configuration naming `name`, or else the session's `*` entry, which stands for
    /// every provider not named except this project's own `EventPipeRs-*` providers: those
    /// are profilers (a CPU sampler, an allocation sampler) that cost something the moment
    /// they are enabled, so a session turns them on only by naming them.
    pub(crate) fn provider_config(&self, name: &str) -> Option<&ProviderConfig> {
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
    pub(crate) fn stats(&self) -> SessionStats {
        let usage = self.manager.usage();
        let mut s = self.progress.snapshot();
        s.live_thread_states = usage.thread_states;
        s.live_buffers = usage.buffers;
        s.buffer_bytes = usage.bytes;
        s.spare_buffers = usage.spare_buffers;
        s
    }

    pub(crate) fn enables(&self, event: &EventDescriptor) -> bool {
        self.provider_config(event.provider.name())
            .is_some_and(|p| p.enables(event.level, event.keywords))
    }

    pub(crate) fn wake_drain(&self) {
        *lock(&self.wake) = true;
        self.wake_signal.notify_one();
    }

    /// Registers the calling thread with the manager.
    pub(crate) fn add_thread(&self, os_tid: u64, name: Option<String>) -> Arc<ThreadSessionState> {
        self.manager.add_thread(os_tid, name)
    }

    /// Gets a buffer of at least `min_len` bytes for `thread` within the budget (see
    /// [`BufferManager::acquire_buffer`]; a parked Block-mode writer wakes the drain). A
    /// thread's buffers start at 4 KiB and double up to the session's buffer size, so
    /// short-lived threads that write a few events do not each pin a full-size buffer.
    pub(crate) fn acquire_buffer(
        &self,
        thread: &ThreadSessionState,
        min_len: usize,
        acquired_before: u32,
        seq: u32,
    ) -> Result<Arc<Buffer>, NoBuffer> {
        let grown = (FIRST_BUFFER << acquired_before.min(16)).min(self.buffer_size);
        let size = grown.max(min_len.next_power_of_two());
        self.manager
            .acquire_buffer(thread, size, seq, || self.wake_drain())
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
}

/// A running session. Stopping it (or dropping it) flushes and ends the trace.
#[derive(Debug)]
pub struct Session {
    shared: Arc<SessionShared>,
    drain: Option<JoinHandle<Result<SessionStats, Error>>>,
    progress: Arc<crate::drain::Progress>,
}

impl Session {
    /// Starts a session. Its drain thread runs before any provider's enable callback.
    pub fn start(config: SessionConfig) -> Result<Session, Error> {
        config.validate()?;
        let progress = Arc::new(crate::drain::Progress::default());
        let shared = registry::add_session(|slot| {
            Arc::new(SessionShared {
                id: NEXT_SESSION_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                slot,
                providers: config.providers.clone(),
                buffer_size: config.buffer_size(),
                stacks: config.stacks,
                active: AtomicBool::new(true),
                manager: BufferManager::new(
                    config.buffer_budget,
                    config.mode == BufferingMode::Block,
                ),
                wake: Mutex::new(false),
                wake_signal: Condvar::new(),
                stop_requested: AtomicBool::new(false),
                progress: Arc::clone(&progress),
            })
        })?;
        let drain = match crate::drain::spawn(Arc::clone(&shared), config, Arc::clone(&progress)) {
            Ok(handle) => handle,
            Err(e) => {
                registry::remove_session(&shared);
                return Err(e);
            }
        };
        // Only now, with the drain running, may events flow and callbacks run: a callback
        // that writes more than the budget in Block mode is drained as it goes.
        let callbacks = registry::enable_session(&shared);
        registry::notify(callbacks, shared.slot(), registry::Notice::Enabled);
        Ok(Session {
            shared,
            drain: Some(drain),
            progress,
        })
    }

    /// The session's slot (0..64).
    pub fn slot(&self) -> usize {
        self.shared.slot()
    }

    /// Counters so far.
    pub fn stats(&self) -> SessionStats {
        self.shared.stats()
    }

    /// Asks the drain to move buffered events to the output now.
    pub fn flush(&self) {
        self.shared.wake_drain();
    }

    /// Stops the session: no new events, parked writers released, everything buffered
    /// written, the trace ended. Returns the final counters or the output's error.
    pub fn stop(mut self) -> Result<SessionStats, Error> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<SessionStats, Error> {
        let Some(drain) = self.drain.take() else {
            return Ok(self.progress.snapshot());
        };
        // The `ending` calls run first, while the session still records and its drain
        // runs, so a provider can write its last events into it (a profiler's final heap
        // profile). No lock is held; a callback that writes in Block mode is drained.
        registry::notify(
            registry::callbacks_of(&self.shared),
            self.shared.slot(),
            registry::Notice::Ending,
        );
        let callbacks = registry::remove_session(&self.shared);
        self.shared.active.store(false, Ordering::Relaxed);
        // Release parked Block-mode writers now, even if the drain is stuck on a slow
        // output: their events count as written after the stop, not as losses.
        self.shared.manager.abort();
        self.shared.stop_requested.store(true, Ordering::Release);
        self.shared.wake_drain();
        let result = drain.join().unwrap_or(Err(Error::DrainPanicked));
        registry::notify(callbacks, self.shared.slot(), registry::Notice::Disabled);
        result
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

/// Whether a provider is left out of `*`: this project's own profiler providers.
fn is_opt_in_provider(name: &str) -> bool {
    name.get(..12)
        .is_some_and(|p| p.eq_ignore_ascii_case("EventPipeRs-"))
}
