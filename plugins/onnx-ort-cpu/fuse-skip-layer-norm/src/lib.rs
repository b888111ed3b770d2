//! A layer norm of a residual sum as ONNX Runtime's fused one:
//! `LayerNormalization(Add(a, b), gamma, beta)` over the last axis becomes
//! `com.microsoft::SkipLayerNormalization(a, b, gamma, beta)`, whose fourth
//! output is the sum for its other readers (the next residual). The sum's
//! two inputs must be tensors of one shape (2-D or 3-D) and of the norm's
//! type; a norm without its mean and inverse deviation read is all it takes.

use hfx_sdk::prelude::*;

#[hfx_sdk::onnx_ir_fix(targets = ["LayerNormalization"])]
fn fuse_skip_layer_norm(model: &Model, norm: OnnxNodeId) -> Result<bool> {
    if !model.is_default_domain(norm)? {
        return Ok(false);
    }
    let inputs = model.inputs(norm)?;
    let outputs = model.outputs(norm)?;
    // Only the normalized output may be read (ORT's outputs 1 and 2 differ).
    if outputs.iter().skip(1).any(|o| !o.is_empty() && !model.consumers(o).is_empty()) {
        return Ok(false);
    }
    let [sum, gamma, rest @ ..] = inputs.as_slice() else { return Ok(false) };
    let Some(add) = model.producer(sum) else { return Ok(false) };
    if model.op_type(add)? != "Add" || !model.is_default_domain(add)? {
        return Ok(false);
    }
    let add_inputs = model.inputs(add)?;
    let [a, b] = add_inputs.as_slice() else { return Ok(false) };
    let Some(shape) = model.value_type(sum).and_then(|t| t.shape) else { return Ok(false) };
    let rank = shape.len() as i64;
    if !(2..=3).contains(&rank) || !over_last_axis(model, norm, rank)? {
        return Ok(false);
    }
    let same = |v: &str| {
        let t = model.value_type(v);
        t.as_ref().and_then(|t| t.shape.clone()) == Some(shape.clone())
            && t.map(|t| t.elem_type) == model.value_type(gamma).map(|t| t.elem_type)
    };
    let computed = |v: &str| model.producer(v).is_some() || model.is_graph_input(v);
    if !same(a) || !same(b) || !computed(a) || !computed(b) {
        return Ok(false);
    }
    let epsilon = match model.attribute(norm, "epsilon")? {
        Some(Attribute::Float(e)) => e,
        _ => 1e-5,
    };
    let others = model.is_graph_output(sum) || model.consumers(sum).iter().any(|r| *r != norm);
    model.import_opset("com.microsoft", 1)?;
    let hint = |s: &str| format!("{}_{s}", outputs[0]);
    let mut fused_inputs = vec![a.clone(), b.clone(), gamma.clone()];
    fused_inputs.extend(rest.first().cloned());
    let (_, fused) = model.add_node(
        "SkipLayerNormalization",
        "com.microsoft",
        &fused_inputs,
        &[
            hint("fused"),
            String::new(),
            String::new(),
            if others { hint("sum") } else { String::new() },
        ],
        &[NamedAttribute { name: "epsilon".into(), value: Attribute::Float(epsilon) }],
    )?;
    if others {
        model.replace_uses(sum, &fused[3])?;
    }
    model.replace_uses(&outputs[0], &fused[0])?;
    model.remove_node(norm)?;
    model.remove_node(add)?;
    Ok(true)
}

/// Whether the norm normalizes the last axis only (`axis` -1 or rank-1).
fn over_last_axis(model: &Model, norm: OnnxNodeId, rank: i64) -> Result<bool> {
    Ok(match model.attribute(norm, "axis")? {
        None => true,
        Some(Attribute::Int(a)) => a == -1 || a == rank - 1,
        Some(_) => false,
    })
}
