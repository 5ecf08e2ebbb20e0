//! `eptrace analyze` as a user runs it: findings first, the sections asked for, JSON with
//! every number, and clear errors for a trace that is not there or not a trace.

mod support;

use std::path::PathBuf;

use support::{eptrace, eptrace_ok, text};

fn objver4() -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces/eventpipe-dotnetcore3.0-win-x64-objver4.nettrace");
    if path.exists() {
        Some(path)
    } else {
        println!("skipping: {} is absent", path.display());
        None
    }
}

#[test]
fn text_puts_findings_first_and_says_what_to_collect_for_missing_sections() {
    let Some(trace) = objver4() else { return };
    let out = text(&eptrace_ok("analyze", &["analyze", trace.to_str().unwrap()]).stdout);
    let findings = out.find("\nFindings\n").expect("a Findings heading");
    let gc = out.find("\nGC: 478 collections").expect("the GC section");
    assert!(findings < gc, "{out}");
    assert!(
        out.contains("the thread pool was starved: 8 workers added for starvation"),
        "{out}"
    );
    assert!(out.contains("→ eptrace analyze --threadpool"), "{out}");
    for section in [
        "\nAllocations: 35458 ticks",
        "\nJIT: 53 methods",
        "\nLock contention: 8 contentions",
        "\nThread pool:",
    ] {
        assert!(out.contains(section), "no {section:?} in {out}");
    }
    assert!(
        out.contains("exceptions   collect with --providers Microsoft-Windows-DotNETRuntime:0x8000:Informational"),
        "{out}"
    );
}

#[test]
fn a_section_flag_shows_that_section_alone_and_json_has_every_number() {
    let Some(trace) = objver4() else { return };
    let out = text(
        &eptrace_ok(
            "analyze --jit",
            &["analyze", "--jit", trace.to_str().unwrap()],
        )
        .stdout,
    );
    assert!(out.contains("\nJIT: 53 methods"), "{out}");
    assert!(
        !out.contains("\nGC:") && !out.contains("\nThread pool:"),
        "{out}"
    );
    let out = eptrace_ok(
        "analyze --json --gc",
        &["analyze", "--json", "--gc", trace.to_str().unwrap()],
    );
    let a: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(a["gc"]["gcs"].as_array().unwrap().len(), 478);
    assert!(a["jit"].is_null());
    assert!(a["gc"]["gcs"][0]["pause_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(a["events"].as_u64().unwrap(), 105_540);
}

#[test]
fn a_missing_or_malformed_trace_is_a_clear_error() {
    let out = eptrace(&["analyze", "/nonexistent/trace.nettrace"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("/nonexistent/trace.nettrace"), "{err}");
    let dir = std::env::temp_dir().join(format!("eptrace-analyze-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("not-a-trace.nettrace");
    std::fs::write(&bad, b"this is not a nettrace file at all").unwrap();
    let out = eptrace(&["analyze", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("not-a-trace.nettrace"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn report_ends_with_the_findings_one_line_each() {
    let Some(trace) = objver4() else { return };
    let out = text(&eptrace_ok("report", &["report", trace.to_str().unwrap()]).stdout);
    let tail = &out[out
        .find("\nfindings (2; eptrace analyze has the detail):\n")
        .expect(&out)..];
    let lines: Vec<&str> = tail.lines().skip(2).collect();
    assert_eq!(lines.len(), 2, "{tail}");
    assert!(
        lines[0].starts_with("  - the thread pool was starved"),
        "{tail}"
    );
    assert!(lines[1].starts_with("  - GC paused the program"), "{tail}");
    // The same findings, read from standard input (one read, teed to the passes).
    let piped = std::process::Command::new(env!("CARGO_BIN_EXE_eptrace"))
        .args(["report", "--json", "-"])
        .stdin(std::fs::File::open(&trace).unwrap())
        .output()
        .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&piped.stdout).unwrap();
    let rules: Vec<&str> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap())
        .collect();
    assert_eq!(rules, ["threadpool-starvation", "gc-pause-time"]);
    assert_eq!(r["time_order"]["sorted_events"], 105_540);
}
