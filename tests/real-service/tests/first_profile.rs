//! A real service's first profile, as a new user takes it: mini-redis's server (built from
//! crates.io, instrumented as the guide says) under load from mini-redis's own client,
//! attached to with `eptrace collect --profile cpu-sampling,tracing` (the binary in
//! `$EPTRACE`; `ci/real-service.sh` builds it). Its CPU samples must reach the program's
//! code through libc (which keeps no frame pointers), its threads must be named, and its
//! `tracing` spans must arrive. Then `--profile off-cpu` on the same server: `eptrace
//! analyze --offcpu` must find where its tokio workers wait, with stacks. And once the load
//! is over, `eptrace stack` must show every thread named, with a stack, and every tokio
//! worker waiting in `epoll_wait` or on a futex. And `eptrace record -p` (perf events, the
//! server as it is) must find its samples as whole and its threads as named as the CPU
//! sampler does.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use eventpipe_insight::{build_profile, SampleSelection};
use nettrace::TraceReader;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        // SIGINT: mini-redis shuts down on Ctrl-C.
        // SAFETY: kill(2) on our own child has no memory-safety preconditions.
        unsafe { libc_kill(self.0.id() as i32, 2) };
        let _ = self.0.wait();
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, signal: i32) -> i32;
}

/// `eptrace collect -p PID --profile PROFILE --duration D` into a temporary file.
fn collect(
    eptrace: &std::path::Path,
    pid: u32,
    profile: &str,
    duration: &str,
    tag: &str,
) -> PathBuf {
    let trace =
        std::env::temp_dir().join(format!("mini-redis-{}{tag}.nettrace", std::process::id()));
    let collect = Command::new(eptrace)
        .args([
            "collect",
            "-p",
            &pid.to_string(),
            "--profile",
            profile,
            "--duration",
            duration,
            "-o",
        ])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(
        collect.status.success(),
        "{}",
        String::from_utf8_lossy(&collect.stderr)
    );
    trace
}

#[test]
fn mini_redis_under_load_profiles_whole_named_and_with_its_spans() {
    let Some(eptrace) = std::env::var_os("EPTRACE").map(PathBuf::from) else {
        println!("skipping: EPTRACE (the eptrace binary) is not set; ci/real-service.sh sets it");
        return;
    };
    let mut server = Command::new(env!("CARGO_BIN_EXE_server"))
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the server starts");
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let server = Killed(server);
    let port: u16 = loop {
        let line = lines.next().expect("the server says its port").unwrap();
        if let Some(p) = line.strip_prefix("listening on ") {
            break p.trim().parse().unwrap();
        }
    };
    let load = Command::new(env!("CARGO_BIN_EXE_load"))
        .args([&port.to_string(), "11", "8"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the load starts");
    std::thread::sleep(std::time::Duration::from_secs(1));
    let pid = server.0.id();
    let trace = collect(&eptrace, pid, "cpu-sampling,tracing", "3s", "");
    // Where it waits: a second session, off-CPU stacks, while the load goes on.
    let offcpu = collect(&eptrace, pid, "off-cpu", "2s", "-offcpu");
    // And as it is, with perf events, while the load goes on.
    let recorded = record(&eptrace, pid);
    let load = load.wait_with_output().unwrap();
    // What every thread is doing, the load over: the workers wait for work.
    what_every_thread_does(&eptrace, pid);
    let ops = String::from_utf8_lossy(&load.stdout);
    assert!(ops.starts_with("ops "), "the load ran: {ops}");
    drop(server);

    let bytes = std::fs::read(&trace).unwrap();
    std::fs::remove_file(&trace).ok();

    // Spans and events of mini-redis's `tracing` targets, by provider and name.
    let mut events: BTreeMap<String, u64> = BTreeMap::new();
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    while let Some(e) = reader.next_event().unwrap() {
        *events.entry(e.qualified_name()).or_default() += 1;
    }
    // `Handler::run` (target mini_redis::server) and each command's span (mini_redis::cmd::*).
    for name in [
        "mini_redis-server/Span/Start",
        "mini_redis-cmd-get/SpanNew",
        "mini_redis-cmd-set/SpanNew",
    ] {
        assert!(
            events.get(name).is_some_and(|&n| n > 0),
            "no {name}: {events:?}"
        );
    }

    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let built = build_profile(&mut reader, SampleSelection::Cpu).unwrap();
    whole_and_named(&built.profile, "the CPU sampler");

    where_the_workers_wait(&eptrace, &offcpu);
    let bytes = std::fs::read(&recorded).unwrap();
    std::fs::remove_file(&recorded).ok();
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let built = build_profile(&mut reader, SampleSelection::Cpu).unwrap();
    whole_and_named(&built.profile, "eptrace record (perf events)");
}

/// `p`'s samples in libc reach the program's code (libc keeps no frame pointers), few are
/// cut short, and every thread with samples is named, tokio's workers among them.
fn whole_and_named(p: &eventpipe_insight::Profile, by: &str) {
    assert!(
        p.samples.len() >= 200,
        "{by}: {} CPU samples",
        p.samples.len()
    );
    let binary = |f: usize| p.frames[f].module.as_deref() == Some("server");
    let in_libc = |f: usize| {
        p.frames[f]
            .module
            .as_deref()
            .is_some_and(|m| m.starts_with("libc.so"))
    };
    let cut = |stack: usize| p.frames[p.stacks[stack][0]].function == "[truncated]";
    let (mut libc, mut through, mut truncated) = (0usize, 0usize, 0usize);
    for s in &p.samples {
        let stack = &p.stacks[s.stack];
        truncated += usize::from(cut(s.stack));
        if in_libc(*stack.last().unwrap()) {
            libc += 1;
            through += usize::from(stack.iter().any(|&f| binary(f)) && !cut(s.stack));
        }
    }
    let reach = p
        .samples
        .iter()
        .filter(|s| p.stacks[s.stack].iter().any(|&f| binary(f)))
        .count();
    println!(
        "{by}: {} CPU samples, {reach} reach the program's code; {libc} in libc, {through} of \
         those reach the program; {truncated} cut",
        p.samples.len()
    );
    assert!(
        reach * 100 >= p.samples.len() * 90,
        "{by}: {reach} of {} samples reach the program's code",
        p.samples.len()
    );
    assert!(libc >= 20, "{by}: only {libc} samples in libc");
    assert!(
        through * 100 >= libc * 95,
        "{by}: {through} of {libc} samples in libc reach the program's code"
    );
    assert!(
        truncated * 100 <= p.samples.len() * 5,
        "{by}: {truncated} cut short"
    );
    // Every thread with samples has its name: the rundown names the sampled threads.
    for (i, t) in p.threads.iter().enumerate() {
        if p.samples.iter().any(|s| s.thread == i) {
            assert!(
                t.name.is_some(),
                "{by}: thread {} has samples and no name",
                t.id
            );
        }
    }
    // tokio's workers, by their name.
    let names: Vec<_> = p.threads.iter().map(|t| t.name.clone()).collect();
    assert!(
        names.iter().flatten().any(|n| n.starts_with("tokio-")),
        "{by}: {names:?}"
    );
}

/// `eptrace record -p PID --duration 2s`: the server as it is, sampled with perf events.
fn record(eptrace: &std::path::Path, pid: u32) -> PathBuf {
    let trace =
        std::env::temp_dir().join(format!("mini-redis-{}-record.nettrace", std::process::id()));
    let out = Command::new(eptrace)
        .args(["record", "-p", &pid.to_string(), "--duration", "2s", "-o"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    trace
}

/// `eptrace stack -p PID --json` of the idle server: every thread, each with its name and a
/// stack, and every tokio worker waiting in the driver's `epoll_wait` or parked on a futex,
/// as its state says (read from its innermost frames).
fn what_every_thread_does(eptrace: &std::path::Path, pid: u32) {
    let out = Command::new(eptrace)
        .args(["stack", "-p", &pid.to_string(), "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let threads = s["threads"].as_array().unwrap();
    let described: Vec<String> = threads
        .iter()
        .map(|t| format!("{} {}: {}", t["thread_id"], t["name"], t["state"]))
        .collect();
    println!("stack: {} threads: {described:?}", threads.len());
    let workers: Vec<&serde_json::Value> = threads
        .iter()
        .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with("tokio-")))
        .collect();
    assert!(workers.len() >= 2, "tokio workers: {described:?}");
    for t in threads {
        assert!(
            t["name"].is_string(),
            "a thread with no name: {described:?}"
        );
        assert!(
            !t["frames"].as_array().unwrap().is_empty(),
            "thread {} has no stack",
            t["thread_id"]
        );
    }
    let known_wait = |t: &&&serde_json::Value| {
        matches!(
            t["state"].as_str(),
            Some("blocked in epoll_wait" | "blocked in futex")
        )
    };
    assert!(
        workers.iter().all(|t| known_wait(&t)),
        "a tokio worker of the idle server not waiting in epoll_wait or a futex: {described:?}"
    );
}

/// `analyze --offcpu` of the off-CPU session: most of the waiting has its stack, and the
/// tokio workers' waits reach the driver's `epoll_wait` or a worker's park through libc.
fn where_the_workers_wait(eptrace: &std::path::Path, trace: &std::path::Path) {
    let out = Command::new(eptrace)
        .args(["analyze", "--offcpu", "--json"])
        .arg(trace)
        .output()
        .unwrap();
    std::fs::remove_file(trace).ok();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let a: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let section = &a["offcpu"];
    let off = section["off_cpu_ms"].as_f64().unwrap();
    let with_stack = section["off_cpu_with_stack_ms"].as_f64().unwrap();
    println!(
        "off-CPU: {off:.0} ms waiting, {with_stack:.0} ms of it with its stack; top waits: {}",
        section["waits"]
    );
    assert!(off > 1000.0, "{off} ms off the CPU in 2 s");
    assert!(
        with_stack >= 0.5 * off,
        "{with_stack} of {off} ms with a stack"
    );
    let workers_wait: f64 = section["waits"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| {
            w["threads"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t.as_str().unwrap_or("").starts_with("tokio-"))
        })
        .filter(|w| {
            w["frames"].as_array().unwrap().iter().any(|f| {
                let f = f.as_str().unwrap_or("");
                f.contains("epoll_wait") || f.contains("park")
            })
        })
        .map(|w| w["value"].as_f64().unwrap())
        .sum();
    assert!(
        workers_wait > 0.0,
        "no tokio worker waits in epoll_wait or a park: {}",
        section["waits"]
    );
}
