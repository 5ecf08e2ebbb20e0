//! The retention view: a heap as a profile, so the tools that open CPU profiles open it.
//!
//! Each reachable object is one sample weighing its own size, whose stack is its chain of
//! dominators from the root kind that holds it down to its type: `[static vars];[static var
//! Kept];List<HeapNode>;HeapNode[];HeapNode`. A frame's total is then exactly what the
//! objects under it retain. Consecutive dominators of one type fold into one frame (a
//! linked list is one frame, not one per node), and chains deeper than [`MAX_DEPTH`]
//! frames keep their root end and their last frames around a `[...]` frame.

use std::collections::HashMap;

use eventpipe_heap::{DominatorTree, Dominators, HeapGraph, NodeId};

use crate::profile::{Frame, FrameId, FrameKind, Profile, Sample, SampleUnit, StackId};

/// Frames a retention stack keeps at most.
pub const MAX_DEPTH: usize = 128;

/// The retention profile of `graph`'s objects (nodes from `first_object` on).
pub fn retention_profile(
    graph: &HeapGraph,
    dominators: &Dominators,
    first_object: NodeId,
) -> Profile {
    let mut profile = Profile::new("Heap retention (dominator tree)", SampleUnit::HeapBytes);
    let thread = profile.intern_thread(0, Some("heap"), None);
    let frames: Vec<FrameId> = (0..graph.type_count() as u32)
        .map(|t| profile.intern_frame(Frame::named(graph.type_name(t), FrameKind::HeapType)))
        .collect();
    let elided = profile.intern_frame(Frame::named("[...]", FrameKind::HeapType));
    // Each node's stack, built from its immediate dominator's (dominators come first in
    // a walk from the root); `None` for the root itself, whose frame is not drawn.
    let n = graph.node_count();
    let mut stack_of: Vec<Option<StackId>> = vec![None; n];
    let mut extended: HashMap<(Option<StackId>, FrameId), StackId> = HashMap::new();
    for node in dominator_order(graph, dominators) {
        let Some(parent) = dominators.idom(node) else {
            continue;
        };
        let parent_stack = stack_of[parent as usize];
        let frame = frames[graph.type_of(node) as usize];
        let same_as_last = parent_stack
            .and_then(|s| profile.stacks[s].last().copied())
            .is_some_and(|last| last == frame);
        let stack = if same_as_last {
            parent_stack.expect("a last frame means a stack")
        } else {
            match extended.get(&(parent_stack, frame)) {
                Some(&s) => s,
                None => {
                    let mut frames =
                        parent_stack.map_or_else(Vec::new, |s| profile.stacks[s].clone());
                    frames.push(frame);
                    if frames.len() > MAX_DEPTH {
                        // Keep the root end and the leaf end.
                        let keep_head = MAX_DEPTH / 2;
                        let tail = frames.split_off(frames.len() - (MAX_DEPTH - keep_head - 1));
                        frames.truncate(keep_head);
                        if frames.last() != Some(&elided) {
                            frames.push(elided);
                        }
                        frames.extend(tail);
                    }
                    let s = profile.intern_stack(frames);
                    extended.insert((parent_stack, frame), s);
                    s
                }
            }
        };
        stack_of[node as usize] = Some(stack);
        if node >= first_object {
            profile.push_sample(Sample {
                thread,
                time_ms: 0.0,
                weight: graph.size(node),
                stack,
                lines: None,
            });
        }
    }
    profile
}

/// Reachable nodes, each after its immediate dominator (a breadth-first walk of the
/// dominator tree).
fn dominator_order(graph: &HeapGraph, dominators: &Dominators) -> Vec<NodeId> {
    let tree = DominatorTree::of(graph, dominators);
    let mut order = Vec::with_capacity(dominators.reachable_count());
    order.push(graph.root());
    let mut i = 0;
    while i < order.len() {
        let node = order[i];
        order.extend_from_slice(tree.children(node));
        i += 1;
    }
    order
}
