//! Publication: the table of counter providers, the `ep-counters` thread, and the
//! `EventCounters` events it writes.
//!
//! # The events
//!
//! Each counter, each interval, is one event named `EventCounters` (level LogAlways,
//! keywords 0, version 0), with the metadata .NET's EventSource writes for it over
//! EventPipe: one top-level field with an empty name, a struct (TypeCode Object) holding
//! one field `Payload`, a struct with the counter's fields. Two shapes, checked field by
//! field against a .NET 8 `System.Runtime` trace:
//!
//! - Mean counters (event id [`MEAN_EVENT_ID`]): `Name` string, `DisplayName` string,
//!   `Mean` f64, `StandardDeviation` f64, `Count` i32, `Min` f64, `Max` f64, `IntervalSec`
//!   f32, `Series` string (`Interval=<ms>`), `CounterType` string (`Mean`), `Metadata`
//!   string, `DisplayUnits` string.
//! - Incrementing counters (event id [`SUM_EVENT_ID`]): `Name`, `DisplayName`,
//!   `DisplayRateTimeScale` string (`00:00:01`), `Increment` f64, `IntervalSec` f32,
//!   `Metadata`, `Series`, `CounterType` (`Sum`), `DisplayUnits`.
//!
//! Strings are NUL-terminated UTF-16. `IntervalSec` is the time since the previous
//! publication as measured; `Series` names the configured interval. .NET numbers these
//! self-describing events after the source's manifest events (System.Runtime's are 4 and
//! 5); readers go by name, and the ids here are fixed high ones so they cannot collide
//! with a provider's own small event ids: a counter provider must not declare events with
//! ids [`MEAN_EVENT_ID`] or [`SUM_EVENT_ID`].
//!
//! # Scheduling
//!
//! A provider's interval is the smallest `EventCounterIntervalSec` among the sessions that
//! enable it (see [`parse_interval`]). Every session that enables the provider receives its
//! events at that interval, as with .NET, whose EventSource writes one event to all its
//! listeners. The thread sleeps on a condition variable until the next due provider, takes
//! the table's lock only to pick the due providers, and publishes with no lock held. Values
//! are taken as running totals and differenced, so an interval never loses what was added
//! while it was being published: it appears in the next interval.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::Instrument;
use crate::provider::{EnableChange, EventDescriptor, FieldKind, FieldSpec};
use crate::sync::lock;
use crate::{Level, Provider};

/// The event id of Mean-shaped `EventCounters` events in a counter provider.
pub const MEAN_EVENT_ID: u32 = 0xFFF0;
/// The event id of Sum-shaped `EventCounters` events in a counter provider.
pub const SUM_EVENT_ID: u32 = 0xFFF1;

/// The filter argument that turns publication on.
pub const INTERVAL_ARGUMENT: &str = "EventCounterIntervalSec";
/// Intervals below this are raised to it: publishing every counter more often than a
/// hundred times a second would cost the process more than it tells.
pub const MIN_INTERVAL_SEC: f64 = 0.01;
/// Intervals above this (.NET's limit: an `i32` of milliseconds) are lowered to it.
pub const MAX_INTERVAL_SEC: f64 = i32::MAX as f64 / 1000.0;

const fn field(name: &'static str, kind: FieldKind) -> FieldSpec {
    FieldSpec { name, kind }
}

const MEAN_FIELDS: &[FieldSpec] = &[
    field("Name", FieldKind::Str),
    field("DisplayName", FieldKind::Str),
    field("Mean", FieldKind::F64),
    field("StandardDeviation", FieldKind::F64),
    field("Count", FieldKind::I32),
    field("Min", FieldKind::F64),
    field("Max", FieldKind::F64),
    field("IntervalSec", FieldKind::F32),
    field("Series", FieldKind::Str),
    field("CounterType", FieldKind::Str),
    field("Metadata", FieldKind::Str),
    field("DisplayUnits", FieldKind::Str),
];

const SUM_FIELDS: &[FieldSpec] = &[
    field("Name", FieldKind::Str),
    field("DisplayName", FieldKind::Str),
    field("DisplayRateTimeScale", FieldKind::Str),
    field("Increment", FieldKind::F64),
    field("IntervalSec", FieldKind::F32),
    field("Metadata", FieldKind::Str),
    field("Series", FieldKind::Str),
    field("CounterType", FieldKind::Str),
    field("DisplayUnits", FieldKind::Str),
];

/// `{ "": { Payload: { ...fields } } }`, as .NET's metadata nests them.
const MEAN_PAYLOAD: &[FieldSpec] = &[field(
    "",
    FieldKind::Struct(&[field("Payload", FieldKind::Struct(MEAN_FIELDS))]),
)];
const SUM_PAYLOAD: &[FieldSpec] = &[field(
    "",
    FieldKind::Struct(&[field("Payload", FieldKind::Struct(SUM_FIELDS))]),
)];

/// The interval a session's filter arguments ask for, in seconds: the value of
/// `EventCounterIntervalSec` (key matched case-insensitively; `key=value` pairs separated
/// by `;`), clamped to [`MIN_INTERVAL_SEC`]..=[`MAX_INTERVAL_SEC`]. `None` (no
/// publication for this session) when the argument is absent, empty, not a number, not
/// finite, zero or negative — .NET too treats a non-positive interval as off.
pub fn parse_interval(filter_args: Option<&str>) -> Option<f64> {
    let value = filter_args?.split(';').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        key.trim()
            .eq_ignore_ascii_case(INTERVAL_ARGUMENT)
            .then(|| value.trim())
    })?;
    let seconds: f64 = value.parse().ok()?;
    (seconds.is_finite() && seconds > 0.0)
        .then(|| seconds.clamp(MIN_INTERVAL_SEC, MAX_INTERVAL_SEC))
}

/// One provider with counters.
struct ProviderEntry {
    provider: &'static Provider,
    mean_event: &'static EventDescriptor,
    sum_event: &'static EventDescriptor,
    /// Replaced (never mutated) when a counter registers, so the publisher can take it
    /// out of the lock.
    instruments: Arc<Vec<Instrument>>,
    /// The sessions asking for publication: slot and interval in seconds.
    intervals: Vec<(usize, f64)>,
    last_publication: Instant,
    next_due: Instant,
}

impl ProviderEntry {
    fn interval(&self) -> Option<f64> {
        self.intervals
            .iter()
            .map(|&(_, s)| s)
            .min_by(f64::total_cmp)
    }
}

struct Table {
    providers: Vec<ProviderEntry>,
    /// Whether the `ep-counters` thread is alive. There is never more than one: the
    /// thread clears this, under the lock, in the same critical section in which it
    /// decides to exit.
    publisher_running: bool,
    /// Run-time providers (see `dynamic.rs`), by name.
    dynamic_providers: Vec<&'static Provider>,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    providers: Vec::new(),
    publisher_running: false,
    dynamic_providers: Vec::new(),
});
/// Wakes the publisher when the schedule changes.
static SCHEDULE_CHANGED: Condvar = Condvar::new();

/// Adds `instrument` to its provider's list; on the provider's first counter, declares its
/// `EventCounters` events and learns which running sessions already enable it.
pub(crate) fn register(instrument: Instrument) {
    let provider = instrument.provider();
    let new_provider = {
        let mut table = lock(&TABLE);
        let (index, created) = match table
            .providers
            .iter()
            .position(|e| std::ptr::eq(e.provider, provider))
        {
            Some(i) => (i, false),
            None => {
                table.providers.push(new_entry(provider));
                (table.providers.len() - 1, true)
            }
        };
        let entry = &mut table.providers[index];
        if !entry
            .instruments
            .iter()
            .any(|i| i.address() == instrument.address())
        {
            let mut list = Vec::clone(&entry.instruments);
            list.push(instrument);
            entry.instruments = Arc::new(list);
        }
        created.then_some((entry.mean_event, entry.sum_event))
    };
    if let Some((mean, sum)) = new_provider {
        // Before the events register, so a registry that sees the provider for the first
        // time tells the publisher of the sessions that name it.
        provider.mark_has_counters(on_enable_change);
        crate::registry::register_event(mean);
        crate::registry::register_event(sum);
        // A provider the registry knew already (it has events of its own) is not told
        // again: ask. Applying an enable twice is harmless.
        for (slot, config) in crate::registry::configs_naming(provider) {
            apply(
                provider,
                slot,
                parse_interval(config.filter_args.as_deref()),
            );
        }
    }
}

fn new_entry(provider: &'static Provider) -> ProviderEntry {
    let event = |id, fields| -> &'static EventDescriptor {
        // One pair per provider, for the life of the process.
        Box::leak(Box::new(EventDescriptor::new(
            provider,
            id,
            0,
            "EventCounters",
            Level::LogAlways,
            0,
            0,
            fields,
        )))
    };
    let now = Instant::now();
    ProviderEntry {
        provider,
        mean_event: event(MEAN_EVENT_ID, MEAN_PAYLOAD),
        sum_event: event(SUM_EVENT_ID, SUM_PAYLOAD),
        instruments: Arc::new(Vec::new()),
        intervals: Vec::new(),
        last_publication: now,
        next_due: now,
    }
}

/// The provider called `name` among counter providers and run-time ones, or a new
/// run-time one (leaked: it lives as long as the process).
pub(crate) fn provider_named(name: &str) -> &'static Provider {
    let mut table = lock(&TABLE);
    let known = table
        .providers
        .iter()
        .map(|e| e.provider)
        .chain(table.dynamic_providers.iter().copied())
        .find(|p| p.name() == name);
    if let Some(p) = known {
        return p;
    }
    let name: &'static str = Box::leak(name.to_owned().into_boxed_str());
    let provider: &'static Provider = Box::leak(Box::new(Provider::new(name)));
    table.dynamic_providers.push(provider);
    provider
}

/// The registry's hook for counter providers: a session enabled or disabled one.
pub fn on_enable_change(change: &EnableChange<'_>) {
    if change.ending {
        // The session still records; its `enabled: false` call follows once it stopped.
        return;
    }
    let interval = if change.enabled {
        parse_interval(change.filter_args)
    } else {
        None
    };
    apply(change.provider, change.session_slot, interval);
}

/// Records that the session in `slot` asks `provider` for `interval` (or nothing), and
/// starts or wakes the publisher.
fn apply(provider: *const Provider, slot: usize, interval: Option<f64>) {
    let mut table = lock(&TABLE);
    let Some(entry) = table
        .providers
        .iter_mut()
        .find(|e| std::ptr::eq(e.provider, provider))
    else {
        return;
    };
    let before = entry.interval();
    entry.intervals.retain(|&(s, _)| s != slot);
    if let Some(seconds) = interval {
        entry.intervals.push((slot, seconds));
    }
    let now = Instant::now();
    let mut starting = None;
    match (before, entry.interval()) {
        (None, Some(seconds)) => {
            // The first interval starts now: what was added before is not in it (as .NET
            // resets its counters when a session enables them).
            entry.last_publication = now;
            entry.next_due = now + Duration::from_secs_f64(seconds);
            starting = Some(Arc::clone(&entry.instruments));
        }
        (Some(old), Some(new)) if new < old => {
            // A faster session: publish on its schedule from the last publication on.
            entry.next_due = entry
                .next_due
                .min(entry.last_publication + Duration::from_secs_f64(new))
                .max(now);
        }
        _ => {}
    }
    let wanted = table.providers.iter().any(|e| !e.intervals.is_empty());
    if wanted && !table.publisher_running {
        let spawned = std::thread::Builder::new()
            .name("ep-counters".into())
            .spawn(run_publisher);
        // Without a thread there is no publication; the next change tries again.
        table.publisher_running = spawned.is_ok();
    }
    drop(table);
    // The totals now are the start of the first interval. Taken here, before the
    // registration or session start that led here returns (a counter registered later
    // starts from zero, all of it in its first interval), and out of the lock: an observed
    // counter's callback may do anything. The publisher's first run for the provider is an
    // interval away.
    if let Some(instruments) = starting {
        baseline(&instruments);
    }
    SCHEDULE_CHANGED.notify_all();
}

/// One due provider's publication, made out of the lock.
struct Job {
    instruments: Arc<Vec<Instrument>>,
    mean_event: &'static EventDescriptor,
    sum_event: &'static EventDescriptor,
    elapsed: Duration,
    interval_ms: u64,
}

fn run_publisher() {
    let mut table = lock(&TABLE);
    loop {
        let now = Instant::now();
        let mut jobs = Vec::new();
        let mut next_wake: Option<Instant> = None;
        for entry in &mut table.providers {
            // A session that no longer records the provider (stopped, or its disable call
            // not yet made) no longer sets the pace.
            let mask = entry.mean_event.mask();
            entry.intervals.retain(|&(slot, _)| mask & (1 << slot) != 0);
            let Some(seconds) = entry.interval() else {
                continue;
            };
            let period = Duration::from_secs_f64(seconds);
            if entry.next_due <= now {
                jobs.push(Job {
                    instruments: Arc::clone(&entry.instruments),
                    mean_event: entry.mean_event,
                    sum_event: entry.sum_event,
                    elapsed: now - entry.last_publication,
                    interval_ms: (seconds * 1000.0).round() as u64,
                });
                entry.last_publication = now;
                entry.next_due += period;
                if entry.next_due <= now {
                    // Fell behind (a slow session, a suspended process): skip, not burst.
                    entry.next_due = now + period;
                }
            }
            next_wake = Some(next_wake.map_or(entry.next_due, |t| t.min(entry.next_due)));
        }
        let Some(next_wake) = next_wake else {
            table.publisher_running = false;
            return;
        };
        if jobs.is_empty() {
            let wait = next_wake.saturating_duration_since(now);
            table = SCHEDULE_CHANGED
                .wait_timeout(table, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            continue;
        }
        // No lock while writing: a Block-mode session may park this thread.
        drop(table);
        for job in jobs {
            let context = Context {
                mean_event: job.mean_event,
                sum_event: job.sum_event,
                interval_sec: job.elapsed.as_secs_f32(),
                series: format!("Interval={}", job.interval_ms),
            };
            for &instrument in job.instruments.iter() {
                publish(&context, instrument);
            }
        }
        table = lock(&TABLE);
    }
}

/// Takes the running totals as the start of the first interval. The `published` fields
/// are otherwise the publisher's alone; this runs while no session has the provider
/// published, so the publisher has no job for it.
fn baseline(instruments: &[Instrument]) {
    use std::sync::atomic::Ordering::Relaxed;
    for &instrument in instruments {
        match instrument {
            Instrument::Counter(c) => c.published.store(c.cells.sum(), Relaxed),
            Instrument::FloatCounter(c) => c.published.store(c.cells.sum().to_bits(), Relaxed),
            Instrument::Observed(c) => c.published.store(c.observe().unwrap_or(0), Relaxed),
            Instrument::Histogram(h) => {
                *lock(&h.published) = h.cells.totals();
                h.cells.take_extremes();
            }
            Instrument::UpDown(_) | Instrument::Gauge(_) => {}
        }
    }
}

struct Context {
    mean_event: &'static EventDescriptor,
    sum_event: &'static EventDescriptor,
    interval_sec: f32,
    series: String,
}

/// A Mean-shaped payload's values.
struct MeanValues {
    mean: f64,
    deviation: f64,
    count: u64,
    min: f64,
    max: f64,
}

impl MeanValues {
    fn single(value: f64) -> Self {
        MeanValues {
            mean: value,
            deviation: 0.0,
            count: 1,
            min: value,
            max: value,
        }
    }
}

fn publish(context: &Context, instrument: Instrument) {
    // Relaxed: `published` is the publisher thread's own state (see `baseline`).
    use std::sync::atomic::Ordering::Relaxed;
    match instrument {
        Instrument::Counter(c) => {
            let total = c.cells.sum();
            let increment = total.wrapping_sub(c.published.swap(total, Relaxed));
            write_sum(context, &c.info, increment as f64);
        }
        Instrument::FloatCounter(c) => {
            let total = c.cells.sum();
            let before = f64::from_bits(c.published.swap(total.to_bits(), Relaxed));
            write_sum(context, &c.info, (total - before).max(0.0));
        }
        Instrument::Observed(c) => {
            let Some(total) = c.observe() else { return };
            // A total that went down (a source that restarted) counts as no increase.
            let increment = total.saturating_sub(c.published.swap(total, Relaxed));
            write_sum(context, &c.info, increment as f64);
        }
        Instrument::UpDown(c) => {
            write_mean(
                context,
                &c.info,
                &MeanValues::single(c.value() as f64),
                None,
            );
        }
        Instrument::Gauge(g) => {
            if let Some(value) = g.value() {
                write_mean(context, &g.info, &MeanValues::single(value), None);
            }
        }
        Instrument::Histogram(h) => {
            let (stats, totals) = {
                let mut published = lock(&h.published);
                let (stats, totals) = h.cells.interval(&published);
                *published = totals.clone();
                (stats, totals)
            };
            drop(totals);
            let (mean, deviation) = stats.mean_and_deviation();
            let (min, max) = stats.min_max.unwrap_or((0.0, 0.0));
            let percentiles = match (
                stats.percentile(0.5),
                stats.percentile(0.95),
                stats.percentile(0.99),
            ) {
                (Some(p50), Some(p95), Some(p99)) => {
                    Some(format!("Percentiles=p50:{p50};p95:{p95};p99:{p99}"))
                }
                _ => None,
            };
            let values = MeanValues {
                mean,
                deviation,
                count: stats.count,
                min,
                max,
            };
            write_mean(context, &h.info, &values, percentiles.as_deref());
        }
    }
}

fn write_mean(
    context: &Context,
    info: &super::CounterInfo,
    values: &MeanValues,
    percentiles: Option<&str>,
) {
    let metadata = match (info.metadata, percentiles) {
        (m, None) => std::borrow::Cow::Borrowed(m),
        ("", Some(p)) => std::borrow::Cow::Borrowed(p),
        (m, Some(p)) => std::borrow::Cow::Owned(format!("{m},{p}")),
    };
    context.mean_event.write_with(|w| {
        w.put_text(info.name);
        w.put_text(info.display_name);
        w.put(&values.mean);
        w.put(&values.deviation);
        w.put(&i32::try_from(values.count).unwrap_or(i32::MAX));
        w.put(&values.min);
        w.put(&values.max);
        w.put(&context.interval_sec);
        w.put_text(&context.series);
        w.put_text("Mean");
        w.put_text(&metadata);
        w.put_text(info.unit);
    });
}

fn write_sum(context: &Context, info: &super::CounterInfo, increment: f64) {
    context.sum_event.write_with(|w| {
        w.put_text(info.name);
        w.put_text(info.display_name);
        w.put_text("00:00:01");
        w.put(&increment);
        w.put(&context.interval_sec);
        w.put_text(info.metadata);
        w.put_text(&context.series);
        w.put_text("Sum");
        w.put_text(info.unit);
    });
}

/// Whether the `ep-counters` thread is alive (for tests and the built-in counters).
pub fn publisher_running() -> bool {
    lock(&TABLE).publisher_running
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_argument_parsing_ignores_or_clamps_bad_values() {
        assert_eq!(parse_interval(Some("EventCounterIntervalSec=1")), Some(1.0));
        assert_eq!(
            parse_interval(Some("a=b; eventcounterintervalsec = 0.25 ;c=d")),
            Some(0.25)
        );
        assert_eq!(
            parse_interval(Some("EventCounterIntervalSec=0.001")),
            Some(MIN_INTERVAL_SEC)
        );
        assert_eq!(
            parse_interval(Some("EventCounterIntervalSec=1e12")),
            Some(MAX_INTERVAL_SEC)
        );
        for bad in [
            "EventCounterIntervalSec=0",
            "EventCounterIntervalSec=-1",
            "EventCounterIntervalSec=NaN",
            "EventCounterIntervalSec=inf",
            "EventCounterIntervalSec=",
            "EventCounterIntervalSec=one",
            "Other=1",
            "",
        ] {
            assert_eq!(parse_interval(Some(bad)), None, "{bad}");
        }
        assert_eq!(parse_interval(None), None);
    }
}
