//! Elementwise ATen ops and casts → ONNX. Operands are cast to the output's
//! dtype (or, for comparisons, to their promoted dtype), which is how torch's
//! type promotion reaches ONNX, whose ops take one type; an op ONNX Runtime's
//! CPU has no kernel for in that dtype runs in a wider one and is cast back.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    // arithmetic
    "aten.add.Tensor" => |e| binary(e, "Add"),
    "aten.add.Scalar" => |e| binary(e, "Add"),
    "aten.sub.Tensor" => |e| binary(e, "Sub"),
    "aten.sub.Scalar" => |e| binary(e, "Sub"),
    "aten.rsub.Scalar" => rsub,
    "aten.rsub.Tensor" => rsub,
    "aten.mul.Tensor" => |e| binary(e, "Mul"),
    "aten.mul.Scalar" => |e| binary(e, "Mul"),
    "aten.div.Tensor" => |e| binary(e, "Div"),
    "aten.div.Scalar" => |e| binary(e, "Div"),
    "aten.div.Tensor_mode" => div_mode,
    "aten.div.Scalar_mode" => div_mode,
    "aten.pow.Tensor_Scalar" => pow,
    "aten.pow.Tensor_Tensor" => pow,
    "aten.pow.Scalar" => pow,
    "aten.maximum.default" => |e| binary(e, "Max"),
    "aten.minimum.default" => |e| binary(e, "Min"),
    "aten.max.other" => |e| binary(e, "Max"),
    "aten.min.other" => |e| binary(e, "Min"),
    "aten.floor_divide.default" => floor_divide,
    "aten.floor_divide.Scalar" => floor_divide,
    "aten.fmod.Tensor" => fmod,
    "aten.fmod.Scalar" => fmod,
    "aten.remainder.Tensor" => remainder,
    "aten.remainder.Scalar" => remainder,
    "aten.remainder.Scalar_Tensor" => remainder,
    // comparisons
    "aten.lt.Tensor" => |e| compare(e, "Less"),
    "aten.lt.Scalar" => |e| compare(e, "Less"),
    "aten.le.Tensor" => |e| compare(e, "LessOrEqual"),
    "aten.le.Scalar" => |e| compare(e, "LessOrEqual"),
    "aten.gt.Tensor" => |e| compare(e, "Greater"),
    "aten.gt.Scalar" => |e| compare(e, "Greater"),
    "aten.ge.Tensor" => |e| compare(e, "GreaterOrEqual"),
    "aten.ge.Scalar" => |e| compare(e, "GreaterOrEqual"),
    "aten.eq.Tensor" => |e| compare(e, "Equal"),
    "aten.eq.Scalar" => |e| compare(e, "Equal"),
    "aten.ne.Tensor" => not_equal,
    "aten.ne.Scalar" => not_equal,
    "aten.isinf.default" => |e| classify(e, "IsInf"),
    "aten.isnan.default" => |e| classify(e, "IsNaN"),
    // logic
    "aten.logical_not.default" => logical_not,
    "aten.logical_and.default" => |e| logical(e, "And"),
    "aten.logical_or.default" => |e| logical(e, "Or"),
    "aten.logical_xor.default" => |e| logical(e, "Xor"),
    "aten.bitwise_not.default" => bitwise_not,
    "aten.__and__.Tensor" => |e| bitwise(e, "And"),
    "aten.bitwise_and.Tensor" => |e| bitwise(e, "And"),
    "aten.bitwise_and.Scalar" => |e| bitwise(e, "And"),
    "aten.__or__.Tensor" => |e| bitwise(e, "Or"),
    "aten.bitwise_or.Tensor" => |e| bitwise(e, "Or"),
    "aten.bitwise_or.Scalar" => |e| bitwise(e, "Or"),
    "aten.bitwise_xor.Tensor" => |e| bitwise(e, "Xor"),
    "aten.bitwise_xor.Scalar" => |e| bitwise(e, "Xor"),
    // unary
    "aten.neg.default" => |e| unary(e, "Neg"),
    "aten.rsqrt.default" => rsqrt,
    "aten.sqrt.default" => |e| unary(e, "Sqrt"),
    "aten.cos.default" => |e| unary(e, "Cos"),
    "aten.sin.default" => |e| unary(e, "Sin"),
    "aten.exp.default" => |e| unary(e, "Exp"),
    "aten.expm1.default" => expm1,
    "aten.log.default" => |e| unary(e, "Log"),
    "aten.log1p.default" => log1p,
    "aten.log2.default" => |e| log_base(e, std::f64::consts::LN_2),
    "aten.log10.default" => |e| log_base(e, std::f64::consts::LN_10),
    "aten.tanh.default" => |e| unary(e, "Tanh"),
    "aten.sigmoid.default" => |e| unary(e, "Sigmoid"),
    "aten.relu.default" => relu,
    "aten.abs.default" => |e| unary(e, "Abs"),
    "aten.sign.default" => sign,
    "aten.reciprocal.default" => |e| unary(e, "Reciprocal"),
    "aten.erf.default" => |e| unary(e, "Erf"),
    "aten.erfinv.default" => erfinv,
    "aten.ceil.default" => |e| rounding(e, "Ceil"),
    "aten.floor.default" => |e| rounding(e, "Floor"),
    "aten.round.default" => |e| rounding(e, "Round"),
    "aten.round.decimals" => round_decimals,
    "aten.trunc.default" => trunc_op,
    "aten.silu.default" => silu,
    "aten.gelu.default" => gelu,
    "aten.elu.default" => elu,
    "aten.leaky_relu.default" => leaky_relu,
    "aten.hardtanh.default" => hardtanh,
    "aten.softplus.default" => softplus,
    "aten.hardsigmoid.default" => |e| hard_sigmoid(e, "HardSigmoid"),
    "aten.hardswish.default" => |e| hard_sigmoid(e, "HardSwish"),
    "aten.clamp.default" => |e| clamp(e, Some("min"), Some("max")),
    "aten.clamp.Tensor" => clamp_tensor,
    "aten.clamp_min.default" => |e| clamp(e, Some("min"), None),
    "aten.clamp_max.default" => |e| clamp(e, None, Some("max")),
    // selection
    "aten.where.self" => where_,
    "aten.where.ScalarOther" => where_,
    "aten.where.ScalarSelf" => where_,
    "aten.where.Scalar" => where_,
    "aten.masked_fill.Scalar" => masked_fill,
    "aten.masked_fill.Tensor" => masked_fill,
    // casts and identities
    "aten.to.dtype" => cast,
    "aten.to.dtype_layout" => cast,
    "aten.to.device" => cast,
    "aten._to_copy.default" => cast,
    "aten.type_as.default" => cast,
    "aten.clone.default" => |e| identity(e, "self"),
    "aten.contiguous.default" => |e| identity(e, "self"),
    "aten.detach.default" => |e| identity(e, "self"),
    "aten.alias.default" => |e| identity(e, "self"),
    "aten.lift_fresh_copy.default" => |e| identity(e, "self"),
    "aten.dropout.default" => |e| identity(e, "input"),
    // a check torch.export keeps; no value
    "aten._assert_tensor_metadata.default" => |_| Ok(()),
}

// ── ONNX Runtime's CPU kernels ──

const FLOATS: &[&str] = &["float32", "float64", "float16"];
const INTS: &[&str] = &["int8", "int16", "int32", "int64", "uint8"];

/// Whether ONNX Runtime's CPU has a kernel for `op` over `dtype` at every
/// opset hfx emits (18-23; checked against ORT 1.2x: float64 Elu and
/// LeakyRelu and int64 Relu exist at 18 only; bfloat16 has none of these).
fn has_kernel(op: &str, dtype: &str) -> bool {
    let float = FLOATS.contains(&dtype);
    match op {
        "Ceil" | "Floor" | "Round" | "Exp" | "Log" | "Sqrt" | "Reciprocal" | "Tanh" | "Sigmoid"
        | "Cos" | "Sin" | "IsNaN" => float,
        "Erf" | "Elu" | "LeakyRelu" => matches!(dtype, "float32" | "float16"),
        "Softplus" | "HardSigmoid" | "HardSwish" => dtype == "float32",
        "IsInf" => matches!(dtype, "float32" | "float64"),
        "Neg" => float || matches!(dtype, "int8" | "int16" | "int32" | "int64"),
        "Max" | "Min" | "Where" | "Clip" => {
            float || matches!(dtype, "int8" | "int32" | "int64" | "uint8")
        }
        "Pow" => float || matches!(dtype, "int32" | "int64"),
        "Not" | "And" | "Or" | "Xor" => dtype == "bool",
        "BitwiseNot" | "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" => INTS.contains(&dtype),
        "Equal" => float || INTS.contains(&dtype) || dtype == "bool",
        // Add Sub Mul Div Mod Abs Sign Less Greater LessOrEqual GreaterOrEqual
        _ => float || INTS.contains(&dtype),
    }
}

/// The dtype to run `op` in for `dtype`: itself when ORT has the kernel, else
/// float32 for floats, int64 for integers (wide enough that casting back
/// wraps as torch does) and uint8 for bool.
fn kernel_dtype(op: &str, dtype: &str) -> String {
    if has_kernel(op, dtype) {
        dtype.to_string()
    } else if is_floating(dtype) {
        "float32".into()
    } else if dtype == "bool" && has_kernel(op, "uint8") {
        "uint8".into()
    } else {
        "int64".into()
    }
}

/// `op` over `inputs` (each of `dtype`), run where ORT has a kernel for it; a
/// result of `dtype` is cast back, a comparison's bool is not.
fn kernel(
    e: &Emit,
    op: &str,
    inputs: &[&str],
    dtype: &str,
    attributes: &[NamedAttribute],
) -> Result<String> {
    let via = kernel_dtype(op, dtype);
    if via == dtype {
        return e.op_with(op, inputs, attributes);
    }
    let cast = inputs.iter().map(|x| e.cast(x, dtype, &via)).collect::<Result<Vec<_>>>()?;
    let refs: Vec<&str> = cast.iter().map(String::as_str).collect();
    let result = e.op_with(op, &refs, attributes)?;
    if returns_bool(op) {
        Ok(result)
    } else {
        e.cast(&result, &via, dtype)
    }
}

fn returns_bool(op: &str) -> bool {
    matches!(
        op,
        "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "IsInf" | "IsNaN"
    )
}

/// The dtype torch computes a float op of several steps in (its "opmath"):
/// float32 for the half types, so rounding happens once, at the end.
fn opmath(dtype: &str) -> &str {
    if matches!(dtype, "float16" | "bfloat16") {
        "float32"
    } else {
        dtype
    }
}

// ── Operands ──

/// Input `name` as an ONNX value of `dtype`; an int scalar is exact (not
/// through f64) so 64-bit masks survive.
fn operand(e: &Emit, name: &str, dtype: &str) -> Result<String> {
    match e.arg(name)? {
        Some(Argument::Int(i)) if !is_floating(dtype) => int_scalar(e, i, dtype),
        // a number's truth, not its truncation (0.5 is True)
        Some(Argument::Float(f)) if dtype == "bool" => {
            e.scalar(if f != 0.0 { 1.0 } else { 0.0 }, dtype)
        }
        Some(Argument::SymFloat(SymFloat::Constant(f))) => e.scalar(f, dtype),
        _ => e.operand(name, dtype),
    }
}

fn int_scalar(e: &Emit, value: i64, dtype: &str) -> Result<String> {
    let constant = e.op_with("Constant", &[], &[attr("value_int", Attribute::Int(value))])?;
    e.cast(&constant, "int64", dtype)
}

/// Input `name` in the output's dtype (torch's promotion), then in the dtype
/// the computation runs in.
fn operand_via(e: &Emit, name: &str, out: &str, via: &str) -> Result<String> {
    let x = operand(e, name, out)?;
    e.cast(&x, out, via)
}

fn present(e: &Emit, name: &str) -> Result<bool> {
    Ok(!matches!(e.arg(name)?, None | Some(Argument::None)))
}

// ── Arithmetic ──

/// `self op other` (or `exponent`) in the output's dtype, `other` scaled by `alpha`.
fn binary(e: &Emit, op: &str) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let (x, y) = operands(e, &out)?;
    let y = scaled(e, y, &out)?;
    arith(e, op, &x, &y, &out)
}

/// `other - alpha * self`.
fn rsub(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let (x, y) = operands(e, &out)?;
    let x = scaled(e, x, &out)?;
    arith(e, "Sub", &y, &x, &out)
}

/// `value * alpha` (no node when `alpha` is absent or 1).
fn scaled(e: &Emit, value: String, out: &str) -> Result<String> {
    let alpha = match e.arg("alpha")? {
        None | Some(Argument::None) => return Ok(value),
        Some(Argument::Boolean(b)) => b as i64 as f64,
        _ => e.float("alpha", 1.0)?,
    };
    if alpha == 1.0 {
        return Ok(value);
    }
    arith(e, "Mul", &value, &operand(e, "alpha", out)?, out)
}

/// A binary op of `dtype`; on bools `+`/`max` are Or and `*`/`min` And, as in torch.
fn arith(e: &Emit, op: &str, x: &str, y: &str, dtype: &str) -> Result<String> {
    if dtype == "bool" {
        match op {
            "Add" | "Max" => return e.op("Or", &[x, y]),
            "Mul" | "Min" => return e.op("And", &[x, y]),
            _ => {}
        }
    }
    kernel(e, op, &[x, y], dtype, &[])
}

fn operands(e: &Emit, out: &str) -> Result<(String, String)> {
    let x = operand(e, "self", out)?;
    let second = if e.arg("other")?.is_some() { "other" } else { "exponent" };
    Ok((x, operand(e, second, out)?))
}

/// `self ** exponent`. ORT's integer Pow goes through a double, so a zero
/// base with a negative exponent (inf) is made torch's 0 (a result beyond the
/// dtype's range saturates instead of wrapping as in torch).
fn pow(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let (x, y) = operands(e, &out)?;
    let result = arith(e, "Pow", &x, &y, &out)?;
    let may_be_negative = !matches!(e.arg("exponent")?, Some(Argument::Int(n)) if n >= 0);
    let may_be_zero = !matches!(e.arg("self")?, Some(Argument::Int(n)) if n != 0);
    if is_floating(&out) || out == "bool" || !may_be_negative || !may_be_zero {
        return Ok(result);
    }
    let zero = int_scalar(e, 0, &out)?;
    let undefined = e.op("And", &[&e.op("Equal", &[&x, &zero])?, &e.op("Less", &[&y, &zero])?])?;
    select(e, &undefined, &zero, &result, &out)
}

fn floor_divide(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    divide(e, &out, Some("floor"))
}

/// `div` with `rounding_mode` None (true division), "trunc" or "floor".
fn div_mode(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let mode = match e.arg("rounding_mode")? {
        Some(Argument::Str(s)) => Some(s),
        None | Some(Argument::None) => None,
        Some(other) => {
            return Err(e.fail(format!("`rounding_mode`: expected a string, got {other:?}")))
        }
    };
    match mode.as_deref() {
        None | Some("trunc") | Some("floor") => divide(e, &out, mode.as_deref()),
        Some(other) => Err(e.fail(format!("div: unknown rounding_mode {other:?}"))),
    }
}

fn divide(e: &Emit, out: &str, mode: Option<&str>) -> Result<String> {
    if !is_floating(out) {
        let x = operand(e, "self", out)?;
        let y = operand(e, "other", out)?;
        return match mode {
            // ONNX's integer Div truncates, as C does
            Some("floor") => e.floor_div(&x, &y, out),
            _ => e.op("Div", &[&x, &y]),
        };
    }
    let via = opmath(out);
    let x = operand_via(e, "self", out, via)?;
    // Of a half type, torch rounds each step when dividing by a tensor, but
    // divides by a Python number in float32 (the number unrounded) and
    // rounds once; `rounded` is the dtype the steps round to.
    let number = matches!(e.arg("other")?, Some(Argument::Float(_) | Argument::Int(_)));
    let (y, rounded) = if number {
        (operand(e, "other", via)?, via)
    } else {
        (operand_via(e, "other", out, via)?, out)
    };
    let result = match mode {
        None => e.op("Div", &[&x, &y])?,
        Some("trunc") => trunc(e, &round_to(e, &e.op("Div", &[&x, &y])?, via, rounded)?)?,
        _ => floor_div_float(e, &x, &y, via, rounded)?,
    };
    e.cast(&result, via, out)
}

/// `x` (of `via`) rounded to `dtype` and back: where torch rounds a half type
/// between steps. Explicit, since ORT's CPU runs chains of float16 ops in
/// float32 and drops the casts between them.
fn round_to(e: &Emit, x: &str, via: &str, dtype: &str) -> Result<String> {
    if via == dtype {
        return Ok(x.to_string());
    }
    e.cast(&e.cast(x, via, dtype)?, dtype, via)
}

/// torch's `div_floor_floating`: the quotient of `a - fmod(a, b)`, one less
/// when the remainder's sign differs from `b`'s, then floored and rounded up
/// when more than half away (a plain Floor(a / b) is off by one on e.g. 1 // 0.1).
/// Computed in `via`, each step rounded to `dtype` as torch's kernel does.
fn floor_div_float(e: &Emit, a: &str, b: &str, via: &str, dtype: &str) -> Result<String> {
    let round = |x: String| round_to(e, &x, via, dtype);
    let zero = e.scalar(0.0, via)?;
    let half = e.scalar(0.5, via)?;
    let modulo = e.op_with("Mod", &[a, b], &[attr("fmod", Attribute::Int(1))])?;
    let div = round(e.op("Div", &[&round(e.op("Sub", &[a, &modulo])?)?, b])?)?;
    let adjust = signs_differ(e, &modulo, b, &zero)?;
    let div = round(e.op("Sub", &[&div, &e.cast(&adjust, "bool", via)?])?)?;
    let floor = e.op("Floor", &[&div])?;
    let up = e.op("Greater", &[&e.op("Sub", &[&div, &floor])?, &half])?;
    let floor = e.op("Add", &[&floor, &e.cast(&up, "bool", via)?])?;
    // b == 0: a / b (±inf or NaN)
    let by_zero = e.op("Equal", &[b, &zero])?;
    e.op("Where", &[&by_zero, &e.op("Div", &[a, b])?, &floor])
}

/// `m != 0 and (m < 0) != (b < 0)`: a remainder that needs `b` added to be Python's.
fn signs_differ(e: &Emit, m: &str, b: &str, zero: &str) -> Result<String> {
    let nonzero = e.op("Not", &[&e.op("Equal", &[m, zero])?])?;
    let differ = e.op("Xor", &[&e.op("Less", &[m, zero])?, &e.op("Less", &[b, zero])?])?;
    e.op("And", &[&nonzero, &differ])
}

/// C's fmod: the remainder has the dividend's sign (ONNX Mod with fmod=1).
fn fmod(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let via = kernel_dtype("Mod", &out);
    let x = operand_via(e, "self", &out, &via)?;
    let y = operand_via(e, "other", &out, &via)?;
    let result = e.op_with("Mod", &[&x, &y], &[attr("fmod", Attribute::Int(1))])?;
    e.cast(&result, &via, &out)
}

/// Python's modulo: the remainder has the divisor's sign. Integers: ONNX Mod
/// with fmod=0; floats (which ORT's Mod only takes with fmod=1): torch's
/// `fmod(a, b)`, plus `b` when its sign differs from `b`'s.
fn remainder(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    if !is_floating(&out) {
        let x = operand(e, "self", &out)?;
        let y = operand(e, "other", &out)?;
        return e.op_with("Mod", &[&x, &y], &[attr("fmod", Attribute::Int(0))]);
    }
    let via = opmath(&out);
    let x = operand_via(e, "self", &out, via)?;
    let y = operand_via(e, "other", &out, via)?;
    let zero = e.scalar(0.0, via)?;
    let modulo = e.op_with("Mod", &[&x, &y], &[attr("fmod", Attribute::Int(1))])?;
    let adjust = signs_differ(e, &modulo, &y, &zero)?;
    let shifted = e.op("Add", &[&modulo, &y])?;
    let result = e.op("Where", &[&adjust, &shifted, &modulo])?;
    e.cast(&result, via, &out)
}

// ── Comparisons ──

fn compare(e: &Emit, op: &str) -> Result<String> {
    let dtype = comparison_dtype(e)?;
    let x = operand(e, "self", &dtype)?;
    let y = operand(e, "other", &dtype)?;
    kernel(e, op, &[&x, &y], &dtype, &[])
}

fn not_equal(e: &Emit) -> Result<String> {
    let equal = compare(e, "Equal")?;
    e.op("Not", &[&equal])
}

/// The dtype two operands are compared in: torch's `result_type` of them.
fn comparison_dtype(e: &Emit) -> Result<String> {
    let mut parts = vec![operand_kind(e, "self")?];
    if let Some(other) = operand_kind_opt(e, "other")? {
        parts.push(other);
    }
    Ok(result_type(&parts))
}

/// How an operand takes part in promotion: its dtype and priority (2 a tensor
/// with dimensions, 1 a 0-d tensor, 0 a Python number).
fn operand_kind(e: &Emit, name: &str) -> Result<(String, u8)> {
    operand_kind_opt(e, name)?.ok_or_else(|| e.fail(format!("missing `{name}`")))
}

fn operand_kind_opt(e: &Emit, name: &str) -> Result<Option<(String, u8)>> {
    Ok(Some(match e.arg(name)? {
        Some(Argument::Tensor(v)) => {
            let meta = e.meta_of(v)?;
            (meta.dtype, if meta.shape.is_empty() { 1 } else { 2 })
        }
        Some(Argument::Float(_)) | Some(Argument::SymFloat(_)) => ("float32".into(), 0),
        Some(Argument::Int(_)) | Some(Argument::SymInt(_)) => ("int64".into(), 0),
        Some(Argument::Boolean(_)) | Some(Argument::SymBool(_)) => ("bool".into(), 0),
        _ => return Ok(None),
    }))
}

fn category(dtype: &str) -> u8 {
    if dtype == "bool" {
        0
    } else if is_floating(dtype) {
        2
    } else {
        1
    }
}

/// torch's `promote_types` for the dtypes a model computes in.
fn promote_types(a: &str, b: &str) -> String {
    if a == b {
        return a.into();
    }
    let (ca, cb) = (category(a), category(b));
    if ca != cb {
        return if ca > cb { a.into() } else { b.into() };
    }
    let rank = |d: &str| match d {
        "uint8" | "int8" => 1,
        "int16" | "float16" | "bfloat16" => 2,
        "int32" | "float32" => 3,
        _ => 4,
    };
    if ca == 2 {
        // float16 and bfloat16 meet in float32
        return match (rank(a), rank(b)) {
            (2, 2) => "float32".into(),
            (ra, rb) if ra >= rb => a.into(),
            _ => b.into(),
        };
    }
    // uint8 and int8 meet in int16
    match (rank(a), rank(b)) {
        (1, 1) => "int16".into(),
        (ra, rb) if ra >= rb => a.into(),
        _ => b.into(),
    }
}

/// torch's `result_type`: tensors with dimensions decide, unless a 0-d tensor
/// or a number is of a higher category (bool < integer < float).
fn result_type(parts: &[(String, u8)]) -> String {
    let fold = |priority: u8| {
        parts
            .iter()
            .filter(|p| p.1 == priority)
            .map(|p| p.0.clone())
            .reduce(|a, b| promote_types(&a, &b))
    };
    let mut result: Option<String> = None;
    for priority in [2, 1, 0] {
        if let Some(next) = fold(priority) {
            result = Some(match result {
                None => next,
                Some(r) if category(&next) > category(&r) => {
                    if priority == 0 {
                        promote_types(&r, &next)
                    } else {
                        next
                    }
                }
                Some(r) => r,
            });
        }
    }
    result.unwrap_or_else(|| "float32".into())
}

/// `IsInf` / `IsNaN`: integers and bools are finite (checked as float32, as
/// torch.onnx does), half types go through float32 for the kernel.
fn classify(e: &Emit, op: &str) -> Result<String> {
    let from = e.input_meta("self")?.dtype;
    let via = if is_floating(&from) { kernel_dtype(op, &from) } else { "float32".into() };
    let x = e.cast(&e.tensor("self")?, &from, &via)?;
    e.op(op, &[&x])
}

// ── Logic ──

fn logical_not(e: &Emit) -> Result<String> {
    let x = operand(e, "self", "bool")?;
    e.op("Not", &[&x])
}

/// `logical_*`: any dtype, as truth values.
fn logical(e: &Emit, op: &str) -> Result<String> {
    let x = operand(e, "self", "bool")?;
    let y = operand(e, "other", "bool")?;
    e.op(op, &[&x, &y])
}

/// `bitwise_not`: Not on bools, BitwiseNot on integers.
fn bitwise_not(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let x = operand(e, "self", &out)?;
    if out == "bool" {
        return e.op("Not", &[&x]);
    }
    if is_floating(&out) {
        return Err(
            e.fail(format!("bitwise_not of a {out} tensor (torch takes only integers and bools)"))
        );
    }
    e.op("BitwiseNot", &[&x])
}

/// `bitwise_{and,or,xor}` and `__and__`/`__or__`: the logical op on bools,
/// the Bitwise one on integers.
fn bitwise(e: &Emit, op: &str) -> Result<String> {
    let out = e.output_meta()?.dtype;
    if is_floating(&out) {
        return Err(e.fail(format!("bitwise op on {out} (torch takes only integers and bools)")));
    }
    let x = operand(e, "self", &out)?;
    let y = operand(e, "other", &out)?;
    if out == "bool" {
        e.op(op, &[&x, &y])
    } else {
        e.op(&format!("Bitwise{op}"), &[&x, &y])
    }
}

// ── Unary ──

fn unary(e: &Emit, op: &str) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let x = operand(e, "self", &out)?;
    kernel(e, op, &[&x], &out, &[])
}

/// `ceil`/`floor`/`round`: integers are already whole.
fn rounding(e: &Emit, op: &str) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let x = operand(e, "self", &out)?;
    if !is_floating(&out) {
        return e.op("Identity", &[&x]);
    }
    kernel(e, op, &[&x], &out, &[])
}

/// `trunc`: integers are whole; floats `Floor(|x|) * Sign(x)` (no Trunc in ONNX).
fn trunc_op(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let x = operand(e, "self", &out)?;
    if !is_floating(&out) {
        return e.op("Identity", &[&x]);
    }
    let via = kernel_dtype("Floor", &out);
    let result = trunc(e, &e.cast(&x, &out, &via)?)?;
    e.cast(&result, &via, &out)
}

fn trunc(e: &Emit, x: &str) -> Result<String> {
    let whole = e.op("Floor", &[&e.op("Abs", &[x])?])?;
    e.op("Mul", &[&whole, &e.op("Sign", &[x])?])
}

/// `round(x, decimals)`: scaled by 10^decimals, rounded half to even, scaled
/// back; a negative `decimals` divides first, as torch's kernel does.
fn round_decimals(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let decimals = e.int("decimals", 0)?;
    if !is_floating(&out) {
        return Err(e.fail(format!("round(decimals=) of a {out} tensor (torch takes only floats)")));
    }
    let via = kernel_dtype("Round", opmath(&out));
    let x = operand_via(e, "self", &out, &via)?;
    let result = if decimals == 0 {
        e.op("Round", &[&x])?
    } else {
        let scale = e.scalar(10f64.powi(decimals.unsigned_abs().min(400) as i32), &via)?;
        let (there, back) = if decimals > 0 { ("Mul", "Div") } else { ("Div", "Mul") };
        let rounded = e.op("Round", &[&e.op(there, &[&x, &scale])?])?;
        e.op(back, &[&rounded, &scale])?
    };
    e.cast(&result, &via, &out)
}

/// `sign`: a bool is its own sign; NaN's is 0 in torch (ONNX Sign gives NaN).
fn sign(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let x = operand(e, "self", &out)?;
    if out == "bool" {
        return e.op("Identity", &[&x]);
    }
    let sign = kernel(e, "Sign", &[&x], &out, &[])?;
    if !is_floating(&out) {
        return Ok(sign);
    }
    let nan = kernel(e, "IsNaN", &[&x], &out, &[])?;
    select(e, &nan, &e.scalar(0.0, &out)?, &sign, &out)
}

/// `exp(x) - 1` (no Expm1 in ONNX), in float32 for the half types so the
/// subtraction does not cancel to zero.
fn expm1(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let via = kernel_dtype("Exp", opmath(&out));
    let x = operand_via(e, "self", &out, &via)?;
    let one = e.scalar(1.0, &via)?;
    let result = e.op("Sub", &[&e.op("Exp", &[&x])?, &one])?;
    e.cast(&result, &via, &out)
}

/// `log(x) / ln(base)` (ONNX has only the natural log).
fn log_base(e: &Emit, ln_base: f64) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let via = kernel_dtype("Log", opmath(&out));
    let x = operand_via(e, "self", &out, &via)?;
    let divisor = e.scalar(ln_base, &via)?;
    let result = e.op("Div", &[&e.op("Log", &[&x])?, &divisor])?;
    e.cast(&result, &via, &out)
}

/// `Log(1 + x)`, as torch.onnx's table translates it.
fn log1p(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let via = kernel_dtype("Log", opmath(&out));
    let x = operand_via(e, "self", &out, &via)?;
    let one = e.scalar(1.0, &via)?;
    let result = e.op("Log", &[&e.op("Add", &[&x, &one])?])?;
    e.cast(&result, &via, &out)
}

/// `relu`; integers as `Max(x, 0)` (ORT's integer Relu misses int16, uint8
/// and, past opset 18, int64).
fn relu(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    if is_floating(&out) {
        return unary(e, "Relu");
    }
    let x = operand(e, "self", &out)?;
    let zero = int_scalar(e, 0, &out)?;
    arith(e, "Max", &x, &zero, &out)
}

fn rsqrt(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let root = unary(e, "Sqrt")?;
    kernel(e, "Reciprocal", &[&root], &out, &[])
}

fn silu(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let via = kernel_dtype("Sigmoid", opmath(&out));
    let x = operand_via(e, "self", &out, &via)?;
    let gate = e.op("Sigmoid", &[&x])?;
    let result = e.op("Mul", &[&x, &gate])?;
    e.cast(&result, &via, &out)
}

/// `elu(x, alpha, scale, input_scale)`: ONNX Elu when both scales are 1, else
/// `x > 0 ? scale * x : alpha * scale * (exp(x * input_scale) - 1)`.
fn elu(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let alpha = e.float("alpha", 1.0)?;
    let scale = e.float("scale", 1.0)?;
    let input_scale = e.float("input_scale", 1.0)?;
    if scale == 1.0 && input_scale == 1.0 {
        let x = operand(e, "self", &out)?;
        return kernel(e, "Elu", &[&x], &out, &[attr("alpha", Attribute::Float(alpha as f32))]);
    }
    let via = kernel_dtype("Exp", opmath(&out));
    let x = operand_via(e, "self", &out, &via)?;
    let zero = e.scalar(0.0, &via)?;
    let one = e.scalar(1.0, &via)?;
    let positive = e.op("Mul", &[&x, &e.scalar(scale, &via)?])?;
    let exp = e.op("Exp", &[&e.op("Mul", &[&x, &e.scalar(input_scale, &via)?])?])?;
    let negative = e.op("Mul", &[&e.op("Sub", &[&exp, &one])?, &e.scalar(alpha * scale, &via)?])?;
    let result = e.op("Where", &[&e.op("Greater", &[&x, &zero])?, &positive, &negative])?;
    e.cast(&result, &via, &out)
}

fn leaky_relu(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let slope = e.float("negative_slope", 0.01)?;
    let x = operand(e, "self", &out)?;
    kernel(e, "LeakyRelu", &[&x], &out, &[attr("alpha", Attribute::Float(slope as f32))])
}

/// `hardtanh`: Clip to [min_val, max_val]; on integers the bounds truncate, as in torch.
fn hardtanh(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let x = operand(e, "self", &out)?;
    let low = bound(e, "min_val", -1.0, &out)?;
    let high = bound(e, "max_val", 1.0, &out)?;
    kernel(e, "Clip", &[&x, &low, &high], &out, &[])
}

/// `softplus(x, beta, threshold)`: ONNX's Softplus of `beta * x`, over `beta`;
/// torch returns `x` itself where `beta * x > threshold`, which only differs
/// from the softplus (by log1p(exp(-threshold)) / beta) for a small threshold.
fn softplus(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let beta = e.float("beta", 1.0)?;
    let threshold = e.float("threshold", 20.0)?;
    let via = kernel_dtype("Softplus", &out);
    let x = operand_via(e, "self", &out, &via)?;
    let scaled = if beta == 1.0 { x.clone() } else { e.op("Mul", &[&x, &e.scalar(beta, &via)?])? };
    let soft = e.op("Softplus", &[&scaled])?;
    let soft = if beta == 1.0 { soft } else { e.op("Div", &[&soft, &e.scalar(beta, &via)?])? };
    // Past 16 the difference is below float32's resolution of the value itself.
    let result = if threshold >= 16.0 {
        soft
    } else {
        let linear = e.op("Greater", &[&scaled, &e.scalar(threshold, &via)?])?;
        e.op("Where", &[&linear, &x, &soft])?
    };
    e.cast(&result, &via, &out)
}

/// `hardsigmoid(x) = relu6(x + 3) / 6` is ONNX's HardSigmoid with alpha 1/6
/// (its default is 0.2); `hardswish(x) = x * hardsigmoid(x)` is HardSwish.
fn hard_sigmoid(e: &Emit, op: &str) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let x = operand(e, "self", &out)?;
    let attributes =
        if op == "HardSigmoid" { vec![attr("alpha", Attribute::Float(1.0 / 6.0))] } else { vec![] };
    kernel(e, op, &[&x], &out, &attributes)
}

/// A scalar argument (or its default) as a 0-d constant of `dtype`.
fn bound(e: &Emit, name: &str, default: f64, dtype: &str) -> Result<String> {
    if present(e, name)? {
        operand(e, name, dtype)
    } else {
        e.scalar(default, dtype)
    }
}

/// `Clip(self, min, max)` of the scalar bounds named (an absent or `None` one is no bound).
fn clamp(e: &Emit, min: Option<&str>, max: Option<&str>) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let x = operand(e, "self", &out)?;
    let bound = |name: Option<&str>| -> Result<String> {
        match name {
            Some(name) if present(e, name)? => operand(e, name, &out),
            _ => Ok(String::new()),
        }
    };
    let (low, high) = (bound(min)?, bound(max)?);
    if out == "bool" {
        // no Clip over bools; max is Or, min And
        let low_done = if low.is_empty() { x } else { e.op("Or", &[&x, &low])? };
        return if high.is_empty() { Ok(low_done) } else { e.op("And", &[&low_done, &high]) };
    }
    let via = kernel_dtype("Clip", &out);
    let inputs = [x, low, high]
        .iter()
        .map(|v| if v.is_empty() { Ok(String::new()) } else { e.cast(v, &out, &via) })
        .collect::<Result<Vec<_>>>()?;
    let result = e.op("Clip", &[&inputs[0], &inputs[1], &inputs[2]])?;
    e.cast(&result, &via, &out)
}

/// `clamp` with tensor bounds: Max then Min (Clip takes only scalars), so a
/// `min` above `max` gives `max`, as in torch.
fn clamp_tensor(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let mut x = operand(e, "self", &out)?;
    if present(e, "min")? {
        x = arith(e, "Max", &x, &operand(e, "min", &out)?, &out)?;
    }
    if present(e, "max")? {
        x = arith(e, "Min", &x, &operand(e, "max", &out)?, &out)?;
    }
    if !present(e, "min")? && !present(e, "max")? {
        x = e.op("Identity", &[&x])?;
    }
    Ok(x)
}

// ── Selection ──

fn where_(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let condition = operand(e, "condition", "bool")?;
    let x = operand(e, "self", &out)?;
    let y = operand(e, "other", &out)?;
    select(e, &condition, &x, &y, &out)
}

fn masked_fill(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let mask = operand(e, "mask", "bool")?;
    let value = operand(e, "value", &out)?;
    let x = operand(e, "self", &out)?;
    select(e, &mask, &value, &x, &out)
}

/// `Where(condition, x, y)` of `dtype`. ORT's CPU Where has no bool kernel:
/// `(c & x) | (!c & y)` (the reference's `_aten_masked_fill` does the same).
fn select(e: &Emit, condition: &str, x: &str, y: &str, dtype: &str) -> Result<String> {
    if dtype == "bool" {
        let take = e.op("And", &[condition, x])?;
        let keep = e.op("And", &[&e.op("Not", &[condition])?, y])?;
        return e.op("Or", &[&take, &keep]);
    }
    let via = kernel_dtype("Where", dtype);
    let result = e.op("Where", &[condition, &e.cast(x, dtype, &via)?, &e.cast(y, dtype, &via)?])?;
    e.cast(&result, &via, dtype)
}

// ── Casts and identities ──

/// `self` in the output's dtype (an `Identity` when it already is).
fn cast(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let from = e.input_meta("self")?.dtype;
    let x = e.tensor("self")?;
    if from == out {
        e.op("Identity", &[&x])
    } else {
        e.cast(&x, &from, &out)
    }
}

fn identity(e: &Emit, input: &str) -> Result<String> {
    let x = e.tensor(input)?;
    e.op("Identity", &[&x])
}

/// Giles' single-precision polynomials for `erfinv(x) / x`, in
/// `w = -log((1 - x)(1 + x))`: the centre's (`w < 5`, in `w - 2.5`) and the
/// tails' (in `sqrt(w) - 3`), highest power first ("Approximating the erfinv
/// function", GPU Computing Gems Jade Edition, 2011).
const ERFINV_CENTRE: [f64; 9] = [
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
];
const ERFINV_TAILS: [f64; 9] = [
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    0.00943887047,
    1.00167406,
    2.83297682,
];

/// `erfinv` (no ONNX op): Giles' polynomials times `x`, within 5e-7 of
/// torch's over (-1, 1) in float32; `x = ±1` gives `±inf` and `|x| > 1` NaN
/// (the log of a negative), as torch does. Gemma 3n's activation sparsity
/// takes the normal quantile of its target rate with it.
fn erfinv(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let dtype = kernel_dtype("Log", opmath(&out));
    let x = operand_via(e, "self", &out, &dtype)?;
    let one = e.scalar(1.0, &dtype)?;
    let spread = e.op("Mul", &[&e.op("Sub", &[&one, &x])?, &e.op("Add", &[&one, &x])?])?;
    let w = e.op("Neg", &[&e.op("Log", &[&spread])?])?;
    let polynomial = |at: &str, coefficients: &[f64]| -> Result<String> {
        let mut p = e.scalar(coefficients[0], &dtype)?;
        for &c in &coefficients[1..] {
            p = e.op("Add", &[&e.op("Mul", &[&p, at])?, &e.scalar(c, &dtype)?])?;
        }
        Ok(p)
    };
    let centre = polynomial(&e.op("Sub", &[&w, &e.scalar(2.5, &dtype)?])?, &ERFINV_CENTRE)?;
    let tail_at = e.op("Sub", &[&e.op("Sqrt", &[&w])?, &e.scalar(3.0, &dtype)?])?;
    let tails = polynomial(&tail_at, &ERFINV_TAILS)?;
    let in_centre = e.op("Less", &[&w, &e.scalar(5.0, &dtype)?])?;
    let y = e.op("Mul", &[&e.op("Where", &[&in_centre, &centre, &tails])?, &x])?;
    // At ±1 the tails' polynomial of an infinite w has the wrong sign.
    let edge = e.op("Equal", &[&e.op("Abs", &[&x])?, &one])?;
    let infinite = e.op("Mul", &[&x, &e.scalar(f64::INFINITY, &dtype)?])?;
    let result = e.op("Where", &[&edge, &infinite, &y])?;
    e.cast(&result, &dtype, &out)
}

/// gelu: exact (erf) or the tanh approximation, in float32 for the half types;
/// below opset 20 (no Gelu) spelled out.
fn gelu(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let dtype = kernel_dtype("Erf", opmath(&out));
    let x = operand_via(e, "self", &out, &dtype)?;
    let approximate = match e.arg("approximate")? {
        Some(Argument::Str(s)) => s,
        _ => "none".into(),
    };
    // Opset 20 has Gelu (one node; ONNX Runtime's CPU kernel is float32).
    if e.builder.opset() >= 20 && dtype == "float32" {
        let result =
            e.op_with("Gelu", &[&x], &[attr("approximate", Attribute::Str(approximate))])?;
        return e.cast(&result, &dtype, &out);
    }
    let half = e.scalar(0.5, &dtype)?;
    let one = e.scalar(1.0, &dtype)?;
    let inner = if approximate == "tanh" {
        // tanh(sqrt(2/pi) * (x + 0.044715 x^3))
        let three = e.scalar(3.0, &dtype)?;
        let cube = e.op("Pow", &[&x, &three])?;
        let c = e.scalar(0.044715, &dtype)?;
        let scaled = e.op("Mul", &[&cube, &c])?;
        let sum = e.op("Add", &[&x, &scaled])?;
        let k = e.scalar((2.0 / std::f64::consts::PI).sqrt(), &dtype)?;
        let arg = e.op("Mul", &[&sum, &k])?;
        e.op("Tanh", &[&arg])?
    } else {
        let k = e.scalar(std::f64::consts::FRAC_1_SQRT_2, &dtype)?;
        let arg = e.op("Mul", &[&x, &k])?;
        e.op("Erf", &[&arg])?
    };
    let plus = e.op("Add", &[&inner, &one])?;
    let halfx = e.op("Mul", &[&x, &half])?;
    let result = e.op("Mul", &[&halfx, &plus])?;
    e.cast(&result, &dtype, &out)
}
