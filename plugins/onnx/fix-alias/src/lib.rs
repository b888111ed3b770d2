//! `aten.alias(x)` → `x`: the alias only feeds in-place chains
//! (`alias → detach_ → index_put_`) that the ONNX lowering cannot follow.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.alias.default"])]
fn fix_alias(graph: &Graph, node: NodeId) -> Result<bool> {
    graph.forward_input(node, "self")?;
    Ok(true)
}
