//! Collection rules: which processes each applies to, when its trigger holds, and whether
//! its limit lets it act. The agent feeds it every counter value and every process it
//! finds; what comes back is the rules to act on, already counted against their limits.
//!
//! A counter trigger holds once every value of the counter for `for_seconds` (by the
//! target's own timestamps) was past the threshold; a value on the other side starts the
//! wait again, and so does a firing, so a condition that persists fires again only after
//! another full `for_seconds` (and only if the limit allows).
//!
//! The triggers on a .NET runtime's events hear its news as the counters session reads it
//! ([`RuntimeNews`]): a GC pause trigger holds for each complete GC paused longer than its
//! threshold; an exceptions trigger once `per_second` × `for_seconds` exceptions (rounded
//! up) were thrown within `for_seconds` (again by the target's timestamps; a firing empties
//! the window); a starvation trigger at each starvation adjustment.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use eventpipe_client::capture::counters::RuntimeNews;
use eventpipe_counters::CounterValue;

use super::processes::Process;
use super::settings::{Rule, Trigger};

/// A rule that fired, and why.
#[derive(Debug, Clone)]
pub(crate) struct Firing {
    pub(crate) rule: usize,
    pub(crate) why: String,
}

#[derive(Debug, Default)]
struct State {
    /// (rule, pid) → the time of the first value of the current run past the threshold.
    since: HashMap<(usize, u32), SystemTime>,
    /// (rule, pid) → when it acted, within the window.
    acted: HashMap<(usize, u32), VecDeque<Instant>>,
    /// (rule, pid) → the times of the exceptions within an exceptions trigger's window.
    thrown: HashMap<(usize, u32), VecDeque<SystemTime>>,
    fired: Vec<u64>,
    suppressed: Vec<u64>,
}

/// The configured rules and their state.
#[derive(Debug)]
pub(crate) struct Rules {
    rules: Vec<Rule>,
    state: Mutex<State>,
}

impl Rules {
    pub(crate) fn new(rules: Vec<Rule>) -> Rules {
        let n = rules.len();
        Rules {
            rules,
            state: Mutex::new(State {
                fired: vec![0; n],
                suppressed: vec![0; n],
                ..State::default()
            }),
        }
    }

    pub(crate) fn get(&self, index: usize) -> &Rule {
        &self.rules[index]
    }

    pub(crate) fn names(&self) -> Vec<String> {
        self.rules.iter().map(|r| r.name.clone()).collect()
    }

    /// Per rule: (name, times acted, times the limit held it back).
    pub(crate) fn counts(&self) -> Vec<(String, u64, u64)> {
        let state = self.lock();
        self.rules
            .iter()
            .enumerate()
            .map(|(i, r)| (r.name.clone(), state.fired[i], state.suppressed[i]))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Each update is a few whole assignments; a poisoned state is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The counter providers the rules watch in `process`, for its counters session.
    pub(crate) fn providers_for(&self, process: &Process) -> Vec<String> {
        self.rules
            .iter()
            .filter(|r| applies(r, process))
            .filter_map(|r| match &r.trigger {
                Trigger::Counter { provider, .. } => Some(provider.clone()),
                _ => None,
            })
            .collect()
    }

    /// Whether a rule for `process` reads its runtime's events.
    pub(crate) fn read_runtime_events(&self, process: &Process) -> bool {
        self.rules
            .iter()
            .any(|r| r.trigger.reads_runtime_events() && applies(r, process))
    }

    /// News from `process`'s runtime, of its event at `at`: the rules that act.
    pub(crate) fn on_runtime(
        &self,
        process: &Process,
        news: &RuntimeNews,
        at: SystemTime,
    ) -> Vec<Firing> {
        self.acting(process, |state, i, rule| match (&rule.trigger, news) {
            (
                Trigger::GcPause {
                    above_ms,
                    generation,
                },
                RuntimeNews::Gc(gc),
            ) => match gc.pause_ms {
                Some(pause)
                    if pause > *above_ms && generation.is_none_or(|g| g == gc.generation) =>
                {
                    Some(format!(
                        "GC {} (gen{} {}, {}) paused the program {pause:.1} ms, above \
                         {above_ms} ms",
                        gc.number, gc.generation, gc.kind, gc.reason
                    ))
                }
                _ => None,
            },
            (
                Trigger::Exceptions {
                    per_second,
                    for_seconds,
                    exception_type,
                },
                RuntimeNews::Exception {
                    exception_type: thrown,
                },
            ) => {
                if exception_type.as_ref().is_some_and(|t| t != thrown) {
                    return None;
                }
                let needed = exceptions_needed(*per_second, *for_seconds);
                let window = Duration::from_secs_f64(*for_seconds);
                let times = state.thrown.entry((i, process.pid)).or_default();
                times.push_back(at);
                while times
                    .front()
                    .is_some_and(|t| at.duration_since(*t).unwrap_or_default() >= window)
                {
                    times.pop_front();
                }
                if (times.len() as u64) < needed {
                    return None;
                }
                let first = times.front().copied().unwrap_or(at);
                times.clear();
                let what = exception_type.as_deref().unwrap_or("exceptions");
                Some(format!(
                    "{needed} {what} thrown within {:.1} s (at least {per_second}/s over \
                         {for_seconds} s)",
                    at.duration_since(first).unwrap_or_default().as_secs_f64()
                ))
            }
            (Trigger::ThreadPoolStarvation, RuntimeNews::Starvation { new_worker_count }) => {
                Some(format!(
                    "the thread pool added a worker for starvation ({new_worker_count} \
                         workers now)"
                ))
            }
            _ => None,
        })
    }

    /// The rules that apply to `process` and act: `why` says, for each (with the state
    /// and the rule's index), why it holds now, or `None`; a rule that holds is counted
    /// against its limit.
    fn acting(
        &self,
        process: &Process,
        mut why: impl FnMut(&mut State, usize, &Rule) -> Option<String>,
    ) -> Vec<Firing> {
        let now = Instant::now();
        let mut state = self.lock();
        let mut out = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            if !applies(rule, process) {
                continue;
            }
            let Some(why) = why(&mut state, i, rule) else {
                continue;
            };
            if admit(&mut state, rule, i, process.pid, now) {
                out.push(Firing { rule: i, why });
            }
        }
        out
    }

    /// A process was found: the process-start rules that act.
    pub(crate) fn on_start(&self, process: &Process) -> Vec<Firing> {
        self.acting(process, |_, _, rule| {
            matches!(rule.trigger, Trigger::ProcessStart).then(|| "the process started".to_owned())
        })
    }

    /// A counter value from `process`, published at `at`: the counter rules that act.
    pub(crate) fn on_value(
        &self,
        process: &Process,
        value: &CounterValue,
        at: SystemTime,
    ) -> Vec<Firing> {
        self.acting(process, |state, i, rule| {
            let Trigger::Counter {
                provider,
                counter,
                above,
                below,
                for_seconds,
            } = &rule.trigger
            else {
                return None;
            };
            if !provider.eq_ignore_ascii_case(&value.provider) || *counter != value.name {
                return None;
            }
            let key = (i, process.pid);
            let past =
                above.is_none_or(|a| value.value > a) && below.is_none_or(|b| value.value < b);
            if !past {
                state.since.remove(&key);
                return None;
            }
            let since = *state.since.entry(key).or_insert(at);
            let held = at.duration_since(since).unwrap_or_default();
            if held + Duration::from_millis(1) < Duration::from_secs_f64(*for_seconds) {
                return None;
            }
            state.since.remove(&key);
            let threshold = match (above, below) {
                (Some(a), None) => format!("above {a}"),
                (None, Some(b)) => format!("below {b}"),
                (Some(a), Some(b)) => format!("between {a} and {b}"),
                (None, None) => String::new(),
            };
            Some(format!(
                "{provider}/{counter} was {threshold} for {:.1} s (last value {})",
                held.as_secs_f64(),
                value.value
            ))
        })
    }

    /// Forgets an exited process's trigger state (its limit history goes too: a new
    /// process with the pid is another process).
    pub(crate) fn forget(&self, pid: u32) {
        let mut state = self.lock();
        state.since.retain(|(_, p), _| *p != pid);
        state.acted.retain(|(_, p), _| *p != pid);
        state.thrown.retain(|(_, p), _| *p != pid);
    }
}

/// How many exceptions an exceptions trigger waits for: `per_second` × `for_seconds`,
/// rounded up (at least one).
fn exceptions_needed(per_second: f64, for_seconds: f64) -> u64 {
    // Rounded first, so that 6.6/s over 10 s needs 66, not 67 for 66.00000000000001.
    let exact = (per_second * for_seconds * 1e6).round() / 1e6;
    (exact.ceil() as u64).max(1)
}

/// Whether the rule's filter takes the process.
pub(crate) fn applies(rule: &Rule, process: &Process) -> bool {
    rule.filter.accepts(process)
}

/// Counts a firing against the rule's limit; false: the limit holds it back.
fn admit(state: &mut State, rule: &Rule, index: usize, pid: u32, now: Instant) -> bool {
    let window = rule.limit.window();
    let acted = state.acted.entry((index, pid)).or_default();
    while acted
        .front()
        .is_some_and(|t| now.duration_since(*t) >= window)
    {
        acted.pop_front();
    }
    if acted.len() >= rule.limit.count as usize {
        state.suppressed[index] += 1;
        return false;
    }
    acted.push_back(now);
    state.fired[index] += 1;
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::parse;
    use eventpipe_counters::CounterKind;

    fn process(pid: u32, name: &str) -> Process {
        Process {
            pid,
            name: name.into(),
            command_line: format!("/bin/{name} --serve"),
            runtime: "Rust".into(),
            kind: Some(crate::processes::RuntimeKind::Rust),
            key: 1,
        }
    }

    fn cpu(v: f64) -> CounterValue {
        crate::test_value(
            "EventPipeRs-Runtime",
            "cpu-usage",
            "%",
            CounterKind::Metric,
            v,
        )
    }

    #[test]
    fn a_counter_rule_fires_after_its_duration_and_within_its_limit() {
        let settings = parse(
            r#"
            egress = "/tmp"
            [[rules]]
            name = "cpu"
            filter = { name = "svc", command_line = "--serve" }
            trigger = { kind = "counter", provider = "eventpipers-runtime", counter = "cpu-usage", above = 50, for_seconds = 2 }
            action = { kind = "heap" }
            limit = { count = 2, window_seconds = 3600 }
            "#,
        )
        .unwrap();
        let rules = Rules::new(settings.rules);
        let svc = process(1, "svc");
        let other = process(2, "other");
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let at = |s: u64| t0 + Duration::from_secs(s);
        // 0 s, 1 s above; 2 s below: the wait starts again.
        assert!(rules.on_value(&svc, &cpu(60.0), at(0)).is_empty());
        assert!(rules.on_value(&svc, &cpu(60.0), at(1)).is_empty());
        assert!(rules.on_value(&svc, &cpu(40.0), at(2)).is_empty());
        assert!(rules.on_value(&svc, &cpu(60.0), at(3)).is_empty());
        assert!(rules.on_value(&svc, &cpu(60.0), at(4)).is_empty());
        let fired = rules.on_value(&svc, &cpu(70.0), at(5));
        assert_eq!(fired.len(), 1, "{fired:?}");
        assert!(
            fired[0].why.contains("above 50 for 2.0 s"),
            "{}",
            fired[0].why
        );
        // The other process is filtered out, whatever its values.
        for s in 0..10 {
            assert!(rules.on_value(&other, &cpu(99.0), at(s)).is_empty());
        }
        // Still above: another full 2 s, then the second (last) firing of the limit.
        assert!(rules.on_value(&svc, &cpu(70.0), at(6)).is_empty());
        assert!(rules.on_value(&svc, &cpu(70.0), at(7)).is_empty());
        assert_eq!(rules.on_value(&svc, &cpu(70.0), at(8)).len(), 1);
        for s in 9..30 {
            assert!(rules.on_value(&svc, &cpu(70.0), at(s)).is_empty());
        }
        let counts = rules.counts();
        assert_eq!(counts[0].1, 2);
        assert!(counts[0].2 >= 6, "{counts:?}");
        // A new process with the same pid starts with a fresh limit.
        rules.forget(1);
        assert!(rules.on_value(&svc, &cpu(70.0), at(100)).is_empty());
        assert_eq!(rules.on_value(&svc, &cpu(70.0), at(102)).len(), 1);
    }

    #[test]
    fn a_start_rule_fires_once_per_process_within_its_limit() {
        let settings = parse(
            r#"
            egress = "/tmp"
            [[rules]]
            name = "start"
            filter = { runtime = "rust" }
            trigger = { kind = "process-start" }
            action = { kind = "trace", duration_seconds = 1 }
            "#,
        )
        .unwrap();
        let rules = Rules::new(settings.rules);
        assert_eq!(rules.on_start(&process(1, "a")).len(), 1);
        assert_eq!(rules.on_start(&process(1, "a")).len(), 0);
        assert_eq!(rules.on_start(&process(2, "b")).len(), 1);
        let mut dotnet = process(3, "c");
        dotnet.kind = Some(crate::processes::RuntimeKind::Dotnet);
        assert!(rules.on_start(&dotnet).is_empty());
    }

    fn dotnet(pid: u32) -> Process {
        let mut p = process(pid, "api");
        p.runtime = ".NET 8.0".into();
        p.kind = Some(crate::processes::RuntimeKind::Dotnet);
        p
    }

    fn gc(number: u64, generation: u32, pause_ms: f64) -> RuntimeNews {
        RuntimeNews::Gc(eventpipe_client::capture::counters::CompletedGc {
            number,
            generation,
            kind: "NonConcurrent",
            reason: "AllocSmall",
            pause_ms: Some(pause_ms),
            restart_ms: None,
            heap_after_bytes: Some(1 << 20),
        })
    }

    fn thrown(kind: &str) -> RuntimeNews {
        RuntimeNews::Exception {
            exception_type: kind.into(),
        }
    }

    fn runtime_rules(triggers: &[&str]) -> Rules {
        let mut text = String::from("egress = \"/tmp\"\n");
        for (i, trigger) in triggers.iter().enumerate() {
            text.push_str(&format!(
                "[[rules]]\nname = \"r{i}\"\ntrigger = {trigger}\naction = {{ kind = \"gcdump\" }}\n\
                 limit = {{ count = 100, window_seconds = 3600 }}\n"
            ));
        }
        Rules::new(parse(&text).unwrap().rules)
    }

    #[test]
    fn a_gc_pause_trigger_fires_above_its_threshold_for_its_generation() {
        let rules = runtime_rules(&[
            r#"{ kind = "gc-pause", above_ms = 10 }"#,
            r#"{ kind = "gc-pause", above_ms = 10, generation = 2 }"#,
        ]);
        let api = dotnet(7);
        let t = SystemTime::UNIX_EPOCH;
        // At the threshold: no firing; just above it: the any-generation rule only.
        assert!(rules.on_runtime(&api, &gc(1, 0, 10.0), t).is_empty());
        let fired = rules.on_runtime(&api, &gc(2, 0, 10.001), t);
        assert_eq!(fired.iter().map(|f| f.rule).collect::<Vec<_>>(), [0]);
        assert!(
            fired[0]
                .why
                .contains("GC 2 (gen0 NonConcurrent, AllocSmall)"),
            "{}",
            fired[0].why
        );
        // A long gen2: both.
        assert_eq!(rules.on_runtime(&api, &gc(3, 2, 48.0), t).len(), 2);
        // A Rust program's news would never come; other news is not a GC.
        assert!(rules.on_runtime(&api, &thrown("E"), t).is_empty());
        assert!(rules.read_runtime_events(&api));
    }

    #[test]
    fn an_exceptions_trigger_fires_at_its_count_within_its_window() {
        // 6.6/s over 10 s: 66 exceptions within 10 s.
        let rules = runtime_rules(&[
            r#"{ kind = "exceptions", per_second = 6.6, for_seconds = 10 }"#,
            r#"{ kind = "exceptions", per_second = 0.2, exception_type = "System.TimeoutException" }"#,
        ]);
        let api = dotnet(7);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let ms = |n: u64| t0 + Duration::from_millis(n);
        // 65 in the first 6.5 s: not yet.
        for n in 0..65 {
            assert!(rules.on_runtime(&api, &thrown("E"), ms(n * 100)).is_empty());
        }
        // The 66th, 6.5 s after the first: fires, and empties the window.
        let fired = rules.on_runtime(&api, &thrown("E"), ms(6500));
        assert_eq!(fired.len(), 1);
        assert!(
            fired[0]
                .why
                .starts_with("66 exceptions thrown within 6.5 s"),
            "{}",
            fired[0].why
        );
        // 65 more, spread so that the window never holds 66 (the first ones leave it).
        for n in 0..200 {
            assert!(rules
                .on_runtime(&api, &thrown("E"), ms(7000 + n * 160))
                .is_empty());
        }
        // The typed rule: 2 TimeoutExceptions within 10 s (0.2/s), others not counted.
        let typed = |at| {
            rules
                .on_runtime(&api, &thrown("System.TimeoutException"), at)
                .into_iter()
                .filter(|f| f.rule == 1)
                .count()
        };
        assert_eq!(typed(ms(60_000)), 0);
        assert_eq!(
            typed(ms(70_000)),
            0,
            "10 s apart: the first left the window"
        );
        assert_eq!(typed(ms(79_999)), 1);
    }

    #[test]
    fn a_starvation_trigger_fires_at_each_adjustment_within_its_limit() {
        let settings = parse(
            r#"
            egress = "/tmp"
            [[rules]]
            name = "starved"
            trigger = { kind = "thread-pool-starvation" }
            action = { kind = "trace", duration_seconds = 5, profile = "cpu-sampling" }
            limit = { count = 1, window_seconds = 3600 }
            "#,
        )
        .unwrap();
        let rules = Rules::new(settings.rules);
        let api = dotnet(7);
        let starved = RuntimeNews::Starvation {
            new_worker_count: 9,
        };
        let fired = rules.on_runtime(&api, &starved, SystemTime::UNIX_EPOCH);
        assert_eq!(fired.len(), 1);
        assert!(fired[0].why.contains("9 workers"), "{}", fired[0].why);
        assert!(rules
            .on_runtime(&api, &starved, SystemTime::UNIX_EPOCH)
            .is_empty());
        assert_eq!(rules.counts()[0], ("starved".to_owned(), 1, 1));
    }
}
