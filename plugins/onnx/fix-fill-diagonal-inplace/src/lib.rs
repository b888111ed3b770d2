//! `x.fill_diagonal_(v)` → `where(eye(rows, cols).bool(), full_like(x, v), x)`.
//!
//! The in-place op has no ONNX lowering; the out-of-place form is built from
//! ops that all have one. Sizes come from `sym_size` where they are symbolic,
//! as constants where they are not. (Like the reference fix: 2-D, no `wrap`.)

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.fill_diagonal_.default"])]
fn fix_fill_diagonal_inplace(graph: &Graph, node: NodeId) -> Result<bool> {
    let x = graph.tensor_input(node, "self")?;
    let Some(fill) = graph.input(node, "fill_value")? else { return Ok(false) };
    let ValueMeta::Tensor(meta) = graph.value_meta(x)? else { return Ok(false) };
    if meta.shape.len() != 2 || matches!(graph.input(node, "wrap")?, Some(Argument::Boolean(true)))
    {
        return Ok(false);
    }
    // Each size: a constant, or a `sym_size` node reading it from `x`.
    let mut sizes = Vec::new();
    for (d, dim) in meta.shape.iter().enumerate() {
        sizes.push(match dim {
            Dim::Fixed(n) => SymInt::Constant(*n),
            Dim::Symbolic(expr) => {
                let inputs = [
                    positional("self", Argument::Tensor(x)),
                    positional("dim", Argument::Int(d as i64)),
                ];
                SymInt::Value(graph.insert_value(
                    node,
                    "aten.sym_size.int",
                    &inputs,
                    OutputDecl::SymInt(expr.clone()),
                )?)
            }
        });
    }
    let shaped = |dtype: &str| TensorMeta { dtype: dtype.into(), strides: vec![], ..meta.clone() };
    let eye = graph.insert_call(
        node,
        "aten.eye.m",
        &[
            positional("n", Argument::SymInt(sizes[0].clone())),
            positional("m", Argument::SymInt(sizes[1].clone())),
        ],
        &[OutputDecl::Tensor(shaped("float32"))],
    )?;
    let mask = graph.insert_call(
        node,
        "aten.to.dtype",
        &[
            positional("self", Argument::Tensor(graph.single_output(eye)?)),
            positional("dtype", Argument::Dtype("bool".into())),
        ],
        &[OutputDecl::Tensor(shaped("bool"))],
    )?;
    let filled = graph.insert_call(
        node,
        "aten.full_like.default",
        &[
            positional("self", Argument::Tensor(x)),
            positional("fill_value", fill),
            keyword("pin_memory", Argument::Boolean(false)),
        ],
        &[OutputDecl::Tensor(meta.clone())],
    )?;
    let inputs = vec![
        positional("condition", Argument::Tensor(graph.single_output(mask)?)),
        positional("self", Argument::Tensor(graph.single_output(filled)?)),
        positional("other", Argument::Tensor(x)),
    ];
    graph.replace_with_call(node, "aten.where.self", inputs)?;
    Ok(true)
}
