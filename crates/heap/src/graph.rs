//! The object graph of a heap: nodes with a size and a type, and references between them,
//! stored compressed.
//!
//! [`HeapGraphBuilder`] takes nodes, types and edges in any order (an edge may name a node
//! added after it); [`HeapGraphBuilder::finish`] checks every id and lays the edges out as
//! CSR (compressed sparse rows): `offsets[n]..offsets[n + 1]` is the range of `targets`
//! holding node `n`'s children. Ids are 32-bit, so a graph holds fewer than 2³² nodes
//! (`NO_NODE` is never a node) and at most 2³² − 1 edges.

use std::fmt;

/// A node of a [`HeapGraph`]: an index, 0 being the synthetic root.
pub type NodeId = u32;
/// A type of a [`HeapGraph`]: an index, 0 being the root's type `[root]`.
pub type TypeId = u32;

/// Sentinel for "no node" (an unreachable node's immediate dominator).
pub const NO_NODE: NodeId = u32::MAX;

/// The name of type 0, the root's type.
pub const ROOT_TYPE_NAME: &str = "[root]";

/// Why [`HeapGraphBuilder::finish`] refused to build a graph.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// An edge names a node that was never added.
    #[error(
        "edge {index} ({from} -> {to}) names node {missing}, but the graph has {node_count} nodes"
    )]
    MissingNode {
        /// The edge's position in the order edges were added, from 0.
        index: usize,
        /// The edge's source.
        from: NodeId,
        /// The edge's target.
        to: NodeId,
        /// The endpoint that does not exist (`from` or `to`).
        missing: NodeId,
        /// How many nodes the graph has (ids `0..node_count`).
        node_count: usize,
    },
    /// A node names a type that was never added.
    #[error("node {node} has type {ty}, but the graph has {type_count} types")]
    MissingType {
        /// The node.
        node: NodeId,
        /// Its type.
        ty: TypeId,
        /// How many types the graph has (ids `0..type_count`).
        type_count: usize,
    },
    /// More nodes were added than 32-bit node ids can name.
    #[error("more than {limit} nodes (node ids are 32-bit)")]
    TooManyNodes {
        /// The most nodes a graph can hold, root included.
        limit: usize,
    },
    /// More edges were added than the 32-bit edge offsets can index.
    #[error("more than {limit} edges (edge offsets are 32-bit)")]
    TooManyEdges {
        /// The most edges a graph can hold.
        limit: usize,
    },
    /// More types were added than 32-bit type ids can name.
    #[error("more than {limit} types (type ids are 32-bit)")]
    TooManyTypes {
        /// The most types a graph can hold, `[root]` included.
        limit: usize,
    },
}

/// Node ids are `0..u32::MAX`: `u32::MAX` is [`NO_NODE`].
const MAX_NODES: usize = u32::MAX as usize;
/// `offsets` are `u32`, so the last one, the edge count, must fit.
const MAX_EDGES: usize = u32::MAX as usize;
/// Type ids are `0..=u32::MAX`, but one fewer keeps the count itself a `u32`.
const MAX_TYPES: usize = u32::MAX as usize;

/// A heap as an object graph: node 0 is the synthetic root (size 0, type 0 named
/// `"[root]"`); edges are stored compressed (CSR: one offsets array, one targets array).
///
/// Built by [`HeapGraphBuilder`]. Accessors taking a [`NodeId`] or [`TypeId`] panic when
/// it is not one of this graph's (as slice indexing does).
pub struct HeapGraph {
    sizes: Vec<u64>,
    types: Vec<TypeId>,
    /// `node_count + 1` entries: node `n`'s children are `targets[offsets[n]..offsets[n + 1]]`.
    offsets: Vec<u32>,
    targets: Vec<NodeId>,
    /// Every type name, concatenated; type `t` is `type_names[type_ends[t - 1]..type_ends[t]]`
    /// (from 0 for type 0). One buffer instead of a `String` per type.
    type_names: String,
    type_ends: Vec<usize>,
}

impl HeapGraph {
    /// The synthetic root, whose children are the heap's roots: always 0.
    pub fn root(&self) -> NodeId {
        0
    }

    /// How many nodes, root included.
    pub fn node_count(&self) -> usize {
        self.sizes.len()
    }

    /// How many edges (references), duplicates and self-edges included.
    pub fn edge_count(&self) -> usize {
        self.targets.len()
    }

    /// Node `n`'s own size in bytes.
    pub fn size(&self, n: NodeId) -> u64 {
        self.sizes[n as usize]
    }

    /// Node `n`'s type.
    pub fn type_of(&self, n: NodeId) -> TypeId {
        self.types[n as usize]
    }

    /// Type `t`'s name.
    pub fn type_name(&self, t: TypeId) -> &str {
        let t = t as usize;
        let start = if t == 0 { 0 } else { self.type_ends[t - 1] };
        &self.type_names[start..self.type_ends[t]]
    }

    /// How many types, `[root]` included.
    pub fn type_count(&self) -> usize {
        self.type_ends.len()
    }

    /// The nodes node `n` references, in the order the edges were added (duplicates and
    /// self-edges included).
    pub fn children(&self, n: NodeId) -> &[NodeId] {
        let n = n as usize;
        &self.targets[self.offsets[n] as usize..self.offsets[n + 1] as usize]
    }

    /// The sum of every node's own size.
    pub fn total_size(&self) -> u64 {
        self.sizes.iter().fold(0u64, |a, &s| a.saturating_add(s))
    }
}

impl fmt::Debug for HeapGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeapGraph")
            .field("node_count", &self.node_count())
            .field("edge_count", &self.edge_count())
            .field("type_count", &self.type_count())
            .finish_non_exhaustive()
    }
}

/// Collects nodes, types and edges, then [`finish`](Self::finish)es them into a
/// [`HeapGraph`]. Never panics: every bad id or overflow is reported by `finish`.
pub struct HeapGraphBuilder {
    sizes: Vec<u64>,
    types: Vec<TypeId>,
    /// Edges as two parallel arrays, so that `to` can become the graph's `targets` without
    /// a copy when the edges arrive grouped by source (as a heap walk emits them).
    from: Vec<NodeId>,
    to: Vec<NodeId>,
    type_names: String,
    type_ends: Vec<usize>,
    /// Set when an `add_*` call went past a limit; what it added was dropped.
    overflow: Option<GraphError>,
    max_nodes: usize,
    max_edges: usize,
    max_types: usize,
}

impl Default for HeapGraphBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for HeapGraphBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeapGraphBuilder")
            .field("node_count", &self.sizes.len())
            .field("edge_count", &self.from.len())
            .field("type_count", &self.type_ends.len())
            .finish_non_exhaustive()
    }
}

impl HeapGraphBuilder {
    /// A builder holding the root (node 0, size 0) and its type (type 0, `[root]`).
    pub fn new() -> Self {
        Self::with_limits(MAX_NODES, MAX_EDGES, MAX_TYPES)
    }

    /// A builder whose limits are lower than the id types allow, so that tests can reach
    /// them.
    pub(crate) fn with_limits(max_nodes: usize, max_edges: usize, max_types: usize) -> Self {
        HeapGraphBuilder {
            sizes: vec![0],
            types: vec![0],
            from: Vec::new(),
            to: Vec::new(),
            type_names: ROOT_TYPE_NAME.to_owned(),
            type_ends: vec![ROOT_TYPE_NAME.len()],
            overflow: None,
            max_nodes,
            max_edges,
            max_types,
        }
    }

    /// Reserves room for `nodes` more nodes and `edges` more edges, for a caller that
    /// knows the heap's size (it saves the copies of growing, not memory).
    pub fn reserve(&mut self, nodes: usize, edges: usize) {
        self.sizes.reserve(nodes);
        self.types.reserve(nodes);
        self.from.reserve(edges);
        self.to.reserve(edges);
    }

    /// Adds a type named `name` and returns its id: a new type at each call, even for a
    /// name seen before (a heap can have two types of one name, from two modules).
    pub fn add_type(&mut self, name: &str) -> TypeId {
        if self.type_ends.len() >= self.max_types {
            self.overflow.get_or_insert(GraphError::TooManyTypes {
                limit: self.max_types,
            });
            return 0;
        }
        let id = self.type_ends.len() as TypeId;
        self.type_names.push_str(name);
        self.type_ends.push(self.type_names.len());
        id
    }

    /// Adds a node of `size` bytes and type `ty` (checked by `finish`) and returns its id.
    /// Past the last id it adds nothing, returns [`NO_NODE`] and `finish` fails.
    pub fn add_node(&mut self, size: u64, ty: TypeId) -> NodeId {
        if self.sizes.len() >= self.max_nodes {
            self.overflow.get_or_insert(GraphError::TooManyNodes {
                limit: self.max_nodes,
            });
            return NO_NODE;
        }
        let id = self.sizes.len() as NodeId;
        self.sizes.push(size);
        self.types.push(ty);
        id
    }

    /// Adds a reference from `from` to `to`. Edges may come in any order and name nodes not
    /// added yet (`finish` checks both ends); duplicates and self-edges are kept.
    pub fn add_edge(&mut self, from: NodeId, to: NodeId) {
        if self.from.len() >= self.max_edges {
            self.overflow.get_or_insert(GraphError::TooManyEdges {
                limit: self.max_edges,
            });
            return;
        }
        self.from.push(from);
        self.to.push(to);
    }

    /// How many nodes so far, root included.
    pub fn node_count(&self) -> usize {
        self.sizes.len()
    }

    /// How many edges so far.
    pub fn edge_count(&self) -> usize {
        self.from.len()
    }

    /// Checks every id and builds the graph, its edges grouped by source by a counting sort
    /// (each node's edges keep the order they were added in).
    pub fn finish(self) -> Result<HeapGraph, GraphError> {
        let HeapGraphBuilder {
            sizes,
            types,
            from,
            to,
            type_names,
            type_ends,
            overflow,
            ..
        } = self;
        if let Some(e) = overflow {
            return Err(e);
        }
        let node_count = sizes.len();
        let type_count = type_ends.len();
        if let Some(node) = types.iter().position(|&t| t as usize >= type_count) {
            return Err(GraphError::MissingType {
                node: node as NodeId,
                ty: types[node],
                type_count,
            });
        }
        // One pass over both ends: is every id a node, and are the edges already grouped
        // by source (non-decreasing `from`)?
        let mut sorted = true;
        let mut previous = 0;
        for (index, (&f, &t)) in from.iter().zip(&to).enumerate() {
            let missing = if f as usize >= node_count {
                f
            } else if t as usize >= node_count {
                t
            } else {
                sorted &= f >= previous;
                previous = f;
                continue;
            };
            return Err(GraphError::MissingNode {
                index,
                from: f,
                to: t,
                missing,
                node_count,
            });
        }

        // Each source's edge count, then the running sum: `offsets[n]` is where node `n`'s
        // edges end.
        let mut offsets = vec![0u32; node_count + 1];
        for &f in &from {
            offsets[f as usize] += 1;
        }
        let mut end = 0u32;
        for o in offsets.iter_mut() {
            end += *o;
            *o = end;
        }
        let targets = if sorted {
            drop(from);
            // Already grouped: the offsets only have to become starts.
            offsets.copy_within(0..node_count, 1);
            offsets[0] = 0;
            to
        } else {
            // Placing edges from the last one back, each source's end moving down to its
            // start, keeps each node's edges in the order they were added, and leaves
            // `offsets[n]` at node `n`'s start (`offsets[node_count]` stays the total).
            let mut targets = vec![0 as NodeId; to.len()];
            for (&f, &t) in from.iter().zip(&to).rev() {
                let slot = &mut offsets[f as usize];
                *slot -= 1;
                targets[*slot as usize] = t;
            }
            targets
        };
        let mut targets = targets;
        targets.shrink_to_fit();
        Ok(HeapGraph {
            sizes,
            types,
            offsets,
            targets,
            type_names,
            type_ends,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_keep_the_order_edges_were_added_in_sorted_or_not() {
        for edges in [
            vec![(0, 1), (0, 2), (1, 2), (2, 2), (2, 0)],
            vec![(2, 2), (0, 1), (1, 2), (2, 0), (0, 2)],
        ] {
            let mut b = HeapGraphBuilder::new();
            let t = b.add_type("T");
            b.add_node(8, t);
            b.add_node(16, t);
            for &(f, to) in &edges {
                b.add_edge(f, to);
            }
            let g = b.finish().unwrap();
            assert_eq!(g.edge_count(), 5);
            for n in 0..3 {
                let want: Vec<NodeId> = edges.iter().filter(|e| e.0 == n).map(|e| e.1).collect();
                assert_eq!(g.children(n), &want[..], "node {n} of {edges:?}");
            }
        }
    }

    #[test]
    fn limits_are_errors_not_panics() {
        let mut b = HeapGraphBuilder::with_limits(3, 2, 2);
        let t = b.add_type("T");
        assert_eq!(b.add_type("U"), 0);
        assert_eq!(b.add_node(1, t), 1);
        assert_eq!(b.add_node(1, t), 2);
        assert!(matches!(
            b.finish(),
            Err(GraphError::TooManyTypes { limit: 2 })
        ));

        let mut b = HeapGraphBuilder::with_limits(3, 2, 2);
        assert_eq!(b.add_node(1, 0), 1);
        assert_eq!(b.add_node(1, 0), 2);
        assert_eq!(b.add_node(1, 0), NO_NODE);
        assert_eq!(b.node_count(), 3);
        assert!(matches!(
            b.finish(),
            Err(GraphError::TooManyNodes { limit: 3 })
        ));

        let mut b = HeapGraphBuilder::with_limits(3, 2, 2);
        for _ in 0..3 {
            b.add_edge(0, 0);
        }
        assert_eq!(b.edge_count(), 2);
        assert!(matches!(
            b.finish(),
            Err(GraphError::TooManyEdges { limit: 2 })
        ));
    }
}
