//! In-place ATen ops (`add_`, `mul_`, `masked_fill_`, `index_put_`, `copy_`,
//! ...) → their functional form. ONNX values are immutable, and torch.export
//! keeps such ops in the training IR. The functional op computes the tensor's
//! new value where the in-place op ran; the readers of the tensor after it
//! read that value instead (`inv[perm] = arange(n); y = x[inv]`), and those
//! before keep the old value, which is what they saw.
//!
//! A tensor may go by several names: its whole-tensor aliases (`x.float()` of
//! a float tensor, `x.detach()`, a view to its own shape, an in-place op's
//! result, which is its `self`). The mutated tensor is followed back through
//! them to its base, and every reader after the mutation of any of those
//! names reads the new value. The base must be
//!
//! - a tensor the program computes: nobody outside the graph sees it; or
//! - a user input of the root graph, the caller's tensor (Mamba's decode
//!   updates its cache state so, `conv_state.copy_(...)`, and returns the
//!   cache): ONNX cannot write its inputs, so the caller sees the update only
//!   through the graph outputs, and a graph output must return the updated
//!   tensor (the in-place op's result, or a whole alias of it): its ONNX output
//!   (`output.cache.layers.0.conv_states.0`) then carries the new value.
//!   Parameters, buffers and constants (module state, initializers in ONNX)
//!   are not written.
//!
//! Any other mutation is left alone (and the translation stage then names
//! the node): through a partial view (`x[0].add_(1)`); of a tensor with a
//! partial view taken before the mutation and read after it (the view shows
//! the new value); of a tensor a graph output returns by a name it had
//! before the mutation; of a tensor a later in-place op this plugin does not
//! make functional writes too; of a tensor read in another sub-graph.

use std::collections::HashMap;

use hfx_sdk::prelude::*;

/// Ops whose result may share memory with an input: a mutation through or of
/// such a value is seen by the other alias, which a functional rewrite loses.
const ALIASING: &[&str] = &[
    "view",
    "_unsafe_view",
    "_reshape_alias",
    "reshape",
    "reshape_as",
    "slice",
    "select",
    "transpose",
    "permute",
    "expand",
    "expand_as",
    "unsqueeze",
    "squeeze",
    "as_strided",
    "t",
    "numpy_T",
    "mT",
    "mH",
    "adjoint",
    "alias",
    "detach",
    "narrow",
    "diagonal",
    "unbind",
    "split",
    "split_with_sizes",
    "unsafe_split",
    "tensor_split",
    "chunk",
    "unsafe_chunk",
    "unflatten",
    "flatten",
    "unfold",
    "contiguous",
    "to",
    "type_as",
    "view_as",
    "movedim",
    "moveaxis",
    "swapaxes",
    "swapdims",
    "real",
    "imag",
    "view_as_real",
    "view_as_complex",
    "lift",
    "lift_fresh",
    "positive",
    "conj",
    "_conj",
    "_neg_view",
    "resolve_conj",
    "resolve_neg",
    "matrix_H",
    "hsplit",
    "vsplit",
    "dsplit",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "broadcast_to",
    "broadcast_tensors",
    "ravel",
];

/// Of those, the ops that return their input itself when the result has the
/// input's shape, dtype and device (and, for the ones that may copy, strides).
const WHOLE_WHEN_SAME: &[&str] = &[
    "alias",
    "detach",
    "lift_fresh",
    "view",
    "_unsafe_view",
    "reshape",
    "reshape_as",
    "view_as",
    "expand",
    "expand_as",
    "slice",
    "squeeze",
    "flatten",
    "unflatten",
    "contiguous",
    "to",
    "type_as",
];
/// The ops of `WHOLE_WHEN_SAME` that copy unless the layout already fits.
const MAY_COPY: &[&str] = &["contiguous", "to", "type_as"];

/// `aten.add_.Tensor` → `add_`.
fn op_of(target: &str) -> &str {
    target.split('.').nth(1).unwrap_or("")
}

/// An op writing its `self` (`add_`, `__iand__`), by ATen's naming.
fn writes_self(target: &str) -> bool {
    let op = op_of(target);
    match op.strip_prefix("__") {
        Some(dunder) => dunder.starts_with('i') && dunder.ends_with("__"),
        None => op.ends_with('_'),
    }
}

/// Whether `target` (`aten.view.default`) may return an alias of an input; an
/// in-place op (`add_`) returns its `self`.
fn aliases(target: &str) -> bool {
    writes_self(target) || ALIASING.contains(&op_of(target))
}

/// Ops whose effects the analysis knows: ATen (writes spelled by the name, or
/// an `out` overload), Python operators on sizes, higher-order ops (whose
/// branches cannot write their operands).
fn known(target: &str) -> bool {
    let mut parts = target.split('.');
    let namespace = parts.next().unwrap_or("");
    let overload = parts.nth(1).unwrap_or("");
    matches!(namespace, "aten" | "_operator" | "higher_order") && !overload.starts_with("out")
}

/// The input `node`'s result is the very tensor of: an in-place op's `self`,
/// or the input of a view or conversion that changed nothing.
fn whole_alias_of(graph: &Graph, node: NodeId) -> Result<Option<ValueId>> {
    let target = graph.target(node)?;
    let Some(Argument::Tensor(input)) = graph.input(node, "self")? else { return Ok(None) };
    if graph.output_values(node)?.len() != 1 {
        return Ok(None);
    }
    if writes_self(&target) {
        return Ok(Some(input));
    }
    let op = op_of(&target);
    let copies = matches!(graph.input(node, "copy")?, Some(Argument::Boolean(true)));
    let relayout = matches!(graph.input(node, "layout")?, Some(Argument::Layout(layout)) if layout != "strided");
    if !WHOLE_WHEN_SAME.contains(&op) || copies || relayout {
        return Ok(None);
    }
    let output = graph.single_output(node)?;
    let (Some(a), Some(b)) = (graph.tensor_meta(input)?, graph.tensor_meta(output)?) else {
        return Ok(None);
    };
    let same = a.dtype == b.dtype && a.shape == b.shape && a.device == b.device;
    Ok((same && (!MAY_COPY.contains(&op) || a.strides == b.strides)).then_some(input))
}

/// What `user` does with `name`, one of the mutated tensor's names.
enum Use {
    /// Writes it in place; the result, if one, is the tensor again.
    Write(Option<ValueId>),
    /// Another name of the whole tensor.
    Whole(ValueId),
    /// May alias it, or a part of it.
    View,
    Read,
}

fn use_of(graph: &Graph, user: NodeId, name: ValueId) -> Result<Use> {
    let target = graph.target(user)?;
    let this = graph.input(user, "self")?;
    let is_self = match &this {
        Some(Argument::Tensor(v)) => *v == name,
        Some(Argument::Tensors(vs)) => vs.contains(&name),
        _ => false,
    };
    // A view (or an in-place op) aliases its `self`; of an op without one
    // (`broadcast_tensors`), any input.
    let aliased = is_self || this.is_none();
    Ok(if writes_self(&target) && is_self {
        Use::Write(match graph.output_values(user)?[..] {
            [result] if graph.input(user, "self")? == Some(Argument::Tensor(name)) => Some(result),
            _ => None,
        })
    } else if is_self && whole_alias_of(graph, user)? == Some(name) {
        Use::Whole(graph.single_output(user)?)
    } else if aliases(&target) && aliased {
        Use::View
    } else {
        Use::Read
    })
}

/// `argument` with `old` read as `new`.
fn reread(argument: Argument, old: ValueId, new: ValueId) -> Argument {
    let swap = |v: ValueId| if v == old { new } else { v };
    match argument {
        Argument::Tensor(v) => Argument::Tensor(swap(v)),
        Argument::Tensors(vs) => Argument::Tensors(vs.into_iter().map(swap).collect()),
        Argument::OptionalTensors(vs) => {
            Argument::OptionalTensors(vs.into_iter().map(|v| v.map(swap)).collect())
        }
        other => other,
    }
}

/// The readers after `node` of the names the mutated tensor had before it
/// (each with the name it reads), or None where the rewrite cannot be sure.
fn plan(graph: &Graph, node: NodeId, mutated: ValueId) -> Result<Option<Vec<(NodeId, ValueId)>>> {
    let order: HashMap<NodeId, usize> =
        graph.nodes().into_iter().enumerate().map(|(i, n)| (n, i)).collect();
    let here = order[&node];
    let subgraph = graph.subgraph_of(node)?;
    let after = |n: NodeId| order.get(&n).is_some_and(|&p| p > here);
    // Whether `user` is one whose effects the analysis follows.
    let followed = |user: NodeId| -> Result<bool> {
        Ok(graph.subgraph_of(user)? == subgraph && known(&graph.target(user)?))
    };
    // A later write must be one of this plugin's targets, whose rewrite moves the readers after it on.
    let rewritten =
        |user: NodeId| -> Result<bool> { Ok(TARGETS.contains(&graph.target(user)?.as_str())) };

    // The base: back through whole aliases.
    let mut base = mutated;
    while let Some(producer) = graph.producer(base)? {
        match whole_alias_of(graph, producer)? {
            Some(input) => base = input,
            None if aliases(&graph.target(producer)?) => return Ok(None), // a partial view: the write lands elsewhere
            None => break,
        }
    }
    let caller_input = graph.producer(base)?.is_none();
    if caller_input {
        let name = graph.value_name(base)?;
        let module_state = ["p_", "b_", "c_"].iter().any(|p| name.starts_with(p));
        if subgraph != 0 || !graph.graph_inputs().contains(&base) || module_state {
            return Ok(None);
        }
    }

    // The names the tensor has before the mutation: the base and its whole
    // aliases made before `node`. Every reader of them after `node` reads
    // the new value; nothing may keep the old one under another name.
    let mut before = vec![base];
    let mut later = Vec::new();
    // The names it has after: `node`'s result and its whole aliases, and those later readers make.
    let mut after_names = graph.output_values(node)?;
    let mut index = 0;
    while let Some(&name) = before.get(index) {
        index += 1;
        if graph.is_graph_output(name)? {
            return Ok(None); // returned by this name: only `node`'s result can be re-pointed
        }
        for user in graph.value_users(name)? {
            if user == node {
                continue;
            }
            if !followed(user)? {
                return Ok(None);
            }
            let usage = use_of(graph, user, name)?;
            if after(user) {
                match usage {
                    Use::Write(_) if !rewritten(user)? => return Ok(None),
                    Use::Write(Some(result)) | Use::Whole(result) => after_names.push(result),
                    _ => {}
                }
                later.push((user, name));
            } else {
                match usage {
                    Use::Write(Some(result)) | Use::Whole(result) => before.push(result),
                    Use::Write(None) => return Ok(None),
                    Use::View if seen_after(graph, user, &after)? => return Ok(None), // shows the new value
                    _ => {}
                }
            }
        }
    }

    // Later writes of the new value must be rewritten too; and the caller's
    // tensor must come back by one of its names after the mutation.
    let mut returned = false;
    let mut index = 0;
    while let Some(&name) = after_names.get(index) {
        index += 1;
        returned |= graph.is_graph_output(name)?;
        for user in graph.value_users(name)? {
            if !followed(user)? {
                return Ok(None);
            }
            match use_of(graph, user, name)? {
                Use::Write(_) if !rewritten(user)? => return Ok(None),
                Use::Write(Some(result)) | Use::Whole(result) => after_names.push(result),
                _ => {}
            }
        }
    }
    if caller_input && !returned {
        return Ok(None); // the caller's tensor changes, and no output says so
    }
    Ok(Some(later))
}

/// Whether any value aliasing `view`'s outputs (through further views and
/// in-place ops) is read after the mutation or returned.
fn seen_after(graph: &Graph, view: NodeId, after: &dyn Fn(NodeId) -> bool) -> Result<bool> {
    let mut values = graph.output_values(view)?;
    while let Some(value) = values.pop() {
        if graph.is_graph_output(value)? {
            return Ok(true);
        }
        for user in graph.value_users(value)? {
            if after(user) {
                return Ok(true);
            }
            if aliases(&graph.target(user)?) {
                values.extend(graph.output_values(user)?);
            }
        }
    }
    Ok(false)
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
    let Some(later) = plan(graph, node, mutated)? else { return Ok(false) };
    // `aten.add_.Tensor` → `aten.add.Tensor`: the op name without its trailing underscore.
    let mut parts: Vec<&str> = target.split('.').collect();
    let functional = parts[1].trim_end_matches('_').to_string();
    parts[1] = &functional;
    let inputs = graph.inputs(node)?;
    // The readers of the in-place op's result move to the functional one's.
    let replacement = graph.replace_with_call(node, &parts.join("."), inputs)?;
    let result = graph.single_output(replacement)?;
    for (reader, name) in later {
        let inputs = graph.inputs(reader)?;
        let reread: Vec<NamedArgument> = inputs
            .into_iter()
            .map(|a| NamedArgument { value: reread(a.value, name, result), ..a })
            .collect();
        graph.set_inputs(reader, &reread)?;
    }
    Ok(true)
}
