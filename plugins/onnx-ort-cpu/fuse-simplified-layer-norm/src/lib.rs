//! RMSNorm as ONNX Runtime's fused normalization. The pattern, as traced
//! from `x * rsqrt(mean(x², -1) + eps) * weight`:
//!
//! ```text
//! Pow(x, 2) → ReduceMean(axes [-1], keepdims) → Add(eps) → Sqrt → Reciprocal → Mul(x, ·) → Mul(weight, ·)
//!                                                           Sqrt → Div(x, ·)  (or Div(1, ·) → Mul(x, ·))
//!                                                           Pow(·, -0.5) → Mul(x, ·)
//! ```
//!
//! becomes `SimplifiedLayerNormalization(x, weight)` (ONNX Runtime registers
//! it in the default domain). `Pow(·, -0.5)` is how Gemma 4 writes the
//! reciprocal square root. A norm without a scale (Gemma 4's value norm), or
//! whose scale is not a 1-D tensor of its type, is fused with a scale of ones
//! (its last axis must be static); a Mul that follows stays as it is. A norm
//! a float16 model computes in float32 (cast in, cast back, then scaled) is
//! fused in the model's type, the casts gone. When `x` is a residual sum `Add(a, b)` of two
//! tensors of one shape and type, the sum joins in:
//! `com.microsoft::SkipSimplifiedLayerNormalization(a, b, weight)`, whose
//! fourth output is the sum for its other readers. Targets `Pow`, where the
//! pattern starts; every intermediate must be read only by the pattern.

use hfx_sdk::prelude::*;

/// Largest constant read: the epsilon, the exponent and the axes are scalars or 1-element vectors.
const SMALL: u32 = 8;
const FLOAT: i32 = 1;
/// Longest scale of ones added for a norm without one (the host's limit on a plugin's initializer).
const MAX_ONES: i64 = 4096;

#[hfx_sdk::onnx_ir_fix(targets = ["Pow"])]
fn fuse_simplified_layer_norm(model: &Model, pow: OnnxNodeId) -> Result<bool> {
    let Some(norm) = match_norm(model, pow)? else { return Ok(false) };
    let skip = match_residual(model, &norm)?;
    let attributes =
        [NamedAttribute { name: "epsilon".into(), value: Attribute::Float(norm.epsilon) }];
    let hint = |s: &str| format!("{}_{s}", norm.output);
    let fused = match &skip {
        Some(residual) => {
            model.import_opset("com.microsoft", 1)?;
            // The sum is an output only when something else reads it.
            let sum = if residual.other_readers { hint("sum") } else { String::new() };
            let (_, outputs) = model.add_node(
                "SkipSimplifiedLayerNormalization",
                "com.microsoft",
                &[residual.a.clone(), residual.b.clone(), norm.weight.clone()],
                &[hint("fused"), String::new(), String::new(), sum],
                &attributes,
            )?;
            if residual.other_readers {
                model.replace_uses(&norm.x, &outputs[3])?;
            }
            model.remove_node(residual.add)?;
            outputs[0].clone()
        }
        None => {
            let mut attributes = attributes.to_vec();
            attributes.push(NamedAttribute { name: "axis".into(), value: Attribute::Int(-1) });
            let (_, outputs) = model.add_node(
                "SimplifiedLayerNormalization",
                "",
                &[norm.x.clone(), norm.weight.clone()],
                &[hint("fused")],
                &attributes,
            )?;
            outputs[0].clone()
        }
    };
    model.replace_uses(&norm.output, &fused)?;
    for node in &norm.nodes {
        model.remove_node(*node)?;
    }
    Ok(true)
}

/// A matched RMSNorm: its input, scale, epsilon, output, and its nodes.
struct Norm {
    x: String,
    weight: String,
    epsilon: f32,
    output: String,
    nodes: Vec<OnnxNodeId>,
}

/// The residual sum feeding a norm.
struct Residual {
    add: OnnxNodeId,
    a: String,
    b: String,
    /// Whether anything but the norm reads the sum (a later residual does).
    other_readers: bool,
}

fn match_norm(model: &Model, pow: OnnxNodeId) -> Result<Option<Norm>> {
    let inputs = model.inputs(pow)?;
    let [x, two] = inputs.as_slice() else { return Ok(None) };
    if !model.is_default_domain(pow)? || model.scalar(two) != Some(2.0) {
        return Ok(None);
    }
    let mut nodes = vec![pow];
    // Pow → ReduceMean over the last axis, dims kept.
    let Some(mean) = model.only_reader(pow, "ReduceMean")? else { return Ok(None) };
    if !reduces_last_axis(model, mean, x)? {
        return Ok(None);
    }
    nodes.push(mean);
    // → Add(eps), either side.
    let Some(add) = model.only_reader(mean, "Add")? else { return Ok(None) };
    let mean_out = model.first_output(mean)?;
    let Some(epsilon) = model.other_input(add, &mean_out)?.and_then(|e| model.scalar(&e)) else {
        return Ok(None);
    };
    nodes.push(add);
    let Some(normalized) = match_normalized(model, add, x, &mut nodes)? else { return Ok(None) };
    nodes.push(normalized);
    let normalized_out = model.first_output(normalized)?;
    if let Some(norm) = match_narrowed(model, x, &normalized_out, epsilon as f32, &nodes)? {
        return Ok(Some(norm));
    }
    // → Mul by the scale, either side: a 1-D tensor of x's type no part of the pattern computes.
    if let Some(scale) = model.only_reader(normalized, "Mul")? {
        if let Some(weight) = model.other_input(scale, &normalized_out)? {
            let rank = model.value_type(&weight).and_then(|t| t.shape).map(|s| s.len());
            if rank == Some(1) && model.same_elem_type(&weight, x) == Some(true) {
                nodes.push(scale);
                let output = model.first_output(scale)?;
                let epsilon = epsilon as f32;
                return Ok(Some(Norm { x: x.clone(), weight, epsilon, output, nodes }));
            }
        }
    }
    let Some(weight) = ones_scale(model, x)? else { return Ok(None) };
    Ok(Some(Norm { x: x.clone(), weight, epsilon: epsilon as f32, output: normalized_out, nodes }))
}

/// A norm a float16 (or bfloat16) model computes in float32:
/// `Cast(source → float32)` normalized, `Cast` back to the source's type,
/// then `Mul` by a 1-D scale of that type. It is fused on the source, in its
/// type (ONNX Runtime's kernel computes in float32, `stash_type`), so the
/// casts go and a residual sum of that type can join it.
fn match_narrowed(
    model: &Model,
    x: &str,
    normalized: &str,
    epsilon: f32,
    nodes: &[OnnxNodeId],
) -> Result<Option<Norm>> {
    let Some(cast_in) = model.producer(x) else { return Ok(None) };
    if model.op_type(cast_in)? != "Cast" || !model.is_default_domain(cast_in)? {
        return Ok(None);
    }
    let Some(source) = model.inputs(cast_in)?.into_iter().next() else { return Ok(None) };
    let readers = model.consumers(normalized);
    let [cast_back] = readers.as_slice() else { return Ok(None) };
    if model.op_type(*cast_back)? != "Cast" || !model.is_default_domain(*cast_back)? {
        return Ok(None);
    }
    let back = model.first_output(*cast_back)?;
    if model.same_elem_type(&back, &source) != Some(true)
        || model.same_elem_type(x, &source) != Some(false)
    {
        return Ok(None);
    }
    let Some(scale) = model.only_reader(*cast_back, "Mul")? else { return Ok(None) };
    let Some(weight) = model.other_input(scale, &back)? else { return Ok(None) };
    let rank = model.value_type(&weight).and_then(|t| t.shape).map(|s| s.len());
    if rank != Some(1) || model.same_elem_type(&weight, &source) != Some(true) {
        return Ok(None);
    }
    let mut nodes = nodes.to_vec();
    nodes.extend([*cast_back, scale]);
    // The cast in goes with the pattern unless something else reads its output.
    if model.consumers(x).iter().all(|r| nodes.contains(r)) && !model.is_graph_output(x) {
        nodes.push(cast_in);
    }
    let output = model.first_output(scale)?;
    Ok(Some(Norm { x: source, weight, epsilon, output, nodes }))
}

/// The node computing `x` times the reciprocal square root of `add`'s output:
/// `x / Sqrt(·)`, `x * Reciprocal(Sqrt(·))`, `x * (1 / Sqrt(·))` or
/// `x * Pow(·, -0.5)`; the nodes between `add` and it join `nodes`.
fn match_normalized(
    model: &Model,
    add: OnnxNodeId,
    x: &String,
    nodes: &mut Vec<OnnxNodeId>,
) -> Result<Option<OnnxNodeId>> {
    let add_out = model.first_output(add)?;
    let readers = model.consumers(&add_out);
    let [root] = readers.as_slice() else { return Ok(None) };
    if !model.is_default_domain(*root)? {
        return Ok(None);
    }
    match model.op_type(*root)?.as_str() {
        "Sqrt" => {}
        "Pow" if model.inputs(*root)?.get(1).and_then(|e| model.scalar(e)) == Some(-0.5) => {
            nodes.push(*root);
            let Some(mul) = model.only_reader(*root, "Mul")? else { return Ok(None) };
            let reads_x = model.other_input(mul, &model.first_output(*root)?)?.as_ref() == Some(x);
            return Ok((reads_x && model.is_default_domain(mul)?).then_some(mul));
        }
        _ => return Ok(None),
    }
    let sqrt = *root;
    nodes.push(sqrt);
    let sqrt_out = model.first_output(sqrt)?;
    // → x / sqrt, x * Reciprocal(sqrt) or x * (1 / sqrt).
    let readers = model.consumers(&sqrt_out);
    let [reader] = readers.as_slice() else { return Ok(None) };
    let normalized = match model.op_type(*reader)?.as_str() {
        "Div" if model.inputs(*reader)? == [x.clone(), sqrt_out.clone()] => *reader,
        "Reciprocal" | "Div" => {
            if model.op_type(*reader)? == "Div" {
                let div_inputs = model.inputs(*reader)?;
                if div_inputs.len() != 2 || model.scalar(&div_inputs[0]) != Some(1.0) {
                    return Ok(None);
                }
            }
            nodes.push(*reader);
            let Some(mul) = model.only_reader(*reader, "Mul")? else { return Ok(None) };
            if model.other_input(mul, &model.first_output(*reader)?)?.as_ref() != Some(x) {
                return Ok(None);
            }
            mul
        }
        _ => return Ok(None),
    };
    Ok(model.is_default_domain(*reader)?.then_some(normalized))
}

/// A scale of ones for a norm over `x`'s last axis, of `x`'s type; None when
/// that axis is not static or too long for an initializer a plugin adds.
fn ones_scale(model: &Model, x: &str) -> Result<Option<String>> {
    let Some(t) = model.value_type(x) else { return Ok(None) };
    let Some(OnnxDim::Fixed(size)) = t.shape.and_then(|s| s.last().cloned()) else {
        return Ok(None);
    };
    if !(1..=MAX_ONES).contains(&size) {
        return Ok(None);
    }
    let ones = Constant {
        elem_type: t.elem_type,
        dims: vec![size],
        data: ConstantData::Floats(vec![1.0; size as usize]),
    };
    Ok(Some(model.add_initializer(&format!("rms_norm_ones_{size}"), &ones)?))
}

/// The residual `Add(a, b)` that produced the norm's input, if it is one
/// ONNX Runtime's skip normalization takes: two non-constant tensors of one
/// static-rank shape (2-D or 3-D) and the scale's type.
fn match_residual(model: &Model, norm: &Norm) -> Result<Option<Residual>> {
    let Some(add) = model.producer(&norm.x) else { return Ok(None) };
    if model.op_type(add)? != "Add" || !model.is_default_domain(add)? {
        return Ok(None);
    }
    let inputs = model.inputs(add)?;
    let [a, b] = inputs.as_slice() else { return Ok(None) };
    let shape = |v: &str| model.value_type(v).and_then(|t| t.shape);
    let (Some(sa), Some(sb)) = (shape(a), shape(b)) else { return Ok(None) };
    let constant = |v: &str| {
        model.constant(v, 1).is_some() || model.producer(v).is_none() && !model.is_graph_input(v)
    };
    if sa != sb || !(2..=3).contains(&sa.len()) || constant(a) || constant(b) {
        return Ok(None);
    }
    if model.same_elem_type(a, &norm.weight) != Some(true)
        || model.same_elem_type(b, &norm.weight) != Some(true)
    {
        return Ok(None);
    }
    let readers = model.consumers(&norm.x);
    let other_readers =
        model.is_graph_output(&norm.x) || readers.iter().any(|r| !norm.nodes.contains(r));
    Ok(Some(Residual { add, a: a.clone(), b: b.clone(), other_readers }))
}

/// Whether `mean` reduces `x` over its last axis only, keeping it, in float.
fn reduces_last_axis(model: &Model, mean: OnnxNodeId, x: &str) -> Result<bool> {
    if matches!(model.attribute(mean, "keepdims")?, Some(Attribute::Int(0))) {
        return Ok(false);
    }
    let axes = match model.inputs(mean)?.get(1) {
        Some(axes) => match model.constant(axes, SMALL) {
            Some(Constant { data: ConstantData::Ints(v), .. }) => v,
            _ => return Ok(false),
        },
        None => match model.attribute(mean, "axes")? {
            Some(Attribute::Ints(v)) => v,
            _ => return Ok(false),
        },
    };
    let Some(t) = model.value_type(x) else { return Ok(false) };
    let rank = t.shape.map(|s| s.len() as i64);
    if t.elem_type != FLOAT && !matches!(t.elem_type, 10 | 16 | 11) {
        return Ok(false);
    }
    Ok(match axes.as_slice() {
        [-1] => true,
        [a] => rank == Some(*a + 1),
        _ => false,
    })
}
