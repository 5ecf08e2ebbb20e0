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
//! 3. **The agent exporting, its cost**: 20 targets (the profiler crate's
//!    `profiled-service`, one busy worker each, so the 2 cores are shared by all 20), one
//!    agent doing everything it does for a fleet: profiling all of them (100 Hz CPU sampler
//!    and allocation samples, 10 s periods) for Pyroscope, a standing event session in each
//!    for OTLP, counters every 5 s for `/metrics` and OTLP metrics, all sent to a stand-in
//!    backend on loopback that accepts everything. The agent's CPU in % of a core, its peak
//!    RSS, and the requests sent. Targets: ≤ 2 % of a core, ≤ 100 MB.
//! 4. **Continuous profiling, a target's throughput**: one `profiled-service`, its loop
//!    iterations per second over windows alternately without an agent and with one
//!    profiling it at 100 Hz; loss and noise floor as in 2. Target: ≤ 1 %.
//!
//! `cargo bench -p eptrace --bench agent_cost` (`AGENT_COST_TARGETS` default 20,
//! `AGENT_COST_SECONDS` window default 60, `AGENT_COST_PAIRS` default 6,
//! `AGENT_COST_PAIR_SECONDS` default 10; `AGENT_COST_PARTS`, a comma-separated choice of `counters` (1 and 2),
//! `profiling-agent` (3) and `profiling-target` (4), default all).

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
    example("eventpipe-metrics", "counters-demo")
}

/// Builds an example in release mode beside this bench and returns its path.
fn example(package: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let status = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            package,
            "--example",
            name,
        ])
        .arg("--target-dir")
        .arg(profile_dir.parent().unwrap())
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building {name} failed");
    profile_dir.join("examples").join(name)
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

/// A stand-in Pyroscope on loopback: answers every request 200 (reading it whole), and
/// counts them.
fn accepting_server() -> (String, Arc<AtomicU64>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&count);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let line = line.trim_end().to_ascii_lowercase();
                if line.is_empty() {
                    break;
                }
                if let Some(v) = line.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            counted.fetch_add(1, Ordering::Relaxed);
        }
    });
    (url, count)
}

/// Profiling every `profiled-service` for `url`; with `export_all`, OTLP export to the same
/// stand-in and the default counters too, else counters off.
fn profiling_config(url: &str, tag: &str, export_all: bool) -> String {
    let queue = std::env::temp_dir().join(format!(
        "eptrace-agent-cost-{}-{tag}-queue",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&queue);
    let profiling = format!(
        "[profiling]\npyroscope = \"{url}\"\n\
         filter = {{ command_line = \"profiled-service\" }}\nqueue_folder = \"{}\"\n",
        queue.display()
    );
    if export_all {
        format!("{profiling}\n[otlp]\nurl = \"{url}\"\n")
    } else {
        format!("[metrics]\nenabled = false\n\n{profiling}")
    }
}

fn profiling_own_cost() {
    let targets = env_num("AGENT_COST_TARGETS", 20);
    let window = Duration::from_secs(env_num("AGENT_COST_SECONDS", 60));
    let service = example("eventpipe-profiler", "profiled-service");
    let _services: Vec<Kill> = (0..targets)
        .map(|_| {
            Kill(
                Command::new(&service)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("profiled-service starts"),
            )
        })
        .collect();
    let (url, pushed) = accepting_server();
    let (agent, _) = agent(&profiling_config(&url, "own", true), "profiling-own");
    let pid = agent.0.id();
    // Warm-up: a first period of every target pushed.
    std::thread::sleep(Duration::from_secs(15));
    let (t0, _) = usage(pid);
    let p0 = pushed.load(Ordering::Relaxed);
    let began = Instant::now();
    std::thread::sleep(window);
    let elapsed = began.elapsed().as_secs_f64();
    let (t1, hwm) = usage(pid);
    let profiles = pushed.load(Ordering::Relaxed) - p0;
    let cpu = (t1 - t0) as f64 / ticks_per_second() / elapsed * 100.0;
    println!(
        "agent exporting (Pyroscope at 100 Hz, 10 s periods; OTLP; counters): {targets} \
         targets, {profiles} requests sent over {elapsed:.0} s: {cpu:.2} % of a core, peak \
         RSS {:.1} MB",
        hwm as f64 / 1024.0
    );
    drop(agent);
}

/// The target's loop iterations a second over the next `seconds` (its `rate` command).
fn service_rate(
    stdin: &mut std::process::ChildStdin,
    lines: &mut impl Iterator<Item = String>,
    seconds: u64,
) -> f64 {
    use std::io::Write;
    writeln!(stdin, "rate").unwrap();
    lines.next().unwrap();
    std::thread::sleep(Duration::from_secs(seconds));
    writeln!(stdin, "rate").unwrap();
    let line = lines.next().unwrap();
    line.strip_prefix("rate ").unwrap().parse().unwrap()
}

fn profiling_target_throughput() {
    let pairs = env_num("AGENT_COST_PAIRS", 6);
    let seconds = env_num("AGENT_COST_PAIR_SECONDS", 10);
    let service = example("eventpipe-profiler", "profiled-service");
    let mut target = Kill(
        Command::new(&service)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("profiled-service starts"),
    );
    let mut stdin = target.0.stdin.take().unwrap();
    let mut lines = BufReader::new(target.0.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .filter(|l| l.starts_with("rate"));
    let (url, pushed) = accepting_server();
    std::thread::sleep(Duration::from_secs(2));
    let mut losses = Vec::new();
    let mut floor = Vec::new();
    for i in 0..pairs {
        let plain = service_rate(&mut stdin, &mut lines, seconds);
        let plain_again = service_rate(&mut stdin, &mut lines, seconds);
        floor.push((1.0 - plain_again / plain) * 100.0);
        let (agent, _) = agent(
            &profiling_config(&url, &format!("target-{i}"), false),
            "profiling-target",
        );
        // Profiling: the agent found the target and its first period is running.
        std::thread::sleep(Duration::from_secs(2));
        let profiled = service_rate(&mut stdin, &mut lines, seconds);
        drop(agent);
        losses.push((1.0 - profiled / plain_again) * 100.0);
    }
    let (m, lo, hi) = median_and_spread(losses);
    let (fm, flo, fhi) = median_and_spread(floor);
    println!(
        "target throughput under continuous profiling at 100 Hz: loss {m:+.2} % median over \
         {pairs} pairs of {seconds} s (spread {lo:+.2} .. {hi:+.2} %); no agent in either \
         window: {fm:+.2} % ({flo:+.2} .. {fhi:+.2} %); {} profiles pushed",
        pushed.load(Ordering::Relaxed)
    );
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing we need.
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let parts = std::env::var("AGENT_COST_PARTS")
        .unwrap_or_else(|_| "counters,profiling-agent,profiling-target".into());
    let parts: Vec<&str> = parts.split(',').map(str::trim).collect();
    if parts.contains(&"counters") {
        agent_own_cost();
        target_throughput();
    }
    if parts.contains(&"profiling-agent") {
        profiling_own_cost();
    }
    if parts.contains(&"profiling-target") {
        profiling_target_throughput();
    }
}
