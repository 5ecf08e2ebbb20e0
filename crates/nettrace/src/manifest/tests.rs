use super::*;

const RUNTIME: &str = "Microsoft-Windows-DotNETRuntime";

fn names(fields: &[KnownField]) -> Vec<&'static str> {
    fields.iter().map(|f| f.name).collect()
}

#[test]
fn table_is_sorted_and_unique() {
    let table = known_events();
    assert!(!table.is_empty());
    for pair in table.windows(2) {
        let a = (pair[0].provider, pair[0].event_id, pair[0].version);
        let b = (pair[1].provider, pair[1].event_id, pair[1].version);
        assert!(a < b, "table not strictly sorted at {a:?} / {b:?}");
    }
}

#[test]
fn covers_every_provider() {
    for provider in [
        "Microsoft-Windows-DotNETRuntime",
        "Microsoft-Windows-DotNETRuntimeRundown",
        "Microsoft-Windows-DotNETRuntimePrivate",
        "Microsoft-Windows-DotNETRuntimeStress",
        "Microsoft-DotNETRuntimeMonoProfiler",
        "Microsoft-DotNETCore-SampleProfiler",
        "Microsoft-DotNETCore-EventPipe",
    ] {
        assert!(is_known_provider(provider), "{provider}");
    }
    assert!(!is_known_provider("Microsoft-Windows-DotNETRuntimeX"));
    assert!(!is_known_provider(""));
}

#[test]
fn names_are_task_slash_opcode() {
    for e in known_events() {
        let expected = if e.opcode.is_empty() {
            e.task.to_string()
        } else {
            format!("{}/{}", e.task, e.opcode)
        };
        assert_eq!(
            e.name, expected,
            "{} {} v{}",
            e.provider, e.event_id, e.version
        );
    }
}

#[test]
fn gc_start_v2() {
    let e = lookup(RUNTIME, 1, 2).expect("GC/Start v2");
    assert_eq!(e.name, "GC/Start");
    assert_eq!((e.task, e.opcode, e.opcode_value), ("GC", "Start", 1));
    assert_eq!((e.keywords, e.level), (0x1, 4));
    assert_eq!(
        names(e.fields),
        [
            "Count",
            "Depth",
            "Reason",
            "Type",
            "ClrInstanceID",
            "ClientSequenceNumber"
        ]
    );
    assert_eq!(e.fields[0].ty, KnownType::UInt32);
    assert_eq!(e.fields[4].ty, KnownType::UInt16);
    assert_eq!(e.fields[5].ty, KnownType::UInt64);
    assert!(e.fields.iter().all(|f| f.count == KnownCount::One));
}

#[test]
fn method_load_verbose_resolves() {
    let e = lookup(RUNTIME, 143, 2).expect("MethodLoadVerbose_V2");
    assert_eq!(e.name, "Method/LoadVerbose");
    assert_eq!(
        names(e.fields),
        [
            "MethodID",
            "ModuleID",
            "MethodStartAddress",
            "MethodSize",
            "MethodToken",
            "MethodFlags",
            "MethodNamespace",
            "MethodName",
            "MethodSignature",
            "ClrInstanceID",
            "ReJITID",
        ]
    );
    assert_eq!(e.fields[7].ty, KnownType::UnicodeString);
    assert!(known_events()
        .iter()
        .any(|e| e.provider == RUNTIME && e.name == "Method/LoadVerbose"));
}

#[test]
fn bulk_moved_object_ranges_struct_counted_by_field() {
    let e = lookup(RUNTIME, 22, 0).expect("GCBulkMovedObjectRanges");
    assert_eq!(e.name, "GC/BulkMovedObjectRanges");
    assert_eq!(
        names(e.fields),
        ["Index", "Count", "ClrInstanceID", "Values"]
    );
    let values = e.fields[3];
    assert_eq!(values.count, KnownCount::Field(1));
    assert_eq!(e.fields[1].name, "Count");
    let KnownType::Struct(inner) = values.ty else {
        panic!("Values is not a struct: {:?}", values.ty);
    };
    assert_eq!(
        names(inner),
        ["OldRangeBase", "NewRangeBase", "RangeLength"]
    );
    assert!(inner
        .iter()
        .all(|f| f.ty == KnownType::Pointer || f.ty == KnownType::UInt64));
}

#[test]
fn counts_refer_to_earlier_integer_fields() {
    fn check(fields: &[KnownField], ctx: &str) {
        for (i, f) in fields.iter().enumerate() {
            if let KnownCount::Field(j) = f.count {
                let j = usize::from(j);
                assert!(j < i, "{ctx}: {} counted by a later field", f.name);
                assert!(
                    matches!(
                        fields[j].ty,
                        KnownType::UInt8
                            | KnownType::UInt16
                            | KnownType::UInt32
                            | KnownType::UInt64
                            | KnownType::Int32
                    ),
                    "{ctx}: {} counted by {} of type {:?}",
                    f.name,
                    fields[j].name,
                    fields[j].ty
                );
            }
            if let KnownType::Struct(inner) = f.ty {
                check(inner, ctx);
            }
        }
    }
    for e in known_events() {
        check(e.fields, e.name);
    }
}

#[test]
fn fixed_counts_and_binary_lengths() {
    // MethodILToNativeMap: two arrays counted by CountOfMapEntries.
    let e = lookup(RUNTIME, 190, 0).expect("MethodILToNativeMap");
    assert_eq!(e.name, "Method/ILToNativeMap");
    assert_eq!(e.fields[3].name, "CountOfMapEntries");
    assert_eq!(e.fields[4].count, KnownCount::Field(3));
    assert_eq!(e.fields[5].count, KnownCount::Field(3));
    // GCDynamicEvent: win:Binary with length="DataSize".
    let e = lookup(RUNTIME, 39, 0).expect("GCDynamicEvent");
    assert_eq!(
        names(e.fields),
        ["Name", "DataSize", "Data", "ClrInstanceID"]
    );
    assert_eq!(e.fields[2].ty, KnownType::Binary);
    assert_eq!(e.fields[2].count, KnownCount::Field(1));
}

#[test]
fn higher_unknown_version_falls_back_to_highest_lower() {
    let e = lookup(RUNTIME, 1, 200).expect("fallback");
    assert_eq!(e.version, 2);
    assert_eq!(e.name, "GC/Start");
    // Exact versions are preferred over the fallback.
    assert_eq!(lookup(RUNTIME, 1, 1).map(|e| e.version), Some(1));
    assert_eq!(lookup(RUNTIME, 1, 0).map(|e| e.version), Some(0));
}

#[test]
fn unknown_provider_or_event_is_none() {
    assert!(lookup("Not-A-Provider", 1, 0).is_none());
    assert!(lookup("", 0, 0).is_none());
    assert!(lookup(RUNTIME, 65535, 0).is_none());
}

#[test]
fn traceevent_names() {
    let name = |provider: &str, id: u16, version: u8| lookup(provider, id, version).map(|e| e.name);
    // Event 200 (IncreaseMemoryPressure) has no TraceEvent template: task name only.
    assert_eq!(name(RUNTIME, 200, 0), Some("GC"));
    assert_eq!(name(RUNTIME, 3, 1), Some("GC/RestartEEStop"));
    assert_eq!(name(RUNTIME, 202, 0), Some("GC/MarkWithType"));
    assert_eq!(name(RUNTIME, 159, 0), Some("Method/R2RGetEntryPoint"));
    assert_eq!(
        name("Microsoft-Windows-DotNETRuntimeRundown", 300, 0),
        Some("ExecutionCheckpointRundown/ExecutionCheckpointDCEnd")
    );
    assert_eq!(
        name("Microsoft-Windows-DotNETRuntimeRundown", 146, 1),
        Some("Method/DCStopComplete")
    );
    assert_eq!(
        name("Microsoft-Windows-DotNETRuntimePrivate", 199, 0),
        Some("GC/PinPlugAtGCTime")
    );
    let mark = lookup(RUNTIME, 202, 0).unwrap();
    assert_eq!(
        names(mark.fields),
        ["HeapNum", "ClrInstanceID", "Type", "Promoted"]
    );
}

#[test]
fn hand_written_providers() {
    let sample = lookup("Microsoft-DotNETCore-SampleProfiler", 0, 0).expect("Thread/Sample");
    assert_eq!(sample.name, "Thread/Sample");
    assert_eq!(names(sample.fields), ["Type"]);
    assert_eq!(sample.fields[0].ty, KnownType::UInt32);

    let v0 = lookup("Microsoft-DotNETCore-EventPipe", 1, 0).expect("ProcessInfo v0");
    assert_eq!(v0.name, "ProcessInfo");
    assert_eq!(names(v0.fields), ["CommandLine"]);
    let v1 = lookup("Microsoft-DotNETCore-EventPipe", 1, 1).expect("ProcessInfo v1");
    assert_eq!(
        names(v1.fields),
        ["CommandLine", "OSInformation", "ArchInformation"]
    );
    assert!(v1.fields.iter().all(|f| f.ty == KnownType::UnicodeString));
}
