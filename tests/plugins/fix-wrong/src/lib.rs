//! Test plugin: a wrong fix, `relu(x)` rewritten as `neg(x)`. It runs and
//! leaves a well-formed graph; only a numeric check can catch it (the
//! negative control of `hfx plugins test`).

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.relu.default"])]
fn fix_wrong(graph: &Graph, node: NodeId) -> Result<bool> {
    let input = graph.tensor_input(node, "self")?;
    let inputs =
        vec![NamedArgument { name: "self".into(), value: Argument::Tensor(input), keyword: false }];
    graph.replace_with_call(node, "aten.neg.default", inputs)?;
    Ok(true)
}
