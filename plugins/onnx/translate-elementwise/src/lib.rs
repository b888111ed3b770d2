//! Elementwise ATen ops and casts → ONNX. Operands are cast to the output's
//! dtype (or, for comparisons, to their common dtype), which is how torch's
//! type promotion reaches ONNX, whose ops take one type.

use hfx_sdk::prelude::*;

struct Elementwise;

const TARGETS: &[&str] = &[
    // arithmetic
    "aten.add.Tensor", "aten.add.Scalar", "aten.sub.Tensor", "aten.sub.Scalar", "aten.rsub.Scalar", "aten.rsub.Tensor",
    "aten.mul.Tensor", "aten.mul.Scalar", "aten.div.Tensor", "aten.div.Scalar",
    "aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.maximum.default", "aten.minimum.default",
    "aten.max.other", "aten.min.other", "aten.floor_divide.default", "aten.floor_divide.Scalar",
    // comparisons
    "aten.lt.Tensor", "aten.lt.Scalar", "aten.le.Tensor", "aten.le.Scalar", "aten.gt.Tensor", "aten.gt.Scalar",
    "aten.ge.Tensor", "aten.ge.Scalar", "aten.eq.Tensor", "aten.eq.Scalar", "aten.ne.Tensor", "aten.ne.Scalar",
    // logic
    "aten.logical_not.default", "aten.bitwise_not.default", "aten.__and__.Tensor", "aten.bitwise_and.Tensor",
    "aten.logical_and.default", "aten.__or__.Tensor", "aten.bitwise_or.Tensor", "aten.logical_or.default",
    // unary
    "aten.neg.default", "aten.rsqrt.default", "aten.sqrt.default", "aten.cos.default", "aten.sin.default",
    "aten.exp.default", "aten.log.default", "aten.tanh.default", "aten.sigmoid.default", "aten.relu.default",
    "aten.abs.default", "aten.reciprocal.default", "aten.erf.default", "aten.silu.default", "aten.gelu.default",
    "aten.clamp.default", "aten.clamp_min.default", "aten.clamp_max.default",
    // selection
    "aten.where.self", "aten.where.ScalarOther", "aten.where.ScalarSelf", "aten.where.Scalar", "aten.masked_fill.Scalar", "aten.masked_fill.Tensor",
    // casts and identities
    "aten.to.dtype", "aten.to.dtype_layout", "aten.to.device", "aten._to_copy.default", "aten.type_as.default",
    "aten.clone.default", "aten.contiguous.default", "aten.detach.default", "aten.detach_.default",
    "aten.alias.default", "aten.lift_fresh_copy.default", "aten.dropout.default",
    "aten._assert_tensor_metadata.default",
];

fn binary(op: &str) -> Option<&'static str> {
    Some(match op {
        "add" => "Add",
        "sub" | "rsub" => "Sub",
        "mul" => "Mul",
        "div" => "Div",
        "pow" => "Pow",
        "maximum" | "max" => "Max",
        "minimum" | "min" => "Min",
        _ => return None,
    })
}

fn comparison(op: &str) -> Option<&'static str> {
    Some(match op {
        "lt" => "Less",
        "le" => "LessOrEqual",
        "gt" => "Greater",
        "ge" => "GreaterOrEqual",
        "eq" | "ne" => "Equal",
        _ => return None,
    })
}

fn unary(op: &str) -> Option<&'static str> {
    Some(match op {
        "neg" => "Neg",
        "sqrt" => "Sqrt",
        "cos" => "Cos",
        "sin" => "Sin",
        "exp" => "Exp",
        "log" => "Log",
        "tanh" => "Tanh",
        "sigmoid" => "Sigmoid",
        "relu" => "Relu",
        "abs" => "Abs",
        "reciprocal" => "Reciprocal",
        "erf" => "Erf",
        _ => return None,
    })
}

/// The name of the second operand: `other` or `exponent`.
fn second_operand(e: &Emit) -> Result<&'static str, Error> {
    Ok(if e.arg("other")?.is_some() { "other" } else { "exponent" })
}

/// The dtype two operands are compared in: a floating one if either is.
fn comparison_dtype(e: &Emit) -> Result<String, Error> {
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

fn translate_node(e: &Emit, target: &str) -> Result<(), Error> {
    let op = target.split('.').nth(1).unwrap_or("");
    if target == "aten._assert_tensor_metadata.default" {
        return Ok(()); // a check torch.export keeps; no value
    }
    if let Some(onnx) = binary(op) {
        let out = e.output_meta()?.dtype;
        let x = e.operand("self", &out)?;
        let mut y = e.operand(second_operand(e)?, &out)?;
        let alpha = e.float("alpha", 1.0)?;
        if alpha != 1.0 {
            let a = e.scalar(alpha, &out)?;
            y = e.op("Mul", &[&y, &a], &[])?;
        }
        let result = if op == "rsub" { e.op(onnx, &[&y, &x], &[])? } else { e.op(onnx, &[&x, &y], &[])? };
        return e.bind_output(&result);
    }
    if let Some(onnx) = comparison(op) {
        let dtype = comparison_dtype(e)?;
        let x = e.operand("self", &dtype)?;
        let y = e.operand("other", &dtype)?;
        let mut result = e.op(onnx, &[&x, &y], &[])?;
        if op == "ne" {
            result = e.op("Not", &[&result], &[])?;
        }
        return e.bind_output(&result);
    }
    if let Some(onnx) = unary(op) {
        let out = e.output_meta()?.dtype;
        let x = e.operand("self", &out)?;
        let result = e.op(onnx, &[&x], &[])?;
        return e.bind_output(&result);
    }
    let result = match op {
        "floor_divide" => {
            let out = e.output_meta()?.dtype;
            e.floor_div(&e.operand("self", &out)?, &e.operand("other", &out)?, &out)?
        }
        "rsqrt" => {
            let out = e.output_meta()?.dtype;
            let x = e.operand("self", &out)?;
            let root = e.op("Sqrt", &[&x], &[])?;
            e.op("Reciprocal", &[&root], &[])?
        }
        "silu" => {
            let x = e.tensor("self")?;
            let gate = e.op("Sigmoid", &[&x], &[])?;
            e.op("Mul", &[&x, &gate], &[])?
        }
        "gelu" => gelu(e)?,
        "clamp" | "clamp_min" | "clamp_max" => {
            let out = e.output_meta()?.dtype;
            let x = e.operand("self", &out)?;
            let bound = |name: &str| -> Result<String, Error> {
                match e.arg(name)? {
                    None | Some(Argument::None) => Ok(String::new()),
                    Some(_) => e.operand(name, &out),
                }
            };
            let (low, high) = match op {
                "clamp_min" => (e.operand("min", &out)?, String::new()),
                "clamp_max" => (String::new(), e.operand("max", &out)?),
                _ => (bound("min")?, bound("max")?),
            };
            e.op("Clip", &[&x, &low, &high], &[])?
        }
        "logical_not" | "bitwise_not" => {
            let x = e.operand("self", "bool")?;
            if e.output_meta()?.dtype != "bool" {
                return Err(e.fail("bitwise_not of an integer tensor is not translated yet"));
            }
            e.op("Not", &[&x], &[])?
        }
        "__and__" | "bitwise_and" | "logical_and" | "__or__" | "bitwise_or" | "logical_or" => {
            if e.output_meta()?.dtype != "bool" {
                return Err(e.fail("bitwise ops on integer tensors are not translated yet"));
            }
            let x = e.operand("self", "bool")?;
            let y = e.operand("other", "bool")?;
            e.op(if op.contains("and") { "And" } else { "Or" }, &[&x, &y], &[])?
        }
        "where" => {
            let out = e.output_meta()?.dtype;
            let condition = e.operand("condition", "bool")?;
            let x = e.operand("self", &out)?;
            let y = e.operand("other", &out)?;
            e.op("Where", &[&condition, &x, &y], &[])?
        }
        "masked_fill" if e.output_meta()?.dtype == "bool" => {
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
                e.op("Or", &[&x, &mask], &[])?
            } else {
                let keep = e.op("Not", &[&mask], &[])?;
                e.op("And", &[&x, &keep], &[])?
            }
        }
        "masked_fill" => {
            let out = e.output_meta()?.dtype;
            let mask = e.operand("mask", "bool")?;
            let value = e.operand("value", &out)?;
            let x = e.operand("self", &out)?;
            e.op("Where", &[&mask, &value, &x], &[])?
        }
        "to" | "_to_copy" | "type_as" => {
            let out = e.output_meta()?.dtype;
            let from = e.input_meta("self")?.dtype;
            let x = e.tensor("self")?;
            if from == out { e.op("Identity", &[&x], &[])? } else { e.cast(&x, &from, &out)? }
        }
        "clone" | "contiguous" | "detach" | "detach_" | "alias" | "lift_fresh_copy" | "dropout" => {
            let x = e.tensor(if op == "dropout" { "input" } else { "self" })?;
            e.op("Identity", &[&x], &[])?
        }
        _ => return Err(e.fail(format!("{target} is not translated by this plugin"))),
    };
    e.bind_output(&result)
}

/// gelu: exact (erf) or the tanh approximation.
fn gelu(e: &Emit) -> Result<String, Error> {
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
        let cube = e.op("Pow", &[&x, &three], &[])?;
        let c = e.scalar(0.044715, &dtype)?;
        let scaled = e.op("Mul", &[&cube, &c], &[])?;
        let sum = e.op("Add", &[&x, &scaled], &[])?;
        let k = e.scalar((2.0 / std::f64::consts::PI).sqrt(), &dtype)?;
        let arg = e.op("Mul", &[&sum, &k], &[])?;
        e.op("Tanh", &[&arg], &[])?
    } else {
        let k = e.scalar(std::f64::consts::FRAC_1_SQRT_2, &dtype)?;
        let arg = e.op("Mul", &[&x, &k], &[])?;
        e.op("Erf", &[&arg], &[])?
    };
    let plus = e.op("Add", &[&inner, &one], &[])?;
    let halfx = e.op("Mul", &[&x, &half], &[])?;
    e.op("Mul", &[&halfx, &plus], &[])
}

impl Guest for Elementwise {
    fn describe() -> Vec<String> {
        targets(TARGETS)
    }

    fn translate(graph: &Graph, node: NodeId, builder: &Builder) -> Result<(), Error> {
        let target = graph.target(node)?;
        translate_node(&Emit::new(graph, node, builder), &target)
    }
}

hfx_sdk::register_onnx_translation!(Elementwise);
