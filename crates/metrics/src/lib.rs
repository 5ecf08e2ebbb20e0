//! # eventpipe-metrics
//!
//! A [`metrics`] recorder whose counters, gauges and histograms are eventpipe counters: a
//! program that already uses the `metrics` facade becomes monitorable with `eptrace
//! counters`, `dotnet-counters` or anything that reads .NET EventCounters, with one line:
//!
//! ```no_run
//! eventpipe_metrics::install().expect("no other metrics recorder");
//! metrics::counter!("requests", "route" => "/orders").increment(1);
//! ```
//!
//! The counters belong to the provider [`DEFAULT_PROVIDER`] (`Metrics`; a fixed name, so a
//! tool can ask for it without knowing the program), or to the one named with
//! [`install_under`]. A session publishes them with `EventCounterIntervalSec=N` like any
//! eventpipe counter (see `eventpipe_core::counters`).
//!
//! | `metrics` | eventpipe | published as |
//! |---|---|---|
//! | counter | [`eventpipe_core::Counter`] | `Sum`: the increase over the interval |
//! | gauge | [`eventpipe_core::Gauge`] (set, increment, decrement) | `Mean`: the value |
//! | histogram | [`eventpipe_core::Histogram`] | `Mean`: count, mean, deviation, min, max; percentiles in `Metadata` |
//!
//! Each name and label set is one series, one eventpipe counter: its `Name` and
//! `DisplayName` are the metric's name as given, its labels go into `Metadata` as
//! `k=v,k=v` in the order given (a `,` or `=` inside a key or value becomes `_`, so the
//! list stays parsable), followed for histograms by the percentiles. The unit and
//! description come from `describe_*!` (`metrics::Unit`'s canonical label: `B`, `ms`,
//! `%`, ...) when it comes before the metric's first use. Series are never removed: a
//! program that makes labels from unbounded values (user ids) grows without bound, as with
//! any `metrics` recorder that keeps its series.
//!
//! A counter's `absolute(n)` raises it to `n` when `n` is larger (the published increase
//! is what it gained); a lower `n` is ignored, since the counter is monotonic.
//!
//! Cost: the `metrics` macros ask the recorder for the series on every call, a read lock
//! and a hash lookup here; then the update itself is an eventpipe counter's (a relaxed load
//! and store on the thread's own cell). Keep the handle (`let c = counter!(...)`) on hot
//! paths to pay the lookup once.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// The provider the recorder's counters belong to unless named otherwise.
pub const DEFAULT_PROVIDER: &str = "Metrics";

/// Why the recorder could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The program has a global `metrics` recorder already (there can be one).
    #[error("a global metrics recorder is already installed")]
    AlreadyInstalled,
}

/// Installs the recorder as the global `metrics` recorder, under [`DEFAULT_PROVIDER`].
pub fn install() -> Result<(), InstallError> {
    install_under(DEFAULT_PROVIDER)
}

/// Installs the recorder as the global `metrics` recorder, its counters under the
/// provider called `provider`.
pub fn install_under(provider: &str) -> Result<(), InstallError> {
    eventpipe_core::server::warn_if_unserved("eventpipe-metrics' recorder");
    metrics::set_global_recorder(EventPipeRecorder::new(provider))
        .map_err(|_| InstallError::AlreadyInstalled)
}

/// The recorder: one eventpipe counter per metric name and label set.
#[derive(Debug)]
pub struct EventPipeRecorder {
    provider: &'static eventpipe_core::Provider,
    series: RwLock<Series>,
    descriptions: Mutex<HashMap<String, (Option<Unit>, String)>>,
}

#[derive(Debug, Default)]
struct Series {
    counters: HashMap<Key, Arc<CounterHandle>>,
    gauges: HashMap<Key, Arc<GaugeHandle>>,
    histograms: HashMap<Key, Arc<HistogramHandle>>,
}

impl EventPipeRecorder {
    /// A recorder whose counters belong to the provider called `provider` (for programs
    /// that compose recorders; [`install_under`] is the usual way).
    pub fn new(provider: &str) -> Self {
        EventPipeRecorder {
            provider: eventpipe_core::counters::dynamic::provider(provider),
            series: RwLock::default(),
            descriptions: Mutex::default(),
        }
    }

    fn info(&self, key: &Key) -> eventpipe_core::CounterInfo {
        let descriptions = self.descriptions.lock().unwrap_or_else(|p| p.into_inner());
        let (unit, description) = descriptions
            .get(key.name())
            .map(|(u, d)| (u.map_or("", |u| u.as_canonical_label()), d.as_str()))
            .unwrap_or(("", ""));
        eventpipe_core::counters::dynamic::info(
            key.name(),
            key.name(),
            unit,
            description,
            &labels_metadata(key),
        )
    }

    fn describe(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.descriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.as_str().to_string(), (unit, description.into_owned()));
    }

    /// The handle of `key` in the map `pick` chooses, made by `make` on first use.
    fn handle<H>(
        &self,
        key: &Key,
        pick: impl Fn(&mut Series) -> &mut HashMap<Key, Arc<H>>,
        make: impl FnOnce() -> H,
    ) -> Arc<H> {
        // Made under the write lock, so two threads never make two eventpipe counters for
        // one series (both would be published). Registering takes eventpipe's locks, and
        // eventpipe never calls back into the recorder, so there is no lock cycle.
        let mut series = self.series.write().unwrap_or_else(|p| p.into_inner());
        Arc::clone(
            pick(&mut series)
                .entry(key.clone())
                .or_insert_with(|| Arc::new(make())),
        )
    }

    fn lookup<H>(
        &self,
        key: &Key,
        pick: impl Fn(&Series) -> &HashMap<Key, Arc<H>>,
    ) -> Option<Arc<H>> {
        let series = self.series.read().unwrap_or_else(|p| p.into_inner());
        pick(&series).get(key).cloned()
    }
}

/// `k=v,k=v`, with the separators replaced inside keys and values.
fn labels_metadata(key: &Key) -> String {
    let clean = |s: &str| s.replace([',', '='], "_");
    key.labels()
        .map(|l| format!("{}={}", clean(l.key()), clean(l.value())))
        .collect::<Vec<_>>()
        .join(",")
}

impl Recorder for EventPipeRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(key, unit, description);
    }

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let handle = self.lookup(key, |s| &s.counters).unwrap_or_else(|| {
            self.handle(
                key,
                |s| &mut s.counters,
                || {
                    CounterHandle(eventpipe_core::counters::dynamic::counter(
                        self.provider,
                        self.info(key),
                    ))
                },
            )
        });
        Counter::from_arc(handle)
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let handle = self.lookup(key, |s| &s.gauges).unwrap_or_else(|| {
            self.handle(
                key,
                |s| &mut s.gauges,
                || {
                    GaugeHandle(eventpipe_core::counters::dynamic::gauge(
                        self.provider,
                        self.info(key),
                    ))
                },
            )
        });
        Gauge::from_arc(handle)
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let handle = self.lookup(key, |s| &s.histograms).unwrap_or_else(|| {
            self.handle(
                key,
                |s| &mut s.histograms,
                || {
                    HistogramHandle(eventpipe_core::counters::dynamic::histogram(
                        self.provider,
                        self.info(key),
                    ))
                },
            )
        });
        Histogram::from_arc(handle)
    }
}

#[derive(Debug)]
struct CounterHandle(&'static eventpipe_core::Counter);

impl CounterFn for CounterHandle {
    fn increment(&self, value: u64) {
        self.0.add(value);
    }

    fn absolute(&self, value: u64) {
        // Racy by nature (another thread may add in between); the counter stays monotonic.
        let now = self.0.value();
        if value > now {
            self.0.add(value - now);
        }
    }
}

#[derive(Debug)]
struct GaugeHandle(&'static eventpipe_core::Gauge);

impl GaugeFn for GaugeHandle {
    fn increment(&self, value: f64) {
        self.0.add(value);
    }

    fn decrement(&self, value: f64) {
        self.0.add(-value);
    }

    fn set(&self, value: f64) {
        self.0.set(value);
    }
}

#[derive(Debug)]
struct HistogramHandle(&'static eventpipe_core::Histogram);

impl HistogramFn for HistogramHandle {
    fn record(&self, value: f64) {
        self.0.record(value);
    }
}
