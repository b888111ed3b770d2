//! A mixture-of-experts block as ONNX Runtime's `com.microsoft::MoE`, which
//! routes the tokens itself from the router's logits. The pattern is
//! transformers' `batched_mm` experts (the trace runs experts so with
//! `--ort-fusions cuda`) behind a softmax / top-k router:
//!
//! ```text
//! weights, ids = TopK(Softmax(logits), k)      [Div(·, ReduceSum(·)): renormalized]
//!              | Softmax(TopK(logits, k))      (renormalized too)
//! rows   = Reshape(Expand(Unsqueeze(tokens, 1)))          (each token k times)
//! ids'   = Reshape(ids, [-1])
//! up     = Squeeze(MatMul(Gather(gate_up_proj, ids'), Unsqueeze(rows, -1)), -1)
//! gate, u = Split(up, 2, axis -1);  act = gate * Sigmoid(gate) * u
//! down   = Squeeze(MatMul(Gather(down_proj, ids'), Unsqueeze(act, -1)), -1)
//! out    = ReduceSum(Reshape(Mul(down, Unsqueeze(Reshape(weights, [-1]), -1))), axes [1], keepdims 0)
//! ```
//!
//! (casts around the router's float32 softmax and the weighting stepped
//! over) becomes `MoE(tokens, logits, gate weights, -, down_proj, -, up
//! weights)` with `k`, `normalize_routing_weights` and `activation_type =
//! silu`: the experts' `[experts, out, in]` weights are ONNX Runtime's
//! layout; gate and up are the two halves of `gate_up_proj`, split by a
//! `Split` (of an initializer in a model, which ONNX Runtime folds when it
//! loads it). Gated SiLU only, no biases: the reference's rewrite
//! (`_fuse_mixture_of_experts`) takes the same. ONNX Runtime's CPU `MoE`
//! has no separate up weights (`fc3`): the fused model is for its CUDA
//! provider. Targets `ReduceSum`.

use hfx_sdk::prelude::*;

#[hfx_sdk::onnx_ir_fix(targets = ["ReduceSum"])]
fn fuse_mixture_of_experts(model: &Model, combine: OnnxNodeId) -> Result<bool> {
    let Some(m) = match_block(model, combine)? else { return Ok(false) };
    model.import_opset("com.microsoft", 1)?;
    let out = model.first_output(combine)?;
    let hint = |s: &str| format!("{out}_{s}");
    let (_, halves) = model.add_node(
        "Split",
        "",
        std::slice::from_ref(&m.gate_up),
        &[hint("experts_gate"), hint("experts_up")],
        &[
            NamedAttribute { name: "axis".into(), value: Attribute::Int(1) },
            NamedAttribute { name: "num_outputs".into(), value: Attribute::Int(2) },
        ],
    )?;
    let (gate, up) = if m.gate_first {
        (halves[0].clone(), halves[1].clone())
    } else {
        (halves[1].clone(), halves[0].clone())
    };
    let (_, fused) = model.add_node(
        "MoE",
        "com.microsoft",
        &[m.tokens.clone(), m.logits, gate, String::new(), m.down, String::new(), up],
        &[hint("moe")],
        &[
            NamedAttribute { name: "k".into(), value: Attribute::Int(m.k) },
            NamedAttribute {
                name: "normalize_routing_weights".into(),
                value: Attribute::Int(m.normalize),
            },
            NamedAttribute { name: "activation_type".into(), value: Attribute::Str("silu".into()) },
        ],
    )?;
    // A float16 model may sum its experts in float32: the sum's type kept.
    let mut result = fused[0].clone();
    if let (Some(summed), Some(moe)) = (model.value_type(&out), model.value_type(&m.tokens)) {
        if summed.elem_type != moe.elem_type {
            let to = NamedAttribute {
                name: "to".into(),
                value: Attribute::Int(summed.elem_type.into()),
            };
            result = model.add_node("Cast", "", &[result], &[hint("moe_cast")], &[to])?.1.remove(0);
        }
    }
    model.replace_uses(&out, &result)?;
    model.remove_rerouted(combine)?;
    Ok(true)
}

/// A block found: its tokens `[rows, hidden]`, the router's logits `[rows,
/// experts]`, the experts' weights and the routing.
struct Block {
    tokens: String,
    logits: String,
    gate_up: String,
    down: String,
    gate_first: bool,
    k: i64,
    normalize: i64,
}

/// The op producing `value`, if it is `op` of the default domain.
fn producer_of(model: &Model, value: &str, op: &str) -> Result<Option<OnnxNodeId>> {
    let Some(node) = model.producer(value) else { return Ok(None) };
    Ok((model.op_type(node)? == op && model.is_default_domain(node)?).then_some(node))
}

/// `value` before a `Cast`, if a `Cast` makes it.
fn uncast(model: &Model, value: &str) -> Result<String> {
    Ok(match producer_of(model, value, "Cast")? {
        Some(cast) => model.inputs(cast)?[0].clone(),
        None => value.to_string(),
    })
}

fn input(model: &Model, node: OnnxNodeId, index: usize) -> Result<Option<String>> {
    Ok(model.inputs(node)?.get(index).cloned().filter(|v| !v.is_empty()))
}

/// Whether `node` reshapes, squeezes or unsqueezes along the axes `axes`
/// (a constant input or, before opset 13, an attribute).
fn axes_are(model: &Model, node: OnnxNodeId, axes: &[&[i64]]) -> Result<bool> {
    let found = match input(model, node, 1)? {
        Some(value) => model.ints(&value),
        None => match model.attribute(node, "axes")? {
            Some(Attribute::Ints(a)) => Some(a),
            _ => None,
        },
    };
    Ok(found.is_some_and(|f| axes.iter().any(|a| f == *a)))
}

/// `(rows, weights, ids)` if `value` is the batched experts' projection of
/// `rows`: `Squeeze(MatMul(Gather(weights, ids), Unsqueeze(rows, -1)), -1)`,
/// each routed row times its expert's `[out, in]` weight.
fn projection(model: &Model, value: &str) -> Result<Option<(String, String, String)>> {
    let Some(squeeze) = producer_of(model, value, "Squeeze")? else { return Ok(None) };
    if !axes_are(model, squeeze, &[&[-1], &[2]])? {
        return Ok(None);
    }
    let Some(matmul) = producer_of(model, &model.inputs(squeeze)?[0], "MatMul")? else {
        return Ok(None);
    };
    let inputs = model.inputs(matmul)?;
    let [gathered, vector] = inputs.as_slice() else { return Ok(None) };
    let Some(gather) = producer_of(model, gathered, "Gather")? else { return Ok(None) };
    let Some(unsqueeze) = producer_of(model, vector, "Unsqueeze")? else { return Ok(None) };
    let axis = match model.attribute(gather, "axis")? {
        None => 0,
        Some(Attribute::Int(a)) => a,
        Some(_) => return Ok(None),
    };
    if axis != 0 || !axes_are(model, unsqueeze, &[&[-1], &[2]])? {
        return Ok(None);
    }
    let gather_inputs = model.inputs(gather)?;
    let [weights, ids] = gather_inputs.as_slice() else { return Ok(None) };
    if !model.shape(weights).is_some_and(|s| s.len() == 3) {
        return Ok(None);
    }
    Ok(Some((model.inputs(unsqueeze)?[0].clone(), weights.clone(), ids.clone())))
}

/// `(projected, gate_first)` if `value` is `silu(gate) * up` (`gate *
/// Sigmoid(gate)`) of `projected`'s two halves along its last axis (a
/// `Split`).
fn gate(model: &Model, value: &str) -> Result<Option<(String, bool)>> {
    let Some(mul) = producer_of(model, value, "Mul")? else { return Ok(None) };
    let inputs = model.inputs(mul)?;
    let [a, b] = inputs.as_slice() else { return Ok(None) };
    for (activated, up) in [(a, b), (b, a)] {
        let Some(silu) = producer_of(model, activated, "Mul")? else { continue };
        let silu_inputs = model.inputs(silu)?;
        let [x, y] = silu_inputs.as_slice() else { continue };
        for (gate, sigmoid) in [(x, y), (y, x)] {
            let Some(sigmoid) = producer_of(model, sigmoid, "Sigmoid")? else { continue };
            if model.inputs(sigmoid)?[0] != *gate {
                continue;
            }
            let Some(split) = producer_of(model, gate, "Split")? else { continue };
            let outputs = model.outputs(split)?;
            let halves = outputs.len() == 2 && outputs.contains(up) && gate != up;
            let axis = match model.attribute(split, "axis")? {
                Some(Attribute::Int(a)) => a,
                None => 0,
                Some(_) => continue,
            };
            // Equal halves: a `split` input of two equal sizes, or none.
            let equal = match input(model, split, 1)? {
                None => true,
                Some(sizes) => model.ints(&sizes).is_some_and(|s| s.len() == 2 && s[0] == s[1]),
            };
            if halves && equal && (axis == -1 || axis == 1) {
                return Ok(Some((model.inputs(split)?[0].clone(), outputs[0] == *gate)));
            }
        }
    }
    Ok(None)
}

/// `(logits, k, normalize, indices)` if the routing `weights` are
/// `TopK(Softmax(logits))`'s values, renormalized (`Div` by their
/// `ReduceSum`) or not, or `Softmax(TopK(logits))` (renormalized).
fn router(model: &Model, weights: &str) -> Result<Option<(String, i64, i64, String)>> {
    let mut weights = uncast(model, weights)?;
    let mut total = None;
    if let Some(div) = producer_of(model, &weights, "Div")? {
        let inputs = model.inputs(div)?;
        if let Some(sum) = producer_of(model, &inputs[1], "ReduceSum")? {
            total = Some(model.inputs(sum)?[0].clone());
            weights = inputs[0].clone();
        }
    }
    let largest = |top_k: OnnxNodeId| -> Result<bool> {
        let largest = !matches!(model.attribute(top_k, "largest")?, Some(Attribute::Int(0)));
        let last = matches!(model.attribute(top_k, "axis")?, None | Some(Attribute::Int(-1 | 1)));
        Ok(largest && last)
    };
    let (logits, top_k, normalize) = match producer_of(model, &weights, "Softmax")? {
        // Top-k logits, then their softmax: the renormalized top-k probabilities.
        Some(softmax) if total.is_none() => {
            let Some(top_k) = producer_of(model, &model.inputs(softmax)?[0], "TopK")? else {
                return Ok(None);
            };
            if model.outputs(top_k)?[0] != model.inputs(softmax)?[0] {
                return Ok(None);
            }
            (model.inputs(top_k)?[0].clone(), top_k, 1)
        }
        Some(_) => return Ok(None),
        None => {
            let Some(top_k) = producer_of(model, &weights, "TopK")? else { return Ok(None) };
            if model.outputs(top_k)?[0] != weights {
                return Ok(None);
            }
            let probabilities = uncast(model, &model.inputs(top_k)?[0])?;
            let Some(softmax) = producer_of(model, &probabilities, "Softmax")? else {
                return Ok(None);
            };
            if total.as_ref().is_some_and(|t| *t != weights) {
                return Ok(None);
            }
            let normalize = i64::from(total.is_some());
            (model.inputs(softmax)?[0].clone(), top_k, normalize)
        }
    };
    if !largest(top_k)? {
        return Ok(None);
    }
    let Some(k) = model.inputs(top_k)?.get(1).and_then(|k| model.scalar(k)) else {
        return Ok(None);
    };
    let indices = model.outputs(top_k)?[1].clone();
    Ok(Some((uncast(model, &logits)?, k as i64, normalize, indices)))
}

fn match_block(model: &Model, combine: OnnxNodeId) -> Result<Option<Block>> {
    // The routed rows' outputs summed per token, `ReduceSum(Reshape(weighted), axes [1])`.
    if !model.is_default_domain(combine)?
        || !matches!(model.attribute(combine, "keepdims")?, Some(Attribute::Int(0)))
        || !axes_are(model, combine, &[&[1]])?
    {
        return Ok(None);
    }
    let summed = uncast(model, &model.inputs(combine)?[0])?;
    let Some(reshape) = producer_of(model, &summed, "Reshape")? else { return Ok(None) };
    let Some(weighted) = producer_of(model, &model.inputs(reshape)?[0], "Mul")? else {
        return Ok(None);
    };
    let weighted_inputs = model.inputs(weighted)?;
    let [a, b] = weighted_inputs.as_slice() else { return Ok(None) };
    let mut found = None;
    for (projected, scale) in [(a, b), (b, a)] {
        if let Some(down) = projection(model, &uncast(model, projected)?)? {
            found = Some((down, scale.clone()));
            break;
        }
    }
    let Some(((gated_rows, down, down_ids), scale)) = found else { return Ok(None) };
    let Some((projected_rows, gate_first)) = gate(model, &gated_rows)? else { return Ok(None) };
    let Some((repeated_rows, gate_up, up_ids)) = projection(model, &projected_rows)? else {
        return Ok(None);
    };
    if up_ids != down_ids {
        return Ok(None);
    }
    // Each token repeated once per routed expert: `Reshape(Expand|Tile(Unsqueeze(tokens, 1)))`.
    let Some(repeat) = producer_of(model, &repeated_rows, "Reshape")? else { return Ok(None) };
    let repeated = model.inputs(repeat)?[0].clone();
    let expanded = match producer_of(model, &repeated, "Expand")? {
        Some(node) => Some(node),
        None => producer_of(model, &repeated, "Tile")?,
    };
    let Some(expanded) = expanded else { return Ok(None) };
    let Some(unsqueeze) = producer_of(model, &model.inputs(expanded)?[0], "Unsqueeze")? else {
        return Ok(None);
    };
    if !axes_are(model, unsqueeze, &[&[1]])? {
        return Ok(None);
    }
    let tokens = model.inputs(unsqueeze)?[0].clone();
    // Each routed row's weight, the flattened routing weights.
    let Some(column) = producer_of(model, &uncast(model, &scale)?, "Unsqueeze")? else {
        return Ok(None);
    };
    let Some(flat) = producer_of(model, &uncast(model, &model.inputs(column)?[0])?, "Reshape")?
    else {
        return Ok(None);
    };
    let Some((logits, k, normalize, indices)) = router(model, &model.inputs(flat)?[0])? else {
        return Ok(None);
    };
    let Some(flat_ids) = producer_of(model, &uncast(model, &up_ids)?, "Reshape")? else {
        return Ok(None);
    };
    if model.inputs(flat_ids)?[0] != indices {
        return Ok(None);
    }
    // Shapes: tokens `[rows, hidden]`, logits `[rows, experts]`, gate_up
    // `[experts, 2 inter, hidden]`, down `[experts, hidden, inter]`.
    let fixed = |value: &str| -> Option<Vec<i64>> {
        model
            .shape(value)?
            .iter()
            .map(|d| match d {
                OnnxDim::Fixed(n) => Some(*n),
                OnnxDim::Symbolic(_) => None,
            })
            .collect()
    };
    let (Some(gate_up_shape), Some(down_shape)) = (fixed(&gate_up), fixed(&down)) else {
        return Ok(None);
    };
    let (Some(token_shape), Some(logit_shape)) = (model.shape(&tokens), model.shape(&logits))
    else {
        return Ok(None);
    };
    let [experts, double, hidden] = gate_up_shape[..] else { return Ok(None) };
    let expected_down = [experts, hidden, double / 2];
    let last = |shape: &[OnnxDim]| match shape.last() {
        Some(OnnxDim::Fixed(n)) => Some(*n),
        _ => None,
    };
    if double % 2 != 0
        || down_shape != expected_down
        || token_shape.len() != 2
        || logit_shape.len() != 2
        || last(&token_shape) != Some(hidden)
        || last(&logit_shape) != Some(experts)
        || !(1..=experts).contains(&k)
        || model.same_elem_type(&tokens, &logits) != Some(true)
        || model.same_elem_type(&tokens, &gate_up) != Some(true)
    {
        return Ok(None);
    }
    Ok(Some(Block { tokens, logits, gate_up, down, gate_first, k, normalize }))
}
