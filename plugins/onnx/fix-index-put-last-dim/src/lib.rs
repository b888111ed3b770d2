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

struct FixIndexPutLastDim;

fn arg(name: &str, value: Argument) -> NamedArgument {
    NamedArgument { name: name.into(), value, keyword: false }
}

fn kwarg(name: &str, value: Argument) -> NamedArgument {
    NamedArgument { name: name.into(), value, keyword: true }
}

fn tensor(graph: &Graph, v: ValueId) -> Result<Option<TensorMeta>, Error> {
    Ok(match graph.value_meta(v)? {
        ValueMeta::Tensor(m) => Some(m),
        _ => None,
    })
}

fn call(graph: &Graph, at: NodeId, target: &str, inputs: &[NamedArgument], out: OutputDecl) -> Result<ValueId, Error> {
    let node = graph.insert_call(at, target, inputs, &[out])?;
    match graph.output_values(node)?[..] {
        [v] => Ok(v),
        _ => Err(error(format!("{target} has one output"), Some(at))),
    }
}

/// Steps back through `slice`s that keep the shape (a full `:`).
fn base_of(graph: &Graph, mut value: ValueId) -> Result<ValueId, Error> {
    while let Some(producer) = graph.producer(value)? {
        if graph.target(producer)? != "aten.slice.Tensor" {
            break;
        }
        let input = graph.tensor_input(producer, "self")?;
        let (Some(a), Some(b)) = (tensor(graph, value)?, tensor(graph, input)?) else { break };
        if a.shape != b.shape {
            break;
        }
        value = input;
    }
    Ok(value)
}

impl Guest for FixIndexPutLastDim {
    fn describe() -> Vec<String> {
        targets(&["aten.index_put.default", "aten.index_put_.default"])
    }

    fn apply(graph: &Graph, node: NodeId) -> Result<bool, Error> {
        let this = graph.tensor_input(node, "self")?;
        let values = graph.tensor_input(node, "values")?;
        if matches!(graph.input(node, "accumulate")?, Some(Argument::Boolean(true))) {
            return Ok(false);
        }
        let Some(Argument::OptionalTensors(indices)) = graph.input(node, "indices")? else { return Ok(false) };
        let Some((Some(index), leading)) = indices.split_last() else { return Ok(false) };
        let (Some(self_meta), Some(index_meta), Some(values_meta)) = (tensor(graph, this)?, tensor(graph, *index)?, tensor(graph, values)?) else {
            return Ok(false);
        };
        // Only a broadcastable (one-element) value on the last dimension, selected by integers.
        let one_element = values_meta.shape.iter().all(|d| *d == Dim::Fixed(1));
        if leading.iter().any(Option::is_some) || index_meta.dtype == "bool" || !one_element || indices.len() != self_meta.shape.len() {
            return Ok(false);
        }
        let base = base_of(graph, this)?;
        let last = self_meta.shape.len() - 1;
        let size_dim = self_meta.shape[last].clone();
        let size = match &size_dim {
            Dim::Fixed(n) => SymInt::Constant(*n),
            Dim::Symbolic(expr) => SymInt::Value(call(
                graph,
                node,
                "aten.sym_size.int",
                &[arg("self", Argument::Tensor(this)), arg("dim", Argument::Int(last as i64))],
                OutputDecl::SymInt(expr.clone()),
            )?),
        };
        let plain = |dtype: &str, shape: Vec<Dim>| TensorMeta { dtype: dtype.into(), shape, strides: vec![], device: index_meta.device.clone() };
        let n = index_meta.shape.first().cloned().unwrap_or(Dim::Fixed(1));
        let arange = call(
            graph,
            node,
            "aten.arange.default",
            &[arg("end", Argument::SymInt(size)), kwarg("dtype", Argument::Dtype(index_meta.dtype.clone())), kwarg("device", Argument::Device(index_meta.device.clone())), kwarg("pin_memory", Argument::Boolean(false))],
            OutputDecl::Tensor(plain(&index_meta.dtype, vec![size_dim.clone()])),
        )?;
        let columns = call(graph, node, "aten.unsqueeze.default", &[arg("self", Argument::Tensor(arange)), arg("dim", Argument::Int(-1))], OutputDecl::Tensor(plain(&index_meta.dtype, vec![size_dim.clone(), Dim::Fixed(1)])))?;
        let selected = call(graph, node, "aten.unsqueeze.default", &[arg("self", Argument::Tensor(*index)), arg("dim", Argument::Int(0))], OutputDecl::Tensor(plain(&index_meta.dtype, vec![Dim::Fixed(1), n.clone()])))?;
        let matches = call(graph, node, "aten.eq.Tensor", &[arg("self", Argument::Tensor(columns)), arg("other", Argument::Tensor(selected))], OutputDecl::Tensor(plain("bool", vec![size_dim.clone(), n])))?;
        let mask = call(graph, node, "aten.any.dim", &[arg("self", Argument::Tensor(matches)), arg("dim", Argument::Int(-1))], OutputDecl::Tensor(plain("bool", vec![size_dim])))?;
        let inputs = vec![arg("condition", Argument::Tensor(mask)), arg("self", Argument::Tensor(values)), arg("other", Argument::Tensor(base))];
        let result_node = graph.replace_with_call(node, "aten.where.self", inputs)?;
        let [result] = graph.output_values(result_node)?[..] else { return Err(error("where has one output", Some(node))) };
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
                    Argument::Tensor(v) if v == base => NamedArgument { value: Argument::Tensor(result), ..a },
                    _ => a,
                })
                .collect();
            graph.set_inputs(user, &inputs)?;
        }
        Ok(true)
    }
}

hfx_sdk::register_fx_node_fix!(FixIndexPutLastDim);
