//! Collection rules: which processes each applies to, when its trigger holds, and whether
//! its limit lets it act. The agent feeds it every counter value and every process it
//! finds; what comes back is the rules to act on, already counted against their limits.
//!
//! A counter trigger holds once every value of the counter for `for_seconds` (by the
//! target's own timestamps) was past the threshold; a value on the other side starts the
//! wait again, and so does a firing, so a condition that persists fires again only after
//! another full `for_seconds` (and only if the limit allows).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

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
                Trigger::ProcessStart => None,
            })
            .collect()
    }

    /// A process was found: the process-start rules that act.
    pub(crate) fn on_start(&self, process: &Process) -> Vec<Firing> {
        let now = Instant::now();
        let mut state = self.lock();
        let mut out = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            if matches!(rule.trigger, Trigger::ProcessStart)
                && applies(rule, process)
                && admit(&mut state, rule, i, process.pid, now)
            {
                out.push(Firing {
                    rule: i,
                    why: "the process started".to_owned(),
                });
            }
        }
        out
    }

    /// A counter value from `process`, published at `at`: the counter rules that act.
    pub(crate) fn on_value(
        &self,
        process: &Process,
        value: &CounterValue,
        at: SystemTime,
    ) -> Vec<Firing> {
        let now = Instant::now();
        let mut state = self.lock();
        let mut out = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            let Trigger::Counter {
                provider,
                counter,
                above,
                below,
                for_seconds,
            } = &rule.trigger
            else {
                continue;
            };
            if !provider.eq_ignore_ascii_case(&value.provider)
                || *counter != value.name
                || !applies(rule, process)
            {
                continue;
            }
            let key = (i, process.pid);
            let past =
                above.is_none_or(|a| value.value > a) && below.is_none_or(|b| value.value < b);
            if !past {
                state.since.remove(&key);
                continue;
            }
            let since = *state.since.entry(key).or_insert(at);
            let held = at.duration_since(since).unwrap_or_default();
            if held + Duration::from_millis(1) < Duration::from_secs_f64(*for_seconds) {
                continue;
            }
            state.since.remove(&key);
            if admit(&mut state, rule, i, process.pid, now) {
                let threshold = match (above, below) {
                    (Some(a), None) => format!("above {a}"),
                    (None, Some(b)) => format!("below {b}"),
                    (Some(a), Some(b)) => format!("between {a} and {b}"),
                    (None, None) => String::new(),
                };
                out.push(Firing {
                    rule: i,
                    why: format!(
                        "{provider}/{counter} was {threshold} for {:.1} s (last value {})",
                        held.as_secs_f64(),
                        value.value
                    ),
                });
            }
        }
        out
    }

    /// Forgets an exited process's trigger state (its limit history goes too: a new
    /// process with the pid is another process).
    pub(crate) fn forget(&self, pid: u32) {
        let mut state = self.lock();
        state.since.retain(|(_, p), _| *p != pid);
        state.acted.retain(|(_, p), _| *p != pid);
    }
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
}
