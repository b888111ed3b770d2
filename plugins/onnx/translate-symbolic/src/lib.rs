//! Symbolic-size arithmetic (`_operator.*`, `torch.sym_min/max`) → ONNX on 0-d
//! int64 values. `floordiv` floors toward -inf as Python does (ONNX `Div`
//! truncates): trunc(a/b) - (sign(a) != sign(b) and a mod b != 0), as the
//! reference's `_operator_floordiv`; `mod` takes the divisor's sign, as Python's.

use hfx_sdk::prelude::*;

hfx_sdk::onnx_translations! {
    "_operator.add" => |e| ints(e, "Add"),
    "_operator.sub" => |e| ints(e, "Sub"),
    "_operator.mul" => |e| ints(e, "Mul"),
    "_operator.floordiv" => |e| e.floor_div(&int(e, "a")?, &int(e, "b")?, "int64"),
    "_operator.mod" => |e| e.op_with("Mod", &[&int(e, "a")?, &int(e, "b")?], &[attr("fmod", Attribute::Int(0))]),
    "_operator.neg" => |e| e.op("Neg", &[&int(e, "a")?]),
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
}

/// Operand `name` as a 0-d int64.
fn int(e: &Emit, name: &str) -> Result<String> {
    e.operand(name, "int64")
}

/// `op(a, b)` of two sizes.
fn ints(e: &Emit, op: &str) -> Result<String> {
    e.op(op, &[&int(e, "a")?, &int(e, "b")?])
}

/// `op(a, b)` of two bools.
fn bools(e: &Emit, op: &str) -> Result<String> {
    let (a, b) = (e.operand("a", "bool")?, e.operand("b", "bool")?);
    e.op(op, &[&a, &b])
}
