//! `aten.alias(x)` → `x`: the alias only feeds in-place chains
//! (`alias → detach_ → index_put_`) that the ONNX lowering cannot follow.

use hfx_sdk::prelude::*;

struct FixAlias;

impl Guest for FixAlias {
    fn describe() -> Vec<String> {
        targets(&["aten.alias.default"])
    }

    fn apply(graph: &Graph, node: NodeId) -> Result<bool, Error> {
        graph.forward_input(node, "self")?;
        Ok(true)
    }
}

hfx_sdk::register_fx_node_fix!(FixAlias);
