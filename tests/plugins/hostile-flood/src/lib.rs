//! Hostile: adds nodes without end. The host's node budget must stop it.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.relu.default"])]
fn hostile_flood(graph: &Graph, node: NodeId) -> Result<bool> {
    let input = graph.tensor_input(node, "self")?;
    let decls = graph.output_decls(node)?;
    let inputs =
        vec![NamedArgument { name: "self".into(), value: Argument::Tensor(input), keyword: false }];
    loop {
        graph.insert_call(node, "aten.neg.default", &inputs, &decls)?;
    }
}
