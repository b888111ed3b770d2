//! Lower `aten.scatter_reduce.two` to ops every backend has.
//!
//! - `sum`, `include_self=True` → `scatter_add(self, dim, index, src)`.
//! - `sum`/`mean`, `include_self=False` → scatter `src` onto zeros and count
//!   the contributors alongside (`scatter_add` of ones): positions with a
//!   contributor take the sum (divided by the count for `mean`), the others
//!   keep `self`.
//! - `amax`/`amin`, `include_self=False`, floating point → a one-hot mask
//!   `unsqueeze(index, d) == arange(K).view(...)`, `src` where the mask is
//!   set and the reduction's identity elsewhere, reduced over the source
//!   axis; positions nothing scatters to keep `self`. Only where `index`
//!   and `src` span `self` on the other axes (the mask is index-shaped).
//!
//! Other combinations are left for the backend to reject visibly.

use hfx_sdk::prelude::*;

fn t(v: ValueId) -> Argument {
    Argument::Tensor(v)
}

/// Inserts `target(inputs)` before `at` with one tensor output; returns the output.
fn call(
    graph: &Graph,
    at: NodeId,
    target: &str,
    inputs: &[NamedArgument],
    out: TensorMeta,
) -> Result<ValueId> {
    graph.insert_value(at, target, inputs, OutputDecl::Tensor(out))
}

fn tensor_meta(graph: &Graph, v: ValueId, node: NodeId) -> Result<TensorMeta> {
    graph.tensor_meta(v)?.ok_or_else(|| error("expected a tensor", Some(node)))
}

/// The largest finite value of a floating dtype (the identity of `amin`; negated, of `amax`).
fn finite_max(dtype: &str) -> Option<f64> {
    Some(match dtype {
        "float32" => f32::MAX as f64,
        "float64" => f64::MAX,
        "float16" => 65504.0,
        "bfloat16" => 3.3895313892515355e38,
        _ => return None,
    })
}

#[hfx_sdk::fx_node_fix(targets = ["aten.scatter_reduce.two"])]
fn fix_scatter_reduce(graph: &Graph, node: NodeId) -> Result<bool> {
    let this = graph.tensor_input(node, "self")?;
    let index = graph.tensor_input(node, "index")?;
    let src = graph.tensor_input(node, "src")?;
    let (Some(Argument::Int(dim)), Some(Argument::Str(reduce))) =
        (graph.input(node, "dim")?, graph.input(node, "reduce")?)
    else {
        return Ok(false);
    };
    let include_self =
        !matches!(graph.input(node, "include_self")?, Some(Argument::Boolean(false)));
    let self_meta = tensor_meta(graph, this, node)?;
    let src_meta = tensor_meta(graph, src, node)?;
    let same_as_self = || TensorMeta { strides: vec![], ..self_meta.clone() };
    let with_dtype = |dtype: &str| TensorMeta { dtype: dtype.into(), ..same_as_self() };
    let plain = |dtype: &str, shape: Vec<Dim>| TensorMeta {
        dtype: dtype.into(),
        shape,
        strides: vec![],
        device: self_meta.device.clone(),
    };
    let dim_arg = Argument::Int(dim);

    let result = match (reduce.as_str(), include_self) {
        ("sum", true) => {
            let inputs = vec![
                positional("self", t(this)),
                positional("dim", dim_arg),
                positional("index", t(index)),
                positional("src", t(src)),
            ];
            graph.replace_with_call(node, "aten.scatter_add.default", inputs)?;
            return Ok(true);
        }
        ("sum" | "mean", false) => {
            let zeros = call(
                graph,
                node,
                "aten.zeros_like.default",
                &[positional("self", t(this))],
                same_as_self(),
            )?;
            let scatter = |what: ValueId| {
                let inputs = [
                    positional("self", t(zeros)),
                    positional("dim", dim_arg.clone()),
                    positional("index", t(index)),
                    positional("src", t(what)),
                ];
                call(graph, node, "aten.scatter_add.default", &inputs, same_as_self())
            };
            let sums = scatter(src)?;
            let ones_meta = TensorMeta { strides: vec![], ..src_meta.clone() };
            let ones = call(
                graph,
                node,
                "aten.ones_like.default",
                &[positional("self", t(src))],
                ones_meta,
            )?;
            let counts = scatter(ones)?;
            let values = if reduce == "mean" {
                // Clamped so untouched positions divide by 1, not 0; `where` drops them anyway.
                let divisor = call(
                    graph,
                    node,
                    "aten.clamp_min.default",
                    &[positional("self", t(counts)), positional("min", Argument::Int(1))],
                    same_as_self(),
                )?;
                call(
                    graph,
                    node,
                    "aten.div.Tensor",
                    &[positional("self", t(sums)), positional("other", t(divisor))],
                    same_as_self(),
                )?
            } else {
                sums
            };
            let touched = call(
                graph,
                node,
                "aten.gt.Scalar",
                &[positional("self", t(counts)), positional("other", Argument::Int(0))],
                with_dtype("bool"),
            )?;
            vec![
                positional("condition", t(touched)),
                positional("self", t(values)),
                positional("other", t(this)),
            ]
        }
        ("amax" | "amin", false) => {
            let Some(max) = finite_max(&src_meta.dtype) else { return Ok(false) };
            let index_meta = tensor_meta(graph, index, node)?;
            let rank = self_meta.shape.len() as i64;
            let d = if dim < 0 { dim + rank } else { dim } as usize;
            // The mask is index-shaped: it lines up with `self` only where
            // `index` (and `src`, which torch reads only as far as `index`
            // covers) spans `self` on every other axis.
            let spans = |shape: &[Dim]| {
                shape.len() == self_meta.shape.len()
                    && (0..shape.len()).all(|a| a == d || shape[a] == self_meta.shape[a])
            };
            if src_meta.shape != index_meta.shape || !spans(&index_meta.shape) {
                return Ok(false);
            }
            let k = self_meta.shape[d].clone();
            let Dim::Fixed(k_size) = k else { return Ok(false) }; // a symbolic K needs a sym_size feed
            let arange_meta = plain("int64", vec![Dim::Fixed(k_size)]);
            let arange = call(
                graph,
                node,
                "aten.arange.default",
                &[
                    positional("end", Argument::Int(k_size)),
                    keyword("device", Argument::Device(self_meta.device.clone())),
                    keyword("pin_memory", Argument::Boolean(false)),
                ],
                arange_meta,
            )?;
            let mut k_shape = vec![1i64; rank as usize + 1];
            k_shape[d] = k_size;
            let k_dims: Vec<Dim> = k_shape.iter().map(|&n| Dim::Fixed(n)).collect();
            let k_range = call(
                graph,
                node,
                "aten.view.default",
                &[
                    positional("self", t(arange)),
                    positional(
                        "size",
                        Argument::SymInts(k_shape.iter().map(|&n| SymInt::Constant(n)).collect()),
                    ),
                ],
                plain("int64", k_dims),
            )?;
            let unsqueezed = |v: ValueId, m: &TensorMeta, dtype: &str| {
                let mut shape = m.shape.clone();
                shape.insert(d, Dim::Fixed(1));
                call(
                    graph,
                    node,
                    "aten.unsqueeze.default",
                    &[positional("self", t(v)), positional("dim", Argument::Int(d as i64))],
                    plain(dtype, shape),
                )
            };
            let index_unsq = unsqueezed(index, &index_meta, &index_meta.dtype)?;
            let mut mask_shape = index_meta.shape.clone();
            mask_shape.insert(d, Dim::Fixed(k_size));
            let mask = call(
                graph,
                node,
                "aten.eq.Tensor",
                &[positional("self", t(index_unsq)), positional("other", t(k_range))],
                plain("bool", mask_shape.clone()),
            )?;
            let src_unsq = unsqueezed(src, &src_meta, &src_meta.dtype)?;
            let identity = if reduce == "amax" { -max } else { max };
            let masked = call(
                graph,
                node,
                "aten.where.ScalarOther",
                &[
                    positional("condition", t(mask)),
                    positional("self", t(src_unsq)),
                    positional("other", Argument::Float(identity)),
                ],
                plain(&src_meta.dtype, mask_shape),
            )?;
            let reduction =
                if reduce == "amax" { "aten.amax.default" } else { "aten.amin.default" };
            let extrema = call(
                graph,
                node,
                reduction,
                &[
                    positional("self", t(masked)),
                    positional("dim", Argument::Ints(vec![d as i64 + 1])),
                ],
                same_as_self(),
            )?;
            let any = call(
                graph,
                node,
                "aten.any.dim",
                &[positional("self", t(mask)), positional("dim", Argument::Int(d as i64 + 1))],
                with_dtype("bool"),
            )?;
            vec![
                positional("condition", t(any)),
                positional("self", t(extrema)),
                positional("other", t(this)),
            ]
        }
        _ => return Ok(false),
    };
    graph.replace_with_call(node, "aten.where.self", result)?;
    Ok(true)
}
