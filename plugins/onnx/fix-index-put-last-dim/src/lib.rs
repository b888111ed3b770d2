//! `self[..., idx] = value` (a scalar value, `idx` on the last dimension) →
//! `where(any(arange(size).unsqueeze(-1) == idx.unsqueeze(0), -1), value, base)`.
//!
//! torchlib's `index_put` lowering silently drops such a write under dynamic
//! shapes. The mask compares an `arange` over the last dimension with `idx`
//! and broadcasts against `self`. `x[:, :, idx] = v` writes into a *view*:
//! the write lands on `base`, the tensor before any full-size `slice`, and
//! every later reader of `base` reads the result (a functional IR would
//! otherwise drop the in-place write).

use hfx_sdk::prelude::*;

/// Steps back through `slice`s that keep the shape (a full `:`).
fn base_of(graph: &Graph, mut value: ValueId) -> Result<ValueId> {
    while let Some(producer) = graph.producer(value)? {
        if graph.target(producer)? != "aten.slice.Tensor" {
            break;
        }
        let input = graph.tensor_input(producer, "self")?;
        let (Some(a), Some(b)) = (graph.tensor_meta(value)?, graph.tensor_meta(input)?) else {
            break;
        };
        if a.shape != b.shape {
            break;
        }
        value = input;
    }
    Ok(value)
}

#[hfx_sdk::fx_node_fix(targets = ["aten.index_put.default", "aten.index_put_.default"])]
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
    let base = base_of(graph, this)?;
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
        positional("other", Argument::Tensor(base)),
    ];
    let result_node = graph.replace_with_call(node, "aten.where.self", inputs)?;
    let result = graph.single_output(result_node)?;
    // Later readers of `base` relied on the in-place write: they read the result.
    let order = graph.nodes();
    let position = |n: NodeId| order.iter().position(|&m| m == n);
    let after = position(result_node);
    for user in graph.value_users(base)? {
        if user == result_node || position(user) <= after {
            continue;
        }
        let inputs: Vec<NamedArgument> = graph
            .inputs(user)?
            .into_iter()
            .map(|a| match a.value {
                Argument::Tensor(v) if v == base => {
                    NamedArgument { value: Argument::Tensor(result), ..a }
                }
                _ => a,
            })
            .collect();
        graph.set_inputs(user, &inputs)?;
    }
    Ok(true)
}
