//! # eventpipe-heap
//!
//! Heap snapshots as object graphs, and what each object retains; a Rust program's live
//! heap per allocation site. The data flow:
//!
//! ```text
//! nettrace::Event ─▶ gcdump::GcDumpBuilder (a .NET heap-dump session's GC/Bulk* events)
//!                 ─▶ gcdump::GcDump (a HeapGraph, checked complete)
//!                 ─▶ dominators() ─▶ gcdump::heap_report (per type: count, bytes,
//!                    retained), gcdump::diff_reports (growth between two)
//! nettrace::Event ─▶ live_heap::LiveHeapBuilder (the allocation profiler's snapshot,
//!                    sites named by eventpipe-symbols' Symbolizer)
//!                 ─▶ live_heap::LiveHeap (bytes and allocations live per site, with
//!                    their sampling error), live_heap::diff_live_heaps (growth)
//! ```
//!
//! The graph itself:
//!
//! ```text
//! HeapGraphBuilder (nodes with a size and a type, references in any order)
//!   ─▶ finish: ids checked, references laid out as CSR ─▶ HeapGraph
//!   ─▶ dominators: Semi-NCA from the synthetic root ─▶ Dominators
//!      (immediate dominator and retained size of every node)
//! ```
//!
//! Node 0 is a synthetic root of size 0 and type `[root]`; a heap's roots (stack slots,
//! handles, statics) are its children, so a node is live when the root reaches it. Ids are
//! `u32` and every per-node and per-edge array is one flat vector, so a graph of 10 M
//! objects and 30 M references and its dominators fit in well under a gigabyte.

#![forbid(unsafe_code)]

pub mod dominators;
pub mod gcdump;
pub mod graph;
pub mod live_heap;

pub use dominators::{dominators, DominatorTree, Dominators};
pub use graph::{GraphError, HeapGraph, HeapGraphBuilder, NodeId, TypeId, NO_NODE, ROOT_TYPE_NAME};
