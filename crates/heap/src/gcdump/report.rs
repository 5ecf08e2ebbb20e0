//! The per-type view of a heap: `dotnet-gcdump report`'s columns (bytes and count per type)
//! and what that tool cannot say, the bytes each type **retains**; and the difference of
//! two heaps, type by type, for hunting leaks.
//!
//! A type's retained bytes are what would be freed if every instance of it went away and
//! nothing else changed: the sum of the retained sizes (from the dominator tree) of its
//! instances that no other instance of the same type dominates, so a linked list of nodes
//! is counted once, not once per node.

use std::collections::HashMap;

use serde::Serialize;

use crate::dominators::{DominatorTree, Dominators};
use crate::graph::{HeapGraph, NodeId, TypeId};

/// One type's row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TypeRow {
    /// The type's name as .NET tools print it.
    pub name: String,
    /// Instances.
    pub count: u64,
    /// Their own bytes.
    pub bytes: u64,
    /// Bytes they keep alive, themselves included.
    pub retained: u64,
}

/// A heap summed per type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeapReport {
    /// Bytes of all objects.
    pub bytes: u64,
    /// Objects.
    pub objects: u64,
    /// References between objects.
    pub references: u64,
    /// Objects no root reaches (a snapshot of a full GC should have none).
    pub unreachable: u64,
    /// One row per type with instances: by bytes, then count, descending (`dotnet-gcdump
    /// report`'s order), then name.
    pub types: Vec<TypeRow>,
}

/// Sums `graph`'s objects (nodes from `first_object` on) per type.
pub fn heap_report(
    graph: &HeapGraph,
    dominators: &Dominators,
    first_object: NodeId,
    references: u64,
) -> HeapReport {
    let n = graph.node_count();
    let types = graph.type_count();
    let mut count = vec![0u64; types];
    let mut bytes = vec![0u64; types];
    let mut unreachable = 0u64;
    for node in first_object as usize..n {
        let node = node as NodeId;
        let t = graph.type_of(node) as usize;
        count[t] += 1;
        bytes[t] = bytes[t].saturating_add(graph.size(node));
        unreachable += u64::from(!dominators.is_reachable(node));
    }
    let retained = retained_by_type(graph, dominators);
    let mut rows: Vec<TypeRow> = (0..types)
        .filter(|&t| count[t] > 0)
        .map(|t| TypeRow {
            name: graph.type_name(t as TypeId).to_owned(),
            count: count[t],
            bytes: bytes[t],
            retained: retained[t],
        })
        .collect();
    rows.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(b.count.cmp(&a.count))
            .then(a.name.cmp(&b.name))
    });
    HeapReport {
        bytes: bytes.iter().fold(0, |a, &b| a.saturating_add(b)),
        objects: count.iter().sum(),
        references,
        unreachable,
        types: rows,
    }
}

/// Per type, the retained sizes of its instances that no instance of the same type
/// dominates: a walk of the dominator tree that knows, at each node, which types are on
/// the path above it.
fn retained_by_type(graph: &HeapGraph, dominators: &Dominators) -> Vec<u64> {
    let tree = DominatorTree::of(graph, dominators);
    let mut retained = vec![0u64; graph.type_count()];
    let mut on_path = vec![0u32; graph.type_count()];
    // Iterative depth-first walk: (node, entered); leaving a node takes its type off the
    // path.
    let mut stack: Vec<(NodeId, bool)> = vec![(graph.root(), false)];
    while let Some((node, entered)) = stack.pop() {
        let t = graph.type_of(node) as usize;
        if entered {
            on_path[t] -= 1;
            continue;
        }
        if on_path[t] == 0 {
            retained[t] = retained[t].saturating_add(dominators.retained(node));
        }
        on_path[t] += 1;
        stack.push((node, true));
        stack.extend(tree.children(node).iter().map(|&c| (c, false)));
    }
    retained
}

/// One type's change between two heaps (new minus old).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TypeDiff {
    /// The type's name.
    pub name: String,
    /// Instances: old, new.
    pub count: (u64, u64),
    /// Own bytes: old, new.
    pub bytes: (u64, u64),
    /// Retained bytes: old, new.
    pub retained: (u64, u64),
}

impl TypeDiff {
    /// The change in own bytes.
    pub fn bytes_delta(&self) -> i128 {
        i128::from(self.bytes.1) - i128::from(self.bytes.0)
    }
    /// The change in retained bytes.
    pub fn retained_delta(&self) -> i128 {
        i128::from(self.retained.1) - i128::from(self.retained.0)
    }
    /// The change in instances.
    pub fn count_delta(&self) -> i128 {
        i128::from(self.count.1) - i128::from(self.count.0)
    }
    /// The same instances, bytes and retained bytes in both heaps.
    pub fn is_unchanged(&self) -> bool {
        self.count.0 == self.count.1
            && self.bytes.0 == self.bytes.1
            && self.retained.0 == self.retained.1
    }
}

/// Every type of either heap, matched by name, largest growth in retained bytes first
/// (then own bytes, then count): the types a leak is made of come first.
pub fn diff_reports(old: &HeapReport, new: &HeapReport) -> Vec<TypeDiff> {
    let mut by_name: HashMap<&str, TypeDiff> = HashMap::new();
    for (side, report) in [(0, old), (1, new)] {
        for row in &report.types {
            let d = by_name.entry(&row.name).or_insert_with(|| TypeDiff {
                name: row.name.clone(),
                count: (0, 0),
                bytes: (0, 0),
                retained: (0, 0),
            });
            let set = |pair: &mut (u64, u64), v: u64| {
                if side == 0 {
                    pair.0 += v
                } else {
                    pair.1 += v
                }
            };
            set(&mut d.count, row.count);
            set(&mut d.bytes, row.bytes);
            set(&mut d.retained, row.retained);
        }
    }
    let mut rows: Vec<TypeDiff> = by_name.into_values().collect();
    rows.sort_by(|a, b| {
        b.retained_delta()
            .cmp(&a.retained_delta())
            .then(b.bytes_delta().cmp(&a.bytes_delta()))
            .then(b.count_delta().cmp(&a.count_delta()))
            .then(a.name.cmp(&b.name))
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(rows: &[(&str, u64, u64, u64)]) -> HeapReport {
        HeapReport {
            bytes: rows.iter().map(|r| r.2).sum(),
            objects: rows.iter().map(|r| r.1).sum(),
            references: 0,
            unreachable: 0,
            types: rows
                .iter()
                .map(|&(name, count, bytes, retained)| TypeRow {
                    name: name.to_owned(),
                    count,
                    bytes,
                    retained,
                })
                .collect(),
        }
    }

    #[test]
    fn the_diff_ranks_the_largest_retained_growth_first_and_keeps_vanished_types() {
        let old = report(&[
            ("Cache", 1, 32, 1_000),
            ("String", 100, 4_000, 4_000),
            ("Gone", 3, 96, 96),
        ]);
        let new = report(&[
            ("Cache", 1, 32, 900_000),
            ("String", 5_000, 200_000, 200_000),
            ("Fresh", 10, 320, 320),
        ]);
        let rows = diff_reports(&old, &new);
        let order: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        // The cache holds more than the strings grew by: it is the leak's root.
        assert_eq!(order, ["Cache", "String", "Fresh", "Gone"]);
        assert_eq!(rows[0].retained_delta(), 899_000);
        assert_eq!(rows[0].bytes_delta(), 0);
        assert_eq!(rows[1].count_delta(), 4_900);
        assert_eq!(rows[3].count, (3, 0));
        assert_eq!(rows[3].retained_delta(), -96);
        assert!(rows.iter().all(|r| !r.is_unchanged()));
    }

    #[test]
    fn a_type_is_unchanged_only_when_count_bytes_and_retained_all_match() {
        let old = report(&[
            ("Same", 2, 64, 64),
            ("Retains", 1, 32, 100),
            ("Moved", 2, 64, 64),
        ]);
        let new = report(&[
            ("Same", 2, 64, 64),
            ("Retains", 1, 32, 200),
            ("Moved", 3, 64, 64),
        ]);
        let unchanged: Vec<String> = diff_reports(&old, &new)
            .into_iter()
            .filter(TypeDiff::is_unchanged)
            .map(|r| r.name)
            .collect();
        assert_eq!(unchanged, ["Same"]);
    }
}
