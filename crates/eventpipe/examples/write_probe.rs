//! A quick, repeatable look at the cost of one enabled write, beside the floor it is judged
//! against: rounds of writes of the `write` bench's event (16-byte payload, one
//! thread, a Drop-mode session writing to `io::sink()`, its drain idle while a round runs),
//! interleaved with rounds of the floor (a clock read plus a 40-byte copy) and of an event
//! without payload. Prints min and median ns per operation over the rounds.
//!
//! Criterion (`cargo bench -p eventpipe --bench write`) is the recorded measurement; this
//! probe is for working on the path: it runs in seconds and under `perf stat`/`perf record`.
//!
//! `cargo run --release -p eventpipe --example write_probe [ROUNDS [WRITES_PER_ROUND]]`
//! (defaults 30 and 1,000,000). The bench's rounds are 100,000 writes, 4 MB of records that
//! stay in the last-level cache; a million (40 MB) run at the pace of the memory; rounds of
//! 10 million outgrow the spare buffers a 1 GiB session keeps, so their writes also pay for
//! faulting in fresh pages.

use std::hint::black_box;
use std::time::{Duration, Instant};

use eventpipe::{
    define_event, write_event, BufferingMode, Level, Output, Provider, ProviderConfig, Session,
    SessionConfig,
};

static PROBE: Provider = Provider::new("Probe-Write");

define_event! {
    /// The `write` bench's event: 16 bytes of payload.
    static PAIR = PROBE { id: 1, name: "Pair", level: Level::Informational, keywords: 0 }
        (a: u64, b: u64);
}
define_event! {
    /// No payload: the fixed cost of a write.
    static EMPTY = PROBE { id: 2, name: "Empty", level: Level::Informational, keywords: 0 } ();
}

/// This thread's CPU time in ns: unlike the wall clock, it leaves out the time the thread
/// was descheduled, and the hypervisor's steal time, which the guest kernel accounts apart.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux supports.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Wall and thread CPU time of one round, per operation.
#[derive(Default)]
struct Rounds {
    wall: Vec<f64>,
    cpu: Vec<f64>,
}

impl Rounds {
    fn time(&mut self, ops: u32, f: impl FnOnce()) {
        let (wall, cpu) = (Instant::now(), thread_cpu_ns());
        f();
        let cpu = thread_cpu_ns() - cpu;
        self.wall
            .push(wall.elapsed().as_nanos() as f64 / f64::from(ops));
        self.cpu.push(cpu as f64 / f64::from(ops));
    }

    fn summary(mut self, name: &str) {
        self.wall.sort_by(f64::total_cmp);
        self.cpu.sort_by(f64::total_cmp);
        let (w, c) = (&self.wall, &self.cpu);
        println!(
            "{name:<6} wall min {:6.2} median {:6.2} ns | thread CPU min {:6.2} median {:6.2} ns",
            w[0],
            w[w.len() / 2],
            c[0],
            c[c.len() / 2]
        );
    }
}

/// Waits until the drain has written or dropped `issued` events.
fn catch_up(session: &Session, issued: u64) {
    loop {
        let stats = session.stats();
        if stats.events_written + stats.events_dropped >= issued {
            return;
        }
        session.flush();
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("ROUNDS is a number"))
        .unwrap_or(30);
    let writes_per_round: u32 = std::env::args()
        .nth(2)
        .map(|a| a.parse().expect("WRITES is a number"))
        .unwrap_or(1_000_000);
    let session = Session::start(
        SessionConfig::new(
            vec![ProviderConfig::new(PROBE.name())],
            Output::Stream(Box::new(std::io::sink())),
        )
        .mode(BufferingMode::Drop)
        .buffer_budget(1 << 30)
        .flush_interval(Duration::from_secs(3600)),
    )
    .expect("start the probe session");

    let mut buf = vec![0u8; 64 << 10];
    let (mut write, mut empty, mut floor) =
        (Rounds::default(), Rounds::default(), Rounds::default());
    let mut issued = 0;
    for _ in 0..rounds {
        write.time(writes_per_round, || {
            for i in 0..writes_per_round {
                write_event!(PAIR, black_box(u64::from(i)), black_box(2u64));
            }
        });
        empty.time(writes_per_round, || {
            for _ in 0..writes_per_round {
                write_event!(EMPTY);
            }
        });
        floor.time(writes_per_round, || {
            let mut at = 0;
            for i in 0..writes_per_round {
                let mut record = [0u8; 40];
                record[16..24].copy_from_slice(&eventpipe::clock::now().to_le_bytes());
                record[24..32].copy_from_slice(&black_box(u64::from(i)).to_le_bytes());
                record[32..40].copy_from_slice(&black_box(2u64).to_le_bytes());
                black_box(&mut buf[at..at + 40]).copy_from_slice(&record);
                at = if at + 80 > buf.len() { 0 } else { at + 40 };
            }
        });

        // Untimed: let the drain empty the buffers, so the budget never runs out and the
        // next round's writes do not race the drain for the cores and the cache lines.
        issued += 2 * u64::from(writes_per_round);
        catch_up(&session, issued);
    }
    let stats = session.stop().expect("stop the probe session");
    write.summary("write");
    empty.summary("empty");
    floor.summary("floor");
    println!(
        "session wrote {} events, dropped {}",
        stats.events_written, stats.events_dropped
    );
}
