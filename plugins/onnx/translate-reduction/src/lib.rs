//! Reductions and softmax → ONNX (opset 18+: axes are an input).

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.mean.dim" => |e| reduce(e, "ReduceMean"),
    "aten.mean.default" => |e| reduce(e, "ReduceMean"),
    "aten.sum.dim_IntList" => |e| reduce(e, "ReduceSum"),
    "aten.sum.default" => |e| reduce(e, "ReduceSum"),
    "aten.amax.default" => |e| reduce(e, "ReduceMax"),
    "aten.amin.default" => |e| reduce(e, "ReduceMin"),
    "aten.softmax.int" => |e| softmax(e, "Softmax"),
    "aten._softmax.default" => |e| softmax(e, "Softmax"),
    "aten.log_softmax.int" => |e| softmax(e, "LogSoftmax"),
    "aten._log_softmax.default" => |e| softmax(e, "LogSoftmax"),
    "aten.cumsum.default" => cumsum,
    "aten.topk.default" => topk,
    "aten.bincount.default" => bincount,
    "aten.argmax.default" => |e| arg_extreme(e, "ArgMax"),
    "aten.argmin.default" => |e| arg_extreme(e, "ArgMin"),
    "aten.any.dim" => |e| reduce_bools(e, "ReduceMax"),
    "aten.any.dims" => |e| reduce_bools(e, "ReduceMax"),
    "aten.any.default" => |e| reduce_bools(e, "ReduceMax"),
    "aten.all.dim" => |e| reduce_bools(e, "ReduceMin"),
    "aten.all.dims" => |e| reduce_bools(e, "ReduceMin"),
    "aten.all.default" => |e| reduce_bools(e, "ReduceMin"),
    "aten.sort.default" => sort,
}

fn reduce(e: &Emit, onnx: &str) -> Result<String> {
    // A sum of bools counts: reduce in the output's dtype.
    reduce_in(e, onnx, &e.output_meta()?.dtype)
}

/// `onnx` over the node's `dim`s (all when none), the input cast to `dtype`.
fn reduce_in(e: &Emit, onnx: &str, dtype: &str) -> Result<String> {
    let x = e.operand("self", dtype)?;
    let keepdim = e.boolean("keepdim", false)?;
    let dims = match e.arg("dim")? {
        None | Some(Argument::None) => vec![],
        _ => e.ints("dim")?,
    };
    let mut inputs = vec![x];
    if !dims.is_empty() {
        inputs.push(e.const_ints(&dims)?);
    }
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    e.op_with(onnx, &refs, &[attr("keepdims", Attribute::Int(keepdim as i64))])
}

/// `topk(self, k, dim, largest, sorted)` → `TopK` (values, int64 indices).
fn topk(e: &Emit) -> Result<()> {
    let x = e.tensor("self")?;
    let k = e.int_1d("k", 1)?;
    let attributes = [
        attr("axis", Attribute::Int(e.int("dim", -1)?)),
        attr("largest", Attribute::Int(e.boolean("largest", true)? as i64)),
        attr("sorted", Attribute::Int(e.boolean("sorted", true)? as i64)),
    ];
    let outputs = e.op_n("TopK", &[&x, &k], 2, &attributes)?;
    e.bind_outputs(&outputs)
}

/// `sort` as a full `TopK` along the axis (ties may order differently than
/// torch's stable sort).
fn sort(e: &Emit) -> Result<()> {
    let x = e.tensor("self")?;
    let rank = e.rank("self")?;
    let dim = e.int("dim", -1)?;
    let dim = if dim < 0 { dim + rank } else { dim };
    let k = e.op_with("Shape", &[&x], &[attr("start", Attribute::Int(dim)), attr("end", Attribute::Int(dim + 1))])?;
    let attributes = [
        attr("axis", Attribute::Int(dim)),
        attr("largest", Attribute::Int(e.boolean("descending", false)? as i64)),
        attr("sorted", Attribute::Int(1)),
    ];
    let outputs = e.op_n("TopK", &[&x, &k], 2, &attributes)?;
    e.bind_outputs(&outputs)
}

/// `any` / `all`: ONNX reduces no bools, so the max (`ReduceMax`) or min
/// (`ReduceMin`) of 0/1, back to bool.
fn reduce_bools(e: &Emit, onnx: &str) -> Result<String> {
    let flags = reduce_in(e, onnx, "int32")?;
    let out = e.output_meta()?.dtype;
    e.cast(&flags, "int32", &out)
}

/// `softmax` / `log_softmax` (and their `_` forms) along `dim`, in the output's dtype.
fn softmax(e: &Emit, onnx: &str) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let x = e.operand("self", &out)?;
    e.op_with(onnx, &[&x], &[attr("axis", Attribute::Int(e.int("dim", -1)?))])
}

fn cumsum(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let x = e.operand("self", &out)?;
    let axis = e.scalar(e.int("dim", 0)? as f64, "int64")?;
    e.op("CumSum", &[&x, &axis])
}

/// `argmax` / `argmin`: the first extreme index, as torch; no `dim` means
/// over the flattened tensor.
fn arg_extreme(e: &Emit, onnx: &str) -> Result<String> {
    let mut x = e.tensor("self")?;
    let (axis, keepdim) = match e.arg("dim")? {
        None | Some(Argument::None) => {
            x = e.op("Reshape", &[&x, &e.const_ints(&[-1])?])?;
            (0, false)
        }
        _ => (e.int("dim", 0)?, e.boolean("keepdim", false)?),
    };
    e.op_with(onnx, &[&x], &[attr("axis", Attribute::Int(axis)), attr("keepdims", Attribute::Int(keepdim as i64))])
}

/// Counts of each value 0..=max (at least `minlength`): a one-hot row per
/// element, summed, as the reference's `_aten_bincount`; `weights` scale the rows.
fn bincount(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let x = e.operand("self", "int64")?;
    let top = e.op_with("ReduceMax", &[&x], &[attr("keepdims", Attribute::Int(1))])?;
    let depth = e.op("Add", &[&top, &e.const_ints(&[1])?])?;
    let depth = e.op("Max", &[&depth, &e.int_1d("minlength", 0)?])?;
    let values = e.cast(&e.const_ints(&[0, 1])?, "int64", &out)?;
    let mut rows = e.op_with("OneHot", &[&x, &depth, &values], &[attr("axis", Attribute::Int(-1))])?;
    if let Some(Argument::Tensor(_)) = e.arg("weights")? {
        let weights = e.operand("weights", &out)?;
        rows = e.op("Mul", &[&rows, &e.op("Unsqueeze", &[&weights, &e.const_ints(&[1])?])?])?;
    }
    e.op_with("ReduceSum", &[&rows, &e.const_ints(&[0])?], &[attr("keepdims", Attribute::Int(0))])
}
