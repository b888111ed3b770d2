//! `self[..., idx] = value` (a scalar value, `idx` on the last dimension) →
//! `where(any(arange(size).unsqueeze(-1) == idx.unsqueeze(0), -1), value, base)`.
//!
//! torchlib's `index_put` lowering silently drops such a write under dynamic
//! shapes. The mask compares an `arange` over the last dimension with `idx`
//! and broadcasts against `self`. The write itself (`x[:, :, idx] = v`, an
//! `index_put_`) reaches this fix functionalized by the worker, its result
//! scattered back into `x`.

use hfx_sdk::prelude::*;

#[hfx_sdk::fx_node_fix(targets = ["aten.index_put.default"])]
fn fix_index_put_last_dim(graph: &Graph, node: NodeId) -> Result<bool> {
    let this = graph.tensor_input(node, "self")?;
    let values = graph.tensor_input(node, "values")?;
    if matches!(graph.input(node, "accumulate")?, Some(Argument::Boolean(true))) {
        return Ok(false);
    }
    let Some(Argument::OptionalTensors(indices)) = graph.input(node, "indices")? else {
        return Ok(false);
    };
    let Some((Some(index), leading)) = indices.split_last() else { return Ok(false) };
    let (Some(self_meta), Some(index_meta), Some(values_meta)) =
        (graph.tensor_meta(this)?, graph.tensor_meta(*index)?, graph.tensor_meta(values)?)
    else {
        return Ok(false);
    };
    // Only a broadcastable (one-element) value on the last dimension, selected by integers.
    let one_element = values_meta.shape.iter().all(|d| *d == Dim::Fixed(1));
    if leading.iter().any(Option::is_some)
        || index_meta.dtype == "bool"
        || !one_element
        || indices.len() != self_meta.shape.len()
    {
        return Ok(false);
    }
    let last = self_meta.shape.len() - 1;
    let size_dim = self_meta.shape[last].clone();
    let size = match &size_dim {
        Dim::Fixed(n) => SymInt::Constant(*n),
        Dim::Symbolic(expr) => SymInt::Value(graph.insert_value(
            node,
            "aten.sym_size.int",
            &[
                positional("self", Argument::Tensor(this)),
                positional("dim", Argument::Int(last as i64)),
            ],
            OutputDecl::SymInt(expr.clone()),
        )?),
    };
    let plain = |dtype: &str, shape: Vec<Dim>| TensorMeta {
        dtype: dtype.into(),
        shape,
        strides: vec![],
        device: index_meta.device.clone(),
    };
    let n = index_meta.shape.first().cloned().unwrap_or(Dim::Fixed(1));
    let arange = graph.insert_value(
        node,
        "aten.arange.default",
        &[
            positional("end", Argument::SymInt(size)),
            keyword("dtype", Argument::Dtype(index_meta.dtype.clone())),
            keyword("device", Argument::Device(index_meta.device.clone())),
            keyword("pin_memory", Argument::Boolean(false)),
        ],
        OutputDecl::Tensor(plain(&index_meta.dtype, vec![size_dim.clone()])),
    )?;
    let columns = graph.insert_value(
        node,
        "aten.unsqueeze.default",
        &[positional("self", Argument::Tensor(arange)), positional("dim", Argument::Int(-1))],
        OutputDecl::Tensor(plain(&index_meta.dtype, vec![size_dim.clone(), Dim::Fixed(1)])),
    )?;
    let selected = graph.insert_value(
        node,
        "aten.unsqueeze.default",
        &[positional("self", Argument::Tensor(*index)), positional("dim", Argument::Int(0))],
        OutputDecl::Tensor(plain(&index_meta.dtype, vec![Dim::Fixed(1), n.clone()])),
    )?;
    let matches = graph.insert_value(
        node,
        "aten.eq.Tensor",
        &[
            positional("self", Argument::Tensor(columns)),
            positional("other", Argument::Tensor(selected)),
        ],
        OutputDecl::Tensor(plain("bool", vec![size_dim.clone(), n])),
    )?;
    let mask = graph.insert_value(
        node,
        "aten.any.dim",
        &[positional("self", Argument::Tensor(matches)), positional("dim", Argument::Int(-1))],
        OutputDecl::Tensor(plain("bool", vec![size_dim])),
    )?;
    let inputs = vec![
        positional("condition", Argument::Tensor(mask)),
        positional("self", Argument::Tensor(values)),
        positional("other", Argument::Tensor(this)),
    ];
    graph.replace_with_call(node, "aten.where.self", inputs)?;
    Ok(true)
}
