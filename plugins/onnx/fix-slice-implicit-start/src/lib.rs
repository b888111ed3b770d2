//! Spell out a slice's implicit start as `0`.
//!
//! `aten.slice.Tensor(x, dim, None, end)` lowers to an ONNX `Slice` whose
//! `starts` is an `Unsqueeze` of nothing, which ONNX Runtime rejects. `None`
//! already means `0` there, so writing it out changes nothing but the graph.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.slice.Tensor"])]
fn fix_slice_implicit_start(graph: &Graph, node: NodeId) -> Result<bool> {
    let Some(Argument::None) = graph.input(node, "start")? else {
        return Ok(false); // explicit start, or none given at all
    };
    graph.set_input(
        node,
        &NamedArgument { name: "start".into(), value: Argument::Int(0), keyword: false },
    )?;
    Ok(true)
}
