//! Hostile: adds nodes without end. The host's node budget must stop it.

use hfx_sdk::prelude::*;

struct Flood;

impl Guest for Flood {
    fn describe() -> Vec<String> {
        targets(&["aten.relu.default"])
    }

    fn apply(graph: &Graph, node: NodeId) -> Result<bool, Error> {
        let input = graph.tensor_input(node, "self")?;
        let decls = graph.output_decls(node)?;
        let inputs = vec![NamedArgument { name: "self".into(), value: Argument::Tensor(input), keyword: false }];
        loop {
            graph.insert_call(node, "aten.neg.default", &inputs, &decls)?;
        }
    }
}

hfx_sdk::register_fx_node_fix!(Flood);
