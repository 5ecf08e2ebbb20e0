//! `eptrace counters` against real .NET runtimes: TestApp's counters mode (tests/dotnet/
//! TestApp.cs, "COUNTERS MODE") publishes EventCounters and Meters with known values, and
//! what `collect` writes must hold exactly those values at the requested interval, beside
//! plausible `System.Runtime` counters; `monitor` is checked as a person sees it, under a
//! pseudo-terminal (util-linux `script`), its screen read back by a terminal emulator
//! (`vt100`).
//!
//! The runtimes and the app come from `bash ci/dotnet.sh`; without them each test prints
//! one line and passes.

mod support;
use support::{eptrace, text};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use eventpipe_test_support::dotnet::{with_dotnet, App};

fn out_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("eptrace-counters-{}-{name}", std::process::id()))
}

/// TestApp in counters mode, once it publishes.
fn counters_app(dotnet: &Path, testapp: &Path, label: &str, seconds: &str) -> App {
    let mut app = App::spawn_with(dotnet, testapp, &["counters", seconds], &[]);
    drop(app.wait_for_socket(label));
    app.line("counters ready", Duration::from_secs(30));
    app
}

/// The arguments of `eptrace counters SUBCOMMAND -p PID --counters COUNTERS REST…`.
fn counters_args<'a>(
    subcommand: &'a str,
    pid: &'a str,
    counters: &'a str,
    rest: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec!["counters", subcommand, "-p", pid, "--counters", counters];
    args.extend_from_slice(rest);
    args
}

/// Runs `eptrace counters SUBCOMMAND` on `app` (see `counters_args`), which must succeed.
fn run_counters(
    label: &str,
    subcommand: &str,
    app: &App,
    counters: &str,
    rest: &[&str],
) -> std::process::Output {
    let pid = app.pid.to_string();
    let out = eptrace(&counters_args(subcommand, &pid, counters, rest));
    assert!(out.status.success(), "{label}: {}", text(&out.stderr));
    out
}

/// The JSON file's events: (name, value, timestamp as text).
fn json_events(path: &Path) -> Vec<(String, f64, String)> {
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    doc["Events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["value"].as_f64().unwrap_or(f64::NAN),
                e["timestamp"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn values_of<'a>(
    events: &'a [(String, f64, String)],
    name: &str,
) -> Vec<&'a (String, f64, String)> {
    events.iter().filter(|e| e.0 == name).collect()
}

/// Seconds of an ISO-8601 timestamp's time of day.
fn seconds_of_day(iso: &str) -> f64 {
    let time = iso.split('T').nth(1).unwrap().trim_end_matches('Z');
    let parts: Vec<f64> = time.split(':').map(|p| p.parse().unwrap()).collect();
    parts[0] * 3600.0 + parts[1] * 60.0 + parts[2]
}

#[test]
fn collect_json_on_dotnet_8_holds_the_known_eventcounters_and_meters_at_the_interval() {
    with_dotnet(|dotnet| {
        let label = "eptrace counters collect, .NET 8";
        let app = counters_app(&dotnet.dotnet8, &dotnet.testapp, label, "120");
        let path = out_path("net8.json");
        run_counters(
            label,
            "collect",
            &app,
            "EventPipeRs-Counters,EventPipeRs.TestMeter,System.Runtime[cpu-usage,working-set,gc-heap-size]",
            &["--format", "json", "--duration", "5s", "-o", path.to_str().unwrap()],
        );
        let events = json_events(&path);
        let exact = |name: &str, want: f64, skip_first: bool| {
            let vs = values_of(&events, name);
            assert!(
                vs.len() >= 3,
                "{label}: {name}: {} values: {events:#?}",
                vs.len()
            );
            for v in vs.iter().skip(usize::from(skip_first)) {
                assert_eq!(v.1, want, "{label}: {name}");
            }
            vs
        };
        // EventCounters.
        let gauge = exact("Fixed Gauge (MB)", 42.5, false);
        exact("Request Latency (ms)", 3.0, false);
        exact("Fixed Total (Count / 1 sec)", 7.0, false);
        // Meters: the first rate has no earlier observation to differ from.
        exact("temperature (Cel)", 21.5, false);
        exact("orders ({order} / 1 sec)", 5.0, true);
        for p in ["50", "95", "99"] {
            let name = format!("latency (ms)[Percentile={p}]");
            let vs = values_of(&events, &name);
            assert!(vs.len() >= 3, "{label}: {name}");
            for v in vs {
                assert!((v.1 - 10.0).abs() <= 0.1, "{label}: {name} = {}", v.1);
            }
        }
        // One value a second.
        let times: Vec<f64> = gauge.iter().map(|g| seconds_of_day(&g.2)).collect();
        for pair in times.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(
                (0.6..=1.4).contains(&gap),
                "{label}: values {gap:.3} s apart"
            );
        }
        // The runtime's own counters, plausible.
        let cpu = values_of(&events, "CPU Usage (%)");
        assert!(
            !cpu.is_empty() && cpu.iter().all(|v| (0.0..=100.0).contains(&v.1)),
            "{label}: {cpu:?}"
        );
        let ws = values_of(&events, "Working Set (MB)");
        assert!(
            !ws.is_empty() && ws.iter().all(|v| v.1 > 5.0 && v.1 < 10_000.0),
            "{label}: {ws:?}"
        );
        let heap = values_of(&events, "GC Heap Size (MB)");
        assert!(
            !heap.is_empty() && heap.iter().all(|v| v.1 > 0.0),
            "{label}: {heap:?}"
        );
        std::fs::remove_file(&path).ok();
    });
}

#[test]
fn collect_csv_on_dotnet_core_3_1_holds_the_known_eventcounters_once_a_second() {
    with_dotnet(|dotnet| {
        let label = "eptrace counters collect, .NET Core 3.1";
        let app = counters_app(&dotnet.dotnet31, &dotnet.testapp, label, "120");
        let path = out_path("core31.csv");
        run_counters(
            label,
            "collect",
            &app,
            "EventPipeRs-Counters,System.Runtime[cpu-usage,working-set]",
            &["--duration", "4500ms", "-o", path.to_str().unwrap()],
        );
        let csv = std::fs::read_to_string(&path).unwrap();
        let mut lines = csv.lines();
        assert_eq!(
            lines.next(),
            Some("Timestamp,Provider,Counter Name,Counter Type,Mean/Increment")
        );
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert!(rows.iter().all(|r| r.len() == 5), "{label}: {csv}");
        let of = |name: &str| -> Vec<(&str, f64)> {
            rows.iter()
                .filter(|r| r[2] == name)
                .map(|r| (r[3], r[4].parse().unwrap()))
                .collect()
        };
        for (name, kind, want) in [
            ("Fixed Gauge (MB)", "Metric", 42.5),
            ("Request Latency (ms)", "Metric", 3.0),
            ("Fixed Total (Count / 1 sec)", "Rate", 7.0),
        ] {
            let vs = of(name);
            // Once a second: 3 to 5 in 4.5 s, not twice that (3.1 publishes each value a
            // second time a few ms later, which is not another interval).
            assert!((3..=5).contains(&vs.len()), "{label}: {name}: {csv}");
            assert!(
                vs.iter().all(|&(k, v)| k == kind && v == want),
                "{label}: {name}: {csv}"
            );
        }
        assert!(!of("Working Set (MB)").is_empty(), "{label}: {csv}");
        std::fs::remove_file(&path).ok();
    });
}

#[test]
fn a_json_file_stays_valid_when_the_collector_is_killed() {
    with_dotnet(|dotnet| {
        let label = "eptrace counters collect killed, .NET 8";
        let app = counters_app(&dotnet.dotnet8, &dotnet.testapp, label, "120");
        let path = out_path("killed.json");
        let pid = app.pid.to_string();
        let mut child = Command::new(env!("CARGO_BIN_EXE_eptrace"))
            .args(counters_args(
                "collect",
                &pid,
                "EventPipeRs-Counters",
                &["--format", "json", "-o", path.to_str().unwrap()],
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(3500));
        child.kill().unwrap();
        child.wait().unwrap();
        let events = json_events(&path);
        assert!(
            values_of(&events, "Fixed Gauge (MB)").len() >= 2,
            "{label}: {events:?}"
        );
        std::fs::remove_file(&path).ok();
    });
}

/// Runs `eptrace counters monitor ARGS` on a pseudo-terminal of `cols` × 30, typing `keys`
/// (each after its delay); returns the screens the terminal showed, in order (the
/// alternate screen's contents each time a redraw ends) and the exit status.
fn monitor_on_a_terminal(cols: u16, args: &[&str], keys: &[(u64, &str)]) -> (Vec<String>, i32) {
    let command = format!(
        "stty cols {cols} rows 30; exec {} counters monitor {}",
        env!("CARGO_BIN_EXE_eptrace"),
        args.join(" ")
    );
    let mut child = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env("TERM", "xterm-256color")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("script (util-linux) runs");
    let mut stdin = child.stdin.take().unwrap();
    let keys: Vec<(u64, String)> = keys.iter().map(|&(d, k)| (d, k.to_owned())).collect();
    let typist = std::thread::spawn(move || {
        for (delay, key) in keys {
            std::thread::sleep(Duration::from_millis(delay));
            let _ = stdin.write_all(key.as_bytes());
            let _ = stdin.flush();
        }
        // Keep the pty's input open until the program is done.
        std::thread::sleep(Duration::from_secs(30));
    });
    let output = child.wait_with_output().unwrap();
    drop(typist);
    let mut parser = vt100::Parser::new(30, cols, 0);
    let mut screens = Vec::new();
    for chunk in output.stdout.chunks(32) {
        parser.process(chunk);
        let screen = parser.screen().contents();
        if screens.last() != Some(&screen) {
            screens.push(screen);
        }
    }
    (screens, output.status.code().unwrap_or(-1))
}

#[test]
fn monitor_shows_the_counters_in_place_pauses_and_quits_on_a_terminal() {
    with_dotnet(|dotnet| {
        if Command::new("script").arg("--version").output().is_err() {
            println!("skipping: util-linux `script` is not installed");
            return;
        }
        let label = "eptrace counters monitor, .NET 8";
        let app = counters_app(&dotnet.dotnet8, &dotnet.testapp, label, "120");
        let pid = app.pid.to_string();
        let (screens, status) = monitor_on_a_terminal(
            100,
            &["-p", &pid, "--counters", "EventPipeRs-Counters"],
            &[(3500, "p"), (1500, "q")],
        );
        assert_eq!(status, 0, "{label}: q quits cleanly");
        // A whole redraw: its last row is there (rows are drawn in order after a clear).
        let running = screens
            .iter()
            .find(|s| s.contains("Status: Running") && s.contains("Request Latency (ms)"))
            .unwrap_or_else(|| panic!("{label}: no screen with the values: {screens:#?}"));
        assert!(running.contains("[EventPipeRs-Counters]"), "{running}");
        let line = running
            .lines()
            .find(|l| l.contains("Fixed Gauge (MB)"))
            .unwrap();
        assert!(line.trim_end().ends_with("42.5"), "{line:?}");
        assert!(running.contains("Fixed Total (Count / 1 sec)"), "{running}");
        // Redrawn in place: the screen never holds two copies of the table.
        assert!(screens
            .iter()
            .all(|s| s.matches("Fixed Gauge").count() <= 1));
        assert!(
            screens.iter().any(|s| s.contains("Status: Paused")),
            "{label}: p pauses: {screens:#?}"
        );

        // Too narrow: said, not garbled.
        let (screens, status) = monitor_on_a_terminal(
            30,
            &["-p", &pid, "--counters", "EventPipeRs-Counters"],
            &[(1500, "q")],
        );
        assert_eq!(status, 0);
        assert!(
            screens.iter().any(|s| s.contains("30 columns wide")),
            "{screens:#?}"
        );
    });
}

#[test]
fn monitor_says_when_the_target_exits_and_when_a_name_publishes_nothing() {
    with_dotnet(|dotnet| {
        let label = "eptrace counters monitor, the app exiting";
        let app = counters_app(&dotnet.dotnet8, &dotnet.testapp, label, "5");
        let out = run_counters(
            label,
            "monitor",
            &app,
            "EventPipeRs-Counters,No-Such-Provider",
            &[],
        );
        let shown = text(&out.stdout);
        assert!(shown.contains("ended the session"), "{label}: {shown}");
        assert!(
            shown.contains("no values from No-Such-Provider"),
            "{label}: {shown}"
        );
    });
}

#[test]
fn report_reads_the_counters_a_trace_recorded() {
    with_dotnet(|dotnet| {
        let label = "eptrace counters report, .NET 8";
        let app = counters_app(&dotnet.dotnet8, &dotnet.testapp, label, "120");
        let trace = out_path("recorded.nettrace");
        let out = eptrace(&[
            "collect",
            "-p",
            &app.pid.to_string(),
            "--providers",
            "EventPipeRs-Counters:0xFFFFFFFF:5:EventCounterIntervalSec=1",
            "--duration",
            "3500ms",
            "-o",
            trace.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{label}: {}", text(&out.stderr));
        let report = eptrace(&["counters", "report", "--json", trace.to_str().unwrap()]);
        assert!(report.status.success(), "{label}: {}", text(&report.stderr));
        let json: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
        let gauge = json["counters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "fixed-gauge")
            .unwrap_or_else(|| panic!("{label}: {json}"));
        assert!(gauge["values"].as_u64().unwrap() >= 2, "{gauge}");
        for key in ["last", "min", "max", "mean"] {
            assert_eq!(gauge[key].as_f64(), Some(42.5), "{key}: {gauge}");
        }
        // A trace without counters says so.
        let none = eptrace(&["counters", "report", env!("CARGO_BIN_EXE_eptrace")]);
        assert_eq!(none.status.code(), Some(1));
        std::fs::remove_file(&trace).ok();
    });
}

#[test]
fn the_meters_publishers_limits_are_said_in_words() {
    with_dotnet(|dotnet| {
        let label = "eptrace counters monitor with Meters limits, .NET 8";
        let app = counters_app(&dotnet.dotnet8, &dotnet.testapp, label, "120");
        let out = run_counters(
            label,
            "monitor",
            &app,
            "EventPipeRs.TestMeter",
            &["--max-histograms", "0", "--duration", "3s"],
        );
        let shown = text(&out.stdout);
        assert!(
            shown.contains("reached its limit of histograms (--max-histograms)"),
            "{label}: {shown}"
        );
        // The other instruments still arrive.
        assert!(shown.contains("temperature (Cel)"), "{label}: {shown}");
    });
}
