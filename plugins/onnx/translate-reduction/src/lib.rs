//! Reductions and softmax → ONNX (opset 18+: axes are an input).

use hfx_sdk::prelude::*;

struct Reduction;

const TARGETS: &[&str] = &[
    "aten.mean.dim", "aten.mean.default", "aten.sum.dim_IntList", "aten.sum.default", "aten.amax.default",
    "aten.amin.default", "aten.softmax.int", "aten._softmax.default", "aten.log_softmax.int",
    "aten._log_softmax.default", "aten.cumsum.default",
];

fn reduce(e: &Emit, onnx: &str) -> Result<String, Error> {
    let out = e.output_meta()?.dtype;
    // A sum of bools counts: reduce in the output's dtype.
    let x = e.operand("self", &out)?;
    let keepdim = e.boolean("keepdim", false)?;
    let dims = match e.arg("dim")? {
        None | Some(Argument::None) => vec![],
        _ => e.ints("dim")?,
    };
    let mut inputs = vec![x];
    if !dims.is_empty() {
        inputs.push(e.const_ints(&dims)?);
    }
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    e.op(onnx, &refs, &[attr("keepdims", Attribute::Int(keepdim as i64))])
}

fn translate_node(e: &Emit, target: &str) -> Result<(), Error> {
    let op = target.split('.').nth(1).unwrap_or("");
    let result = match op {
        "mean" => reduce(e, "ReduceMean")?,
        "sum" => reduce(e, "ReduceSum")?,
        "amax" => reduce(e, "ReduceMax")?,
        "amin" => reduce(e, "ReduceMin")?,
        "softmax" | "_softmax" | "log_softmax" | "_log_softmax" => {
            let out = e.output_meta()?.dtype;
            let x = e.operand("self", &out)?;
            let onnx = if op.contains("log") { "LogSoftmax" } else { "Softmax" };
            e.op(onnx, &[&x], &[attr("axis", Attribute::Int(e.int("dim", -1)?))])?
        }
        "cumsum" => {
            let out = e.output_meta()?.dtype;
            let x = e.operand("self", &out)?;
            let axis = e.scalar(e.int("dim", 0)? as f64, "int64")?;
            e.op("CumSum", &[&x, &axis], &[])?
        }
        _ => return Err(e.fail(format!("{target} is not translated by this plugin"))),
    };
    e.bind_output(&result)
}

impl Guest for Reduction {
    fn describe() -> Vec<String> {
        targets(TARGETS)
    }

    fn translate(graph: &Graph, node: NodeId, builder: &Builder) -> Result<(), Error> {
        let target = graph.target(node)?;
        translate_node(&Emit::new(graph, node, builder), &target)
    }
}

hfx_sdk::register_onnx_translation!(Reduction);
