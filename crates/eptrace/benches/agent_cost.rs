//! What the agent costs, measured from outside, sustained (not a burst).
//!
//! 1. **The agent's own cost**: 20 Rust targets (the metrics crate's `counters-demo`), one
//!    agent with its default settings (a standing counters session in each target, values
//!    every 5 s) and a scraper reading `/metrics` every 10 s, as Prometheus would. After a
//!    warm-up, the agent's CPU time (user + system, `/proc/PID/stat`) over the window, in %
//!    of one core, and its peak resident set (`VmHWM`). Targets: ≤ 1 % of a core, ≤ 50 MB.
//! 2. **A target's throughput under 1 Hz counters**: this process is the target (it runs
//!    the diagnostics server and so has the built-in counters); one thread hashes for
//!    fixed windows, alternately with no agent and with an agent collecting its counters
//!    every second (`metrics.interval_seconds = 1`). The loss is 1 − (with / without) per
//!    pair; the median over the pairs is printed with the spread, beside the same figure
//!    for pairs where neither window has an agent (the noise floor). Target: ≤ 0.5 %.
//!
//! `cargo bench -p eptrace --bench agent_cost` (`AGENT_COST_TARGETS` default 20,
//! `AGENT_COST_SECONDS` window default 60, `AGENT_COST_PAIRS` default 6,
//! `AGENT_COST_PAIR_SECONDS` default 10).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Killed when dropped.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn counters_demo() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let status = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "eventpipe-metrics",
            "--example",
            "counters-demo",
        ])
        .arg("--target-dir")
        .arg(profile_dir.parent().unwrap())
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building counters-demo failed");
    profile_dir.join("examples/counters-demo")
}

/// Starts an agent with `config`, returns it and its base URL.
fn agent(config: &str, tag: &str) -> (Kill, String) {
    let path = std::env::temp_dir().join(format!(
        "eptrace-agent-cost-{}-{tag}.toml",
        std::process::id()
    ));
    std::fs::write(&path, config).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args(["agent", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the agent starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let base = loop {
        let line = lines
            .next()
            .expect("the agent says where it listens")
            .unwrap();
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split([' ', ';']).next().unwrap().to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (Kill(child), base)
}

fn get(url: &str) -> String {
    let mut r = ureq::get(url).call().expect("GET");
    r.body_mut()
        .with_config()
        .limit(1 << 30)
        .read_to_string()
        .unwrap()
}

/// (user + system ticks, peak RSS in kB) of a process.
fn usage(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    (ticks, hwm)
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

fn agent_own_cost() {
    let targets = env_num("AGENT_COST_TARGETS", 20);
    let window = Duration::from_secs(env_num("AGENT_COST_SECONDS", 60));
    let demo = counters_demo();
    let demos: Vec<Kill> = (0..targets)
        .map(|_| {
            Kill(
                Command::new(&demo)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("counters-demo starts"),
            )
        })
        .collect();
    let (agent, base) = agent("", "own");
    let pid = agent.0.id();
    // Warm-up: every target found and its session running.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed: serde_json::Value =
            serde_json::from_str(&get(&format!("{base}/processes"))).unwrap();
        let found = demos
            .iter()
            .filter(|d| {
                listed
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["pid"] == d.0.id())
            })
            .count();
        if found == demos.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agent found {found} of {targets} targets"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(10));
    let (t0, _) = usage(pid);
    let began = Instant::now();
    let mut scrapes = 0;
    let mut series = 0;
    while began.elapsed() < window {
        let text = get(&format!("{base}/metrics"));
        series = text.lines().filter(|l| !l.starts_with('#')).count();
        scrapes += 1;
        std::thread::sleep(Duration::from_secs(10).min(window.saturating_sub(began.elapsed())));
    }
    let elapsed = began.elapsed().as_secs_f64();
    let (t1, hwm) = usage(pid);
    let cpu = (t1 - t0) as f64 / ticks_per_second() / elapsed * 100.0;
    println!(
        "agent own cost: {targets} targets, {scrapes} scrapes of {series} series over {elapsed:.0} s: \
         {cpu:.2} % of a core, peak RSS {:.1} MB",
        hwm as f64 / 1024.0
    );
    drop(agent);
}

/// Hash rounds a second of one thread over `seconds`.
fn throughput(rounds: &AtomicU64, seconds: u64) -> f64 {
    let r0 = rounds.load(Ordering::Relaxed);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    (rounds.load(Ordering::Relaxed) - r0) as f64 / t0.elapsed().as_secs_f64()
}

fn median_and_spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn target_throughput() {
    let pairs = env_num("AGENT_COST_PAIRS", 6);
    let seconds = env_num("AGENT_COST_PAIR_SECONDS", 10);
    eventpipe::diagnostics::start_server().expect("the diagnostics server starts");
    let rounds = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let rounds = Arc::clone(&rounds);
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..10_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                }
                std::hint::black_box(x);
                rounds.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    let mut losses = Vec::new();
    let mut floor = Vec::new();
    let me = std::process::id();
    for _ in 0..pairs {
        let plain = throughput(&rounds, seconds);
        let plain_again = throughput(&rounds, seconds);
        floor.push((1.0 - plain_again / plain) * 100.0);
        let (agent, base) = agent("[metrics]\ninterval_seconds = 1\n", "target");
        // Collecting: the agent has found this process and its session delivers.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !get(&format!("{base}/metrics")).contains(&format!("pid=\"{me}\"")) {
            assert!(
                Instant::now() < deadline,
                "the agent never collected this process"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let watched = throughput(&rounds, seconds);
        drop(agent);
        losses.push((1.0 - watched / plain_again) * 100.0);
    }
    stop.store(true, Ordering::Relaxed);
    let _ = worker.join();
    let (m, lo, hi) = median_and_spread(losses);
    let (fm, flo, fhi) = median_and_spread(floor);
    println!(
        "target throughput under 1 Hz counters: loss {m:+.2} % median over {pairs} pairs of \
         {seconds} s (spread {lo:+.2} .. {hi:+.2} %); no agent in either window: {fm:+.2} % \
         ({flo:+.2} .. {fhi:+.2} %)"
    );
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing we need.
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    agent_own_cost();
    target_throughput();
}
