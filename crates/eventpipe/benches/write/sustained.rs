//! Sustained writing: what a program that writes without pause sees, as opposed to the
//! bursts of the criterion benches, after which the drain catches up untimed.
//!
//! Every case writes `SUSTAINED_PER_WRITER` events (default 10 million) from each of 1 or 2
//! writer threads, the `PAIR` event with its 16-byte payload, released together and timed
//! until the session's `stop()` returns (the drain has written everything to the file):
//!
//! * `floor`: what any write must do at least, in the same process and run: a clock read
//!   and a copy of a 40-byte record into the thread's own 1 MiB ring of memory, no session;
//! * `file`: the floor of a drain: each event as the trace stores a successor (a flags
//!   byte, the timestamp's delta as a varint, the payload) in 1 MiB buffers, 64 in all,
//!   which one thread of its own writes to a file and hands back; a writer with none free
//!   waits, as in Block mode. The drain does nothing per event: this is the most any design
//!   that writes these bytes to a file can reach on this machine, the kernel's copy into
//!   the page cache included (its CPU time per event is printed);
//! * `own`: each writer fills its own 64 KiB buffers with 40-byte records (the floor's)
//!   and writes each full one to the file itself (`write(2)`, no drain thread): the
//!   simplest design that writes these events to a file;
//! * `handoff`: the floor of a design with a reading thread: each writer fills 64 KiB
//!   buffers with the floor's records, 16 of them (1 MiB), and hands each full one to one
//!   reader thread, which reads every word and hands it back; a writer with none free
//!   waits. Nothing is encoded or written: what moving the records between two cores
//!   costs on this machine, the session's drain's hand-off without its work;
//! * `block`: a nettrace file in Block mode (lossless), the default 64 MiB budget;
//! * `drop`: the same in Drop mode: the share it lost;
//! * `paced`: Drop mode again, each writer pacing itself to an aggregate rate, from 2 M/s up
//!   in steps, until a rate loses events: the highest rate that lost none is reported.
//!
//! The cases interleave run by run (`SUSTAINED_RUNS`, default 3), so the machine's slow and
//! fast phases hit them alike; the summary gives each case's median and its spread (min-max)
//! in ns per event (aggregate over the writers), its ratio to the floor of the same run, and
//! for two writers the scaling over one.
//!
//! `SUSTAINED_ONLY=1` skips the criterion benches. `SUSTAINED_CASE=block/1` (a case and its
//! writers) runs that case once and prints its figures, and what its threads did
//! (`threads.rs`: CPU time, time waiting for a CPU, switches): the form to run under
//! `valgrind --tool=callgrind`, with `SUSTAINED_PER_WRITER` lowered. Several, separated by
//! commas, run in turn in one process. `SUSTAINED_BUDGET_MB` sets the sessions' buffer
//! budget (default: the session's, 64 MiB). Each Block-mode run's
//! file is read back (untimed): it must hold every event.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use eventpipe::{
    clock, write_event, BufferingMode, Output, ProviderConfig, Session, SessionConfig, SessionStats,
};

use crate::threads::Watch;
use crate::{BENCH, PAIR, RECORD};

/// Bytes of the floor's ring: each writer's records land in memory it reuses, as the
/// session's recycled buffers are.
const RING: usize = 1 << 20;
/// Aggregate rates the paced case tries, events per second, lowest first.
const PACED_RATES: [u64; 8] = [
    2_000_000, 5_000_000, 10_000_000, 15_000_000, 20_000_000, 25_000_000, 30_000_000, 40_000_000,
];
/// Seconds each paced rate is held.
const PACED_SECONDS: u64 = 2;
/// Events a paced writer writes between looks at the clock.
const PACE_CHUNK: u64 = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Floor,
    File,
    Own,
    Handoff,
    Block,
    Drop,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Floor => "floor",
            Kind::File => "file",
            Kind::Own => "own",
            Kind::Handoff => "handoff",
            Kind::Block => "block",
            Kind::Drop => "drop",
        }
    }
}

/// One timed run of a case.
#[derive(Debug, Clone)]
struct Outcome {
    ns_per_event: f64,
    lost: u64,
    written: u64,
    /// The `file` case's writing thread: its CPU time per event, in ns.
    drain_cpu_ns: Option<f64>,
    /// A session's drain: its passes, waits and output writes.
    drain: Option<String>,
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn trace_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "eventpipe-bench-sustained-{tag}-{}.nettrace",
        std::process::id()
    ))
}

/// Runs `writer(thread)` on `threads` threads released together; the time from the release
/// until every writer returned and then `finish` did. `watch` learns each writer's thread.
fn timed_writers<R>(
    threads: u64,
    watch: &Watch,
    writer: impl Fn(u64) + Sync,
    finish: impl FnOnce() -> R,
) -> (Duration, R) {
    let barrier = Barrier::new(threads as usize + 1);
    let start = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, writer) = (&barrier, &writer);
                std::thread::Builder::new()
                    .name(format!("writer-{t}"))
                    .spawn_scoped(s, move || {
                        watch.writer_started();
                        barrier.wait();
                        writer(t);
                    })
                    .expect("start a writer")
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        for h in handles {
            h.join().expect("writer thread");
        }
        start
    });
    let result = finish();
    (start.elapsed(), result)
}

/// The floor's work for one event, shared by the cases that stand beside the session: a
/// clock read and the 40-byte record copied into `slot`, stamped with it.
#[inline(always)]
fn put_record(slot: &mut [u8], record: &[u8; RECORD]) {
    let t = clock::now();
    slot.copy_from_slice(black_box(record));
    slot[..8].copy_from_slice(&t.to_le_bytes());
}

fn floor_run(threads: u64, per_writer: u64, watch: &Watch) -> Outcome {
    let record = [0x5au8; RECORD];
    let (elapsed, ()) = timed_writers(
        threads,
        watch,
        |_| {
            let mut ring = vec![0u8; RING];
            let mut at = 0;
            for _ in 0..per_writer {
                put_record(&mut ring[at..at + RECORD], &record);
                at += RECORD;
                if at + RECORD > RING {
                    at = 0;
                }
            }
            black_box(&ring);
        },
        || (),
    );
    Outcome {
        ns_per_event: elapsed.as_nanos() as f64 / (threads * per_writer) as f64,
        lost: 0,
        written: threads * per_writer,
        drain_cpu_ns: None,
        drain: None,
    }
}

/// Bytes of each buffer of the `file` case, as the session's largest.
const FILE_BUFFER: usize = 1 << 20;
/// Buffers of the `file` case in all: the session's default budget.
const FILE_BUFFERS: usize = 64;

/// The `file` case (see the module docs).
fn file_floor_run(threads: u64, per_writer: u64, watch: &Watch) -> Outcome {
    use std::io::Write;
    use std::sync::mpsc;
    let path = trace_path("file");
    let mut file = std::fs::File::create(&path).expect("create the file case's output");
    let (full_tx, full_rx) = mpsc::sync_channel::<(usize, Vec<u8>)>(FILE_BUFFERS);
    // Each writer sends on a clone; the original goes when they are done, ending the
    // writing thread's loop once it has written everything.
    let full_tx = std::sync::Mutex::new(Some(full_tx));
    let (free_txs, free_rxs): (Vec<_>, Vec<_>) =
        (0..threads).map(|_| mpsc::channel::<Vec<u8>>()).unzip();
    for tx in &free_txs {
        for _ in 0..FILE_BUFFERS / threads as usize {
            tx.send(vec![0u8; FILE_BUFFER]).expect("fill the pool");
        }
    }
    let drain = std::thread::spawn(move || {
        let mut bytes = 0u64;
        for (writer, mut buffer) in full_rx {
            file.write_all(&buffer)
                .expect("write the file case's output");
            bytes += buffer.len() as u64;
            buffer.resize(FILE_BUFFER, 0);
            // A writer that has finished no longer takes its buffers back.
            let _ = free_txs[writer].send(buffer);
        }
        (bytes, thread_cpu_ns())
    });
    let free_rxs: Vec<std::sync::Mutex<mpsc::Receiver<Vec<u8>>>> =
        free_rxs.into_iter().map(std::sync::Mutex::new).collect();
    let (elapsed, (bytes, drain_cpu_ns)) = timed_writers(
        threads,
        watch,
        |t| {
            let free = free_rxs[t as usize].lock().expect("the writer's pool");
            let full = full_tx
                .lock()
                .expect("the sender")
                .clone()
                .expect("the sender is there until the writers are done");
            let mut buffer = free.recv().expect("a first buffer");
            let mut at = 0;
            let mut previous = clock::now();
            let base = t * per_writer;
            for i in 0..per_writer {
                if at + 4 + 16 > FILE_BUFFER {
                    buffer.truncate(at);
                    full.send((t as usize, buffer)).expect("hand a buffer on");
                    buffer = free.recv().expect("a free buffer");
                    at = 0;
                }
                let now = clock::now();
                let delta = (now - previous) as u64;
                previous = now;
                let slot = &mut buffer[at..at + 4 + 16];
                slot[0] = 0;
                // The delta as a varint: one byte below 128 ticks, two below 16,384, else
                // three here (a longer pause is rare enough to ignore its true length).
                let len = if delta < 0x80 {
                    slot[1] = delta as u8;
                    1
                } else if delta < 0x4000 {
                    slot[1] = delta as u8 | 0x80;
                    slot[2] = (delta >> 7) as u8;
                    2
                } else {
                    slot[1] = 0xff;
                    slot[2] = 0xff;
                    slot[3] = 0x7f;
                    3
                };
                let payload = &mut slot[1 + len..1 + len + 16];
                payload[..8].copy_from_slice(&(base + i).to_le_bytes());
                payload[8..].copy_from_slice(&black_box(2u64).to_le_bytes());
                at += 1 + len + 16;
            }
            buffer.truncate(at);
            full.send((t as usize, buffer))
                .expect("hand the last buffer on");
        },
        || {
            full_tx.lock().expect("the sender").take();
            drain.join().expect("the file case's writing thread")
        },
    );
    let _ = std::fs::remove_file(&path);
    let events = threads * per_writer;
    assert!(bytes >= events * 18, "the file case wrote {bytes} bytes");
    Outcome {
        ns_per_event: elapsed.as_nanos() as f64 / events as f64,
        lost: 0,
        written: events,
        drain_cpu_ns: Some(drain_cpu_ns as f64 / events as f64),
        drain: None,
    }
}

/// The calling thread's CPU time so far, user and system, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn file_session(path: &Path, mode: BufferingMode) -> Session {
    let mut config = SessionConfig::new(
        vec![ProviderConfig::new(BENCH.name())],
        Output::File(path.to_path_buf()),
    )
    .mode(mode);
    // `SUSTAINED_BUDGET_MB`: the session's buffer budget, when not the default.
    if let Some(mb) = std::env::var("SUSTAINED_BUDGET_MB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        config = config.buffer_budget(mb << 20);
    }
    Session::start(config).expect("start the file session")
}

/// Writes `per_writer` events from each writer, paced to `rate` events/s in all when given.
fn session_run(
    kind: Kind,
    threads: u64,
    per_writer: u64,
    rate: Option<u64>,
    watch: &Watch,
) -> Outcome {
    let mode = if kind == Kind::Block {
        BufferingMode::Block
    } else {
        BufferingMode::Drop
    };
    let path = trace_path(kind.name());
    let session = file_session(&path, mode);
    let ticks_per_chunk = rate.map(|rate| {
        let per_writer_rate = rate as f64 / threads as f64;
        clock::ticks_per_second() as f64 * PACE_CHUNK as f64 / per_writer_rate
    });
    let (elapsed, stats) = timed_writers(
        threads,
        watch,
        |t| {
            let base = t * per_writer;
            let start = clock::now();
            for i in 0..per_writer {
                write_event!(PAIR, base + i, black_box(2u64));
                if let Some(ticks) = ticks_per_chunk {
                    if (i + 1) % PACE_CHUNK == 0 {
                        let due = start + (ticks * ((i + 1) / PACE_CHUNK) as f64) as i64;
                        while clock::now() < due {
                            std::hint::spin_loop();
                        }
                    }
                }
            }
        },
        || session.stop().expect("stop the file session"),
    );
    if kind == Kind::Block {
        assert_eq!(
            count_in_file(&path),
            threads * per_writer,
            "events in the file"
        );
    }
    let _ = std::fs::remove_file(&path);
    check_accounting(kind, threads * per_writer, &stats);
    Outcome {
        ns_per_event: elapsed.as_nanos() as f64 / (threads * per_writer) as f64,
        lost: stats.events_dropped,
        written: stats.events_written,
        drain_cpu_ns: None,
        drain: Some(drain_evidence(&stats)),
    }
}

/// What the drain did: passes (events per pass), yields waiting for a writer mid-record,
/// and its output's `write` calls (bytes per call).
fn drain_evidence(stats: &SessionStats) -> String {
    let per = |n: u64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
    format!(
        "drain: {} passes ({:.0} events each), {} in-flight yields, {} writes ({:.0} KiB each)",
        stats.drain_passes,
        per(stats.events_written, stats.drain_passes),
        stats.in_flight_waits,
        stats.output_writes,
        per(stats.bytes_written, stats.output_writes) / 1024.0
    )
}

/// Counts `PAIR` events in the trace at `path`.
fn count_in_file(path: &Path) -> u64 {
    let bytes = std::fs::read(path).expect("read the sustained trace");
    let mut reader = nettrace::TraceReader::from_slice(&bytes).expect("open the sustained trace");
    let mut n = 0;
    while let Some(e) = reader.next_event().expect("read the sustained trace") {
        if e.metadata.provider == BENCH.name() {
            n += 1;
        }
    }
    assert!(reader.is_finished(), "the sustained trace is not ended");
    n
}

fn check_accounting(kind: Kind, issued: u64, stats: &SessionStats) {
    assert_eq!(
        stats.events_written + stats.events_dropped,
        issued,
        "{}: every event is written or counted lost: {stats:?}",
        kind.name()
    );
    if kind == Kind::Block {
        assert_eq!(stats.events_dropped, 0, "Block mode lost events: {stats:?}");
    }
}

/// Bytes of each writer's buffer in the `own` case.
const OWN_BUFFER: usize = 64 << 10;

/// The `own` case (see the module docs).
fn own_run(threads: u64, per_writer: u64, watch: &Watch) -> Outcome {
    use std::io::Write;
    let path = trace_path("own");
    let _ = std::fs::remove_file(&path);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .expect("create the own case's output");
    let record = [0x5au8; RECORD];
    let (elapsed, ()) = timed_writers(
        threads,
        watch,
        |_| {
            let mut buffer = vec![0u8; OWN_BUFFER];
            let mut at = 0;
            for _ in 0..per_writer {
                if at + RECORD > OWN_BUFFER {
                    (&file)
                        .write_all(&buffer[..at])
                        .expect("write the own case's output");
                    at = 0;
                }
                put_record(&mut buffer[at..at + RECORD], &record);
                at += RECORD;
            }
            (&file)
                .write_all(&buffer[..at])
                .expect("write the own case's output");
        },
        || (),
    );
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    let _ = std::fs::remove_file(&path);
    let events = threads * per_writer;
    assert_eq!(bytes, events * RECORD as u64, "the own case's file");
    Outcome {
        ns_per_event: elapsed.as_nanos() as f64 / events as f64,
        lost: 0,
        written: events,
        drain_cpu_ns: None,
        drain: None,
    }
}

/// Buffers each `handoff` writer cycles through.
const HANDOFF_BUFFERS: usize = 16;

/// The `handoff` case's reading thread's name (the watch reports it as the drain).
pub(crate) const HANDOFF_READER: &str = "handoff-reader";

fn handoff_run(threads: u64, per_writer: u64, watch: &Watch) -> Outcome {
    use std::sync::mpsc::{channel, sync_channel, Sender};
    /// A full buffer and its length, with its writer's way back; `None`: a writer is done.
    type Full = Option<(Vec<u8>, usize, Sender<Vec<u8>>)>;
    let record = [0x5au8; RECORD];
    let (full_tx, full_rx) = sync_channel::<Full>(HANDOFF_BUFFERS * threads as usize);
    let reader = std::thread::Builder::new()
        .name(HANDOFF_READER.into())
        .spawn(move || {
            let (mut sum, mut bytes, mut done) = (0u64, 0u64, 0);
            while done < threads {
                match full_rx.recv().expect("a writer's buffer") {
                    Some((buffer, len, back)) => {
                        for word in buffer[..len].chunks_exact(8) {
                            sum = sum.wrapping_add(u64::from_le_bytes(word.try_into().unwrap()));
                        }
                        bytes += len as u64;
                        let _ = back.send(buffer);
                    }
                    None => done += 1,
                }
            }
            black_box(sum);
            bytes
        })
        .expect("start the handoff reader");
    let (elapsed, bytes_read) = timed_writers(
        threads,
        watch,
        |_| {
            let (back_tx, back_rx) = channel();
            for _ in 0..HANDOFF_BUFFERS {
                back_tx.send(vec![0u8; OWN_BUFFER]).unwrap();
            }
            let mut buffer = back_rx.recv().unwrap();
            let mut at = 0;
            for _ in 0..per_writer {
                if at + RECORD > OWN_BUFFER {
                    full_tx
                        .send(Some((buffer, at, back_tx.clone())))
                        .expect("hand a buffer over");
                    buffer = back_rx.recv().expect("a buffer back");
                    at = 0;
                }
                put_record(&mut buffer[at..at + RECORD], &record);
                at += RECORD;
            }
            full_tx
                .send(Some((buffer, at, back_tx.clone())))
                .expect("hand a buffer over");
            full_tx.send(None).expect("say the writer is done");
        },
        || reader.join().expect("the handoff reader"),
    );
    let events = threads * per_writer;
    assert_eq!(
        bytes_read,
        events * RECORD as u64,
        "the handoff case's reads"
    );
    Outcome {
        ns_per_event: elapsed.as_nanos() as f64 / events as f64,
        lost: 0,
        written: events,
        drain_cpu_ns: None,
        drain: None,
    }
}

fn run(kind: Kind, threads: u64, per_writer: u64) -> (Outcome, String) {
    let watch = Watch::start();
    let outcome = match kind {
        Kind::Floor => floor_run(threads, per_writer, &watch),
        Kind::File => file_floor_run(threads, per_writer, &watch),
        Kind::Own => own_run(threads, per_writer, &watch),
        Kind::Handoff => handoff_run(threads, per_writer, &watch),
        _ => session_run(kind, threads, per_writer, None, &watch),
    };
    let mut evidence = watch.finish(threads * per_writer);
    if let Some(drain) = &outcome.drain {
        evidence = format!("{evidence}; {drain}");
    }
    (outcome, evidence)
}

/// The highest paced rate (events/s, aggregate) that lost nothing, and the first that did.
fn lossless_rate(threads: u64) -> (Option<u64>, Option<(u64, f64)>) {
    let mut best = None;
    for rate in PACED_RATES {
        let per_writer = rate * PACED_SECONDS / threads;
        let outcome = session_run(Kind::Drop, threads, per_writer, Some(rate), &Watch::start());
        let achieved = 1e9 / outcome.ns_per_event;
        if outcome.lost > 0 {
            let share = outcome.lost as f64 / (outcome.lost + outcome.written) as f64;
            return (best, Some((rate, share)));
        }
        if achieved < rate as f64 * 0.95 {
            // The writers could not reach the rate: it is beyond the write path itself.
            return (best, None);
        }
        best = Some(rate);
    }
    (best, None)
}

fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// Runs the sustained cases and prints their summary; `SUSTAINED_CASE` picks one.
pub(crate) fn bench() {
    let per_writer = env_num("SUSTAINED_PER_WRITER", 10_000_000);
    if let Ok(cases) = std::env::var("SUSTAINED_CASE") {
        // Several, comma-separated, run in turn in this one process.
        for case in cases.split(',') {
            let (kind, threads) = case.split_once('/').unwrap_or((case, "1"));
            let kind = match kind {
                "floor" => Kind::Floor,
                "file" => Kind::File,
                "own" => Kind::Own,
                "handoff" => Kind::Handoff,
                "block" => Kind::Block,
                "drop" => Kind::Drop,
                other => panic!(
                    "SUSTAINED_CASE: unknown case {other:?} (floor, file, own, block or drop)"
                ),
            };
            let threads = threads
                .parse()
                .expect("SUSTAINED_CASE: writers after the /");
            let (o, evidence) = run(kind, threads, per_writer);
            let drain = o.drain_cpu_ns.map_or(String::new(), |ns| {
                format!(", its writing thread {ns:.2} ns/event of CPU")
            });
            println!(
                "sustained {case}: {:.2} ns/event, {} written, {} lost{drain}",
                o.ns_per_event, o.written, o.lost
            );
            println!("  evidence: {evidence}");
        }
        return;
    }
    let runs = env_num("SUSTAINED_RUNS", 3);
    let kinds = [Kind::Floor, Kind::File, Kind::Block, Kind::Drop];
    // results[kind][threads - 1] = one outcome per run.
    let mut results = vec![vec![Vec::new(); 2]; kinds.len()];
    for r in 0..runs {
        for threads in 1..=2u64 {
            for (k, &kind) in kinds.iter().enumerate() {
                let (o, _) = run(kind, threads, per_writer);
                let drain = o.drain_cpu_ns.map_or(String::new(), |ns| {
                    format!(", its writing thread {ns:.2} ns/event of CPU")
                });
                println!(
                    "sustained run {} {}/{threads}: {:.2} ns/event, lost {}{drain}",
                    r + 1,
                    kind.name(),
                    o.ns_per_event,
                    o.lost
                );
                results[k][threads as usize - 1].push(o);
            }
        }
    }
    println!(
        "\nSustained writing, {per_writer} events a writer, {runs} runs: median (min-max) ns/event, aggregate"
    );
    println!("| case | 1 writer | ×floor | 2 writers | ×floor | 2-writer scaling | lost (1 / 2 writers) |");
    println!("|---|---|---|---|---|---|---|");
    let floor: Vec<Vec<f64>> = (0..2)
        .map(|t| results[0][t].iter().map(|o| o.ns_per_event).collect())
        .collect();
    for (k, kind) in kinds.iter().enumerate() {
        let ns: Vec<Vec<f64>> = (0..2)
            .map(|t| results[k][t].iter().map(|o| o.ns_per_event).collect())
            .collect();
        // Ratios within each run, against that run's floor.
        let ratio =
            |t: usize| -> Vec<f64> { ns[t].iter().zip(&floor[t]).map(|(a, f)| a / f).collect() };
        let scaling: Vec<f64> = ns[0]
            .iter()
            .zip(&ns[1])
            .map(|(one, two)| one / two)
            .collect();
        let lost = |t: usize| -> String {
            let share: Vec<f64> = results[k][t]
                .iter()
                .map(|o| 100.0 * o.lost as f64 / (o.lost + o.written).max(1) as f64)
                .collect();
            let (m, lo, hi) = spread(&share);
            format!("{m:.1} % ({lo:.1}-{hi:.1})")
        };
        let fmt = |v: &[f64], digits: usize| {
            let (m, lo, hi) = spread(v);
            format!("{m:.digits$} ({lo:.digits$}-{hi:.digits$})")
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} / {} |",
            kind.name(),
            fmt(&ns[0], 1),
            fmt(&ratio(0), 2),
            fmt(&ns[1], 1),
            fmt(&ratio(1), 2),
            fmt(&scaling, 2),
            lost(0),
            lost(1)
        );
    }
    for threads in 1..=2 {
        let cpu: Vec<f64> = results[1][threads - 1]
            .iter()
            .filter_map(|o| o.drain_cpu_ns)
            .collect();
        let (m, lo, hi) = spread(&cpu);
        println!(
            "file, {threads} writer(s): its writing thread took {m:.2} ({lo:.2}-{hi:.2}) ns of CPU per event"
        );
    }
    for threads in 1..=2 {
        let (best, failed) = lossless_rate(threads);
        let best = best.map_or("none of the rates tried".into(), |r| {
            format!("{} M/s", r / 1_000_000)
        });
        let failed = failed.map_or(String::new(), |(rate, share)| {
            format!(", {} M/s lost {:.2} %", rate / 1_000_000, 100.0 * share)
        });
        println!("Drop mode, {threads} writer(s), paced: lossless up to {best}{failed}");
    }
}
