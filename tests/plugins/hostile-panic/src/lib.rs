//! Hostile: mutates the graph, then panics (a trap). The host must roll the
//! mutation back and report the trap.

use hfx_sdk::prelude::*;

struct Crash;

impl Guest for Crash {
    fn describe() -> Vec<String> {
        targets(&["aten.relu.default"])
    }

    fn apply(graph: &Graph, node: NodeId) -> Result<bool, Error> {
        let input = graph.tensor_input(node, "self")?;
        let inputs = vec![NamedArgument { name: "self".into(), value: Argument::Tensor(input), keyword: false }];
        graph.replace_with_call(node, "aten.neg.default", inputs)?;
        panic!("hostile plugin panics after mutating the graph");
    }
}

hfx_sdk::register_fx_node_fix!(Crash);
