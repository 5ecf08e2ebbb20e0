//! Counters: values a program keeps up to date and the runtime publishes, every few
//! seconds, as .NET EventCounters — so `dotnet-counters`, TraceEvent and `eptrace counters`
//! read a Rust process like a .NET one.
//!
//! A provider declares its counters as `static`s (or at run time, see [`dynamic`]):
//!
//! | type | update | published as |
//! |---|---|---|
//! | [`Counter`] | `add(u64)` | `Sum`: the increase over the interval |
//! | [`FloatCounter`] | `add(f64)` | `Sum` |
//! | [`ObservedCounter`] | a callback returns the running total | `Sum` |
//! | [`UpDownCounter`] | `add(i64)` | `Mean`: the current value |
//! | [`Gauge`] | `set(f64)`, or observed by a callback at publication | `Mean`: the value |
//! | [`Histogram`] | `record(f64)` | `Mean`: count, mean, deviation, min, max of the interval; percentiles in `Metadata` |
//!
//! ```
//! use eventpipe_core::counters::{Counter, CounterInfo, Gauge, Histogram};
//! use eventpipe_core::Provider;
//!
//! static SHOP: Provider = Provider::new("MyShop");
//! static ORDERS: Counter = Counter::new(&SHOP, CounterInfo::new("orders-placed")
//!     .display_name("Orders Placed").description("Orders accepted by the API"));
//! static LATENCY: Histogram = Histogram::new(&SHOP, CounterInfo::new("order-latency")
//!     .display_name("Order Latency").unit("ms"));
//! fn queue_length() -> f64 { 3.0 }
//! static QUEUE: Gauge = Gauge::observed(&SHOP, CounterInfo::new("queue-length")
//!     .display_name("Queue Length"), queue_length);
//!
//! QUEUE.register(); // published from now on, though nothing updates it
//! ORDERS.add(1);    // registers on first use
//! LATENCY.record(12.5);
//! ```
//!
//! **Updates** land in per-thread cells (`cells.rs`): a relaxed load and store on a cache
//! line only the calling thread writes — no lock, no allocation (a histogram allocates its
//! thread's shard once), and no cache-line traffic between two threads updating the same
//! counter. The 33rd thread to hold a slot at once shares one cell (read-modify-writes).
//! A counter occupies 2 KiB; a histogram 8 KiB more for each thread slot that records
//! into it. Gauges are one atomic (a set is a store: the last writer wins).
//!
//! **Publication** (`publish.rs`): while a session enables the provider with the filter
//! argument `EventCounterIntervalSec=N` (fractional allowed; the smallest across sessions
//! wins; values below 0.01 are raised to 0.01, values that are not a positive number are
//! ignored, as if absent), one thread, `ep-counters`, publishes each of the provider's
//! counters every N seconds as an `EventCounters` event with the payload .NET's EventSource
//! writes (see [`publish`]'s docs for the exact layout). With no such session there is no
//! thread and no timer; the thread exits when the last one stops. It holds no lock while it
//! writes events or calls a gauge's callback.
//!
//! Histograms publish their percentiles in `Metadata` as
//! `Percentiles=p50:X;p95:Y;p99:Z` (after the counter's own metadata, comma separated),
//! each within [`histogram::RELATIVE_ERROR`] (3.125 %) of the exact value for values in
//! [2^-20, 2^44); see [`histogram`]. An interval without values publishes Count 0 and
//! Mean, Min, Max 0 (.NET writes ±infinity for Min and Max there).
//!
//! A counter's description is kept ([`CounterInfo::description`]) but not published: the
//! EventCounters payload has no field for it.

mod cells;
pub mod dynamic;
pub mod histogram;
pub mod publish;
pub mod runtime;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::Provider;

pub use publish::on_enable_change;

/// What a counter is called and how readers show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterInfo {
    /// The name readers select it by, .NET style: lowercase with dashes (`alloc-rate`).
    pub name: &'static str,
    /// The name shown to people (`Allocation Rate`); empty: readers show `name`.
    pub display_name: &'static str,
    /// The display unit (`B`, `MB`, `ms`, `%`, or empty).
    pub unit: &'static str,
    /// What it measures (kept for documentation; not published).
    pub description: &'static str,
    /// Published in the payload's `Metadata` field (the metrics bridge puts labels here,
    /// `k=v,k=v`).
    pub metadata: &'static str,
}

impl CounterInfo {
    /// A counter called `name`, with no display name, unit or description.
    pub const fn new(name: &'static str) -> Self {
        CounterInfo {
            name,
            display_name: "",
            unit: "",
            description: "",
            metadata: "",
        }
    }
    /// With a display name.
    pub const fn display_name(mut self, display_name: &'static str) -> Self {
        self.display_name = display_name;
        self
    }
    /// With a display unit.
    pub const fn unit(mut self, unit: &'static str) -> Self {
        self.unit = unit;
        self
    }
    /// With a description.
    pub const fn description(mut self, description: &'static str) -> Self {
        self.description = description;
        self
    }
    /// With metadata for the payload's `Metadata` field.
    pub const fn metadata(mut self, metadata: &'static str) -> Self {
        self.metadata = metadata;
        self
    }
}

/// Registration state shared by every counter type.
#[derive(Debug)]
struct Registration {
    done: AtomicBool,
}

impl Registration {
    const fn new() -> Self {
        Registration {
            done: AtomicBool::new(false),
        }
    }

    /// Whether the counter still has to register: one relaxed load. Relaxed suffices:
    /// registering twice is harmless (the table dedups under its lock).
    #[inline(always)]
    fn pending(&self) -> bool {
        !self.done.load(Ordering::Relaxed)
    }
}

/// A counter as the publisher sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Instrument {
    Counter(&'static Counter),
    Observed(&'static ObservedCounter),
    FloatCounter(&'static FloatCounter),
    UpDown(&'static UpDownCounter),
    Gauge(&'static Gauge),
    Histogram(&'static Histogram),
}

impl Instrument {
    fn address(self) -> *const () {
        match self {
            Instrument::Counter(c) => c as *const Counter as *const (),
            Instrument::Observed(c) => c as *const ObservedCounter as *const (),
            Instrument::FloatCounter(c) => c as *const FloatCounter as *const (),
            Instrument::UpDown(c) => c as *const UpDownCounter as *const (),
            Instrument::Gauge(c) => c as *const Gauge as *const (),
            Instrument::Histogram(c) => c as *const Histogram as *const (),
        }
    }

    pub(crate) fn provider(self) -> &'static Provider {
        match self {
            Instrument::Counter(c) => c.provider,
            Instrument::Observed(c) => c.provider,
            Instrument::FloatCounter(c) => c.provider,
            Instrument::UpDown(c) => c.provider,
            Instrument::Gauge(c) => c.provider,
            Instrument::Histogram(c) => c.provider,
        }
    }

    fn registration(self) -> &'static Registration {
        match self {
            Instrument::Counter(c) => &c.registration,
            Instrument::Observed(c) => &c.registration,
            Instrument::FloatCounter(c) => &c.registration,
            Instrument::UpDown(c) => &c.registration,
            Instrument::Gauge(c) => &c.registration,
            Instrument::Histogram(c) => &c.registration,
        }
    }
}

#[cold]
#[inline(never)]
fn register(instrument: Instrument) {
    publish::register(instrument);
    // Relaxed: see `Registration::pending`.
    instrument
        .registration()
        .done
        .store(true, Ordering::Relaxed);
}

/// A monotonic sum of `u64` increments, published as the increase over each interval
/// (`CounterType` `Sum`).
#[derive(Debug)]
pub struct Counter {
    provider: &'static Provider,
    info: CounterInfo,
    cells: cells::U64Cells,
    registration: Registration,
    /// The total at the last publication; only the publisher thread touches it.
    published: AtomicU64,
}

impl Counter {
    /// Declares a counter of `provider`; usable in a `static`.
    pub const fn new(provider: &'static Provider, info: CounterInfo) -> Self {
        Counter {
            provider,
            info,
            cells: cells::U64Cells::new(),
            registration: Registration::new(),
            published: AtomicU64::new(0),
        }
    }

    /// Adds `n`: a relaxed load and store on the calling thread's cell (wrapping at
    /// `u64::MAX`, which readers see as one huge increment).
    #[inline]
    pub fn add(&'static self, n: u64) {
        if self.registration.pending() {
            register(Instrument::Counter(self));
        }
        self.cells.add(n);
    }

    /// Adds one.
    #[inline]
    pub fn increment(&'static self) {
        self.add(1);
    }

    /// The total added so far (every thread's cell).
    pub fn value(&self) -> u64 {
        self.cells.sum()
    }

    /// Makes it published from now on, before any update.
    pub fn register(&'static self) {
        if self.registration.pending() {
            register(Instrument::Counter(self));
        }
    }

    /// Its name, display name, unit and description.
    pub fn info(&self) -> &CounterInfo {
        &self.info
    }
}

/// A monotonic total kept elsewhere (bytes a subsystem has handled, events a session has
/// written), read by a callback at each publication and published as its increase (`Sum`).
/// A total lower than the last one read counts as no increase.
#[derive(Debug)]
pub struct ObservedCounter {
    provider: &'static Provider,
    info: CounterInfo,
    observe: fn() -> u64,
    registration: Registration,
    /// The total at the last publication; only the publisher thread touches it.
    published: AtomicU64,
}

impl ObservedCounter {
    /// Declares a counter whose running total `observe` returns, called on the publisher
    /// thread (no lock held; a panic skips the counter that time). Usable in a `static`;
    /// call [`register`](Self::register) once to have it published.
    pub const fn new(provider: &'static Provider, info: CounterInfo, observe: fn() -> u64) -> Self {
        ObservedCounter {
            provider,
            info,
            observe,
            registration: Registration::new(),
            published: AtomicU64::new(0),
        }
    }

    fn observe(&self) -> Option<u64> {
        std::panic::catch_unwind(self.observe).ok()
    }

    /// Makes it published from now on.
    pub fn register(&'static self) {
        if self.registration.pending() {
            register(Instrument::Observed(self));
        }
    }

    /// Its name, display name, unit and description.
    pub fn info(&self) -> &CounterInfo {
        &self.info
    }
}

/// A monotonic sum of `f64` increments (`Sum`). Negative, infinite and NaN increments are
/// ignored: the sum only grows.
#[derive(Debug)]
pub struct FloatCounter {
    provider: &'static Provider,
    info: CounterInfo,
    cells: cells::F64Cells,
    registration: Registration,
    /// The total at the last publication (f64 bits); only the publisher touches it.
    published: AtomicU64,
}

impl FloatCounter {
    /// Declares a counter of `provider`; usable in a `static`.
    pub const fn new(provider: &'static Provider, info: CounterInfo) -> Self {
        FloatCounter {
            provider,
            info,
            cells: cells::F64Cells::new(),
            registration: Registration::new(),
            published: AtomicU64::new(0),
        }
    }

    /// Adds `x` when it is a finite, non-negative number.
    #[inline]
    pub fn add(&'static self, x: f64) {
        if self.registration.pending() {
            register(Instrument::FloatCounter(self));
        }
        if x >= 0.0 && x.is_finite() {
            self.cells.add(x);
        }
    }

    /// The total added so far.
    pub fn value(&self) -> f64 {
        self.cells.sum()
    }

    /// Makes it published from now on, before any update.
    pub fn register(&'static self) {
        if self.registration.pending() {
            register(Instrument::FloatCounter(self));
        }
    }

    /// Its name, display name, unit and description.
    pub fn info(&self) -> &CounterInfo {
        &self.info
    }
}

/// A sum that goes up and down (connections open, items queued), published as its current
/// value (`Mean`, Count 1).
#[derive(Debug)]
pub struct UpDownCounter {
    provider: &'static Provider,
    info: CounterInfo,
    cells: cells::U64Cells,
    registration: Registration,
}

impl UpDownCounter {
    /// Declares an up/down counter of `provider`; usable in a `static`.
    pub const fn new(provider: &'static Provider, info: CounterInfo) -> Self {
        UpDownCounter {
            provider,
            info,
            cells: cells::U64Cells::new(),
            registration: Registration::new(),
        }
    }

    /// Adds `delta` (negative to subtract): a relaxed load and store on the calling
    /// thread's cell.
    #[inline]
    pub fn add(&'static self, delta: i64) {
        if self.registration.pending() {
            register(Instrument::UpDown(self));
        }
        // Two's complement: the wrapping sum of every cell is the signed total.
        self.cells.add(delta as u64);
    }

    /// The current value.
    pub fn value(&self) -> i64 {
        self.cells.sum() as i64
    }

    /// Makes it published from now on, before any update.
    pub fn register(&'static self) {
        if self.registration.pending() {
            register(Instrument::UpDown(self));
        }
    }

    /// Its name, display name, unit and description.
    pub fn info(&self) -> &CounterInfo {
        &self.info
    }
}

/// Where a gauge's value comes from.
enum GaugeSource {
    /// The last value set (f64 bits).
    Set(AtomicU64),
    /// Asked at each publication, on the publisher thread.
    Observed(fn() -> f64),
    /// As `Observed`, a closure (run-time gauges).
    ObservedBoxed(Box<dyn Fn() -> f64 + Send + Sync>),
}

impl std::fmt::Debug for GaugeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GaugeSource::Set(v) => write!(f, "Set({})", f64::from_bits(v.load(Ordering::Relaxed))),
            GaugeSource::Observed(_) | GaugeSource::ObservedBoxed(_) => f.write_str("Observed"),
        }
    }
}

/// A value set by the program or observed at publication (`Mean`, Count 1).
#[derive(Debug)]
pub struct Gauge {
    provider: &'static Provider,
    info: CounterInfo,
    source: GaugeSource,
    registration: Registration,
}

impl Gauge {
    /// Declares a gauge that the program sets; starts at 0. Usable in a `static`.
    pub const fn new(provider: &'static Provider, info: CounterInfo) -> Self {
        Gauge {
            provider,
            info,
            source: GaugeSource::Set(AtomicU64::new(0)),
            registration: Registration::new(),
        }
    }

    /// Declares a gauge whose value `observe` returns, called on the publisher thread at
    /// each publication (with no lock held; a panic skips the gauge that time). Call
    /// [`register`](Self::register) once to have it published.
    pub const fn observed(
        provider: &'static Provider,
        info: CounterInfo,
        observe: fn() -> f64,
    ) -> Self {
        Gauge {
            provider,
            info,
            source: GaugeSource::Observed(observe),
            registration: Registration::new(),
        }
    }

    /// As [`observed`](Self::observed), with a closure (for gauges made at run time).
    pub fn observed_by(
        provider: &'static Provider,
        info: CounterInfo,
        observe: Box<dyn Fn() -> f64 + Send + Sync>,
    ) -> Self {
        Gauge {
            provider,
            info,
            source: GaugeSource::ObservedBoxed(observe),
            registration: Registration::new(),
        }
    }

    /// Sets the value (a relaxed store; ignored by an observed gauge).
    #[inline]
    pub fn set(&'static self, value: f64) {
        if self.registration.pending() {
            register(Instrument::Gauge(self));
        }
        if let GaugeSource::Set(v) = &self.source {
            v.store(value.to_bits(), Ordering::Relaxed);
        }
    }

    /// Adds `delta` to the value (a compare-and-swap loop on the one shared atomic;
    /// ignored by an observed gauge). For values many threads move, an
    /// [`UpDownCounter`] does not contend.
    pub fn add(&'static self, delta: f64) {
        if self.registration.pending() {
            register(Instrument::Gauge(self));
        }
        if let GaugeSource::Set(v) = &self.source {
            cells::add_f64_shared(v, delta);
        }
    }

    /// The value now (calls the observer of an observed gauge; `None` if it panicked).
    pub fn value(&self) -> Option<f64> {
        match &self.source {
            GaugeSource::Set(v) => Some(f64::from_bits(v.load(Ordering::Relaxed))),
            GaugeSource::Observed(f) => std::panic::catch_unwind(f).ok(),
            GaugeSource::ObservedBoxed(f) => {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok()
            }
        }
    }

    /// Makes it published from now on.
    pub fn register(&'static self) {
        if self.registration.pending() {
            register(Instrument::Gauge(self));
        }
    }

    /// Its name, display name, unit and description.
    pub fn info(&self) -> &CounterInfo {
        &self.info
    }
}

/// A distribution of `f64` values (latencies, sizes), published per interval as Count,
/// Mean, StandardDeviation, Min and Max (`Mean`), with p50/p95/p99 in `Metadata`.
#[derive(Debug)]
pub struct Histogram {
    provider: &'static Provider,
    info: CounterInfo,
    cells: histogram::HistogramCells,
    registration: Registration,
    /// The totals at the last publication; only the publisher thread locks it.
    published: Mutex<histogram::HistogramTotals>,
}

impl Histogram {
    /// Declares a histogram of `provider`; usable in a `static`.
    pub const fn new(provider: &'static Provider, info: CounterInfo) -> Self {
        Histogram {
            provider,
            info,
            cells: histogram::HistogramCells::new(),
            registration: Registration::new(),
            published: Mutex::new(histogram::HistogramTotals {
                count: 0,
                sum: 0.0,
                sum_squares: 0.0,
                buckets: Vec::new(),
            }),
        }
    }

    /// Records `value` (NaN is ignored): relaxed loads and stores on the calling thread's
    /// shard, which its first record allocates.
    #[inline]
    pub fn record(&'static self, value: f64) {
        if self.registration.pending() {
            register(Instrument::Histogram(self));
        }
        self.cells.record(value);
    }

    /// Values recorded so far.
    pub fn count(&self) -> u64 {
        self.cells.totals().count
    }

    /// Makes it published from now on, before any record.
    pub fn register(&'static self) {
        if self.registration.pending() {
            register(Instrument::Histogram(self));
        }
    }

    /// Its name, display name, unit and description.
    pub fn info(&self) -> &CounterInfo {
        &self.info
    }
}
