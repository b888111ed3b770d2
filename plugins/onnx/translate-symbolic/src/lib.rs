//! Symbolic-size arithmetic (`_operator.*`, `torch.sym_min/max`) → ONNX on 0-d
//! values, and the ops that make such a value of a tensor (`numel`,
//! `.item()`). A sym-int is an int64, a sym-float (`n / 3`, `sym_float(n)`)
//! a float32, as `.item()` gives them; arithmetic is computed in its output's
//! type, comparisons in their operands'. `floordiv` floors toward -inf as
//! Python does (ONNX `Div` truncates): for sizes `(a - a mod b) / b`, where
//! `mod` takes the divisor's sign (as Python's and ONNX's `Mod(fmod=0)` do),
//! so the division is exact: three nodes where the reference's
//! `_operator_floordiv` (trunc(a/b) minus a sign correction) takes eight.
//! `a - a mod b` cannot overflow for a size (it is nowhere near i64::MIN);
//! tensors' `floor_divide` keeps the sign correction. `math.floor`/`ceil`
//! reach here as `sym_int(x // 1)` and `-sym_int(-x // 1)`, the forms torch's
//! `.pt2` serializer takes (the worker's `checkpoint.rounding_serializable`).

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "_operator.add" => |e| in_output_type(e, "Add"),
    "_operator.sub" => |e| in_output_type(e, "Sub"),
    "_operator.mul" => |e| in_output_type(e, "Mul"),
    "_operator.floordiv" => floordiv,
    "_operator.mod" => modulo,
    "_operator.neg" => |e| e.op("Neg", &[&e.operand("a", output_type(e)?)?]),
    "_operator.pow" => |e| in_output_type(e, "Pow"),
    "_operator.truediv" => |e| in_output_type(e, "Div"),
    "_operator.eq" => |e| compared(e, "Equal"),
    "_operator.ne" => |e| e.op("Not", &[&compared(e, "Equal")?]),
    "_operator.lt" => |e| compared(e, "Less"),
    "_operator.le" => |e| compared(e, "LessOrEqual"),
    "_operator.gt" => |e| compared(e, "Greater"),
    "_operator.ge" => |e| compared(e, "GreaterOrEqual"),
    "torch.sym_min" => |e| in_output_type(e, "Min"),
    "torch.sym_max" => |e| in_output_type(e, "Max"),
    "torch.sym_not" => |e| e.op("Not", &[&e.operand("a", "bool")?]),
    // ONNX's `Cast` of a float to an integer truncates toward zero, as
    // Python's `int` does (ONNX Runtime and OpenVINO's CPU plugin alike).
    "torch.sym_int" => |e| e.operand("a", "int64"),
    "math.trunc" => |e| e.operand("x", "int64"),
    "torch.sym_float" => |e| e.operand("a", "float32"),
    "_operator.and_" => |e| bools(e, "And"),
    "_operator.or_" => |e| bools(e, "Or"),
    "aten.sym_numel.default" => |e| e.op("Size", &[&e.tensor("self")?]),
    "aten._local_scalar_dense.default" => local_scalar_dense,
}

/// `a // b`: of two sizes, exact division of `a - a mod b`; of floats,
/// `Floor(a / b)`.
fn floordiv(e: &Emit) -> Result<String> {
    let dtype = output_type(e)?;
    let (a, b) = (e.operand("a", dtype)?, e.operand("b", dtype)?);
    if dtype != "int64" {
        return e.floor_div(&a, &b, dtype);
    }
    let rest = e.op_with("Mod", &[&a, &b], &[attr("fmod", Attribute::Int(0))])?;
    e.op("Div", &[&e.op("Sub", &[&a, &rest])?, &b])
}

/// `a % b` with the divisor's sign, as Python's: ONNX's `Mod(fmod=0)` of
/// sizes; of floats (where ONNX allows only `fmod=1`, C's sign),
/// `a - b * Floor(a / b)`.
fn modulo(e: &Emit) -> Result<String> {
    let dtype = output_type(e)?;
    let (a, b) = (e.operand("a", dtype)?, e.operand("b", dtype)?);
    if dtype == "int64" {
        return e.op_with("Mod", &[&a, &b], &[attr("fmod", Attribute::Int(0))]);
    }
    let whole = e.op("Mul", &[&b, &e.floor_div(&a, &b, dtype)?])?;
    e.op("Sub", &[&a, &whole])
}

/// The ONNX type of the node's symbolic output: int64 for a sym-int, float32
/// for a sym-float, bool for a sym-bool.
fn output_type(e: &Emit) -> Result<&'static str> {
    let output = *e.graph.output_values(e.node)?.first().ok_or_else(|| e.fail("no output"))?;
    match e.graph.value_meta(output)? {
        ValueMeta::SymInt(_) => Ok("int64"),
        ValueMeta::SymFloat(_) => Ok("float32"),
        ValueMeta::SymBool(_) => Ok("bool"),
        other => Err(e.fail(format!("a size's arithmetic giving {other:?}"))),
    }
}

/// `op(a, b)` in the output's type (`n * 2` in int64, `sym_float(n) * 0.5`
/// in float32).
fn in_output_type(e: &Emit, op: &str) -> Result<String> {
    let dtype = output_type(e)?;
    e.op(op, &[&e.operand("a", dtype)?, &e.operand("b", dtype)?])
}

/// `op(a, b)` of a comparison: in float32 when either operand is a float, so
/// `n / 3 > 2` is not `2 > 2`; else in int64.
fn compared(e: &Emit, op: &str) -> Result<String> {
    let is_float = |name| {
        Ok::<_, Error>(matches!(e.arg(name)?, Some(Argument::Float(_) | Argument::SymFloat(_))))
    };
    let dtype = if is_float("a")? || is_float("b")? { "float32" } else { "int64" };
    e.op(op, &[&e.operand("a", dtype)?, &e.operand("b", dtype)?])
}

/// `op(a, b)` of two bools.
fn bools(e: &Emit, op: &str) -> Result<String> {
    let (a, b) = (e.operand("a", "bool")?, e.operand("b", "bool")?);
    e.op(op, &[&a, &b])
}

/// `.item()`: the one element of `self` as a 0-d value of the scalar's ONNX
/// type (a sym-int is int64, a sym-float float32, a sym-bool bool).
fn local_scalar_dense(e: &Emit) -> Result<String> {
    let from = e.input_meta("self")?.dtype;
    let output = *e.graph.output_values(e.node)?.first().ok_or_else(|| e.fail("no output"))?;
    let to = match e.graph.value_meta(output)? {
        ValueMeta::SymInt(_) => "int64".to_string(),
        ValueMeta::SymFloat(_) => "float32".to_string(),
        ValueMeta::SymBool(_) => "bool".to_string(),
        ValueMeta::Tensor(meta) => meta.dtype,
        ValueMeta::Opaque(kind) => return Err(e.fail(format!("_local_scalar_dense to a {kind}"))),
    };
    let scalar = e.op("Reshape", &[&e.tensor("self")?, &e.const_ints(&[])?])?;
    e.cast(&scalar, &from, &to)
}
