//! An attention that reads no past cache (an encoder's self-attention,
//! BERT's, ViT's, Whisper's encoder's; a decoder's prefill; a
//! cross-attention over keys the graph computes) as ONNX Runtime's
//! `com.microsoft::MultiHeadAttention`. The pattern, as a model's SDPA
//! traces (`translate-attention`, `patch-sdpa-masked-rows`), on `[batch,
//! heads, length, head_dim]`:
//!
//! ```text
//! Softmax([Add](Mul|Div(MatMul(q, Transpose(key)), scale), bias)) → MatMul(·, value)
//!   → [Where(unattended, 0, ·)] → [Reshape] → Transpose [0,2,1,3] → Reshape [batch, length, heads·head_dim]
//! ```
//!
//! (the scale a `Mul` or `Div` by a constant, perhaps cast, or none when the
//! query's merged form is scaled by a constant (folded into the scale); no
//! `Add` when the attention has no mask; the key's transpose perhaps
//! `[0,2,3,1]` of its split form `[batch, length, heads, head_dim]`, two
//! transposes merged)
//!
//! becomes `MultiHeadAttention(query, key, value, bias = ∅,
//! key_padding_mask = ∅, attention_bias = bias)` with `num_heads` and
//! `scale`. The query is `[batch, length, heads·head_dim]`: the graph's own
//! value before its split into heads, or a rotation of the split redone on
//! it, or the split undone. The key and value are too when the graph has
//! them so (the key perhaps merged by one `Reshape`); else both stay the
//! `[batch, heads, length, head_dim]` values the product reads (a
//! decoder's present, its heads repeated), which MultiHeadAttention takes
//! as they are (of one rank both: it refuses a 3-D key with a 4-D value).
//! The bias is the graph's own mask (padding, causal, windows), `[batch or
//! 1, heads or 1, length, key length]`: ONNX Runtime broadcasts neither of
//! its last two axes. Rows attending to no key stay zeros, as the graph made
//! them.
//!
//! Refused: an attention reading a past cache (a key or value reached from
//! a graph input through a `Concat` appending to it, a scatter writing into
//! it, a repeat, transpose or cast: a decode step's attention, which the
//! CUDA set's GroupQueryAttention takes, or a cross-attention's cached keys);
//! a mask applied by `Where` (a boolean or causal mask, not an additive
//! bias) or a soft cap between the scores and the Softmax; key or value
//! heads or head size other than the query's; a bias broadcast along the
//! query or key axis or of another element type; element types other than
//! float and float16; an intermediate (scores, weights, the transposed key)
//! read outside the pattern. Targets `Softmax`.

use hfx_sdk::prelude::*;

const FLOAT: i32 = 1;
const INT64: i32 = 7;
const FLOAT16: i32 = 10;

#[hfx_sdk::onnx_ir_fix(targets = ["Softmax"])]
fn fuse_multi_head_attention(model: &Model, softmax: OnnxNodeId) -> Result<bool> {
    let Some(m) = match_attention(model, softmax)? else { return Ok(false) };
    model.import_opset("com.microsoft", 1)?;
    let query = merged_query(model, &m.query, m.heads, m.head_dim)?;
    let (query, scale) = unscaled(model, &query, m.scale)?;
    let (key, value) = key_and_value(model, &m)?;
    let mut inputs = vec![query, key, value];
    if let Some(bias) = &m.bias {
        inputs.extend([String::new(), String::new(), bias.clone()]);
    }
    let attributes = [
        int_attribute("num_heads", m.heads),
        NamedAttribute { name: "scale".into(), value: Attribute::Float(scale as f32) },
    ];
    let (_, outputs) = model.add_node(
        "MultiHeadAttention",
        "com.microsoft",
        &inputs,
        &[format!("{}_mha", m.output)],
        &attributes,
    )?;
    let mut attended = outputs[0].clone();
    if let Some((unattended, zero)) = &m.unattended {
        let rows = unattended_rows(model, unattended)?;
        attended = model
            .add_node(
                "Where",
                "",
                &[rows, zero.clone(), attended],
                &[format!("{}_rows", m.output)],
                &[],
            )?
            .1
            .remove(0);
    }
    if !m.output_merged {
        attended = split_heads(model, &attended, m.heads, m.head_dim)?;
    } else if let Some(shape) = &m.output_shape {
        let name = format!("{}_reshaped", m.output);
        let reshaped = model.add_node("Reshape", "", &[attended, shape.clone()], &[name], &[])?;
        attended = reshaped.1[0].clone();
    }
    let mut routed_around = vec![];
    take_over(model, &m.output, &attended, &mut routed_around)?;
    routed_around.extend(m.nodes.iter().copied());
    // From the pattern's end back: each node goes once nothing reads it.
    for node in routed_around.into_iter().rev() {
        model.remove_unread(node)?;
    }
    Ok(true)
}

/// Every read of `old` reads `new`. A graph output `old` keeps its name,
/// which `new` takes: `old`'s producer, which would produce it twice, goes,
/// and the producers of its inputs join `routed_around`.
fn take_over(
    model: &Model,
    old: &str,
    new: &str,
    routed_around: &mut Vec<OnnxNodeId>,
) -> Result<()> {
    let replaced = model.producer(old).filter(|_| model.is_graph_output(old));
    let inputs = match replaced {
        Some(node) => model.inputs(node)?,
        None => vec![],
    };
    model.replace_uses(old, new)?;
    if let Some(node) = replaced {
        model.remove_node(node)?;
        routed_around.extend(inputs.iter().filter_map(|i| model.producer(i)));
    }
    Ok(())
}

/// The key as the scores' product reads it, transposed.
enum Key {
    /// `[batch, heads, length, head_dim]`, transposed `[0,1,3,2]`.
    HeadsFirst(String),
    /// `[batch, length, heads, head_dim]`, transposed `[0,2,3,1]`.
    HeadsSecond(String),
}

struct Attention {
    /// `[batch, heads, length, head_dim]`.
    query: String,
    key: Key,
    /// `[batch, heads, length, head_dim]`.
    value: String,
    bias: Option<String>,
    scale: f64,
    heads: i64,
    head_dim: i64,
    /// `Where(unattended, zero, ·)`'s condition (`[batch, 1, length, 1]`) and zero.
    unattended: Option<(String, String)>,
    /// The attention's result: `[batch, length, heads·head_dim]` when
    /// `output_merged`, else `[batch, heads, length, head_dim]`.
    output: String,
    output_merged: bool,
    /// The shape the graph reshapes the merged result to when it is not
    /// `[batch, length, heads·head_dim]` (a `[batch·length, ·]` for a `Gemm`).
    output_shape: Option<String>,
    /// The pattern's nodes, removed once nothing reads them.
    nodes: Vec<OnnxNodeId>,
}

fn match_attention(model: &Model, softmax: OnnxNodeId) -> Result<Option<Attention>> {
    if !model.is_default_domain(softmax)?
        || !matches!(model.attribute(softmax, "axis")?, None | Some(Attribute::Int(-1 | 3)))
    {
        return Ok(None);
    }
    let softmax_inputs = model.inputs(softmax)?;
    let [logits] = softmax_inputs.as_slice() else { return Ok(None) };
    let mut nodes = vec![softmax];
    // Softmax(Add(scores, bias)), or Softmax(scores) with no mask.
    let added = match model.producer(logits) {
        Some(add) if model.op_type(add)? == "Add" && model.is_default_domain(add)? => Some(add),
        _ => None,
    };
    let (found, bias, scores, reader) = match added {
        Some(add) => {
            if !read_only_by(model, logits, softmax) {
                return Ok(None);
            }
            let add_inputs = model.inputs(add)?;
            let [a, b] = add_inputs.as_slice() else { return Ok(None) };
            // Scaled scores on either side first, then an unscaled product
            // (the query scaled before, as OPT's).
            let mut found = None;
            for scaled in [true, false] {
                for (scores, bias) in [(a, b), (b, a)] {
                    if found.is_none() {
                        if let Some(s) = product(model, scores, scaled)? {
                            found = Some((s, Some(bias.clone()), scores.clone()));
                        }
                    }
                }
            }
            let Some((found, bias, scores)) = found else { return Ok(None) };
            nodes.push(add);
            (found, bias, scores, add)
        }
        None => {
            let found = match product(model, logits, true)? {
                Some(found) => found,
                None => match product(model, logits, false)? {
                    Some(found) => found,
                    None => return Ok(None),
                },
            };
            (found, None, logits.clone(), softmax)
        }
    };
    let (matmul, scale, scale_node) = found;
    if !read_only_by(model, &scores, reader) {
        return Ok(None);
    }
    let matmul_inputs = model.inputs(matmul)?;
    let [query, transposed] = matmul_inputs.as_slice() else { return Ok(None) };
    let Some(transpose) = model.producer(transposed) else { return Ok(None) };
    if model.op_type(transpose)? != "Transpose"
        || !model.is_default_domain(transpose)?
        || !read_only_by(model, transposed, matmul)
    {
        return Ok(None);
    }
    let key_input = model.inputs(transpose)?[0].clone();
    let key = match perm(model, transpose)?.as_deref() {
        Some([0, 1, 3, 2]) => Key::HeadsFirst(key_input),
        Some([0, 2, 3, 1]) => Key::HeadsSecond(key_input),
        _ => return Ok(None),
    };
    // MatMul(Softmax(·), value) → Where(unattended, 0, ·)?
    let Some(weighted) = model.only_reader(softmax, "MatMul")? else { return Ok(None) };
    let weighted_inputs = model.inputs(weighted)?;
    let [weights, value] = weighted_inputs.as_slice() else { return Ok(None) };
    if *weights != model.first_output(softmax)? {
        return Ok(None);
    }
    nodes.extend([matmul, transpose, weighted]);
    nodes.extend(scale_node);
    let mut output = model.first_output(weighted)?;
    let mut unattended = None;
    if let Some(zeroed) = model.only_reader(weighted, "Where")? {
        let inputs = model.inputs(zeroed)?;
        if let [condition, zero, attended] = inputs.as_slice() {
            let zero = if *attended == output { scalar_zero(model, zero)? } else { None };
            if let Some(zero) = zero {
                unattended = Some((condition.clone(), zero));
                output = model.first_output(zeroed)?;
                nodes.push(zeroed);
            }
        }
    }
    // Shapes: q, k and v of one batch, heads and head size; k and v of one length.
    let Some(q_shape) = model.shape(query) else { return Ok(None) };
    let [q_batch, OnnxDim::Fixed(heads), q_length, OnnxDim::Fixed(head_dim)] = q_shape.as_slice()
    else {
        return Ok(None);
    };
    let (heads, head_dim) = (*heads, *head_dim);
    let elem_type = model.value_type(query).map(|t| t.elem_type);
    if !matches!(elem_type, Some(FLOAT | FLOAT16)) {
        return Ok(None);
    }
    let key_value = match &key {
        Key::HeadsFirst(k) | Key::HeadsSecond(k) => k,
    };
    let (Some(k_shape), Some(v_shape)) = (model.shape(key_value), model.shape(value)) else {
        return Ok(None);
    };
    let (k_batch, k_heads, k_length, k_head_dim) = match (&key, k_shape.as_slice()) {
        (Key::HeadsFirst(_), [b, h, l, d]) | (Key::HeadsSecond(_), [b, l, h, d]) => (b, h, l, d),
        _ => return Ok(None),
    };
    let [v_batch, v_heads, v_length, v_head_dim] = v_shape.as_slice() else { return Ok(None) };
    let ours =
        |h: &OnnxDim, d: &OnnxDim| *h == OnnxDim::Fixed(heads) && *d == OnnxDim::Fixed(head_dim);
    if !ours(k_heads, k_head_dim)
        || !ours(v_heads, v_head_dim)
        || !same(k_length, v_length)
        || !same(q_batch, k_batch)
        || !same(q_batch, v_batch)
        || model.value_type(key_value).map(|t| t.elem_type) != elem_type
        || model.value_type(value).map(|t| t.elem_type) != elem_type
    {
        return Ok(None);
    }
    // The bias is `[batch or 1, heads or 1, length, key length]`, of q's type.
    if let Some(bias) = &bias {
        let bias_type = model.value_type(bias);
        let fits = match bias_type.as_ref().and_then(|t| t.shape.as_deref()) {
            Some([b, OnnxDim::Fixed(h), l, t]) => {
                (*b == OnnxDim::Fixed(1) || same(b, q_batch))
                    && (*h == 1 || *h == heads)
                    && same(l, q_length)
                    && same(t, k_length)
            }
            _ => false,
        };
        if !fits || bias_type.map(|t| t.elem_type) != elem_type {
            return Ok(None);
        }
    }
    if let Some((condition, _)) = &unattended {
        let rows = model.shape(condition);
        if !matches!(rows.as_deref(), Some([_, OnnxDim::Fixed(1), _, OnnxDim::Fixed(1)])) {
            return Ok(None);
        }
    }
    if reads_past(model, key_value, head_dim)? || reads_past(model, value, head_dim)? {
        return Ok(None);
    }
    let (output, output_merged, output_shape) = match merged_tail(model, &output, heads * head_dim)?
    {
        Some((merged, tail, shape)) => {
            nodes.extend(tail);
            (merged, true, shape)
        }
        None => (output, false, None),
    };
    Ok(Some(Attention {
        query: query.clone(),
        key,
        value: value.clone(),
        bias,
        scale,
        heads,
        head_dim,
        unattended,
        output,
        output_merged,
        output_shape,
        nodes,
    }))
}

/// Whether `node` alone reads `value`, which is no graph output.
fn read_only_by(model: &Model, value: &str, node: OnnxNodeId) -> bool {
    model.consumers(value) == [node] && !model.is_graph_output(value)
}

/// Whether two dims are one length: equal, or both symbolic (one symbolic
/// length can be spelled by two expressions; a traced symbolic length is
/// never 1, so never a broadcast of a fixed one).
fn same(a: &OnnxDim, b: &OnnxDim) -> bool {
    a == b || (!matches!(a, OnnxDim::Fixed(_)) && !matches!(b, OnnxDim::Fixed(_)))
}

/// The most nodes [`reads_past`] walks back through.
const PAST_DEPTH: usize = 12;

/// Whether `value` is read from a past cache: a graph input of heads of
/// `head_dim` (`[batch, heads, length, head_dim]`, or its length and heads
/// swapped) reached back through what moves a cache's elements (`Concat`,
/// which appends to it; a scatter, which writes into it; a repeat of its
/// heads, a transpose, a cast). A graph input of another shape (an
/// encoder's states, or a piece's projection) is not one.
fn reads_past(model: &Model, value: &str, head_dim: i64) -> Result<bool> {
    let mut pending = vec![(value.to_string(), 0)];
    while let Some((value, depth)) = pending.pop() {
        if model.is_graph_input(&value)
            && matches!(
                model.shape(&value).as_deref(),
                Some([_, _, _, OnnxDim::Fixed(d)]) if *d == head_dim
            )
        {
            return Ok(true);
        }
        let Some(node) = model.producer(&value) else { continue };
        if depth == PAST_DEPTH || !model.is_default_domain(node)? {
            continue;
        }
        let inputs = model.inputs(node)?;
        let moved: &[usize] = match model.op_type(node)?.as_str() {
            "Concat" => &[0, 1, 2, 3],
            "ScatterND" | "ScatterElements" => &[0, 2],
            "Reshape" | "Expand" | "Tile" | "Unsqueeze" | "Squeeze" | "Transpose" | "Cast"
            | "Identity" | "Slice" => &[0],
            _ => &[],
        };
        for index in moved {
            if let Some(input) = inputs.get(*index).filter(|i| !i.is_empty()) {
                pending.push((input.clone(), depth + 1));
            }
        }
    }
    Ok(false)
}

/// The key and value as MultiHeadAttention takes them, of one rank: both
/// `[batch, length, heads·head_dim]` when the value is so before its split
/// and the key is or takes one `Reshape`; else both `[batch, heads, length,
/// head_dim]`.
fn key_and_value(model: &Model, m: &Attention) -> Result<(String, String)> {
    if let Some(value) = before_split(model, &m.value, m.heads, m.head_dim)? {
        match &m.key {
            Key::HeadsFirst(k) => {
                if let Some(key) = before_split(model, k, m.heads, m.head_dim)? {
                    return Ok((key, value));
                }
            }
            Key::HeadsSecond(k) => {
                let key = match reshaped_from(model, k, m.heads, m.head_dim)? {
                    Some(key) => key,
                    None => merge_heads(model, k.clone(), k)?,
                };
                return Ok((key, value));
            }
        }
    }
    let key = match &m.key {
        Key::HeadsFirst(k) => k.clone(),
        Key::HeadsSecond(k) => model
            .add_node(
                "Transpose",
                "",
                &[k.clone()],
                &[format!("{k}_heads_first")],
                &[perm_attribute(&[0, 2, 1, 3])],
            )?
            .1
            .remove(0),
    };
    Ok((key, m.value.clone()))
}

/// The query (`[batch, heads, length, head_dim]`) as `[batch, length,
/// heads·head_dim]`: the graph's own value before its split into heads (or
/// before a transpose of `[batch, length, heads, head_dim]`, merged by a
/// `Reshape`), a `RotaryEmbedding` of the split redone on that value; else
/// the split undone.
fn merged_query(model: &Model, q: &str, heads: i64, head_dim: i64) -> Result<String> {
    if let Some(merged) = before_split(model, q, heads, head_dim)? {
        return Ok(merged);
    }
    if let Some(merged) = heads_second_merged(model, q, heads, head_dim)? {
        return Ok(merged);
    }
    if let Some(rotary) = model.producer(q) {
        let inputs = model.inputs(rotary)?;
        if model.op_type(rotary)? == "RotaryEmbedding" && model.domain(rotary)? == "com.microsoft" {
            if let [split, rest @ ..] = inputs.as_slice() {
                let merged = match before_split(model, split, heads, head_dim)? {
                    Some(merged) => Some(merged),
                    None => heads_second_merged(model, split, heads, head_dim)?,
                };
                if let Some(merged) = merged {
                    return rotary_of_merged(model, rotary, merged, rest, heads, q);
                }
            }
        }
    }
    split_undone(model, q, heads, head_dim)
}

/// `rotary`'s `RotaryEmbedding` applied to `merged` (`[batch, length,
/// heads * head_dim]`) instead, its other inputs `rest`; named after `x`,
/// the value it stands for.
fn rotary_of_merged(
    model: &Model,
    rotary: OnnxNodeId,
    merged: String,
    rest: &[String],
    heads: i64,
    x: &str,
) -> Result<String> {
    // The head count: a merged input's heads are not in its shape.
    let mut attributes = vec![int_attribute("num_heads", heads)];
    for name in ["interleaved", "is_packed_batching", "rotary_embedding_dim", "scale"] {
        if let Some(value) = model.attribute(rotary, name)? {
            attributes.push(NamedAttribute { name: name.into(), value });
        }
    }
    let inputs: Vec<String> = std::iter::once(merged).chain(rest.iter().cloned()).collect();
    let (_, mut outputs) = model.add_node(
        "RotaryEmbedding",
        "com.microsoft",
        &inputs,
        &[format!("{x}_merged")],
        &attributes,
    )?;
    Ok(outputs.remove(0))
}

/// The merged query before a scaling by a constant (`Mul(q, c)`, either
/// side), and the attention's scale times `c`; else the query and the scale.
fn unscaled(model: &Model, query: &str, scale: f64) -> Result<(String, f64)> {
    if let Some(mul) = model.producer(query) {
        if model.op_type(mul)? == "Mul" && model.is_default_domain(mul)? {
            let inputs = model.inputs(mul)?;
            if let [a, b] = inputs.as_slice() {
                for (q, factor) in [(a, b), (b, a)] {
                    if let (Some(c), Some(shape)) = (scalar(model, factor)?, model.shape(query)) {
                        if model.shape(q).as_ref() == Some(&shape) {
                            return Ok((q.clone(), scale * c));
                        }
                    }
                }
            }
        }
    }
    Ok((query.to_string(), scale))
}

/// `(MatMul, scale, scaling node)` for `scores`: when `scaled`,
/// `Mul(MatMul(..), c)` (either side) or `Div(MatMul(..), c)`, `c` a scalar
/// constant, the product read by the scaling alone; else `MatMul(..)`
/// itself, scale 1.
fn product(
    model: &Model,
    scores: &str,
    scaled: bool,
) -> Result<Option<(OnnxNodeId, f64, Option<OnnxNodeId>)>> {
    let Some(node) = model.producer(scores) else { return Ok(None) };
    if !model.is_default_domain(node)? {
        return Ok(None);
    }
    let op = model.op_type(node)?;
    if !scaled {
        return Ok((op == "MatMul").then_some((node, 1.0, None)));
    }
    if !matches!(op.as_str(), "Mul" | "Div") {
        return Ok(None);
    }
    let inputs = model.inputs(node)?;
    let [a, b] = inputs.as_slice() else { return Ok(None) };
    let sides = if op == "Mul" { vec![(a, b), (b, a)] } else { vec![(a, b)] };
    for (product, factor) in sides {
        let Some(c) = scalar(model, factor)? else { continue };
        let Some(matmul) = model.producer(product) else { continue };
        if model.op_type(matmul)? != "MatMul"
            || !model.is_default_domain(matmul)?
            || !read_only_by(model, product, node)
        {
            continue;
        }
        let scale = if op == "Mul" { c } else { 1.0 / c };
        return Ok(Some((matmul, scale, Some(node))));
    }
    Ok(None)
}

/// A scalar constant's value, also through a `Cast` of one (a float16
/// model's scale is cast from a float32 constant).
fn scalar(model: &Model, value: &str) -> Result<Option<f64>> {
    if let Some(c) = model.scalar(value) {
        return Ok(Some(c));
    }
    Ok(match model.producer(value) {
        Some(cast) if model.op_type(cast)? == "Cast" && model.is_default_domain(cast)? => {
            model.inputs(cast)?.first().and_then(|v| model.scalar(v))
        }
        _ => None,
    })
}

/// A scalar zero `value` is or expands, for the zeroing of unattended rows
/// after the fusion: `value` itself when it is a (cast) scalar zero, the
/// scalar an `Expand` broadcasts when it is one (a float16 model's zero, cast
/// and expanded to the heads layout the fused output no longer has).
fn scalar_zero(model: &Model, value: &str) -> Result<Option<String>> {
    if scalar(model, value)? == Some(0.0) {
        return Ok(Some(value.to_string()));
    }
    Ok(match model.producer(value) {
        Some(expand)
            if model.op_type(expand)? == "Expand" && model.is_default_domain(expand)? =>
        {
            let inner = model.inputs(expand)?.into_iter().next();
            match inner {
                Some(inner) if rank_0(model, &inner)? && scalar(model, &inner)? == Some(0.0) => {
                    Some(inner)
                }
                _ => None,
            }
        }
        _ => None,
    })
}

/// Whether `value` is 0-d: by its recorded shape, or as the cast of a 0-d constant.
fn rank_0(model: &Model, value: &str) -> Result<bool> {
    if let Some(shape) = model.shape(value) {
        return Ok(shape.is_empty());
    }
    let dims_of = |v: &str| model.constant(v, 1).map(|c| c.dims.is_empty());
    Ok(match model.producer(value) {
        Some(cast) if model.op_type(cast)? == "Cast" => {
            model.inputs(cast)?.first().and_then(|v| dims_of(v)) == Some(true)
        }
        _ => dims_of(value) == Some(true),
    })
}

/// The attention's merge of heads after it: `[Reshape to the same shape] →
/// Transpose [0,2,1,3] → Reshape to [batch, length, hidden]`, each read once;
/// the merged value and the nodes. The last `Reshape` may give another shape
/// of last dim `hidden` (a constant one, copying no dim past the second):
/// that of the merged value too, returned to be redone.
fn merged_tail(
    model: &Model,
    output: &str,
    hidden: i64,
) -> Result<Option<(String, Vec<OnnxNodeId>, Option<String>)>> {
    let Some(mut node) = model.producer(output) else { return Ok(None) };
    let mut nodes = vec![];
    let shape = model.shape(output);
    if let Some(reshape) = model.only_reader(node, "Reshape")? {
        let out = model.first_output(reshape)?;
        if shape.is_none() || model.shape(&out) != shape {
            return Ok(None);
        }
        nodes.push(reshape);
        node = reshape;
    }
    let Some(transpose) = model.only_reader(node, "Transpose")? else { return Ok(None) };
    if perm(model, transpose)? != Some(vec![0, 2, 1, 3]) {
        return Ok(None);
    }
    let Some(reshape) = model.only_reader(transpose, "Reshape")? else { return Ok(None) };
    let merged = model.first_output(reshape)?;
    let transposed = model.shape(&model.first_output(transpose)?);
    let reshaped_to = match (transposed.as_deref(), model.shape(&merged).as_deref()) {
        (Some([b1, l1, _, _]), Some([b2, l2, OnnxDim::Fixed(h)]))
            if b1 == b2 && l1 == l2 && *h == hidden =>
        {
            None
        }
        (Some([_, _, _, _]), Some([.., OnnxDim::Fixed(h)])) if *h == hidden => {
            let shape = model.inputs(reshape)?.get(1).cloned().unwrap_or_default();
            let copies_late_dim = match model.ints(&shape) {
                Some(dims) => dims.iter().skip(2).any(|d| *d == 0),
                None => true,
            };
            if copies_late_dim {
                return Ok(None);
            }
            Some(shape)
        }
        _ => return Ok(None),
    };
    nodes.extend([transpose, reshape]);
    Ok(Some((merged, nodes, reshaped_to)))
}

/// `y` for `x` = `Transpose(Reshape(y, ·), [0,2,1,3])`, `y` `[batch, length,
/// heads·head_dim]` and the reshape `[batch, length, heads, head_dim]`.
fn before_split(model: &Model, x: &str, heads: i64, head_dim: i64) -> Result<Option<String>> {
    match heads_swapped_from(model, x, heads, head_dim)? {
        Some(split) => reshaped_from(model, &split, heads, head_dim),
        None => Ok(None),
    }
}

/// `y` for `split` = `Reshape(y, ·)`, `y` `[batch, length, heads·head_dim]`
/// and `split` `[batch, length, heads, head_dim]`.
fn reshaped_from(model: &Model, split: &str, heads: i64, head_dim: i64) -> Result<Option<String>> {
    let Some(reshape) = model.producer(split) else { return Ok(None) };
    if model.op_type(reshape)? != "Reshape" || !model.is_default_domain(reshape)? {
        return Ok(None);
    }
    let y = model.inputs(reshape)?[0].clone();
    Ok(match (model.shape(&y).as_deref(), model.shape(split).as_deref()) {
        (
            Some([b1, l1, OnnxDim::Fixed(hidden)]),
            Some([b2, l2, OnnxDim::Fixed(h), OnnxDim::Fixed(d)]),
        ) if b1 == b2
            && l1 == l2
            && *h == heads
            && *d == head_dim
            && *hidden == heads * head_dim =>
        {
            Some(y)
        }
        _ => None,
    })
}

/// `Reshape(z, [0, 0, -1])` for `x` = `Transpose(z, [0,2,1,3])`, `z`
/// `[batch, length, heads, head_dim]`.
fn heads_second_merged(
    model: &Model,
    x: &str,
    heads: i64,
    head_dim: i64,
) -> Result<Option<String>> {
    let Some(z) = heads_swapped_from(model, x, heads, head_dim)? else { return Ok(None) };
    merge_heads(model, z, x).map(Some)
}

/// `z` for `x` = `Transpose(z, [0,2,1,3])`, `z` `[batch, length, heads,
/// head_dim]`.
fn heads_swapped_from(model: &Model, x: &str, heads: i64, head_dim: i64) -> Result<Option<String>> {
    let Some(transpose) = model.producer(x) else { return Ok(None) };
    if model.op_type(transpose)? != "Transpose"
        || !model.is_default_domain(transpose)?
        || perm(model, transpose)? != Some(vec![0, 2, 1, 3])
    {
        return Ok(None);
    }
    let z = model.inputs(transpose)?[0].clone();
    Ok(matches!(
        model.shape(&z).as_deref(),
        Some([_, _, OnnxDim::Fixed(h), OnnxDim::Fixed(d)]) if *h == heads && *d == head_dim
    )
    .then_some(z))
}

/// `Reshape(z, [0, 0, -1])`: `z` `[batch, length, heads, head_dim]` as
/// `[batch, length, heads·head_dim]`, named after `x`, the value it stands for.
fn merge_heads(model: &Model, z: String, x: &str) -> Result<String> {
    let shape = ints_initializer(model, "multi_head_attention_merge", &[0, 0, -1])?;
    let (_, mut merged) =
        model.add_node("Reshape", "", &[z, shape], &[format!("{x}_merged")], &[])?;
    Ok(merged.remove(0))
}

/// `x` (`[batch, heads, length, head_dim]`) transposed and reshaped to
/// `[batch, length, heads·head_dim]`; one head's only reshaped (its layout
/// is the merged one).
fn split_undone(model: &Model, x: &str, heads: i64, head_dim: i64) -> Result<String> {
    if heads == 1 {
        let shape = ints_initializer(
            model,
            &format!("multi_head_attention_one_head_{head_dim}"),
            &[0, -1, head_dim],
        )?;
        let merged = model.add_node(
            "Reshape",
            "",
            &[x.to_string(), shape],
            &[format!("{x}_merged")],
            &[],
        )?;
        return Ok(merged.1[0].clone());
    }
    let transposed = model
        .add_node(
            "Transpose",
            "",
            &[x.to_string()],
            &[format!("{x}_heads_second")],
            &[perm_attribute(&[0, 2, 1, 3])],
        )?
        .1
        .remove(0);
    merge_heads(model, transposed, x)
}

/// `[batch, length, heads·head_dim]` back to `[batch, heads, length, head_dim]`.
fn split_heads(model: &Model, merged: &str, heads: i64, head_dim: i64) -> Result<String> {
    let shape = ints_initializer(
        model,
        &format!("multi_head_attention_split_{heads}_{head_dim}"),
        &[0, 0, heads, head_dim],
    )?;
    let split = model
        .add_node("Reshape", "", &[merged.to_string(), shape], &[format!("{merged}_split")], &[])?
        .1
        .remove(0);
    Ok(model
        .add_node(
            "Transpose",
            "",
            &[split],
            &[format!("{merged}_heads")],
            &[perm_attribute(&[0, 2, 1, 3])],
        )?
        .1
        .remove(0))
}

/// The unattended rows' condition `[batch, 1, length, 1]` as `[batch, length,
/// 1]`, for the fused output; made once per condition.
fn unattended_rows(model: &Model, condition: &str) -> Result<String> {
    let name = format!("{condition}_rows");
    if let Some(node) = model.producer(&name) {
        if model.op_type(node)? == "Squeeze" {
            return Ok(name);
        }
    }
    let axis = ints_initializer(model, "multi_head_attention_axis_1", &[1])?;
    Ok(model.add_node("Squeeze", "", &[condition.to_string(), axis], &[name], &[])?.1.remove(0))
}

/// An int64 initializer, found by name when an earlier attention added it.
fn ints_initializer(model: &Model, name: &str, values: &[i64]) -> Result<String> {
    if model.ints(name).as_deref() == Some(values) && model.producer(name).is_none() {
        return Ok(name.to_string());
    }
    let constant = Constant {
        elem_type: INT64,
        dims: vec![values.len() as i64],
        data: ConstantData::Ints(values.to_vec()),
    };
    model.add_initializer(name, &constant)
}

fn perm(model: &Model, transpose: OnnxNodeId) -> Result<Option<Vec<i64>>> {
    Ok(match model.attribute(transpose, "perm")? {
        Some(Attribute::Ints(p)) => Some(p),
        _ => None,
    })
}

fn perm_attribute(perm: &[i64]) -> NamedAttribute {
    NamedAttribute { name: "perm".into(), value: Attribute::Ints(perm.to_vec()) }
}

fn int_attribute(name: &str, value: i64) -> NamedAttribute {
    NamedAttribute { name: name.into(), value: Attribute::Int(value) }
}
