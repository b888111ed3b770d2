//! Hostile: inserts a node, then sets an input of 10M ints (80 MB) in one host
//! call. The host must refuse the transfer past its write budget, naming it,
//! and roll the inserted node back.

use hfx_sdk::prelude::*;

struct BigList;

impl Guest for BigList {
    fn describe() -> Vec<String> {
        targets(&["aten.relu.default"])
    }

    fn apply(graph: &Graph, node: NodeId) -> Result<bool, Error> {
        let input = graph.tensor_input(node, "self")?;
        let decls = graph.output_decls(node)?;
        graph.insert_call(node, "aten.neg.default", &[positional("self", Argument::Tensor(input))], &decls)?;
        graph.set_input(node, &keyword("padding", Argument::Ints(vec![7; 10_000_000])))?;
        Ok(true)
    }
}

hfx_sdk::register_fx_node_fix!(BigList);
