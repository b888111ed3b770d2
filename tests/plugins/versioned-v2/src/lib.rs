//! Test plugin, version 2 (torch 2.13–2.15): `relu(x)` → `clamp(x, min=0)`.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(name = "test-versioned-fix", targets = ["aten.relu.default"])]
fn fix(graph: &Graph, node: NodeId) -> Result<bool> {
    let x = graph.tensor_input(node, "self")?;
    let inputs = vec![
        NamedArgument { name: "self".into(), value: Argument::Tensor(x), keyword: false },
        NamedArgument { name: "min".into(), value: Argument::Int(0), keyword: true },
    ];
    graph.replace_with_call(node, "aten.clamp.default", inputs)?;
    Ok(true)
}
