//! What several of eptrace's test binaries share.
#![allow(dead_code)] // each test binary uses part of it

use std::path::PathBuf;
use std::process::Command;

/// The workspace's example `name` (of package `package`), built (once per call site's
/// `OnceLock`) into this test's target dir. Built as part of the workspace, not of its
/// package alone: `cargo test --workspace` has built it so already (its dependencies with
/// the workspace's features), where `-p` would resolve other features and rebuild them.
pub(crate) fn build_example(package: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let target_dir = profile_dir.parent().unwrap();
    let status = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args(["build", "--quiet", "--workspace", "--example", name])
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .expect("cargo runs");
    assert!(
        status.success(),
        "building the {name} example (of {package}) failed"
    );
    profile_dir.join("examples").join(name)
}

/// A program the tests talk to over its stdin and stdout: it prints `pid N` and `ready`
/// when it starts (the examples `counters-demo` and `heap-leak` do), and answers lines.
pub(crate) struct Program {
    pub(crate) child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    pub(crate) pid: u32,
    what: String,
}

impl Program {
    /// Starts `command` (its stdin and stdout are taken over) and waits for `ready`.
    pub(crate) fn start(mut command: Command, what: &str) -> Program {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what} does not start: {e}"));
        let stdin = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut program = Program {
            child,
            stdin,
            lines,
            pid: 0,
            what: what.to_owned(),
        };
        program.pid = program.line("pid ").parse().unwrap();
        program.line("ready");
        program
    }

    /// The rest of the next line starting with `prefix`.
    pub(crate) fn line(&mut self, prefix: &str) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(std::time::Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("{} said no {prefix:?} line: {e}", self.what));
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.trim().to_owned();
            }
        }
    }

    /// Sends `line` to its stdin.
    pub(crate) fn send(&mut self, line: &str) {
        use std::io::Write;
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        use eventpipe_ipc::transport;
        // Read while the process (or its zombie) still exists.
        let key = transport::start_time(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
        // SIGKILL runs no exit handler: the diagnostics socket is left behind.
        if let Some(key) = key {
            let dir = transport::socket_dir();
            let _ = std::fs::remove_file(transport::socket_path(&dir, self.child.id(), key));
        }
    }
}

/// A process's peak resident set so far (`VmHWM`), in kB; `None` once it is gone.
pub(crate) fn peak_resident_kb(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// The largest peak resident set (kB) of this process's children that have ended and been
/// waited for: exact, however briefly a child peaked before it exited.
pub(crate) fn children_peak_resident_kb() -> u64 {
    // SAFETY: getrusage writes one rusage struct into the zeroed one it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    u64::try_from(usage.ru_maxrss).unwrap_or(0)
}

/// Runs the `eptrace` binary under test with `args` and waits for it.
pub(crate) fn eptrace(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args(args)
        .output()
        .expect("eptrace runs")
}

/// `eptrace(args)`, which must succeed (else the failure shows `label`, stdout and stderr).
pub(crate) fn eptrace_ok(label: &str, args: &[&str]) -> std::process::Output {
    let out = eptrace(args);
    assert!(
        out.status.success(),
        "{label}: {}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// Output bytes as text.
pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The CPU profile of a .NET sampler's trace in `report --json`'s `report`, which must say
/// it measures thread time.
pub(crate) fn thread_time_profile<'a>(
    report: &'a serde_json::Value,
    label: &str,
) -> &'a serde_json::Value {
    let hot = &report["profile"];
    assert!(
        hot["kind"]
            .as_str()
            .unwrap()
            .starts_with(".NET thread time"),
        "{label}: {hot}"
    );
    hot
}

/// The frames of `trace` converted to speedscope (`eptrace convert -f speedscope`, beside
/// it, removed after): (name, file), the file being the frame's module.
#[allow(dead_code)]
pub(crate) fn speedscope_frames(trace: &std::path::Path) -> Vec<(String, String)> {
    let json = trace.with_extension("speedscope.json");
    eptrace_ok(
        "convert -f speedscope",
        &[
            "convert",
            "-f",
            "speedscope",
            "-o",
            json.to_str().unwrap(),
            trace.to_str().unwrap(),
        ],
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(json).ok();
    doc["shared"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap_or("").to_owned(),
                f["file"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}
