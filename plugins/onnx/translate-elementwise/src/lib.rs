//! Elementwise ATen ops and casts → ONNX. Operands are cast to the output's
//! dtype (or, for comparisons, to their common dtype), which is how torch's
//! type promotion reaches ONNX, whose ops take one type.

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
    "aten.pow.Tensor_Scalar" => |e| binary(e, "Pow"),
    "aten.pow.Tensor_Tensor" => |e| binary(e, "Pow"),
    "aten.maximum.default" => |e| binary(e, "Max"),
    "aten.minimum.default" => |e| binary(e, "Min"),
    "aten.max.other" => |e| binary(e, "Max"),
    "aten.min.other" => |e| binary(e, "Min"),
    "aten.floor_divide.default" => floor_divide,
    "aten.floor_divide.Scalar" => floor_divide,
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
    // logic
    "aten.logical_not.default" => not,
    "aten.bitwise_not.default" => not,
    "aten.__and__.Tensor" => |e| logic(e, "And"),
    "aten.bitwise_and.Tensor" => |e| logic(e, "And"),
    "aten.logical_and.default" => |e| logic(e, "And"),
    "aten.__or__.Tensor" => |e| logic(e, "Or"),
    "aten.bitwise_or.Tensor" => |e| logic(e, "Or"),
    "aten.logical_or.default" => |e| logic(e, "Or"),
    // unary
    "aten.neg.default" => |e| unary(e, "Neg"),
    "aten.rsqrt.default" => rsqrt,
    "aten.sqrt.default" => |e| unary(e, "Sqrt"),
    "aten.cos.default" => |e| unary(e, "Cos"),
    "aten.sin.default" => |e| unary(e, "Sin"),
    "aten.exp.default" => |e| unary(e, "Exp"),
    "aten.log.default" => |e| unary(e, "Log"),
    "aten.log1p.default" => log1p,
    "aten.tanh.default" => |e| unary(e, "Tanh"),
    "aten.sigmoid.default" => |e| unary(e, "Sigmoid"),
    "aten.relu.default" => |e| unary(e, "Relu"),
    "aten.abs.default" => |e| unary(e, "Abs"),
    "aten.reciprocal.default" => |e| unary(e, "Reciprocal"),
    "aten.erf.default" => |e| unary(e, "Erf"),
    "aten.silu.default" => silu,
    "aten.gelu.default" => gelu,
    "aten.clamp.default" => |e| clamp(e, Some("min"), Some("max")),
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
    "aten.detach_.default" => |e| identity(e, "self"),
    "aten.alias.default" => |e| identity(e, "self"),
    "aten.lift_fresh_copy.default" => |e| identity(e, "self"),
    "aten.dropout.default" => |e| identity(e, "input"),
    // a check torch.export keeps; no value
    "aten._assert_tensor_metadata.default" => |_| Ok(()),
}

/// `self op other` (or `exponent`) in the output's dtype, `other` scaled by `alpha`.
fn binary(e: &Emit, op: &str) -> Result<String> {
    let (x, y) = operands(e)?;
    e.op(op, &[&x, &y])
}

/// `other - self`.
fn rsub(e: &Emit) -> Result<String> {
    let (x, y) = operands(e)?;
    e.op("Sub", &[&y, &x])
}

fn operands(e: &Emit) -> Result<(String, String)> {
    let out = e.output_meta()?.dtype;
    let x = e.operand("self", &out)?;
    let second = if e.arg("other")?.is_some() { "other" } else { "exponent" };
    let mut y = e.operand(second, &out)?;
    let alpha = e.float("alpha", 1.0)?;
    if alpha != 1.0 {
        let a = e.scalar(alpha, &out)?;
        y = e.op("Mul", &[&y, &a])?;
    }
    Ok((x, y))
}

fn floor_divide(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    e.floor_div(&e.operand("self", &out)?, &e.operand("other", &out)?, &out)
}

fn compare(e: &Emit, op: &str) -> Result<String> {
    let dtype = comparison_dtype(e)?;
    let x = e.operand("self", &dtype)?;
    let y = e.operand("other", &dtype)?;
    e.op(op, &[&x, &y])
}

fn not_equal(e: &Emit) -> Result<String> {
    let equal = compare(e, "Equal")?;
    e.op("Not", &[&equal])
}

/// The dtype two operands are compared in: a floating one if either is.
fn comparison_dtype(e: &Emit) -> Result<String> {
    let own = e.input_meta("self")?.dtype;
    if is_floating(&own) {
        return Ok(own);
    }
    Ok(match e.arg("other")? {
        Some(Argument::Tensor(v)) => {
            let other = e.meta_of(v)?.dtype;
            if is_floating(&other) { other } else if own == "bool" { other } else { own }
        }
        Some(Argument::Float(_)) => "float32".into(),
        _ => own,
    })
}

fn not(e: &Emit) -> Result<String> {
    let x = e.operand("self", "bool")?;
    if e.output_meta()?.dtype != "bool" {
        return Err(e.fail("bitwise_not of an integer tensor is not translated yet"));
    }
    e.op("Not", &[&x])
}

fn logic(e: &Emit, op: &str) -> Result<String> {
    if e.output_meta()?.dtype != "bool" {
        return Err(e.fail("bitwise ops on integer tensors are not translated yet"));
    }
    let x = e.operand("self", "bool")?;
    let y = e.operand("other", "bool")?;
    e.op(op, &[&x, &y])
}

fn unary(e: &Emit, op: &str) -> Result<String> {
    let x = e.operand("self", &e.output_meta()?.dtype)?;
    e.op(op, &[&x])
}

/// `Log(1 + x)`, as torch.onnx's table translates it.
fn log1p(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let x = e.operand("self", &out)?;
    let one = e.scalar(1.0, &out)?;
    let sum = e.op("Add", &[&x, &one])?;
    e.op("Log", &[&sum])
}

fn rsqrt(e: &Emit) -> Result<String> {
    let root = unary(e, "Sqrt")?;
    e.op("Reciprocal", &[&root])
}

fn silu(e: &Emit) -> Result<String> {
    let x = e.tensor("self")?;
    let gate = e.op("Sigmoid", &[&x])?;
    e.op("Mul", &[&x, &gate])
}

/// `Clip(self, min, max)` of the bounds named (an absent or `None` one is no bound).
fn clamp(e: &Emit, min: Option<&str>, max: Option<&str>) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let x = e.operand("self", &out)?;
    let bound = |name: Option<&str>| -> Result<String> {
        match name {
            Some(name) if !matches!(e.arg(name)?, None | Some(Argument::None)) => e.operand(name, &out),
            _ => Ok(String::new()),
        }
    };
    e.op("Clip", &[&x, &bound(min)?, &bound(max)?])
}

fn where_(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let condition = e.operand("condition", "bool")?;
    let x = e.operand("self", &out)?;
    let y = e.operand("other", &out)?;
    e.op("Where", &[&condition, &x, &y])
}

fn masked_fill(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    if out == "bool" {
        // ORT's CPU Where has no bool kernel: fill True is `self | mask`, False `self & !mask`
        // (the reference's `_aten_masked_fill`).
        let x = e.tensor("self")?;
        let mask = e.operand("mask", "bool")?;
        let fill = match e.arg("value")? {
            Some(Argument::Boolean(b)) => b,
            Some(Argument::Int(i)) => i != 0,
            Some(Argument::Float(f)) => f != 0.0,
            other => return Err(e.fail(format!("masked_fill of a bool tensor with {other:?}"))),
        };
        if fill {
            return e.op("Or", &[&x, &mask]);
        }
        let keep = e.op("Not", &[&mask])?;
        return e.op("And", &[&x, &keep]);
    }
    let mask = e.operand("mask", "bool")?;
    let value = e.operand("value", &out)?;
    let x = e.operand("self", &out)?;
    e.op("Where", &[&mask, &value, &x])
}

/// `self` in the output's dtype (an `Identity` when it already is).
fn cast(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let from = e.input_meta("self")?.dtype;
    let x = e.tensor("self")?;
    if from == out { e.op("Identity", &[&x]) } else { e.cast(&x, &from, &out) }
}

fn identity(e: &Emit, input: &str) -> Result<String> {
    let x = e.tensor(input)?;
    e.op("Identity", &[&x])
}

/// gelu: exact (erf) or the tanh approximation.
fn gelu(e: &Emit) -> Result<String> {
    let dtype = e.output_meta()?.dtype;
    let x = e.tensor("self")?;
    let approximate = match e.arg("approximate")? {
        Some(Argument::Str(s)) => s,
        _ => "none".into(),
    };
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
    e.op("Mul", &[&halfx, &plus])
}
