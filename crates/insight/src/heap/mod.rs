//! Heap snapshots as object graphs, and what each object retains.
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

pub mod dominators;
pub mod graph;

pub use dominators::{dominators, Dominators};
pub use graph::{GraphError, HeapGraph, HeapGraphBuilder, NodeId, TypeId, NO_NODE, ROOT_TYPE_NAME};
