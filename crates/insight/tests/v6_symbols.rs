//! Symbolization of nettrace V6 traces from what they carry: one-collect's `Universal.System`
//! mappings and symbols, checked against the `.expected.json` that states what was handed to
//! one-collect's writer (`../shared/traces`).

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};

use eventpipe_insight::{build_profile, FrameKind, Profile, SampleSelection};
use nettrace::TraceReader;
use serde_json::Value as Json;

/// The trace's bytes, its `.expected.json` and its profile of CPU samples with the notes.
fn load(name: &str) -> Option<(Json, Profile, Vec<String>)> {
    let root = common::shared_traces(name)?;
    let bytes = std::fs::read(root.join(name)).unwrap();
    let expected: Json = serde_json::from_str(
        &std::fs::read_to_string(root.join(format!("{name}.expected.json"))).unwrap(),
    )
    .unwrap();
    let mut reader = TraceReader::from_slice(&bytes).unwrap();
    let built = build_profile(&mut reader, SampleSelection::Cpu).unwrap();
    Some((expected, built.profile, built.notes))
}

fn cpu_count(expected: &Json) -> u64 {
    expected["event_counts_by_name"]["Universal.Events/cpu"]
        .as_u64()
        .unwrap()
}

fn names(p: &Profile, stack: usize) -> Vec<String> {
    p.stacks[stack]
        .iter()
        .map(|&f| p.frames[f].function.clone())
        .collect()
}

fn parse_address(v: &Json) -> u64 {
    u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// The first CPU sample's stack: its addresses as the `.expected.json` lists them (leaf
/// first), and the function names the profile gives its frames.
fn first_cpu_sample(expected: &Json, p: &Profile) -> (Vec<u64>, Vec<String>) {
    let first = &expected["first_event_by_name"]["Universal.Events/cpu"];
    let ips: Vec<u64> = first["stack"]
        .as_array()
        .unwrap()
        .iter()
        .map(parse_address)
        .collect();
    let first_sample = p
        .samples
        .iter()
        .min_by(|a, b| a.time_ms.total_cmp(&b.time_ms))
        .unwrap();
    (ips, names(p, first_sample.stack))
}

/// The trace's `ExpectedCPUSamplingRate` (nanoseconds between samples, as one-collect
/// writes it): what each CPU sample weighs.
fn interval_ns(expected: &Json) -> u64 {
    expected["trace_block"]["key_values"]["ExpectedCPUSamplingRate"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn cpu_capture_names_kernel_and_library_frames_and_keeps_every_stack() {
    let Some((expected, p, notes)) = load("onecollect-v6-cpu-capture.nettrace") else {
        return;
    };
    let notes = notes.join("\n");
    // Every sample, each weighing the trace's stated sampling interval of CPU time.
    assert_eq!(p.samples.len() as u64, cpu_count(&expected));
    assert_eq!(
        p.total_weight(),
        cpu_count(&expected) * interval_ns(&expected)
    );
    // Per thread: the .expected.json's per-thread event counts, less the process-level
    // events on tid 0 (which are not samples). The rest are exactly the CPU samples.
    let want: BTreeMap<u64, u64> = expected["threads"]["per_thread"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["tid"].as_u64() != Some(0))
        .map(|t| (t["tid"].as_u64().unwrap(), t["events"].as_u64().unwrap()))
        .collect();
    assert_eq!(want.values().sum::<u64>(), cpu_count(&expected));
    let mut got: BTreeMap<u64, u64> = BTreeMap::new();
    for s in &p.samples {
        *got.entry(p.threads[s.thread].id).or_default() += 1;
    }
    assert_eq!(got, want);
    // No stack folded into `[unknown]`: the distinct address sequences stay distinct
    // stacks, except where two differ only by the address inside one function (a frame is a
    // function), which needs that function named: at least 12 of the 13 remain.
    let stacks: HashSet<usize> = p.samples.iter().map(|s| s.stack).collect();
    let distinct = expected["distinct_stacks"].as_u64().unwrap();
    assert!(
        (distinct - 1..=distinct).contains(&(stacks.len() as u64)),
        "{} stacks of {distinct}",
        stacks.len()
    );
    assert!(
        p.frames.iter().all(|f| f.function != "[unknown]"),
        "{:#?}",
        p.frames
    );

    let all: HashSet<&str> = p.frames.iter().map(|f| f.function.as_str()).collect();
    // Kernel frames, named by the trace's ProcessSymbol events: the first one the
    // .expected.json shows, and others the trace's symbol events name (see
    // `eptrace dump FILE --provider Universal.System`).
    let first_symbol = &expected["first_event_by_name"]["Universal.System/ProcessSymbol"];
    let first_symbol_name = first_symbol["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "Name")
        .unwrap()["value"]
        .as_str()
        .unwrap();
    assert_eq!(first_symbol_name, "entry_SYSCALL_64_after_hwframe");
    for kernel in [
        first_symbol_name,
        "do_syscall_64",
        "__x64_sys_execve",
        "load_elf_binary",
        "asm_sysvec_apic_timer_interrupt",
        "__schedule",
    ] {
        assert!(all.contains(kernel), "{kernel} missing from {all:?}");
    }
    // Every kernel frame is named: each address the samples hit has a symbol in the trace.
    for f in p
        .frames
        .iter()
        .filter(|f| f.module.as_deref() == Some("vmlinux"))
    {
        assert_eq!(f.kind, FrameKind::Native, "{f:?}");
    }
    // The first sample's stack (leaf first in the .expected.json) ends, at its root, in
    // four user frames of the process's libc before its exec (0x7ff3...), under twelve
    // kernel frames: sixteen frames, none folded.
    let (ips, first_names) = first_cpu_sample(&expected, &p);
    assert_eq!(first_names.len(), ips.len(), "{first_names:?}");
    assert_eq!(
        first_names[ips.len() - 1 - 11],
        "entry_SYSCALL_64_after_hwframe"
    );

    // The program itself (/tmp/demo/spin) is neither on this disk nor named by the trace:
    // its frames keep their offsets, and the notes say why and how many samples.
    let spin: Vec<_> = p
        .frames
        .iter()
        .filter(|f| f.module.as_deref() == Some("spin"))
        .collect();
    assert!(!spin.is_empty());
    for f in &spin {
        assert_eq!(f.kind, FrameKind::ModuleOffset, "{f:?}");
        assert!(f.function.starts_with("spin+0x"), "{f:?}");
    }
    assert!(
        notes.contains("/tmp/demo/spin: cannot read the binary"),
        "{notes}"
    );
    assert!(
        notes.contains("/tmp/demo/spin: 13 distinct addresses have no symbol in the trace"),
        "{notes}"
    );
    assert!(
        notes.contains(
            "1651 of 1652 samples (99.9% of the CPU time) have frames that could not be named"
        ),
        "{notes}"
    );

    // libc: named from the file on disk when it is the traced build (build id stated by
    // the trace's ProcessMappingMetadata), with its separate debug file when installed.
    const TRACED_LIBC_BUILD_ID: &str = "93ac61ec5a8eb1396f9fbd350e3169a558528a40";
    let local_libc = std::fs::read("/usr/lib/x86_64-linux-gnu/libc.so.6").ok();
    let local_id = local_libc.as_deref().and_then(|data| {
        use object::Object;
        let file = object::File::parse(data).ok()?;
        let id = file.build_id().ok()??;
        Some(id.iter().map(|b| format!("{b:02x}")).collect::<String>())
    });
    if local_id.as_deref() != Some(TRACED_LIBC_BUILD_ID) {
        eprintln!("skipping the libc names: this machine's libc is not the traced build");
        return;
    }
    let debug_file = format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &TRACED_LIBC_BUILD_ID[..2],
        &TRACED_LIBC_BUILD_ID[2..]
    );
    if !std::path::Path::new(&debug_file).exists() {
        eprintln!("skipping the libc names: libc6-dbg is not installed");
        return;
    }
    // The names binutils gives these addresses: `addr2line -f -e DEBUG_FILE` at the
    // samples' libc file offsets (0x891f4, 0x1098eb, 0x27249, 0x27304, 0xcf438).
    for libc in [
        "start_thread",
        "clone3",
        "__libc_start_call_main",
        "__libc_start_main_impl",
        "__GI___clock_gettime",
    ] {
        assert!(all.contains(libc), "{libc} missing from {all:?}");
    }
    assert!(
        p.frames
            .iter()
            .filter(|f| f.module.as_deref() == Some("libc.so.6"))
            .all(|f| f.kind == FrameKind::Native),
        "{:#?}",
        p.frames
    );
}

/// (pid, tid, root-first names) → samples, computed from the `.expected.json`'s events: each
/// IP named by the ProcessSymbol of the same process whose range (inclusive) contains it.
fn expected_named_stacks(expected: &Json) -> BTreeMap<(u64, Vec<String>), u64> {
    let events = expected["events"].as_array().unwrap();
    let field = |e: &Json, name: &str| -> Json {
        e["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .map(|f| f["value"].clone())
            .unwrap_or(Json::Null)
    };
    let mut mapping_pid: HashMap<u64, u64> = HashMap::new();
    let mut symbols: Vec<(u64, u64, u64, String)> = Vec::new(); // pid, start, end, name
    for e in events {
        match e["event_name"].as_str().unwrap() {
            "ProcessMapping" => {
                mapping_pid.insert(field(e, "Id").as_u64().unwrap(), e["pid"].as_u64().unwrap());
            }
            "ProcessSymbol" => symbols.push((
                mapping_pid[&field(e, "MappingId").as_u64().unwrap()],
                field(e, "StartAddress").as_u64().unwrap(),
                field(e, "EndAddress").as_u64().unwrap(),
                field(e, "Name").as_str().unwrap().to_owned(),
            )),
            _ => {}
        }
    }
    let mut out = BTreeMap::new();
    for e in events.iter().filter(|e| e["event_name"] == "cpu") {
        let pid = e["pid"].as_u64().unwrap();
        let mut root_first: Vec<String> = e["stack"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, ip)| {
                let ip = parse_address(ip);
                // A return address names its call instruction, one byte before.
                let probe = if i > 0 { ip - 1 } else { ip };
                symbols
                    .iter()
                    .find(|s| s.0 == pid && s.1 <= probe && probe <= s.2)
                    .map(|s| s.3.clone())
                    .unwrap_or_else(|| format!("0x{ip:x}"))
            })
            .collect();
        root_first.reverse();
        *out.entry((e["tid"].as_u64().unwrap(), root_first))
            .or_insert(0) += field(e, "Value").as_u64().unwrap();
    }
    out
}

#[test]
fn small_synthetic_trace_names_every_sample_from_its_own_symbols() {
    let Some((expected, p, notes)) = load("onecollect-v6-small.nettrace") else {
        return;
    };
    let want = expected_named_stacks(&expected);
    assert_eq!(want.values().sum::<u64>(), cpu_count(&expected));
    let mut got: BTreeMap<(u64, Vec<String>), u64> = BTreeMap::new();
    for s in &p.samples {
        *got.entry((p.threads[s.thread].id, names(&p, s.stack)))
            .or_insert(0) += s.weight / interval_ns(&expected);
    }
    assert_eq!(got, want);
    // The two samples fed without frames (written as the one address 0) are said to be so.
    let notes = notes.join("\n");
    assert!(
        notes.contains("address 0: 1 distinct addresses stand for stacks recorded without frames"),
        "{notes}"
    );
}

#[test]
fn medium_synthetic_trace_names_every_frame() {
    let Some((expected, p, notes)) = load("onecollect-v6-medium.nettrace") else {
        return;
    };
    assert_eq!(
        p.total_weight(),
        cpu_count(&expected) * interval_ns(&expected)
    );
    let unnamed: Vec<_> = p
        .frames
        .iter()
        .filter(|f| f.kind != FrameKind::Native)
        .collect();
    assert!(unnamed.is_empty(), "{unnamed:?} {notes:?}");
    assert!(notes.is_empty(), "{notes:?}");
    // The first sample's leaf: inside the first ProcessSymbol's range, it bears its name.
    let symbol = &expected["first_event_by_name"]["Universal.System/ProcessSymbol"];
    let value = |name: &str| {
        symbol["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap()["value"]
            .clone()
    };
    let (start, end) = (
        value("StartAddress").as_u64().unwrap(),
        value("EndAddress").as_u64().unwrap(),
    );
    let (ips, first_names) = first_cpu_sample(&expected, &p);
    assert_eq!(first_names.len(), ips.len());
    for (i, ip) in ips.iter().enumerate() {
        let probe = if i > 0 { ip - 1 } else { *ip };
        if (start..=end).contains(&probe) {
            assert_eq!(
                first_names[ips.len() - 1 - i],
                value("Name").as_str().unwrap()
            );
        }
    }
}
