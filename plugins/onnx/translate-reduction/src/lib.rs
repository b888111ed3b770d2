//! Reductions and softmax → ONNX (opset 18+: axes are an input).

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.mean.dim" => |e| reduction(e, "mean"),
    "aten.mean.default" => |e| reduction(e, "mean"),
    "aten.sum.dim_IntList" => |e| reduction(e, "sum"),
    "aten.sum.default" => |e| reduction(e, "sum"),
    "aten.amax.default" => |e| reduction(e, "amax"),
    "aten.amin.default" => |e| reduction(e, "amin"),
    "aten.softmax.int" => |e| reduction(e, "softmax"),
    "aten._softmax.default" => |e| reduction(e, "_softmax"),
    "aten.log_softmax.int" => |e| reduction(e, "log_softmax"),
    "aten._log_softmax.default" => |e| reduction(e, "_log_softmax"),
    "aten.cumsum.default" => |e| reduction(e, "cumsum"),
    "aten.topk.default" => topk,
    "aten.bincount.default" => |e| reduction(e, "bincount"),
    "aten.argmax.default" => |e| reduction(e, "argmax"),
    "aten.argmin.default" => |e| reduction(e, "argmin"),
    "aten.any.dim" => |e| reduction(e, "any"),
    "aten.any.dims" => |e| reduction(e, "any"),
    "aten.any.default" => |e| reduction(e, "any"),
    "aten.all.dim" => |e| reduction(e, "all"),
    "aten.all.dims" => |e| reduction(e, "all"),
    "aten.all.default" => |e| reduction(e, "all"),
    "aten.sort.default" => |e| reduction(e, "sort"),
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

/// The translation of `op` (`aten.<op>.<overload>`).
fn reduction(e: &Emit, op: &str) -> Result<()> {
    if op == "topk" {
        return topk(e);
    }
    if op == "sort" {
        // A full TopK along the axis (ties may order differently than torch's stable sort).
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
        return e.bind_outputs(&outputs);
    }
    let result = match op {
        "mean" => reduce(e, "ReduceMean")?,
        "sum" => reduce(e, "ReduceSum")?,
        "amax" => reduce(e, "ReduceMax")?,
        "amin" => reduce(e, "ReduceMin")?,
        "any" | "all" => {
            // ONNX reduces no bools: the max (any) or min (all) of 0/1, back to bool
            let flags = reduce_in(e, if op == "any" { "ReduceMax" } else { "ReduceMin" }, "int32")?;
            let out = e.output_meta()?.dtype;
            e.cast(&flags, "int32", &out)?
        }
        "softmax" | "_softmax" | "log_softmax" | "_log_softmax" => {
            let out = e.output_meta()?.dtype;
            let x = e.operand("self", &out)?;
            let onnx = if op.contains("log") { "LogSoftmax" } else { "Softmax" };
            e.op_with(onnx, &[&x], &[attr("axis", Attribute::Int(e.int("dim", -1)?))])?
        }
        "cumsum" => {
            let out = e.output_meta()?.dtype;
            let x = e.operand("self", &out)?;
            let axis = e.scalar(e.int("dim", 0)? as f64, "int64")?;
            e.op("CumSum", &[&x, &axis])?
        }
        "argmax" | "argmin" => {
            // the first extreme index, as torch; no `dim` means over the flattened tensor
            let mut x = e.tensor("self")?;
            let (axis, keepdim) = match e.arg("dim")? {
                None | Some(Argument::None) => {
                    x = e.op("Reshape", &[&x, &e.const_ints(&[-1])?])?;
                    (0, false)
                }
                _ => (e.int("dim", 0)?, e.boolean("keepdim", false)?),
            };
            let onnx = if op == "argmax" { "ArgMax" } else { "ArgMin" };
            e.op_with(onnx, &[&x], &[attr("axis", Attribute::Int(axis)), attr("keepdims", Attribute::Int(keepdim as i64))])?
        }
        "bincount" => {
            // counts of each value 0..=max (at least `minlength`): a one-hot row per
            // element, summed, as the reference's `_aten_bincount`; `weights` scale the rows
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
            e.op_with("ReduceSum", &[&rows, &e.const_ints(&[0])?], &[attr("keepdims", Attribute::Int(0))])?
        }
        _ => return Err(e.fail(format!("`{op}` is not translated by this plugin"))),
    };
    e.bind_output(&result)
}
