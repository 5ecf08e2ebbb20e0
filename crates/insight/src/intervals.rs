//! Which events open and close intervals: the rules the timeline (`chrome`) and the OTLP
//! export (`eventpipe-export`'s `otlp`) share, so that both pair the same events.
//!
//! * **Start/Stop opcodes.** An event with opcode 1 (Start) begins, one with opcode 2
//!   (Stop) ends; an event without a stated opcode whose name ends in `Start`/`Stop` counts
//!   as opcode 1/2, as TraceEvent has it. The base name ([`base_name`]) is the event name
//!   without its `/Start`/`Start` or `/Stop`/`Stop`: a begin and an end pair when their
//!   provider and base name are the same. The interval is named by the begin's string field
//!   `Name` when it has one (the tracing layer's `SpanStart`), else by the base name.
//! * **The runtime's named pairs**, [`PAIR_RULES`]: begins and ends with names (and
//!   opcodes) of their own.
//! * **The tracing layer's span lifecycle** ([`lifecycle`]): `SpanNew` (a span created,
//!   with its fields) and `SpanClose` (closed), both opcode 0, carrying `SpanId`.
//!
//! How the begins and ends are then matched (per thread, innermost first) is the
//! consumer's: a timeline needs the nesting on a thread, an OTLP span its id.

use nettrace::{EventMetadata, Value};

/// A begin/end pair that the runtime writes as two events with names of their own (not
/// opcodes 1 and 2): the begin opens a slice on its thread, the next matching end on the
/// same thread closes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairRule {
    /// The provider of both events.
    pub provider: &'static str,
    /// The begin event's name (as TraceEvent names it, e.g. `GC/SuspendEEStart`).
    pub begin: &'static str,
    /// The end event's name.
    pub end: &'static str,
    /// The slice's name.
    pub name: &'static str,
    /// A payload field whose value must be equal in the begin and the end (a method id),
    /// for pairs that are not strictly nested on a thread.
    pub same: Option<&'static str>,
    /// String fields of the begin event appended to the slice's name, joined by `.`.
    pub detail: &'static [&'static str],
}

const RUNTIME: &str = "Microsoft-Windows-DotNETRuntime";
const RUNTIME_PRIVATE: &str = "Microsoft-Windows-DotNETRuntimePrivate";

/// The runtime's begin/end pairs that are not Start/Stop opcodes, from its manifest
/// (`ClrEtwAll.man`). Each pair is written by one thread; see the module docs.
pub const PAIR_RULES: &[PairRule] = &[
    // Suspending the managed threads for a GC (or another suspension): the suspending
    // thread writes both (GCSuspendEEBegin_V1, GCSuspendEEEnd_V1).
    PairRule {
        provider: RUNTIME,
        begin: "GC/SuspendEEStart",
        end: "GC/SuspendEEStop",
        name: "GC/SuspendEE",
        same: None,
        detail: &[],
    },
    // Resuming them (GCRestartEEBegin_V1, GCRestartEEEnd_V1), by the same thread.
    PairRule {
        provider: RUNTIME,
        begin: "GC/RestartEEStart",
        end: "GC/RestartEEStop",
        name: "GC/RestartEE",
        same: None,
        detail: &[],
    },
    // The finalizer thread running finalizers (GCFinalizersBegin_V1, GCFinalizersEnd_V1).
    PairRule {
        provider: RUNTIME,
        begin: "GC/FinalizersStart",
        end: "GC/FinalizersStop",
        name: "GC/Finalizers",
        same: None,
        detail: &[],
    },
    // JIT-compiling a method: MethodJittingStarted, then MethodLoadVerbose of the same
    // MethodID on the compiling thread, as TraceEvent's JIT statistics pair them. A
    // LoadVerbose without a JittingStarted (code loaded, not compiled) stays an instant.
    PairRule {
        provider: RUNTIME,
        begin: "Method/JittingStarted",
        end: "Method/LoadVerbose",
        name: "JIT",
        same: Some("MethodID"),
        detail: &["MethodNamespace", "MethodName"],
    },
    // A background GC's phases, on the background GC thread.
    PairRule {
        provider: RUNTIME_PRIVATE,
        begin: "GC/BGC2ndNonConStart",
        end: "GC/BGC2ndNonConStop",
        name: "GC/BGC2ndNonCon",
        same: None,
        detail: &[],
    },
    PairRule {
        provider: RUNTIME_PRIVATE,
        begin: "GC/BGC2ndConStart",
        end: "GC/BGC2ndConStop",
        name: "GC/BGC2ndCon",
        same: None,
        detail: &[],
    },
    // An allocating thread waiting for a background GC.
    PairRule {
        provider: RUNTIME_PRIVATE,
        begin: "GC/BGCAllocWaitStart",
        end: "GC/BGCAllocWaitStop",
        name: "GC/BGCAllocWait",
        same: None,
        detail: &[],
    },
];

/// What an event does to the intervals of its thread.
#[derive(Debug, Clone, PartialEq)]
pub enum Role<'a> {
    /// Opens one.
    Begin {
        /// The base name its end carries too.
        base: &'a str,
        /// The interval's name: the begin's `Name` field, a pair rule's name with its
        /// detail, else the base name.
        label: String,
        /// Whether `label` is the begin's `Name` field.
        named_by_field: bool,
        /// The field whose value the end must carry too.
        same: Option<&'static str>,
    },
    /// Closes one.
    End {
        /// The base name.
        base: &'a str,
        /// The field whose value the begin carried.
        same: Option<&'static str>,
    },
    /// Neither.
    Instant,
}

/// The event's opcode: stated, or implied by a name ending in Start/Stop.
pub fn opcode(md: &EventMetadata) -> u8 {
    // Compared in place, not lower-cased into a new string: this runs for every event.
    let ends_with = |suffix: &str| {
        let name = md.event_name.as_bytes();
        name.len() >= suffix.len()
            && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
    };
    md.opcode.unwrap_or_else(|| {
        if ends_with("start") {
            1
        } else if ends_with("stop") {
            2
        } else {
            0
        }
    })
}

/// `name` without a trailing `/Start`/`Start` (opcode 1) or `/Stop`/`Stop` (opcode 2).
pub fn base_name(name: &str, opcode: u8) -> &str {
    let suffix = if opcode == 1 { "Start" } else { "Stop" };
    match name.strip_suffix(suffix) {
        Some(rest) => rest.strip_suffix('/').unwrap_or(rest),
        None => name,
    }
}

/// The pair rule, if any, that `provider`/`name` begins (`true`) or ends (`false`).
pub fn pair_rule(provider: &str, name: &str) -> Option<(&'static PairRule, bool)> {
    PAIR_RULES.iter().find_map(|rule| {
        if rule.provider != provider {
            None
        } else if rule.begin == name {
            Some((rule, true))
        } else if rule.end == name {
            Some((rule, false))
        } else {
            None
        }
    })
}

/// The role of an event with metadata `md`; `field` looks up its decoded payload's fields.
pub fn role<'a, 'v>(md: &'a EventMetadata, field: impl Fn(&str) -> Option<&'v Value>) -> Role<'a> {
    if let Some((rule, begins)) = pair_rule(&md.provider, &md.display_name) {
        if !begins {
            return Role::End {
                base: rule.name,
                same: rule.same,
            };
        }
        let detail: Vec<&str> = rule
            .detail
            .iter()
            .filter_map(|f| field(f).and_then(Value::as_str))
            .filter(|s| !s.is_empty())
            .collect();
        let label = if detail.is_empty() {
            rule.name.to_owned()
        } else {
            format!("{} {}", rule.name, detail.join("."))
        };
        return Role::Begin {
            base: rule.name,
            label,
            named_by_field: false,
            same: rule.same,
        };
    }
    match opcode(md) {
        1 => {
            let base = base_name(&md.display_name, 1);
            let name = field("Name").and_then(Value::as_str);
            Role::Begin {
                base,
                label: name.unwrap_or(base).to_owned(),
                named_by_field: name.is_some(),
                same: None,
            }
        }
        2 => Role::End {
            base: base_name(&md.display_name, 2),
            same: None,
        },
        _ => Role::Instant,
    }
}

/// The tracing layer's span lifecycle events (see `eventpipe-tracing`): `SpanNew` when a
/// span is created (its fields), `SpanClose` when it is closed; each with the `SpanId`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// `SpanNew`.
    New(u64),
    /// `SpanClose`.
    Close(u64),
}

/// The lifecycle event an event with metadata `md` is, if it is one; `field` looks up its
/// decoded payload's fields.
pub fn lifecycle<'v>(
    md: &EventMetadata,
    field: impl Fn(&str) -> Option<&'v Value>,
) -> Option<Lifecycle> {
    if md.opcode.unwrap_or(0) != 0 {
        return None;
    }
    let id = || field("SpanId").and_then(Value::as_u64);
    match md.event_name.as_str() {
        "SpanNew" => id().map(Lifecycle::New),
        "SpanClose" => id().map(Lifecycle::Close),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_names_drop_one_start_or_stop_suffix() {
        assert_eq!(base_name("GC/Start", 1), "GC");
        assert_eq!(base_name("GC/Stop", 2), "GC");
        assert_eq!(base_name("RequestStart", 1), "Request");
        assert_eq!(base_name("Span/Stop", 2), "Span");
        assert_eq!(base_name("Begin", 1), "Begin");
        assert_eq!(base_name("GC/Start", 2), "GC/Start");
    }
}
