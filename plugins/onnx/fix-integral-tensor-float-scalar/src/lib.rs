//! Promote an integral tensor before it meets a Python float.
//!
//! `1.0 - int_mask` (`aten.rsub.Scalar`) crashes torch 2.13's decomposition
//! (pytorch/pytorch#194381) and `int_mask * 2.0` (`aten.mul`) reaches
//! translation with no ONNX decomposition (pytorch/pytorch#194382). Both work
//! once the tensor already has the op's result dtype, so cast the tensor
//! operand to it and leave the op alone. The cast has the op's own output
//! metadata (same shape, the promoted dtype). Once the operand is floating
//! point the fix no longer matches: it cannot revisit a node.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = [
    "aten.rsub.Scalar", "aten.sub.Scalar", "aten.sub.Tensor", "aten.mul.Scalar", "aten.mul.Tensor",
])]
fn fix_integral_tensor_float_scalar(graph: &Graph, node: NodeId) -> Result<bool> {
    let (Some(Argument::Tensor(operand)), Some(Argument::Float(_))) =
        (graph.input(node, "self")?, graph.input(node, "other")?)
    else {
        return Ok(false); // a tensor on the left, a Python float on the right
    };
    let decls = graph.output_decls(node)?;
    let [OutputDecl::Tensor(result)] = decls.as_slice() else { return Ok(false) };
    let Some(operand_dtype) = graph.tensor_meta(operand)?.map(|m| m.dtype) else {
        return Ok(false);
    };
    if is_floating(&operand_dtype) || !is_floating(&result.dtype) {
        return Ok(false);
    }
    let inputs = [
        positional("self", Argument::Tensor(operand)),
        keyword("dtype", Argument::Dtype(result.dtype.clone())),
    ];
    let promoted = graph.insert_value(node, "aten._to_copy.default", &inputs, decls[0].clone())?;
    graph.set_input(node, &positional("self", Argument::Tensor(promoted)))?;
    Ok(true)
}
