//! Hostile: mutates the graph, then panics (a trap). The host must roll the
//! mutation back and report the trap.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.relu.default"])]
fn hostile_panic(graph: &Graph, node: NodeId) -> Result<bool> {
    let input = graph.tensor_input(node, "self")?;
    let inputs =
        vec![NamedArgument { name: "self".into(), value: Argument::Tensor(input), keyword: false }];
    graph.replace_with_call(node, "aten.neg.default", inputs)?;
    panic!("hostile plugin panics after mutating the graph");
}
