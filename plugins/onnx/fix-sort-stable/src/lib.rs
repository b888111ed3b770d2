//! `aten.sort.stable(self, *, stable, dim=-1, descending=False)` →
//! `aten.sort.default(self, dim, descending)`: only the default overload has an
//! ONNX translation. `dim` and `descending` are keyword-only in `sort.stable`.

use hfx_sdk::prelude::*;

struct FixSortStable;

impl Guest for FixSortStable {
    fn describe() -> Vec<String> {
        targets(&["aten.sort.stable"])
    }

    fn apply(graph: &Graph, node: NodeId) -> Result<bool, Error> {
        let input = graph.tensor_input(node, "self")?;
        let dim = graph.input_or(node, "dim", Argument::Int(-1))?;
        let descending = graph.input_or(node, "descending", Argument::Boolean(false))?;
        let inputs = vec![
            NamedArgument { name: "self".into(), value: Argument::Tensor(input), keyword: false },
            NamedArgument { name: "dim".into(), value: dim, keyword: false },
            NamedArgument { name: "descending".into(), value: descending, keyword: false },
        ];
        graph.replace_with_call(node, "aten.sort.default", inputs)?;
        Ok(true)
    }
}

hfx_sdk::register_fx_node_fix!(FixSortStable);
