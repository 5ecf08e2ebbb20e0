//! The interface the `eventpipe` runtime builds sessions on: what a session's writers, its
//! drain thread and its handle share. Instrumented code has no use for any of it, and it
//! changes with the runtime; it is public only because the runtime is another crate.
//!
//! The contract, in the order a session lives:
//!
//! 1. [`registry::add_session`] takes a free slot and builds the session's
//!    [`SessionShared`] (its providers, buffer budget and [`BufferManager`], the drain's
//!    [`Progress`]); [`registry::enable_session`] sets the slot's bit in every event it
//!    enables, after which writers append records (laid out as [`RECORD_HEADER`] and the
//!    `FLAG_*` bits say) to per-thread buffers.
//! 2. The drain waits ([`SessionShared::wait_for_work`]), takes a
//!    [`BufferManager::snapshot`] of the threads with committed bytes
//!    ([`ThreadSnapshot`]), reads each ([`ThreadSessionState`], whose read reports what
//!    it [`Consumed`]) without the lock, and hands the [`ThreadProgress`] back with
//!    [`BufferManager::apply`], which frees drained buffers and reclaims exited threads.
//! 3. Stopping: [`registry::remove_session`] clears the bits (no new writes),
//!    [`SessionShared::deactivate`] and [`SessionShared::request_stop`] end the session
//!    for writers and wake the drain, whose last passes write everything committed;
//!    [`BufferManager::abort`] releases Block-mode writers parked on the budget.
//!
//! Providers hear of all this through [`registry::notify`], with no lock held.

pub use crate::buffer::copy_payload;
pub use crate::manager::BufferManager;
pub use crate::record::{FLAG_ACTIVITY, FLAG_STACK, FLAG_SUBJECT, RECORD_HEADER};
pub use crate::recording::{Progress, SessionShared};
pub use crate::stack::{install_walker, StackWalker};
pub use crate::sync::lock;
pub use crate::threads::{Consumed, ThreadProgress, ThreadSessionState, ThreadSnapshot};

/// The sessions' slots and the events they enable.
pub mod registry {
    pub use crate::registry::{
        add_session, callbacks_of, enable_session, event_at, notify, remove_session, Notice,
        PendingCallback,
    };
}
