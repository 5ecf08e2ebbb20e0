//! Per-poll cost of the async profiler, in isolation: one instrumented future polled N times
//! on this thread (each poll a resume and a suspend record), with a session recording, vs
//! the same future uninstrumented.
//!
//! `cargo run --release -p eventpipe-profiler --example async_poll_cost`

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use eventpipe::{Output, ProviderConfig, Session, SessionConfig};
use eventpipe_profiler::futures::{self, FutureExt};

struct Yields(u64);

impl Future for Yields {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            Poll::Ready(())
        } else {
            self.0 -= 1;
            Poll::Pending
        }
    }
}

fn drive<F: Future>(f: F) -> f64 {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    let start = Instant::now();
    let mut polls = 0u64;
    while f.as_mut().poll(&mut cx).is_pending() {
        polls += 1;
    }
    start.elapsed().as_nanos() as f64 / polls as f64
}

fn main() {
    futures::register();
    const N: u64 = 20_000_000;
    for _ in 0..3 {
        let plain = drive(Yields(N));
        let idle = drive(Yields(N).profiled("idle"));
        let session = Session::start(SessionConfig::new(
            vec![ProviderConfig::parse("EventPipeRs-AsyncProfiler:0:5").unwrap()],
            Output::File(std::env::temp_dir().join("async-poll-cost.nettrace")),
        ))
        .unwrap();
        let recorded = drive(Yields(N).profiled("recorded"));
        let stats = session.stop().unwrap();
        println!(
            "per poll: plain {plain:.1} ns, instrumented without session {idle:.1} ns, \
             recorded {recorded:.1} ns ({} bytes written, {} dropped)",
            stats.bytes_written, stats.events_dropped
        );
    }
}
