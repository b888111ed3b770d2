//! A float `MatMul` as ONNX Runtime's `com.microsoft::FusedMatMul(a, b,
//! transA, transB, alpha)` when that removes nodes around it:
//!
//! - an input that is a `Transpose` swapping its last two axes (attention's
//!   `Kᵀ`: Gemma 2's `[0,1,3,2]`, BLOOM's `[0,2,1]`) is read untransposed,
//!   `transA`/`transB` set; so is one that is `Transpose(v, p)` when
//!   another `Transpose(v, p')` exists whose result, its last two axes
//!   swapped, is the same (GPT-Neo's key, transposed once for the cache and
//!   once for the scores);
//! - a `Mul` or `Div` by a one-element constant after the product (the
//!   attention scale, Gemma 2's soft-cap divisor) or on an input is
//!   folded into `alpha`.
//!
//! Each folded node must be read by the pattern alone. Both inputs have a
//! known rank of at least 2 (the transposes act on the last two axes).
//!
//! Targets `MatMul` and `Softmax`. The attention fusions' patterns hold
//! attention scores' `MatMul`, and the stage offers nodes in graph order,
//! the `MatMul` before its `Softmax`: a `MatMul` whose product reaches a
//! `Softmax` through scales, a soft cap or masks is taken from that
//! `Softmax`, after the attention fusions had it (`order` 200).

use hfx_sdk::prelude::*;

const FLOAT: i32 = 1;
/// How far back a value's rank or element type is looked for through the
/// untyped intermediates of a translation.
const DEPTH: u32 = 6;

#[hfx_sdk::onnx_ir_fix(targets = ["MatMul", "Softmax"])]
fn fuse_matmul_transpose_scale(model: &Model, node: OnnxNodeId) -> Result<bool> {
    if !model.is_default_domain(node)? {
        return Ok(false);
    }
    if model.op_type(node)? == "MatMul" {
        return Ok(!feeds_softmax(model, node)? && fuse(model, node)?);
    }
    let mut changed = false;
    for matmul in scores_of(model, node)? {
        changed |= fuse(model, matmul)?;
    }
    Ok(changed)
}

/// Ops between attention scores' `MatMul` and their `Softmax`: scales, a
/// soft cap, masks.
const SCORES_TO_SOFTMAX: [&str; 6] = ["Mul", "Div", "Add", "Sub", "Where", "Tanh"];
/// The most of them on the way.
const SCORES_DEPTH: u32 = 6;

/// Whether `matmul`'s product reaches a `Softmax` through [`SCORES_TO_SOFTMAX`].
fn feeds_softmax(model: &Model, matmul: OnnxNodeId) -> Result<bool> {
    let mut frontier = vec![model.first_output(matmul)?];
    for _ in 0..=SCORES_DEPTH {
        let mut next = vec![];
        for value in &frontier {
            for reader in model.consumers(value) {
                let op = model.op_type(reader)?;
                if op == "Softmax" {
                    return Ok(true);
                }
                if SCORES_TO_SOFTMAX.contains(&op.as_str()) {
                    next.extend(model.outputs(reader)?);
                }
            }
        }
        frontier = next;
    }
    Ok(false)
}

/// The `MatMul`s whose products reach `softmax` through [`SCORES_TO_SOFTMAX`].
fn scores_of(model: &Model, softmax: OnnxNodeId) -> Result<Vec<OnnxNodeId>> {
    let mut found = vec![];
    let mut frontier = model.inputs(softmax)?;
    for _ in 0..=SCORES_DEPTH {
        let mut next = vec![];
        for value in &frontier {
            let Some(producer) = model.producer(value) else { continue };
            let op = model.op_type(producer)?;
            if op == "MatMul" && model.is_default_domain(producer)? {
                found.push(producer);
            } else if SCORES_TO_SOFTMAX.contains(&op.as_str()) {
                next.extend(model.inputs(producer)?);
            }
        }
        frontier = next;
    }
    found.sort_unstable();
    found.dedup();
    Ok(found)
}

fn fuse(model: &Model, matmul: OnnxNodeId) -> Result<bool> {
    let inputs = model.inputs(matmul)?;
    let [a, b] = inputs.as_slice() else { return Ok(false) };
    // ONNX Runtime's CPU kernel is float's; ONNX typing gives both operands one type.
    let float = [a, b].iter().any(|v| elem_type(model, v, DEPTH) == Some(FLOAT));
    if a == b || !float {
        return Ok(false);
    }
    let mut alpha = 1.0;
    let mut removed = 0;
    let (a, trans_a) = operand(model, matmul, a, &mut alpha, &mut removed)?;
    let (b, trans_b) = operand(model, matmul, b, &mut alpha, &mut removed)?;
    // The scale after the product: each step the only reader of the last.
    let mut end = matmul;
    let mut output = model.first_output(matmul)?;
    while let Some(scale) = scale_reader(model, end, &output)? {
        alpha *= scale.factor;
        end = scale.node;
        output = model.first_output(end)?;
        removed += 1;
    }
    // A 1-D operand is no matrix: `transA`/`transB` and the product's rank
    // would differ from the MatMul's.
    let matrix = |v: &str| rank(model, v, DEPTH).is_some_and(|r| r >= 2);
    if removed == 0 || !matrix(&a) || !matrix(&b) {
        return Ok(false);
    }
    model.import_opset("com.microsoft", 1)?;
    let int = |name: &str, on: bool| NamedAttribute {
        name: name.into(),
        value: Attribute::Int(on as i64),
    };
    let (_, outputs) = model.add_node(
        "FusedMatMul",
        "com.microsoft",
        &[a, b],
        &[format!("{output}_fused")],
        &[
            NamedAttribute { name: "alpha".into(), value: Attribute::Float(alpha as f32) },
            int("transA", trans_a),
            int("transB", trans_b),
        ],
    )?;
    model.replace_uses(&output, &outputs[0])?;
    model.remove_rerouted(end)?;
    Ok(true)
}

/// What `matmul` reads as `input`, with the scales and the one last-two-axes
/// transpose before it folded: the value to read, and whether it is transposed.
fn operand(
    model: &Model,
    matmul: OnnxNodeId,
    input: &str,
    alpha: &mut f64,
    removed: &mut usize,
) -> Result<(String, bool)> {
    let mut value = input.to_string();
    let mut reader = matmul;
    let mut transposed = false;
    while let Some(producer) = model.producer(&value) {
        if !model.is_default_domain(producer)?
            || model.is_graph_output(&value)
            || model.consumers(&value) != [reader]
        {
            break;
        }
        let op = model.op_type(producer)?;
        let inputs = model.inputs(producer)?;
        if let Some((v, factor)) = scaled(model, &op, &inputs, &value) {
            *alpha *= factor;
            value = v;
        } else if op == "Transpose" && !transposed {
            let Some(v) = untransposed(model, producer, &inputs)? else { break };
            transposed = true;
            value = v;
        } else {
            break;
        }
        reader = producer;
        *removed += 1;
    }
    Ok((value, transposed))
}

/// `Mul(v, c)`, `Mul(c, v)` or `Div(v, c)`, `c` a one-element float constant
/// of no more axes than `result`: `(v, factor)`.
fn scaled(model: &Model, op: &str, inputs: &[String], result: &str) -> Option<(String, f64)> {
    let factor = |c: &str| {
        let c = model.constant(c, 1)?;
        let broadcasts = || rank(model, result, DEPTH).is_none_or(|r| c.dims.len() > r);
        match c.data {
            ConstantData::Floats(v) if c.dims.is_empty() || !broadcasts() => v.first().copied(),
            _ => None,
        }
    };
    match (op, inputs) {
        ("Mul", [a, b]) => match (factor(a), factor(b)) {
            (None, Some(f)) => Some((a.clone(), f)),
            (Some(f), None) => Some((b.clone(), f)),
            _ => None,
        },
        ("Div", [v, c]) => match factor(c) {
            Some(f) if f != 0.0 && factor(v).is_none() => Some((v.clone(), 1.0 / f)),
            _ => None,
        },
        _ => None,
    }
}

/// The value a `Transpose` swapping the last two axes of reads, or the
/// output of another `Transpose` of the same value that is this one with its
/// last two axes swapped back.
fn untransposed(model: &Model, transpose: OnnxNodeId, inputs: &[String]) -> Result<Option<String>> {
    let [source] = inputs else { return Ok(None) };
    let Some(Attribute::Ints(perm)) = model.attribute(transpose, "perm")? else {
        return Ok(None);
    };
    let rank = perm.len();
    if rank < 2 {
        return Ok(None);
    }
    let mut swapped = perm.clone();
    swapped.swap(rank - 2, rank - 1);
    if swapped.iter().enumerate().all(|(i, &p)| p == i as i64) {
        return Ok(Some(source.clone()));
    }
    for sibling in model.consumers(source) {
        if sibling != transpose
            && model.op_type(sibling)? == "Transpose"
            && model.is_default_domain(sibling)?
            && model.attribute(sibling, "perm")? == Some(Attribute::Ints(swapped.clone()))
        {
            return Ok(Some(model.first_output(sibling)?));
        }
    }
    Ok(None)
}

/// A scale applied to `node`'s output `value` by its only reader.
struct Scale {
    node: OnnxNodeId,
    factor: f64,
}

fn scale_reader(model: &Model, node: OnnxNodeId, value: &str) -> Result<Option<Scale>> {
    let outputs = model.outputs(node)?;
    if outputs.len() != 1 || model.is_graph_output(value) {
        return Ok(None);
    }
    let readers = model.consumers(value);
    let [reader] = readers.as_slice() else { return Ok(None) };
    if !model.is_default_domain(*reader)? {
        return Ok(None);
    }
    let op = model.op_type(*reader)?;
    let inputs = model.inputs(*reader)?;
    let result = model.first_output(*reader)?;
    let scale = scaled(model, &op, &inputs, &result).filter(|(scaled, _)| scaled == value);
    Ok(scale.map(|(_, factor)| Scale { node: *reader, factor }))
}

/// Ops whose result has their first input's element type.
const SAME_TYPE: [&str; 12] = [
    "Transpose",
    "Reshape",
    "MatMul",
    "Mul",
    "Div",
    "Add",
    "Sub",
    "Softmax",
    "Neg",
    "Squeeze",
    "Unsqueeze",
    "Expand",
];

/// `value`'s element type: from its type, else from its producer's first
/// input when the producer keeps it.
fn elem_type(model: &Model, value: &str, depth: u32) -> Option<i32> {
    if let Some(t) = model.value_type(value) {
        return Some(t.elem_type);
    }
    let producer = model.producer(value)?;
    if depth == 0 || !SAME_TYPE.contains(&model.op_type(producer).ok()?.as_str()) {
        return None;
    }
    elem_type(model, model.inputs(producer).ok()?.first()?, depth - 1)
}

/// `value`'s rank: from its type, else from what its producer does to its
/// inputs' ranks (a `Transpose`'s permutation, a `Reshape`'s constant
/// shape, a `MatMul`'s or an elementwise op's broadcast).
fn rank(model: &Model, value: &str, depth: u32) -> Option<usize> {
    if let Some(shape) = model.shape(value) {
        return Some(shape.len());
    }
    let producer = model.producer(value)?;
    if depth == 0 || !model.is_default_domain(producer).ok()? {
        return None;
    }
    let inputs = model.inputs(producer).ok()?;
    match model.op_type(producer).ok()?.as_str() {
        "Transpose" => match model.attribute(producer, "perm").ok()? {
            Some(Attribute::Ints(perm)) => Some(perm.len()),
            _ => None,
        },
        "Reshape" => model.ints(inputs.get(1)?).map(|shape| shape.len()),
        "MatMul" => {
            let ranks =
                [rank(model, &inputs[0], depth - 1)?, rank(model, inputs.get(1)?, depth - 1)?];
            ranks.iter().all(|&r| r >= 2).then(|| ranks[0].max(ranks[1]))
        }
        "Mul" | "Div" | "Add" | "Sub" => {
            let mut most = 0;
            for input in &inputs {
                let r = match model.constant(input, 1) {
                    Some(c) => c.dims.len(),
                    None => rank(model, input, depth - 1)?,
                };
                most = most.max(r);
            }
            Some(most)
        }
        "Softmax" | "Neg" | "Cast" => rank(model, inputs.first()?, depth - 1),
        _ => None,
    }
}
