// An FX node fix: `aten.detach(x)` → `x` (export graphs need no autograd detach).
// The attribute states the kind and the targets the host dispatches to the fix.

use hfx_sdk::prelude::*;

/// Called for each node whose target is declared; `Ok(true)` consumes it.
#[hfx_sdk::fx_node_fix(targets = ["aten.detach.default"])]
fn fix_detach(graph: &Graph, node: NodeId) -> Result<bool> {
    graph.forward_input(node, "self")?;
    Ok(true)
}
