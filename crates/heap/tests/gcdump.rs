//! The .NET heap-dump reader on synthetic traces written with `nettrace::write`, event by
//! event as the runtime lays them out (manifest templates `GCBulkNode`, `GCBulkEdge`,
//! `GCBulkRootEdge`, `BulkType`, `GCStart_V2`, `GCEnd_V1`): a known graph comes back with
//! its exact dominators and retained sizes, and every kind of hole (a skipped block, too
//! many or too few references, a lost `GC/Start`, a payload that lies about its count) makes
//! the dump incomplete or malformed, never a smaller heap. Real runtimes are in
//! `crates/eptrace/tests/gcdump.rs`.

use eventpipe_heap::dominators;
use eventpipe_heap::gcdump::{heap_report, GcDump, GcDumpBuilder, GcDumpError};
use eventpipe_test_support::trace::utf16;
use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{EventHeader, EventMetadata, FormatVersion, TraceInfo, TraceReader};

const RUNTIME: &str = "Microsoft-Windows-DotNETRuntime";

/// (metadata id, event id, version) of an event.
type Kind = (u32, u32, u32);
/// Events to write: (kind, payload).
type Events = Vec<(Kind, Vec<u8>)>;

/// (metadata id, event id, version) of the events used.
const GC_START: Kind = (1, 1, 2);
const GC_STOP: Kind = (2, 2, 1);
const BULK_TYPE: Kind = (3, 15, 0);
const BULK_ROOT_EDGE: Kind = (4, 16, 0);
const BULK_NODE: Kind = (5, 18, 0);
const BULK_EDGE: Kind = (6, 19, 0);

fn metadata() -> Vec<EventMetadata> {
    [
        GC_START,
        GC_STOP,
        BULK_TYPE,
        BULK_ROOT_EDGE,
        BULK_NODE,
        BULK_EDGE,
    ]
    .iter()
    .map(|&(id, event_id, version)| EventMetadata {
        metadata_id: id,
        provider: RUNTIME.into(),
        event_id,
        version,
        ..Default::default()
    })
    .collect()
}

fn header(index: u32, count: u32) -> Vec<u8> {
    let mut p = index.to_le_bytes().to_vec();
    p.extend(count.to_le_bytes());
    p.extend(0u16.to_le_bytes());
    p
}

fn gc_start(count: u32, depth: u32, kind: u32) -> Vec<u8> {
    gc_start_reason(count, depth, 1 /* induced */, kind)
}

fn gc_start_reason(count: u32, depth: u32, reason: u32, kind: u32) -> Vec<u8> {
    let mut p = Vec::new();
    for v in [count, depth, reason, kind] {
        p.extend(v.to_le_bytes());
    }
    p.extend(0u16.to_le_bytes());
    p.extend(0u64.to_le_bytes());
    p
}

fn gc_stop(count: u32) -> Vec<u8> {
    let mut p = count.to_le_bytes().to_vec();
    p.extend(2u32.to_le_bytes());
    p.extend(0u16.to_le_bytes());
    p
}

/// `Type/BulkType` naming `types` (id, runtime name).
fn bulk_type(types: &[(u64, &str)]) -> Vec<u8> {
    let mut p = (types.len() as u32).to_le_bytes().to_vec();
    p.extend(0u16.to_le_bytes());
    for (id, name) in types {
        p.extend(id.to_le_bytes()); // TypeID
        p.extend(0x1000u64.to_le_bytes()); // ModuleID
        p.extend(0u32.to_le_bytes()); // TypeNameID
        p.extend(0u32.to_le_bytes()); // Flags
        p.push(18); // CorElementType
        p.extend(utf16(name));
        p.extend(0u32.to_le_bytes()); // TypeParameterCount
    }
    p
}

/// (address, size, type id, references).
type Object = (u64, u64, u64, Vec<u64>);

fn bulk_nodes(index: u32, objects: &[Object]) -> Vec<u8> {
    let mut p = header(index, objects.len() as u32);
    for (address, size, ty, refs) in objects {
        for v in [*address, *size, *ty, refs.len() as u64] {
            p.extend(v.to_le_bytes());
        }
    }
    p
}

fn bulk_edges(index: u32, targets: &[u64]) -> Vec<u8> {
    let mut p = header(index, targets.len() as u32);
    for t in targets {
        p.extend(t.to_le_bytes());
        p.extend(0u32.to_le_bytes());
    }
    p
}

/// (address, kind, flags).
fn bulk_roots(index: u32, roots: &[(u64, u8, u32)]) -> Vec<u8> {
    let mut p = header(index, roots.len() as u32);
    for (address, kind, flags) in roots {
        p.extend(address.to_le_bytes());
        p.push(*kind);
        p.extend(flags.to_le_bytes());
        p.extend(0xabcdu64.to_le_bytes());
    }
    p
}

/// A V5 trace of `events` ((metadata, payload)), with `skip` sequence numbers missing
/// before the last event (the reader counts them lost).
fn trace(events: &[(Kind, Vec<u8>)], skip: u32) -> Vec<u8> {
    let info = TraceInfo::new(FormatVersion::V5, 8);
    let mut w = TraceWriter::new(Vec::new(), &info).unwrap();
    w.write_metadata_block(&metadata()).unwrap();
    let mut block = EventBlockBuilder::new(FormatVersion::V5);
    for (i, ((id, _, _), payload)) in events.iter().enumerate() {
        let last = i + 1 == events.len();
        let header = EventHeader {
            metadata_id: *id,
            sequence_number: i as u32 + 1 + if last { skip } else { 0 },
            thread: 7,
            capture_thread: 7,
            timestamp: 1_000 + i as i64,
            ..Default::default()
        };
        block.push(&header, payload);
    }
    w.write_event_block(&mut block).unwrap();
    w.finish().unwrap()
}

fn read(bytes: &[u8]) -> Result<GcDump, GcDumpError> {
    let mut reader = TraceReader::from_slice(bytes).unwrap();
    let mut b = GcDumpBuilder::new();
    while let Some(e) = reader.next_event().unwrap() {
        b.observe(&e)?;
    }
    b.finish(reader.stats().lost_events)
}

const LIST: u64 = 1;
const NODE: u64 = 2;
const BYTES: u64 = 3;

/// A list (0x100) holding three nodes (0x200, 0x300, 0x400) that link to the next, each
/// with a payload (0x210, 0x310, 0x410); a cycle of two nodes (0x500 ↔ 0x600) nothing
/// reported reaches; 0x700, referenced by nothing. Roots: the list (a strong handle) and,
/// weakly, the first node.
fn objects() -> Vec<Object> {
    vec![
        (0x100, 64, LIST, vec![0x200, 0x300, 0x400, 0xdead]),
        (0x200, 32, NODE, vec![0x210, 0x300]),
        (0x210, 1000, BYTES, vec![]),
        (0x300, 32, NODE, vec![0x310, 0x400]),
        (0x310, 1000, BYTES, vec![]),
        (0x400, 32, NODE, vec![0x410]),
        (0x410, 1000, BYTES, vec![]),
        (0x500, 32, NODE, vec![0x600]),
        (0x600, 32, NODE, vec![0x500]),
        (0x700, 8, BYTES, vec![]),
    ]
}

fn dump_events(objects: &[Object], split_at: usize) -> Events {
    let refs: Vec<u64> = objects.iter().flat_map(|o| o.3.clone()).collect();
    let refs_split = objects[..split_at].iter().map(|o| o.3.len()).sum();
    vec![
        (
            BULK_TYPE,
            bulk_type(&[
                (LIST, "System.Collections.Generic.List`1[Node]"),
                (NODE, "Node"),
            ]),
        ),
        (GC_START, gc_start(7, 1, 0)), // not a full GC: not the dump
        (GC_START, gc_start(8, 2, 1)), // background: walks no heap
        (GC_START, gc_start_reason(6, 2, 0, 0)), // full, but for want of memory: not induced
        (GC_START, gc_start(9, 2, 0)),
        (BULK_NODE, bulk_nodes(0, &objects[..split_at])),
        (BULK_EDGE, bulk_edges(0, &refs[..refs_split])),
        (BULK_NODE, bulk_nodes(1, &objects[split_at..])),
        (BULK_EDGE, bulk_edges(1, &refs[refs_split..])),
        (
            BULK_ROOT_EDGE,
            bulk_roots(0, &[(0x100, 2, 0), (0x200, 2, 0x2)]),
        ),
        // Named late, as the runtime may.
        (BULK_TYPE, bulk_type(&[(BYTES, "System.Byte[]")])),
        (GC_STOP, gc_stop(9)),
    ]
}

#[test]
fn a_known_graph_comes_back_with_its_dominators_and_retained_sizes() {
    let dump = read(&trace(&dump_events(&objects(), 4), 0)).expect("complete");
    assert_eq!(dump.objects, 10);
    assert_eq!(dump.bytes, 64 + 5 * 32 + 3000 + 8);
    assert_eq!(
        dump.unresolved_references, 1,
        "0xdead is no object of the dump"
    );
    assert_eq!(dump.references, 10);
    assert_eq!(dump.roots, 1, "the weak root is no root");
    // The cycle and the lone object hang under [unreported roots]: the one nothing
    // references first, then one node of the cycle.
    assert_eq!(dump.unreported_roots, 2);

    let g = &dump.graph;
    let doms = dominators(g);
    let report = heap_report(g, &doms, dump.first_object, dump.references);
    assert_eq!(report.unreachable, 0);
    let row = |name: &str| {
        report
            .types
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no {name}: {:?}", report.types))
    };
    // The list dominates its three nodes and their payloads.
    let list = row("System.Collections.Generic.List<Node>");
    assert_eq!(
        (list.count, list.bytes, list.retained),
        (1, 64, 64 + 3 * 32 + 3000)
    );
    // Node: five instances; the list's three (each dominated by the list, none by another
    // node, since the list references each) retain themselves and their payloads; the cycle
    // retains itself once.
    let node = row("Node");
    assert_eq!((node.count, node.bytes), (5, 160));
    assert_eq!(node.retained, 3 * (32 + 1000) + 64);
    let bytes = row("System.Byte[]");
    assert_eq!((bytes.count, bytes.bytes, bytes.retained), (4, 3008, 3008));
    // dotnet-gcdump's order: bytes, then count, descending.
    let names: Vec<&str> = report.types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "System.Byte[]",
            "Node",
            "System.Collections.Generic.List<Node>"
        ]
    );
}

#[test]
fn holes_make_the_dump_incomplete_and_say_where() {
    let problems = |events: Events, skip: u32| -> Vec<String> {
        match read(&trace(&events, skip)) {
            Err(GcDumpError::Incomplete { problems, partial }) => {
                assert!(partial.objects <= 10);
                problems
            }
            other => panic!("not reported incomplete: {other:?}"),
        }
    };
    // A node block skipped (block 1 renumbered 2).
    let mut events = dump_events(&objects(), 4);
    events[7].1[..4].copy_from_slice(&2u32.to_le_bytes());
    let p = problems(events, 0);
    assert!(
        p.iter()
            .any(|p| p.contains("GC/BulkNode block 2 arrived where block 1 was due")),
        "{p:?}"
    );

    // An edge block lost whole: the references fall short.
    let mut events = dump_events(&objects(), 4);
    events.remove(8);
    let p = problems(events, 0);
    assert!(
        p.iter()
            .any(|p| p.contains("announce 11 references but 8 arrived")),
        "{p:?}"
    );

    // An extra edge block: they run over.
    let mut events = dump_events(&objects(), 4);
    events.insert(9, (BULK_EDGE, bulk_edges(2, &[0x100])));
    let p = problems(events, 0);
    assert!(
        p.iter()
            .any(|p| p.contains("announce 11 references but 12 arrived")),
        "{p:?}"
    );

    // The GC never finishes.
    let mut events = dump_events(&objects(), 4);
    events.pop();
    let p = problems(events, 0);
    assert!(p.iter().any(|p| p.contains("never finished")), "{p:?}");

    // The GC/Start lost, with events lost in the trace.
    let mut events = dump_events(&objects(), 4);
    events.remove(4);
    let p = problems(events, 3);
    assert!(
        p.iter().any(|p| p.contains("GC/Start never arrived")),
        "{p:?}"
    );
    assert!(p.iter().any(|p| p.contains("lost 3 events")), "{p:?}");
}

#[test]
fn lying_payloads_are_malformed_and_a_trace_without_a_dump_says_so() {
    // A node block whose Count claims more values than it has.
    let mut events = dump_events(&objects(), 4);
    events[5].1[4..8].copy_from_slice(&1_000_000u32.to_le_bytes());
    let err = read(&trace(&events, 0)).unwrap_err();
    assert!(
        matches!(
            err,
            GcDumpError::Malformed {
                event: "GC/BulkNode",
                ..
            }
        ),
        "{err}"
    );
    // Truncated mid-value.
    let mut events = dump_events(&objects(), 4);
    events[6].1.truncate(13);
    assert!(matches!(
        read(&trace(&events, 0)),
        Err(GcDumpError::Malformed { .. })
    ));

    // No full GC at all.
    let events = vec![
        (BULK_TYPE, bulk_type(&[(1, "A")])),
        (GC_START, gc_start(1, 0, 0)),
    ];
    let err = read(&trace(&events, 0)).unwrap_err();
    assert!(matches!(err, GcDumpError::NoDump(_)), "{err}");
}
