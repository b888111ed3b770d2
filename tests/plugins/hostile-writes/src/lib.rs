//! Hostile: inserts 64 nodes, each carrying a 1 MiB string argument. No single
//! call is large, but together they hand the host 64 MiB: the write budget
//! must stop the call, naming it, and roll every inserted node back.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.relu.default"])]
fn hostile_writes(graph: &Graph, node: NodeId) -> Result<bool> {
    let input = graph.tensor_input(node, "self")?;
    let decls = graph.output_decls(node)?;
    let note = "w".repeat(1 << 20);
    for _ in 0..64 {
        let inputs = [
            positional("self", Argument::Tensor(input)),
            keyword("note", Argument::Str(note.clone())),
        ];
        graph.insert_call(node, "aten.neg.default", &inputs, &decls)?;
    }
    Ok(true)
}
