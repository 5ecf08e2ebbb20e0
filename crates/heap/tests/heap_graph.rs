//! The heap graph and its dominators: small graphs whose dominators are known, random graphs
//! against a brute-force reference written from the definition, a chain deeper than any
//! recursion could go, and bad input to the builder.

use eventpipe_heap::{
    dominators, GraphError, HeapGraph, HeapGraphBuilder, NodeId, NO_NODE, ROOT_TYPE_NAME,
};
use proptest::prelude::*;

/// A graph of `sizes.len()` nodes after the root (node `i + 1` has `sizes[i]`), all of one
/// type, with `edges`.
fn graph(sizes: &[u64], edges: &[(NodeId, NodeId)]) -> HeapGraph {
    let mut b = HeapGraphBuilder::new();
    let t = b.add_type("Node");
    for &s in sizes {
        b.add_node(s, t);
    }
    for &(f, to) in edges {
        b.add_edge(f, to);
    }
    b.finish().expect("a valid graph")
}

/// Every node's immediate dominator (`None` for the root and unreachable ones) and
/// retained size.
fn idoms_and_retained(g: &HeapGraph) -> (Vec<Option<NodeId>>, Vec<u64>) {
    let d = dominators(g);
    let n = g.node_count() as NodeId;
    (
        (0..n).map(|v| d.idom(v)).collect(),
        (0..n).map(|v| d.retained(v)).collect(),
    )
}

#[test]
fn diamond_joins_at_the_fork() {
    // 0 -> 1 -> {2, 3} -> 4
    let g = graph(&[1, 2, 4, 8], &[(0, 1), (1, 2), (1, 3), (2, 4), (3, 4)]);
    let (idom, retained) = idoms_and_retained(&g);
    assert_eq!(idom, [None, Some(0), Some(1), Some(1), Some(1)]);
    assert_eq!(retained, [15, 15, 2, 4, 8]);
}

#[test]
fn chain_each_dominates_the_rest() {
    let g = graph(&[1, 2, 4, 8], &[(2, 3), (0, 1), (3, 4), (1, 2)]);
    let (idom, retained) = idoms_and_retained(&g);
    assert_eq!(idom, [None, Some(0), Some(1), Some(2), Some(3)]);
    assert_eq!(retained, [15, 15, 14, 12, 8]);
}

#[test]
fn cycle_back_to_an_earlier_node_changes_nothing_above_it() {
    // 0 -> 1 -> 2 -> 3 -> 1, and 3 -> 4: the back edge to 1 adds no way into 2, 3 or 4.
    let g = graph(&[1, 2, 4, 8], &[(0, 1), (1, 2), (2, 3), (3, 1), (3, 4)]);
    let (idom, retained) = idoms_and_retained(&g);
    assert_eq!(idom, [None, Some(0), Some(1), Some(2), Some(3)]);
    assert_eq!(retained, [15, 15, 14, 12, 8]);
}

#[test]
fn cycle_entered_twice_has_no_dominator_inside() {
    // 0 -> 1 -> 2 -> 3 -> 2, and 0 -> 3: 2 and 3 are each reachable without the other.
    let g = graph(&[1, 2, 4], &[(0, 1), (1, 2), (2, 3), (3, 2), (0, 3)]);
    let (idom, retained) = idoms_and_retained(&g);
    assert_eq!(idom, [None, Some(0), Some(0), Some(0)]);
    assert_eq!(retained, [7, 1, 2, 4]);
}

#[test]
fn unreachable_island_has_no_dominator_and_retains_nothing() {
    // 3 <-> 4 -> 5 refer to each other, nothing reachable refers to them; 4 -> 1 does not
    // make 1 any less dominated by the root.
    let g = graph(
        &[1, 2, 4, 8, 16],
        &[(0, 1), (1, 2), (3, 4), (4, 3), (4, 5), (4, 1)],
    );
    let d = dominators(&g);
    assert_eq!(d.reachable_count(), 3);
    for n in [3, 4, 5] {
        assert!(!d.is_reachable(n));
        assert_eq!(d.idom(n), None);
        assert_eq!(d.retained(n), 0);
    }
    assert!(d.is_reachable(0) && d.is_reachable(1) && d.is_reachable(2));
    assert_eq!(d.idom(2), Some(1));
    assert_eq!(d.retained(0), 3);
}

#[test]
fn self_edges_and_duplicate_edges_change_nothing() {
    let plain = graph(&[1, 2, 4], &[(0, 1), (1, 2), (1, 3), (2, 3)]);
    let noisy = graph(
        &[1, 2, 4],
        &[
            (0, 0),
            (0, 1),
            (1, 1),
            (0, 1),
            (1, 2),
            (2, 2),
            (1, 2),
            (1, 3),
            (3, 3),
            (2, 3),
            (2, 3),
            (1, 3),
        ],
    );
    assert_eq!(noisy.edge_count(), 12);
    let (idom, retained) = idoms_and_retained(&noisy);
    assert_eq!((idom.clone(), retained.clone()), idoms_and_retained(&plain));
    assert_eq!(idom, [None, Some(0), Some(1), Some(1)]);
    assert_eq!(retained, [7, 7, 2, 4]);
}

#[test]
fn many_roots_share_only_the_root() {
    // The root's children all refer to 4: only the root dominates it.
    let g = graph(
        &[1, 1, 1, 10],
        &[(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4)],
    );
    let (idom, retained) = idoms_and_retained(&g);
    assert_eq!(idom, [None, Some(0), Some(0), Some(0), Some(0)]);
    assert_eq!(retained, [13, 1, 1, 1, 10]);
}

#[test]
fn lengauer_tarjans_example_flowgraph() {
    // The flowgraph of Lengauer and Tarjan's paper (figure 1), R..L as 0..12.
    let [r, a, b, c, d, e, f, g, h, i, j, k, l] = [0u32, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
    let edges = [
        (r, a),
        (r, b),
        (r, c),
        (a, d),
        (b, a),
        (b, d),
        (b, e),
        (c, f),
        (c, g),
        (d, l),
        (e, h),
        (f, i),
        (g, i),
        (g, j),
        (h, e),
        (h, k),
        (i, k),
        (j, i),
        (k, i),
        (k, r),
        (l, h),
    ];
    let graph = graph(&[1; 12], &edges);
    let (idom, _) = idoms_and_retained(&graph);
    let want = [
        None,
        Some(r),
        Some(r),
        Some(r),
        Some(r),
        Some(r),
        Some(c),
        Some(c),
        Some(r),
        Some(r),
        Some(g),
        Some(r),
        Some(d),
    ];
    assert_eq!(idom, want);
}

#[test]
fn graph_keeps_sizes_types_and_names() {
    let mut b = HeapGraphBuilder::new();
    let a = b.add_type("System.String");
    let a2 = b.add_type("System.String");
    let n1 = b.add_node(24, a);
    let n2 = b.add_node(1 << 40, a2);
    b.add_edge(n1, n2);
    b.add_edge(0, n1);
    assert_eq!(b.node_count(), 3);
    let g = b.finish().unwrap();
    assert_eq!(g.root(), 0);
    assert_eq!(g.size(0), 0);
    assert_eq!(g.type_of(0), 0);
    assert_eq!(g.type_name(0), ROOT_TYPE_NAME);
    assert_eq!(g.type_count(), 3);
    assert_ne!(a, a2, "types are not interned");
    assert_eq!(g.type_name(a2), "System.String");
    assert_eq!((g.size(n2), g.type_of(n2)), (1 << 40, a2));
    assert_eq!(g.children(0), [n1]);
    assert_eq!(g.children(n2), [] as [NodeId; 0]);
    let d = dominators(&g);
    assert_eq!(d.retained(0), 24 + (1 << 40));
}

#[test]
fn root_alone() {
    let g = HeapGraphBuilder::new().finish().unwrap();
    assert_eq!((g.node_count(), g.edge_count()), (1, 0));
    let d = dominators(&g);
    assert_eq!(d.reachable_count(), 1);
    assert_eq!(d.idom(0), None);
    assert!(d.is_reachable(0));
    assert_eq!(d.retained(0), 0);
}

/// A linked list two million long, walked on the test's own thread (the default 2 MiB
/// test stack): nothing recurses per node.
#[test]
fn two_million_deep_chain_does_not_overflow_the_stack() {
    const LEN: u32 = 2_000_000;
    let mut b = HeapGraphBuilder::new();
    let t = b.add_type("Link");
    for _ in 0..LEN {
        b.add_node(32, t);
    }
    // Head first, and a back edge from the tail to the head, the path compression's
    // worst case.
    for n in 0..LEN {
        b.add_edge(n, n + 1);
    }
    b.add_edge(LEN, 1);
    let g = b.finish().unwrap();
    let d = dominators(&g);
    assert_eq!(d.reachable_count(), LEN as usize + 1);
    assert_eq!(d.idom(LEN), Some(LEN - 1));
    assert_eq!(d.retained(1), 32 * u64::from(LEN));
    assert_eq!(d.retained(LEN / 2), 32 * u64::from(LEN - LEN / 2 + 1));

    // The same list entered from both ends (a doubly linked list held by its tail too).
    let mut b = HeapGraphBuilder::new();
    let t = b.add_type("Link");
    for _ in 0..LEN {
        b.add_node(32, t);
    }
    b.add_edge(0, LEN);
    for n in 1..LEN {
        b.add_edge(n + 1, n);
        b.add_edge(n, n + 1);
    }
    b.add_edge(0, 1);
    let d = dominators(&b.finish().unwrap());
    assert_eq!(d.reachable_count(), LEN as usize + 1);
    for n in [1, 2, LEN / 2, LEN] {
        assert_eq!(d.idom(n), Some(0), "node {n}");
        assert_eq!(d.retained(n), 32);
    }
}

#[test]
fn edge_to_a_missing_node_is_an_error() {
    let mut b = HeapGraphBuilder::new();
    b.add_node(8, 0);
    b.add_edge(0, 1);
    b.add_edge(1, 7);
    assert_eq!(
        b.finish().unwrap_err(),
        GraphError::MissingNode {
            index: 1,
            from: 1,
            to: 7,
            missing: 7,
            node_count: 2
        }
    );

    let mut b = HeapGraphBuilder::new();
    b.add_edge(NO_NODE, 0);
    let e = b.finish().unwrap_err();
    assert!(
        matches!(
            e,
            GraphError::MissingNode {
                missing: NO_NODE,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn node_of_a_missing_type_is_an_error() {
    let mut b = HeapGraphBuilder::new();
    let t = b.add_type("T");
    b.add_node(8, t);
    b.add_node(8, t + 1);
    let e = b.finish().unwrap_err();
    assert_eq!(
        e,
        GraphError::MissingType {
            node: 2,
            ty: 2,
            type_count: 2
        }
    );
    assert_eq!(
        e.to_string(),
        "node 2 has type 2, but the graph has 2 types"
    );
}

#[test]
fn edges_may_name_nodes_added_after_them() {
    let mut b = HeapGraphBuilder::new();
    b.add_edge(0, 2);
    b.add_edge(2, 1);
    b.add_node(1, 0);
    b.add_node(2, 0);
    let d = dominators(&b.finish().unwrap());
    assert_eq!(d.idom(1), Some(2));
    assert_eq!(d.retained(0), 3);
}

// ---------------------------------------------------------------------------------------
// Brute force, from the definition.

/// Which nodes the root reaches when `removed` (if any) is taken out of the graph.
fn reachable_without(g: &HeapGraph, removed: Option<NodeId>) -> Vec<bool> {
    let mut seen = vec![false; g.node_count()];
    if removed == Some(0) {
        return seen;
    }
    seen[0] = true;
    let mut stack = vec![0];
    while let Some(v) = stack.pop() {
        for &c in g.children(v) {
            if Some(c) != removed && !seen[c as usize] {
                seen[c as usize] = true;
                stack.push(c);
            }
        }
    }
    seen
}

/// `dominates[d][n]`: `n` is reachable, and not reachable once `d` is removed (so every
/// reachable node dominates itself).
fn dominance(g: &HeapGraph) -> Vec<Vec<bool>> {
    let reachable = reachable_without(g, None);
    (0..g.node_count() as NodeId)
        .map(|d| {
            let without = reachable_without(g, Some(d));
            (0..g.node_count())
                .map(|n| reachable[n] && !without[n])
                .collect()
        })
        .collect()
}

/// The reference: idom of each node (the strict dominator dominated by every other strict
/// dominator) and retained size (the sizes of every node it dominates, its own included).
fn brute_force(g: &HeapGraph) -> (Vec<Option<NodeId>>, Vec<u64>) {
    let dom = dominance(g);
    let count = g.node_count();
    let idom = (0..count)
        .map(|n| {
            let strict: Vec<usize> = (0..count).filter(|&d| d != n && dom[d][n]).collect();
            let idoms: Vec<usize> = strict
                .iter()
                .copied()
                .filter(|&i| strict.iter().all(|&d| dom[d][i]))
                .collect();
            assert!(idoms.len() <= 1, "node {n}: dominators are not a chain");
            idoms.first().map(|&i| i as NodeId)
        })
        .collect();
    let retained = (0..count)
        .map(|d| {
            (0..count)
                .filter(|&n| dom[d][n])
                .map(|n| g.size(n as NodeId))
                .sum()
        })
        .collect();
    (idom, retained)
}

/// Up to 60 nodes, edges anywhere (cycles, self-edges, duplicates, unreachable nodes), and
/// a separate batch of edges from the root (many roots).
/// (Sizes and edges rather than the graph, so that a failure prints them.)
fn random_graph() -> impl Strategy<Value = (Vec<u64>, Vec<(NodeId, NodeId)>)> {
    (1usize..=60).prop_flat_map(|count| {
        let node = 0..count as NodeId;
        (
            prop::collection::vec(0u64..1000, count - 1),
            prop::collection::vec((node.clone(), node.clone()), 0..count * 3),
            prop::collection::vec(node, 0..count),
        )
            .prop_map(|(sizes, mut edges, roots)| {
                edges.extend(roots.into_iter().map(|r| (0, r)));
                (sizes, edges)
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn dominators_match_the_definition((sizes, edges) in random_graph()) {
        let g = graph(&sizes, &edges);
        let want = brute_force(&g);
        let got = idoms_and_retained(&g);
        prop_assert_eq!(&got, &want);
        let d = dominators(&g);
        let reachable = reachable_without(&g, None);
        prop_assert_eq!(d.reachable_count(), reachable.iter().filter(|&&r| r).count());
        for (n, &r) in reachable.iter().enumerate() {
            prop_assert_eq!(d.is_reachable(n as NodeId), r);
        }
    }

    /// Sparse graphs (about one edge per node) have long chains and few joins, the shape
    /// dense random graphs rarely give.
    #[test]
    fn dominators_match_the_definition_on_sparse_graphs(
        (sizes, edges) in (2usize..=60).prop_flat_map(|count| (
            prop::collection::vec(1u64..100, count - 1),
            prop::collection::vec(
                (0..count as NodeId).prop_flat_map(move |to| {
                    // Mostly from an earlier node (a tree), sometimes from anywhere.
                    (prop_oneof![3 => 0..to.max(1), 1 => 0..count as NodeId], Just(to))
                }),
                count / 2..count + 4,
            ),
        ))
    ) {
        let g = graph(&sizes, &edges);
        prop_assert_eq!(idoms_and_retained(&g), brute_force(&g));
    }
}
