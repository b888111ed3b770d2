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
//!   axis; positions nothing scatters to keep `self`.
//!
//! Other combinations are left for the backend to reject visibly.

use hfx_sdk::prelude::*;

struct FixScatterReduce;

fn arg(name: &str, value: Argument) -> NamedArgument {
    NamedArgument { name: name.into(), value, keyword: false }
}

fn kwarg(name: &str, value: Argument) -> NamedArgument {
    NamedArgument { name: name.into(), value, keyword: true }
}

fn t(v: ValueId) -> Argument {
    Argument::Tensor(v)
}

/// Inserts `target(inputs)` before `at` with one tensor output; returns the output.
fn call(graph: &Graph, at: NodeId, target: &str, inputs: &[NamedArgument], out: TensorMeta) -> Result<ValueId, Error> {
    let node = graph.insert_call(at, target, inputs, &[OutputDecl::Tensor(out)])?;
    match graph.output_values(node)?[..] {
        [v] => Ok(v),
        _ => Err(error(format!("{target} has one output"), Some(at))),
    }
}

fn tensor_meta(graph: &Graph, v: ValueId, node: NodeId) -> Result<TensorMeta, Error> {
    match graph.value_meta(v)? {
        ValueMeta::Tensor(m) => Ok(m),
        _ => Err(error("expected a tensor", Some(node))),
    }
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

impl Guest for FixScatterReduce {
    fn describe() -> Vec<String> {
        targets(&["aten.scatter_reduce.two"])
    }

    fn apply(graph: &Graph, node: NodeId) -> Result<bool, Error> {
        let this = graph.tensor_input(node, "self")?;
        let index = graph.tensor_input(node, "index")?;
        let src = graph.tensor_input(node, "src")?;
        let (Some(Argument::Int(dim)), Some(Argument::Str(reduce))) = (graph.input(node, "dim")?, graph.input(node, "reduce")?) else {
            return Ok(false);
        };
        let include_self = !matches!(graph.input(node, "include_self")?, Some(Argument::Boolean(false)));
        let self_meta = tensor_meta(graph, this, node)?;
        let src_meta = tensor_meta(graph, src, node)?;
        let same_as_self = || TensorMeta { strides: vec![], ..self_meta.clone() };
        let with_dtype = |dtype: &str| TensorMeta { dtype: dtype.into(), ..same_as_self() };
        let plain = |dtype: &str, shape: Vec<Dim>| TensorMeta { dtype: dtype.into(), shape, strides: vec![], device: self_meta.device.clone() };
        let dim_arg = Argument::Int(dim);

        let result = match (reduce.as_str(), include_self) {
            ("sum", true) => {
                let inputs = vec![arg("self", t(this)), arg("dim", dim_arg), arg("index", t(index)), arg("src", t(src))];
                graph.replace_with_call(node, "aten.scatter_add.default", inputs)?;
                return Ok(true);
            }
            ("sum" | "mean", false) => {
                let zeros = call(graph, node, "aten.zeros_like.default", &[arg("self", t(this))], same_as_self())?;
                let scatter = |what: ValueId| {
                    let inputs = [arg("self", t(zeros)), arg("dim", dim_arg.clone()), arg("index", t(index)), arg("src", t(what))];
                    call(graph, node, "aten.scatter_add.default", &inputs, same_as_self())
                };
                let sums = scatter(src)?;
                let ones_meta = TensorMeta { strides: vec![], ..src_meta.clone() };
                let ones = call(graph, node, "aten.ones_like.default", &[arg("self", t(src))], ones_meta)?;
                let counts = scatter(ones)?;
                let values = if reduce == "mean" {
                    // Clamped so untouched positions divide by 1, not 0; `where` drops them anyway.
                    let divisor = call(graph, node, "aten.clamp_min.default", &[arg("self", t(counts)), arg("min", Argument::Int(1))], same_as_self())?;
                    call(graph, node, "aten.div.Tensor", &[arg("self", t(sums)), arg("other", t(divisor))], same_as_self())?
                } else {
                    sums
                };
                let touched = call(graph, node, "aten.gt.Scalar", &[arg("self", t(counts)), arg("other", Argument::Int(0))], with_dtype("bool"))?;
                vec![arg("condition", t(touched)), arg("self", t(values)), arg("other", t(this))]
            }
            ("amax" | "amin", false) => {
                let Some(max) = finite_max(&src_meta.dtype) else { return Ok(false) };
                let index_meta = tensor_meta(graph, index, node)?;
                let rank = self_meta.shape.len() as i64;
                let d = if dim < 0 { dim + rank } else { dim } as usize;
                let k = self_meta.shape[d].clone();
                let Dim::Fixed(k_size) = k else { return Ok(false) }; // a symbolic K needs a sym_size feed
                let arange_meta = plain("int64", vec![Dim::Fixed(k_size)]);
                let arange = call(graph, node, "aten.arange.default", &[arg("end", Argument::Int(k_size)), kwarg("device", Argument::Device(self_meta.device.clone())), kwarg("pin_memory", Argument::Boolean(false))], arange_meta)?;
                let mut k_shape = vec![1i64; rank as usize + 1];
                k_shape[d] = k_size;
                let k_dims: Vec<Dim> = k_shape.iter().map(|&n| Dim::Fixed(n)).collect();
                let k_range = call(graph, node, "aten.view.default", &[arg("self", t(arange)), arg("size", Argument::SymInts(k_shape.iter().map(|&n| SymInt::Constant(n)).collect()))], plain("int64", k_dims))?;
                let unsqueezed = |v: ValueId, m: &TensorMeta, dtype: &str| {
                    let mut shape = m.shape.clone();
                    shape.insert(d, Dim::Fixed(1));
                    call(graph, node, "aten.unsqueeze.default", &[arg("self", t(v)), arg("dim", Argument::Int(d as i64))], plain(dtype, shape))
                };
                let index_unsq = unsqueezed(index, &index_meta, &index_meta.dtype)?;
                let mut mask_shape = index_meta.shape.clone();
                mask_shape.insert(d, Dim::Fixed(k_size));
                let mask = call(graph, node, "aten.eq.Tensor", &[arg("self", t(index_unsq)), arg("other", t(k_range))], plain("bool", mask_shape.clone()))?;
                let src_unsq = unsqueezed(src, &src_meta, &src_meta.dtype)?;
                let identity = if reduce == "amax" { -max } else { max };
                let masked = call(graph, node, "aten.where.ScalarOther", &[arg("condition", t(mask)), arg("self", t(src_unsq)), arg("other", Argument::Float(identity))], plain(&src_meta.dtype, mask_shape))?;
                let reduction = if reduce == "amax" { "aten.amax.default" } else { "aten.amin.default" };
                let extrema = call(graph, node, reduction, &[arg("self", t(masked)), arg("dim", Argument::Ints(vec![d as i64 + 1]))], same_as_self())?;
                let any = call(graph, node, "aten.any.dim", &[arg("self", t(mask)), arg("dim", Argument::Int(d as i64 + 1))], with_dtype("bool"))?;
                vec![arg("condition", t(any)), arg("self", t(extrema)), arg("other", t(this))]
            }
            _ => return Ok(false),
        };
        graph.replace_with_call(node, "aten.where.self", result)?;
        Ok(true)
    }
}

hfx_sdk::register_fx_node_fix!(FixScatterReduce);
