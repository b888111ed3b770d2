//! Hostile: inserts a node, then sets an input of 10M ints (80 MB) in one host
//! call. The host must refuse the transfer past its write budget, naming it,
//! and roll the inserted node back.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.relu.default"])]
fn hostile_big_list(graph: &Graph, node: NodeId) -> Result<bool> {
    let input = graph.tensor_input(node, "self")?;
    let decls = graph.output_decls(node)?;
    graph.insert_call(
        node,
        "aten.neg.default",
        &[positional("self", Argument::Tensor(input))],
        &decls,
    )?;
    graph.set_input(node, &keyword("padding", Argument::Ints(vec![7; 10_000_000])))?;
    Ok(true)
}
