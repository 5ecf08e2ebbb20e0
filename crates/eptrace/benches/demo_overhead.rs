//! The CPU sampler's overhead on the demo (`eptrace demo-workload`): the demo runs on its
//! own, as a program someone attaches to; sessions come and go over the diagnostics
//! socket, alternately with and without the sampler at 1 kHz.
//!
//! Both sessions enable the demo's `tracing` events (its provider `eptrace-demo-workload`,
//! keyword 0x2, Informational): each of the two `cruncher` threads writes `request done`
//! with its `round` number once per round of its hot loops. The work a session saw is, per
//! cruncher, the rounds between its first and last such event over the time between them;
//! the demo's throughput under a session is the sum over both crunchers. The crunchers fill
//! the machine's two cores (the demo's other threads mostly sleep), so whatever the sampler
//! costs them shows as fewer rounds a second.
//!
//! Prints the median over the pairs of the plain session's throughput over the sampled
//! one's, less 1: the sampler's overhead on the demo. Beside it, sampled over plain, the
//! crunchers' own CPU time per round (`/proc/PID/task/TID/stat` of the `cruncher-*`
//! threads, over the session): what a round costs the threads that do it, their signal
//! handling included. The demo has more busy threads than the machine has cores (its
//! async worker spins too), so the crunchers' throughput also moves with the share of the
//! cores the scheduler gives them against the demo's other threads; their CPU time per
//! round does not.
//!
//! `cargo bench -p eptrace --bench demo_overhead` (`DEMO_OVERHEAD_PAIRS`, default 15, and
//! `DEMO_OVERHEAD_SECONDS` per session, default 2). With `DEMO_OVERHEAD_CONTROL=1` neither
//! session enables the sampler: what the bench then prints is its noise floor.

use std::collections::HashMap;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use eventpipe_ipc::{Client, CollectTracing, Error, ProviderRequest};
use nettrace::TraceReader;

const DEMO_PROVIDER: &str = "eptrace-demo-workload";
const SAMPLER_PROVIDER: &str = "EventPipeRs-CpuSampler";

/// The demo workload, killed when dropped.
struct Demo(Child);

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn env_number(name: &str, default: f64) -> f64 {
    std::env::var(name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}: a number, not {v:?}"))
    })
}

fn provider(name: &str, keywords: u64, level: u32) -> ProviderRequest {
    ProviderRequest {
        keywords,
        level,
        name: name.into(),
        arguments: String::new(),
        filter: None,
    }
}

/// The CPU time the demo's `cruncher-*` threads have used so far, in seconds (user and
/// system).
fn crunchers_cpu_seconds(pid: u32) -> f64 {
    let mut ticks = 0u64;
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the demo's threads");
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue; // exited meanwhile
        };
        // `tid (comm) state ...`: comm may hold spaces, so split at the last ')'. After it
        // come fields 3 on: utime and stime (fields 14 and 15) are the 12th and 13th.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !stat[open + 1..close].starts_with("cruncher-") {
            continue;
        }
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        ticks += fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    }
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

/// One session: its trace, and the crunchers' CPU time per second of it.
struct Recorded {
    trace: Vec<u8>,
    cpu_per_second: f64,
}

/// Runs one session of `seconds`.
fn session(client: &Client, pid: u32, sampled: bool, seconds: f64) -> Recorded {
    let mut providers = vec![provider(DEMO_PROVIDER, 0x2, 4)];
    if sampled {
        providers.push(provider(SAMPLER_PROVIDER, 0, 5));
    }
    let mut stream = client
        .collect_tracing(&CollectTracing::new(6, providers))
        .expect("start a session in the demo");
    let id = stream.session_id();
    let (cpu, start) = (crunchers_cpu_seconds(pid), Instant::now());
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stream.read_to_end(&mut bytes).expect("read the session");
        bytes
    });
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let cpu_per_second = (crunchers_cpu_seconds(pid) - cpu) / start.elapsed().as_secs_f64();
    client.stop_tracing(id).expect("stop the session");
    Recorded {
        trace: reader.join().expect("the reader thread"),
        cpu_per_second,
    }
}

/// A cruncher's round number and when it finished, in seconds.
type RoundAt = (u64, f64);

/// The crunchers' rounds a second in `trace`, and the sampler's `Sample` events in it.
fn rounds_per_second(trace: &[u8]) -> (f64, u64) {
    let mut reader = TraceReader::from_slice(trace).expect("a trace");
    // Per cruncher thread: its first and last `request done`.
    let mut seen: HashMap<u64, (RoundAt, RoundAt)> = HashMap::new();
    let mut samples = 0;
    while let Some(e) = reader.next_event().expect("a well-formed trace") {
        if e.metadata.provider == SAMPLER_PROVIDER {
            samples += 1;
            continue;
        }
        if e.metadata.provider != DEMO_PROVIDER {
            continue;
        }
        let fields = e.decode_payload().expect("a tracing event's payload");
        let done = fields
            .iter()
            .any(|(name, v)| *name == "Message" && v.as_str() == Some("request done"));
        let round = fields
            .iter()
            .find(|(name, _)| *name == "round")
            .and_then(|(_, v)| v.as_u64());
        if let (true, Some(round)) = (done, round) {
            let at = (round, e.timestamp_msec() / 1e3);
            seen.entry(e.thread_id())
                .and_modify(|(_, last)| *last = at)
                .or_insert((at, at));
        }
    }
    assert_eq!(
        seen.len(),
        2,
        "expected `request done` from the demo's two crunchers"
    );
    let rate = seen
        .values()
        .map(|&((r0, t0), (r1, t1))| (r1 - r0) as f64 / (t1 - t0))
        .sum();
    (rate, samples)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("demo_overhead: bench");
        return;
    }
    let pairs = env_number("DEMO_OVERHEAD_PAIRS", 15.0) as usize;
    let control = std::env::var("DEMO_OVERHEAD_CONTROL").is_ok_and(|v| v == "1");
    let seconds = env_number("DEMO_OVERHEAD_SECONDS", 2.0);
    let demo = Demo(
        Command::new(env!("CARGO_BIN_EXE_eptrace"))
            .args(["demo-workload", "--seconds", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start eptrace demo-workload"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let client = loop {
        match Client::for_pid(demo.0.id()) {
            Ok(client) => break client,
            Err(Error::NoSocket { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("the demo's diagnostics socket: {e}"),
        }
    };
    let pid = demo.0.id();
    // Warm-up: the demo's threads start, the sampler's rings are allocated.
    session(&client, pid, true, 1.0);
    let (mut ratios, mut cpu_ratios) = (Vec::new(), Vec::new());
    let (mut plain_rates, mut sampled_rates) = (Vec::new(), Vec::new());
    let mut samples = 0;
    for pair in 0..pairs {
        // (rounds a second, the crunchers' CPU seconds per round, Sample events)
        let run = |sampled: bool| {
            let recorded = session(&client, pid, sampled && !control, seconds);
            let (rate, samples) = rounds_per_second(&recorded.trace);
            (rate, recorded.cpu_per_second / rate, samples)
        };
        // Alternate which goes first, so a drift of the machine hits both alike.
        let (plain, sampled) = if pair % 2 == 0 {
            let plain = run(false);
            (plain, run(true))
        } else {
            let sampled = run(true);
            (run(false), sampled)
        };
        samples += sampled.2;
        ratios.push(plain.0 / sampled.0);
        cpu_ratios.push(sampled.1 / plain.1);
        plain_rates.push(plain.0);
        sampled_rates.push(sampled.0);
    }
    drop(demo);
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "demo_overhead{}: {pairs} pairs of {seconds} s sessions: the crunchers' median rounds a \
         second without the sampler {:.1}, with it at 1 kHz {:.1} ({} Sample events per \
         session); median per-pair overhead {:+.2}%, in the crunchers' CPU time per round {:+.2}%",
        if control {
            " (control: no sampler in either session)"
        } else {
            ""
        },
        median(plain_rates),
        median(sampled_rates),
        samples / pairs as u64,
        (median(ratios) - 1.0) * 100.0,
        (median(cpu_ratios) - 1.0) * 100.0,
    );
}
