//! Immediate dominators and retained sizes of a [`HeapGraph`], from its root.
//!
//! Node `d` dominates node `n` when every path from the root to `n` passes through `d`; the
//! immediate dominator of `n` is the strict dominator of `n` that every other strict
//! dominator of `n` dominates. Freeing `d` would free every node it dominates, so `d`'s
//! retained size is its own size plus theirs.
//!
//! The algorithm is Semi-NCA (Georgiadis and Tarjan; see Georgiadis, Tarjan and Werneck,
//! "Finding Dominators in Practice", JGAA 2006): Lengauer and Tarjan's semidominators ("A
//! Fast Algorithm for Finding Dominators in a Flowgraph", TOPLAS 1979, with simple
//! link-eval and path compression), then each immediate dominator as the nearest
//! common ancestor, in the dominator tree built so far, of the node's DFS parent and its
//! semidominator. It is O(m log n) like simple Lengauer-Tarjan and needs no buckets: their
//! evals were as many again as the edges', and the walk that replaces them mostly stays
//! among the few nodes at the top of the dominator tree. Every step is iterative (a heap
//! can be a million-deep linked list), over the graph's CSR arrays:
//!
//! 1. a depth-first search numbers the reachable nodes in preorder. Its stack holds the
//!    edges not yet followed, so it reads each node's edges once and never returns to a
//!    node (on a scattered heap each return would be a cache miss or two), and whether a
//!    node was seen is asked of a bitmap of N bits, which mostly stays in cache where the
//!    per-node number array would miss on every edge;
//! 2. one pass over every edge, in node order. A predecessor numbered below a node is not
//!    linked into the forest when the main loop reaches the node, so it contributes just
//!    its own number to the semidominator: those edges are folded in there and then. Only
//!    the edges from a higher number are kept, grouped by target by a counting sort (a
//!    reverse CSR in preorder numbers), for the main loop's evals;
//! 3. the main loop, in reverse preorder, gives each node its semidominator. "Linked" is
//!    "numbered above the node the loop is at", so the DFS parent is also the forest's
//!    ancestor. Semi-NCA needs the least semidominator on a path, not the node that has
//!    it, so a label is that number and the two fields a path compression reads and
//!    writes (ancestor, label) share one 8-byte record per node: one cache miss per step
//!    up a path, and half the bytes of a record that also named the node. The compression
//!    is iterative by pointer reversal. On a heap far larger than the cache most of an
//!    eval's time is waiting for the first records of its path, so the loop reads those of
//!    the eval 32 predecessors on ahead of time, and the misses overlap (a plain read: a
//!    prefetch instruction would need unsafe code);
//! 4. in preorder, each node's immediate dominator: up the dominator tree from its DFS
//!    parent to the first node numbered at most its semidominator (dominators of lower
//!    numbers are final by then);
//! 5. a pass in reverse preorder adds each node's retained size to its immediate
//!    dominator's.
//!
//! Memory, for `N` nodes of which `n` reachable and `m'` edges that go from a higher
//! preorder number to a lower one: at most about 4N + 24n + 12m' bytes beside the graph
//! while it runs, then 12N for the result (idom and retained size per node); the search's
//! stack holds at most one entry (8 bytes) per edge, and far fewer on a heap (7.4 M on
//! the bench's random 10 M-object heap of 30 M references).

use std::fmt;

use super::graph::{HeapGraph, NodeId, NO_NODE};

/// Immediate dominators of every node from the root, and each node's retained size (its own
/// size plus the sizes of all nodes it dominates).
///
/// Accessors panic for a node that is not one of the graph's (as slice indexing does).
pub struct Dominators {
    /// Per node: its immediate dominator, or `NO_NODE` for the root and unreachable nodes.
    idom: Vec<NodeId>,
    /// Per node: its retained size, 0 when unreachable.
    retained: Vec<u64>,
    reachable: usize,
}

impl fmt::Debug for Dominators {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dominators")
            .field("node_count", &self.idom.len())
            .field("reachable_count", &self.reachable)
            .finish_non_exhaustive()
    }
}

impl Dominators {
    /// Node `n`'s immediate dominator: `None` for the root and for unreachable nodes.
    pub fn idom(&self, n: NodeId) -> Option<NodeId> {
        match self.idom[n as usize] {
            NO_NODE => None,
            d => Some(d),
        }
    }

    /// Whether a path leads from the root to `n` (the root included).
    pub fn is_reachable(&self, n: NodeId) -> bool {
        n == 0 || self.idom[n as usize] != NO_NODE
    }

    /// Node `n`'s own size plus the sizes of every node it dominates; 0 when unreachable.
    pub fn retained(&self, n: NodeId) -> u64 {
        self.retained[n as usize]
    }

    /// How many nodes are reachable from the root, the root included.
    pub fn reachable_count(&self) -> usize {
        self.reachable
    }

    /// How many nodes the graph had, reachable or not.
    pub fn node_count(&self) -> usize {
        self.idom.len()
    }
}

/// A reachable node's link-eval state, by preorder number: the two fields a path
/// compression reads and writes, in one 8-byte record so that each step up a path costs
/// one cache miss.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Link {
    /// The DFS parent's number until path compression moves it up to the tree's root.
    /// Numbers above the loop's position are linked, so this is also the forest's
    /// ancestor.
    ancestor: u32,
    /// The least semidominator on the compressed path from this node up to, not including,
    /// its ancestor; this node's own once the main loop has passed it.
    label: u32,
}

/// How many predecessors ahead of the main loop's eval its path's first records are read,
/// and how many of them: far enough for a cache miss to overlap with the evals in between,
/// near enough that compressions in between seldom move the path (measured on the bench's
/// 10 M-object heaps, 16 to 64 and 2 to 4 do about as well).
const EVAL_AHEAD: usize = 32;
const WARM_LEVELS: usize = 3;

/// Computes the immediate dominator and retained size of every node of `g`.
pub fn dominators(g: &HeapGraph) -> Dominators {
    const UNVISITED: u32 = u32::MAX;
    let node_count = g.node_count();

    // 1. Preorder numbers, by a depth-first search from the root. Per number: `vertex` the
    // node and `links` its record. Whether a node was seen is asked of a bitmap (N/8 bytes,
    // mostly in cache) rather than of `number`, which a random heap would make a cache
    // miss per edge.
    //
    // The stack holds edges not yet followed, as (target, source's number): visiting a
    // node pushes its edges to nodes not seen yet, and popping an edge to a node still not
    // seen visits it as the source's child. That is a depth-first search (the source's
    // other edges wait below the child's), and it never goes back to a node: the search
    // reads each node's edges once, where keeping a cursor per node would read them again
    // after each child, a cache miss or two per return on a large heap.
    let mut number = vec![UNVISITED; node_count];
    let mut seen = vec![0u64; node_count.div_ceil(64)];
    let mut vertex: Vec<NodeId> = Vec::with_capacity(node_count);
    let mut links: Vec<Link> = Vec::with_capacity(node_count);
    let mut stack: Vec<(NodeId, u32)> = vec![(0, NO_NODE)];
    let mut warm = 0usize;
    while let Some((node, parent)) = stack.pop() {
        if seen[node as usize / 64] & (1 << (node % 64)) != 0 {
            continue;
        }
        let w = vertex.len() as u32;
        seen[node as usize / 64] |= 1 << (node % 64);
        number[node as usize] = w;
        vertex.push(node);
        links.push(Link {
            ancestor: parent,
            label: w,
        });
        // Pushed in reverse, the first edge is followed first, as a recursive search would.
        for &child in g.children(node).iter().rev() {
            if seen[child as usize / 64] & (1 << (child % 64)) == 0 {
                stack.push((child, w));
                // Where its edges are: read now, the cache misses of the edges just
                // pushed overlap, and the one popped next waits less for them.
                warm ^= g.children(child).len();
            }
        }
    }
    drop(stack);
    std::hint::black_box(warm);
    drop(seen);
    let reachable = vertex.len();
    // Each node's DFS parent, which the last step walks up from.
    let mut idom: Vec<u32> = links.iter().map(|l| l.ancestor).collect();

    // 2. Every edge once, in node order (so the graph is read in sequence). An edge from a
    // lower number lowers its target's semidominator to that number at once: the main loop
    // reaches the source only after the target, so the source is not linked then and
    // contributes its own number. Edges from a higher number are what the main loop
    // evaluates; they are kept as (target, source) and grouped by target into
    // `preds[pred_start[w]..pred_start[w + 1]]`. Edges into the root or onto themselves
    // never change a semidominator and are left out.
    let mut semi: Vec<u32> = (0..reachable as u32).collect();
    let mut back: Vec<(u32, u32)> = Vec::new();
    let mut pred_start = vec![0u32; reachable + 1];
    for (node, &v) in number.iter().enumerate() {
        if v == UNVISITED {
            continue;
        }
        for &child in g.children(node as NodeId) {
            let w = number[child as usize];
            if v < w {
                let s = &mut semi[w as usize];
                *s = (*s).min(v);
            } else if v > w && w != 0 {
                back.push((w, v));
                pred_start[w as usize] += 1;
            }
        }
    }
    drop(number);
    // Counts to ends, then each entry placed moves its target's end down to its start.
    let mut end = 0u32;
    for p in pred_start.iter_mut() {
        end += *p;
        *p = end;
    }
    let mut preds = vec![0u32; back.len()];
    for &(w, v) in &back {
        let slot = &mut pred_start[w as usize];
        *slot -= 1;
        preds[*slot as usize] = v;
    }
    drop(back);

    // 3. Semidominators, in reverse preorder. The loop reads `preds` from its end to its
    // start, so which records the evals a few predecessors on will read is known now:
    // reading them ahead (the first records of that eval's path, as they are now) turns a
    // cache miss the eval would wait for into one that overlaps the evals in between. The
    // crate has no unsafe code, so a plain read stands for a prefetch instruction; `warm`
    // only keeps the reads from being optimised away.
    let mut warm = 0u32;
    for w in (1..reachable).rev() {
        let at = w as u32;
        let mut s = semi[w];
        for p in pred_start[w] as usize..pred_start[w + 1] as usize {
            if let Some(&ahead) = preds.get(p.wrapping_sub(EVAL_AHEAD)) {
                let mut x = ahead;
                for _ in 0..WARM_LEVELS {
                    let up = links[x as usize].ancestor;
                    warm ^= up;
                    if up <= at {
                        break;
                    }
                    x = up;
                }
            }
            s = s.min(eval(preds[p], at, &mut links));
        }
        semi[w] = s;
        links[w].label = s;
        // Linking w to its parent is moving the loop below w.
    }
    std::hint::black_box(warm);
    drop(preds);
    drop(pred_start);
    drop(links);

    // 4. Immediate dominators, in preorder (Semi-NCA): the nearest dominator-tree ancestor
    // of the DFS parent numbered at most the semidominator. Dominators of lower numbers are
    // final by then.
    for w in 1..reachable {
        let s = semi[w];
        let mut d = idom[w];
        while d > s {
            d = idom[d as usize];
        }
        idom[w] = d;
    }
    drop(semi);

    // 5. Retained sizes: each node's into its immediate dominator's, from the last in
    // preorder (a dominator is numbered below every node it dominates).
    let mut retained = vec![0u64; node_count];
    for &node in &vertex {
        retained[node as usize] = g.size(node);
    }
    for w in (1..reachable).rev() {
        let node = vertex[w] as usize;
        let dominator = vertex[idom[w] as usize] as usize;
        retained[dominator] = retained[dominator].saturating_add(retained[node]);
    }
    let mut node_idom = vec![NO_NODE; node_count];
    for w in 1..reachable {
        node_idom[vertex[w] as usize] = vertex[idom[w] as usize];
    }
    Dominators {
        idom: node_idom,
        retained,
        reachable,
    }
}

/// The least semidominator on the forest path from `v` up to, not including, the root of
/// its tree. Nodes numbered above `at` are linked, and `v` is one of them.
///
/// Path compression on the way: every node on the path gets the root as ancestor and, as
/// label, the least semidominator of the path above it. Iterative by pointer reversal:
/// going up, each node's ancestor slot points back down (it is rewritten anyway); coming
/// down, it gets the root.
fn eval(v: u32, at: u32, links: &mut [Link]) -> u32 {
    // Going up while the ancestor is linked (not the tree's root).
    let mut below = NO_NODE;
    let mut x = v;
    loop {
        let up = links[x as usize].ancestor;
        if up <= at {
            break;
        }
        links[x as usize].ancestor = below;
        below = x;
        x = up;
    }
    // x is the top of the path: its ancestor is the root, and it keeps both.
    let root = links[x as usize].ancestor;
    let mut label = links[x as usize].label;
    let mut y = below;
    while y != NO_NODE {
        let link = &mut links[y as usize];
        let down = link.ancestor;
        label = label.min(link.label);
        link.label = label;
        link.ancestor = root;
        y = down;
    }
    label
}

/// The dominator tree as child lists, in one array (CSR): a node's children are the nodes
/// it immediately dominates.
#[derive(Debug, Clone)]
pub struct DominatorTree {
    starts: Vec<u32>,
    children: Vec<NodeId>,
}

impl DominatorTree {
    /// The tree of `dominators`, computed over `graph`.
    pub fn of(graph: &HeapGraph, dominators: &Dominators) -> DominatorTree {
        let n = graph.node_count();
        let mut starts = vec![0u32; n + 1];
        for node in 0..n as NodeId {
            if let Some(parent) = dominators.idom(node) {
                starts[parent as usize + 1] += 1;
            }
        }
        for i in 1..=n {
            starts[i] += starts[i - 1];
        }
        let mut fill = starts.clone();
        let mut children = vec![0 as NodeId; starts[n] as usize];
        for node in 0..n as NodeId {
            if let Some(parent) = dominators.idom(node) {
                let slot = &mut fill[parent as usize];
                children[*slot as usize] = node;
                *slot += 1;
            }
        }
        DominatorTree { starts, children }
    }

    /// The nodes `node` immediately dominates, by increasing id.
    ///
    /// # Panics
    /// When `node` is not one of the graph's.
    pub fn children(&self, node: NodeId) -> &[NodeId] {
        let (from, to) = (self.starts[node as usize], self.starts[node as usize + 1]);
        &self.children[from as usize..to as usize]
    }
}
