//! Hostile: inserts 64 nodes, each carrying a 1 MiB string argument. No single
//! call is large, but together they hand the host 64 MiB: the write budget
//! must stop the call, naming it, and roll every inserted node back.

use hfx_sdk::prelude::*;

struct Writes;

impl Guest for Writes {
    fn describe() -> Vec<String> {
        targets(&["aten.relu.default"])
    }

    fn apply(graph: &Graph, node: NodeId) -> Result<bool, Error> {
        let input = graph.tensor_input(node, "self")?;
        let decls = graph.output_decls(node)?;
        let note = "w".repeat(1 << 20);
        for _ in 0..64 {
            let inputs = [positional("self", Argument::Tensor(input)), keyword("note", Argument::Str(note.clone()))];
            graph.insert_call(node, "aten.neg.default", &inputs, &decls)?;
        }
        Ok(true)
    }
}

hfx_sdk::register_fx_node_fix!(Writes);
