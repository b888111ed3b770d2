//! `aten.sort.stable(self, *, stable, dim=-1, descending=False)` →
//! `aten.sort.default(self, dim, descending)`: only the default overload has an
//! ONNX translation. `dim` and `descending` are keyword-only in `sort.stable`.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.sort.stable"])]
fn fix_sort_stable(graph: &Graph, node: NodeId) -> Result<bool> {
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
