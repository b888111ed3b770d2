//! Trigonometric and hyperbolic ATen ops → ONNX. Integer and bool inputs are
//! cast to the output's float dtype; ONNX Runtime's CPU has these kernels in
//! float32 and float16 only, so float64 and bfloat16 run in float32.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "aten.tan.default" => |e| unary(e, "Tan"),
    "aten.acos.default" => |e| unary(e, "Acos"),
    "aten.asin.default" => |e| unary(e, "Asin"),
    "aten.atan.default" => |e| unary(e, "Atan"),
    "aten.cosh.default" => |e| unary(e, "Cosh"),
    "aten.sinh.default" => |e| unary(e, "Sinh"),
    "aten.acosh.default" => |e| unary(e, "Acosh"),
    "aten.asinh.default" => |e| unary(e, "Asinh"),
    "aten.atanh.default" => |e| unary(e, "Atanh"),
    "aten.atan2.default" => atan2,
}

/// The dtype the kernels run in for output dtype `out`.
fn kernel_dtype(out: &str) -> &str {
    if matches!(out, "float32" | "float16") {
        out
    } else {
        "float32"
    }
}

/// Input `name` cast to the output's dtype (torch's promotion), then to `via`.
fn operand(e: &Emit, name: &str, out: &str, via: &str) -> Result<String> {
    let x = e.operand(name, out)?;
    e.cast(&x, out, via)
}

fn unary(e: &Emit, op: &str) -> Result<String> {
    let out = e.output_meta()?.dtype;
    let via = kernel_dtype(&out);
    let x = operand(e, "self", &out, via)?;
    let result = e.op(op, &[&x])?;
    e.cast(&result, via, &out)
}

/// `atan2(y=self, x=other)` from Atan (ONNX has no Atan2): `atan(y / x)`, plus
/// π when x is negative and y is not, minus π when both are, a zero's sign
/// counting as in torch (−0 is negative); y = x = 0 gives 0 (or ±π for
/// x = −0) and infinite y and x a multiple of π/4, instead of atan(NaN).
fn atan2(e: &Emit) -> Result<String> {
    let out = e.output_meta()?.dtype;
    // float16 too: several steps, rounded once at the end as torch does;
    // float64 only goes through float32 for Atan
    let via = if out == "float64" { "float64" } else { "float32" };
    let y = operand(e, "self", &out, via)?;
    let x = operand(e, "other", &out, via)?;
    let zero = e.scalar(0.0, via)?;
    let pi = e.scalar(std::f64::consts::PI, via)?;
    let both_zero = e.op("And", &[&e.op("Equal", &[&x, &zero])?, &e.op("Equal", &[&y, &zero])?])?;
    // both infinite: the signs alone decide (±π/4, ±3π/4)
    let both_infinite = e.op("And", &[&e.op("IsInf", &[&x])?, &e.op("IsInf", &[&y])?])?;
    let finite =
        |v: &str| -> Result<String> { e.op("Where", &[&both_infinite, &e.op("Sign", &[v])?, v]) };
    let ratio = e.op("Div", &[&finite(&y)?, &finite(&x)?])?;
    let ratio = e.op("Where", &[&both_zero, &zero, &ratio])?;
    let angle = e.cast(&e.op("Atan", &[&e.cast(&ratio, via, "float32")?])?, "float32", via)?;
    // v < 0, or −0 (whose reciprocal is −∞; −∞'s is −0, hence both tests)
    let negative = |v: &str| -> Result<String> {
        e.op(
            "Or",
            &[&e.op("Less", &[v, &zero])?, &e.op("Less", &[&e.op("Reciprocal", &[v])?, &zero])?],
        )
    };
    let x_negative = negative(&x)?;
    let y_negative = negative(&y)?;
    let turn = e.op("Where", &[&y_negative, &e.op("Neg", &[&pi])?, &pi])?;
    let shifted = e.op("Add", &[&angle, &turn])?;
    let result = e.op("Where", &[&x_negative, &shifted, &angle])?;
    e.cast(&result, via, &out)
}
