//! The async profiler end to end: instrumented futures under a real session, the trace read
//! back by `eventpipe_insight::async_trace`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Waker};
use std::time::Duration;

mod common;

use common::poll::{block_on, yield_once};
use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use eventpipe_insight::async_trace::{AsyncTrace, ContextEnd, SpanEnd};
use eventpipe_profiler::futures::{self, profiled, FutureExt};
use nettrace::TraceReader;

/// The profiler's configuration is process-wide: one test's sessions at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn trace_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "async-profiler-{name}-{}.nettrace",
        std::process::id()
    ))
}

fn start(name: &str, args: &str) -> (Session, std::path::PathBuf) {
    futures::register();
    let path = trace_path(name);
    let spec = format!("EventPipeRs-AsyncProfiler:0:5{args}");
    let session = Session::start(SessionConfig::new(
        vec![ProviderConfig::parse(&spec).unwrap()],
        Output::File(path.clone()),
    ))
    .unwrap();
    (session, path)
}

#[profiled]
async fn leaf(yields: u32) -> u32 {
    for _ in 0..yields {
        yield_once().await;
    }
    7
}

#[profiled]
async fn middle() -> u32 {
    leaf(2).await + leaf(0).await
}

#[profiled(name = "panics inside a poll")]
async fn panics() {
    yield_once().await;
    panic!("deliberate, inside an instrumented poll");
}

fn names(
    trace: &AsyncTrace,
    stack: &[eventpipe_insight::async_trace::AsyncFrameId],
) -> Vec<String> {
    stack
        .iter()
        .map(|&f| {
            let name = trace.frame_name(f).into_owned();
            name.rsplit("::").next().unwrap().to_string()
        })
        .collect()
}

struct Handler;

impl Handler {
    #[profiled]
    async fn run(&self) -> u32 {
        yield_once().await;
        1
    }
}

trait Serve {
    async fn serve(&self) -> u32;
}

impl Serve for Handler {
    #[profiled]
    async fn serve(&self) -> u32 {
        2
    }
}

/// A free fn named as the method is: the two must not share a name.
#[profiled]
async fn run() -> u32 {
    3
}

#[test]
fn methods_are_named_with_their_type_as_the_symbolizer_names_them() {
    let _one = one_at_a_time();
    let (session, path) = start("methods", "");
    let h = Handler;
    let (sum, _) = block_on(async { h.run().await + h.serve().await + run().await });
    assert_eq!(sum, 6);
    session.stop().unwrap();
    let trace = common::read_clean_async_file(&path);
    let names: std::collections::BTreeSet<String> = trace
        .frames
        .keys()
        .map(|&f| trace.frame_name(f).into_owned())
        .collect();
    for expected in [
        "futures::Handler::run",
        "<futures::Handler as futures::Serve>::serve",
        "futures::run",
    ] {
        assert!(names.contains(expected), "{expected} not in {names:?}");
    }
}

#[test]
fn a_known_future_tree_records_its_life_and_callstacks() {
    let _one = one_at_a_time();
    let (session, path) = start("tree", "");
    let root = async {
        let v = middle().await;
        // Polled once, then dropped: cancelled.
        let mut cancelled = Box::pin(
            async {
                yield_once().await;
                yield_once().await;
            }
            .profiled("cancelled"),
        );
        let _ = cancelled
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        drop(cancelled);
        v
    }
    .profiled("root");
    let (value, polls) = block_on(root);
    assert_eq!((value, polls), (14, 3));
    let unwound = std::panic::catch_unwind(|| block_on(panics()));
    assert!(unwound.is_err());
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() } as u64;
    session.stop().unwrap();

    let trace = common::read_clean_async_file(&path);
    let mine: Vec<_> = trace.spans.iter().filter(|s| s.thread == me).collect();
    let by_frame = |name: &str| -> Vec<_> {
        mine.iter()
            .filter(|s| trace.frame_name(s.frame).ends_with(name))
            .collect()
    };
    // root: three polls (two suspensions while the first leaf waits, then done).
    let root_spans = by_frame("root");
    assert_eq!(root_spans.len(), 3);
    assert_eq!(
        root_spans.iter().map(|s| s.ended).collect::<Vec<_>>(),
        [SpanEnd::Suspend, SpanEnd::Suspend, SpanEnd::Complete]
    );
    // The first leaf's polls run inside middle inside root: that is their callstack.
    let leaf_spans = by_frame("::leaf");
    assert_eq!(leaf_spans.len(), 4, "leaf(2): three polls; leaf(0): one");
    for s in &leaf_spans {
        assert_eq!(
            names(&trace, &trace.callstack(s.stack)),
            ["root", "middle", "leaf"]
        );
        assert_eq!(s.depth, 2);
    }
    assert_eq!(
        leaf_spans.iter().map(|s| s.ended).collect::<Vec<_>>(),
        [
            SpanEnd::Suspend,
            SpanEnd::Suspend,
            SpanEnd::Complete,
            SpanEnd::Complete
        ]
    );
    // Spans nest in time: each leaf poll lies within a middle poll.
    let middle_spans = by_frame("::middle");
    assert_eq!(middle_spans.len(), 3);
    for l in &leaf_spans {
        assert!(middle_spans
            .iter()
            .any(|m| m.start <= l.start && l.end <= m.end));
    }

    // Contexts: parents and ends.
    let context_of = |name: &str| common::contexts_named(&trace, name);
    let root_ctx = context_of("root");
    assert_eq!(root_ctx.len(), 1);
    assert!(root_ctx[0].is_root());
    assert!(matches!(root_ctx[0].end, ContextEnd::Complete(_)));
    let middle_ctx = context_of("::middle");
    assert_eq!(middle_ctx[0].parent, Some(root_ctx[0].id));
    let leaves = context_of("::leaf");
    assert_eq!(leaves.len(), 2);
    for l in &leaves {
        assert_eq!(l.parent, Some(middle_ctx[0].id));
        assert!(matches!(l.end, ContextEnd::Complete(_)));
    }
    let cancelled = context_of("cancelled");
    assert_eq!(cancelled.len(), 1);
    assert_eq!(cancelled[0].parent, Some(root_ctx[0].id));
    assert!(matches!(cancelled[0].end, ContextEnd::Drop(_)));
    assert_eq!(cancelled[0].polls, 1);
    let panicked = context_of("panics inside a poll");
    assert_eq!(panicked.len(), 1);
    assert!(matches!(panicked[0].end, ContextEnd::Unwind(_)));
    assert_eq!(panicked[0].polls, 2);
    // The frames carry their source location.
    let leaf_frame = &trace.frames[&leaves[0].frame.unwrap()];
    assert!(leaf_frame
        .file
        .as_deref()
        .is_some_and(|f| f.ends_with("futures.rs")));
    // The clock reference converts record times to wall-clock times near now.
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128;
    let at = trace
        .to_unix_nanos(root_spans[0].start)
        .expect("a clock reference");
    assert!((now_ns - at).abs() < 60_000_000_000, "{at} vs now {now_ns}");
}

#[test]
fn buffers_of_exited_threads_are_flushed_and_reclaimed() {
    let _one = one_at_a_time();
    let (session, path) = start("exited", "");
    let before = futures::registered_thread_buffers();
    let tids: Vec<u64> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                for _ in 0..=i {
                    block_on(leaf(3));
                }
                // SAFETY: gettid has no preconditions.
                unsafe { libc::gettid() as u64 }
            })
            .join()
            .unwrap()
        })
        .collect();
    // Their buffers are not full: only the flusher can emit them, and then forget them.
    let after = futures::flush_idle_now();
    assert!(
        after <= before,
        "{after} thread buffers left, {before} before"
    );
    session.stop().unwrap();
    let trace = common::read_clean_async_file(&path);
    for (i, tid) in tids.iter().enumerate() {
        let completed = trace
            .spans
            .iter()
            .filter(|s| s.thread == *tid && s.ended == SpanEnd::Complete)
            .count();
        assert_eq!(completed, i + 1, "thread {tid}");
    }
}

#[test]
fn a_configuration_change_reaches_every_writer() {
    let _one = one_at_a_time();
    futures::register();
    let stop = Arc::new(AtomicBool::new(false));
    let completed = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let (stop, completed) = (Arc::clone(&stop), Arc::clone(&completed));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // Bursts and pauses: enough to fill small buffers, little enough that
                    // the traces stay quick to read in a debug build.
                    for _ in 0..20 {
                        block_on(middle());
                    }
                    completed.fetch_add(20, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        })
        .collect();
    // Small buffers first; a second session asks for bigger ones while the first runs.
    let (small, small_path) = start("config-small", ":BufferSize=1024");
    std::thread::sleep(Duration::from_millis(150));
    let (big, big_path) = start("config-big", ":BufferSize=8192");
    std::thread::sleep(Duration::from_millis(150));
    small.stop().unwrap();
    std::thread::sleep(Duration::from_millis(150));
    big.stop().unwrap();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    assert!(completed.load(Ordering::Relaxed) > 100);

    let buffer_sizes = |path: &std::path::Path| -> Vec<usize> {
        let bytes = std::fs::read(path).unwrap();
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        let mut sizes = Vec::new();
        while let Some(e) = reader.next_event().unwrap() {
            if e.metadata.event_name == "AsyncBuffer" {
                for (name, value) in e.decode_payload().unwrap() {
                    if name == "Records" {
                        if let nettrace::Value::Bytes(b) = value {
                            sizes.push(b.len());
                        }
                    }
                }
            }
        }
        sizes
    };
    let small_sizes = buffer_sizes(&small_path);
    let big_sizes = buffer_sizes(&big_path);
    assert!(small_sizes.iter().all(|&n| n <= 8192));
    assert!(
        small_sizes.iter().any(|&n| n > 900 && n <= 1024),
        "{small_sizes:?}"
    );
    // Once the bigger size reached the writers, full buffers are bigger than the old size.
    assert!(big_sizes.iter().any(|&n| n > 1024), "{big_sizes:?}");
    for path in [&small_path, &big_path] {
        let trace = common::read_async_file(path);
        let d = &trace.diagnostics;
        assert!(
            d.empty_pops == 0 && d.malformed.is_empty() && d.lost_buffers == 0,
            "{}: {d:?}",
            path.display()
        );
        // Every buffer decodes on its own: polls it saw begin inside a leaf have the
        // whole callstack, from a Stack record if the buffer began mid-poll.
        for s in &trace.spans {
            if trace.frame_name(s.frame).ends_with("::leaf") {
                assert_eq!(names(&trace, &trace.callstack(s.stack)), ["middle", "leaf"]);
            }
        }
    }
}

/// Loom cannot model the asymmetric fence between a buffer's owner and an outside flusher,
/// so race them hard: writers record continuously while another thread flushes every buffer
/// it can get, thousands of times. A record lost, torn or emitted twice breaks the decode
/// (a pop without its push, a gap, a malformed buffer) or the counts.
#[test]
fn outside_flushes_racing_writers_lose_and_tear_nothing() {
    let _one = one_at_a_time();
    let (session, path) = start("race", "");
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    block_on(middle());
                    done += 1;
                    // Pauses keep the trace quick to read in a debug build; the writers
                    // still spend most of their time inside records.
                    if done % 64 == 0 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
                done
            })
        })
        .collect();
    let mut flushes = 0u64;
    let deadline = std::time::Instant::now() + Duration::from_millis(400);
    while std::time::Instant::now() < deadline {
        futures::flush_idle_now();
        flushes += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let done: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    session.stop().unwrap();
    assert!(flushes > 100, "only {flushes} outside flushes");
    let trace = common::read_clean_async_file(&path);
    let completed = |suffix: &str| {
        common::contexts_named(&trace, suffix)
            .into_iter()
            .filter(|c| matches!(c.end, ContextEnd::Complete(_)))
            .count() as u64
    };
    assert_eq!(completed("::middle"), done);
    assert_eq!(completed("::leaf"), 2 * done);
    // Outside flushes did happen mid-stream: more buffers than full ones alone would make.
    assert!(trace.diagnostics.buffers > 3, "{:?}", trace.diagnostics);
}

/// How long a task waited to run after a wake, against what the test measured itself: a
/// task woken (from another thread) while the runtime's only thread is kept busy for a
/// known 30 ms by another task can run only when that ends.
#[test]
fn a_wake_and_the_poll_it_leads_to_give_the_time_a_task_waited_to_run() {
    use std::time::Instant;
    const ROUNDS: usize = 5;
    const BUSY: Duration = Duration::from_millis(30);
    let _one = one_at_a_time();
    let (session, path) = start("wakes", "");
    let notify = Arc::new(tokio::sync::Notify::new());
    // Rounds counted, not flags: the blocker's round in which it keeps the thread, and the
    // round the waking thread released. With a flag for "busy", the blocker could end one
    // round and start the next while the waking thread slept in `yield_now`, which then
    // waited for a "not busy" it had missed while the blocker waited for a release.
    let busy_round = Arc::new(AtomicUsize::new(0));
    let released_round = Arc::new(AtomicUsize::new(0));
    // When the test woke the task, and when the task ran, as the test saw them.
    let woke_at = Arc::new(Mutex::new(Vec::new()));
    let ran_at = Arc::new(Mutex::new(Vec::new()));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let waiter = {
            let (notify, ran_at) = (Arc::clone(&notify), Arc::clone(&ran_at));
            tokio::spawn(
                async move {
                    for _ in 0..ROUNDS {
                        notify.notified().await;
                        ran_at.lock().unwrap().push(Instant::now());
                    }
                }
                .profiled("woken task"),
            )
        };
        let blocker = {
            let (busy_round, released_round) =
                (Arc::clone(&busy_round), Arc::clone(&released_round));
            tokio::spawn(async move {
                for round in 1..=ROUNDS {
                    // Let the waiter register its waker, then keep the thread.
                    tokio::task::yield_now().await;
                    busy_round.store(round, Ordering::SeqCst);
                    while released_round.load(Ordering::SeqCst) < round {
                        std::hint::spin_loop();
                    }
                    tokio::task::yield_now().await;
                }
            })
        };
        let waker = {
            let (notify, busy_round, released_round) = (
                Arc::clone(&notify),
                Arc::clone(&busy_round),
                Arc::clone(&released_round),
            );
            let (woke_at, ran_at) = (Arc::clone(&woke_at), Arc::clone(&ran_at));
            std::thread::spawn(move || {
                for round in 1..=ROUNDS {
                    // One wake at a time: Notify keeps one permit, so a second wake before
                    // the task has run would be lost (and the task would wait forever).
                    while ran_at.lock().unwrap().len() < round - 1 {
                        std::thread::yield_now();
                    }
                    while busy_round.load(Ordering::SeqCst) < round {
                        std::thread::yield_now();
                    }
                    woke_at.lock().unwrap().push(Instant::now());
                    notify.notify_one();
                    std::thread::sleep(BUSY);
                    released_round.store(round, Ordering::SeqCst);
                }
            })
        };
        waiter.await.unwrap();
        blocker.await.unwrap();
        waker.join().unwrap();
    });
    session.stop().unwrap();

    let trace = common::read_clean_async_file(&path);
    let measured: Vec<f64> = woke_at
        .lock()
        .unwrap()
        .iter()
        .zip(ran_at.lock().unwrap().iter())
        .map(|(w, r)| (*r - *w).as_secs_f64() * 1e3)
        .collect();
    let recorded: Vec<f64> = trace
        .wakes
        .iter()
        .filter(|w| {
            trace.contexts[&w.ctx]
                .frame
                .is_some_and(|f| trace.frame_name(f) == "woken task")
        })
        .map(|w| trace.ticks_to_ms(u64::try_from(w.polled.unwrap() - w.woken).unwrap()))
        .collect();
    assert_eq!(recorded.len(), ROUNDS, "{recorded:?} against {measured:?}");
    for (r, m) in recorded.iter().zip(&measured) {
        // The thread was busy for BUSY after the wake; the trace's wake is a little after
        // the test's clock read, its poll a little before the task's.
        assert!(*r >= BUSY.as_secs_f64() * 1e3 * 0.95, "{recorded:?}");
        assert!((r - m).abs() <= 1.0, "{recorded:?} against {measured:?}");
    }
}
