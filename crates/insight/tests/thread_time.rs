//! .NET sample-profiler traces as thread time, checked against TraceEvent's algorithm
//! (`SampleProfilerThreadTimeComputer`, PerfView's "Thread Time" view) re-derived here from
//! its definition, not from the library's code:
//!
//! * a sample weighs the time from it to the next sample of the same thread; the last
//!   sample of a thread weighs nothing; no cap on gaps; the nominal interval is unused;
//! * managed (`Type` 2) and external (`Type` 1) samples weigh alike.
//!
//! The expected numbers are computed below from the raw events (timestamps in the trace's
//! ticks and clock, stacks as instruction pointers) and the trace's own method rundown
//! (start address and size of each method), with a lookup written here. The real traces
//! are in `../shared/traces`; each test skips with a notice when they are absent.

mod common;

use std::collections::{BTreeMap, HashMap};

use eventpipe_insight::{build_profile, Profile, SampleSelection, SampleUnit, EXTERNAL_CODE_FRAME};
use nettrace::{TraceReader, Value};

/// One `Microsoft-DotNETCore-SampleProfiler` event, raw.
struct RawSample {
    thread: u64,
    ticks: i64,
    external: bool,
    /// Leaf first, as the trace stores them.
    ips: Vec<u64>,
}

/// The trace's sample events and method ranges (start → (end, `Namespace.Name`)).
struct Raw {
    samples: Vec<RawSample>,
    methods: BTreeMap<u64, (u64, String)>,
    ticks_per_second: f64,
}

fn read_raw(bytes: &[u8]) -> Raw {
    let mut reader = TraceReader::from_slice(bytes).unwrap();
    let ticks_per_second = reader.trace().tick_frequency as f64;
    let mut samples = Vec::new();
    let mut methods = BTreeMap::new();
    while let Some(e) = reader.next_event().unwrap() {
        let md = e.metadata;
        if md.provider == "Microsoft-DotNETCore-SampleProfiler" {
            let fields = e.decode_payload().unwrap();
            let kind = fields
                .iter()
                .find(|(n, _)| *n == "Type")
                .unwrap()
                .1
                .as_u64();
            samples.push(RawSample {
                thread: e.thread_id(),
                ticks: e.header.timestamp,
                external: kind == Some(1),
                ips: e.stack_ips().collect(),
            });
            continue;
        }
        if !md.fields.iter().any(|f| f.name == "MethodStartAddress") {
            continue;
        }
        let fields = e.decode_payload().unwrap();
        let get = |name: &str| fields.iter().find(|(n, _)| *n == name).map(|(_, v)| v);
        let (Some(start), Some(size), Some(Value::String(name))) = (
            get("MethodStartAddress").and_then(Value::as_u64),
            get("MethodSize").and_then(Value::as_u64),
            get("MethodName"),
        ) else {
            continue;
        };
        let full = match get("MethodNamespace") {
            Some(Value::String(ns)) if !ns.is_empty() => format!("{ns}.{name}"),
            _ => name.to_string(),
        };
        methods.insert(start, (start + size, full));
    }
    Raw {
        samples,
        methods,
        ticks_per_second,
    }
}

impl Raw {
    /// The method containing `ip` (a return address when not the leaf: look up `ip - 1`).
    fn method(&self, ip: u64, is_return: bool) -> Option<&str> {
        let probe = if is_return { ip - 1 } else { ip };
        let (_, (end, name)) = self.methods.range(..=probe).next_back()?;
        (probe < *end).then_some(name.as_str())
    }

    /// Each sample's weight in milliseconds, by the definition: time to the thread's next
    /// sample, 0 for its last.
    fn weights_ms(&self) -> Vec<f64> {
        let mut by_thread: HashMap<u64, Vec<usize>> = HashMap::new();
        for (i, s) in self.samples.iter().enumerate() {
            by_thread.entry(s.thread).or_default().push(i);
        }
        let mut w = vec![0.0; self.samples.len()];
        for indices in by_thread.values_mut() {
            indices.sort_by_key(|&i| self.samples[i].ticks);
            for pair in indices.windows(2) {
                let dt = self.samples[pair[1]].ticks - self.samples[pair[0]].ticks;
                w[pair[0]] = dt as f64 * 1000.0 / self.ticks_per_second;
            }
        }
        w
    }
}

fn profile_of(bytes: &[u8], selection: SampleSelection) -> Profile {
    let mut reader = TraceReader::from_slice(bytes).unwrap();
    build_profile(&mut reader, selection).unwrap().profile
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn assert_within_1pct(what: &str, got: f64, expected: f64) {
    assert!(
        (got - expected).abs() <= 0.01 * expected.abs().max(1e-9),
        "{what}: {got:.3} ms, TraceEvent's algorithm gives {expected:.3} ms"
    );
}

/// Per-thread totals of a profile, in ms, by OS thread id.
fn per_thread_ms(p: &Profile) -> BTreeMap<u64, f64> {
    let mut out = BTreeMap::new();
    for s in &p.samples {
        *out.entry(p.threads[s.thread].id).or_insert(0.0) += ms(s.weight);
    }
    out
}

fn read(name: &str) -> Option<Vec<u8>> {
    let dir = common::shared_traces(name)?;
    Some(std::fs::read(dir.join(name)).unwrap())
}

#[test]
fn only_managed_samples_weigh_the_time_between_samples_as_traceevent_does() {
    let Some(bytes) = read("only_managed_samples.nettrace") else {
        return;
    };
    let raw = read_raw(&bytes);
    let expected = raw.weights_ms();
    // One thread, 7,423 samples, all managed (`eptrace dump` of the trace: the first at
    // 0.446 ms, the last at 10,423.080 ms from the trace's start).
    assert_eq!(raw.samples.len(), 7423);
    assert!(raw.samples.iter().all(|s| !s.external));
    let total: f64 = expected.iter().sum();
    let first = raw.samples.iter().map(|s| s.ticks).min().unwrap();
    let last = raw.samples.iter().map(|s| s.ticks).max().unwrap();
    let span = (last - first) as f64 * 1000.0 / raw.ticks_per_second;
    assert!(
        (total - span).abs() < 1e-6,
        "a thread's total is first to last"
    );
    assert!((10_420.0..10_425.0).contains(&total), "{total}");

    let p = profile_of(&bytes, SampleSelection::Auto);
    assert_eq!(
        p.unit,
        SampleUnit::ThreadTime,
        "the default view is thread time"
    );
    assert_eq!(p.samples.len(), 7423, "every capture is a sample");
    // Total: about 10.4 s, not 7,423 × 1 ms.
    assert_within_1pct("total thread time", ms(p.total_weight()), total);

    // Per thread.
    let mut expected_threads: BTreeMap<u64, f64> = BTreeMap::new();
    for (s, w) in raw.samples.iter().zip(&expected) {
        *expected_threads.entry(s.thread).or_insert(0.0) += w;
    }
    let got_threads = per_thread_ms(&p);
    assert_eq!(
        got_threads.keys().collect::<Vec<_>>(),
        expected_threads.keys().collect::<Vec<_>>()
    );
    for (tid, want) in &expected_threads {
        assert_within_1pct(&format!("thread {tid}"), got_threads[tid], *want);
    }

    // Per frame: self time (the method at the leaf) and total time (the method anywhere on
    // the stack, once per sample), with methods looked up in the rundown here.
    let mut want_self: HashMap<String, f64> = HashMap::new();
    let mut want_total: HashMap<String, f64> = HashMap::new();
    for (s, w) in raw.samples.iter().zip(&expected) {
        let names: Vec<&str> = s
            .ips
            .iter()
            .enumerate()
            .map(|(i, &ip)| {
                raw.method(ip, i > 0)
                    .expect("every managed frame has a method")
            })
            .collect();
        *want_self.entry(names[0].to_owned()).or_insert(0.0) += w;
        let mut once = names.clone();
        once.sort_unstable();
        once.dedup();
        for n in once {
            *want_total.entry(n.to_owned()).or_insert(0.0) += w;
        }
    }
    let rows = p.weight_by_function();
    assert_eq!(rows.len(), want_total.len(), "one row per method");
    for (frame, self_w, total_w) in rows {
        let name = &p.frames[frame].function;
        assert_within_1pct(
            &format!("{name} self"),
            ms(self_w),
            want_self.get(name).copied().unwrap_or(0.0),
        );
        assert_within_1pct(&format!("{name} total"), ms(total_w), want_total[name]);
    }
}

#[test]
fn external_samples_are_thread_time_outside_managed_code_and_the_managed_view_leaves_them_out() {
    let Some(bytes) = read("eventpipe-dotnetcore3.0-win-x64-objver4.nettrace") else {
        return;
    };
    let raw = read_raw(&bytes);
    let expected = raw.weights_ms();
    // This trace's threads mostly wait: 35,159 external samples, 2 managed, on 13 threads
    // (counted from the raw events), spaced far more than 1 ms apart.
    let external: Vec<bool> = raw.samples.iter().map(|s| s.external).collect();
    assert_eq!(external.iter().filter(|&&e| e).count(), 35_159);
    assert_eq!(external.iter().filter(|&&e| !e).count(), 2);
    let total: f64 = expected.iter().sum();
    let managed: f64 = expected
        .iter()
        .zip(&external)
        .filter(|(_, &e)| !e)
        .map(|(w, _)| w)
        .sum();
    assert!(
        total > 2.0 * raw.samples.len() as f64,
        "on average more than 2 ms apart: 1 ms each would misstate it"
    );

    let p = profile_of(&bytes, SampleSelection::ThreadTime);
    assert_eq!(p.unit, SampleUnit::ThreadTime);
    assert_within_1pct("thread time", ms(p.total_weight()), total);
    let mut expected_threads: BTreeMap<u64, f64> = BTreeMap::new();
    for (s, w) in raw.samples.iter().zip(&expected) {
        *expected_threads.entry(s.thread).or_insert(0.0) += w;
    }
    let got = per_thread_ms(&p);
    for (tid, want) in &expected_threads {
        if *want > 0.0 {
            assert_within_1pct(&format!("thread {tid}"), got[tid], *want);
        }
    }
    // External samples end in the frame that says so, and only they do.
    let outside: u64 = p
        .samples
        .iter()
        .filter(|s| {
            let leaf = *p.stacks[s.stack].last().unwrap();
            p.frames[leaf].function == EXTERNAL_CODE_FRAME
        })
        .map(|s| s.weight)
        .sum();
    assert_within_1pct("time outside managed code", ms(outside), total - managed);

    // The managed view: the managed samples only, still weighed by the time to the next
    // sample of any kind.
    let m = profile_of(&bytes, SampleSelection::ManagedCode);
    assert_eq!(m.samples.len(), 2);
    assert_within_1pct("managed time", ms(m.total_weight()), managed);
    assert!(m.samples.iter().all(|s| !m.stacks[s.stack]
        .iter()
        .any(|&f| m.frames[f].function == EXTERNAL_CODE_FRAME)));

    // `cpu` on a .NET trace is not CPU time: it says it is thread time.
    let c = profile_of(&bytes, SampleSelection::Cpu);
    assert_eq!(c.unit, SampleUnit::ThreadTime);
}
