//! `aten.hypot(x, y)` → `aten.sqrt(aten.add(aten.mul(x, x), aten.mul(y, y)))`:
//! ONNX has no `Hypot`, and torch's decomposition table has no entry for it,
//! so without this fix an export that meets it stops naming the op.
//! The example of docs/plugins.md: a fix that builds nodes, outside the hfx
//! repository's workspace.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.hypot.default"])]
fn fix_hypot(graph: &Graph, node: NodeId) -> Result<bool> {
    let x = graph.tensor_input(node, "self")?;
    let y = graph.tensor_input(node, "other")?;
    // A square has its operand's shape and dtype; the sum broadcasts and
    // promotes as hypot does, so it has the node's own output metadata.
    let square = |v: ValueId| -> Result<ValueId> {
        let Some(meta) = graph.tensor_meta(v)? else {
            return Err(error("an operand without tensor metadata", Some(node)));
        };
        let operand = || positional("self", Argument::Tensor(v));
        graph.insert_value(
            node,
            "aten.mul.Tensor",
            &[operand(), positional("other", Argument::Tensor(v))],
            OutputDecl::Tensor(meta),
        )
    };
    let (xx, yy) = (square(x)?, square(y)?);
    let Some(output) = graph.output_decls(node)?.into_iter().next() else { return Ok(false) };
    let sum = graph.insert_value(
        node,
        "aten.add.Tensor",
        &[positional("self", Argument::Tensor(xx)), positional("other", Argument::Tensor(yy))],
        output,
    )?;
    graph.replace_with_call(
        node,
        "aten.sqrt.default",
        vec![positional("self", Argument::Tensor(sum))],
    )?;
    Ok(true)
}
