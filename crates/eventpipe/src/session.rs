//! Sessions: their lifecycle. What a session's writers, drain thread and handle share is
//! `eventpipe_core::recording::SessionShared`.
//!
//! Each session has exactly one lock, inside its [`BufferManager`] (`manager.rs`), which
//! guards the per-thread states and their buffer lists (`threads.rs`) and the memory budget.
//! A writer takes the lock only to get a new buffer; the drain takes it to snapshot the
//! lists and again to free what it drained. Block-mode writers park on the manager's
//! condition, which the drain signals every time it frees buffers and which stopping the
//! session signals after raising its abort flag.

use std::thread::JoinHandle;

use eventpipe_core::runtime::{registry, BufferManager, Progress, SessionShared};
use eventpipe_core::{BufferingMode, SessionStats};
use std::sync::Arc;

use crate::config::SessionConfig;
use crate::Error;

/// A running session. Stopping it (or dropping it) flushes and ends the trace.
#[derive(Debug)]
pub struct Session {
    shared: Arc<SessionShared>,
    drain: Option<JoinHandle<Result<SessionStats, Error>>>,
    progress: Arc<Progress>,
}

impl Session {
    /// Starts a session. Its drain thread runs before any provider's enable callback.
    pub fn start(config: SessionConfig) -> Result<Session, Error> {
        config.validate()?;
        crate::stack::install();
        let progress = Arc::new(Progress::default());
        let shared = registry::add_session(|slot| {
            Arc::new(SessionShared::new(
                slot,
                config.providers.clone(),
                config.buffer_size(),
                config.stacks,
                BufferManager::new(config.buffer_budget, config.mode == BufferingMode::Block),
                Arc::clone(&progress),
            ))
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
        self.shared.deactivate();
        // Release parked Block-mode writers now, even if the drain is stuck on a slow
        // output: their events count as written after the stop, not as losses.
        self.shared.manager().abort();
        self.shared.request_stop();
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
