//! Turning sampling on and off: the provider's enable callback and the sampling interval
//! from the sessions' filter arguments, published in the word the allocator reads on every
//! call (`state.rs`).

use crate::sync::Ordering;
use std::sync::{Mutex, PoisonError};

use eventpipe_core::{EnableChange, Level, MAX_SESSIONS};

use super::state::{enabled, DEFAULT_SAMPLE_INTERVAL, INTERVAL, STATE};
use super::{emitter, stack, table, thread};

struct Control {
    /// Per session slot: the interval it asked for, if it enables the provider.
    slots: [Option<u64>; MAX_SESSIONS],
    /// Per session slot: it asked only for a heap snapshot (`Snapshot=1`), not to sample.
    snapshot_only: [bool; MAX_SESSIONS],
    /// The interval the program keeps tracking at with no session ([`track_heap`]).
    always: Option<u64>,
    /// The last epoch handed out.
    epoch: u64,
}

/// Serialises enable changes. Never taken by the allocator path.
static CONTROL: Mutex<Control> = Mutex::new(Control {
    slots: [None; MAX_SESSIONS],
    snapshot_only: [false; MAX_SESSIONS],
    always: None,
    epoch: 0,
});

/// The provider's enable callback: a session enabled or disabled `EventPipeRs-Allocations`.
pub(crate) fn on_enable_change(change: &EnableChange<'_>) {
    // The profiler's own work (spawning the emitter, clearing the table) is not profiled.
    thread::with_guard(|| {
        let mut control = CONTROL.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = change.session_slot.min(MAX_SESSIONS - 1);
        if change.ending {
            // The session still records: its last events are the live heap, the profile
            // a session at its end wants (a snapshot session has had its own). Sampling
            // stops at the call after this one.
            let snapshot_only = control.snapshot_only[slot];
            drop(control);
            if enabled() && !snapshot_only {
                super::emitter::emit_heap_profile();
            }
            return;
        }
        let wants = change.enabled && level_enables(change.level);
        let snapshot = wants && wants_snapshot(change.filter_args);
        control.snapshot_only[slot] = snapshot;
        // A snapshot request reads what is tracked; it does not start or retune sampling.
        control.slots[slot] =
            (wants && !snapshot).then(|| parse_sample_interval(change.filter_args));
        apply(&mut control);
        drop(control);
        if snapshot {
            // Written by the emitter thread once this callback has returned: the session
            // is then streaming, and a Block-mode budget paces the snapshot.
            super::emitter::request_snapshot();
        }
    });
}

/// Whether a session at `level` records the profiler's events (all `Informational`, no
/// keywords, so any keyword mask records them).
fn level_enables(level: Level) -> bool {
    level == Level::LogAlways || level >= Level::Informational
}

fn apply(control: &mut Control) {
    let wanted = control
        .slots
        .iter()
        .flatten()
        .chain(&control.always)
        .min()
        .copied();
    let current = STATE.load(Ordering::Relaxed);
    match wanted {
        Some(interval) => {
            if current != 0 && INTERVAL.load(Ordering::Relaxed) == interval {
                return;
            }
            stack::init();
            if !emitter::start() {
                // No emitter, no events: stay off rather than sample into the void.
                return;
            }
            INTERVAL.store(interval, Ordering::Relaxed);
            control.epoch += 1;
            // Release: the interval, the pool and the emitter above are in place first.
            STATE.store(control.epoch, Ordering::Release);
        }
        None => {
            if current != 0 {
                STATE.store(0, Ordering::Release);
                // Every entry goes; inserts still in flight are refused (`table::insert`).
                table::clear();
            }
        }
    }
}

/// Reads `SampleInterval` from a session's filter arguments (`key=value` pairs separated by
/// `;` or `,`, keys case-insensitive). The value is a byte count: decimal or `0x` hex, `_`
/// separators allowed, optionally followed by a unit `K`/`KB`/`KiB`, `M`/`MB`/`MiB` or
/// `G`/`GB`/`GiB` (all powers of 1024, case-insensitive). A missing, unreadable or zero value
/// means [`DEFAULT_SAMPLE_INTERVAL`]; `1` samples every allocation.
pub fn parse_sample_interval(filter_args: Option<&str>) -> u64 {
    let Some(args) = filter_args else {
        return DEFAULT_SAMPLE_INTERVAL;
    };
    args.split([';', ','])
        .filter_map(|pair| pair.split_once('='))
        .filter(|(k, _)| k.trim().eq_ignore_ascii_case("SampleInterval"))
        .filter_map(|(_, v)| parse_bytes(v))
        .next_back()
        .filter(|&v| v > 0)
        .unwrap_or(DEFAULT_SAMPLE_INTERVAL)
}

fn parse_bytes(v: &str) -> Option<u64> {
    let v = v.trim().replace('_', "");
    if let Some(hex) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok();
    }
    let digits = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (number, unit) = v.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(scale)
}

/// Keeps sampling (and the table of live sampled allocations) on with no session, at
/// `interval` bytes, so that a heap snapshot can be requested at any time (see
/// [`super::track_heap`]). Sessions asking for a smaller interval lower it while they run.
pub(crate) fn track_always(interval: u64) {
    super::thread::with_guard(|| {
        let mut control = CONTROL.lock().unwrap_or_else(PoisonError::into_inner);
        control.always = Some(interval.max(1));
        apply(&mut control);
    });
}

/// The interval heap tracking runs at with no session, if the program asked for it.
pub(crate) fn tracking_interval() -> Option<u64> {
    CONTROL
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .always
}

/// Whether a session's filter arguments ask for a heap snapshot (`Snapshot=1` or
/// `Snapshot=true`).
pub fn wants_snapshot(filter_args: Option<&str>) -> bool {
    filter_args.is_some_and(|args| {
        args.split([';', ','])
            .filter_map(|pair| pair.split_once('='))
            .filter(|(k, _)| k.trim().eq_ignore_ascii_case("Snapshot"))
            .any(|(_, v)| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true"))
    })
}

/// Unit tests: a valid epoch without a session (the lib's tests install no allocator).
#[cfg(test)]
pub(crate) fn test_epoch() -> u64 {
    let mut control = CONTROL.lock().unwrap_or_else(PoisonError::into_inner);
    if STATE.load(Ordering::Relaxed) == 0 {
        control.epoch += 1;
        STATE.store(control.epoch, Ordering::Release);
    }
    STATE.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_interval_parses_leniently() {
        let p = |s: &str| parse_sample_interval(Some(s));
        assert_eq!(parse_sample_interval(None), DEFAULT_SAMPLE_INTERVAL);
        assert_eq!(p("SampleInterval=524288"), 524_288);
        assert_eq!(p("sampleinterval = 65536"), 65_536);
        assert_eq!(p("Other=1;SampleInterval=64KiB"), 65_536);
        assert_eq!(p("SampleInterval=1m,Foo=bar"), 1 << 20);
        assert_eq!(p("SampleInterval=0x10000"), 65_536);
        assert_eq!(p("SampleInterval=1_048_576"), 1 << 20);
        assert_eq!(p("SampleInterval=1"), 1);
        for bad in [
            "",
            "SampleInterval",
            "SampleInterval=",
            "SampleInterval=0",
            "SampleInterval=-5",
            "SampleInterval=lots",
            "SampleInterval=5 parsecs",
            "SampleInterval=99999999999999999999",
            "Interval=4096",
        ] {
            assert_eq!(p(bad), DEFAULT_SAMPLE_INTERVAL, "{bad:?}");
        }
    }

    #[test]
    fn levels_below_informational_do_not_sample() {
        assert!(level_enables(Level::Verbose));
        assert!(level_enables(Level::Informational));
        assert!(level_enables(Level::LogAlways));
        assert!(!level_enables(Level::Warning));
        assert!(!level_enables(Level::Critical));
    }
}
