//! `aten.expm1(x)` → `aten.sub(aten.exp(x), 1)`: ONNX has no `Expm1`.
//! The example of docs/plugins.md: a fix that builds a node, outside the
//! hfx repository's workspace.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.expm1.default"])]
fn fix_expm1(graph: &Graph, node: NodeId) -> Result<bool> {
    let x = graph.tensor_input(node, "self")?;
    // exp(x) has expm1(x)'s shape and dtype: declare it with the node's own output.
    let Some(output) = graph.output_decls(node)?.into_iter().next() else { return Ok(false) };
    let exp = graph.insert_value(node, "aten.exp.default", &[positional("self", Argument::Tensor(x))], output)?;
    graph.replace_with_call(node, "aten.sub.Tensor", vec![positional("self", Argument::Tensor(exp)), positional("other", Argument::Int(1))])?;
    Ok(true)
}
