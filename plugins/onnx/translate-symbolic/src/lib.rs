//! Symbolic-size arithmetic (`_operator.*`, `torch.sym_min/max`) → ONNX on 0-d
//! int64 values. `floordiv` floors toward -inf as Python does (ONNX `Div`
//! truncates): trunc(a/b) - (sign(a) != sign(b) and a mod b != 0), as the
//! reference's `_operator_floordiv`; `mod` takes the divisor's sign, as Python's.

use hfx_sdk::prelude::*;

struct Symbolic;

const TARGETS: &[&str] = &[
    "_operator.add", "_operator.sub", "_operator.mul", "_operator.floordiv", "_operator.mod", "_operator.neg",
    "_operator.eq", "_operator.ne", "_operator.lt", "_operator.le", "_operator.gt", "_operator.ge",
    "torch.sym_min", "torch.sym_max", "torch.sym_not", "_operator.and_", "_operator.or_",
];

fn translate_node(e: &Emit, target: &str) -> Result<(), Error> {
    let op = target.rsplit('.').next().unwrap_or("");
    let int = |name: &str| e.operand(name, "int64");
    let result = match op {
        "add" | "sub" | "mul" => {
            let onnx = match op {
                "add" => "Add",
                "sub" => "Sub",
                _ => "Mul",
            };
            e.op(onnx, &[&int("a")?, &int("b")?], &[])?
        }
        "neg" => e.op("Neg", &[&int("a")?], &[])?,
        "floordiv" => e.floor_div(&int("a")?, &int("b")?, "int64")?,
        "mod" => e.op("Mod", &[&int("a")?, &int("b")?], &[attr("fmod", Attribute::Int(0))])?,
        "sym_min" => e.op("Min", &[&int("a")?, &int("b")?], &[])?,
        "sym_max" => e.op("Max", &[&int("a")?, &int("b")?], &[])?,
        "eq" | "ne" | "lt" | "le" | "gt" | "ge" => {
            let onnx = match op {
                "eq" | "ne" => "Equal",
                "lt" => "Less",
                "le" => "LessOrEqual",
                "gt" => "Greater",
                _ => "GreaterOrEqual",
            };
            let r = e.op(onnx, &[&int("a")?, &int("b")?], &[])?;
            if op == "ne" { e.op("Not", &[&r], &[])? } else { r }
        }
        "sym_not" => e.op("Not", &[&e.operand("a", "bool")?], &[])?,
        "and_" | "or_" => {
            let (a, b) = (e.operand("a", "bool")?, e.operand("b", "bool")?);
            e.op(if op == "and_" { "And" } else { "Or" }, &[&a, &b], &[])?
        }
        _ => return Err(e.fail(format!("{target} is not translated by this plugin"))),
    };
    e.bind_output(&result)
}

impl Guest for Symbolic {
    fn describe() -> Vec<String> {
        targets(TARGETS)
    }

    fn translate(graph: &Graph, node: NodeId, builder: &Builder) -> Result<(), Error> {
        let target = graph.target(node)?;
        translate_node(&Emit::new(graph, node, builder), &target)
    }
}

hfx_sdk::register_onnx_translation!(Symbolic);
