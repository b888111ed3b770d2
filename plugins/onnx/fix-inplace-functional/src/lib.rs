//! In-place ATen ops (`add_`, `mul_`, `masked_fill_`, `index_put_`, ...) →
//! their functional form. ONNX values are immutable, and torch.export keeps
//! such ops in the training IR. The mutated tensor must be one nothing else
//! can see: not a graph input or output, not a view of another tensor, and
//! with no view taken of it. Then the readers after the mutation read the
//! functional op's result instead (`inv[perm] = arange(n); y = x[inv]`), and
//! those before keep the old value, which is what they saw. Any other
//! mutation is left alone (and the translation stage then names the node).

use hfx_sdk::prelude::*;

/// Ops whose result may share memory with an input: a mutation through or of
/// such a value is seen by the other alias, which a functional rewrite loses.
const ALIASING: &[&str] = &[
    "view", "_unsafe_view", "reshape", "slice", "select", "transpose", "permute", "expand", "expand_as",
    "unsqueeze", "squeeze", "as_strided", "t", "alias", "detach", "narrow", "diagonal", "unbind", "split",
    "split_with_sizes", "chunk", "unflatten", "flatten", "contiguous", "to", "type_as", "view_as", "movedim",
    "swapaxes", "real", "imag", "view_as_real", "view_as_complex", "lift_fresh",
];

/// Whether `target` (`aten.view.default`) may return an alias of an input; an
/// in-place op (`add_`) returns its `self`.
fn aliases(target: &str) -> bool {
    let op = target.split('.').nth(1).unwrap_or("");
    op.ends_with('_') || ALIASING.contains(&op)
}

/// Whether something other than `node` could see `value` change in place.
fn observable(graph: &Graph, node: NodeId, value: ValueId) -> Result<bool> {
    let Some(producer) = graph.producer(value)? else { return Ok(true) }; // a graph input: the caller's tensor
    if graph.is_graph_output(value)? || aliases(&graph.target(producer)?) {
        return Ok(true);
    }
    for user in graph.value_users(value)? {
        if user != node && aliases(&graph.target(user)?) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `argument` with `old` read as `new`.
fn reread(argument: Argument, old: ValueId, new: ValueId) -> Argument {
    let swap = |v: ValueId| if v == old { new } else { v };
    match argument {
        Argument::Tensor(v) => Argument::Tensor(swap(v)),
        Argument::Tensors(vs) => Argument::Tensors(vs.into_iter().map(swap).collect()),
        Argument::OptionalTensors(vs) => Argument::OptionalTensors(vs.into_iter().map(|v| v.map(swap)).collect()),
        other => other,
    }
}

#[hfx_sdk::fx_node_fix(targets = [
    "aten.add_.Tensor", "aten.add_.Scalar", "aten.sub_.Tensor", "aten.sub_.Scalar", "aten.mul_.Tensor",
    "aten.mul_.Scalar", "aten.div_.Tensor", "aten.div_.Scalar", "aten.masked_fill_.Scalar",
    "aten.masked_fill_.Tensor", "aten.clamp_.default", "aten.clamp_min_.default", "aten.clamp_max_.default",
    "aten.neg_.default", "aten.exp_.default", "aten.relu_.default", "aten.tanh_.default",
    "aten.sigmoid_.default", "aten.pow_.Scalar", "aten.triu_.default", "aten.tril_.default",
    "aten.index_put_.default", "aten.scatter_.src", "aten.scatter_.value", "aten.scatter_add_.default",
    "aten.fill_.Scalar", "aten.copy_.default",
])]
fn fix_inplace_functional(graph: &Graph, node: NodeId) -> Result<bool> {
    let target = graph.target(node)?;
    let mutated = graph.tensor_input(node, "self")?;
    if observable(graph, node, mutated)? {
        return Ok(false);
    }
    let order = graph.nodes();
    let position = |n: NodeId| order.iter().position(|&m| m == n);
    let here = position(node);
    let later: Vec<NodeId> = graph.value_users(mutated)?.into_iter().filter(|&u| u != node && position(u) > here).collect();
    // `aten.add_.Tensor` → `aten.add.Tensor`: the op name without its trailing underscore.
    let mut parts: Vec<&str> = target.split('.').collect();
    let functional = parts[1].trim_end_matches('_').to_string();
    parts[1] = &functional;
    let inputs = graph.inputs(node)?;
    let replacement = graph.replace_with_call(node, &parts.join("."), inputs)?;
    let result = graph.single_output(replacement)?;
    for reader in later {
        let inputs = graph.inputs(reader)?;
        let reread: Vec<NamedArgument> =
            inputs.into_iter().map(|a| NamedArgument { value: reread(a.value, mutated, result), ..a }).collect();
        graph.set_inputs(reader, &reread)?;
    }
    Ok(true)
}
