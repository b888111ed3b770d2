//! Test plugin: rewrites `aten.relu.default` into `aten.clamp_min.default(x, 0)`,
//! declines `aten.add.Tensor`. Used to check dispatch by declared target.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.relu.default", "aten.add.Tensor"])]
fn kind_node_fix(graph: &Graph, node: NodeId) -> Result<bool> {
    if graph.target(node)? != "aten.relu.default" {
        return Ok(false);
    }
    let input = graph.tensor_input(node, "self")?;
    let inputs = vec![
        NamedArgument { name: "self".into(), value: Argument::Tensor(input), keyword: false },
        NamedArgument { name: "min".into(), value: Argument::Int(0), keyword: false },
    ];
    graph.replace_with_call(node, "aten.clamp_min.default", inputs)?;
    Ok(true)
}
