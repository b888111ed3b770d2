//! ATen pairwise distances (`_cdist_forward`, `_pdist_forward`) → ONNX:
//! p-norms of broadcast row differences, or for Euclidean distances where
//! torch uses it, its matrix-product form.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten._cdist_forward.default" => cdist,
    "aten._pdist_forward.default" => pdist,
}

/// Half-precision inputs are computed in float32 (sums of powers overflow
/// float16 quickly), then cast back.
fn work_dtype(dtype: &str) -> &str {
    match dtype {
        "float16" | "bfloat16" => "float32",
        _ => dtype,
    }
}

/// The p-norm of `diff` over its last axis: a count of nonzeros (p = 0), sum
/// of magnitudes (1), Euclidean (2), the largest magnitude (inf; 0 over an
/// empty axis, as torch), else (sum |d|^p)^(1/p).
fn norm(e: &Emit, diff: &str, p: f64, dtype: &str) -> Result<String> {
    let last = e.const_ints(&[-1])?;
    let keep = [attr("keepdims", Attribute::Int(0))];
    let magnitude = e.op("Abs", &[diff])?;
    if p == 0.0 {
        let zero = e.op("Equal", &[&magnitude, &e.scalar(0.0, dtype)?])?;
        let nonzero = e.cast(&e.op("Not", &[&zero])?, "bool", dtype)?;
        return e.op_with("ReduceSum", &[&nonzero, &last], &keep);
    }
    if p == 1.0 {
        return e.op_with("ReduceSum", &[&magnitude, &last], &keep);
    }
    if p == 2.0 {
        let squares = e.op("Mul", &[&magnitude, &magnitude])?;
        return e.op("Sqrt", &[&e.op_with("ReduceSum", &[&squares, &last], &keep)?]);
    }
    if p == f64::INFINITY {
        let largest = e.op_with("ReduceMax", &[&magnitude, &last], &keep)?;
        return e.op("Max", &[&largest, &e.scalar(0.0, dtype)?]);
    }
    let powers = e.op("Pow", &[&magnitude, &e.scalar(p, dtype)?])?;
    let total = e.op_with("ReduceSum", &[&powers, &last], &keep)?;
    e.op("Pow", &[&total, &e.scalar(1.0 / p, dtype)?])
}

/// The number of rows (axis -2) of input `name`; `None` when symbolic.
fn rows(e: &Emit, name: &str) -> Result<Option<i64>> {
    Ok(match e.input_meta(name)?.shape.iter().rev().nth(1) {
        Some(Dim::Fixed(n)) => Some(*n),
        _ => None,
    })
}

/// `_cdist_forward(x1 [*, P, M], x2 [*, R, M], p, compute_mode)` → [*, P, R]
/// (batch axes broadcast). For p = 2 torch switches to
/// sqrt(max(|a|² - 2a·b + |b|², 0)) with a matrix product when
/// `compute_mode` is 1, or None/0 and P or R exceeds 25; so does this (a
/// symbolic P or R counts as large: the difference tensor is P·R·M), to
/// match its values and keep memory at P·R. `compute_mode` 2 never does.
fn cdist(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let work = work_dtype(&out);
    let x1 = e.operand("x1", work)?;
    let x2 = e.operand("x2", work)?;
    let p = e.float("p", 2.0)?;
    if p < 0.0 || p.is_nan() {
        return Err(e.fail(format!("cdist with p = {p} (torch requires p >= 0)")));
    }
    let mode = e.int("compute_mode", 0)?;
    let large = |n: Option<i64>| n.is_none_or(|n| n > 25);
    let matrix_product =
        p == 2.0 && (mode == 1 || (mode == 0 && (large(rows(e, "x1")?) || large(rows(e, "x2")?))));
    let distances = if matrix_product {
        let last = e.const_ints(&[-1])?;
        let square_norm = |x: &str| -> Result<String> {
            e.op_with(
                "ReduceSum",
                &[&e.op("Mul", &[x, x])?, &last],
                &[attr("keepdims", Attribute::Int(1))],
            )
        };
        let rank2 = e.rank("x2")?;
        let x2t = e.op_with(
            "Transpose",
            &[&x2],
            &[attr("perm", Attribute::Ints(transposed_last(rank2)))],
        )?;
        let products = e.op("MatMul", &[&x1, &x2t])?;
        let n2 = e.op_with(
            "Transpose",
            &[&square_norm(&x2)?],
            &[attr("perm", Attribute::Ints(transposed_last(rank2)))],
        )?;
        let twice = e.op("Mul", &[&products, &e.scalar(-2.0, work)?])?;
        let sum = e.op("Add", &[&e.op("Add", &[&twice, &square_norm(&x1)?])?, &n2])?;
        e.op("Sqrt", &[&e.op("Max", &[&sum, &e.scalar(0.0, work)?])?])?
    } else {
        let a = e.op("Unsqueeze", &[&x1, &e.const_ints(&[-2])?])?;
        let b = e.op("Unsqueeze", &[&x2, &e.const_ints(&[-3])?])?;
        norm(e, &e.op("Sub", &[&a, &b])?, p, work)?
    };
    e.cast(&distances, work, &out)
}

/// The permutation swapping the last two of `rank` axes.
fn transposed_last(rank: i64) -> Vec<i64> {
    let mut perm: Vec<i64> = (0..rank).collect();
    perm.swap(rank as usize - 2, rank as usize - 1);
    perm
}

/// `_pdist_forward(self [N, M], p)` → the distances of rows i < j, in
/// row-major order (N·(N-1)/2 values): the full N×N matrix, its strict
/// upper triangle kept by `Compress`. Computed directly, as torch does.
fn pdist(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let work = work_dtype(&out);
    let x = e.operand("self", work)?;
    let p = e.float("p", 2.0)?;
    if p < 0.0 || p.is_nan() {
        return Err(e.fail(format!("pdist with p = {p} (torch requires p >= 0)")));
    }
    let a = e.op("Unsqueeze", &[&x, &e.const_ints(&[1])?])?;
    let b = e.op("Unsqueeze", &[&x, &e.const_ints(&[0])?])?;
    let matrix = norm(e, &e.op("Sub", &[&a, &b])?, p, work)?;
    let n = e.op_with(
        "Shape",
        &[&x],
        &[attr("start", Attribute::Int(0)), attr("end", Attribute::Int(1))],
    )?;
    let n = e.op("Squeeze", &[&n])?;
    let index = e.op("Range", &[&e.scalar(0.0, "int64")?, &n, &e.scalar(1.0, "int64")?])?;
    let row = e.op("Unsqueeze", &[&index, &e.const_ints(&[1])?])?;
    let column = e.op("Unsqueeze", &[&index, &e.const_ints(&[0])?])?;
    let upper = e.op("Less", &[&row, &column])?;
    let flat = e.const_ints(&[-1])?;
    let kept = e.op_with(
        "Compress",
        &[&e.op("Reshape", &[&matrix, &flat])?, &e.op("Reshape", &[&upper, &flat])?],
        &[attr("axis", Attribute::Int(0))],
    )?;
    e.cast(&kept, work, &out)
}
