//! Hostile: mutates the graph, then returns a 1 MiB error message of many
//! lines. The host must refuse the message past its size cap (it would
//! otherwise be printed whole, and break the one-line error), name the cap,
//! and roll the mutation back.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.relu.default"])]
fn hostile_message(graph: &Graph, node: NodeId) -> Result<bool> {
    let input = graph.tensor_input(node, "self")?;
    graph.replace_with_call(
        node,
        "aten.neg.default",
        vec![positional("self", Argument::Tensor(input))],
    )?;
    Err(error("line\n".repeat((1 << 20) / 5), Some(node)))
}
