//! Symbolic-size arithmetic (`_operator.*`, `torch.sym_min/max`) → ONNX on 0-d
//! int64 values, and the ops that make such a value of a tensor (`numel`,
//! `.item()`). `floordiv` floors toward -inf as Python does (ONNX `Div`
//! truncates): `(a - a mod b) / b`, where `mod` takes the divisor's sign (as
//! Python's and ONNX's `Mod(fmod=0)` do), so the division is exact: three
//! nodes where the reference's `_operator_floordiv` (trunc(a/b) minus a sign
//! correction) takes eight. `a - a mod b` cannot overflow for a size (it is
//! nowhere near i64::MIN); tensors' `floor_divide` keeps the sign correction.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "_operator.add" => |e| ints(e, "Add"),
    "_operator.sub" => |e| ints(e, "Sub"),
    "_operator.mul" => |e| ints(e, "Mul"),
    "_operator.floordiv" => floordiv,
    "_operator.mod" => |e| e.op_with("Mod", &[&int(e, "a")?, &int(e, "b")?], &[attr("fmod", Attribute::Int(0))]),
    "_operator.neg" => |e| e.op("Neg", &[&int(e, "a")?]),
    "_operator.pow" => |e| in_output_type(e, "Pow"),
    "_operator.truediv" => |e| in_output_type(e, "Div"),
    "_operator.eq" => |e| ints(e, "Equal"),
    "_operator.ne" => |e| e.op("Not", &[&ints(e, "Equal")?]),
    "_operator.lt" => |e| ints(e, "Less"),
    "_operator.le" => |e| ints(e, "LessOrEqual"),
    "_operator.gt" => |e| ints(e, "Greater"),
    "_operator.ge" => |e| ints(e, "GreaterOrEqual"),
    "torch.sym_min" => |e| ints(e, "Min"),
    "torch.sym_max" => |e| ints(e, "Max"),
    "torch.sym_not" => |e| e.op("Not", &[&e.operand("a", "bool")?]),
    "_operator.and_" => |e| bools(e, "And"),
    "_operator.or_" => |e| bools(e, "Or"),
    "aten.sym_numel.default" => |e| e.op("Size", &[&e.tensor("self")?]),
    "aten._local_scalar_dense.default" => local_scalar_dense,
}

/// `a // b` of two sizes: exact division of `a - a mod b`.
fn floordiv(e: &Emit) -> Result<String> {
    let (a, b) = (int(e, "a")?, int(e, "b")?);
    let rest = e.op_with("Mod", &[&a, &b], &[attr("fmod", Attribute::Int(0))])?;
    e.op("Div", &[&e.op("Sub", &[&a, &rest])?, &b])
}

/// Operand `name` as a 0-d int64.
fn int(e: &Emit, name: &str) -> Result<String> {
    e.operand(name, "int64")
}

/// `op(a, b)` of two sizes.
fn ints(e: &Emit, op: &str) -> Result<String> {
    e.op(op, &[&int(e, "a")?, &int(e, "b")?])
}

/// `op(a, b)` in the output's type: a sym-int's `Pow` in int64, a sym-float's
/// (`n ** 0.5`, `a / b`) in float32, as `.item()` gives sym-floats.
fn in_output_type(e: &Emit, op: &str) -> Result<String> {
    let output = *e.graph.output_values(e.node)?.first().ok_or_else(|| e.fail("no output"))?;
    let dtype = match e.graph.value_meta(output)? {
        ValueMeta::SymInt(_) => "int64",
        ValueMeta::SymFloat(_) => "float32",
        other => return Err(e.fail(format!("`{op}` of sizes giving {other:?}"))),
    };
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
