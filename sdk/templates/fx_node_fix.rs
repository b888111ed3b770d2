// An FX node fix: `aten.detach(x)` → `x` (export graphs need no autograd detach).
// Edit `describe` (the targets the host dispatches to this fix) and `apply`.

use hfx_sdk::prelude::*;

struct Fix;

impl Guest for Fix {
    fn describe() -> Vec<String> {
        targets(&["aten.detach.default"])
    }

    /// Called for each node whose target is declared above; `Ok(true)` consumes it.
    fn apply(graph: &Graph, node: NodeId) -> Result<bool, Error> {
        graph.forward_input(node, "self")?;
        Ok(true)
    }
}

hfx_sdk::register_fx_node_fix!(Fix);
