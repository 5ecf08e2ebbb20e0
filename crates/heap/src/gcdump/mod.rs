//! A .NET heap snapshot from the events of a heap-dump session (what `dotnet-gcdump`
//! collects): the object graph of one induced full GC, rebuilt and checked whole.
//!
//! # What the runtime sends
//!
//! A session enabling `Microsoft-Windows-DotNETRuntime` with the keywords
//! [`GCDUMP_KEYWORDS`] at Verbose makes the runtime induce a full, blocking GC and walk the
//! heap during it. Between that GC's `GC/Start` (Depth 2, induced, not background) and the
//! `GC/Stop`
//! with the same `Count`:
//!
//! * `GC/BulkNode`: objects (address, size, type id, number of references), in blocks
//!   numbered 0, 1, 2, ...; each object owns the next `EdgeCount` references of the
//!   `GC/BulkEdge` stream, which is numbered the same way;
//! * `GC/BulkRootEdge`: roots (stack, handles, finalizer queue, ...; weak ones are not
//!   roots), numbered too; `GC/BulkRootStaticVar` (statics, by field name),
//!   `GC/BulkRootConditionalWeakTableElementEdge` (dependent handles: the value is kept) and
//!   `GC/BulkRootCCW` (objects COM holds; Windows);
//! * `Type/BulkType`: type ids and names, also before the GC (any order).
//!
//! # What it becomes
//!
//! A [`HeapGraph`]: node 0 the root; under it one node per root kind (`[local vars]`,
//! `[strong handles]`, `[pinning handles]`, `[finalizer handles]`, `[dependent handles]`,
//! `[static vars]` with a node per static field, `[other roots]`, and `[unreported roots]`
//! over the live objects no reported root reaches, as TraceEvent adds its orphans); then
//! the objects, typed
//! with the names .NET tools print (`List<HeapNode>`: generic arity dropped, brackets as
//! angle brackets, `[]` for arrays). A reference to an address that is no object of the
//! dump (frozen or unmanaged memory) is counted, not drawn.
//!
//! # Complete or not
//!
//! A graph with a hole is not a smaller heap. The dump is **incomplete** when a block
//! number is skipped or repeated, the references run over or fall short of what the
//! objects announced, the trace lost events, or the GC never finished; [`GcDumpBuilder::
//! finish`] then returns [`GcDumpError::Incomplete`] naming each problem, with the partial
//! graph for a caller that asked for it.

mod records;
pub mod report;

pub use report::{diff_reports, heap_report, HeapReport, TypeDiff, TypeRow};

use std::collections::HashMap;

use nettrace::{Event, Value};

use eventpipe_symbols::fields::{field, number};

use crate::graph::{GraphError, HeapGraph, HeapGraphBuilder, NodeId, TypeId};

/// The runtime provider whose events make the dump.
pub const DOTNET_RUNTIME: &str = "Microsoft-Windows-DotNETRuntime";
/// GC | Type | GCHeapDump | GCHeapCollect | GCHeapAndTypeNames: the keywords that make the
/// runtime induce a full GC and walk its heap (`dotnet-gcdump`'s).
pub const GCDUMP_KEYWORDS: u64 = 0x1980001;

mod event_id {
    pub(super) const GC_START: u32 = 1;
    pub(super) const GC_STOP: u32 = 2;
    pub(super) const BULK_TYPE: u32 = 15;
    pub(super) const BULK_ROOT_EDGE: u32 = 16;
    pub(super) const BULK_ROOT_CWT: u32 = 17;
    pub(super) const BULK_NODE: u32 = 18;
    pub(super) const BULK_EDGE: u32 = 19;
    pub(super) const BULK_ROOT_CCW: u32 = 36;
    pub(super) const BULK_ROOT_STATIC_VAR: u32 = 38;
}

/// `GC/Start`'s `Type` of a background GC, which walks no heap.
const BACKGROUND_GC: u64 = 1;
/// `GC/Start`'s `Reason`s of an induced GC (Induced, InducedNotForced, InducedLowMemory,
/// InducedCompacting): the heap dump's GC is one the runtime induces for the session.
const INDUCED_REASONS: [u64; 4] = [1, 7, 9, 10];

/// Why a dump could not be made, or is not whole.
#[derive(Debug, thiserror::Error)]
pub enum GcDumpError {
    /// A heap-dump event's payload is not what its `Count` says.
    #[error("malformed {event} event: {why}")]
    Malformed {
        /// Which event.
        event: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The trace holds no full GC's heap walk.
    #[error("no heap dump in the trace: {0}")]
    NoDump(String),
    /// The dump has holes; `partial` is what could be rebuilt.
    #[error("the heap dump is incomplete: {}", problems.join("; "))]
    Incomplete {
        /// Each problem, in words.
        problems: Vec<String>,
        /// The graph as far as it goes.
        partial: Box<GcDump>,
    },
    /// The dump is larger than a graph can hold (the limit is the source).
    #[error("the heap graph cannot be built")]
    Graph(#[from] GraphError),
}

/// How far a dump has come: for progress lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DumpProgress {
    /// Whether the dump's GC has started.
    pub started: bool,
    /// Whether it has finished: the dump is whole unless something was lost.
    pub finished: bool,
    /// Objects received.
    pub objects: u64,
    /// References received.
    pub references: u64,
    /// Types named.
    pub types: u64,
    /// Payload bytes of heap-dump events received.
    pub bytes: u64,
}

/// A rebuilt heap and what was noticed while rebuilding it.
#[derive(Debug)]
pub struct GcDump {
    /// The object graph.
    pub graph: HeapGraph,
    /// Objects in the dump (the graph also has the root and one node per root kind).
    pub objects: u64,
    /// Their total size in bytes.
    pub bytes: u64,
    /// References between objects.
    pub references: u64,
    /// References to addresses that are no object of the dump.
    pub unresolved_references: u64,
    /// Roots (not weak), including statics and dependent handles.
    pub roots: u64,
    /// Objects the reported roots do not reach, put under `[unreported roots]`: the GC
    /// kept them, so something the runtime does not report holds them.
    pub unreported_roots: u64,
    /// The first node that is an object (nodes before it are the root and root kinds).
    pub first_object: NodeId,
}

/// What kind of root a `GC/BulkRootEdge` names, as a group under the graph's root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum RootGroup {
    LocalVars,
    StrongHandles,
    PinningHandles,
    FinalizerHandles,
    DependentHandles,
    StaticVars,
    ThreadStaticVars,
    ComObjects,
    Other,
    Unreported,
}

impl RootGroup {
    fn name(self) -> &'static str {
        match self {
            RootGroup::LocalVars => "[local vars]",
            RootGroup::StrongHandles => "[strong handles]",
            RootGroup::PinningHandles => "[pinning handles]",
            RootGroup::FinalizerHandles => "[finalizer handles]",
            RootGroup::DependentHandles => "[dependent handles]",
            RootGroup::StaticVars => "[static vars]",
            RootGroup::ThreadStaticVars => "[thread static vars]",
            RootGroup::ComObjects => "[COM/WinRT objects]",
            RootGroup::Other => "[other roots]",
            RootGroup::Unreported => "[unreported roots]",
        }
    }

    /// The group of a `GCRootKind` with its `GCRootFlag`s; `None` for a weak reference,
    /// which keeps nothing alive.
    fn of(kind: u8, flags: u32) -> Option<RootGroup> {
        const STACK: u8 = 0;
        const FINALIZER: u8 = 1;
        const HANDLE: u8 = 2;
        const PINNING: u32 = 0x1;
        const WEAK: u32 = 0x2;
        const REF_COUNTED: u32 = 0x8;
        if flags & WEAK != 0 {
            return None;
        }
        Some(match kind {
            _ if flags & REF_COUNTED != 0 => RootGroup::ComObjects,
            STACK => RootGroup::LocalVars,
            FINALIZER => RootGroup::FinalizerHandles,
            HANDLE if flags & PINNING != 0 => RootGroup::PinningHandles,
            HANDLE => RootGroup::StrongHandles,
            _ => RootGroup::Other,
        })
    }
}

/// The numbered block streams of a dump, each checked for gaps.
#[derive(Debug, Clone, Copy)]
enum Stream {
    Nodes,
    Edges,
    Roots,
    DependentHandles,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Nodes => "GC/BulkNode",
            Stream::Edges => "GC/BulkEdge",
            Stream::Roots => "GC/BulkRootEdge",
            Stream::DependentHandles => "GC/BulkRootConditionalWeakTableElementEdge",
        }
    }
}

/// Collects a dump's events, one at a time, as they stream in.
#[derive(Debug, Default)]
pub struct GcDumpBuilder {
    /// The `Count` of the dump's GC, once it started.
    gc: Option<u32>,
    finished: bool,
    addresses: Vec<u64>,
    sizes: Vec<u64>,
    /// Index into `type_ids`.
    types: Vec<u32>,
    edge_counts: Vec<u64>,
    edge_targets: Vec<u64>,
    roots: Vec<(RootGroup, u64)>,
    /// (field name, object, thread static).
    statics: Vec<(String, u64, bool)>,
    /// The runtime's type ids, in first-seen order; `types` indexes this.
    type_ids: Vec<u64>,
    type_index: HashMap<u64, u32>,
    type_names: HashMap<u64, String>,
    /// The next block number expected on each stream.
    next_block: [u32; 4],
    problems: Vec<String>,
    bytes: u64,
    /// Heap-dump events that came without their GC's `GC/Start` (lost, or a GC before).
    stray: u64,
}

impl GcDumpBuilder {
    /// An empty builder, waiting for the dump's GC.
    pub fn new() -> GcDumpBuilder {
        GcDumpBuilder::default()
    }

    /// How far the dump has come.
    pub fn progress(&self) -> DumpProgress {
        DumpProgress {
            started: self.gc.is_some(),
            finished: self.finished,
            objects: self.addresses.len() as u64,
            references: self.edge_targets.len() as u64,
            types: self.type_names.len() as u64,
            bytes: self.bytes,
        }
    }

    /// Whether the dump's GC has finished: a collector can stop the session.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Feeds one event; events of other providers, and heap events outside the dump's GC,
    /// are ignored.
    ///
    /// # Errors
    /// [`GcDumpError::Malformed`] for a heap-dump event whose payload is not what it says.
    pub fn observe(&mut self, event: &Event<'_>) -> Result<(), GcDumpError> {
        let md = event.metadata;
        if md.provider != DOTNET_RUNTIME {
            return Ok(());
        }
        let pointer_size = event.trace.pointer_size;
        let in_dump = self.gc.is_some() && !self.finished;
        if self.gc.is_none()
            && matches!(
                md.event_id,
                event_id::BULK_NODE | event_id::BULK_EDGE | event_id::BULK_ROOT_EDGE
            )
        {
            self.stray += 1;
        }
        match md.event_id {
            event_id::GC_START if self.gc.is_none() => {
                let fields = event.decode_payload().unwrap_or_default();
                let num = |name: &str| number(&fields, name);
                let induced = num("Reason").is_some_and(|r| INDUCED_REASONS.contains(&r));
                if num("Depth") == Some(2) && induced && num("Type") != Some(BACKGROUND_GC) {
                    self.gc = num("Count").and_then(|c| u32::try_from(c).ok());
                }
            }
            event_id::GC_STOP if in_dump => {
                let count = event
                    .decode_payload()
                    .ok()
                    .and_then(|f| f.into_iter().find(|(n, _)| *n == "Count"))
                    .and_then(|(_, v)| v.as_u64());
                if count == self.gc.map(u64::from) {
                    self.finished = true;
                }
            }
            event_id::BULK_TYPE => self.bulk_types(event),
            event_id::BULK_NODE if in_dump => {
                self.bytes += event.payload.len() as u64;
                let header = records::bulk_nodes(event.payload, pointer_size, |n| {
                    self.addresses.push(n.address);
                    self.sizes.push(n.size);
                    self.edge_counts.push(n.edge_count);
                    let next = self.type_ids.len() as u32;
                    let t = *self.type_index.entry(n.type_id).or_insert(next);
                    if t == next {
                        self.type_ids.push(n.type_id);
                    }
                    self.types.push(t);
                })?;
                self.check_block(Stream::Nodes, header.index);
            }
            event_id::BULK_EDGE if in_dump => {
                self.bytes += event.payload.len() as u64;
                let header = records::bulk_edges(event.payload, pointer_size, |target| {
                    self.edge_targets.push(target);
                })?;
                self.check_block(Stream::Edges, header.index);
            }
            event_id::BULK_ROOT_EDGE if in_dump => {
                self.bytes += event.payload.len() as u64;
                let header = records::bulk_roots(event.payload, pointer_size, |r| {
                    if let Some(group) = RootGroup::of(r.kind, r.flags) {
                        self.roots.push((group, r.address));
                    }
                })?;
                self.check_block(Stream::Roots, header.index);
            }
            event_id::BULK_ROOT_CWT if in_dump => {
                self.bytes += event.payload.len() as u64;
                let fields = decoded(event, "GC/BulkRootConditionalWeakTableElementEdge")?;
                if let Some(index) = number(&fields, "Index") {
                    self.check_block(Stream::DependentHandles, index as u32);
                }
                for value in values(&fields) {
                    if let Some(target) = number(value, "GCValueNodeID") {
                        self.roots.push((RootGroup::DependentHandles, target));
                    }
                }
            }
            event_id::BULK_ROOT_CCW if in_dump => {
                // Objects COM or WinRT holds through a COM-callable wrapper.
                self.bytes += event.payload.len() as u64;
                let fields = decoded(event, "GC/BulkRootCCW")?;
                for value in values(&fields) {
                    if let Some(object) = number(value, "ObjectID") {
                        self.roots.push((RootGroup::ComObjects, object));
                    }
                }
            }
            event_id::BULK_ROOT_STATIC_VAR if in_dump => {
                self.bytes += event.payload.len() as u64;
                const THREAD_LOCAL: u64 = 0x1;
                let fields = decoded(event, "GC/BulkRootStaticVar")?;
                for value in values(&fields) {
                    let (Some(object), Some(Value::String(name))) =
                        (number(value, "ObjectID"), field(value, "FieldName"))
                    else {
                        continue;
                    };
                    let thread = number(value, "Flags").unwrap_or(0) & THREAD_LOCAL != 0;
                    self.statics.push((name.clone(), object, thread));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn bulk_types(&mut self, event: &Event<'_>) {
        const MODULE_BASE_ADDRESS: u64 = 0x1;
        const ARRAY: u64 = 0x8;
        let Ok(fields) = event.decode_payload() else {
            self.problems
                .push("a Type/BulkType event could not be decoded".to_owned());
            return;
        };
        self.bytes += event.payload.len() as u64;
        for value in values(&fields) {
            let Some(id) = number(value, "TypeID") else {
                continue;
            };
            let flags = number(value, "Flags").unwrap_or(0);
            let name = match field(value, "Name") {
                Some(Value::String(name)) if !name.is_empty() => dotnet_type_name(name),
                _ if flags & MODULE_BASE_ADDRESS != 0 => "[native type]".to_owned(),
                _ if flags & ARRAY != 0 => format!("ArrayType(0x{id:x})"),
                _ => format!("Type(0x{id:x})"),
            };
            self.type_names.entry(id).or_insert(name);
        }
    }

    fn check_block(&mut self, stream: Stream, index: u32) {
        let expected = &mut self.next_block[stream as usize];
        if index != *expected {
            self.problems.push(format!(
                "{} block {index} arrived where block {expected} was due: {}",
                stream.name(),
                if index > *expected {
                    format!("{} block(s) missing", index - *expected)
                } else {
                    "a block repeated or out of order".to_owned()
                }
            ));
        }
        *expected = index.saturating_add(1);
    }

    /// Rebuilds the graph. `lost_events` is what the trace reader counted as lost: any
    /// loss may have taken part of the dump.
    ///
    /// # Errors
    /// [`GcDumpError::NoDump`] when no full GC started, [`GcDumpError::Incomplete`] (with
    /// the partial graph) when the dump has holes, [`GcDumpError::Graph`] when it is too
    /// large for a graph.
    pub fn finish(mut self, lost_events: u64) -> Result<GcDump, GcDumpError> {
        let mut problems = std::mem::take(&mut self.problems);
        if self.gc.is_none() {
            if self.stray == 0 && lost_events == 0 {
                return Err(GcDumpError::NoDump(
                    "no full blocking GC started (the runtime induces one when a session \
                     enables the GC heap-dump keywords)"
                        .to_owned(),
                ));
            }
            problems.push(format!(
                "the dump's GC/Start never arrived, though {} heap-dump events did",
                self.stray
            ));
        }
        if self.gc.is_some() && !self.finished {
            problems.push("the dump's GC never finished in the trace".to_owned());
        }
        if lost_events > 0 {
            problems.push(format!(
                "the trace lost {lost_events} events, which may have carried objects or references"
            ));
        }
        let announced: u64 = self.edge_counts.iter().fold(0, |a, &c| a.saturating_add(c));
        let received = self.edge_targets.len() as u64;
        if announced != received {
            problems.push(format!(
                "the objects announce {announced} references but {received} arrived"
            ));
        }
        let dump = self.build()?;
        if problems.is_empty() {
            Ok(dump)
        } else {
            Err(GcDumpError::Incomplete {
                problems,
                partial: Box::new(dump),
            })
        }
    }

    fn build(mut self) -> Result<GcDump, GcDumpError> {
        let objects = self.addresses.len();
        if objects >= (NodeId::MAX / 2) as usize {
            return Err(GcDumpError::NoDump(format!(
                "{objects} objects: more than a heap graph holds"
            )));
        }
        // Addresses to object indices: objects sorted by address (a heap walk is mostly in
        // order), then each reference resolved once.
        let mut by_address: Vec<(u64, u32)> = self
            .addresses
            .iter()
            .enumerate()
            .map(|(i, &a)| (a, i as u32))
            .collect();
        by_address.sort_unstable();
        let resolve = |address: u64| -> u32 {
            by_address
                .binary_search_by_key(&address, |&(a, _)| a)
                .map_or(UNRESOLVED, |i| by_address[i].1)
        };
        let targets: Vec<u32> = self.edge_targets.iter().map(|&a| resolve(a)).collect();
        self.edge_targets = Vec::new();
        // Where each object's references start in `targets` (the last ones may be missing
        // in an incomplete dump).
        let mut starts = Vec::with_capacity(objects + 1);
        let mut at = 0usize;
        for &count in &self.edge_counts {
            starts.push(at);
            at = at.saturating_add(count as usize).min(targets.len());
        }
        starts.push(at);
        let edges_of = |i: usize| &targets[starts[i]..starts[i + 1]];
        let roots: Vec<(RootGroup, u32)> = self
            .roots
            .iter()
            .map(|&(group, address)| (group, resolve(address)))
            .collect();
        let statics: Vec<(&str, u32, bool)> = self
            .statics
            .iter()
            .map(|(name, address, thread)| (name.as_str(), resolve(*address), *thread))
            .collect();
        drop(by_address);

        // Objects the reported roots do not reach are alive all the same (the GC kept
        // them): held by roots the runtime does not report. They hang under a root kind
        // of their own, through a minimal set: first those nothing references, then one
        // per cycle that is left.
        let mut reached = vec![false; objects];
        let mut queue: Vec<u32> = Vec::new();
        let visit = |start: u32, reached: &mut Vec<bool>, queue: &mut Vec<u32>| {
            if start == UNRESOLVED || reached[start as usize] {
                return;
            }
            reached[start as usize] = true;
            queue.push(start);
            while let Some(i) = queue.pop() {
                for &t in edges_of(i as usize) {
                    if t != UNRESOLVED && !reached[t as usize] {
                        reached[t as usize] = true;
                        queue.push(t);
                    }
                }
            }
        };
        for &(_, object) in &roots {
            visit(object, &mut reached, &mut queue);
        }
        for &(_, object, _) in &statics {
            visit(object, &mut reached, &mut queue);
        }
        let mut orphans: Vec<u32> = Vec::new();
        if reached.iter().any(|r| !r) {
            let mut referenced = vec![false; objects];
            for &t in &targets {
                if t != UNRESOLVED {
                    referenced[t as usize] = true;
                }
            }
            for pass in [false, true] {
                for i in 0..objects as u32 {
                    // First pass: objects nothing references; second: what cycles remain.
                    if !reached[i as usize] && (pass || !referenced[i as usize]) {
                        orphans.push(i);
                        visit(i, &mut reached, &mut queue);
                    }
                }
            }
        }

        let mut g = HeapGraphBuilder::new();
        // Root kinds first, so they are the nodes after the root.
        let mut kinds: Vec<RootGroup> = roots.iter().map(|r| r.0).collect();
        kinds.extend(statics.iter().map(|s| {
            if s.2 {
                RootGroup::ThreadStaticVars
            } else {
                RootGroup::StaticVars
            }
        }));
        if !orphans.is_empty() {
            kinds.push(RootGroup::Unreported);
        }
        kinds.sort_unstable();
        kinds.dedup();
        // Nodes first, then the edges in order of their source, so the builder keeps them
        // as they come instead of sorting them: the root's, each root kind's, each static
        // field's, then the objects' (a heap walk gives each object's together).
        let mut group_nodes: HashMap<RootGroup, NodeId> = HashMap::new();
        let mut group_order: Vec<RootGroup> = Vec::new();
        for kind in kinds {
            let ty = g.add_type(kind.name());
            group_nodes.insert(kind, g.add_node(0, ty));
            group_order.push(kind);
        }
        let mut held: HashMap<RootGroup, Vec<NodeId>> = HashMap::new();
        let mut static_types: HashMap<&str, TypeId> = HashMap::new();
        let mut static_nodes = Vec::with_capacity(statics.len());
        for &(name, object, thread) in &statics {
            let kind = if thread {
                RootGroup::ThreadStaticVars
            } else {
                RootGroup::StaticVars
            };
            let ty = *static_types
                .entry(name)
                .or_insert_with(|| g.add_type(&format!("[static var {name}]")));
            let node = g.add_node(0, ty);
            held.entry(kind).or_default().push(node);
            static_nodes.push((node, object));
        }

        // Types of the objects, named now (their names may have come after the objects).
        let mut names: HashMap<String, TypeId> = HashMap::new();
        let type_of: Vec<TypeId> = self
            .type_ids
            .iter()
            .map(|id| {
                let name = self
                    .type_names
                    .get(id)
                    .cloned()
                    .unwrap_or_else(|| format!("UNKNOWN 0x{id:x}"));
                match names.get(&name) {
                    Some(&t) => t,
                    None => {
                        let t = g.add_type(&name);
                        names.insert(name, t);
                        t
                    }
                }
            })
            .collect();

        let first_object = g.node_count() as NodeId;
        g.reserve(objects, targets.len() + roots.len() + orphans.len());
        let mut bytes = 0u64;
        for (&size, &t) in self.sizes.iter().zip(&self.types) {
            g.add_node(size, type_of[t as usize]);
            bytes = bytes.saturating_add(size);
        }
        let mut root_count = 0u64;
        for &(kind, object) in &roots {
            if object != UNRESOLVED {
                held.entry(kind).or_default().push(first_object + object);
                root_count += 1;
            }
        }
        held.entry(RootGroup::Unreported)
            .or_default()
            .extend(orphans.iter().map(|&o| first_object + o));
        for &kind in &group_order {
            g.add_edge(0, group_nodes[&kind]);
        }
        for kind in &group_order {
            for &node in held.get(kind).map_or(&[][..], Vec::as_slice) {
                g.add_edge(group_nodes[kind], node);
            }
        }
        for &(node, object) in &static_nodes {
            if object != UNRESOLVED {
                g.add_edge(node, first_object + object);
                root_count += 1;
            }
        }
        let mut unresolved = 0u64;
        let mut references = 0u64;
        for i in 0..objects {
            let from = first_object + i as NodeId;
            for &t in edges_of(i) {
                if t == UNRESOLVED {
                    unresolved += 1;
                } else {
                    g.add_edge(from, first_object + t);
                    references += 1;
                }
            }
        }
        let graph = g.finish()?;
        Ok(GcDump {
            graph,
            objects: objects as u64,
            bytes,
            references,
            unresolved_references: unresolved,
            roots: root_count,
            unreported_roots: orphans.len() as u64,
            first_object,
        })
    }
}

/// An address that is no object of the dump.
const UNRESOLVED: u32 = u32::MAX;

fn decoded<'a>(
    event: &'a Event<'_>,
    name: &'static str,
) -> Result<Vec<(&'a str, Value)>, GcDumpError> {
    event.decode_payload().map_err(|e| GcDumpError::Malformed {
        event: name,
        why: e.to_string(),
    })
}

/// The `Values` array of a bulk event, each value's fields.
fn values<K: AsRef<str>>(fields: &[(K, Value)]) -> impl Iterator<Item = &[(String, Value)]> {
    let array = match field(fields, "Values") {
        Some(Value::Array(items)) => items.as_slice(),
        _ => &[],
    };
    array.iter().filter_map(|v| match v {
        Value::Object(fields) => Some(fields.as_slice()),
        _ => None,
    })
}

/// A runtime type name as .NET's heap tools print it: generic arity dropped, brackets as
/// angle brackets, arrays as `[]` (``System.Collections.Generic.List`1[HeapNode]`` →
/// `System.Collections.Generic.List<HeapNode>`, `System.Byte[]` stays).
pub fn dotnet_type_name(runtime_name: &str) -> String {
    let mut out = String::with_capacity(runtime_name.len());
    let mut chars = runtime_name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '`' if chars.peek().is_some_and(char::is_ascii_digit) => {
                while chars.peek().is_some_and(char::is_ascii_digit) {
                    chars.next();
                }
            }
            '[' => out.push('<'),
            ']' => out.push('>'),
            c => out.push(c),
        }
    }
    out.replace("<>", "[]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_read_as_dotnet_tools_print_them() {
        assert_eq!(
            dotnet_type_name("System.Collections.Generic.List`1[HeapNode]"),
            "System.Collections.Generic.List<HeapNode>"
        );
        assert_eq!(dotnet_type_name("System.Byte[]"), "System.Byte[]");
        assert_eq!(
            dotnet_type_name(
                "System.Collections.Generic.Dictionary`2[System.String,System.Int32[]]"
            ),
            "System.Collections.Generic.Dictionary<System.String,System.Int32[]>"
        );
        assert_eq!(dotnet_type_name("A`x"), "A`x");
    }

    #[test]
    fn weak_references_are_no_roots_and_kinds_group_as_the_runtime_names_them() {
        assert_eq!(RootGroup::of(2, 0x2), None);
        assert_eq!(RootGroup::of(0, 0), Some(RootGroup::LocalVars));
        assert_eq!(RootGroup::of(2, 0x1), Some(RootGroup::PinningHandles));
        assert_eq!(RootGroup::of(2, 0), Some(RootGroup::StrongHandles));
        assert_eq!(RootGroup::of(1, 0), Some(RootGroup::FinalizerHandles));
        assert_eq!(RootGroup::of(2, 0x8), Some(RootGroup::ComObjects));
        assert_eq!(RootGroup::of(5, 0), Some(RootGroup::Other));
    }
}
