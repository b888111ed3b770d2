//! Sibling projections packed into one: the `MatMul`s reading one input
//! with constant `[K, N]` weights of one K and dtype (an attention's query,
//! key and value projections, an MLP's gate and up ones) become
//!
//! ```text
//! Split(MatMul(x, Concat(W_1, .., W_n, axis 1)), [N_1, .., N_n], axis -1)
//! ```
//!
//! one kernel for several. When every sibling's only reader adds a constant
//! `[N_i]` bias, the biases are packed too (`Add(·, Concat(b_1, .., b_n))`
//! before the split). `com.microsoft::MatMulNBits` siblings (`--quantize
//! int4`: B `[N, blocks, block/2]`, scales and zero points per row of N) of
//! one K, bit width, block size and accuracy level are packed the same way,
//! each of their weight's tensors joined along N (axis 0).
//!
//! The weights are large: the `Concat`s over them are what this plugin
//! writes, and the host folds a `Concat` of initializers into one
//! initializer whose bytes it streams from the parts (converted, transposed
//! or quantized as they would be alone). A weight read elsewhere too is not
//! packed (it would be written twice). GroupQueryAttention's fusion reads
//! the split's three parts as its packed input.

use hfx_sdk::prelude::*;

const INT64: i32 = 7;

#[hfx_sdk::onnx_ir_fix(targets = ["MatMul", "MatMulNBits"])]
fn pack_sibling_matmuls(model: &Model, matmul: OnnxNodeId) -> Result<bool> {
    let Some(first) = projection(model, matmul)? else { return Ok(false) };
    let mut siblings = vec![];
    for reader in model.consumers(&first.input) {
        match projection(model, reader)? {
            Some(p) if p.input == first.input && p.kind == first.kind => siblings.push(p),
            _ => {}
        }
    }
    if siblings.len() < 2 {
        return Ok(false);
    }
    let biases = biases(model, &siblings)?;
    let hint = format!("{}_packed", siblings[0].output);
    let mut inputs = vec![first.input.clone()];
    // Each weight tensor's parts, joined: a float weight's along N (axis 1),
    // a quantized one's along its rows of N (axis 0).
    let axis = if first.kind.op_type == "MatMul" { 1 } else { 0 };
    for (index, _) in first.weights.iter().enumerate() {
        let parts: Vec<String> = siblings.iter().map(|s| s.weights[index].clone()).collect();
        inputs.push(concat(model, &parts, axis, &format!("{hint}_weight{index}"))?);
    }
    let widths: Vec<i64> = siblings.iter().map(|s| s.n).collect();
    let attributes = packed_attributes(&first.kind, widths.iter().sum());
    let (_, outputs) = model.add_node(
        &first.kind.op_type,
        &first.kind.domain,
        &inputs,
        std::slice::from_ref(&hint),
        &attributes,
    )?;
    let mut packed = outputs[0].clone();
    if let Some(biases) = &biases {
        let parts: Vec<String> = biases.iter().map(|b| b.bias.clone()).collect();
        let bias = concat(model, &parts, 0, &format!("{hint}_bias"))?;
        let (_, added) =
            model.add_node("Add", "", &[packed, bias], &[format!("{hint}_biased")], &[])?;
        packed = added[0].clone();
    }
    let sizes = Constant {
        elem_type: INT64,
        dims: vec![widths.len() as i64],
        data: ConstantData::Ints(widths),
    };
    let sizes = model.add_initializer(&format!("{hint}_sizes"), &sizes)?;
    // The values the split stands for: the sums when the biases were packed.
    let parts: Vec<String> = match &biases {
        Some(biases) => biases.iter().map(|b| b.output.clone()).collect(),
        None => siblings.iter().map(|s| s.output.clone()).collect(),
    };
    let hints: Vec<String> = parts.iter().map(|p| format!("{p}_split")).collect();
    let axis = NamedAttribute { name: "axis".into(), value: Attribute::Int(-1) };
    let (_, split) = model.add_node("Split", "", &[packed, sizes], &hints, &[axis])?;
    for (part, replacement) in parts.iter().zip(&split) {
        model.replace_uses(part, replacement)?;
    }
    for bias in biases.iter().flatten() {
        model.remove_node(bias.node)?;
    }
    for sibling in &siblings {
        model.remove_node(sibling.node)?;
    }
    Ok(true)
}

/// What siblings share: the op, and the attributes but N (K, and a
/// quantized weight's bit width, block size and accuracy level) and the
/// weight tensors' element types.
#[derive(Debug, Clone, PartialEq)]
struct Kind {
    op_type: String,
    domain: String,
    k: i64,
    attributes: Vec<(String, i64)>,
    elem_types: Vec<i32>,
}

/// A projection of `input` by constant weights.
struct Projection {
    node: OnnxNodeId,
    input: String,
    output: String,
    /// The weight's tensors: a MatMul's `[K, N]`; a MatMulNBits's B, scales
    /// and zero points if any.
    weights: Vec<String>,
    n: i64,
    kind: Kind,
}

/// `node` as a projection whose weights could be packed: a 2-D constant
/// `[K, N]` MatMul weight, or a MatMulNBits (no bias or group index) over
/// initializers; each weight tensor read by `node` only, its output no
/// graph output.
fn projection(model: &Model, node: OnnxNodeId) -> Result<Option<Projection>> {
    let (op_type, domain) = (model.op_type(node)?, model.domain(node)?);
    let inputs = model.inputs(node)?;
    let outputs = model.outputs(node)?;
    let [output] = outputs.as_slice() else { return Ok(None) };
    let Some((input, weights)) = inputs.split_first() else { return Ok(None) };
    if model.is_graph_output(output) || weights.iter().any(|w| !weight(model, w, node)) {
        return Ok(None);
    }
    let elem_types = weights.iter().filter_map(|w| model.value_type(w)).map(|t| t.elem_type);
    let elem_types: Vec<i32> = elem_types.collect();
    let (k, n, attributes) = match (op_type.as_str(), domain.as_str()) {
        ("MatMul", "" | "ai.onnx") => {
            let [w] = weights else { return Ok(None) };
            let shape = model.shape(w);
            let Some([OnnxDim::Fixed(k), OnnxDim::Fixed(n)]) = shape.as_deref() else {
                return Ok(None);
            };
            (*k, *n, vec![])
        }
        ("MatMulNBits", "com.microsoft") if (2..=3).contains(&weights.len()) => {
            let int = |name: &str| -> Result<Option<i64>> {
                Ok(match model.attribute(node, name)? {
                    Some(Attribute::Int(v)) => Some(v),
                    _ => None,
                })
            };
            let (Some(k), Some(n)) = (int("K")?, int("N")?) else { return Ok(None) };
            let mut shared = vec![];
            for name in ["bits", "block_size", "accuracy_level"] {
                if let Some(v) = int(name)? {
                    shared.push((name.to_string(), v));
                }
            }
            (k, n, shared)
        }
        _ => return Ok(None),
    };
    if elem_types.len() != weights.len() {
        return Ok(None);
    }
    let kind = Kind { op_type, domain, k, attributes, elem_types };
    Ok(Some(Projection {
        node,
        input: input.clone(),
        output: output.clone(),
        weights: weights.to_vec(),
        n,
        kind,
    }))
}

/// Whether `value` is an initializer (no producer, no graph input, a type
/// known) that only `reader` reads.
fn weight(model: &Model, value: &str, reader: OnnxNodeId) -> bool {
    !value.is_empty()
        && model.producer(value).is_none()
        && !model.is_graph_input(value)
        && model.value_type(value).is_some()
        && model.consumers(value) == [reader]
}

/// A sibling's bias: the `Add` of a constant `[N]` that alone reads its output.
struct Bias {
    node: OnnxNodeId,
    bias: String,
    output: String,
}

/// Every sibling's bias, or None unless each has one of its N, of one type.
fn biases(model: &Model, siblings: &[Projection]) -> Result<Option<Vec<Bias>>> {
    let mut found = vec![];
    for sibling in siblings {
        let node = match model.consumers(&sibling.output).as_slice() {
            [reader] if model.op_type(*reader)? == "Add" && model.is_default_domain(*reader)? => {
                *reader
            }
            _ => return Ok(None),
        };
        let Some(bias) = model.other_input(node, &sibling.output)? else { return Ok(None) };
        let output = model.first_output(node)?;
        let typed = model.value_type(&bias);
        let shape_ok =
            matches!(model.shape(&bias).as_deref(), Some([OnnxDim::Fixed(n)]) if *n == sibling.n);
        if !weight(model, &bias, node) || !shape_ok || model.is_graph_output(&output) {
            return Ok(None);
        }
        let first = found.first().map(|b: &Bias| model.value_type(&b.bias).map(|t| t.elem_type));
        if first.is_some_and(|t| t != typed.map(|t| t.elem_type)) {
            return Ok(None);
        }
        found.push(Bias { node, bias, output });
    }
    Ok(Some(found))
}

/// `parts` concatenated along `axis`: a `Concat` of initializers, which
/// the host writes as one initializer.
fn concat(model: &Model, parts: &[String], axis: i64, hint: &str) -> Result<String> {
    let axis = NamedAttribute { name: "axis".into(), value: Attribute::Int(axis) };
    let (_, outputs) = model.add_node("Concat", "", parts, &[hint.to_string()], &[axis])?;
    Ok(outputs[0].clone())
}

/// The packed node's attributes: a MatMulNBits's K, N and shared ones.
fn packed_attributes(kind: &Kind, n: i64) -> Vec<NamedAttribute> {
    if kind.op_type == "MatMul" {
        return vec![];
    }
    let int = |name: &str, v: i64| NamedAttribute { name: name.into(), value: Attribute::Int(v) };
    let mut attributes = vec![int("K", kind.k), int("N", n)];
    attributes.extend(kind.attributes.iter().map(|(name, v)| int(name, *v)));
    attributes
}
