//! tokio's task hooks as async-profiler records (needs `--cfg tokio_unstable` and the `tokio`
//! feature; `.ci/run` builds it so): every task is a root context named by its spawn
//! location, and instrumented futures inside it get it at the root of their callstacks.
#![cfg(all(tokio_unstable, feature = "tokio"))]

mod common;

use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use eventpipe_insight::async_trace::ContextEnd;
use eventpipe_profiler::futures::{self, profiled, tokio_hooks};

#[profiled]
async fn inner_step() {
    tokio::task::yield_now().await;
}

#[test]
fn tasks_are_root_contexts_with_their_futures_inside() {
    futures::register();
    let path =
        std::env::temp_dir().join(format!("async-tokio-hooks-{}.nettrace", std::process::id()));
    let session = Session::start(SessionConfig::new(
        vec![ProviderConfig::parse("EventPipeRs-AsyncProfiler:0:5").unwrap()],
        Output::File(path.clone()),
    ))
    .unwrap();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(2);
    let rt = tokio_hooks::install(&mut builder).build().unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                tokio::spawn(async {
                    for _ in 0..4 {
                        inner_step().await;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    drop(rt);
    session.stop().unwrap();
    let trace = common::read_clean_async_file(&path);
    let tasks: Vec<_> = trace
        .contexts
        .values()
        .filter(|c| c.frame.is_some_and(|f| trace.frame_name(f) == "tokio task"))
        .collect();
    assert_eq!(tasks.len(), 50);
    assert!(tasks
        .iter()
        .all(|c| matches!(c.end, ContextEnd::Complete(_))));
    // Spawn location: this file.
    let frame = &trace.frames[&tasks[0].frame.unwrap()];
    assert!(frame
        .file
        .as_deref()
        .is_some_and(|f| f.ends_with("tokio_hooks.rs")));
    let inner: Vec<_> = trace
        .spans
        .iter()
        .filter(|s| trace.frame_name(s.frame).ends_with("::inner_step"))
        .collect();
    assert_eq!(inner.len(), 50 * 4 * 2);
    for s in inner {
        let stack = trace.callstack(s.stack);
        assert_eq!(stack.len(), 2);
        assert_eq!(trace.frame_name(stack[0]), "tokio task");
        let parent = trace.contexts[&s.ctx].parent.expect("a parent");
        assert!(tasks.iter().any(|t| t.id == parent));
    }
}
