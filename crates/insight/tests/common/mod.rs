//! Shared by the converter tests: hand-built profiles with known contents, and locating the
//! independent readers (`go tool pprof`, speedscope's schema and importer, the DevTools trace
//! engine) and `../shared/traces`.
//!
//! The readers come from `bash ci/converters.sh`, which writes `target/converters/env`
//! (`$EVENTPIPE_CONVERTERS_ROOT/env` when that is set) with `GO=`, `SPEEDSCOPE_SCHEMA=`, `NODE=`
//! and `TRACE_ENGINE=`.
//! Without that file `go` is looked up on `PATH` and the schema in the default install
//! directory. A test whose reader is missing prints one `skipping:` line and passes, unless
//! `EVENTPIPE_REQUIRE_CONVERTER_TOOLS=1` (set by `.ci/run`), which makes it fail.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use eventpipe_insight::{Frame, FrameKind, Profile, Sample, SampleUnit};

// ---------------------------------------------------------------------------------------
// Locating the readers

fn converters_root() -> PathBuf {
    match std::env::var_os("EVENTPIPE_CONVERTERS_ROOT") {
        Some(root) if !root.is_empty() => PathBuf::from(root),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/converters"),
    }
}

/// `KEY=value` from the env file `ci/converters.sh` writes, if the file has it.
fn env_file_value(key: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string(converters_root().join("env")).ok()?;
    text.lines()
        .find_map(|line| line.trim().strip_prefix(key)?.strip_prefix('='))
        .map(|v| PathBuf::from(v.trim().trim_matches(|c| c == '"' || c == '\'')))
}

fn required() -> bool {
    std::env::var_os("EVENTPIPE_REQUIRE_CONVERTER_TOOLS").is_some_and(|v| v == "1")
}

/// Skips (one line, `None`) or, when the tools are required, fails.
fn missing<T>(what: &str, why: &str) -> Option<T> {
    if required() {
        panic!(
            "{what}: {why}, and EVENTPIPE_REQUIRE_CONVERTER_TOOLS=1 (run bash ci/converters.sh)"
        );
    }
    eprintln!("skipping: {what} ({why}; run ci/converters.sh)");
    None
}

/// The `go` command, for `go tool pprof`.
pub fn go(what: &str) -> Option<PathBuf> {
    if let Some(go) = env_file_value("GO").filter(|p| p.is_file()) {
        return Some(go);
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("go"))
            .find(|p| p.is_file())
    });
    match on_path {
        Some(go) => Some(go),
        None => missing(what, "go not installed"),
    }
}

/// `go tool pprof ARGS`'s standard output, its temporary files in the system's temp
/// directory; a failure panics with what it said.
pub fn go_pprof<S: AsRef<std::ffi::OsStr>>(
    go: &Path,
    args: impl IntoIterator<Item = S>,
) -> Vec<u8> {
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let out = std::process::Command::new(go)
        .args(["tool", "pprof"])
        .args(&args)
        .env("PPROF_TMPDIR", std::env::temp_dir())
        .output()
        .expect("run go tool pprof");
    assert!(
        out.status.success(),
        "go tool pprof {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A Python with `grpc_tools` (PyPI's protoc), for `python -m grpc_tools.protoc`.
pub fn protoc_python(what: &str) -> Option<PathBuf> {
    let python = env_file_value("PROTOC_PYTHON")
        .unwrap_or_else(|| converters_root().join("protoc-venv/bin/python"));
    if python.is_file() {
        Some(python)
    } else {
        missing(what, "grpcio-tools (protoc) not installed")
    }
}

/// speedscope's file-format schema, from its npm package.
pub fn speedscope_schema(what: &str) -> Option<serde_json::Value> {
    let path = env_file_value("SPEEDSCOPE_SCHEMA").unwrap_or_else(|| {
        converters_root().join("node_modules/speedscope/dist/release/file-format-schema.json")
    });
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(serde_json::from_str(&text).expect("speedscope's schema is JSON")),
        Err(_) => missing(
            what,
            &format!("speedscope schema not installed at {}", path.display()),
        ),
    }
}

/// `../shared/traces`, or `None` after a one-line notice (a user's fresh clone).
pub fn shared_traces(what: &str) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces");
    if root.is_dir() {
        Some(root)
    } else {
        eprintln!("skipping: {what} (../shared/traces is absent)");
        None
    }
}

/// A scratch directory under the target dir, emptied first.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

// ---------------------------------------------------------------------------------------
// Hand-built profiles

/// The sample table of [`workload`]: (thread id, root-first function names, weight), one
/// row per sample. Two `parse` frames differ only in their source file, so they are two
/// frames with one name.
pub const WORKLOAD: &[(u64, &[&str], u64)] = &[
    (7, &["main", "run", "parse"], 1),
    (7, &["main", "run", "parse", "lex"], 1),
    (7, &["main", "run", "parse"], 1),
    (7, &["main", "run"], 4),
    (7, &["main", "run", "parse", "lex"], 1),
    (8, &["thread_start", "worker", "run", "parse"], 2),
    (8, &["thread_start", "worker", "run", "parse2"], 3),
    (8, &["thread_start", "worker", "run", "parse"], 1),
    (7, &["main", "run", "parse"], 1),
    (9, &["main", "alloc"], 12),
];

/// `WORKLOAD`'s threads: id and name.
pub const WORKLOAD_THREADS: &[(u64, Option<&str>)] =
    &[(7, Some("main")), (8, Some("worker")), (9, None)];

fn frame_for(name: &str) -> Frame {
    match name {
        // A second `parse`, in another file: a distinct frame with the same name.
        "parse2" => Frame {
            function: "parse".into(),
            module: Some("app".into()),
            file: Some("src/other.rs".into()),
            line: Some(7),
            kind: FrameKind::Native,
        },
        "parse" | "run" | "main" | "lex" => Frame {
            function: name.into(),
            module: Some("app".into()),
            file: Some(format!("src/{name}.rs")),
            line: Some(10 + name.len() as u32),
            kind: FrameKind::Native,
        },
        "alloc" => Frame {
            function: "alloc".into(),
            module: Some("libc.so.6".into()),
            file: None,
            line: None,
            kind: FrameKind::Native,
        },
        other => Frame::named(other, FrameKind::Unknown),
    }
}

/// The display name of a `WORKLOAD` frame (`parse2` is a second `parse`).
pub fn display_name(name: &str) -> &str {
    if name == "parse2" {
        "parse"
    } else {
        name
    }
}

/// Nanoseconds a unit of `WORKLOAD` weight stands for in a time profile: 1 ms periods.
pub const PERIOD_NS: u64 = 1_000_000;

/// A profile of `WORKLOAD` in `unit`, spanning 10 to 20 ms into its trace, with samples 1
/// ms apart at the end of each millisecond (a sample stands for the time before it); in a
/// time unit each unit of the table's weight is a period of [`PERIOD_NS`].
pub fn workload(unit: SampleUnit) -> Profile {
    let mut p = Profile::new("Workload", unit);
    let scale = if unit.is_time() {
        p.sampling_interval_ns = Some(PERIOD_NS);
        PERIOD_NS
    } else {
        1
    };
    for &(id, name) in WORKLOAD_THREADS {
        p.intern_thread(id, name, Some(4242));
    }
    for (i, &(tid, names, weight)) in WORKLOAD.iter().enumerate() {
        let lines = names
            .iter()
            .map(|n| frame_for(n).line.unwrap_or(0))
            .collect();
        let frames = names.iter().map(|n| p.intern_frame(frame_for(n))).collect();
        let stack = p.intern_stack(frames);
        let lines = p.intern_lines(lines);
        let thread = p.intern_thread(tid, None, None);
        p.push_sample(Sample {
            thread,
            time_ms: 11.0 + i as f64,
            weight: weight * scale,
            stack,
            lines,
        });
    }
    p.start_ms = 10.0;
    p.end_ms = 10.0 + WORKLOAD.len() as f64;
    p
}

/// Every sample unit, the order the converter tests go through them.
pub fn units() -> [SampleUnit; 8] {
    SampleUnit::ALL
}

/// The 1 ms CPU profile of `WORKLOAD`.
pub fn cpu_workload() -> Profile {
    workload(SampleUnit::CpuTime)
}

/// Expected total weight per (thread id, root-first display names), straight from the
/// table (independent of the profile's interning).
pub fn expected_by_thread_and_stack() -> BTreeMap<(u64, Vec<String>), u64> {
    let mut out = BTreeMap::new();
    for &(tid, names, weight) in WORKLOAD {
        let key = (
            tid,
            names.iter().map(|n| display_name(n).to_owned()).collect(),
        );
        *out.entry(key).or_insert(0) += weight;
    }
    out
}

/// Expected number of samples per (thread id, root-first display names).
pub fn expected_counts_by_thread_and_stack() -> BTreeMap<(u64, Vec<String>), u64> {
    let mut out = BTreeMap::new();
    for &(tid, names, _) in WORKLOAD {
        let key = (
            tid,
            names.iter().map(|n| display_name(n).to_owned()).collect(),
        );
        *out.entry(key).or_insert(0) += 1;
    }
    out
}

/// The DevTools performance panel's trace engine (npm `@paulirish/trace_engine`), as
/// `(node, package directory)`, for `tests/trace_engine/parse.mjs`.
pub fn trace_engine(what: &str) -> Option<(PathBuf, PathBuf)> {
    let dir = env_file_value("TRACE_ENGINE")
        .unwrap_or_else(|| converters_root().join("node_modules/@paulirish/trace_engine"));
    if !dir.join("models/trace/trace.js").is_file() {
        return missing(
            what,
            &format!("the trace engine is not installed at {}", dir.display()),
        );
    }
    let node = env_file_value("NODE").filter(|p| p.is_file()).or_else(|| {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join("node"))
                .find(|p| p.is_file())
        })
    });
    match node {
        Some(node) => Some((node, dir)),
        None => missing(what, "node not installed"),
    }
}

/// speedscope's installed package directory (its release bundle holds the importer).
pub fn speedscope_package(what: &str) -> Option<PathBuf> {
    let dir = converters_root().join("node_modules/speedscope");
    if dir.join("package.json").is_file() {
        Some(dir)
    } else {
        missing(
            what,
            &format!("speedscope not installed at {}", dir.display()),
        )
    }
}
