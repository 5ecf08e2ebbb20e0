//! `eptrace agent` from the outside: real targets (the metrics crate's `counters-demo`, a
//! Rust program with known counters; `otlp-demo`, with known spans, events and counters;
//! TestApp on .NET 8), real HTTP clients, a real Prometheus scraping the agent, a real
//! OpenTelemetry collector (rotel) receiving its export, a scripted one that is down,
//! failing and back, and requests no client should send.
//!
//! Prometheus comes from `bash ci/prometheus.sh` (Debian's package), rotel from
//! `bash ci/rotel.sh` (PyPI), .NET from `bash ci/dotnet.sh`; without them the tests that
//! need them print one line and pass, unless EVENTPIPE_REQUIRE_PROMETHEUS=1 /
//! EVENTPIPE_REQUIRE_ROTEL=1 (set by .ci/run).

mod support;
use support::eptrace;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use eventpipe_test_support::dotnet;
use eventpipe_test_support::http::{Received, ScriptedServer};
use serde_json::Value;

/// One agent at a time: each watches every process on the machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn demo_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| support::build_example("eventpipe-metrics", "counters-demo"))
        .clone()
}

/// A test's own folder, emptied when made and removed when dropped.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(tag: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("eptrace-agent-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// The Rust target: publishes `Demo/fixed-gauge` = 42.5 MB, tracks its heap; `spin`
/// makes it keep a core busy.
type Demo = support::Program;

fn start_demo() -> Demo {
    support::Program::start(Command::new(demo_path()), "counters-demo")
}

fn spin(demo: &mut Demo) {
    demo.send("spin");
    demo.line("spinning");
}

/// A running agent, and what it logged.
struct Agent {
    child: Child,
    base: String,
    log: Arc<Mutex<Vec<String>>>,
    key: Option<String>,
}

impl Agent {
    fn start(dir: &Path, config: &str) -> Agent {
        Agent::start_with(dir, config, &["--listen", "127.0.0.1:0"])
    }

    fn start_with(dir: &Path, config: &str, args: &[&str]) -> Agent {
        let config_path = dir.join("agent.toml");
        std::fs::write(&config_path, config).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_eptrace"))
            .arg("agent")
            .arg("--config")
            .arg(&config_path)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("eptrace agent starts");
        let err = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    eprintln!("agent: {line}");
                    let _ = tx.send(line.clone());
                    log.lock().unwrap().push(line);
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        let base = loop {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("the agent says where it listens");
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.split([' ', ';']).next().unwrap().to_owned();
            }
        };
        Agent {
            child,
            base,
            log,
            key: None,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn request(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Vec<u8>) {
        http(method, &self.url(path), self.key.as_deref(), body)
    }

    fn get_json(&self, path: &str) -> Value {
        let (status, body) = self.request("GET", path, None);
        assert_eq!(
            status,
            200,
            "GET {path}: {}",
            String::from_utf8_lossy(&body)
        );
        serde_json::from_slice(&body).unwrap()
    }

    /// Waits until the agent lists `pid`.
    fn wait_for_process(&self, pid: u32) -> Value {
        wait_for(&format!("the agent to list process {pid}"), 20, || {
            self.get_json("/processes")
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["pid"] == pid)
                .cloned()
        })
    }

    fn logged(&self, text: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(text))
    }

    fn peak_kb(&self) -> u64 {
        support::peak_resident_kb(self.child.id()).unwrap()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Killed, the agent cannot remove its staging folder itself (a stop does).
        let staging = std::env::temp_dir().join(format!("eptrace-agent-{}", self.child.id()));
        let _ = std::fs::remove_dir_all(staging);
    }
}

fn http(method: &str, url: &str, key: Option<&str>, body: Option<&str>) -> (u16, Vec<u8>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into();
    let auth = key.map(|k| format!("Bearer {k}"));
    let result = match (method, body) {
        ("GET", _) => {
            let mut r = agent.get(url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.call()
        }
        ("DELETE", _) => {
            let mut r = agent.delete(url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.call()
        }
        ("POST", body) => {
            let mut r = agent.post(url).header("Content-Type", "application/json");
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.send(body.unwrap_or(""))
        }
        _ => unreachable!(),
    };
    let mut response = result.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(1 << 32)
        .read_to_vec()
        .unwrap_or_else(|e| panic!("{method} {url}: reading the body: {e}"));
    (status, body)
}

fn wait_for<T>(what: &str, seconds: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "waited {seconds} s for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `eptrace report`'s total event count for a trace file (and that it reads at all).
fn report_events(path: &Path) -> u64 {
    let out = eptrace(&["report", "--json", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "eptrace report {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["total_events"]
        .as_u64()
        .or_else(|| report["events"].as_u64())
        .unwrap_or_else(|| panic!("no event count in {report}"))
}

fn prometheus_binary() -> Option<PathBuf> {
    let found = std::env::var_os("PROMETHEUS")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|p| p.join("prometheus"))
                    .find(|p| p.is_file())
            })
        });
    installed_or_skipping(found, "prometheus", "EVENTPIPE_REQUIRE_PROMETHEUS")
}

/// `found`, the tool `ci/TOOL.sh` installs; when it is `None`, a one-line notice (the test
/// skips), or a failure when `require` (an environment variable) is 1.
fn installed_or_skipping(found: Option<PathBuf>, tool: &str, require: &str) -> Option<PathBuf> {
    if found.is_none() {
        assert!(
            std::env::var_os(require).is_none_or(|v| v != "1"),
            "{tool} is not installed (bash ci/{tool}.sh) and {require}=1"
        );
        println!("skipping: {tool} is not installed (run bash ci/{tool}.sh)");
    }
    found
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn prometheus_scrapes_a_rust_targets_counter_with_the_agents_labels() {
    let _one = serial();
    let Some(prometheus) = prometheus_binary() else {
        return;
    };
    let dir = scratch("prometheus");
    let demo = start_demo();
    let agent = Agent::start(
        &dir,
        "[metrics]\ninterval_seconds = 1\ncounters = [\"Demo[fixed-gauge]\"]\n",
    );
    agent.wait_for_process(demo.pid);
    let port = free_port();
    let host = agent.base.trim_start_matches("http://");
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: eptrace-agent\n    \
             static_configs:\n      - targets: ['{host}']\n"
        ),
    )
    .unwrap();
    let mut server = Command::new(prometheus)
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus starts");
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _server = Kill(&mut server);
    // Ask Prometheus, not the agent: the value must have gone through a real scrape.
    let query = format!("demo_fixed_gauge_bytes{{pid=\"{}\"}}", demo.pid);
    let url = format!(
        "http://127.0.0.1:{port}/api/v1/query?query={}",
        query
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() || b == b'_' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            })
            .collect::<String>()
    );
    let series = wait_for("Prometheus to have scraped the gauge", 60, || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut r = agent.get(&url).call().ok()?;
        let body: Value = serde_json::from_slice(&r.body_mut().read_to_vec().ok()?).ok()?;
        let result = body["data"]["result"].as_array()?.first()?.clone();
        Some(result)
    });
    // 42.5 MB, in bytes (dotnet-monitor's MB: 10^6).
    assert_eq!(series["value"][1], "42500000", "{series}");
    let metric = &series["metric"];
    assert_eq!(metric["process"], "counters-demo", "{series}");
    assert_eq!(metric["runtime"], "rust", "{series}");
    assert_eq!(metric["pid"], demo.pid.to_string(), "{series}");
    assert_eq!(metric["job"], "eptrace-agent", "{series}");
    // The agent's own health is scraped too.
    let (_, body) = agent.request("GET", "/metrics", None);
    let text = String::from_utf8(body).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("eptrace_agent_targets ")),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn one_agent_serves_a_dotnet_and_a_rust_process() {
    let _one = serial();
    let dir = scratch("both");
    let demo = start_demo();
    let dotnet = dotnet::Dotnet::locate();
    let mut app = dotnet.as_ref().map(|d| {
        let mut app = dotnet::App::spawn_with(&d.dotnet8, &d.testapp, &["heap", "300"], &[]);
        drop(app.wait_for_socket("agent, .NET 8"));
        app.line("heap ready", Duration::from_secs(60));
        app
    });
    let agent = Agent::start(
        &dir,
        &format!("egress = \"{}\"\n", dir.join("out").display()),
    );

    // Both listed, each with its runtime.
    let rust = agent.wait_for_process(demo.pid);
    assert_eq!(rust["name"], "counters-demo");
    assert!(
        rust["runtime"].as_str().unwrap().starts_with("Rust"),
        "{rust}"
    );
    if let Some(app) = &app {
        let net = agent.wait_for_process(app.pid);
        assert!(
            net["runtime"].as_str().unwrap().starts_with(".NET 8"),
            "{net}"
        );
    }

    // A streamed trace of the Rust program, read by `eptrace report`.
    let (status, bytes) = agent.request(
        "GET",
        &format!("/trace?pid={}&durationSeconds=2&profile=default", demo.pid),
        None,
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    let path = dir.join("rust.nettrace");
    std::fs::write(&path, &bytes).unwrap();
    assert!(report_events(&path) > 0);

    // POST with a provider list, written to the egress folder as an operation.
    let (status, body) = agent.request(
        "POST",
        &format!("/trace?pid={}&durationSeconds=1&egress=posted.nettrace", demo.pid),
        Some(r#"{"providers": [{"name": "EventPipeRs-Runtime", "keywords": "0xFFFFFFFF", "level": "Verbose", "arguments": {"EventCounterIntervalSec": "1"}}]}"#),
    );
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&body));
    let op: Value = serde_json::from_slice(&body).unwrap();
    let id = op["operationId"].as_str().unwrap().to_owned();
    let done = wait_for("the POSTed trace to be written", 30, || {
        let s = agent.get_json(&format!("/operations/{id}"));
        (s["state"] != "Running").then_some(s)
    });
    assert_eq!(done["state"], "Succeeded", "{done}");
    let posted = dir.join("out/posted.nettrace");
    assert_eq!(done["egressPath"], posted.display().to_string());
    assert!(report_events(&posted) > 0);

    // The Rust program's live heap.
    let (status, bytes) = agent.request("GET", &format!("/heap?pid={}", demo.pid), None);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    let heap = dir.join("rust.heap.nettrace");
    std::fs::write(&heap, &bytes).unwrap();
    let out = eptrace(&["heap", "report", heap.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Live heap"));

    // A gcdump of a Rust program is a client error, said in words.
    let (status, body) = agent.request("GET", &format!("/gcdump?pid={}", demo.pid), None);
    assert_eq!(status, 400);
    let problem: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        problem["detail"].as_str().unwrap().contains("/heap"),
        "{problem}"
    );

    // Live counters as JSON lines.
    let (status, body) = agent.request(
        "GET",
        &format!(
            "/counters?pid={}&durationSeconds=3&counters=Demo[fixed-gauge]",
            demo.pid
        ),
        None,
    );
    assert_eq!(status, 200);
    let gauges: Vec<Value> = String::from_utf8(body)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &Value| v["name"] == "fixed-gauge")
        .collect();
    assert!(!gauges.is_empty());
    assert!(
        gauges
            .iter()
            .all(|g| g["value"] == 42.5 && g["unit"] == "MB"),
        "{gauges:?}"
    );

    // A process that exits is forgotten, and so are its series.
    let rust_pid = demo.pid;
    drop(demo);
    wait_for("the agent to forget the exited process", 20, || {
        let listed = agent.get_json("/processes");
        let (_, metrics) = agent.request("GET", "/metrics", None);
        let metrics = String::from_utf8(metrics).unwrap();
        (!listed
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pid"] == rust_pid)
            && !metrics.contains(&format!("pid=\"{rust_pid}\"")))
        .then_some(())
    });

    // The .NET process: a trace with the runtime's sample profiler, and a complete gcdump.
    let Some(app) = app.as_mut() else {
        let _ = std::fs::remove_dir_all(&dir);
        return;
    };
    let (status, bytes) = agent.request(
        "GET",
        &format!(
            "/trace?pid={}&durationSeconds=2&profile=cpu-sampling",
            app.pid
        ),
        None,
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    let path = dir.join("dotnet.nettrace");
    std::fs::write(&path, &bytes).unwrap();
    assert!(report_events(&path) > 0);
    let (status, bytes) = agent.request("GET", &format!("/gcdump?pid={}", app.pid), None);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    let dump = dir.join("dotnet.gcdump.nettrace");
    std::fs::write(&dump, &bytes).unwrap();
    let out = eptrace(&["gcdump", "report", "--json", dump.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = String::from_utf8_lossy(&out.stdout);
    // TestApp's heap mode holds 20,000 HeapNode objects (tests/dotnet/TestApp.cs).
    assert!(report.contains("HeapNode"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_cpu_rule_fires_once_within_its_limit_and_leaves_a_readable_trace() {
    let _one = serial();
    let dir = scratch("rule");
    let out = dir.join("out");
    let mut demo = start_demo();
    spin(&mut demo);
    let agent = Agent::start(
        &dir,
        &format!(
            r#"
egress = "{}"
[metrics]
interval_seconds = 1
[[rules]]
name = "busy"
filter = {{ name = "counters-demo", runtime = "rust" }}
trigger = {{ kind = "counter", provider = "EventPipeRs-Runtime", counter = "cpu-usage", above = 20, for_seconds = 2 }}
action = {{ kind = "trace", profile = "default", duration_seconds = 2, name = "{{rule}}-{{pid}}" }}
limit = {{ count = 1, window_seconds = 3600 }}
"#,
            out.display()
        ),
    );
    agent.wait_for_process(demo.pid);
    let ops = wait_for("the rule to act and its trace to be written", 60, || {
        let ops = agent.get_json("/operations");
        let list = ops.as_array().unwrap().clone();
        (list
            .iter()
            .any(|o| o["pid"] == demo.pid && o["state"] != "Running"))
        .then_some(list)
    });
    let mine: Vec<&Value> = ops.iter().filter(|o| o["pid"] == demo.pid).collect();
    assert_eq!(mine.len(), 1, "{ops:?}");
    assert_eq!(mine[0]["state"], "Succeeded", "{ops:?}");
    assert_eq!(mine[0]["rule"], "busy");
    let file = out.join(format!("busy-{}.nettrace", demo.pid));
    assert_eq!(mine[0]["egressPath"], file.display().to_string());
    assert!(report_events(&file) > 0);
    assert!(agent.logged("rule `busy` fired for counters-demo"));
    // The CPU stays high: the trigger holds again every 2 s, and the limit holds it back.
    wait_for("the limit to hold a later firing back", 30, || {
        let (_, body) = agent.request("GET", "/metrics", None);
        let text = String::from_utf8(body).unwrap();
        let held = text
            .lines()
            .find_map(|l| l.strip_prefix("eptrace_agent_rule_limited_total{rule=\"busy\"} "))?
            .parse::<f64>()
            .ok()?;
        (held >= 1.0).then_some(())
    });
    let ops = agent.get_json("/operations");
    let mine = ops
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["pid"] == demo.pid)
        .count();
    assert_eq!(mine, 1, "fired more than its limit: {ops}");
    let leftovers: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(leftovers, [format!("busy-{}.nettrace", demo.pid)]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_start_rule_takes_a_heap_snapshot_of_a_new_rust_process() {
    let _one = serial();
    let dir = scratch("start-rule");
    let out = dir.join("out");
    let agent = Agent::start(
        &dir,
        &format!(
            r#"
egress = "{}"
[[rules]]
name = "first-heap"
filter = {{ name = "counters-demo", command_line = "counters-demo" }}
trigger = {{ kind = "process-start" }}
action = {{ kind = "heap" }}
"#,
            out.display()
        ),
    );
    // Started after the agent: found by a later scan.
    let demo = start_demo();
    let op = wait_for("the start rule's heap snapshot", 60, || {
        agent
            .get_json("/operations")
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["pid"] == demo.pid && o["state"] != "Running")
            .cloned()
    });
    assert_eq!(op["state"], "Succeeded", "{op}");
    assert_eq!(op["kind"], "heap");
    let path = op["egressPath"].as_str().unwrap();
    assert!(
        path.ends_with(".heap.nettrace") && path.contains("first-heap"),
        "{path}"
    );
    let report = eptrace(&["heap", "report", path]);
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends raw bytes and returns the status line's code (0: the connection closed first).
fn raw_status(addr: &str, request: &[u8]) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = s.write_all(request);
    let mut head = Vec::new();
    let _ = s.take(4096).read_to_end(&mut head);
    let text = String::from_utf8_lossy(&head);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn hostile_requests_get_the_right_status_and_the_agent_keeps_serving() {
    let _one = serial();
    let dir = scratch("hostile");
    let demo = start_demo();
    let key = "4f1c0e6b2a9d8c7b6a5f4e3d2c1b0a99887766554433221100ffeeddccbbaa01";
    let hash = {
        let out = Command::new("sha256sum")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                c.stdin.take().unwrap().write_all(key.as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        String::from_utf8(out.stdout).unwrap()[..64].to_owned()
    };
    let mut agent = Agent::start(
        &dir,
        &format!(
            "api_keys = [\"sha256:{hash}\"]\negress = \"{}\"\n",
            dir.join("out").display()
        ),
    );
    let addr = agent.base.trim_start_matches("http://").to_owned();

    // No key, a wrong key: 401, and nothing is done.
    let (status, body) = agent.request("GET", "/processes", None);
    assert_eq!(status, 401, "{}", String::from_utf8_lossy(&body));
    let problem: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["status"], 401);
    let (status, _) = http(
        "GET",
        &agent.url(&format!("/trace?pid={}&egress=x.nettrace", demo.pid)),
        Some("not-the-key"),
        None,
    );
    assert_eq!(status, 401);
    agent.key = Some(key.to_owned());
    agent.wait_for_process(demo.pid);
    assert_eq!(agent.get_json("/operations"), serde_json::json!([]));

    // Bad requests, each with its status and a problem document.
    let pid = demo.pid;
    for (path, expected) in [
        (format!("/trace?pid={pid}&egress=../../etc/passwd"), 400),
        (format!("/trace?pid={pid}&egress=%2e%2e%2fescape"), 400),
        (format!("/trace?pid={pid}&egress=.hidden"), 400),
        (format!("/trace?pid={pid}&durationSeconds=-1"), 400),
        (format!("/trace?pid={pid}&durationSeconds=1e9"), 400),
        (format!("/trace?pid={pid}&profile=nonsense"), 400),
        ("/trace?pid=abc".to_owned(), 400),
        ("/trace?pid=4000000000".to_owned(), 404),
        ("/trace".to_owned(), 400),
        (format!("/trace?pid={pid}&pid2=1"), 400),
        ("/counters?pid=%zz".to_owned(), 400),
        ("/nothing/here".to_owned(), 404),
        ("/operations/ffffffff".to_owned(), 404),
        ("/operations/..%2F..%2Fetc".to_owned(), 404),
    ] {
        let (status, body) = agent.request("GET", &path, None);
        assert_eq!(
            status,
            expected,
            "GET {path}: {}",
            String::from_utf8_lossy(&body)
        );
        let problem: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("GET {path}: not a problem document ({e})"));
        assert_eq!(problem["status"], expected, "{problem}");
    }
    let (status, _) = agent.request("POST", &format!("/trace?pid={pid}"), Some("{not json"));
    assert_eq!(status, 400);
    let (status, _) = agent.request(
        "POST",
        &format!("/trace?pid={pid}"),
        Some(r#"{"providers": ["Bad:zz:Verbose"]}"#),
    );
    assert_eq!(status, 400);
    // A 1 MB body is refused from its Content-Length, before a byte of it is read (so the
    // request goes raw: a client still sending would see its connection closed).
    let mut s = TcpStream::connect(agent.base.trim_start_matches("http://")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST /trace?pid={pid} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        1 << 20
    )
    .unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    assert!(reply.contains("\"status\":413"), "{reply}");

    // A huge query string: refused at the head, the connection closed.
    let huge = format!(
        "GET /processes?{} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n",
        "a=1&".repeat(50_000)
    );
    let status = raw_status(&addr, huge.as_bytes());
    assert!(
        status == 431 || status == 414 || status == 400 || status == 0,
        "{status}"
    );
    assert_eq!(raw_status(&addr, b"NONSENSE\r\n\r\n"), 400);

    // Slow clients: 100 connections that never finish their head hold nothing the others
    // need, and are closed after the header timeout.
    let slow: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(b"GET /processes HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
            s
        })
        .collect();
    let began = Instant::now();
    assert!(!agent.get_json("/processes").as_array().unwrap().is_empty());
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );

    // 200 requests at once: every one answered.
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..200)
            .map(|i| {
                let agent = &agent;
                scope.spawn(move || {
                    let path = if i % 2 == 0 { "/processes" } else { "/metrics" };
                    agent.request("GET", path, None).0
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");

    for mut s in slow {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = Vec::new();
        // The agent answers 408 or just closes; either way the read ends.
        let _ = s.read_to_end(&mut buf);
        assert!(began.elapsed() < Duration::from_secs(25));
    }
    let peak_mb = agent.peak_kb() / 1024;
    assert!(
        peak_mb < 100,
        "the agent peaked at {peak_mb} MB through the hostile requests"
    );
    assert_eq!(agent.get_json("/operations"), serde_json::json!([]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_address_off_loopback_needs_a_key_and_a_unix_socket_is_owner_only() {
    let _one = serial();
    let dir = scratch("listen");
    let out = Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args(["agent", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs an API key"), "{err}");

    let socket = dir.join("agent.sock");
    let listen = format!("unix:{}", socket.display());
    let agent = Agent::start_with(&dir, "", &["--listen", &listen]);
    assert!(agent.base.starts_with("unix:"), "{}", agent.base);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&socket).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let mut s = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    s.write_all(b"GET /info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("\"listen\":\"unix:"), "{reply}");
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_process_that_cannot_be_attached_is_skipped_with_the_reason() {
    let _one = serial();
    let dir = scratch("skip");
    // A diagnostics socket of this test's own process that hangs up on every client.
    let me = std::process::id();
    let key = eventpipe_ipc::transport::start_time(me).unwrap();
    let path =
        eventpipe_ipc::transport::socket_path(&eventpipe_ipc::transport::socket_dir(), me, key);
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hangups = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            listener.set_nonblocking(true).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok((s, _)) = listener.accept() {
                    drop(s);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let agent = Agent::start(&dir, "");
    let skipped = wait_for("the agent to skip this process", 20, || {
        let info = agent.get_json("/info");
        info["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["pid"] == me)
            .cloned()
    });
    assert!(
        skipped["reason"].as_str().unwrap().contains("ProcessInfo"),
        "{skipped}"
    );
    assert!(agent.logged(&format!("skipping process {me}")));
    let (status, body) = agent.request("GET", &format!("/trace?pid={me}"), None);
    assert_eq!(status, 403, "{}", String::from_utf8_lossy(&body));
    // A parameter an endpoint does not take is named, with what it takes.
    let (status, body) = agent.request("GET", "/info?name=x", None);
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("unknown parameter `name` (this endpoint takes no parameters)"),
        "{body}"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    hangups.join().unwrap();
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_finishes_a_running_trace_and_leaves_a_whole_file() {
    let _one = serial();
    let dir = scratch("sigterm");
    let out = dir.join("out");
    let demo = start_demo();
    let mut agent = Agent::start(&dir, &format!("egress = \"{}\"\n", out.display()));
    agent.wait_for_process(demo.pid);
    let (status, body) = agent.request(
        "GET",
        &format!(
            "/trace?pid={}&durationSeconds=600&profile=default&egress=long.nettrace",
            demo.pid
        ),
        None,
    );
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&body));

    // Another, stopped early by DELETE: its trace is still whole.
    let (status, body) = agent.request(
        "GET",
        &format!(
            "/trace?pid={}&durationSeconds=600&egress=cancelled.nettrace",
            demo.pid
        ),
        None,
    );
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&body));
    let id = serde_json::from_slice::<Value>(&body).unwrap()["operationId"]
        .as_str()
        .unwrap()
        .to_owned();
    std::thread::sleep(Duration::from_secs(1));
    let (status, body) = agent.request("DELETE", &format!("/operations/{id}"), None);
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&body));
    let ended = wait_for("the cancelled trace to end", 30, || {
        let s = agent.get_json(&format!("/operations/{id}"));
        (s["state"] != "Running").then_some(s)
    });
    assert_eq!(ended["state"], "Succeeded", "{ended}");
    assert!(
        ended["notes"]
            .to_string()
            .contains("stopped before its duration"),
        "{ended}"
    );
    assert!(report_events(&out.join("cancelled.nettrace")) > 0);
    let (status, _) = agent.request("DELETE", &format!("/operations/{id}"), None);
    assert_eq!(status, 409);

    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !out.join("long.nettrace").exists(),
        "the file appeared before it was complete"
    );
    // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
    unsafe { libc::kill(agent.child.id() as i32, libc::SIGTERM) };
    let began = Instant::now();
    let status = loop {
        if let Some(status) = agent.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            began.elapsed() < Duration::from_secs(40),
            "the agent did not stop"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status:?}");
    let file = out.join("long.nettrace");
    assert!(report_events(&file) > 0);
    let names: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut names = names;
    names.sort();
    assert_eq!(names, ["cancelled.nettrace", "long.nettrace"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_target_that_exits_and_a_clean_stop_are_not_broken_streams() {
    let _one = serial();
    let dir = scratch("clean-ends");
    let agent = Agent::start(&dir, "[metrics]\ninterval_seconds = 1\n");
    // Killed while its counters stream runs (mid-block, as an exit cuts it): the agent
    // says the process is gone, not that a stream broke.
    let mut killed = start_demo();
    agent.wait_for_process(killed.pid);
    std::thread::sleep(Duration::from_secs(2));
    let _ = killed.child.kill();
    let _ = killed.child.wait();
    wait_for("the agent to see the process gone", 30, || {
        agent
            .logged(&format!("process {} is gone", killed.pid))
            .then_some(())
    });
    // A target still running when the agent stops on SIGINT.
    let running = start_demo();
    agent.wait_for_process(running.pid);
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
    unsafe { libc::kill(agent.child.id() as i32, libc::SIGINT) };
    wait_for("the agent to stop", 30, || {
        agent.logged("stopped").then_some(())
    });
    let lines = agent.log.lock().unwrap().clone();
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("broke") || l.contains("counters of")),
        "{lines:#?}"
    );
    drop(running);
}

// ---------------------------------------------------------------------------------------
// Continuous profiling to Pyroscope

#[path = "../../insight/tests/common/mod.rs"]
mod converters;

/// Pyroscope's push messages as grafana/pyroscope publishes them (`api/push/v1/push.proto`
/// and `api/types/v1/types.proto`): the messages a push carries, their names and field
/// numbers (the service definition and the OpenAPI annotations left out). protoc decodes
/// the agent's requests with them: a reader that is not our code.
const PUSH_PROTO: &str = r#"syntax = "proto3";
package push.v1;
import "types/v1/types.proto";
message PushRequest { repeated RawProfileSeries series = 1; }
message RawProfileSeries {
  repeated types.v1.LabelPair labels = 1;
  repeated RawSample samples = 2;
}
message RawSample { bytes raw_profile = 1; string ID = 2; }
"#;
const TYPES_PROTO: &str = r#"syntax = "proto3";
package types.v1;
message LabelPair { string name = 1; string value = 2; }
"#;

/// protoc's text-format string escapes undone (`\n`, `\"`, `\\`, octal `\ooo`, …).
fn unescape(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let c = bytes[i + 1];
        i += 2;
        match c {
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'0'..=b'7' => {
                let mut value = u32::from(c - b'0');
                for _ in 0..2 {
                    match bytes.get(i) {
                        Some(d @ b'0'..=b'7') => {
                            value = value * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(value as u8);
            }
            other => out.push(other),
        }
    }
    out
}

/// One series of a push request as protoc decodes it: its labels and its profile.
#[derive(Debug)]
struct Series {
    labels: Vec<(String, String)>,
    profile: Vec<u8>,
    id: String,
}

fn decode_push(python: &Path, dir: &Path, body: &[u8]) -> Vec<Series> {
    std::fs::create_dir_all(dir.join("push/v1")).unwrap();
    std::fs::create_dir_all(dir.join("types/v1")).unwrap();
    std::fs::write(dir.join("push/v1/push.proto"), PUSH_PROTO).unwrap();
    std::fs::write(dir.join("types/v1/types.proto"), TYPES_PROTO).unwrap();
    let mut child = Command::new(python)
        .args(["-m", "grpc_tools.protoc", "-I"])
        .arg(dir)
        .args(["--decode=push.v1.PushRequest", "push/v1/push.proto"])
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "protoc cannot decode the push: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let quoted = |line: &str, key: &str| -> Option<String> {
        let rest = line.trim().strip_prefix(key)?.strip_prefix(": \"")?;
        Some(rest.strip_suffix('"')?.to_owned())
    };
    let mut series = Vec::new();
    let mut name = None;
    for line in text.lines() {
        if line.trim() == "series {" {
            series.push(Series {
                labels: Vec::new(),
                profile: Vec::new(),
                id: String::new(),
            });
        } else if let Some(n) = quoted(line, "name") {
            name = Some(n);
        } else if let Some(v) = quoted(line, "value") {
            let s = series.last_mut().unwrap();
            s.labels.push((name.take().unwrap(), v));
        } else if let Some(p) = quoted(line, "raw_profile") {
            series.last_mut().unwrap().profile = unescape(&p);
        } else if let Some(id) = quoted(line, "ID") {
            series.last_mut().unwrap().id = id;
        }
    }
    series
}

fn go_pprof(go: &Path, file: &Path, args: &[&str]) -> String {
    let mut all: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    all.push(file.as_os_str());
    String::from_utf8(converters::go_pprof(go, all)).unwrap()
}

fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn continuous_profiles_reach_pyroscope_through_failures_and_read_in_pprof() {
    let Some(python) = converters::protoc_python("the Pyroscope push test") else {
        return;
    };
    let Some(go) = converters::go("the Pyroscope push test") else {
        return;
    };
    let _one = serial();
    let dir = scratch("pyroscope");
    // Down for a while: two 500s and a 429 (Retry-After: 1), then it takes everything.
    let server = ScriptedServer::start(0, vec![500, 500, 429], scripted);
    let url = server.url();
    let service = support::build_example("eventpipe-profiler", "profiled-service");
    let mut program = support::Program::start(Command::new(&service), "profiled-service");
    let config = format!(
        r#"
[metrics]
enabled = false

[profiling]
pyroscope = "{url}"
period_seconds = 2
filter = {{ command_line = "profiled-service" }}
queue_folder = "{}"
headers = {{ "X-Scope-OrgID" = "tenant-7" }}
"#,
        dir.join("queue").display()
    );
    let agent = Agent::start(&dir, &config);
    let accepted = |p: &[Received]| p.iter().filter(|p| p.status == 200).count();
    wait_for("three profiles accepted after the failures", 60, || {
        (accepted(&server.received()) >= 3).then_some(())
    });
    let pushes = server.received();
    assert_eq!(
        pushes.iter().take(3).map(|p| p.status).collect::<Vec<_>>(),
        [500, 500, 429]
    );
    // The request that failed is the one sent again: the same series and period.
    assert_eq!(
        pushes[0].body, pushes[3].body,
        "the failed push is retried as it was"
    );

    // The agent logged the failure once and the recovery, and counts both.
    assert!(agent.logged("pyroscope:") && agent.logged("does not take"));
    assert!(agent.logged("answers again"));
    let (_, metrics) = agent.request("GET", "/metrics", None);
    let metrics = String::from_utf8(metrics).unwrap();
    let sent = metric(
        &metrics,
        "eptrace_agent_export_sent_total{backend=\"pyroscope\"}",
    );
    assert!(sent.is_some_and(|n| n >= 3.0), "{metrics}");
    let retries = metric(
        &metrics,
        "eptrace_agent_export_retries_total{backend=\"pyroscope\"}",
    );
    assert!(retries.is_some_and(|n| n >= 3.0), "{metrics}");
    assert_eq!(
        metric(
            &metrics,
            "eptrace_agent_export_dropped_total{backend=\"pyroscope\"}"
        ),
        Some(0.0)
    );
    assert!(
        metric(
            &metrics,
            "eptrace_agent_profiling_periods_total{outcome=\"ok\"}"
        )
        .is_some_and(|n| n >= 2.0),
        "{metrics}"
    );

    // Every push is the push API's call, decoded by protoc against the published schema.
    let mut kinds = std::collections::BTreeMap::new();
    for (i, push) in pushes.iter().enumerate() {
        assert_eq!(push.path, "/push.v1.PusherService/Push");
        assert!(push
            .headers
            .contains(&("content-type".into(), "application/proto".into())));
        assert!(push
            .headers
            .contains(&("x-scope-orgid".into(), "tenant-7".into())));
        let series = decode_push(&python, &dir.join("proto"), &push.body);
        assert_eq!(series.len(), 1);
        let s = &series[0];
        let label = |k: &str| {
            s.labels
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(label("service_name").as_deref(), Some("profiled-service"));
        assert_eq!(label("pid"), Some(program.pid.to_string()));
        assert_eq!(label("runtime").as_deref(), Some("rust"));
        assert!(label("host").is_some_and(|h| !h.is_empty()));
        assert_eq!(s.id.len(), 36, "a UUID: {}", s.id);
        let kind = label("__name__").unwrap();
        if kind == "memory" {
            assert_eq!(label("__delta__").as_deref(), Some("false"));
        }
        let file = dir.join(format!("push-{i}.pb.gz"));
        std::fs::write(&file, &s.profile).unwrap();
        kinds.insert(kind, file);
    }

    // Go's pprof reads the embedded profiles: CPU time with the sampler's period, the
    // program's hot function by name, the program's build id in its mapping.
    let cpu = kinds.get("process_cpu").expect("a CPU profile was pushed");
    let raw = go_pprof(&go, cpu, &["-raw", "-symbolize=none"]);
    assert!(raw.contains("samples/count cpu/nanoseconds"), "{raw}");
    assert!(raw.contains("Period: 10000000"), "100 Hz: {raw}");
    // Pyroscope makes a series of every string sample label: the samples carry the
    // numeric thread id only, not a `thread` string that grows with thread ids.
    assert!(raw.contains("thread_id:["), "{raw}");
    assert!(!raw.contains("thread:["), "{raw}");
    let top = go_pprof(&go, cpu, &["-top", "-sample_index=cpu", "-symbolize=none"]);
    let hot = top
        .lines()
        .find(|l| l.contains("burn_cpu"))
        .unwrap_or_else(|| panic!("burn_cpu not in the CPU profile:\n{top}"));
    let flat: f64 = hot
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.trim_end_matches('%').parse().ok())
        .unwrap();
    assert!(flat > 40.0, "burn_cpu takes most of the CPU: {hot}\n{top}");
    // pprof's first mapping is the main binary: Go's pprof names the profile after it.
    let binary = service.file_name().unwrap().to_string_lossy();
    assert!(
        top.lines().any(|l| l == format!("File: {binary}")),
        "the program's binary is the main mapping:\n{top}"
    );
    let build_id = {
        let out = Command::new("readelf").arg("-n").arg(&service).output();
        out.ok().and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_owned))
        })
    };
    if let Some(id) = build_id {
        assert!(raw.contains(&id), "the mapping keeps build id {id}: {raw}");
    }
    let memory = kinds
        .get("memory")
        .expect("an allocation profile was pushed");
    let raw = go_pprof(&go, memory, &["-raw", "-symbolize=none"]);
    assert!(raw.contains("alloc_space/bytes"), "{raw}");
    let top = go_pprof(
        &go,
        memory,
        &["-top", "-sample_index=alloc_space", "-symbolize=none"],
    );
    assert!(top.contains("allocate_records"), "{top}");
    program.send("quit");
    drop(agent);
}

#[test]
fn profiles_wait_within_their_bound_while_pyroscope_is_away_and_flow_when_it_returns() {
    let _one = serial();
    let dir = scratch("pyroscope-away");
    // Nothing listens on this port until later.
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let service = support::build_example("eventpipe-profiler", "profiled-service");
    let mut program = support::Program::start(Command::new(&service), "profiled-service");
    let queue = dir.join("queue");
    let config = format!(
        r#"
[metrics]
enabled = false

[profiling]
pyroscope = "{url}"
period_seconds = 1
allocations = false
filter = {{ command_line = "profiled-service" }}
queue_folder = "{}"
queue_max_profiles = 3
"#,
        queue.display()
    );
    let agent = Agent::start(&dir, &config);
    let series = |name: &str| {
        let (_, text) = agent.request("GET", "/metrics", None);
        metric(
            &String::from_utf8(text).unwrap(),
            &format!("{name}{{backend=\"pyroscope\"}}"),
        )
    };
    wait_for("profiles dropped beyond the queue's bound", 60, || {
        series("eptrace_agent_export_dropped_total")
            .filter(|&n| n >= 2.0)
            .map(|_| ())
    });
    // Profiling goes on; three profiles wait, on disk; nothing was sent.
    assert_eq!(series("eptrace_agent_export_queued"), Some(3.0));
    assert_eq!(series("eptrace_agent_export_failing"), Some(1.0));
    assert_eq!(series("eptrace_agent_export_sent_total"), Some(0.0));
    let files = std::fs::read_dir(&queue)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "req")
        })
        .count();
    assert_eq!(files, 3);
    assert!(
        agent.logged("does not take"),
        "the agent says the server is away"
    );

    // The server returns: what waited arrives, and what comes after.
    let server = ScriptedServer::start(port, vec![], scripted);
    wait_for("the queue to drain into the returned server", 90, || {
        (server.received().len() >= 4).then_some(())
    });
    assert!(series("eptrace_agent_export_sent_total").is_some_and(|n| n >= 4.0));
    assert_eq!(series("eptrace_agent_export_failing"), Some(0.0));
    assert!(agent.logged("answers again"));
    program.send("quit");
    drop(agent);
}

// ---- OpenTelemetry export ----

use eventpipe_export::otlp::proto;
use eventpipe_test_support::otlp::attr;
use prost::Message as _;
use proto::common::v1::any_value::Value as Any;
use proto::common::v1::KeyValue;

fn otlp_demo_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| support::build_example("eptrace", "otlp-demo"))
        .clone()
}

/// The program with known spans, events and counters (see examples/otlp-demo.rs).
fn start_otlp_demo() -> support::Program {
    support::Program::start(Command::new(otlp_demo_path()), "otlp-demo")
}

/// `ci/rotel.sh`'s collector (or $ROTEL); `None` (after a one-line notice) when it is
/// not installed, unless EVENTPIPE_REQUIRE_ROTEL=1.
fn rotel_binary() -> Option<PathBuf> {
    let found = std::env::var_os("ROTEL").map(PathBuf::from).or_else(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/rotel/rotel-agent");
        path.is_file().then_some(path)
    });
    installed_or_skipping(found, "rotel", "EVENTPIPE_REQUIRE_ROTEL")
}

/// What the scripted backends answer with: the status, named.
fn scripted(status: u16) -> String {
    format!("scripted {status}")
}

/// Everything the accepted requests held, decoded.
#[derive(Default, Debug)]
struct Collected {
    spans: Vec<(Vec<KeyValue>, String, proto::trace::v1::Span)>,
    logs: Vec<(Vec<KeyValue>, String, proto::logs::v1::LogRecord)>,
    metrics: Vec<(Vec<KeyValue>, String, proto::metrics::v1::Metric)>,
}

/// Decodes the `$request` in `$body` and pushes each item under each scope under each
/// resource into `$into`, with its resource's attributes and its scope's name (the three
/// signals name their levels differently).
macro_rules! flatten {
    ($body:expr, $request:ty, $resources:ident, $scopes:ident, $items:ident, $into:expr) => {
        for resource in <$request>::decode($body).unwrap().$resources {
            let attrs = resource.resource.map(|r| r.attributes).unwrap_or_default();
            for scope in resource.$scopes {
                let name = scope.scope.map(|s| s.name).unwrap_or_default();
                for item in scope.$items {
                    $into.push((attrs.clone(), name.clone(), item));
                }
            }
        }
    };
}

fn decode_all(received: &[Received]) -> Collected {
    use proto::collector::logs::v1::ExportLogsServiceRequest as Logs;
    use proto::collector::metrics::v1::ExportMetricsServiceRequest as Metrics;
    use proto::collector::trace::v1::ExportTraceServiceRequest as Traces;
    let mut c = Collected::default();
    for r in received.iter().filter(|r| r.status == 200) {
        let b = &r.body[..];
        match r.path.rsplit_once("/v1/").map(|(_, signal)| signal) {
            Some("traces") => flatten!(b, Traces, resource_spans, scope_spans, spans, c.spans),
            Some("logs") => flatten!(b, Logs, resource_logs, scope_logs, log_records, c.logs),
            Some("metrics") => flatten!(
                b,
                Metrics,
                resource_metrics,
                scope_metrics,
                metrics,
                c.metrics
            ),
            _ => panic!("a request to {}", r.path),
        }
    }
    c
}

fn of_pid(resource: &[KeyValue], pid: u32) -> bool {
    attr(resource, "process.pid") == Some(&Any::IntValue(i64::from(pid)))
}

/// The value of a one-point gauge or sum.
fn point(metric: &proto::metrics::v1::Metric) -> f64 {
    use proto::metrics::v1::metric::Data;
    use proto::metrics::v1::number_data_point::Value as N;
    let p = match &metric.data {
        Some(Data::Gauge(g)) => &g.data_points[0],
        Some(Data::Sum(s)) => &s.data_points[0],
        other => panic!("{other:?}"),
    };
    match p.value {
        Some(N::AsDouble(v)) => v,
        Some(N::AsInt(v)) => v as f64,
        None => panic!("no value"),
    }
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `name{labels}`'s value in the agent's `/metrics`.
fn scraped(agent: &Agent, series: &str) -> Option<f64> {
    let (_, body) = agent.request("GET", "/metrics", None);
    String::from_utf8(body)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn rotel_receives_a_rust_targets_spans_logs_and_metrics() {
    let _one = serial();
    let Some(rotel) = rotel_binary() else {
        return;
    };
    let dir = scratch("otlp-rotel");
    // rotel passes what it receives on, re-encoded, to this server over OTLP/HTTP: the
    // test reads what the collector understood, typed, not its log's text.
    let sink = ScriptedServer::start(0, vec![], scripted);
    let (http_port, grpc_port) = (free_port(), free_port());
    let rotel_dir = dir.join("rotel");
    std::fs::create_dir_all(&rotel_dir).unwrap();
    let _rotel = Kill(
        Command::new(&rotel)
            .current_dir(&rotel_dir)
            .args(["start", "--otlp-http-endpoint"])
            .arg(format!("127.0.0.1:{http_port}"))
            .arg("--otlp-grpc-endpoint")
            .arg(format!("127.0.0.1:{grpc_port}"))
            .args(["--exporter", "otlp", "--otlp-exporter-protocol", "http"])
            .args([
                "--otlp-exporter-compression",
                "none",
                "--batch-timeout",
                "200ms",
            ])
            .arg("--otlp-exporter-endpoint")
            .arg(format!("http://127.0.0.1:{}", sink.port()))
            .arg("--pid-file")
            .arg(rotel_dir.join("rotel.pid"))
            .arg("--log-file")
            .arg(rotel_dir.join("rotel.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("rotel starts"),
    );
    wait_for("rotel to listen", 30, || {
        TcpStream::connect(("127.0.0.1", http_port)).ok()
    });
    let mut demo = start_otlp_demo();
    let agent = Agent::start_with(
        &dir,
        "[metrics]\ninterval_seconds = 1\ncounters = [\"OtlpDemo\"]\n\
         [otlp]\nproviders = [\"otlp_demo:*:4\"]\nbatch_seconds = 0.5\n",
        &[
            "--listen",
            "127.0.0.1:0",
            "--otlp",
            &format!("http://127.0.0.1:{http_port}"),
        ],
    );
    agent.wait_for_process(demo.pid);
    // The session starts in its own time: warm-up work (batch 0) until a span arrives.
    wait_for("the first span to reach the collector", 60, || {
        demo.send("work 1 0");
        demo.line("worked");
        decode_all(&sink.received())
            .spans
            .iter()
            .any(|(r, _, s)| of_pid(r, demo.pid) && s.name == "request")
            .then_some(())
    });
    demo.send("work 5 7");
    demo.line("worked");
    let batch7 = |attributes: &[KeyValue]| attr(attributes, "batch") == Some(&Any::IntValue(7));
    let c = wait_for(
        "batch 7 and the counters to reach the collector",
        60,
        || {
            let c = decode_all(&sink.received());
            let loads = c
                .spans
                .iter()
                .filter(|(r, _, s)| of_pid(r, demo.pid) && s.name == "load")
                .count();
            let logs = c
                .logs
                .iter()
                .filter(|(r, _, l)| of_pid(r, demo.pid) && batch7(&l.attributes))
                .count();
            let totals = c
                .metrics
                .iter()
                .filter(|(r, _, m)| of_pid(r, demo.pid) && m.name == "fixed-total")
                .count();
            (loads >= 6 && logs == 5 && totals >= 2).then_some(c)
        },
    );

    // The resource: the process.
    let (resource, scope, _) = c
        .spans
        .iter()
        .find(|(r, _, _)| of_pid(r, demo.pid))
        .unwrap();
    assert_eq!(scope, "otlp_demo");
    assert_eq!(
        attr(resource, "service.name"),
        Some(&Any::StringValue("otlp-demo".into()))
    );
    assert_eq!(
        attr(resource, "process.runtime.name"),
        Some(&Any::StringValue("rust".into()))
    );
    assert!(matches!(attr(resource, "host.name"), Some(Any::StringValue(h)) if !h.is_empty()));

    // Spans: five requests of batch 7, each the parent of one load, in a trace of its own.
    let requests: Vec<&proto::trace::v1::Span> = c
        .spans
        .iter()
        .filter(|(r, _, s)| of_pid(r, demo.pid) && s.name == "request" && batch7(&s.attributes))
        .map(|(_, _, s)| s)
        .collect();
    assert_eq!(requests.len(), 5, "{requests:#?}");
    let mut ids: Vec<i64> = requests
        .iter()
        .map(|s| match attr(&s.attributes, "id") {
            Some(Any::IntValue(i)) => *i,
            other => panic!("id {other:?}"),
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [0, 1, 2, 3, 4]);
    let mut traces = std::collections::BTreeSet::new();
    for request in &requests {
        assert!(request.parent_span_id.is_empty(), "a root: {request:?}");
        assert_eq!(
            attr(&request.attributes, "route"),
            Some(&Any::StringValue("/items".into()))
        );
        assert_eq!(
            attr(&request.attributes, "ratio"),
            Some(&Any::DoubleValue(0.5))
        );
        assert_eq!(
            attr(&request.attributes, "cached"),
            Some(&Any::BoolValue(true))
        );
        assert!(request.end_time_unix_nano >= request.start_time_unix_nano);
        assert_eq!((request.trace_id.len(), request.span_id.len()), (16, 8));
        assert!(request.trace_id.iter().any(|&b| b != 0));
        traces.insert(request.trace_id.clone());
        let children: Vec<&proto::trace::v1::Span> = c
            .spans
            .iter()
            .map(|(_, _, s)| s)
            .filter(|s| s.parent_span_id == request.span_id)
            .collect();
        assert_eq!(children.len(), 1, "{request:?}");
        let load = children[0];
        assert_eq!(load.name, "load");
        assert_eq!(load.trace_id, request.trace_id);
        assert_eq!(attr(&load.attributes, "bytes"), Some(&Any::IntValue(1024)));
        assert!(load.start_time_unix_nano >= request.start_time_unix_nano);
        assert!(load.end_time_unix_nano <= request.end_time_unix_nano);
        // The event, in the load span, with its typed fields.
        let logs: Vec<&proto::logs::v1::LogRecord> = c
            .logs
            .iter()
            .map(|(_, _, l)| l)
            .filter(|l| l.span_id == load.span_id)
            .collect();
        assert_eq!(logs.len(), 1, "{load:?}");
        let log = logs[0];
        assert_eq!(log.trace_id, request.trace_id);
        assert_eq!(log.event_name, "loaded");
        assert_eq!(log.severity_text, "INFO");
        assert_eq!(
            log.body.as_ref().and_then(|b| b.value.clone()),
            Some(Any::StringValue("loaded rows".into()))
        );
        for (key, value) in [
            ("batch", Any::IntValue(7)),
            ("rows", Any::IntValue(3)),
            ("mean", Any::DoubleValue(2.5)),
            ("ok", Any::BoolValue(true)),
            ("who", Any::StringValue("db".into())),
        ] {
            assert_eq!(attr(&log.attributes, key), Some(&value), "{key}");
        }
    }
    assert_eq!(traces.len(), 5);

    // Metrics: the gauge's value, and the rate of 7 per interval as a cumulative sum.
    let gauge = c
        .metrics
        .iter()
        .find(|(r, s, m)| of_pid(r, demo.pid) && s == "OtlpDemo" && m.name == "fixed-gauge")
        .map(|(_, _, m)| m)
        .expect("fixed-gauge");
    assert_eq!(point(gauge), 42.5);
    assert_eq!(gauge.unit, "MBy");
    let totals: Vec<f64> = c
        .metrics
        .iter()
        .filter(|(r, s, m)| of_pid(r, demo.pid) && s == "OtlpDemo" && m.name == "fixed-total")
        .map(|(_, _, m)| {
            let Some(proto::metrics::v1::metric::Data::Sum(sum)) = &m.data else {
                panic!("{m:?}")
            };
            assert!(sum.is_monotonic);
            assert_eq!(
                sum.aggregation_temporality,
                proto::metrics::v1::AggregationTemporality::Cumulative as i32
            );
            point(m)
        })
        .collect();
    for pair in totals.windows(2) {
        assert_eq!(pair[1] - pair[0], 7.0, "{totals:?}");
    }

    // The agent's own account of it.
    assert!(scraped(&agent, "eptrace_agent_export_sent_total{backend=\"otlp\"}").unwrap() >= 3.0);
    assert_eq!(
        scraped(
            &agent,
            "eptrace_agent_export_rejected_total{backend=\"otlp\"}"
        ),
        Some(0.0)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_collector_down_then_failing_then_back_is_retried_bounded_and_reported() {
    let _one = serial();
    let dir = scratch("otlp-down");
    let mut demo = start_otlp_demo();
    // Nothing listens on the port at first: the collector is down.
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let agent = Agent::start_with(
        &dir,
        "[metrics]\ninterval_seconds = 1\ncounters = [\"OtlpDemo\"]\n\
         [otlp]\nproviders = [\"otlp_demo:*:4\"]\nbatch_seconds = 0.2\n\
         queue_requests = 3\nretry_max_seconds = 1\n",
        &["--listen", "127.0.0.1:0", "--otlp", &url],
    );
    agent.wait_for_process(demo.pid);
    let dropped = "eptrace_agent_export_dropped_total{backend=\"otlp\"}";
    wait_for("the bounded queue to drop its oldest requests", 60, || {
        demo.send("work 2 1");
        demo.line("worked");
        (scraped(&agent, dropped)? > 0.0).then_some(())
    });
    // One line says the collector is unreachable, naming it and what it did not take.
    wait_for("the log to say the collector is unreachable", 10, || {
        agent
            .log
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains(&format!("otlp: {url} does not take")) && l.contains("/v1/"))
            .cloned()
    });
    assert!(scraped(&agent, "eptrace_agent_export_queued{backend=\"otlp\"}").unwrap() <= 3.0);
    assert_eq!(
        scraped(&agent, "eptrace_agent_export_failing{backend=\"otlp\"}"),
        Some(1.0)
    );
    assert!(
        scraped(
            &agent,
            "eptrace_agent_export_retries_total{backend=\"otlp\"}"
        )
        .unwrap()
            > 0.0
    );
    // The agent keeps watching the target meanwhile.
    let gauge = format!(
        "otlpdemo_fixed_gauge_bytes{{pid=\"{}\",process=\"otlp-demo\",runtime=\"rust\"}}",
        demo.pid
    );
    let value = wait_for("the target's gauge in /metrics", 30, || {
        scraped(&agent, &gauge)
    });
    assert_eq!(value, 42_500_000.0);

    // The collector comes back, failing at first: 500, 500, 429 (Retry-After); then it
    // takes one, refuses the next for good (400), and takes everything after.
    let server = ScriptedServer::start(port, vec![500, 500, 429, 200, 400], scripted);
    wait_for("the queue to drain into the collector", 60, || {
        let sent = scraped(&agent, "eptrace_agent_export_sent_total{backend=\"otlp\"}")?;
        let failing = scraped(&agent, "eptrace_agent_export_failing{backend=\"otlp\"}")?;
        (sent >= 3.0 && failing == 0.0).then_some(())
    });
    let statuses: Vec<u16> = server.received().iter().map(|r| r.status).take(5).collect();
    assert_eq!(statuses, [500, 500, 429, 200, 400]);
    assert!(agent.logged(&format!("otlp: {url} answers again")));
    assert!(
        agent.logged(&format!("otlp: {url} refused")) && agent.logged("HTTP 400: scripted 400"),
        "the refusal is logged"
    );
    assert_eq!(
        scraped(
            &agent,
            "eptrace_agent_export_rejected_total{backend=\"otlp\"}"
        ),
        Some(1.0)
    );
    // What arrives after the outage is whole OTLP, of this target.
    demo.send("work 1 2");
    demo.line("worked");
    let c = wait_for("new spans after the recovery", 30, || {
        let c = decode_all(&server.received());
        c.spans
            .iter()
            .any(|(r, _, s)| {
                of_pid(r, demo.pid) && attr(&s.attributes, "batch") == Some(&Any::IntValue(2))
            })
            .then_some(c)
    });
    assert!(c
        .metrics
        .iter()
        .any(|(r, _, m)| of_pid(r, demo.pid) && m.name == "fixed-gauge"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_dotnet_process_is_profiled_as_thread_time_with_managed_frames_by_name() {
    let Some(go) = converters::go("the .NET continuous profiling test") else {
        return;
    };
    let Some(dotnet) = dotnet::Dotnet::locate() else {
        return;
    };
    let _one = serial();
    let dir = scratch("pyroscope-dotnet");
    let mut app = dotnet::App::spawn_with(&dotnet.dotnet8, &dotnet.testapp, &["forever"], &[]);
    drop(app.wait_for_socket("continuous profiling, .NET 8"));
    let server = ScriptedServer::start(0, vec![], scripted);
    let url = server.url();
    let config = format!(
        r#"
[metrics]
enabled = false

[profiling]
pyroscope = "{url}"
api = "ingest"
period_seconds = 2
filter = {{ runtime = "dotnet" }}
queue_folder = "{}"
"#,
        dir.join("queue").display()
    );
    let agent = Agent::start(&dir, &config);
    let pid = app.pid.to_string();
    let push = wait_for("a profile of the .NET process", 90, || {
        server
            .received()
            .into_iter()
            .find(|p| p.path.contains(&format!("pid%3D{pid}")))
    });
    // The /ingest call: the service and its labels in `name`, the period, the format.
    assert!(push.path.starts_with("/ingest?name="), "{}", push.path);
    assert!(push.path.contains("runtime%3Ddotnet"), "{}", push.path);
    for part in ["&from=", "&until=", "&format=pprof", "&sampleRate="] {
        assert!(push.path.contains(part), "{part} in {}", push.path);
    }
    let file = dir.join("dotnet.pb.gz");
    std::fs::write(&file, &push.body).unwrap();
    // .NET's samples are thread time, stored as Pyroscope's own .NET profiler stores its
    // wall time (`wall:wall:nanoseconds:cpu:nanoseconds`); the managed frames have their
    // names.
    let raw = go_pprof(&go, &file, &["-raw", "-symbolize=none"]);
    assert!(raw.contains("samples/count wall/nanoseconds"), "{raw}");
    assert!(raw.contains("PeriodType: cpu nanoseconds"), "{raw}");
    let top = go_pprof(&go, &file, &["-top", "-symbolize=none", "-nodecount=200"]);
    assert!(
        top.contains("TestApp") || top.contains("Program.Main"),
        "a managed frame of the app by name:\n{top}"
    );
    assert!(
        !agent.logged("--samples managed"),
        "the agent asks for thread time; the CLI's hint is not its log's"
    );
    drop(agent);
    drop(app);
}

/// The value of `family`'s series for `pid` and `generation` in a `/metrics` text.
fn gc_total(text: &str, family: &str, pid: u32, generation: u32) -> Option<f64> {
    let pid = format!("pid=\"{pid}\"");
    let generation = format!("generation=\"{generation}\"");
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .find(|l| l.contains(&pid) && l.contains(&generation))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The agent's rules on a .NET runtime's events, and its GC totals, held against what
/// AnalyzeApp's runtime says of itself (`GC.CollectionCount`, `GC.GetTotalPauseDuration`)
/// and the exceptions it throws (tests/dotnet/AnalyzeApp.cs): 40 ScenarioExceptions and 25
/// InvalidOperationExceptions, then 12 work items that starve the thread pool.
#[test]
fn dotnet_runtime_rules_and_gc_totals_agree_with_the_runtimes_own_accounting() {
    let _one = serial();
    dotnet::with_dotnet(|d| {
        let dir = scratch("runtime-rules");
        let out = dir.join("out");
        let mut command = Command::new(&d.dotnet8);
        command.arg(&d.analyzeapp).args(["--wait", "--hold"]);
        let mut app = support::Program::start(command, "AnalyzeApp --wait --hold");
        let rule = |name: &str, trigger: &str, count: u32| {
            format!(
                "[[rules]]\nname = \"{name}\"\nfilter = {{ command_line = \"AnalyzeApp.exe\" }}\n\
                 trigger = {trigger}\naction = {{ kind = \"trace\", duration_seconds = 1, \
                 providers = [\"Microsoft-Windows-DotNETRuntime:0x1:4\"] }}\n\
                 limit = {{ count = {count}, window_seconds = 3600 }}\n"
            )
        };
        let config = [
            format!("egress = \"{}\"\n[metrics]\ninterval_seconds = 1\n", out.display()),
            // Every gen2 GC (all paused longer than 0 ms), and none of them: no GC here
            // pauses for 10 s.
            rule("gen2", r#"{ kind = "gc-pause", above_ms = 0, generation = 2 }"#, 100),
            rule("ten-seconds", r#"{ kind = "gc-pause", above_ms = 10000 }"#, 100),
            // 65 exceptions within 10 s reach 6.5/s exactly, not 6.6/s.
            rule("all-65", r#"{ kind = "exceptions", per_second = 6.5 }"#, 100),
            rule("all-66", r#"{ kind = "exceptions", per_second = 6.6 }"#, 100),
            rule(
                "invalid-25",
                r#"{ kind = "exceptions", per_second = 2.5, exception_type = "System.InvalidOperationException" }"#,
                100,
            ),
            rule(
                "invalid-26",
                r#"{ kind = "exceptions", per_second = 2.6, exception_type = "System.InvalidOperationException" }"#,
                100,
            ),
            rule("starved", r#"{ kind = "thread-pool-starvation" }"#, 1),
        ]
        .concat();
        let agent = Agent::start(&dir, &config);
        agent.wait_for_process(app.pid);
        // The session runs (and carries the runtime's events) once the GC totals exist.
        wait_for("the agent's GC totals of the app", 30, || {
            let (_, body) = agent.request("GET", "/metrics", None);
            gc_total(
                &String::from_utf8_lossy(&body),
                "dotnet_gc_collections_total",
                app.pid,
                0,
            )
        });
        app.send("go");
        let t = |app: &mut support::Program, key: &str| -> f64 {
            app.line(&format!("{key} ")).parse().unwrap()
        };
        let start = [
            t(&mut app, "start_gc0"),
            t(&mut app, "start_gc1"),
            t(&mut app, "start_gc2"),
        ];
        let start_pause = t(&mut app, "start_pause_ms");
        let end = [t(&mut app, "gc0"), t(&mut app, "gc1"), t(&mut app, "gc2")];
        let end_pause = t(&mut app, "pause_ms");
        assert_eq!(t(&mut app, "thrown_scenario_one"), 40.0);
        assert_eq!(t(&mut app, "thrown_scenario_two"), 25.0);
        app.line("done");

        // CollectionCount(n) counts every GC of generation n or higher.
        let runs = |n: usize| end[n] - start[n];
        let by_generation = [runs(0) - runs(1), runs(1) - runs(2), runs(2)];
        assert!(by_generation[2] >= 2.0, "{by_generation:?}");
        let scraped = wait_for("the GC totals to count every GC", 30, || {
            let (_, body) = agent.request("GET", "/metrics", None);
            let text = String::from_utf8_lossy(&body).into_owned();
            let counts: Vec<f64> = (0..3)
                .map(|g| gc_total(&text, "dotnet_gc_collections_total", app.pid, g))
                .collect::<Option<_>>()?;
            (counts == by_generation).then_some(text)
        });
        let pause_ms: f64 = (0..3)
            .map(|g| gc_total(&scraped, "dotnet_gc_pause_seconds_total", app.pid, g).unwrap())
            .sum::<f64>()
            * 1000.0;
        let runtime_pause = end_pause - start_pause;
        assert!(
            (pause_ms - runtime_pause).abs() <= 0.05 * runtime_pause,
            "GC pauses {pause_ms:.2} ms in /metrics, {runtime_pause:.2} ms by the runtime"
        );

        let actions = |rule: &str| {
            let (_, body) = agent.request("GET", "/metrics", None);
            metric(
                &String::from_utf8_lossy(&body),
                &format!("eptrace_agent_rule_actions_total{{rule=\"{rule}\"}}"),
            )
            .unwrap_or(0.0)
        };
        wait_for("the starvation rule to act", 30, || {
            (actions("starved") == 1.0).then_some(())
        });
        for (rule, expected) in [
            ("gen2", by_generation[2]),
            ("ten-seconds", 0.0),
            ("all-65", 1.0),
            ("all-66", 0.0),
            ("invalid-25", 1.0),
            ("invalid-26", 0.0),
            ("starved", 1.0),
        ] {
            assert_eq!(actions(rule), expected, "rule {rule}");
        }
        assert!(agent.logged("rule `all-65` fired"));
        assert!(agent.logged("65 exceptions thrown within"));
        assert!(agent.logged("System.InvalidOperationException thrown within"));
        assert!(agent.logged("added a worker for starvation"));
        // Each action's trace is whole and holds the runtime's GC events.
        let actions_total = by_generation[2] as usize + 3;
        let traces = wait_for("every action's trace", 60, || {
            let files: Vec<PathBuf> = std::fs::read_dir(&out)
                .ok()?
                .filter_map(|e| Some(e.ok()?.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "nettrace"))
                .collect();
            (files.len() == actions_total).then_some(files)
        });
        for trace in traces {
            assert!(report_events(&trace) > 0, "{}", trace.display());
        }
        app.send("exit");
    });
}

fn stack_demo_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| support::build_example("eventpipe-profiler", "stack-demo"))
        .clone()
}

/// `/stacks` and a rule's stack snapshot, on stack-demo (its threads parked in known
/// functions); a stopped process is a 504 within the endpoint's 5 s, left as it was.
#[test]
fn stacks_are_served_and_a_rule_takes_them_and_a_stopped_process_times_out() {
    let _one = serial();
    let dir = scratch("stacks");
    let out = dir.join("out");
    let demo = support::Program::start(Command::new(stack_demo_path()), "stack-demo");
    let agent = Agent::start(
        &dir,
        &format!(
            "egress = \"{}\"\n[metrics]\nenabled = false\n[[rules]]\nname = \"where\"\n\
             filter = {{ name = \"stack-demo\" }}\ntrigger = {{ kind = \"process-start\" }}\n\
             action = {{ kind = \"stacks\" }}\n",
            out.display()
        ),
    );
    agent.wait_for_process(demo.pid);
    let innermost = |threads: &Value, name: &str| -> String {
        let t = threads
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {threads}"));
        t["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_owned())
            .find(|f| f.starts_with("stack_demo::"))
            .unwrap()
    };
    let s = agent.get_json(&format!("/stacks?pid={}", demo.pid));
    assert_eq!(
        innermost(&s["threads"], "spinner"),
        "stack_demo::spin_forever"
    );
    assert_eq!(
        innermost(&s["threads"], "mutex-waiter"),
        "stack_demo::wait_on_mutex"
    );
    let (status, body) = agent.request(
        "GET",
        &format!("/stacks?pid={}&format=text&merge=true", demo.pid),
        None,
    );
    assert_eq!(status, 200);
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("1 thread (running): spinner ("), "{text}");
    let (status, _) = agent.request("GET", &format!("/stacks?pid={}&format=xml", demo.pid), None);
    assert_eq!(status, 400);
    // The rule's snapshot, as JSON in the egress folder.
    let file = wait_for("the rule's stack snapshot", 30, || {
        std::fs::read_dir(&out)
            .ok()?
            .filter_map(|e| Some(e.ok()?.path()))
            .find(|p| p.to_string_lossy().ends_with(".stacks.json"))
    });
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(
        innermost(&saved["threads"], "sleeper"),
        "stack_demo::sleep_long"
    );
    // Stopped: a 504 within the endpoint's wait, and the process answers again after.
    let pid = demo.pid.to_string();
    let signal = |name: &str| {
        assert!(Command::new("kill")
            .args([name, &pid])
            .status()
            .unwrap()
            .success())
    };
    signal("-STOP");
    let started = Instant::now();
    let (status, body) = agent.request("GET", &format!("/stacks?pid={}", demo.pid), None);
    let took = started.elapsed();
    signal("-CONT");
    assert_eq!(status, 504, "{}", String::from_utf8_lossy(&body));
    assert!(took < Duration::from_secs(8), "{took:?}");
    let s = agent.get_json(&format!("/stacks?pid={}", demo.pid));
    assert_eq!(
        innermost(&s["threads"], "spinner"),
        "stack_demo::spin_forever"
    );
}
