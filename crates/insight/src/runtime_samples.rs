//! The .NET runtime's events that make profiles of what an analysis counts
//! (`eventpipe_analysis`): allocations by the bytes each `GC/AllocationTick` stands for,
//! lock waits by their time, exceptions by their count, each on the stack the runtime
//! recorded with the event. PerfView's "GC Heap Alloc Ignore Free" and "Exceptions" stack
//! views end each stack in the type allocated or thrown; these profiles do the same
//! ([`RuntimeSample::leaf`]).

use eventpipe_analysis::{contention, exceptions, gc, RUNTIME_PROVIDER};
use nettrace::Event;

/// What a runtime event is to a profile.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RuntimeSample {
    /// About `bytes` allocated since the previous tick, the last object of `type_name`.
    Allocation { bytes: u64, type_name: String },
    /// A thread began to wait for a lock: the wait's stack.
    ContentionStart,
    /// The thread's wait ended, `duration_ns` long where the runtime says (.NET 8+).
    ContentionStop { duration_ns: Option<f64> },
    /// An exception of `type_name` was thrown.
    Exception { type_name: String },
}

impl RuntimeSample {
    /// The runtime sample `event` is, if any.
    pub(crate) fn of(event: &Event<'_>) -> Option<RuntimeSample> {
        let md = event.metadata;
        if md.provider != RUNTIME_PROVIDER {
            return None;
        }
        let wanted = [
            gc::id::ALLOCATION_TICK,
            contention::id::START,
            contention::id::STOP,
            exceptions::id::THROWN,
        ];
        if !wanted.contains(&md.event_id) {
            return None;
        }
        let fields = event.decode_payload().unwrap_or_default();
        let field = |name: &str| fields.iter().find(|(n, _)| *n == name).map(|(_, v)| v);
        let text = |name: &str| {
            field(name)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        Some(match md.event_id {
            gc::id::ALLOCATION_TICK => RuntimeSample::Allocation {
                // `AllocationAmount64` from version 2; the 32-bit field before.
                bytes: field("AllocationAmount64")
                    .or_else(|| field("AllocationAmount"))
                    .and_then(|v| v.as_u64())
                    .unwrap_or(0),
                type_name: text("TypeName"),
            },
            contention::id::START => RuntimeSample::ContentionStart,
            contention::id::STOP => RuntimeSample::ContentionStop {
                duration_ns: field("DurationNs").and_then(|v| v.as_f64()),
            },
            _ => RuntimeSample::Exception {
                type_name: text("ExceptionType"),
            },
        })
    }

    /// The frame a profile puts at the stack's leaf: the type allocated or thrown, as
    /// PerfView names it.
    pub(crate) fn leaf(&self) -> Option<String> {
        match self {
            RuntimeSample::Allocation { type_name, .. } if !type_name.is_empty() => {
                Some(format!("Type {type_name}"))
            }
            RuntimeSample::Exception { type_name } if !type_name.is_empty() => {
                Some(format!("Throw {type_name}"))
            }
            _ => None,
        }
    }
}
