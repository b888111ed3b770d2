//! Hostile: mutates the graph, then recurses without bound. The wasm stack cap
//! (wasmtime's `max_wasm_stack`) must stop it as a stack overflow, with the
//! host's own native stack untouched, and the mutation must be rolled back.

use hfx_sdk::prelude::*;

/// Not a tail call: the addition after the call keeps every frame alive, and
/// `black_box` keeps the optimizer from turning the recursion into a loop.
#[inline(never)]
#[allow(unconditional_recursion)]
fn descend(depth: u64) -> u64 {
    std::hint::black_box(descend(std::hint::black_box(depth + 1))).wrapping_add(depth)
}

#[hfx_sdk::fx_node_fix(targets = ["aten.relu.default"])]
fn hostile_recursion(graph: &Graph, node: NodeId) -> Result<bool> {
    let input = graph.tensor_input(node, "self")?;
    graph.replace_with_call(
        node,
        "aten.neg.default",
        vec![positional("self", Argument::Tensor(input))],
    )?;
    Ok(descend(node as u64) == 0)
}
