//! ATen random ops (rand, randn, their `_like` forms, randint,
//! native_dropout, randperm) → ONNX `RandomUniformLike` (normal draws by
//! Box-Muller from two of them): the exported graph draws from the runtime's
//! generator, so its values never equal torch's.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.rand.default" => |e| random(e, Draw::Uniform),
    "aten.randn.default" => |e| random(e, Draw::Normal),
    "aten.native_dropout.default" => native_dropout,
    "aten.randperm.default" => randperm,
    "aten.rand_like.default" => |e| random_like(e, Draw::Uniform),
    "aten.randn_like.default" => |e| random_like(e, Draw::Normal),
    "aten.randint.default" => randint,
    "aten.randint.low" => randint,
}

/// The dtype to draw in: ONNX Runtime's CPU random kernels make float32 and
/// float64 only; another dtype is drawn in float32 and cast.
fn draw_dtype(dtype: &str) -> &str {
    match dtype {
        "float64" => dtype,
        _ => "float32",
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Draw {
    /// In [0, 1).
    Uniform,
    /// N(0, 1).
    Normal,
}

/// Draws shaped like `like` (float32: the kernels take float inputs only), in `dtype`.
fn draw(e: &Emit, kind: Draw, like: &str, dtype: &str) -> Result<String> {
    let drawn = draw_dtype(dtype);
    if kind == Draw::Normal {
        return e.cast(&normal(e, like, drawn)?, drawn, dtype);
    }
    let mut values = uniform(e, like, drawn)?;
    // Uniform draws stay below 1 in a narrower float: the largest value under 1 there.
    let below_one = match dtype {
        "float16" => Some(1.0 - 2f64.powi(-11)),
        "bfloat16" => Some(1.0 - 2f64.powi(-8)),
        _ => None,
    };
    if let Some(bound) = below_one {
        values = e.op("Min", &[&values, &e.scalar(bound, drawn)?])?;
    }
    e.cast(&values, drawn, dtype)
}

/// Uniform draws in [0, 1) shaped like `like`, in `drawn` (float32 or float64).
fn uniform(e: &Emit, like: &str, drawn: &str) -> Result<String> {
    let code = onnx_dtype(drawn).ok_or_else(|| e.fail(format!("no ONNX type for {drawn}")))?;
    e.op_with("RandomUniformLike", &[like], &[attr("dtype", Attribute::Int(code))])
}

/// N(0, 1) draws by Box-Muller from two uniform draws u1, u2:
/// `sqrt(-2 ln(1 - u1)) * cos(2 pi u2)` (1 - u1 lies in (0, 1], so the log is
/// finite). Not `RandomNormalLike`: OpenVINO's ONNX frontend converts it to a
/// Box-Muller that reads one uniform draw as both, whose values are not
/// normal (their 1% and 99% quantiles -1.21 and 3.03, skewness 1.0).
fn normal(e: &Emit, like: &str, drawn: &str) -> Result<String> {
    let (u1, u2) = (uniform(e, like, drawn)?, uniform(e, like, drawn)?);
    let log = e.op("Log", &[&e.op("Sub", &[&e.scalar(1.0, drawn)?, &u1])?])?;
    let radius = e.op("Sqrt", &[&e.op("Mul", &[&log, &e.scalar(-2.0, drawn)?])?])?;
    let angle = e.op("Mul", &[&u2, &e.scalar(std::f64::consts::TAU, drawn)?])?;
    e.op("Mul", &[&radius, &e.op("Cos", &[&angle])?])
}

/// `rand(size)` / `randn(size)`: a tensor of `size` (symbolic sizes included)
/// drawn in the output's dtype.
fn random(e: &Emit, kind: Draw) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let shape = e.shape("size")?;
    let like = e.op("ConstantOfShape", &[&shape])?;
    draw(e, kind, &like, &out)
}

/// `rand_like(self)` / `randn_like(self)`: drawn in `self`'s shape, in the
/// output's dtype (`self`'s unless `dtype` is given).
fn random_like(e: &Emit, kind: Draw) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let shape = e.op("Shape", &[&e.tensor("self")?])?;
    let like = e.op("ConstantOfShape", &[&shape])?;
    draw(e, kind, &like, &out)
}

/// `randint(low=0, high, size)`: `low + floor(u * (high - low))` of a
/// uniform draw u in [0, 1), at most `high - 1` (where the product rounds up
/// to the span), in the output's dtype (int64 unless `dtype` is given). A
/// constant span up to 2**24 is drawn in float32, whose steps of 2**-24 reach
/// every value, each as often as its share within span / 2**24 of it (and
/// which OpenVINO's ONNX frontend converts: it refuses a float64 draw); a
/// wider or symbolic one in float64, which covers spans up to 2**53.
fn randint(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let (low, constant_low) = match e.arg("low")? {
        Some(_) => (e.operand("low", "int64")?, constant_int(e, "low")?),
        None => (e.scalar(0.0, "int64")?, Some(0)),
    };
    let constant_span = constant_low.zip(constant_int(e, "high")?).map(|(l, h)| h - l);
    let via = match constant_span {
        Some(span) if span <= 1 << 24 => "float32",
        _ => "float64",
    };
    let span = e.op("Sub", &[&e.operand("high", "int64")?, &low])?;
    let like = e.op("ConstantOfShape", &[&e.shape("size")?])?;
    let noise = draw(e, Draw::Uniform, &like, via)?;
    let scaled = e.op("Mul", &[&noise, &e.cast(&span, "int64", via)?])?;
    let steps = e.cast(&e.op("Floor", &[&scaled])?, via, "int64")?;
    let last = e.op("Sub", &[&span, &e.scalar(1.0, "int64")?])?;
    let values = e.op("Add", &[&e.op("Min", &[&steps, &last])?, &low])?;
    e.cast(&values, "int64", &out)
}

/// Int argument `name` when it is a constant (not a symbolic size).
fn constant_int(e: &Emit, name: &str) -> Result<Option<i64>> {
    Ok(match e.arg(name)? {
        Some(Argument::Int(i)) | Some(Argument::SymInt(SymInt::Constant(i))) => Some(i),
        _ => None,
    })
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
    let noise = draw(e, Draw::Uniform, &e.op("ConstantOfShape", &[&shape])?, "float32")?;
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
    let noise = draw(e, Draw::Uniform, &like, "float32")?;
    let sorted = e.op_n(
        "TopK",
        &[&noise, &n],
        2,
        &[attr("axis", Attribute::Int(0)), attr("sorted", Attribute::Int(1))],
    )?;
    e.cast(&sorted[1], "int64", &out)
}
