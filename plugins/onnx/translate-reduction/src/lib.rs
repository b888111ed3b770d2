//! Reductions (sum, mean, prod, var, max/min with indices, any/all), softmax,
//! cumsum, topk, sort and embedding bags → ONNX (opset 18+: axes are an input).

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
    "aten.prod.default" => prod,
    "aten.prod.dim_int" => prod,
    "aten.var.dim" => var,
    "aten.var.correction" => var,
    "aten.max.dim" => |e| extreme_dim(e, "ReduceMax", "ArgMax"),
    "aten.min.dim" => |e| extreme_dim(e, "ReduceMin", "ArgMin"),
    "aten.max.default" => |e| extreme(e, "ReduceMax"),
    "aten.min.default" => |e| extreme(e, "ReduceMin"),
    "aten._embedding_bag.default" => embedding_bag,
    "aten.linalg_vector_norm.default" => vector_norm,
}

/// `linalg_vector_norm(self, ord, dim, keepdim, dtype)`: ord 2 and 1 are
/// `ReduceL2` / `ReduceL1`, ±inf the largest / smallest magnitude, 0 the count
/// of non-zeros, any other `(Σ|x|^ord)^(1/ord)`; half floats computed in float32.
fn vector_norm(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let via = accumulate_dtype(&out).to_string();
    let x = e.operand("self", &via)?;
    let ord = e.float("ord", 2.0)?;
    let keepdim = e.boolean("keepdim", false)?;
    let dims = if e.rank("self")? == 0 { vec![] } else { dims(e)? };
    let reduce = |op: &str, value: &str| -> Result<String> {
        let mut inputs = vec![value.to_string()];
        if !dims.is_empty() {
            inputs.push(e.const_ints(&dims)?);
        }
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        e.op_with(op, &refs, &[attr("keepdims", Attribute::Int(keepdim as i64))])
    };
    let magnitude = || e.op("Abs", &[&x]);
    let norm = if ord == 2.0 {
        reduce("ReduceL2", &x)?
    } else if ord == 1.0 {
        reduce("ReduceL1", &x)?
    } else if ord == f64::INFINITY {
        reduce("ReduceMax", &magnitude()?)?
    } else if ord == f64::NEG_INFINITY {
        reduce("ReduceMin", &magnitude()?)?
    } else if ord == 0.0 {
        let nonzero = e.op("Not", &[&e.op("Equal", &[&x, &e.scalar(0.0, &via)?])?])?;
        reduce("ReduceSum", &e.cast(&nonzero, "bool", &via)?)?
    } else {
        let powered = e.op("Pow", &[&magnitude()?, &e.scalar(ord, &via)?])?;
        e.op("Pow", &[&reduce("ReduceSum", &powered)?, &e.scalar(1.0 / ord, &via)?])?
    };
    e.cast(&norm, &via, &out)
}

fn reduce(e: &Emit, onnx: &str) -> Result<String> {
    // A sum of bools counts: reduce in the output's dtype.
    reduce_in(e, onnx, &e.output_meta()?.dtype)
}

/// `onnx` over the node's `dim`s (all when none), the input cast to `dtype`.
fn reduce_in(e: &Emit, onnx: &str, dtype: &str) -> Result<String> {
    let x = e.operand("self", dtype)?;
    let keepdim = e.boolean("keepdim", false)?;
    // A 0-d tensor has no axis to name (torch accepts dim 0 / -1 there).
    let dims = if e.rank("self")? == 0 { vec![] } else { dims(e)? };
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

/// `sort` as a full `TopK` along the axis: ties keep the lower index first
/// (ONNX's rule), one of the orders torch's unstable sort may give. TopK takes
/// no bool or narrow integers: those sort as int32.
fn sort(e: &Emit) -> Result<()> {
    let dtype = e.input_meta("self")?.dtype;
    let via = if matches!(dtype.as_str(), "bool" | "uint8" | "int8" | "int16") {
        "int32"
    } else {
        dtype.as_str()
    };
    let x = e.operand("self", via)?;
    let rank = e.rank("self")?;
    let dim = e.int("dim", -1)?;
    let dim = if dim < 0 { dim + rank } else { dim };
    // The axis' length: a constant when static, else read at run time.
    let k = match e.input_meta("self")?.shape.get(dim as usize) {
        Some(Dim::Fixed(n)) => e.const_ints(&[*n])?,
        _ => e.op_with(
            "Shape",
            &[&x],
            &[attr("start", Attribute::Int(dim)), attr("end", Attribute::Int(dim + 1))],
        )?,
    };
    let attributes = [
        attr("axis", Attribute::Int(dim)),
        attr("largest", Attribute::Int(e.boolean("descending", false)? as i64)),
        attr("sorted", Attribute::Int(1)),
    ];
    let outputs = e.op_n("TopK", &[&x, &k], 2, &attributes)?;
    let values = e.cast(&outputs[0], via, &dtype)?;
    e.bind_outputs(&[values, outputs[1].clone()])
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
    // A 0-d tensor's running sum is itself (ONNX's CumSum wants an axis).
    if e.rank("self")? == 0 {
        return e.op("Identity", &[&x]);
    }
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
        // A 0-d tensor has no axis (torch accepts dim 0 / -1): a 1-element
        // vector reduced to 0-d again.
        _ if e.rank("self")? == 0 => {
            x = e.op("Reshape", &[&x, &e.const_ints(&[-1])?])?;
            (0, false)
        }
        _ => (e.int("dim", 0)?, e.boolean("keepdim", false)?),
    };
    e.op_with(
        onnx,
        &[&x],
        &[attr("axis", Attribute::Int(axis)), attr("keepdims", Attribute::Int(keepdim as i64))],
    )
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
    let mut rows =
        e.op_with("OneHot", &[&x, &depth, &values], &[attr("axis", Attribute::Int(-1))])?;
    if let Some(Argument::Tensor(_)) = e.arg("weights")? {
        let weights = e.operand("weights", &out)?;
        rows = e.op("Mul", &[&rows, &e.op("Unsqueeze", &[&weights, &e.const_ints(&[1])?])?])?;
    }
    e.op_with("ReduceSum", &[&rows, &e.const_ints(&[0])?], &[attr("keepdims", Attribute::Int(0))])
}

/// The node's `dim` list; empty when absent or `None` (torch then reduces every axis).
fn dims(e: &Emit) -> Result<Vec<i64>> {
    match e.arg("dim")? {
        None | Some(Argument::None) => Ok(vec![]),
        _ => e.ints("dim"),
    }
}

/// The dtype ONNX Runtime's CPU kernels compute `dtype` in: they lack bfloat16
/// (and, for the reductions, bool and int16), so those go through float32 / int64.
fn kernel_dtype(dtype: &str) -> &str {
    match dtype {
        "bfloat16" => "float32",
        "bool" | "int8" | "int16" | "uint8" => "int64",
        _ => dtype,
    }
}

/// Half-precision floats computed in float32, as torch accumulates them.
fn accumulate_dtype(dtype: &str) -> &str {
    match dtype {
        "float16" | "bfloat16" => "float32",
        _ => dtype,
    }
}

/// `prod` (all axes, or `dim` with `keepdim`) in the output's dtype, which
/// torch already promoted (ints and bools to int64, or `dtype`).
fn prod(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let work = kernel_dtype(&out);
    let product = reduce_in(e, "ReduceProd", work)?;
    e.cast(&product, work, &out)
}

/// `var` over `dim` (all axes when none): the mean of squared deviations
/// (two passes, as torch), scaled by N / max(N - correction, 0).
fn var(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let work = accumulate_dtype(&out);
    let x = e.operand("self", work)?;
    let meta = e.input_meta("self")?;
    let rank = meta.shape.len() as i64;
    let keepdim = e.boolean("keepdim", false)?;
    let correction = match e.target()?.as_str() {
        "aten.var.dim" => e.boolean("unbiased", true)? as i64 as f64,
        _ => e.float("correction", 1.0)?,
    };
    let mut axes: Vec<i64> = dims(e)?.iter().map(|&d| if d < 0 { d + rank } else { d }).collect();
    if axes.is_empty() {
        axes = (0..rank).collect();
    }
    // Reduce* with no axes input reduces everything (a 0-d input included).
    let axes_input = if axes.is_empty() { String::new() } else { e.const_ints(&axes)? };
    let mean =
        e.op_with("ReduceMean", &[&x, &axes_input], &[attr("keepdims", Attribute::Int(1))])?;
    let deviation = e.op("Sub", &[&x, &mean])?;
    let squares = e.op("Mul", &[&deviation, &deviation])?;
    let total = e.op_with(
        "ReduceSum",
        &[&squares, &axes_input],
        &[attr("keepdims", Attribute::Int(keepdim as i64))],
    )?;
    let count = match fixed_shape(&meta) {
        Some(shape) => {
            e.scalar(axes.iter().map(|&a| shape[a as usize]).product::<i64>() as f64, work)?
        }
        None => {
            let sizes = e.op("Shape", &[&x])?;
            let sizes = if axes.is_empty() {
                sizes
            } else {
                e.op("Gather", &[&sizes, &e.const_ints(&axes)?])?
            };
            let n = e.op_with("ReduceProd", &[&sizes], &[attr("keepdims", Attribute::Int(0))])?;
            e.cast(&n, "int64", work)?
        }
    };
    let denominator = e.op("Sub", &[&count, &e.scalar(correction, work)?])?;
    let denominator = e.op("Max", &[&denominator, &e.scalar(0.0, work)?])?;
    let variance = e.op("Div", &[&total, &denominator])?;
    e.cast(&variance, work, &out)
}

/// `max.dim` / `min.dim`: the values and the index of the first extreme along
/// `dim` (ONNX `ArgMax`/`ArgMin` keep the first by default, as torch does).
fn extreme_dim(e: &Emit, reduce: &str, arg: &str) -> Result<Vec<String>> {
    let from = e.input_meta("self")?.dtype;
    let x = e.tensor("self")?;
    if e.rank("self")? == 0 {
        // A 0-d tensor is its own extreme, at index 0.
        let index = e.scalar(0.0, "int64")?;
        return Ok(vec![e.op("Identity", &[&x])?, index]);
    }
    let work = extreme_dtype(&from);
    let x = e.cast(&x, &from, work)?;
    let dim = e.int("dim", 0)?;
    let keepdim = e.boolean("keepdim", false)? as i64;
    let axes = e.const_ints(&[dim])?;
    let along = [attr("axis", Attribute::Int(dim)), attr("keepdims", Attribute::Int(keepdim))];
    let mut values =
        e.op_with(reduce, &[&x, &axes], &[attr("keepdims", Attribute::Int(keepdim))])?;
    let mut indices = e.op_with(arg, &[&x], &along)?;
    if is_floating(work) {
        // torch's extreme of a slice holding NaN is NaN, at the first NaN; ORT's kernels skip it.
        let nan = e.cast(&e.op("IsNaN", &[&x])?, "bool", "int32")?;
        let has_nan = e.cast(
            &e.op_with("ReduceMax", &[&nan, &axes], &[attr("keepdims", Attribute::Int(keepdim))])?,
            "int32",
            "bool",
        )?;
        values = e.op("Where", &[&has_nan, &e.scalar(f64::NAN, work)?, &values])?;
        indices = e.op("Where", &[&has_nan, &e.op_with("ArgMax", &[&nan], &along)?, &indices])?;
    }
    Ok(vec![e.cast(&values, work, &from)?, indices])
}

/// `max` / `min` of every element, a 0-d tensor: NaN when any element is NaN,
/// as torch (ONNX Runtime's kernels skip NaN).
fn extreme(e: &Emit, reduce: &str) -> Result<String> {
    let from = e.input_meta("self")?.dtype;
    let work = extreme_dtype(&from);
    let x = e.cast(&e.tensor("self")?, &from, work)?;
    let whole = [attr("keepdims", Attribute::Int(0))];
    let mut value = e.op_with(reduce, &[&x], &whole)?;
    if is_floating(work) {
        let nan = e.cast(&e.op("IsNaN", &[&x])?, "bool", "int32")?;
        let has_nan = e.cast(&e.op_with("ReduceMax", &[&nan], &whole)?, "int32", "bool")?;
        value = e.op("Where", &[&has_nan, &e.scalar(f64::NAN, work)?, &value])?;
    }
    e.cast(&value, work, &from)
}

/// The dtype an extreme is taken in: bool as uint8 and int16 as int32 (which
/// hold them exactly and ONNX Runtime's `ReduceMax`/`ArgMax` kernels take),
/// the rest as the reductions take them.
fn extreme_dtype(dtype: &str) -> &str {
    match dtype {
        "bool" => "uint8",
        "int16" => "int32",
        other => kernel_dtype(other),
    }
}

/// Metadata of each of the node's outputs.
fn output_metas(e: &Emit) -> Result<Vec<TensorMeta>> {
    e.graph.output_values(e.node)?.into_iter().map(|v| e.meta_of(v)).collect()
}

/// A 1-D int64 `[n - 1]`.
fn minus_one(e: &Emit, n: &str) -> Result<String> {
    e.op("Sub", &[n, &e.const_ints(&[1])?])
}

/// `value` (0-d of `dtype`) expanded to `shape` (1-D int64).
fn full(e: &Emit, value: f64, dtype: &str, shape: &str) -> Result<String> {
    e.op("Expand", &[&e.scalar(value, dtype)?, shape])
}

/// `_embedding_bag(weight, indices, offsets, ..., mode, ..., per_sample_weights,
/// include_last_offset, padding_idx)`: bag `b` holds the indices from
/// `offsets[b]` to the next bag's offset (the last bag to the end, even with
/// `include_last_offset`, as torch's kernel does). Each index's bag is a
/// running count of the bag starts, and the rows are scattered into their
/// bags (`ScatterND` add / max), with no loop. Indices equal to
/// `padding_idx` (>= 0) count in no bag. Besides the bags: `offset2bag`
/// (each index's bag, or empty where torch's fast path leaves it empty),
/// `bag_size` (rows per bag for mean / max, zeros for sum) and `max_indices`
/// (the first row holding each maximum for max; for mean the bag sizes and
/// for sum zeros, as torch's CPU kernel returns them).
fn embedding_bag(e: &Emit) -> Result<Vec<String>> {
    let metas = output_metas(e)?;
    let [bags_meta, offset2bag_meta, bag_size_meta, max_indices_meta] = &metas[..] else {
        return Err(e.fail(format!("expected 4 outputs, found {}", metas.len())));
    };
    let out = bags_meta.dtype.clone();
    let work = accumulate_dtype(&out);
    let mode = e.int("mode", 0)?;
    if !(0..=2).contains(&mode) {
        return Err(
            e.fail(format!("embedding_bag mode {mode} is not sum (0), mean (1) or max (2)"))
        );
    }
    let include_last = e.boolean("include_last_offset", false)?;
    let padding_idx = e.int("padding_idx", -1)?;
    let int = |name: &str| -> Result<String> { e.operand(name, "int64") };
    let weight = e.operand("weight", work)?;
    let indices = e.op("Reshape", &[&int("indices")?, &e.const_ints(&[-1])?])?;
    let offsets = int("offsets")?;

    let zero = e.const_ints(&[0])?;
    let count = e.op("Shape", &[&indices])?;
    let bags = e.op("Shape", &[&offsets])?;
    let bags = if include_last { minus_one(e, &bags)? } else { bags };
    let bags_plus_one = e.op("Add", &[&bags, &e.const_ints(&[1])?])?;
    // Each index's bag: a mark at every later bag's start (clipped to the
    // end), counted up to the index.
    let starts = e.op("Slice", &[&offsets, &zero, &bags])?;
    let later = e.op("Slice", &[&starts, &e.const_ints(&[1])?, &e.const_ints(&[i64::MAX])?])?;
    let later = e.op("Min", &[&later, &count])?;
    let marks = full(e, 0.0, "int64", &e.op("Add", &[&count, &e.const_ints(&[1])?])?)?;
    let ones = full(e, 1.0, "int64", &e.op("Shape", &[&later])?)?;
    let marks = e.op_with(
        "ScatterElements",
        &[&marks, &later, &ones],
        &[attr("reduction", Attribute::Str("add".into()))],
    )?;
    let bag = e.op("CumSum", &[&marks, &e.scalar(0.0, "int64")?])?;
    let bag = e.op("Slice", &[&bag, &zero, &count])?;
    // Padding rows go to a spare bag past the last, dropped at the end.
    let slot = if padding_idx >= 0 {
        let padding = e.op("Equal", &[&indices, &e.scalar(padding_idx as f64, "int64")?])?;
        let spare = e.op("Squeeze", &[&bags])?;
        e.op("Where", &[&padding, &spare, &bag])?
    } else {
        bag.clone()
    };
    let slot_nd = e.op("Unsqueeze", &[&slot, &e.const_ints(&[1])?])?;
    let mut rows = e.op("Gather", &[&weight, &indices])?;
    if let Some(Argument::Tensor(_)) = e.arg("per_sample_weights")? {
        if mode != 0 {
            return Err(e.fail("per_sample_weights are only defined for mode sum"));
        }
        let scale =
            e.op("Unsqueeze", &[&e.operand("per_sample_weights", work)?, &e.const_ints(&[1])?])?;
        rows = e.op("Mul", &[&rows, &scale])?;
    }
    let width = e.op_with(
        "Shape",
        &[&weight],
        &[attr("start", Attribute::Int(1)), attr("end", Attribute::Int(2))],
    )?;
    let table_shape =
        e.op_with("Concat", &[&bags_plus_one, &width], &[attr("axis", Attribute::Int(0))])?;
    let keep = |table: &str| e.op("Slice", &[table, &zero, &bags]);
    let sizes = e.op_with(
        "ScatterElements",
        &[&full(e, 0.0, "int64", &bags_plus_one)?, &slot, &full(e, 1.0, "int64", &count)?],
        &[attr("reduction", Attribute::Str("add".into()))],
    )?;
    let sizes = keep(&sizes)?;
    let filled = e.op(
        "Unsqueeze",
        &[&e.op("Greater", &[&sizes, &e.scalar(0.0, "int64")?])?, &e.const_ints(&[1])?],
    )?;
    let scatter = |init: &str, updates: &str, reduction: &str| {
        e.op_with(
            "ScatterND",
            &[init, &slot_nd, updates],
            &[attr("reduction", Attribute::Str(reduction.into()))],
        )
    };
    let (result, max_indices) = match mode {
        0 => (keep(&scatter(&full(e, 0.0, work, &table_shape)?, &rows, "add")?)?, None),
        1 => {
            let sums = keep(&scatter(&full(e, 0.0, work, &table_shape)?, &rows, "add")?)?;
            let divisor = e.op("Max", &[&sizes, &e.scalar(1.0, "int64")?])?;
            let divisor =
                e.op("Unsqueeze", &[&e.cast(&divisor, "int64", work)?, &e.const_ints(&[1])?])?;
            (e.op("Div", &[&sums, &divisor])?, None)
        }
        _ => {
            let table = scatter(&full(e, f64::NEG_INFINITY, work, &table_shape)?, &rows, "max")?;
            let maxima = e.op("Where", &[&filled, &keep(&table)?, &e.scalar(0.0, work)?])?;
            // The first position in each bag that holds the maximum, mapped to its row of `weight`
            // (an empty bag's stays past the end, where a 0 is appended).
            let hit = e.op("Equal", &[&rows, &e.op("Gather", &[&table, &slot])?])?;
            let positions = e.op(
                "Range",
                &[&e.scalar(0.0, "int64")?, &e.op("Squeeze", &[&count])?, &e.scalar(1.0, "int64")?],
            )?;
            let positions = e.op("Unsqueeze", &[&positions, &e.const_ints(&[1])?])?;
            let past_end = e.op("Squeeze", &[&count])?;
            let positions = e.op("Where", &[&hit, &positions, &past_end])?;
            let first = scatter(&e.op("Expand", &[&past_end, &table_shape])?, &positions, "min")?;
            let rows_with_zero = e.op_with(
                "Concat",
                &[&indices, &e.const_ints(&[0])?],
                &[attr("axis", Attribute::Int(0))],
            )?;
            (maxima, Some(e.op("Gather", &[&rows_with_zero, &keep(&first)?])?))
        }
    };
    let result = e.cast(&result, work, &out)?;
    // torch's fast sum path leaves offset2bag empty; its metadata says so.
    let offset2bag = if offset2bag_meta.shape == [Dim::Fixed(0)] {
        full(e, 0.0, &offset2bag_meta.dtype, &e.const_ints(&[0])?)?
    } else {
        e.cast(&bag, "int64", &offset2bag_meta.dtype)?
    };
    let zeros_like_sizes = |dtype: &str| full(e, 0.0, dtype, &e.op("Shape", &[&sizes])?);
    let bag_size = if mode == 0 {
        zeros_like_sizes(&bag_size_meta.dtype)?
    } else {
        e.cast(&sizes, "int64", &bag_size_meta.dtype)?
    };
    let max_indices = match (mode, max_indices) {
        (0, _) => zeros_like_sizes(&max_indices_meta.dtype)?,
        (_, Some(first)) => e.cast(&first, "int64", &max_indices_meta.dtype)?,
        _ => e.cast(&sizes, "int64", &max_indices_meta.dtype)?,
    };
    Ok(vec![result, offset2bag, bag_size, max_indices])
}
