//! Dead-code elimination that keeps side-effecting ops.

use super::*;

/// Ops whose effect is not their output: never removed for lack of readers.
const SIDE_EFFECTING: &[&str] = &[
    "aten._assert_async.default",
    "aten._assert_async.msg",
    "aten._assert_scalar.default",
    "aten._assert_tensor_metadata.default",
    "aten.sym_constrain_range.default",
    "aten.sym_constrain_range_for_size.default",
    "aten._print.default",
    "aten._make_dep_token.default",
    "higher_order.auto_functionalized",
    "higher_order.with_effects",
    "profiler._record_function_enter_new.default",
    "profiler._record_function_exit._RecordFunction",
];

/// True for ops kept without readers: listed effects, in-place ops (`aten.add_.Tensor`),
/// `.out` overloads, and nodes that produce nothing.
pub fn has_side_effects(node: &Node) -> bool {
    if node.outputs.iter().all(|o| matches!(o, Argument::None)) {
        return true;
    }
    if SIDE_EFFECTING.contains(&node.target.as_str()) {
        return true;
    }
    let mut parts = node.target.split('.');
    let (namespace, op, overload) = (parts.next(), parts.next(), parts.next());
    let in_place =
        namespace == Some("aten") && op.is_some_and(|op| op.ends_with('_') && !op.ends_with("__"));
    in_place || overload == Some("out")
}

impl Graph {
    /// Removes every node without readers and without side effects, in all
    /// graphs, until none is left. Returns how many nodes were removed.
    pub fn eliminate_dead_code(&mut self) -> usize {
        let mut removed = 0;
        for subgraph in 0..self.subgraphs.len() {
            // Walking backwards sees a reader before what it reads, so one pass suffices.
            let order: Vec<NodeId> = self.order(subgraph as u32).collect();
            for &id in order.iter().rev() {
                let node = self.nodes[id.0 as usize].as_ref().expect("ordered nodes are live");
                let dead =
                    !has_side_effects(node) && node.output_values().all(|v| !self.is_used(v));
                if dead && self.erase(id).is_ok() {
                    removed += 1;
                }
            }
        }
        removed
    }
}
