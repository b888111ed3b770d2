//! Test plugin, version 1 (torch < 2.13): `relu(x)` → `clamp_min(x, 0)`.

use hfx_sdk::prelude::*;

struct Fix;

impl Guest for Fix {
    fn describe() -> Vec<String> {
        targets(&["aten.relu.default"])
    }

    fn apply(graph: &Graph, node: NodeId) -> Result<bool, Error> {
        let x = graph.tensor_input(node, "self")?;
        let inputs = vec![
            NamedArgument { name: "self".into(), value: Argument::Tensor(x), keyword: false },
            NamedArgument { name: "min".into(), value: Argument::Int(0), keyword: false },
        ];
        graph.replace_with_call(node, "aten.clamp_min.default", inputs)?;
        Ok(true)
    }
}

hfx_sdk::register_fx_node_fix!(Fix);
