//! The process-wide registry: declared events and the sessions in their 64 slots.
//!
//! One mutex guards both lists. Every change to an event's session mask happens here, under
//! that mutex: when an event registers, when a session starts, when it stops. Writers never
//! take it except on an event's first write.

use std::sync::Mutex;

use crate::provider::{EnableChange, EventDescriptor, Provider};
use crate::recording::SessionShared;
use crate::sync::Arc;
use crate::Error;

/// A provider's enable callback, the configuration to tell it and the provider, run once
/// no lock is held.
pub type PendingCallback = (
    fn(&EnableChange<'_>),
    crate::ProviderConfig,
    &'static Provider,
);

/// What a session tells its providers' callbacks.
#[derive(Debug, Clone, Copy)]
pub enum Notice {
    /// It now records them.
    Enabled,
    /// It is stopping and still records: last chance to write into it.
    Ending,
    /// It has stopped.
    Disabled,
}

/// Runs `callbacks` for the session in `slot`, with no lock held.
pub fn notify(callbacks: Vec<PendingCallback>, slot: usize, notice: Notice) {
    for (callback, pc, provider) in callbacks {
        callback(&EnableChange {
            provider,
            enabled: matches!(notice, Notice::Enabled),
            keywords: pc.keywords,
            level: pc.level,
            filter_args: pc.filter_args.as_deref(),
            session_slot: slot,
            ending: matches!(notice, Notice::Ending),
        });
    }
}

/// The maximum number of concurrent sessions (one bit each in an event's mask).
pub const MAX_SESSIONS: usize = 64;

struct Registry {
    events: Vec<&'static EventDescriptor>,
    sessions: [Option<Arc<SessionShared>>; MAX_SESSIONS],
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    events: Vec::new(),
    sessions: [const { None }; MAX_SESSIONS],
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

impl Registry {
    fn mask_for(&self, event: &EventDescriptor) -> u64 {
        let mut mask = 0;
        for (slot, session) in self.sessions.iter().enumerate() {
            if session.as_ref().is_some_and(|s| s.enables(event)) {
                mask |= 1 << slot;
            }
        }
        mask
    }

    fn knows_provider(&self, provider: &Provider) -> bool {
        self.events
            .iter()
            .any(|e| std::ptr::eq(e.provider, provider))
    }
}

/// Registers `event` on its first write; returns its session mask.
#[cold]
pub(crate) fn register_event(event: &'static EventDescriptor) -> u64 {
    let mut callbacks = Vec::new();
    let mask = {
        let mut r = registry();
        if event.index().is_none() {
            if !r.knows_provider(event.provider) {
                // A provider appearing while sessions already name it: tell it now.
                for cb in event.provider.hooks() {
                    for (slot, s) in r.sessions.iter().enumerate() {
                        if let Some(pc) = s
                            .as_ref()
                            .and_then(|s| s.provider_config(event.provider.name()))
                        {
                            callbacks.push((cb, pc.clone(), slot));
                        }
                    }
                }
            }
            let index = r.events.len() as u32;
            r.events.push(event);
            event.set_index(index);
        }
        let mask = r.mask_for(event);
        event.set_mask(mask);
        mask
    };
    for (cb, pc, slot) in callbacks {
        notify(vec![(cb, pc, event.provider)], slot, Notice::Enabled);
    }
    mask
}

/// The event registered at `index`.
pub fn event_at(index: u32) -> Option<&'static EventDescriptor> {
    registry().events.get(index as usize).copied()
}

/// Claims a free slot for `make(slot)` and returns the session.
pub fn add_session(
    make: impl FnOnce(usize) -> Arc<SessionShared>,
) -> Result<Arc<SessionShared>, Error> {
    let mut r = registry();
    let slot = r
        .sessions
        .iter()
        .position(Option::is_none)
        .ok_or(Error::TooManySessions(MAX_SESSIONS))?;
    let session = make(slot);
    r.sessions[slot] = Some(Arc::clone(&session));
    Ok(session)
}

/// Turns on the session's bits in every event mask; returns the enable callbacks to run.
pub fn enable_session(session: &SessionShared) -> Vec<PendingCallback> {
    let r = registry();
    for event in &r.events {
        if session.enables(event) {
            event.set_mask(event.mask() | 1 << session.slot());
        }
    }
    provider_callbacks(&r, session)
}

fn provider_callbacks(r: &Registry, session: &SessionShared) -> Vec<PendingCallback> {
    let mut out: Vec<PendingCallback> = Vec::new();
    let mut seen: Vec<*const Provider> = Vec::new();
    for event in &r.events {
        let p = event.provider as *const Provider;
        if seen.contains(&p) {
            continue;
        }
        seen.push(p);
        if let Some(pc) = session.provider_config(event.provider.name()) {
            for cb in event.provider.hooks() {
                out.push((cb, pc.clone(), event.provider));
            }
        }
    }
    out
}

/// Clears the session's bits and frees its slot (if it still holds it); returns the
/// disable callbacks to run.
/// The disable callbacks `session`'s providers are owed, computed without removing it.
pub fn callbacks_of(session: &SessionShared) -> Vec<PendingCallback> {
    let r = registry();
    let holds_slot = r.sessions[session.slot()]
        .as_ref()
        .is_some_and(|s| s.id() == session.id());
    if holds_slot {
        provider_callbacks(&r, session)
    } else {
        Vec::new()
    }
}

/// Takes the session out of its slot and clears its bit in every event, so writers stop
/// picking it; returns the provider callbacks owed, to run with no lock held.
pub fn remove_session(session: &SessionShared) -> Vec<PendingCallback> {
    let mut r = registry();
    let slot = session.slot();
    let holds_slot = r.sessions[slot]
        .as_ref()
        .is_some_and(|s| s.id() == session.id());
    if !holds_slot {
        return Vec::new();
    }
    for event in &r.events {
        event.set_mask(event.mask() & !(1 << slot));
    }
    r.sessions[slot] = None;
    provider_callbacks(&r, session)
}

/// The configuration of every running session that enables `provider`, with its slot.
pub(crate) fn configs_naming(provider: &Provider) -> Vec<(usize, crate::ProviderConfig)> {
    let r = registry();
    r.sessions
        .iter()
        .enumerate()
        .filter_map(|(slot, s)| {
            let pc = s.as_ref()?.provider_config(provider.name())?;
            Some((slot, pc.clone()))
        })
        .collect()
}

/// The counters of every running session, by slot.
pub(crate) fn running_session_stats() -> Vec<(usize, crate::SessionStats)> {
    let sessions: Vec<_> = registry().sessions.iter().flatten().cloned().collect();
    // Outside the registry lock: reading a session's usage takes its own lock.
    sessions.iter().map(|s| (s.slot(), s.stats())).collect()
}

/// The session currently in `slot`.
pub(crate) fn session_in(slot: usize) -> Option<Arc<SessionShared>> {
    registry().sessions.get(slot).and_then(Clone::clone)
}
