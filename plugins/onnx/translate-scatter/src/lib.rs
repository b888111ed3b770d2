//! ATen scatter ops → ONNX: `scatter_reduce` (every reduction, with or
//! without `self`), `select_scatter` and `slice_scatter` as `ScatterElements`,
//! `masked_scatter` as a running count of the mask gathering from `source`.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.scatter_reduce.two" => scatter_reduce,
    "aten.select_scatter.default" => select_scatter,
    "aten.slice_scatter.default" => slice_scatter,
    "aten.masked_scatter.default" => masked_scatter,
}

fn normalize(dim: i64, rank: i64) -> i64 {
    if dim < 0 {
        dim + rank
    } else {
        dim
    }
}

/// A 0-d int64 constant (exact, where `Emit::scalar` goes through f64).
fn int_0d(e: &Emit, value: i64) -> Result<String> {
    e.op_with("Constant", &[], &[attr("value_int", Attribute::Int(value))])
}

/// `Shape(x)[axis]` as a 0-d int64.
fn dim_0d(e: &Emit, x: &str, axis: i64) -> Result<String> {
    let shape = e.op("Shape", &[x])?;
    e.op_with("Gather", &[&shape, &int_0d(e, axis)?], &[attr("axis", Attribute::Int(0))])
}

/// Int argument `name` (a constant or a symbolic size) as a 0-d int64.
fn int_arg(e: &Emit, name: &str, default: i64) -> Result<String> {
    match e.arg(name)? {
        Some(Argument::SymInt(SymInt::Value(v))) => e.builder.value_name(v),
        _ => int_0d(e, e.int(name, default)?),
    }
}

fn scatter_elements(
    e: &Emit,
    data: &str,
    index: &str,
    updates: &str,
    axis: i64,
    reduction: &str,
) -> Result<String> {
    let attributes =
        [attr("axis", Attribute::Int(axis)), attr("reduction", Attribute::Str(reduction.into()))];
    e.op_with("ScatterElements", &[data, index, updates], &attributes)
}

/// `scatter_reduce.two`: `ScatterElements` with ONNX's reduction. Without
/// `include_self` the positions written are first reset to the reduction's
/// identity, as the reference's `aten_scatter_reduce`; `mean` is a sum and a
/// count of contributors (1 for `self` when included), divided (floored for
/// integers, as torch) — positions nothing writes to divide `self` by 1.
/// ORT has no float16 add/mul/max/min kernels (computed in float32) and no
/// bool max/min (for bools amax is `add`, i.e. or, and amin `mul`, i.e. and).
fn scatter_reduce(e: &Emit) -> Result<String> {
    let dtype = e.output_meta()?.dtype;
    let rank = e.rank("self")?;
    let dim = normalize(e.int("dim", 0)?, rank.max(1));
    let reduce = match e.arg("reduce")? {
        Some(Argument::Str(s)) => s,
        other => return Err(e.fail(format!("`reduce`: {other:?}"))),
    };
    let include_self = e.boolean("include_self", true)?;
    let compute =
        if matches!(dtype.as_str(), "float16" | "bfloat16") { "float32" } else { dtype.as_str() };
    let mut x = e.cast(&e.tensor("self")?, &dtype, compute)?;
    let mut index = e.tensor("index")?;
    let mut src = e.operand("src", compute)?;
    if rank == 0 {
        // ScatterElements wants rank >= 1: one element each
        let one = e.const_ints(&[1])?;
        x = e.op("Reshape", &[&x, &one])?;
        index = e.op("Reshape", &[&index, &one])?;
        src = e.op("Reshape", &[&src, &one])?;
    } else if e.input_meta("src")?.shape != e.input_meta("index")?.shape {
        // torch reads only src's part that index covers; ONNX wants them alike
        let starts = e.const_ints(&vec![0; rank as usize])?;
        src = e.op("Slice", &[&src, &starts, &e.op("Shape", &[&index])?])?;
    }
    let is_bool = compute == "bool";
    let (reduction, identity) = match reduce.as_str() {
        "sum" | "mean" => ("add", Some(0.0)),
        "prod" => ("mul", Some(1.0)),
        "amax" if is_bool => ("add", Some(0.0)),
        "amin" if is_bool => ("mul", Some(1.0)),
        "amax" => ("max", None),
        "amin" => ("min", None),
        other => return Err(e.fail(format!("scatter_reduce: unknown reduction {other:?}"))),
    };
    let base = if include_self {
        x.clone()
    } else {
        let identity = match identity {
            Some(value) => e.scalar(value, compute)?,
            None => extreme(e, compute, reduction == "max")?,
        };
        let reset = e.op("Expand", &[&identity, &e.op("Shape", &[&index])?])?;
        scatter_elements(e, &x, &index, &reset, dim, "none")?
    };
    let mut result = scatter_elements(e, &base, &index, &src, dim, reduction)?;
    if reduce == "mean" {
        let ones = e.op("Expand", &[&e.scalar(1.0, compute)?, &e.op("Shape", &[&index])?])?;
        let start = e.op(
            "Expand",
            &[&e.scalar(if include_self { 1.0 } else { 0.0 }, compute)?, &e.op("Shape", &[&x])?],
        )?;
        let counts = scatter_elements(e, &start, &index, &ones, dim, "add")?;
        let counts = e.op("Max", &[&counts, &e.scalar(1.0, compute)?])?;
        result = if is_floating(compute) {
            e.op("Div", &[&result, &counts])?
        } else {
            e.floor_div(&result, &counts, compute)?
        };
    }
    if rank == 0 {
        result = e.op("Reshape", &[&result, &e.const_ints(&[])?])?;
    }
    e.cast(&result, compute, &dtype)
}

/// The identity of `max` (the dtype's lowest value) or of `min` (its highest).
fn extreme(e: &Emit, dtype: &str, lowest: bool) -> Result<String> {
    if is_floating(dtype) {
        return e.scalar(if lowest { f64::NEG_INFINITY } else { f64::INFINITY }, dtype);
    }
    let (min, max) = int_limits(dtype)
        .ok_or_else(|| e.fail(format!("scatter_reduce: no limits for {dtype}")))?;
    e.cast(&int_0d(e, if lowest { min } else { max })?, "int64", dtype)
}

/// `select_scatter`: `src` unsqueezed at `dim`, written at `index` along it.
fn select_scatter(e: &Emit) -> Result<String> {
    let dtype = e.output_meta()?.dtype;
    let x = e.tensor("self")?;
    let src = e.operand("src", &dtype)?;
    let rank = e.rank("self")?;
    let dim = normalize(e.int("dim", 0)?, rank);
    let size = match e.input_meta("self")?.shape.get(dim as usize) {
        Some(Dim::Fixed(n)) => Some(*n),
        _ => None,
    };
    let index = match (e.int("index", 0), size) {
        // a constant index: where it lands is known now (negative counts from the end)
        (Ok(i), _) if i >= 0 => int_0d(e, i)?,
        (Ok(i), Some(n)) => int_0d(e, i + n)?,
        _ => {
            let index = int_arg(e, "index", 0)?;
            let wrapped = e.op("Add", &[&index, &dim_0d(e, &x, dim)?])?;
            let negative = e.op("Less", &[&index, &int_0d(e, 0)?])?;
            e.op("Where", &[&negative, &wrapped, &index])?
        }
    };
    let update = e.op("Unsqueeze", &[&src, &e.const_ints(&[dim])?])?;
    let indices = e.op("Expand", &[&index, &e.op("Shape", &[&update])?])?;
    scatter_elements(e, &x, &indices, &update, dim, "none")
}

/// `slice_scatter`: the positions `start:end:step` selects along `dim` (a
/// `Slice` of a `Range` over the axis, so None and negative bounds mean what
/// they mean to `slice`), broadcast to `src`'s shape, written by
/// `ScatterElements`.
fn slice_scatter(e: &Emit) -> Result<String> {
    let dtype = e.output_meta()?.dtype;
    let meta = e.input_meta("self")?;
    let x = e.tensor("self")?;
    let src = e.operand("src", &dtype)?;
    let rank = meta.shape.len() as i64;
    let dim = normalize(e.int("dim", 0)?, rank);
    let bound = |name: &str, default: i64| -> Result<String> {
        match e.arg(name)? {
            Some(Argument::SymInt(SymInt::Value(v))) => {
                e.op("Unsqueeze", &[&e.builder.value_name(v)?, &e.const_ints(&[0])?])
            }
            _ => e.const_ints(&[e.int(name, default)?]),
        }
    };
    let axis_size = match &meta.shape[dim as usize] {
        Dim::Fixed(n) => Some(*n),
        _ => None,
    };
    let (start, end, step) = (e.int("start", 0), e.int("end", i64::MAX), e.int("step", 1));
    // `x[:, :, 0] += y` writes back through slices of every position (0 to
    // "the end" or past the axis' size, step 1): the result is `src` (which
    // torch requires to have the slice's, here `self`'s, shape).
    let to_the_end = |end: i64| end >= i32::MAX as i64 || axis_size.is_some_and(|n| end >= n);
    if matches!((&start, &end, &step), (Ok(0), Ok(end), Ok(1)) if to_the_end(*end)) {
        return Ok(src);
    }
    // An axis of fixed size and constant bounds: the positions are known now.
    let known = match (axis_size, start, end, step) {
        (Some(n), Ok(start), Ok(end), Ok(step)) if step > 0 => {
            Some(slice_positions(n, start, end, step))
        }
        _ => None,
    };
    let positions = match known {
        Some(positions) => e.const_ints(&positions)?,
        None => {
            let size = dim_0d(e, &x, dim)?;
            let axis = e.op("Range", &[&int_0d(e, 0)?, &size, &int_0d(e, 1)?])?;
            let zero = e.const_ints(&[0])?;
            e.op(
                "Slice",
                &[&axis, &bound("start", 0)?, &bound("end", i64::MAX)?, &zero, &bound("step", 1)?],
            )?
        }
    };
    let mut along = vec![1; rank as usize];
    along[dim as usize] = -1;
    let positions = e.op("Reshape", &[&positions, &e.const_ints(&along)?])?;
    let indices = e.op("Expand", &[&positions, &e.op("Shape", &[&src])?])?;
    scatter_elements(e, &x, &indices, &src, dim, "none")
}

/// The positions `start:end:step` (step > 0) selects of an axis of `n`, as
/// `slice` reads its bounds: negative from the end, then clamped to the axis.
fn slice_positions(n: i64, start: i64, end: i64, step: i64) -> Vec<i64> {
    let clamp = |v: i64| (if v < 0 { v.saturating_add(n) } else { v }).clamp(0, n);
    (clamp(start)..clamp(end)).step_by(step as usize).collect()
}

/// `masked_scatter`: `self` and `mask` broadcast together and flattened; the
/// mask's running count - 1 is each set position's element of `source`
/// (flattened, one padding element so an all-false mask never reads an empty
/// `source`), taken where the mask is set.
fn masked_scatter(e: &Emit) -> Result<String> {
    let dtype = e.output_meta()?.dtype;
    let x = e.tensor("self")?;
    let mask = e.operand("mask", "bool")?;
    let source = e.operand("source", &dtype)?;
    let shape = match fixed_shape(&e.output_meta()?) {
        Some(shape) => e.const_ints(&shape)?,
        // Expand broadcasts both ways: the shape of the two together
        None => e.op("Shape", &[&e.op("Expand", &[&x, &e.op("Shape", &[&mask])?])?])?,
    };
    let flat = e.const_ints(&[-1])?;
    let flat_mask = e.op("Reshape", &[&e.op("Expand", &[&mask, &shape])?, &flat])?;
    let flat_self = e.op("Reshape", &[&e.op("Expand", &[&x, &shape])?, &flat])?;
    let count = e.op("CumSum", &[&e.cast(&flat_mask, "bool", "int64")?, &int_0d(e, 0)?])?;
    let position = e.op("Max", &[&e.op("Sub", &[&count, &int_0d(e, 1)?])?, &int_0d(e, 0)?])?;
    let padding = e.op("Reshape", &[&e.scalar(0.0, &dtype)?, &e.const_ints(&[1])?])?;
    let source = e.op_with(
        "Concat",
        &[&e.op("Reshape", &[&source, &flat])?, &padding],
        &[attr("axis", Attribute::Int(0))],
    )?;
    let taken = e.op_with("Gather", &[&source, &position], &[attr("axis", Attribute::Int(0))])?;
    let written = e.where_any(&flat_mask, &taken, &flat_self, &dtype)?;
    e.op("Reshape", &[&written, &shape])
}
