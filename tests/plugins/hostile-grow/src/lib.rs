//! Hostile: mutates the graph, then asks for ~3.9 GB of linear memory in one
//! `memory.grow` (60000 pages). The memory limiter must refuse it at once,
//! naming the cap, and the mutation must be rolled back.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.relu.default"])]
fn hostile_grow(graph: &Graph, node: NodeId) -> Result<bool> {
    let input = graph.tensor_input(node, "self")?;
    graph.replace_with_call(
        node,
        "aten.neg.default",
        vec![positional("self", Argument::Tensor(input))],
    )?;
    #[cfg(target_arch = "wasm32")]
    let previous = core::arch::wasm32::memory_grow(0, 60_000);
    #[cfg(not(target_arch = "wasm32"))]
    let previous = usize::MAX;
    if previous == usize::MAX {
        // A refusal the guest sees (-1) would let it carry on: the host must trap instead.
        return Err(error("memory.grow of 60000 pages was refused softly", Some(node)));
    }
    Ok(true)
}
