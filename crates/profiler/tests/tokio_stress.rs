//! The async profiler under a multi-threaded tokio runtime: many tasks with nested
//! instrumented futures, cancellations and work stealing; the trace must account for every
//! one of them, with whole callstacks.

use std::collections::HashSet;

mod common;

use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use eventpipe_insight::async_trace::{ContextEnd, SpanEnd};
use eventpipe_profiler::futures::{self, profiled, FutureExt};

const TASKS: usize = 200;
const STEPS: usize = 20;

#[profiled]
async fn step(i: usize) -> usize {
    tokio::task::yield_now().await;
    if i % 5 == 0 {
        // The instrumented branch loses the race: created, never polled, dropped.
        tokio::select! {
            biased;
            _ = std::future::ready(()) => {}
            _ = std::future::pending::<()>().profiled("loser") => {}
        }
    }
    i
}

#[test]
fn every_task_and_future_of_a_multi_threaded_runtime_is_accounted_for() {
    futures::register();
    let path = std::env::temp_dir().join(format!(
        "async-tokio-stress-{}.nettrace",
        std::process::id()
    ));
    let session = Session::start(SessionConfig::new(
        vec![ProviderConfig::parse("EventPipeRs-AsyncProfiler:0:5").unwrap()],
        Output::File(path.clone()),
    ))
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let total: usize = rt.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                tokio::spawn(
                    async {
                        let mut sum = 0;
                        for i in 0..STEPS {
                            sum += step(i).await;
                        }
                        sum
                    }
                    .profiled("task"),
                )
            })
            .collect();
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        total
    });
    assert_eq!(total, TASKS * (0..STEPS).sum::<usize>());
    drop(rt);
    let stats = session.stop().unwrap();
    assert_eq!(stats.events_dropped, 0);

    let trace = common::read_clean_async_file(&path);
    let count = |suffix: &str, end: fn(&ContextEnd) -> bool| {
        common::contexts_named(&trace, suffix)
            .into_iter()
            .filter(|c| end(&c.end))
            .count()
    };
    let completed = |e: &ContextEnd| matches!(e, ContextEnd::Complete(_));
    let dropped = |e: &ContextEnd| matches!(e, ContextEnd::Drop(_));
    assert_eq!(count("task", completed), TASKS);
    assert_eq!(count("::step", completed), TASKS * STEPS);
    assert_eq!(count("loser", dropped), TASKS * STEPS / 5);
    assert_eq!(count("", |e| matches!(e, ContextEnd::Pending)), 0);
    // Every step poll ran inside its task's poll, whichever worker ran it.
    let mut threads = HashSet::new();
    let mut step_polls = 0;
    for s in &trace.spans {
        if trace.frame_name(s.frame).ends_with("::step") {
            let stack: Vec<_> = trace
                .callstack(s.stack)
                .iter()
                .map(|&f| trace.frame_name(f).into_owned())
                .collect();
            assert_eq!(stack.len(), 2);
            assert_eq!(stack[0], "task");
            assert!(
                matches!(s.ended, SpanEnd::Suspend | SpanEnd::Complete),
                "{s:?}"
            );
            threads.insert(s.thread);
            step_polls += 1;
        }
    }
    // Each step is polled twice (its yield), the test thread polls nothing instrumented.
    assert_eq!(step_polls, TASKS * STEPS * 2);
    assert!(!threads.is_empty() && threads.len() <= 2, "{threads:?}");
}
