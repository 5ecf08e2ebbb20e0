//! Immediate dominators and retained sizes of a [`HeapGraph`], from its root.
//!
//! Node `d` dominates node `n` when every path from the root to `n` passes through `d`; the
//! immediate dominator of `n` is the strict dominator of `n` that every other strict
//! dominator of `n` dominates. Freeing `d` would free every node it dominates, so `d`'s
//! retained size is its own size plus theirs.
//!
//! The algorithm is Lengauer and Tarjan's ("A Fast Algorithm for Finding Dominators in a
//! Flowgraph", TOPLAS 1979) with simple link-eval and path compression, O(m log n), over
//! the graph's CSR arrays, every step iterative (a heap can be a million-deep linked list):
//!
//! 1. a depth-first search numbers the reachable nodes in preorder; its stack is the parent
//!    array itself (each node's next-edge cursor kept per node), so it needs no other memory;
//! 2. semidominators, in reverse preorder. A predecessor numbered below the node contributes
//!    its own number (it is not linked into the forest yet), so those edges are folded in
//!    during one forward pass over the graph; only the edges from higher numbers are
//!    grouped by target (a reverse CSR in preorder numbers) for the main loop;
//! 3. a node's bucket (the nodes it is the semidominator of) is emptied when the loop
//!    reaches the node itself, after all its descendants are linked and before it is linked
//!    to its parent, which gives the same evals as emptying it at each child's link; the
//!    bucket lists live in the immediate-dominator array, whose slot for a node is free
//!    until the node leaves its bucket;
//! 4. "linked" is "numbered above the node the loop is at", so the DFS parent array is also
//!    the forest's ancestor array;
//! 5. a forward pass turns relative dominators into immediate dominators, and a pass in
//!    reverse preorder adds each node's retained size to its immediate dominator's.
//!
//! Memory, for `N` nodes of which `n` reachable and `m'` edges that go from a higher
//! preorder number to a lower one: 4N + 16n + 4(n + m') bytes at the peak beside the
//! graph, then 12N for the result (idom and retained size per node).

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

/// Computes the immediate dominator and retained size of every node of `g`.
pub fn dominators(g: &HeapGraph) -> Dominators {
    let node_count = g.node_count();
    const UNVISITED: u32 = u32::MAX;

    // 1. Preorder numbers. `number[node]` is its number; `vertex[number]` the node back;
    // `parent[number]` the DFS parent's number; `cursor[number]` how many of the node's
    // children the search has looked at.
    let mut number = vec![UNVISITED; node_count];
    let mut vertex: Vec<NodeId> = Vec::new();
    let mut parent: Vec<u32> = Vec::new();
    let mut cursor: Vec<u32> = Vec::new();
    number[0] = 0;
    vertex.push(0);
    parent.push(NO_NODE);
    cursor.push(0);
    let mut at = 0usize;
    loop {
        let children = g.children(vertex[at]);
        let mut c = cursor[at] as usize;
        // Skip the children already numbered without going back through the loop.
        while c < children.len() && number[children[c] as usize] != UNVISITED {
            c += 1;
        }
        if c < children.len() {
            cursor[at] = c as u32 + 1;
            let child = children[c];
            let n = vertex.len();
            number[child as usize] = n as u32;
            vertex.push(child);
            parent.push(at as u32);
            cursor.push(0);
            at = n;
        } else if at == 0 {
            break;
        } else {
            cursor[at] = c as u32;
            at = parent[at] as usize;
        }
    }
    drop(cursor);
    let reachable = vertex.len();
    vertex.shrink_to_fit();
    parent.shrink_to_fit();

    // 2. `semi[w]` starts as the smallest number among w itself and its predecessors
    // numbered below it; the other predecessors (numbered above) go to `preds`, grouped by
    // target: `preds[pred_start[w]..pred_start[w + 1]]`. Edges into the root or onto
    // themselves never change a semidominator and are left out.
    let mut semi: Vec<u32> = (0..reachable as u32).collect();
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
                pred_start[w as usize] += 1;
            }
        }
    }
    let mut end = 0u32;
    for p in pred_start.iter_mut() {
        end += *p;
        *p = end;
    }
    let mut preds = vec![0u32; end as usize];
    for (node, &v) in number.iter().enumerate() {
        if v == UNVISITED {
            continue;
        }
        for &child in g.children(node as NodeId) {
            let w = number[child as usize];
            if v > w && w != 0 {
                let slot = &mut pred_start[w as usize];
                *slot -= 1;
                preds[*slot as usize] = v;
            }
        }
    }
    drop(number);

    // 3. The main loop, in reverse preorder. `parent` doubles as the forest's ancestor
    // array (a number above `w` is linked), `label` is the forest's path minimum.
    let mut label: Vec<u32> = (0..reachable as u32).collect();
    let mut ancestor = parent;
    // Until node x leaves its bucket, `idom[x]` is the next node of that bucket; before x
    // is reached, it is the head of x's own bucket.
    let mut idom = vec![NO_NODE; reachable];
    for w in (1..reachable).rev() {
        empty_bucket(w as u32, &mut idom, &mut ancestor, &mut label, &semi);
        let mut s = semi[w];
        for &v in &preds[pred_start[w] as usize..pred_start[w + 1] as usize] {
            let u = eval(v, w as u32, &mut ancestor, &mut label, &semi);
            s = s.min(semi[u as usize]);
        }
        semi[w] = s;
        // Into the bucket of its semidominator.
        idom[w] = idom[s as usize];
        idom[s as usize] = w as u32;
        // Linking w to its parent is moving the loop below w.
    }
    empty_bucket(0, &mut idom, &mut ancestor, &mut label, &semi);
    drop(preds);
    drop(pred_start);
    drop(label);
    drop(ancestor);

    // 4. A relative dominator (numbered above the semidominator) to the immediate one, in
    // preorder so that it is already final.
    for w in 1..reachable {
        if idom[w] != semi[w] {
            idom[w] = idom[idom[w] as usize];
        }
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

/// Gives each node of `p`'s bucket (those `p` is the semidominator of) its immediate
/// dominator, or a relative one numbered above `p` that step 4 resolves. Called when the
/// loop reaches `p`: all of `p`'s descendants are linked and `p` itself is not.
fn empty_bucket(p: u32, idom: &mut [u32], ancestor: &mut [u32], label: &mut [u32], semi: &[u32]) {
    let mut v = idom[p as usize];
    idom[p as usize] = NO_NODE;
    while v != NO_NODE {
        let next = idom[v as usize];
        let u = eval(v, p, ancestor, label, semi);
        idom[v as usize] = if semi[u as usize] < semi[v as usize] {
            u
        } else {
            p
        };
        v = next;
    }
}

/// The node of least semidominator on the forest path from `v` up to, not including, the
/// root of its tree (`v` itself when `v` is a root). Nodes numbered above `at` are linked.
fn eval(v: u32, at: u32, ancestor: &mut [u32], label: &mut [u32], semi: &[u32]) -> u32 {
    if v <= at {
        return v;
    }
    compress(v, at, ancestor, label, semi);
    label[v as usize]
}

/// Path compression: every node on the path from `v` to its tree's root gets the root as
/// ancestor and, as label, the least-semidominator node of the path above it. Iterative by
/// pointer reversal: going up, each node's ancestor slot points back down (it is rewritten
/// anyway); coming down, it gets the root.
fn compress(v: u32, at: u32, ancestor: &mut [u32], label: &mut [u32], semi: &[u32]) {
    // Going up while the ancestor is linked (not the tree's root).
    let mut below = NO_NODE;
    let mut x = v;
    while ancestor[x as usize] > at {
        let up = ancestor[x as usize];
        ancestor[x as usize] = below;
        below = x;
        x = up;
    }
    // x is the top of the path: its ancestor is the root, and it keeps both.
    let root = ancestor[x as usize];
    let mut above = x;
    let mut y = below;
    while y != NO_NODE {
        let down = ancestor[y as usize];
        let l = label[above as usize];
        if semi[l as usize] < semi[label[y as usize] as usize] {
            label[y as usize] = l;
        }
        ancestor[y as usize] = root;
        above = y;
        y = down;
    }
}
