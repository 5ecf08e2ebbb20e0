//! Counters made at run time, for bridges from other metrics APIs whose names are known
//! only when the program runs.
//!
//! Each call makes a new counter, leaked: it lives as long as the process, like a `static`.
//! A bridge keeps its own map from its keys to the counters it made, so it makes each once.

use super::{Counter, CounterInfo, FloatCounter, Gauge, Histogram, UpDownCounter};
use crate::Provider;

/// The counter provider called `name`: a provider that already has counters, or one made
/// earlier by this function, or a new one (leaked). The same name gives the same provider.
pub fn provider(name: &str) -> &'static Provider {
    super::publish::provider_named(name)
}

/// A [`CounterInfo`] from run-time strings (leaked; NUL characters become U+FFFD).
pub fn info(
    name: &str,
    display_name: &str,
    unit: &str,
    description: &str,
    metadata: &str,
) -> CounterInfo {
    fn leak(s: &str) -> &'static str {
        if s.is_empty() {
            return "";
        }
        Box::leak(s.replace('\0', "\u{FFFD}").into_boxed_str())
    }
    CounterInfo {
        name: leak(name),
        display_name: leak(display_name),
        unit: leak(unit),
        description: leak(description),
        metadata: leak(metadata),
    }
}

/// A new [`Counter`], registered.
pub fn counter(provider: &'static Provider, info: CounterInfo) -> &'static Counter {
    let c: &'static Counter = Box::leak(Box::new(Counter::new(provider, info)));
    c.register();
    c
}

/// A new [`FloatCounter`], registered.
pub fn float_counter(provider: &'static Provider, info: CounterInfo) -> &'static FloatCounter {
    let c: &'static FloatCounter = Box::leak(Box::new(FloatCounter::new(provider, info)));
    c.register();
    c
}

/// A new [`UpDownCounter`], registered.
pub fn up_down_counter(provider: &'static Provider, info: CounterInfo) -> &'static UpDownCounter {
    let c: &'static UpDownCounter = Box::leak(Box::new(UpDownCounter::new(provider, info)));
    c.register();
    c
}

/// A new settable [`Gauge`], registered.
pub fn gauge(provider: &'static Provider, info: CounterInfo) -> &'static Gauge {
    let g: &'static Gauge = Box::leak(Box::new(Gauge::new(provider, info)));
    g.register();
    g
}

/// A new [`Gauge`] observed by `observe` at each publication, registered.
pub fn observed_gauge(
    provider: &'static Provider,
    info: CounterInfo,
    observe: Box<dyn Fn() -> f64 + Send + Sync>,
) -> &'static Gauge {
    let g: &'static Gauge = Box::leak(Box::new(Gauge::observed_by(provider, info, observe)));
    g.register();
    g
}

/// A new [`Histogram`], registered.
pub fn histogram(provider: &'static Provider, info: CounterInfo) -> &'static Histogram {
    let h: &'static Histogram = Box::leak(Box::new(Histogram::new(provider, info)));
    h.register();
    h
}
