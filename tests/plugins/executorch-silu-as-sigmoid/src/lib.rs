// Test plugin: a third party's FX node fix for the ExecuTorch backend, which
// has no translations: loaded from a folder, it changes the program ExecuTorch
// lowers (silu(x) becomes x * sigmoid(x)) with no rebuild of hfx.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.silu.default"])]
fn silu_as_sigmoid(graph: &Graph, node: NodeId) -> Result<bool> {
    let x = graph.tensor_input(node, "self")?;
    let Some(output) = graph.output_decls(node)?.into_iter().next() else { return Ok(false) };
    let gate = graph.insert_value(
        node,
        "aten.sigmoid.default",
        &[positional("self", Argument::Tensor(x))],
        output,
    )?;
    graph.replace_with_call(
        node,
        "aten.mul.Tensor",
        vec![positional("self", Argument::Tensor(x)), positional("other", Argument::Tensor(gate))],
    )?;
    Ok(true)
}
