//! What the threads of a sustained case did, from `/proc/self/task`, looked at every few
//! milliseconds by a thread of its own while the case runs: each writer's and the drain's
//! time on a CPU and waiting for one (`schedstat`, nanoseconds), their context switches
//! (`status`: voluntary ones are waits, involuntary ones preemptions), their page faults
//! (`stat`), and how often the
//! drain was runnable on the CPU of a runnable writer (the two then share one core).
//! A thread's figures are its last look's, so a drain that exits at the session's stop
//! keeps what it had a few milliseconds before.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the threads are looked at.
const LOOK_EVERY: Duration = Duration::from_millis(5);

/// The drain thread's name (eventpipe's `drain` module names it so).
const DRAIN: &str = "eventpipe-drain";

#[derive(Debug, Default, Clone, Copy)]
struct Facts {
    on_cpu_ns: u64,
    runqueue_ns: u64,
    voluntary: u64,
    involuntary: u64,
    /// Minor page faults: first touches of memory (on a VM that returns freed guest memory
    /// to its host, each can cost a fault on the host as well, seen here as time on a CPU).
    page_faults: u64,
}

#[derive(Debug, Clone, Copy)]
struct Look {
    runnable: bool,
    cpu: u32,
    facts: Facts,
}

fn look(tid: u64) -> Option<Look> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // After the name's closing parenthesis: state is field 3, processor field 39.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let runnable = fields.first()? == &"R";
    // minflt is field 10.
    let page_faults = fields.get(7)?.parse().ok()?;
    let cpu = fields.get(36)?.parse().ok()?;
    let schedstat = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let mut sched = schedstat.split_whitespace().map(|v| v.parse::<u64>().ok());
    let (on_cpu_ns, runqueue_ns) = (sched.next()??, sched.next()??);
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok()?;
    let switches = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
    };
    Some(Look {
        runnable,
        cpu,
        facts: Facts {
            on_cpu_ns,
            runqueue_ns,
            voluntary: switches("voluntary_ctxt_switches:")?,
            involuntary: switches("nonvoluntary_ctxt_switches:")?,
            page_faults,
        },
    })
}

fn drain_tid() -> Option<u64> {
    std::fs::read_dir("/proc/self/task").ok()?.find_map(|e| {
        let e = e.ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        let name = comm.trim_end();
        (name == DRAIN || name == crate::sustained::HANDOFF_READER)
            .then(|| e.file_name().to_str()?.parse().ok())?
    })
}

#[derive(Debug, Default)]
struct Seen {
    writers: BTreeMap<u64, Facts>,
    drain: Option<Facts>,
    looks: u64,
    /// Looks at which the drain was runnable on the CPU of a runnable writer.
    shared: u64,
}

/// Watches a case's threads until [`Watch::finish`].
pub(crate) struct Watch {
    writers: Arc<Mutex<Vec<u64>>>,
    stop: Arc<AtomicBool>,
    looker: Option<std::thread::JoinHandle<Seen>>,
}

impl Watch {
    pub(crate) fn start() -> Watch {
        let writers = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let looker = {
            let (writers, stop) = (Arc::clone(&writers), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("bench-watch".into())
                .spawn(move || {
                    let mut seen = Seen::default();
                    let mut drain = None;
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(LOOK_EVERY);
                        drain = drain.or_else(drain_tid);
                        let tids: Vec<u64> = writers.lock().expect("writer tids").clone();
                        let writer_looks: Vec<(u64, Look)> =
                            tids.iter().filter_map(|&t| Some((t, look(t)?))).collect();
                        let drain_look = drain.and_then(look);
                        for (tid, l) in &writer_looks {
                            seen.writers.insert(*tid, l.facts);
                        }
                        if let Some(d) = drain_look {
                            seen.drain = Some(d.facts);
                            seen.looks += 1;
                            let shared = d.runnable
                                && writer_looks
                                    .iter()
                                    .any(|(_, w)| w.runnable && w.cpu == d.cpu);
                            seen.shared += u64::from(shared);
                        }
                    }
                    seen
                })
                .expect("start the watching thread")
        };
        Watch {
            writers,
            stop,
            looker: Some(looker),
        }
    }

    /// Called on each writer thread as it starts. `SUSTAINED_WRITER_CPU=N` pins it to CPU
    /// N (with the process started under `taskset -c M`, the drain and the main thread stay
    /// on M): which of the machine's CPUs a writer runs on, as a variable.
    pub(crate) fn writer_started(&self) {
        if let Some(cpu) = std::env::var("SUSTAINED_WRITER_CPU")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
        {
            // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET stays within it for any
            // CPU below CPU_SETSIZE, which `cpu` is checked against.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                assert!(cpu < libc::CPU_SETSIZE as usize, "SUSTAINED_WRITER_CPU");
                libc::CPU_SET(cpu, &mut set);
                let rc = libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
                assert_eq!(rc, 0, "pin the writer to CPU {cpu}");
            }
        }
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u64;
        self.writers.lock().expect("writer tids").push(tid);
    }

    /// Stops watching; what was seen, per event of `events`, as one line.
    pub(crate) fn finish(mut self, events: u64) -> String {
        self.stop.store(true, Ordering::Relaxed);
        let seen = self
            .looker
            .take()
            .expect("watching")
            .join()
            .expect("the watching thread");
        let per = |ns: u64| ns as f64 / events.max(1) as f64;
        let describe = |what: &str, f: &Facts| {
            format!(
                "{what} on CPU {:.2} ns/event, waiting for a CPU {:.2} ns/event, {} waits, {} preemptions, {} page faults",
                per(f.on_cpu_ns),
                per(f.runqueue_ns),
                f.voluntary,
                f.involuntary,
                f.page_faults
            )
        };
        let mut parts: Vec<String> = seen
            .writers
            .values()
            .enumerate()
            .map(|(i, f)| describe(&format!("writer {i}"), f))
            .collect();
        if let Some(d) = &seen.drain {
            parts.push(describe("drain", d));
            parts.push(format!(
                "drain runnable on a running writer's CPU in {} of {} looks",
                seen.shared, seen.looks
            ));
        }
        parts.join("; ")
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(looker) = self.looker.take() {
            let _ = looker.join();
        }
    }
}
