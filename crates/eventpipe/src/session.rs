//! Sessions and their buffer managers.
//!
//! Each session has exactly one lock, [`SessionShared::manager`], which guards the
//! [`Manager`]: the per-thread states and their buffer lists, and the memory budget. There is
//! no per-thread lock. A writer takes the lock only to get a new buffer; the drain takes it
//! to snapshot the lists and again to free what it drained. Block-mode writers wait on
//! [`SessionShared::capacity`], which the drain signals every time it frees buffers and
//! which stopping the session signals after raising `abort`.

use std::collections::{HashMap, VecDeque};
use std::thread::JoinHandle;

use crate::buffer::Buffer;
use crate::config::{BufferingMode, ProviderConfig, SessionConfig};
use crate::provider::EventDescriptor;
use crate::sync::{lock, Arc, AtomicBool, AtomicU32, AtomicU64, Condvar, Mutex, Ordering};
use crate::{registry, Error};

/// What one thread shares with the drain for one session.
#[derive(Debug)]
pub(crate) struct ThreadSessionState {
    /// Session-local thread index (V6 thread table index).
    pub(crate) index: u64,
    /// OS thread id.
    pub(crate) os_tid: u64,
    /// Thread name, if it has one.
    pub(crate) name: Option<String>,
    /// The highest sequence number whose event is committed or dropped. Written by the
    /// owning thread (Release, after the commit or the drop); read by the drain (Acquire)
    /// before it reads the buffers, so every event up to it is visible.
    pub(crate) published_seq: AtomicU32,
    /// Set by the owner between taking a timestamp and committing the record. The drain
    /// waits for it to clear before reading, so no event older than its cutoff is missed.
    pub(crate) in_flight: AtomicBool,
    /// Set (Release) by the thread-exit destructor after retiring the current buffer.
    pub(crate) exited: AtomicBool,
    /// Events this thread dropped (written by the owner, under the manager lock).
    pub(crate) dropped: AtomicU64,
}

/// One thread's entry in the manager.
#[derive(Debug)]
pub(crate) struct ThreadEntry {
    pub(crate) state: Arc<ThreadSessionState>,
    /// Oldest first; the writer appends to the back.
    pub(crate) buffers: VecDeque<Arc<Buffer>>,
    /// Drain's read position in the front buffer.
    pub(crate) read_pos: usize,
    /// Whether the output has described this thread yet (V6 thread block).
    pub(crate) announced: bool,
}

/// Guarded by [`SessionShared::manager`]: the per-thread states, their buffers and the
/// budget they draw on.
#[derive(Debug, Default)]
pub(crate) struct Manager {
    pub(crate) threads: HashMap<u64, ThreadEntry>,
    pub(crate) next_thread_index: u64,
    /// Bytes of buffers currently allocated.
    pub(crate) used: usize,
    /// Buffers currently allocated.
    pub(crate) live_buffers: usize,
}

/// The parts of a session that writers, the drain and the handle share.
#[derive(Debug)]
pub(crate) struct SessionShared {
    id: u64,
    slot: usize,
    pub(crate) providers: Vec<ProviderConfig>,
    pub(crate) mode: BufferingMode,
    pub(crate) budget: usize,
    pub(crate) buffer_size: usize,
    /// Whether events carry the writer's stack.
    pub(crate) stacks: bool,
    /// False once the session starts stopping: writers stop writing to it.
    pub(crate) active: AtomicBool,
    /// Raised when the session ends: Block-mode writers stop waiting and drop instead.
    pub(crate) abort: AtomicBool,
    /// The session's one lock.
    pub(crate) manager: Mutex<Manager>,
    /// Signalled when buffers are freed or the session aborts.
    pub(crate) capacity: Condvar,
    /// Wakes the drain early (a writer is waiting, or the session is stopping).
    pub(crate) wake: Mutex<bool>,
    pub(crate) wake_signal: Condvar,
    pub(crate) stop_requested: AtomicBool,
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
        let mut m = lock(&self.manager);
        let index = m.next_thread_index;
        m.next_thread_index += 1;
        let state = Arc::new(ThreadSessionState {
            index,
            os_tid,
            name,
            published_seq: AtomicU32::new(0),
            in_flight: AtomicBool::new(false),
            exited: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
        });
        m.threads.insert(
            index,
            ThreadEntry {
                state: Arc::clone(&state),
                buffers: VecDeque::new(),
                read_pos: 0,
                announced: false,
            },
        );
        state
    }

    /// Gets a buffer of at least `min_len` bytes for `thread` within the budget: waits in
    /// Block mode, gives up in Drop mode or once the session aborts. A thread's buffers
    /// start at 4 KiB and double up to the session's buffer size, so short-lived threads
    /// that write a few events do not each pin a full-size buffer.
    ///
    /// A loss (`NoBuffer::Dropped`) is recorded here, under the lock, with `seq` as the
    /// thread's published sequence number: the drain's last pass snapshots the manager
    /// under the same lock after raising `abort`, so every loss it can count is visible to
    /// it and every later attempt sees `abort` and is refused as outside the session.
    pub(crate) fn acquire_buffer(
        &self,
        thread: &ThreadSessionState,
        min_len: usize,
        acquired_before: u32,
        seq: u32,
    ) -> Result<Arc<Buffer>, NoBuffer> {
        let grown = (FIRST_BUFFER << acquired_before.min(16)).min(self.buffer_size);
        let size = grown.max(min_len.next_power_of_two());
        let mut m = lock(&self.manager);
        loop {
            if self.abort.load(Ordering::Relaxed) || !m.threads.contains_key(&thread.index) {
                return Err(NoBuffer::SessionEnded);
            }
            let fits_budget = size <= self.budget;
            if fits_budget && m.used + size <= self.budget {
                let Some(buffer) = Buffer::new(size).map(Arc::new) else {
                    return Err(Self::record_loss(thread, seq));
                };
                m.used += size;
                m.live_buffers += 1;
                if let Some(entry) = m.threads.get_mut(&thread.index) {
                    entry.buffers.push_back(Arc::clone(&buffer));
                }
                return Ok(buffer);
            }
            if self.mode == BufferingMode::Drop || !fits_budget {
                return Err(Self::record_loss(thread, seq));
            }
            // Block: ask the drain to free something, then park until it does (or abort).
            self.wake_drain();
            m = self.capacity.wait(m).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Counts one lost event of `thread`. Called with the manager lock held.
    fn record_loss(thread: &ThreadSessionState, seq: u32) -> NoBuffer {
        // Only the owning thread changes its counter; a plain load+store is enough.
        let dropped = thread.dropped.load(Ordering::Relaxed);
        thread.dropped.store(dropped + 1, Ordering::Relaxed);
        // Release: pairs with the drain's Acquire; the gap in sequence numbers is how
        // the trace's reader counts this loss.
        thread.published_seq.store(seq, Ordering::Release);
        NoBuffer::Dropped
    }
}

/// Why a writer got no buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoBuffer {
    /// The budget is exhausted (Drop mode, or a record larger than the budget): the event
    /// is lost, counted, and leaves a gap in the thread's sequence numbers.
    Dropped,
    /// The session is ending (or has let this thread go): the event is not part of it.
    SessionEnded,
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
        let shared = registry::add_session(|slot| {
            Arc::new(SessionShared {
                id: NEXT_SESSION_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                slot,
                providers: config.providers.clone(),
                mode: config.mode,
                budget: config.buffer_budget,
                buffer_size: config.buffer_size(),
                stacks: config.stacks,
                active: AtomicBool::new(true),
                abort: AtomicBool::new(false),
                manager: Mutex::new(Manager::default()),
                capacity: Condvar::new(),
                wake: Mutex::new(false),
                wake_signal: Condvar::new(),
                stop_requested: AtomicBool::new(false),
            })
        })?;
        let progress = Arc::new(crate::drain::Progress::default());
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
        let m = lock(&self.shared.manager);
        let mut s = self.progress.snapshot();
        s.live_thread_states = m.threads.len();
        s.live_buffers = m.live_buffers;
        s.buffer_bytes = m.used;
        s
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
        {
            // Release parked Block-mode writers now, even if the drain is stuck on a slow
            // output: their events count as written after the stop, not as losses.
            let _m = lock(&self.shared.manager);
            self.shared.abort.store(true, Ordering::Relaxed);
            self.shared.capacity.notify_all();
        }
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
