//! `eptrace gcdump` against real .NET runtimes (.NET Core 3.1 and .NET 8): TestApp's heap
//! mode builds a known graph (tests/dotnet/TestApp.cs, "HEAP MODE": a static
//! `List<HeapNode>` of 20,000 nodes, each with a `byte[1024]` and a reference to the next,
//! and 20,000 more that are garbage), and the snapshot must hold exactly that, complete.
//! Neither runtime has Block mode (.NET 11+), so both go through the Drop-mode fallback;
//! through a 1 MB buffer the dump loses events and must be refused as incomplete.
//!
//! The runtimes and the app come from `bash ci/dotnet.sh`; without them each test prints
//! one line and passes.

mod support;
use support::{eptrace, text};

use std::path::{Path, PathBuf};
use std::time::Duration;

use eventpipe_test_support::dotnet::{with_dotnet, App, Dotnet};

/// 64-bit object sizes, from the runtime's layout: an object is a header word and a method
/// table pointer (16 bytes) plus its fields; an array adds its length (padded to 8 bytes).
const HEAP_NODE_BYTES: u64 = 16 + 2 * 8;
const BYTE_ARRAY_1024_BYTES: u64 = 24 + 1024;
const NODE_ARRAY_BYTES: u64 = 24 + 20_000 * 8;
const NODES: u64 = 20_000;

fn snapshot_path(what: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "eptrace-gcdump-{}-{what}.nettrace",
        std::process::id()
    ))
}

/// Starts TestApp in heap mode and waits until its graph is built.
fn heap_app(dotnet: &Path, testapp: &Path, label: &str) -> App {
    let mut app = App::spawn_with(dotnet, testapp, &["heap", "120"], &[]);
    drop(app.wait_for_socket(label));
    app.line("heap ready", Duration::from_secs(30));
    app
}

fn known_heap(runtime: &str, pick: impl Fn(&Dotnet) -> &Path) {
    with_dotnet(|dotnet| {
        let label = format!("eptrace gcdump, {runtime}");
        let app = heap_app(pick(dotnet), &dotnet.testapp, &label);
        let path = snapshot_path(runtime);
        let pid = app.pid.to_string();
        let out = support::eptrace_ok(
            &label,
            &["gcdump", "-p", &pid, "-o", path.to_str().unwrap()],
        );
        assert!(
            text(&out.stdout).contains("Heap snapshot written"),
            "{label}"
        );
        // No Block mode before .NET 11: the fallback is said.
        assert!(
            text(&out.stderr).contains("no Block mode"),
            "{label}: {}",
            text(&out.stderr)
        );

        let report = eptrace(&["gcdump", "report", "--json", path.to_str().unwrap()]);
        assert!(report.status.success(), "{label}: {}", text(&report.stderr));
        let json: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
        let row = |name: &str| {
            json["types"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == name)
                .unwrap_or_else(|| panic!("{label}: no type {name} in {json}"))
                .clone()
        };
        let get = |row: &serde_json::Value, key: &str| row[key].as_u64().unwrap();
        // Exactly the kept nodes: the garbage batch is gone.
        let node = row("HeapNode");
        assert_eq!(get(&node, "count"), NODES, "{label}: {node}");
        assert_eq!(
            get(&node, "bytes"),
            NODES * HEAP_NODE_BYTES,
            "{label}: {node}"
        );
        // Their arrays, plus whatever byte[] the runtime holds itself.
        let bytes = row("System.Byte[]");
        assert!(get(&bytes, "count") >= NODES, "{label}: {bytes}");
        assert!(
            get(&bytes, "bytes") >= NODES * BYTE_ARRAY_1024_BYTES,
            "{label}: {bytes}"
        );
        assert!(
            get(&bytes, "count") < NODES + 100,
            "{label}: the garbage batch's arrays are still there: {bytes}"
        );
        let array = row("HeapNode[]");
        assert_eq!(
            (get(&array, "count"), get(&array, "bytes")),
            (1, NODE_ARRAY_BYTES)
        );
        // The list retains its array, every node and every node's payload.
        let list = row("System.Collections.Generic.List<HeapNode>");
        let held = NODES * (HEAP_NODE_BYTES + BYTE_ARRAY_1024_BYTES) + NODE_ARRAY_BYTES;
        assert!(get(&list, "retained") >= held, "{label}: {list}");
        assert!(get(&list, "retained") < held + 4096, "{label}: {list}");
        // A node is dominated by the array, not by the node before it: each retains itself
        // and its payload, and the type as a whole exactly that.
        assert_eq!(
            get(&node, "retained"),
            NODES * (HEAP_NODE_BYTES + BYTE_ARRAY_1024_BYTES),
            "{label}: {node}"
        );
        assert_eq!(
            json["bytes"].as_u64(),
            Some(
                json["types"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| get(t, "bytes"))
                    .sum()
            )
        );

        // The text report has dotnet-gcdump's columns and the retained bytes.
        let report = eptrace(&["gcdump", "report", path.to_str().unwrap()]);
        let t = text(&report.stdout);
        assert!(
            t.contains("GC Heap bytes") && t.contains("Retained Bytes"),
            "{t}"
        );
        assert!(
            t.contains("640,000    20,000"),
            "{label}: HeapNode's row: {t}"
        );

        // A dump against itself: nothing changed, and the diff lists nothing but says so.
        let same = eptrace(&[
            "gcdump",
            "diff",
            path.to_str().unwrap(),
            path.to_str().unwrap(),
        ]);
        assert!(same.status.success(), "{label}: {}", text(&same.stderr));
        let same = text(&same.stdout);
        let types = json["types"].as_array().unwrap().len();
        assert!(
            same.contains(&format!("  {types} types unchanged, not listed")),
            "{label}: {same}"
        );
        assert!(!same.contains("HeapNode"), "{label}: {same}");

        // The retention view opens in speedscope's format: the list's frame holds the nodes.
        let speedscope = snapshot_path(&format!("{runtime}-retention.json"));
        let conv = eptrace(&[
            "gcdump",
            "convert",
            "--format",
            "speedscope",
            "-o",
            speedscope.to_str().unwrap(),
            path.to_str().unwrap(),
        ]);
        assert!(conv.status.success(), "{label}: {}", text(&conv.stderr));
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&speedscope).unwrap()).unwrap();
        let frames = doc["shared"]["frames"].as_array().unwrap();
        let list_frame = frames
            .iter()
            .position(|f| f["name"] == "System.Collections.Generic.List<HeapNode>")
            .expect("the list is a frame");
        let profile = &doc["profiles"][0];
        let under_list: u64 = profile["samples"]
            .as_array()
            .unwrap()
            .iter()
            .zip(profile["weights"].as_array().unwrap())
            .filter(|(stack, _)| {
                stack
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f.as_u64() == Some(list_frame as u64))
            })
            .map(|(_, w)| w.as_u64().unwrap())
            .sum();
        assert_eq!(
            under_list,
            get(&list, "retained"),
            "{label}: the frame's total is what it retains"
        );
        std::fs::remove_file(&speedscope).ok();
        std::fs::remove_file(&path).ok();
    });
}

#[test]
fn a_known_heap_on_dotnet_8_is_exactly_what_the_app_holds() {
    known_heap(".NET 8", |d| &d.dotnet8);
}

#[test]
fn a_known_heap_on_dotnet_core_3_1_is_exactly_what_the_app_holds() {
    known_heap(".NET Core 3.1", |d| &d.dotnet31);
}

#[test]
fn a_dump_that_loses_events_is_refused_as_incomplete_not_reported_smaller() {
    with_dotnet(|dotnet| {
        let label = "eptrace gcdump --buffersize 1, .NET 8";
        let app = heap_app(&dotnet.dotnet8, &dotnet.testapp, label);
        let path = snapshot_path("tiny");
        let out = eptrace(&[
            "gcdump",
            "-p",
            &app.pid.to_string(),
            "--buffersize",
            "1",
            "-o",
            path.to_str().unwrap(),
        ]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{label}: {err}");
        assert!(err.contains("incomplete heap dump"), "{label}: {err}");
        assert!(err.contains("lost"), "{label}: says what was lost: {err}");
        assert!(!text(&out.stdout).contains("Heap snapshot written"));
        // Reading it again says the same; with --allow-partial it is shown, marked.
        let again = eptrace(&["gcdump", "report", path.to_str().unwrap()]);
        assert_eq!(again.status.code(), Some(1));
        assert!(text(&again.stderr).contains("incomplete heap dump"));
        let partial = eptrace(&[
            "gcdump",
            "report",
            "--allow-partial",
            path.to_str().unwrap(),
        ]);
        assert!(partial.status.success(), "{}", text(&partial.stderr));
        assert!(text(&partial.stderr).contains("INCOMPLETE"));
        std::fs::remove_file(&path).ok();
    });
}
