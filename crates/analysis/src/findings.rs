//! Findings: what an analysis says is wrong, each by a documented rule with a threshold,
//! ranked by how far past its threshold the trace is. A healthy trace has none. The rules
//! are [`RULES`]; the guide's table (`docs/analyze.md`) states the same rules.

use serde::Serialize;

use crate::Analysis;

/// One rule: what it looks at and when it fires.
#[derive(Debug, Clone, Copy, Serialize)]
#[non_exhaustive]
pub struct Rule {
    /// Its id, e.g. `gc-pause-time`.
    pub id: &'static str,
    /// When it fires, in words.
    pub when: &'static str,
    /// The threshold, in the rule's unit.
    pub threshold: f64,
}

/// GC pauses take this share of the trace's time, or more (percent).
pub const GC_PAUSE_PERCENT: f64 = 10.0;
/// A thread waits on locks for this share of the trace's time, or more (percent).
pub const CONTENTION_PERCENT: f64 = 5.0;
/// Exceptions thrown per second, or more.
pub const EXCEPTIONS_PER_SECOND: f64 = 100.0;

/// Every rule, in the order the guide lists them.
pub const RULES: &[Rule] = &[
    Rule {
        id: "gc-pause-time",
        when: "GC pauses take 10 % of the trace's time or more",
        threshold: GC_PAUSE_PERCENT,
    },
    Rule {
        id: "gc-blocking-gen2",
        when: "any blocking (not background) gen2 GC",
        threshold: 1.0,
    },
    Rule {
        id: "gc-induced",
        when: "any GC the program induced (GC.Collect)",
        threshold: 1.0,
    },
    Rule {
        id: "threadpool-starvation",
        when: "any thread pool adjustment for starvation",
        threshold: 1.0,
    },
    Rule {
        id: "lock-contention",
        when: "a thread waits on locks for 5 % of the trace's time or more",
        threshold: CONTENTION_PERCENT,
    },
    Rule {
        id: "exception-rate",
        when: "100 exceptions a second or more",
        threshold: EXCEPTIONS_PER_SECOND,
    },
    Rule {
        id: "async-long-poll",
        when: "any poll an executor ran for 10 ms or more (--long-poll sets the 10)",
        threshold: crate::async_polls::LONG_POLL_MS,
    },
];

/// One finding.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Finding {
    /// The rule that fired ([`RULES`]).
    pub rule: &'static str,
    /// What is wrong, with its evidence in numbers.
    pub summary: String,
    /// The command that shows the detail.
    pub detail: String,
    /// How far past the threshold: the measure divided by the threshold (ranks findings).
    pub severity: f64,
}

/// The findings of `analysis`, most severe first.
pub(crate) fn find(analysis: &Analysis) -> Vec<Finding> {
    let file = &analysis.file;
    let mut found = Vec::new();
    let mut add =
        |rule: &'static str, measure: f64, threshold: f64, summary: String, flag: &str| {
            if measure >= threshold {
                found.push(Finding {
                    rule,
                    summary,
                    detail: format!("eptrace analyze --{flag} {file}"),
                    severity: measure / threshold,
                });
            }
        };
    if let Some(gc) = &analysis.gc {
        let count = |g: usize| gc.generations.get(g).map_or(0, |s| s.count);
        add(
            "gc-pause-time",
            gc.paused_percent_of_trace,
            GC_PAUSE_PERCENT,
            format!(
                "GC paused the program {:.1} % of the time: {} gen0, {} gen1, {} gen2 ({} blocking); longest pause {:.1} ms",
                gc.paused_percent_of_trace,
                count(0),
                count(1),
                count(2),
                gc.blocking_gen2,
                gc.pauses.max
            ),
            "gc",
        );
        let gen2_pause: f64 = gc
            .gcs
            .iter()
            .filter(|g| g.generation == 2 && g.is_blocking())
            .filter_map(|g| g.pause_ms)
            .fold(0.0, |a, b| a + b);
        add(
            "gc-blocking-gen2",
            gc.blocking_gen2 as f64,
            1.0,
            format!(
                "{} blocking gen2 GC{} ({} induced), {:.1} ms paused in them",
                gc.blocking_gen2,
                plural(gc.blocking_gen2),
                gc.gcs
                    .iter()
                    .filter(|g| g.generation == 2 && g.is_blocking() && g.is_induced())
                    .count(),
                gen2_pause
            ),
            "gc",
        );
        add(
            "gc-induced",
            gc.induced as f64,
            1.0,
            format!(
                "{} GC{} induced by the program (GC.Collect)",
                gc.induced,
                plural(gc.induced)
            ),
            "gc",
        );
    }
    if let Some(pool) = &analysis.threadpool {
        let spans: Vec<String> = pool
            .starvation_spans
            .iter()
            .map(|&(from, to)| {
                if to > from {
                    format!("{from:.0}-{to:.0} ms")
                } else {
                    format!("{from:.0} ms")
                }
            })
            .collect();
        add(
            "threadpool-starvation",
            pool.starvation_adjustments as f64,
            1.0,
            format!(
                "the thread pool was starved: {} worker{} added for starvation, at {}",
                pool.starvation_adjustments,
                plural(pool.starvation_adjustments),
                spans.join(", ")
            ),
            "threadpool",
        );
    }
    if let Some(contention) = &analysis.contention {
        if let Some(worst) = contention.threads.first() {
            add(
                "lock-contention",
                worst.percent_of_time,
                CONTENTION_PERCENT,
                format!(
                    "thread {} waited on locks {:.1} % of the time ({} waits, {:.1} ms); {} contentions in all",
                    worst.thread_id, worst.percent_of_time, worst.count, worst.wait_ms, contention.count
                ),
                "contention",
            );
        }
    }
    if let Some(exceptions) = &analysis.exceptions {
        let top = exceptions
            .by_type
            .first()
            .map(|r| format!("; most: {} ({})", r.exception_type, r.count))
            .unwrap_or_default();
        add(
            "exception-rate",
            exceptions.per_second,
            EXCEPTIONS_PER_SECOND,
            format!(
                "{:.0} exceptions a second ({} thrown){top}",
                exceptions.per_second, exceptions.thrown
            ),
            "exceptions",
        );
    }
    if let Some(polls) = &analysis.async_polls {
        let worst = polls
            .longest
            .first()
            .map(|p| {
                format!(
                    "; the slowest future in them: {} ({:.1} ms)",
                    p.future, p.ms
                )
            })
            .unwrap_or_default();
        // Severity: how far past the threshold the longest poll ran.
        if polls.long_polls > 0 {
            found.push(Finding {
                rule: "async-long-poll",
                summary: format!(
                    "{} poll{} blocked an executor thread for {:.0} ms or more (longest \
                     {:.1} ms){worst}",
                    polls.long_polls,
                    plural(polls.long_polls),
                    polls.threshold_ms,
                    polls.longest_poll_ms
                ),
                detail: format!("eptrace analyze --async {file}"),
                severity: polls.longest_poll_ms / polls.threshold_ms.max(f64::MIN_POSITIVE),
            });
        }
    }
    found.sort_by(|a, b| b.severity.total_cmp(&a.severity));
    found
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
