//! ATen random ops (rand, randn, native_dropout, randperm) → ONNX
//! `RandomUniformLike` / `RandomNormalLike`: the exported graph draws from
//! the runtime's generator, so its values never equal torch's.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.rand.default" => |e| random(e, "RandomUniformLike"),
    "aten.randn.default" => |e| random(e, "RandomNormalLike"),
    "aten.native_dropout.default" => native_dropout,
    "aten.randperm.default" => randperm,
}

/// The dtype to draw in: ONNX Runtime's CPU random kernels make float32 and
/// float64 only; another dtype is drawn in float32 and cast.
fn draw_dtype(dtype: &str) -> &str {
    match dtype {
        "float64" => dtype,
        _ => "float32",
    }
}

/// `op` (`RandomUniformLike` in [0, 1), `RandomNormalLike` N(0, 1)) shaped
/// like `like` (float32: the kernels take float inputs only), in `dtype`.
fn draw(e: &Emit, op: &str, like: &str, dtype: &str) -> Result<String> {
    let drawn = draw_dtype(dtype);
    let code = onnx_dtype(drawn).ok_or_else(|| e.fail(format!("no ONNX type for {drawn}")))?;
    let mut values = e.op_with(op, &[like], &[attr("dtype", Attribute::Int(code))])?;
    // Uniform draws stay below 1 in a narrower float: the largest value under 1 there.
    let below_one = match dtype {
        "float16" => Some(1.0 - 2f64.powi(-11)),
        "bfloat16" => Some(1.0 - 2f64.powi(-8)),
        _ => None,
    };
    if let (Some(bound), "RandomUniformLike") = (below_one, op) {
        values = e.op("Min", &[&values, &e.scalar(bound, drawn)?])?;
    }
    e.cast(&values, drawn, dtype)
}

/// `rand(size)` / `randn(size)`: a tensor of `size` (symbolic sizes included)
/// drawn in the output's dtype.
fn random(e: &Emit, op: &str) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let shape = e.shape("size")?;
    let like = e.op("ConstantOfShape", &[&shape])?;
    draw(e, op, &like, &out)
}

/// `native_dropout(input, p, train)` → (output, mask), as torch's
/// decomposition: training keeps each element where a uniform draw exceeds
/// `p` and scales it by 1 / (1 - p); p = 1 drops everything. Without
/// training (`train=False`, or p = 0) the input passes with an all-true mask.
/// `train=None` trains, as the eager kernel does (`train.value_or(true)`).
fn native_dropout(e: &Emit) -> Result<Vec<String>> {
    let out = e.output_meta()?.dtype;
    let x = e.tensor("input")?;
    let p = e.float("p", 0.5)?;
    let train = e.boolean("train", true)?;
    let shape = e.op("Shape", &[&x])?;
    let mask_of = |keep: bool| e.op("Expand", &[&e.scalar(keep as i64 as f64, "bool")?, &shape]);
    if !train || p == 0.0 {
        return Ok(vec![e.op("Identity", &[&x])?, mask_of(true)?]);
    }
    if p == 1.0 {
        return Ok(vec![e.op("Expand", &[&e.scalar(0.0, &out)?, &shape])?, mask_of(false)?]);
    }
    if !is_floating(&out) {
        return Err(e.fail(format!("dropout in training of a {out} tensor (torch refuses it too)")));
    }
    let noise = draw(e, "RandomUniformLike", &e.op("ConstantOfShape", &[&shape])?, "float32")?;
    let mask = e.op("Greater", &[&noise, &e.scalar(p, "float32")?])?;
    let kept = e.op("Mul", &[&e.cast(&mask, "bool", &out)?, &x])?;
    let scaled = e.op("Mul", &[&kept, &e.scalar(1.0 / (1.0 - p), &out)?])?;
    Ok(vec![scaled, mask])
}

/// `randperm(n)`: the order that sorts `n` uniform draws (a full `TopK`),
/// a uniformly random permutation of 0..n, in the output's dtype.
fn randperm(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let n = e.int_1d("n", 0)?;
    let like = e.op("ConstantOfShape", &[&n])?;
    let noise = draw(e, "RandomUniformLike", &like, "float32")?;
    let sorted = e.op_n(
        "TopK",
        &[&noise, &n],
        2,
        &[attr("axis", Attribute::Int(0)), attr("sorted", Attribute::Int(1))],
    )?;
    e.cast(&sorted[1], "int64", &out)
}
