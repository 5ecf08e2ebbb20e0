//! The speedscope converter: its output validates against the schema speedscope itself
//! ships (npm package `speedscope`, from `ci/converters.sh`), and read back as plain JSON it
//! holds the hand-built profile's exact stacks, weights, threads and frames.

mod common;

use std::collections::BTreeMap;

use eventpipe_insight::{write_speedscope, Error, Profile, SampleUnit};
use serde_json::{json, Value};

fn speedscope_json(profile: &Profile) -> Value {
    let mut out = Vec::new();
    write_speedscope(profile, &mut out).unwrap();
    serde_json::from_slice(&out).expect("speedscope output is JSON")
}

#[test]
fn output_validates_against_speedscopes_schema() {
    let Some(schema) = common::speedscope_schema("speedscope output against speedscope's schema")
    else {
        return;
    };
    let validator = jsonschema::validator_for(&schema).expect("speedscope's schema compiles");
    for unit in common::units() {
        let doc = speedscope_json(&common::workload(unit));
        let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{unit:?}: {errors:#?}");
    }
    let empty = speedscope_json(&Profile::new("empty", SampleUnit::Events));
    assert!(validator.is_valid(&empty));

    // The validator does reject what speedscope would not load, so the checks above mean
    // something: a unit it does not know, a missing weights array, a wrong $schema.
    let good = speedscope_json(&common::cpu_workload());
    let mut bad_unit = good.clone();
    bad_unit["profiles"][0]["unit"] = json!("furlongs");
    let mut no_weights = good.clone();
    no_weights["profiles"][0]
        .as_object_mut()
        .unwrap()
        .remove("weights");
    let mut wrong_schema = good.clone();
    wrong_schema["$schema"] = json!("https://example.invalid/schema.json");
    for bad in [bad_unit, no_weights, wrong_schema] {
        assert!(!validator.is_valid(&bad));
    }
}

#[test]
fn stacks_weights_and_threads_read_back_exactly() {
    for unit in common::units() {
        let profile = common::workload(unit);
        let doc = speedscope_json(&profile);

        assert_eq!(
            doc["$schema"],
            "https://www.speedscope.app/file-format-schema.json"
        );
        assert_eq!(doc["exporter"], "eventpipe-rs");
        // The file and each thread's profile say what the weights measure.
        let measure = unit.describe();
        assert_eq!(doc["name"], format!("Workload ({measure})"));

        let frames = doc["shared"]["frames"].as_array().unwrap();
        assert_eq!(frames.len(), profile.frames.len());
        let frame_names: Vec<&str> = frames.iter().map(|f| f["name"].as_str().unwrap()).collect();

        // One sampled profile per thread, in thread order, named by the thread.
        let profiles = doc["profiles"].as_array().unwrap();
        let names: Vec<&str> = profiles
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["main (7)", "worker (8)", "Thread 9"].map(|t| format!("{t}: {measure}"))
        );
        let tids = [7u64, 8, 9];

        let (unit_name, per_weight) = match unit {
            SampleUnit::CpuTime
            | SampleUnit::ThreadTime
            | SampleUnit::OffCpuTime
            | SampleUnit::LockWait => ("nanoseconds", common::PERIOD_NS as f64),
            SampleUnit::Bytes | SampleUnit::LiveBytes | SampleUnit::HeapBytes => ("bytes", 1.0),
            SampleUnit::Events => ("none", 1.0),
        };
        let mut got: BTreeMap<(u64, Vec<String>), f64> = BTreeMap::new();
        let mut totals = Vec::new();
        for (p, &tid) in profiles.iter().zip(&tids) {
            assert_eq!(p["type"], "sampled");
            assert_eq!(p["unit"], unit_name);
            let samples = p["samples"].as_array().unwrap();
            let weights = p["weights"].as_array().unwrap();
            assert_eq!(samples.len(), weights.len());
            let mut total = 0.0;
            for (stack, weight) in samples.iter().zip(weights) {
                let names = stack
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|i| frame_names[i.as_u64().unwrap() as usize].to_owned())
                    .collect();
                let w = weight.as_f64().unwrap();
                total += w;
                *got.entry((tid, names)).or_insert(0.0) += w;
            }
            assert_eq!(p["startValue"].as_f64(), Some(0.0));
            assert!((p["endValue"].as_f64().unwrap() - total).abs() < 1e-9);
            totals.push(total);
        }
        let expected: BTreeMap<(u64, Vec<String>), f64> = common::expected_by_thread_and_stack()
            .into_iter()
            .map(|(k, w)| (k, w as f64 * per_weight))
            .collect();
        assert_eq!(got.len(), expected.len(), "{unit:?}");
        for (key, w) in &expected {
            assert!(
                (got[key] - w).abs() < 1e-9,
                "{unit:?} {key:?}: {} != {w}",
                got[key]
            );
        }
        // One sample per table row, in time order within each thread.
        let rows: usize = profiles
            .iter()
            .map(|p| p["samples"].as_array().unwrap().len())
            .sum();
        assert_eq!(rows, common::WORKLOAD.len());

        // Opens on the heaviest thread: Thread 9 (12) over main (9) and worker (6).
        assert_eq!(doc["activeProfileIndex"], 2);
        assert!(totals[2] > totals[0] && totals[0] > totals[1]);
    }
}

#[test]
fn frames_carry_file_and_line_or_module() {
    let doc = speedscope_json(&common::cpu_workload());
    let frames = doc["shared"]["frames"].as_array().unwrap();
    let find = |name: &str, file: &str| {
        frames
            .iter()
            .find(|f| f["name"] == name && f["file"] == file)
            .unwrap_or_else(|| panic!("no frame {name} in {file}: {frames:#?}"))
    };
    assert_eq!(find("lex", "src/lex.rs")["line"], 13);
    assert_eq!(find("parse", "src/other.rs")["line"], 7);
    assert_eq!(find("parse", "src/parse.rs")["line"], 15);
    // No source file: the module names where the code is, and no line is claimed.
    let alloc = find("alloc", "libc.so.6");
    assert!(alloc.get("line").is_none());
    // Neither: only the name.
    let worker = frames.iter().find(|f| f["name"] == "worker").unwrap();
    assert_eq!(worker.as_object().unwrap().len(), 1);
}

#[test]
fn empty_and_inconsistent_profiles() {
    let doc = speedscope_json(&Profile::new("empty", SampleUnit::Bytes));
    assert_eq!(doc["profiles"], json!([]));
    assert!(doc.get("activeProfileIndex").is_none());

    let mut p = common::cpu_workload();
    p.stacks[0].push(1000);
    let mut out = Vec::new();
    assert!(matches!(
        write_speedscope(&p, &mut out),
        Err(Error::InvalidProfile(_))
    ));
    assert!(out.is_empty());
}
